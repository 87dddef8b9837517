//! "Same" convolutions with stride 1 on channels-last boards, computed directly: no patch
//! matrix. The input is copied once into a board with a zero border of `k / 2` cells, and
//! each run of a few neighbouring positions of a board row keeps its output channels in
//! vector registers while it walks the `k x k x C` taps: per tap and input channel, a load of
//! the tap's output-channel vectors and one broadcast and fused multiply-add per position and
//! vector. For the conv trunks' small boards and channel counts this is about twice the speed
//! of unfolding the patches and multiplying them with `gemm`, whose products are narrow there
//! (`docs/benchmarks.md`, "The direct convolution").
//!
//! The kernels come in two builds chosen at run time ([`Isa`]): AVX-512 (`avx512.rs`, 16
//! lanes, 32 registers) and AVX2 with FMA (`avx2.rs`, 8 lanes, 16 registers, for the x86 CPUs
//! without AVX-512). Both add each output value's products in the same order (the bias, then
//! tap by tap and input channel by input channel), so they give the same bits. They need an
//! output-channel count that is a multiple of 16, at most 64; [`supported`] says whether a
//! kernel runs, and the callers keep the unfold-and-multiply path for everything else. The
//! adjoint taps turn the same kernel into the input's gradient (a convolution of the output's
//! gradient with the flipped filters). For inference, `bf16.rs` runs the forward convolution
//! in bf16 with f32 sums on CPUs with AVX-512 BF16 (`mcts.inference_dtype`).

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
pub(super) mod bf16;

/// The vector instructions a build of the kernels uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Isa {
    Avx512,
    Avx2,
}

impl Isa {
    /// The widest build this CPU runs, if any.
    fn best() -> Option<Isa> {
        Self::ALL.into_iter().find(|isa| isa.runs_here())
    }

    /// Every build, widest first.
    const ALL: [Isa; 2] = [Isa::Avx512, Isa::Avx2];

    /// Every build this CPU runs, widest first.
    #[cfg(test)]
    fn available() -> Vec<Isa> {
        Self::ALL
            .into_iter()
            .filter(|isa| isa.runs_here())
            .collect()
    }

    #[cfg(target_arch = "x86_64")]
    fn runs_here(self) -> bool {
        match self {
            Isa::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
            Isa::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
            }
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn runs_here(self) -> bool {
        false
    }

    /// Positions per register block of the convolution, and input channels per block of the
    /// filters' gradient, for `o` output channels: as many as leave room in the registers for
    /// the block's accumulators, a tap's (or a gradient's) vectors and the broadcasts.
    fn max_block(self, o: usize) -> usize {
        match self {
            // 32 registers: NB x V accumulators, V tap vectors, a broadcast.
            Isa::Avx512 => match o / 16 {
                1 | 2 => 12,
                3 => 8,
                _ => 6,
            },
            // 16 registers: NB x V accumulators, NB broadcasts, one tap vector.
            Isa::Avx2 => match o / 8 {
                2 => 5,
                4 => 3,
                6 => 2,
                _ => 1,
            },
        }
    }
}

/// Whether a direct kernel runs on this CPU for convolutions with `out_channels` output
/// channels.
pub(super) fn supported(out_channels: usize) -> bool {
    out_channels.is_multiple_of(16) && (16..=64).contains(&out_channels) && Isa::best().is_some()
}

/// Output channels rounded up to the kernel's vector width.
pub(super) fn padded_channels(c: usize) -> usize {
    c.div_ceil(16) * 16
}

/// The length of one filter row (`k * k * C`), checking that `rows` holds `o` of them.
fn filter_row_len(rows: &[f32], o: usize, c: usize, k: usize) -> usize {
    let row_len = k * k * c;
    assert_eq!(
        rows.len(),
        o * row_len,
        "direct conv: filter rows of the wrong size"
    );
    row_len
}

/// The forward taps, `[k, k, C, O]`, from filter rows in patch-row order (`[O, k, k, C]`).
pub(super) fn taps_from_rows(rows: &[f32], o: usize, c: usize, k: usize) -> Vec<f32> {
    let row_len = filter_row_len(rows, o, c, k);
    let mut taps = vec![0f32; rows.len()];
    for (oi, row) in rows.chunks_exact(row_len).enumerate() {
        for (p, &v) in row.iter().enumerate() {
            taps[p * o + oi] = v;
        }
    }
    taps
}

/// The taps of the input's gradient, `[k, k, O, Cp]` with `Cp` = [`padded_channels`]`(C)`
/// (zero beyond `C`), from the same filter rows: the filters flipped in both directions and
/// transposed, so that convolving the output's gradient with them gives the input's.
pub(super) fn adjoint_taps_from_rows(rows: &[f32], o: usize, c: usize, k: usize) -> Vec<f32> {
    let row_len = filter_row_len(rows, o, c, k);
    let cp = padded_channels(c);
    let mut taps = vec![0f32; k * k * o * cp];
    for (oi, row) in rows.chunks_exact(row_len).enumerate() {
        for ky in 0..k {
            for kx in 0..k {
                let flipped = (k - 1 - ky) * k + (k - 1 - kx);
                for ci in 0..c {
                    taps[(flipped * o + oi) * cp + ci] = row[(ky * k + kx) * c + ci];
                }
            }
        }
    }
    taps
}

/// The shape of one convolution: `n` boards of `h` x `w`, `c` input channels, a `k` x `k`
/// kernel (odd), `o` output channels.
#[derive(Clone, Copy, Debug)]
pub(super) struct DirectShape {
    pub n: usize,
    pub h: usize,
    pub w: usize,
    pub c: usize,
    pub k: usize,
    pub o: usize,
}

impl DirectShape {
    /// Values of the bordered copy of the input that [`pad`] writes.
    pub fn padded_len(&self) -> usize {
        let p = self.k / 2;
        self.n * (self.h + 2 * p) * (self.w + 2 * p) * self.c
    }
}

/// Copies `x` (`[n, H, W, C]`) into `padded` (`[n, H + 2p, W + 2p, C]`, p = k / 2) with a
/// zero border.
pub(super) fn pad(s: &DirectShape, x: &[f32], padded: &mut [f32]) {
    let p = s.k / 2;
    let (pw, ph) = (s.w + 2 * p, s.h + 2 * p);
    let (row, prow) = (s.w * s.c, pw * s.c);
    assert!(x.len() >= s.n * s.h * row && padded.len() >= s.padded_len());
    for (board, out) in x
        .chunks_exact(s.h * row)
        .zip(padded.chunks_exact_mut(ph * prow))
        .take(s.n)
    {
        out[..p * prow].fill(0.0);
        out[(p + s.h) * prow..].fill(0.0);
        for (src, dst) in board
            .chunks_exact(row)
            .zip(out[p * prow..].chunks_exact_mut(prow))
        {
            dst[..p * s.c].fill(0.0);
            dst[p * s.c..p * s.c + row].copy_from_slice(src);
            dst[p * s.c + row..].fill(0.0);
        }
    }
}

/// `out` (`[n, H, W, O]`) = the convolution of the bordered input `padded` (see [`pad`]) with
/// `taps` (`[k, k, C, O]`), plus `bias` (`[O]`) where given. The caller checks [`supported`]
/// for `O`.
pub(super) fn conv(
    s: &DirectShape,
    padded: &[f32],
    taps: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
) {
    conv_on(Isa::best().expect(NO_BUILD), s, padded, taps, bias, out);
}

/// The panic of a call on a CPU that runs neither build (callers check [`supported`]).
const NO_BUILD: &str = "direct conv: this CPU has neither AVX-512 nor AVX2 with FMA";

/// What both kernels need of every call: instructions this CPU runs, a shape they are built
/// for ([`check_shape`]) and a whole bordered input.
fn check(isa: Isa, s: &DirectShape, padded: &[f32]) {
    assert!(
        isa.runs_here(),
        "direct conv: {isa:?} does not run on this CPU"
    );
    check_shape(s);
    assert!(padded.len() >= s.padded_len());
}

/// What every build of the kernels needs of a shape: an output-channel count it is built for
/// and an odd kernel.
fn check_shape(s: &DirectShape) {
    assert!(
        s.o.is_multiple_of(16) && (16..=64).contains(&s.o),
        "direct conv: {} output channels",
        s.o
    );
    assert!(s.k % 2 == 1, "direct conv: an even kernel");
}

/// A convolution's output holds the whole result, and its bias, if any, one value per output
/// channel.
fn check_output(s: &DirectShape, bias: Option<&[f32]>, out: &[f32]) {
    assert!(out.len() >= s.n * s.h * s.w * s.o);
    if let Some(b) = bias {
        assert_eq!(b.len(), s.o);
    }
}

/// [`conv`] with the kernels of `isa`.
fn conv_on(
    isa: Isa,
    s: &DirectShape,
    padded: &[f32],
    taps: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
) {
    check(isa, s, padded);
    assert_eq!(taps.len(), s.k * s.k * s.c * s.o);
    check_output(s, bias, out);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the kernels' instructions run on this CPU (`check`), and every pointer they
    // form stays within the buffers whose lengths are asserted here and in `check` (see
    // `conv_boards`).
    unsafe {
        let kernel = match isa {
            Isa::Avx512 => avx512::block,
            Isa::Avx2 => avx2::block,
        };
        conv_boards(s, s.c, padded, taps, bias, out, isa.max_block(s.o), kernel);
    }
}

/// Adds to `grad_taps` (`[k, k, C, O]`, the taps' layout) the gradient of the filters of
/// [`conv`] over the bordered input `padded`, given the output's gradient `g` (`[n, H, W,
/// O]`). The caller checks [`supported`] for `O`.
pub(super) fn filter_gradient(s: &DirectShape, padded: &[f32], g: &[f32], grad_taps: &mut [f32]) {
    filter_gradient_on(Isa::best().expect(NO_BUILD), s, padded, g, grad_taps);
}

/// [`filter_gradient`] with the kernels of `isa`.
fn filter_gradient_on(isa: Isa, s: &DirectShape, padded: &[f32], g: &[f32], grad_taps: &mut [f32]) {
    check(isa, s, padded);
    assert!(g.len() >= s.n * s.h * s.w * s.o);
    assert_eq!(grad_taps.len(), s.k * s.k * s.c * s.o);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the kernels' instructions run on this CPU (`check`), and every pointer they
    // form stays within the buffers whose lengths are asserted here and in `check`.
    unsafe {
        let kernel = match isa {
            Isa::Avx512 => avx512::tap_block,
            Isa::Avx2 => avx2::tap_block,
        };
        filter_gradient_taps(s, padded, g, grad_taps, isa.max_block(s.o), kernel);
    }
}

/// Calls `$kernel::<$n, $v>($args)` for the run-time `$nb` and `$v` out of a table of the
/// instances a build has (`$v` vectors => the block sizes that fit its registers).
#[cfg(target_arch = "x86_64")]
macro_rules! dispatch_table {
    ($kernel:ident, $nb:expr, $v:expr, $args:expr; $($v_lit:literal => [$($n:literal)*]),*) => {
        match ($v, $nb) {
            $($( ($v_lit, $n) => $kernel::<$n, $v_lit>($args), )*)*
            (v, nb) => unreachable!("direct conv: no kernel for {nb} rows of {v} vectors"),
        }
    };
}
#[cfg(target_arch = "x86_64")]
use dispatch_table;

/// One block of the convolution: `NB` neighbouring positions of a row, every output channel.
/// `T` is the input's and the taps' element: f32, or a pair of bf16 channels (`u32`, see
/// [`bf16`]), and `c` counts those per position.
#[cfg(target_arch = "x86_64")]
struct Block<T = f32> {
    /// The bordered input at the block's top-left tap.
    src: *const T,
    row_stride: usize,
    c: usize,
    k: usize,
    o: usize,
    taps: *const T,
    /// The accumulators' start: the bias, or zeros.
    init: *const f32,
    dst: *mut f32,
}

/// One tap's input channels `c0..c0 + CB` against every output channel.
#[cfg(target_arch = "x86_64")]
struct TapBlock {
    /// The bordered input at the tap's offset and channel `c0`.
    src: *const f32,
    g: *const f32,
    n: usize,
    h: usize,
    w: usize,
    c: usize,
    o: usize,
    row_stride: usize,
    board_stride: usize,
    dst: *mut f32,
}

/// Every board and row of the convolution, in blocks of at most `max_nb` positions of even
/// size along each row, each handed to `kernel(positions, block)`; `units` elements of `T`
/// per position of the input.
///
/// # Safety
/// `kernel`'s instructions must run on this CPU; the buffers must hold the lengths
/// [`conv_on`] (or `bf16::conv`) asserts.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
unsafe fn conv_boards<T>(
    s: &DirectShape,
    units: usize,
    padded: &[T],
    taps: &[T],
    bias: Option<&[f32]>,
    out: &mut [f32],
    max_nb: usize,
    kernel: unsafe fn(usize, &Block<T>),
) {
    let p = s.k / 2;
    let (pw, ph) = (s.w + 2 * p, s.h + 2 * p);
    let row_stride = pw * units;
    let blocks = s.w.div_ceil(max_nb);
    let (base, extra) = (s.w / blocks, s.w % blocks);
    let zeros = [0f32; 64];
    let init = bias.unwrap_or(&zeros[..s.o]).as_ptr();
    for b in 0..s.n {
        for y in 0..s.h {
            let mut x0 = 0;
            for blk in 0..blocks {
                let nb = base + usize::from(blk < extra);
                // The block's top-left tap: padded row y, column x0 (the border shifts both
                // by p, which the taps' offsets undo).
                let args = Block {
                    src: padded.as_ptr().add((b * ph + y) * row_stride + x0 * units),
                    row_stride,
                    c: units,
                    k: s.k,
                    o: s.o,
                    taps: taps.as_ptr(),
                    init,
                    dst: out.as_mut_ptr().add(((b * s.h + y) * s.w + x0) * s.o),
                };
                kernel(nb, &args);
                x0 += nb;
            }
        }
    }
}

/// The filters' gradient of every tap, in blocks of at most `max_cb` input channels of even
/// size, each handed to `kernel(channels, block)`.
///
/// # Safety
/// `kernel`'s instructions must run on this CPU; the buffers must hold the lengths
/// [`filter_gradient_on`] asserts.
#[cfg(target_arch = "x86_64")]
unsafe fn filter_gradient_taps(
    s: &DirectShape,
    padded: &[f32],
    g: &[f32],
    grad_taps: &mut [f32],
    max_cb: usize,
    kernel: unsafe fn(usize, &TapBlock),
) {
    let p = s.k / 2;
    let (pw, ph) = (s.w + 2 * p, s.h + 2 * p);
    let blocks = s.c.div_ceil(max_cb);
    let (base, extra) = (s.c / blocks, s.c % blocks);
    for ky in 0..s.k {
        for kx in 0..s.k {
            let tap = ky * s.k + kx;
            let mut c0 = 0;
            for blk in 0..blocks {
                let cb = base + usize::from(blk < extra);
                let args = TapBlock {
                    src: padded.as_ptr().add((ky * pw + kx) * s.c + c0),
                    g: g.as_ptr(),
                    n: s.n,
                    h: s.h,
                    w: s.w,
                    c: s.c,
                    o: s.o,
                    row_stride: pw * s.c,
                    board_stride: ph * pw * s.c,
                    dst: grad_taps.as_mut_ptr().add((tap * s.c + c0) * s.o),
                };
                kernel(cb, &args);
                c0 += cb;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Calls `f(input cell, output cell, tap, input channel, output channel)` for every
    /// product the convolution of `s` makes: the cells as board positions over all `n` boards
    /// (`(b * H + y) * W + x`), the tap as `ky * k + kx`, cells off the board left out.
    fn for_each_product(s: &DirectShape, mut f: impl FnMut(usize, usize, usize, usize, usize)) {
        let p = s.k / 2;
        for b in 0..s.n {
            for y in 0..s.h {
                for xx in 0..s.w {
                    for ky in 0..s.k {
                        for kx in 0..s.k {
                            let (sy, sx) = ((y + ky).wrapping_sub(p), (xx + kx).wrapping_sub(p));
                            if sy >= s.h || sx >= s.w {
                                continue;
                            }
                            let (cell, out) = ((b * s.h + sy) * s.w + sx, (b * s.h + y) * s.w + xx);
                            for c in 0..s.c {
                                for o in 0..s.o {
                                    f(cell, out, ky * s.k + kx, c, o);
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// The convolution written out: `x` `[n, H, W, C]`, filter rows `[O, k, k, C]`.
    pub(super) fn reference(s: &DirectShape, x: &[f32], rows: &[f32], bias: &[f32]) -> Vec<f32> {
        let mut out: Vec<f64> = (0..s.n * s.h * s.w)
            .flat_map(|_| bias.iter().map(|&v| f64::from(v)))
            .collect();
        for_each_product(s, |cell, at, tap, c, o| {
            let wv = rows[(o * s.k * s.k + tap) * s.c + c];
            out[at * s.o + o] += f64::from(x[cell * s.c + c]) * f64::from(wv);
        });
        out.iter().map(|&v| v as f32).collect()
    }

    pub(super) fn values(len: usize, seed: usize) -> Vec<f32> {
        (0..len)
            .map(|i| (((i * 7919 + seed * 104_729) % 2003) as f32 / 2003.0) - 0.5)
            .collect()
    }

    fn direct(
        isa: Isa,
        s: &DirectShape,
        x: &[f32],
        taps: &[f32],
        bias: Option<&[f32]>,
    ) -> Vec<f32> {
        let mut padded = vec![f32::NAN; s.padded_len()];
        pad(s, x, &mut padded);
        let mut out = vec![f32::NAN; s.n * s.h * s.w * s.o];
        conv_on(isa, s, &padded, taps, bias, &mut out);
        out
    }

    fn assert_near(a: &[f32], b: &[f32], what: &str) {
        assert_eq!(a.len(), b.len());
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x - y).abs() <= 1e-4 * (1.0 + y.abs()),
                "{what}: {x} against {y} at {i}"
            );
        }
    }

    /// Shapes of the presets' trunks and a few that exercise the blocking: a board wider than
    /// a register block, several vector counts, a 5 x 5 kernel, one-channel inputs.
    const SHAPES: [(usize, usize, usize, usize, usize, usize); 8] = [
        (3, 6, 7, 32, 3, 32),
        (2, 6, 7, 39, 3, 32),
        (3, 10, 10, 16, 3, 16),
        (2, 10, 10, 4, 3, 16),
        (2, 5, 19, 7, 3, 48),
        (1, 4, 13, 1, 3, 64),
        (2, 7, 6, 5, 5, 32),
        (1, 1, 1, 3, 3, 16),
    ];

    /// Every build this CPU runs with every shape of [`SHAPES`] (none, with a note, where it
    /// runs neither).
    fn cases() -> Vec<(Isa, DirectShape)> {
        let isas = Isa::available();
        if isas.is_empty() {
            eprintln!("skipped: this CPU has neither AVX-512 nor AVX2, so no direct kernel runs");
        }
        isas.into_iter()
            .flat_map(|isa| {
                SHAPES.map(|(n, h, w, c, k, o)| (isa, DirectShape { n, h, w, c, k, o }))
            })
            .collect()
    }

    #[test]
    fn the_direct_convolution_equals_the_written_out_one() {
        for (isa, s) in cases() {
            let DirectShape { n, h, w, c, k, o } = s;
            let x = values(n * h * w * c, 1);
            let rows = values(o * k * k * c, 2);
            let bias = values(o, 3);
            let want = reference(&s, &x, &rows, &bias);
            let got = direct(isa, &s, &x, &taps_from_rows(&rows, o, c, k), Some(&bias));
            assert_near(&got, &want, &format!("{isa:?} {s:?}"));
        }
    }

    /// The adjoint taps give the input's gradient: <conv(x), g> = <x, conv_adjoint(g)> for
    /// every x and g, checked as the gradient of a random x against the written-out sum.
    #[test]
    fn the_adjoint_taps_give_the_inputs_gradient() {
        for (isa, s) in cases() {
            let DirectShape { n, h, w, c, k, o } = s;
            if padded_channels(c) > 64 {
                continue;
            }
            let rows = values(o * k * k * c, 4);
            let g = values(n * h * w * o, 5);
            let cp = padded_channels(c);
            let adjoint = DirectShape { c: o, o: cp, ..s };
            let taps = adjoint_taps_from_rows(&rows, o, c, k);
            let dx_padded = direct(isa, &adjoint, &g, &taps, None);
            // The written-out gradient: each output's gradient times its filter, added onto
            // the input cells the filter read.
            let mut want = vec![0f64; n * h * w * c];
            for_each_product(&s, |cell, at, tap, ci, oi| {
                let wv = rows[(oi * k * k + tap) * c + ci];
                want[cell * c + ci] += f64::from(g[at * o + oi]) * f64::from(wv);
            });
            let got: Vec<f32> = dx_padded
                .chunks_exact(cp)
                .flat_map(|r| r[..c].to_vec())
                .collect();
            let want: Vec<f32> = want.iter().map(|&v| v as f32).collect();
            assert_near(&got, &want, &format!("adjoint {isa:?} {s:?}"));
            // Beyond the input's channels the padded columns stay zero.
            assert!(dx_padded
                .chunks_exact(cp)
                .all(|r| r[c..].iter().all(|&v| v == 0.0)));
        }
    }

    /// The filters' gradient: each tap's input cell times the output's gradient, summed over
    /// the positions, against the written-out sum (added to what the buffer held).
    #[test]
    fn the_filter_gradient_equals_the_written_out_one() {
        for (isa, s) in cases() {
            let DirectShape { n, h, w, c, k, o } = s;
            let x = values(n * h * w * c, 6);
            let g = values(n * h * w * o, 7);
            let start = values(k * k * c * o, 8);
            let mut padded = vec![f32::NAN; s.padded_len()];
            pad(&s, &x, &mut padded);
            let mut got = start.clone();
            filter_gradient_on(isa, &s, &padded, &g, &mut got);
            let mut want: Vec<f64> = start.iter().map(|&v| f64::from(v)).collect();
            for_each_product(&s, |cell, at, tap, ci, oi| {
                let (xv, gv) = (x[cell * c + ci], g[at * o + oi]);
                want[(tap * c + ci) * o + oi] += f64::from(xv) * f64::from(gv);
            });
            let want: Vec<f32> = want.iter().map(|&v| v as f32).collect();
            assert_near(&got, &want, &format!("filter gradient {isa:?} {s:?}"));
        }
    }

    /// Both builds add each output's products in the same order, so where a CPU runs both
    /// (one with AVX-512) they agree to the bit, convolution and filters' gradient.
    #[test]
    fn the_builds_give_the_same_bits() {
        let isas = Isa::available();
        if isas.len() < 2 {
            eprintln!("skipped: this CPU runs {isas:?}, so there is nothing to compare");
            return;
        }
        for (n, h, w, c, k, o) in SHAPES {
            let s = DirectShape { n, h, w, c, k, o };
            let x = values(n * h * w * c, 9);
            let taps = taps_from_rows(&values(o * k * k * c, 10), o, c, k);
            let bias = values(o, 11);
            let g = values(n * h * w * o, 12);
            let mut padded = vec![f32::NAN; s.padded_len()];
            pad(&s, &x, &mut padded);
            let outputs: Vec<(Vec<f32>, Vec<f32>)> = isas
                .iter()
                .map(|&isa| {
                    let out = direct(isa, &s, &x, &taps, Some(&bias));
                    let mut grad = values(k * k * c * o, 13);
                    filter_gradient_on(isa, &s, &padded, &g, &mut grad);
                    (out, grad)
                })
                .collect();
            for (isa, (out, grad)) in isas.iter().zip(&outputs).skip(1) {
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(out), bits(&outputs[0].0), "{isa:?} convolution {s:?}");
                assert_eq!(bits(grad), bits(&outputs[0].1), "{isa:?} gradient {s:?}");
            }
        }
    }

    #[test]
    fn it_declines_what_the_kernel_cannot_do() {
        assert!(!supported(8));
        assert!(!supported(24));
        assert!(!supported(80));
        assert_eq!(padded_channels(39), 48);
        assert_eq!(padded_channels(16), 16);
    }
}
