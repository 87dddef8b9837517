//! "Same" convolutions with stride 1 on channels-last boards, computed directly: no patch
//! matrix. The input is copied once into a board with a zero border of `k / 2` cells, and
//! each run of up to a dozen neighbouring positions of a board row keeps its output channels
//! in AVX-512 registers while it walks the `k x k x C` taps: per tap and input channel, one
//! load of the tap's output-channel vector and one broadcast and fused multiply-add per
//! position. For the conv trunks' small boards and channel counts this is about twice the
//! speed of unfolding the patches and multiplying them with `gemm`, whose products are narrow
//! there (`docs/benchmarks.md`, "The direct convolution").
//!
//! The kernel needs AVX-512 (checked at run time) and an output-channel count that is a
//! multiple of 16, at most 64; [`supported`] says whether it runs, and the callers keep the
//! unfold-and-multiply path for everything else. The adjoint taps turn the same kernel into
//! the input's gradient (a convolution of the output's gradient with the flipped filters).

/// Positions per register block for `v` vectors of 16 output channels: as many as leave
/// room in the 32 vector registers for the block's accumulators, the tap's vectors and a
/// broadcast.
fn max_block(v: usize) -> usize {
    match v {
        1 | 2 => 12,
        3 => 8,
        _ => 6,
    }
}

/// Whether the direct kernel runs on this CPU for convolutions with `out_channels` output
/// channels.
pub(super) fn supported(out_channels: usize) -> bool {
    out_channels.is_multiple_of(16) && (16..=64).contains(&out_channels) && has_avx512()
}

#[cfg(target_arch = "x86_64")]
fn has_avx512() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
}

#[cfg(not(target_arch = "x86_64"))]
fn has_avx512() -> bool {
    false
}

/// Output channels rounded up to the kernel's vector width.
pub(super) fn padded_channels(c: usize) -> usize {
    c.div_ceil(16) * 16
}

/// The forward taps, `[k, k, C, O]`, from filter rows in patch-row order (`[O, k, k, C]`).
pub(super) fn taps_from_rows(rows: &[f32], o: usize, c: usize, k: usize) -> Vec<f32> {
    let row_len = k * k * c;
    assert_eq!(
        rows.len(),
        o * row_len,
        "direct conv: filter rows of the wrong size"
    );
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
    let row_len = k * k * c;
    assert_eq!(
        rows.len(),
        o * row_len,
        "direct conv: filter rows of the wrong size"
    );
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
    assert!(supported(s.o), "direct conv: {} output channels here", s.o);
    assert!(s.k % 2 == 1, "direct conv: an even kernel");
    assert!(padded.len() >= s.padded_len());
    assert_eq!(taps.len(), s.k * s.k * s.c * s.o);
    assert!(out.len() >= s.n * s.h * s.w * s.o);
    if let Some(b) = bias {
        assert_eq!(b.len(), s.o);
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: AVX-512 is present (`supported`), and every pointer the kernels form stays
    // within the buffers whose lengths are asserted above (see `x86::conv_boards`).
    unsafe {
        x86::conv_boards(s, padded, taps, bias, out, max_block(s.o / 16));
    }
}

/// Adds to `grad_taps` (`[k, k, C, O]`, the taps' layout) the gradient of the filters of
/// [`conv`] over the bordered input `padded`, given the output's gradient `g` (`[n, H, W,
/// O]`). The caller checks [`supported`] for `O`.
pub(super) fn filter_gradient(s: &DirectShape, padded: &[f32], g: &[f32], grad_taps: &mut [f32]) {
    assert!(supported(s.o), "direct conv: {} output channels here", s.o);
    assert!(s.k % 2 == 1, "direct conv: an even kernel");
    assert!(padded.len() >= s.padded_len());
    assert!(g.len() >= s.n * s.h * s.w * s.o);
    assert_eq!(grad_taps.len(), s.k * s.k * s.c * s.o);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: AVX-512 is present (`supported`), and every pointer the kernels form stays
    // within the buffers whose lengths are asserted above.
    unsafe {
        x86::filter_gradient(s, padded, g, grad_taps, max_block(s.o / 16));
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::DirectShape;

    /// Every board and row of the convolution, in blocks of at most `max_nb` positions of
    /// even size along each row.
    ///
    /// # Safety
    /// AVX-512F must be present; the buffers must hold the lengths [`super::conv`] asserts.
    pub(super) unsafe fn conv_boards(
        s: &DirectShape,
        padded: &[f32],
        taps: &[f32],
        bias: Option<&[f32]>,
        out: &mut [f32],
        max_nb: usize,
    ) {
        let p = s.k / 2;
        let (pw, ph) = (s.w + 2 * p, s.h + 2 * p);
        let row_stride = pw * s.c;
        let blocks = s.w.div_ceil(max_nb);
        let (base, extra) = (s.w / blocks, s.w % blocks);
        let zeros = [0f32; 64];
        let init = bias.unwrap_or(&zeros[..s.o]).as_ptr();
        for b in 0..s.n {
            for y in 0..s.h {
                let mut x0 = 0;
                for blk in 0..blocks {
                    let nb = base + usize::from(blk < extra);
                    // The block's top-left tap: padded row y, column x0 (the border shifts
                    // both by p, which the taps' offsets undo).
                    let src = padded.as_ptr().add((b * ph + y) * row_stride + x0 * s.c);
                    let dst = out.as_mut_ptr().add(((b * s.h + y) * s.w + x0) * s.o);
                    let args = Block {
                        src,
                        row_stride,
                        c: s.c,
                        k: s.k,
                        taps: taps.as_ptr(),
                        init,
                        dst,
                    };
                    dispatch(nb, s.o / 16, &args);
                    x0 += nb;
                }
            }
        }
    }

    /// One block's pointers and sizes.
    struct Block {
        src: *const f32,
        row_stride: usize,
        c: usize,
        k: usize,
        taps: *const f32,
        init: *const f32,
        dst: *mut f32,
    }

    /// Calls `$kernel::<NB, V>($args)` for the run-time `NB` and `V`, over the instances
    /// whose accumulators fit the registers ([`super::max_block`]).
    macro_rules! dispatch {
        ($kernel:ident, $nb:expr, $v:expr, $args:expr) => {
            dispatch!(@table $kernel, $nb, $v, $args;
                1 => [1 2 3 4 5 6 7 8 9 10 11 12],
                2 => [1 2 3 4 5 6 7 8 9 10 11 12],
                3 => [1 2 3 4 5 6 7 8],
                4 => [1 2 3 4 5 6])
        };
        (@table $kernel:ident, $nb:expr, $v:expr, $args:expr;
            $($v_lit:literal => [$($n:literal)*]),*) => {
            match ($v, $nb) {
                $($( ($v_lit, $n) => $kernel::<$n, $v_lit>($args), )*)*
                (v, nb) => unreachable!("direct conv: no kernel for {nb} rows of {v} vectors"),
            }
        };
    }

    /// Runs the kernel instance for `nb` positions and `v` vectors of 16 output channels.
    unsafe fn dispatch(nb: usize, v: usize, args: &Block) {
        dispatch!(block, nb, v, args)
    }

    /// The filters' gradient of every tap, in blocks of at most `max_cb` input channels of
    /// even size.
    ///
    /// # Safety
    /// AVX-512F must be present; the buffers must hold the lengths [`super::filter_gradient`]
    /// asserts.
    pub(super) unsafe fn filter_gradient(
        s: &DirectShape,
        padded: &[f32],
        g: &[f32],
        grad_taps: &mut [f32],
        max_cb: usize,
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
                        row_stride: pw * s.c,
                        board_stride: ph * pw * s.c,
                        dst: grad_taps.as_mut_ptr().add((tap * s.c + c0) * s.o),
                    };
                    dispatch!(tap_block, cb, s.o / 16, &args);
                    c0 += cb;
                }
            }
        }
    }

    /// One tap's input channels `c0..c0 + CB` against every output channel.
    struct TapBlock {
        /// The bordered input at the tap's offset and channel `c0`.
        src: *const f32,
        g: *const f32,
        n: usize,
        h: usize,
        w: usize,
        c: usize,
        row_stride: usize,
        board_stride: usize,
        dst: *mut f32,
    }

    /// Adds to `CB` rows of the tap's gradient (`[CB, 16 V]`) the sum over every position of
    /// the input's cell under the tap times the output's gradient.
    #[target_feature(enable = "avx512f")]
    unsafe fn tap_block<const CB: usize, const V: usize>(a: &TapBlock) {
        let o = 16 * V;
        let mut acc = [[_mm512_setzero_ps(); V]; CB];
        for b in 0..a.n {
            for y in 0..a.h {
                let src = a.src.add(b * a.board_stride + y * a.row_stride);
                let g = a.g.add((b * a.h + y) * a.w * o);
                for x in 0..a.w {
                    let mut gv = [_mm512_setzero_ps(); V];
                    for (v, r) in gv.iter_mut().enumerate() {
                        *r = _mm512_loadu_ps(g.add(x * o + 16 * v));
                    }
                    for (cc, row) in acc.iter_mut().enumerate() {
                        let xv = _mm512_set1_ps(*src.add(x * a.c + cc));
                        for (r, gr) in row.iter_mut().zip(&gv) {
                            *r = _mm512_fmadd_ps(xv, *gr, *r);
                        }
                    }
                }
            }
        }
        for (cc, row) in acc.iter().enumerate() {
            for (v, r) in row.iter().enumerate() {
                let at = a.dst.add(cc * o + 16 * v);
                _mm512_storeu_ps(at, _mm512_add_ps(_mm512_loadu_ps(at), *r));
            }
        }
    }

    /// `NB` neighbouring positions of one row, `16 V` output channels, in registers.
    #[target_feature(enable = "avx512f")]
    unsafe fn block<const NB: usize, const V: usize>(a: &Block) {
        let o = 16 * V;
        let mut acc = [[_mm512_setzero_ps(); V]; NB];
        for row in acc.iter_mut() {
            for (v, r) in row.iter_mut().enumerate() {
                *r = _mm512_loadu_ps(a.init.add(16 * v));
            }
        }
        for ky in 0..a.k {
            for kx in 0..a.k {
                let src = a.src.add(ky * a.row_stride + kx * a.c);
                let taps = a.taps.add((ky * a.k + kx) * a.c * o);
                for ci in 0..a.c {
                    let mut t = [_mm512_setzero_ps(); V];
                    for (v, tv) in t.iter_mut().enumerate() {
                        *tv = _mm512_loadu_ps(taps.add(ci * o + 16 * v));
                    }
                    for (j, row) in acc.iter_mut().enumerate() {
                        let x = _mm512_set1_ps(*src.add(j * a.c + ci));
                        for (r, tv) in row.iter_mut().zip(&t) {
                            *r = _mm512_fmadd_ps(x, *tv, *r);
                        }
                    }
                }
            }
        }
        for (j, row) in acc.iter().enumerate() {
            for (v, r) in row.iter().enumerate() {
                _mm512_storeu_ps(a.dst.add(j * o + 16 * v), *r);
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
    fn reference(s: &DirectShape, x: &[f32], rows: &[f32], bias: &[f32]) -> Vec<f32> {
        let mut out: Vec<f64> = (0..s.n * s.h * s.w)
            .flat_map(|_| bias.iter().map(|&v| f64::from(v)))
            .collect();
        for_each_product(s, |cell, at, tap, c, o| {
            let wv = rows[(o * s.k * s.k + tap) * s.c + c];
            out[at * s.o + o] += f64::from(x[cell * s.c + c]) * f64::from(wv);
        });
        out.iter().map(|&v| v as f32).collect()
    }

    fn values(len: usize, seed: usize) -> Vec<f32> {
        (0..len)
            .map(|i| (((i * 7919 + seed * 104_729) % 2003) as f32 / 2003.0) - 0.5)
            .collect()
    }

    fn direct(s: &DirectShape, x: &[f32], taps: &[f32], bias: Option<&[f32]>) -> Vec<f32> {
        let mut padded = vec![f32::NAN; s.padded_len()];
        pad(s, x, &mut padded);
        let mut out = vec![f32::NAN; s.n * s.h * s.w * s.o];
        conv(s, &padded, taps, bias, &mut out);
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

    #[test]
    fn the_direct_convolution_equals_the_written_out_one() {
        if !supported(16) {
            eprintln!("skipped: this CPU has no AVX-512, so the direct kernel never runs here");
            return;
        }
        for (n, h, w, c, k, o) in SHAPES {
            let s = DirectShape { n, h, w, c, k, o };
            let x = values(n * h * w * c, 1);
            let rows = values(o * k * k * c, 2);
            let bias = values(o, 3);
            let want = reference(&s, &x, &rows, &bias);
            let got = direct(&s, &x, &taps_from_rows(&rows, o, c, k), Some(&bias));
            assert_near(&got, &want, &format!("{s:?}"));
        }
    }

    /// The adjoint taps give the input's gradient: <conv(x), g> = <x, conv_adjoint(g)> for
    /// every x and g, checked as the gradient of a random x against the written-out sum.
    #[test]
    fn the_adjoint_taps_give_the_inputs_gradient() {
        if !supported(16) {
            eprintln!("skipped: this CPU has no AVX-512, so the direct kernel never runs here");
            return;
        }
        for (n, h, w, c, k, o) in SHAPES {
            if padded_channels(c) > 64 {
                continue;
            }
            let s = DirectShape { n, h, w, c, k, o };
            let rows = values(o * k * k * c, 4);
            let g = values(n * h * w * o, 5);
            let cp = padded_channels(c);
            let adjoint = DirectShape { c: o, o: cp, ..s };
            let dx_padded = direct(&adjoint, &g, &adjoint_taps_from_rows(&rows, o, c, k), None);
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
            assert_near(&got, &want, &format!("adjoint {s:?}"));
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
        if !supported(16) {
            eprintln!("skipped: this CPU has no AVX-512, so the direct kernel never runs here");
            return;
        }
        for (n, h, w, c, k, o) in SHAPES {
            let s = DirectShape { n, h, w, c, k, o };
            let x = values(n * h * w * c, 6);
            let g = values(n * h * w * o, 7);
            let start = values(k * k * c * o, 8);
            let mut padded = vec![f32::NAN; s.padded_len()];
            pad(&s, &x, &mut padded);
            let mut got = start.clone();
            filter_gradient(&s, &padded, &g, &mut got);
            let mut want: Vec<f64> = start.iter().map(|&v| f64::from(v)).collect();
            for_each_product(&s, |cell, at, tap, ci, oi| {
                let (xv, gv) = (x[cell * c + ci], g[at * o + oi]);
                want[(tap * c + ci) * o + oi] += f64::from(xv) * f64::from(gv);
            });
            let want: Vec<f32> = want.iter().map(|&v| v as f32).collect();
            assert_near(&got, &want, &format!("filter gradient {s:?}"));
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
