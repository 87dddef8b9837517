//! Min-max normalisation of Q-values (MuZero appendix B), one instance per tree.

/// The smallest and largest Q-value seen in one tree.
///
/// [`MinMaxStats::normalize`] maps `q` to `(q - min) / (max - min)` (in `[0, 1]` for every Q
/// seen) once at least two distinct values were seen (`max > min`); before that (no value, or
/// all values equal) it returns `q` unchanged, as in the MuZero pseudocode. NaN updates are
/// ignored.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MinMaxStats {
    pub min: f32,
    pub max: f32,
}

impl Default for MinMaxStats {
    fn default() -> Self {
        Self::new()
    }
}

impl MinMaxStats {
    /// Stats that have seen nothing (`min = +inf`, `max = -inf`).
    pub fn new() -> Self {
        Self {
            min: f32::INFINITY,
            max: f32::NEG_INFINITY,
        }
    }

    /// Stats that start from the known range `[lo, hi]` (MuZero's `KnownBounds`); values
    /// outside it still widen it.
    pub fn with_bounds(lo: f32, hi: f32) -> Self {
        Self { min: lo, max: hi }
    }

    /// Widen the range to include `q`.
    #[inline]
    pub fn update(&mut self, q: f32) {
        self.min = self.min.min(q);
        self.max = self.max.max(q);
    }

    /// `(q - min) / (max - min)` when `max > min`, else `q` unchanged.
    #[inline]
    pub fn normalize(&self, q: f32) -> f32 {
        if self.max > self.min {
            (q - self.min) / (self.max - self.min)
        } else {
            q
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_hand_checked() {
        let mut s = MinMaxStats::new();
        assert_eq!(s.normalize(0.7), 0.7); // nothing seen: unchanged
        s.update(2.0);
        assert_eq!(s.normalize(2.0), 2.0); // one value: unchanged
        s.update(-2.0);
        s.update(f32::NAN);
        s.update(1.0);
        assert_eq!((s.min, s.max), (-2.0, 2.0));
        assert_eq!(s.normalize(-2.0), 0.0);
        assert_eq!(s.normalize(2.0), 1.0);
        assert_eq!(s.normalize(1.0), 0.75);
        assert_eq!(s.normalize(0.0), 0.5);
    }
}
