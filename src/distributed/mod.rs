//! Training over several processes: the collective operations the trainer needs, behind a
//! trait, so the training loop does not depend on how the processes talk.
//!
//! Each process ("rank") runs its own self-play and replay buffer, samples its shard of the
//! global batch (`training.batch_size / ranks`), and averages its gradients with the other
//! ranks' before every update ([`crate::train::Learner::set_collective`]); every rank starts
//! from rank 0's parameters, so the ranks stay identical. The training loop agrees on when to
//! train and when to stop ([`crate::trainer`]); rank 0 alone evaluates, logs and writes
//! checkpoints.
//!
//! Implementations: `mpi::MpiWorld` (cargo feature `mpi`, launched by `mpirun`) and
//! [`ThreadWorld`] (ranks as threads of one process: the tests of the training loop's
//! agreement, without MPI).

#[cfg(feature = "mpi")]
pub mod mpi;
mod thread_world;

pub use thread_world::ThreadWorld;

/// A failed collective operation.
#[derive(Debug, thiserror::Error)]
pub enum CollectiveError {
    #[error(
        "rank {rank} expected {expected} values in a collective operation, another rank sent {got}"
    )]
    LengthMismatch {
        rank: usize,
        expected: usize,
        got: usize,
    },
    #[error("{0}")]
    Other(String),
}

/// The collective operations over a fixed group of ranks. Every rank must call the same
/// operations, in the same order, with buffers of the same length.
pub trait Collective {
    /// This process's rank, `0..size()`.
    fn rank(&self) -> usize;
    /// The number of ranks.
    fn size(&self) -> usize;
    /// This process's rank among the ranks of its machine (0 where there is one per machine).
    fn local_rank(&self) -> usize {
        0
    }
    /// The number of ranks on this process's machine.
    fn local_size(&self) -> usize {
        1
    }
    /// Replace `values` by their element-wise sum over the ranks.
    fn sum_f32(&self, values: &mut [f32]) -> Result<(), CollectiveError>;
    /// Replace `values` by their element-wise minimum over the ranks.
    fn min_i64(&self, values: &mut [i64]) -> Result<(), CollectiveError>;
    /// Replace `values` on every rank by rank 0's.
    fn broadcast_f32(&self, values: &mut [f32]) -> Result<(), CollectiveError>;
    /// Every rank's `bytes` (any length each, at most `i32::MAX`), in rank order, on rank 0;
    /// an empty list on the other ranks.
    fn gather_bytes(&self, bytes: &[u8]) -> Result<Vec<Vec<u8>>, CollectiveError>;

    /// Run `f`, work that waits on the other ranks outside these operations (`what`: an NCCL
    /// reduction over every rank's GPUs and the device reads that wait for it), under the same
    /// watchdog as the operations: over MPI a wait past the timeout ends the process with a
    /// message that names `what`. Without a watchdog, just `f`.
    fn watched(&self, what: &'static str, f: &mut dyn FnMut()) {
        let _ = what;
        f();
    }

    /// Element-wise mean over the ranks.
    fn average_f32(&self, values: &mut [f32]) -> Result<(), CollectiveError> {
        self.sum_f32(values)?;
        let n = self.size() as f32;
        if n > 1.0 {
            for v in values.iter_mut() {
                *v /= n;
            }
        }
        Ok(())
    }

    /// Element-wise maximum over the ranks.
    fn max_i64(&self, values: &mut [i64]) -> Result<(), CollectiveError> {
        for v in values.iter_mut() {
            *v = -*v;
        }
        self.min_i64(values)?;
        for v in values.iter_mut() {
            *v = -*v;
        }
        Ok(())
    }
}
