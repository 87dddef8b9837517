//! What a stop signal (SIGINT, SIGTERM, SIGHUP) asks of a training run: the first one stops
//! it after the current step, with a checkpoint; another one later exits at once.
//!
//! GNU `timeout` sends its signal to the command and then to the command's whole process
//! group, so a run under `timeout` (or a group kill) receives the same stop twice, a moment
//! apart. Taken as "exit at once", that second copy lost the checkpoint the first had asked
//! for (seen on a CUDA run, whose steps are long enough for both to arrive mid-step).

use std::time::{Duration, Instant};

/// Signals this close to the first one are copies of it.
pub const SAME_STOP: Duration = Duration::from_millis(500);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopRequest {
    /// The first signal: finish the current step, save a checkpoint, stop.
    Stop,
    /// A copy of the first signal (within [`SAME_STOP`] of it): nothing more to do.
    Same,
    /// A later signal: exit now; the last complete checkpoint stays the latest.
    ExitNow,
}

/// The request of a signal arriving at `now`, the first having arrived at `first` (if any).
pub fn stop_request(first: Option<Instant>, now: Instant) -> StopRequest {
    match first {
        None => StopRequest::Stop,
        Some(t) if now.saturating_duration_since(t) < SAME_STOP => StopRequest::Same,
        Some(_) => StopRequest::ExitNow,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_signal_stops_a_copy_is_ignored_and_a_later_one_exits() {
        let t0 = Instant::now();
        assert_eq!(stop_request(None, t0), StopRequest::Stop);
        assert_eq!(stop_request(Some(t0), t0), StopRequest::Same);
        let soon = t0 + Duration::from_millis(20);
        assert_eq!(stop_request(Some(t0), soon), StopRequest::Same);
        let later = t0 + SAME_STOP + Duration::from_millis(1);
        assert_eq!(stop_request(Some(t0), later), StopRequest::ExitNow);
    }
}
