//! The sum tree over the buffer's slots: `O(log n)` updates and sampling proportional to the
//! stored leaf values.

/// A binary sum tree over `len` leaves (padded to a power of two), in `f64`.
/// Every internal node is recomputed from its children on update, so it is always exactly
/// the sum of its children and a rebuild from the leaves reproduces it bit for bit.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct SumTree {
    /// Number of leaves, a power of two.
    size: usize,
    /// `nodes[1]` is the root; leaf `i` is `nodes[size + i]`.
    nodes: Vec<f64>,
}

impl SumTree {
    /// A tree of at least `len` leaves, all zero.
    pub(super) fn new(len: usize) -> Self {
        let size = len.max(1).next_power_of_two();
        Self {
            size,
            nodes: vec![0.0; 2 * size],
        }
    }

    /// Sum of all leaves.
    pub(super) fn total(&self) -> f64 {
        self.nodes[1]
    }

    /// Leaf `i`.
    pub(super) fn get(&self, i: usize) -> f64 {
        self.nodes[self.size + i]
    }

    /// Sets leaf `i` and the sums above it.
    pub(super) fn set(&mut self, i: usize, value: f64) {
        let mut idx = self.size + i;
        self.nodes[idx] = value;
        idx /= 2;
        while idx >= 1 {
            self.nodes[idx] = self.nodes[2 * idx] + self.nodes[2 * idx + 1];
            idx /= 2;
        }
    }

    /// Leaf whose cumulative range contains `mass` (in `[0, total)`). Never returns a
    /// zero leaf while `total > 0`, even under rounding.
    pub(super) fn find(&self, mut mass: f64) -> usize {
        let mut idx = 1;
        while idx < self.size {
            let left = self.nodes[2 * idx];
            let right = self.nodes[2 * idx + 1];
            if (mass < left && left > 0.0) || right <= 0.0 {
                idx *= 2;
            } else {
                mass -= left;
                idx = 2 * idx + 1;
            }
        }
        idx - self.size
    }
}

#[cfg(test)]
mod tests {
    use super::SumTree;

    #[test]
    fn sum_tree_finds_ranges_and_never_a_zero_leaf() {
        let mut tree = SumTree::new(7);
        assert_eq!(tree.size, 8);
        for (i, v) in [0.0, 2.0, 0.0, 0.0, 3.0, 0.0, 0.0].into_iter().enumerate() {
            tree.set(i, v);
        }
        assert_eq!(tree.total(), 5.0);
        assert_eq!(tree.find(0.0), 1);
        assert_eq!(tree.find(1.999), 1);
        assert_eq!(tree.find(2.0), 4);
        assert_eq!(tree.find(4.999), 4);
        // Masses at or past the total (rounding) still land on a positive leaf.
        assert_eq!(tree.find(5.0), 4);
        assert_eq!(tree.find(7.5), 4);
        tree.set(4, 0.0);
        assert_eq!(tree.find(2.0), 1);
        assert_eq!(tree.total(), 2.0);
    }
}
