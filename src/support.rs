//! The value/reward support transform of MuZero (Schrittwieser et al. 2020, appendix F).
//!
//! Scalars (values, rewards) are squashed by the invertible transform
//! `h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x` (Pohlen et al. 2018, `eps = 0.001`) and then
//! represented as a categorical distribution over the integer atoms `min..=max` of a
//! [`Support`]: a *two-hot* vector that puts its mass on the two atoms around `h(x)`, so that
//! the expectation over the atoms is `h(x)` exactly (after clamping to the support's range).
//! Decoding takes the expectation over the atoms and applies the closed-form inverse [`h_inv`].
//!
//! Everything here is pure and allocation-light; the `*_into` variants write into caller buffers.

use serde::{Deserialize, Serialize};

/// The `eps` of the transform `h` (MuZero uses 0.001).
pub const EPSILON: f32 = 0.001;

/// `h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x` with `eps` = [`EPSILON`].
///
/// Monotonic, odd, `h(0) = 0`; for example `h(3) = 1.003` and `h(8) = 2.008`.
/// Computed in `f64` so that [`h_inv`] round-trips to `f32` precision.
pub fn h(x: f32) -> f32 {
    let x = f64::from(x);
    let eps = f64::from(EPSILON);
    (x.signum() * ((x.abs() + 1.0).sqrt() - 1.0) + eps * x) as f32
}

/// The exact inverse of [`h`]:
/// `h_inv(y) = sign(y) (((sqrt(1 + 4 eps (|y| + 1 + eps)) - 1) / (2 eps))^2 - 1)`.
///
/// The ratio is evaluated in the algebraically equal, cancellation-free form
/// `2 (|y| + 1 + eps) / (sqrt(1 + 4 eps (|y| + 1 + eps)) + 1)`, in `f64`.
pub fn h_inv(y: f32) -> f32 {
    let y = f64::from(y);
    let eps = f64::from(EPSILON);
    let a = y.abs() + 1.0 + eps;
    let ratio = 2.0 * a / ((1.0 + 4.0 * eps * a).sqrt() + 1.0);
    (y.signum() * (ratio * ratio - 1.0)) as f32
}

/// How a scalar maps into a support's atoms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transform {
    /// MuZero's [`h`] before the two-hot encoding and [`h_inv`] after the expectation: wide
    /// ranges of returns on a few atoms.
    #[default]
    H,
    /// The scalar itself: atoms at the values. With the atoms -1, 0 and 1 a board game's
    /// value head is a win / draw / loss classifier, and decoded values stay in `[-1, 1]`.
    None,
}

impl Transform {
    fn forward(self, x: f32) -> f32 {
        match self {
            Transform::H => h(x),
            Transform::None => x,
        }
    }

    fn inverse(self, y: f32) -> f32 {
        match self {
            Transform::H => h_inv(y),
            Transform::None => y,
        }
    }
}

/// A categorical support: one atom at every integer of `min..=max` (after its [`Transform`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Support {
    pub min: i32,
    pub max: i32,
    /// Absent in checkpoints written before the choice existed: [`Transform::H`].
    #[serde(default)]
    pub transform: Transform,
}

impl Support {
    /// A support over `min..=max`.
    ///
    /// # Panics
    /// If `min > max`.
    pub fn new(min: i32, max: i32) -> Self {
        assert!(min <= max, "support min {min} > max {max}");
        Self {
            min,
            max,
            transform: Transform::H,
        }
    }

    /// The same atoms with `transform` between scalars and atoms.
    pub fn with_transform(self, transform: Transform) -> Self {
        Self { transform, ..self }
    }

    /// The symmetric support `-n..=n` (`2n + 1` atoms), as in MuZero (`n = 300`).
    pub fn symmetric(n: u32) -> Self {
        let n = i32::try_from(n).expect("support half-width fits in i32");
        Self::new(-n, n)
    }

    /// Number of atoms, `max - min + 1`.
    pub fn size(&self) -> usize {
        (i64::from(self.max) - i64::from(self.min) + 1) as usize
    }

    /// Two-hot encoding of the transformed `x` (`h(x)` by default) clamped to `[min, max]`,
    /// written into `out` (`size()` values).
    ///
    /// NaN encodes like 0 clamped into the support; infinities clamp to the end atoms.
    ///
    /// # Panics
    /// If `out.len() != self.size()`.
    pub fn scalar_to_probs_into(&self, x: f32, out: &mut [f32]) {
        assert_eq!(
            out.len(),
            self.size(),
            "output buffer must hold size() atoms"
        );
        out.fill(0.0);
        let (lo_f, hi_f) = (self.min as f32, self.max as f32);
        let y = if x.is_nan() {
            0.0
        } else {
            self.transform.forward(x)
        };
        let y = y.clamp(lo_f, hi_f);
        let floor = y.floor();
        let lower = (floor - lo_f) as usize;
        let upper_weight = y - floor;
        if lower + 1 < out.len() && upper_weight > 0.0 {
            out[lower] = 1.0 - upper_weight;
            out[lower + 1] = upper_weight;
        } else {
            // `y` sits exactly on an atom (always the case at `max`).
            out[lower.min(out.len() - 1)] = 1.0;
        }
    }

    /// Two-hot encoding of the transformed `x` clamped to `[min, max]` (`size()` probabilities
    /// summing to 1).
    pub fn scalar_to_probs(&self, x: f32) -> Vec<f32> {
        let mut out = vec![0.0; self.size()];
        self.scalar_to_probs_into(x, &mut out);
        out
    }

    /// Batched [`Support::scalar_to_probs`]: `[B]` scalars to `[B * size()]` probabilities.
    pub fn scalars_to_probs(&self, xs: &[f32]) -> Vec<f32> {
        let size = self.size();
        let mut out = vec![0.0; xs.len() * size];
        for (&x, row) in xs.iter().zip(out.chunks_exact_mut(size)) {
            self.scalar_to_probs_into(x, row);
        }
        out
    }

    /// Decode a distribution over the atoms: `h_inv(sum_i p_i * atom_i)` (without `h_inv`
    /// for [`Transform::None`]).
    ///
    /// # Panics
    /// If `probs.len() != self.size()`.
    pub fn probs_to_scalar(&self, probs: &[f32]) -> f32 {
        assert_eq!(probs.len(), self.size(), "expected size() probabilities");
        let expectation: f64 = probs
            .iter()
            .enumerate()
            .map(|(i, &p)| f64::from(p) * (f64::from(self.min) + i as f64))
            .sum();
        self.transform.inverse(expectation as f32)
    }

    /// Batched [`Support::probs_to_scalar`]: `[B * size()]` probabilities to `[B]` scalars.
    ///
    /// # Panics
    /// If the length is not a multiple of `size()`.
    pub fn probs_to_scalars(&self, probs: &[f32]) -> Vec<f32> {
        let size = self.size();
        assert_eq!(probs.len() % size, 0, "length must be a multiple of size()");
        probs
            .chunks_exact(size)
            .map(|row| self.probs_to_scalar(row))
            .collect()
    }

    /// Decode logits over the atoms: a numerically stable softmax, then
    /// [`Support::probs_to_scalar`]. Does not allocate.
    ///
    /// # Panics
    /// If `logits.len() != self.size()`.
    pub fn logits_to_scalar(&self, logits: &[f32]) -> f32 {
        assert_eq!(logits.len(), self.size(), "expected size() logits");
        // In f32: every weight is in (0, 1] and there are at most a few hundred atoms; the
        // search decodes two rows per node, so this is on its hot path (vectorised exp).
        let max = crate::fast_exp::max(logits);
        let (total, weighted) = crate::fast_exp::sum_exp_and_index_moment(logits, max);
        self.transform.inverse(self.min as f32 + weighted / total)
    }

    /// Batched [`Support::logits_to_scalar`]: `[B * size()]` logits to `[B]` scalars.
    ///
    /// # Panics
    /// If the length is not a multiple of `size()`.
    pub fn logits_to_scalars(&self, logits: &[f32]) -> Vec<f32> {
        let size = self.size();
        assert_eq!(
            logits.len() % size,
            0,
            "length must be a multiple of size()"
        );
        logits
            .chunks_exact(size)
            .map(|row| self.logits_to_scalar(row))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f32, b: f32, rel: f32) -> bool {
        (a - b).abs() <= rel * (1.0 + a.abs().max(b.abs()))
    }

    #[test]
    fn without_the_transform_the_atoms_are_the_values() {
        let wdl = Support::symmetric(1).with_transform(Transform::None);
        assert_eq!(wdl.scalar_to_probs(1.0), vec![0.0, 0.0, 1.0]);
        assert_eq!(wdl.scalar_to_probs(-1.0), vec![1.0, 0.0, 0.0]);
        assert_eq!(wdl.scalar_to_probs(0.0), vec![0.0, 1.0, 0.0]);
        let half = wdl.scalar_to_probs(0.25);
        assert!(
            close(half[1], 0.75, 1e-6) && close(half[2], 0.25, 1e-6),
            "{half:?}"
        );
        assert!(close(wdl.probs_to_scalar(&[0.2, 0.3, 0.5]), 0.3, 1e-6));
        let logits = [0.1f32, -0.4, 1.3];
        let total: f32 = logits.iter().map(|l| l.exp()).sum();
        let expected = (logits[2].exp() - logits[0].exp()) / total;
        assert!(close(wdl.logits_to_scalar(&logits), expected, 1e-5));
        // With MuZero's transform a win sits between the atoms 0 and 1.
        let squashed = Support::symmetric(1).scalar_to_probs(1.0);
        assert!(squashed[1] > 0.5 && squashed[2] > 0.4, "{squashed:?}");
        assert!(close(
            Support::symmetric(1).probs_to_scalar(&squashed),
            1.0,
            1e-5
        ));
    }

    #[test]
    fn a_support_written_without_its_transform_reads_as_muzeros() {
        let read: Support = serde_json::from_str(r#"{"min": -2, "max": 2}"#).unwrap();
        assert_eq!(read, Support::symmetric(2));
        assert_eq!(read.transform, Transform::H);
        let none = Support::symmetric(1).with_transform(Transform::None);
        let text = serde_json::to_string(&none).unwrap();
        assert_eq!(serde_json::from_str::<Support>(&text).unwrap(), none);
    }

    #[test]
    fn h_known_values() {
        assert_eq!(h(0.0), 0.0);
        assert!((h(3.0) - 1.003).abs() < 1e-6, "{}", h(3.0));
        assert!((h(-3.0) + 1.003).abs() < 1e-6);
        assert!((h(8.0) - 2.008).abs() < 1e-6);
        // h(99) = sqrt(100) - 1 + 0.099 = 9.099
        assert!((h(99.0) - 9.099).abs() < 1e-5);
        assert!((h_inv(1.003) - 3.0).abs() < 1e-4);
        assert!((h_inv(-2.008) + 8.0).abs() < 1e-4);
        assert_eq!(h_inv(0.0), 0.0);
    }

    #[test]
    fn h_round_trip_wide_range() {
        let mut x = -1.0e6f32;
        let mut count = 0;
        while x <= 1.0e6 {
            for v in [x, x * 1e-3, x * 1e-6] {
                let back = h_inv(h(v));
                assert!(close(back, v, 1e-5), "h_inv(h({v})) = {back}");
                let fwd = h(h_inv(v * 1e-3));
                assert!(close(fwd, v * 1e-3, 1e-5), "h(h_inv({})) = {fwd}", v * 1e-3);
            }
            x += 1234.5;
            count += 1;
        }
        assert!(count > 1000);
        for v in [0.0, 1e-7, -1e-7, 0.5, -0.5, 1.0, -1.0, 1e4, -1e4] {
            assert!(close(h_inv(h(v)), v, 1e-6), "{v}");
        }
    }

    #[test]
    fn h_is_monotonic_and_odd() {
        let mut prev = h(-50.0);
        for i in -499..=500 {
            let x = i as f32 * 0.1;
            let y = h(x);
            assert!(y > prev, "h not increasing at {x}");
            assert_eq!(h(-x), -y);
            prev = y;
        }
    }

    #[test]
    fn two_hot_known_values() {
        let s = Support::symmetric(5);
        assert_eq!(s.size(), 11);
        let p = s.scalar_to_probs(3.0); // h(3) = 1.003: atoms 1 and 2 (indices 6, 7)
        assert!((p[6] - 0.997).abs() < 1e-5, "{p:?}");
        assert!((p[7] - 0.003).abs() < 1e-5, "{p:?}");
        assert_eq!(p.iter().filter(|&&v| v != 0.0).count(), 2);
        let p = s.scalar_to_probs(0.0);
        assert_eq!(p[5], 1.0);
        assert_eq!(p.iter().sum::<f32>(), 1.0);
        let p = s.scalar_to_probs(-3.0); // h = -1.003: 0.997 on -1, 0.003 on -2
        assert!(
            (p[4] - 0.997).abs() < 1e-5 && (p[3] - 0.003).abs() < 1e-5,
            "{p:?}"
        );
    }

    #[test]
    fn probs_sum_to_one_and_round_trip() {
        let s = Support::symmetric(20);
        // Stay inside the support: h(374.5) = 18.74 < 20 < h(428) = 20.12.
        for i in -350..=350 {
            let x = i as f32 * 1.07;
            let p = s.scalar_to_probs(x);
            assert_eq!(p.len(), 41);
            let total: f32 = p.iter().sum();
            assert!((total - 1.0).abs() < 1e-6, "{x}: sum {total}");
            assert!(p.iter().all(|&v| (0.0..=1.0).contains(&v)));
            let back = s.probs_to_scalar(&p);
            assert!(close(back, x, 1e-4), "{x} -> {back}");
        }
    }

    #[test]
    fn clamps_outside_the_range() {
        let s = Support::new(-2, 3);
        let top = s.scalar_to_probs(1e6);
        assert_eq!(top, vec![0.0, 0.0, 0.0, 0.0, 0.0, 1.0]);
        let bottom = s.scalar_to_probs(-1e6);
        assert_eq!(bottom, vec![1.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
        assert!((s.probs_to_scalar(&top) - h_inv(3.0)).abs() < 1e-4);
        assert!((s.probs_to_scalar(&bottom) - h_inv(-2.0)).abs() < 1e-4);
        let inf = s.scalar_to_probs(f32::INFINITY);
        assert_eq!(inf, top);
        let nan = s.scalar_to_probs(f32::NAN);
        assert_eq!(nan[2], 1.0); // atom 0
    }

    #[test]
    fn logits_decode_and_batch() {
        let s = Support::symmetric(3);
        // One-hot-ish logits on atom +2 decode to about h_inv(2).
        let mut logits = vec![-1e9f32; 7];
        logits[5] = 0.0;
        assert!((s.logits_to_scalar(&logits) - h_inv(2.0)).abs() < 1e-4);
        // Uniform logits: expectation 0.
        assert!(s.logits_to_scalar(&[0.5; 7]).abs() < 1e-6);
        // Log of a two-hot distribution decodes like the distribution.
        let xs = [0.0f32, 2.5, -7.0, 11.0];
        let probs = s.scalars_to_probs(&xs);
        assert_eq!(probs.len(), 4 * 7);
        let logs: Vec<f32> = probs.iter().map(|&p| p.max(1e-30).ln()).collect();
        let back = s.logits_to_scalars(&logs);
        let back_p = s.probs_to_scalars(&probs);
        for i in 0..4 {
            assert!(close(back[i], xs[i], 1e-4), "{} vs {}", back[i], xs[i]);
            assert!(close(back_p[i], xs[i], 1e-4));
        }
    }
}
