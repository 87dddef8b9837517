//! The unrolled loss of [`super::loss`] and its gradients, for MLP networks computing in f32
//! on the CPU, on plain host buffers: a forward pass that keeps what the backward pass needs,
//! then the backward pass written out by hand, layer by layer.
//!
//! At the default sizes (batch 128, K = 5, layers 64 wide) a training step through candle is
//! about 2,000 tensors, each with its allocation, dispatch and autograd bookkeeping, around
//! roughly 100 MFLOP of arithmetic. Here a step is the same matrix products (`gemm`) and
//! element-wise loops over buffers, and nothing else. It computes the same function as
//! [`super::loss::unrolled_loss_with`] (same layers, same masks and weights, the gradient into
//! the dynamics halved), to float rounding (tested against it parameter by parameter). The
//! consistency loss, other dtypes and CUDA keep the tensor path ([`supports`]). The unroll
//! (`rows_loss`) drives any network that implements `UnrollNetworks`: the conv networks'
//! implementation is in [`super::host_conv_loss`].

use std::collections::HashMap;

use candle_core::{Device, Tensor};

use super::loss::LossValues;
use crate::network::fused::{
    dot, layer_norm_backward_rows, layer_norm_rows, row_log_sum_exp, row_min_max, sum,
};
use crate::network::host_mlp::{
    gemm_strided, host_values, min_max_scale, relu as relu_in_place, HostMlp, Weights,
};
use crate::network::{MuZeroNetwork, NetworkError};
use crate::replay::Batch;
use crate::threads::side_by_side;

const LAYER_NORM_EPS: f32 = 1e-5;
/// Added to `max - min` by the latent's min-max scaling (as `layers::min_max_scale`).
const MIN_MAX_EPS: f32 = 1e-5;
/// The gradient entering the dynamics is scaled by this (MuZero's appendix G).
const DYNAMICS_GRADIENT_SCALE: f32 = 0.5;

/// Whether [`host_unrolled_loss`] computes the loss of `network` with a consistency loss of
/// `consistency_weight`: MLP networks computing in f32 on the CPU (with the CPU fast paths
/// on), without the consistency loss (it needs the projection heads, which stay on tensors).
pub fn supports(network: &MuZeroNetwork, consistency_weight: f64) -> bool {
    HostMlp::supports(network) && (consistency_weight <= 0.0 || network.spec().projection_dim == 0)
}

/// The loss values of one batch and the gradients of the total, per parameter.
pub struct HostLoss {
    /// As [`super::loss::LossOutput::read`] gives them (`extra` empty).
    pub values: LossValues,
    /// In the network's parameter order; `None` for parameters the loss does not reach (the
    /// projection heads).
    pub gradients: Vec<Option<Tensor>>,
}

/// `y = x W^T + b` with `W` `[out, in]` as stored, and its gradients.
#[derive(Clone)]
pub(super) struct Linear {
    name: String,
    weight: Vec<f32>,
    bias: Vec<f32>,
    inputs: usize,
    outputs: usize,
    grad_weight: Vec<f32>,
    grad_bias: Vec<f32>,
}

impl Linear {
    pub(super) fn load(params: &Weights, name: &str) -> Result<Self, NetworkError> {
        let weight_name = format!("{name}.weight");
        let weight = params.get(&weight_name)?;
        let (outputs, inputs) = weight.dims2()?;
        let weight = host_values(weight)?;
        let bias = host_values(params.get(&format!("{name}.bias"))?)?;
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

    /// `x`: `[rows, inputs]` -> `[rows, outputs]`.
    pub(super) fn forward(&self, x: &[f32], rows: usize) -> Vec<f32> {
        let mut out = Vec::with_capacity(rows * self.outputs);
        for _ in 0..rows {
            out.extend_from_slice(&self.bias);
        }
        // B[p, j] = W[j, p]: row stride 1, column stride `inputs`.
        gemm_strided(
            rows,
            self.outputs,
            self.inputs,
            (x, self.inputs, 1),
            (&self.weight, 1, self.inputs),
            &mut out,
            true,
        );
        out
    }

    /// Adds the gradients of `W` and `b` for input `x` and output gradient `dy`; returns the
    /// input's gradient when `want_input`.
    pub(super) fn backward(
        &mut self,
        x: &[f32],
        dy: &[f32],
        rows: usize,
        want_input: bool,
    ) -> Vec<f32> {
        // dW[o, i] += sum_r dy[r, o] x[r, i]: A = dy^T (row stride 1, column stride outputs).
        gemm_strided(
            self.outputs,
            self.inputs,
            rows,
            (dy, 1, self.outputs),
            (x, self.inputs, 1),
            &mut self.grad_weight,
            true,
        );
        for row in dy.chunks_exact(self.outputs) {
            for (g, d) in self.grad_bias.iter_mut().zip(row) {
                *g += d;
            }
        }
        if !want_input {
            return Vec::new();
        }
        let mut dx = vec![0f32; rows * self.inputs];
        gemm_strided(
            rows,
            self.inputs,
            self.outputs,
            (dy, self.outputs, 1),
            (&self.weight, self.inputs, 1),
            &mut dx,
            false,
        );
        dx
    }

    pub(super) fn gradients(self, out: &mut HashMap<String, Vec<f32>>) {
        out.insert(format!("{}.weight", self.name), self.grad_weight);
        out.insert(format!("{}.bias", self.name), self.grad_bias);
    }
}

/// Layer norm with a learned scale and shift, and their gradients.
#[derive(Clone)]
struct Norm {
    name: String,
    gamma: Vec<f32>,
    beta: Vec<f32>,
    grad_gamma: Vec<f32>,
    grad_beta: Vec<f32>,
}

impl Norm {
    fn load(params: &Weights, name: &str) -> Result<Self, NetworkError> {
        let gamma = host_values(params.get(&format!("{name}.weight"))?)?;
        let beta = host_values(params.get(&format!("{name}.bias"))?)?;
        Ok(Self {
            name: name.to_string(),
            grad_gamma: vec![0.0; gamma.len()],
            grad_beta: vec![0.0; beta.len()],
            gamma,
            beta,
        })
    }

    fn forward(&self, z: &[f32]) -> Vec<f32> {
        let mut out = vec![0f32; z.len()];
        layer_norm_rows(z, &self.gamma, &self.beta, LAYER_NORM_EPS, &mut out);
        out
    }

    /// The input's gradient for input `z` and output gradient `dy` (adds the scale's and
    /// shift's).
    fn backward(&mut self, z: &[f32], dy: &[f32]) -> Vec<f32> {
        let mut dz = vec![0f32; z.len()];
        layer_norm_backward_rows(
            dy,
            z,
            &self.gamma,
            LAYER_NORM_EPS,
            &mut dz,
            &mut self.grad_gamma,
            &mut self.grad_beta,
        );
        dz
    }

    fn gradients(self, out: &mut HashMap<String, Vec<f32>>) {
        out.insert(format!("{}.weight", self.name), self.grad_gamma);
        out.insert(format!("{}.bias", self.name), self.grad_beta);
    }
}

/// `grad` zeroed where the ReLU's output `out` is not positive.
pub(super) fn relu_backward(out: &[f32], grad: &mut [f32]) {
    for (g, &o) in grad.iter_mut().zip(out) {
        if o <= 0.0 {
            *g = 0.0;
        }
    }
}

pub(super) fn add_into(dst: &mut [f32], src: &[f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d += s;
    }
}

/// `Linear -> LayerNorm -> ReLU`, then residual blocks `relu(x + LN(W2 relu(LN(W1 x))))`
/// (`layers::Trunk`).
#[derive(Clone)]
struct Trunk {
    input: (Linear, Norm),
    blocks: Vec<Block>,
}

#[derive(Clone)]
struct Block {
    first: Linear,
    first_norm: Norm,
    second: Linear,
    norm: Norm,
}

/// What one trunk call keeps for its backward pass (its input is kept by the caller).
struct TrunkTrace {
    /// The input layer's product, before its norm.
    z: Vec<f32>,
    /// The input layer's output (after the ReLU).
    a: Vec<f32>,
    blocks: Vec<BlockTrace>,
}

struct BlockTrace {
    z1: Vec<f32>,
    f: Vec<f32>,
    z2: Vec<f32>,
    out: Vec<f32>,
}

impl TrunkTrace {
    fn output(&self) -> &[f32] {
        self.blocks.last().map_or(&self.a, |b| &b.out)
    }
}

impl Trunk {
    fn load(params: &Weights, name: &str, num_blocks: usize) -> Result<Self, NetworkError> {
        let input = (
            Linear::load(params, &format!("{name}.input.linear"))?,
            Norm::load(params, &format!("{name}.input.norm"))?,
        );
        let blocks = (0..num_blocks)
            .map(|i| {
                let block = format!("{name}.block{i}");
                Ok(Block {
                    first: Linear::load(params, &format!("{block}.first.linear"))?,
                    first_norm: Norm::load(params, &format!("{block}.first.norm"))?,
                    second: Linear::load(params, &format!("{block}.second"))?,
                    norm: Norm::load(params, &format!("{block}.norm"))?,
                })
            })
            .collect::<Result<_, NetworkError>>()?;
        Ok(Self { input, blocks })
    }

    fn forward(&self, x: &[f32], rows: usize) -> TrunkTrace {
        let z = self.input.0.forward(x, rows);
        let mut a = self.input.1.forward(&z);
        relu_in_place(&mut a);
        let mut blocks: Vec<BlockTrace> = Vec::with_capacity(self.blocks.len());
        for block in &self.blocks {
            let input = blocks.last().map_or(&a, |b| &b.out);
            let z1 = block.first.forward(input, rows);
            let mut f = block.first_norm.forward(&z1);
            relu_in_place(&mut f);
            let z2 = block.second.forward(&f, rows);
            let mut out = block.norm.forward(&z2);
            for (o, x) in out.iter_mut().zip(input) {
                *o = (*o + x).max(0.0);
            }
            blocks.push(BlockTrace { z1, f, z2, out });
        }
        TrunkTrace { z, a, blocks }
    }

    /// Adds every parameter's gradient for input `x` and output gradient `dout`; returns the
    /// input's gradient when `want_input`.
    fn backward(
        &mut self,
        x: &[f32],
        trace: &TrunkTrace,
        mut dout: Vec<f32>,
        rows: usize,
        want_input: bool,
    ) -> Vec<f32> {
        for (i, block) in self.blocks.iter_mut().enumerate().rev() {
            let t = &trace.blocks[i];
            let input = if i == 0 {
                &trace.a
            } else {
                &trace.blocks[i - 1].out
            };
            // out = relu(input + LN(z2)): the ReLU's gradient reaches both summands.
            relu_backward(&t.out, &mut dout);
            let dz2 = block.norm.backward(&t.z2, &dout);
            let mut df = block.second.backward(&t.f, &dz2, rows, true);
            relu_backward(&t.f, &mut df);
            let dz1 = block.first_norm.backward(&t.z1, &df);
            let dinput = block.first.backward(input, &dz1, rows, true);
            add_into(&mut dout, &dinput);
        }
        relu_backward(&trace.a, &mut dout);
        let dz = self.input.1.backward(&trace.z, &dout);
        self.input.0.backward(x, &dz, rows, want_input)
    }

    fn gradients(self, out: &mut HashMap<String, Vec<f32>>) {
        self.input.0.gradients(out);
        self.input.1.gradients(out);
        for block in self.blocks {
            block.first.gradients(out);
            block.first_norm.gradients(out);
            block.second.gradients(out);
            block.norm.gradients(out);
        }
    }
}

/// The gradient of [`min_max_scale`]'s input `u`, given its output `y` and the output's
/// gradient `dy`. As candle's `min`/`max` do, every element equal to the row's minimum
/// (maximum) receives the minimum's (maximum's) whole gradient.
pub(super) fn min_max_scale_backward(u: &[f32], y: &[f32], dy: &[f32], width: usize) -> Vec<f32> {
    let mut du = vec![0f32; u.len()];
    for ((u, y), (dy, du)) in u
        .chunks_exact(width)
        .zip(y.chunks_exact(width))
        .zip(dy.chunks_exact(width).zip(du.chunks_exact_mut(width)))
    {
        let (min, max) = row_min_max(u);
        let scale = max - min + MIN_MAX_EPS;
        // y = (u - min) / scale: d/dmin = (y - 1) / scale, d/dmax = -y / scale.
        let dyy = dot(dy, y);
        let (dmin, dmax) = ((dyy - sum(dy)) / scale, -dyy / scale);
        for j in 0..width {
            // Branch-free (masks), so that the loop vectorises.
            let at_min = u32::from(u[j] == min).wrapping_neg();
            let at_max = u32::from(u[j] == max).wrapping_neg();
            du[j] = dy[j] / scale
                + f32::from_bits(dmin.to_bits() & at_min)
                + f32::from_bits(dmax.to_bits() & at_max);
        }
    }
    du
}

/// For each row, the soft-target cross-entropy `-sum_j t_j log_softmax(l)_j` into `losses`,
/// and its gradient times `coefficients[row]` into `dlogits`.
fn soft_cross_entropy(
    logits: &[f32],
    targets: &[f32],
    width: usize,
    coefficients: &[f32],
    losses: &mut [f32],
    dlogits: &mut [f32],
) {
    for (((row, t), (loss, c)), d) in logits
        .chunks_exact(width)
        .zip(targets.chunks_exact(width))
        .zip(losses.iter_mut().zip(coefficients))
        .zip(dlogits.chunks_exact_mut(width))
    {
        let (_, lse) = row_log_sum_exp(row);
        let mass: f32 = t.iter().sum();
        *loss = row.iter().zip(t).map(|(l, t)| t * (lse - l)).sum();
        for j in 0..width {
            d[j] = c * (crate::fast_exp::exp(row[j] - lse) * mass - t[j]);
        }
    }
}

/// A head on a trunk's output: `second(relu(first(h)))`.
#[derive(Clone)]
pub(super) struct Head {
    first: Linear,
    second: Linear,
}

pub(super) struct HeadTrace {
    /// `relu(first(h))`.
    hidden: Vec<f32>,
    pub(super) logits: Vec<f32>,
}

impl Head {
    pub(super) fn load(params: &Weights, first: &str, second: &str) -> Result<Self, NetworkError> {
        Ok(Self {
            first: Linear::load(params, first)?,
            second: Linear::load(params, second)?,
        })
    }

    pub(super) fn forward(&self, h: &[f32], rows: usize) -> HeadTrace {
        let mut hidden = self.first.forward(h, rows);
        relu_in_place(&mut hidden);
        let logits = self.second.forward(&hidden, rows);
        HeadTrace { hidden, logits }
    }

    /// The gradient of `h` from the logits' gradient `dlogits`.
    pub(super) fn backward(
        &mut self,
        h: &[f32],
        trace: &HeadTrace,
        dlogits: &[f32],
        rows: usize,
    ) -> Vec<f32> {
        let mut dhidden = self.second.backward(&trace.hidden, dlogits, rows, true);
        relu_backward(&trace.hidden, &mut dhidden);
        self.first.backward(h, &dhidden, rows, true)
    }

    pub(super) fn gradients(self, out: &mut HashMap<String, Vec<f32>>) {
        self.first.gradients(out);
        self.second.gradients(out);
    }
}

/// The three MLP networks with gradient buffers.
#[derive(Clone)]
struct Networks {
    latent_dim: usize,
    num_actions: usize,
    representation: (Trunk, Linear),
    /// Trunk, `latent_out`, reward head.
    dynamics: (Trunk, Linear, Head),
    /// Trunk, `policy_out`, value head.
    prediction: (Trunk, Linear, Head),
}

/// What the representation or a dynamics call keeps: its input, trunk, pre-scaling latent
/// and the scaled latent.
struct LatentTrace {
    input: Vec<f32>,
    trunk: TrunkTrace,
    unscaled: Vec<f32>,
    latent: Vec<f32>,
}

struct PredictionTrace {
    trunk: TrunkTrace,
    policy_logits: Vec<f32>,
    value: HeadTrace,
}

impl Networks {
    fn load(network: &MuZeroNetwork) -> Result<Self, NetworkError> {
        let spec = network.spec();
        let tensors = network.params().tensors_by_name();
        let params = Weights(&tensors);
        let blocks = spec.num_blocks;
        Ok(Self {
            latent_dim: spec.latent_dim,
            num_actions: spec.num_actions,
            representation: (
                Trunk::load(&params, "representation.trunk", blocks)?,
                Linear::load(&params, "representation.out")?,
            ),
            dynamics: (
                Trunk::load(&params, "dynamics.trunk", blocks)?,
                Linear::load(&params, "dynamics.latent_out")?,
                Head::load(&params, "dynamics.reward_hidden", "dynamics.reward_out")?,
            ),
            prediction: (
                Trunk::load(&params, "prediction.trunk", blocks)?,
                Linear::load(&params, "prediction.policy_out")?,
                Head::load(&params, "prediction.value_hidden", "prediction.value_out")?,
            ),
        })
    }
}

/// The three networks on host buffers with their gradient buffers, as the unrolled loss
/// ([`rows_loss`]) drives them: the MLP networks here, the conv ones in
/// `super::host_conv_loss`. Traces keep what each call's backward pass needs.
pub(super) trait UnrollNetworks {
    /// What the representation or a dynamics call keeps (the latent it made among it).
    type Latent;
    /// What a prediction call keeps.
    type Prediction;

    /// The latent state a representation or dynamics call made.
    fn latent(trace: &Self::Latent) -> &[f32];
    /// The policy logits and the value logits of a prediction.
    fn logits(trace: &Self::Prediction) -> (&[f32], &[f32]);
    /// The representation of `rows` (scaled) observations.
    fn represent(&self, observations: Vec<f32>, rows: usize) -> Self::Latent;
    /// The dynamics from `latent` with `actions` (checked against the action count); the
    /// reward head's trace beside it.
    fn dynamics(
        &self,
        latent: &[f32],
        actions: &[usize],
    ) -> Result<(Self::Latent, HeadTrace), NetworkError>;
    fn predict(&self, latent: &[f32], rows: usize) -> Self::Prediction;
    /// The latent's gradient from the prediction's logit gradients.
    fn predict_backward(
        &mut self,
        latent: &[f32],
        trace: &Self::Prediction,
        dpolicy: &[f32],
        dvalue: &[f32],
        rows: usize,
    ) -> Vec<f32>;
    /// The input latent's gradient (before the dynamics' gradient scale) from the next
    /// latent's gradient and the reward logits' gradient.
    fn dynamics_backward(
        &mut self,
        trace: &Self::Latent,
        reward: &HeadTrace,
        dlatent: &[f32],
        dreward: &[f32],
        rows: usize,
    ) -> Vec<f32>;
    fn representation_backward(&mut self, trace: &Self::Latent, dlatent: &[f32], rows: usize);
    /// Every parameter's gradient by name.
    fn gradients(self) -> HashMap<String, Vec<f32>>;
}

impl UnrollNetworks for Networks {
    type Latent = LatentTrace;
    type Prediction = PredictionTrace;

    fn latent(trace: &LatentTrace) -> &[f32] {
        &trace.latent
    }

    fn logits(trace: &PredictionTrace) -> (&[f32], &[f32]) {
        (&trace.policy_logits, &trace.value.logits)
    }

    fn represent(&self, observations: Vec<f32>, rows: usize) -> LatentTrace {
        let (trunk, out) = &self.representation;
        let trace = trunk.forward(&observations, rows);
        let unscaled = out.forward(trace.output(), rows);
        let mut latent = unscaled.clone();
        min_max_scale(&mut latent, self.latent_dim);
        LatentTrace {
            input: observations,
            trunk: trace,
            unscaled,
            latent,
        }
    }

    fn dynamics(
        &self,
        latent: &[f32],
        actions: &[usize],
    ) -> Result<(LatentTrace, HeadTrace), NetworkError> {
        let (l, a, rows) = (self.latent_dim, self.num_actions, actions.len());
        let mut input = Vec::with_capacity(rows * (l + a));
        for (row, &action) in latent.chunks_exact(l).zip(actions) {
            if action >= a {
                return Err(NetworkError::ActionOutOfRange {
                    action,
                    num_actions: a,
                });
            }
            input.extend_from_slice(row);
            input.extend((0..a).map(|j| if j == action { 1.0 } else { 0.0 }));
        }
        let (trunk, latent_out, reward) = &self.dynamics;
        let trace = trunk.forward(&input, rows);
        let unscaled = latent_out.forward(trace.output(), rows);
        let mut next = unscaled.clone();
        min_max_scale(&mut next, l);
        let reward = reward.forward(trace.output(), rows);
        Ok((
            LatentTrace {
                input,
                trunk: trace,
                unscaled,
                latent: next,
            },
            reward,
        ))
    }

    fn predict(&self, latent: &[f32], rows: usize) -> PredictionTrace {
        let (trunk, policy_out, value) = &self.prediction;
        let trace = trunk.forward(latent, rows);
        let policy_logits = policy_out.forward(trace.output(), rows);
        let value = value.forward(trace.output(), rows);
        PredictionTrace {
            trunk: trace,
            policy_logits,
            value,
        }
    }

    fn predict_backward(
        &mut self,
        latent: &[f32],
        trace: &PredictionTrace,
        dpolicy: &[f32],
        dvalue: &[f32],
        rows: usize,
    ) -> Vec<f32> {
        let (trunk, policy_out, value) = &mut self.prediction;
        let h = trace.trunk.output();
        let mut dh = policy_out.backward(h, dpolicy, rows, true);
        add_into(&mut dh, &value.backward(h, &trace.value, dvalue, rows));
        trunk.backward(latent, &trace.trunk, dh, rows, true)
    }

    fn dynamics_backward(
        &mut self,
        trace: &LatentTrace,
        reward: &HeadTrace,
        dlatent: &[f32],
        dreward: &[f32],
        rows: usize,
    ) -> Vec<f32> {
        let l = self.latent_dim;
        let (trunk, latent_out, reward_head) = &mut self.dynamics;
        let h = trace.trunk.output();
        let dunscaled = min_max_scale_backward(&trace.unscaled, &trace.latent, dlatent, l);
        let mut dh = latent_out.backward(h, &dunscaled, rows, true);
        add_into(&mut dh, &reward_head.backward(h, reward, dreward, rows));
        let dinput = trunk.backward(&trace.input, &trace.trunk, dh, rows, true);
        let width = l + self.num_actions;
        dinput
            .chunks_exact(width)
            .flat_map(|row| row[..l].iter().copied())
            .collect()
    }

    fn representation_backward(&mut self, trace: &LatentTrace, dlatent: &[f32], rows: usize) {
        let (trunk, out) = &mut self.representation;
        let dunscaled =
            min_max_scale_backward(&trace.unscaled, &trace.latent, dlatent, self.latent_dim);
        let dh = out.backward(trace.trunk.output(), &dunscaled, rows, true);
        trunk.backward(&trace.input, &trace.trunk, dh, rows, false);
    }

    fn gradients(self) -> HashMap<String, Vec<f32>> {
        let mut out = HashMap::new();
        self.representation.0.gradients(&mut out);
        self.representation.1.gradients(&mut out);
        self.dynamics.0.gradients(&mut out);
        self.dynamics.1.gradients(&mut out);
        self.dynamics.2.gradients(&mut out);
        self.prediction.0.gradients(&mut out);
        self.prediction.1.gradients(&mut out);
        self.prediction.2.gradients(&mut out);
        out
    }
}

/// The rows of step `k` of a `[B, K+1, n]` sample-major array.
fn step_rows(data: &[f32], b: usize, steps: usize, k: usize, n: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(b * n);
    for i in 0..b {
        let at = (i * steps + k) * n;
        out.extend_from_slice(&data[at..at + n]);
    }
    out
}

/// Batches of at least this many rows run as two halves side by side (rayon), a fixed split
/// whatever the number of threads, so a seed gives the same result on any machine.
const SPLIT_ROWS: usize = 64;

/// [`super::loss::unrolled_loss`] of `batch` with `target_values` (`[B * (K+1)]`) and its
/// gradients, on host buffers. `network` must be one [`supports`] accepts.
pub fn host_unrolled_loss(
    network: &MuZeroNetwork,
    batch: &Batch,
    target_values: &[f32],
    value_loss_weight: f64,
) -> Result<HostLoss, NetworkError> {
    if !HostMlp::supports(network) {
        return Err(NetworkError::Candle(candle_core::Error::Msg(
            "host training needs an MLP network computing in f32 on the CPU".into(),
        )));
    }
    let nets = Networks::load(network)?;
    let b = batch.batch_size;
    let (values, by_name) = match batch.split(2).filter(|_| b >= SPLIT_ROWS) {
        Some(halves) => {
            let (first_targets, second_targets) =
                target_values.split_at(b / 2 * (batch.num_unroll_steps + 1));
            let second_nets = nets.clone();
            let (first, second) = side_by_side(
                || {
                    rows_loss(
                        network,
                        nets,
                        &halves[0],
                        first_targets,
                        value_loss_weight,
                        b,
                    )
                },
                || {
                    rows_loss(
                        network,
                        second_nets,
                        &halves[1],
                        second_targets,
                        value_loss_weight,
                        b,
                    )
                },
            );
            let mut sum = first?;
            add_rows(&mut sum, second?);
            sum
        }
        None => rows_loss(network, nets, batch, target_values, value_loss_weight, b)?,
    };
    in_parameter_order(network, values, by_name)
}

/// The loss and gradients of a batch's rows, as [`rows_loss`] gives them.
pub(super) type RowsLoss = (LossValues, HashMap<String, Vec<f32>>);

/// Adds the loss of the rows that follow `sum`'s into it: the values, the priorities after
/// `sum`'s, the gradients by name.
pub(super) fn add_rows(sum: &mut RowsLoss, (more, more_grads): RowsLoss) {
    let (values, grads) = sum;
    values.total += more.total;
    values.value += more.value;
    values.reward += more.reward;
    values.policy += more.policy;
    values.priorities.extend(more.priorities);
    for (name, g) in more_grads {
        if let Some(sum) = grads.get_mut(&name) {
            add_into(sum, &g);
        }
    }
}

/// The gradients by name as tensors in `network`'s parameter order (`None` for a parameter
/// without one).
pub(super) fn in_parameter_order(
    network: &MuZeroNetwork,
    values: LossValues,
    mut by_name: HashMap<String, Vec<f32>>,
) -> Result<HostLoss, NetworkError> {
    let gradients = network
        .params()
        .named()
        .map(|(name, var)| match by_name.remove(name) {
            Some(g) => Ok(Some(Tensor::from_vec(g, var.shape(), &Device::Cpu)?)),
            None => Ok(None),
        })
        .collect::<Result<_, NetworkError>>()?;
    Ok(HostLoss { values, gradients })
}

/// The loss of `batch`'s rows, each weighted `weight / divisor` (the whole batch's size), and
/// its gradients by parameter name.
pub(super) fn rows_loss<N: UnrollNetworks>(
    network: &MuZeroNetwork,
    mut nets: N,
    batch: &Batch,
    target_values: &[f32],
    value_loss_weight: f64,
    divisor: usize,
) -> Result<RowsLoss, NetworkError> {
    let spec = network.spec();
    let (b, k_steps, a) = (batch.batch_size, batch.num_unroll_steps, batch.num_actions);
    let steps = k_steps + 1;
    let (vs, rs) = (spec.value_support.size(), spec.reward_support.size());
    let value_probs = spec.value_support.scalars_to_probs(target_values);
    let reward_probs = spec.reward_support.scalars_to_probs(&batch.target_rewards);
    let value_weight = value_loss_weight as f32;

    // Forward, with each head's loss and its logit gradient as soon as its logits exist.
    let mut latents: Vec<N::Latent> = Vec::with_capacity(steps);
    let mut rewards: Vec<HeadTrace> = Vec::with_capacity(k_steps);
    let mut predictions: Vec<N::Prediction> = Vec::with_capacity(steps);
    let mut dvalue: Vec<Vec<f32>> = Vec::with_capacity(steps);
    let mut dpolicy: Vec<Vec<f32>> = Vec::with_capacity(steps);
    let mut dreward: Vec<Vec<f32>> = Vec::with_capacity(k_steps);
    let (mut value_part, mut reward_part, mut policy_part) = (0f64, 0f64, 0f64);
    let mut total = 0f64;
    for k in 0..steps {
        let scale = if k == 0 { 1.0 } else { 1.0 / k_steps as f32 };
        // Each row's weight in the total at this step, before the head's weight and mask.
        let row_weights: Vec<f32> = batch
            .weights
            .iter()
            .map(|w| w / divisor as f32 * scale)
            .collect();
        let value_mask = step_rows(&batch.value_mask, b, steps, k, 1);
        let policy_mask = step_rows(&batch.policy_mask, b, steps, k, 1);
        // One head's loss at this step: its logits' gradient, and its masked mean (scaled as
        // the step's losses are) added to `part`.
        let mut head =
            |logits: &[f32], targets: Vec<f32>, mask: &[f32], weight: f32, part: &mut f64| {
                let loss = head_loss(logits, &targets, mask, &row_weights, weight);
                *part += f64::from(scale) * loss.masked_sum / divisor as f64;
                total += loss.weighted_sum;
                loss.dlogits
            };
        if k == 0 {
            let observations = spec.scale_observations(&batch.observations).into_owned();
            latents.push(nets.represent(observations, b));
        } else {
            let actions: Vec<usize> = (0..b).map(|i| batch.actions[i * k_steps + k - 1]).collect();
            let (trace, reward) = nets.dynamics(N::latent(&latents[k - 1]), &actions)?;
            latents.push(trace);
            let targets = step_rows(&reward_probs, b, steps, k, rs);
            dreward.push(head(
                &reward.logits,
                targets,
                &value_mask,
                1.0,
                &mut reward_part,
            ));
            rewards.push(reward);
        }
        let prediction = nets.predict(N::latent(&latents[k]), b);
        let (policy_logits, value_logits) = N::logits(&prediction);
        let targets = step_rows(&value_probs, b, steps, k, vs);
        dvalue.push(head(
            value_logits,
            targets,
            &value_mask,
            value_weight,
            &mut value_part,
        ));
        let targets = step_rows(&batch.target_policies, b, steps, k, a);
        dpolicy.push(head(
            policy_logits,
            targets,
            &policy_mask,
            1.0,
            &mut policy_part,
        ));
        predictions.push(prediction);
    }
    let first_values = spec
        .value_support
        .logits_to_scalars(N::logits(&predictions[0]).1);
    let priorities = first_values
        .iter()
        .enumerate()
        .map(|(i, v)| (v - target_values[i * steps]).abs())
        .collect();

    // Backward: from the last step to the first, the latent's gradient gathering the
    // prediction's and (halved) the next dynamics call's.
    let mut from_next: Option<Vec<f32>> = None;
    for k in (0..steps).rev() {
        let mut dlatent = nets.predict_backward(
            N::latent(&latents[k]),
            &predictions[k],
            &dpolicy[k],
            &dvalue[k],
            b,
        );
        if let Some(next) = from_next.take() {
            add_into(&mut dlatent, &next);
        }
        if k > 0 {
            let mut dprevious =
                nets.dynamics_backward(&latents[k], &rewards[k - 1], &dlatent, &dreward[k - 1], b);
            for v in &mut dprevious {
                *v *= DYNAMICS_GRADIENT_SCALE;
            }
            from_next = Some(dprevious);
        } else {
            nets.representation_backward(&latents[0], &dlatent, b);
        }
    }

    let values = LossValues {
        total: total as f32,
        value: value_part as f32,
        reward: reward_part as f32,
        policy: policy_part as f32,
        consistency: 0.0,
        priorities,
        extra: Vec::new(),
    };
    Ok((values, nets.gradients()))
}

/// One head's soft cross-entropy at one unroll step.
struct HeadLoss {
    /// The gradient of the weighted total with respect to the logits.
    dlogits: Vec<f32>,
    /// `sum_i loss_i * mask_i` (for the logged per-head mean).
    masked_sum: f64,
    /// `sum_i loss_i * row_weight_i * weight * mask_i`: the contribution to the total.
    weighted_sum: f64,
}

/// The soft cross-entropy of `logits` against `targets` (one row per entry of `mask`), each
/// row counting `row_weights[i] * weight * mask[i]` in the total.
fn head_loss(
    logits: &[f32],
    targets: &[f32],
    mask: &[f32],
    row_weights: &[f32],
    weight: f32,
) -> HeadLoss {
    let rows = mask.len();
    let width = logits.len() / rows.max(1);
    let coefficients: Vec<f32> = row_weights
        .iter()
        .zip(mask)
        .map(|(w, m)| w * weight * m)
        .collect();
    let mut losses = vec![0f32; rows];
    let mut dlogits = vec![0f32; logits.len()];
    soft_cross_entropy(
        logits,
        targets,
        width,
        &coefficients,
        &mut losses,
        &mut dlogits,
    );
    let (masked_sum, weighted_sum) = losses
        .iter()
        .zip(mask)
        .zip(&coefficients)
        .fold((0.0, 0.0), |(m, w), ((l, k), c)| {
            (m + f64::from(l * k), w + f64::from(l * c))
        });
    HeadLoss {
        dlogits,
        masked_sum,
        weighted_sum,
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::network::NetworkSpec;
    use candle_core::DType;
    use rand::SeedableRng;

    /// `testing::learner`'s network with `blocks` residual blocks, [`perturbed`].
    fn network(blocks: usize) -> MuZeroNetwork {
        let spec = NetworkSpec {
            num_blocks: blocks,
            ..crate::testing::specs::tiny_spec(vec![4], 2)
        };
        perturbed(&MuZeroNetwork::new(spec, 11, &Device::Cpu, DType::F32).unwrap())
    }

    /// `start` with every parameter moved by an amount of its own (fixed by its name) so that
    /// the zero-initialised heads matter and no two weights tie.
    pub(in crate::train) fn perturbed(start: &MuZeroNetwork) -> MuZeroNetwork {
        let tensors = start
            .params()
            .to_tensors()
            .unwrap()
            .into_iter()
            .map(|(name, t)| {
                // Seeded by the name, so that the network is the same in every process.
                let p: usize = name.bytes().map(usize::from).sum();
                let n = t.elem_count();
                let noise: Vec<f32> = (0..n)
                    .map(|i| 0.1 * ((i * 7 + p * 13) as f32 * 0.37).sin())
                    .collect();
                let noise = Tensor::from_vec(noise, t.shape(), &Device::Cpu).unwrap();
                (name, (t + noise).unwrap())
            })
            .collect();
        MuZeroNetwork::from_tensors(start.spec().clone(), tensors, &Device::Cpu, DType::F32)
            .unwrap()
    }

    pub(in crate::train) fn close(what: &str, host: f32, tensors: f32, tolerance: f32) {
        assert!(
            (host - tensors).abs() <= tolerance * (1.0 + tensors.abs()),
            "{what}: host {host} vs tensors {tensors}"
        );
    }

    /// `t`'s values, flattened.
    pub(in crate::train) fn flat(t: &Tensor) -> Vec<f32> {
        t.flatten_all().unwrap().to_vec1::<f32>().unwrap()
    }

    /// `host` (a host loss of `batch` with `targets` and value weight 0.25) against the tensor
    /// path's loss: the four loss parts (1e-5), the priorities (1e-4) and every parameter's
    /// gradient, each within `tolerance` of its largest value (`case` names the network in the
    /// messages); every parameter must have a gradient.
    pub(in crate::train) fn assert_equals_tensor_path(
        net: &MuZeroNetwork,
        batch: &Batch,
        targets: &[f32],
        host: &HostLoss,
        tolerance: f32,
        case: &str,
    ) {
        let want = crate::train::loss::unrolled_loss(net, batch, targets, 0.25).unwrap();
        let want_values = want.read(net, &[]).unwrap();
        let v = &host.values;
        close("total", v.total, want_values.total, 1e-5);
        close("value", v.value, want_values.value, 1e-5);
        close("reward", v.reward, want_values.reward, 1e-5);
        close("policy", v.policy, want_values.policy, 1e-5);
        assert_eq!(v.priorities.len(), want_values.priorities.len());
        for (a, b) in v.priorities.iter().zip(&want_values.priorities) {
            close("priority", *a, *b, 1e-4);
        }
        let grads = want.total.backward().unwrap();
        for ((name, var), host_grad) in net.params().named().zip(&host.gradients) {
            let want = flat(grads.get(var.as_tensor()).expect("every parameter has one"));
            let got = flat(
                host_grad
                    .as_ref()
                    .unwrap_or_else(|| panic!("{name}: no host gradient")),
            );
            assert_eq!(got.len(), want.len(), "{name}");
            let scale = want.iter().fold(0f32, |m, g| m.max(g.abs()));
            assert!(scale > 0.0, "{name}: no gradient at all");
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= tolerance * scale + 1e-7,
                    "{case}, {name}[{i}]: host {g} vs tensors {w} (largest {scale})"
                );
            }
        }
    }

    #[test]
    fn the_host_loss_and_its_gradients_equal_the_tensor_path() {
        let replay = crate::testing::learner::replay();
        // 64 rows run as two halves on two threads.
        for (blocks, rows) in [(0, 24), (1, 64), (2, 24)] {
            let net = network(blocks);
            assert!(supports(&net, 0.0));
            // Rows near the games' ends have masked steps; prioritised sampling gives unequal
            // importance weights.
            let batch = replay
                .sample(rows, &mut rand::rngs::StdRng::seed_from_u64(blocks as u64))
                .unwrap();
            assert!(batch.value_mask.contains(&0.0) && batch.policy_mask.contains(&0.0));
            assert!(batch.weights.iter().any(|&w| w < 0.99));
            let targets = batch.target_values.clone();
            let host = host_unrolled_loss(&net, &batch, &targets, 0.25).unwrap();
            assert_equals_tensor_path(
                &net,
                &batch,
                &targets,
                &host,
                1e-4,
                &format!("{blocks} blocks"),
            );
        }
    }

    #[test]
    fn the_projection_heads_get_no_host_gradient_and_an_action_out_of_range_is_an_error() {
        let spec = NetworkSpec {
            projection_dim: 6,
            ..crate::testing::specs::tiny_spec(vec![4], 2)
        };
        let net = MuZeroNetwork::new(spec, 3, &Device::Cpu, DType::F32).unwrap();
        assert!(supports(&net, 0.0) && !supports(&net, 1.0));
        let mut batch = crate::testing::learner::replay()
            .sample(8, &mut rand::rngs::StdRng::seed_from_u64(4))
            .unwrap();
        let host = host_unrolled_loss(&net, &batch, &batch.target_values, 0.25).unwrap();
        for ((name, _), g) in net.params().named().zip(&host.gradients) {
            assert_eq!(g.is_some(), !name.starts_with("projection."), "{name}");
        }
        batch.actions[3] = 2;
        let err = host_unrolled_loss(&net, &batch, &batch.target_values, 0.25)
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

    /// With an observation scale, the host loss of raw observations is the loss of the same
    /// network without the scale on scaled observations (values and every gradient), and the
    /// tensor loss agrees.
    #[test]
    fn the_observation_scale_reaches_the_host_loss() {
        let scale = vec![2.0, -0.5, 10.0, 1.0];
        let plain_spec = crate::testing::specs::tiny_spec(vec![4], 2);
        let plain = MuZeroNetwork::new(plain_spec.clone(), 5, &Device::Cpu, DType::F32).unwrap();
        let scaled = MuZeroNetwork::from_tensors(
            NetworkSpec {
                observation_scale: scale.clone(),
                ..plain_spec
            },
            plain.params().to_tensors().unwrap(),
            &Device::Cpu,
            DType::F32,
        )
        .unwrap();
        let batch = crate::testing::learner::replay()
            .sample(8, &mut rand::rngs::StdRng::seed_from_u64(3))
            .unwrap();
        let mut by_hand = batch.clone();
        for (i, x) in by_hand.observations.iter_mut().enumerate() {
            *x *= scale[i % 4];
        }
        let a = host_unrolled_loss(&scaled, &batch, &batch.target_values, 0.25).unwrap();
        let b = host_unrolled_loss(&plain, &by_hand, &batch.target_values, 0.25).unwrap();
        assert!((a.values.total - b.values.total).abs() < 1e-6);
        for (ga, gb) in a.gradients.iter().zip(&b.gradients) {
            let (ga, gb) = (ga.as_ref().unwrap(), gb.as_ref().unwrap());
            let diff = (ga - gb).unwrap().abs().unwrap().max_all().unwrap();
            assert!(diff.to_scalar::<f32>().unwrap() < 1e-6);
        }
        let tensors =
            crate::train::loss::unrolled_loss(&scaled, &batch, &batch.target_values, 0.25)
                .unwrap()
                .total
                .to_scalar::<f32>()
                .unwrap();
        assert!(
            (a.values.total - tensors).abs() < 1e-4,
            "{} vs {tensors}",
            a.values.total
        );
        let unscaled = host_unrolled_loss(&plain, &batch, &batch.target_values, 0.25).unwrap();
        assert!((unscaled.values.total - a.values.total).abs() > 1e-4);
    }

    #[test]
    fn min_max_scaling_backward_matches_finite_differences() {
        let u = [0.3f32, -1.2, 0.7, 2.5, -1.2, 0.1];
        let dy = [0.5f32, -0.25, 1.0, 0.75, 0.3, -0.6];
        let scaled = |u: &[f32]| {
            let mut y = u.to_vec();
            min_max_scale(&mut y, 6);
            y
        };
        let y = scaled(&u);
        let du = min_max_scale_backward(&u, &y, &dy, 6);
        let f = |u: &[f32]| -> f64 {
            scaled(u)
                .iter()
                .zip(&dy)
                .map(|(y, d)| f64::from(y * d))
                .sum()
        };
        // Elements 0, 2, 3 and 5 are not tied: a central difference sees their gradient.
        for j in [0, 2, 3, 5] {
            let (mut up, mut down) = (u, u);
            up[j] += 1e-3;
            down[j] -= 1e-3;
            let numeric = (f(&up) - f(&down)) / 2e-3;
            assert!(
                (numeric - f64::from(du[j])).abs() < 1e-3,
                "element {j}: numeric {numeric} vs {}",
                du[j]
            );
        }
        // The two tied minima each receive the minimum's whole gradient, as candle gives it.
        let scale = 3.7 + MIN_MAX_EPS;
        let (a, b) = (du[1] - dy[1] / scale, du[4] - dy[4] / scale);
        assert!((a - b).abs() < 1e-6 && a.abs() > 0.01, "{a} vs {b}");
    }
}
