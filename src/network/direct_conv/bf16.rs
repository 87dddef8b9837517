//! The direct convolution in bf16 with f32 accumulation, for inference on CPUs with AVX-512
//! BF16 (Zen 4 and later, Intel from Cooper Lake and Sapphire Rapids on). The input and the
//! taps are rounded to bf16 (8 bits of mantissa; to nearest, ties to even) and stored as pairs
//! of neighbouring channels in one 32-bit word, the low half the even channel; `vdpbf16ps`
//! multiplies 16 such pairs by 16 others and adds both products to 16 f32 accumulators, two
//! input channels in one instruction where the f32 kernel's fused multiply-add takes one. The
//! products of two bf16 values are exact in f32, so the result differs from the f32
//! convolution by the rounding of the input and the taps alone (about 0.4% of each value) and
//! the order of the sums. An odd channel count gets a zero channel to make up its last pair.

use super::DirectShape;

/// Whether this CPU runs the bf16 kernel.
pub(in crate::network) fn runs_here() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `x` rounded to bf16 (to nearest, ties to even), as its 16 bits; a NaN stays a NaN.
/// Branch-free, so that loops over it vectorise.
fn bits(x: f32) -> u32 {
    let b = x.to_bits();
    let rounded = b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16;
    let nan = u32::from(x.is_nan()).wrapping_neg();
    (rounded & !nan) | (((b >> 16) | 0x40) & nan)
}

/// Channels `2q` and `2q + 1` of a position as one word, the first in the low half (zero
/// beyond `c`).
fn pair(values: &[f32], q: usize) -> u32 {
    let lo = bits(values[2 * q]);
    let hi = values.get(2 * q + 1).map_or(0, |&v| bits(v));
    lo | (hi << 16)
}

/// Pairs of channels per position for `c` channels.
pub(in crate::network) fn pairs(c: usize) -> usize {
    c.div_ceil(2)
}

/// The forward taps in bf16 pairs, `[k, k, pairs(C), O]`, from filter rows in patch-row order
/// (`[O, k, k, C]`), as `super::taps_from_rows` lays out the f32 ones.
pub(in crate::network) fn taps_from_rows(rows: &[f32], o: usize, c: usize, k: usize) -> Vec<u32> {
    let row_len = super::filter_row_len(rows, o, c, k);
    let q = pairs(c);
    let mut taps = vec![0u32; k * k * q * o];
    for (oi, row) in rows.chunks_exact(row_len).enumerate() {
        for (tap, channels) in row.chunks_exact(c).enumerate() {
            for p in 0..q {
                taps[(tap * q + p) * o + oi] = pair(channels, p);
            }
        }
    }
    taps
}

/// A scratch buffer of f32 seen as words, for [`pad`]'s bordered copy.
pub(in crate::network) fn words(scratch: &mut [f32]) -> &mut [u32] {
    // SAFETY: f32 and u32 have the same size and alignment, every bit pattern is a valid u32,
    // and the borrow of `scratch` covers the new slice's life.
    unsafe { std::slice::from_raw_parts_mut(scratch.as_mut_ptr().cast::<u32>(), scratch.len()) }
}

/// Words of the bordered copy of the input that [`pad`] writes.
pub(in crate::network) fn padded_len(s: &DirectShape) -> usize {
    let p = s.k / 2;
    s.n * (s.h + 2 * p) * (s.w + 2 * p) * pairs(s.c)
}

/// Copies `x` (`[n, H, W, C]`, f32) into `padded` (`[n, H + 2p, W + 2p, pairs(C)]` words of
/// bf16 pairs, p = k / 2) with a zero border.
pub(in crate::network) fn pad(s: &DirectShape, x: &[f32], padded: &mut [u32]) {
    let p = s.k / 2;
    let q = pairs(s.c);
    let (pw, ph) = (s.w + 2 * p, s.h + 2 * p);
    let prow = pw * q;
    assert!(x.len() >= s.n * s.h * s.w * s.c && padded.len() >= padded_len(s));
    for (board, out) in x
        .chunks_exact(s.h * s.w * s.c)
        .zip(padded.chunks_exact_mut(ph * prow))
        .take(s.n)
    {
        out[..p * prow].fill(0);
        out[(p + s.h) * prow..].fill(0);
        for (src, dst) in board
            .chunks_exact(s.w * s.c)
            .zip(out[p * prow..].chunks_exact_mut(prow))
        {
            dst[..p * q].fill(0);
            let words = &mut dst[p * q..p * q + s.w * q];
            if s.c.is_multiple_of(2) {
                // The row's channels pair up in order across its positions.
                for (word, two) in words.iter_mut().zip(src.chunks_exact(2)) {
                    *word = bits(two[0]) | (bits(two[1]) << 16);
                }
            } else {
                for (position, words) in src.chunks_exact(s.c).zip(words.chunks_exact_mut(q)) {
                    for (i, word) in words.iter_mut().enumerate() {
                        *word = pair(position, i);
                    }
                }
            }
            dst[p * q + s.w * q..].fill(0);
        }
    }
}

/// `out` (`[n, H, W, O]`, f32) = the convolution of the bordered bf16 input `padded` (see
/// [`pad`]) with the bf16 `taps` (see [`taps_from_rows`]), plus `bias` (`[O]`) where given,
/// summed in f32. The caller checks [`runs_here`] and `super::supported` for `O`.
pub(in crate::network) fn conv(
    s: &DirectShape,
    padded: &[u32],
    taps: &[u32],
    bias: Option<&[f32]>,
    out: &mut [f32],
) {
    assert!(runs_here(), "direct conv: this CPU has no AVX-512 BF16");
    super::check_shape(s);
    assert!(padded.len() >= padded_len(s));
    assert_eq!(taps.len(), s.k * s.k * pairs(s.c) * s.o);
    super::check_output(s, bias, out);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the kernel's instructions run on this CPU (`runs_here`), and every pointer it
    // forms stays within the buffers whose lengths are asserted here (see `conv_boards`).
    unsafe {
        super::conv_boards(
            s,
            pairs(s.c),
            padded,
            taps,
            bias,
            out,
            super::Isa::Avx512.max_block(s.o),
            super::avx512::block_bf16,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{reference, values};
    use super::*;

    fn rounded(v: &[f32]) -> Vec<f32> {
        v.iter()
            .map(|&x| half::bf16::from_f32(x).to_f32())
            .collect()
    }

    /// The bf16 kernel equals the convolution of the bf16-rounded input and filters summed
    /// exactly (to f32 rounding), and the f32 convolution to bf16's precision, on the presets'
    /// shapes and ones that exercise the blocking and an odd channel count.
    #[test]
    fn the_bf16_convolution_equals_the_rounded_one() {
        if !runs_here() {
            eprintln!("skipped: this CPU has no AVX-512 BF16, so the bf16 kernel does not run");
            return;
        }
        for (n, h, w, c, k, o) in [
            (3, 6, 7, 32, 3, 32),
            (2, 6, 7, 3, 3, 32),
            (2, 6, 7, 39, 3, 32),
            (2, 10, 10, 16, 3, 16),
            (2, 5, 19, 7, 3, 48),
            (1, 4, 13, 1, 3, 64),
            (2, 7, 6, 5, 5, 32),
        ] {
            let s = DirectShape { n, h, w, c, k, o };
            let x = values(n * h * w * c, 1);
            let rows = values(o * k * k * c, 2);
            let bias = values(o, 3);
            let mut padded = vec![u32::MAX; padded_len(&s)];
            pad(&s, &x, &mut padded);
            let mut got = vec![f32::NAN; n * h * w * o];
            conv(
                &s,
                &padded,
                &taps_from_rows(&rows, o, c, k),
                Some(&bias),
                &mut got,
            );
            let exact = reference(&s, &rounded(&x), &rounded(&rows), &bias);
            let full = reference(&s, &x, &rows, &bias);
            for (i, ((g, e), f)) in got.iter().zip(&exact).zip(&full).enumerate() {
                assert!(
                    (g - e).abs() <= 1e-4 * (1.0 + e.abs()),
                    "{s:?}: {g} against the rounded inputs' {e} at {i}"
                );
                // Each product is off by at most about 2^-8 of itself.
                let scale = (k * k * c) as f32 * 0.25;
                assert!(
                    (g - f).abs() <= 0.01 * scale,
                    "{s:?}: {g} against the f32 convolution's {f} at {i}"
                );
            }
        }
    }

    /// The rounding agrees with the `half` crate's (to nearest, ties to even) on ordinary
    /// values, ties, the largest finite values, infinities and NaN.
    #[test]
    fn rounding_to_bf16_agrees_with_half() {
        let mut cases: Vec<f32> = values(2000, 9).iter().map(|v| v * 1e3).collect();
        cases.extend([
            0.0,
            -0.0,
            1.0,
            f32::from_bits(0x3f80_8000), // a tie, to the even neighbour below
            f32::from_bits(0x3f81_8000), // a tie, to the even neighbour above
            f32::MAX,
            f32::MIN_POSITIVE,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ]);
        for x in cases {
            assert_eq!(
                bits(x),
                u32::from(half::bf16::from_f32(x).to_bits()),
                "{x} ({:#x})",
                x.to_bits()
            );
        }
        assert!(half::bf16::from_bits(bits(f32::NAN) as u16).is_nan());
    }

    /// The pairs: the even channel in the low half, a zero channel after an odd count.
    #[test]
    fn channels_pair_up_low_half_first() {
        let one = half::bf16::from_f32(1.0).to_bits() as u32;
        let two = half::bf16::from_f32(2.0).to_bits() as u32;
        assert_eq!(pair(&[1.0, 2.0], 0), one | (two << 16));
        assert_eq!(pair(&[1.0, 2.0, 1.0], 1), one);
        assert_eq!(pairs(3), 2);
    }
}
