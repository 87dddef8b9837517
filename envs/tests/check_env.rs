//! `check_env` finds each deliberately broken rule of the Environment contract.

use cumind_envs::{check_env, EnvError, Environment, Info, Space, StepResult};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The one thing a `Walk` does wrong.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Defect {
    None,
    ShortObservation,
    NanObservation,
    OutOfBounds,
    ResetIgnoresSeed,
    MaskDisagreesWithLegalActions,
    StepRefusesLegal,
    StepAcceptsIllegal,
    IllegalChangesState,
    ToPlayOutOfRange,
    StepAfterEndAccepted,
    NeverEnds,
    InfiniteReward,
}

/// A walk on 0..=4 from a random start; action 0 left, 1 right, 2 (legal only at 0) stays.
/// The episode ends at 4 (+1) or after 12 steps.
#[derive(Clone)]
struct Walk {
    pos: usize,
    steps: usize,
    done: bool,
    rng: StdRng,
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
        if self.pos == 0 {
            vec![0, 1, 2]
        } else {
            vec![0, 1]
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
        let legal = self.legal();
        let refused = match self.defect {
            Defect::StepRefusesLegal => action == 1,
            Defect::StepAcceptsIllegal => action > 2,
            _ => !legal.contains(&action),
        };
        if refused || action > 2 {
            if self.defect == Defect::IllegalChangesState {
                self.pos = (self.pos + 1) % 4;
            }
            return Err(EnvError::IllegalAction { action, legal });
        }
        match action {
            0 => self.pos = self.pos.saturating_sub(1),
            1 => self.pos += 1,
            _ => {}
        }
        self.steps += 1;
        let terminated = self.pos == 4 && self.defect != Defect::NeverEnds;
        if self.pos == 4 {
            self.pos = 3;
        }
        let truncated = !terminated && self.steps >= 12 && self.defect != Defect::NeverEnds;
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
        Space::Discrete { n: 3 }
    }

    fn observation_space(&self) -> Space {
        Space::uniform_box(0.0, 1.0, vec![5])
    }

    fn legal_actions(&self) -> Vec<usize> {
        self.legal()
    }

    fn legal_action_mask(&self) -> Vec<bool> {
        let legal = self.legal();
        let mut mask: Vec<bool> = (0..3).map(|a| legal.contains(&a)).collect();
        if self.defect == Defect::MaskDisagreesWithLegalActions {
            mask[2] = true;
        }
        mask
    }

    fn to_play(&self) -> usize {
        if self.defect == Defect::ToPlayOutOfRange {
            1
        } else {
            0
        }
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
        Box::new(self.clone())
    }
}

/// The checks `check_env` reports for a `Walk` with `defect`.
fn failed_checks(defect: Defect) -> Vec<&'static str> {
    let mut env = Walk::new(defect);
    check_env(&mut env).into_iter().map(|v| v.check).collect()
}

#[test]
fn a_correct_environment_passes() {
    assert_eq!(failed_checks(Defect::None), Vec::<&str>::new());
}

#[test]
fn each_defect_is_reported_by_its_check() {
    let cases = [
        (Defect::ShortObservation, "observation"),
        (Defect::NanObservation, "observation"),
        (Defect::OutOfBounds, "observation"),
        (Defect::ResetIgnoresSeed, "reset_seed"),
        (Defect::MaskDisagreesWithLegalActions, "legal_actions"),
        (Defect::StepRefusesLegal, "step_legal"),
        (Defect::StepAcceptsIllegal, "step_illegal"),
        (Defect::IllegalChangesState, "step_illegal"),
        (Defect::ToPlayOutOfRange, "to_play"),
        (Defect::StepAfterEndAccepted, "episode_end"),
        (Defect::NeverEnds, "episode_end"),
        (Defect::InfiniteReward, "reward"),
    ];
    for (defect, check) in cases {
        let failed = failed_checks(defect);
        assert!(
            failed.contains(&check),
            "{defect:?}: expected {check}, got {failed:?}"
        );
    }
}

#[test]
fn messages_name_the_values_involved() {
    let mut env = Walk::new(Defect::ShortObservation);
    let text = check_env(&mut env)[0].to_string();
    assert!(text.contains("4 values") && text.contains('5'), "{text}");
    let mut env = Walk::new(Defect::ToPlayOutOfRange);
    let text = check_env(&mut env)
        .into_iter()
        .find(|v| v.check == "to_play")
        .unwrap()
        .to_string();
    assert!(text.contains("to_play() is 1 with 1 player"), "{text}");
}
