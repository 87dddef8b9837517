//! The CUDA side of the fused ops in [`super::fused`]: launches of the kernels in
//! `src/network/fused_kernels.cu` (f32), which build.rs compiles to PTX with nvcc in a `cuda`
//! build. Each op is one tensor, as on the CPU: where the written-out forms issue a dozen
//! kernels and their autograd backward twice that, the layer norm here is one launch forward
//! and two backward, the bias add and ReLU one each way, the soft cross-entropy one each way.
//!
//! The kernels compute what the CPU kernels compute; the `#[ignore]`d GPU tests
//! (tests/gpu.rs) compare the CUDA loss and gradients with the CPU's.

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{
    CudaSlice, CudaView, DeviceRepr, LaunchConfig, PushKernelArg,
};
use candle_core::cuda_backend::{CudaDType, CudaDevice, CudaStorage, WrapErr};
use candle_core::{DType, Layout, Result, Shape};
use half::bf16;

pub(super) mod ptx {
    /// The PTX of src/network/fused_kernels.cu, compiled by build.rs.
    pub const FUSED_KERNELS: &str = include_str!(concat!(env!("OUT_DIR"), "/fused_kernels.ptx"));
}

/// The module name the PTX is cached under on each device.
pub(super) const MODULE: &str = "cumind_fused_kernels";
/// Threads per warp, as the kernels assume.
const WARP: u32 = 32;
/// Rows per block of the row kernels (one warp each).
const ROWS_PER_BLOCK: u32 = 8;
/// Row phases of a column sum (`PHASES` in the .cu file).
const PHASES: u32 = 32;
/// Threads per block of the elementwise kernels.
const ELEMENTWISE_BLOCK: u32 = 256;

/// `storage`'s elements as `layout` addresses them, which must be contiguous.
fn view<'a, T: CudaDType>(storage: &'a CudaStorage, layout: &Layout) -> Result<CudaView<'a, T>> {
    let slice = storage.as_cuda_slice::<T>()?;
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(slice.slice(start..end)),
        None => candle_core::bail!("fused CUDA kernel: input is not contiguous"),
    }
}

/// Rows and row length of a layout (the kernels work along the last dimension).
fn rows_and_width(layout: &Layout) -> Result<(usize, usize)> {
    let d = match layout.dims().last() {
        Some(&d) if d > 0 => d,
        _ => candle_core::bail!("fused CUDA kernel: needs a non-empty last dimension"),
    };
    let rows = layout.shape().elem_count() / d;
    if rows > i32::MAX as usize || d > i32::MAX as usize {
        candle_core::bail!("fused CUDA kernel: {rows} rows of {d} is too large");
    }
    Ok((rows, d))
}

/// One warp per row, `ROWS_PER_BLOCK` rows per block.
fn row_launch(rows: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((rows as u32).div_ceil(ROWS_PER_BLOCK).max(1), 1, 1),
        block_dim: (WARP, ROWS_PER_BLOCK, 1),
        shared_mem_bytes: 0,
    }
}

/// One block per 32 columns, `PHASES` row phases each.
fn column_launch(d: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((d as u32).div_ceil(WARP).max(1), 1, 1),
        block_dim: (WARP, PHASES, 1),
        shared_mem_bytes: 0,
    }
}

/// A grid-stride launch over `n` elements.
fn elementwise_launch(n: usize) -> LaunchConfig {
    let blocks = n.div_ceil(ELEMENTWISE_BLOCK as usize).clamp(1, 65_535) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (ELEMENTWISE_BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// A fresh device buffer of `len` values, every one written by the kernel that follows.
fn output<T: DeviceRepr>(dev: &CudaDevice, len: usize) -> Result<CudaSlice<T>> {
    // SAFETY: each caller's kernel writes every element before anything reads it.
    unsafe { dev.alloc::<T>(len) }
}

fn storage<T: CudaDType>(slice: CudaSlice<T>, dev: &CudaDevice) -> CudaStorage {
    CudaStorage::wrap_cuda_slice(slice, dev.clone())
}

/// The error for a dtype that has no kernel of `op`.
fn no_kernel(op: &str, dtype: DType) -> candle_core::Error {
    candle_core::Error::Msg(format!("{op}: no CUDA kernel for {dtype:?}"))
}

/// Layer norm of the rows of `x` (f32 or bf16, statistics in f32) with f32 scale `gamma` and
/// shift `beta`; the result in `x`'s dtype.
pub fn layer_norm(
    x: (&CudaStorage, &Layout),
    gamma: (&CudaStorage, &Layout),
    beta: (&CudaStorage, &Layout),
    eps: f32,
) -> Result<(CudaStorage, Shape)> {
    match x.0.dtype() {
        DType::F32 => layer_norm_of::<f32>(x, gamma, beta, eps, "cumind_layer_norm_f32"),
        DType::BF16 => layer_norm_of::<bf16>(x, gamma, beta, eps, "cumind_layer_norm_bf16"),
        other => Err(no_kernel("layer norm", other)),
    }
}

fn layer_norm_of<T: CudaDType + DeviceRepr>(
    x: (&CudaStorage, &Layout),
    gamma: (&CudaStorage, &Layout),
    beta: (&CudaStorage, &Layout),
    eps: f32,
    kernel: &str,
) -> Result<(CudaStorage, Shape)> {
    let dev = &x.0.device;
    let (rows, d) = rows_and_width(x.1)?;
    let (xv, gv, bv) = (
        view::<T>(x.0, x.1)?,
        view::<f32>(gamma.0, gamma.1)?,
        view::<f32>(beta.0, beta.1)?,
    );
    if gv.len() != d || bv.len() != d {
        candle_core::bail!("layer norm: scale/shift of {} for {d} features", gv.len());
    }
    let out = output::<T>(dev, rows * d)?;
    let func = dev.get_or_load_custom_func(kernel, MODULE, ptx::FUSED_KERNELS)?;
    let mut b = func.builder();
    b.arg(&xv).arg(&gv).arg(&bv).arg(&out);
    let (rows_i, d_i) = (rows as i32, d as i32);
    b.arg(&rows_i).arg(&d_i).arg(&eps);
    // SAFETY: the argument list matches the kernel's signature.
    unsafe { b.launch(row_launch(rows)) }.w()?;
    Ok((storage(out, dev), x.1.shape().clone()))
}

/// `relu?(residual? + layer_norm(x))` in one kernel (inference): `x` and `residual` of one
/// shape and dtype (f32 or bf16), `gamma` and `beta` f32 with one value per `group`
/// consecutive features of a row.
pub fn layer_norm_act(
    x: (&CudaStorage, &Layout),
    residual: Option<(&CudaStorage, &Layout)>,
    gamma: (&CudaStorage, &Layout),
    beta: (&CudaStorage, &Layout),
    group: usize,
    eps: f32,
    relu: bool,
) -> Result<(CudaStorage, Shape)> {
    if let Some(r) = residual {
        if r.1.shape() != x.1.shape() || r.0.dtype() != x.0.dtype() {
            candle_core::bail!(
                "layer norm: a residual of {:?} {:?} for an input of {:?} {:?}",
                r.1.dims(),
                r.0.dtype(),
                x.1.dims(),
                x.0.dtype()
            );
        }
    }
    let args = NormThen { group, eps, relu };
    match x.0.dtype() {
        DType::F32 => layer_norm_act_of::<f32>(x, residual, gamma, beta, args, "f32"),
        DType::BF16 => layer_norm_act_of::<bf16>(x, residual, gamma, beta, args, "bf16"),
        other => Err(no_kernel("layer norm", other)),
    }
}

/// The scalar arguments of [`layer_norm_act`].
#[derive(Clone, Copy)]
struct NormThen {
    group: usize,
    eps: f32,
    relu: bool,
}

fn layer_norm_act_of<T: CudaDType + DeviceRepr>(
    x: (&CudaStorage, &Layout),
    residual: Option<(&CudaStorage, &Layout)>,
    gamma: (&CudaStorage, &Layout),
    beta: (&CudaStorage, &Layout),
    args: NormThen,
    dtype: &str,
) -> Result<(CudaStorage, Shape)> {
    let dev = &x.0.device;
    let (rows, d) = rows_and_width(x.1)?;
    let (xv, gv, bv) = (
        view::<T>(x.0, x.1)?,
        view::<f32>(gamma.0, gamma.1)?,
        view::<f32>(beta.0, beta.1)?,
    );
    if args.group == 0 || gv.len() * args.group != d || bv.len() != gv.len() {
        candle_core::bail!(
            "layer norm: scale/shift of {} and {} for {d} features in groups of {}",
            gv.len(),
            bv.len(),
            args.group
        );
    }
    // Without a residual the kernel is handed x in its place and never reads it.
    let rv = match residual {
        Some(r) => view::<T>(r.0, r.1)?,
        None => view::<T>(x.0, x.1)?,
    };
    let out = output::<T>(dev, rows * d)?;
    // bf16 rows of a multiple of 8 at 16-byte aligned offsets take the vector kernel.
    let aligned = |layout: &Layout| layout.start_offset().is_multiple_of(8);
    let vector = dtype == "bf16"
        && d.is_multiple_of(8)
        && aligned(x.1)
        && residual.is_none_or(|r| aligned(r.1));
    let kernel = if vector {
        "cumind_layer_norm_act_bf16x8".to_string()
    } else {
        format!("cumind_layer_norm_act_{dtype}")
    };
    let func = dev.get_or_load_custom_func(&kernel, MODULE, ptx::FUSED_KERNELS)?;
    let mut b = func.builder();
    b.arg(&xv).arg(&rv).arg(&gv).arg(&bv).arg(&out);
    let (rows_i, d_i, group_i) = (rows as i32, d as i32, args.group as i32);
    let (add_i, relu_i) = (i32::from(residual.is_some()), i32::from(args.relu));
    b.arg(&rows_i).arg(&d_i).arg(&group_i).arg(&args.eps);
    b.arg(&add_i).arg(&relu_i);
    // SAFETY: the argument list matches the kernel's signature.
    unsafe { b.launch(row_launch(rows)) }.w()?;
    Ok((storage(out, dev), x.1.shape().clone()))
}

/// The layer norm's backward: `[dx (rows * d), dgamma (d), dbeta (d)]` packed in one f32
/// vector (`dy` and `x` f32 or bf16, `gamma` f32).
pub fn layer_norm_backward(
    dy: (&CudaStorage, &Layout),
    x: (&CudaStorage, &Layout),
    gamma: (&CudaStorage, &Layout),
    eps: f32,
) -> Result<(CudaStorage, Shape)> {
    match (dy.0.dtype(), x.0.dtype()) {
        (DType::F32, DType::F32) => layer_norm_backward_of::<f32>(dy, x, gamma, eps, "f32"),
        (DType::BF16, DType::BF16) => layer_norm_backward_of::<bf16>(dy, x, gamma, eps, "bf16"),
        (_, other) => Err(no_kernel("layer norm backward", other)),
    }
}

fn layer_norm_backward_of<T: CudaDType + DeviceRepr>(
    dy: (&CudaStorage, &Layout),
    x: (&CudaStorage, &Layout),
    gamma: (&CudaStorage, &Layout),
    eps: f32,
    suffix: &str,
) -> Result<(CudaStorage, Shape)> {
    let dev = &x.0.device;
    let (rows, d) = rows_and_width(x.1)?;
    let (dyv, xv, gv) = (
        view::<T>(dy.0, dy.1)?,
        view::<T>(x.0, x.1)?,
        view::<f32>(gamma.0, gamma.1)?,
    );
    if dyv.len() != rows * d || gv.len() != d {
        candle_core::bail!("layer norm backward: shapes disagree");
    }
    let n = rows * d;
    let mut out = output::<f32>(dev, n + 2 * d)?;
    let stats = output::<f32>(dev, 2 * rows)?;
    let (rows_i, d_i) = (rows as i32, d as i32);
    {
        let (mut dx, _) = out.split_at_mut(n);
        let func = dev.get_or_load_custom_func(
            &format!("cumind_layer_norm_backward_rows_{suffix}"),
            MODULE,
            ptx::FUSED_KERNELS,
        )?;
        let mut b = func.builder();
        b.arg(&dyv).arg(&xv).arg(&gv).arg(&mut dx).arg(&stats);
        b.arg(&rows_i).arg(&d_i).arg(&eps);
        // SAFETY: the argument list matches the kernel's signature.
        unsafe { b.launch(row_launch(rows)) }.w()?;
    }
    {
        let (_, mut params) = out.split_at_mut(n);
        let (mut dgamma, mut dbeta) = params.split_at_mut(d);
        let func = dev.get_or_load_custom_func(
            &format!("cumind_layer_norm_param_grads_{suffix}"),
            MODULE,
            ptx::FUSED_KERNELS,
        )?;
        let mut b = func.builder();
        b.arg(&dyv)
            .arg(&xv)
            .arg(&stats)
            .arg(&mut dgamma)
            .arg(&mut dbeta);
        b.arg(&rows_i).arg(&d_i);
        // SAFETY: as above.
        unsafe { b.launch(column_launch(d)) }.w()?;
    }
    Ok((storage(out, dev), Shape::from(n + 2 * d)))
}

/// `y + b`, `b` broadcast over the rows of `y` (f32 or bf16).
pub fn bias_add(
    y: (&CudaStorage, &Layout),
    bias: (&CudaStorage, &Layout),
) -> Result<(CudaStorage, Shape)> {
    match y.0.dtype() {
        DType::F32 => bias_add_of::<f32>(y, bias, "cumind_bias_add_f32"),
        DType::BF16 => bias_add_of::<bf16>(y, bias, "cumind_bias_add_bf16"),
        other => Err(no_kernel("bias add", other)),
    }
}

fn bias_add_of<T: CudaDType + DeviceRepr>(
    y: (&CudaStorage, &Layout),
    bias: (&CudaStorage, &Layout),
    kernel: &str,
) -> Result<(CudaStorage, Shape)> {
    let dev = &y.0.device;
    let (rows, d) = rows_and_width(y.1)?;
    let (yv, bv) = (view::<T>(y.0, y.1)?, view::<T>(bias.0, bias.1)?);
    if bv.len() != d {
        candle_core::bail!("bias add: bias of {} for {d} features", bv.len());
    }
    let n = rows * d;
    let out = output::<T>(dev, n)?;
    let func = dev.get_or_load_custom_func(kernel, MODULE, ptx::FUSED_KERNELS)?;
    let mut b = func.builder();
    let d_i = d as i32;
    b.arg(&yv).arg(&bv).arg(&out).arg(&n).arg(&d_i);
    // SAFETY: the argument list matches the kernel's signature.
    unsafe { b.launch(elementwise_launch(n)) }.w()?;
    Ok((storage(out, dev), y.1.shape().clone()))
}

/// `[..., d]` -> `[d]`: the sum of all rows (f32 or bf16, accumulated in f32).
pub fn sum_rows(g: (&CudaStorage, &Layout)) -> Result<(CudaStorage, Shape)> {
    match g.0.dtype() {
        DType::F32 => sum_rows_of::<f32>(g, "cumind_sum_rows_f32"),
        DType::BF16 => sum_rows_of::<bf16>(g, "cumind_sum_rows_bf16"),
        other => Err(no_kernel("sum rows", other)),
    }
}

fn sum_rows_of<T: CudaDType + DeviceRepr>(
    g: (&CudaStorage, &Layout),
    kernel: &str,
) -> Result<(CudaStorage, Shape)> {
    let dev = &g.0.device;
    let (rows, d) = rows_and_width(g.1)?;
    let gv = view::<T>(g.0, g.1)?;
    let out = output::<T>(dev, d)?;
    let func = dev.get_or_load_custom_func(kernel, MODULE, ptx::FUSED_KERNELS)?;
    let mut b = func.builder();
    let (rows_i, d_i) = (rows as i32, d as i32);
    b.arg(&gv).arg(&out).arg(&rows_i).arg(&d_i);
    // SAFETY: the argument list matches the kernel's signature.
    unsafe { b.launch(column_launch(d)) }.w()?;
    Ok((storage(out, dev), Shape::from(d)))
}

/// Each row scaled to [0, 1] by its minimum and maximum (f32 or bf16; see
/// `fused::min_max_scale_rows`).
pub fn min_max_scale(x: (&CudaStorage, &Layout)) -> Result<(CudaStorage, Shape)> {
    match x.0.dtype() {
        DType::F32 => min_max_scale_of::<f32>(x, "cumind_min_max_scale_f32"),
        DType::BF16 => min_max_scale_of::<bf16>(x, "cumind_min_max_scale_bf16"),
        other => Err(no_kernel("min-max scale", other)),
    }
}

fn min_max_scale_of<T: CudaDType + DeviceRepr>(
    x: (&CudaStorage, &Layout),
    kernel: &str,
) -> Result<(CudaStorage, Shape)> {
    let dev = &x.0.device;
    let (rows, d) = rows_and_width(x.1)?;
    let xv = view::<T>(x.0, x.1)?;
    let out = output::<T>(dev, rows * d)?;
    let func = dev.get_or_load_custom_func(kernel, MODULE, ptx::FUSED_KERNELS)?;
    let mut b = func.builder();
    let (rows_i, d_i) = (rows as i32, d as i32);
    b.arg(&xv).arg(&out).arg(&rows_i).arg(&d_i);
    // SAFETY: the argument list matches the kernel's signature.
    unsafe { b.launch(row_launch(rows)) }.w()?;
    Ok((storage(out, dev), x.1.shape().clone()))
}

/// `max(x, 0)` (f32 or bf16).
pub fn relu(x: (&CudaStorage, &Layout)) -> Result<(CudaStorage, Shape)> {
    match x.0.dtype() {
        DType::F32 => relu_of::<f32>(x, "cumind_relu_f32"),
        DType::BF16 => relu_of::<bf16>(x, "cumind_relu_bf16"),
        other => Err(no_kernel("ReLU", other)),
    }
}

fn relu_of<T: CudaDType + DeviceRepr>(
    x: (&CudaStorage, &Layout),
    kernel: &str,
) -> Result<(CudaStorage, Shape)> {
    let dev = &x.0.device;
    let xv = view::<T>(x.0, x.1)?;
    let n = xv.len();
    let out = output::<T>(dev, n)?;
    let func = dev.get_or_load_custom_func(kernel, MODULE, ptx::FUSED_KERNELS)?;
    let mut b = func.builder();
    b.arg(&xv).arg(&out).arg(&n);
    // SAFETY: the argument list matches the kernel's signature.
    unsafe { b.launch(elementwise_launch(n)) }.w()?;
    Ok((storage(out, dev), x.1.shape().clone()))
}

/// The gradient where `x >= 0`, else 0 (f32 or bf16).
pub fn relu_backward(
    grad: (&CudaStorage, &Layout),
    x: (&CudaStorage, &Layout),
) -> Result<(CudaStorage, Shape)> {
    match x.0.dtype() {
        DType::F32 => relu_backward_of::<f32>(grad, x, "cumind_relu_backward_f32"),
        DType::BF16 => relu_backward_of::<bf16>(grad, x, "cumind_relu_backward_bf16"),
        other => Err(no_kernel("ReLU backward", other)),
    }
}

fn relu_backward_of<T: CudaDType + DeviceRepr>(
    grad: (&CudaStorage, &Layout),
    x: (&CudaStorage, &Layout),
    kernel: &str,
) -> Result<(CudaStorage, Shape)> {
    let dev = &x.0.device;
    let (gv, xv) = (view::<T>(grad.0, grad.1)?, view::<T>(x.0, x.1)?);
    if gv.len() != xv.len() {
        candle_core::bail!(
            "ReLU backward: {} gradients for {} inputs",
            gv.len(),
            xv.len()
        );
    }
    let n = xv.len();
    let out = output::<T>(dev, n)?;
    let func = dev.get_or_load_custom_func(kernel, MODULE, ptx::FUSED_KERNELS)?;
    let mut b = func.builder();
    b.arg(&gv).arg(&xv).arg(&out).arg(&n);
    // SAFETY: the argument list matches the kernel's signature.
    unsafe { b.launch(elementwise_launch(n)) }.w()?;
    Ok((storage(out, dev), grad.1.shape().clone()))
}

/// Per row, `-sum targets * log_softmax(logits)`: `[B, n]` -> `[B]`.
pub fn soft_cross_entropy(
    logits: (&CudaStorage, &Layout),
    targets: (&CudaStorage, &Layout),
) -> Result<(CudaStorage, Shape)> {
    let dev = &logits.0.device;
    let (rows, n) = rows_and_width(logits.1)?;
    if logits.1.dims() != targets.1.dims() {
        candle_core::bail!(
            "cross-entropy: logits {:?} and targets {:?} differ",
            logits.1.dims(),
            targets.1.dims()
        );
    }
    let (lv, tv) = (
        view::<f32>(logits.0, logits.1)?,
        view::<f32>(targets.0, targets.1)?,
    );
    let out = output::<f32>(dev, rows)?;
    let func =
        dev.get_or_load_custom_func("cumind_soft_cross_entropy_f32", MODULE, ptx::FUSED_KERNELS)?;
    let mut b = func.builder();
    let (rows_i, n_i) = (rows as i32, n as i32);
    b.arg(&lv).arg(&tv).arg(&out).arg(&rows_i).arg(&n_i);
    // SAFETY: the argument list matches the kernel's signature.
    unsafe { b.launch(row_launch(rows)) }.w()?;
    Ok((storage(out, dev), Shape::from(rows)))
}

/// `grad[row] * (softmax(logits) * sum(targets) - targets)`, shaped like the logits.
pub fn soft_cross_entropy_backward(
    grad: (&CudaStorage, &Layout),
    logits: (&CudaStorage, &Layout),
    targets: (&CudaStorage, &Layout),
) -> Result<(CudaStorage, Shape)> {
    let dev = &logits.0.device;
    let (rows, n) = rows_and_width(logits.1)?;
    let (gv, lv, tv) = (
        view::<f32>(grad.0, grad.1)?,
        view::<f32>(logits.0, logits.1)?,
        view::<f32>(targets.0, targets.1)?,
    );
    if gv.len() != rows || tv.len() != rows * n {
        candle_core::bail!("cross-entropy backward: shapes disagree");
    }
    let out = output::<f32>(dev, rows * n)?;
    let func = dev.get_or_load_custom_func(
        "cumind_soft_cross_entropy_backward_f32",
        MODULE,
        ptx::FUSED_KERNELS,
    )?;
    let mut b = func.builder();
    let (rows_i, n_i) = (rows as i32, n as i32);
    b.arg(&gv)
        .arg(&lv)
        .arg(&tv)
        .arg(&out)
        .arg(&rows_i)
        .arg(&n_i);
    // SAFETY: the argument list matches the kernel's signature.
    unsafe { b.launch(row_launch(rows)) }.w()?;
    Ok((storage(out, dev), logits.1.shape().clone()))
}

/// Board geometry of an unfold: channels, height, width, kernel size.
pub struct Patches {
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub k: usize,
}

impl Patches {
    fn args(&self) -> Result<[i32; 4]> {
        let all = [self.c, self.h, self.w, self.k];
        if all.iter().any(|&v| v == 0 || v > i32::MAX as usize) {
            candle_core::bail!(
                "unfold: no kernel for {} channels of {}x{} with a {}x{} kernel",
                self.c,
                self.h,
                self.w,
                self.k,
                self.k
            );
        }
        Ok(all.map(|v| v as i32))
    }
}

/// The name of the unfold kernel `op` (`im2col` or `col2im`) for `dtype` and kernel size
/// `k`: a version with k fixed at compile time for 1, 3 and 5, the general one otherwise.
fn unfold_kernel(op: &str, dtype: DType, k: usize) -> Result<String> {
    let suffix = match dtype {
        DType::F32 => "f32",
        DType::BF16 => "bf16",
        other => return Err(no_kernel(op, other)),
    };
    Ok(match k {
        1 | 3 | 5 => format!("cumind_{op}_k{k}_{suffix}"),
        _ => format!("cumind_{op}_{suffix}"),
    })
}

/// `[B, C, H, W]` -> `[B, H * W, C * k * k]` patches (f32 or bf16; see `network::unfold`).
pub fn im2col(
    x: (&CudaStorage, &Layout),
    patches: &Patches,
    out_shape: Shape,
) -> Result<(CudaStorage, Shape)> {
    let mut kernel = unfold_kernel("im2col", x.0.dtype(), patches.k)?;
    // The fixed-size bf16 kernels take one thread per 8-entry chunk of a row where a row is
    // whole chunks (16-byte stores), else one per (patch row, channel), each writing its
    // k * k entries; the others one thread per entry.
    let fixed_bf16 = matches!(patches.k, 1 | 3 | 5) && x.0.dtype() == DType::BF16;
    let row_len = patches.c * patches.k * patches.k;
    let per_thread = if fixed_bf16 && row_len.is_multiple_of(8) {
        kernel.push_str("x8");
        8
    } else if fixed_bf16 {
        patches.k * patches.k
    } else {
        1
    };
    let threads = out_shape.elem_count() / per_thread;
    unfold_launch(x, patches, out_shape, threads, &kernel)
}

/// The adjoint of [`im2col`]: `[B, H * W, C * k * k]` -> `[B, C, H, W]`.
pub fn col2im(
    cols: (&CudaStorage, &Layout),
    patches: &Patches,
    out_shape: Shape,
) -> Result<(CudaStorage, Shape)> {
    let kernel = unfold_kernel("col2im", cols.0.dtype(), patches.k)?;
    let threads = out_shape.elem_count();
    unfold_launch(cols, patches, out_shape, threads, &kernel)
}

/// Rows of `src` (`[N, ...]`, contiguous, any dtype of 2 or 4 bytes) picked by `index` (u32,
/// `[R]`) -> `[R, ...]`: a row copy in 16-byte words when the rows and offsets allow, else in
/// 4-byte words (rows of an even number of 2-byte values). An index past `src`'s rows gives a
/// row of zeros.
pub fn gather_rows(
    src: (&CudaStorage, &Layout),
    index: (&CudaStorage, &Layout),
) -> Result<(CudaStorage, Shape)> {
    let dims = src.1.dims();
    let Some((&n, rest)) = dims.split_first() else {
        candle_core::bail!("gather rows: a scalar has no rows");
    };
    let row_len: usize = rest.iter().product();
    let rows = index.1.shape().elem_count();
    let bytes = src.0.dtype().size_in_bytes();
    let row_bytes = row_len * bytes;
    if !row_bytes.is_multiple_of(4) || !matches!(bytes, 2 | 4) {
        candle_core::bail!(
            "gather rows: rows of {row_len} {:?} values are not whole 4-byte words",
            src.0.dtype()
        );
    }
    let (start, _) = src.1.contiguous_offsets().ok_or_else(|| {
        candle_core::Error::Msg("gather rows: the source is not contiguous".into())
    })?;
    if !(start * bytes).is_multiple_of(4) {
        candle_core::bail!("gather rows: the source starts inside a 4-byte word");
    }
    let wide = row_bytes.is_multiple_of(16) && (start * bytes).is_multiple_of(16);
    let word = if wide { 16 } else { 4 };
    let words = row_bytes / word;
    if rows * words > i32::MAX as usize || n > i32::MAX as usize {
        candle_core::bail!("gather rows: {rows} rows of {words} words is too many for the kernel");
    }
    let dev = &src.0.device;
    let iv = view::<u32>(index.0, index.1)?;
    let mut shape = vec![rows];
    shape.extend_from_slice(rest);
    // The source and the output as raw words: a byte view of the storage, whatever its dtype.
    macro_rules! launch {
        ($t:ty) => {{
            let sv = view::<$t>(src.0, src.1)?;
            let out = output::<$t>(dev, rows * row_len)?;
            let func = dev.get_or_load_custom_func(
                if wide {
                    "cumind_gather_rows_w16"
                } else {
                    "cumind_gather_rows_w4"
                },
                MODULE,
                ptx::FUSED_KERNELS,
            )?;
            let mut b = func.builder();
            let (rows_i, words_i, n_i) = (rows as i32, words as i32, n as i32);
            b.arg(&sv)
                .arg(&iv)
                .arg(&out)
                .arg(&rows_i)
                .arg(&words_i)
                .arg(&n_i);
            // SAFETY: the kernel reads `words` words of each picked row (in bounds: indices
            // past the rows give zeros) and writes every word of `out`.
            unsafe { b.launch(elementwise_launch(rows * words)) }.w()?;
            Ok((storage(out, dev), Shape::from(shape)))
        }};
    }
    match src.0.dtype() {
        DType::BF16 => launch!(bf16),
        DType::F16 => launch!(half::f16),
        DType::F32 => launch!(f32),
        other => Err(no_kernel("gather rows", other)),
    }
}

/// Positions per block and filters per block of the implicit convolution (`CONV_BM`,
/// `CONV_BN` and `CONV_THREADS` in the .cu file).
const CONV_BM: u32 = 128;
const CONV_BN: u32 = 64;
const CONV_THREADS: u32 = 256;
/// The staged convolution's widest halo, its channels per step and its positions per block
/// (`ST_HALO`, `ST_BK`, `ST_BM`; its filters per block and threads are the implicit one's).
const STAGED_HALO: i32 = 64;
const STAGED_BK: i32 = 32;
const STAGED_BM: u32 = 128;
/// The most filters of a 1x1 convolution that runs one thread per position (`FEW_FILTERS`).
const FEW_FILTERS: usize = 8;

/// Whether the PTX was built for a compute capability with bf16 tensor-core instructions
/// (8.0 on), and the device has them: else the implicit convolution is not launched.
pub fn implicit_conv_available(dev: &CudaDevice) -> bool {
    let built: u32 = env!("CUMIND_PTX_ARCH").parse().unwrap_or(0);
    if built < 80 {
        return false;
    }
    use candle_core::cuda_backend::cudarc::driver::sys::CUdevice_attribute as A;
    let major = dev
        .cuda_stream()
        .context()
        .attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        .unwrap_or(0);
    major >= 8
}

/// A "same" k x k convolution with stride 1 as one implicit-GEMM kernel on the tensor cores:
/// `x` `[B, C, H, W]`, `filters` `[O, C * k * k]` and `bias` `[O]`, all bf16 and contiguous
/// -> `[B, O, H, W]` bf16 (sums in f32). k is 1, 3 or 5. Boards whose halo fits the staging
/// (up to 62 cells wide for a 3x3 kernel, 29 for a 5x5) run the staged kernel
/// (`cumind_conv_staged_k*`, after the filters are rearranged tap by tap); wider ones the
/// gathering kernel.
pub fn conv_implicit(
    x: (&CudaStorage, &Layout),
    filters: (&CudaStorage, &Layout),
    bias: (&CudaStorage, &Layout),
    patches: &Patches,
) -> Result<(CudaStorage, Shape)> {
    let dev = &x.0.device;
    let [c, h, w, k] = patches.args()?;
    if !matches!(k, 1 | 3 | 5) {
        candle_core::bail!("implicit conv: no kernel for a {k}x{k} filter");
    }
    let (o, entries) = match filters.1.dims() {
        &[o, e] => (o, e),
        dims => candle_core::bail!("implicit conv: filters {dims:?} are not [O, C * k * k]"),
    };
    if entries != (c * k * k) as usize || bias.1.shape().elem_count() != o {
        candle_core::bail!("implicit conv: filters [{o}, {entries}] and a bias of {} for {c} channels and a {k}x{k} kernel", bias.1.shape().elem_count());
    }
    let board = (c * h * w) as usize;
    let n = x.1.shape().elem_count();
    if board == 0 || !n.is_multiple_of(board) {
        candle_core::bail!(
            "implicit conv: input {:?} is not [B, {c}, {h}, {w}]",
            x.1.dims()
        );
    }
    let b = n / board;
    let positions = b * (h * w) as usize;
    let out_len = positions * o;
    if out_len > i32::MAX as usize || n > i32::MAX as usize {
        candle_core::bail!("implicit conv: {out_len} outputs is too many for the 32-bit kernel");
    }
    for (dtype, what) in [
        (x.0.dtype(), "input"),
        (filters.0.dtype(), "filters"),
        (bias.0.dtype(), "bias"),
    ] {
        if dtype != DType::BF16 {
            candle_core::bail!("implicit conv: the {what} is {dtype:?}, the kernel takes bf16");
        }
    }
    let (xv, fv, bv) = (
        view::<bf16>(x.0, x.1)?,
        view::<bf16>(filters.0, filters.1)?,
        view::<bf16>(bias.0, bias.1)?,
    );
    let out = output::<bf16>(dev, out_len)?;
    let conv = ConvCall {
        dev,
        x: &xv,
        filters: &fv,
        bias: &bv,
        out: &out,
        b,
        c,
        h,
        w,
        k,
        o,
    };
    let pad = k / 2;
    let halo = pad * (w + pad) + pad;
    let flat = b * ((h + pad) * (w + pad)) as usize;
    if k == 1 && o <= FEW_FILTERS {
        conv.few_filters()?;
    } else if halo <= STAGED_HALO && flat <= i32::MAX as usize {
        conv.staged(flat)?;
    } else {
        conv.gathering()?;
    }
    Ok((
        storage(out, dev),
        Shape::from((b, o, h as usize, w as usize)),
    ))
}

/// One bf16 convolution's buffers and sizes, checked by [`conv_implicit`], and the three ways
/// to launch it.
struct ConvCall<'a> {
    dev: &'a CudaDevice,
    x: &'a CudaView<'a, bf16>,
    filters: &'a CudaView<'a, bf16>,
    bias: &'a CudaView<'a, bf16>,
    out: &'a CudaSlice<bf16>,
    b: usize,
    c: i32,
    h: i32,
    w: i32,
    k: i32,
    o: usize,
}

impl ConvCall<'_> {
    /// A 1x1 convolution with at most [`FEW_FILTERS`] filters: one thread per position.
    fn few_filters(&self) -> Result<()> {
        let positions = self.b * (self.h * self.w) as usize;
        let func = self.dev.get_or_load_custom_func(
            "cumind_conv1x1_few_bf16",
            MODULE,
            ptx::FUSED_KERNELS,
        )?;
        let mut builder = func.builder();
        let (positions_i, hw, o_i) = (positions as i32, self.h * self.w, self.o as i32);
        builder
            .arg(self.x)
            .arg(self.filters)
            .arg(self.bias)
            .arg(self.out);
        builder.arg(&positions_i).arg(&self.c).arg(&hw).arg(&o_i);
        // SAFETY: the argument list matches the kernel's signature; one thread per position
        // writes its `o` outputs.
        unsafe { builder.launch(thread_per_item(positions)) }.w()?;
        Ok(())
    }

    /// The staged kernel over `flat` padded positions, on filters rearranged tap by tap with
    /// the channels padded to a multiple of [`STAGED_BK`].
    fn staged(&self, flat: usize) -> Result<()> {
        let (c, k, o) = (self.c, self.k, self.o);
        let cpad = (c + STAGED_BK - 1) / STAGED_BK * STAGED_BK;
        let taps = k * k;
        let by_tap_len = o * (taps * cpad) as usize;
        let by_tap = output::<bf16>(self.dev, by_tap_len)?;
        let func = self.dev.get_or_load_custom_func(
            "cumind_conv_filters_by_tap_bf16",
            MODULE,
            ptx::FUSED_KERNELS,
        )?;
        let mut builder = func.builder();
        let o_i = o as i32;
        builder
            .arg(self.filters)
            .arg(&by_tap)
            .arg(&o_i)
            .arg(&c)
            .arg(&taps)
            .arg(&cpad);
        // SAFETY: the argument list matches the kernel's signature; one thread per entry of
        // `by_tap`, each written.
        unsafe { builder.launch(thread_per_item(by_tap_len)) }.w()?;
        let func = self.dev.get_or_load_custom_func(
            &format!("cumind_conv_staged_k{k}_bf16"),
            MODULE,
            ptx::FUSED_KERNELS,
        )?;
        let mut builder = func.builder();
        let boards = self.b as i32;
        builder
            .arg(self.x)
            .arg(&by_tap)
            .arg(self.bias)
            .arg(self.out);
        builder
            .arg(&boards)
            .arg(&c)
            .arg(&cpad)
            .arg(&self.h)
            .arg(&self.w)
            .arg(&o_i);
        // SAFETY: the argument list matches the kernel's signature; every cell of every board
        // is a flat position of one block's tile and is written for every filter (padding
        // positions are skipped); the caller checked that the halo fits the staging.
        unsafe { builder.launch(tile_launch(flat, STAGED_BM, o)) }.w()?;
        Ok(())
    }

    /// The gathering kernel (any board width).
    fn gathering(&self) -> Result<()> {
        let positions = self.b * (self.h * self.w) as usize;
        let func = self.dev.get_or_load_custom_func(
            &format!("cumind_conv_implicit_k{}_bf16", self.k),
            MODULE,
            ptx::FUSED_KERNELS,
        )?;
        let mut builder = func.builder();
        let (positions_i, o_i) = (positions as i32, self.o as i32);
        builder
            .arg(self.x)
            .arg(self.filters)
            .arg(self.bias)
            .arg(self.out);
        builder
            .arg(&positions_i)
            .arg(&self.c)
            .arg(&self.h)
            .arg(&self.w)
            .arg(&o_i);
        // SAFETY: the argument list matches the kernel's signature; every output element is
        // written (each position and filter of the grid's tiles, bounds checked in the kernel).
        unsafe { builder.launch(tile_launch(positions, CONV_BM, self.o)) }.w()?;
        Ok(())
    }
}

/// One thread per item for kernels without a grid-stride loop (no cap on the blocks).
fn thread_per_item(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((n as u32).div_ceil(ELEMENTWISE_BLOCK).max(1), 1, 1),
        block_dim: (ELEMENTWISE_BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The grid of a convolution kernel: blocks of `per_block` positions by [`CONV_BN`] filters.
fn tile_launch(positions: usize, per_block: u32, filters: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (
            (positions as u32).div_ceil(per_block),
            (filters as u32).div_ceil(CONV_BN),
            1,
        ),
        block_dim: (CONV_THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// `threads` threads (a grid-stride loop) writing `out_shape` from the contiguous `input`.
fn unfold_launch(
    input: (&CudaStorage, &Layout),
    patches: &Patches,
    out_shape: Shape,
    threads: usize,
    kernel: &str,
) -> Result<(CudaStorage, Shape)> {
    let n = out_shape.elem_count();
    if n > i32::MAX as usize || input.1.shape().elem_count() > i32::MAX as usize {
        candle_core::bail!("unfold: {n} elements is too many for the 32-bit kernels");
    }
    let [c, h, w, k] = patches.args()?;
    match input.0.dtype() {
        DType::F32 => launch_unfold::<f32>(input, (c, h, w, k), out_shape, threads, kernel),
        DType::BF16 => launch_unfold::<bf16>(input, (c, h, w, k), out_shape, threads, kernel),
        other => Err(no_kernel(kernel, other)),
    }
}

fn launch_unfold<T: CudaDType + DeviceRepr>(
    input: (&CudaStorage, &Layout),
    (c, h, w, k): (i32, i32, i32, i32),
    out_shape: Shape,
    threads: usize,
    kernel: &str,
) -> Result<(CudaStorage, Shape)> {
    let dev = &input.0.device;
    let iv = view::<T>(input.0, input.1)?;
    let n = threads;
    let out = output::<T>(dev, out_shape.elem_count())?;
    let func = dev.get_or_load_custom_func(kernel, MODULE, ptx::FUSED_KERNELS)?;
    let mut b = func.builder();
    b.arg(&iv).arg(&out).arg(&c).arg(&h).arg(&w).arg(&k).arg(&n);
    // SAFETY: the argument list matches the kernel's signature.
    unsafe { b.launch(elementwise_launch(n)) }.w()?;
    Ok((storage(out, dev), out_shape))
}
