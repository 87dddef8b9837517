//! A search's recurrent inference on CUDA as one replayed CUDA graph.
//!
//! Run op by op, a recurrent inference of the conv network is some sixty candle ops, each
//! with a kernel lookup, an allocation and a launch on the host; for CartPole's network the
//! host work is most of the call. Within one search the call has the same shapes, the same
//! weights and the same latent buffer every time, so it is captured once and replayed:
//!
//! - **Inputs** go into tensors that live as long as the search, in one host-to-device copy
//!   per call: the rows of the parents' latents and the actions (`u32`, `[2 * B]`). The
//!   one-hot actions are made on the device inside the graph.
//! - **Outputs** are copied, inside the graph, into two more such tensors: the next latents
//!   and the policy, value and reward logits side by side (`f32`, `[B, A + V + R]`), which the
//!   search reads in one copy. The next latents then go to their rows of the buffer (one
//!   device copy, outside the graph, since the rows change from call to call).
//! - **The first call runs op by op** with candle's cache of host-side kernel parameters on,
//!   which fills that cache (a capture may not upload host data); the second call is
//!   captured, instantiated and launched; every later call is one launch. Every tensor the
//!   captured ops create is dropped inside the capture, so each replay allocates and frees its
//!   own intermediates and the graph can be launched again and again.
//!
//! A capture that fails (an op that reads from or writes to the host, say) is reported once
//! with its error and the search goes on op by op, with the same numbers. The capture is
//! thread-local: it must not share the device's stream with work from other threads (the
//! caller enables graphs only where one thread uses the device; see
//! [`super::SearchModel::with_cuda_graphs`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use candle_core::cuda_backend::cudarc::driver::{result, sys, CudaGraph, CudaStream, DevicePtr};
use candle_core::{DType, Device, Storage, Tensor};

use super::{MuZeroNetwork, NetworkError};

/// Printed once per process: why captures fell back to running op by op.
static FALLBACK_REPORTED: AtomicBool = AtomicBool::new(false);

/// A captured graph, owned by one [`RecurrentGraph`].
struct Captured(CudaGraph);

// SAFETY: CUDA graphs may be used from any thread provided no two threads use one at once
// (the driver does not synchronise access to a graph). A `Captured` is owned by one
// `RecurrentGraph`, whose calls take `&mut self`, so moving it to another thread cannot make
// two uses overlap; it is not `Sync`.
unsafe impl Send for Captured {}

enum Stage {
    /// No call yet: the next one runs op by op and fills candle's parameter cache.
    Cold,
    /// One call ran: the next one is captured.
    Warm,
    /// Captured: every call is one launch.
    Replay(Captured),
    /// The capture failed (the error's text): op by op from here on.
    Eager(String),
}

/// The captured recurrent inference of one search (see the module's text).
pub struct RecurrentGraph {
    batch: usize,
    /// `u32 [2 * B]`: the parents' rows of the latent buffer, then the actions.
    inputs: Tensor,
    /// `u32 [1, A]`: 0..A, against which the actions are compared for the one-hot.
    action_ids: Tensor,
    /// The next latents `[B, ...latent]`, in the buffer's dtype.
    next: Tensor,
    /// `f32 [B, A + V + R]`.
    outputs: Tensor,
    stream: Arc<CudaStream>,
    stage: Stage,
}

fn driver(err: result::DriverError) -> candle_core::Error {
    candle_core::Error::Msg(format!("CUDA graph: {err}"))
}

impl RecurrentGraph {
    /// For a search of `batch` trees whose latents live in `buffer`; `None` off CUDA.
    pub fn new(
        network: &MuZeroNetwork,
        buffer: &Tensor,
        batch: usize,
    ) -> Result<Option<Self>, NetworkError> {
        let Device::Cuda(cuda) = buffer.device() else {
            return Ok(None);
        };
        let stream = cuda.cuda_stream();
        if stream.context().is_managing_stream_synchronization() {
            // With event tracking (several GPUs in the process) every op waits on events
            // recorded outside the capture, which a capture may not depend on.
            return Ok(None);
        }
        let spec = network.spec();
        let a = spec.num_actions;
        let width = a + spec.value_support.size() + spec.reward_support.size();
        let device = buffer.device();
        let mut latent = vec![batch];
        latent.extend(spec.latent_shape());
        let ids: Vec<u32> = (0..a as u32).collect();
        Ok(Some(Self {
            batch,
            inputs: Tensor::zeros(2 * batch, DType::U32, device)?,
            action_ids: Tensor::from_vec(ids, (1, a), device)?,
            next: Tensor::zeros(latent, buffer.dtype(), device)?,
            outputs: Tensor::zeros((batch, width), DType::F32, device)?,
            stream,
            stage: Stage::Cold,
        }))
    }

    /// Whether calls are replays of the captured graph.
    pub fn replays(&self) -> bool {
        matches!(self.stage, Stage::Replay(_))
    }

    /// Why the capture failed, once it has.
    pub fn fallback_reason(&self) -> Option<&str> {
        match &self.stage {
            Stage::Eager(reason) => Some(reason),
            _ => None,
        }
    }

    /// One recurrent inference: the children `new_node` of `parents` (rows `parent * B + i`
    /// of `buffer`) by `actions`; their latents go to rows `new_node * B + i`. Returns the
    /// logits row-major, `[B, A + V + R]`.
    pub fn run(
        &mut self,
        network: &MuZeroNetwork,
        buffer: &Tensor,
        parents: &[usize],
        actions: &[usize],
        new_node: usize,
    ) -> Result<Vec<f32>, NetworkError> {
        let b = self.batch;
        let mut host = super::search_model::parent_rows(parents, b);
        for &action in actions {
            host.push(network.checked_action(action)? as u32);
        }
        self.upload(&host)?;
        match &self.stage {
            Stage::Cold => {
                let cuda = buffer.device().as_cuda_device()?;
                let _cache = cuda.enable_cuda_graph_htod_cache();
                self.body(network, buffer)?;
                self.stage = Stage::Warm;
            }
            Stage::Warm => match self.capture(network, buffer) {
                Ok(graph) => {
                    graph.launch().map_err(driver)?;
                    self.stage = Stage::Replay(Captured(graph));
                }
                Err(err) => {
                    let reason = crate::error_chain::error_chain(&err);
                    if !FALLBACK_REPORTED.swap(true, Ordering::SeqCst) {
                        eprintln!(
                            "cumind: the search's CUDA graph could not be captured ({reason}); \
                             running its calls op by op"
                        );
                    }
                    self.stage = Stage::Eager(reason);
                    self.body(network, buffer)?;
                }
            },
            Stage::Replay(graph) => graph.0.launch().map_err(driver)?,
            Stage::Eager(_) => self.body(network, buffer)?,
        }
        buffer.slice_set(&self.next, 0, new_node * b)?;
        Ok(crate::op_count::read_f32(&self.outputs)?)
    }

    /// `host` into `self.inputs`, ordered on the device's stream before what follows.
    fn upload(&self, host: &[u32]) -> candle_core::Result<()> {
        let (storage, layout) = self.inputs.storage_and_layout();
        let Storage::Cuda(storage) = &*storage else {
            candle_core::bail!("CUDA graph: the inputs are not on a CUDA device");
        };
        if layout.start_offset() != 0 || layout.shape().elem_count() != host.len() {
            candle_core::bail!(
                "CUDA graph: {} inputs for a buffer of {}",
                host.len(),
                layout.shape().elem_count()
            );
        }
        let slice = storage.as_cuda_slice::<u32>()?;
        let (ptr, _sync) = slice.device_ptr(&self.stream);
        // SAFETY: `ptr` addresses `host.len()` u32 of `self.inputs`, which this struct alone
        // holds, and the copy is queued on the stream every use of the tensor runs on. A copy
        // from pageable memory returns once the host data is staged, so `host` may go.
        unsafe { result::memcpy_htod_async(ptr, host, self.stream.cu_stream()) }.map_err(driver)
    }

    /// The call itself, from `self.inputs` to `self.next` and `self.outputs`. Every tensor it
    /// creates is dropped before it returns.
    fn body(&self, network: &MuZeroNetwork, buffer: &Tensor) -> Result<(), NetworkError> {
        let b = self.batch;
        let rows = self.inputs.narrow(0, 0, b)?;
        let actions = self.inputs.narrow(0, b, b)?.reshape((b, 1))?;
        // 1.0 and 0.0 in f32, then the compute dtype, as `MuZeroNetwork::action_tensor`.
        let one_hot = actions
            .broadcast_eq(&self.action_ids)?
            .to_dtype(DType::F32)?
            .to_dtype(network.dtype())?;
        let parents = super::fused::gather_rows(buffer, &rows)?;
        let (next, reward, _) = network.dynamics_step(&parents, &one_hot, None)?;
        let (policy, value) = network.predict(&next)?;
        let next = next.to_dtype(buffer.dtype())?.contiguous()?;
        self.next.slice_set(&next, 0, 0)?;
        let all = Tensor::cat(&[&policy, &value, &reward], 1)?.to_dtype(DType::F32)?;
        self.outputs.slice_set(&all.contiguous()?, 0, 0)?;
        Ok(())
    }

    /// Capture [`Self::body`] into a graph (nothing runs until it is launched).
    fn capture(&self, network: &MuZeroNetwork, buffer: &Tensor) -> Result<CudaGraph, NetworkError> {
        let cuda = buffer.device().as_cuda_device()?;
        let _cache = cuda.enable_cuda_graph_htod_cache();
        self.stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(driver)?;
        let body = self.body(network, buffer);
        // The capture ends whatever the body did, so the stream runs normally again. Frees of
        // what a failed capture allocated are recorded in the context as errors (they concern
        // no live buffer); cleared first, since cudarc's `end_capture` would return the
        // recorded error without ending the capture.
        if body.is_err() {
            let _ = self.stream.context().check_err();
        }
        let graph = self.stream.end_capture(sys::CUgraphInstantiate_flags(0));
        self.end_capture_for_certain();
        let graph = match (body, graph) {
            (Ok(()), Ok(Some(graph))) => Ok(graph),
            (Ok(()), Ok(None)) => {
                Err(candle_core::Error::Msg("CUDA graph: nothing was captured".into()).into())
            }
            (Err(err), _) => Err(err),
            (Ok(()), Err(err)) => Err(driver(err).into()),
        };
        if graph.is_err() {
            let _ = self.stream.context().check_err();
        }
        graph
    }

    /// End a capture still open on the stream (one that `end_capture` could not end), and
    /// drop what it captured.
    fn end_capture_for_certain(&self) {
        let capturing = !matches!(
            self.stream.capture_status(),
            Ok(sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
        );
        if capturing {
            // SAFETY: the stream is this device's own, and a capture this struct began is open
            // on it; the graph it returns (null for an invalidated capture) is destroyed here.
            unsafe {
                if let Ok(graph) = result::stream::end_capture(self.stream.cu_stream()) {
                    if !graph.is_null() {
                        let _ = result::graph::destroy(graph);
                    }
                }
            }
            let _ = self.stream.context().check_err();
        }
    }
}
