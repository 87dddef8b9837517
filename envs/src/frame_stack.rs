//! The last `k` observations of an environment as one observation (DQN's and MuZero's frame
//! stack on Atari).
//!
//! Single frames hide what only a few consecutive frames show: in the MinAtar games the
//! objects move every few steps on timers that no channel shows (Freeway's chicken moves at
//! most every third step, Asterix's enemies every `move speed` steps). [`FrameStack`] makes
//! the observation the `k` newest frames laid end to end along the first dimension, oldest
//! first: an observation space of shape `[C, H, W]` becomes `[k C, H, W]` (a conv network sees
//! `k C` planes), `[n]` becomes `[k n]`. After a reset every slot holds the first frame, as
//! Gymnasium's `FrameStackObservation` with `padding_type="reset"` does.

use crate::env::{EnvError, Environment, Info, Space, StepResult, Symmetry};

/// An environment whose observations are the `k` newest frames of `inner`, oldest first.
pub struct FrameStack {
    inner: Box<dyn Environment>,
    k: usize,
    /// The stacked observation: `k` frames of `frame_len` values, oldest first.
    frames: Vec<f32>,
    frame_len: usize,
}

impl FrameStack {
    /// `inner` with observations of its `k` newest frames.
    ///
    /// # Errors
    /// [`EnvError::InvalidFrameStack`] when `k` is 0 or the observation space is not a box.
    pub fn new(inner: Box<dyn Environment>, k: usize) -> Result<Self, EnvError> {
        let space = inner.observation_space();
        if k == 0 || !matches!(space, Space::Box { .. }) || space.shape().is_empty() {
            return Err(EnvError::InvalidFrameStack {
                name: inner.name().to_string(),
                frames: k,
            });
        }
        let frame_len = space.flat_len();
        Ok(Self {
            inner,
            k,
            frames: vec![0.0; k * frame_len],
            frame_len,
        })
    }

    /// Drops the oldest frame and appends `frame` as the newest.
    fn push(&mut self, frame: &[f32]) {
        self.frames.copy_within(self.frame_len.., 0);
        let start = (self.k - 1) * self.frame_len;
        self.frames[start..].copy_from_slice(frame);
    }
}

impl Clone for FrameStack {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone_box(),
            k: self.k,
            frames: self.frames.clone(),
            frame_len: self.frame_len,
        }
    }
}

impl Environment for FrameStack {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn reset(&mut self, seed: Option<u64>) -> (Vec<f32>, Info) {
        let (first, info) = self.inner.reset(seed);
        for slot in self.frames.chunks_exact_mut(self.frame_len) {
            slot.copy_from_slice(&first);
        }
        (self.frames.clone(), info)
    }

    fn step(&mut self, action: usize) -> Result<StepResult, EnvError> {
        let mut step = self.inner.step(action)?;
        self.push(&step.observation);
        step.observation = self.frames.clone();
        Ok(step)
    }

    fn action_space(&self) -> Space {
        self.inner.action_space()
    }

    fn observation_space(&self) -> Space {
        match self.inner.observation_space() {
            Space::Box {
                low,
                high,
                mut shape,
            } => {
                shape[0] *= self.k;
                Space::Box {
                    low: low.repeat(self.k),
                    high: high.repeat(self.k),
                    shape,
                }
            }
            discrete => discrete,
        }
    }

    fn num_players(&self) -> usize {
        self.inner.num_players()
    }

    fn to_play(&self) -> usize {
        self.inner.to_play()
    }

    fn legal_actions(&self) -> Vec<usize> {
        self.inner.legal_actions()
    }

    fn legal_action_mask(&self) -> Vec<bool> {
        self.inner.legal_action_mask()
    }

    fn max_episode_steps(&self) -> Option<usize> {
        self.inner.max_episode_steps()
    }

    fn render(&self) -> String {
        self.inner.render()
    }

    fn clone_box(&self) -> Box<dyn Environment> {
        Box::new(self.clone())
    }

    /// The inner game's: stacking frames keeps the board.
    fn action_planes(&self) -> Option<Vec<f32>> {
        self.inner.action_planes()
    }

    /// Each of the inner game's symmetries applied to every frame alike.
    fn symmetries(&self) -> Vec<Symmetry> {
        let n = self.frame_len;
        self.inner
            .symmetries()
            .into_iter()
            .map(|s| Symmetry {
                observation: (0..self.k)
                    .flat_map(|f| s.observation.iter().map(move |&i| f * n + i))
                    .collect(),
                negate: s.negate.repeat(self.k),
                actions: s.actions,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{make, Catch};

    #[test]
    fn the_observation_is_the_newest_frames_oldest_first() {
        let mut plain = make("MinAtar/Breakout-v1").unwrap();
        let mut stacked = FrameStack::new(make("MinAtar/Breakout-v1").unwrap(), 3).unwrap();
        assert_eq!(stacked.observation_space().shape(), vec![12, 10, 10]);
        let (first, _) = plain.reset(Some(7));
        let (obs, _) = stacked.reset(Some(7));
        assert_eq!(
            obs,
            first.repeat(3),
            "a reset fills every slot with the first frame"
        );
        let mut history = vec![first.clone(), first.clone(), first];
        for t in 0..40 {
            let action = t % 3;
            let a = plain.step(action).unwrap();
            let b = stacked.step(action).unwrap();
            history.push(a.observation.clone());
            let newest: Vec<f32> = history[history.len() - 3..].concat();
            assert_eq!(b.observation, newest, "step {t}");
            assert_eq!(
                (a.reward, a.terminated, a.truncated),
                (b.reward, b.terminated, b.truncated)
            );
            assert!(stacked.observation_space().contains(&b.observation));
            if a.terminated || a.truncated {
                break;
            }
        }
    }

    #[test]
    fn a_copy_continues_like_the_original() {
        let mut env = FrameStack::new(Box::new(Catch::new()), 2).unwrap();
        env.reset(Some(3));
        env.step(0).unwrap();
        let mut copy = env.clone_box();
        for action in [2, 1, 0] {
            assert_eq!(env.step(action).unwrap(), copy.step(action).unwrap());
        }
    }

    #[test]
    fn symmetries_apply_to_every_frame() {
        let inner = make("ConnectFour").unwrap();
        let mirror = inner.symmetries().remove(0);
        let env = FrameStack::new(inner, 2).unwrap();
        let stacked = env.symmetries().remove(0);
        let n = mirror.observation.len();
        let observation: Vec<f32> = (0..2 * n).map(|i| i as f32).collect();
        for i in 0..2 * n {
            let frame = i / n;
            let expected = observation[frame * n + mirror.observation[i % n]];
            assert_eq!(stacked.element(&observation, i), expected);
        }
        assert_eq!(stacked.actions, mirror.actions);
    }

    #[test]
    fn stacked_games_keep_the_environment_contract() {
        for name in ["MinAtar/Freeway-v1", "ConnectFour", "CartPole-v1"] {
            let mut env = FrameStack::new(make(name).unwrap(), 4).unwrap();
            let report = crate::check_env(&mut env);
            assert!(
                report.violations.is_empty(),
                "{name}: {:?}",
                report.violations
            );
        }
    }

    #[test]
    fn no_frames_is_an_error_that_names_the_environment() {
        let err = FrameStack::new(make("CartPole-v1").unwrap(), 0)
            .err()
            .expect("0 frames is refused");
        assert!(err.to_string().contains("CartPole-v1"), "{err}");
    }
}
