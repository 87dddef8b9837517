//! MinAtar Breakout.

use super::{cell, Game, NumpyRandom, SIZE};

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
pub struct BreakoutGame {
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
}

impl BreakoutGame {
    fn fill_bricks(&mut self) {
        for row in &mut self.bricks[1..4] {
            *row = [true; SIZE];
        }
    }
}

impl Game for BreakoutGame {
    const NAME: &'static str = "Breakout";
    const CHANNELS: usize = CHANNELS;
    const MINIMAL_ACTIONS: &'static [usize] = &[0, 1, 3];

    fn blank() -> Self {
        Self {
            ball_x: 0,
            ball_y: 0,
            ball_dir: 0,
            paddle: 0,
            bricks: [[false; SIZE]; SIZE],
            strike: false,
            last_x: 0,
            last_y: 0,
            terminal: false,
        }
    }

    fn reset(&mut self, rng: &mut NumpyRandom) {
        self.ball_y = 3;
        (self.ball_x, self.ball_dir) = [(0, 2), (9, 3)][rng.randint(0, 2) as usize];
        self.paddle = 4;
        self.bricks = [[false; SIZE]; SIZE];
        self.fill_bricks();
        self.strike = false;
        self.last_x = self.ball_x;
        self.last_y = self.ball_y;
        self.terminal = false;
    }

    /// The game's own step, after the sticky action is resolved: the reward.
    fn act(&mut self, action: usize, _rng: &mut NumpyRandom) -> f64 {
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

    fn terminal(&self) -> bool {
        self.terminal
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::{EnvError, Environment};
    use crate::minatar::Breakout;

    /// A game with the ball at `(x, y)` heading `dir` and the paddle at `paddle` (stepped with
    /// the game's own `act`, no sticky draw).
    fn game(x: i32, y: i32, dir: usize, paddle: i32) -> BreakoutGame {
        let mut game = BreakoutGame::blank();
        game.reset(&mut NumpyRandom::new(0));
        (game.ball_x, game.ball_y, game.ball_dir, game.paddle) = (x, y, dir, paddle);
        (game.last_x, game.last_y) = (x, y);
        game
    }

    /// The last brick broken, the bricks come back when the ball next reaches the bottom row,
    /// where the paddle under it sends it back up.
    #[test]
    fn the_bricks_come_back_once_all_are_broken_and_the_paddle_returns_the_ball() {
        let mut game = game(4, 8, 2, 5);
        game.bricks = [[false; SIZE]; SIZE];
        let reward = game.act(0, &mut NumpyRandom::new(0));
        assert_eq!(reward, 0.0);
        assert!(game.bricks[1..4].iter().all(|row| row.iter().all(|&b| b)));
        assert!(game.bricks[4..].iter().all(|row| row.iter().all(|&b| !b)));
        assert!(!game.terminal);
        // Met by the paddle's edge: sent back the way it came (up and to the left), from row 8.
        assert_eq!((game.ball_x, game.ball_y, game.ball_dir), (5, 8, 0));
    }

    /// A ball that reaches the bottom row away from the paddle ends the episode, and the
    /// environment then refuses to step.
    #[test]
    fn a_missed_ball_ends_the_episode() {
        let mut env = Breakout::new();
        env.game = game(1, 8, 2, 7);
        let out = env.step(0).unwrap();
        assert!(out.terminated);
        assert!(matches!(env.step(0), Err(EnvError::EpisodeOver)));
    }
}
