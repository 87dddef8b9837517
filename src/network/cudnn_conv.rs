//! cuDNN's convolutions for the bf16 conv path on CUDA, a choice beside the kernels of
//! [`super::unfold`] (`device.cudnn`). The filter gradient is where those kernels are weakest:
//! they recompute every position's patches (`im2col`, 576 values a position for 64 channels and a
//! 3 x 3 kernel), transpose the output gradient and multiply the two in cuBLAS. cuDNN's
//! backward-filter kernels read the board and the gradient directly. Which passes go through
//! cuDNN is [`CudnnConvs`]; what each choice measures is in docs/benchmarks.md.
//!
//! Needs a build with the `cudnn` feature, which links libcudnn (version 9; the CUDA hosts'
//! Python wheels carry it): such a binary needs the library to start. Without the feature,
//! [`runs`] answers false and the convolutions keep CuMind's own kernels. Data in bf16, products accumulated in f32
//! (cuDNN's "pseudo bf16"), tensor-core math allowed. The backward passes use cuDNN's
//! deterministic algorithm 1 for both gradients where it applies (cuDNN's heuristic choice
//! elsewhere), so that a seed reproduces a run on a GPU.

use std::sync::atomic::{AtomicU8, Ordering};

use serde::{Deserialize, Serialize};

/// Which passes of a bf16 convolution on CUDA run through cuDNN (`device.cudnn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CudnnConvs {
    /// None: CuMind's implicit-GEMM kernel forward, recomputed patches backward.
    #[default]
    Off,
    /// The filter gradient only.
    Filters,
    /// Both gradients (filters and input).
    Backward,
    /// Both gradients and the forward pass.
    All,
}

/// A pass of a convolution that cuDNN may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    Forward,
    InputGradient,
    FilterGradient,
}

impl CudnnConvs {
    /// Whether this choice sends `pass` to cuDNN.
    pub fn covers(self, pass: Pass) -> bool {
        match self {
            CudnnConvs::Off => false,
            CudnnConvs::Filters => pass == Pass::FilterGradient,
            CudnnConvs::Backward => pass != Pass::Forward,
            CudnnConvs::All => true,
        }
    }

    fn code(self) -> u8 {
        match self {
            CudnnConvs::Off => 0,
            CudnnConvs::Filters => 1,
            CudnnConvs::Backward => 2,
            CudnnConvs::All => 3,
        }
    }

    fn from_code(code: u8) -> Self {
        match code {
            1 => CudnnConvs::Filters,
            2 => CudnnConvs::Backward,
            3 => CudnnConvs::All,
            _ => CudnnConvs::Off,
        }
    }
}

impl std::fmt::Display for CudnnConvs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CudnnConvs::Off => "off",
            CudnnConvs::Filters => "filters",
            CudnnConvs::Backward => "backward",
            CudnnConvs::All => "all",
        })
    }
}

static CUDNN_CONVS: AtomicU8 = AtomicU8::new(0);

/// Sets which passes go through cuDNN, for the whole process (as `device.fused_kernels` is).
/// Returns why the choice cannot take effect, when it cannot (a build without the `cudnn`
/// feature); the convolutions then keep CuMind's kernels.
pub fn set_cudnn_convs(choice: CudnnConvs) -> Option<String> {
    CUDNN_CONVS.store(choice.code(), Ordering::Relaxed);
    if choice == CudnnConvs::Off {
        return None;
    }
    (!library_present()).then(|| {
        format!(
            "`device.cudnn` = {choice} has no effect: this build has no cuDNN (build with `--features cudnn`)"
        )
    })
}

/// The process-wide choice of [`set_cudnn_convs`].
pub fn cudnn_convs() -> CudnnConvs {
    CudnnConvs::from_code(CUDNN_CONVS.load(Ordering::Relaxed))
}

/// Whether `pass` of a bf16 convolution on a CUDA device runs through cuDNN: chosen, built
/// and loadable.
pub fn runs(pass: Pass) -> bool {
    cudnn_convs().covers(pass) && library_present()
}

/// Whether cuDNN is there: a `cudnn` build links libcudnn (candle links the CUDA libraries
/// at build time), so such a binary does not start without it.
fn library_present() -> bool {
    cfg!(feature = "cudnn")
}

/// A convolution's sizes: `[B, C, H, W]` in, `[O, C, k, k]` filters, `[B, O, H, W]` out
/// ("same" padding, stride 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConvSizes {
    pub b: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub o: usize,
    pub k: usize,
}

#[cfg(feature = "cudnn")]
pub use imp::{backward_data, backward_filter, forward};

#[cfg(feature = "cudnn")]
mod imp {
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::rc::Rc;
    use std::sync::Arc;

    use candle_core::backend::BackendStorage;
    use candle_core::cuda_backend::cudarc::cudnn::{
        sys, ConvBackwardData, ConvBackwardFilter, ConvDescriptor, ConvForward, Cudnn,
        FilterDescriptor, TensorDescriptor,
    };
    use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaView};
    use candle_core::cuda_backend::{CudaDevice, CudaStorage};
    use candle_core::{DType, Layout, Result};
    use half::bf16;

    use super::ConvSizes;

    /// One convolution's descriptors, its three passes' algorithms and their workspace sizes,
    /// and one workspace for them all (the passes run one after another on the device's
    /// stream), made once per size and device: cuDNN's own queries cost more host time than
    /// the small convolutions here take on the card.
    struct Plan {
        conv: ConvDescriptor<f32>,
        x: TensorDescriptor<bf16>,
        w: FilterDescriptor<bf16>,
        y: TensorDescriptor<bf16>,
        forward: sys::cudnnConvolutionFwdAlgo_t,
        data: sys::cudnnConvolutionBwdDataAlgo_t,
        filter: sys::cudnnConvolutionBwdFilterAlgo_t,
        workspace: RefCell<CudaSlice<u8>>,
    }

    type PlanKey = (usize, ConvSizes);

    /// Plans kept per thread before they are all dropped and made afresh.
    const MAX_PLANS: usize = 256;

    // cuDNN handles are neither Send nor Sync: one per thread and device, as candle keeps them.
    thread_local! {
        static HANDLES: RefCell<HashMap<usize, Arc<Cudnn>>> = RefCell::new(HashMap::new());
        static PLANS: RefCell<HashMap<PlanKey, Rc<Plan>>> = RefCell::new(HashMap::new());
    }

    fn wrap<E: std::error::Error + Send + Sync + 'static>(e: E) -> candle_core::Error {
        candle_core::Error::wrap(e)
    }

    /// A key for `dev` (its ordinal and context are what a handle belongs to).
    fn device_key(dev: &CudaDevice) -> usize {
        Arc::as_ptr(&dev.cuda_stream()) as usize
    }

    fn handle(dev: &CudaDevice) -> Result<Arc<Cudnn>> {
        let key = device_key(dev);
        HANDLES.with(|handles| {
            if let Some(h) = handles.borrow().get(&key) {
                return Ok(h.clone());
            }
            let h = Cudnn::new(dev.cuda_stream()).map_err(wrap)?;
            handles.borrow_mut().insert(key, h.clone());
            Ok(h)
        })
    }

    fn plan(dev: &CudaDevice, s: ConvSizes) -> Result<Rc<Plan>> {
        let key = (device_key(dev), s);
        if let Some(p) = PLANS.with(|plans| plans.borrow().get(&key).cloned()) {
            return Ok(p);
        }
        let dnn = handle(dev)?;
        let int = |v: usize| -> Result<i32> {
            i32::try_from(v)
                .map_err(|_| candle_core::Error::Msg(format!("cuDNN conv: {s:?} too large")))
        };
        let pad = int(s.k / 2)?;
        let mut conv = dnn
            .create_conv2d::<f32>(
                [pad, pad],
                [1, 1],
                [1, 1],
                sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
            )
            .map_err(wrap)?;
        conv.set_math_type(sys::cudnnMathType_t::CUDNN_TENSOR_OP_MATH)
            .map_err(wrap)?;
        let nchw = sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW;
        let x = dnn
            .create_4d_tensor::<bf16>(nchw, [int(s.b)?, int(s.c)?, int(s.h)?, int(s.w)?])
            .map_err(wrap)?;
        let w = dnn
            .create_4d_filter::<bf16>(nchw, [int(s.o)?, int(s.c)?, int(s.k)?, int(s.k)?])
            .map_err(wrap)?;
        let y = dnn
            .create_4d_tensor::<bf16>(nchw, [int(s.b)?, int(s.o)?, int(s.h)?, int(s.w)?])
            .map_err(wrap)?;
        let forward_op = ConvForward {
            conv: &conv,
            x: &x,
            w: &w,
            y: &y,
        };
        let forward = forward_op.pick_algorithm().map_err(wrap)?;
        let forward_bytes = forward_op.get_workspace_size(forward).map_err(wrap)?;
        // Algorithm 1 for both gradients (deterministic); cuDNN's heuristic choice where it
        // does not apply.
        let data_op = ConvBackwardData {
            conv: &conv,
            dx: &x,
            w: &w,
            dy: &y,
        };
        let one = sys::cudnnConvolutionBwdDataAlgo_t::CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
        let (data, data_bytes) = match data_op.get_workspace_size(one) {
            Ok(bytes) => (one, bytes),
            Err(_) => {
                let algo = data_op.pick_algorithm().map_err(wrap)?;
                (algo, data_op.get_workspace_size(algo).map_err(wrap)?)
            }
        };
        let filter_op = ConvBackwardFilter {
            conv: &conv,
            x: &x,
            dw: &w,
            dy: &y,
        };
        let one = sys::cudnnConvolutionBwdFilterAlgo_t::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
        let (filter, filter_bytes) = match filter_op.get_workspace_size(one) {
            Ok(bytes) => (one, bytes),
            Err(_) => {
                let algo = filter_op.pick_algorithm().map_err(wrap)?;
                (algo, filter_op.get_workspace_size(algo).map_err(wrap)?)
            }
        };
        let bytes = forward_bytes.max(data_bytes).max(filter_bytes).max(1);
        // SAFETY: cuDNN's scratch space, written before it is read.
        let workspace = RefCell::new(unsafe { dev.alloc::<u8>(bytes) }?);
        let plan = Plan {
            conv,
            x,
            w,
            y,
            forward,
            data,
            filter,
            workspace,
        };
        let plan = Rc::new(plan);
        PLANS.with(|plans| {
            let mut plans = plans.borrow_mut();
            // Searches call with many batch sizes; each plan holds a workspace.
            if plans.len() >= MAX_PLANS {
                plans.clear();
            }
            plans.insert(key, plan.clone())
        });
        Ok(plan)
    }

    /// `storage` as a contiguous bf16 view of `expected` values.
    fn bf16_view<'a>(
        storage: &'a CudaStorage,
        layout: &Layout,
        what: &str,
        expected: usize,
    ) -> Result<CudaView<'a, bf16>> {
        if storage.dtype() != DType::BF16 {
            candle_core::bail!("cuDNN conv: the {what} is {:?}, not bf16", storage.dtype());
        }
        let slice = storage.as_cuda_slice::<bf16>()?;
        match layout.contiguous_offsets() {
            Some((start, end)) if end - start == expected => Ok(slice.slice(start..end)),
            Some((start, end)) => candle_core::bail!(
                "cuDNN conv: the {what} has {} values, expected {expected}",
                end - start
            ),
            None => candle_core::bail!("cuDNN conv: the {what} is not contiguous"),
        }
    }

    /// The convolution of `x` `[B, C, H, W]` with `filters` `[O, C, k, k]` -> `[B, O, H, W]`
    /// (no bias), bf16.
    pub fn forward(
        x: (&CudaStorage, &Layout),
        filters: (&CudaStorage, &Layout),
        s: ConvSizes,
    ) -> Result<CudaStorage> {
        let dev = &x.0.device;
        let p = plan(dev, s)?;
        let xv = bf16_view(x.0, x.1, "input", s.b * s.c * s.h * s.w)?;
        let fv = bf16_view(filters.0, filters.1, "filters", s.o * s.c * s.k * s.k)?;
        let op = ConvForward {
            conv: &p.conv,
            x: &p.x,
            w: &p.w,
            y: &p.y,
        };
        let mut ws = p.workspace.borrow_mut();
        // SAFETY: every output value is written by the convolution.
        let mut out = unsafe { dev.alloc::<bf16>(s.b * s.o * s.h * s.w) }?;
        // SAFETY: the views and the output match the plan's descriptors (sizes checked above).
        unsafe {
            op.launch(
                p.forward,
                Some(&mut *ws),
                (bf16::ONE, bf16::ZERO),
                &xv,
                &fv,
                &mut out,
            )
        }
        .map_err(wrap)?;
        Ok(CudaStorage::wrap_cuda_slice(out, dev.clone()))
    }

    /// The filter gradient of that convolution: `x` `[B, C, H, W]`, the output gradient `dy`
    /// `[B, O, H, W]` -> `[O, C, k, k]`, bf16.
    pub fn backward_filter(
        x: (&CudaStorage, &Layout),
        dy: (&CudaStorage, &Layout),
        s: ConvSizes,
    ) -> Result<CudaStorage> {
        let dev = &x.0.device;
        let p = plan(dev, s)?;
        let xv = bf16_view(x.0, x.1, "input", s.b * s.c * s.h * s.w)?;
        let gv = bf16_view(dy.0, dy.1, "output gradient", s.b * s.o * s.h * s.w)?;
        let op = ConvBackwardFilter {
            conv: &p.conv,
            x: &p.x,
            dw: &p.w,
            dy: &p.y,
        };
        let mut ws = p.workspace.borrow_mut();
        // SAFETY: every filter value is written (beta = 0).
        let mut out = unsafe { dev.alloc::<bf16>(s.o * s.c * s.k * s.k) }?;
        // SAFETY: as in `forward`.
        unsafe {
            op.launch(
                p.filter,
                Some(&mut *ws),
                (bf16::ONE, bf16::ZERO),
                &xv,
                &mut out,
                &gv,
            )
        }
        .map_err(wrap)?;
        Ok(CudaStorage::wrap_cuda_slice(out, dev.clone()))
    }

    /// The input gradient: `dy` `[B, O, H, W]` and `filters` `[O, C, k, k]` -> `[B, C, H, W]`,
    /// bf16.
    pub fn backward_data(
        dy: (&CudaStorage, &Layout),
        filters: (&CudaStorage, &Layout),
        s: ConvSizes,
    ) -> Result<CudaStorage> {
        let dev = &dy.0.device;
        let p = plan(dev, s)?;
        let gv = bf16_view(dy.0, dy.1, "output gradient", s.b * s.o * s.h * s.w)?;
        let fv = bf16_view(filters.0, filters.1, "filters", s.o * s.c * s.k * s.k)?;
        let op = ConvBackwardData {
            conv: &p.conv,
            dx: &p.x,
            w: &p.w,
            dy: &p.y,
        };
        let mut ws = p.workspace.borrow_mut();
        // SAFETY: every input-gradient value is written (beta = 0).
        let mut out = unsafe { dev.alloc::<bf16>(s.b * s.c * s.h * s.w) }?;
        // SAFETY: as in `forward`.
        unsafe {
            op.launch(
                p.data,
                Some(&mut *ws),
                (bf16::ONE, bf16::ZERO),
                &mut out,
                &fv,
                &gv,
            )
        }
        .map_err(wrap)?;
        Ok(CudaStorage::wrap_cuda_slice(out, dev.clone()))
    }
}
