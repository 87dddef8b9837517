//! The bridge between the search and a network: implements [`crate::model::Model`].
//!
//! Networks computing in f32 on the CPU run on the host ([`HostMlp`], [`HostConv`]: no tensors
//! at all); small MLP networks on CUDA run each call as one kernel (`network::cuda_mlp`, in a
//! `cuda` build); everything else (bf16 on the CPU, value prefixes, other devices, or
//! [`SearchModel::on_tensors`]) runs as follows.
//!
//! Latent states stay on the network's device in one buffer of `capacity * B` rows, node-major
//! (row `node * B + b` holds node `node` of tree `b`); the logits of a call reach the host in
//! one read (one blocking copy per simulation on a GPU). Each search runs on an inference copy
//! of the network, made at its first call: no autograd graph, fused layer norms, and weights
//! cast to the compute dtype once per search instead of on every call.

use candle_core::Tensor;

use super::host_conv_net::HostConv;
use super::host_inference::HostInference;
use super::host_mlp::HostMlp;
use super::value_prefix::{is_reset, PrefixState};
use super::{MuZeroNetwork, NetworkError};
use crate::model::{Model, ModelError, Prediction};

impl From<NetworkError> for ModelError {
    fn from(err: NetworkError) -> Self {
        match err {
            NetworkError::ObservationShape {
                got,
                per_observation,
                ..
            } => ModelError::ObservationShape {
                got,
                expected: got.div_ceil(per_observation.max(1)) * per_observation,
                batch: got / per_observation.max(1),
                per_observation,
            },
            other => ModelError::Backend(crate::error_chain::error_chain(&other)),
        }
    }
}

fn backend(err: candle_core::Error) -> ModelError {
    ModelError::Backend(err.to_string())
}

/// The value prefix's state of every node (see [`super::value_prefix`]), node-major like the
/// latents: the LSTM's `h` and `c` on the device (zeros at reset points), and on the host
/// each node's depth and the prefix its children's prefixes are measured from (0 at reset
/// points, else the node's own prefix). A node's reward is its prefix minus its parent's base.
struct PrefixTree {
    h: Tensor,
    c: Tensor,
    base: Vec<f32>,
    depth: Vec<usize>,
}

/// A network's weights on the host for a search: an MLP's or a conv network's.
enum HostNetwork {
    Mlp(Box<HostMlp>),
    Conv(Box<HostConv>),
}

impl HostNetwork {
    fn supports(network: &MuZeroNetwork) -> bool {
        HostMlp::supports(network) || HostConv::supports(network)
    }

    /// `bf16`: the conv network's convolutions in bf16 where the CPU can
    /// ([`HostConv::with_bf16`]).
    fn new(network: &MuZeroNetwork, bf16: bool) -> Result<Self, NetworkError> {
        if HostConv::supports(network) {
            Ok(Self::Conv(Box::new(HostConv::with_bf16(network, bf16)?)))
        } else {
            Ok(Self::Mlp(Box::new(HostMlp::new(network)?)))
        }
    }

    fn serial(self) -> Self {
        match self {
            Self::Mlp(net) => Self::Mlp(Box::new((*net).serial())),
            Self::Conv(net) => Self::Conv(Box::new((*net).serial())),
        }
    }

    /// The network's calls.
    fn calls(&self) -> &dyn HostInference {
        match self {
            Self::Mlp(net) => net.as_ref(),
            Self::Conv(net) => net.as_ref(),
        }
    }
}

/// A network seen by the search, with the latent buffer of the current batch of trees.
pub struct SearchModel<'a> {
    network: &'a MuZeroNetwork,
    /// Run on the host ([`HostMlp`], [`HostConv`]) rather than on tensors.
    on_host: bool,
    /// Run each call as one CUDA kernel (`network::cuda_mlp`) rather than on tensors.
    one_kernel: bool,
    #[cfg(feature = "cuda")]
    cuda_mlp: Option<super::cuda_mlp::CudaMlp>,
    /// The host copy of the weights, made at the first initial inference and kept for the
    /// model's life (one search, or for the exact-rules search one evaluation per simulation),
    /// and the latents `[capacity * B, latent_dim]`, node-major.
    host: Option<(HostNetwork, Vec<f32>)>,
    /// `network`'s inference copy, made by `initial_inference`.
    frozen: Option<MuZeroNetwork>,
    latents: Option<Tensor>,
    /// The value prefix's part of the trees, for a network that has one.
    prefix: Option<PrefixTree>,
    batch: usize,
    capacity: usize,
    /// A fork: one half of a split search, so its host calls do not split again.
    forked: bool,
    /// Host conv calls in bf16 where the CPU can ([`Model::set_bf16_inference`]).
    bf16: bool,
    /// Capture the recurrent inference as a CUDA graph on a CUDA device (see
    /// [`Self::with_cuda_graphs`]).
    cuda_graphs: bool,
    #[cfg(feature = "cuda")]
    graph: Option<super::cuda_graph::RecurrentGraph>,
}

impl<'a> SearchModel<'a> {
    /// On the host where [`HostMlp::supports`] or [`HostConv::supports`] the network, as one
    /// CUDA kernel per call for an MLP on CUDA (`network::cuda_mlp`), else on tensors.
    pub fn new(network: &'a MuZeroNetwork) -> Self {
        Self {
            on_host: HostNetwork::supports(network),
            one_kernel: one_kernel_calls(network),
            ..Self::on_tensors(network)
        }
    }

    /// Always on tensors (candle ops on the network's device), as on a GPU.
    pub fn on_tensors(network: &'a MuZeroNetwork) -> Self {
        Self {
            network,
            on_host: false,
            one_kernel: false,
            #[cfg(feature = "cuda")]
            cuda_mlp: None,
            host: None,
            frozen: None,
            latents: None,
            prefix: None,
            batch: 0,
            capacity: 0,
            forked: false,
            bf16: false,
            cuda_graphs: false,
            #[cfg(feature = "cuda")]
            graph: None,
        }
    }

    /// On a CUDA device, run each recurrent inference after the first two as one replayed
    /// CUDA graph (`network::cuda_graph`, built with the `cuda` feature): the same numbers,
    /// without the host work of each op.
    /// Only where this thread alone uses the device's stream while the search runs (a capture
    /// would take in other threads' work on it). No effect elsewhere, nor for networks with a
    /// value prefix, nor for MLP networks whose calls are one kernel each already.
    pub fn with_cuda_graphs(mut self, enabled: bool) -> Self {
        self.cuda_graphs = enabled;
        self
    }

    /// Why this search's CUDA graph could not be captured, if it could not.
    pub fn cuda_graph_fallback(&self) -> Option<String> {
        #[cfg(feature = "cuda")]
        if let Some(graph) = &self.graph {
            return graph.fallback_reason().map(str::to_string);
        }
        None
    }

    /// Whether this search's calls run as one CUDA kernel each (`network::cuda_mlp`).
    pub fn runs_one_kernel_per_call(&self) -> bool {
        self.one_kernel
    }

    /// Whether the latest recurrent inference was a replay of a captured CUDA graph.
    pub fn replays_cuda_graph(&self) -> bool {
        #[cfg(feature = "cuda")]
        if let Some(graph) = &self.graph {
            return graph.replays();
        }
        false
    }

    /// [`Model::recurrent_inference`] on the host.
    fn host_recurrent(
        &mut self,
        parents: &[usize],
        actions: &[usize],
        new_node: usize,
    ) -> Result<Prediction, ModelError> {
        let (b, capacity) = (self.batch, self.capacity);
        let Some((host, latents)) = self.host.as_mut() else {
            return Err(ModelError::Backend(
                "recurrent_inference called before initial_inference".into(),
            ));
        };
        if parents.len() != b || actions.len() != b || new_node >= capacity {
            return Err(ModelError::Backend(format!(
                "recurrent_inference: {} parents and {} actions for a batch of {b}, node {new_node} of {capacity}",
                parents.len(),
                actions.len(),
            )));
        }
        let l = host.calls().latent_dim();
        let mut parent_latents = Vec::with_capacity(b * l);
        for (i, &p) in parents.iter().enumerate() {
            if p >= capacity {
                return Err(ModelError::Backend(format!(
                    "parent node {p} of {capacity}"
                )));
            }
            let row = p * b + i;
            parent_latents.extend_from_slice(&latents[row * l..(row + 1) * l]);
        }
        let step = host.calls().recurrent(&parent_latents, actions)?;
        latents[new_node * b * l..(new_node + 1) * b * l].copy_from_slice(&step.latents);
        let out = step.outputs;
        Ok(self.host_outputs(
            out.policy_logits,
            &out.value_logits,
            Some(&step.reward_logits),
        ))
    }

    /// Policy logits, values and rewards of one host call.
    fn host_outputs(
        &self,
        policy_logits: Vec<f32>,
        value_logits: &[f32],
        reward_logits: Option<&[f32]>,
    ) -> Prediction {
        let spec = self.network.spec();
        let values = value_logits
            .chunks_exact(spec.value_support.size())
            .map(|row| spec.value_support.logits_to_scalar(row))
            .collect::<Vec<_>>();
        let rewards = match reward_logits {
            Some(logits) => logits
                .chunks_exact(spec.reward_support.size())
                .map(|row| spec.reward_support.logits_to_scalar(row))
                .collect(),
            None => vec![0.0; values.len()],
        };
        Prediction {
            policy_logits,
            values,
            rewards,
        }
    }

    /// Policy logits, values and rewards of one call, read from the device in one copy.
    fn outputs(
        &self,
        policy: &Tensor,
        value: &Tensor,
        reward: Option<&Tensor>,
    ) -> Result<Prediction, ModelError> {
        let r = if reward.is_some() {
            self.network.spec().reward_support.size()
        } else {
            0
        };
        let mut parts = vec![policy, value];
        parts.extend(reward);
        let all = Tensor::cat(&parts, 1)
            .and_then(|t| crate::op_count::read_f32(&t))
            .map_err(backend)?;
        Ok(self.split_outputs(&all, r))
    }

    /// Policy logits, values and rewards from the rows `[A + V + R]` of one call's read (`r`
    /// reward logits a row, 0 for an initial inference).
    fn split_outputs(&self, all: &[f32], r: usize) -> Prediction {
        let spec = self.network.spec();
        let a = spec.num_actions;
        let v = spec.value_support.size();
        let width = a + v + r;
        let batch = all.len() / width.max(1);
        let mut policy_logits = Vec::with_capacity(batch * a);
        let mut values = Vec::with_capacity(batch);
        let mut rewards = Vec::with_capacity(batch);
        for row in all.chunks_exact(width) {
            policy_logits.extend_from_slice(&row[..a]);
            values.push(spec.value_support.logits_to_scalar(&row[a..a + v]));
            rewards.push(if r > 0 {
                spec.reward_support.logits_to_scalar(&row[a + v..])
            } else {
                0.0
            });
        }
        Prediction {
            policy_logits,
            values,
            rewards,
        }
    }
}

/// Whether `network`'s search calls can run as one CUDA kernel each.
#[cfg(feature = "cuda")]
fn one_kernel_calls(network: &MuZeroNetwork) -> bool {
    super::cuda_mlp::CudaMlp::supports(network)
}

#[cfg(not(feature = "cuda"))]
fn one_kernel_calls(_: &MuZeroNetwork) -> bool {
    false
}

/// The buffer rows of `parents` (node-major: row `parent * batch + i` for tree `i`).
pub(super) fn parent_rows(parents: &[usize], batch: usize) -> Vec<u32> {
    parents
        .iter()
        .enumerate()
        .map(|(i, &p)| (p * batch + i) as u32)
        .collect()
}

impl Model for SearchModel<'_> {
    fn num_actions(&self) -> usize {
        self.network.spec().num_actions
    }

    /// On the host only: a fork whose calls run on its own thread without splitting. On CUDA
    /// one model serves the whole batch, one-kernel calls too: a call there costs about the
    /// same for 128 trees as for 256, so two halves side by side made twice the calls, and a
    /// 50-simulation search of 256 CartPole roots took 9.9 ms against 6.5 ms whole (one H200,
    /// docs/benchmarks.md).
    fn set_bf16_inference(&mut self, on: bool) {
        if on != self.bf16 {
            // The host copy is made in the precision asked for at its first call.
            self.host = None;
            self.bf16 = on;
        }
    }

    fn fork(&self) -> Option<Box<dyn Model + Send + '_>> {
        self.on_host.then(|| {
            Box::new(SearchModel {
                forked: true,
                bf16: self.bf16,
                ..SearchModel::new(self.network)
            }) as Box<dyn Model + Send + '_>
        })
    }

    fn initial_inference(
        &mut self,
        observations: &[f32],
        batch: usize,
        capacity: usize,
    ) -> Result<Prediction, ModelError> {
        let per = self.network.spec().obs_len();
        if observations.len() != batch * per {
            return Err(ModelError::ObservationShape {
                got: observations.len(),
                expected: batch * per,
                batch,
                per_observation: per,
            });
        }
        if self.on_host {
            let host = match self.host.take() {
                Some((host, _)) => host,
                None if self.forked => HostNetwork::new(self.network, self.bf16)?.serial(),
                None => HostNetwork::new(self.network, self.bf16)?,
            };
            let (latent, out) = host.calls().initial(observations);
            let mut latents = vec![0f32; capacity.max(1) * latent.len()];
            latents[..latent.len()].copy_from_slice(&latent);
            self.host = Some((host, latents));
            self.batch = batch;
            self.capacity = capacity.max(1);
            return Ok(self.host_outputs(out.policy_logits, &out.value_logits, None));
        }
        #[cfg(feature = "cuda")]
        if self.one_kernel {
            let observations = self.network.spec().scale_observations(observations);
            let (model, prediction) = super::cuda_mlp::CudaMlp::initial(
                self.network,
                &observations,
                batch,
                capacity.max(1),
            )?;
            self.cuda_mlp = Some(model);
            self.batch = batch;
            self.capacity = capacity.max(1);
            return Ok(prediction);
        }
        let network = self.network.inference_copy()?;
        let obs = network.observation_tensor(observations)?;
        let latent = network.represent(&obs)?;
        let (policy, value) = network.predict(&latent)?;
        let mut shape = vec![capacity.max(1) * batch];
        shape.extend(self.network.spec().latent_shape());
        let buffer = Tensor::zeros(shape, latent.dtype(), latent.device()).map_err(backend)?;
        buffer
            .slice_set(&latent.contiguous().map_err(backend)?, 0, 0)
            .map_err(backend)?;
        self.prefix = if network.has_value_prefix() {
            let rows = capacity.max(1) * batch;
            let zeros = PrefixState::zeros(
                rows,
                network.spec().value_prefix_dim,
                latent.dtype(),
                latent.device(),
            )
            .map_err(backend)?;
            Some(PrefixTree {
                h: zeros.h,
                c: zeros.c,
                base: vec![0.0; rows],
                depth: vec![0; rows],
            })
        } else {
            None
        };
        #[cfg(feature = "cuda")]
        {
            self.graph = if self.cuda_graphs && self.prefix.is_none() {
                super::cuda_graph::RecurrentGraph::new(&network, &buffer, batch)?
            } else {
                None
            };
        }
        self.latents = Some(buffer);
        self.frozen = Some(network);
        self.batch = batch;
        self.capacity = capacity.max(1);
        self.outputs(&policy, &value, None)
    }

    fn recurrent_inference(
        &mut self,
        parents: &[usize],
        actions: &[usize],
        new_node: usize,
    ) -> Result<Prediction, ModelError> {
        if self.on_host {
            return self.host_recurrent(parents, actions, new_node);
        }
        #[cfg(feature = "cuda")]
        if self.one_kernel {
            let model = self.cuda_mlp.as_mut().ok_or_else(|| {
                ModelError::Backend("recurrent_inference called before initial_inference".into())
            })?;
            return Ok(model.recurrent(parents, actions, new_node)?);
        }
        let buffer = self.latents.as_ref().ok_or_else(|| {
            ModelError::Backend("recurrent_inference called before initial_inference".into())
        })?;
        let b = self.batch;
        if parents.len() != b || actions.len() != b || new_node >= self.capacity {
            return Err(ModelError::Backend(format!(
                "recurrent_inference: {} parents and {} actions for a batch of {b}, node {new_node} of {}",
                parents.len(),
                actions.len(),
                self.capacity
            )));
        }
        #[cfg(feature = "cuda")]
        if let Some(graph) = self.graph.as_mut() {
            let network = self.frozen.as_ref().unwrap_or(self.network);
            let all = graph.run(network, buffer, parents, actions, new_node)?;
            let rewards = self.network.spec().reward_support.size();
            return Ok(self.split_outputs(&all, rewards));
        }
        let rows = parent_rows(parents, b);
        let index = Tensor::from_vec(rows, b, buffer.device()).map_err(backend)?;
        let parent_latents = super::fused::gather_rows(buffer, &index).map_err(backend)?;
        let network = self.frozen.as_ref().unwrap_or(self.network);
        let one_hot = network.action_tensor(actions)?;
        let parent_state = match &self.prefix {
            Some(tree) => Some(PrefixState {
                h: tree.h.index_select(&index, 0).map_err(backend)?,
                c: tree.c.index_select(&index, 0).map_err(backend)?,
            }),
            None => None,
        };
        let (next, reward, state) =
            network.dynamics_step(&parent_latents, &one_hot, parent_state.as_ref())?;
        let (policy, value) = network.predict(&next)?;
        let next = next.to_dtype(buffer.dtype()).map_err(backend)?;
        buffer
            .slice_set(&next.contiguous().map_err(backend)?, 0, new_node * b)
            .map_err(backend)?;
        let mut out = self.outputs(&policy, &value, Some(&reward))?;
        if let (Some(tree), Some(state)) = (self.prefix.as_mut(), state) {
            let horizon = self.network.spec().value_prefix_horizon;
            let mut keep = vec![1f32; b];
            for (i, &p) in parents.iter().enumerate() {
                let (parent, row) = (p * b + i, new_node * b + i);
                let depth = tree.depth[parent] + 1;
                let prefix = out.rewards[i];
                out.rewards[i] = prefix - tree.base[parent];
                tree.depth[row] = depth;
                if is_reset(depth, horizon) {
                    tree.base[row] = 0.0;
                    keep[i] = 0.0;
                } else {
                    tree.base[row] = prefix;
                }
            }
            let (mut h, mut c) = (state.h, state.c);
            if keep.contains(&0.0) {
                let keep = Tensor::from_vec(keep, (b, 1), h.device())
                    .and_then(|k| k.to_dtype(h.dtype()))
                    .map_err(backend)?;
                h = h.broadcast_mul(&keep).map_err(backend)?;
                c = c.broadcast_mul(&keep).map_err(backend)?;
            }
            for (store, value) in [(&tree.h, h), (&tree.c, c)] {
                store
                    .slice_set(&value.contiguous().map_err(backend)?, 0, new_node * b)
                    .map_err(backend)?;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::NetworkSpec;
    use crate::search::{run_search, SearchConfig, SearchPolicy};
    use crate::support::Support;
    use candle_core::{DType, Device};
    use rand::SeedableRng;

    fn spec(shape: Vec<usize>) -> NetworkSpec {
        NetworkSpec {
            hidden_dim: 8,
            latent_dim: 6,
            value_support: Support::symmetric(4),
            ..crate::testing::specs::tiny_spec(shape, 3)
        }
    }

    fn search(policy: SearchPolicy) -> SearchConfig {
        SearchConfig {
            num_simulations: 12,
            discount: 0.9,
            c1: 1.25,
            c2: 19652.0,
            dirichlet_alpha: 0.3,
            exploration_fraction: 0.25,
            two_player: false,
            policy,
            symmetries: Vec::new(),
            exact_rules: false,
            sampling_moves: None,
            value_bounds: None,
            unvisited_value: Default::default(),
            decisive_moves: false,
            solver: false,
            helper_threads: 0,
            bf16_inference: false,
        }
    }

    /// `SearchConfig::bf16_inference` reaches the host conv network: the roots' latent states
    /// a conv network's search stores in bf16 are those of f32 to bf16's precision, and differ
    /// from them on a CPU that runs the bf16 kernel (elsewhere they are the same bits). Only
    /// the roots compare: below them a rounding may send the two searches down other moves.
    #[test]
    fn bf16_inference_reaches_the_host_conv_network() {
        let spec = NetworkSpec {
            conv_channels: 16,
            num_blocks: 1,
            ..spec(vec![2, 4, 5])
        };
        let net = crate::testing::specs::perturbed_network(spec, 1);
        let batch = 3;
        let obs: Vec<f32> = (0..batch * 40).map(|i| (i as f32 * 0.37).sin()).collect();
        let masks = vec![true; batch * 3];
        let latents = |bf16: bool| {
            let mut rng = rand::rngs::StdRng::seed_from_u64(3);
            let config = SearchConfig {
                bf16_inference: bf16,
                ..search(SearchPolicy::Puct)
            };
            let mut model = SearchModel::new(&net);
            run_search(&mut model, &config, &obs, batch, &masks, false, &mut rng).unwrap();
            assert_eq!(model.bf16, bf16);
            // Node 0 of every tree, the first `batch` rows of the buffer: the roots.
            let roots = batch * net.spec().latent_shape().iter().product::<usize>();
            model.host.take().unwrap().1[..roots].to_vec()
        };
        let (full, half) = (latents(false), latents(true));
        assert!(full.iter().any(|&v| v != 0.0));
        for (a, b) in half.iter().zip(&full) {
            assert!((a - b).abs() <= 0.05 * (1.0 + b.abs()), "{a} against {b}");
        }
        assert_eq!(half != full, crate::network::direct_conv::bf16::runs_here());
    }

    /// The host path searches like the tensor path: the same root values (to rounding) and
    /// visit counts, with pUCT (noise included) and Gumbel.
    #[test]
    fn host_and_tensor_searches_agree() {
        let net = MuZeroNetwork::new(spec(vec![5]), 8, &Device::Cpu, DType::F32).unwrap();
        let batch = 3;
        let obs: Vec<f32> = (0..batch * 5).map(|i| (i as f32 * 0.61).cos()).collect();
        let masks = [true, true, false, true, true, true, true, false, true];
        for policy in [
            SearchPolicy::Puct,
            SearchPolicy::Gumbel {
                max_considered_actions: 3,
                c_visit: 50.0,
                c_scale: 1.0,
                noise_scale: 1.0,
            },
        ] {
            let run = |mut model: SearchModel| {
                let mut rng = rand::rngs::StdRng::seed_from_u64(17);
                run_search(
                    &mut model,
                    &search(policy.clone()),
                    &obs,
                    batch,
                    &masks,
                    true,
                    &mut rng,
                )
                .unwrap()
            };
            let host = run(SearchModel::new(&net));
            let tensors = run(SearchModel::on_tensors(&net));
            assert_eq!(host.visit_counts, tensors.visit_counts);
            for (a, b) in host.root_values.iter().zip(&tensors.root_values) {
                assert!((a - b).abs() < 1e-4, "root value {a} vs {b}");
            }
        }
    }

    /// A large batch (the rayon paths of the search and of the host MLP) searches every root
    /// as it would be searched alone, on the host and on tensors.
    #[test]
    fn a_large_batch_searches_each_root_as_if_alone() {
        let net = MuZeroNetwork::new(spec(vec![5]), 8, &Device::Cpu, DType::F32).unwrap();
        let batch = 200;
        let obs: Vec<f32> = (0..batch * 5).map(|i| (i as f32 * 0.61).cos()).collect();
        let masks = vec![true; batch * 3];
        let config = search(SearchPolicy::Gumbel {
            max_considered_actions: 3,
            c_visit: 50.0,
            c_scale: 1.0,
            noise_scale: 1.0,
        });
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        for on_tensors in [false, true] {
            let make = || {
                if on_tensors {
                    SearchModel::on_tensors(&net)
                } else {
                    SearchModel::new(&net)
                }
            };
            let all =
                run_search(&mut make(), &config, &obs, batch, &masks, false, &mut rng).unwrap();
            for b in (0..batch).step_by(7) {
                let alone = run_search(
                    &mut make(),
                    &config,
                    &obs[b * 5..(b + 1) * 5],
                    1,
                    &masks[..3],
                    false,
                    &mut rng,
                )
                .unwrap();
                assert_eq!(all.visit_counts_of(b), alone.visit_counts_of(0), "root {b}");
                for (x, y) in all
                    .policy_target_of(b)
                    .iter()
                    .zip(alone.policy_target_of(0))
                {
                    assert!((x - y).abs() < 1e-4, "root {b}: {x} vs {y}");
                }
            }
        }
    }

    /// A batch of 64 or more on the host is searched as two halves side by side, each with its
    /// own fork of the model and its own noise: the same seed gives the same search, an odd
    /// batch keeps every row, and the two halves' noise differs.
    #[test]
    fn a_split_search_is_reproducible_with_noise() {
        let net = MuZeroNetwork::new(spec(vec![5]), 8, &Device::Cpu, DType::F32).unwrap();
        let batch = 65;
        assert!(SearchModel::new(&net).fork().is_some());
        assert!(SearchModel::on_tensors(&net).fork().is_none());
        // Every root the same observation: rows differ only by their noise.
        let obs: Vec<f32> = (0..batch * 5).map(|i| (i % 5) as f32 * 0.3).collect();
        let masks = vec![true; batch * 3];
        let run = |seed: u64| {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let config = search(SearchPolicy::Puct);
            let mut model = SearchModel::new(&net);
            run_search(&mut model, &config, &obs, batch, &masks, true, &mut rng).unwrap()
        };
        let (a, b) = (run(5), run(5));
        assert_eq!(a, b);
        assert_eq!(a.batch, batch);
        assert_eq!(a.visit_counts.len(), batch * 3);
        assert_eq!(a.root_values.len(), batch);
        // Had both halves drawn the same noise, row i and row 32 + i would be equal.
        assert!(
            (0..32).any(|i| a.visit_counts_of(i) != a.visit_counts_of(32 + i)),
            "the halves' noise"
        );
        assert_ne!(a, run(6));
    }

    /// The search over a real network: latents stay in the buffer, the tree sees scalars, and
    /// the stored latent of a node equals the dynamics applied to its parent's latent.
    #[test]
    fn searches_mlp_and_conv_networks() {
        for shape in [vec![5], vec![2, 3, 3]] {
            let net = MuZeroNetwork::new(spec(shape.clone()), 1, &Device::Cpu, DType::F32).unwrap();
            let per: usize = shape.iter().product();
            let batch = 4;
            let obs: Vec<f32> = (0..batch * per).map(|i| (i as f32 * 0.37).sin()).collect();
            let masks = vec![true; batch * 3];
            for policy in [
                SearchPolicy::Puct,
                SearchPolicy::Gumbel {
                    max_considered_actions: 3,
                    c_visit: 50.0,
                    c_scale: 1.0,
                    noise_scale: 1.0,
                },
            ] {
                let mut model = SearchModel::new(&net);
                let mut rng = rand::rngs::StdRng::seed_from_u64(3);
                let out = run_search(
                    &mut model,
                    &search(policy),
                    &obs,
                    batch,
                    &masks,
                    true,
                    &mut rng,
                )
                .unwrap();
                assert_eq!(out.visit_counts.len(), batch * 3);
                assert!(out.root_values.iter().all(|v| v.is_finite()));
                for b in 0..batch {
                    let visits: u32 = out.visit_counts[b * 3..(b + 1) * 3].iter().sum();
                    assert_eq!(visits, 12, "shape {shape:?}");
                }
            }
            // Node 1 of tree b holds dynamics(root latent of b, action) (the tensor buffer).
            let mut model = SearchModel::on_tensors(&net);
            model.initial_inference(&obs, batch, 3).unwrap();
            model
                .recurrent_inference(&[0, 0, 0, 0], &[0, 1, 2, 0], 1)
                .unwrap();
            let roots = net
                .represent(&net.observation_tensor(&obs).unwrap())
                .unwrap();
            let (expected, _) = net
                .dynamics(&roots, &net.action_tensor(&[0, 1, 2, 0]).unwrap())
                .unwrap();
            let stored = model
                .latents
                .as_ref()
                .unwrap()
                .narrow(0, batch, batch)
                .unwrap();
            let diff = (stored - expected)
                .unwrap()
                .abs()
                .unwrap()
                .max_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap();
            assert!(diff < 1e-6, "stored latent differs by {diff}");
        }
    }

    /// The search's inference copy computes what the network computes, in f32 and in bf16,
    /// for the MLP and the conv net: predictions of the initial and a recurrent call.
    #[test]
    fn the_inference_copy_predicts_what_the_network_predicts() {
        for dtype in [DType::F32, DType::BF16] {
            for shape in [vec![5], vec![2, 3, 3]] {
                let net = MuZeroNetwork::new(spec(shape.clone()), 4, &Device::Cpu, dtype).unwrap();
                let per: usize = shape.iter().product();
                let batch = 3;
                let obs: Vec<f32> = (0..batch * per).map(|i| (i as f32 * 0.53).cos()).collect();
                let mut model = SearchModel::on_tensors(&net);
                let first = model.initial_inference(&obs, batch, 2).unwrap();
                let second = model.recurrent_inference(&[0; 3], &[2, 0, 1], 1).unwrap();
                let latent = net
                    .represent(&net.observation_tensor(&obs).unwrap())
                    .unwrap();
                let (policy, value) = net.predict(&latent).unwrap();
                let (next, reward) = net
                    .dynamics(&latent, &net.action_tensor(&[2, 0, 1]).unwrap())
                    .unwrap();
                let (policy2, value2) = net.predict(&next).unwrap();
                let host = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                let s = net.spec();
                let tolerance = if dtype == DType::F32 { 1e-4 } else { 0.1 };
                let close = |a: &[f32], b: &[f32], what: &str| {
                    let worst = a
                        .iter()
                        .zip(b)
                        .map(|(x, y)| (x - y).abs())
                        .fold(0.0, f32::max);
                    assert!(worst < tolerance, "{dtype:?} {shape:?} {what}: {worst}");
                };
                close(&first.policy_logits, &host(&policy), "initial policy");
                close(
                    &first.values,
                    &s.value_support.logits_to_scalars(&host(&value)),
                    "initial value",
                );
                close(&second.policy_logits, &host(&policy2), "recurrent policy");
                close(
                    &second.values,
                    &s.value_support.logits_to_scalars(&host(&value2)),
                    "recurrent value",
                );
                close(
                    &second.rewards,
                    &s.reward_support.logits_to_scalars(&host(&reward)),
                    "reward",
                );
            }
        }
    }

    /// With a value prefix the search sees each transition's reward as the difference of two
    /// prefixes, the LSTM state follows the path and restarts below reset points: the
    /// rewards of a path of depth 4 and of a sibling, against the network's steps by hand
    /// (horizon 2: depths 0, 2 and 4 are reset points).
    #[test]
    fn the_search_reads_rewards_off_value_prefixes() {
        let spec = NetworkSpec {
            value_prefix_dim: 5,
            value_prefix_horizon: 2,
            ..spec(vec![5])
        };
        let mut net = MuZeroNetwork::new(spec, 2, &Device::Cpu, DType::F32).unwrap();
        // The reward head's last layer starts at zero: give it weights.
        let mut tensors = net.params().to_tensors().unwrap();
        for (name, t) in tensors.iter_mut() {
            if name.starts_with("dynamics.reward_out") {
                *t = Tensor::rand(-1f32, 1.0, t.dims(), &Device::Cpu).unwrap();
            }
        }
        net = MuZeroNetwork::from_tensors(net.spec().clone(), tensors, &Device::Cpu, DType::F32)
            .unwrap();
        assert!(!HostMlp::supports(&net), "the value prefix runs on tensors");
        let obs: Vec<f32> = (0..5).map(|i| (i as f32 * 0.7).sin()).collect();
        let mut model = SearchModel::new(&net);
        model.initial_inference(&obs, 1, 8).unwrap();
        // (parent, action) of nodes 1..=5: a path 0-1-2-3-4 and node 5 below node 1.
        let edges = [(0, 1), (1, 2), (2, 0), (3, 1), (1, 0)];
        let got: Vec<f32> = edges
            .iter()
            .enumerate()
            .map(|(n, &(p, a))| {
                model
                    .recurrent_inference(&[p], &[a], n + 1)
                    .unwrap()
                    .rewards[0]
            })
            .collect();

        let s = net.spec();
        let prefix_of = |logits: &Tensor| {
            s.reward_support
                .logits_to_scalars(&logits.flatten_all().unwrap().to_vec1::<f32>().unwrap())[0]
        };
        let step = |latent: &Tensor, a: usize, state: Option<&PrefixState>| {
            net.dynamics_step(latent, &net.action_tensor(&[a]).unwrap(), state)
                .unwrap()
        };
        let root = net
            .represent(&net.observation_tensor(&obs).unwrap())
            .unwrap();
        let (l1, p1, s1) = step(&root, 1, None);
        let (l2, p2, _) = step(&l1, 2, s1.as_ref());
        let (l3, p3, s3) = step(&l2, 0, None); // node 2 is at depth 2: a reset point
        let (_, p4, _) = step(&l3, 1, s3.as_ref());
        let (_, p5, _) = step(&l1, 0, s1.as_ref());
        let (p1, p2, p3, p4, p5) = (
            prefix_of(&p1),
            prefix_of(&p2),
            prefix_of(&p3),
            prefix_of(&p4),
            prefix_of(&p5),
        );
        let want = [p1, p2 - p1, p3, p4 - p3, p5 - p1];
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                (g - w).abs() < 1e-4,
                "node {}: reward {g}, by hand {w}",
                i + 1
            );
        }
        assert!(
            want.iter().any(|&r| (r - p1).abs() > 1e-3),
            "the prefixes differ along the path"
        );
    }

    /// A network with an observation scale sees raw observations as the same network without
    /// one sees scaled observations, on the host and on tensors.
    #[test]
    fn the_observation_scale_is_part_of_the_network_on_both_paths() {
        let scale = vec![1.0, 10.0, 0.5, 1.0, -2.0];
        let plain = MuZeroNetwork::new(spec(vec![5]), 6, &Device::Cpu, DType::F32).unwrap();
        let scaled = MuZeroNetwork::from_tensors(
            NetworkSpec {
                observation_scale: scale.clone(),
                ..spec(vec![5])
            },
            plain.params().to_tensors().unwrap(),
            &Device::Cpu,
            DType::F32,
        )
        .unwrap();
        let batch = 3;
        let raw: Vec<f32> = (0..batch * 5).map(|i| (i as f32 * 0.41).sin()).collect();
        let by_hand: Vec<f32> = raw
            .iter()
            .enumerate()
            .map(|(i, x)| x * scale[i % 5])
            .collect();
        for on_host in [true, false] {
            let model = |net| {
                if on_host {
                    SearchModel::new(net)
                } else {
                    SearchModel::on_tensors(net)
                }
            };
            let a = model(&scaled).initial_inference(&raw, batch, 2).unwrap();
            let b = model(&plain).initial_inference(&by_hand, batch, 2).unwrap();
            let c = model(&plain).initial_inference(&raw, batch, 2).unwrap();
            for (x, y) in a.policy_logits.iter().zip(&b.policy_logits) {
                assert!((x - y).abs() < 1e-5, "host {on_host}: {x} vs {y}");
            }
            assert_ne!(
                a.policy_logits, c.policy_logits,
                "the scale changes the input"
            );
        }
    }

    #[test]
    fn wrong_observation_length_is_an_error() {
        let net = MuZeroNetwork::new(spec(vec![5]), 1, &Device::Cpu, DType::F32).unwrap();
        let mut model = SearchModel::new(&net);
        let err = model
            .initial_inference(&[0.0; 9], 2, 4)
            .unwrap_err()
            .to_string();
        assert!(err.contains("9") && err.contains("10"), "{err}");
    }
}
