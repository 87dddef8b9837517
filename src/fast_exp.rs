//! A branch-free `exp` for the softmaxes on the hot paths (support decoding in the search, the
//! soft cross-entropies of the learner), written so the compiler turns loops over it into vector
//! code. `f32::exp` calls libm once per element; these rows are 7-601 atoms wide and the search
//! decodes two of them per expanded node. On x86-64 CPUs with AVX2 the reductions run a
//! 256-bit build of themselves, chosen at run time (`wide`), with the same results to the bit.
//!
//! The method is the usual one (Cephes' `expf`): write `x = n ln 2 + r` with `|r| <= ln 2 / 2`,
//! take `e^r` from a degree-7 polynomial and multiply by `2^n` built from its bits. Relative
//! error under 2e-7 (about 2 ulp) over the whole range it accepts; tested against `f64::exp`.

/// Lanes the helpers below keep side by side; the compiler maps them onto vector registers.
const LANES: usize = 8;

/// Below this `e^x` underflows f32's normal range; inputs are clamped to it (the result is
/// about 1.2e-38 instead of a denormal or zero, which no softmax here can tell apart).
const MIN_INPUT: f32 = -87.3;
/// Above this `e^x` overflows f32.
const MAX_INPUT: f32 = 88.7;

/// `e^x` for `x` in f32's range; `x` below -87.3 gives about 1.2e-38 instead of a denormal,
/// above 88.7 it gives about 3.3e38 instead of infinity. NaN gives NaN.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split in two so `x - n ln2` stays exact for |n| <= 128.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // 1.5 * 2^23: adding it rounds to the nearest integer in the low mantissa bits.
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(MIN_INPUT, MAX_INPUT);
    let shifted = x * LOG2E + ROUND;
    let n = shifted - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 0.166_666_65;
    p = p * r + 0.5;
    let e_r = p * r * r + r + 1.0;
    // The integer n sits in the low bits of `shifted`; its exponent field is fixed.
    let n_int = (shifted.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    // e^x = e^r * 2^n, with 2^n split in two halves so n = 128 or -126 still has a normal power.
    let half = n_int >> 1;
    let pow_a = f32::from_bits(((half + 127) as u32) << 23);
    let pow_b = f32::from_bits(((n_int - half + 127) as u32) << 23);
    e_r * pow_a * pow_b
}

/// The largest element (`-inf` for an empty slice; NaN elements are skipped).
#[inline]
pub fn max(xs: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if wide::available() {
        // SAFETY: the CPU has AVX2 (checked at run time).
        return unsafe { wide::max(xs) };
    }
    max_lanes(xs)
}

#[inline(always)]
fn max_lanes(xs: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let chunks = xs.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (m, &v) in lanes.iter_mut().zip(chunk) {
            *m = m.max(v);
        }
    }
    let mut m = lanes.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for &v in tail {
        m = m.max(v);
    }
    m
}

/// `sum_i e^(x_i - shift)`.
#[inline]
pub fn sum_exp(xs: &[f32], shift: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if wide::available() {
        // SAFETY: the CPU has AVX2 (checked at run time).
        return unsafe { wide::sum_exp(xs, shift) };
    }
    sum_exp_lanes(xs, shift)
}

#[inline(always)]
fn sum_exp_lanes(xs: &[f32], shift: f32) -> f32 {
    let mut lanes = [0f32; LANES];
    let chunks = xs.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (s, &v) in lanes.iter_mut().zip(chunk) {
            *s += exp(v - shift);
        }
    }
    let mut total: f32 = lanes.iter().sum();
    for &v in tail {
        total += exp(v - shift);
    }
    total
}

/// `(sum_i e^(x_i - shift), sum_i i e^(x_i - shift))`: a softmax's normaliser and the
/// unnormalised mean of the index, which is what decoding a categorical support needs.
#[inline]
pub fn sum_exp_and_index_moment(xs: &[f32], shift: f32) -> (f32, f32) {
    #[cfg(target_arch = "x86_64")]
    if wide::available() {
        // SAFETY: the CPU has AVX2 (checked at run time).
        return unsafe { wide::sum_exp_and_index_moment(xs, shift) };
    }
    sum_exp_and_index_moment_lanes(xs, shift)
}

#[inline(always)]
fn sum_exp_and_index_moment_lanes(xs: &[f32], shift: f32) -> (f32, f32) {
    let mut totals = [0f32; LANES];
    let mut moments = [0f32; LANES];
    let mut index = [0f32; LANES];
    for (j, i) in index.iter_mut().enumerate() {
        *i = j as f32;
    }
    let chunks = xs.chunks_exact(LANES);
    let tail_start = xs.len() - chunks.remainder().len();
    let tail = chunks.remainder();
    for chunk in chunks {
        for j in 0..LANES {
            let w = exp(chunk[j] - shift);
            totals[j] += w;
            moments[j] += w * index[j];
            index[j] += LANES as f32;
        }
    }
    let mut total: f32 = totals.iter().sum();
    let mut moment: f32 = moments.iter().sum();
    for (k, &v) in tail.iter().enumerate() {
        let w = exp(v - shift);
        total += w;
        moment += w * (tail_start + k) as f32;
    }
    (total, moment)
}

/// The reductions above compiled for AVX2, chosen at run time: the same lanes and the same
/// order of operations, so the same results to the bit, with each group of 8 lanes in one
/// 256-bit register instead of two 128-bit ones (the baseline x86-64 build has SSE2 only).
/// No fused multiply-adds: the compiler does not contract `a * b + c` on its own.
#[cfg(target_arch = "x86_64")]
mod wide {
    pub fn available() -> bool {
        std::arch::is_x86_feature_detected!("avx2")
    }

    #[target_feature(enable = "avx2")]
    pub unsafe fn max(xs: &[f32]) -> f32 {
        super::max_lanes(xs)
    }

    #[target_feature(enable = "avx2")]
    pub unsafe fn sum_exp(xs: &[f32], shift: f32) -> f32 {
        super::sum_exp_lanes(xs, shift)
    }

    #[target_feature(enable = "avx2")]
    pub unsafe fn sum_exp_and_index_moment(xs: &[f32], shift: f32) -> (f32, f32) {
        super::sum_exp_and_index_moment_lanes(xs, shift)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel_err(x: f32) -> f64 {
        let want = f64::from(x).exp();
        (f64::from(exp(x)) - want).abs() / want
    }

    #[test]
    fn exp_matches_f64_over_the_range() {
        let mut worst = 0f64;
        let mut x = -87.0f32;
        while x <= 88.0 {
            worst = worst.max(rel_err(x));
            x += 0.000_37;
        }
        for x in [0.0, -0.0, 1e-8, -1e-8, 0.5, -0.5, 1.0, -1.0, 88.0, -87.0] {
            worst = worst.max(rel_err(x));
        }
        assert!(worst < 2e-7, "worst relative error {worst}");
        assert_eq!(exp(0.0), 1.0);
    }

    #[test]
    fn exp_clamps_instead_of_underflowing() {
        let tiny = exp(-1000.0);
        assert!(tiny > 0.0 && tiny < 2e-38, "{tiny}");
        assert!(exp(f32::NEG_INFINITY) > 0.0);
        assert!(exp(100.0).is_finite());
    }

    #[test]
    fn reductions_match_plain_loops() {
        for len in [0usize, 1, 7, 8, 9, 41, 601] {
            let xs: Vec<f32> = (0..len)
                .map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.7)
                .collect();
            let m = max(&xs);
            let plain_max = xs.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            assert_eq!(m, plain_max);
            if len == 0 {
                assert_eq!(sum_exp(&xs, 0.0), 0.0);
                continue;
            }
            let plain: f64 = xs.iter().map(|&v| f64::from(v - m).exp()).sum();
            let moment: f64 = xs
                .iter()
                .enumerate()
                .map(|(i, &v)| i as f64 * f64::from(v - m).exp())
                .sum();
            let s = f64::from(sum_exp(&xs, m));
            let (t, mo) = sum_exp_and_index_moment(&xs, m);
            assert!((s - plain).abs() <= 1e-5 * plain, "{len}: {s} vs {plain}");
            assert!((f64::from(t) - plain).abs() <= 1e-5 * plain, "{len}");
            assert!(
                (f64::from(mo) - moment).abs() <= 1e-5 * moment.max(1.0),
                "{len}: {mo} vs {moment}"
            );
        }
    }

    /// The AVX2 build of the reductions gives the portable build's results to the bit (on a
    /// CPU without AVX2 there is nothing to compare, and the test says so).
    #[test]
    fn the_avx2_reductions_equal_the_portable_ones_to_the_bit() {
        #[cfg(target_arch = "x86_64")]
        if wide::available() {
            for len in [1usize, 3, 7, 8, 9, 16, 41, 601] {
                let xs: Vec<f32> = (0..len)
                    .map(|i| ((i * 53 % 29) as f32 - 14.0) * 0.37)
                    .collect();
                // SAFETY: AVX2 is available (checked above).
                let (m, s, (t, mo)) = unsafe {
                    (
                        wide::max(&xs),
                        wide::sum_exp(&xs, 0.5),
                        wide::sum_exp_and_index_moment(&xs, 0.5),
                    )
                };
                let (pt, pmo) = sum_exp_and_index_moment_lanes(&xs, 0.5);
                assert_eq!(m.to_bits(), max_lanes(&xs).to_bits(), "{len}: max");
                assert_eq!(s.to_bits(), sum_exp_lanes(&xs, 0.5).to_bits(), "{len}");
                assert_eq!((t.to_bits(), mo.to_bits()), (pt.to_bits(), pmo.to_bits()));
            }
            return;
        }
        eprintln!("skipped: this CPU has no AVX2");
    }

    #[test]
    fn max_skips_nan() {
        assert_eq!(max(&[f32::NAN, 1.0, 3.0, f32::NAN, 2.0]), 3.0);
        let nine = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, f32::NAN, 9.0];
        assert_eq!(max(&nine), 9.0);
    }
}
