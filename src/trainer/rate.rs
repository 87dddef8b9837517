//! Throughput for the progress display: environment and training steps per second.

use std::time::Instant;

use crate::checkpoint::Counters;
use crate::metrics::Progress;

/// Environment and training steps per second, measured about once a second.
pub(super) struct RateMeter {
    since: Instant,
    env_steps: u64,
    training_steps: u64,
}

impl RateMeter {
    pub(super) fn new(counters: &Counters) -> Self {
        Self {
            since: Instant::now(),
            env_steps: counters.env_steps,
            training_steps: counters.training_steps,
        }
    }

    /// The rates since the last report, once a second has passed.
    pub(super) fn tick(&mut self, counters: &Counters) -> Option<Progress> {
        let seconds = self.since.elapsed().as_secs_f64();
        if seconds < 1.0 {
            return None;
        }
        let progress = Progress {
            env_steps: counters.env_steps,
            env_steps_per_second: (counters.env_steps - self.env_steps) as f64 / seconds,
            training_steps_per_second: (counters.training_steps - self.training_steps) as f64
                / seconds,
            ..Default::default()
        };
        *self = Self::new(counters);
        Some(progress)
    }
}
