//! f32 buffers handed back when a host op is done with them and handed out again to the next
//! call that asks for the same length, so that a training step's activations reuse the last
//! step's memory instead of asking the allocator for fresh zeroed memory.
//!
//! A zeroed allocation of memory the process has freed before is a pass of writes (the
//! allocator clears it), and memory new to the process is a page fault per 4 KiB: in a training
//! step of the MinAtar Breakout conv preset, zeroing the conv trunk's new buffers was 6-8% of
//! the samples and page faults another 2% (docs/benchmarks.md). The conv trunk overwrites every
//! value of the buffers it takes from here, so their old contents never matter.

use std::collections::HashMap;
use std::sync::Mutex;

/// Buffers waiting to be reused, by length.
static FREE: Mutex<Option<HashMap<usize, Vec<Vec<f32>>>>> = Mutex::new(None);

/// At most this many buffers of one length wait (more are freed): a bound on what the pool
/// holds after a call that needed more than the calls around it.
const MAX_PER_LENGTH: usize = 4096;

/// A buffer of `len` values whose contents are unspecified (a returned buffer's old values, or
/// zeros): the caller writes every value before reading it.
pub(crate) fn take(len: usize) -> Vec<f32> {
    let reused = FREE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_mut()
        .and_then(|free| free.get_mut(&len))
        .and_then(Vec::pop);
    reused.unwrap_or_else(|| vec![0.0; len])
}

/// Hands `buffer` back for a later [`take`] of its length.
pub(crate) fn give(buffer: Vec<f32>) {
    if buffer.is_empty() {
        return;
    }
    let mut free = FREE.lock().unwrap_or_else(|e| e.into_inner());
    let waiting = free
        .get_or_insert_with(HashMap::new)
        .entry(buffer.len())
        .or_default();
    if waiting.len() < MAX_PER_LENGTH {
        waiting.push(buffer);
    }
}

/// Hands back every buffer of `buffers`.
pub(crate) fn give_all(buffers: impl IntoIterator<Item = Vec<f32>>) {
    for b in buffers {
        give(b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_has_the_length_asked_for_and_comes_back_for_that_length() {
        // A length no other test of the crate uses, so that parallel tests do not interfere.
        let len = 987_653;
        let mut first = take(len);
        assert_eq!(first.len(), len);
        first[0] = 42.0;
        let at = first.as_ptr();
        give(first);
        let other = take(len + 1);
        assert_eq!(other.len(), len + 1);
        let again = take(len);
        assert_eq!(again.len(), len);
        assert_eq!(again.as_ptr(), at, "the returned buffer is reused");
        give_all([again, other, Vec::new()]);
    }
}
