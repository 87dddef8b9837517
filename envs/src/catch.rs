//! Catch: a tiny environment for fast learning tests.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::env::{check_range, EnvError, Environment, Info, Space, StepResult};

const SIZE: usize = 5;

/// A small, deterministic environment for fast learning tests (not a benchmark).
///
/// A 5×5 grid. At reset a ball appears in a random column of the top row (drawn from the
/// environment's generator) and the paddle sits in the middle column of the bottom row. Each
/// step the paddle moves (action `0` left, `1` stay, `2` right, stopping at the walls) and the
/// ball falls one row. After 4 steps the ball reaches the bottom row and the episode terminates
/// with reward `+1` if the paddle is under the ball and `-1` otherwise; every earlier step gives
/// `0`. The observation, shape `[5, 5]` with row 0 at the top, is 1.0 at the ball's and the
/// paddle's cells and 0.0 elsewhere.
///
/// Given the ball's column the dynamics are deterministic, and moving toward the ball always
/// catches it, so a learner should reach a return of +1 on every episode.
#[derive(Debug, Clone)]
pub struct Catch {
    ball_row: usize,
    ball_col: usize,
    paddle_col: usize,
    done: bool,
    rng: StdRng,
}

impl Default for Catch {
    fn default() -> Self {
        Self::new()
    }
}

impl Catch {
    /// A Catch environment reset with seed 0.
    pub fn new() -> Self {
        Self::with_seed(0)
    }

    /// A Catch environment reset with the given seed.
    pub fn with_seed(seed: u64) -> Self {
        let mut env = Catch {
            ball_row: 0,
            ball_col: 0,
            paddle_col: SIZE / 2,
            done: false,
            rng: StdRng::seed_from_u64(seed),
        };
        env.reset(None);
        env
    }

    /// The ball's column.
    pub fn ball_column(&self) -> usize {
        self.ball_col
    }

    /// The ball's row (0 at the top).
    pub fn ball_row(&self) -> usize {
        self.ball_row
    }

    /// The paddle's column.
    pub fn paddle_column(&self) -> usize {
        self.paddle_col
    }

    fn observation(&self) -> Vec<f32> {
        let mut obs = vec![0.0; SIZE * SIZE];
        obs[self.ball_row * SIZE + self.ball_col] = 1.0;
        obs[(SIZE - 1) * SIZE + self.paddle_col] = 1.0;
        obs
    }
}

impl Environment for Catch {
    fn name(&self) -> &str {
        "Catch"
    }

    fn reset(&mut self, seed: Option<u64>) -> (Vec<f32>, Info) {
        if let Some(seed) = seed {
            self.rng = StdRng::seed_from_u64(seed);
        }
        self.ball_row = 0;
        self.ball_col = self.rng.random_range(0..SIZE);
        self.paddle_col = SIZE / 2;
        self.done = false;
        (self.observation(), Info::new())
    }

    fn step(&mut self, action: usize) -> Result<StepResult, EnvError> {
        if self.done {
            return Err(EnvError::EpisodeOver);
        }
        check_range(action, 3)?;
        self.paddle_col = match action {
            0 => self.paddle_col.saturating_sub(1),
            1 => self.paddle_col,
            _ => (self.paddle_col + 1).min(SIZE - 1),
        };
        self.ball_row += 1;
        let terminated = self.ball_row == SIZE - 1;
        let reward = match (terminated, self.paddle_col == self.ball_col) {
            (false, _) => 0.0,
            (true, true) => 1.0,
            (true, false) => -1.0,
        };
        self.done = terminated;
        Ok(StepResult {
            observation: self.observation(),
            reward,
            terminated,
            truncated: false,
            info: Info::new(),
        })
    }

    fn action_space(&self) -> Space {
        Space::Discrete { n: 3 }
    }

    fn observation_space(&self) -> Space {
        Space::uniform_box(0.0, 1.0, vec![SIZE, SIZE])
    }

    fn max_episode_steps(&self) -> Option<usize> {
        None
    }

    fn render(&self) -> String {
        (0..SIZE)
            .map(|r| {
                (0..SIZE)
                    .map(|c| {
                        let ball = r == self.ball_row && c == self.ball_col;
                        let paddle = r == SIZE - 1 && c == self.paddle_col;
                        match (ball, paddle) {
                            (true, true) => '@',
                            (true, false) => 'o',
                            (false, true) => '=',
                            (false, false) => '.',
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

    fn toward(env: &Catch) -> usize {
        match env.paddle_column().cmp(&env.ball_column()) {
            std::cmp::Ordering::Greater => 0,
            std::cmp::Ordering::Equal => 1,
            std::cmp::Ordering::Less => 2,
        }
    }

    /// Heads for the wall farther from the ball.
    fn away(env: &Catch) -> usize {
        if env.ball_column() >= SIZE / 2 {
            0
        } else {
            2
        }
    }

    fn episode(env: &mut Catch, policy: fn(&Catch) -> usize) -> (f64, usize) {
        let (mut ret, mut len) = (0.0, 0);
        loop {
            let r = env.step(policy(env)).unwrap();
            ret += r.reward;
            len += 1;
            assert!(!r.truncated);
            if r.terminated {
                return (ret, len);
            }
            assert_eq!(r.reward, 0.0);
        }
    }

    #[test]
    fn moving_toward_the_ball_always_catches_it() {
        let mut env = Catch::new();
        let mut columns = [false; SIZE];
        for seed in 0..50 {
            env.reset(Some(seed));
            columns[env.ball_column()] = true;
            assert_eq!(episode(&mut env, toward), (1.0, 4), "seed {seed}");
            assert_eq!(env.step(1), Err(EnvError::EpisodeOver));
        }
        assert!(
            columns.iter().all(|&c| c),
            "every column appears: {columns:?}"
        );
    }

    #[test]
    fn moving_away_always_misses() {
        let mut env = Catch::new();
        for seed in 0..50 {
            env.reset(Some(seed));
            assert_eq!(episode(&mut env, away), (-1.0, 4), "seed {seed}");
        }
    }

    #[test]
    fn same_seed_same_episode() {
        let mut a = Catch::new();
        let mut b = Catch::with_seed(99);
        for seed in [1, 2, 3] {
            let oa = a.reset(Some(seed)).0;
            let ob = b.reset(Some(seed)).0;
            assert_eq!(oa, ob);
            for action in [0, 2, 2, 1] {
                assert_eq!(a.step(action), b.step(action));
            }
        }
        // None continues the generator: a stream of resets is reproducible too.
        let cols = |env: &mut Catch| {
            env.reset(Some(7));
            (0..20)
                .map(|_| {
                    env.reset(None);
                    env.ball_column()
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(cols(&mut a), cols(&mut b));
    }

    #[test]
    fn observation_and_walls() {
        let mut env = Catch::new();
        let (obs, _) = env.reset(Some(0));
        assert_eq!(obs.len(), 25);
        assert_eq!(obs[env.ball_column()], 1.0);
        assert_eq!(obs[20 + 2], 1.0);
        assert_eq!(obs.iter().sum::<f32>(), 2.0);
        let r = env.step(0).unwrap();
        let r2 = env.step(0).unwrap();
        assert_eq!(env.paddle_column(), 0);
        let r3 = env.step(0).unwrap();
        assert_eq!(env.paddle_column(), 0, "stops at the left wall");
        assert_eq!(r.observation[5 + env.ball_column()], 1.0);
        assert_eq!(r2.observation[10 + env.ball_column()], 1.0);
        assert_eq!(r3.observation[15 + env.ball_column()], 1.0);
        assert_eq!(r3.observation[20], 1.0);
        assert!(env.observation_space().contains(&r3.observation));
        assert_eq!(env.render().lines().last(), Some("=...."));
        for _ in 0..3 {
            env.reset(None);
            env.step(2).unwrap();
            env.step(2).unwrap();
            env.step(2).unwrap();
            assert_eq!(env.paddle_column(), 4, "stops at the right wall");
        }
        assert_eq!(
            env.step(3),
            Err(EnvError::ActionOutOfRange { action: 3, n: 3 })
        );
    }
}
