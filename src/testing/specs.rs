//! Tiny network specs for fast network, loss, learner and checkpoint tests.

use candle_core::{DType, Device};

use crate::network::{MuZeroNetwork, NetworkSpec};
use crate::support::Support;

/// A small network for `observation_shape` and `num_actions`: hidden width 16, latent 8, one
/// residual block, 4 conv channels (used when the shape is `[C, H, W]`), value support -5..=5
/// and reward support -2..=2.
pub fn tiny_spec(observation_shape: Vec<usize>, num_actions: usize) -> NetworkSpec {
    NetworkSpec {
        observation_shape,
        num_actions,
        hidden_dim: 16,
        latent_dim: 8,
        num_blocks: 1,
        conv_channels: 4,
        value_head_channels: 1,
        policy_head_channels: 2,
        reward_head_channels: 1,
        force_mlp: false,
        value_support: Support::symmetric(5),
        reward_support: Support::symmetric(2),
        projection_dim: 0,
        observation_scale: Vec::new(),
        value_prefix_dim: 0,
        value_prefix_horizon: 0,
        action_planes: Vec::new(),
    }
}

/// A network of `spec` on the CPU in f32 (seed `seed`) with every parameter moved off its
/// initial value (the zero-initialised heads too), so that every layer matters.
pub fn perturbed_network(spec: NetworkSpec, seed: u64) -> MuZeroNetwork {
    let net = MuZeroNetwork::new(spec.clone(), seed, &Device::Cpu, DType::F32).unwrap();
    let tensors = net
        .params()
        .to_tensors()
        .unwrap()
        .into_iter()
        .enumerate()
        .map(|(i, (k, v))| {
            let noise = (v.ones_like().unwrap() * (0.05 + 0.01 * (i % 7) as f64)).unwrap();
            (k, (v + noise).unwrap())
        })
        .collect();
    MuZeroNetwork::from_tensors(spec, tensors, &Device::Cpu, DType::F32).unwrap()
}
