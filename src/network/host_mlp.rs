//! The MLP networks' inference on host memory: representation, dynamics and prediction as
//! plain loops and `gemm` calls over `Vec<f32>`, for searches on the CPU in f32.
//!
//! At search sizes (a batch of 1 to 256 rows, layers 64 wide) candle's fixed cost per op (a
//! tensor, an allocation, a dispatch) is most of a network call: about forty ops per recurrent
//! inference. Here a call is a dozen matrix products into reused buffers and nothing else.
//! The weights are read once per search, straight from the parameters' storage. The result
//! equals the candle network's to float rounding (tested); CUDA, bf16 compute and the conv
//! networks keep the tensor path ([`HostMlp::supports`]).

use std::collections::HashMap;

use candle_core::{DType, Storage, Tensor};

use super::fused::standardize_row;
use super::host_inference::{HostInference, HostOutputs, HostStep};
use super::{MuZeroNetwork, NetworkError, NetworkSpec};

const LAYER_NORM_EPS: f32 = 1e-5;

/// `dst[m, n] += lhs[m, k] * rhs[k, n]`, all row-major and contiguous.
fn matmul_add(m: usize, k: usize, n: usize, lhs: &[f32], rhs: &[f32], dst: &mut [f32]) {
    gemm_strided(m, n, k, (lhs, k, 1), (rhs, n, 1), dst, true);
}

/// `dst[m, n] (+)= A B` with `dst` row-major and contiguous, `A[i, p] = lhs[i * rs + p * cs]`
/// and `B[p, j] = rhs[p * rs + j * cs]` (each operand given as `(values, row stride, column
/// stride)`, so a transposed operand needs no copy). `accumulate` adds to `dst`'s values;
/// otherwise they are overwritten.
pub(crate) fn gemm_strided(
    m: usize,
    n: usize,
    k: usize,
    lhs: (&[f32], usize, usize),
    rhs: (&[f32], usize, usize),
    dst: &mut [f32],
    accumulate: bool,
) {
    let last = |rows: usize, cols: usize, (_, rs, cs): (&[f32], usize, usize)| {
        (rows - 1) * rs + (cols - 1) * cs
    };
    assert!(dst.len() >= m * n);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            dst[..m * n].fill(0.0);
        }
        return;
    }
    assert!(last(m, k, lhs) < lhs.0.len() && last(k, n, rhs) < rhs.0.len());
    // SAFETY: every element the strides reach lies within its buffer (asserted above: the
    // largest index of each operand), `dst` holds m*n row-major elements, and `dst` does not
    // alias the inputs (a `&mut` borrow).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n as isize,
            accumulate,
            lhs.0.as_ptr(),
            lhs.2 as isize,
            lhs.1 as isize,
            rhs.0.as_ptr(),
            rhs.2 as isize,
            rhs.1 as isize,
            1.0f32,
            1.0f32,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// The f32 elements of a CPU tensor (a copy, made without candle ops).
pub(crate) fn host_values(t: &Tensor) -> Result<Vec<f32>, NetworkError> {
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cpu(cpu) = &*storage else {
        return Err(NetworkError::Candle(candle_core::Error::Msg(
            "host inference needs CPU parameters".into(),
        )));
    };
    let data = cpu.as_slice::<f32>()?;
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(data[start..end].to_vec()),
        None => Err(NetworkError::Candle(candle_core::Error::Msg(
            "host inference needs contiguous parameters".into(),
        ))),
    }
}

/// The network's parameters by name.
pub(crate) struct Weights<'a>(pub(crate) &'a HashMap<String, Tensor>);

impl Weights<'_> {
    pub(crate) fn get(&self, name: &str) -> Result<&Tensor, NetworkError> {
        self.0
            .get(name)
            .ok_or_else(|| NetworkError::MissingParameter(name.to_string()))
    }
}

/// `y = x W^T + b`, with `W^T` kept `[in, out]`.
pub(crate) struct HostLinear {
    weight_t: Vec<f32>,
    bias: Vec<f32>,
    inputs: usize,
    outputs: usize,
}

impl HostLinear {
    pub(crate) fn load(w: &Weights, name: &str) -> Result<Self, NetworkError> {
        let weight = w.get(&format!("{name}.weight"))?;
        let (outputs, inputs) = weight.dims2()?;
        let values = host_values(weight)?;
        let mut weight_t = vec![0f32; inputs * outputs];
        for o in 0..outputs {
            for i in 0..inputs {
                weight_t[i * outputs + o] = values[o * inputs + i];
            }
        }
        let bias = host_values(w.get(&format!("{name}.bias"))?)?;
        Ok(Self {
            weight_t,
            bias,
            inputs,
            outputs,
        })
    }

    /// `x`: `[B, inputs]` -> `out`: `[B, outputs]` (resized).
    pub(crate) fn forward(&self, x: &[f32], batch: usize, out: &mut Vec<f32>) {
        out.clear();
        for _ in 0..batch {
            out.extend_from_slice(&self.bias);
        }
        matmul_add(batch, self.inputs, self.outputs, x, &self.weight_t, out);
    }

    /// Two layers reading the same input as one: outputs side by side.
    fn concat(a: &HostLinear, b: &HostLinear) -> HostLinear {
        let outputs = a.outputs + b.outputs;
        let mut weight_t = Vec::with_capacity(a.inputs * outputs);
        for i in 0..a.inputs {
            weight_t.extend_from_slice(&a.weight_t[i * a.outputs..(i + 1) * a.outputs]);
            weight_t.extend_from_slice(&b.weight_t[i * b.outputs..(i + 1) * b.outputs]);
        }
        let mut bias = a.bias.clone();
        bias.extend_from_slice(&b.bias);
        HostLinear {
            weight_t,
            bias,
            inputs: a.inputs,
            outputs,
        }
    }
}

/// Layer norm with a learned scale and shift, in place over rows.
struct HostNorm {
    gamma: Vec<f32>,
    beta: Vec<f32>,
}

impl HostNorm {
    fn load(w: &Weights, name: &str) -> Result<Self, NetworkError> {
        Ok(Self {
            gamma: host_values(w.get(&format!("{name}.weight"))?)?,
            beta: host_values(w.get(&format!("{name}.bias"))?)?,
        })
    }

    fn forward(&self, x: &mut [f32], scratch: &mut Vec<f32>) {
        let d = self.gamma.len();
        scratch.resize(d, 0.0);
        for row in x.chunks_exact_mut(d) {
            standardize_row(row, LAYER_NORM_EPS, scratch);
            for i in 0..d {
                row[i] = scratch[i] * self.gamma[i] + self.beta[i];
            }
        }
    }
}

pub(crate) fn relu(x: &mut [f32]) {
    for v in x {
        *v = v.max(0.0);
    }
}

/// Scale every row to [0, 1]: `(s - min) / (max - min + 1e-5)`.
pub(crate) fn min_max_scale(x: &mut [f32], width: usize) {
    for row in x.chunks_exact_mut(width) {
        let (min, max) = super::fused::row_min_max(row);
        let scale = max - min + 1e-5;
        for v in row {
            *v = (*v - min) / scale;
        }
    }
}

/// Linear -> LayerNorm -> ReLU, then residual blocks `relu(x + LN(W2 relu(LN(W1 x))))`.
struct HostTrunk {
    input: (HostLinear, HostNorm),
    blocks: Vec<(HostLinear, HostNorm, HostLinear, HostNorm)>,
}

/// Buffers reused across calls.
#[derive(Default)]
struct Scratch {
    a: Vec<f32>,
    b: Vec<f32>,
    row: Vec<f32>,
}

impl HostTrunk {
    fn load(w: &Weights, name: &str, num_blocks: usize) -> Result<Self, NetworkError> {
        let input = (
            HostLinear::load(w, &format!("{name}.input.linear"))?,
            HostNorm::load(w, &format!("{name}.input.norm"))?,
        );
        let blocks = (0..num_blocks)
            .map(|i| {
                let block = format!("{name}.block{i}");
                Ok((
                    HostLinear::load(w, &format!("{block}.first.linear"))?,
                    HostNorm::load(w, &format!("{block}.first.norm"))?,
                    HostLinear::load(w, &format!("{block}.second"))?,
                    HostNorm::load(w, &format!("{block}.norm"))?,
                ))
            })
            .collect::<Result<_, NetworkError>>()?;
        Ok(Self { input, blocks })
    }

    /// Everything after the input layer's matrix product: `h` holds `x W^T + b` on entry and
    /// the trunk's output on return.
    fn finish(&self, h: &mut [f32], batch: usize, s: &mut Scratch) {
        self.input.1.forward(h, &mut s.row);
        relu(h);
        for (first, first_norm, second, norm) in &self.blocks {
            first.forward(h, batch, &mut s.a);
            first_norm.forward(&mut s.a, &mut s.row);
            relu(&mut s.a);
            second.forward(&s.a, batch, &mut s.b);
            norm.forward(&mut s.b, &mut s.row);
            for (x, y) in h.iter_mut().zip(&s.b) {
                *x = (*x + y).max(0.0);
            }
        }
    }

    fn forward(&self, x: &[f32], batch: usize, h: &mut Vec<f32>, s: &mut Scratch) {
        self.input.0.forward(x, batch, h);
        self.finish(h, batch, s);
    }
}

/// The MLP MuZero networks' weights on the host, ready for inference.
pub struct HostMlp {
    latent_dim: usize,
    num_actions: usize,
    obs_len: usize,
    /// [`NetworkSpec::observation_scale`].
    observation_scale: Vec<f32>,
    representation: (HostTrunk, HostLinear),
    /// Dynamics: trunk, then `latent_out` and `reward_hidden` as one layer, then `reward_out`.
    dynamics: (HostTrunk, HostLinear, HostLinear),
    /// Prediction: trunk, then `policy_out` and `value_hidden` as one layer, then `value_out`.
    prediction: (HostTrunk, HostLinear, HostLinear),
    /// [`HostInference::splits`].
    split: bool,
}

impl HostMlp {
    /// Whether `network` can run here: MLP networks without a value prefix, with f32 compute
    /// on the CPU (unless the CPU's host paths are off, `fused::set_host_paths`).
    pub fn supports(network: &MuZeroNetwork) -> bool {
        super::fused::host_paths()
            && network.device().is_cpu()
            && network.dtype() == DType::F32
            && !network.spec().uses_conv()
            && !network.has_value_prefix()
    }

    /// Read `network`'s weights (no candle op: straight from the parameters' storage).
    pub fn new(network: &MuZeroNetwork) -> Result<Self, NetworkError> {
        if !Self::supports(network) {
            return Err(NetworkError::Candle(candle_core::Error::Msg(
                "host inference needs an MLP network computing in f32 on the CPU".into(),
            )));
        }
        let tensors = network.params().tensors_by_name();
        Self::from_tensors(network.spec(), &tensors)
    }

    fn from_tensors(
        spec: &NetworkSpec,
        tensors: &HashMap<String, Tensor>,
    ) -> Result<Self, NetworkError> {
        let w = Weights(tensors);
        let blocks = spec.num_blocks;
        let latent_out = HostLinear::load(&w, "dynamics.latent_out")?;
        let reward_hidden = HostLinear::load(&w, "dynamics.reward_hidden")?;
        let policy_out = HostLinear::load(&w, "prediction.policy_out")?;
        let value_hidden = HostLinear::load(&w, "prediction.value_hidden")?;
        Ok(Self {
            latent_dim: spec.latent_dim,
            num_actions: spec.num_actions,
            obs_len: spec.obs_len(),
            observation_scale: spec.observation_scale.clone(),
            representation: (
                HostTrunk::load(&w, "representation.trunk", blocks)?,
                HostLinear::load(&w, "representation.out")?,
            ),
            dynamics: (
                HostTrunk::load(&w, "dynamics.trunk", blocks)?,
                HostLinear::concat(&latent_out, &reward_hidden),
                HostLinear::load(&w, "dynamics.reward_out")?,
            ),
            prediction: (
                HostTrunk::load(&w, "prediction.trunk", blocks)?,
                HostLinear::concat(&policy_out, &value_hidden),
                HostLinear::load(&w, "prediction.value_out")?,
            ),
            split: true,
        })
    }

    /// Every call on this thread alone, whatever its batch (for a model that already runs
    /// beside another, see `Model::fork`).
    pub fn serial(self) -> Self {
        Self {
            split: false,
            ..self
        }
    }

    /// h: observations `[B * obs_len]` -> latents `[B, latent_dim]` in [0, 1].
    pub fn represent(&self, observations: &[f32]) -> Vec<f32> {
        let batch = observations.len() / self.obs_len.max(1);
        let (trunk, out) = &self.representation;
        let observations = super::scale_observations(&self.observation_scale, observations);
        let mut h = Vec::new();
        trunk.forward(&observations, batch, &mut h, &mut Scratch::default());
        let mut latent = Vec::new();
        out.forward(&h, batch, &mut latent);
        min_max_scale(&mut latent, self.latent_dim);
        latent
    }

    /// g: latents `[B, latent_dim]` and actions `[B]` -> (latents `[B, latent_dim]`, reward
    /// logits `[B, R]`). The action's one-hot columns are a row lookup, not a product.
    pub fn dynamics(
        &self,
        latents: &[f32],
        actions: &[usize],
    ) -> Result<(Vec<f32>, Vec<f32>), NetworkError> {
        let batch = actions.len();
        if let Some(&action) = actions.iter().find(|&&a| a >= self.num_actions) {
            return Err(NetworkError::ActionOutOfRange {
                action,
                num_actions: self.num_actions,
            });
        }
        let (trunk, heads, reward_out) = &self.dynamics;
        let first = &trunk.input.0;
        let (l, hidden) = (self.latent_dim, first.outputs);
        let mut h = Vec::with_capacity(batch * hidden);
        for &action in actions {
            let row = (l + action) * hidden;
            h.extend(
                first
                    .bias
                    .iter()
                    .zip(&first.weight_t[row..row + hidden])
                    .map(|(b, w)| b + w),
            );
        }
        matmul_add(
            batch,
            l,
            hidden,
            latents,
            &first.weight_t[..l * hidden],
            &mut h,
        );
        trunk.finish(&mut h, batch, &mut Scratch::default());
        let mut both = Vec::new();
        heads.forward(&h, batch, &mut both);
        let width = heads.outputs;
        let mut next = Vec::with_capacity(batch * l);
        let mut reward_hidden = Vec::with_capacity(batch * (width - l));
        for row in both.chunks_exact(width) {
            next.extend_from_slice(&row[..l]);
            reward_hidden.extend(row[l..].iter().map(|v| v.max(0.0)));
        }
        min_max_scale(&mut next, l);
        let mut reward = Vec::new();
        reward_out.forward(&reward_hidden, batch, &mut reward);
        Ok((next, reward))
    }

    /// f: latents `[B, latent_dim]` -> policy and value logits.
    pub fn predict(&self, latents: &[f32]) -> HostOutputs {
        let batch = latents.len() / self.latent_dim.max(1);
        let (trunk, heads, value_out) = &self.prediction;
        let mut h = Vec::new();
        trunk.forward(latents, batch, &mut h, &mut Scratch::default());
        let mut both = Vec::new();
        heads.forward(&h, batch, &mut both);
        let a = self.num_actions;
        let width = heads.outputs;
        let mut policy_logits = Vec::with_capacity(batch * a);
        let mut value_hidden = Vec::with_capacity(batch * (width - a));
        for row in both.chunks_exact(width) {
            policy_logits.extend_from_slice(&row[..a]);
            value_hidden.extend(row[a..].iter().map(|v| v.max(0.0)));
        }
        let mut value_logits = Vec::new();
        value_out.forward(&value_hidden, batch, &mut value_logits);
        HostOutputs {
            policy_logits,
            value_logits,
        }
    }
}

impl HostInference for HostMlp {
    fn obs_len(&self) -> usize {
        self.obs_len
    }

    fn latent_dim(&self) -> usize {
        self.latent_dim
    }

    fn splits(&self) -> bool {
        self.split
    }

    fn initial_serial(&self, observations: &[f32]) -> (Vec<f32>, HostOutputs) {
        let latents = self.represent(observations);
        let outputs = self.predict(&latents);
        (latents, outputs)
    }

    fn recurrent_serial(
        &self,
        latents: &[f32],
        actions: &[usize],
    ) -> Result<HostStep, NetworkError> {
        let (next, reward_logits) = self.dynamics(latents, actions)?;
        let outputs = self.predict(&next);
        Ok(HostStep {
            latents: next,
            reward_logits,
            outputs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::host_inference::SPLIT_ROWS;
    use crate::support::Support;
    use candle_core::Device;

    fn spec(blocks: usize) -> NetworkSpec {
        NetworkSpec {
            hidden_dim: 12,
            latent_dim: 7,
            num_blocks: blocks,
            value_support: Support::symmetric(4),
            ..crate::testing::specs::tiny_spec(vec![5], 3)
        }
    }

    fn close(a: &[f32], b: &Tensor, what: &str) {
        let b = b.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(a.len(), b.len(), "{what}: lengths");
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!(
                (x - y).abs() <= 1e-4 * (1.0 + y.abs()),
                "{what}[{i}]: host {x} vs candle {y}"
            );
        }
    }

    #[test]
    fn host_inference_equals_the_candle_network() {
        for blocks in [0, 1, 2] {
            let net = MuZeroNetwork::new(spec(blocks), 5, &Device::Cpu, DType::F32).unwrap();
            // Move the zero-initialised heads so that every layer matters.
            let tensors = net
                .params()
                .to_tensors()
                .unwrap()
                .into_iter()
                .map(|(k, v)| {
                    let noise = (v.ones_like().unwrap() * 0.05).unwrap();
                    (k, (v + noise).unwrap())
                })
                .collect();
            let net = MuZeroNetwork::from_tensors(spec(blocks), tensors, &Device::Cpu, DType::F32)
                .unwrap();
            assert!(HostMlp::supports(&net));
            let host = HostMlp::new(&net).unwrap();
            let batch = 4;
            let obs: Vec<f32> = (0..batch * 5)
                .map(|i| (i as f32 * 0.71).sin() * 2.0)
                .collect();
            let latent = host.represent(&obs);
            let want_latent = net
                .represent(&net.observation_tensor(&obs).unwrap())
                .unwrap();
            close(&latent, &want_latent, "latent");
            let out = host.predict(&latent);
            let (policy, value) = net.predict(&want_latent).unwrap();
            close(&out.policy_logits, &policy, "policy");
            close(&out.value_logits, &value, "value");
            let actions = [2, 0, 1, 2];
            let (next, reward) = host.dynamics(&latent, &actions).unwrap();
            assert!(
                host.dynamics(&latent, &[0, 1, 3, 0]).is_err(),
                "action 3 of 3"
            );
            let (want_next, want_reward) = net
                .dynamics(&want_latent, &net.action_tensor(&actions).unwrap())
                .unwrap();
            close(&next, &want_next, "next latent");
            close(&reward, &want_reward, "reward");
        }
    }

    #[test]
    fn a_large_batch_split_in_halves_equals_its_rows_one_by_one() {
        let net = MuZeroNetwork::new(spec(1), 6, &Device::Cpu, DType::F32).unwrap();
        let host = HostMlp::new(&net).unwrap();
        let batch = SPLIT_ROWS + 3;
        let obs: Vec<f32> = (0..batch * 5).map(|i| (i as f32 * 0.29).sin()).collect();
        let (latents, first) = host.initial(&obs);
        let l = host.latent_dim();
        for row in [0, batch / 2, batch - 1] {
            let (one, out) = host.initial(&obs[row * 5..(row + 1) * 5]);
            assert_eq!(one.len(), l);
            for (a, b) in one.iter().zip(&latents[row * l..(row + 1) * l]) {
                assert!((a - b).abs() < 1e-5, "initial row {row}: {a} vs {b}");
            }
            let p = out.policy_logits.len();
            for (a, b) in out
                .policy_logits
                .iter()
                .zip(&first.policy_logits[row * p..])
            {
                assert!((a - b).abs() < 1e-5, "initial row {row}: {a} vs {b}");
            }
        }
        let actions: Vec<usize> = (0..batch).map(|i| i % 3).collect();
        let step = host.recurrent(&latents, &actions).unwrap();
        for row in [0, batch / 2 - 1, batch / 2, batch - 1] {
            let one = host
                .recurrent(&latents[row * l..(row + 1) * l], &actions[row..=row])
                .unwrap();
            for (a, b) in one
                .latents
                .iter()
                .zip(&step.latents[row * l..(row + 1) * l])
            {
                assert!((a - b).abs() < 1e-5, "row {row}: {a} vs {b}");
            }
            let v = one.outputs.value_logits.len();
            for (a, b) in one
                .outputs
                .value_logits
                .iter()
                .zip(&step.outputs.value_logits[row * v..(row + 1) * v])
            {
                assert!((a - b).abs() < 1e-5, "row {row}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn conv_networks_and_bf16_compute_keep_the_tensor_path() {
        let conv = NetworkSpec {
            observation_shape: vec![2, 3, 3],
            ..spec(1)
        };
        let net = MuZeroNetwork::new(conv, 1, &Device::Cpu, DType::F32).unwrap();
        assert!(!HostMlp::supports(&net));
        assert!(HostMlp::new(&net).is_err());
        let half = MuZeroNetwork::new(spec(1), 1, &Device::Cpu, DType::BF16).unwrap();
        assert!(!HostMlp::supports(&half));
    }
}
