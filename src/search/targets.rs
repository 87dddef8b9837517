//! The root policy targets: what a finished search teaches the policy head, per selection rule.
//!
//! - **pUCT** (MuZero): the normalised root visit counts, `pi(a) = N(a) / sum_b N(b)`.
//! - **Gumbel** (Gumbel MuZero): the improved policy `softmax(logits + sigma(completed Q))` over
//!   the legal root actions, and the action to play: `argmax g + logits + sigma(q)` over the
//!   legal root children with the most visits (the survivors of Sequential Halving).
//!
//! Illegal root actions get 0 either way (they are never visited, and the improved policy is
//! masked). Each function handles the root of one tree; `[A]` is one row of the batch.

use super::gumbel::{self, SigmaParams};
use super::tree::{Tree, ROOT};

/// The pUCT target: `visits` (`[A]`, root-child visit counts) normalised to sum to 1, into
/// `out` (`[A]`). All zeros when nothing was visited.
pub fn visit_count_policy(visits: &[u32], out: &mut [f32]) {
    let total: u32 = visits.iter().sum();
    let inv = if total > 0 { 1.0 / total as f32 } else { 0.0 };
    for (t, &n) in out.iter_mut().zip(visits) {
        *t = n as f32 * inv;
    }
}

/// The Gumbel MuZero root target of `tree`: writes the improved policy into `out` (`[A]`, 0 on
/// illegal actions) and returns the action to play. `legal` (`[A]`) is the root mask, `noise`
/// (`[A]`) the root Gumbel noise of the search (zeros without noise), `scratch` holds `A`
/// values.
pub fn gumbel_root_target(
    tree: &Tree,
    legal: &[bool],
    noise: &[f32],
    params: SigmaParams,
    out: &mut [f32],
    scratch: &mut [f32],
) -> usize {
    gumbel::improved_policy(tree, ROOT, params, Some(legal), out);
    let most = tree
        .children_visits(ROOT)
        .iter()
        .zip(legal)
        .filter(|(_, &ok)| ok)
        .map(|(&n, _)| n)
        .max()
        .unwrap_or(0);
    gumbel::select_root_action(tree, ROOT, noise, most, legal, params, scratch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::search::tree::Expansion;

    #[test]
    fn visit_counts_normalise_to_one() {
        let mut out = [9.0f32; 4];
        visit_count_policy(&[0, 3, 1, 0], &mut out);
        assert_eq!(out, [0.0, 0.75, 0.25, 0.0]);
        visit_count_policy(&[0; 4], &mut out);
        assert_eq!(out, [0.0; 4]);
    }

    /// Uniform root over 3 actions, action 2 illegal. Action 0 (reward 1, value 0: Q = 1) and
    /// action 1 (reward 0, value 0: Q = 0) are visited once each, discount 1.
    fn root_with_two_visited_children() -> Tree {
        let mut t = Tree::new(3, 3);
        t.init_root(&[0.0; 3], &[true, true, false], 0.0);
        t.add_child(
            1,
            (ROOT, 0),
            &Expansion {
                logits: &[0.0; 3],
                value: 0.0,
                reward: 1.0,
            },
            false,
        );
        t.backup(1, 1.0, 1.0, |_| {});
        t.add_child(
            2,
            (ROOT, 1),
            &Expansion {
                logits: &[0.0; 3],
                value: 0.0,
                reward: 0.0,
            },
            false,
        );
        t.backup(2, 1.0, 1.0, |_| {});
        assert_eq!(t.children_visits(ROOT), &[1, 1, 0]);
        t
    }

    #[test]
    fn gumbel_target_is_the_masked_improved_policy_and_plays_the_best_survivor() {
        let t = root_with_two_visited_children();
        let legal = [true, true, false];
        let (mut out, mut scratch) = ([0.0f32; 3], [0.0f32; 3]);
        let params = SigmaParams::default();
        // sigma = (50 + 1) * 1 * rescaled Q: 51 for action 0, 0 for action 1.
        let action = gumbel_root_target(&t, &legal, &[0.0; 3], params, &mut out, &mut scratch);
        assert_eq!(action, 0);
        assert_eq!(out[2], 0.0);
        assert!((out.iter().sum::<f32>() - 1.0).abs() < 1e-6, "{out:?}");
        assert!(out[0] > 0.99, "{out:?}");
        // The noise decides among the survivors (both have 1 visit)...
        let noise = [0.0, 100.0, 0.0];
        let action = gumbel_root_target(&t, &legal, &noise, params, &mut out, &mut scratch);
        assert_eq!(action, 1);
        assert!(out[0] > 0.99, "the target ignores the noise: {out:?}");
        // ...but never brings back an illegal action.
        let noise = [0.0, 0.0, 1e6];
        let action = gumbel_root_target(&t, &legal, &noise, params, &mut out, &mut scratch);
        assert_eq!(action, 0);
    }
}
