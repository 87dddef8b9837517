//! The MLP networks' search calls on CUDA as one kernel each.
//!
//! A recurrent inference of CartPole's network run op by op is some forty candle ops, each a
//! launch of a kernel that does almost nothing: the search of 256 states was launch-bound (28-31
//! ms for 50 simulations on an H200, against 6-7 ms on two CPU cores), and a CUDA graph only
//! halved it. Here a call is one host-to-device copy (the parents' rows and the actions), one
//! launch of `cumind_mlp_recurrent_r{R}_f32` (dynamics and prediction for every tree, R trees
//! per warp, the weights fetched into the L1 cache first, the value and reward logits decoded
//! to scalars on the device) and one read of A + 2 floats a tree; the initial inference is one
//! launch of `cumind_mlp_initial_r{R}_f32`. The latents stay on the
//! device in a store of rows, node-major as in `search_model` (row `node * B + tree`).
//!
//! The kernels compute in f32 from an f32 copy of the weights packed once per search
//! ([`super::packed_mlp`]), whatever the network's compute dtype: at these widths a call costs
//! its launches and copies, not its arithmetic. Used by [`super::SearchModel::new`] for MLP
//! networks without a value prefix on a CUDA device while the fused kernels are on
//! ([`super::fused::set_fused_kernels`]); `SearchModel::on_tensors` keeps candle's ops.

use candle_core::cuda_backend::cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use candle_core::{Device, Storage, Tensor};

use super::fused_cuda::{ptx, MODULE};
use super::packed_mlp::{self, MlpDims};
use super::{MuZeroNetwork, NetworkError};
use crate::model::Prediction;
use crate::support::{Support, Transform};

/// Warps per block of the kernels, when their buffers fit.
const MAX_WARPS: usize = 4;
/// Trees per warp at batches of [`MANY`] or more (each weight a lane loads serves them all).
const ROWS: usize = 4;
/// The batch from which a warp computes [`ROWS`] trees; below it, one. A warp's trees share
/// its loads but run one after another, so four a warp pay only once the card is full: on an
/// H200 with CartPole's network a call of 256 trees took 37.5 us of kernel time at one tree a
/// warp against 52 us at four, 1,024 trees 39.7 against 52 us, while at 4,096 trees four a
/// warp made 42.1 million recurrent inferences a second against 34.8 (docs/benchmarks.md);
/// 2,048 lies between the measured batches.
const MANY: usize = 2048;
/// The largest recurrent inference, in floating-point operations per tree, that runs here.
/// A warp computes a tree's layers one after the other, so wide layers are slow: measured on an
/// H200 (docs/benchmarks.md), CartPole's network (64 hidden, about 35 KFLOP) ran faster here
/// than on candle's ops at every batch from 1 to 4,096, a 256-wide one (1 MFLOP) no faster,
/// and a 512-wide one (6 MFLOP) 2.7 to 5 times slower.
pub const MAX_FLOPS_PER_TREE: f64 = 200e3;
/// Shared memory a block may use without opting in to more.
const SHARED_BYTES: usize = 48 * 1024;
/// Activation buffers per tree in the kernels (`x, h, a, b, z`).
const BUFFERS: usize = 5;

fn error(message: String) -> NetworkError {
    NetworkError::Candle(candle_core::Error::Msg(message))
}

/// A kernel's own inputs: the observations of an initial inference, or the node a recurrent
/// one creates (its parents and actions are in `CudaMlp::inputs`).
enum Call<'a> {
    Initial(&'a CudaSlice<f32>),
    Recurrent(i32),
}

/// One search's packed weights, latent store and call buffers on one CUDA device.
pub struct CudaMlp {
    dims: MlpDims,
    batch: usize,
    capacity: usize,
    /// Trees per warp and warps per block.
    rows: usize,
    warps: usize,
    device: CudaDevice,
    /// The packed weights (kept alive for the kernels, which read its storage).
    weights: Tensor,
    /// Latents `[capacity * B, latent]`, node-major.
    store: CudaSlice<f32>,
    /// `u32 [2 * B]`: the parents' rows of the store, then the actions.
    inputs: CudaSlice<u32>,
    /// `f32 [B, A + V + R]` (an initial inference fills `[B, A + V]`): the logits, on the
    /// device only.
    outputs: CudaSlice<f32>,
    /// `f32 [B, A + 2]`: policy logits, value, reward (0 after an initial inference), what
    /// the host reads.
    compact: CudaSlice<f32>,
    /// The value's and the reward's support (the atom of index 0, and 1 where MuZero's
    /// transform applies), as the kernels take them.
    supports: [i32; 4],
}

/// The kernels' view of a support: its first atom and whether `h`'s inverse applies.
fn support_args(support: &Support) -> [i32; 2] {
    let transform = match support.transform {
        Transform::H => 1,
        Transform::None => 0,
    };
    [support.min, transform]
}

impl CudaMlp {
    /// Trees per warp and warps per block for `batch` trees of these sizes, or `None` when
    /// one tree's buffers exceed a block's shared memory.
    fn launch_shape(dims: &MlpDims, batch: usize) -> Option<(usize, usize)> {
        let per_tree = BUFFERS * dims.width() * std::mem::size_of::<f32>();
        if per_tree > SHARED_BYTES || dims.len() >= i32::MAX as usize {
            return None;
        }
        let mut rows = if batch >= MANY { ROWS } else { 1 };
        while rows * per_tree > SHARED_BYTES {
            rows /= 2;
        }
        let warps = (SHARED_BYTES / (rows * per_tree)).min(MAX_WARPS);
        Some((rows, warps))
    }

    /// Whether `network`'s search calls run here: a small MLP ([`MAX_FLOPS_PER_TREE`])
    /// without a value prefix on a CUDA device, the fused kernels on, and a tree's activations
    /// small enough for shared memory.
    pub fn supports(network: &MuZeroNetwork) -> bool {
        let spec = network.spec();
        super::fused::fused_kernels()
            && network.device().is_cuda()
            && !spec.uses_conv()
            && !network.has_value_prefix()
            && super::cost::recurrent_flops(spec) <= MAX_FLOPS_PER_TREE
            && Self::launch_shape(&MlpDims::of(spec), 1).is_some()
    }

    /// The search's first call: pack the weights, make the store for `capacity` nodes of
    /// `batch` trees, and run the representation and the prediction on `observations` (already
    /// scaled, `[batch * obs_len]`). Returns the logits row-major, `[B, A + V]`.
    pub fn initial(
        network: &MuZeroNetwork,
        observations: &[f32],
        batch: usize,
        capacity: usize,
    ) -> Result<(Self, Prediction), NetworkError> {
        let spec = network.spec();
        let dims = MlpDims::of(spec);
        let (rows, warps) = Self::launch_shape(&dims, batch)
            .ok_or_else(|| error(format!("one-kernel MLP: no launch fits {dims:?}")))?;
        let Device::Cuda(device) = network.device() else {
            return Err(error("one-kernel MLP: the network is not on CUDA".into()));
        };
        if observations.len() != batch * dims.obs {
            return Err(error(format!(
                "one-kernel MLP: {} observation values for {batch} of {}",
                observations.len(),
                dims.obs
            )));
        }
        let store_rows = capacity * batch;
        if batch == 0
            || store_rows > u32::MAX as usize
            || store_rows.saturating_mul(dims.latent) > i32::MAX as usize
        {
            return Err(error(format!(
                "one-kernel MLP: a store of {capacity} nodes of {batch} trees"
            )));
        }
        let width = dims.actions + dims.value + dims.reward;
        let [value_min, value_transform] = support_args(&spec.value_support);
        let [reward_min, reward_transform] = support_args(&spec.reward_support);
        let model = Self {
            dims,
            batch,
            capacity,
            rows,
            warps,
            device: device.clone(),
            weights: packed_mlp::pack(network)?,
            store: device.alloc_zeros::<f32>(store_rows * dims.latent)?,
            inputs: device.alloc_zeros::<u32>(2 * batch)?,
            outputs: device.alloc_zeros::<f32>(batch * width)?,
            compact: device.alloc_zeros::<f32>(batch * (dims.actions + 2))?,
            supports: [value_min, value_transform, reward_min, reward_transform],
        };
        let observations = device.clone_htod(observations)?;
        model.launch("initial", Call::Initial(&observations))?;
        let prediction = model.read()?;
        Ok((model, prediction))
    }

    /// One recurrent inference: the children `new_node` of `parents` by `actions` (one each
    /// per tree); their latents go to the store, rows `new_node * B + i`.
    pub fn recurrent(
        &mut self,
        parents: &[usize],
        actions: &[usize],
        new_node: usize,
    ) -> Result<Prediction, NetworkError> {
        let b = self.batch;
        if parents.len() != b || actions.len() != b || new_node >= self.capacity {
            return Err(error(format!(
                "recurrent_inference: {} parents and {} actions for a batch of {b}, node {new_node} of {}",
                parents.len(),
                actions.len(),
                self.capacity
            )));
        }
        if let Some(&p) = parents.iter().find(|&&p| p >= self.capacity) {
            return Err(error(format!("parent node {p} of {}", self.capacity)));
        }
        if let Some(&action) = actions.iter().find(|&&a| a >= self.dims.actions) {
            return Err(NetworkError::ActionOutOfRange {
                action,
                num_actions: self.dims.actions,
            });
        }
        let mut host = super::search_model::parent_rows(parents, b);
        host.extend(actions.iter().map(|&a| a as u32));
        self.device.memcpy_htod(&host, &mut self.inputs)?;
        self.launch("recurrent", Call::Recurrent(new_node as i32))?;
        self.read()
    }

    /// Launch the `call` kernel (`initial` or `recurrent`) for this search's trees per warp
    /// over the batch: weights and store, then the call's own inputs, then the outputs and
    /// the sizes (the kernels' common signature).
    fn launch(&self, call_name: &str, call: Call<'_>) -> Result<(), NetworkError> {
        let kernel = format!("cumind_mlp_{call_name}_r{}_f32", self.rows);
        let (storage, layout) = self.weights.storage_and_layout();
        let Storage::Cuda(storage) = &*storage else {
            return Err(error("one-kernel MLP: the weights are not on CUDA".into()));
        };
        let (start, end) = layout
            .contiguous_offsets()
            .ok_or_else(|| error("one-kernel MLP: the packed weights are not contiguous".into()))?;
        let weights = storage.as_cuda_slice::<f32>()?.slice(start..end);
        let func = self
            .device
            .get_or_load_custom_func(&kernel, MODULE, ptx::FUSED_KERNELS)?;
        let d = &self.dims;
        let [batch, obs, latent, actions, hidden, blocks, value, reward, width] = [
            self.batch,
            d.obs,
            d.latent,
            d.actions,
            d.hidden,
            d.blocks,
            d.value,
            d.reward,
            d.width(),
        ]
        .map(|v| v as i32);
        let mut args = func.builder();
        args.arg(&weights).arg(&self.store);
        let node;
        match call {
            Call::Initial(observations) => {
                args.arg(observations);
            }
            Call::Recurrent(new_node) => {
                node = new_node;
                args.arg(&self.inputs).arg(&node);
            }
        }
        args.arg(&self.outputs)
            .arg(&batch)
            .arg(&obs)
            .arg(&latent)
            .arg(&actions)
            .arg(&hidden)
            .arg(&blocks)
            .arg(&value)
            .arg(&reward)
            .arg(&width)
            .arg(&self.compact);
        for value in &self.supports {
            args.arg(value);
        }
        let config = LaunchConfig {
            grid_dim: (self.batch.div_ceil(self.warps * self.rows) as u32, 1, 1),
            block_dim: (32, self.warps as u32, 1),
            shared_mem_bytes: (self.warps
                * self.rows
                * BUFFERS
                * d.width()
                * std::mem::size_of::<f32>()) as u32,
        };
        // SAFETY: the arguments match the kernel's signature (fused_kernels.cu); the weights
        // hold `dims.len()` floats (checked when packed), the store `capacity * B` rows of
        // `latent`, the inputs 2 * B values whose rows are below `capacity * B` and actions
        // below A (checked above), the outputs B rows of A + V + R, `compact` B rows of A + 2;
        // each block's shared memory
        // is its warps' five buffers of `rows * width` floats.
        unsafe { args.launch(config) }.w()?;
        Ok(())
    }

    /// The policy logits, values and rewards of the latest call, in one blocking copy.
    fn read(&self) -> Result<Prediction, NetworkError> {
        crate::op_count::note_host_read();
        let all = self.device.clone_dtoh(&self.compact)?;
        let a = self.dims.actions;
        let mut prediction = Prediction {
            policy_logits: Vec::with_capacity(self.batch * a),
            values: Vec::with_capacity(self.batch),
            rewards: Vec::with_capacity(self.batch),
        };
        for row in all.chunks_exact(a + 2) {
            prediction.policy_logits.extend_from_slice(&row[..a]);
            prediction.values.push(row[a]);
            prediction.rewards.push(row[a + 1]);
        }
        Ok(prediction)
    }
}
