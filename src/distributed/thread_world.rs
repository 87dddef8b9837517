//! Ranks as threads of one process: what the training loop's tests use in place of MPI.

use std::sync::{Arc, Barrier, Mutex};

use super::{Collective, CollectiveError};

struct Shared {
    barrier: Barrier,
    /// Every rank's contribution to the current operation.
    slots: Mutex<Vec<Vec<f64>>>,
    /// Every rank's bytes of the current gather.
    bytes: Mutex<Vec<Vec<u8>>>,
}

/// One rank of a group of threads that call the same collective operations.
pub struct ThreadWorld {
    rank: usize,
    size: usize,
    shared: Arc<Shared>,
}

impl ThreadWorld {
    /// `size` connected ranks, one per thread (move each into its own thread).
    pub fn group(size: usize) -> Vec<ThreadWorld> {
        let shared = Arc::new(Shared {
            barrier: Barrier::new(size),
            slots: Mutex::new(vec![Vec::new(); size]),
            bytes: Mutex::new(vec![Vec::new(); size]),
        });
        (0..size)
            .map(|rank| ThreadWorld {
                rank,
                size,
                shared: shared.clone(),
            })
            .collect()
    }

    /// Every rank's `values`, in rank order.
    fn exchange(&self, values: Vec<f64>) -> Result<Vec<Vec<f64>>, CollectiveError> {
        let len = values.len();
        self.shared.slots.lock().expect("poisoned")[self.rank] = values;
        self.shared.barrier.wait();
        let all = self.shared.slots.lock().expect("poisoned").clone();
        // Nobody overwrites a slot before everyone has read it.
        self.shared.barrier.wait();
        if let Some(other) = all.iter().find(|v| v.len() != len) {
            return Err(CollectiveError::LengthMismatch {
                rank: self.rank,
                expected: len,
                got: other.len(),
            });
        }
        Ok(all)
    }
}

impl Collective for ThreadWorld {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn sum_f32(&self, values: &mut [f32]) -> Result<(), CollectiveError> {
        let all = self.exchange(values.iter().map(|&v| f64::from(v)).collect())?;
        for (i, v) in values.iter_mut().enumerate() {
            // Summed in f32 in rank order, as a reduction over processes would.
            *v = all.iter().fold(0f32, |acc, r| acc + r[i] as f32);
        }
        Ok(())
    }

    fn min_i64(&self, values: &mut [i64]) -> Result<(), CollectiveError> {
        let all = self.exchange(values.iter().map(|&v| v as f64).collect())?;
        for (i, v) in values.iter_mut().enumerate() {
            *v = all.iter().map(|r| r[i] as i64).min().unwrap_or(*v);
        }
        Ok(())
    }

    fn broadcast_f32(&self, values: &mut [f32]) -> Result<(), CollectiveError> {
        let all = self.exchange(values.iter().map(|&v| f64::from(v)).collect())?;
        for (v, r) in values.iter_mut().zip(&all[0]) {
            *v = *r as f32;
        }
        Ok(())
    }

    fn gather_bytes(&self, bytes: &[u8]) -> Result<Vec<Vec<u8>>, CollectiveError> {
        self.shared.bytes.lock().expect("poisoned")[self.rank] = bytes.to_vec();
        self.shared.barrier.wait();
        let all = if self.rank == 0 {
            let fresh = vec![Vec::new(); self.size];
            std::mem::replace(&mut *self.shared.bytes.lock().expect("poisoned"), fresh)
        } else {
            Vec::new()
        };
        // Nobody writes the next gather before rank 0 has taken this one.
        self.shared.barrier.wait();
        Ok(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rank 0 gets every rank's bytes in rank order (of any lengths, an empty one too), the
    /// others nothing, and a second gather right after does not mix with the first.
    #[test]
    fn three_threads_gather_bytes_on_rank_0() {
        let handles: Vec<_> = ThreadWorld::group(3)
            .into_iter()
            .map(|w| {
                std::thread::spawn(move || {
                    let r = w.rank() as u8;
                    let first = w.gather_bytes(&vec![r; w.rank() * 2]).unwrap();
                    let second = w.gather_bytes(&[r + 10]).unwrap();
                    (w.rank(), first, second)
                })
            })
            .collect();
        for h in handles {
            let (rank, first, second) = h.join().unwrap();
            if rank == 0 {
                assert_eq!(first, vec![vec![], vec![1, 1], vec![2, 2, 2, 2]]);
                assert_eq!(second, vec![vec![10], vec![11], vec![12]]);
            } else {
                assert!(first.is_empty() && second.is_empty());
            }
        }
    }

    #[test]
    fn three_threads_sum_average_min_max_and_broadcast() {
        let handles: Vec<_> = ThreadWorld::group(3)
            .into_iter()
            .map(|w| {
                std::thread::spawn(move || {
                    let r = w.rank() as f32;
                    let mut s = [r, 10.0 * r];
                    w.sum_f32(&mut s).unwrap();
                    let mut a = [r];
                    w.average_f32(&mut a).unwrap();
                    let mut m = [w.rank() as i64, -(w.rank() as i64)];
                    w.min_i64(&mut m).unwrap();
                    let mut x = [w.rank() as i64];
                    w.max_i64(&mut x).unwrap();
                    let mut b = [r + 5.0; 2];
                    w.broadcast_f32(&mut b).unwrap();
                    (s, a, m, x, b)
                })
            })
            .collect();
        for h in handles {
            let (s, a, m, x, b) = h.join().unwrap();
            assert_eq!(s, [3.0, 30.0]);
            assert_eq!(a, [1.0]);
            assert_eq!(m, [0, -2]);
            assert_eq!(x, [2]);
            assert_eq!(b, [5.0, 5.0]);
        }
    }

    #[test]
    fn buffers_of_different_lengths_are_an_error_on_every_rank() {
        let handles: Vec<_> = ThreadWorld::group(2)
            .into_iter()
            .map(|w| {
                std::thread::spawn(move || {
                    let mut v = vec![1.0; 1 + w.rank()];
                    w.sum_f32(&mut v).unwrap_err().to_string()
                })
            })
            .collect();
        for h in handles {
            let err = h.join().unwrap();
            assert!(err.contains("expected"), "{err}");
        }
    }
}
