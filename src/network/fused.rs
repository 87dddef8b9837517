//! Fused kernels, each with a hand-written backward pass, for what dominates a training step's
//! op count: layer normalisation, a linear layer's bias add, ReLU, and the loss's soft-target
//! cross-entropy.
//!
//! Written out with candle's elementary ops, a layer norm is about fifteen tensors forward and
//! more backward, a log-softmax cross-entropy about ten, and every broadcast add's backward sums
//! the batch dimension with candle's strided reduction (the hottest function of the training
//! profile in docs/benchmarks.md). Each kernel here is one op forward and one backward, and
//! allocates only its output. They run for f32 tensors on the CPU and, with the `cuda`
//! feature, on CUDA (`fused_cuda`: the same computations as CUDA kernels, where every op saved
//! is a kernel launch saved). The bias add and ReLU also run in bf16, and on CUDA so does the
//! layer norm (bf16 input and output, f32 scale, shift and statistics); any other case takes
//! the written-out path (`fusable`).

use std::sync::atomic::{AtomicBool, Ordering};

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp1, CustomOp2, CustomOp3, DType, Layout, Shape, Tensor, D};

/// Whether the fused kernels of this file are used (the default).
static FUSED_KERNELS: AtomicBool = AtomicBool::new(true);
/// Whether the CPU's host paths are used (the default): the in-place AdamW
/// (`train::adamw_cpu`), host inference (`network::host_mlp`) and the host training step
/// (`train::host_loss`).
static HOST_PATHS: AtomicBool = AtomicBool::new(true);

/// Turn every fast path (the fused kernels and the CPU's host paths) off or on, for the whole
/// process. Off, the CPU runs candle's elementary ops only: what CUDA ran before it had
/// kernels of its own, and what the fast paths are tested against.
pub fn set_cpu_fast_paths(enabled: bool) {
    FUSED_KERNELS.store(enabled, Ordering::Relaxed);
    HOST_PATHS.store(enabled, Ordering::Relaxed);
}

/// Whether every fast path is on (see [`set_cpu_fast_paths`]).
pub fn cpu_fast_paths() -> bool {
    fused_kernels() && host_paths()
}

/// Turn the fused kernels (CPU and CUDA) off or on, for the whole process.
pub fn set_fused_kernels(enabled: bool) {
    FUSED_KERNELS.store(enabled, Ordering::Relaxed);
}

/// See [`set_fused_kernels`].
pub fn fused_kernels() -> bool {
    FUSED_KERNELS.load(Ordering::Relaxed)
}

/// Turn the CPU's host paths off or on, for the whole process. With the fused kernels on and
/// the host paths off, the CPU issues the same ops as CUDA does: `examples/op_counts.rs`
/// counts the GPU's ops that way.
pub fn set_host_paths(enabled: bool) {
    HOST_PATHS.store(enabled, Ordering::Relaxed);
}

/// See [`set_host_paths`].
pub fn host_paths() -> bool {
    HOST_PATHS.load(Ordering::Relaxed)
}

/// Whether the fused kernels have an implementation on `device`: the CPU, and CUDA in a build
/// with the `cuda` feature.
fn has_kernels(device: &candle_core::Device) -> bool {
    device.is_cpu() || (cfg!(feature = "cuda") && device.is_cuda())
}

/// Whether every tensor is f32 on a device with the fused kernels (and they are on).
pub fn fusable(tensors: &[&Tensor]) -> bool {
    fused_kernels()
        && tensors
            .iter()
            .all(|t| has_kernels(t.device()) && t.dtype() == DType::F32)
}

/// Whether every tensor is f32, or every one bf16, on a device with the fused kernels (and
/// they are on): the bias add and ReLU, which also run in bf16 (CUDA's default compute dtype).
pub fn fusable_elementwise(tensors: &[&Tensor]) -> bool {
    let Some(first) = tensors.first() else {
        return false;
    };
    fused_kernels()
        && matches!(first.dtype(), DType::F32 | DType::BF16)
        && tensors
            .iter()
            .all(|t| has_kernels(t.device()) && t.dtype() == first.dtype())
}

/// The elements of a contiguous f32 or bf16 CPU tensor as f32 (bf16 widened, a copy).
pub(crate) fn widened<'a>(
    storage: &'a CpuStorage,
    layout: &Layout,
) -> candle_core::Result<std::borrow::Cow<'a, [f32]>> {
    let range = contiguous_range(layout)?;
    match storage {
        CpuStorage::F32(v) => Ok(std::borrow::Cow::Borrowed(&v[range])),
        CpuStorage::BF16(v) => Ok(std::borrow::Cow::Owned(
            v[range].iter().map(|x| x.to_f32()).collect(),
        )),
        other => candle_core::bail!("fused kernel: no kernel for {:?}", other.dtype()),
    }
}

/// `values` as a CPU storage of `like`'s dtype (f32, or bf16 rounded once).
pub(crate) fn narrowed(values: Vec<f32>, like: &CpuStorage) -> CpuStorage {
    match like {
        CpuStorage::BF16(_) => {
            CpuStorage::BF16(values.into_iter().map(half::bf16::from_f32).collect())
        }
        _ => CpuStorage::F32(values),
    }
}

/// The f32 elements of a contiguous CPU tensor.
fn elements<'a>(storage: &'a CpuStorage, layout: &Layout) -> candle_core::Result<&'a [f32]> {
    Ok(&storage.as_slice::<f32>()?[contiguous_range(layout)?])
}

/// The storage range a contiguous layout addresses.
fn contiguous_range(layout: &Layout) -> candle_core::Result<std::ops::Range<usize>> {
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(start..end),
        None => candle_core::bail!("fused kernel: input is not contiguous"),
    }
}

/// The last dimension of a layout (the feature dimension every kernel here works along).
fn last_dim(layout: &Layout) -> candle_core::Result<usize> {
    match layout.dims().last() {
        Some(&d) if d > 0 => Ok(d),
        _ => candle_core::bail!("fused kernel: needs a non-empty last dimension"),
    }
}

// ---------------------------------------------------------------------------------------------
// Layer norm

/// Layer normalisation over the last dimension with a learned scale and shift:
/// `(x - mean) / sqrt(var + eps) * gamma + beta`. Fused for f32 on the CPU; otherwise
/// written out with candle's ops (statistics in f32, the result in `x`'s dtype).
///
/// # Shapes
/// `x`: `[..., D]`, `gamma` and `beta`: `[D]` -> `[..., D]`.
pub fn layer_norm(
    x: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    eps: f64,
) -> candle_core::Result<Tensor> {
    if fusable(&[x, gamma, beta]) {
        return layer_norm_op(x, gamma, beta, eps);
    }
    // bf16 or f16 compute over f32 scale and shift (CUDA's default): the statistics are in f32
    // either way, so the f32 kernel between two casts computes what the written-out ops do,
    // in three ops instead of about fifteen (and their backward).
    // On CUDA a bf16 input has a kernel of its own, which reads and writes bf16 (half the
    // bytes of the f32 kernel and no casts).
    if x.dtype() == DType::BF16 && x.device().is_cuda() && fusable(&[gamma, beta]) {
        return layer_norm_op(x, gamma, beta, eps);
    }
    if matches!(x.dtype(), DType::BF16 | DType::F16) && fusable(&[gamma, beta]) {
        let dtype = x.dtype();
        return layer_norm(&x.to_dtype(DType::F32)?, gamma, beta, eps)?.to_dtype(dtype);
    }
    // Statistics in f32 (f64 stays f64); the result in x's dtype.
    let dtype = x.dtype();
    let stats = if dtype == DType::F64 {
        DType::F64
    } else {
        DType::F32
    };
    let x = x.to_dtype(stats)?;
    let mean = x.mean_keepdim(D::Minus1)?;
    let centred = x.broadcast_sub(&mean)?;
    let var = centred.sqr()?.mean_keepdim(D::Minus1)?;
    let out = centred
        .broadcast_div(&(var + eps)?.sqrt()?)?
        .broadcast_mul(&gamma.to_dtype(stats)?)?
        .broadcast_add(&beta.to_dtype(stats)?)?;
    if out.dtype() == dtype {
        Ok(out)
    } else {
        out.to_dtype(dtype)
    }
}

/// The fused layer norm itself, whatever the process-wide switch says (f32 input, or on CUDA
/// bf16; f32 scale and shift).
pub(crate) fn layer_norm_op(
    x: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    eps: f64,
) -> candle_core::Result<Tensor> {
    x.contiguous()?
        .apply_op3(gamma, beta, LayerNorm { eps: eps as f32 })
}

/// `relu?(residual? + layer_norm(x))`: what a residual block does after its norms, with a
/// scale and a shift of one value per `group` consecutive features of a row (a plane norm's
/// per-channel scale over a board of `group` cells; 1: one per feature). In inference on CUDA
/// (no tensor tracks a gradient) one kernel does it all; otherwise the scale and shift are
/// spread over the row and the norm, the add and the ReLU run one after the other.
pub fn layer_norm_then(
    x: &Tensor,
    residual: Option<&Tensor>,
    gamma: &Tensor,
    beta: &Tensor,
    group: usize,
    eps: f64,
    relu_after: bool,
) -> candle_core::Result<Tensor> {
    let inference = !x.track_op()
        && !gamma.track_op()
        && !beta.track_op()
        && residual.is_none_or(|r| !r.track_op());
    if inference
        && x.device().is_cuda()
        && fusable_elementwise(&[x])
        && fusable(&[gamma, beta])
        && residual.is_none_or(|r| r.dtype() == x.dtype() && r.dims() == x.dims())
    {
        return layer_norm_then_op(x, residual, gamma, beta, group, eps, relu_after);
    }
    let spread = |t: &Tensor| -> candle_core::Result<Tensor> {
        if group == 1 {
            return Ok(t.clone());
        }
        let n = t.elem_count();
        t.reshape((n, 1))?
            .broadcast_as((n, group))?
            .contiguous()?
            .flatten_all()
    };
    let mut y = layer_norm(x, &spread(gamma)?, &spread(beta)?, eps)?;
    if let Some(r) = residual {
        y = (r + y)?;
    }
    if relu_after {
        y = relu(&y)?;
    }
    Ok(y)
}

/// The one-kernel form of [`layer_norm_then`], whatever the device (on the CPU a plain loop,
/// the reference of the CUDA kernel's test); no backward pass.
pub fn layer_norm_then_op(
    x: &Tensor,
    residual: Option<&Tensor>,
    gamma: &Tensor,
    beta: &Tensor,
    group: usize,
    eps: f64,
    relu_after: bool,
) -> candle_core::Result<Tensor> {
    let op = LayerNormThen {
        residual: residual.map(Tensor::contiguous).transpose()?,
        group,
        eps: eps as f32,
        relu: relu_after,
    };
    x.contiguous()?.apply_op3_no_bwd(gamma, beta, &op)
}

struct LayerNormThen {
    residual: Option<Tensor>,
    group: usize,
    eps: f32,
    relu: bool,
}

impl CustomOp3 for LayerNormThen {
    fn name(&self) -> &'static str {
        "cumind-layer-norm-then"
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let residual = self.residual.as_ref().map(Tensor::storage_and_layout);
        let residual = match &residual {
            Some((storage, layout)) => match &**storage {
                candle_core::Storage::Cuda(s) => Some((s, *layout)),
                _ => candle_core::bail!("layer norm: the residual is not on the GPU"),
            },
            None => None,
        };
        super::fused_cuda::layer_norm_act(
            (s1, l1),
            residual,
            (s2, l2),
            (s3, l3),
            self.group,
            self.eps,
            self.relu,
        )
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (x, gamma, beta) = (widened(s1, l1)?, elements(s2, l2)?, elements(s3, l3)?);
        let d = last_dim(l1)?;
        let group = self.group;
        if group == 0 || gamma.len() * group != d || beta.len() != gamma.len() {
            candle_core::bail!(
                "layer norm: scale/shift of {} and {} for {d} features in groups of {group}",
                gamma.len(),
                beta.len()
            );
        }
        let held = self.residual.as_ref().map(Tensor::storage_and_layout);
        let residual = match &held {
            Some((storage, layout)) => {
                let candle_core::Storage::Cpu(storage) = &**storage else {
                    candle_core::bail!("layer norm: the residual is not on the CPU");
                };
                let r = widened(storage, layout)?;
                if r.len() != x.len() {
                    candle_core::bail!(
                        "layer norm: a residual of {} values for {}",
                        r.len(),
                        x.len()
                    );
                }
                Some(r)
            }
            None => None,
        };
        let out = norm_then_rows(
            &x,
            residual.as_deref(),
            gamma,
            beta,
            group,
            self.eps,
            self.relu,
        );
        Ok((narrowed(out, s1), l1.shape().clone()))
    }
}

/// `relu?(residual? + norm(x))` with its own backward pass: the training form of
/// [`layer_norm_then`] for a plane norm. `x` `[B, ...]` is normalised over each sample's values,
/// `gamma` and `beta` (`[C]`, f32) scale and shift each of the C equal runs of a sample's values
/// (a channel's board); `residual`, when given, has `x`'s shape and dtype. The result has `x`'s
/// shape and dtype.
///
/// Candle's backward pass adds each input's gradient into a fresh zero tensor, one full-size add
/// per edge of the graph. A residual block's norm written out (the reshapes around the norm, the
/// norm, the add, the ReLU) is seven such edges of the batch's whole activation; this op is two
/// (x and the residual). Its backward pass recomputes the sum before the ReLU for the ReLU's
/// mask (one more forward kernel), then runs the layer norm's backward kernel.
pub fn norm_then(
    x: &Tensor,
    residual: Option<&Tensor>,
    gamma: &Tensor,
    beta: &Tensor,
    eps: f64,
    relu: bool,
) -> candle_core::Result<Tensor> {
    let channels = gamma.elem_count();
    let (b, per_sample) = (x.dim(0)?, x.elem_count() / x.dim(0)?.max(1));
    if channels == 0 || beta.elem_count() != channels || per_sample % channels != 0 {
        candle_core::bail!(
            "norm: a scale of {channels} and a shift of {} for samples of {per_sample} values",
            beta.elem_count()
        );
    }
    if let Some(r) = residual {
        if r.dims() != x.dims() || r.dtype() != x.dtype() {
            candle_core::bail!(
                "norm: a residual of {:?} {:?} for an input of {:?} {:?}",
                r.dims(),
                r.dtype(),
                x.dims(),
                x.dtype()
            );
        }
    }
    let op = NormThenOp {
        rows: b,
        group: per_sample / channels,
        eps: eps as f32,
        relu,
    };
    let scale_shift = Tensor::stack(&[gamma.flatten_all()?, beta.flatten_all()?], 0)?;
    let x = x.contiguous()?;
    match residual {
        Some(r) => x.apply_op3(&r.contiguous()?, &scale_shift, op),
        None => x.apply_op2(&scale_shift, op),
    }
}

/// `relu?(residual? + layer_norm(x))` on the CPU over rows of `gamma.len() * group` values,
/// one scale and shift per `group` consecutive values: the loop behind [`layer_norm_then_op`]
/// and [`norm_then`].
fn norm_then_rows(
    x: &[f32],
    residual: Option<&[f32]>,
    gamma: &[f32],
    beta: &[f32],
    group: usize,
    eps: f32,
    relu: bool,
) -> Vec<f32> {
    let spread = |t: &[f32]| -> Vec<f32> {
        t.iter()
            .flat_map(|&v| std::iter::repeat_n(v, group))
            .collect()
    };
    let mut out = vec![0f32; x.len()];
    layer_norm_rows(x, &spread(gamma), &spread(beta), eps, &mut out);
    if let Some(r) = residual {
        for (o, r) in out.iter_mut().zip(r) {
            *o += r;
        }
    }
    if relu {
        for o in &mut out {
            *o = o.max(0.0);
        }
    }
    out
}

/// [`norm_then`]'s op: inputs x, then the residual if any, then `[2, C]` scale and shift.
#[derive(Clone, Copy)]
struct NormThenOp {
    rows: usize,
    group: usize,
    eps: f32,
    relu: bool,
}

impl NormThenOp {
    fn width(&self, channels: usize) -> usize {
        channels * self.group
    }

    /// The forward pass on the CPU (the reference of the CUDA path).
    fn cpu(
        &self,
        x: (&CpuStorage, &Layout),
        residual: Option<(&CpuStorage, &Layout)>,
        scale_shift: (&CpuStorage, &Layout),
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let values = widened(x.0, x.1)?;
        let ss = elements(scale_shift.0, scale_shift.1)?;
        let channels = ss.len() / 2;
        let d = self.width(channels);
        if d == 0 || values.len() != self.rows * d {
            candle_core::bail!(
                "norm: {} values for {} rows of {d}",
                values.len(),
                self.rows
            );
        }
        let (gamma, beta) = ss.split_at(channels);
        let residual = residual
            .map(|(storage, layout)| widened(storage, layout))
            .transpose()?;
        let out = norm_then_rows(
            &values,
            residual.as_deref(),
            gamma,
            beta,
            self.group,
            self.eps,
            self.relu,
        );
        Ok((narrowed(out, x.0), x.1.shape().clone()))
    }

    /// The forward pass on CUDA: the plane norm's fused kernel on the rows of `x`.
    #[cfg(feature = "cuda")]
    fn cuda(
        &self,
        x: (&candle_core::CudaStorage, &Layout),
        residual: Option<(&candle_core::CudaStorage, &Layout)>,
        scale_shift: (&candle_core::CudaStorage, &Layout),
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let channels = scale_shift.1.shape().elem_count() / 2;
        let d = self.width(channels);
        if d == 0 || x.1.shape().elem_count() != self.rows * d || !x.1.is_contiguous() {
            candle_core::bail!(
                "norm: an input of {:?} for {} rows of {d}",
                x.1.dims(),
                self.rows
            );
        }
        let rows = |l: &Layout| Layout::contiguous_with_offset((self.rows, d), l.start_offset());
        let x_rows = rows(x.1);
        let residual_rows = residual.map(|(s, l)| (s, rows(l)));
        let start = scale_shift.1.start_offset();
        let gamma = Layout::contiguous_with_offset(channels, start);
        let beta = Layout::contiguous_with_offset(channels, start + channels);
        let (out, _) = super::fused_cuda::layer_norm_act(
            (x.0, &x_rows),
            residual_rows.as_ref().map(|(s, l)| (*s, l)),
            (scale_shift.0, &gamma),
            (scale_shift.0, &beta),
            self.group,
            self.eps,
            self.relu,
        )?;
        Ok((out, x.1.shape().clone()))
    }

    /// Gradients of x, the residual (when there is one) and the `[2, C]` scale and shift.
    fn backward(
        &self,
        x: &Tensor,
        residual: Option<&Tensor>,
        scale_shift: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Tensor, Option<Tensor>, Tensor)> {
        let channels = scale_shift.dim(1)?;
        let d = self.width(channels);
        let grad = grad.contiguous()?.reshape((self.rows, d))?;
        let x_rows = x.reshape((self.rows, d))?;
        let gamma = scale_shift.get(0)?;
        // The ReLU's mask from the sum before it (the same test, `>= 0`, as `relu`'s).
        let grad = if self.relu {
            let plain = NormThenOp {
                relu: false,
                ..*self
            };
            let before = match residual {
                Some(r) => x.apply_op3_no_bwd(r, scale_shift, &plain)?,
                None => x.apply_op2_no_bwd(scale_shift, &plain)?,
            };
            grad.apply_op2_no_bwd(&before.reshape((self.rows, d))?, &ReluBackward)?
        } else {
            grad
        };
        let spread_gamma = gamma
            .reshape((channels, 1))?
            .broadcast_as((channels, self.group))?
            .contiguous()?
            .flatten_all()?;
        let packed =
            grad.apply_op3_no_bwd(&x_rows, &spread_gamma, &LayerNormBackward { eps: self.eps })?;
        let n = x.elem_count();
        let dx = packed
            .narrow(0, 0, n)?
            .reshape(x.shape())?
            .to_dtype(x.dtype())?;
        let per_channel = |at: usize| -> candle_core::Result<Tensor> {
            packed
                .narrow(0, at, d)?
                .reshape((channels, self.group))?
                .sum(1)
        };
        let dscale_shift = Tensor::stack(&[per_channel(n)?, per_channel(n + d)?], 0)?;
        let dresidual = residual.map(|_| grad.reshape(x.shape())).transpose()?;
        Ok((dx, dresidual, dscale_shift))
    }
}

impl CustomOp2 for NormThenOp {
    fn name(&self) -> &'static str {
        "cumind-norm-then"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        self.cpu((s1, l1), None, (s2, l2))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        self.cuda((s1, l1), None, (s2, l2))
    }

    fn bwd(
        &self,
        x: &Tensor,
        scale_shift: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let (dx, _, dss) = self.backward(x, None, scale_shift, grad)?;
        Ok((Some(dx), Some(dss)))
    }
}

impl CustomOp3 for NormThenOp {
    fn name(&self) -> &'static str {
        "cumind-norm-then-residual"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        self.cpu((s1, l1), Some((s2, l2)), (s3, l3))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        self.cuda((s1, l1), Some((s2, l2)), (s3, l3))
    }

    fn bwd(
        &self,
        x: &Tensor,
        residual: &Tensor,
        scale_shift: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (dx, dr, dss) = self.backward(x, Some(residual), scale_shift, grad)?;
        Ok((Some(dx), dr, Some(dss)))
    }
}

/// `sum(a_i * b_i)`, accumulated in eight lanes so that the compiler vectorises it (a plain
/// f32 sum is a serial chain it may not reorder).
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a8
        .remainder()
        .iter()
        .zip(b8.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in a8.zip(b8) {
        for k in 0..8 {
            lanes[k] += x[k] * y[k];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// `sum(a_i)`, in eight lanes (see [`dot`]).
pub(crate) fn sum(a: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let a8 = a.chunks_exact(8);
    let tail: f32 = a8.remainder().iter().sum();
    for x in a8 {
        for k in 0..8 {
            lanes[k] += x[k];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// The smallest and largest of `row`'s values (NaNs skipped), in eight lanes so that the
/// compiler vectorises it.
pub(crate) fn row_min_max(row: &[f32]) -> (f32, f32) {
    let (mut lo, mut hi) = ([f32::INFINITY; 8], [f32::NEG_INFINITY; 8]);
    let r8 = row.chunks_exact(8);
    let tail = r8.remainder();
    for x in r8 {
        for k in 0..8 {
            lo[k] = if x[k] < lo[k] { x[k] } else { lo[k] };
            hi[k] = if x[k] > hi[k] { x[k] } else { hi[k] };
        }
    }
    let fold = |(a, b): (f32, f32), &v: &f32| (a.min(v), b.max(v));
    let lanes = lo
        .iter()
        .zip(&hi)
        .fold((f32::INFINITY, f32::NEG_INFINITY), |acc, (l, h)| {
            (acc.0.min(*l), acc.1.max(*h))
        });
    tail.iter().fold(lanes, fold)
}

/// Writes `(row - mean) / sqrt(var + eps)` into `xhat`; returns 1 / sqrt(var + eps).
pub(crate) fn standardize_row(row: &[f32], eps: f32, xhat: &mut [f32]) -> f32 {
    let n = row.len() as f32;
    let mean = sum(row) / n;
    for (h, &v) in xhat.iter_mut().zip(row) {
        *h = v - mean;
    }
    let rstd = 1.0 / (dot(xhat, xhat) / n + eps).sqrt();
    for h in xhat.iter_mut() {
        *h *= rstd;
    }
    rstd
}

/// Layer norm of each row of `x` (rows of `gamma.len()` values) into `out`.
pub(crate) fn layer_norm_rows(x: &[f32], gamma: &[f32], beta: &[f32], eps: f32, out: &mut [f32]) {
    let d = gamma.len();
    for (row, o) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        standardize_row(row, eps, o);
        for i in 0..d {
            o[i] = o[i] * gamma[i] + beta[i];
        }
    }
}

/// The backward pass of [`layer_norm_rows`]: writes `dx` from the output gradient `dy` and
/// the input `x`, and adds the scale's and shift's gradients to `dgamma` and `dbeta`.
pub(crate) fn layer_norm_backward_rows(
    dy: &[f32],
    x: &[f32],
    gamma: &[f32],
    eps: f32,
    dx: &mut [f32],
    dgamma: &mut [f32],
    dbeta: &mut [f32],
) {
    let d = gamma.len();
    let (mut xhat, mut g) = (vec![0f32; d], vec![0f32; d]);
    for ((row, dy_row), dx_row) in x
        .chunks_exact(d)
        .zip(dy.chunks_exact(d))
        .zip(dx.chunks_exact_mut(d))
    {
        let rstd = standardize_row(row, eps, &mut xhat);
        for i in 0..d {
            g[i] = dy_row[i] * gamma[i];
            dgamma[i] += dy_row[i] * xhat[i];
            dbeta[i] += dy_row[i];
        }
        let mean_g = sum(&g) / d as f32;
        let mean_gx = dot(&g, &xhat) / d as f32;
        for i in 0..d {
            dx_row[i] = rstd * (g[i] - mean_g - xhat[i] * mean_gx);
        }
    }
}

struct LayerNorm {
    eps: f32,
}

impl CustomOp3 for LayerNorm {
    fn name(&self) -> &'static str {
        "cumind-layer-norm"
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        super::fused_cuda::layer_norm((s1, l1), (s2, l2), (s3, l3), self.eps)
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (x, gamma, beta) = (widened(s1, l1)?, elements(s2, l2)?, elements(s3, l3)?);
        let d = last_dim(l1)?;
        if gamma.len() != d || beta.len() != d {
            candle_core::bail!(
                "layer norm: scale/shift of {} for {d} features",
                gamma.len()
            );
        }
        let mut out = vec![0f32; x.len()];
        layer_norm_rows(&x, gamma, beta, self.eps, &mut out);
        Ok((narrowed(out, s1), l1.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        _beta: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        // One kernel computes all three gradients, packed as [dx (n), dgamma (d), dbeta (d)].
        let packed =
            grad.contiguous()?
                .apply_op3_no_bwd(x, gamma, &LayerNormBackward { eps: self.eps })?;
        let (n, d) = (x.elem_count(), gamma.elem_count());
        // The packed gradients are f32; dx in x's dtype (bf16 on CUDA's bf16 path).
        let dx = packed
            .narrow(0, 0, n)?
            .reshape(x.shape())?
            .to_dtype(x.dtype())?;
        let dgamma = packed.narrow(0, n, d)?;
        let dbeta = packed.narrow(0, n + d, d)?;
        Ok((Some(dx), Some(dgamma), Some(dbeta)))
    }
}

struct LayerNormBackward {
    eps: f32,
}

impl CustomOp3 for LayerNormBackward {
    fn name(&self) -> &'static str {
        "cumind-layer-norm-backward"
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        super::fused_cuda::layer_norm_backward((s1, l1), (s2, l2), (s3, l3), self.eps)
    }

    /// Inputs: the output gradient, x, gamma.
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (dy, x, gamma) = (widened(s1, l1)?, widened(s2, l2)?, elements(s3, l3)?);
        let d = gamma.len();
        let n = x.len();
        let mut out = vec![0f32; n + 2 * d];
        let (dx, params) = out.split_at_mut(n);
        let (dgamma, dbeta) = params.split_at_mut(d);
        layer_norm_backward_rows(&dy, &x, gamma, self.eps, dx, dgamma, dbeta);
        let len = out.len();
        Ok((CpuStorage::F32(out), Shape::from(len)))
    }
}

// ---------------------------------------------------------------------------------------------
// Bias add

/// `y + b` with `b` broadcast over the rows of `y`. Fused for f32 and bf16 (computed in f32,
/// rounded once), where its backward sums the output gradient's rows in one contiguous pass.
///
/// # Shapes
/// `y`: `[..., N]`, `b`: `[N]` -> `[..., N]`.
pub fn add_bias(y: &Tensor, b: &Tensor) -> candle_core::Result<Tensor> {
    if fusable_elementwise(&[y, b]) {
        return add_bias_op(y, b);
    }
    y.broadcast_add(b)
}

/// The fused bias add itself, whatever the process-wide switch says (what [`add_bias`] runs
/// when it may, and what the tests check).
pub(crate) fn add_bias_op(y: &Tensor, b: &Tensor) -> candle_core::Result<Tensor> {
    y.contiguous()?.apply_op2(b, BiasAdd)
}

struct BiasAdd;

impl CustomOp2 for BiasAdd {
    fn name(&self) -> &'static str {
        "cumind-bias-add"
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        super::fused_cuda::bias_add((s1, l1), (s2, l2))
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        if s1.dtype() != s2.dtype() {
            candle_core::bail!("bias add: {:?} input, {:?} bias", s1.dtype(), s2.dtype());
        }
        let (y, b) = (widened(s1, l1)?, widened(s2, l2)?);
        let d = last_dim(l1)?;
        if b.len() != d {
            candle_core::bail!("bias add: bias of {} for {d} features", b.len());
        }
        let mut out = Vec::with_capacity(y.len());
        for row in y.chunks_exact(d) {
            out.extend(row.iter().zip(b.iter()).map(|(v, bias)| v + bias));
        }
        Ok((narrowed(out, s1), l1.shape().clone()))
    }

    fn bwd(
        &self,
        _y: &Tensor,
        _b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let grad = grad.contiguous()?;
        let db = grad.apply_op1_no_bwd(&SumRows)?;
        Ok((Some(grad), Some(db)))
    }
}

/// `[..., N]` -> `[N]`: the sum of all rows (accumulated in f32).
struct SumRows;

impl CustomOp1 for SumRows {
    fn name(&self) -> &'static str {
        "cumind-sum-rows"
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        l: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        super::fused_cuda::sum_rows((s, l))
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let g = widened(s, l)?;
        let d = last_dim(l)?;
        let mut out = vec![0f32; d];
        for row in g.chunks_exact(d) {
            for (o, v) in out.iter_mut().zip(row) {
                *o += v;
            }
        }
        Ok((narrowed(out, s), Shape::from(d)))
    }
}

// ---------------------------------------------------------------------------------------------
// Min-max scaling (inference)

/// Each row of `x` (`[..., D]`) scaled to [0, 1]: `(x - min) / (max - min + 1e-5)`, in f32
/// (bf16 rounded once). One op with no backward pass, for inference on CUDA, where the
/// written-out form (`layers::min_max_scale`) is six passes over the batch.
pub fn min_max_scale_rows(x: &Tensor) -> candle_core::Result<Tensor> {
    x.contiguous()?.apply_op1_no_bwd(&MinMaxScale)
}

/// Rows of `src` (`[N, ...]`) picked by `index` (u32 `[R]`) -> `[R, ...]`: on CUDA one copy
/// kernel in 16-byte words (candle's index_select works element by element: 85 us where this
/// takes a copy's time for the 4,096 latents of a Connect Four search); elsewhere, or for rows
/// the kernel cannot copy in whole words, `index_select`. No backward pass.
pub fn gather_rows(src: &Tensor, index: &Tensor) -> candle_core::Result<Tensor> {
    let bytes = src.dtype().size_in_bytes();
    let row_len = src.dims().iter().skip(1).product::<usize>();
    let words = src.rank() >= 1
        && matches!(bytes, 2 | 4)
        && (row_len * bytes).is_multiple_of(4)
        && (src.layout().start_offset() * bytes).is_multiple_of(4);
    if src.device().is_cuda() && index.dtype() == DType::U32 && src.is_contiguous() && words {
        return src.apply_op2_no_bwd(&index.contiguous()?, &GatherRows);
    }
    src.index_select(index, 0)
}

struct GatherRows;

impl CustomOp2 for GatherRows {
    fn name(&self) -> &'static str {
        "cumind-gather-rows"
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        super::fused_cuda::gather_rows((s1, l1), (s2, l2))
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        candle_core::bail!("gather rows: the CPU takes index_select (fused::gather_rows)")
    }
}

/// [`min_max_scale_rows`] with a backward pass, on the CPU (training): the gradient reaches
/// every value through the shift and the scale, and every value equal to its row's minimum or
/// maximum also gets that extreme's whole gradient, as candle's `min_keepdim` and
/// `max_keepdim` hand it out (the written-out form, `layers::min_max_scale`).
pub fn min_max_scale_rows_differentiable(x: &Tensor) -> candle_core::Result<Tensor> {
    x.contiguous()?.apply_op1(MinMaxScale)
}

/// A row's minimum and maximum.
fn row_extremes(row: &[f32]) -> (f32, f32) {
    let lo = row.iter().copied().fold(f32::INFINITY, f32::min);
    let hi = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    (lo, hi)
}

struct MinMaxScale;

impl CustomOp1 for MinMaxScale {
    fn name(&self) -> &'static str {
        "cumind-min-max-scale"
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        l: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        super::fused_cuda::min_max_scale((s, l))
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = widened(s, l)?;
        let d = last_dim(l)?;
        let mut out = Vec::with_capacity(x.len());
        for row in x.chunks_exact(d) {
            let (lo, hi) = row_extremes(row);
            let scale = (hi - lo) + 1e-5;
            out.extend(row.iter().map(|v| (v - lo) / scale));
        }
        Ok((narrowed(out, s), l.shape().clone()))
    }

    fn bwd(&self, x: &Tensor, _res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(x.apply_op2_no_bwd(
            &grad.contiguous()?,
            &MinMaxScaleBackward,
        )?))
    }
}

/// The gradient of [`MinMaxScale`] from its input and its output's gradient (CPU).
struct MinMaxScaleBackward;

impl CustomOp2 for MinMaxScaleBackward {
    fn name(&self) -> &'static str {
        "cumind-min-max-scale-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (x, g) = (widened(s1, l1)?, widened(s2, l2)?);
        let d = last_dim(l1)?;
        if g.len() != x.len() {
            candle_core::bail!(
                "min-max scale backward: {} gradients for {} values",
                g.len(),
                x.len()
            );
        }
        let mut dx = vec![0f32; x.len()];
        for ((row, g), dx) in x
            .chunks_exact(d)
            .zip(g.chunks_exact(d))
            .zip(dx.chunks_exact_mut(d))
        {
            let (lo, hi) = row_extremes(row);
            let scale = (hi - lo) + 1e-5;
            // y = (x - lo) / scale: dy/dlo = (y - 1) / scale, dy/dhi = -y / scale.
            let (mut dlo, mut dhi) = (0f32, 0f32);
            for (v, gv) in row.iter().zip(g) {
                let y = (v - lo) / scale;
                dlo += gv * (y - 1.0);
                dhi -= gv * y;
            }
            let (dlo, dhi) = (dlo / scale, dhi / scale);
            for ((d, v), gv) in dx.iter_mut().zip(row).zip(g) {
                *d = gv / scale
                    + if *v == lo { dlo } else { 0.0 }
                    + if *v == hi { dhi } else { 0.0 };
            }
        }
        Ok((narrowed(dx, s1), l1.shape().clone()))
    }
}

/// The identity forward; backward, the gradient times `scale` (MuZero's halved gradient
/// entering the dynamics). One copy where the written-out form (`layers::scale_gradient`) is
/// three ops forward and two backward.
pub fn scale_gradient(x: &Tensor, scale: f64) -> candle_core::Result<Tensor> {
    x.contiguous()?.apply_op1(ScaleGradient(scale))
}

struct ScaleGradient(f64);

impl CustomOp1 for ScaleGradient {
    fn name(&self) -> &'static str {
        "cumind-scale-gradient"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = widened(s, l)?;
        Ok((narrowed(x.into_owned(), s), l.shape().clone()))
    }

    fn bwd(
        &self,
        _x: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(grad.affine(self.0, 0.0)?))
    }
}

// ---------------------------------------------------------------------------------------------
// ReLU

/// `max(x, 0)`. Fused for contiguous f32 and bf16 tensors, where the backward pass is one op
/// (candle's builds a zero tensor, compares, casts and multiplies); the gradient passes where
/// `x >= 0`, as candle's does.
pub fn relu(x: &Tensor) -> candle_core::Result<Tensor> {
    if fusable_elementwise(&[x]) && x.is_contiguous() {
        return relu_op(x);
    }
    x.relu()
}

/// The fused ReLU itself, whatever the process-wide switch says.
pub(crate) fn relu_op(x: &Tensor) -> candle_core::Result<Tensor> {
    x.contiguous()?.apply_op1(Relu)
}

struct Relu;

impl CustomOp1 for Relu {
    fn name(&self) -> &'static str {
        "cumind-relu"
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        l: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        super::fused_cuda::relu((s, l))
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let out = widened(s, l)?.iter().map(|&v| v.max(0.0)).collect();
        Ok((narrowed(out, s), l.shape().clone()))
    }

    fn bwd(&self, x: &Tensor, _res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(grad.contiguous()?.apply_op2_no_bwd(x, &ReluBackward)?))
    }
}

/// Inputs: the output gradient and x; out: the gradient where `x >= 0`, else 0.
struct ReluBackward;

impl CustomOp2 for ReluBackward {
    fn name(&self) -> &'static str {
        "cumind-relu-backward"
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        super::fused_cuda::relu_backward((s1, l1), (s2, l2))
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (grad, x) = (widened(s1, l1)?, widened(s2, l2)?);
        let out = grad
            .iter()
            .zip(x.iter())
            .map(|(&g, &x)| if x >= 0.0 { g } else { 0.0 })
            .collect();
        Ok((narrowed(out, s1), l1.shape().clone()))
    }
}

// ---------------------------------------------------------------------------------------------
// Soft-target cross-entropy

/// `-sum_j targets_j * log_softmax(logits)_j` for each row. Fused for f32 on the CPU (targets
/// get no gradient there: they are data).
///
/// # Shapes
/// `logits`, `targets`: `[B, n]` -> `[B]`.
pub fn soft_cross_entropy(logits: &Tensor, targets: &Tensor) -> candle_core::Result<Tensor> {
    if fusable(&[logits, targets]) {
        return soft_cross_entropy_op(logits, targets);
    }
    (candle_nn::ops::log_softmax(logits, D::Minus1)? * targets)?
        .sum(D::Minus1)?
        .neg()
}

/// The fused soft cross-entropy itself, whatever the process-wide switch says.
pub(crate) fn soft_cross_entropy_op(
    logits: &Tensor,
    targets: &Tensor,
) -> candle_core::Result<Tensor> {
    logits
        .contiguous()?
        .apply_op2(&targets.contiguous()?, SoftCrossEntropy)
}

/// Maximum and log-sum-exp of one row.
pub(crate) fn row_log_sum_exp(row: &[f32]) -> (f32, f32) {
    let max = crate::fast_exp::max(row);
    let sum = crate::fast_exp::sum_exp(row, max);
    (max, max + sum.ln())
}

struct SoftCrossEntropy;

impl CustomOp2 for SoftCrossEntropy {
    fn name(&self) -> &'static str {
        "cumind-soft-cross-entropy"
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        super::fused_cuda::soft_cross_entropy((s1, l1), (s2, l2))
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (logits, targets) = (elements(s1, l1)?, elements(s2, l2)?);
        let n = last_dim(l1)?;
        if l1.dims() != l2.dims() {
            candle_core::bail!(
                "cross-entropy: logits {:?} and targets {:?} differ",
                l1.dims(),
                l2.dims()
            );
        }
        let out: Vec<f32> = logits
            .chunks_exact(n)
            .zip(targets.chunks_exact(n))
            .map(|(row, t)| {
                let (_, lse) = row_log_sum_exp(row);
                row.iter().zip(t).map(|(l, t)| t * (lse - l)).sum()
            })
            .collect();
        let rows = out.len();
        Ok((CpuStorage::F32(out), Shape::from(rows)))
    }

    fn bwd(
        &self,
        logits: &Tensor,
        targets: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let dlogits =
            grad.contiguous()?
                .apply_op3_no_bwd(logits, targets, &SoftCrossEntropyBackward)?;
        Ok((Some(dlogits), None))
    }
}

struct SoftCrossEntropyBackward;

impl CustomOp3 for SoftCrossEntropyBackward {
    fn name(&self) -> &'static str {
        "cumind-soft-cross-entropy-backward"
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        super::fused_cuda::soft_cross_entropy_backward((s1, l1), (s2, l2), (s3, l3))
    }

    /// Inputs: the per-row output gradient `[B]`, logits, targets; out: `[B, n]`
    /// `grad * (softmax(logits) * sum(targets) - targets)`.
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (grad, logits, targets) = (elements(s1, l1)?, elements(s2, l2)?, elements(s3, l3)?);
        let n = last_dim(l2)?;
        let mut out = vec![0f32; logits.len()];
        for (((row, t), o), g) in logits
            .chunks_exact(n)
            .zip(targets.chunks_exact(n))
            .zip(out.chunks_exact_mut(n))
            .zip(grad)
        {
            let (_, lse) = row_log_sum_exp(row);
            let mass: f32 = t.iter().sum();
            for i in 0..n {
                o[i] = g * (crate::fast_exp::exp(row[i] - lse) * mass - t[i]);
            }
        }
        Ok((CpuStorage::F32(out), l2.shape().clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::tensors::{assert_close, uniform, values};
    use candle_core::{Device, Var};

    /// The lane-wise minimum and maximum are the row's, wherever they lie (in the lanes or
    /// in the tail), for rows shorter and longer than the lanes, with NaNs skipped.
    #[test]
    fn the_row_minimum_and_maximum_are_found_wherever_they_lie() {
        for len in [1, 5, 8, 9, 16, 23, 100] {
            for at in [0, len / 2, len - 1] {
                let mut row: Vec<f32> = (0..len).map(|i| (i as f32 * 0.7).sin()).collect();
                row[at] = -3.0;
                row[(at + 1) % len] = if len > 1 { 4.0 } else { -3.0 };
                let want = row
                    .iter()
                    .fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &v| {
                        (a.min(v), b.max(v))
                    });
                assert_eq!(row_min_max(&row), want, "length {len}, extreme at {at}");
                row[(at + 2) % len] = f32::NAN;
                let (lo, hi) = row_min_max(&row);
                assert!(
                    !lo.is_nan() && !hi.is_nan(),
                    "length {len}: a NaN came through"
                );
            }
        }
    }

    /// The plane norm with its residual and ReLU as one op (`norm_then`) equals the same
    /// written out with candle's ops, forward and every gradient (x, residual, scale, shift),
    /// with and without the residual and the ReLU.
    #[test]
    fn the_norm_then_op_equals_the_written_out_ops_and_their_gradients() {
        let (b, c, h, w) = (3, 4, 2, 5);
        let x0 = uniform(&[b, c, h, w], 2.0, 11);
        let r0 = uniform(&[b, c, h, w], 1.0, 12);
        let g0 = (uniform(&[c], 0.5, 13) + 1.0).unwrap();
        let b0 = uniform(&[c], 0.5, 14);
        let mix = uniform(&[b, c, h, w], 1.0, 15);
        for residual in [false, true] {
            for relu_after in [false, true] {
                let run = |fused: bool| {
                    let vars: Vec<Var> = [&x0, &r0, &g0, &b0]
                        .iter()
                        .map(|t| Var::from_tensor(t).unwrap())
                        .collect();
                    let (x, r, gamma, beta) = (
                        vars[0].as_tensor(),
                        vars[1].as_tensor(),
                        vars[2].as_tensor(),
                        vars[3].as_tensor(),
                    );
                    let y = if fused {
                        norm_then(x, residual.then_some(r), gamma, beta, 1e-5, relu_after).unwrap()
                    } else {
                        let flat = x.flatten_from(1).unwrap();
                        let mean = flat.mean_keepdim(1).unwrap();
                        let centred = flat.broadcast_sub(&mean).unwrap();
                        let var = centred.sqr().unwrap().mean_keepdim(1).unwrap();
                        let normed = centred
                            .broadcast_div(&(var + 1e-5).unwrap().sqrt().unwrap())
                            .unwrap()
                            .reshape((b, c, h, w))
                            .unwrap();
                        let mut y = normed
                            .broadcast_mul(&gamma.reshape((1, c, 1, 1)).unwrap())
                            .unwrap()
                            .broadcast_add(&beta.reshape((1, c, 1, 1)).unwrap())
                            .unwrap();
                        if residual {
                            y = (y + r).unwrap();
                        }
                        if relu_after {
                            y = y.relu().unwrap();
                        }
                        y
                    };
                    let loss = (&y * &mix).unwrap().sum_all().unwrap();
                    let grads = loss.backward().unwrap();
                    let mut out = vec![y];
                    for v in &vars {
                        out.push(
                            grads
                                .get(v.as_tensor())
                                .cloned()
                                .unwrap_or_else(|| v.as_tensor().zeros_like().unwrap()),
                        );
                    }
                    out
                };
                let (ours, theirs) = (run(true), run(false));
                for (what, (a, e)) in ["output", "dx", "dresidual", "dgamma", "dbeta"]
                    .iter()
                    .zip(ours.iter().zip(&theirs))
                {
                    close(
                        a,
                        e,
                        1e-4,
                        &format!("{what}, residual {residual}, relu {relu_after}"),
                    );
                }
            }
        }
    }

    fn close(a: &Tensor, b: &Tensor, tol: f32, what: &str) {
        assert_eq!(a.dims(), b.dims(), "{what}: shapes");
        let a = a.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let b = b.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!(
                (x - y).abs() <= tol * (1.0 + y.abs()),
                "{what}[{i}]: fused {x} vs written out {y}"
            );
        }
    }

    /// The written-out reference of each kernel: the same function, forced through candle's
    /// elementary ops by running it in f64 and casting back.
    fn reference(f: impl Fn(&[Tensor]) -> Tensor, inputs: &[Tensor]) -> Vec<Tensor> {
        let vars: Vec<Var> = inputs
            .iter()
            .map(|t| Var::from_tensor(&t.to_dtype(DType::F64).unwrap()).unwrap())
            .collect();
        let ts: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
        let out = f(&ts);
        let mut result = vec![out.to_dtype(DType::F32).unwrap()];
        let weights = uniform(out.dims(), 1.0, 99).to_dtype(DType::F64).unwrap();
        let grads = (out * weights)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        for v in &vars {
            result.push(
                grads
                    .get(v.as_tensor())
                    .map(|g| g.to_dtype(DType::F32).unwrap())
                    .unwrap_or_else(|| {
                        v.as_tensor()
                            .zeros_like()
                            .unwrap()
                            .to_dtype(DType::F32)
                            .unwrap()
                    }),
            );
        }
        result
    }

    /// Output and input gradients of `f` on CPU inputs, computed in the inputs' dtype and
    /// returned in f32. The tests pass the kernels' own ops here (`layer_norm_op`, ...), which
    /// run whatever the process-wide switch says, so they test the fused path and not the
    /// reference against itself.
    fn fused(
        f: impl Fn(&[Tensor]) -> Tensor,
        inputs: &[Tensor],
        with_grad: &[bool],
    ) -> Vec<Tensor> {
        let vars: Vec<Var> = inputs
            .iter()
            .map(|t| Var::from_tensor(t).unwrap())
            .collect();
        let ts: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
        let out = f(&ts);
        let mut result = vec![out.to_dtype(DType::F32).unwrap()];
        let weights = uniform(out.dims(), 1.0, 99).to_dtype(out.dtype()).unwrap();
        let grads = (out * weights)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        for (v, &wanted) in vars.iter().zip(with_grad) {
            match grads.get(v.as_tensor()) {
                Some(g) => result.push(g.to_dtype(DType::F32).unwrap()),
                None => {
                    assert!(!wanted, "no gradient reached an input");
                    result.push(v.as_tensor().zeros_like().unwrap());
                }
            }
        }
        result
    }

    #[test]
    fn layer_norm_matches_the_written_out_ops_forward_and_backward() {
        let inputs = [
            uniform(&[7, 12], 3.0, 1),
            (uniform(&[12], 0.5, 2) + 1.0).unwrap(),
            uniform(&[12], 0.5, 3),
        ];
        let op = |t: &[Tensor]| layer_norm_op(&t[0], &t[1], &t[2], 1e-5).unwrap();
        let f = |t: &[Tensor]| layer_norm(&t[0], &t[1], &t[2], 1e-5).unwrap();
        let got = fused(op, &inputs, &[true, true, true]);
        let want = reference(f, &inputs);
        for (i, what) in ["output", "dx", "dgamma", "dbeta"].iter().enumerate() {
            close(&got[i], &want[i], 1e-4, what);
        }
    }

    /// The one-kernel norm, add and ReLU (the CUDA kernel's CPU reference) equals the three
    /// written-out steps, for each combination of a residual and a ReLU; and `layer_norm_then`
    /// on the CPU is those steps.
    #[test]
    fn the_norm_then_add_and_relu_equals_the_steps_written_out() {
        let x = uniform(&[9, 20], 3.0, 31);
        let residual = uniform(&[9, 20], 2.0, 32);
        let gamma = (uniform(&[20], 0.5, 33) + 1.0).unwrap();
        let beta = uniform(&[20], 0.5, 34);
        for (with_residual, relu_after) in
            [(false, false), (false, true), (true, false), (true, true)]
        {
            let r = with_residual.then_some(&residual);
            let mut want = layer_norm_op(&x, &gamma, &beta, 1e-5).unwrap();
            if with_residual {
                want = (&residual + want).unwrap();
            }
            if relu_after {
                want = want.relu().unwrap();
            }
            let got = layer_norm_then_op(&x, r, &gamma, &beta, 1, 1e-5, relu_after).unwrap();
            close(&got, &want, 1e-6, "one op");
            let steps = layer_norm_then(&x, r, &gamma, &beta, 1, 1e-5, relu_after).unwrap();
            close(&steps, &want, 0.0, "the CPU's steps");
        }
        // A scale and shift per group of 5 features equal the same values spread out.
        let (gamma4, beta4) = (
            gamma.narrow(0, 0, 4).unwrap(),
            beta.narrow(0, 0, 4).unwrap(),
        );
        let spread = |t: &Tensor| {
            t.reshape((4, 1))
                .unwrap()
                .broadcast_as((4, 5))
                .unwrap()
                .contiguous()
                .unwrap()
                .flatten_all()
                .unwrap()
        };
        let grouped = layer_norm_then_op(&x, Some(&residual), &gamma4, &beta4, 5, 1e-5, true);
        let spread_out = layer_norm_then_op(
            &x,
            Some(&residual),
            &spread(&gamma4),
            &spread(&beta4),
            1,
            1e-5,
            true,
        );
        close(&grouped.unwrap(), &spread_out.unwrap(), 0.0, "groups");
        let steps = layer_norm_then(&x, Some(&residual), &gamma4, &beta4, 5, 1e-5, true).unwrap();
        close(
            &steps,
            &layer_norm_then_op(&x, Some(&residual), &gamma4, &beta4, 5, 1e-5, true).unwrap(),
            1e-6,
            "grouped steps",
        );
        // The ReLU and the residual change the values here: the cases are not all one.
        let plain = layer_norm_then_op(&x, None, &gamma, &beta, 1, 1e-5, false).unwrap();
        let both = layer_norm_then_op(&x, Some(&residual), &gamma, &beta, 1, 1e-5, true).unwrap();
        let differ = (plain - both).unwrap().abs().unwrap().max_all().unwrap();
        assert!(differ.to_scalar::<f32>().unwrap() > 0.5);
    }

    #[test]
    fn layer_norm_of_a_strided_input_is_made_contiguous_first() {
        let x = uniform(&[12, 7], 2.0, 4).t().unwrap();
        let gamma = Tensor::ones(12, DType::F32, &Device::Cpu).unwrap();
        let beta = Tensor::zeros(12, DType::F32, &Device::Cpu).unwrap();
        let got = layer_norm(&x, &gamma, &beta, 1e-5).unwrap();
        let want = layer_norm(
            &x.to_dtype(DType::F64).unwrap(),
            &gamma.to_dtype(DType::F64).unwrap(),
            &beta.to_dtype(DType::F64).unwrap(),
            1e-5,
        )
        .unwrap();
        close(
            &got,
            &want.to_dtype(DType::F32).unwrap(),
            1e-4,
            "strided layer norm",
        );
    }

    #[test]
    fn bias_add_matches_broadcast_add_forward_and_backward() {
        let inputs = [uniform(&[9, 5], 2.0, 5), uniform(&[5], 1.0, 6)];
        let op = |t: &[Tensor]| add_bias_op(&t[0], &t[1]).unwrap();
        let f = |t: &[Tensor]| add_bias(&t[0], &t[1]).unwrap();
        let got = fused(op, &inputs, &[true, true]);
        let want = reference(f, &inputs);
        for (i, what) in ["output", "dy", "db"].iter().enumerate() {
            close(&got[i], &want[i], 1e-5, what);
        }
    }

    #[test]
    fn soft_cross_entropy_matches_log_softmax_forward_and_backward() {
        // Targets that are distributions, and a row of zeros (a masked step).
        let logits = uniform(&[6, 5], 4.0, 7);
        let raw = uniform(&[6, 5], 1.0, 8).abs().unwrap();
        let targets = raw.broadcast_div(&raw.sum_keepdim(1).unwrap()).unwrap();
        let mask = Tensor::new(&[1f32, 1.0, 0.0, 1.0, 1.0, 1.0], &Device::Cpu)
            .unwrap()
            .unsqueeze(1)
            .unwrap();
        let targets = targets.broadcast_mul(&mask).unwrap();
        let inputs = [logits, targets];
        let op = |t: &[Tensor]| soft_cross_entropy_op(&t[0], &t[1]).unwrap();
        let f = |t: &[Tensor]| soft_cross_entropy(&t[0], &t[1]).unwrap();
        let got = fused(op, &inputs, &[true, false]);
        let want = reference(f, &inputs);
        close(&got[0], &want[0], 1e-5, "loss");
        close(&got[1], &want[1], 1e-5, "dlogits");
        // Large logits stay finite (the log-sum-exp is shifted by the row maximum).
        let big = (uniform(&[2, 5], 1.0, 9) * 500.0).unwrap();
        let t = Tensor::full(0.2f32, (2, 5), &Device::Cpu).unwrap();
        let loss = soft_cross_entropy(&big, &t)
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        assert!(loss.iter().all(|v| v.is_finite() && *v >= 0.0), "{loss:?}");
    }

    #[test]
    fn relu_matches_candle_forward_and_backward() {
        // Exact zeros included: the gradient passes there, as in candle.
        let x = Tensor::new(&[[-1.5f32, 0.0, 2.0], [0.25, -0.0, -3.0]], &Device::Cpu).unwrap();
        let op = |t: &[Tensor]| relu_op(&t[0]).unwrap();
        let f = |t: &[Tensor]| relu(&t[0]).unwrap();
        let got = fused(op, std::slice::from_ref(&x), &[true]);
        let want = reference(f, &[x]);
        close(&got[0], &want[0], 0.0, "output");
        close(&got[1], &want[1], 0.0, "dx");
    }

    #[test]
    fn other_dtypes_take_the_written_out_path() {
        let x = uniform(&[3, 4], 1.0, 10).to_dtype(DType::BF16).unwrap();
        assert!(!fusable(&[&x]));
        let b = Tensor::ones(4, DType::BF16, &Device::Cpu).unwrap();
        let y = add_bias(&x, &b).unwrap();
        assert_eq!(y.dtype(), DType::BF16);
        let gamma = Tensor::ones(4, DType::F32, &Device::Cpu).unwrap();
        let beta = Tensor::zeros(4, DType::F32, &Device::Cpu).unwrap();
        assert_eq!(
            layer_norm(&x, &gamma, &beta, 1e-5).unwrap().dtype(),
            DType::BF16
        );
    }

    #[test]
    fn bf16_bias_add_and_relu_match_the_written_out_ops_forward_and_backward() {
        let half = |t: Tensor| t.to_dtype(DType::BF16).unwrap();
        let x = half(uniform(&[9, 5], 2.0, 7));
        let b = half(uniform(&[5], 1.0, 8));
        // Output and every input's gradient computed in bf16 (cast to f32 for comparison).
        let bias = |t: &[Tensor]| add_bias(&t[0], &t[1]).unwrap();
        let inputs = [x.clone(), b];
        assert_eq!(bias(&inputs).dtype(), DType::BF16);
        let got = fused(
            |t: &[Tensor]| add_bias_op(&t[0], &t[1]).unwrap(),
            &inputs,
            &[true, true],
        );
        let want = reference(bias, &inputs);
        for (i, what) in ["output", "dy", "db"].iter().enumerate() {
            // bf16 keeps 8 bits: a relative error of 2^-8 per rounding.
            close(&got[i], &want[i], 1e-2, what);
        }
        let r = |t: &[Tensor]| relu(&t[0]).unwrap();
        assert_eq!(r(std::slice::from_ref(&x)).dtype(), DType::BF16);
        let got = fused(
            |t: &[Tensor]| relu_op(&t[0]).unwrap(),
            std::slice::from_ref(&x),
            &[true],
        );
        let want = reference(r, &[x]);
        close(&got[0], &want[0], 1e-2, "relu output");
        close(&got[1], &want[1], 1e-2, "relu dx");
    }

    #[test]
    fn a_bf16_layer_norm_through_the_f32_kernel_equals_the_written_out_ops() {
        let x = uniform(&[5, 7], 2.0, 11).to_dtype(DType::BF16).unwrap();
        let gamma = uniform(&[7], 1.0, 12);
        let beta = uniform(&[7], 1.0, 13);
        let written_out = |x: &Tensor| {
            let x = x.to_dtype(DType::F32).unwrap();
            let mean = x.mean_keepdim(D::Minus1).unwrap();
            let centred = x.broadcast_sub(&mean).unwrap();
            let var = centred.sqr().unwrap().mean_keepdim(D::Minus1).unwrap();
            centred
                .broadcast_div(&(var + 1e-5).unwrap().sqrt().unwrap())
                .unwrap()
                .broadcast_mul(&gamma)
                .unwrap()
                .broadcast_add(&beta)
                .unwrap()
                .to_dtype(DType::BF16)
                .unwrap()
        };
        let fused = layer_norm(&x, &gamma, &beta, 1e-5).unwrap();
        assert_eq!(fused.dtype(), DType::BF16);
        let (a, b) = (
            fused.to_dtype(DType::F32).unwrap(),
            written_out(&x).to_dtype(DType::F32).unwrap(),
        );
        let worst = (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        // One bf16 rounding step apart at most (values up to a few units).
        assert!(worst <= 0.05, "bf16 layer norm differs by {worst}");
    }

    /// The fused min-max scaling computes what the written-out ops compute, in f32 to the
    /// bit, on rows of an MLP latent and of a flattened conv latent.
    #[test]
    fn the_fused_min_max_scale_equals_the_written_out_one() {
        for (rows, d, seed) in [(4, 32, 1), (3, 2688, 2)] {
            let x = uniform(&[rows, d], 3.0, seed);
            let fused = min_max_scale_rows(&x).unwrap().to_vec2::<f32>().unwrap();
            let written = super::super::layers::min_max_scale_written_out(&x)
                .unwrap()
                .to_vec2::<f32>()
                .unwrap();
            assert_eq!(fused, written);
            let flat: Vec<f32> = fused.concat();
            assert!(flat.iter().all(|v| (0.0..=1.0).contains(v)));
        }
    }

    /// The differentiable min-max scaling's gradient equals candle's written-out one, on
    /// rows with ties at both extremes: ReLU zeros at the minimum (as a conv trunk's output
    /// has), a repeated maximum, and a constant row.
    #[test]
    fn the_min_max_scale_gradient_equals_the_written_out_one_with_ties() {
        let mut data = values(&uniform(&[5, 24], 2.0, 7).relu().unwrap());
        data[24 + 3] = 5.0;
        data[24 + 9] = 5.0;
        data[72..96].fill(0.25);
        let x = Var::from_tensor(&Tensor::from_vec(data, (5, 24), &Device::Cpu).unwrap()).unwrap();
        let mix = uniform(&[5, 24], 1.0, 8);
        let run = |fused: bool| {
            let y = if fused {
                min_max_scale_rows_differentiable(x.as_tensor()).unwrap()
            } else {
                super::super::layers::min_max_scale_written_out(x.as_tensor()).unwrap()
            };
            let grads = (&y * &mix).unwrap().sum_all().unwrap().backward().unwrap();
            (values(&y), values(grads.get(x.as_tensor()).unwrap()))
        };
        let (ours, theirs) = (run(true), run(false));
        assert_close(&ours.0, &theirs.0, 1e-6, "outputs");
        // The constant row's scale is 1e-5, so its gradients are of order 1e5: compare each
        // value relative to its size.
        for (i, (a, b)) in ours.1.iter().zip(&theirs.1).enumerate() {
            assert!(
                (a - b).abs() <= 1e-4 * b.abs().max(1.0),
                "gradient {i}: {a} against {b}"
            );
        }
        assert!(ours.1.iter().any(|g| g.abs() > 1e-2));
    }

    /// The gradient scaler is the identity forward and scales the gradient backward, as
    /// the written-out form.
    #[test]
    fn the_gradient_scaler_scales_only_the_gradient() {
        let x = Var::from_tensor(&uniform(&[3, 4, 2, 2], 1.0, 9)).unwrap();
        let mix = uniform(&[3, 4, 2, 2], 1.0, 10);
        let y = scale_gradient(x.as_tensor(), 0.5).unwrap();
        assert_eq!(values(&y), values(x.as_tensor()));
        let grads = (&y * &mix).unwrap().sum_all().unwrap().backward().unwrap();
        let expected: Vec<f32> = values(&mix).iter().map(|m| m * 0.5).collect();
        assert_close(
            &values(grads.get(x.as_tensor()).unwrap()),
            &expected,
            1e-7,
            "gradients",
        );
    }
}
