//! Convolutions on the CPU in f32: "same" convolutions with stride 1 as patches times the
//! filters, each chunk of samples unfolding its k x k neighbourhoods into a buffer of its own
//! and multiplying it by the filters with the `gemm` crate, the chunks side by side on the
//! rayon pool. The backward pass recomputes the patches and gets all three gradients in one
//! pass over the chunks.
//!
//! candle 0.11's CPU conv2d is fast enough forward, but its backward pass runs a transposed
//! convolution as nested loops of dot products: a training step of a 32-channel, 2-block conv
//! ResNet on Connect Four's board took over 5 s on two cores, almost all of it there
//! (docs/benchmarks.md). The result equals candle's conv2d and its gradients to float rounding
//! (tested).

use std::borrow::Cow;
use std::cell::RefCell;

use candle_core::{CpuStorage, CustomOp3, Layout, Shape, Storage, Tensor};
use rayon::prelude::*;

use super::fused::{fusable, narrowed, widened};
use super::host_mlp::gemm_strided;

/// Board positions per chunk of work (a chunk is whole samples, at least one): a fixed split
/// whatever the number of threads, so results do not depend on it.
const CHUNK_ROWS: usize = 512;

/// Whether a convolution of `x` takes this module's path: an f32 CPU tensor `[B, C, H, W]`
/// with the fused kernels on, and an odd kernel.
pub fn convolves(x: &Tensor, kernel: usize) -> bool {
    x.device().is_cpu() && x.rank() == 4 && kernel % 2 == 1 && fusable(&[x])
}

/// A "same" convolution with stride 1: `x` `[B, C, H, W]`, `weight` `[O, C, k, k]` and `bias`
/// `[O]`, all f32 on the CPU -> `[B, O, H, W]`.
pub fn conv2d(x: &Tensor, weight: &Tensor, bias: &Tensor) -> candle_core::Result<Tensor> {
    let (_, c, h, w) = x.dims4()?;
    let (o, wc, k, k2) = weight.dims4()?;
    if wc != c || k != k2 || k % 2 == 0 {
        candle_core::bail!(
            "host conv2d: a {o}x{wc}x{k}x{k2} filter for {c} channels (needs a square, odd kernel)"
        );
    }
    let filters = weight.reshape((o, c * k * k))?.contiguous()?;
    x.contiguous()?.apply_op3(
        &filters,
        &bias.contiguous()?,
        HostConv(Plan::new(c, h, w, k)),
    )
}

/// A 1 x 1 convolution: `x` `[B, C, H, W]`, `weight` `[O, C, 1, 1]` and `bias` `[O]`, all f32
/// on the CPU -> `[B, O, H, W]`, as sums of whole planes (no patches: each output plane is the
/// bias plus the input planes weighted by the filter). The conv heads' 1 x 1 convolutions
/// (one or two output planes) cost little arithmetic, so the passes over the batch are what
/// counts.
pub fn conv1x1(x: &Tensor, weight: &Tensor, bias: &Tensor) -> candle_core::Result<Tensor> {
    let (_, c, h, w) = x.dims4()?;
    let (o, wc, k, k2) = weight.dims4()?;
    if wc != c || k != 1 || k2 != 1 {
        candle_core::bail!("host conv1x1: a {o}x{wc}x{k}x{k2} filter for {c} channels");
    }
    x.contiguous()?.apply_op3(
        &weight.reshape((o, c))?.contiguous()?,
        &bias.contiguous()?,
        Pointwise { c, hw: h * w },
    )
}

/// See [`conv1x1`]: arguments x `[B, C, H, W]`, filters `[O, C]`, bias `[O]`.
struct Pointwise {
    c: usize,
    hw: usize,
}

impl Pointwise {
    /// Samples per chunk of work (a fixed split, whatever the number of threads).
    fn chunk_samples(&self) -> usize {
        (CHUNK_ROWS / self.hw.max(1)).max(1) * 4
    }
}

impl CustomOp3 for Pointwise {
    fn name(&self) -> &'static str {
        "cumind-host-conv1x1"
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
        let (x, filters, bias) = (widened(s1, l1)?, widened(s2, l2)?, widened(s3, l3)?);
        let (c, hw, o) = (self.c, self.hw, bias.len());
        if filters.len() != o * c || c * hw == 0 || !x.len().is_multiple_of(c * hw) {
            candle_core::bail!(
                "host conv1x1: {} inputs, {} filter values",
                x.len(),
                filters.len()
            );
        }
        let b = x.len() / (c * hw);
        let per_chunk = self.chunk_samples();
        let mut out = vec![0f32; b * o * hw];
        out.par_chunks_mut(per_chunk * o * hw)
            .zip(x.par_chunks(per_chunk * c * hw))
            .for_each(|(out, x)| {
                for (out, x) in out.chunks_exact_mut(o * hw).zip(x.chunks_exact(c * hw)) {
                    for ((plane, f), b) in out
                        .chunks_exact_mut(hw)
                        .zip(filters.chunks_exact(c))
                        .zip(bias.iter())
                    {
                        plane.fill(*b);
                        for (input, wv) in x.chunks_exact(hw).zip(f) {
                            for (d, v) in plane.iter_mut().zip(input) {
                                *d += wv * v;
                            }
                        }
                    }
                }
            });
        let shape = l1.shape().dims();
        Ok((narrowed(out, s1), Shape::from((b, o, shape[2], shape[3]))))
    }

    fn bwd(
        &self,
        x: &Tensor,
        filters: &Tensor,
        bias: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let grad = grad.contiguous()?;
        let (c, hw) = (self.c, self.hw);
        let o = filters.dim(0)?;
        let (dx, partials) = {
            let (xs, xl) = x.storage_and_layout();
            let (fs, fl) = filters.storage_and_layout();
            let (gs, gl) = grad.storage_and_layout();
            let (x, filters, g) = (
                cpu_values(&xs, xl)?,
                cpu_values(&fs, fl)?,
                cpu_values(&gs, gl)?,
            );
            let per_chunk = self.chunk_samples();
            let mut dx = vec![0f32; x.len()];
            let partials: Vec<(Vec<f32>, Vec<f32>)> = dx
                .par_chunks_mut(per_chunk * c * hw)
                .zip(x.par_chunks(per_chunk * c * hw))
                .zip(g.par_chunks(per_chunk * o * hw))
                .map(|((dx, x), g)| {
                    let (mut dfilters, mut dbias) = (vec![0f32; o * c], vec![0f32; o]);
                    for ((dx, x), g) in dx
                        .chunks_exact_mut(c * hw)
                        .zip(x.chunks_exact(c * hw))
                        .zip(g.chunks_exact(o * hw))
                    {
                        for (((gp, f), df), db) in g
                            .chunks_exact(hw)
                            .zip(filters.chunks_exact(c))
                            .zip(dfilters.chunks_exact_mut(c))
                            .zip(dbias.iter_mut())
                        {
                            *db += super::fused::sum(gp);
                            for (((dplane, plane), wv), dw) in dx
                                .chunks_exact_mut(hw)
                                .zip(x.chunks_exact(hw))
                                .zip(f)
                                .zip(df.iter_mut())
                            {
                                *dw += super::fused::dot(gp, plane);
                                for (d, gv) in dplane.iter_mut().zip(gp) {
                                    *d += wv * gv;
                                }
                            }
                        }
                    }
                    (dfilters, dbias)
                })
                .collect();
            (dx, partials)
        };
        let (dfilters, dbias) = sum_in_order(&partials, o * c, o);
        gradients_like((dx, x), (dfilters, filters), (dbias, bias))
    }
}

/// The shape of one convolution. Patch rows are laid out tap-major with the channels
/// innermost (`[ky, kx, C]`), so that a row is k copies of k * C contiguous values of the
/// board zero-padded and turned channels-last; the filters are reordered to match.
#[derive(Clone, Copy, Debug)]
struct Plan {
    c: usize,
    h: usize,
    w: usize,
    k: usize,
}

impl Plan {
    fn new(c: usize, h: usize, w: usize, k: usize) -> Self {
        Self { c, h, w, k }
    }

    fn positions(&self) -> usize {
        self.h * self.w
    }

    /// Entries of one patch row.
    fn patch_len(&self) -> usize {
        self.c * self.k * self.k
    }

    fn board_len(&self) -> usize {
        self.c * self.positions()
    }

    /// Width of the zero-padded board.
    fn padded_width(&self) -> usize {
        self.w + self.k - 1
    }

    /// Values of one zero-padded channels-last board.
    fn padded_len(&self) -> usize {
        (self.h + self.k - 1) * self.padded_width() * self.c
    }

    /// Samples per chunk of work.
    fn chunk_samples(&self) -> usize {
        (CHUNK_ROWS / self.positions()).max(1)
    }

    /// The number of samples in `len` board values, checked.
    fn samples(&self, len: usize) -> candle_core::Result<usize> {
        let board = self.board_len();
        if board == 0 || !len.is_multiple_of(board) {
            candle_core::bail!("host conv2d: {len} input values do not fit {self:?}");
        }
        Ok(len / board)
    }

    /// Index in the padded channels-last board of (y, x) of the padded board, channel 0.
    fn padded_index(&self, y: usize, x: usize) -> usize {
        (y * self.padded_width() + x) * self.c
    }

    /// Writes the patch rows of `boards` (whole samples, `[C, H, W]` each) into `cols`, a row
    /// per position; `padded` is scratch space of [`Plan::padded_len`] values.
    fn unfold(&self, boards: &[f32], cols: &mut [f32], padded: &mut [f32]) {
        let (hw, row_len, kc, p) = (
            self.positions(),
            self.patch_len(),
            self.k * self.c,
            self.k / 2,
        );
        padded.fill(0.0);
        for (sample, rows) in boards
            .chunks_exact(self.board_len())
            .zip(cols.chunks_exact_mut(hw * row_len))
        {
            for (ci, plane) in sample.chunks_exact(hw).enumerate() {
                for (y, line) in plane.chunks_exact(self.w).enumerate() {
                    let start = self.padded_index(y + p, p) + ci;
                    for (x, v) in line.iter().enumerate() {
                        padded[start + x * self.c] = *v;
                    }
                }
            }
            for (i, row) in rows.chunks_exact_mut(row_len).enumerate() {
                let (y, x) = (i / self.w, i % self.w);
                for (ky, part) in row.chunks_exact_mut(kc).enumerate() {
                    let start = self.padded_index(y + ky, x);
                    part.copy_from_slice(&padded[start..start + kc]);
                }
            }
        }
    }

    /// Adds each patch entry of `cols` to the board value it was copied from (the adjoint of
    /// [`Plan::unfold`]); `padded` is scratch space of [`Plan::padded_len`] values.
    fn fold(&self, cols: &[f32], boards: &mut [f32], padded: &mut [f32]) {
        let (hw, row_len, kc, p) = (
            self.positions(),
            self.patch_len(),
            self.k * self.c,
            self.k / 2,
        );
        for (sample, rows) in boards
            .chunks_exact_mut(self.board_len())
            .zip(cols.chunks_exact(hw * row_len))
        {
            padded.fill(0.0);
            for (i, row) in rows.chunks_exact(row_len).enumerate() {
                let (y, x) = (i / self.w, i % self.w);
                for (ky, part) in row.chunks_exact(kc).enumerate() {
                    let start = self.padded_index(y + ky, x);
                    for (d, v) in padded[start..start + kc].iter_mut().zip(part) {
                        *d += v;
                    }
                }
            }
            for (ci, plane) in sample.chunks_exact_mut(hw).enumerate() {
                for (y, line) in plane.chunks_exact_mut(self.w).enumerate() {
                    let start = self.padded_index(y + p, p) + ci;
                    for (x, v) in line.iter_mut().enumerate() {
                        *v += padded[start + x * self.c];
                    }
                }
            }
        }
    }

    /// Filters `[O, C, k, k]` (flattened) reordered to this plan's patch rows: `[O, k, k, C]`.
    fn filters_to_rows(&self, filters: &[f32]) -> Vec<f32> {
        filters_to_rows(filters, self.c, self.k)
    }

    /// The inverse of [`Plan::filters_to_rows`].
    fn rows_to_filters(&self, rows: &[f32]) -> Vec<f32> {
        rows_to_filters(rows, self.c, self.k)
    }
}

/// Filters `[O, C, k, k]` (flattened) reordered to patch rows that are tap-major with the
/// channels innermost: `[O, k, k, C]`.
pub(super) fn filters_to_rows(filters: &[f32], c: usize, k: usize) -> Vec<f32> {
    let (kk, row_len) = (k * k, c * k * k);
    let mut out = vec![0f32; filters.len()];
    for (src, dst) in filters
        .chunks_exact(row_len)
        .zip(out.chunks_exact_mut(row_len))
    {
        for (ci, taps) in src.chunks_exact(kk).enumerate() {
            for (t, v) in taps.iter().enumerate() {
                dst[t * c + ci] = *v;
            }
        }
    }
    out
}

/// The inverse of [`filters_to_rows`].
pub(super) fn rows_to_filters(rows: &[f32], c: usize, k: usize) -> Vec<f32> {
    let (kk, row_len) = (k * k, c * k * k);
    let mut out = vec![0f32; rows.len()];
    for (src, dst) in rows
        .chunks_exact(row_len)
        .zip(out.chunks_exact_mut(row_len))
    {
        for (ci, taps) in dst.chunks_exact_mut(kk).enumerate() {
            for (t, v) in taps.iter_mut().enumerate() {
                *v = src[t * c + ci];
            }
        }
    }
    out
}

/// See [`conv2d`]: arguments x `[B, C, H, W]`, filters `[O, C * k * k]`, bias `[O]`.
struct HostConv(Plan);

impl CustomOp3 for HostConv {
    fn name(&self) -> &'static str {
        "cumind-host-conv"
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
        let plan = &self.0;
        let (x, filters, bias) = (widened(s1, l1)?, widened(s2, l2)?, widened(s3, l3)?);
        let o = bias.len();
        let (hw, row_len) = (plan.positions(), plan.patch_len());
        if filters.len() != o * row_len {
            candle_core::bail!(
                "host conv2d: {} filter values for {o} x {row_len}",
                filters.len()
            );
        }
        let b = plan.samples(x.len())?;
        let filters = plan.filters_to_rows(&filters);
        let per_chunk = plan.chunk_samples();
        let mut out = vec![0f32; b * o * hw];
        out.par_chunks_mut(per_chunk * o * hw)
            .zip(x.par_chunks(per_chunk * plan.board_len()))
            .for_each(|(out, boards)| {
                let rows = boards.len() / plan.board_len() * hw;
                with_scratch(
                    [rows * row_len, rows * o, plan.padded_len()],
                    |[cols, product, padded]| {
                        plan.unfold(boards, cols, padded);
                        // [rows, O] = cols [rows, C k k] x filters^T.
                        gemm_strided(
                            rows,
                            o,
                            row_len,
                            (cols, row_len, 1),
                            (&filters, 1, row_len),
                            product,
                            false,
                        );
                        // Position-major rows to [samples, O, H * W], with the bias.
                        for (sample, prod) in out
                            .chunks_exact_mut(o * hw)
                            .zip(product.chunks_exact(hw * o))
                        {
                            for (f, plane) in sample.chunks_exact_mut(hw).enumerate() {
                                for (p, v) in plane.iter_mut().enumerate() {
                                    *v = prod[p * o + f] + bias[f];
                                }
                            }
                        }
                    },
                );
            });
        Ok((narrowed(out, s1), Shape::from((b, o, plan.h, plan.w))))
    }

    fn bwd(
        &self,
        x: &Tensor,
        filters: &Tensor,
        bias: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let grad = grad.contiguous()?;
        let (dx, dfilters, dbias) = {
            let (xs, xl) = x.storage_and_layout();
            let (fs, fl) = filters.storage_and_layout();
            let (gs, gl) = grad.storage_and_layout();
            backward(
                &self.0,
                &cpu_values(&xs, xl)?,
                &cpu_values(&fs, fl)?,
                &cpu_values(&gs, gl)?,
            )?
        };
        gradients_like((dx, x), (dfilters, filters), (dbias, bias))
    }
}

/// The three gradients (computed in f32) as tensors shaped and typed like the inputs they
/// belong to: an op's backward must hand each input a gradient of its own dtype (a bf16
/// filter that got an f32 gradient broke the sum with its other uses' gradients).
fn gradients_like(
    dx: (Vec<f32>, &Tensor),
    dfilters: (Vec<f32>, &Tensor),
    dbias: (Vec<f32>, &Tensor),
) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
    let like = |(values, input): (Vec<f32>, &Tensor)| -> candle_core::Result<Option<Tensor>> {
        Ok(Some(
            Tensor::from_vec(values, input.shape(), input.device())?.to_dtype(input.dtype())?,
        ))
    };
    Ok((like(dx)?, like(dfilters)?, like(dbias)?))
}

thread_local! {
    /// Each thread's scratch buffers (patches, products, a padded board), kept between calls.
    static SCRATCH: RefCell<[Vec<f32>; 3]> = const { RefCell::new([Vec::new(), Vec::new(), Vec::new()]) };
}

/// `f` on three scratch buffers of `lens` values each (their contents unspecified), the
/// thread's own when free, fresh ones otherwise.
pub(super) fn with_scratch<R>(lens: [usize; 3], f: impl FnOnce([&mut [f32]; 3]) -> R) -> R {
    let run = |buffers: &mut [Vec<f32>; 3]| {
        for (buffer, &len) in buffers.iter_mut().zip(&lens) {
            if buffer.len() < len {
                buffer.resize(len, 0.0);
            }
        }
        let [a, b, c] = buffers;
        f([&mut a[..lens[0]], &mut b[..lens[1]], &mut c[..lens[2]]])
    };
    SCRATCH.with(|scratch| match scratch.try_borrow_mut() {
        Ok(mut buffers) => run(&mut buffers),
        Err(_) => run(&mut [Vec::new(), Vec::new(), Vec::new()]),
    })
}

/// The f32 values of a contiguous CPU storage.
fn cpu_values<'a>(storage: &'a Storage, layout: &Layout) -> candle_core::Result<Cow<'a, [f32]>> {
    match storage {
        Storage::Cpu(cpu) => widened(cpu, layout),
        _ => candle_core::bail!("host conv2d: a tensor off the CPU"),
    }
}

/// The input, filter and bias gradients of a convolution of `x` by `filters` `[O, C k k]`
/// given the output gradient `grad` `[B, O, H, W]`, chunk by chunk: the input's as the output
/// gradient times the filters folded back onto the board, the filters' as the output gradient
/// times the recomputed patches, the bias's as the output gradient's sum over positions. The
/// chunks' filter and bias gradients are added in chunk order.
fn backward(
    plan: &Plan,
    x: &[f32],
    filters: &[f32],
    grad: &[f32],
) -> candle_core::Result<(Vec<f32>, Vec<f32>, Vec<f32>)> {
    let (hw, row_len) = (plan.positions(), plan.patch_len());
    let b = plan.samples(x.len())?;
    let o = filters.len() / row_len;
    if o * row_len != filters.len() || grad.len() != b * o * hw {
        candle_core::bail!(
            "host conv2d backward: {} filter values and {} gradient values for {b} samples of {plan:?}",
            filters.len(),
            grad.len()
        );
    }
    let filters = plan.filters_to_rows(filters);
    let per_chunk = plan.chunk_samples();
    let mut dx = vec![0f32; x.len()];
    let partials: Vec<(Vec<f32>, Vec<f32>)> = dx
        .par_chunks_mut(per_chunk * plan.board_len())
        .zip(x.par_chunks(per_chunk * plan.board_len()))
        .zip(grad.par_chunks(per_chunk * o * hw))
        .map(|((dx, boards), grad)| {
            let rows = boards.len() / plan.board_len() * hw;
            with_scratch(
                [rows * row_len, rows * o, plan.padded_len()],
                |[cols, grad_rows, padded]| {
                    // The output gradient as one row per filter, [O, rows].
                    for (s, sample) in grad.chunks_exact(o * hw).enumerate() {
                        for (f, plane) in sample.chunks_exact(hw).enumerate() {
                            grad_rows[f * rows + s * hw..][..hw].copy_from_slice(plane);
                        }
                    }
                    // Patch gradients [rows, C k k] = grad_rows^T x filters, folded onto the
                    // board.
                    gemm_strided(
                        rows,
                        row_len,
                        o,
                        (grad_rows, 1, rows),
                        (&filters, row_len, 1),
                        cols,
                        false,
                    );
                    plan.fold(cols, dx, padded);
                    // Filter gradients [O, C k k] = grad_rows x patches.
                    plan.unfold(boards, cols, padded);
                    let mut dfilters = vec![0f32; o * row_len];
                    gemm_strided(
                        o,
                        row_len,
                        rows,
                        (grad_rows, rows, 1),
                        (cols, row_len, 1),
                        &mut dfilters,
                        false,
                    );
                    let dbias: Vec<f32> = grad_rows
                        .chunks_exact(rows)
                        .map(|r| r.iter().sum())
                        .collect();
                    (dfilters, dbias)
                },
            )
        })
        .collect();
    let (dfilters, dbias) = sum_in_order(&partials, o * row_len, o);
    Ok((dx, plan.rows_to_filters(&dfilters), dbias))
}

/// The chunks' (filter, bias) gradients added up in chunk order (so the sum does not depend on
/// the number of threads).
fn sum_in_order(
    partials: &[(Vec<f32>, Vec<f32>)],
    filter_len: usize,
    bias_len: usize,
) -> (Vec<f32>, Vec<f32>) {
    let mut dfilters = vec![0f32; filter_len];
    let mut dbias = vec![0f32; bias_len];
    for (df, db) in partials {
        for (d, v) in dfilters.iter_mut().zip(df) {
            *d += v;
        }
        for (d, v) in dbias.iter_mut().zip(db) {
            *d += v;
        }
    }
    (dfilters, dbias)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::convolutions::{
        assert_all_close, candle_conv, conv_and_gradients, conv_and_gradients_of,
    };
    use crate::testing::tensors::{assert_close, uniform, values};

    /// The host convolution and candle's conv2d, forward and every gradient, on a non-square
    /// board, for 3x3, 1x1 and 5x5 kernels.
    #[test]
    fn the_host_convolution_equals_candles_conv2d_and_its_gradients() {
        for (k, seed) in [(3, 1), (1, 2), (5, 3)] {
            let ours = conv_and_gradients(k, seed, |x, w, b| conv2d(x, w, b).unwrap());
            let theirs = conv_and_gradients(k, seed, candle_conv);
            assert_all_close(&ours, &theirs, (1e-5, 1e-4), &format!("k = {k}"));
        }
    }

    /// The 1 x 1 convolution of whole planes and candle's conv2d, forward and every gradient,
    /// over a batch of several chunks.
    #[test]
    fn the_pointwise_convolution_equals_candles_conv2d_and_its_gradients() {
        for (shape, seed) in [((3, 4, 5, 6, 7), 1), ((90, 5, 6, 7, 2), 2)] {
            let ours = conv_and_gradients_of(shape, 1, seed, |x, w, b| conv1x1(x, w, b).unwrap());
            let theirs = conv_and_gradients_of(shape, 1, seed, candle_conv);
            assert_all_close(&ours, &theirs, (1e-5, 1e-3), &format!("{shape:?}"));
        }
    }

    /// Filters and bias in bf16 (a bf16 training step casts its weights once; the CPU
    /// convolves in f32): each gradient comes back in its input's dtype, equal to the all-f32
    /// gradients to bf16 rounding, for the 3x3 and the 1x1 ops.
    #[test]
    fn gradients_come_back_in_each_inputs_dtype() {
        use candle_core::{DType, Var};
        for k in [3, 1] {
            let x = Var::from_tensor(&uniform(&[3, 4, 6, 7], 1.0, 21)).unwrap();
            let weight = uniform(&[5, 4, k, k], 0.5, 22);
            let bias = uniform(&[5], 0.5, 23);
            let run = |dtype: DType| {
                let w = Var::from_tensor(&weight.to_dtype(dtype).unwrap()).unwrap();
                let b = Var::from_tensor(&bias.to_dtype(dtype).unwrap()).unwrap();
                let y = if k == 1 {
                    conv1x1(x.as_tensor(), w.as_tensor(), b.as_tensor())
                } else {
                    conv2d(x.as_tensor(), w.as_tensor(), b.as_tensor())
                }
                .unwrap();
                let grads = y.sqr().unwrap().sum_all().unwrap().backward().unwrap();
                [x.as_tensor(), w.as_tensor(), b.as_tensor()].map(|t| grads.get(t).unwrap().clone())
            };
            let (wide, narrow) = (run(DType::F32), run(DType::BF16));
            for (name, (f, h), dtype) in [
                ("input", (&wide[0], &narrow[0]), DType::F32),
                ("filters", (&wide[1], &narrow[1]), DType::BF16),
                ("bias", (&wide[2], &narrow[2]), DType::BF16),
            ] {
                assert_eq!(h.dtype(), dtype, "k = {k}: the {name}'s gradient");
                let f = values(f);
                let h = values(h);
                let scale = f.iter().fold(0f32, |m, v| m.max(v.abs()));
                for (a, b) in f.iter().zip(&h) {
                    assert!(
                        (a - b).abs() <= 0.02 * scale,
                        "k = {k}: the {name}'s gradient {b} against {a} in f32"
                    );
                }
            }
        }
    }

    /// A batch of several chunks (samples split across chunks, the last one short) gives
    /// each sample what it gets alone, and candle's gradients.
    #[test]
    fn a_batch_of_many_chunks_convolves_each_sample_as_alone() {
        let (b, c, h, w, o) = (53, 5, 6, 7, 4);
        assert!(b > 2 * Plan::new(c, h, w, 3).chunk_samples());
        let x = uniform(&[b, c, h, w], 1.0, 11);
        let weight = uniform(&[o, c, 3, 3], 0.5, 12);
        let bias = uniform(&[o], 0.5, 13);
        let batch = conv2d(&x, &weight, &bias).unwrap();
        for i in [0, 12, 13, 52] {
            let one = conv2d(&x.narrow(0, i, 1).unwrap(), &weight, &bias).unwrap();
            assert_close(
                &values(&batch.narrow(0, i, 1).unwrap()),
                &values(&one),
                1e-6,
                &format!("sample {i}"),
            );
        }
        let shape = (b, c, h, w, o);
        let ours = conv_and_gradients_of(shape, 3, 14, |x, w, b| conv2d(x, w, b).unwrap());
        let theirs = conv_and_gradients_of(shape, 3, 14, candle_conv);
        assert_all_close(&ours, &theirs, (1e-5, 1e-3), "53 samples");
    }
}
