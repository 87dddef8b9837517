//! An environment checker, like Gymnasium's `check_env`: it plays an environment with random
//! legal actions and reports every way it breaks the [`Environment`] contract, so a user
//! finds a broken environment before a training run does.
//!
//! Checked, each reported once with the values involved:
//! - `action_space`: discrete with at least one action;
//! - `observation`: the observation space is a box; every observation (after `reset` and
//!   `step`) has its flat length, finite values, and lies within its bounds;
//! - `reset_seed`: `reset(Some(seed))` twice gives the same first observation, and the same
//!   actions then give the same steps;
//! - `legal_actions`: the mask has one entry per action, agrees with `legal_actions()`, and is
//!   not empty while the episode runs;
//! - `to_play`: below `num_players()`;
//! - `step_legal`: `step` accepts every action the mask allows;
//! - `step_illegal`: `step` refuses an action the mask forbids, and leaves the state unchanged;
//! - `reward`: finite;
//! - `episode_end`: stepping after `terminated` or `truncated` is refused, and an episode ends
//!   within `max_episode_steps()` (or the checker's step limit);
//! - `clone`: `clone_box()` steps exactly like the original.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::env::{Environment, Space, StepResult};

/// How long to play.
#[derive(Debug, Clone, Copy)]
pub struct CheckOptions {
    /// Episodes played with random legal actions.
    pub episodes: usize,
    /// Steps after which an episode without a time limit counts as endless.
    pub max_steps: usize,
    /// Seed of the random actions and of the resets.
    pub seed: u64,
}

impl Default for CheckOptions {
    fn default() -> Self {
        Self {
            episodes: 10,
            max_steps: 10_000,
            seed: 0,
        }
    }
}

/// One broken rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which check (see the module docs), e.g. `"reset_seed"`.
    pub check: &'static str,
    /// What was wrong, with the values involved.
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.check, self.message)
    }
}

/// Check `env` with the default options; an empty list means it passed.
pub fn check_env(env: &mut dyn Environment) -> Vec<Violation> {
    check_env_with(env, &CheckOptions::default())
}

/// Check `env`; every broken rule is reported once (its first occurrence).
pub fn check_env_with(env: &mut dyn Environment, options: &CheckOptions) -> Vec<Violation> {
    let mut report = Report::default();
    let Some(n) = env.action_space().n().filter(|&n| n >= 1) else {
        report.add(
            "action_space",
            format!(
                "must be discrete with at least one action, is {:?}",
                env.action_space()
            ),
        );
        return report.violations;
    };
    let space = env.observation_space();
    if !matches!(space, Space::Box { .. }) {
        report.add(
            "observation",
            format!("the space must be a box, is {space:?}"),
        );
        return report.violations;
    }
    let mut rng = StdRng::seed_from_u64(options.seed);
    for episode in 0..options.episodes {
        let seed = options.seed.wrapping_add(episode as u64);
        check_reset_reproduces(env, seed, n, &mut report);
        let (obs, _) = env.reset(Some(seed));
        report.observation(&space, &obs, "after reset");
        play_episode(env, n, &space, options, &mut rng, &mut report);
    }
    report.violations
}

#[derive(Default)]
struct Report {
    violations: Vec<Violation>,
}

impl Report {
    fn add(&mut self, check: &'static str, message: String) {
        if !self.violations.iter().any(|v| v.check == check) {
            self.violations.push(Violation { check, message });
        }
    }

    fn observation(&mut self, space: &Space, obs: &[f32], when: &str) {
        let expected = space.flat_len();
        if obs.len() != expected {
            self.add(
                "observation",
                format!(
                    "{when}: {} values, the observation space has {expected}",
                    obs.len()
                ),
            );
        } else if let Some(i) = obs.iter().position(|x| !x.is_finite()) {
            self.add("observation", format!("{when}: element {i} is {}", obs[i]));
        } else if !space.contains(obs) {
            self.add(
                "observation",
                format!("{when}: {obs:?} lies outside the observation space's bounds"),
            );
        }
    }
}

/// Two resets with the same seed, then the same random actions: identical.
fn check_reset_reproduces(env: &mut dyn Environment, seed: u64, n: usize, report: &mut Report) {
    let trajectory = |env: &mut dyn Environment| {
        let (first, _) = env.reset(Some(seed));
        let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
        let mut steps: Vec<Result<StepResult, String>> = Vec::new();
        for _ in 0..5 {
            let legal = legal_of(env, n);
            if legal.is_empty() {
                break;
            }
            let step = env
                .step(legal[rng.random_range(0..legal.len())])
                .map_err(|e| e.to_string());
            let end = step.as_ref().map_or(true, |s| s.terminated || s.truncated);
            steps.push(step);
            if end {
                break;
            }
        }
        (first, steps)
    };
    let (a, steps_a) = trajectory(env);
    let (b, steps_b) = trajectory(env);
    if a != b {
        report.add(
            "reset_seed",
            format!("reset(Some({seed})) gave {a:?}, then {b:?}"),
        );
    } else if steps_a != steps_b {
        report.add(
            "reset_seed",
            format!("after reset(Some({seed})) the same actions gave different steps"),
        );
    }
}

/// The legal actions by the mask (falls back to `legal_actions()` if the mask is malformed).
fn legal_of(env: &dyn Environment, n: usize) -> Vec<usize> {
    let mask = env.legal_action_mask();
    if mask.len() == n {
        (0..n).filter(|&a| mask[a]).collect()
    } else {
        env.legal_actions().into_iter().filter(|&a| a < n).collect()
    }
}

fn play_episode(
    env: &mut dyn Environment,
    n: usize,
    space: &Space,
    options: &CheckOptions,
    rng: &mut StdRng,
    report: &mut Report,
) {
    let limit = env.max_episode_steps().unwrap_or(options.max_steps);
    for step_index in 0..=limit {
        let mask = env.legal_action_mask();
        let legal = env.legal_actions();
        if mask.len() != n {
            report.add(
                "legal_actions",
                format!("the mask has {} entries for {n} actions", mask.len()),
            );
        } else {
            let from_mask: Vec<usize> = (0..n).filter(|&a| mask[a]).collect();
            if from_mask != legal {
                report.add(
                    "legal_actions",
                    format!("legal_actions() is {legal:?} but the mask allows {from_mask:?}"),
                );
            }
        }
        let legal = legal_of(env, n);
        if legal.is_empty() {
            report.add(
                "legal_actions",
                "no legal action while the episode runs".to_string(),
            );
            return;
        }
        if env.to_play() >= env.num_players() {
            report.add(
                "to_play",
                format!(
                    "to_play() is {} with {} player(s)",
                    env.to_play(),
                    env.num_players()
                ),
            );
        }
        check_illegal_action(env, n, &legal, report);
        if step_index == limit {
            report.add(
                "episode_end",
                format!(
                    "no end after {limit} steps (max_episode_steps {:?})",
                    env.max_episode_steps()
                ),
            );
            return;
        }
        let action = legal[rng.random_range(0..legal.len())];
        let mut copy = env.clone_box();
        let result = match env.step(action) {
            Ok(result) => result,
            Err(e) => {
                report.add(
                    "step_legal",
                    format!("step({action}) refused a legal action: {e}"),
                );
                return;
            }
        };
        if copy.step(action).ok().as_ref() != Some(&result) {
            report.add(
                "clone",
                format!("a clone stepped with {action} gave a different result"),
            );
        }
        report.observation(space, &result.observation, &format!("after step({action})"));
        if !result.reward.is_finite() {
            report.add("reward", format!("step({action}) gave {}", result.reward));
        }
        if result.terminated || result.truncated {
            if env.step(action).is_ok() || env.step(legal[0]).is_ok() {
                report.add(
                    "episode_end",
                    "a step after the episode ended was accepted (it must be refused until reset)"
                        .to_string(),
                );
            }
            return;
        }
    }
}

/// An action the mask forbids must be refused and change nothing.
fn check_illegal_action(env: &mut dyn Environment, n: usize, legal: &[usize], report: &mut Report) {
    let Some(illegal) = (0..n).find(|a| !legal.contains(a)) else {
        return;
    };
    let untouched = env.clone_box();
    match env.step(illegal) {
        Ok(_) => report.add(
            "step_illegal",
            format!("step({illegal}) was accepted though the mask forbids it (legal: {legal:?})"),
        ),
        Err(_) => {
            // Same state: the next legal step gives the same result as on an untouched copy.
            let mut a = env.clone_box();
            let mut b = untouched.clone_box();
            if a.step(legal[0]).ok() != b.step(legal[0]).ok() || a.to_play() != b.to_play() {
                report.add(
                    "step_illegal",
                    format!("the refused step({illegal}) changed the environment's state"),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{make, names};

    #[test]
    fn every_built_in_environment_passes() {
        for &name in names() {
            let mut env = make(name).unwrap();
            let violations = check_env(env.as_mut());
            assert!(violations.is_empty(), "{name}: {violations:?}");
        }
    }
}
