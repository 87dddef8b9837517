//! Gumbel MuZero (Danihelka et al. 2022, "Policy improvement by planning with Gumbel").
//!
//! - **Root**: Gumbel noise `g(a)` is drawn once per search. Sequential Halving spends the
//!   simulation budget on the top `m = min(max_considered_actions, legal actions)` actions by
//!   `g + logits`, halving the candidates at every phase by `g + logits + sigma(q)`. It is
//!   implemented, as in mctx, by a precomputed schedule of *considered visit counts*
//!   ([`considered_visit_sequence`]): simulation `s` visits the best-scoring legal root child
//!   whose visit count equals `schedule[s]`.
//! - **Completed Q**: visited children keep `Q(a) = r + discount * sign * v(a)`; unvisited ones
//!   get the *mixed value* `(v_raw + sum_b N(b) * sum_{visited} p(b) Q(b) / sum_{visited} p(b))
//!   / (1 + sum_b N(b))` (paper, appendix D).
//! - **sigma**: the completed Q-values of a node are min-max rescaled to `[0, 1]` over its
//!   (legal) children (denominator at least `1e-8`, so all-equal values give 0), then
//!   `sigma(q) = (c_visit + max_b N(b)) * c_scale * q`.
//! - **Policy target**: `softmax(logits + sigma(completed Q))` over the legal root actions.
//! - **Action**: `argmax g + logits + sigma(q)` over the legal root children that received the
//!   most visits (the survivors of Sequential Halving).
//! - **Interior nodes**: deterministic, `argmax_a pi'(a) - N(a) / (1 + sum_b N(b))` with
//!   `pi' = softmax(logits + sigma(completed Q))`.
//!
//! Ties go to the lowest action index everywhere.

use rand::Rng;
use rand_distr::{Distribution, Gumbel};

use super::tree::Tree;

/// Default number of root actions Sequential Halving starts from.
pub const DEFAULT_MAX_CONSIDERED_ACTIONS: usize = 16;
/// Default `c_visit`.
pub const DEFAULT_C_VISIT: f32 = 50.0;
/// Default `c_scale`.
pub const DEFAULT_C_SCALE: f32 = 1.0;

/// Scores below this are clamped (keeps `-inf` logits comparable, as mctx does).
const LOW_SCORE: f32 = -1e9;
/// Smallest denominator of the min-max rescaling of completed Q-values.
const RESCALE_EPSILON: f32 = 1e-8;

/// The constants of `sigma`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SigmaParams {
    pub c_visit: f32,
    pub c_scale: f32,
}

impl Default for SigmaParams {
    fn default() -> Self {
        Self {
            c_visit: DEFAULT_C_VISIT,
            c_scale: DEFAULT_C_SCALE,
        }
    }
}

/// The Sequential Halving schedule: for each of the `num_simulations` simulations, the visit
/// count a root child must have to be considered, starting from `num_considered` actions.
///
/// Each phase gives every remaining candidate `max(1, n / (ceil(log2 m) * k))` more visits
/// (`k` candidates), then halves `k` (never below 2). With `m <= 1` the schedule is `0, 1, 2,
/// ...` (the single best action gets every visit).
pub fn considered_visit_sequence(num_considered: usize, num_simulations: usize) -> Vec<u32> {
    if num_considered <= 1 {
        return (0..num_simulations as u32).collect();
    }
    let phases = (usize::BITS - (num_considered - 1).leading_zeros()) as usize; // ceil(log2 m)
    let mut schedule = Vec::with_capacity(num_simulations + num_considered);
    let mut candidates = num_considered;
    let mut level = 0u32;
    while schedule.len() < num_simulations {
        let rounds = (num_simulations / (phases * candidates)).max(1);
        for _ in 0..rounds {
            schedule.extend(std::iter::repeat_n(level, candidates));
            level += 1;
        }
        candidates = (candidates / 2).max(2);
    }
    schedule.truncate(num_simulations);
    schedule
}

/// Fill `out` with i.i.d. standard Gumbel samples.
pub fn sample_gumbel<R: Rng + ?Sized>(rng: &mut R, out: &mut [f32]) {
    let dist = Gumbel::new(0.0f32, 1.0).expect("standard Gumbel parameters are valid");
    for g in out {
        *g = dist.sample(rng);
    }
}

/// Completed Q-values of the children of `node` (see the module docs) written into `out`.
/// Q-values are the edge statistics backed up by [`Tree::backup`].
pub fn completed_q(tree: &Tree, node: usize, out: &mut [f32]) {
    let priors = tree.priors(node);
    let visits = tree.children_visits(node);
    let qs = tree.children_q(node);
    let (mut total_visits, mut prob_sum, mut weighted) = (0u32, 0.0f32, 0.0f32);
    for a in 0..out.len() {
        if visits[a] > 0 {
            let p = priors[a].max(f32::MIN_POSITIVE);
            total_visits += visits[a];
            prob_sum += p;
            weighted += p * qs[a];
        }
    }
    let mixed = if total_visits == 0 {
        tree.raw_value(node)
    } else {
        let n = total_visits as f32;
        (tree.raw_value(node) + n * weighted / prob_sum) / (n + 1.0)
    };
    for (a, o) in out.iter_mut().enumerate() {
        *o = if visits[a] > 0 { qs[a] } else { mixed };
    }
}

/// `sigma(completed Q)` of the children of `node` into `out`: completed Q-values, min-max
/// rescaled over the allowed children (all when `mask` is `None`), times
/// `(c_visit + max_b N(b)) * c_scale`. Disallowed entries are left as completed Q-values.
pub fn sigma_completed_q(
    tree: &Tree,
    node: usize,
    params: SigmaParams,
    mask: Option<&[bool]>,
    out: &mut [f32],
) {
    completed_q(tree, node, out);
    let visits = tree.children_visits(node);
    let max_visits = (0..out.len())
        .filter(|&a| mask.is_none_or(|m| m[a]))
        .map(|a| visits[a])
        .max()
        .unwrap_or(0);
    rescale_sigma(out, max_visits as f32, params, mask);
}

/// `sigma` of completed Q-values in place: min-max rescaled over the allowed entries (all when
/// `mask` is `None`), times `(c_visit + max_visits) * c_scale`. Disallowed entries are left as
/// they are.
pub fn rescale_sigma(q: &mut [f32], max_visits: f32, params: SigmaParams, mask: Option<&[bool]>) {
    let (mut lo, mut hi) = (f32::INFINITY, f32::NEG_INFINITY);
    for (a, &v) in q.iter().enumerate() {
        if mask.is_none_or(|m| m[a]) {
            lo = lo.min(v);
            hi = hi.max(v);
        }
    }
    let scale = (params.c_visit + max_visits) * params.c_scale;
    let denom = (hi - lo).max(RESCALE_EPSILON);
    for (a, v) in q.iter_mut().enumerate() {
        if mask.is_none_or(|m| m[a]) {
            *v = scale * (*v - lo) / denom;
        }
    }
}

/// Root action for the Sequential Halving step whose considered visit count is
/// `considered_visit`: the legal child with exactly that many visits maximising
/// `g + logits + sigma(q)`. If no legal child has that count (never with a well-formed
/// schedule), the best legal child overall. `scratch` holds `num_actions` values.
pub fn select_root_action(
    tree: &Tree,
    node: usize,
    gumbel: &[f32],
    considered_visit: u32,
    legal: &[bool],
    params: SigmaParams,
    scratch: &mut [f32],
) -> usize {
    sigma_completed_q(tree, node, params, Some(legal), scratch);
    let log_priors = tree.log_priors(node);
    let visits = tree.children_visits(node);
    let mut best_considered: Option<(usize, f32)> = None;
    let mut best_any: Option<(usize, f32)> = None;
    for a in 0..legal.len() {
        if !legal[a] {
            continue;
        }
        let score = (gumbel[a] + log_priors[a] + scratch[a]).max(LOW_SCORE);
        let better = |best: Option<(usize, f32)>| best.is_none_or(|(_, s)| score > s);
        if better(best_any) {
            best_any = Some((a, score));
        }
        if visits[a] == considered_visit && better(best_considered) {
            best_considered = Some((a, score));
        }
    }
    best_considered.or(best_any).map_or(0, |(a, _)| a)
}

/// Softmax in place over the allowed entries; disallowed ones become 0. NaN counts as `-inf`;
/// if no allowed entry is finite, the allowed entries get a uniform distribution.
pub fn softmax_in_place(values: &mut [f32], mask: Option<&[bool]>) {
    let allowed = |a: usize| mask.is_none_or(|m| m[a]);
    let mut max = f32::NEG_INFINITY;
    let mut count = 0usize;
    for (a, &v) in values.iter().enumerate() {
        if allowed(a) {
            count += 1;
            if v > max {
                max = v;
            }
        }
    }
    if !max.is_finite() {
        let p = 1.0 / count.max(1) as f32;
        for (a, v) in values.iter_mut().enumerate() {
            *v = if allowed(a) { p } else { 0.0 };
        }
        return;
    }
    let mut total = 0.0f32;
    for (a, v) in values.iter_mut().enumerate() {
        *v = if allowed(a) && !v.is_nan() {
            (*v - max).exp()
        } else {
            0.0
        };
        total += *v;
    }
    let inv = 1.0 / total;
    for v in values.iter_mut() {
        *v *= inv;
    }
}

/// The improved policy `softmax(logits + sigma(completed Q))` of `node` into `out`, over the
/// allowed actions (all when `mask` is `None`; disallowed actions get 0).
pub fn improved_policy(
    tree: &Tree,
    node: usize,
    params: SigmaParams,
    mask: Option<&[bool]>,
    out: &mut [f32],
) {
    sigma_completed_q(tree, node, params, mask, out);
    for (o, &lp) in out.iter_mut().zip(tree.log_priors(node)) {
        *o += lp;
    }
    softmax_in_place(out, mask);
}

/// Deterministic interior selection: `argmax_a pi'(a) - N(a) / (1 + sum_b N(b))`.
pub fn select_interior_action(
    tree: &Tree,
    node: usize,
    params: SigmaParams,
    scratch: &mut [f32],
) -> usize {
    improved_policy(tree, node, params, None, scratch);
    let visits = tree.children_visits(node);
    let total: u32 = visits.iter().sum();
    let inv = 1.0 / (1.0 + total as f32);
    let mut best = 0;
    let mut best_score = f32::NEG_INFINITY;
    for (a, &p) in scratch.iter().enumerate() {
        let score = p - visits[a] as f32 * inv;
        if score > best_score {
            best = a;
            best_score = score;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::search::tree::{Expansion, ROOT};

    #[test]
    fn schedule_matches_sequential_halving() {
        // 4 actions, 8 simulations: one visit each, then 2 more for each of the best two.
        assert_eq!(
            considered_visit_sequence(4, 8),
            vec![0, 0, 0, 0, 1, 1, 2, 2]
        );
        assert_eq!(considered_visit_sequence(4, 4), vec![0, 0, 0, 0]);
        assert_eq!(considered_visit_sequence(1, 4), vec![0, 1, 2, 3]);
        // 2 actions (1 phase), 6 simulations: 3 rounds of 2.
        assert_eq!(considered_visit_sequence(2, 6), vec![0, 0, 1, 1, 2, 2]);
        // 16 actions, 32 simulations: 4 phases; 16 x 1 (32/64 -> 1), 8 x 1 (32/32), then
        // 4 x 2 (32/16) -> 16 + 8 + 8 = 32.
        let s = considered_visit_sequence(16, 32);
        assert_eq!(s.len(), 32);
        assert!(s[..16].iter().all(|&v| v == 0));
        assert!(s[16..24].iter().all(|&v| v == 1));
        assert_eq!(&s[24..], &[2, 2, 2, 2, 3, 3, 3, 3]);
        // 3 actions, 5 simulations: ceil(log2 3) = 2; 3 x 1 (5/6 -> 1), then 2 x 1.
        assert_eq!(considered_visit_sequence(3, 5), vec![0, 0, 0, 1, 1]);
    }

    fn tree_with_two_children() -> Tree {
        // Discount 0.5. Root: priors 0.5/0.25/0.25, raw value 1. Child a0: reward 1, value 2
        // (Q = 1 + 0.5 * 2 = 2); child a1: reward 0, value -2, plus a grandchild returning
        // -4 + 0.5 * 0 = -4 -> value (-2 - 4) / 2 = -3, Q = -1.5.
        let mut t = Tree::new(4, 3);
        let logits = [0.5f32.ln(), 0.25f32.ln(), 0.25f32.ln()];
        t.init_root(&logits, &[true; 3], 1.0);
        t.add_child(
            1,
            (ROOT, 0),
            &Expansion {
                logits: &[0.0; 3],
                value: 2.0,
                reward: 1.0,
            },
            false,
        );
        t.backup(1, 0.5, 1.0, |_| {});
        t.add_child(
            2,
            (ROOT, 1),
            &Expansion {
                logits: &[0.0; 3],
                value: -2.0,
                reward: 0.0,
            },
            false,
        );
        t.backup(2, 0.5, 1.0, |_| {});
        t.add_child(
            3,
            (2, 0),
            &Expansion {
                logits: &[0.0; 3],
                value: 0.0,
                reward: -4.0,
            },
            false,
        );
        t.backup(3, 0.5, 1.0, |_| {});
        assert_eq!(t.children_visits(ROOT), &[1, 2, 0]);
        t
    }

    #[test]
    fn completed_q_uses_mixed_value() {
        let t = tree_with_two_children();
        let mut q = [0.0f32; 3];
        completed_q(&t, ROOT, &mut q);
        assert_eq!(q[0], 2.0);
        assert_eq!(q[1], -1.5);
        // visits 1 and 2 (sum 3); weighted Q = (0.5 * 2 + 0.25 * -1.5) / 0.75 = 0.8333;
        // mixed = (1 + 3 * 0.8333) / 4 = 0.875.
        assert!((q[2] - 0.875).abs() < 1e-5, "{q:?}");
        // sigma: rescale over [-1.5, 2] and scale by (50 + 2) * 1.
        let mut s = [0.0f32; 3];
        sigma_completed_q(&t, ROOT, SigmaParams::default(), None, &mut s);
        assert!((s[0] - 52.0).abs() < 1e-4);
        assert_eq!(s[1], 0.0);
        assert!((s[2] - 52.0 * (0.875 + 1.5) / 3.5).abs() < 1e-3, "{s:?}");
        // Improved policy puts almost everything on a0.
        let mut pi = [0.0f32; 3];
        improved_policy(&t, ROOT, SigmaParams::default(), None, &mut pi);
        assert!((pi.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(pi[0] > 0.99, "{pi:?}");
        // With a mask, the illegal action gets 0 and is excluded from the rescaling.
        let mask = [true, true, false];
        improved_policy(&t, ROOT, SigmaParams::default(), Some(&mask), &mut pi);
        assert_eq!(pi[2], 0.0);
        // Interior rule: pi'(a0) - 1/4 vs pi'(a1) - 2/4 vs pi'(a2) - 0.
        let mut scratch = [0.0f32; 3];
        let a = select_interior_action(&t, ROOT, SigmaParams::default(), &mut scratch);
        assert_eq!(a, 0);
    }

    #[test]
    fn root_action_respects_schedule_and_mask() {
        let t = tree_with_two_children();
        let g = [0.0f32; 3];
        let mut scratch = [0.0f32; 3];
        let p = SigmaParams::default();
        // considered visit 0: only a2 is unvisited.
        let a = select_root_action(&t, ROOT, &g, 0, &[true; 3], p, &mut scratch);
        assert_eq!(a, 2);
        // considered visit 1: only a0.
        let a = select_root_action(&t, ROOT, &g, 1, &[true; 3], p, &mut scratch);
        assert_eq!(a, 0);
        // considered visit 2: a1, even though a0 scores higher.
        let a = select_root_action(&t, ROOT, &g, 2, &[true; 3], p, &mut scratch);
        assert_eq!(a, 1);
        // a1 illegal and nobody else has 2 visits: fall back to the best legal child, a0.
        let mask = [true, false, true];
        let a = select_root_action(&t, ROOT, &g, 2, &mask, p, &mut scratch);
        assert_eq!(a, 0);
        // Huge Gumbel noise on a2 wins among the unvisited... and the mask still holds.
        let g = [0.0, 1e6, 0.0];
        let a = select_root_action(&t, ROOT, &g, 5, &mask, p, &mut scratch);
        assert_ne!(a, 1);
    }

    #[test]
    fn gumbel_samples_look_standard() {
        use rand::SeedableRng;
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut g = vec![0.0f32; 20000];
        sample_gumbel(&mut rng, &mut g);
        let mean = g.iter().sum::<f32>() / g.len() as f32;
        // Mean of the standard Gumbel is the Euler-Mascheroni constant, 0.5772.
        assert!((mean - 0.5772).abs() < 0.05, "{mean}");
    }
}
