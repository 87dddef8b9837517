//! Counters for what the GPU path pays per call: tensor ops and device-to-host reads.
//!
//! On CUDA every candle op is a kernel launch (plus host-side lookup and allocation) and every
//! read of a tensor's values on the host is a blocking synchronisation, so their numbers per
//! search simulation and per training step decide whether a GPU can pay off at these model
//! sizes. Both can be counted on the CPU, where the same code issues the same ops:
//!
//! - [`tensors_created`]: candle numbers every tensor it creates (each op's result, views
//!   included) from one process-wide counter; the difference over a call is its op count.
//! - [`host_reads`]: every place the library copies tensor values to the host calls
//!   [`read_f32`] (or [`note_host_read`]), which counts it.
//!
//! Both counters are process-wide: count on one thread with nothing else running (the tests
//! in tests/op_counts.rs take a lock for that).
//! `cargo run --release --example op_counts` prints them per simulation and per training step,
//! with heap allocations from a counting allocator (docs/benchmarks.md).

use std::sync::atomic::{AtomicU64, Ordering};

use candle_core::{DType, Device, Tensor};

static HOST_READS: AtomicU64 = AtomicU64::new(0);

/// Device-to-host reads made through [`read_f32`] / [`note_host_read`] so far.
pub fn host_reads() -> u64 {
    HOST_READS.load(Ordering::Relaxed)
}

/// Count one device-to-host read.
pub fn note_host_read() {
    HOST_READS.fetch_add(1, Ordering::Relaxed);
}

/// All values of `t` as f32 on the host, in row-major order: one counted read.
pub fn read_f32(t: &Tensor) -> candle_core::Result<Vec<f32>> {
    note_host_read();
    t.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()
}

/// The number candle gave the latest tensor created in this process (so far, by any thread).
/// It creates one tensor itself to find out; [`OpCount::since`] subtracts it.
pub fn tensors_created() -> u64 {
    let probe = Tensor::zeros((), DType::U8, &Device::Cpu).expect("a CPU scalar");
    // `TensorId` is a Debug-only newtype over candle's global counter: `TensorId(1234)`.
    let text = format!("{:?}", probe.id());
    text.trim_start_matches("TensorId(")
        .trim_end_matches(')')
        .parse()
        .expect("candle's TensorId prints as TensorId(n)")
}

/// Tensor ops and host reads between [`OpCount::start`] and [`OpCount::since`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpCount {
    pub tensor_ops: u64,
    pub host_reads: u64,
}

/// A starting point for [`OpCount::since`].
#[derive(Clone, Copy, Debug)]
pub struct OpMark {
    tensors: u64,
    reads: u64,
}

impl OpCount {
    pub fn start() -> OpMark {
        OpMark {
            tensors: tensors_created(),
            reads: host_reads(),
        }
    }

    /// What happened since `mark` (the probe tensor of the second reading excluded).
    pub fn since(mark: OpMark) -> OpCount {
        let tensors = tensors_created();
        OpCount {
            tensor_ops: tensors.saturating_sub(mark.tensors + 1),
            host_reads: host_reads() - mark.reads,
        }
    }
}
