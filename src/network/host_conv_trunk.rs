//! A whole conv trunk on the CPU as one op: the stem (conv3x3 -> plane norm -> ReLU) and the
//! residual blocks (conv3x3 -> norm -> ReLU -> conv3x3 -> norm, plus the block's input, then
//! ReLU), forward and backward, on host buffers in f32.
//!
//! Layer by layer (`conv::ConvTrunk` with `host_conv`), a trunk is about ten candle ops per
//! layer, each a pass over the batch, a fresh tensor, a change of layout around each matrix
//! product and a wait for the rayon pool; in a training step of the Connect Four conv preset that
//! overhead was over half the time (docs/benchmarks.md). Here a batch is split into chunks of
//! whole samples, and each chunk goes through every layer on one thread, channels-last
//! (`[positions, channels]`, so a convolution's product is already the next layer's input):
//! convolve with `direct_conv`'s kernel where the CPU and the channel count allow it (else
//! unfold the 3 x 3 neighbourhoods into patch rows and multiply them by the filters with
//! `gemm`), starting from the bias, normalise each sample, add the residual and apply the ReLU
//! in place. The backward pass walks the layers back from the activations the forward pass
//! kept: the input's gradient by the direct kernel with the flipped filters and the filters'
//! by the same kernel's tap sums (or products with `gemm` of the recomputed patches, and a
//! fold); and it adds the chunks' parameter gradients in chunk order, so the result does not
//! depend on the number of threads. It equals the layer-by-layer trunk to float rounding, forward and every gradient (tested).
//!
//! The op takes the input `[B, C, H, W]` and the trunk's parameters packed into one vector (a
//! candle custom op takes at most three tensors; the packing is a `cat`, whose backward hands
//! each parameter its slice of the gradient) and returns `[B, channels, H, W]`.

use std::sync::Mutex;

use candle_core::{CpuStorage, CustomOp2, Layout, Shape, Storage, Tensor};
use rayon::prelude::*;

use super::direct_conv::{self, DirectShape};
use super::fused::{fusable, host_paths, narrowed, standardize_row, sum, widened};
use super::host_conv::{filters_to_rows, rows_to_filters, with_scratch};
use super::host_mlp::gemm_strided;
use super::recycled;

/// Board positions per chunk of work (whole samples, at least one): a fixed split whatever
/// the number of threads, so results do not depend on it.
const CHUNK_ROWS: usize = 512;

const NORM_EPS: f32 = 1e-5;

/// Whether a trunk over `x` runs as this module's op: an f32 CPU tensor `[B, C, H, W]` with
/// the fused kernels and the host paths on.
pub fn runs(x: &Tensor) -> bool {
    x.device().is_cpu() && x.rank() == 4 && fusable(&[x]) && host_paths()
}

/// The shape of a trunk: `input` channels in, `channels` in every layer, a `kernel` x
/// `kernel` board of `h` x `w`, a stem layer or not, and `blocks` residual blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrunkShape {
    pub input: usize,
    pub channels: usize,
    pub kernel: usize,
    pub h: usize,
    pub w: usize,
    pub stem: bool,
    pub blocks: usize,
}

impl TrunkShape {
    fn layers(&self) -> usize {
        usize::from(self.stem) + 2 * self.blocks
    }

    fn positions(&self) -> usize {
        self.h * self.w
    }

    /// Input channels of layer `l`.
    fn layer_input(&self, l: usize) -> usize {
        if l == 0 {
            self.input
        } else {
            self.channels
        }
    }

    /// Whether layer `l` closes a residual block (adds the block's input before its ReLU).
    fn closes_block(&self, l: usize) -> bool {
        let stem = usize::from(self.stem);
        l >= stem && (l - stem) % 2 == 1
    }

    /// The layer whose input is the residual that layer `l` adds (when it closes a block).
    fn block_start(&self, l: usize) -> usize {
        l - 1
    }

    /// Values of layer `l`'s filters, `[channels, input, k, k]`.
    fn filter_len(&self, l: usize) -> usize {
        self.channels * self.layer_input(l) * self.kernel * self.kernel
    }

    /// Values of layer `l`'s parameters: filters, bias, norm scale, norm shift.
    fn layer_params(&self, l: usize) -> usize {
        self.filter_len(l) + 3 * self.channels
    }

    fn param_len(&self) -> usize {
        (0..self.layers()).map(|l| self.layer_params(l)).sum()
    }

    /// The direct kernel's shape for `n` boards of this trunk, `c` channels in and `o` out.
    fn direct(&self, n: usize, c: usize, o: usize) -> DirectShape {
        DirectShape {
            n,
            h: self.h,
            w: self.w,
            c,
            k: self.kernel,
            o,
        }
    }

    fn samples_per_chunk(&self) -> usize {
        (CHUNK_ROWS / self.positions().max(1)).max(1)
    }
}

/// The trunk over `x` `[B, input, H, W]` with `params`: per layer, in order, the filters
/// `[channels, in, k, k]`, the bias, the norm's scale and its shift (`[channels]` each). The
/// caller checks [`runs`].
pub fn forward(x: &Tensor, shape: TrunkShape, params: &[&Tensor]) -> candle_core::Result<Tensor> {
    let (b, c, h, w) = x.dims4()?;
    if (c, h, w) != (shape.input, shape.h, shape.w) || shape.kernel.is_multiple_of(2) {
        candle_core::bail!("host conv trunk: an input of {:?} for {shape:?}", x.dims());
    }
    if params.len() != 4 * shape.layers() {
        candle_core::bail!(
            "host conv trunk: {} parameter tensors for {} layers",
            params.len(),
            shape.layers()
        );
    }
    let flat: Vec<Tensor> = params
        .iter()
        .map(|p| p.flatten_all())
        .collect::<candle_core::Result<_>>()?;
    let packed = Tensor::cat(&flat, 0)?;
    if packed.elem_count() != shape.param_len() {
        candle_core::bail!(
            "host conv trunk: {} parameter values for {shape:?} (needs {})",
            packed.elem_count(),
            shape.param_len()
        );
    }
    let op = HostTrunk {
        shape,
        keep: x.track_op() || packed.track_op(),
        input_grad: x.track_op(),
        saved: Mutex::new(None),
    };
    let y = x.contiguous()?.apply_op2(&packed, op)?;
    debug_assert_eq!(y.dims(), &[b, shape.channels, h, w]);
    Ok(y)
}

/// Layer `l`'s parameters, sliced from the packed vector, filters turned to patch-row order
/// (`[channels, k, k, in]`, matching [`unfold`]), and, where the direct kernel runs, the taps
/// the pass needs: the convolution's in the forward pass, its input gradient's in the
/// backward pass (`direct_conv`).
struct LayerParams {
    filters: Vec<f32>,
    bias: Vec<f32>,
    gamma: Vec<f32>,
    beta: Vec<f32>,
    taps: Option<Vec<f32>>,
    /// The forward taps in bf16 pairs (`direct_conv::bf16`), in a trunk for inference in
    /// bf16 on a CPU that runs that kernel; the f32 `taps` are then left out.
    bf16_taps: Option<Vec<u32>>,
    adjoint_taps: Option<Vec<f32>>,
}

/// Which pass the unpacked parameters serve: each needs its own taps of the direct kernel.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pass {
    Forward,
    Backward,
}

/// `bf16`: the forward pass's convolutions in bf16 where the CPU runs the kernel.
fn unpack(shape: &TrunkShape, packed: &[f32], pass: Pass, bf16: bool) -> Vec<LayerParams> {
    let mut at = 0;
    let mut take = |n: usize| {
        let s = &packed[at..at + n];
        at += n;
        s
    };
    (0..shape.layers())
        .map(|l| {
            let c = shape.layer_input(l);
            let (o, k) = (shape.channels, shape.kernel);
            let filters = filters_to_rows(take(shape.filter_len(l)), c, k);
            let bias = take(o).to_vec();
            let gamma = take(o).to_vec();
            let beta = take(o).to_vec();
            let direct = pass == Pass::Forward && direct_conv::supported(o);
            let in_bf16 = direct && bf16 && direct_conv::bf16::runs_here();
            let taps = (direct && !in_bf16).then(|| direct_conv::taps_from_rows(&filters, o, c, k));
            let bf16_taps = in_bf16.then(|| direct_conv::bf16::taps_from_rows(&filters, o, c, k));
            let adjoint_taps = (pass == Pass::Backward
                && direct_conv::supported(direct_conv::padded_channels(c)))
            .then(|| direct_conv::adjoint_taps_from_rows(&filters, o, c, k));
            LayerParams {
                filters,
                bias,
                gamma,
                beta,
                taps,
                bf16_taps,
                adjoint_taps,
            }
        })
        .collect()
}

/// What the forward pass keeps of a chunk for the backward pass: every layer's output (after
/// its ReLU; `acts[0]` is the input) and its normalised values before scale and shift, with
/// each sample's 1 / std, all channels-last. The buffers go back to [`recycled`] when it is
/// dropped.
struct ChunkSaved {
    acts: Vec<Vec<f32>>,
    xhat: Vec<Vec<f32>>,
    rstd: Vec<Vec<f32>>,
}

impl ChunkSaved {
    /// The last layer's output (the input when there is no layer).
    fn output(&self) -> &[f32] {
        self.acts.last().map_or(&[], Vec::as_slice)
    }
}

impl Drop for ChunkSaved {
    fn drop(&mut self) {
        for buffers in [&mut self.acts, &mut self.xhat, &mut self.rstd] {
            recycled::give_all(buffers.drain(..));
        }
    }
}

/// The op's state: the shape, whether to keep activations (the output is differentiated) and
/// the input's gradient (it is tracked), and what the forward pass kept.
struct HostTrunk {
    shape: TrunkShape,
    keep: bool,
    input_grad: bool,
    saved: Mutex<Option<Vec<ChunkSaved>>>,
}

/// `[n, C, H*W]` to `[n, H*W, C]`.
pub(crate) fn to_channels_last(src: &[f32], c: usize, hw: usize, dst: &mut [f32]) {
    for (s, d) in src.chunks_exact(c * hw).zip(dst.chunks_exact_mut(c * hw)) {
        for (ci, plane) in s.chunks_exact(hw).enumerate() {
            for (p, v) in plane.iter().enumerate() {
                d[p * c + ci] = *v;
            }
        }
    }
}

/// `[n, H*W, C]` to `[n, C, H*W]`.
fn to_channels_first(src: &[f32], c: usize, hw: usize, dst: &mut [f32]) {
    for (s, d) in src.chunks_exact(c * hw).zip(dst.chunks_exact_mut(c * hw)) {
        for (ci, plane) in d.chunks_exact_mut(hw).enumerate() {
            for (p, v) in plane.iter_mut().enumerate() {
                *v = s[p * c + ci];
            }
        }
    }
}

/// Patch rows of channels-last boards `x` (`[n, H, W, C]`): a row per position, `[k, k, C]`,
/// zeros where the neighbourhood leaves the board.
fn unfold(x: &[f32], c: usize, shape: &TrunkShape, cols: &mut [f32]) {
    let (h, w, k) = (shape.h, shape.w, shape.kernel);
    let (p, row_len, hw) = (k / 2, k * k * c, h * w);
    for (board, rows) in x
        .chunks_exact(hw * c)
        .zip(cols.chunks_exact_mut(hw * row_len))
    {
        for (i, row) in rows.chunks_exact_mut(row_len).enumerate() {
            let (y, xx) = (i / w, i % w);
            for (ky, line) in row.chunks_exact_mut(k * c).enumerate() {
                let sy = (y + ky).wrapping_sub(p);
                if sy >= h {
                    line.fill(0.0);
                    continue;
                }
                if xx >= p && xx + p < w {
                    // The whole line of the neighbourhood lies on the board: one copy.
                    let at = (sy * w + xx - p) * c;
                    line.copy_from_slice(&board[at..at + k * c]);
                    continue;
                }
                for (kx, dst) in line.chunks_exact_mut(c).enumerate() {
                    let sx = (xx + kx).wrapping_sub(p);
                    if sx >= w {
                        dst.fill(0.0);
                    } else {
                        let at = (sy * w + sx) * c;
                        dst.copy_from_slice(&board[at..at + c]);
                    }
                }
            }
        }
    }
}

/// The adjoint of [`unfold`]: adds each patch entry of `cols` to the board value it came
/// from, in `dx` (`[n, H, W, C]`, added to).
fn fold(cols: &[f32], c: usize, shape: &TrunkShape, dx: &mut [f32]) {
    let (h, w, k) = (shape.h, shape.w, shape.kernel);
    let (p, row_len, hw) = (k / 2, k * k * c, h * w);
    for (board, rows) in dx
        .chunks_exact_mut(hw * c)
        .zip(cols.chunks_exact(hw * row_len))
    {
        for (i, row) in rows.chunks_exact(row_len).enumerate() {
            let (y, xx) = (i / w, i % w);
            for (ky, line) in row.chunks_exact(k * c).enumerate() {
                let sy = (y + ky).wrapping_sub(p);
                if sy >= h {
                    continue;
                }
                if xx >= p && xx + p < w {
                    let at = (sy * w + xx - p) * c;
                    for (d, v) in board[at..at + k * c].iter_mut().zip(line) {
                        *d += v;
                    }
                    continue;
                }
                for (kx, src) in line.chunks_exact(c).enumerate() {
                    let sx = (xx + kx).wrapping_sub(p);
                    if sx < w {
                        let at = (sy * w + sx) * c;
                        for (d, v) in board[at..at + c].iter_mut().zip(src) {
                            *d += v;
                        }
                    }
                }
            }
        }
    }
}

/// One layer forward on a chunk: `out` (`[rows, O]`) = conv(`input`) + bias, normalised per
/// sample (the normalised values into `xhat` and the 1 / std into `rstd` when kept), scaled and
/// shifted per channel, plus `residual`, then ReLU.
#[allow(clippy::too_many_arguments)]
fn layer_forward(
    shape: &TrunkShape,
    c: usize,
    params: &LayerParams,
    input: &[f32],
    residual: Option<&[f32]>,
    cols: &mut [f32],
    out: &mut [f32],
    keep: Option<(&mut [f32], &mut [f32])>,
) {
    let o = shape.channels;
    let row_len = shape.kernel * shape.kernel * c;
    let rows = out.len() / o;
    if let Some(taps) = &params.bf16_taps {
        let direct = shape.direct(rows / shape.positions(), c, o);
        let padded = direct_conv::bf16::words(&mut cols[..direct_conv::bf16::padded_len(&direct)]);
        direct_conv::bf16::pad(&direct, input, padded);
        direct_conv::bf16::conv(&direct, padded, taps, Some(&params.bias), out);
    } else if let Some(taps) = &params.taps {
        let direct = shape.direct(rows / shape.positions(), c, o);
        let padded = &mut cols[..direct.padded_len()];
        direct_conv::pad(&direct, input, padded);
        direct_conv::conv(&direct, padded, taps, Some(&params.bias), out);
    } else {
        let cols = &mut cols[..rows * row_len];
        unfold(input, c, shape, cols);
        for row in out.chunks_exact_mut(o) {
            row.copy_from_slice(&params.bias);
        }
        gemm_strided(
            rows,
            o,
            row_len,
            (cols, row_len, 1),
            (&params.filters, 1, row_len),
            out,
            true,
        );
    }
    let per_sample = shape.positions() * o;
    let (mut kept_xhat, mut kept_rstd) = match keep {
        Some((x, r)) => (Some(x), Some(r)),
        None => (None, None),
    };
    let mut scratch = Vec::new();
    for (s, sample) in out.chunks_exact_mut(per_sample).enumerate() {
        let xhat: &mut [f32] = match kept_xhat.as_deref_mut() {
            Some(xhat) => &mut xhat[s * per_sample..(s + 1) * per_sample],
            None => {
                scratch.resize(per_sample, 0.0);
                &mut scratch
            }
        };
        let rstd = standardize_row(sample, NORM_EPS, xhat);
        if let Some(r) = kept_rstd.as_deref_mut() {
            r[s] = rstd;
        }
        for (v, xh) in sample.chunks_exact_mut(o).zip(xhat.chunks_exact(o)) {
            for ((v, &x), (&g, &b)) in v
                .iter_mut()
                .zip(xh)
                .zip(params.gamma.iter().zip(&params.beta))
            {
                *v = x * g + b;
            }
        }
    }
    if let Some(r) = residual {
        for (v, x) in out.iter_mut().zip(r) {
            *v += x;
        }
    }
    for v in out.iter_mut() {
        *v = v.max(0.0);
    }
}

/// What a layer's norm backward pass reads: the values per sample, the norm's scale, the
/// layer's output (after its ReLU), the normalised values and each sample's 1 / std.
struct NormBackward<'a> {
    per_sample: usize,
    gamma: &'a [f32],
    out: &'a [f32],
    xhat: &'a [f32],
    rstd: &'a [f32],
}

/// A layer's gradient back through its ReLU and its per-sample norm, in place in `g`
/// (channels-last): the ReLU's gradient into `residual` when given, the norm's scale and
/// shift gradients and the bias's (the sum of the result) added into `grads`. Two passes
/// over each sample, sums kept per channel.
fn norm_backward(
    norm: NormBackward<'_>,
    g: &mut [f32],
    mut residual: Option<&mut [f32]>,
    (dbias, dgamma, dbeta): (&mut [f32], &mut [f32], &mut [f32]),
) {
    let o = norm.gamma.len();
    let per_sample = norm.per_sample;
    let inv = 1.0 / per_sample as f32;
    let (mut sum_d, mut sum_dx) = (vec![0f32; o], vec![0f32; o]);
    for (s, ((gs, xs), outs)) in g
        .chunks_exact_mut(per_sample)
        .zip(norm.xhat.chunks_exact(per_sample))
        .zip(norm.out.chunks_exact(per_sample))
        .enumerate()
    {
        sum_d.fill(0.0);
        sum_dx.fill(0.0);
        let mut kept = residual
            .as_deref_mut()
            .map(|r| &mut r[s * per_sample..(s + 1) * per_sample]);
        let (gamma, dgamma, dbeta) = (&norm.gamma[..o], &mut dgamma[..o], &mut dbeta[..o]);
        let (sum_d, sum_dx) = (&mut sum_d[..o], &mut sum_dx[..o]);
        for (p, ((gp, xp), op)) in gs
            .chunks_exact_mut(o)
            .zip(xs.chunks_exact(o))
            .zip(outs.chunks_exact(o))
            .enumerate()
        {
            let (gp, xp, op) = (&mut gp[..o], &xp[..o], &op[..o]);
            for c in 0..o {
                // Through the ReLU, as a mask (a branch here defeats vectorisation).
                let keep = u32::from(op[c] > 0.0).wrapping_neg();
                gp[c] = f32::from_bits(gp[c].to_bits() & keep);
            }
            if let Some(r) = kept.as_deref_mut() {
                r[p * o..(p + 1) * o].copy_from_slice(gp);
            }
            for c in 0..o {
                let (gv, xv) = (gp[c], xp[c]);
                dgamma[c] += gv * xv;
                dbeta[c] += gv;
                let d = gv * gamma[c];
                sum_d[c] += d;
                sum_dx[c] += d * xv;
                gp[c] = d;
            }
        }
        let (mean_d, mean_dx) = (sum(sum_d) * inv, sum(sum_dx) * inv);
        let rstd = norm.rstd[s];
        let dbias = &mut dbias[..o];
        for (gp, xp) in gs.chunks_exact_mut(o).zip(xs.chunks_exact(o)) {
            let (gp, xp) = (&mut gp[..o], &xp[..o]);
            for c in 0..o {
                gp[c] = rstd * (gp[c] - mean_d - xp[c] * mean_dx);
                dbias[c] += gp[c];
            }
        }
    }
}

/// How a caller lays out a board's values: the tensors' `[C, H, W]` or the kernels' own
/// `[H, W, C]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BoardLayout {
    ChannelsFirst,
    ChannelsLast,
}

impl BoardLayout {
    /// `src`, boards of `c` channels over `hw` positions in this layout, into `dst`
    /// channels-last.
    fn load(self, src: &[f32], c: usize, hw: usize, dst: &mut [f32]) {
        match self {
            Self::ChannelsFirst => to_channels_last(src, c, hw, dst),
            Self::ChannelsLast => dst.copy_from_slice(src),
        }
    }

    /// `src`, channels-last boards of `c` channels over `hw` positions, into `dst` in this
    /// layout.
    fn store(self, src: &[f32], c: usize, hw: usize, dst: &mut [f32]) {
        match self {
            Self::ChannelsFirst => to_channels_first(src, c, hw, dst),
            Self::ChannelsLast => dst.copy_from_slice(src),
        }
    }
}

impl HostTrunk {
    /// The trunk on one chunk of `n` samples, `x` and `out` in `layout`; the activations
    /// (kept for the backward pass when `keep`).
    fn forward_chunk(
        &self,
        layers: &[LayerParams],
        x: &[f32],
        out: &mut [f32],
        layout: BoardLayout,
        keep: bool,
    ) -> ChunkSaved {
        let hw = self.shape.positions();
        // Overwritten whole before it is read.
        let mut input = recycled::take(x.len());
        layout.load(x, self.shape.input, hw, &mut input);
        let saved = self.forward_layers(layers, input, keep);
        layout.store(saved.output(), self.shape.channels, hw, out);
        saved
    }

    /// Every layer over the channels-last `input` of a chunk: the activations, and the
    /// norms' values when `keep` (else each layer's input goes back to [`recycled`] once the
    /// next layer no longer needs it, and only the output is left).
    fn forward_layers(&self, layers: &[LayerParams], input: Vec<f32>, keep: bool) -> ChunkSaved {
        let shape = &self.shape;
        let hw = shape.positions();
        let n = input.len() / (shape.input * hw);
        let rows = n * hw;
        let o = shape.channels;
        // Every buffer taken from `recycled` here is overwritten whole before it is read.
        let mut acts = vec![input];
        let (mut xhats, mut rstds) = (Vec::new(), Vec::new());
        // The thread's patch buffer, kept between calls (fresh memory for every chunk
        // would be page faults).
        let cols_len = rows * shape.kernel * shape.kernel * shape.input.max(o);
        with_scratch([cols_len, 0, 0], |[cols, _, _]| {
            for (l, params) in layers.iter().enumerate() {
                let mut y = recycled::take(rows * o);
                let residual = shape
                    .closes_block(l)
                    .then(|| acts[shape.block_start(l)].as_slice());
                let (mut xhat, mut rstd) = if keep {
                    (recycled::take(rows * o), recycled::take(n))
                } else {
                    (Vec::new(), Vec::new())
                };
                let kept = keep.then_some((&mut xhat[..], &mut rstd[..]));
                layer_forward(
                    shape,
                    shape.layer_input(l),
                    params,
                    &acts[l],
                    residual,
                    cols,
                    &mut y,
                    kept,
                );
                if keep {
                    xhats.push(xhat);
                    rstds.push(rstd);
                }
                acts.push(y);
                // Without a backward pass, a layer's input is needed only as the residual
                // of the layer that closes its block.
                if !keep {
                    let needed = if shape.closes_block(l + 1) { l } else { l + 1 };
                    for act in &mut acts[..needed] {
                        recycled::give(std::mem::take(act));
                    }
                }
            }
        });
        ChunkSaved {
            acts,
            xhat: xhats,
            rstd: rstds,
        }
    }

    /// The backward pass of one chunk, `grad` and `dx` in `layout`: the input's gradient
    /// (when wanted) into `dx`, and the chunk's parameter gradients (packed, in
    /// [`TrunkShape`]'s order, filters in patch-row order) returned.
    fn backward_chunk(
        &self,
        layers: &[LayerParams],
        saved: &ChunkSaved,
        grad: &[f32],
        dx: Option<&mut [f32]>,
        layout: BoardLayout,
    ) -> Vec<Vec<f32>> {
        let hw = self.shape.positions();
        // Overwritten whole by the gradient.
        let mut g = recycled::take(grad.len());
        layout.load(grad, self.shape.channels, hw, &mut g);
        let (grads, g_in) = self.backward_layers(layers, saved, g, dx.is_some());
        if let (Some(dx), Some(g_in)) = (dx, g_in) {
            layout.store(&g_in, self.shape.input, hw, dx);
            recycled::give(g_in);
        }
        grads
    }

    /// Every layer back from the channels-last output gradient `g`: the parameters'
    /// gradients (per layer, packed in [`TrunkShape`]'s order, filters in patch-row order) and,
    /// when `input_grad`, the input's gradient, channels-last.
    fn backward_layers(
        &self,
        layers: &[LayerParams],
        saved: &ChunkSaved,
        mut g: Vec<f32>,
        input_grad: bool,
    ) -> (Vec<Vec<f32>>, Option<Vec<f32>>) {
        let shape = &self.shape;
        let (hw, o, k) = (shape.positions(), shape.channels, shape.kernel);
        let n = g.len() / (o * hw);
        let rows = n * hw;
        let per_sample = hw * o;
        let mut grads: Vec<Vec<f32>> = (0..layers.len())
            .map(|l| vec![0f32; shape.layer_params(l)])
            .collect();
        // The gradient of a block's input through its residual path, waiting for the block's
        // first layer.
        let mut pending_residual: Option<Vec<f32>> = None;
        let cols_len = rows * k * k * shape.input.max(o);
        with_scratch([cols_len, cols_len, 0], |[cols, dcols, _]| {
            for l in (0..layers.len()).rev() {
                let params = &layers[l];
                let c = shape.layer_input(l);
                let row_len = k * k * c;
                // Through the ReLU and the norm: g becomes the gradient of the convolution's
                // output. A block's last layer keeps its gradient after the ReLU for the
                // residual path.
                let (filter_len, param) = (shape.filter_len(l), &mut grads[l]);
                let (dfilters, rest) = param.split_at_mut(filter_len);
                let (dbias, rest) = rest.split_at_mut(o);
                let (dgamma, dbeta) = rest.split_at_mut(o);
                let mut residual = shape.closes_block(l).then(|| recycled::take(g.len()));
                norm_backward(
                    NormBackward {
                        per_sample,
                        gamma: &params.gamma,
                        out: &saved.acts[l + 1],
                        xhat: &saved.xhat[l],
                        rstd: &saved.rstd[l],
                    },
                    &mut g,
                    residual.as_deref_mut(),
                    (dbias, dgamma, dbeta),
                );
                if residual.is_some() {
                    pending_residual = residual;
                }
                // Filter gradients [O, k k C] = g^T x patches.
                if direct_conv::supported(o) {
                    let direct = shape.direct(n, c, o);
                    let padded = &mut cols[..direct.padded_len()];
                    direct_conv::pad(&direct, &saved.acts[l], padded);
                    let mut taps = vec![0f32; row_len * o];
                    direct_conv::filter_gradient(&direct, padded, &g, &mut taps);
                    // From the taps' [k k C, O] to the rows' [O, k k C].
                    for (p, tap) in taps.chunks_exact(o).enumerate() {
                        for (oi, v) in tap.iter().enumerate() {
                            dfilters[oi * row_len + p] += v;
                        }
                    }
                } else {
                    let cols = &mut cols[..rows * row_len];
                    unfold(&saved.acts[l], c, shape, cols);
                    gemm_strided(
                        o,
                        row_len,
                        rows,
                        (&g, 1, o),
                        (cols, row_len, 1),
                        dfilters,
                        true,
                    );
                }
                if l == 0 && !input_grad {
                    break;
                }
                let mut g_in = recycled::take(rows * c);
                if let Some(adjoint) = &params.adjoint_taps {
                    // The input's gradient: g convolved with the flipped filters, into
                    // rows of the input's channels rounded up to the kernel's width.
                    let cp = direct_conv::padded_channels(c);
                    let direct = shape.direct(n, o, cp);
                    let padded = &mut dcols[..direct.padded_len()];
                    direct_conv::pad(&direct, &g, padded);
                    if cp == c {
                        direct_conv::conv(&direct, padded, adjoint, None, &mut g_in);
                    } else {
                        let mut wide = recycled::take(rows * cp);
                        direct_conv::conv(&direct, padded, adjoint, None, &mut wide);
                        for (d, w) in g_in.chunks_exact_mut(c).zip(wide.chunks_exact(cp)) {
                            d.copy_from_slice(&w[..c]);
                        }
                        recycled::give(wide);
                    }
                } else {
                    // The input's gradient: g x filters, folded back onto the board.
                    let dcols = &mut dcols[..rows * row_len];
                    gemm_strided(
                        rows,
                        row_len,
                        o,
                        (&g, o, 1),
                        (&params.filters, row_len, 1),
                        dcols,
                        false,
                    );
                    g_in.fill(0.0);
                    fold(dcols, c, shape, &mut g_in);
                }
                if shape.closes_block(l + 1) {
                    if let Some(r) = pending_residual.take() {
                        for (d, v) in g_in.iter_mut().zip(&r) {
                            *d += v;
                        }
                        recycled::give(r);
                    }
                }
                recycled::give(std::mem::replace(&mut g, g_in));
            }
        });
        if input_grad {
            (grads, Some(g))
        } else {
            recycled::give(g);
            (grads, None)
        }
    }
}

/// A trunk's parameters unpacked for both passes, for a caller that hands out the chunks of
/// samples itself: the host conv loss runs a whole unrolled step on each chunk, one chunk per
/// thread, so each call here works on the calling thread alone. The same layer code as the
/// op's, so the same results.
pub struct TrunkOnChunks {
    op: HostTrunk,
    forward: Vec<LayerParams>,
    /// `None` in a trunk built for inference alone.
    backward: Option<Vec<LayerParams>>,
}

/// What [`TrunkOnChunks::forward`] keeps of a chunk for its backward pass.
pub struct ChunkActivations(Option<ChunkSaved>);

impl TrunkOnChunks {
    /// The trunk of `shape` with `packed` parameters: per layer, in order, the filters
    /// `[channels, in, k, k]`, the bias, the norm's scale and its shift.
    pub fn new(shape: TrunkShape, packed: &[f32]) -> candle_core::Result<Self> {
        let mut trunk = Self::for_inference(shape, packed, false)?;
        trunk.backward = Some(unpack(&shape, packed, Pass::Backward, false));
        Ok(trunk)
    }

    /// [`Self::new`] for forward passes alone: [`Self::backward`] must not be called. `bf16`:
    /// the convolutions in bf16 with f32 sums where the CPU runs `direct_conv::bf16`'s
    /// kernel (else in f32).
    pub fn for_inference(
        shape: TrunkShape,
        packed: &[f32],
        bf16: bool,
    ) -> candle_core::Result<Self> {
        if packed.len() != shape.param_len() || shape.kernel.is_multiple_of(2) {
            candle_core::bail!(
                "host conv trunk: {} parameter values for {shape:?} (needs {}, an odd kernel)",
                packed.len(),
                shape.param_len()
            );
        }
        if shape.layers() == 0 && shape.input != shape.channels {
            candle_core::bail!("host conv trunk: no layer to turn {shape:?}'s channels");
        }
        Ok(Self {
            op: HostTrunk {
                shape,
                keep: true,
                input_grad: true,
                saved: Mutex::new(None),
            },
            forward: unpack(&shape, packed, Pass::Forward, bf16),
            backward: None,
        })
    }

    pub fn shape(&self) -> &TrunkShape {
        &self.op.shape
    }

    /// Values of the packed parameters (and of their gradient).
    pub fn param_len(&self) -> usize {
        self.op.shape.param_len()
    }

    /// The trunk over `x` (`[n, H, W, input]`, channels-last) into `out` (`[n, H, W,
    /// channels]`), keeping what the backward pass needs when `keep` (else the activations
    /// are dropped as the pass goes and [`Self::backward`] must not be called).
    pub fn forward(&self, x: &[f32], out: &mut [f32], keep: bool) -> ChunkActivations {
        if self.forward.is_empty() {
            out.copy_from_slice(x);
            return ChunkActivations(None);
        }
        let saved = self
            .op
            .forward_chunk(&self.forward, x, out, BoardLayout::ChannelsLast, keep);
        ChunkActivations(keep.then_some(saved))
    }

    /// The backward pass of [`Self::forward`]'s chunk for the output's gradient `grad`
    /// (channels-last): adds the parameters' gradients into `grads` (packed, filters in
    /// patch-row order: see [`Self::in_parameter_order`]) and writes the input's gradient
    /// (channels-last) into `dx` when given.
    pub fn backward(
        &self,
        saved: &ChunkActivations,
        grad: &[f32],
        dx: Option<&mut [f32]>,
        grads: &mut [f32],
    ) {
        let Some(saved) = &saved.0 else {
            if let Some(dx) = dx {
                dx.copy_from_slice(grad);
            }
            return;
        };
        let backward = self
            .backward
            .as_ref()
            .expect("a backward pass through a trunk built for inference alone");
        let layers = self
            .op
            .backward_chunk(backward, saved, grad, dx, BoardLayout::ChannelsLast);
        let mut at = 0;
        for layer in layers {
            for (g, v) in grads[at..at + layer.len()].iter_mut().zip(&layer) {
                *g += v;
            }
            at += layer.len();
        }
    }

    /// Gradients gathered by [`Self::backward`] in the parameters' own order and layout.
    pub fn in_parameter_order(&self, grads: &[f32]) -> Vec<f32> {
        let shape = &self.op.shape;
        let mut out = Vec::with_capacity(grads.len());
        let mut at = 0;
        for l in 0..shape.layers() {
            let (len, flen) = (shape.layer_params(l), shape.filter_len(l));
            let layer = &grads[at..at + len];
            out.extend(rows_to_filters(
                &layer[..flen],
                shape.layer_input(l),
                shape.kernel,
            ));
            out.extend_from_slice(&layer[flen..]);
            at += len;
        }
        out
    }
}

impl CustomOp2 for HostTrunk {
    fn name(&self) -> &'static str {
        "cumind-host-conv-trunk"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let shape = &self.shape;
        let (x, packed) = (widened(s1, l1)?, widened(s2, l2)?);
        let hw = shape.positions();
        let board = shape.input * hw;
        if board == 0 || !x.len().is_multiple_of(board) || packed.len() != shape.param_len() {
            candle_core::bail!(
                "host conv trunk: {} input and {} parameter values for {shape:?}",
                x.len(),
                packed.len()
            );
        }
        let b = x.len() / board;
        let layers = unpack(shape, &packed, Pass::Forward, false);
        let per_chunk = shape.samples_per_chunk();
        let out_board = shape.channels * hw;
        let mut out = vec![0f32; b * out_board];
        // Without a backward pass each chunk's buffers go back as soon as it is done.
        let saved: Vec<Option<ChunkSaved>> = out
            .par_chunks_mut(per_chunk * out_board)
            .zip(x.par_chunks(per_chunk * board))
            .map(|(out, x)| {
                let saved =
                    self.forward_chunk(&layers, x, out, BoardLayout::ChannelsFirst, self.keep);
                self.keep.then_some(saved)
            })
            .collect();
        if self.keep {
            *self.saved.lock().unwrap_or_else(|e| e.into_inner()) =
                Some(saved.into_iter().flatten().collect());
        }
        Ok((
            narrowed(out, s1),
            Shape::from((b, shape.channels, shape.h, shape.w)),
        ))
    }

    fn bwd(
        &self,
        x: &Tensor,
        packed: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let shape = &self.shape;
        let guard = self.saved.lock().unwrap_or_else(|e| e.into_inner());
        let Some(saved) = guard.as_ref() else {
            candle_core::bail!("host conv trunk: a backward pass without a kept forward pass");
        };
        let grad = grad.contiguous()?;
        let (gs, gl) = grad.storage_and_layout();
        let Storage::Cpu(gcpu) = &*gs else {
            candle_core::bail!("host conv trunk: a gradient off the CPU");
        };
        let grad_values = widened(gcpu, gl)?;
        let (ps, pl) = packed.storage_and_layout();
        let Storage::Cpu(pcpu) = &*ps else {
            candle_core::bail!("host conv trunk: parameters off the CPU");
        };
        let layers = unpack(shape, &widened(pcpu, pl)?, Pass::Backward, false);
        let hw = shape.positions();
        let per_chunk = shape.samples_per_chunk();
        let (board, out_board) = (shape.input * hw, shape.channels * hw);
        let mut dx = vec![0f32; if self.input_grad { x.elem_count() } else { 0 }];
        let grad_chunks = grad_values.par_chunks(per_chunk * out_board);
        let partials: Vec<Vec<Vec<f32>>> = if self.input_grad {
            dx.par_chunks_mut(per_chunk * board)
                .zip(grad_chunks)
                .zip(saved.par_iter())
                .map(|((dx, g), s)| {
                    self.backward_chunk(&layers, s, g, Some(dx), BoardLayout::ChannelsFirst)
                })
                .collect()
        } else {
            grad_chunks
                .zip(saved.par_iter())
                .map(|(g, s)| self.backward_chunk(&layers, s, g, None, BoardLayout::ChannelsFirst))
                .collect()
        };
        let mut dpacked = vec![0f32; shape.param_len()];
        let mut at = 0;
        for l in 0..shape.layers() {
            let len = shape.layer_params(l);
            let flen = shape.filter_len(l);
            let dst = &mut dpacked[at..at + len];
            let mut sum = vec![0f32; len];
            for chunk in &partials {
                for (d, v) in sum.iter_mut().zip(&chunk[l]) {
                    *d += v;
                }
            }
            dst[..flen].copy_from_slice(&rows_to_filters(
                &sum[..flen],
                shape.layer_input(l),
                shape.kernel,
            ));
            dst[flen..].copy_from_slice(&sum[flen..]);
            at += len;
        }
        let device = x.device();
        let dx = if self.input_grad {
            Some(Tensor::from_vec(dx, x.shape(), device)?.to_dtype(x.dtype())?)
        } else {
            None
        };
        Ok((
            dx,
            Some(Tensor::from_vec(dpacked, packed.shape(), device)?.to_dtype(packed.dtype())?),
        ))
    }
}
