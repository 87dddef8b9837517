//! [`GameHistory`]: one game as self-play records it, and the checks a game must pass before
//! it is stored.

use serde::{Deserialize, Serialize};

use super::ReplayError;

/// One game (episode) with its search statistics. `T` = number of transitions.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GameHistory {
    pub obs_len: usize,
    pub num_actions: usize,
    /// `[(T+1) * obs_len]`, including the final observation.
    pub observations: Vec<f32>,
    /// `[T]`
    pub actions: Vec<usize>,
    /// `[T]` reward of the transition `t -> t+1`, from the perspective of the player who moved at `t`.
    pub rewards: Vec<f32>,
    /// `[T+1]` player to move at each observation (always 0 for one-player games).
    pub to_play: Vec<u8>,
    /// `[T]` search value at `t`, from the perspective of `to_play[t]`.
    pub root_values: Vec<f32>,
    /// `[T * A]` search policy targets.
    pub policies: Vec<f32>,
    /// true: ended in a terminal state (absorbing after it); false: truncated or cut off.
    pub terminated: bool,
    /// Value estimate of the final observation (perspective of `to_play[T]`), used to
    /// bootstrap a truncated game; ignored if `terminated`.
    pub final_value: f32,
    /// Segment padding: the last `padding` transitions are the ones that followed the cut
    /// that ended this segment. They give the positions before the cut the unroll and n-step
    /// targets the whole game would give them, and are never sampled themselves (they are the
    /// next segment's positions). 0 for whole games and unpadded segments.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub padding: usize,
}

/// Whole games serialise as they did before segment padding existed.
fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl GameHistory {
    /// Starts a game at its first observation. `terminated` starts false, `final_value` 0.
    pub fn new(
        obs_len: usize,
        num_actions: usize,
        first_observation: &[f32],
        first_to_play: u8,
    ) -> Self {
        Self {
            obs_len,
            num_actions,
            observations: first_observation.to_vec(),
            actions: Vec::new(),
            rewards: Vec::new(),
            to_play: vec![first_to_play],
            root_values: Vec::new(),
            policies: Vec::new(),
            terminated: false,
            final_value: 0.0,
            padding: 0,
        }
    }

    /// Appends one transition. Lengths are not checked here; `ReplayBuffer::save_game`
    /// (through `validate`) reports any inconsistency.
    pub fn push(
        &mut self,
        action: usize,
        reward: f32,
        root_value: f32,
        policy: &[f32],
        next_observation: &[f32],
        next_to_play: u8,
    ) {
        self.actions.push(action);
        self.rewards.push(reward);
        self.root_values.push(root_value);
        self.policies.extend_from_slice(policy);
        self.observations.extend_from_slice(next_observation);
        self.to_play.push(next_to_play);
    }

    /// Appends one transition of padding (see [`GameHistory::padding`]): it follows the cut
    /// that ended this segment.
    pub fn push_padding(
        &mut self,
        action: usize,
        reward: f32,
        root_value: f32,
        policy: &[f32],
        next_observation: &[f32],
        next_to_play: u8,
    ) {
        self.push(
            action,
            reward,
            root_value,
            policy,
            next_observation,
            next_to_play,
        );
        self.padding += 1;
    }

    /// Number of positions that can be sampled: `T` minus the padding.
    pub fn sampled_len(&self) -> usize {
        self.len().saturating_sub(self.padding)
    }

    /// Marks the end of the game: `terminated` (absorbing) or truncated with a bootstrap value.
    pub fn finish(&mut self, terminated: bool, final_value: f32) {
        self.terminated = terminated;
        self.final_value = final_value;
    }

    /// Number of transitions `T`.
    pub fn len(&self) -> usize {
        self.actions.len()
    }

    /// True when the game has no transitions.
    pub fn is_empty(&self) -> bool {
        self.actions.is_empty()
    }

    /// Observation at `t` in `0..=T` (`T` is the final observation). Panics if out of range.
    pub fn observation(&self, t: usize) -> &[f32] {
        &self.observations[t * self.obs_len..(t + 1) * self.obs_len]
    }

    /// Search policy at `t` in `0..T`. Panics if out of range.
    pub fn policy(&self, t: usize) -> &[f32] {
        &self.policies[t * self.num_actions..(t + 1) * self.num_actions]
    }

    /// The value stored for observation `u` (perspective of `to_play[u]`): `root_values[u]`
    /// for `u < T`; at `u == T` 0 for a terminated game, `final_value` for a truncated one;
    /// 0 beyond. This is the value that bootstrapped targets use.
    pub fn stored_value(&self, u: usize) -> f32 {
        let t_len = self.len();
        if u < t_len {
            self.root_values[u]
        } else if u == t_len && !self.terminated {
            self.final_value
        } else {
            0.0
        }
    }

    /// Checks that all lengths are consistent with `T = actions.len()` and the actions are in range.
    pub fn validate(&self) -> Result<(), ReplayError> {
        if self.obs_len == 0 {
            return Err(ReplayError::ZeroDimension { what: "obs_len" });
        }
        if self.num_actions == 0 {
            return Err(ReplayError::ZeroDimension {
                what: "num_actions",
            });
        }
        let t_len = self.len();
        let check = |field: &'static str, expected: usize, actual: usize| {
            if expected == actual {
                Ok(())
            } else {
                Err(ReplayError::InconsistentLength {
                    field,
                    expected,
                    actual,
                })
            }
        };
        check(
            "observations",
            (t_len + 1) * self.obs_len,
            self.observations.len(),
        )?;
        check("rewards", t_len, self.rewards.len())?;
        check("to_play", t_len + 1, self.to_play.len())?;
        check("root_values", t_len, self.root_values.len())?;
        check("policies", t_len * self.num_actions, self.policies.len())?;
        if self.padding > 0 && self.padding >= t_len {
            return Err(ReplayError::PaddingTooLong {
                padding: self.padding,
                transitions: t_len,
            });
        }
        if let Some((step, &action)) = self
            .actions
            .iter()
            .enumerate()
            .find(|(_, &a)| a >= self.num_actions)
        {
            return Err(ReplayError::ActionOutOfRange {
                step,
                action,
                num_actions: self.num_actions,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::games::{five_step_game, scripted_game};

    fn two_steps() -> GameHistory {
        scripted_game(&[1.0; 2], &[0.0; 2], &[0; 3], true, 0.0)
    }

    #[test]
    fn validate_reports_inconsistent_games() {
        two_steps().validate().unwrap();
        let mut bad = two_steps();
        bad.observations.pop();
        assert_eq!(
            bad.validate(),
            Err(ReplayError::InconsistentLength {
                field: "observations",
                expected: 6,
                actual: 5
            })
        );
        let mut bad = two_steps();
        bad.actions[1] = 2;
        assert_eq!(
            bad.validate(),
            Err(ReplayError::ActionOutOfRange {
                step: 1,
                action: 2,
                num_actions: 2
            })
        );
        let mut bad = two_steps();
        bad.to_play.pop();
        assert_eq!(
            bad.validate(),
            Err(ReplayError::InconsistentLength {
                field: "to_play",
                expected: 3,
                actual: 2
            })
        );
        let mut bad = two_steps();
        bad.policies.push(0.0);
        assert_eq!(
            bad.validate(),
            Err(ReplayError::InconsistentLength {
                field: "policies",
                expected: 4,
                actual: 5
            })
        );
        assert_eq!(
            GameHistory::new(0, 2, &[], 0).validate(),
            Err(ReplayError::ZeroDimension { what: "obs_len" })
        );
        assert_eq!(
            GameHistory::new(2, 0, &[0.0, 0.0], 0).validate(),
            Err(ReplayError::ZeroDimension {
                what: "num_actions"
            })
        );
    }

    #[test]
    fn stored_value_bootstraps_only_truncated_games() {
        let truncated = five_step_game(false);
        assert_eq!(truncated.stored_value(4), 50.0);
        assert_eq!(truncated.stored_value(5), 60.0);
        assert_eq!(truncated.stored_value(6), 0.0);
        let terminated = five_step_game(true);
        assert_eq!(terminated.stored_value(0), 10.0);
        assert_eq!(terminated.stored_value(5), 0.0);
    }
}
