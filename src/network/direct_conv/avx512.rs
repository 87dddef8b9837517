//! The direct kernels in AVX-512: 16 output channels per vector, 32 registers.

use std::arch::x86_64::*;

use super::{dispatch_table, Block, TapBlock};

/// The convolution of one block of `nb` positions.
///
/// # Safety
/// AVX-512F must be present; `a`'s pointers must cover the block (`super::conv_boards`).
pub(super) unsafe fn block(nb: usize, a: &Block) {
    dispatch_table!(block_of, nb, a.o / 16, a;
        1 => [1 2 3 4 5 6 7 8 9 10 11 12],
        2 => [1 2 3 4 5 6 7 8 9 10 11 12],
        3 => [1 2 3 4 5 6 7 8],
        4 => [1 2 3 4 5 6])
}

/// The filters' gradient of one block of `cb` input channels of a tap.
///
/// # Safety
/// AVX-512F must be present; `a`'s pointers must cover the block
/// (`super::filter_gradient_taps`).
pub(super) unsafe fn tap_block(cb: usize, a: &TapBlock) {
    dispatch_table!(tap_block_of, cb, a.o / 16, a;
        1 => [1 2 3 4 5 6 7 8 9 10 11 12],
        2 => [1 2 3 4 5 6 7 8 9 10 11 12],
        3 => [1 2 3 4 5 6 7 8],
        4 => [1 2 3 4 5 6])
}

/// Adds to `CB` rows of the tap's gradient (`[CB, 16 V]`) the sum over every position of
/// the input's cell under the tap times the output's gradient.
#[target_feature(enable = "avx512f")]
unsafe fn tap_block_of<const CB: usize, const V: usize>(a: &TapBlock) {
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
unsafe fn block_of<const NB: usize, const V: usize>(a: &Block) {
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

/// [`block`] in bf16: the input and the taps hold pairs of bf16 channels (`super::bf16`), and
/// each `vdpbf16ps` adds two channels' products to the f32 accumulators.
///
/// # Safety
/// AVX-512F and AVX-512 BF16 must be present; `a`'s pointers must cover the block
/// (`super::conv_boards`).
pub(super) unsafe fn block_bf16(nb: usize, a: &Block<u32>) {
    dispatch_table!(block_bf16_of, nb, a.o / 16, a;
        1 => [1 2 3 4 5 6 7 8 9 10 11 12],
        2 => [1 2 3 4 5 6 7 8 9 10 11 12],
        3 => [1 2 3 4 5 6 7 8],
        4 => [1 2 3 4 5 6])
}

/// `NB` neighbouring positions of one row, `16 V` output channels, in registers; two input
/// channels per step.
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn block_bf16_of<const NB: usize, const V: usize>(a: &Block<u32>) {
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
            for pair in 0..a.c {
                let mut t = [_mm512_setzero_si512(); V];
                for (v, tv) in t.iter_mut().enumerate() {
                    *tv = _mm512_loadu_si512(taps.add(pair * o + 16 * v).cast());
                }
                for (j, row) in acc.iter_mut().enumerate() {
                    let x: __m512bh =
                        std::mem::transmute(_mm512_set1_epi32(*src.add(j * a.c + pair) as i32));
                    for (r, tv) in row.iter_mut().zip(&t) {
                        *r = _mm512_dpbf16_ps(*r, x, std::mem::transmute::<__m512i, __m512bh>(*tv));
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
