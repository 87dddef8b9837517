//! A tiny two-player game with a known solution, for learning tests: a pile of stones, each
//! player in turn takes one or two, and whoever takes the last stone wins. A pile that is a
//! multiple of three is lost for the player to move; from any other pile the winning move
//! leaves a multiple of three.

use cumind_envs::{EnvError, Environment, Info, Space, StepResult};

/// The largest pile (the observation is a one-hot of the pile, `0..=MAX_PILE`).
pub const MAX_PILE: usize = 7;

/// The take-away game from a pile of [`MAX_PILE`] stones (a first-player win: take one).
/// Action 0 takes one stone, action 1 takes two. Reward +1 to the player who takes the last
/// stone. Observation: one-hot of the pile, the same for both players.
#[derive(Debug, Clone)]
pub struct TakeAway {
    pile: usize,
    to_play: usize,
}

impl Default for TakeAway {
    fn default() -> Self {
        Self {
            pile: MAX_PILE,
            to_play: 0,
        }
    }
}

impl TakeAway {
    pub fn new() -> Self {
        Self::default()
    }

    fn observation(&self) -> Vec<f32> {
        let mut obs = vec![0.0; MAX_PILE + 1];
        obs[self.pile] = 1.0;
        obs
    }
}

impl Environment for TakeAway {
    fn name(&self) -> &str {
        "TakeAway"
    }

    fn reset(&mut self, _seed: Option<u64>) -> (Vec<f32>, Info) {
        *self = Self::new();
        (self.observation(), Info::new())
    }

    fn step(&mut self, action: usize) -> Result<StepResult, EnvError> {
        if self.pile == 0 {
            return Err(EnvError::EpisodeOver);
        }
        if action > 1 {
            return Err(EnvError::ActionOutOfRange { action, n: 2 });
        }
        if action + 1 > self.pile {
            return Err(EnvError::IllegalAction {
                action,
                legal: self.legal_actions(),
            });
        }
        self.pile -= action + 1;
        self.to_play = 1 - self.to_play;
        let terminated = self.pile == 0;
        Ok(StepResult {
            observation: self.observation(),
            reward: if terminated { 1.0 } else { 0.0 },
            terminated,
            truncated: false,
            info: Info::new(),
        })
    }

    fn action_space(&self) -> Space {
        Space::Discrete { n: 2 }
    }

    fn observation_space(&self) -> Space {
        Space::uniform_box(0.0, 1.0, vec![MAX_PILE + 1])
    }

    fn num_players(&self) -> usize {
        2
    }

    fn to_play(&self) -> usize {
        self.to_play
    }

    fn legal_actions(&self) -> Vec<usize> {
        (0..self.pile.min(2)).collect()
    }

    fn max_episode_steps(&self) -> Option<usize> {
        None
    }

    fn render(&self) -> String {
        format!("pile {} (player {} to move)\n", self.pile, self.to_play)
    }

    fn clone_box(&self) -> Box<dyn Environment> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_game_passes_the_environment_check() {
        let report = cumind_envs::check_env(&mut TakeAway::new());
        assert!(report.passed(), "{report}");
    }
}
