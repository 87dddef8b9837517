//! The direct kernels in AVX2 with FMA: 8 output channels per vector, 16 registers. With
//! half the registers of AVX-512, a block keeps its positions' broadcasts and loads one
//! vector of the taps (or of the gradient) at a time.

use std::arch::x86_64::*;

use super::{dispatch_table, Block, TapBlock};

/// The convolution of one block of `nb` positions.
///
/// # Safety
/// AVX2 and FMA must be present; `a`'s pointers must cover the block
/// (`super::conv_boards`).
pub(super) unsafe fn block(nb: usize, a: &Block) {
    dispatch_table!(block_of, nb, a.o / 8, a;
        2 => [1 2 3 4 5],
        4 => [1 2 3],
        6 => [1 2],
        8 => [1])
}

/// The filters' gradient of one block of `cb` input channels of a tap.
///
/// # Safety
/// AVX2 and FMA must be present; `a`'s pointers must cover the block
/// (`super::filter_gradient_taps`).
pub(super) unsafe fn tap_block(cb: usize, a: &TapBlock) {
    dispatch_table!(tap_block_of, cb, a.o / 8, a;
        2 => [1 2 3 4 5],
        4 => [1 2 3],
        6 => [1 2],
        8 => [1])
}

/// Adds to `CB` rows of the tap's gradient (`[CB, 8 V]`) the sum over every position of the
/// input's cell under the tap times the output's gradient.
#[target_feature(enable = "avx2,fma")]
unsafe fn tap_block_of<const CB: usize, const V: usize>(a: &TapBlock) {
    let o = 8 * V;
    let mut acc = [[_mm256_setzero_ps(); V]; CB];
    for b in 0..a.n {
        for y in 0..a.h {
            let src = a.src.add(b * a.board_stride + y * a.row_stride);
            let g = a.g.add((b * a.h + y) * a.w * o);
            for x in 0..a.w {
                let mut xv = [_mm256_setzero_ps(); CB];
                for (cc, r) in xv.iter_mut().enumerate() {
                    *r = _mm256_set1_ps(*src.add(x * a.c + cc));
                }
                for v in 0..V {
                    let gv = _mm256_loadu_ps(g.add(x * o + 8 * v));
                    for (row, cell) in acc.iter_mut().zip(&xv) {
                        row[v] = _mm256_fmadd_ps(*cell, gv, row[v]);
                    }
                }
            }
        }
    }
    for (cc, row) in acc.iter().enumerate() {
        for (v, r) in row.iter().enumerate() {
            let at = a.dst.add(cc * o + 8 * v);
            _mm256_storeu_ps(at, _mm256_add_ps(_mm256_loadu_ps(at), *r));
        }
    }
}

/// `NB` neighbouring positions of one row, `8 V` output channels, in registers.
#[target_feature(enable = "avx2,fma")]
unsafe fn block_of<const NB: usize, const V: usize>(a: &Block) {
    let o = 8 * V;
    let mut acc = [[_mm256_setzero_ps(); V]; NB];
    for row in acc.iter_mut() {
        for (v, r) in row.iter_mut().enumerate() {
            *r = _mm256_loadu_ps(a.init.add(8 * v));
        }
    }
    for ky in 0..a.k {
        for kx in 0..a.k {
            let src = a.src.add(ky * a.row_stride + kx * a.c);
            let taps = a.taps.add((ky * a.k + kx) * a.c * o);
            for ci in 0..a.c {
                let mut x = [_mm256_setzero_ps(); NB];
                for (j, r) in x.iter_mut().enumerate() {
                    *r = _mm256_set1_ps(*src.add(j * a.c + ci));
                }
                for v in 0..V {
                    let t = _mm256_loadu_ps(taps.add(ci * o + 8 * v));
                    for (row, xj) in acc.iter_mut().zip(&x) {
                        row[v] = _mm256_fmadd_ps(*xj, t, row[v]);
                    }
                }
            }
        }
    }
    for (j, row) in acc.iter().enumerate() {
        for (v, r) in row.iter().enumerate() {
            _mm256_storeu_ps(a.dst.add(j * o + 8 * v), *r);
        }
    }
}
