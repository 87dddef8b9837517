//! `check_env` finds each deliberately broken rule of the Environment contract, and only that
//! one.

use cumind_envs::{
    check_env, check_env_with, CheckOptions, EnvError, Environment, Info, Space, StepResult,
    Symmetry,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The one thing a `Walk` does wrong.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Defect {
    None,
    /// `action_space()` is a box.
    BoxActionSpace,
    /// One bound of the observation space has low above high.
    BadObservationSpace,
    /// Observations have 4 values, the space 5.
    ShortObservation,
    /// NaN in the observation at position 2.
    NanObservation,
    /// Element 0 of the observation is 7, above its bound 1.
    OutOfBounds,
    /// `reset(Some(seed))` ignores the seed.
    ResetIgnoresSeed,
    /// `step` draws from a generator that `reset` does not reseed (action 1 may slip).
    StepsIgnoreSeed,
    /// `legal_actions()` lists action 2 everywhere; the mask and `step` agree with each other.
    LegalActionsDisagreeWithMask,
    /// The mask (and `legal_actions()`) allow action 2 everywhere, `step` refuses it away
    /// from 0.
    MaskAllowsRefusedAction,
    /// `step` accepts action 2 everywhere, the mask allows it only at 0.
    StepAcceptsMaskedAction,
    /// `step(3)` (outside the action space) panics.
    OutOfRangePanics,
    /// A refused action 2 moves the walker.
    IllegalChangesState,
    /// Nothing is legal at position 3.
    NoLegalAction,
    /// `to_play()` is 1 in a one-player environment.
    ToPlayOutOfRange,
    /// `num_players()` is 3.
    ThreePlayers,
    /// Two players, but player 0 is always to move.
    TurnDoesNotPass,
    /// `step` after the end is accepted.
    StepAfterEndAccepted,
    /// No time limit and no end.
    NeverEnds,
    /// `max_episode_steps()` says 12, the episode is truncated after 13.
    TruncatesLate,
    /// The reward of the winning step is infinite.
    InfiniteReward,
    /// `clone_box()` forgets the step count (so a copy is truncated later).
    CloneForgetsSteps,
    /// A symmetry whose observation map is too short.
    BadSymmetry,
}

/// A walk on 0..=4 from a random start in 0..3: action 0 left, 1 right, 2 stay (legal only at
/// 0). Reaching 4 terminates the episode with +1; it is truncated after 12 steps.
#[derive(Clone)]
struct Walk {
    pos: usize,
    steps: usize,
    done: bool,
    rng: StdRng,
    /// Only used by `StepsIgnoreSeed`.
    slip: StdRng,
    defect: Defect,
    resets: u64,
}

impl Walk {
    fn new(defect: Defect) -> Self {
        Walk {
            pos: 0,
            steps: 0,
            done: false,
            rng: StdRng::seed_from_u64(0),
            slip: StdRng::seed_from_u64(99),
            defect,
            resets: 0,
        }
    }

    fn obs(&self) -> Vec<f32> {
        let mut obs = vec![0.0; 5];
        obs[self.pos] = 1.0;
        match self.defect {
            Defect::ShortObservation => obs.truncate(4),
            Defect::NanObservation if self.pos == 2 => obs[0] = f32::NAN,
            Defect::OutOfBounds => obs[0] = 7.0,
            _ => {}
        }
        obs
    }

    fn legal(&self) -> Vec<usize> {
        match (self.pos, self.defect) {
            (3, Defect::NoLegalAction) => vec![],
            (0, _) => vec![0, 1, 2],
            _ => vec![0, 1],
        }
    }
}

impl Environment for Walk {
    fn name(&self) -> &str {
        "Walk"
    }

    fn reset(&mut self, seed: Option<u64>) -> (Vec<f32>, Info) {
        self.resets += 1;
        match (seed, self.defect) {
            (Some(_), Defect::ResetIgnoresSeed) => self.rng = StdRng::seed_from_u64(self.resets),
            (Some(seed), _) => self.rng = StdRng::seed_from_u64(seed),
            _ => {}
        }
        self.pos = self.rng.random_range(0..3);
        self.steps = 0;
        self.done = false;
        (self.obs(), Info::new())
    }

    fn step(&mut self, action: usize) -> Result<StepResult, EnvError> {
        if self.done && self.defect != Defect::StepAfterEndAccepted {
            return Err(EnvError::EpisodeOver);
        }
        if action > 2 {
            if self.defect == Defect::OutOfRangePanics {
                panic!("no move for action {action}");
            }
            return Err(EnvError::ActionOutOfRange { action, n: 3 });
        }
        let legal = self.legal();
        let accepted = self.defect == Defect::StepAcceptsMaskedAction || legal.contains(&action);
        if !accepted {
            if self.defect == Defect::IllegalChangesState {
                self.pos = (self.pos + 1) % 4;
            }
            return Err(EnvError::IllegalAction { action, legal });
        }
        let slipped = self.defect == Defect::StepsIgnoreSeed && self.slip.random_bool(0.5);
        match action {
            0 => self.pos = self.pos.saturating_sub(1),
            1 if !slipped => self.pos = (self.pos + 1).min(4),
            _ => {}
        }
        self.steps += 1;
        let never_ends = self.defect == Defect::NeverEnds;
        let terminated = self.pos == 4 && !never_ends;
        let time_limit = if self.defect == Defect::TruncatesLate {
            13
        } else {
            12
        };
        let truncated = !terminated && self.steps >= time_limit && !never_ends;
        self.done = terminated || truncated;
        let reward = match (terminated, self.defect) {
            (true, Defect::InfiniteReward) => f64::INFINITY,
            (true, _) => 1.0,
            _ => 0.0,
        };
        Ok(StepResult {
            observation: self.obs(),
            reward,
            terminated,
            truncated,
            info: Info::new(),
        })
    }

    fn action_space(&self) -> Space {
        if self.defect == Defect::BoxActionSpace {
            Space::uniform_box(0.0, 2.0, vec![1])
        } else {
            Space::Discrete { n: 3 }
        }
    }

    fn observation_space(&self) -> Space {
        let mut space = Space::uniform_box(0.0, 1.0, vec![5]);
        if let (Space::Box { low, .. }, Defect::BadObservationSpace) = (&mut space, self.defect) {
            low[3] = 2.0;
        }
        space
    }

    fn num_players(&self) -> usize {
        match self.defect {
            Defect::ThreePlayers => 3,
            Defect::TurnDoesNotPass => 2,
            _ => 1,
        }
    }

    fn to_play(&self) -> usize {
        usize::from(self.defect == Defect::ToPlayOutOfRange)
    }

    fn legal_actions(&self) -> Vec<usize> {
        if matches!(
            self.defect,
            Defect::LegalActionsDisagreeWithMask | Defect::MaskAllowsRefusedAction
        ) {
            vec![0, 1, 2]
        } else {
            self.legal()
        }
    }

    fn legal_action_mask(&self) -> Vec<bool> {
        let legal = self.legal();
        let mut mask: Vec<bool> = (0..3).map(|a| legal.contains(&a)).collect();
        if self.defect == Defect::MaskAllowsRefusedAction {
            mask[2] = true;
        }
        mask
    }

    fn max_episode_steps(&self) -> Option<usize> {
        if self.defect == Defect::NeverEnds {
            None
        } else {
            Some(12)
        }
    }

    fn render(&self) -> String {
        format!("at {}", self.pos)
    }

    fn clone_box(&self) -> Box<dyn Environment> {
        let mut copy = self.clone();
        if self.defect == Defect::CloneForgetsSteps {
            copy.steps = 0;
        }
        Box::new(copy)
    }

    fn symmetries(&self) -> Vec<Symmetry> {
        if self.defect == Defect::BadSymmetry {
            vec![Symmetry {
                observation: vec![4, 3, 2, 1],
                negate: vec![false; 4],
                actions: vec![1, 0, 2],
            }]
        } else {
            Vec::new()
        }
    }
}

/// What `check_env` says about a `Walk` with `defect`.
fn report(defect: Defect) -> cumind_envs::CheckReport {
    check_env(&mut Walk::new(defect))
}

/// The message of the one violation of `check` for `defect`.
fn message(defect: Defect, check: &str) -> String {
    let report = report(defect);
    report
        .violation(check)
        .unwrap_or_else(|| panic!("{defect:?}: no {check} violation in {report}"))
        .message
        .clone()
}

#[test]
fn a_correct_environment_passes() {
    let report = report(Defect::None);
    assert!(report.passed(), "{report}");
    assert_eq!(report.episodes, 10);
    assert!(report.steps >= 10, "{report}");
}

#[test]
fn each_defect_is_reported_by_its_check_and_no_other() {
    let cases = [
        (Defect::BoxActionSpace, "action_space"),
        (Defect::BadObservationSpace, "observation_space"),
        (Defect::ShortObservation, "observation"),
        (Defect::NanObservation, "observation"),
        (Defect::OutOfBounds, "observation"),
        (Defect::ResetIgnoresSeed, "reset_seed"),
        (Defect::StepsIgnoreSeed, "reset_seed"),
        (Defect::LegalActionsDisagreeWithMask, "legal_actions"),
        (Defect::MaskAllowsRefusedAction, "step_legal"),
        (Defect::StepAcceptsMaskedAction, "step_illegal"),
        (Defect::OutOfRangePanics, "step_illegal"),
        (Defect::IllegalChangesState, "step_illegal"),
        (Defect::NoLegalAction, "legal_actions"),
        (Defect::ToPlayOutOfRange, "to_play"),
        (Defect::ThreePlayers, "to_play"),
        (Defect::TurnDoesNotPass, "to_play"),
        (Defect::StepAfterEndAccepted, "episode_end"),
        (Defect::NeverEnds, "episode_end"),
        (Defect::TruncatesLate, "episode_end"),
        (Defect::InfiniteReward, "reward"),
        (Defect::CloneForgetsSteps, "clone"),
        (Defect::BadSymmetry, "symmetries"),
    ];
    for (defect, check) in cases {
        let report = report(defect);
        let failed: Vec<&str> = report.violations.iter().map(|v| v.check).collect();
        assert_eq!(failed, [check], "{defect:?}: {report}");
    }
}

#[test]
fn messages_name_what_was_wrong_and_the_values() {
    let cases = [
        (
            Defect::ShortObservation,
            "observation",
            "after reset(Some(0)): 4 values, the observation space (shape [5]) has 5",
        ),
        (Defect::NanObservation, "observation", "element 0 is NaN"),
        (
            Defect::OutOfBounds,
            "observation",
            "element 0 is 7, outside its bounds [0, 1]",
        ),
        (
            Defect::BadObservationSpace,
            "observation_space",
            "element 3 has low 2 and high 1",
        ),
        (
            Defect::BoxActionSpace,
            "action_space",
            "must be discrete with at least one action, is Box",
        ),
        (
            Defect::ResetIgnoresSeed,
            "reset_seed",
            "reset(Some(0)) twice gave different first observations: element",
        ),
        (
            Defect::StepsIgnoreSeed,
            "reset_seed",
            "after reset(Some(0)) the actions",
        ),
        (
            Defect::LegalActionsDisagreeWithMask,
            "legal_actions",
            "legal_actions() is [0, 1, 2] but legal_action_mask() allows [0, 1]",
        ),
        (
            Defect::MaskAllowsRefusedAction,
            "step_legal",
            "step(2), an action the mask allows (legal: [0, 1, 2]), was refused (illegal \
             action 2: the legal actions are [0, 1])",
        ),
        (
            Defect::StepAcceptsMaskedAction,
            "step_illegal",
            "step(2), an action the mask forbids (legal: [0, 1]), was accepted",
        ),
        (
            Defect::OutOfRangePanics,
            "step_illegal",
            "step(3), outside the action space 0..3, panicked instead of returning an error: \
             no move for action 3",
        ),
        (
            Defect::IllegalChangesState,
            "step_illegal",
            "step(2), an action the mask forbids (legal: [0, 1]), was refused but changed the \
             state: ",
        ),
        (
            Defect::NoLegalAction,
            "legal_actions",
            "no legal action after",
        ),
        (
            Defect::ToPlayOutOfRange,
            "to_play",
            "to_play() is 1 with 1 player(s)",
        ),
        (Defect::ThreePlayers, "to_play", "num_players() is 3"),
        (
            Defect::TurnDoesNotPass,
            "to_play",
            "player 0 is to move again after step(",
        ),
        (
            Defect::StepAfterEndAccepted,
            "episode_end",
            "after the episode terminated was accepted",
        ),
        (
            Defect::NeverEnds,
            "episode_end",
            "no end after 10000 steps and max_episode_steps() is None",
        ),
        (
            Defect::TruncatesLate,
            "episode_end",
            "the episode did not end after 12 steps, though max_episode_steps() is Some(12)",
        ),
        (Defect::InfiniteReward, "reward", "the reward is inf"),
        (
            Defect::CloneForgetsSteps,
            "clone",
            "on a copy made by clone_box() and on the original differ (the copy first): truncated \
             false then true",
        ),
        (
            Defect::BadSymmetry,
            "symmetries",
            "symmetry 0: the observation map has 4 entries, expected 5",
        ),
    ];
    for (defect, check, needle) in cases {
        let text = message(defect, check);
        assert!(
            text.contains(needle),
            "{defect:?}: {text:?} lacks {needle:?}"
        );
    }
}

#[test]
fn options_set_the_episodes_the_limit_and_the_seed() {
    let options = CheckOptions {
        episodes: 3,
        max_steps: 50,
        probes: 1,
        seed: 7,
    };
    let report = check_env_with(&mut Walk::new(Defect::NeverEnds), &options);
    assert_eq!(report.episodes, 3);
    assert_eq!(report.steps, 3 * 50);
    let text = report.violation("episode_end").unwrap().to_string();
    assert!(text.contains("no end after 50 steps"), "{text}");
    let text = message_with(Defect::ShortObservation, &options);
    assert!(text.contains("after reset(Some(7))"), "{text}");
    // The same options give the same report.
    assert_eq!(
        check_env_with(&mut Walk::new(Defect::StepsIgnoreSeed), &options),
        check_env_with(&mut Walk::new(Defect::StepsIgnoreSeed), &options)
    );
}

fn message_with(defect: Defect, options: &CheckOptions) -> String {
    check_env_with(&mut Walk::new(defect), options).violations[0].to_string()
}
