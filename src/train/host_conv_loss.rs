//! The unrolled loss of [`super::loss`] and its gradients for conv networks computing in f32
//! on the CPU, on host buffers: [`super::host_loss`]'s unroll and heads over the conv
//! networks' layers, each trunk running `host_conv_trunk`'s layer code.
//!
//! Through candle, a conv training step is the host trunk ops between some hundred tensor ops
//! (the action planes, the min-max scaling, the 1 x 1 convolutions and the heads, the losses,
//! the gradients' sums and zero-filled buffers), each on the main thread between two waits for
//! the rayon pool: on two cores a third of the step ran on one of them. Here the batch is cut
//! into [`CHUNKS`] chunks of whole samples (the network treats every sample alone) and each
//! chunk runs its whole unroll, forward and backward, on one thread; the chunks' losses and
//! gradients are then added in chunk order, so the result depends on the batch size only, not
//! on the number of threads. It computes the same function as
//! [`super::loss::unrolled_loss_with`] to float rounding (tested against it parameter by
//! parameter). The consistency loss, the value prefix, other dtypes and CUDA keep the tensor
//! path ([`supports`]).

use std::collections::HashMap;
use std::sync::Arc;

use candle_core::DType;
use rayon::prelude::*;

use super::host_loss::{
    add_into, add_rows, in_parameter_order, min_max_scale_backward, relu_backward, rows_loss, Head,
    HeadTrace, HostLoss, Linear, RowsLoss, UnrollNetworks,
};
use crate::network::fused;
use crate::network::host_conv_net::{
    dynamics_input, load_pointwise, load_trunk, pointwise, HostConv,
};
use crate::network::host_conv_trunk::{to_channels_last, ChunkActivations, TrunkOnChunks};
use crate::network::host_inference::HostInference;
use crate::network::host_mlp::{min_max_scale, relu as relu_in_place, Weights};
use crate::network::{MuZeroNetwork, NetworkError, NetworkSpec};
use crate::replay::Batch;

/// Chunks a batch is cut into (the last may be shorter): enough to keep 16 threads busy,
/// and a fixed count, so a batch gives the same result on any machine.
pub const CHUNKS: usize = 16;

/// Whether [`host_conv_unrolled_loss`] computes the loss of `network` with a consistency loss
/// of `consistency_weight`: conv networks computing in f32 on the CPU (with the CPU's host
/// paths on), without a value prefix, without the consistency loss.
pub fn supports(network: &MuZeroNetwork, consistency_weight: f64) -> bool {
    let spec = network.spec();
    fused::host_paths()
        && network.device().is_cpu()
        && network.dtype() == DType::F32
        && spec.uses_conv()
        && !network.has_value_prefix()
        && (consistency_weight <= 0.0 || spec.projection_dim == 0)
}

/// [`super::loss::unrolled_loss`] of `batch` with `target_values` (`[B * (K+1)]`) and its
/// gradients, on host buffers. `network` must be one [`supports`] accepts.
pub fn host_conv_unrolled_loss(
    network: &MuZeroNetwork,
    batch: &Batch,
    target_values: &[f32],
    value_loss_weight: f64,
) -> Result<HostLoss, NetworkError> {
    if !supports(network, 0.0) {
        return Err(NetworkError::Candle(candle_core::Error::Msg(
            "host conv training needs a conv network without a value prefix, computing in f32 \
             on the CPU"
                .into(),
        )));
    }
    let nets = ConvNetworks::load(network)?;
    let b = batch.batch_size;
    let steps = batch.num_unroll_steps + 1;
    let rows = b.div_ceil(CHUNKS).max(1);
    let chunks = batch.chunks(rows);
    let losses: Vec<Result<RowsLoss, NetworkError>> = chunks
        .par_iter()
        .enumerate()
        .map(|(c, chunk)| {
            let targets = &target_values[c * rows * steps..][..chunk.batch_size * steps];
            rows_loss(network, nets.clone(), chunk, targets, value_loss_weight, b)
        })
        .collect();
    let mut losses = losses.into_iter();
    let Some(first) = losses.next() else {
        return Err(NetworkError::Candle(candle_core::Error::Msg(
            "host conv training: an empty batch".into(),
        )));
    };
    let mut sum = first?;
    for more in losses {
        add_rows(&mut sum, more?);
    }
    let (values, by_name) = sum;
    in_parameter_order(network, values, by_name)
}

/// Boards per chunk of [`HostConvValues::values`] (a fixed split; a board's value does not
/// depend on the others in its chunk).
const VALUE_CHUNK: usize = 16;

/// A conv network's value of observations on host buffers: the learner's bootstrap values
/// from its target network, [`HostConv`]'s representation and prediction over chunks of
/// boards side by side. Equal to [`MuZeroNetwork::values`] to float rounding (tested).
pub struct HostConvValues {
    net: HostConv,
    spec: NetworkSpec,
}

impl HostConvValues {
    /// `network`'s weights as they are now (build a new one after they change). `None` where
    /// [`supports`] does not take the network.
    pub fn new(network: &MuZeroNetwork) -> Result<Option<Self>, NetworkError> {
        if !supports(network, 0.0) {
            return Ok(None);
        }
        Ok(Some(Self {
            net: HostConv::new(network)?,
            spec: network.spec().clone(),
        }))
    }

    /// The scalar values of `observations` (`[n * obs_len]`, unscaled).
    pub fn values(&self, observations: &[f32]) -> Result<Vec<f32>, NetworkError> {
        let (spec, obs_len) = (&self.spec, self.spec.obs_len());
        if obs_len == 0 || !observations.len().is_multiple_of(obs_len) {
            return Err(NetworkError::ObservationShape {
                got: observations.len(),
                per_observation: obs_len,
                shape: spec.observation_shape.clone(),
            });
        }
        let logits: Vec<Vec<f32>> = observations
            .par_chunks(VALUE_CHUNK * obs_len)
            .map(|chunk| self.net.initial_serial(chunk).1.value_logits)
            .collect();
        Ok(spec.value_support.logits_to_scalars(&logits.concat()))
    }
}

/// A conv trunk with its parameters' names (in the packed order) and its gradient buffer.
#[derive(Clone)]
struct Trunk {
    plan: Arc<TrunkOnChunks>,
    /// Per packed parameter: its name and its number of values.
    names: Vec<(String, usize)>,
    grads: Vec<f32>,
}

impl Trunk {
    /// The trunk `name` (`stem`: a first layer `input` + `norm` before the blocks) over
    /// `input` channels of `h` x `w` boards.
    fn load(
        params: &Weights,
        name: &str,
        stem: bool,
        blocks: usize,
        input: usize,
        board: (usize, usize),
    ) -> Result<Self, NetworkError> {
        let (plan, names) = load_trunk(params, name, (stem, blocks), input, board, (true, false))?;
        Ok(Self {
            grads: vec![0.0; plan.param_len()],
            plan: Arc::new(plan),
            names,
        })
    }

    fn channels(&self) -> usize {
        self.plan.shape().channels
    }

    /// `x` `[rows, H, W, input]` -> the output `[rows, H, W, channels]` and its activations.
    fn forward(&self, x: &[f32], rows: usize) -> (Vec<f32>, ChunkActivations) {
        let s = self.plan.shape();
        let mut out = vec![0f32; rows * s.channels * s.h * s.w];
        let saved = self.plan.forward(x, &mut out, true);
        (out, saved)
    }

    /// Adds the parameters' gradients for the output gradient `grad` (channels-last); returns
    /// the input's (channels-last).
    fn backward(&mut self, saved: &ChunkActivations, grad: &[f32], rows: usize) -> Vec<f32> {
        let s = self.plan.shape();
        let mut dx = vec![0f32; rows * s.input * s.h * s.w];
        self.plan
            .backward(saved, grad, Some(&mut dx), &mut self.grads);
        dx
    }

    /// Adds the parameters' gradients for the output gradient `grad` (no input gradient).
    fn backward_parameters(&mut self, saved: &ChunkActivations, grad: &[f32]) {
        self.plan.backward(saved, grad, None, &mut self.grads);
    }

    fn gradients(self, out: &mut HashMap<String, Vec<f32>>) {
        let ordered = self.plan.in_parameter_order(&self.grads);
        let mut at = 0;
        for (name, len) in self.names {
            out.insert(name, ordered[at..at + len].to_vec());
            at += len;
        }
    }
}

/// A 1 x 1 convolution to a few planes ([`pointwise`]: channels-last boards in,
/// channels-first planes out) and its gradients.
#[derive(Clone)]
struct Pointwise {
    name: String,
    weight: Vec<f32>,
    bias: Vec<f32>,
    inputs: usize,
    outputs: usize,
    grad_weight: Vec<f32>,
    grad_bias: Vec<f32>,
}

impl Pointwise {
    fn load(params: &Weights, name: &str) -> Result<Self, NetworkError> {
        let (weight, bias, inputs, outputs) = load_pointwise(params, name)?;
        Ok(Self {
            name: name.to_string(),
            grad_weight: vec![0.0; weight.len()],
            grad_bias: vec![0.0; bias.len()],
            weight,
            bias,
            inputs,
            outputs,
        })
    }

    /// `x` `[rows, hw, inputs]` -> `[rows, outputs, hw]`.
    fn forward(&self, x: &[f32], hw: usize) -> Vec<f32> {
        pointwise(&self.weight, &self.bias, x, hw)
    }

    /// Adds the gradients of the filters and bias for input `x` (`[rows, hw, inputs]`) and
    /// output gradient `dy` (`[rows, outputs, hw]`); returns the input's gradient, `[rows,
    /// hw, inputs]`.
    fn backward(&mut self, x: &[f32], dy: &[f32], hw: usize) -> Vec<f32> {
        let (c, o) = (self.inputs, self.outputs);
        let mut dx = vec![0f32; x.len()];
        for ((sample, grad), dsample) in x
            .chunks_exact(c * hw)
            .zip(dy.chunks_exact(o * hw))
            .zip(dx.chunks_exact_mut(c * hw))
        {
            for (oi, g) in grad.chunks_exact(hw).enumerate() {
                self.grad_bias[oi] += g.iter().sum::<f32>();
                let filter = &self.weight[oi * c..(oi + 1) * c];
                let dfilter = &mut self.grad_weight[oi * c..(oi + 1) * c];
                for ((position, dposition), &gv) in sample
                    .chunks_exact(c)
                    .zip(dsample.chunks_exact_mut(c))
                    .zip(g)
                {
                    for (((&v, d), &w), dw) in position
                        .iter()
                        .zip(dposition.iter_mut())
                        .zip(filter)
                        .zip(dfilter.iter_mut())
                    {
                        *dw += gv * v;
                        *d += w * gv;
                    }
                }
            }
        }
        dx
    }

    fn gradients(self, out: &mut HashMap<String, Vec<f32>>) {
        out.insert(format!("{}.weight", self.name), self.grad_weight);
        out.insert(format!("{}.bias", self.name), self.grad_bias);
    }
}

/// A conv head's planes: `relu(conv1x1(h))`, flattened per sample.
fn planes(conv: &Pointwise, h: &[f32], hw: usize) -> Vec<f32> {
    let mut p = conv.forward(h, hw);
    relu_in_place(&mut p);
    p
}

/// The three conv networks (`network::conv`) with gradient buffers. Their boards are
/// channels-last (`[rows, H, W, C]`) from the representation's input on, the trunks' own
/// layout: only the observations are turned, and the heads' 1 x 1 convolutions write their
/// planes in the channels-first order the heads flatten.
#[derive(Clone)]
struct ConvNetworks {
    /// Channels of an observation.
    observation_channels: usize,
    num_actions: usize,
    /// Positions of a board.
    hw: usize,
    /// [`NetworkSpec::action_planes`].
    action_planes: Vec<f32>,
    representation: Trunk,
    /// Trunk, reward planes, reward head.
    dynamics: (Trunk, Pointwise, Head),
    /// Blocks, policy planes, `policy_out`, value planes, value head.
    prediction: (Trunk, Pointwise, Linear, Pointwise, Head),
}

/// What the representation or a dynamics call keeps: the trunk's input and activations, its
/// output (before the min-max scaling), the scaled latent, and a dynamics call's reward
/// planes.
struct LatentTrace {
    trunk: ChunkActivations,
    unscaled: Vec<f32>,
    latent: Vec<f32>,
    reward_planes: Vec<f32>,
}

struct PredictionTrace {
    trunk: ChunkActivations,
    h: Vec<f32>,
    policy_planes: Vec<f32>,
    policy_logits: Vec<f32>,
    value_planes: Vec<f32>,
    value: HeadTrace,
}

impl ConvNetworks {
    fn load(network: &MuZeroNetwork) -> Result<Self, NetworkError> {
        let spec = network.spec();
        let tensors = network.params().tensors_by_name();
        let params = Weights(&tensors);
        let shape = &spec.observation_shape;
        let (c, board) = (shape[0], (shape[1], shape[2]));
        let (ch, blocks, a) = (spec.conv_channels, spec.num_blocks, spec.num_actions);
        let trunk = |name: &str, stem: bool, input: usize| {
            Trunk::load(&params, name, stem, blocks, input, board)
        };
        Ok(Self {
            observation_channels: c,
            num_actions: a,
            hw: board.0 * board.1,
            action_planes: spec.action_planes.clone(),
            representation: trunk("representation.trunk", true, c)?,
            dynamics: (
                trunk("dynamics.trunk", true, ch + a)?,
                Pointwise::load(&params, "dynamics.reward_conv")?,
                Head::load(&params, "dynamics.reward_hidden", "dynamics.reward_out")?,
            ),
            prediction: (
                trunk("prediction", false, ch)?,
                Pointwise::load(&params, "prediction.policy_conv")?,
                Linear::load(&params, "prediction.policy_out")?,
                Pointwise::load(&params, "prediction.value_conv")?,
                Head::load(&params, "prediction.value_hidden", "prediction.value_out")?,
            ),
        })
    }

    fn latent_len(&self) -> usize {
        self.representation.channels() * self.hw
    }
}

impl UnrollNetworks for ConvNetworks {
    type Latent = LatentTrace;
    type Prediction = PredictionTrace;

    fn latent(trace: &LatentTrace) -> &[f32] {
        &trace.latent
    }

    fn logits(trace: &PredictionTrace) -> (&[f32], &[f32]) {
        (&trace.policy_logits, &trace.value.logits)
    }

    fn represent(&self, observations: Vec<f32>, rows: usize) -> LatentTrace {
        let mut boards = vec![0f32; observations.len()];
        to_channels_last(
            &observations,
            self.observation_channels,
            self.hw,
            &mut boards,
        );
        let (unscaled, trunk) = self.representation.forward(&boards, rows);
        let mut latent = unscaled.clone();
        min_max_scale(&mut latent, self.latent_len());
        LatentTrace {
            trunk,
            unscaled,
            latent,
            reward_planes: Vec::new(),
        }
    }

    fn dynamics(
        &self,
        latent: &[f32],
        actions: &[usize],
    ) -> Result<(LatentTrace, HeadTrace), NetworkError> {
        let (l, a, hw, rows) = (self.latent_len(), self.num_actions, self.hw, actions.len());
        let input = dynamics_input(latent, actions, (hw, l / hw, a), &self.action_planes)?;
        let (trunk, reward_conv, reward_head) = &self.dynamics;
        let (unscaled, saved) = trunk.forward(&input, rows);
        let mut next = unscaled.clone();
        min_max_scale(&mut next, l);
        let reward_planes = planes(reward_conv, &unscaled, hw);
        let reward = reward_head.forward(&reward_planes, rows);
        Ok((
            LatentTrace {
                trunk: saved,
                unscaled,
                latent: next,
                reward_planes,
            },
            reward,
        ))
    }

    fn predict(&self, latent: &[f32], rows: usize) -> PredictionTrace {
        let (trunk, policy_conv, policy_out, value_conv, value_head) = &self.prediction;
        let (h, saved) = trunk.forward(latent, rows);
        let policy_planes = planes(policy_conv, &h, self.hw);
        let policy_logits = policy_out.forward(&policy_planes, rows);
        let value_planes = planes(value_conv, &h, self.hw);
        let value = value_head.forward(&value_planes, rows);
        PredictionTrace {
            trunk: saved,
            h,
            policy_planes,
            policy_logits,
            value_planes,
            value,
        }
    }

    fn predict_backward(
        &mut self,
        _latent: &[f32],
        trace: &PredictionTrace,
        dpolicy: &[f32],
        dvalue: &[f32],
        rows: usize,
    ) -> Vec<f32> {
        let hw = self.hw;
        let (trunk, policy_conv, policy_out, value_conv, value_head) = &mut self.prediction;
        let mut dplanes = policy_out.backward(&trace.policy_planes, dpolicy, rows, true);
        relu_backward(&trace.policy_planes, &mut dplanes);
        let mut dh = policy_conv.backward(&trace.h, &dplanes, hw);
        let mut dplanes = value_head.backward(&trace.value_planes, &trace.value, dvalue, rows);
        relu_backward(&trace.value_planes, &mut dplanes);
        add_into(&mut dh, &value_conv.backward(&trace.h, &dplanes, hw));
        trunk.backward(&trace.trunk, &dh, rows)
    }

    fn dynamics_backward(
        &mut self,
        trace: &LatentTrace,
        reward: &HeadTrace,
        dlatent: &[f32],
        dreward: &[f32],
        rows: usize,
    ) -> Vec<f32> {
        let (l, hw) = (self.latent_len(), self.hw);
        let (trunk, reward_conv, reward_head) = &mut self.dynamics;
        let mut dh = min_max_scale_backward(&trace.unscaled, &trace.latent, dlatent, l);
        let mut dplanes = reward_head.backward(&trace.reward_planes, reward, dreward, rows);
        relu_backward(&trace.reward_planes, &mut dplanes);
        add_into(
            &mut dh,
            &reward_conv.backward(&trace.unscaled, &dplanes, hw),
        );
        let dinput = trunk.backward(&trace.trunk, &dh, rows);
        // The latent's channels come first at each position of the input; the action
        // channels take no gradient.
        let ch = l / hw;
        let width = ch + self.num_actions;
        dinput
            .chunks_exact(width)
            .flat_map(|position| position[..ch].iter().copied())
            .collect()
    }

    fn representation_backward(&mut self, trace: &LatentTrace, dlatent: &[f32], _rows: usize) {
        let l = self.latent_len();
        let dh = min_max_scale_backward(&trace.unscaled, &trace.latent, dlatent, l);
        self.representation.backward_parameters(&trace.trunk, &dh);
    }

    fn gradients(self) -> HashMap<String, Vec<f32>> {
        let mut out = HashMap::new();
        self.representation.gradients(&mut out);
        let (trunk, reward_conv, reward_head) = self.dynamics;
        trunk.gradients(&mut out);
        reward_conv.gradients(&mut out);
        reward_head.gradients(&mut out);
        let (trunk, policy_conv, policy_out, value_conv, value_head) = self.prediction;
        trunk.gradients(&mut out);
        policy_conv.gradients(&mut out);
        policy_out.gradients(&mut out);
        value_conv.gradients(&mut out);
        value_head.gradients(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::NetworkSpec;
    use crate::replay::{GameHistory, ReplayBuffer, ReplayConfig};
    use crate::train::host_loss::tests::{assert_equals_tensor_path, close, flat, perturbed};
    use candle_core::Device;
    use rand::{Rng, SeedableRng};

    /// A conv network over `[c, h, w]` boards with `actions` actions, `channels` channels and
    /// `blocks` blocks, perturbed as the MLP tests' is.
    fn network(shape: [usize; 3], actions: usize, channels: usize, blocks: usize) -> MuZeroNetwork {
        let spec = NetworkSpec {
            num_blocks: blocks,
            conv_channels: channels,
            ..crate::testing::specs::tiny_spec(shape.to_vec(), actions)
        };
        perturbed(&MuZeroNetwork::new(spec, 7, &Device::Cpu, DType::F32).unwrap())
    }

    /// A replay buffer of 6 random 9-step games of `obs_len` observations (planes of zeros
    /// and ones, as board games and MinAtar give) and `actions` actions.
    fn replay(obs_len: usize, actions: usize) -> ReplayBuffer {
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let mut replay = ReplayBuffer::new(ReplayConfig {
            per_alpha: 1.0,
            per_epsilon: 1e-3,
            ..crate::testing::games::replay_config(1000, 3, 3, 0.97)
        });
        let planes = |rng: &mut rand::rngs::StdRng| -> Vec<f32> {
            (0..obs_len)
                .map(|_| f32::from(u8::from(rng.random_bool(0.3))))
                .collect()
        };
        let policy: Vec<f32> = vec![1.0 / actions as f32; actions];
        for _ in 0..6 {
            let first = planes(&mut rng);
            let mut game = GameHistory::new(obs_len, actions, &first, 0);
            for _ in 0..9 {
                let next = planes(&mut rng);
                let action = rng.random_range(0..actions);
                game.push(action, 1.0, rng.random_range(-2.0..2.0), &policy, &next, 0);
            }
            game.finish(false, 1.0);
            replay.save_game(game).unwrap();
        }
        replay
    }

    /// The host conv loss equals the tensor path's, values, priorities and every parameter's
    /// gradient: with 0, 1 and 2 blocks, with 4 channels (the patch-matrix convolutions) and
    /// 16 (the direct kernel where the CPU has it), over batches cut into chunks with a short
    /// last one.
    #[test]
    fn the_host_conv_loss_and_its_gradients_equal_the_tensor_path() {
        for (shape, actions, channels, blocks, rows) in [
            ([2, 3, 4], 2, 4, 1, 20),
            ([3, 5, 6], 3, 16, 1, 37),
            ([2, 4, 4], 4, 8, 2, 16),
            ([2, 3, 4], 3, 4, 0, 9),
        ] {
            let net = network(shape, actions, channels, blocks);
            assert!(supports(&net, 0.0));
            let replay = replay(shape.iter().product(), actions);
            let batch = replay
                .sample(rows, &mut rand::rngs::StdRng::seed_from_u64(rows as u64))
                .unwrap();
            assert!(batch.value_mask.contains(&0.0) && batch.policy_mask.contains(&0.0));
            assert!(batch.weights.iter().any(|&w| w < 0.99));
            let targets = batch.target_values.clone();
            let host = host_conv_unrolled_loss(&net, &batch, &targets, 0.25).unwrap();
            assert_eq!(host.values.priorities.len(), rows);
            let case = format!("{blocks} blocks, {channels} channels");
            assert_equals_tensor_path(&net, &batch, &targets, &host, 2e-4, &case);
        }
    }

    /// With action planes (`network_architecture.spatial_actions`: each action marks its
    /// column) the host loss and its gradients equal the tensor path's, and differ from those
    /// of the same weights reading constant planes.
    #[test]
    fn the_host_conv_loss_with_action_planes_equals_the_tensor_path() {
        let (shape, actions) = ([2, 3, 4], 4);
        let constant = network(shape, actions, 8, 1);
        let spec = NetworkSpec {
            action_planes: cumind_envs::board_action_planes(3, 4, actions),
            ..constant.spec().clone()
        };
        let net = MuZeroNetwork::from_tensors(
            spec,
            constant.params().to_tensors().unwrap(),
            &Device::Cpu,
            DType::F32,
        )
        .unwrap();
        assert!(supports(&net, 0.0));
        let batch = replay(shape.iter().product(), actions)
            .sample(24, &mut rand::rngs::StdRng::seed_from_u64(3))
            .unwrap();
        let targets = batch.target_values.clone();
        let host = host_conv_unrolled_loss(&net, &batch, &targets, 0.25).unwrap();
        assert_equals_tensor_path(&net, &batch, &targets, &host, 2e-4, "action planes");
        let plain = host_conv_unrolled_loss(&constant, &batch, &targets, 0.25).unwrap();
        assert!(
            (host.values.total - plain.values.total).abs() > 1e-4,
            "the planes change the loss: {} vs {}",
            host.values.total,
            plain.values.total
        );
    }

    /// The chunks are fixed by the batch size: one thread and three give the same bits.
    #[test]
    fn the_host_conv_loss_does_not_depend_on_the_number_of_threads() {
        let net = network([3, 5, 6], 3, 16, 1);
        let batch = replay(90, 3)
            .sample(40, &mut rand::rngs::StdRng::seed_from_u64(2))
            .unwrap();
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let host = pool
                .install(|| host_conv_unrolled_loss(&net, &batch, &batch.target_values, 0.25))
                .unwrap();
            let grads: Vec<Vec<f32>> = host
                .gradients
                .iter()
                .map(|g| flat(g.as_ref().unwrap()))
                .collect();
            (host.values.total.to_bits(), host.values.priorities, grads)
        };
        let one = run(1);
        assert!(one == run(3));
    }

    /// The host values equal the network's own (its inference copy's, as the learner's
    /// target pass used), with 0, 1 and 2 blocks (each layer's input dropped once no later
    /// layer reads it), over several chunks with a short last one; a wrong observation
    /// length is an error that names it; an MLP network gets none.
    #[test]
    fn the_host_conv_values_equal_the_networks_values() {
        for (shape, channels, blocks) in [([3, 5, 6], 16, 1), ([2, 4, 4], 8, 2), ([2, 3, 4], 4, 0)]
        {
            // The value head's last layer scaled up, so that the values spread well beyond
            // the comparison's tolerance.
            let small = network(shape, 3, channels, blocks);
            let tensors = small
                .params()
                .to_tensors()
                .unwrap()
                .into_iter()
                .map(|(name, t)| {
                    let scale = if name.starts_with("prediction.value_out") {
                        30.0
                    } else {
                        1.0
                    };
                    (name, (t * scale).unwrap())
                })
                .collect();
            let net = MuZeroNetwork::from_tensors(
                small.spec().clone(),
                tensors,
                &Device::Cpu,
                DType::F32,
            )
            .unwrap();
            let obs_len: usize = shape.iter().product();
            let mut rng = rand::rngs::StdRng::seed_from_u64(channels as u64);
            let observations: Vec<f32> = (0..37 * obs_len)
                .map(|_| f32::from(u8::from(rng.random_bool(0.3))))
                .collect();
            let host = HostConvValues::new(&net).unwrap().expect("a conv network");
            let ours = host.values(&observations).unwrap();
            let theirs = net.inference_copy().unwrap().values(&observations).unwrap();
            assert_eq!(ours.len(), 37);
            for (a, b) in ours.iter().zip(&theirs) {
                close("value", *a, *b, 1e-4);
            }
            assert!(ours.iter().any(|v| (v - ours[0]).abs() > 1e-3));
            let err = host
                .values(&observations[1..])
                .expect_err("a short observation");
            assert!(matches!(err, NetworkError::ObservationShape { .. }));
        }
        let mlp = crate::testing::learner::network();
        assert!(HostConvValues::new(&mlp).unwrap().is_none());
    }

    /// What the host conv loss takes: a conv network in f32 on the CPU, without a value
    /// prefix or a consistency loss; an action out of range is an error that names it.
    #[test]
    fn the_host_conv_loss_takes_conv_networks_and_checks_the_actions() {
        let conv = network([2, 3, 4], 2, 4, 1);
        assert!(supports(&conv, 0.0) && supports(&conv, 1.0));
        let mlp = crate::testing::learner::network();
        assert!(!supports(&mlp, 0.0));
        let spec = |projection_dim, value_prefix_dim| NetworkSpec {
            projection_dim,
            value_prefix_dim,
            value_prefix_horizon: 5 * usize::from(value_prefix_dim > 0),
            ..crate::testing::specs::tiny_spec(vec![2, 3, 4], 2)
        };
        let projected = MuZeroNetwork::new(spec(6, 0), 1, &Device::Cpu, DType::F32).unwrap();
        assert!(supports(&projected, 0.0) && !supports(&projected, 1.0));
        let prefix = MuZeroNetwork::new(spec(0, 8), 1, &Device::Cpu, DType::F32).unwrap();
        assert!(!supports(&prefix, 0.0));
        assert!(host_conv_unrolled_loss(
            &mlp,
            &crate::testing::learner::replay()
                .sample(4, &mut rand::rngs::StdRng::seed_from_u64(1))
                .unwrap(),
            &[0.0; 16],
            0.25
        )
        .is_err());
        let mut batch = replay(24, 2)
            .sample(6, &mut rand::rngs::StdRng::seed_from_u64(4))
            .unwrap();
        batch.actions[3] = 2;
        let err = host_conv_unrolled_loss(&conv, &batch, &batch.target_values, 0.25)
            .err()
            .expect("action 2 of 2");
        assert!(matches!(
            err,
            NetworkError::ActionOutOfRange {
                action: 2,
                num_actions: 2
            }
        ));
    }
}
