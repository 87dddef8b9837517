//! Gradient averaging over several GPUs of one process with NCCL (cargo feature `nccl`).
//!
//! One communicator per replica (`ncclCommInitAll`); for every parameter, each replica's
//! gradient is all-reduced with `ncclAvg` into a fresh buffer on its own GPU. The calls for all
//! replicas are issued from one thread between `ncclGroupStart` and `ncclGroupEnd`, as NCCL
//! requires when one thread drives several devices.
//!
//! Over several ranks (processes, e.g. MPI) whose replicas are all on GPUs, one communicator
//! spans every GPU of every rank ([`NcclReducer::across_ranks`]: rank 0's NCCL unique id is
//! broadcast over the ranks' own [`Collective`], then `ncclCommInitRank` per GPU), so one
//! NCCL all-reduce averages over all replicas of all ranks.
//!
//! Compiled in CI on a machine without a GPU; not yet run on GPUs.

use candle_core::cuda_backend::cudarc::nccl::{result as nccl_result, Comm, Id, ReduceOp};
use candle_core::{CpuStorage, CudaStorage, Device, Layout, Shape, Tensor};

use crate::distributed::Collective;
use crate::network::NetworkError;

fn nccl_error(what: &str, err: impl std::fmt::Debug) -> NetworkError {
    NetworkError::Candle(candle_core::Error::Msg(format!("NCCL {what}: {err:?}")))
}

/// A custom op whose CUDA forward all-reduces its input over `comm` (average).
struct AllReduceAvg<'a> {
    comm: &'a Comm,
}

impl candle_core::CustomOp1 for AllReduceAvg<'_> {
    fn name(&self) -> &'static str {
        "nccl-all-reduce-avg"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        candle_core::bail!("NCCL all-reduce needs CUDA tensors")
    }

    fn cuda_fwd(
        &self,
        storage: &CudaStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("NCCL all-reduce needs a contiguous tensor");
        };
        let src = storage.as_cuda_slice::<f32>()?;
        let src = src.slice(start..end);
        let device = storage.device.clone();
        let mut dst = device.alloc_zeros::<f32>(end - start)?;
        self.comm
            .all_reduce(&src, &mut dst, &ReduceOp::Avg)
            .map_err(|e| candle_core::Error::Msg(format!("ncclAllReduce: {e:?}")))?;
        Ok((
            CudaStorage::wrap_cuda_slice(dst, device),
            layout.shape().clone(),
        ))
    }
}

/// The CUDA stream of each of `devices` (the one stream every thread shares per GPU).
fn streams_of(
    devices: &[Device],
) -> candle_core::Result<Vec<std::sync::Arc<candle_core::cuda_backend::cudarc::driver::CudaStream>>>
{
    devices
        .iter()
        .map(|d| Ok(d.as_cuda_device()?.cuda_stream()))
        .collect()
}

/// NCCL communicators, one per replica device.
pub struct NcclReducer {
    comms: Vec<Comm>,
}

impl NcclReducer {
    /// Communicators for `devices`, which must all be CUDA devices.
    pub fn new(devices: &[Device]) -> Result<Self, NetworkError> {
        let streams = streams_of(devices)?;
        let comms = Comm::from_devices(streams).map_err(|e| nccl_error("communicator setup", e))?;
        Ok(Self { comms })
    }

    /// Communicators spanning the GPUs of every rank of `collective`: GPU `d` of rank `r` is
    /// NCCL rank `r * devices.len() + d`. Every rank must call this, with as many CUDA
    /// devices as the others.
    pub fn across_ranks(
        devices: &[Device],
        collective: &dyn Collective,
    ) -> Result<Self, NetworkError> {
        let local = devices.len() as i64;
        let (mut fewest, mut most) = ([local], [local]);
        collective.min_i64(&mut fewest)?;
        collective.max_i64(&mut most)?;
        if fewest[0] != most[0] {
            return Err(nccl_error(
                "set-up across ranks",
                format!(
                    "every rank must drive as many GPUs; they drive between {} and {}",
                    fewest[0], most[0]
                ),
            ));
        }
        let streams = streams_of(devices)?;
        // Rank 0's unique id, sent as one f32 per byte (exact).
        let mut id_bytes = [0f32; 128];
        if collective.rank() == 0 {
            let id = Id::new().map_err(|e| nccl_error("unique id", e))?;
            for (out, byte) in id_bytes.iter_mut().zip(id.internal()) {
                *out = f32::from(*byte as u8);
            }
        }
        collective.broadcast_f32(&mut id_bytes)?;
        let internal: [std::ffi::c_char; 128] =
            std::array::from_fn(|i| id_bytes[i] as u8 as std::ffi::c_char);
        let world = collective.size() * devices.len();
        let first = collective.rank() * devices.len();
        nccl_result::group_start().map_err(|e| nccl_error("group start", e))?;
        let mut comms = Vec::with_capacity(streams.len());
        let mut failure = None;
        for (d, stream) in streams.into_iter().enumerate() {
            // ncclCommInitRank sets up the communicator on the thread's current device.
            let made = stream
                .context()
                .bind_to_thread()
                .map_err(|e| nccl_error("binding the device", e))
                .and_then(|()| {
                    Comm::from_rank(stream, first + d, world, Id::uninit(internal))
                        .map_err(|e| nccl_error("communicator set-up (ncclCommInitRank)", e))
                });
            match made {
                Ok(comm) => comms.push(comm),
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        nccl_result::group_end().map_err(|e| nccl_error("group end", e))?;
        if let Some(e) = failure {
            return Err(e);
        }
        Ok(Self { comms })
    }

    /// Average `grads[replica][parameter]` over the replicas; every replica gets the mean on its
    /// own device. Gradients must be f32 and present on every replica or on none.
    pub fn average(
        &self,
        grads: &[Vec<Option<Tensor>>],
    ) -> Result<Vec<Vec<Option<Tensor>>>, NetworkError> {
        let contiguous = grads
            .iter()
            .map(|replica| {
                replica
                    .iter()
                    .map(|g| g.as_ref().map(Tensor::contiguous).transpose())
                    .collect::<candle_core::Result<Vec<_>>>()
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        let params = contiguous.first().map_or(0, Vec::len);
        let mut out: Vec<Vec<Option<Tensor>>> = vec![Vec::with_capacity(params); contiguous.len()];
        nccl_result::group_start().map_err(|e| nccl_error("group start", e))?;
        let mut failure = None;
        for j in 0..params {
            for (i, replica) in contiguous.iter().enumerate() {
                let reduced = match &replica[j] {
                    Some(g) => match g.apply_op1_no_bwd(&AllReduceAvg {
                        comm: &self.comms[i],
                    }) {
                        Ok(t) => Some(t),
                        Err(e) => {
                            failure.get_or_insert(e);
                            None
                        }
                    },
                    None => None,
                };
                out[i].push(reduced);
            }
        }
        // Close the group even after a failure, so NCCL is left in a usable state.
        nccl_result::group_end().map_err(|e| nccl_error("group end", e))?;
        if let Some(e) = failure {
            return Err(e.into());
        }
        Ok(out)
    }
}
