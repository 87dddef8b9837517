//! Value prefix targets (EfficientZero): the sum of the rewards since the last reset point of
//! the unroll, in place of each transition's reward. The reset rule, [`is_reset`], is the one
//! the network's LSTM and the search follow too (`crate::network::value_prefix`).

use super::Batch;

/// Whether a node at `depth` (dynamics steps from the root of a search or the start of an
/// unroll) is a reset point for `horizon`: the root always, then every multiple of `horizon`
/// (0: only the root). A child of a reset point starts a new prefix.
pub fn is_reset(depth: usize, horizon: usize) -> bool {
    depth == 0 || (horizon > 0 && depth.is_multiple_of(horizon))
}

impl Batch {
    /// `[B * (K+1)]` value prefix targets: index `k >= 1` holds the sum of `target_rewards`
    /// from the step after the last reset point before `k` up to `k`; index 0 is 0 (unused,
    /// as the reward there).
    pub fn value_prefix_targets(&self, horizon: usize) -> Vec<f32> {
        let steps = self.num_unroll_steps + 1;
        let mut out = vec![0f32; self.target_rewards.len()];
        for (rewards, prefixes) in self
            .target_rewards
            .chunks_exact(steps)
            .zip(out.chunks_exact_mut(steps))
        {
            let mut sum = 0f32;
            for k in 1..steps {
                if is_reset(k - 1, horizon) {
                    sum = 0.0;
                }
                sum += rewards[k];
                prefixes[k] = sum;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::ReplayBuffer;
    use crate::testing::games::{replay_config, scripted_game};
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn the_root_and_multiples_of_the_horizon_are_reset_points() {
        let resets: Vec<usize> = (0..12).filter(|&d| is_reset(d, 5)).collect();
        assert_eq!(resets, vec![0, 5, 10]);
        assert!((1..50).all(|d| !is_reset(d, 0)));
        assert!((0..5).all(|d| is_reset(d, 1)));
    }

    /// Prefixes of a game with distinct rewards, checked by hand: with horizon 2 the sums
    /// restart after steps 2 and 4; with horizon 0 they run over the whole unroll; with
    /// horizon 1 they are the rewards.
    #[test]
    fn prefixes_sum_the_rewards_since_the_last_reset() {
        let rewards = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0];
        let game = scripted_game(&rewards, &[0.0; 6], &[0; 7], true, 0.0);
        let mut buffer = ReplayBuffer::new(replay_config(100, 5, 3, 1.0));
        buffer.save_game(game).unwrap();
        // Position 0 is the only one whose unroll covers five real rewards.
        let batch = (0..200)
            .map(|s| buffer.sample(1, &mut StdRng::seed_from_u64(s)).unwrap())
            .find(|b| b.target_rewards[1..] == [1.0, 2.0, 4.0, 8.0, 16.0])
            .expect("a sample of position 0");
        assert_eq!(
            batch.value_prefix_targets(2),
            vec![0.0, 1.0, 3.0, 4.0, 12.0, 16.0]
        );
        assert_eq!(
            batch.value_prefix_targets(0),
            vec![0.0, 1.0, 3.0, 7.0, 15.0, 31.0]
        );
        assert_eq!(
            batch.value_prefix_targets(1),
            vec![0.0, 1.0, 2.0, 4.0, 8.0, 16.0]
        );
    }
}
