//! An environment checker, like Gymnasium's `check_env`: it plays an environment with random
//! legal actions and reports every way it breaks the [`Environment`] contract, so a user
//! finds a broken environment before a training run does.
//!
//! Checked, each reported once (its first occurrence) with the values involved, under these
//! names ([`Violation::check`]):
//! - `action_space`: discrete with at least one action;
//! - `observation_space`: a box whose `low` and `high` hold one bound per element, with
//!   `low <= high` and no NaN;
//! - `observation`: every observation (after `reset`, after `step`, and after the steps tried
//!   on copies) has the space's flat length, finite values, and lies within the bounds;
//! - `reset_seed`: `reset(Some(seed))` twice gives the same first observation and info, and the
//!   same actions then give the same steps (the first five);
//! - `legal_actions`: `legal_action_mask()` has one entry per action, `legal_actions()` lists
//!   the same actions in increasing order, and some action is legal while the episode runs;
//! - `to_play`: `num_players()` is 1 or 2, `to_play()` is below it, and in a two-player game
//!   the player to move changes after every step that does not end the episode (the search and
//!   the value targets assume the players alternate);
//! - `step_legal`: `step` accepts every action the mask allows (the one played, and the others
//!   tried on copies);
//! - `step_illegal`: `step` refuses, with an error rather than a panic, every action the mask
//!   forbids and the action `n` outside the action space `0..n`, and a refused step changes
//!   nothing: the same `to_play()`, mask and `render()`, and the next step gives the same result
//!   as on an untouched copy;
//! - `reward`: finite;
//! - `episode_end`: a step after `terminated` or `truncated` is refused until `reset`, and an
//!   episode ends within `max_episode_steps()` steps (or, without a time limit,
//!   [`CheckOptions::max_steps`]);
//! - `clone`: a copy made by `clone_box()` steps exactly like the original;
//! - `symmetries`: each of `symmetries()` maps the observation's elements and the actions by
//!   permutations of the right lengths.
//!
//! The actions tried besides the one played are tried on copies (`clone_box()`), so the played
//! episode only ever sees legal actions. A panic inside `step` is caught and reported as a
//! violation (the panic hook still prints it to stderr). NaN compares equal to NaN when two
//! steps are compared.
//!
//! Not checked: that `terminated` and `truncated` are not both set (the trait allows both, as
//! Gymnasium does), states the random actions do not reach (MountainCar's goal, say), and what
//! a symmetry means (envs/tests/symmetries.rs plays the built-in games mirrored; a generic
//! check would have to assume that an environment's random draws are symmetric too).
//!
//! ```
//! use cumind_envs::{check_env, make};
//!
//! let mut env = make("TicTacToe").unwrap();
//! let report = check_env(env.as_mut());
//! assert!(report.passed(), "{report}");
//! assert_eq!(report.episodes, 10);
//! ```

mod compare;
mod report;

use compare::*;
pub use report::{CheckOptions, CheckReport, Violation};

use rand::rngs::StdRng;
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};

use crate::env::{Environment, Space, StepResult};

/// Steps replayed after each seeded reset to compare two trajectories.
const REPLAYED_STEPS: usize = 5;

/// Check `env` with the default options.
pub fn check_env(env: &mut dyn Environment) -> CheckReport {
    check_env_with(env, &CheckOptions::default())
}

/// Check `env`, playing as `options` say. The environment is left in the middle or at the end
/// of an episode: reset it before use.
pub fn check_env_with(env: &mut dyn Environment, options: &CheckOptions) -> CheckReport {
    let mut report = CheckReport::default();
    let action_space = env.action_space();
    let Some(n) = action_space.n().filter(|&n| n >= 1) else {
        report.add(
            "action_space",
            format!("must be discrete with at least one action, is {action_space:?}"),
        );
        return report;
    };
    let space = env.observation_space();
    let Space::Box { low, high, shape } = &space else {
        report.add("observation_space", format!("must be a box, is {space:?}"));
        return report;
    };
    let bounds = match bounds_problem(low, high, shape) {
        Some(problem) => {
            report.add("observation_space", problem);
            None
        }
        None => Some((low.clone(), high.clone())),
    };
    let mut checker = Checker {
        n,
        obs_len: space.flat_len(),
        shape: shape.clone(),
        bounds,
        players: env.num_players(),
        options: *options,
        rng: StdRng::seed_from_u64(options.seed),
        report,
    };
    checker.static_properties(env);
    for episode in 0..options.episodes {
        let seed = options.seed.wrapping_add(episode as u64);
        checker.reset_reproduces(env, seed);
        let (obs, _) = env.reset(Some(seed));
        checker.observation(&obs, &format!("after reset(Some({seed}))"));
        checker.report.episodes += 1;
        checker.play_episode(env);
    }
    checker.report
}

struct Checker {
    n: usize,
    obs_len: usize,
    shape: Vec<usize>,
    /// `(low, high)`, or `None` if the space's bounds are malformed (already reported).
    bounds: Option<(Vec<f32>, Vec<f32>)>,
    players: usize,
    options: CheckOptions,
    rng: StdRng,
    report: CheckReport,
}

impl Checker {
    fn add(&mut self, check: &'static str, message: String) {
        self.report.add(check, message);
    }

    /// What does not depend on the state: the number of players and the symmetries.
    fn static_properties(&mut self, env: &dyn Environment) {
        if !(1..=2).contains(&self.players) {
            self.add(
                "to_play",
                format!(
                    "num_players() is {}; an environment has 1 player, or 2 taking turns",
                    self.players
                ),
            );
        }
        for (i, symmetry) in env.symmetries().iter().enumerate() {
            if let Some(p) = permutation_problem(&symmetry.observation, self.obs_len) {
                self.add(
                    "symmetries",
                    format!("symmetry {i}: the observation map {p} (one per element)"),
                );
            }
            if symmetry.negate.len() != symmetry.observation.len() {
                self.add(
                    "symmetries",
                    format!(
                        "symmetry {i}: negate has {} entries, the observation map {}",
                        symmetry.negate.len(),
                        symmetry.observation.len()
                    ),
                );
            }
            if let Some(p) = permutation_problem(&symmetry.actions, self.n) {
                self.add(
                    "symmetries",
                    format!("symmetry {i}: the action map {p} (one per action)"),
                );
            }
        }
    }

    fn observation(&mut self, obs: &[f32], when: &str) {
        if obs.len() != self.obs_len {
            self.add(
                "observation",
                format!(
                    "{when}: {} values, the observation space (shape {:?}) has {}",
                    obs.len(),
                    self.shape,
                    self.obs_len
                ),
            );
        } else if let Some(i) = obs.iter().position(|x| !x.is_finite()) {
            self.add("observation", format!("{when}: element {i} is {}", obs[i]));
        } else if let Some((low, high)) = &self.bounds {
            if let Some(i) = (0..obs.len()).find(|&i| obs[i] < low[i] || obs[i] > high[i]) {
                let message = format!(
                    "{when}: element {i} is {}, outside its bounds [{}, {}]",
                    obs[i], low[i], high[i]
                );
                self.add("observation", message);
            }
        }
    }

    fn reward(&mut self, reward: f64, when: &str) {
        if !reward.is_finite() {
            self.add("reward", format!("{when}: the reward is {reward}"));
        }
    }

    /// Two resets with the same seed, then the same random legal actions: identical.
    fn reset_reproduces(&mut self, env: &mut dyn Environment, seed: u64) {
        let n = self.n;
        let play = |env: &mut dyn Environment| {
            let first = env.reset(Some(seed));
            let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
            let (mut actions, mut outcomes) = (Vec::new(), Vec::new());
            for _ in 0..REPLAYED_STEPS {
                let legal = legal_of(env, n);
                if legal.is_empty() {
                    break;
                }
                let action = legal[rng.random_range(0..legal.len())];
                let outcome = try_step(env, action);
                let goes_on =
                    matches!(&outcome, Outcome::Accepted(s) if !s.terminated && !s.truncated);
                actions.push(action);
                outcomes.push(outcome);
                if !goes_on {
                    break;
                }
            }
            (first, actions, outcomes)
        };
        let ((obs_a, info_a), actions_a, steps_a) = play(env);
        let ((obs_b, info_b), actions_b, steps_b) = play(env);
        let problem = if let Some(d) = observation_difference(&obs_a, &obs_b) {
            Some(format!(
                "reset(Some({seed})) twice gave different first observations: {d}"
            ))
        } else if let Some(d) = info_difference(&info_a, &info_b) {
            Some(format!(
                "reset(Some({seed})) twice gave different infos: {d}"
            ))
        } else {
            trajectory_difference(&actions_a, &steps_a, &actions_b, &steps_b)
                .map(|d| format!("after reset(Some({seed})) {d}"))
        };
        if let Some(message) = problem {
            self.add("reset_seed", message);
        }
    }

    /// The legal actions by the mask, after checking that `legal_actions()` agrees with it.
    fn legal_actions(&mut self, env: &dyn Environment) -> Vec<usize> {
        let n = self.n;
        let mask = env.legal_action_mask();
        let listed = env.legal_actions();
        if mask.len() != n {
            self.add(
                "legal_actions",
                format!(
                    "legal_action_mask() has {} entries for {n} actions",
                    mask.len()
                ),
            );
            return legal_of(env, n);
        }
        let from_mask: Vec<usize> = (0..n).filter(|&a| mask[a]).collect();
        if from_mask != listed {
            let mut sorted = listed.clone();
            sorted.sort_unstable();
            sorted.dedup();
            let message = if sorted == from_mask {
                format!("legal_actions() is {listed:?}, not in increasing order or repeating one")
            } else {
                format!(
                    "legal_actions() is {listed:?} but legal_action_mask() allows {from_mask:?}"
                )
            };
            self.add("legal_actions", message);
        }
        from_mask
    }

    fn play_episode(&mut self, env: &mut dyn Environment) {
        let declared = env.max_episode_steps();
        let limit = declared.map_or(self.options.max_steps, |k| k.min(self.options.max_steps));
        for t in 0..=limit {
            let legal = self.legal_actions(env);
            if legal.is_empty() {
                self.add(
                    "legal_actions",
                    format!("no legal action after {t} step(s), though the episode has not ended"),
                );
                return;
            }
            let player = env.to_play();
            if player >= self.players {
                self.add(
                    "to_play",
                    format!("to_play() is {player} with {} player(s)", self.players),
                );
            }
            if t == limit {
                match declared {
                    Some(k) if k <= self.options.max_steps => self.add(
                        "episode_end",
                        format!(
                            "the episode did not end after {k} steps, though \
                             max_episode_steps() is Some({k}) (it must be truncated then)"
                        ),
                    ),
                    // A time limit longer than the checker plays.
                    Some(_) => {}
                    None => self.add(
                        "episode_end",
                        format!(
                            "no end after {limit} steps and max_episode_steps() is None \
                             (without a time limit an episode must end by itself; raise \
                             CheckOptions::max_steps if its episodes are longer)"
                        ),
                    ),
                }
                return;
            }
            let action = legal[self.rng.random_range(0..legal.len())];
            let on_copy = try_step(env.clone_box().as_mut(), action);
            self.try_other_actions(env, action, &legal, &on_copy);
            self.report.steps += 1;
            let result = match try_step(env, action) {
                Outcome::Accepted(result) => result,
                refused => {
                    self.add(
                        "step_legal",
                        format!(
                            "step({action}), an action the mask allows (legal: {legal:?}), {}",
                            refused.predicate()
                        ),
                    );
                    return;
                }
            };
            if let Some(d) = outcome_difference(&on_copy, &Outcome::Accepted(result.clone())) {
                self.add(
                    "clone",
                    format!(
                        "step({action}) on a copy made by clone_box() and on the original \
                         differ (the copy first): {d}"
                    ),
                );
            }
            self.observation(&result.observation, &format!("after step({action})"));
            self.reward(result.reward, &format!("step({action})"));
            if result.terminated || result.truncated {
                self.step_after_end(env, &result, action, &legal);
                return;
            }
            if self.players == 2 && env.to_play() == player {
                self.add(
                    "to_play",
                    format!(
                        "player {player} is to move again after step({action}); in a two-player \
                         game the turn passes after every step (the search and the value targets \
                         assume the players alternate)"
                    ),
                );
            }
        }
    }

    /// On copies: every other legal action is accepted, every illegal one (and `n`) refused
    /// without a change of state. `on_copy` is what `action` gives on an untouched copy. Once
    /// `step_legal` (or `step_illegal`) has failed, the legal (or illegal) actions are no longer
    /// tried, so a panicking `step` is not repeated at every step.
    fn try_other_actions(
        &mut self,
        env: &dyn Environment,
        action: usize,
        legal: &[usize],
        on_copy: &Outcome,
    ) {
        let n = self.n;
        let tried: Vec<usize> = if n <= self.options.probes {
            (0..n).collect()
        } else {
            sample(&mut self.rng, n, self.options.probes).into_vec()
        };
        for a in tried.into_iter().chain([n]) {
            let is_legal = legal.contains(&a);
            let check = if is_legal {
                "step_legal"
            } else {
                "step_illegal"
            };
            if a == action || self.report.violation(check).is_some() {
                continue;
            }
            let mut copy = env.clone_box();
            let outcome = try_step(copy.as_mut(), a);
            if is_legal {
                match outcome {
                    Outcome::Accepted(result) => {
                        let when = format!("after step({a}) on a copy");
                        self.observation(&result.observation, &when);
                        self.reward(result.reward, &when);
                    }
                    refused => self.add(
                        "step_legal",
                        format!(
                            "step({a}), an action the mask allows (legal: {legal:?}), {}",
                            refused.predicate()
                        ),
                    ),
                }
                continue;
            }
            let what = if a < n {
                format!("step({a}), an action the mask forbids (legal: {legal:?}),")
            } else {
                format!("step({a}), outside the action space 0..{n},")
            };
            match outcome {
                Outcome::Accepted(_) => self.add("step_illegal", format!("{what} was accepted")),
                Outcome::Panicked(message) => self.add(
                    "step_illegal",
                    format!("{what} panicked instead of returning an error: {message}"),
                ),
                Outcome::Refused(_) => {
                    if let Some(d) = state_difference(env, copy.as_mut(), action, on_copy) {
                        self.add(
                            "step_illegal",
                            format!("{what} was refused but changed the state: {d}"),
                        );
                    }
                }
            }
        }
    }

    /// After the end, `step` is refused (with the action just played and another one).
    fn step_after_end(
        &mut self,
        env: &mut dyn Environment,
        end: &StepResult,
        action: usize,
        legal: &[usize],
    ) {
        let how = if end.terminated {
            "terminated"
        } else {
            "truncated"
        };
        let mut tried = vec![action];
        tried.extend(legal.iter().find(|&&a| a != action));
        for a in tried {
            let outcome = try_step(env, a);
            if !matches!(outcome, Outcome::Refused(_)) {
                self.add(
                    "episode_end",
                    format!(
                        "step({a}) after the episode {how} {} (it must be refused with \
                         EnvError::EpisodeOver until reset)",
                        outcome.predicate()
                    ),
                );
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::Info;
    use crate::{make, names};

    #[test]
    fn every_built_in_environment_passes() {
        let options = CheckOptions {
            episodes: 20,
            ..Default::default()
        };
        for &name in names() {
            let mut env = make(name).unwrap();
            let report = check_env_with(env.as_mut(), &options);
            assert!(report.passed(), "{name}: {report}");
            assert_eq!(report.episodes, 20, "{name}");
            assert!(report.steps >= 20 * 4, "{name}: {report}");
        }
    }

    #[test]
    fn permutations() {
        assert_eq!(permutation_problem(&[2, 0, 1], 3), None);
        assert!(permutation_problem(&[0, 1], 3)
            .unwrap()
            .contains("2 entries"));
        assert!(permutation_problem(&[0, 3, 1], 3)
            .unwrap()
            .contains("3, outside 0..3"));
        assert!(permutation_problem(&[0, 1, 1], 3)
            .unwrap()
            .contains("1 appears twice"));
    }

    #[test]
    fn comparisons_treat_nan_as_equal_and_name_the_difference() {
        assert_eq!(
            observation_difference(&[f32::NAN, 1.0], &[f32::NAN, 1.0]),
            None
        );
        assert_eq!(
            observation_difference(&[0.0, 1.0], &[0.0, 2.0]).unwrap(),
            "element 1: 1 then 2"
        );
        let a = StepResult {
            observation: vec![0.0],
            reward: f64::NAN,
            terminated: false,
            truncated: false,
            info: Info::new(),
        };
        assert_eq!(step_difference(&a, &a.clone()), None);
        let b = StepResult {
            truncated: true,
            ..a.clone()
        };
        assert_eq!(
            step_difference(&a, &b).unwrap(),
            "truncated false then true"
        );
    }

    #[test]
    fn the_report_prints_each_violation_on_its_line() {
        let mut report = CheckReport {
            episodes: 3,
            steps: 17,
            ..Default::default()
        };
        assert_eq!(report.to_string(), "ok (3 episodes, 17 steps)");
        report.add("reward", "step(1): the reward is inf".into());
        report.add("reward", "a second one is not kept".into());
        report.add("to_play", "to_play() is 1 with 1 player(s)".into());
        assert_eq!(
            report.to_string(),
            "2 problem(s) (3 episodes, 17 steps)\n  reward: step(1): the reward is inf\n  \
             to_play: to_play() is 1 with 1 player(s)"
        );
        assert!(!report.passed());
        assert!(report.violation("to_play").is_some() && report.violation("clone").is_none());
    }
}
