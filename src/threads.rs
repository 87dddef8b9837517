//! Running pieces of work side by side: two on the rayon pool ([`side_by_side`]), or many on
//! a few threads kept awake for the length of a search ([`with_helpers`]).

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

/// `a()` on this thread and `b()` on the rayon pool, side by side. Unlike `rayon::join`
/// called from outside the pool, which hands both closures to the pool and puts the caller to
/// sleep until they are done, the caller computes `a` itself: one thread hand-off, not two.
pub fn side_by_side<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA + Send,
    B: FnOnce() -> RB + Send,
    RA: Send,
    RB: Send,
{
    if rayon::current_thread_index().is_some() {
        return rayon::join(a, b);
    }
    let mut second = None;
    let first = rayon::in_place_scope(|scope| {
        scope.spawn(|_| second = Some(b()));
        a()
    });
    (
        first,
        second.expect("the scope waits for its spawned closure"),
    )
}

/// Run `body` with `helpers` threads kept awake beside the caller until it returns: each
/// [`Team::for_each`] inside it hands them its chunks at once. The rayon pool's threads fall
/// asleep during any pause of a few microseconds, such as a search's wait for a GPU call, and
/// waking them again costs about as much as a few hundred trees' work; these spin instead
/// (yielding now and then), so they burn their cores for as long as `body` runs. Worth it only
/// where the caller otherwise waits idle between short pieces of work. With `helpers` 0 the
/// team is the caller alone.
pub fn with_helpers<R>(helpers: usize, body: impl FnOnce(&Team) -> R) -> R {
    let team = Team {
        helpers,
        epoch: AtomicUsize::new(0),
        chunks: AtomicUsize::new(0),
        next: AtomicUsize::new(0),
        busy: AtomicUsize::new(0),
        stop: AtomicBool::new(false),
        panicked: AtomicBool::new(false),
        job: Mutex::new(None),
    };
    if helpers == 0 {
        return body(&team);
    }
    std::thread::scope(|scope| {
        for _ in 0..helpers {
            scope.spawn(|| team.help());
        }
        let result = catch_unwind(AssertUnwindSafe(|| body(&team)));
        team.stop.store(true, Ordering::Release);
        match result {
            Ok(value) => value,
            Err(panic) => resume_unwind(panic),
        }
    })
}

/// The caller and its helpers inside [`with_helpers`].
pub struct Team {
    helpers: usize,
    /// Bumped once per job; the helpers watch it.
    epoch: AtomicUsize,
    /// The current job's number of chunks, and the next chunk to take.
    chunks: AtomicUsize,
    next: AtomicUsize,
    /// Helpers not yet done with the current job.
    busy: AtomicUsize,
    stop: AtomicBool,
    panicked: AtomicBool,
    /// The current job, set before its epoch is bumped and cleared only once every helper is
    /// done with it.
    job: Mutex<Option<Job>>,
}

/// A job's closure with its lifetime erased: [`Team::for_each`] keeps the closure alive until
/// every helper has left it.
#[derive(Clone, Copy)]
struct Job(*const (dyn Fn(usize) + Sync + 'static));

// SAFETY: the pointer is to a `Sync` closure, called from the helpers only while
// `Team::for_each`, which owns the borrow, waits for them.
unsafe impl Send for Job {}

impl Team {
    /// Threads beside the caller.
    pub fn helpers(&self) -> usize {
        self.helpers
    }

    /// `f(i)` for every `i` in `0..chunks`, each exactly once, on the caller and the helpers;
    /// returns when all are done. A panic in `f` on a helper is raised here.
    pub fn for_each(&self, chunks: usize, f: &(dyn Fn(usize) + Sync)) {
        if self.helpers == 0 || chunks <= 1 {
            (0..chunks).for_each(f);
            return;
        }
        // SAFETY: only the lifetime changes; the helpers call the closure only until `busy`
        // falls to 0, which this function waits for before it returns (or unwinds: a panic in
        // `f` on this thread is caught until then).
        let erased: &'static (dyn Fn(usize) + Sync) = unsafe { std::mem::transmute(f) };
        *self.job.lock().unwrap_or_else(|e| e.into_inner()) = Some(Job(erased));
        self.chunks.store(chunks, Ordering::Relaxed);
        self.next.store(0, Ordering::Relaxed);
        self.busy.store(self.helpers, Ordering::Relaxed);
        self.epoch.fetch_add(1, Ordering::Release);
        let mine = catch_unwind(AssertUnwindSafe(|| self.take_chunks(f)));
        // A helper that the OS has put aside holds the job up; yield now and then so that it
        // gets a core back on a machine with more threads than cores.
        let mut spins = 0u32;
        while self.busy.load(Ordering::Acquire) != 0 {
            spin_or_yield(&mut spins);
        }
        *self.job.lock().unwrap_or_else(|e| e.into_inner()) = None;
        if let Err(panic) = mine {
            resume_unwind(panic);
        }
        if self.panicked.swap(false, Ordering::Relaxed) {
            panic!("a helper thread panicked in Team::for_each");
        }
    }

    fn take_chunks(&self, f: &(dyn Fn(usize) + Sync)) {
        let chunks = self.chunks.load(Ordering::Relaxed);
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= chunks {
                break;
            }
            f(i);
        }
    }

    /// A helper's loop: wait for each new epoch, take chunks of its job, report done.
    fn help(&self) {
        let mut seen = 0;
        let mut spins = 0u32;
        loop {
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            let epoch = self.epoch.load(Ordering::Acquire);
            if epoch == seen {
                spin_or_yield(&mut spins);
                continue;
            }
            seen = epoch;
            let job = *self.job.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(Job(f)) = job {
                // SAFETY: `for_each` keeps the closure alive until `busy` reaches 0 below.
                let f = unsafe { &*f };
                if catch_unwind(AssertUnwindSafe(|| self.take_chunks(f))).is_err() {
                    self.panicked.store(true, Ordering::Relaxed);
                }
            }
            self.busy.fetch_sub(1, Ordering::Release);
        }
    }
}

/// One turn of a busy wait: a spin hint, and every 1,024th turn a yield to the OS, so that a
/// waiting thread gives its core up now and then on a machine with more threads than cores.
fn spin_or_yield(spins: &mut u32) {
    *spins = spins.wrapping_add(1);
    if spins.is_multiple_of(1024) {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every chunk runs exactly once per job, over many jobs in a row, with any number of
    /// helpers (0 included), and the writes of the helpers are seen by the caller after it.
    #[test]
    fn each_chunk_runs_once_per_job() {
        for helpers in [0, 1, 3] {
            let counts: Vec<AtomicUsize> = (0..37).map(|_| AtomicUsize::new(0)).collect();
            let total = with_helpers(helpers, |team| {
                assert_eq!(team.helpers(), helpers);
                let mut total = 0;
                for job in 0..200 {
                    let chunks = job % 37 + 1;
                    team.for_each(chunks, &|i| {
                        counts[i].fetch_add(1, Ordering::Relaxed);
                    });
                    total += chunks;
                }
                total
            });
            let runs: usize = counts.iter().map(|c| c.load(Ordering::Relaxed)).sum();
            assert_eq!(runs, total, "{helpers} helpers");
            // Chunk i exists in the jobs whose chunk count exceeds i.
            for (i, c) in counts.iter().enumerate() {
                let expected = (0..200).filter(|job| job % 37 + 1 > i).count();
                assert_eq!(
                    c.load(Ordering::Relaxed),
                    expected,
                    "chunk {i}, {helpers} helpers"
                );
            }
        }
    }

    /// A panic inside a job, on whichever thread runs the chunk, reaches the caller, and the
    /// helpers stop.
    #[test]
    fn a_panicking_chunk_reaches_the_caller() {
        let result = catch_unwind(|| {
            with_helpers(2, |team| {
                team.for_each(8, &|i| {
                    if i == 5 {
                        panic!("chunk 5");
                    }
                });
            })
        });
        assert!(result.is_err());
    }
}
