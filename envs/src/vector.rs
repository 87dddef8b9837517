//! Stepping several environments at once, in parallel, with automatic resets.

use rayon::prelude::*;

use crate::env::{EnvError, Environment};
use crate::registry::EnvSpec;

/// Environments handed to one rayon task at least; the built-in environments step in well under
/// a microsecond, so finer splitting would cost more than it saves.
const MIN_ENVS_PER_TASK: usize = 16;

/// The length and return of an episode that has just ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EpisodeStats {
    /// The sum of the episode's rewards from the first player's point of view: the plain sum
    /// in single-player environments; in two-player games the rewards of the second player's
    /// moves count negated, so the return is +1 when the first player wins, -1 when the second
    /// does, 0 for a draw (summing both players' rewards would say only that someone won).
    pub episode_return: f64,
    /// The number of steps in the episode.
    pub length: usize,
}

/// What one call to [`VectorEnv::step`] returns: one entry per environment.
#[derive(Debug, Clone, PartialEq)]
pub struct VectorStep {
    /// The current observation of each environment, after automatic resets: for an environment
    /// whose episode ended this step, the first observation of its next episode.
    pub observations: Vec<Vec<f32>>,
    /// The reward of this step.
    pub rewards: Vec<f64>,
    /// Whether the episode terminated this step.
    pub terminated: Vec<bool>,
    /// Whether the episode was truncated this step.
    pub truncated: Vec<bool>,
    /// The last observation of an episode that ended this step; `None` otherwise.
    pub final_observations: Vec<Option<Vec<f32>>>,
    /// The statistics of an episode that ended this step; `None` otherwise.
    pub finished: Vec<Option<EpisodeStats>>,
}

/// A batch of environments that share their spaces, stepped in parallel with rayon.
///
/// An environment whose episode ends (terminated or truncated) is reset in the same step with
/// `reset(None)`, continuing its own random number generator, so every environment is always
/// ready for the next action.
#[derive(Debug, Clone)]
pub struct VectorEnv {
    envs: Vec<Box<dyn Environment>>,
    slots: Vec<Slot>,
}

/// Per-environment bookkeeping.
#[derive(Debug, Clone)]
struct Slot {
    observation: Vec<f32>,
    episode_return: f64,
    length: usize,
}

/// One environment's share of a [`VectorStep`].
struct Outcome {
    reward: f64,
    terminated: bool,
    truncated: bool,
    final_observation: Option<Vec<f32>>,
    finished: Option<EpisodeStats>,
}

impl VectorEnv {
    /// Takes the environments and resets each with `reset(None)` (continuing its generator) to
    /// get its first observation.
    ///
    /// Fails with [`EnvError::EmptyVectorEnv`] when `envs` is empty and with
    /// [`EnvError::IncompatibleEnvironments`] when the environments' action or observation
    /// spaces differ.
    pub fn new(mut envs: Vec<Box<dyn Environment>>) -> Result<Self, EnvError> {
        let first = envs.first().ok_or(EnvError::EmptyVectorEnv)?;
        let (actions, observations) = (first.action_space(), first.observation_space());
        for (index, env) in envs.iter().enumerate().skip(1) {
            if env.action_space() != actions || env.observation_space() != observations {
                return Err(EnvError::IncompatibleEnvironments {
                    index,
                    expected: envs[0].name().to_string(),
                    got: env.name().to_string(),
                });
            }
        }
        let slots = envs
            .iter_mut()
            .map(|env| Slot {
                observation: env.reset(None).0,
                episode_return: 0.0,
                length: 0,
            })
            .collect();
        Ok(VectorEnv { envs, slots })
    }

    /// `n` copies of the named environment, environment `i` reset with seed `i`.
    pub fn from_name(name: &str, n: usize) -> Result<Self, EnvError> {
        Self::from_spec(&EnvSpec::named(name), n)
    }

    /// [`VectorEnv::from_name`] for a spec (a name with keyword arguments).
    pub fn from_spec(spec: &EnvSpec, n: usize) -> Result<Self, EnvError> {
        let first = spec.make()?;
        let envs = (0..n).map(|_| first.clone_box()).collect();
        let mut vector = Self::new(envs)?;
        vector.reset(Some(0));
        Ok(vector)
    }

    /// The number of environments.
    pub fn len(&self) -> usize {
        self.envs.len()
    }

    /// Always false: a vector environment holds at least one environment.
    pub fn is_empty(&self) -> bool {
        self.envs.is_empty()
    }

    /// Resets every environment and returns the first observations. With `Some(seed)`,
    /// environment `i` is reseeded with `seed + i` (wrapping); with `None` each continues its
    /// own generator.
    pub fn reset(&mut self, seed: Option<u64>) -> Vec<Vec<f32>> {
        self.envs
            .par_iter_mut()
            .zip(self.slots.par_iter_mut())
            .enumerate()
            .with_min_len(MIN_ENVS_PER_TASK)
            .for_each(|(i, (env, slot))| {
                slot.observation = env.reset(seed.map(|s| s.wrapping_add(i as u64))).0;
                slot.episode_return = 0.0;
                slot.length = 0;
            });
        self.observations()
    }

    /// Steps environment `i` with `actions[i]`, all in parallel, resetting those whose episode
    /// ends.
    ///
    /// Every action is checked against its environment's action space and legal actions before
    /// any environment is stepped, so an error ([`EnvError::ActionCountMismatch`],
    /// [`EnvError::ActionOutOfRange`], [`EnvError::IllegalAction`]) leaves all of them unchanged.
    /// (Only an environment whose `step` rejects an action its own `legal_action_mask` allowed
    /// could fail after stepping has begun; none in this crate does.)
    pub fn step(&mut self, actions: &[usize]) -> Result<VectorStep, EnvError> {
        if actions.len() != self.envs.len() {
            return Err(EnvError::ActionCountMismatch {
                expected: self.envs.len(),
                got: actions.len(),
            });
        }
        for (env, &action) in self.envs.iter().zip(actions) {
            let mask = env.legal_action_mask();
            if action >= mask.len() {
                return Err(EnvError::ActionOutOfRange {
                    action,
                    n: mask.len(),
                });
            }
            if !mask[action] {
                return Err(EnvError::IllegalAction {
                    action,
                    legal: env.legal_actions(),
                });
            }
        }

        let outcomes: Vec<Result<Outcome, EnvError>> = self
            .envs
            .par_iter_mut()
            .zip(self.slots.par_iter_mut())
            .zip(actions.par_iter())
            .with_min_len(MIN_ENVS_PER_TASK)
            .map(|((env, slot), &action)| step_one(env.as_mut(), slot, action))
            .collect();

        let n = self.envs.len();
        let mut step = VectorStep {
            observations: self.observations(),
            rewards: Vec::with_capacity(n),
            terminated: Vec::with_capacity(n),
            truncated: Vec::with_capacity(n),
            final_observations: Vec::with_capacity(n),
            finished: Vec::with_capacity(n),
        };
        for outcome in outcomes {
            let outcome = outcome?;
            step.rewards.push(outcome.reward);
            step.terminated.push(outcome.terminated);
            step.truncated.push(outcome.truncated);
            step.final_observations.push(outcome.final_observation);
            step.finished.push(outcome.finished);
        }
        Ok(step)
    }

    /// Each environment's legal-action mask.
    pub fn legal_action_masks(&self) -> Vec<Vec<bool>> {
        self.envs
            .iter()
            .map(|env| env.legal_action_mask())
            .collect()
    }

    /// Each environment's player to move.
    pub fn to_play(&self) -> Vec<usize> {
        self.envs.iter().map(|env| env.to_play()).collect()
    }

    /// Each environment's current observation.
    pub fn observations(&self) -> Vec<Vec<f32>> {
        self.slots
            .iter()
            .map(|slot| slot.observation.clone())
            .collect()
    }

    /// The environments themselves, read-only.
    pub fn envs(&self) -> &[Box<dyn Environment>] {
        &self.envs
    }
}

/// Steps one environment, updating its bookkeeping and resetting it if the episode ended.
fn step_one(
    env: &mut dyn Environment,
    slot: &mut Slot,
    action: usize,
) -> Result<Outcome, EnvError> {
    let mover = env.to_play();
    let result = env.step(action)?;
    slot.episode_return += if mover == 0 {
        result.reward
    } else {
        -result.reward
    };
    slot.length += 1;
    let (final_observation, finished) = if result.terminated || result.truncated {
        let stats = EpisodeStats {
            episode_return: slot.episode_return,
            length: slot.length,
        };
        slot.episode_return = 0.0;
        slot.length = 0;
        slot.observation = env.reset(None).0;
        (Some(result.observation), Some(stats))
    } else {
        slot.observation = result.observation;
        (None, None)
    };
    Ok(Outcome {
        reward: result.reward,
        terminated: result.terminated,
        truncated: result.truncated,
        final_observation,
        finished,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::make;
    use crate::{CartPole, Catch, TicTacToe};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    /// Steps a vector of `n` copies of `name` and `n` separately made environments side by side
    /// for `steps` steps with random legal actions, checking that they agree on everything.
    /// Returns the number of finished episodes.
    fn compare_with_single_envs(name: &str, n: usize, steps: usize) -> usize {
        let seed = 11;
        let mut vector = VectorEnv::from_name(name, n).unwrap();
        let first = vector.reset(Some(seed));
        let mut singles: Vec<Box<dyn Environment>> = (0..n).map(|_| make(name).unwrap()).collect();
        let mut returns = vec![0.0; n];
        let mut lengths = vec![0; n];
        for (i, env) in singles.iter_mut().enumerate() {
            assert_eq!(env.reset(Some(seed + i as u64)).0, first[i]);
        }

        let mut rng = StdRng::seed_from_u64(5);
        let mut finished = 0;
        for _ in 0..steps {
            let actions: Vec<usize> = singles
                .iter()
                .map(|env| {
                    let legal = env.legal_actions();
                    legal[rng.random_range(0..legal.len())]
                })
                .collect();
            let out = vector.step(&actions).unwrap();
            for (i, env) in singles.iter_mut().enumerate() {
                let first_moves = env.to_play() == 0;
                let r = env.step(actions[i]).unwrap();
                returns[i] += if first_moves { r.reward } else { -r.reward };
                lengths[i] += 1;
                assert_eq!(out.rewards[i], r.reward);
                assert_eq!(out.terminated[i], r.terminated);
                assert_eq!(out.truncated[i], r.truncated);
                if r.terminated || r.truncated {
                    finished += 1;
                    assert_eq!(out.final_observations[i].as_ref(), Some(&r.observation));
                    let stats = out.finished[i].expect("episode stats");
                    assert_eq!(stats.length, lengths[i]);
                    assert_eq!(stats.episode_return, returns[i]);
                    returns[i] = 0.0;
                    lengths[i] = 0;
                    // Auto-reset continues the generator, as reset(None) does.
                    assert_eq!(out.observations[i], env.reset(None).0);
                } else {
                    assert_eq!(out.final_observations[i], None);
                    assert_eq!(out.finished[i], None);
                    assert_eq!(out.observations[i], r.observation);
                }
            }
            assert_eq!(vector.observations(), out.observations);
            assert_eq!(
                vector.to_play(),
                singles.iter().map(|e| e.to_play()).collect::<Vec<_>>()
            );
        }
        finished
    }

    #[test]
    fn cartpole_matches_single_environments() {
        // Random actions end CartPole episodes after a few dozen steps.
        assert!(compare_with_single_envs("CartPole-v1", 20, 200) > 40);
    }

    #[test]
    fn mountain_car_truncates_like_single_environments() {
        // Random actions never reach the flag: every episode is truncated at 200 steps.
        assert_eq!(compare_with_single_envs("MountainCar-v0", 3, 450), 6);
    }

    #[test]
    fn games_match_single_environments() {
        assert_eq!(compare_with_single_envs("Catch", 5, 20), 25);
        assert!(compare_with_single_envs("TicTacToe", 4, 40) > 4);
        assert!(compare_with_single_envs("ConnectFour", 3, 60) > 2);
    }

    #[test]
    fn finished_game_is_reset_in_the_same_step() {
        let envs: Vec<Box<dyn Environment>> = vec![Box::new(TicTacToe::new()); 2];
        let mut vector = VectorEnv::new(envs).unwrap();
        let fresh = TicTacToe::new().reset(None).0;
        // Game 0: X wins along the top row on move 5. Game 1 goes on.
        let game0 = [0, 3, 1, 4, 2];
        let game1 = [8, 7, 6, 5, 4];
        for k in 0..5 {
            let out = vector.step(&[game0[k], game1[k]]).unwrap();
            if k < 4 {
                assert_eq!(out.finished, vec![None, None]);
                continue;
            }
            assert_eq!(out.rewards, vec![1.0, 0.0]);
            assert_eq!(out.terminated, vec![true, false]);
            assert_eq!(
                out.finished[0],
                Some(EpisodeStats {
                    episode_return: 1.0,
                    length: 5
                })
            );
            assert_eq!(out.finished[1], None);
            let last = out.final_observations[0].as_ref().unwrap();
            assert_eq!(last.iter().filter(|&&v| v == 1.0).count(), 5);
            assert_eq!(out.observations[0], fresh);
        }
        assert_eq!(vector.to_play(), vec![0, 1]);
        let masks = vector.legal_action_masks();
        assert!(masks[0].iter().all(|&m| m));
        assert_eq!(
            masks[1],
            vec![true, true, true, true, false, false, false, false, false]
        );
        assert_eq!(vector.envs()[1].render(), "...\n.XO\nXOX");
    }

    #[test]
    fn bad_actions_change_nothing() {
        let mut vector = VectorEnv::from_name("TicTacToe", 3).unwrap();
        vector.step(&[4, 4, 4]).unwrap();
        let snapshot = |v: &VectorEnv| {
            (
                v.observations(),
                v.to_play(),
                v.legal_action_masks(),
                v.envs().iter().map(|e| e.render()).collect::<Vec<_>>(),
            )
        };
        let before = snapshot(&vector);

        let err = vector.step(&[0, 4, 1]).unwrap_err();
        assert_eq!(
            err,
            EnvError::IllegalAction {
                action: 4,
                legal: vec![0, 1, 2, 3, 5, 6, 7, 8]
            }
        );
        assert_eq!(snapshot(&vector), before);
        assert_eq!(
            vector.step(&[0, 1, 9]),
            Err(EnvError::ActionOutOfRange { action: 9, n: 9 })
        );
        assert_eq!(snapshot(&vector), before);
        let err = vector.step(&[0, 1]).unwrap_err();
        assert_eq!(
            err,
            EnvError::ActionCountMismatch {
                expected: 3,
                got: 2
            }
        );
        assert_eq!(snapshot(&vector), before);

        // A good step afterwards goes through as usual.
        vector.step(&[0, 0, 0]).unwrap();
        assert_eq!(vector.envs()[0].render(), "O..\n.X.\n...");
    }

    #[test]
    fn reset_with_a_seed_is_reproducible() {
        let mut vector = VectorEnv::from_name("CartPole-v1", 4).unwrap();
        let a = vector.reset(Some(100));
        vector.step(&[1, 0, 1, 0]).unwrap();
        let b = vector.reset(Some(100));
        assert_eq!(a, b);
        for (i, obs) in a.iter().enumerate() {
            assert_eq!(*obs, CartPole::new().reset(Some(100 + i as u64)).0);
        }
        // Different environments get different seeds.
        assert_ne!(a[0], a[1]);
        // None continues each generator.
        assert_ne!(vector.reset(None), a);
        // from_name seeds environment i with i.
        let fresh = VectorEnv::from_name("CartPole-v1", 2).unwrap();
        assert_eq!(fresh.observations()[1], CartPole::new().reset(Some(1)).0);
        assert_eq!(fresh.len(), 2);
        assert!(!fresh.is_empty());
    }

    #[test]
    fn construction_errors() {
        assert_eq!(
            VectorEnv::new(Vec::new()).unwrap_err(),
            EnvError::EmptyVectorEnv
        );
        assert_eq!(
            VectorEnv::from_name("Catch", 0).unwrap_err(),
            EnvError::EmptyVectorEnv
        );
        assert!(matches!(
            VectorEnv::from_name("Nope", 2),
            Err(EnvError::UnknownEnvironment { .. })
        ));
        let mixed: Vec<Box<dyn Environment>> = vec![
            Box::new(Catch::new()),
            Box::new(Catch::new()),
            Box::new(CartPole::new()),
        ];
        let err = VectorEnv::new(mixed).unwrap_err();
        assert_eq!(
            err,
            EnvError::IncompatibleEnvironments {
                index: 2,
                expected: "Catch".into(),
                got: "CartPole-v1".into()
            }
        );
    }

    #[test]
    fn a_two_player_return_is_from_the_first_players_point_of_view() {
        // O (second player) wins the left column: X 1, O 0, X 2, O 3, X 5, O 6.
        let mut vector = VectorEnv::new(vec![Box::new(TicTacToe::new())]).unwrap();
        vector.reset(Some(0));
        let mut stats = None;
        for a in [1, 0, 2, 3, 5, 6] {
            stats = vector.step(&[a]).unwrap().finished[0];
        }
        let stats = stats.expect("the game ended");
        assert_eq!(stats.episode_return, -1.0);
        assert_eq!(stats.length, 6);
    }
}
