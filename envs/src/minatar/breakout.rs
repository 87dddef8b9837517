//! MinAtar Breakout.

use super::{cell, NumpyRandom, NUM_ACTIONS, SIZE, STICKY_ACTION_PROB};
use crate::env::{check_range, EnvError, Environment, Info, Space, StepResult};

const PADDLE: usize = 0;
const BALL: usize = 1;
const TRAIL: usize = 2;
const BRICK: usize = 3;
const CHANNELS: usize = 4;

/// MinAtar Breakout (`MinAtar/Breakout-v1`): a paddle on the bottom row bounces a ball that
/// moves along the diagonals; each brick it breaks gives +1, and when the three rows of bricks
/// (rows 1 to 3) are all gone they come back. The ball bounces off the walls, the ceiling and
/// bricks (breaking at most one brick per pair of steps); on the bottom row it bounces back if
/// the paddle is under where it was or where it goes (to the side of the paddle it hit), and
/// the episode ends if not. Actions: left (1) and right (3) move the paddle, the others do
/// nothing. Channels: paddle, ball, trail (the ball's previous cell), brick. No difficulty
/// ramp and no time limit.
#[derive(Debug, Clone)]
pub struct Breakout {
    ball_x: i32,
    ball_y: i32,
    /// 0: up-left, 1: up-right, 2: down-right, 3: down-left.
    ball_dir: usize,
    paddle: i32,
    bricks: [[bool; SIZE]; SIZE],
    strike: bool,
    last_x: i32,
    last_y: i32,
    terminal: bool,
    last_action: usize,
    rng: NumpyRandom,
}

impl Default for Breakout {
    fn default() -> Self {
        Self::new()
    }
}

impl Breakout {
    /// A game reset with seed 0.
    pub fn new() -> Self {
        let mut env = Self {
            ball_x: 0,
            ball_y: 0,
            ball_dir: 0,
            paddle: 0,
            bricks: [[false; SIZE]; SIZE],
            strike: false,
            last_x: 0,
            last_y: 0,
            terminal: false,
            last_action: 0,
            rng: NumpyRandom::new(0),
        };
        env.reset(Some(0));
        env
    }

    fn observation(&self) -> Vec<f32> {
        let mut obs = vec![0.0; CHANNELS * SIZE * SIZE];
        obs[cell(BALL, self.ball_y as usize, self.ball_x as usize)] = 1.0;
        obs[cell(PADDLE, SIZE - 1, self.paddle as usize)] = 1.0;
        obs[cell(TRAIL, self.last_y as usize, self.last_x as usize)] = 1.0;
        for (row, bricks) in self.bricks.iter().enumerate() {
            for (column, &brick) in bricks.iter().enumerate() {
                if brick {
                    obs[cell(BRICK, row, column)] = 1.0;
                }
            }
        }
        obs
    }

    fn fill_bricks(&mut self) {
        for row in &mut self.bricks[1..4] {
            *row = [true; SIZE];
        }
    }

    /// The game's own step, after the sticky action is resolved: the reward.
    fn act(&mut self, action: usize) -> f64 {
        let mut reward = 0.0;
        match action {
            1 => self.paddle = (self.paddle - 1).max(0),
            3 => self.paddle = (self.paddle + 1).min(SIZE as i32 - 1),
            _ => {}
        }
        self.last_x = self.ball_x;
        self.last_y = self.ball_y;
        let (dx, dy) = [(-1, -1), (1, -1), (1, 1), (-1, 1)][self.ball_dir];
        let (mut x, mut y) = (self.ball_x + dx, self.ball_y + dy);
        let mut struck = false;
        if !(0..SIZE as i32).contains(&x) {
            x = x.clamp(0, SIZE as i32 - 1);
            self.ball_dir = [1, 0, 3, 2][self.ball_dir];
        }
        if y < 0 {
            y = 0;
            self.ball_dir = [3, 2, 1, 0][self.ball_dir];
        } else if self.bricks[y as usize][x as usize] {
            struck = true;
            if !self.strike {
                reward += 1.0;
                self.strike = true;
                self.bricks[y as usize][x as usize] = false;
                y = self.last_y;
                self.ball_dir = [3, 2, 1, 0][self.ball_dir];
            }
        } else if y == SIZE as i32 - 1 {
            if self.bricks.iter().all(|row| row.iter().all(|&b| !b)) {
                self.fill_bricks();
            }
            if self.ball_x == self.paddle {
                self.ball_dir = [3, 2, 1, 0][self.ball_dir];
                y = self.last_y;
            } else if x == self.paddle {
                self.ball_dir = [2, 3, 0, 1][self.ball_dir];
                y = self.last_y;
            } else {
                self.terminal = true;
            }
        }
        if !struck {
            self.strike = false;
        }
        self.ball_x = x;
        self.ball_y = y;
        reward
    }
}

impl Environment for Breakout {
    fn name(&self) -> &str {
        "MinAtar/Breakout-v1"
    }

    fn reset(&mut self, seed: Option<u64>) -> (Vec<f32>, Info) {
        if let Some(seed) = seed {
            // A seeded reset starts as the package's fresh environment does after `seed()`;
            // an unseeded one keeps the previous action for the first sticky draw, as the
            // package does.
            self.rng = NumpyRandom::new(seed);
            self.last_action = 0;
        }
        self.ball_y = 3;
        (self.ball_x, self.ball_dir) = [(0, 2), (9, 3)][self.rng.randint(0, 2) as usize];
        self.paddle = 4;
        self.bricks = [[false; SIZE]; SIZE];
        self.fill_bricks();
        self.strike = false;
        self.last_x = self.ball_x;
        self.last_y = self.ball_y;
        self.terminal = false;
        (self.observation(), Info::new())
    }

    fn step(&mut self, action: usize) -> Result<StepResult, EnvError> {
        if self.terminal {
            return Err(EnvError::EpisodeOver);
        }
        check_range(action, NUM_ACTIONS)?;
        let action = if self.rng.rand() < STICKY_ACTION_PROB {
            self.last_action
        } else {
            action
        };
        self.last_action = action;
        let reward = self.act(action);
        Ok(StepResult {
            observation: self.observation(),
            reward,
            terminated: self.terminal,
            truncated: false,
            info: Info::new(),
        })
    }

    fn action_space(&self) -> Space {
        Space::Discrete { n: NUM_ACTIONS }
    }

    fn observation_space(&self) -> Space {
        Space::uniform_box(0.0, 1.0, vec![CHANNELS, SIZE, SIZE])
    }

    fn max_episode_steps(&self) -> Option<usize> {
        None
    }

    fn render(&self) -> String {
        (0..SIZE)
            .map(|row| {
                (0..SIZE)
                    .map(|column| {
                        let (r, c) = (row as i32, column as i32);
                        if r == self.ball_y && c == self.ball_x {
                            'o'
                        } else if row == SIZE - 1 && c == self.paddle {
                            '='
                        } else if self.bricks[row][column] {
                            '#'
                        } else {
                            '.'
                        }
                    })
                    .collect::<String>()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn clone_box(&self) -> Box<dyn Environment> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A game with the ball at `(x, y)` heading `dir` and the paddle at `paddle` (stepped with
    /// the game's own `act`, no sticky draw).
    fn game(x: i32, y: i32, dir: usize, paddle: i32) -> Breakout {
        let mut env = Breakout::new();
        (env.ball_x, env.ball_y, env.ball_dir, env.paddle) = (x, y, dir, paddle);
        (env.last_x, env.last_y) = (x, y);
        env
    }

    /// The last brick broken, the bricks come back when the ball next reaches the bottom row,
    /// where the paddle under it sends it back up.
    #[test]
    fn the_bricks_come_back_once_all_are_broken_and_the_paddle_returns_the_ball() {
        let mut env = game(4, 8, 2, 5);
        env.bricks = [[false; SIZE]; SIZE];
        let reward = env.act(0);
        assert_eq!(reward, 0.0);
        assert!(env.bricks[1..4].iter().all(|row| row.iter().all(|&b| b)));
        assert!(env.bricks[4..].iter().all(|row| row.iter().all(|&b| !b)));
        assert!(!env.terminal);
        // Met by the paddle's edge: sent back the way it came (up and to the left), from row 8.
        assert_eq!((env.ball_x, env.ball_y, env.ball_dir), (5, 8, 0));
    }

    /// A ball that reaches the bottom row away from the paddle ends the episode.
    #[test]
    fn a_missed_ball_ends_the_episode() {
        let mut env = game(1, 8, 2, 7);
        env.act(0);
        assert!(env.terminal);
        assert!(matches!(env.step(0), Err(EnvError::EpisodeOver)));
    }
}
