//! Training targets of one sampled position: the n-step value target split into its reward
//! sum and bootstrap term, the reward and policy targets, their masks and the unrolled
//! actions. The formulas are in the module docs of [`crate::replay`], section "Targets".

use rand::Rng;

use super::{Batch, GameHistory, ReplayConfig};

/// The value target at one unrolled position `u`, decomposed as
/// `reward_sum + bootstrap_factor * stored_value(bootstrap)`.
pub(super) struct ValueParts {
    /// Discounted, signed sum of the (at most `n`) rewards from `u` on.
    pub(super) reward_sum: f32,
    /// `discount^(b-u) * s(b)`: the discount to the bootstrap position times the two-player
    /// sign; 0 when there is no bootstrap.
    pub(super) bootstrap_factor: f32,
    /// Bootstrap position `b` in `0..=T`, if any.
    pub(super) bootstrap: Option<usize>,
    /// Whether the value / reward targets are known (value mask).
    pub(super) known: bool,
}

impl ValueParts {
    /// The decomposition at `u` in `game` with an `td_steps`-step horizon.
    pub(super) fn at(game: &GameHistory, u: usize, config: &ReplayConfig, td_steps: usize) -> Self {
        let t_len = game.len();
        if u > t_len {
            return Self {
                reward_sum: 0.0,
                bootstrap_factor: 0.0,
                bootstrap: None,
                known: game.terminated,
            };
        }
        let sign = |j: usize| -> f64 {
            if config.two_player && game.to_play[j] != game.to_play[u] {
                -1.0
            } else {
                1.0
            }
        };
        let gamma = f64::from(config.discount);
        let end = u.saturating_add(td_steps).min(t_len);
        let mut sum = 0.0f64;
        let mut factor = 1.0f64;
        for j in u..end {
            sum += factor * sign(j) * f64::from(game.rewards[j]);
            factor *= gamma;
        }
        // `factor` is now discount^(end - u).
        let bootstrap = if end < t_len || !game.terminated {
            Some(end)
        } else {
            None
        };
        let bootstrap_factor = match bootstrap {
            Some(b) => (factor * sign(b)) as f32,
            None => 0.0,
        };
        Self {
            reward_sum: sum as f32,
            bootstrap_factor,
            bootstrap,
            known: true,
        }
    }

    /// The n-step value target, bootstrapping from the value stored in `game`.
    pub(super) fn target(&self, game: &GameHistory) -> f32 {
        match self.bootstrap {
            Some(b) => self.reward_sum + self.bootstrap_factor * game.stored_value(b),
            None => self.reward_sum,
        }
    }
}

/// Fills row `b` of `batch` (zeroed by `Batch::zeros`) with position `t` of `game`, with
/// n-step value targets of horizon `td_steps`. The RNG draws one action for each unrolled
/// step past the end of the game, in step order.
pub(super) fn fill_row<R: Rng + ?Sized>(
    batch: &mut Batch,
    b: usize,
    (game, t): (&GameHistory, usize),
    td_steps: usize,
    config: &ReplayConfig,
    rng: &mut R,
) {
    let (obs_len, num_actions) = (game.obs_len, game.num_actions);
    let k_steps = config.num_unroll_steps;
    let t_len = game.len();
    batch.observations[b * obs_len..(b + 1) * obs_len].copy_from_slice(game.observation(t));
    for k in 0..k_steps {
        let u = t + k;
        batch.actions[b * k_steps + k] = if u < t_len {
            game.actions[u]
        } else {
            rng.random_range(0..num_actions)
        };
    }
    let uniform = 1.0 / num_actions as f32;
    for k in 0..=k_steps {
        let u = t + k;
        let row = b * (k_steps + 1) + k;
        if u <= t_len {
            batch.observation_mask[row] = 1.0;
            batch.unroll_observations[row * obs_len..(row + 1) * obs_len]
                .copy_from_slice(game.observation(u));
        }
        let parts = ValueParts::at(game, u, config, td_steps);
        if parts.known {
            batch.value_mask[row] = 1.0;
            batch.target_values[row] = parts.target(game);
            batch.reward_sums[row] = parts.reward_sum;
            batch.bootstrap_discounts[row] = parts.bootstrap_factor;
            if let Some(bp) = parts.bootstrap {
                batch.bootstrap_observations[row * obs_len..(row + 1) * obs_len]
                    .copy_from_slice(game.observation(bp));
            }
            if k >= 1 && u - 1 < t_len {
                batch.target_rewards[row] = game.rewards[u - 1];
            }
        }
        let policy = &mut batch.target_policies[row * num_actions..(row + 1) * num_actions];
        // A stored policy of zeros is none (a fast search's move: `selfplay::PlayoutCap`).
        if u < t_len && game.policy(u).iter().any(|&p| p > 0.0) {
            batch.policy_mask[row] = 1.0;
            policy.copy_from_slice(game.policy(u));
        } else {
            policy.fill(uniform);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::replay::{Batch, PositionId, ReplayBuffer};
    use crate::testing::games::{five_step_game, replay_config, scripted_game};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    const TOL: f32 = 1e-5;

    /// The batch of the single position `t` of game `game_id`.
    fn single_batch(buffer: &ReplayBuffer, game_id: u64, t: usize) -> Batch {
        let mut rng = StdRng::seed_from_u64(7);
        buffer
            .batch_from_ids(&[PositionId::new(game_id, t)], &mut rng)
            .unwrap()
    }

    fn assert_close(actual: &[f32], expected: &[f32]) {
        assert_eq!(actual.len(), expected.len(), "{actual:?} vs {expected:?}");
        for (a, e) in actual.iter().zip(expected) {
            assert!((a - e).abs() < TOL, "{actual:?} vs {expected:?}");
        }
    }

    #[test]
    fn hand_computed_targets_terminated() {
        // discount 0.5, n = 2, K = 3; rewards [1..5], root values [10..50], T = 5.
        let mut buffer = ReplayBuffer::new(replay_config(100, 3, 2, 0.5));
        buffer.save_game(five_step_game(true)).unwrap();

        let b = single_batch(&buffer, 0, 1);
        // u=1: 2 + .5*3 + .25*40 = 13.5; u=2: 3 + .5*4 + .25*50 = 17.5;
        // u=3: 4 + .5*5 = 6.5 (no bootstrap); u=4: 5.
        assert_close(&b.target_values, &[13.5, 17.5, 6.5, 5.0]);
        assert_close(&b.target_rewards, &[0.0, 2.0, 3.0, 4.0]);
        assert_close(&b.value_mask, &[1.0; 4]);
        assert_close(&b.policy_mask, &[1.0; 4]);
        assert_close(&b.reward_sums, &[3.5, 5.0, 6.5, 5.0]);
        assert_close(&b.bootstrap_discounts, &[0.25, 0.25, 0.0, 0.0]);
        assert_eq!(b.actions, vec![1, 0, 1]);
        assert_close(&b.observations, &[1.0, 10.0]);
        assert_close(
            &b.bootstrap_observations,
            &[3.0, 30.0, 4.0, 40.0, 0.0, 0.0, 0.0, 0.0],
        );
        assert_close(
            &b.target_policies,
            &[1.0, 1.0, 2.0, 1.0, 3.0, 1.0, 4.0, 1.0],
        );

        let b = single_batch(&buffer, 0, 3);
        // u=3: 6.5; u=4: 5; u=5 (final, terminal): 0; u=6: absorbing 0.
        assert_close(&b.target_values, &[6.5, 5.0, 0.0, 0.0]);
        assert_close(&b.target_rewards, &[0.0, 4.0, 5.0, 0.0]);
        assert_close(&b.value_mask, &[1.0; 4]);
        assert_close(&b.policy_mask, &[1.0, 1.0, 0.0, 0.0]);
        assert_close(&b.target_policies[4..], &[0.5; 4]);
        assert_eq!(&b.actions[..2], &[1, 0]);
        assert!(b.actions[2] < 2);
        assert_close(&b.bootstrap_discounts, &[0.0; 4]);
        assert_close(&b.bootstrap_observations, &[0.0; 8]);
    }

    #[test]
    fn off_policy_correction_shortens_the_horizon_of_older_positions() {
        // discount 1, n = 3, K = 0; one step less per 2 transitions of age. Game 0: rewards
        // [1..5], root values [10..50], truncated with final value 60; game 1: the same,
        // terminated. 10 transitions: position t of game g has age 9 - (5 g + t).
        let mut config = replay_config(100, 0, 3, 1.0);
        config.td_age_transitions = 2;
        let mut buffer = ReplayBuffer::new(config.clone());
        buffer.save_game(five_step_game(false)).unwrap();
        buffer.save_game(five_step_game(true)).unwrap();
        let value = |buffer: &ReplayBuffer, game: u64, t: usize| {
            single_batch(buffer, game, t).target_values[0]
        };
        // Game 0, t = 1 (age 8): n = max(1, 3 - 4) = 1: 2 + 30.
        assert_close(&[value(&buffer, 0, 1)], &[32.0]);
        // Game 0, t = 4 (age 5): n = 1: 5 + 60 (the truncation bootstrap).
        assert_close(&[value(&buffer, 0, 4)], &[65.0]);
        // Game 1, t = 2 (age 2): n = 2: 3 + 4 + 50.
        assert_close(&[value(&buffer, 1, 2)], &[57.0]);
        // Game 1, t = 3 (age 1): n = 3: 4 + 5, terminated.
        assert_close(&[value(&buffer, 1, 3)], &[9.0]);

        // Off: every position keeps n = 3 (game 0, t = 1: 2 + 3 + 4 + 50).
        config.td_age_transitions = 0;
        let mut plain = ReplayBuffer::new(config);
        plain.save_game(five_step_game(false)).unwrap();
        plain.save_game(five_step_game(true)).unwrap();
        assert_close(&[value(&plain, 0, 1)], &[59.0]);

        // Ages follow the ring after the oldest game is evicted: a 10-slot buffer, a third
        // game pushes the first out; game 1, t = 0 is then 9 transitions old (n = 1: 1 + 20).
        let mut config = replay_config(10, 0, 3, 1.0);
        config.td_age_transitions = 2;
        let mut ring = ReplayBuffer::new(config);
        for terminated in [false, true, true] {
            ring.save_game(five_step_game(terminated)).unwrap();
        }
        assert_eq!(ring.num_games(), 2);
        assert_close(&[value(&ring, 1, 0)], &[21.0]);
        // Game 2, t = 4 (age 0): n = 3, terminated: 5.
        assert_close(&[value(&ring, 2, 4)], &[5.0]);
    }

    #[test]
    fn hand_computed_targets_truncated() {
        let mut buffer = ReplayBuffer::new(replay_config(100, 3, 2, 0.5));
        buffer.save_game(five_step_game(false)).unwrap(); // final_value 60

        let b = single_batch(&buffer, 0, 1);
        // u=3: 4 + .5*5 + .25*60 = 21.5; u=4: 5 + .5*60 = 35.
        assert_close(&b.target_values, &[13.5, 17.5, 21.5, 35.0]);
        assert_close(&b.target_rewards, &[0.0, 2.0, 3.0, 4.0]);
        assert_close(&b.value_mask, &[1.0; 4]);
        assert_close(&b.policy_mask, &[1.0; 4]);
        assert_close(&b.bootstrap_discounts, &[0.25, 0.25, 0.25, 0.5]);
        assert_close(
            &b.bootstrap_observations,
            &[3.0, 30.0, 4.0, 40.0, 5.0, 50.0, 5.0, 50.0],
        );

        let b = single_batch(&buffer, 0, 3);
        // u=5 is the final observation: final_value; u=6 is unknown.
        assert_close(&b.target_values, &[21.5, 35.0, 60.0, 0.0]);
        assert_close(&b.target_rewards, &[0.0, 4.0, 5.0, 0.0]);
        assert_close(&b.value_mask, &[1.0, 1.0, 1.0, 0.0]);
        assert_close(&b.policy_mask, &[1.0, 1.0, 0.0, 0.0]);
        assert_close(&b.reward_sums, &[6.5, 5.0, 0.0, 0.0]);
        assert_close(&b.bootstrap_discounts, &[0.25, 0.5, 1.0, 0.0]);
        assert_close(&b.bootstrap_observations[4..], &[5.0, 50.0, 0.0, 0.0]);
    }

    #[test]
    fn two_player_signs_alternate() {
        // Players alternate; player 0 makes the winning move at t = 4 (reward +1 to the mover).
        let to_play = [0u8, 1, 0, 1, 0, 1];
        let g = scripted_game(&[0.0, 0.0, 0.0, 0.0, 1.0], &[0.0; 5], &to_play, true, 0.0);
        let mut cfg = replay_config(100, 5, 10, 0.9);
        cfg.two_player = true;
        let mut buffer = ReplayBuffer::new(cfg.clone());
        buffer.save_game(g.clone()).unwrap();
        let b = single_batch(&buffer, 0, 0);
        let d = 0.9f32;
        assert_close(
            &b.target_values,
            &[d.powi(4), -d.powi(3), d * d, -d, 1.0, 0.0],
        );
        // Reward targets stay in the mover's perspective.
        assert_close(&b.target_rewards, &[0.0, 0.0, 0.0, 0.0, 0.0, 1.0]);

        // Bootstrapped two-player values: n = 1, root values from each mover's perspective.
        let g2 = scripted_game(
            &[0.0; 4],
            &[0.5, -0.5, 0.25, -0.25],
            &to_play[..5],
            false,
            0.75,
        );
        cfg.td_steps = 1;
        cfg.num_unroll_steps = 4;
        let mut buffer = ReplayBuffer::new(cfg.clone());
        buffer.save_game(g2).unwrap();
        let b = single_batch(&buffer, 0, 0);
        // z_u = -0.9 * v_{u+1}; at u=3 bootstrap from final_value (to_play[4]=0 != 1); u=4: 0.75.
        assert_close(&b.target_values, &[0.45, -0.225, 0.225, -0.675, 0.75]);
        assert_close(&b.bootstrap_discounts, &[-0.9, -0.9, -0.9, -0.9, 1.0]);

        // The same game as one-player: no sign flips.
        cfg.two_player = false;
        cfg.td_steps = 10;
        let mut buffer = ReplayBuffer::new(cfg);
        buffer.save_game(g).unwrap();
        let b = single_batch(&buffer, 0, 0);
        assert_close(
            &b.target_values[..5],
            &[d.powi(4), d.powi(3), d * d, d, 1.0],
        );
    }

    #[test]
    fn absorbing_and_unknown_past_the_end() {
        let g = scripted_game(&[1.0, 1.0], &[0.0, 0.0], &[0; 3], true, 99.0);
        let mut buffer = ReplayBuffer::new(replay_config(100, 5, 3, 1.0));
        buffer.save_game(g.clone()).unwrap();
        let b = single_batch(&buffer, 0, 1);
        assert_close(&b.target_values, &[1.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
        assert_close(&b.value_mask, &[1.0; 6]);
        assert_close(&b.target_rewards, &[0.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
        assert_close(&b.policy_mask, &[1.0, 0.0, 0.0, 0.0, 0.0, 0.0]);

        let mut g = g;
        g.terminated = false;
        let mut buffer = ReplayBuffer::new(replay_config(100, 5, 3, 1.0));
        buffer.save_game(g).unwrap();
        let b = single_batch(&buffer, 0, 1);
        assert_close(&b.target_values, &[100.0, 99.0, 0.0, 0.0, 0.0, 0.0]);
        assert_close(&b.value_mask, &[1.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
        assert_close(&b.target_rewards, &[0.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
        assert_close(&b.bootstrap_discounts, &[1.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn target_identity_with_stored_values() {
        let mut rng = StdRng::seed_from_u64(3);
        for two_player in [false, true] {
            for terminated in [false, true] {
                let mut cfg = replay_config(1000, 4, 3, 0.8);
                cfg.two_player = two_player;
                let mut buffer = ReplayBuffer::new(cfg);
                for len in [1usize, 3, 7] {
                    let rewards: Vec<f32> = (0..len).map(|_| rng.random_range(-1.0..1.0)).collect();
                    let values: Vec<f32> = (0..len).map(|_| rng.random_range(-1.0..1.0)).collect();
                    let to_play: Vec<u8> = (0..=len).map(|_| rng.random_range(0..2)).collect();
                    let g = scripted_game(&rewards, &values, &to_play, terminated, 0.3);
                    buffer.save_game(g).unwrap();
                }
                let batch = buffer.sample(64, &mut rng).unwrap();
                let k1 = batch.num_unroll_steps + 1;
                for (b, id) in batch.ids.iter().enumerate() {
                    let (_, g) = buffer.games().find(|(gid, _)| *gid == id.game()).unwrap();
                    let t = id.position();
                    for k in 0..k1 {
                        let row = b * k1 + k;
                        let u = t + k;
                        let bp = (u + 3).min(g.len());
                        let stored = if u <= g.len() {
                            g.stored_value(bp)
                        } else {
                            0.0
                        };
                        let rhs = batch.reward_sums[row] + batch.bootstrap_discounts[row] * stored;
                        assert!((batch.target_values[row] - rhs).abs() < TOL);
                        if batch.bootstrap_discounts[row] != 0.0 {
                            assert_eq!(
                                &batch.bootstrap_observations[row * 2..row * 2 + 2],
                                g.observation(bp)
                            );
                        }
                        // The real observation at t+k, where the game has one.
                        if u <= g.len() {
                            assert_eq!(batch.observation_mask[row], 1.0);
                            assert_eq!(
                                &batch.unroll_observations[row * 2..row * 2 + 2],
                                g.observation(u)
                            );
                        } else {
                            assert_eq!(batch.observation_mask[row], 0.0);
                            assert!(batch.unroll_observations[row * 2..row * 2 + 2]
                                .iter()
                                .all(|&x| x == 0.0));
                        }
                    }
                }
            }
        }
    }
}
