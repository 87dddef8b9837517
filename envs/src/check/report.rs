//! What a check returns: the options it ran with, and the violations it found.

use std::fmt;

/// How long to play and how much to try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckOptions {
    /// Episodes played with random legal actions (episode `i` starts with
    /// `reset(Some(seed + i))`).
    pub episodes: usize,
    /// Steps after which an episode without a time limit counts as endless (and at which a
    /// longer time limit stops the episode without a violation).
    pub max_steps: usize,
    /// Actions tried on copies at every step besides the one played (the out-of-range action
    /// `n` is always tried too); every action when the action space has at most this many.
    pub probes: usize,
    /// Seed of the random actions and of the resets.
    pub seed: u64,
}

impl Default for CheckOptions {
    fn default() -> Self {
        Self {
            episodes: 10,
            max_steps: 10_000,
            probes: 16,
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

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.check, self.message)
    }
}

/// What [`check_env`](crate::check_env) found: every broken rule, and how much it played.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Every broken rule, once per check, in the order found; empty if the environment passed.
    pub violations: Vec<Violation>,
    /// Episodes played (including any a violation cut short).
    pub episodes: usize,
    /// Steps played in those episodes (not counting the replays and the copies).
    pub steps: usize,
}

impl CheckReport {
    /// Whether no rule was broken.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }

    /// The violation of `check` (e.g. `"observation"`), if that rule was broken.
    pub fn violation(&self, check: &str) -> Option<&Violation> {
        self.violations.iter().find(|v| v.check == check)
    }

    pub(super) fn add(&mut self, check: &'static str, message: String) {
        if self.violation(check).is_none() {
            self.violations.push(Violation { check, message });
        }
    }
}

/// `ok (10 episodes, 96 steps)`, or the number of problems followed by one indented line each.
impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let played = format!("{} episodes, {} steps", self.episodes, self.steps);
        if self.passed() {
            return write!(f, "ok ({played})");
        }
        write!(f, "{} problem(s) ({played})", self.violations.len())?;
        for v in &self.violations {
            write!(f, "\n  {v}")?;
        }
        Ok(())
    }
}
