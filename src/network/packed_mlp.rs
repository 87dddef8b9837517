//! An MLP network's weights in one flat f32 buffer, in the order the one-kernel CUDA calls of
//! the search (`network::cuda_mlp`, kernels `cumind_mlp_*` in `fused_kernels.cu`) read them.
//!
//! The order is the networks' own: the representation (its trunk, then `out`), the dynamics
//! (trunk, `latent_out`, `reward_hidden`, `reward_out`), the prediction (trunk, `policy_out`,
//! `value_hidden`, `value_out`); a trunk is its input layer and norm, then per residual block
//! the first layer and norm, the second layer and the block's norm. A linear layer is its
//! weight transposed to `[in, out]` (so the lanes of a warp, one output each, read
//! consecutive floats) followed by its bias; a layer norm is its scale followed by its shift.
//! The kernels find each network's start from [`MlpDims`] alone, so nothing but the buffer and
//! the sizes crosses to the device.

use std::collections::HashMap;

use candle_core::{DType, Tensor};

use super::{MuZeroNetwork, NetworkError, NetworkSpec};

/// The sizes that place every weight of a packed MLP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MlpDims {
    pub obs: usize,
    pub latent: usize,
    pub actions: usize,
    pub hidden: usize,
    pub blocks: usize,
    pub value: usize,
    pub reward: usize,
}

impl MlpDims {
    pub fn of(spec: &NetworkSpec) -> Self {
        Self {
            obs: spec.obs_len(),
            latent: spec.latent_dim,
            actions: spec.num_actions,
            hidden: spec.hidden_dim,
            blocks: spec.num_blocks,
            value: spec.value_support.size(),
            reward: spec.reward_support.size(),
        }
    }

    fn trunk_len(&self, inputs: usize) -> usize {
        let h = self.hidden;
        inputs * h + 3 * h + self.blocks * (2 * h * h + 6 * h)
    }

    pub fn representation_len(&self) -> usize {
        self.trunk_len(self.obs) + self.hidden * self.latent + self.latent
    }

    pub fn dynamics_len(&self) -> usize {
        let h = self.hidden;
        self.trunk_len(self.latent + self.actions)
            + h * self.latent
            + self.latent
            + h * h
            + h
            + h * self.reward
            + self.reward
    }

    pub fn prediction_len(&self) -> usize {
        let h = self.hidden;
        self.trunk_len(self.latent)
            + h * self.actions
            + self.actions
            + h * h
            + h
            + h * self.value
            + self.value
    }

    /// Floats in the packed buffer.
    pub fn len(&self) -> usize {
        self.representation_len() + self.dynamics_len() + self.prediction_len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The widest activation a row holds between two layers (the kernels' buffer width).
    pub fn width(&self) -> usize {
        self.obs.max(self.latent + self.actions).max(self.hidden)
    }
}

/// A layer of the packed order: a linear layer (weight transposed, bias) or a layer norm
/// (scale, shift), by its parameters' prefix.
enum Part {
    Linear(String),
    Norm(String),
}

fn trunk(prefix: &str, blocks: usize, parts: &mut Vec<Part>) {
    parts.push(Part::Linear(format!("{prefix}.input.linear")));
    parts.push(Part::Norm(format!("{prefix}.input.norm")));
    for i in 0..blocks {
        let block = format!("{prefix}.block{i}");
        parts.push(Part::Linear(format!("{block}.first.linear")));
        parts.push(Part::Norm(format!("{block}.first.norm")));
        parts.push(Part::Linear(format!("{block}.second")));
        parts.push(Part::Norm(format!("{block}.norm")));
    }
}

fn parts(blocks: usize) -> Vec<Part> {
    let mut parts = Vec::new();
    trunk("representation.trunk", blocks, &mut parts);
    parts.push(Part::Linear("representation.out".into()));
    trunk("dynamics.trunk", blocks, &mut parts);
    for head in ["latent_out", "reward_hidden", "reward_out"] {
        parts.push(Part::Linear(format!("dynamics.{head}")));
    }
    trunk("prediction.trunk", blocks, &mut parts);
    for head in ["policy_out", "value_hidden", "value_out"] {
        parts.push(Part::Linear(format!("prediction.{head}")));
    }
    parts
}

/// `network`'s weights packed (a new f32 tensor on the network's device; the parameters are
/// copied, so later updates of them do not reach it). Only for MLP networks without a value
/// prefix.
pub fn pack(network: &MuZeroNetwork) -> Result<Tensor, NetworkError> {
    let spec = network.spec();
    if spec.uses_conv() || network.has_value_prefix() {
        return Err(NetworkError::Candle(candle_core::Error::Msg(
            "a packed MLP needs an MLP network without a value prefix".into(),
        )));
    }
    let tensors: HashMap<&str, Tensor> = network
        .params()
        .named()
        .map(|(name, var)| (name.as_str(), var.as_tensor().detach()))
        .collect();
    let get = |name: String| {
        tensors
            .get(name.as_str())
            .ok_or(NetworkError::MissingParameter(name))
            .and_then(|t| Ok(t.to_dtype(DType::F32)?))
    };
    let mut flat = Vec::new();
    for part in parts(spec.num_blocks) {
        match part {
            Part::Linear(name) => {
                let weight = get(format!("{name}.weight"))?;
                flat.push(weight.t()?.contiguous()?.flatten_all()?);
                flat.push(get(format!("{name}.bias"))?.flatten_all()?);
            }
            Part::Norm(name) => {
                flat.push(get(format!("{name}.weight"))?.flatten_all()?);
                flat.push(get(format!("{name}.bias"))?.flatten_all()?);
            }
        }
    }
    let packed = Tensor::cat(&flat, 0)?;
    let expected = MlpDims::of(spec).len();
    if packed.elem_count() != expected {
        return Err(NetworkError::Candle(candle_core::Error::Msg(format!(
            "packed MLP: {} weights where its sizes place {expected}",
            packed.elem_count()
        ))));
    }
    Ok(packed)
}

#[cfg(test)]
mod tests {
    //! The packed order walked on the host exactly as the kernels walk it (a reading cursor,
    //! one row at a time), against the host MLP on the same weights.
    use super::*;
    use crate::network::host_inference::HostInference;
    use crate::network::host_mlp::HostMlp;
    use crate::support::Support;
    use crate::testing::specs::tiny_spec;
    use candle_core::Device;

    struct Cursor<'a>(&'a [f32]);

    impl<'a> Cursor<'a> {
        fn take(&mut self, n: usize) -> &'a [f32] {
            let (head, rest) = self.0.split_at(n);
            self.0 = rest;
            head
        }

        fn linear(&mut self, x: &[f32], out: usize, relu: bool) -> Vec<f32> {
            let wt = self.take(x.len() * out);
            let b = self.take(out);
            (0..out)
                .map(|o| {
                    let v = x
                        .iter()
                        .enumerate()
                        .map(|(i, v)| v * wt[i * out + o])
                        .sum::<f32>()
                        + b[o];
                    if relu {
                        v.max(0.0)
                    } else {
                        v
                    }
                })
                .collect()
        }

        fn norm(&mut self, x: &mut [f32], relu: bool) {
            let d = x.len();
            let (gamma, beta) = (self.take(d), self.take(d));
            let mean = x.iter().sum::<f32>() / d as f32;
            let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / d as f32;
            let rstd = 1.0 / (var + 1e-5).sqrt();
            for (i, v) in x.iter_mut().enumerate() {
                let y = (*v - mean) * rstd * gamma[i] + beta[i];
                *v = if relu { y.max(0.0) } else { y };
            }
        }

        fn trunk(&mut self, x: &[f32], dims: &MlpDims) -> Vec<f32> {
            let mut h = self.linear(x, dims.hidden, false);
            self.norm(&mut h, true);
            for _ in 0..dims.blocks {
                let mut a = self.linear(&h, dims.hidden, false);
                self.norm(&mut a, true);
                let mut b = self.linear(&a, dims.hidden, false);
                self.norm(&mut b, false);
                for (x, y) in h.iter_mut().zip(&b) {
                    *x = (*x + y).max(0.0);
                }
            }
            h
        }

        fn min_max(x: &mut [f32]) {
            let lo = x.iter().copied().fold(f32::INFINITY, f32::min);
            let hi = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            for v in x {
                *v = (*v - lo) / (hi - lo + 1e-5);
            }
        }
    }

    fn close(a: &[f32], b: &[f32], what: &str) {
        assert_eq!(a.len(), b.len(), "{what}: lengths");
        for (x, y) in a.iter().zip(b) {
            assert!(
                (x - y).abs() <= 1e-4 * (1.0 + y.abs()),
                "{what}: {x} vs {y}"
            );
        }
    }

    #[test]
    fn the_packed_order_walked_as_the_kernels_walk_it_is_the_host_mlp() {
        for blocks in [0, 2] {
            let spec = NetworkSpec {
                hidden_dim: 12,
                latent_dim: 7,
                num_blocks: blocks,
                value_support: Support::symmetric(4),
                ..tiny_spec(vec![5], 3)
            };
            let net = MuZeroNetwork::new(spec.clone(), 3, &Device::Cpu, DType::F32).unwrap();
            let dims = MlpDims::of(&spec);
            let packed = pack(&net).unwrap().to_vec1::<f32>().unwrap();
            assert_eq!(packed.len(), dims.len());
            let host = HostMlp::new(&net).unwrap();
            let obs: Vec<f32> = (0..5).map(|i| (i as f32 * 0.7).sin()).collect();
            let (latent, outputs) = host.initial(&obs);

            let mut rep = Cursor(&packed);
            let h = rep.trunk(&obs, &dims);
            let mut z = rep.linear(&h, dims.latent, false);
            Cursor::min_max(&mut z);
            close(&z, &latent, "initial latent");
            let predict = |z: &[f32]| {
                let mut p = Cursor(&packed[dims.representation_len() + dims.dynamics_len()..]);
                let h = p.trunk(z, &dims);
                let policy = p.linear(&h, dims.actions, false);
                let hidden = p.linear(&h, dims.hidden, true);
                let value = p.linear(&hidden, dims.value, false);
                assert!(p.0.is_empty(), "weights left after the prediction");
                (policy, value)
            };
            let (policy, value) = predict(&z);
            close(&policy, &outputs.policy_logits, "initial policy");
            close(&value, &outputs.value_logits, "initial value");

            let action = 2;
            let step = host.recurrent(&latent, &[action]).unwrap();
            let mut dy = Cursor(&packed[dims.representation_len()..]);
            let mut x = latent.clone();
            x.extend((0..dims.actions).map(|a| if a == action { 1.0 } else { 0.0 }));
            let h = dy.trunk(&x, &dims);
            let mut next = dy.linear(&h, dims.latent, false);
            Cursor::min_max(&mut next);
            let hidden = dy.linear(&h, dims.hidden, true);
            let reward = dy.linear(&hidden, dims.reward, false);
            assert_eq!(dy.0.len(), dims.prediction_len(), "the dynamics' end");
            close(&next, &step.latents, "next latent");
            close(&reward, &step.reward_logits, "reward");
            let (policy, value) = predict(&next);
            close(&policy, &step.outputs.policy_logits, "recurrent policy");
            close(&value, &step.outputs.value_logits, "recurrent value");
        }
    }
}
