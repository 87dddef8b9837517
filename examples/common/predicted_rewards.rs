//! Shared by the board-game examples (`tactics_probe`, `win_condition_supervised`).

use candle_core::Tensor;
use cumind::network::MuZeroNetwork;
use cumind::op_count::read_f32;

/// The reward the dynamics predicts for every action from each latent of `latent` (`n` rows):
/// `[n][A]`, decoded off the reward support.
pub fn for_every_action(net: &MuZeroNetwork, latent: &Tensor, n: usize) -> Vec<Vec<f32>> {
    let spec = net.spec();
    let mut rewards = vec![vec![0f32; spec.num_actions]; n];
    for action in 0..spec.num_actions {
        let actions = net.action_tensor(&vec![action; n]).expect("actions");
        let (_, logits) = net.dynamics(latent, &actions).expect("dynamics");
        let decoded = spec
            .reward_support
            .logits_to_scalars(&read_f32(&logits).expect("a read"));
        for (row, r) in rewards.iter_mut().zip(decoded) {
            row[action] = r;
        }
    }
    rewards
}
