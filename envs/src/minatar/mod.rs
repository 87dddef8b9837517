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
//! where set); all six actions are accepted (no-op, left, up, right, down, fire), and with
//! probability 0.1 a step repeats the previous action instead (sticky actions).

mod asterix;
mod breakout;
mod freeway;
mod seaquest;
mod space_invaders;

pub use asterix::Asterix;
pub use breakout::Breakout;
pub use freeway::Freeway;
pub use seaquest::Seaquest;
pub use space_invaders::SpaceInvaders;

use rand_mt::Mt;

/// The side of the square board.
pub const SIZE: usize = 10;
/// Every MinAtar game takes the six actions no-op, left, up, right, down, fire.
pub const NUM_ACTIONS: usize = 6;
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
