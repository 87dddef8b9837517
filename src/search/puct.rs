//! MuZero's pUCT selection rule (MuZero appendix B).
//!
//! `score(a) = Q_norm(a) + P(a) * sqrt(N) / (1 + N(a)) * (c1 + ln((N + c2 + 1) / c2))`
//!
//! - `N` is the visit count of the parent node. Every expanded node counts its own expansion
//!   as one visit, so `N = 1 + sum_a N(a)`: the first simulation from a fresh node already
//!   follows the prior (as in mctx) instead of facing an all-zero tie.
//! - `Q(a) = r(a) + discount * sign * v(a)` is the child's mean value seen from the parent
//!   (`sign = -1` in two-player games), normalised by the tree's [`MinMaxStats`].
//! - An unvisited (unexpanded) child's Q term is 0 by default, as in the MuZero pseudocode:
//!   the bottom of the normalised range, so unexplored actions compete through their prior
//!   only. With [`UnvisitedValue::Parent`] it is the parent's mean value, normalised the same
//!   way.
//! - Ties go to the lowest action index (no random jitter): selection is deterministic.

use super::config::UnvisitedValue;
use super::min_max::MinMaxStats;
use super::tree::Tree;

/// Default `c1` (`pb_c_init`).
pub const DEFAULT_C1: f32 = 1.25;
/// Default `c2` (`pb_c_base`).
pub const DEFAULT_C2: f32 = 19652.0;

/// `sqrt(N) * (c1 + ln((N + c2 + 1) / c2))` for a parent visited `parent_visits` times.
#[inline]
pub fn exploration_factor(parent_visits: u32, c1: f32, c2: f32) -> f32 {
    let n = parent_visits as f32;
    n.sqrt() * (c1 + ((n + c2 + 1.0) / c2).ln())
}

/// The pUCT score of one child given its normalised Q term.
#[inline]
pub fn puct_score(
    q_norm: f32,
    prior: f32,
    parent_visits: u32,
    child_visits: u32,
    c1: f32,
    c2: f32,
) -> f32 {
    q_norm + prior * exploration_factor(parent_visits, c1, c2) / (1.0 + child_visits as f32)
}

/// The child of `node` with the highest pUCT score, among the `legal` actions when given.
///
/// Reads the edge statistics of `node`'s row (`Q` as backed up by [`Tree::backup`], with the
/// search's discount and sign); `unvisited` says what an unvisited child's value term is.
/// Ties resolve to the lowest allowed action index; NaN scores never win (if every score is
/// NaN, the lowest allowed index). Returns 0 if no action is allowed (callers guarantee at
/// least one).
pub fn select_child(
    tree: &Tree,
    node: usize,
    stats: &MinMaxStats,
    c1: f32,
    c2: f32,
    unvisited: UnvisitedValue,
    legal: Option<&[bool]>,
) -> usize {
    let factor = exploration_factor(tree.visits(node), c1, c2);
    // `stats.normalize` as `(q - lo) / range`: bit-identical in both of its cases.
    let (lo, range) = if stats.max > stats.min {
        (stats.min, stats.max - stats.min)
    } else {
        (0.0, 1.0)
    };
    let priors = tree.priors(node);
    let visits = tree.children_visits(node);
    let qs = tree.children_q(node);
    // An unvisited child scores `first_play + P * factor` (divided by 1): most children are
    // unvisited, so only visited ones pay for the division.
    let first_play = match unvisited {
        UnvisitedValue::Min => 0.0,
        UnvisitedValue::Parent => (tree.value(node) - lo) / range,
    };
    let score = |a: usize| match visits[a] {
        0 => first_play + priors[a] * factor,
        n => (qs[a] - lo) / range + priors[a] * factor / (1.0 + n as f32),
    };
    let mut best_score = f32::NEG_INFINITY;
    match legal {
        None => {
            let mut best = 0;
            for a in 0..priors.len() {
                let s = score(a);
                if s > best_score {
                    best = a;
                    best_score = s;
                }
            }
            best
        }
        Some(mask) => {
            let mut best = mask.iter().position(|&ok| ok).unwrap_or(0);
            for (a, _) in mask.iter().enumerate().filter(|(_, &ok)| ok) {
                let s = score(a);
                if s > best_score {
                    best = a;
                    best_score = s;
                }
            }
            best
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::search::tree::{Expansion, ROOT};

    /// The root's choice with the default constants and MuZero's rule for unvisited children.
    fn muzero_rule(t: &Tree, stats: &MinMaxStats, legal: Option<&[bool]>) -> usize {
        select_child(t, ROOT, stats, 1.25, 19652.0, UnvisitedValue::Min, legal)
    }

    #[test]
    fn formula_hand_checked() {
        // N = 4: sqrt(4) * (1.25 + ln((4 + 19652 + 1) / 19652)) = 2 * (1.25 + ln(1.000254427))
        let f = exploration_factor(4, 1.25, 19652.0);
        let expected = 2.0 * (1.25 + (19657.0f64 / 19652.0).ln());
        assert!((f64::from(f) - expected).abs() < 1e-5, "{f}");
        // c2 = 1: ln((N + 2) / 1) matters. N = 9, c1 = 0: 3 * ln(11).
        assert!((exploration_factor(9, 0.0, 1.0) - 3.0 * 11f32.ln()).abs() < 1e-5);
        // 0.5 + 0.2 * 2 * (1.25 + ln(19657/19652)) / (1 + 1)
        let s = puct_score(0.5, 0.2, 4, 1, 1.25, 19652.0);
        let expected = 0.5 + 0.2 * expected / 2.0;
        assert!((f64::from(s) - expected).abs() < 1e-5, "{s}");
        assert_eq!(exploration_factor(0, 1.25, 19652.0), 0.0);
    }

    /// Root with priors 0.2 / 0.5 / 0.3 and one expanded child through action 2 (reward 1,
    /// value 2), backed up with discount 0.5 and the given sign.
    fn tree_with_one_child(sign: f32) -> Tree {
        let mut t = Tree::new(4, 3);
        let logits = [0.2f32.ln(), 0.5f32.ln(), 0.3f32.ln()];
        t.init_root(&logits, &[true; 3], 0.0);
        t.add_child(
            1,
            (ROOT, 2),
            &Expansion {
                logits: &[0.0; 3],
                value: 2.0,
                reward: 1.0,
            },
            sign < 0.0,
        );
        t.backup(1, 0.5, sign, |_| {});
        t
    }

    #[test]
    fn selects_by_prior_value_and_mask() {
        let mut t = Tree::new(4, 3);
        t.init_root(&[0.2f32.ln(), 0.5f32.ln(), 0.3f32.ln()], &[true; 3], 0.0);
        let stats = MinMaxStats::new();
        assert_eq!(muzero_rule(&t, &stats, None), 1);
        let mask = [true, false, true];
        assert_eq!(muzero_rule(&t, &stats, Some(&mask)), 2);

        // One player: Q = 1 + 0.5 * 2 = 2 -> normalised 1 in the range [0, 2].
        let t = tree_with_one_child(1.0);
        assert_eq!(t.children_q(ROOT)[2], 2.0);
        let mut stats = MinMaxStats::new();
        stats.update(0.0);
        stats.update(2.0);
        // root N = 2: factor = sqrt2 * (1.25 + ln(19655/19652)) ~ 1.768
        // a0: 0.2 * 1.768 = 0.354; a1: 0.5 * 1.768 = 0.884; a2: 1 + 0.3 * 1.768 / 2 = 1.265
        assert_eq!(muzero_rule(&t, &stats, None), 2);
        // Two players: the same child is bad for the root player, Q = 1 - 0.5 * 2 = 0 ->
        // normalised 0: a2 scores 0.265 and a1 wins.
        let t = tree_with_one_child(-1.0);
        assert_eq!(t.children_q(ROOT)[2], 0.0);
        assert_eq!(muzero_rule(&t, &stats, None), 1);
        // With a single value seen, Q is used unnormalised (2 here): a2 wins again.
        let t = tree_with_one_child(1.0);
        let mut stats = MinMaxStats::new();
        stats.update(2.0);
        assert_eq!(muzero_rule(&t, &stats, None), 2);
    }

    #[test]
    fn an_unvisited_child_takes_the_bottom_of_the_range_or_the_parents_value() {
        // Priors 0.6 / 0.4, root value 0.5; action 0 visited once and worse than the root:
        // Q = -0.5 + 1 * 0 (one player, discount 1), so the root's mean is (0.5 - 0.5) / 2 = 0.
        let mut t = Tree::new(3, 2);
        t.init_root(&[0.6f32.ln(), 0.4f32.ln()], &[true; 2], 0.5);
        let leaf = Expansion {
            logits: &[0.0; 2],
            value: 0.0,
            reward: -0.5,
        };
        t.add_child(1, (ROOT, 0), &leaf, false);
        t.backup(1, 1.0, 1.0, |_| {});
        assert_eq!(t.children_q(ROOT)[0], -0.5);
        assert_eq!(t.value(ROOT), 0.0);
        // Known bounds [-1, 1]: Q(a0) normalises to 0.25, the root's value to 0.5. N = 2, so
        // the factor is sqrt2 * (1.25 + ln(19655/19652)) ~ 1.768.
        let stats = MinMaxStats::with_bounds(-1.0, 1.0);
        // Min: a0 = 0.25 + 0.6 * 1.768 / 2 = 0.78 beats a1 = 0 + 0.4 * 1.768 = 0.707.
        let select = |unvisited| select_child(&t, ROOT, &stats, 1.25, 19652.0, unvisited, None);
        assert_eq!(select(UnvisitedValue::Min), 0);
        // Parent: a1 = 0.5 + 0.707 = 1.207 now beats a0.
        assert_eq!(select(UnvisitedValue::Parent), 1);
        // Without bounds and with one value seen, values enter unnormalised: a0 scores
        // -0.5 + 0.53 = 0.03, a1 under Parent 0 + 0.707, under Min 0.707 as well.
        let mut stats = MinMaxStats::new();
        stats.update(-0.5);
        let select = |unvisited| select_child(&t, ROOT, &stats, 1.25, 19652.0, unvisited, None);
        assert_eq!(select(UnvisitedValue::Min), 1);
        assert_eq!(select(UnvisitedValue::Parent), 1);
    }

    #[test]
    fn ties_break_to_lowest_index_and_zero_priors_respect_mask() {
        let mut t = Tree::new(2, 4);
        t.init_root(&[0.0; 4], &[false, true, true, true], 0.0);
        let stats = MinMaxStats::new();
        assert_eq!(muzero_rule(&t, &stats, None), 1);
        // All priors zero: every score is 0; still never the illegal action 0.
        t.priors_mut(ROOT).fill(0.0);
        let mask = [false, true, true, true];
        assert_eq!(muzero_rule(&t, &stats, Some(&mask)), 1);
        t.priors_mut(ROOT).fill(f32::NAN);
        assert_eq!(muzero_rule(&t, &stats, Some(&mask)), 1);
    }
}
