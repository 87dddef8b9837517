//! Comparing what an environment did: steps with panics caught, observations, infos, whole
//! trajectories and states, NaN counted equal to NaN; and the shape checks of spaces and
//! symmetries.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::env::{EnvError, Environment, Info, StepResult};

/// Why a box's bounds are malformed, if they are.
pub(super) fn bounds_problem(low: &[f32], high: &[f32], shape: &[usize]) -> Option<String> {
    let len: usize = shape.iter().product();
    if low.len() != len || high.len() != len {
        return Some(format!(
            "shape {shape:?} has {len} elements but low has {} bounds and high {}",
            low.len(),
            high.len()
        ));
    }
    let i = (0..len).find(|&i| low[i].is_nan() || high[i].is_nan() || low[i] > high[i])?;
    Some(format!(
        "element {i} has low {} and high {} (low must be at most high, neither NaN)",
        low[i], high[i]
    ))
}

/// What one call to `step` did.
#[derive(Debug, Clone)]
pub(super) enum Outcome {
    Accepted(StepResult),
    Refused(EnvError),
    Panicked(String),
}

impl Outcome {
    pub(super) fn describe(&self) -> String {
        match self {
            Outcome::Accepted(_) => "accepted".to_string(),
            Outcome::Refused(e) => format!("refused ({e})"),
            Outcome::Panicked(message) => format!("panicked ({message})"),
        }
    }

    /// `describe` after a subject: "was accepted", "was refused (...)", "panicked (...)".
    pub(super) fn predicate(&self) -> String {
        match self {
            Outcome::Panicked(_) => self.describe(),
            _ => format!("was {}", self.describe()),
        }
    }
}

/// `env.step(action)`, with a panic caught.
pub(super) fn try_step(env: &mut dyn Environment, action: usize) -> Outcome {
    match catch_unwind(AssertUnwindSafe(|| env.step(action))) {
        Ok(Ok(result)) => Outcome::Accepted(result),
        Ok(Err(e)) => Outcome::Refused(e),
        Err(payload) => Outcome::Panicked(panic_message(payload.as_ref())),
    }
}

pub(super) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

pub(super) fn same_f32(a: f32, b: f32) -> bool {
    a == b || (a.is_nan() && b.is_nan())
}

pub(super) fn same_f64(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan())
}

/// How observation `b` differs from `a` ("element 3: 0 then 1"), if it does.
pub(super) fn observation_difference(a: &[f32], b: &[f32]) -> Option<String> {
    if a.len() != b.len() {
        return Some(format!("{} values then {}", a.len(), b.len()));
    }
    let i = (0..a.len()).find(|&i| !same_f32(a[i], b[i]))?;
    Some(format!("element {i}: {} then {}", a[i], b[i]))
}

pub(super) fn info_difference(a: &Info, b: &Info) -> Option<String> {
    let same = a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|((ka, va), (kb, vb))| ka == kb && same_f64(*va, *vb));
    (!same).then(|| format!("info {a:?} then {b:?}"))
}

pub(super) fn step_difference(a: &StepResult, b: &StepResult) -> Option<String> {
    if let Some(d) = observation_difference(&a.observation, &b.observation) {
        Some(format!("observation {d}"))
    } else if !same_f64(a.reward, b.reward) {
        Some(format!("reward {} then {}", a.reward, b.reward))
    } else if a.terminated != b.terminated {
        Some(format!("terminated {} then {}", a.terminated, b.terminated))
    } else if a.truncated != b.truncated {
        Some(format!("truncated {} then {}", a.truncated, b.truncated))
    } else {
        info_difference(&a.info, &b.info)
    }
}

pub(super) fn outcome_difference(a: &Outcome, b: &Outcome) -> Option<String> {
    match (a, b) {
        (Outcome::Accepted(x), Outcome::Accepted(y)) => step_difference(x, y),
        (Outcome::Refused(x), Outcome::Refused(y)) if x == y => None,
        (Outcome::Panicked(_), Outcome::Panicked(_)) => None,
        _ => Some(format!("{} then {}", a.describe(), b.describe())),
    }
}

/// How a replay (`actions_b` giving `steps_b`) differs from the first play, if it does.
pub(super) fn trajectory_difference(
    actions_a: &[usize],
    steps_a: &[Outcome],
    actions_b: &[usize],
    steps_b: &[Outcome],
) -> Option<String> {
    for k in 0..actions_a.len().min(actions_b.len()) {
        if actions_a[k] != actions_b[k] {
            return Some(format!(
                "the same random choice among the legal actions picked {} then {} at step {} \
                 (after the actions {:?}: the legal actions differ)",
                actions_a[k],
                actions_b[k],
                k + 1,
                &actions_a[..k]
            ));
        }
        if let Some(d) = outcome_difference(&steps_a[k], &steps_b[k]) {
            return Some(format!(
                "the actions {:?} gave a different step {}: {d}",
                &actions_a[..=k],
                k + 1
            ));
        }
    }
    (actions_a.len() != actions_b.len()).then(|| {
        format!(
            "the same steps left no legal action after {} steps, then after {}",
            actions_a.len(),
            actions_b.len()
        )
    })
}

/// The legal actions by the mask (by `legal_actions()` if the mask has the wrong length).
pub(super) fn legal_of(env: &dyn Environment, n: usize) -> Vec<usize> {
    let mask = env.legal_action_mask();
    if mask.len() == n {
        (0..n).filter(|&a| mask[a]).collect()
    } else {
        env.legal_actions().into_iter().filter(|&a| a < n).collect()
    }
}

/// Why `map` is not a permutation of `0..len`, if it is not.
pub(super) fn permutation_problem(map: &[usize], len: usize) -> Option<String> {
    if map.len() != len {
        return Some(format!("has {} entries, expected {len}", map.len()));
    }
    let mut seen = vec![false; len];
    for (i, &j) in map.iter().enumerate() {
        if j >= len {
            return Some(format!("has entry {i} = {j}, outside 0..{len}"));
        }
        if seen[j] {
            return Some(format!("is not a permutation: {j} appears twice"));
        }
        seen[j] = true;
    }
    None
}

/// How `after` (a copy that refused a step) differs from `before` (the untouched original):
/// `to_play()`, the mask, `render()`, and then `action` against `expected` (what `action`
/// gives on an untouched copy).
pub(super) fn state_difference(
    before: &dyn Environment,
    after: &mut dyn Environment,
    action: usize,
    expected: &Outcome,
) -> Option<String> {
    let (p0, p1) = (before.to_play(), after.to_play());
    if p0 != p1 {
        return Some(format!("to_play() {p0} before, {p1} after"));
    }
    let (m0, m1) = (before.legal_action_mask(), after.legal_action_mask());
    if m0 != m1 {
        return Some(format!("legal_action_mask() {m0:?} before, {m1:?} after"));
    }
    let (r0, r1) = (before.render(), after.render());
    if r0 != r1 {
        return Some(format!("render() {r0:?} before, {r1:?} after"));
    }
    outcome_difference(expected, &try_step(after, action))
        .map(|d| format!("step({action}) gives on it and on an untouched copy: {d}"))
}
