//! The MinAtar games (Young and Tian, 2019): small 10x10 versions of Atari games with a few
//! object channels, sticky actions and, where a game has one, a difficulty ramp. Each game
//! equals the `minatar` Python package (1.0.15) step for step, random draws included: the
//! package's games draw from numpy's legacy `RandomState`, and [`NumpyRandom`] reproduces that
//! stream (a Mersenne Twister seeded as numpy seeds it, and numpy's formulas for a uniform
//! double and a bounded integer), so a game seeded with `s` here plays what the package plays
//! after `seed(s)`. The reference trajectories are in `envs/tests/data/minatar/`, recorded by
//! `envs/tests/data/record_minatar.py`.
//!
//! Observations are the package's boolean state as planes, channel-major (`[C, 10, 10]`, 1.0
//! where set). As in the package's Gymnasium registration, `MinAtar/<Game>-v1` takes the
//! game's minimal action set and `MinAtar/<Game>-v0` all six actions (no-op, left, up, right,
//! down, fire); with probability 0.1 a step repeats the previous action instead (sticky
//! actions).

mod asterix;
mod breakout;
mod freeway;
mod seaquest;
mod space_invaders;

pub use asterix::AsterixGame;
pub use breakout::BreakoutGame;
pub use freeway::FreewayGame;
pub use seaquest::SeaquestGame;
pub use space_invaders::SpaceInvadersGame;

use crate::env::{check_range, EnvError, Environment, Info, Space, StepResult};

/// MinAtar Breakout (see [`BreakoutGame`]).
pub type Breakout = MinAtar<BreakoutGame>;
/// MinAtar Asterix (see [`AsterixGame`]).
pub type Asterix = MinAtar<AsterixGame>;
/// MinAtar Freeway (see [`FreewayGame`]).
pub type Freeway = MinAtar<FreewayGame>;
/// MinAtar Seaquest (see [`SeaquestGame`]).
pub type Seaquest = MinAtar<SeaquestGame>;
/// MinAtar Space Invaders (see [`SpaceInvadersGame`]).
pub type SpaceInvaders = MinAtar<SpaceInvadersGame>;

use rand_mt::Mt;

/// The side of the square board.
pub const SIZE: usize = 10;
/// The chance that a step repeats the previous action (the package's default).
pub const STICKY_ACTION_PROB: f64 = 0.1;

/// numpy's legacy `RandomState` stream: `RandomState(seed)` is a 32-bit Mersenne Twister
/// initialised from the seed (`init_genrand`); `rand()` is a double from two draws, 27 and 26
/// bits; `randint(low, high)` draws 32-bit values masked to the range's bit width until one
/// falls in the range.
#[derive(Clone)]
pub struct NumpyRandom {
    mt: Mt,
}

impl std::fmt::Debug for NumpyRandom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NumpyRandom")
    }
}

impl NumpyRandom {
    /// The stream of `numpy.random.RandomState(seed)` (seeds above 32 bits are cut to their
    /// low 32, where numpy refuses them).
    pub fn new(seed: u64) -> Self {
        Self {
            mt: Mt::new(seed as u32),
        }
    }

    /// `rand()`: uniform in `[0, 1)`.
    pub fn rand(&mut self) -> f64 {
        let a = f64::from(self.mt.next_u32() >> 5);
        let b = f64::from(self.mt.next_u32() >> 6);
        (a * 67_108_864.0 + b) / 9_007_199_254_740_992.0
    }

    /// `randint(low, high)`: uniform in `low..high` (`high > low`).
    pub fn randint(&mut self, low: i64, high: i64) -> i64 {
        debug_assert!(high > low);
        let range = (high - low - 1) as u32;
        if range == 0 {
            return low;
        }
        let mask = u32::MAX >> range.leading_zeros();
        loop {
            let v = self.mt.next_u32() & mask;
            if v <= range {
                return low + i64::from(v);
            }
        }
    }
}

/// One MinAtar game's own rules, stepped with the package's action numbers (0 no-op, 1 left,
/// 2 up, 3 right, 4 down, 5 fire); [`MinAtar`] adds the action set and sticky actions.
pub trait Game: Clone + std::fmt::Debug + Send + Sync + 'static {
    /// The package's name of the game (`Breakout`, `SpaceInvaders`, ...).
    const NAME: &'static str;
    /// Object channels of the observation.
    const CHANNELS: usize;
    /// The actions that do something in this game (the package's minimal action set).
    const MINIMAL_ACTIONS: &'static [usize];

    /// A game in some state; [`Game::reset`] starts an episode.
    fn blank() -> Self;
    /// Start an episode, drawing from `rng` as the package does.
    fn reset(&mut self, rng: &mut NumpyRandom);
    /// One step with the package's action `action` (sticky actions already resolved); the
    /// reward.
    fn act(&mut self, action: usize, rng: &mut NumpyRandom) -> f64;
    /// Whether the episode has ended.
    fn terminal(&self) -> bool;
    /// The state as `[CHANNELS, 10, 10]` planes.
    fn observation(&self) -> Vec<f32>;
    /// The board as text.
    fn render(&self) -> String;
}

/// A MinAtar game as an [`Environment`], named as the package registers it with Gymnasium:
/// `MinAtar/<Game>-v1` takes the game's minimal action set (action `i` is the package's
/// action `MINIMAL_ACTIONS[i]`), `MinAtar/<Game>-v0` all six. Either way a step repeats the
/// previous package action instead with probability 0.1.
#[derive(Debug, Clone)]
pub struct MinAtar<G: Game> {
    game: G,
    rng: NumpyRandom,
    /// The package's action of the previous step (the sticky action).
    last_action: usize,
    /// The package's action for each of this environment's actions.
    actions: &'static [usize],
    name: String,
}

impl<G: Game> Default for MinAtar<G> {
    fn default() -> Self {
        Self::new()
    }
}

impl<G: Game> MinAtar<G> {
    /// `MinAtar/<Game>-v1` (the minimal action set), reset with seed 0.
    pub fn new() -> Self {
        Self::with_actions(G::MINIMAL_ACTIONS, "v1")
    }

    /// `MinAtar/<Game>-v0` (all six actions), reset with seed 0.
    pub fn with_all_actions() -> Self {
        Self::with_actions(&[0, 1, 2, 3, 4, 5], "v0")
    }

    fn with_actions(actions: &'static [usize], version: &str) -> Self {
        let mut env = Self {
            game: G::blank(),
            rng: NumpyRandom::new(0),
            last_action: 0,
            actions,
            name: format!("MinAtar/{}-{version}", G::NAME),
        };
        env.reset(Some(0));
        env
    }

    /// The game's state.
    pub fn game(&self) -> &G {
        &self.game
    }
}

impl<G: Game> Environment for MinAtar<G> {
    fn name(&self) -> &str {
        &self.name
    }

    fn reset(&mut self, seed: Option<u64>) -> (Vec<f32>, Info) {
        if let Some(seed) = seed {
            // A seeded reset starts as the package's fresh environment does after `seed()`;
            // an unseeded one keeps the previous action for the first sticky draw, as the
            // package does.
            self.rng = NumpyRandom::new(seed);
            self.last_action = 0;
        }
        self.game.reset(&mut self.rng);
        (self.game.observation(), Info::new())
    }

    fn step(&mut self, action: usize) -> Result<StepResult, EnvError> {
        if self.game.terminal() {
            return Err(EnvError::EpisodeOver);
        }
        check_range(action, self.actions.len())?;
        let action = if self.rng.rand() < STICKY_ACTION_PROB {
            self.last_action
        } else {
            self.actions[action]
        };
        self.last_action = action;
        let reward = self.game.act(action, &mut self.rng);
        Ok(StepResult {
            observation: self.game.observation(),
            reward,
            terminated: self.game.terminal(),
            truncated: false,
            info: Info::new(),
        })
    }

    fn action_space(&self) -> Space {
        Space::Discrete {
            n: self.actions.len(),
        }
    }

    fn observation_space(&self) -> Space {
        Space::uniform_box(0.0, 1.0, vec![G::CHANNELS, SIZE, SIZE])
    }

    fn max_episode_steps(&self) -> Option<usize> {
        None
    }

    fn render(&self) -> String {
        self.game.render()
    }

    fn clone_box(&self) -> Box<dyn Environment> {
        Box::new(self.clone())
    }
}

/// A board of one character a cell as lines of text (a game's `render`).
fn board_text(rows: &[Vec<char>]) -> String {
    rows.iter()
        .map(|r| r.iter().collect::<String>())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The cell `(channel, row, column)` of a `[C, 10, 10]` observation.
fn cell(channel: usize, row: usize, column: usize) -> usize {
    (channel * SIZE + row) * SIZE + column
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first values of `numpy.random.RandomState(0)` and `(1)`, as numpy prints them:
    /// `rand()` and `randint` from the same streams.
    #[test]
    fn the_stream_is_numpy_s() {
        let mut r = NumpyRandom::new(0);
        // numpy.random.RandomState(0).rand(3)
        let expected = [0.5488135039273248, 0.7151893663724195, 0.6027633760716439];
        for e in expected {
            assert_eq!(r.rand(), e);
        }
        // numpy.random.RandomState(1).randint(0, 10, 5) -> [5, 8, 9, 5, 0]
        let mut r = NumpyRandom::new(1);
        let ints: Vec<i64> = (0..5).map(|_| r.randint(0, 10)).collect();
        assert_eq!(ints, [5, 8, 9, 5, 0]);
    }
}
