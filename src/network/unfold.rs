//! Convolutions for CUDA. In f32, patches times a matrix: `im2col` unfolds each k x k
//! neighbourhood of a board into a row, one cuBLAS product applies the filters, and the
//! backward pass folds the patches' gradient back (`col2im`). In bf16, one implicit-GEMM
//! kernel on the tensor cores that gathers the patches inside the product
//! ([`conv2d_implicit`]), whose backward pass recomputes them instead of keeping them.
//!
//! candle 0.11 computes a CUDA conv2d the same way, but its im2col kernel derives every index
//! with 64-bit divisions: on an H200 it took 0.46 ms per convolution of a batch of 1,024
//! Connect Four boards, 12 times the matrix product (docs/benchmarks.md). The kernels here use
//! 32-bit indices. The CPU keeps candle's conv2d (`Conv2d::forward` chooses); the CPU
//! implementations below are what the CUDA kernels are tested against, and they let the tests
//! check the whole construction against candle's conv2d on any machine.

use candle_core::{CpuStorage, CustomOp1, DType, Layout, Shape, Tensor};

use super::fused::{add_bias, fused_kernels, narrowed, widened};
use super::layers::cast;

/// Whether convolutions of `x` take this module's path: a CUDA tensor in a `cuda` build with
/// the fused kernels on, in f32 or bf16, small enough for 32-bit indices.
pub fn unfolds(x: &Tensor, kernel: usize) -> bool {
    cfg!(feature = "cuda")
        && x.device().is_cuda()
        && fused_kernels()
        && matches!(x.dtype(), DType::F32 | DType::BF16)
        && x.rank() == 4
        && x.elem_count().saturating_mul(kernel * kernel) < i32::MAX as usize
}

/// A "same" convolution with stride 1, as patches times the filters: `x` `[B, C, H, W]`,
/// `weight` `[O, C, k, k]` and `bias` `[O]` in `x`'s dtype -> `[B, O, H, W]`.
pub fn conv2d(x: &Tensor, weight: &Tensor, bias: &Tensor) -> candle_core::Result<Tensor> {
    let (b, c, h, w) = x.dims4()?;
    let (o, wc, k, k2) = weight.dims4()?;
    if wc != c || k != k2 || k % 2 == 0 {
        candle_core::bail!(
            "unfolded conv2d: a {o}x{wc}x{k}x{k2} filter for {c} channels (needs a square, odd kernel)"
        );
    }
    let cols = im2col(x, k)?.reshape((b * h * w, c * k * k))?;
    let filters = cast(weight, x.dtype())?.reshape((o, c * k * k))?;
    let y = add_bias(&cols.matmul(&filters.t()?)?, &cast(bias, x.dtype())?)?;
    y.reshape((b, h * w, o))?
        .transpose(1, 2)?
        .contiguous()?
        .reshape((b, o, h, w))
}

/// Whether a bf16 convolution of `x` with a `kernel` x `kernel` filter runs as one
/// implicit-GEMM kernel on the tensor cores ([`conv2d_implicit`]): [`unfolds`], bf16, a kernel
/// size of 1, 3 or 5, and a GPU (and PTX) of compute capability 8.0 or more.
pub fn convolves_implicitly(x: &Tensor, kernel: usize) -> bool {
    unfolds(x, kernel) && x.dtype() == DType::BF16 && matches!(kernel, 1 | 3 | 5) && {
        #[cfg(feature = "cuda")]
        {
            static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
            *AVAILABLE.get_or_init(|| match x.device().as_cuda_device() {
                Ok(dev) => super::fused_cuda::implicit_conv_available(dev),
                Err(_) => false,
            })
        }
        #[cfg(not(feature = "cuda"))]
        false
    }
}

/// A "same" convolution with stride 1 in bf16 as one implicit-GEMM kernel on CUDA (the
/// patches are gathered inside the matrix product, never written out), with a backward pass
/// that recomputes the patches instead of keeping them: the input gradient is the output
/// gradient times the filters folded back by `col2im`, the filter gradient the output
/// gradient times `im2col`'s patches of the input, the bias gradient a sum of rows. `x`
/// `[B, C, H, W]`, `weight` `[O, C, k, k]` and `bias` `[O]` in bf16 -> `[B, O, H, W]` bf16.
/// On the CPU the same op runs as a plain loop (the reference the CUDA kernel is tested
/// against).
pub fn conv2d_implicit(x: &Tensor, weight: &Tensor, bias: &Tensor) -> candle_core::Result<Tensor> {
    let (_, c, h, w) = x.dims4()?;
    let (o, wc, k, k2) = weight.dims4()?;
    if wc != c || k != k2 || k % 2 == 0 {
        candle_core::bail!(
            "implicit conv2d: a {o}x{wc}x{k}x{k2} filter for {c} channels (needs a square, odd kernel)"
        );
    }
    let filters = weight.reshape((o, c * k * k))?.contiguous()?;
    x.contiguous()?.apply_op3(
        &filters,
        &bias.contiguous()?,
        ImplicitConv(Geometry { c, h, w, k }),
    )
}

/// See [`conv2d_implicit`]: arguments x `[B, C, H, W]`, filters `[O, C * k * k]`, bias `[O]`.
struct ImplicitConv(Geometry);

impl candle_core::CustomOp3 for ImplicitConv {
    fn name(&self) -> &'static str {
        "cumind-implicit-conv"
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
        let g = self.0;
        let board = g.c * g.h * g.w;
        let b = g.samples(l1.shape(), board)?;
        let (x, filters, bias) = (widened(s1, l1)?, widened(s2, l2)?, widened(s3, l3)?);
        let entries = g.patch_len();
        let o = bias.len();
        if filters.len() != o * entries {
            candle_core::bail!(
                "implicit conv: {} filter values for {o} x {entries}",
                filters.len()
            );
        }
        let hw = g.h * g.w;
        let mut out = vec![0f32; b * o * hw];
        let mut patch = vec![0f32; entries];
        for (sample, out) in x.chunks_exact(board).zip(out.chunks_exact_mut(o * hw)) {
            for y in 0..g.h {
                for xx in 0..g.w {
                    for (v, i) in patch.iter_mut().zip(g.sources(y, xx)) {
                        *v = i.map_or(0.0, |i| sample[i]);
                    }
                    for (f, row) in filters.chunks_exact(entries).enumerate() {
                        let dot: f32 = row.iter().zip(&patch).map(|(a, b)| a * b).sum();
                        out[f * hw + y * g.w + xx] = dot + bias[f];
                    }
                }
            }
        }
        Ok((narrowed(out, s1), Shape::from((b, o, g.h, g.w))))
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
        super::fused_cuda::conv_implicit((s1, l1), (s2, l2), (s3, l3), &self.0.into())
    }

    fn bwd(
        &self,
        x: &Tensor,
        filters: &Tensor,
        _bias: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let g = self.0;
        let (b, o, h, w) = grad.dims4()?;
        let taps = g.k * g.k;
        let grad = grad.contiguous()?;
        // The input gradient is itself a "same" convolution of the output gradient: with the
        // filters' input and output channels swapped and each filter turned by 180 degrees,
        // dx[b, ci, y, x] = sum over (o, ky, kx) of w[o, ci, k-1-ky, k-1-kx] g[b, o, y+ky-p, x+kx-p].
        let reversed: Vec<u32> = (0..taps as u32).rev().collect();
        let reversed = Tensor::from_vec(reversed, taps, grad.device())?;
        let turned = filters
            .reshape((o, g.c, taps))?
            .index_select(&reversed, 2)?
            .transpose(0, 1)?
            .contiguous()?
            .reshape((g.c, o * taps))?;
        let zero_bias = Tensor::zeros(g.c, grad.dtype(), grad.device())?;
        let dx = grad.apply_op3_no_bwd(
            &turned,
            &zero_bias,
            &ImplicitConv(Geometry {
                c: o,
                h: g.h,
                w: g.w,
                k: g.k,
            }),
        )?;
        // [B, O, H, W] -> one row of O per position: [B * H * W, O].
        let rows = grad
            .reshape((b, o, h * w))?
            .transpose(1, 2)?
            .contiguous()?
            .reshape((b * h * w, o))?;
        // The patches are recomputed here rather than kept from the forward pass.
        let cols = x
            .apply_op1_no_bwd(&Im2Col(g))?
            .reshape((b * h * w, g.patch_len()))?;
        let dfilters = rows.t()?.matmul(&cols)?;
        // The bias gradient as a product with ones (f32 sums in cuBLAS over all positions).
        let ones = Tensor::ones((1, b * h * w), grad.dtype(), grad.device())?;
        let dbias = ones.matmul(&rows)?.reshape(o)?;
        Ok((Some(dx), Some(dfilters), Some(dbias)))
    }
}

/// `[B, C, H, W]` -> `[B, H * W, C * k * k]`: row `y * W + x` of sample b holds the k x k
/// neighbourhood of (y, x) in every channel (zero past the edge), channel-major.
pub fn im2col(x: &Tensor, k: usize) -> candle_core::Result<Tensor> {
    let (_, c, h, w) = x.dims4()?;
    x.contiguous()?.apply_op1(Im2Col(Geometry { c, h, w, k }))
}

/// Channels, height, width and kernel size of an unfold.
#[derive(Clone, Copy, Debug)]
struct Geometry {
    c: usize,
    h: usize,
    w: usize,
    k: usize,
}

impl Geometry {
    fn patch_len(&self) -> usize {
        self.c * self.k * self.k
    }

    /// The number of samples in an input of `len` board elements (`[B, C, H, W]`) or patch
    /// elements (`[B, H * W, C * k * k]`), checked against the layout's shape.
    fn samples(&self, shape: &Shape, per_sample: usize) -> candle_core::Result<usize> {
        let n = shape.elem_count();
        if per_sample == 0 || !n.is_multiple_of(per_sample) {
            candle_core::bail!("unfold: {shape:?} does not fit {self:?}");
        }
        Ok(n / per_sample)
    }

    fn cols_shape(&self, b: usize) -> Shape {
        Shape::from((b, self.h * self.w, self.patch_len()))
    }

    fn board_shape(&self, b: usize) -> Shape {
        Shape::from((b, self.c, self.h, self.w))
    }

    /// For each patch element of one position (y, x): its source index within one sample's
    /// board, or None past the edge (row-major over channel, ky, kx).
    fn sources(&self, y: usize, x: usize) -> impl Iterator<Item = Option<usize>> + '_ {
        let p = self.k / 2;
        (0..self.c).flat_map(move |ci| {
            (0..self.k).flat_map(move |ky| {
                (0..self.k).map(move |kx| {
                    let (sy, sx) = ((y + ky).checked_sub(p)?, (x + kx).checked_sub(p)?);
                    (sy < self.h && sx < self.w).then(|| (ci * self.h + sy) * self.w + sx)
                })
            })
        })
    }
}

struct Im2Col(Geometry);

impl CustomOp1 for Im2Col {
    fn name(&self) -> &'static str {
        "cumind-im2col"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let g = self.0;
        let board = g.c * g.h * g.w;
        let b = g.samples(l.shape(), board)?;
        let x = widened(s, l)?;
        let mut cols = Vec::with_capacity(b * g.h * g.w * g.patch_len());
        for sample in x.chunks_exact(board) {
            for y in 0..g.h {
                for xx in 0..g.w {
                    cols.extend(g.sources(y, xx).map(|i| i.map_or(0.0, |i| sample[i])));
                }
            }
        }
        Ok((narrowed(cols, s), g.cols_shape(b)))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        l: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let g = self.0;
        let b = g.samples(l.shape(), g.c * g.h * g.w)?;
        super::fused_cuda::im2col((s, l), &g.into(), g.cols_shape(b))
    }

    fn bwd(
        &self,
        _x: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(grad.contiguous()?.apply_op1(Col2Im(self.0))?))
    }
}

/// The adjoint of [`Im2Col`]: each board element gets the sum of the patch entries that
/// copied it.
struct Col2Im(Geometry);

impl CustomOp1 for Col2Im {
    fn name(&self) -> &'static str {
        "cumind-col2im"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let g = self.0;
        let per_sample = g.h * g.w * g.patch_len();
        let b = g.samples(l.shape(), per_sample)?;
        let cols = widened(s, l)?;
        let board = g.c * g.h * g.w;
        let mut dx = vec![0f32; b * board];
        for (sample, out) in cols
            .chunks_exact(per_sample)
            .zip(dx.chunks_exact_mut(board))
        {
            let mut rows = sample.chunks_exact(g.patch_len());
            for y in 0..g.h {
                for xx in 0..g.w {
                    let row = rows.next().expect("h * w rows per sample");
                    for (v, i) in row.iter().zip(g.sources(y, xx)) {
                        if let Some(i) = i {
                            out[i] += v;
                        }
                    }
                }
            }
        }
        Ok((narrowed(dx, s), g.board_shape(b)))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        l: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let g = self.0;
        let b = g.samples(l.shape(), g.h * g.w * g.patch_len())?;
        super::fused_cuda::col2im((s, l), &g.into(), g.board_shape(b))
    }

    fn bwd(
        &self,
        _x: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(grad.contiguous()?.apply_op1(Im2Col(self.0))?))
    }
}

#[cfg(feature = "cuda")]
impl From<Geometry> for super::fused_cuda::Patches {
    fn from(g: Geometry) -> Self {
        Self {
            c: g.c,
            h: g.h,
            w: g.w,
            k: g.k,
        }
    }
}

#[cfg(test)]
mod tests {
    use candle_core::Device;

    use super::*;
    use crate::testing::convolutions::{assert_all_close, candle_conv, conv_and_gradients};
    use crate::testing::tensors::{max_abs_difference, uniform, values};

    /// The unfolded convolution and candle's conv2d, forward and every gradient, on a
    /// non-square board, for 3x3, 1x1 and 5x5 kernels.
    #[test]
    fn the_unfolded_convolution_equals_candles_conv2d_and_its_gradients() {
        for (k, seed) in [(3, 1), (1, 2), (5, 3)] {
            let ours = conv_and_gradients(k, seed, |x, w, b| conv2d(x, w, b).unwrap());
            let theirs = conv_and_gradients(k, seed, candle_conv);
            assert_all_close(&ours, &theirs, (1e-5, 1e-4), &format!("k = {k}"));
        }
    }

    /// The implicit convolution (its CPU loop and its backward pass of col2im, im2col and
    /// matrix products) equals candle's conv2d with every gradient, in f32; in bf16 it stays
    /// within bf16's rounding of the f32 result.
    #[test]
    fn the_implicit_convolution_equals_candles_conv2d_and_its_gradients() {
        for (k, seed) in [(3, 1), (1, 2), (5, 3)] {
            let implicit = |dtype: DType| {
                move |x: &Tensor, w: &Tensor, b: &Tensor| {
                    let t = |v: &Tensor| v.to_dtype(dtype).unwrap();
                    conv2d_implicit(&t(x), &t(w), &t(b)).unwrap()
                }
            };
            let theirs = conv_and_gradients(k, seed, candle_conv);
            let ours = conv_and_gradients(k, seed, implicit(DType::F32));
            assert_all_close(&ours, &theirs, (1e-5, 1e-4), &format!("k = {k}"));
            // bf16: inputs and results rounded to 8 bits of mantissa (sums of up to 100 terms).
            let half = conv_and_gradients(k, seed, implicit(DType::BF16));
            assert_all_close(&half, &theirs, (0.15, 0.3), &format!("k = {k}, bf16"));
        }
    }

    /// A patch row holds the neighbourhood, channel-major, zero past the edge.
    #[test]
    fn a_patch_row_is_the_neighbourhood_of_its_position() {
        // One sample, 2 channels of a 2x3 board with values 0..12.
        let x = Tensor::arange(0f32, 12.0, &Device::Cpu)
            .unwrap()
            .reshape((1, 2, 2, 3))
            .unwrap();
        let cols = im2col(&x, 3).unwrap();
        assert_eq!(cols.dims(), &[1, 6, 18]);
        // Position (0, 0): rows -1..=1, columns -1..=1 of channel 0, then of channel 1.
        let row0 = cols
            .get(0)
            .unwrap()
            .get(0)
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        #[rustfmt::skip]
        let expected = [
            0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 3.0, 4.0,
            0.0, 0.0, 0.0, 0.0, 6.0, 7.0, 0.0, 9.0, 10.0,
        ];
        assert_eq!(row0, expected);
    }

    /// col2im is im2col's adjoint: <im2col(x), y> = <x, col2im(y)>, also in bf16.
    #[test]
    fn col2im_is_the_adjoint_of_im2col() {
        let g = Geometry {
            c: 3,
            h: 4,
            w: 5,
            k: 3,
        };
        let x = uniform(&[2, 3, 4, 5], 1.0, 7);
        let y = uniform(&[2, 20, 27], 1.0, 8);
        let left = (im2col(&x, 3).unwrap() * &y).unwrap().sum_all().unwrap();
        let back = y.apply_op1(Col2Im(g)).unwrap();
        let right = (&x * back).unwrap().sum_all().unwrap();
        let (l, r) = (
            left.to_scalar::<f32>().unwrap(),
            right.to_scalar::<f32>().unwrap(),
        );
        assert!((l - r).abs() < 1e-4 * l.abs().max(1.0), "{l} against {r}");
        let bf = im2col(&x.to_dtype(DType::BF16).unwrap(), 3).unwrap();
        assert_eq!(bf.dtype(), DType::BF16);
        let f32_cols = values(&im2col(&x, 3).unwrap());
        assert!(max_abs_difference(&values(&bf.to_dtype(DType::F32).unwrap()), &f32_cols) < 1e-2);
    }
}
