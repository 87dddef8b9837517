//! Tiny network specs for fast network, loss, learner and checkpoint tests.

use crate::network::NetworkSpec;
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
    }
}
