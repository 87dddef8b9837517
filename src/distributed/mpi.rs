//! [`Collective`] over MPI (cargo feature `mpi`; the `mpi` crate over the system's MPI, Open
//! MPI on Debian). Launched by `mpirun -np K cumind train --distributed mpi`.
//!
//! A dead rank: `mpirun` notices it and stops the others at once, naming the rank that died.
//! A rank that hangs without dying leaves the others blocked in a collective operation; a
//! watchdog thread ends this process with an error naming the operation when one has waited
//! longer than the timeout, and `mpirun` then stops the rest.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mpi::collective::{CommunicatorCollectives, Root, SystemOperation};
use mpi::datatype::PartitionMut;
use mpi::environment::{Threading, Universe};
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::Count;

use super::{Collective, CollectiveError};

/// Milliseconds since `epoch` at which the pending operation began (0: none pending), and its
/// number (for the message).
struct Pending {
    since_ms: AtomicU64,
    operation: AtomicU64,
    /// What the armed wait is, for the watchdog's message.
    what: std::sync::Mutex<&'static str>,
}

/// This process's place in `MPI_COMM_WORLD`. MPI is finalized when it is dropped; all its
/// calls must come from the thread that created it.
pub struct MpiWorld {
    world: SimpleCommunicator,
    rank: usize,
    size: usize,
    local_rank: usize,
    local_size: usize,
    epoch: Instant,
    pending: Arc<Pending>,
    operations: std::cell::Cell<u64>,
    // Dropped last: finalizes MPI.
    _universe: Universe,
}

impl MpiWorld {
    /// Initialize MPI (once per process) and start the watchdog: a collective operation that
    /// waits longer than `timeout` ends the process with exit code 3.
    pub fn init(timeout: Duration) -> Result<Self, CollectiveError> {
        let (universe, _) =
            mpi::initialize_with_threading(Threading::Funneled).ok_or_else(|| {
                CollectiveError::Other("MPI was already initialized in this process".into())
            })?;
        let world = universe.world();
        let rank = world.rank() as usize;
        let size = world.size() as usize;
        // The ranks that share this machine's memory, as MPI itself groups them (whatever the
        // launcher: mpirun, mpiexec.hydra, srun).
        let (local_rank, local_size) = {
            let node = world.split_shared(rank as i32);
            (node.rank() as usize, node.size() as usize)
        };
        let pending = Arc::new(Pending {
            since_ms: AtomicU64::new(0),
            operation: AtomicU64::new(0),
            what: std::sync::Mutex::new("collective operation"),
        });
        let epoch = Instant::now();
        {
            let pending = pending.clone();
            std::thread::Builder::new()
                .name("mpi-watchdog".into())
                .spawn(move || watchdog(rank, size, epoch, timeout, &pending))
                .map_err(|e| CollectiveError::Other(format!("cannot start the watchdog: {e}")))?;
        }
        Ok(Self {
            world,
            rank,
            size,
            local_rank,
            local_size,
            epoch,
            pending,
            operations: std::cell::Cell::new(0),
            _universe: universe,
        })
    }

    /// The processor (host) name, for messages.
    pub fn host(&self) -> String {
        mpi::environment::processor_name().unwrap_or_else(|_| "?".into())
    }

    /// Run `f` with the watchdog armed.
    fn guarded<T>(&self, f: impl FnOnce() -> T) -> T {
        self.guarded_as("collective operation", f)
    }

    /// [`Self::guarded`], the wait named `what` in the watchdog's message.
    fn guarded_as<T>(&self, what: &'static str, f: impl FnOnce() -> T) -> T {
        let n = self.operations.get() + 1;
        self.operations.set(n);
        *self.pending.what.lock().unwrap_or_else(|e| e.into_inner()) = what;
        self.pending.operation.store(n, Ordering::SeqCst);
        let now = self.epoch.elapsed().as_millis() as u64;
        self.pending.since_ms.store(now.max(1), Ordering::SeqCst);
        let out = f();
        self.pending.since_ms.store(0, Ordering::SeqCst);
        out
    }
}

fn watchdog(rank: usize, size: usize, epoch: Instant, timeout: Duration, pending: &Pending) {
    let tick = (timeout / 10).clamp(Duration::from_millis(50), Duration::from_secs(1));
    loop {
        std::thread::sleep(tick);
        let since = pending.since_ms.load(Ordering::SeqCst);
        if since == 0 {
            continue;
        }
        let waited =
            epoch.elapsed().as_millis() as u64 - since.min(epoch.elapsed().as_millis() as u64);
        if waited > timeout.as_millis() as u64 {
            eprintln!(
                "error: rank {rank} of {size} waited {:.0} s in {} {} for the other ranks \
                 (timeout {:.0} s): a rank is lost or stalled; stopping. Resume from the last \
                 checkpoint with --resume.",
                waited as f64 / 1000.0,
                *pending.what.lock().unwrap_or_else(|e| e.into_inner()),
                pending.operation.load(Ordering::SeqCst),
                timeout.as_secs_f64()
            );
            // Not MPI_Abort: MPI may only be called from the main thread. A rank that exits
            // without finalizing makes mpirun stop the others.
            std::process::exit(3);
        }
    }
}

impl Collective for MpiWorld {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn local_rank(&self) -> usize {
        self.local_rank
    }

    fn local_size(&self) -> usize {
        self.local_size
    }

    fn sum_f32(&self, values: &mut [f32]) -> Result<(), CollectiveError> {
        self.check_length(values.len())?;
        let send = values.to_vec();
        self.guarded(|| {
            self.world
                .all_reduce_into(&send[..], values, SystemOperation::sum())
        });
        Ok(())
    }

    fn min_i64(&self, values: &mut [i64]) -> Result<(), CollectiveError> {
        self.check_length(values.len())?;
        let send = values.to_vec();
        self.guarded(|| {
            self.world
                .all_reduce_into(&send[..], values, SystemOperation::min())
        });
        Ok(())
    }

    fn broadcast_f32(&self, values: &mut [f32]) -> Result<(), CollectiveError> {
        self.check_length(values.len())?;
        self.guarded(|| self.world.process_at_rank(0).broadcast_into(values));
        Ok(())
    }

    fn watched(&self, what: &'static str, f: &mut dyn FnMut()) {
        self.guarded_as(what, f);
    }

    fn gather_bytes(&self, bytes: &[u8]) -> Result<Vec<Vec<u8>>, CollectiveError> {
        // MPI counts are 32-bit: every rank learns whether some rank's bytes are too many
        // before any of them starts the gather.
        let mut longest = [bytes.len() as i64];
        self.max_i64(&mut longest)?;
        if longest[0] > i32::MAX as i64 {
            return Err(CollectiveError::Other(format!(
                "cannot gather {} bytes from one rank (MPI counts stop at {})",
                longest[0],
                i32::MAX
            )));
        }
        let root = self.world.process_at_rank(0);
        let len = bytes.len() as Count;
        if self.rank != 0 {
            self.guarded(|| {
                root.gather_into(&len);
                root.gather_varcount_into(bytes);
            });
            return Ok(Vec::new());
        }
        let mut counts = vec![0 as Count; self.size];
        self.guarded(|| root.gather_into_root(&len, &mut counts[..]));
        let displs: Vec<Count> = counts
            .iter()
            .scan(0 as Count, |at, &c| {
                let start = *at;
                *at = at.saturating_add(c);
                Some(start)
            })
            .collect();
        let total: usize = counts.iter().map(|&c| c as usize).sum();
        let mut all = vec![0u8; total];
        {
            let mut parts = PartitionMut::new(&mut all[..], &counts[..], &displs[..]);
            self.guarded(|| root.gather_varcount_into_root(bytes, &mut parts));
        }
        let mut out = Vec::with_capacity(self.size);
        let mut at = 0;
        for &c in &counts {
            out.push(all[at..at + c as usize].to_vec());
            at += c as usize;
        }
        Ok(out)
    }
}

impl MpiWorld {
    /// Every rank must pass buffers of the same length: checked with one small all-reduce
    /// (min and max of the length), so a mismatch is an error on every rank, not a crash.
    fn check_length(&self, len: usize) -> Result<(), CollectiveError> {
        let send = [len as i64, -(len as i64)];
        let mut got = [0i64; 2];
        self.guarded(|| {
            self.world
                .all_reduce_into(&send[..], &mut got[..], SystemOperation::min())
        });
        let (min, max) = (got[0], -got[1]);
        if min != max {
            return Err(CollectiveError::LengthMismatch {
                rank: self.rank,
                expected: len,
                got: if min as usize == len { max } else { min } as usize,
            });
        }
        Ok(())
    }
}
