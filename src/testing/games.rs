//! Random and hand-built game histories for replay, learner and checkpoint tests, and
//! positions of real games reached by a line of moves.

use std::ops::Range;

use cumind_envs::Environment;
use rand::Rng;

use crate::replay::{GameHistory, ReplayConfig};

/// Replay settings for target and sampling tests: uniform sampling (`per_alpha` 0),
/// `per_beta` 1, `per_epsilon` 0.01, one player.
pub fn replay_config(
    capacity: usize,
    num_unroll_steps: usize,
    td_steps: usize,
    discount: f32,
) -> ReplayConfig {
    ReplayConfig {
        capacity,
        num_unroll_steps,
        td_steps,
        discount,
        per_alpha: 0.0,
        per_beta: 1.0,
        per_epsilon: 0.01,
        two_player: false,
        max_bytes: 0,
        td_age_transitions: 0,
        symmetries: Vec::new(),
    }
}

/// A game with the given rewards, root values and players to move (`to_play` has one entry
/// more than the other two), whose observations, policies and actions name their step:
/// observation `t` is `[t, 10 t]`, policy `t` is `[t, 1]` and action `t` is `t % 2`
/// (`obs_len` 2, 2 actions). Ended by `finish(terminated, final_value)`.
pub fn scripted_game(
    rewards: &[f32],
    root_values: &[f32],
    to_play: &[u8],
    terminated: bool,
    final_value: f32,
) -> GameHistory {
    let mut game = GameHistory::new(2, 2, &[0.0, 0.0], to_play[0]);
    for t in 0..rewards.len() {
        let next = (t + 1) as f32;
        game.push(
            t % 2,
            rewards[t],
            root_values[t],
            &[t as f32, 1.0],
            &[next, 10.0 * next],
            to_play[t + 1],
        );
    }
    game.finish(terminated, final_value);
    game
}

/// The one-player [`scripted_game`] of the hand-computed target tests: rewards
/// `[1, 2, 3, 4, 5]`, root values `[10, 20, 30, 40, 50]`, final value 60 (used only when
/// not `terminated`).
pub fn five_step_game(terminated: bool) -> GameHistory {
    scripted_game(
        &[1.0, 2.0, 3.0, 4.0, 5.0],
        &[10.0, 20.0, 30.0, 40.0, 50.0],
        &[0; 6],
        terminated,
        60.0,
    )
}

/// A one-player game of random numbers. Observations are uniform in `[-1, 1)`, policies are
/// random and normalised, actions uniform.
#[derive(Clone, Debug)]
pub struct RandomGame {
    pub obs_len: usize,
    pub num_actions: usize,
    /// Number of transitions.
    pub len: usize,
    pub rewards: Range<f32>,
    pub root_values: Range<f32>,
    pub terminated: bool,
    pub final_value: f32,
}

impl RandomGame {
    /// Draws the game. The order of the draws is fixed (first observation, then for each
    /// step the next observation, the policy, the action, the reward and the root value) so
    /// that a seeded test keeps seeing the same games.
    pub fn draw<R: Rng + ?Sized>(&self, rng: &mut R) -> GameHistory {
        let first: Vec<f32> = (0..self.obs_len)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let mut game = GameHistory::new(self.obs_len, self.num_actions, &first, 0);
        for _ in 0..self.len {
            let next: Vec<f32> = (0..self.obs_len)
                .map(|_| rng.random_range(-1.0..1.0))
                .collect();
            let mut policy: Vec<f32> = (0..self.num_actions)
                .map(|_| rng.random_range(0.1..1.0))
                .collect();
            let total: f32 = policy.iter().sum();
            policy.iter_mut().for_each(|p| *p /= total);
            let action = rng.random_range(0..self.num_actions);
            let reward = rng.random_range(self.rewards.clone());
            let root_value = rng.random_range(self.root_values.clone());
            game.push(action, reward, root_value, &policy, &next, 0);
        }
        game.finish(self.terminated, self.final_value);
        game
    }
}

/// `env` reset (no seed), then `moves` played in order (each must be legal and must not end
/// the game early); returns `env` and the observation of the position reached.
pub fn after_moves<E: Environment>(mut env: E, moves: &[usize]) -> (E, Vec<f32>) {
    let mut observation = env.reset(None).0;
    for &m in moves {
        observation = env.step(m).expect("a legal move").observation;
    }
    (env, observation)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn built_games_are_valid() {
        five_step_game(true).validate().unwrap();
        let game = scripted_game(&[1.0, -1.0], &[0.5, 0.5], &[0, 1, 0], false, 0.25);
        game.validate().unwrap();
        assert_eq!(game.observation(2), &[2.0, 20.0]);
        assert_eq!(game.policy(1), &[1.0, 1.0]);
        assert_eq!(game.actions, vec![0, 1]);

        let spec = RandomGame {
            obs_len: 3,
            num_actions: 4,
            len: 7,
            rewards: -1.0..2.0,
            root_values: -3.0..3.0,
            terminated: false,
            final_value: 1.5,
        };
        let mut rng = StdRng::seed_from_u64(5);
        let game = spec.draw(&mut rng);
        game.validate().unwrap();
        assert_eq!(game.len(), 7);
        assert!(!game.terminated && game.final_value == 1.5);
        for t in 0..7 {
            assert!((game.policy(t).iter().sum::<f32>() - 1.0).abs() < 1e-5);
            assert!((-1.0..2.0).contains(&game.rewards[t]));
        }
        assert_eq!(spec.draw(&mut StdRng::seed_from_u64(5)), game);
    }
}
