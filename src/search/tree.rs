//! The search tree of one batch element: a flat, preallocated arena of scalars.
//!
//! Node `0` is the root ([`ROOT`]); simulation `s` creates node `s + 1`, so a search with
//! `num_simulations` simulations needs exactly `num_simulations + 1` nodes, allocated up front.
//! Per-child arrays (`priors`, `log_priors`, `children`, and the edge statistics
//! `child_visits`, `child_q`) are stored row-major, `[node * num_actions + action]`, so that
//! selection scans contiguous memory; a row is initialised when its node is created, so
//! [`Tree::reset`] is O(1) once the allocations are large enough and reuses them across
//! searches.
//!
//! Values are stored from the perspective of the player to move at the node (`to_play`);
//! [`Tree::q`] converts a child's value to its parent's perspective. The edge statistics of a
//! child (`child_visits`, `child_q` in its parent's row) mirror the child's own visit count and
//! `Q` and are refreshed by [`Tree::backup`].

/// Index of the root node.
pub const ROOT: usize = 0;
/// Marks a child slot whose node has not been created (expanded) yet.
pub const UNVISITED: u32 = u32::MAX;
/// Parent of the root.
pub const NO_PARENT: u32 = u32::MAX;

/// One search tree (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct Tree {
    num_actions: usize,
    capacity: usize,
    len: usize,
    parent: Vec<u32>,
    action: Vec<u32>,
    depth: Vec<u32>,
    visits: Vec<u32>,
    value_sum: Vec<f32>,
    reward: Vec<f32>,
    raw_value: Vec<f32>,
    to_play: Vec<i8>,
    priors: Vec<f32>,
    log_priors: Vec<f32>,
    children: Vec<u32>,
    child_visits: Vec<u32>,
    child_q: Vec<f32>,
    /// The node's proven value (from its own perspective) under the search's solver; NaN
    /// while unproven.
    solved: Vec<f32>,
}

/// What the model predicted for a newly reached state: the prior logits of its children
/// (`[A]`), its value (for the player to move there) and the reward of the transition into it
/// (for the player who acted).
#[derive(Debug, Clone, Copy)]
pub struct Expansion<'a> {
    pub logits: &'a [f32],
    pub value: f32,
    pub reward: f32,
}

impl Tree {
    /// An empty tree with room for `capacity` nodes of `num_actions` children each.
    pub fn new(capacity: usize, num_actions: usize) -> Self {
        let mut tree = Self::default();
        tree.reset(capacity, num_actions);
        tree
    }

    /// Empty the tree for a new search, keeping (and growing if needed) the allocations.
    /// Node data is (re)initialised when each node is created, not here.
    pub fn reset(&mut self, capacity: usize, num_actions: usize) {
        assert!(
            capacity < u32::MAX as usize,
            "tree capacity must fit in u32"
        );
        self.num_actions = num_actions;
        self.len = 0;
        self.capacity = capacity;
        let per_child = capacity * num_actions;
        grow(&mut self.parent, capacity, NO_PARENT);
        grow(&mut self.action, capacity, 0);
        grow(&mut self.depth, capacity, 0);
        grow(&mut self.visits, capacity, 0);
        grow(&mut self.value_sum, capacity, 0.0);
        grow(&mut self.reward, capacity, 0.0);
        grow(&mut self.raw_value, capacity, 0.0);
        grow(&mut self.to_play, capacity, 1);
        grow(&mut self.priors, per_child, 0.0);
        grow(&mut self.log_priors, per_child, f32::NEG_INFINITY);
        grow(&mut self.children, per_child, UNVISITED);
        grow(&mut self.child_visits, per_child, 0);
        grow(&mut self.child_q, per_child, 0.0);
        grow(&mut self.solved, capacity, f32::NAN);
    }

    /// Number of nodes the tree can hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Number of nodes created so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no node (not even the root) exists yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of actions (children per node).
    pub fn num_actions(&self) -> usize {
        self.num_actions
    }

    /// Create the root from its policy logits (softmaxed over `legal` actions only, illegal
    /// priors 0) and its predicted value, which counts as the root's first visit.
    pub fn init_root(&mut self, logits: &[f32], legal: &[bool], value: f32) {
        assert!(self.capacity() > 0, "tree has no capacity");
        self.len = 1;
        self.parent[ROOT] = NO_PARENT;
        self.action[ROOT] = 0;
        self.depth[ROOT] = 0;
        self.to_play[ROOT] = 1;
        self.reward[ROOT] = 0.0;
        self.init_node(ROOT, logits, Some(legal), value);
    }

    /// Create node `node` as the child of `parent` through `action` (no action mask below the
    /// root) from the model's `expansion`, and count its predicted value as its first visit.
    /// `flip` negates the player to move (two-player games). Returns the depth of the new node.
    ///
    /// # Panics
    /// If `node` is not the next free index or the child slot is already taken.
    pub fn add_child(
        &mut self,
        node: usize,
        (parent, action): (usize, usize),
        expansion: &Expansion<'_>,
        flip: bool,
    ) -> usize {
        let Expansion {
            logits,
            value,
            reward,
        } = *expansion;
        assert_eq!(node, self.len, "nodes must be created in order");
        assert!(node < self.capacity, "tree is full");
        assert!(parent < self.len, "parent {parent} does not exist");
        let slot = parent * self.num_actions + action;
        assert_eq!(self.children[slot], UNVISITED, "child already expanded");
        self.children[slot] = node as u32;
        self.len += 1;
        self.parent[node] = parent as u32;
        self.action[node] = action as u32;
        let depth = self.depth[parent] + 1;
        self.depth[node] = depth;
        self.to_play[node] = if flip {
            -self.to_play[parent]
        } else {
            self.to_play[parent]
        };
        self.reward[node] = reward;
        self.init_node(node, logits, None, value);
        depth as usize
    }

    fn init_node(&mut self, node: usize, logits: &[f32], legal: Option<&[bool]>, value: f32) {
        let a = self.num_actions;
        let row = node * a..(node + 1) * a;
        masked_softmax(
            logits,
            legal,
            &mut self.priors[row.clone()],
            &mut self.log_priors[row.clone()],
        );
        self.children[row.clone()].fill(UNVISITED);
        self.child_visits[row.clone()].fill(0);
        self.child_q[row].fill(0.0);
        self.visits[node] = 1;
        self.value_sum[node] = value;
        self.raw_value[node] = value;
        self.solved[node] = f32::NAN;
    }

    /// Mark `node` proven at `value` (its own perspective): its mean becomes that value, and
    /// [`Tree::backup`] carries it up from there on.
    pub fn solve(&mut self, node: usize, value: f32) {
        self.solved[node] = value;
        self.value_sum[node] = value * self.visits[node] as f32;
    }

    /// `node`'s proven value, if it is proven.
    #[inline]
    pub fn solved(&self, node: usize) -> Option<f32> {
        let v = self.solved[node];
        (!v.is_nan()).then_some(v)
    }

    /// What `node`'s proven children prove about it (MCTS-Solver): the best proven `Q` of
    /// its moves when one of them reaches `win` or more (nothing can do better), or when
    /// every move with a prior above 0 is proven; `None` otherwise.
    pub fn proven_value(&self, node: usize, discount: f32, sign: f32, win: f32) -> Option<f32> {
        let a = self.num_actions;
        let mut best = f32::NEG_INFINITY;
        let mut all = true;
        for action in 0..a {
            if self.priors[node * a + action] <= 0.0 {
                continue;
            }
            match self
                .child(node, action)
                .and_then(|c| self.solved(c).map(|v| self.reward[c] + discount * sign * v))
            {
                Some(q) => {
                    if q >= win {
                        return Some(q);
                    }
                    best = best.max(q);
                }
                None => all = false,
            }
        }
        (all && best > f32::NEG_INFINITY).then_some(best)
    }

    /// Add one backed-up return (from the node's own perspective). Does not refresh the edge
    /// statistics in the parent's row (see [`Tree::backup`]).
    #[inline]
    pub fn record_visit(&mut self, node: usize, value: f32) {
        self.visits[node] += 1;
        self.value_sum[node] += value;
    }

    /// Back the value of the freshly created `leaf` (already counted as its first visit) up to
    /// the root: each ancestor receives `G_parent = r_child + discount * sign * G_child`
    /// (`sign = -1` in two-player games), each node's edge statistics in its parent's row are
    /// refreshed, and `on_q` sees every updated `Q(node)` (as seen from its parent), leaf first.
    pub fn backup(&mut self, leaf: usize, discount: f32, sign: f32, mut on_q: impl FnMut(f32)) {
        let a = self.num_actions;
        let mut node = leaf;
        let mut ret = self.solved(leaf).unwrap_or(self.raw_value[leaf]);
        while node != ROOT {
            let parent = self.parent[node] as usize;
            let slot = parent * a + self.action[node] as usize;
            let q = self.q(node, discount, sign);
            self.child_visits[slot] = self.visits[node];
            self.child_q[slot] = q;
            on_q(q);
            ret = self.reward[node] + discount * sign * ret;
            self.visits[parent] += 1;
            match self.solved(parent) {
                // A proven node passes its exact value up, whatever was sampled below it.
                Some(v) => {
                    ret = v;
                    self.solve(parent, v);
                }
                None => self.value_sum[parent] += ret,
            }
            node = parent;
        }
    }

    /// The child created through `action`, if any.
    #[inline]
    pub fn child(&self, node: usize, action: usize) -> Option<usize> {
        let c = self.children[node * self.num_actions + action];
        (c != UNVISITED).then_some(c as usize)
    }

    /// The child indices of `node` ([`UNVISITED`] where not expanded).
    #[inline]
    pub fn children(&self, node: usize) -> &[u32] {
        &self.children[node * self.num_actions..(node + 1) * self.num_actions]
    }

    /// Prior probabilities of the children of `node`.
    #[inline]
    pub fn priors(&self, node: usize) -> &[f32] {
        &self.priors[node * self.num_actions..(node + 1) * self.num_actions]
    }

    /// Mutable priors (root exploration noise).
    #[inline]
    pub fn priors_mut(&mut self, node: usize) -> &mut [f32] {
        &mut self.priors[node * self.num_actions..(node + 1) * self.num_actions]
    }

    /// Normalised log-priors (`ln prior`, `-inf` where the prior is 0) of the children of `node`.
    #[inline]
    pub fn log_priors(&self, node: usize) -> &[f32] {
        &self.log_priors[node * self.num_actions..(node + 1) * self.num_actions]
    }

    /// Parent of `node` ([`NO_PARENT`] for the root).
    #[inline]
    pub fn parent(&self, node: usize) -> u32 {
        self.parent[node]
    }

    /// Action leading from the parent to `node`.
    #[inline]
    pub fn action(&self, node: usize) -> usize {
        self.action[node] as usize
    }

    /// Depth of `node` (root = 0).
    #[inline]
    pub fn depth(&self, node: usize) -> usize {
        self.depth[node] as usize
    }

    /// Visit count of `node`, counting its expansion.
    #[inline]
    pub fn visits(&self, node: usize) -> u32 {
        self.visits[node]
    }

    /// Visit count of the child through `action` (0 when not expanded), as of the last
    /// [`Tree::backup`] through it.
    #[inline]
    pub fn child_visits(&self, node: usize, action: usize) -> u32 {
        self.child_visits[node * self.num_actions + action]
    }

    /// Visit counts of all children of `node` (see [`Tree::child_visits`]).
    #[inline]
    pub fn children_visits(&self, node: usize) -> &[u32] {
        &self.child_visits[node * self.num_actions..(node + 1) * self.num_actions]
    }

    /// `Q` of every child of `node` from `node`'s perspective (0 where unvisited), as of the
    /// last [`Tree::backup`] through it, with the discount and sign given there.
    #[inline]
    pub fn children_q(&self, node: usize) -> &[f32] {
        &self.child_q[node * self.num_actions..(node + 1) * self.num_actions]
    }

    /// Reward of the transition into `node`, from the parent's perspective.
    #[inline]
    pub fn reward(&self, node: usize) -> f32 {
        self.reward[node]
    }

    /// The model's value prediction at `node`.
    #[inline]
    pub fn raw_value(&self, node: usize) -> f32 {
        self.raw_value[node]
    }

    /// Player to move at `node`: `+1` for the root player, `-1` for the opponent.
    #[inline]
    pub fn to_play(&self, node: usize) -> i8 {
        self.to_play[node]
    }

    /// Mean backed-up value of `node` from its own perspective (0 if never visited).
    #[inline]
    pub fn value(&self, node: usize) -> f32 {
        match self.visits[node] {
            0 => 0.0,
            n => self.value_sum[node] / n as f32,
        }
    }

    /// `Q` of `node` seen from its parent: `reward + discount * sign * value(node)`, where
    /// `sign` is `-1` in two-player games (the child's value is the opponent's) and `+1` else.
    #[inline]
    pub fn q(&self, node: usize, discount: f32, sign: f32) -> f32 {
        self.reward[node] + discount * sign * self.value(node)
    }
}

fn grow<T: Copy>(v: &mut Vec<T>, len: usize, value: T) {
    if v.len() < len {
        v.resize(len, value);
    }
}

/// Softmax of `logits` over the allowed entries (all when `mask` is `None`) into `probs`,
/// and the normalised log-probabilities into `log_probs`; disallowed entries get probability
/// 0 and log-probability `-inf`. NaN logits count as `-inf`. If no allowed logit is finite
/// (all `-inf`/NaN, or a `+inf`), the allowed entries get a uniform distribution.
pub fn masked_softmax(
    logits: &[f32],
    mask: Option<&[bool]>,
    probs: &mut [f32],
    log_probs: &mut [f32],
) {
    let allowed = |a: usize| mask.is_none_or(|m| m[a]);
    let mut max = f32::NEG_INFINITY;
    let mut count = 0usize;
    for (a, &l) in logits.iter().enumerate() {
        if allowed(a) {
            count += 1;
            if l > max {
                max = l;
            }
        }
    }
    if !max.is_finite() {
        let p = if count > 0 { 1.0 / count as f32 } else { 0.0 };
        for a in 0..logits.len() {
            let ok = allowed(a);
            probs[a] = if ok { p } else { 0.0 };
            log_probs[a] = if ok { p.ln() } else { f32::NEG_INFINITY };
        }
        return;
    }
    let mut total = 0.0f32;
    for (a, &l) in logits.iter().enumerate() {
        let e = if allowed(a) && !l.is_nan() {
            (l - max).exp()
        } else {
            0.0
        };
        probs[a] = e;
        total += e;
    }
    let inv = 1.0 / total;
    let log_total = total.ln();
    for (a, &l) in logits.iter().enumerate() {
        if probs[a] > 0.0 {
            probs[a] *= inv;
            log_probs[a] = l - max - log_total;
        } else {
            log_probs[a] = f32::NEG_INFINITY;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softmax_masks_and_falls_back() {
        let (mut p, mut lp) = ([0.0f32; 3], [0.0f32; 3]);
        masked_softmax(
            &[0.0, 100.0, 0.0],
            Some(&[true, false, true]),
            &mut p,
            &mut lp,
        );
        assert_eq!(p, [0.5, 0.0, 0.5]);
        assert_eq!(lp[1], f32::NEG_INFINITY);
        assert!((lp[0] - 0.5f32.ln()).abs() < 1e-6);
        masked_softmax(
            &[f32::NEG_INFINITY; 3],
            Some(&[false, true, true]),
            &mut p,
            &mut lp,
        );
        assert_eq!(p, [0.0, 0.5, 0.5]);
        masked_softmax(&[f32::NAN, 1.0f32.ln(), 3.0f32.ln()], None, &mut p, &mut lp);
        assert_eq!(p[0], 0.0);
        assert!((p[1] - 0.25).abs() < 1e-6 && (p[2] - 0.75).abs() < 1e-6);
    }

    #[test]
    fn arena_links_and_values() {
        let mut t = Tree::new(3, 2);
        t.init_root(&[0.0, 0.0], &[true, true], 0.5);
        assert_eq!((t.len(), t.visits(ROOT), t.value(ROOT)), (1, 1, 0.5));
        assert_eq!(t.parent(ROOT), NO_PARENT);
        assert_eq!(t.child(ROOT, 1), None);
        let d = t.add_child(
            1,
            (ROOT, 1),
            &Expansion {
                logits: &[0.0, 0.0],
                value: 2.0,
                reward: 1.0,
            },
            true,
        );
        assert_eq!(d, 1);
        assert_eq!(t.child(ROOT, 1), Some(1));
        assert_eq!(t.to_play(1), -1);
        assert_eq!(t.action(1), 1);
        // Q from the root: 1 + 0.5 * (-1) * 2 = 0.
        assert_eq!(t.q(1, 0.5, -1.0), 0.0);
        let mut seen = vec![];
        t.backup(1, 0.5, -1.0, |q| seen.push(q));
        assert_eq!(seen, vec![0.0]);
        assert_eq!(t.children_visits(ROOT), &[0, 1]);
        assert_eq!((t.visits(ROOT), t.value(ROOT)), (2, 0.25)); // (0.5 + 0) / 2
        t.record_visit(1, 4.0);
        assert_eq!(t.value(1), 3.0);
        // Chain a grandchild: reward 2, value 6, seen from node 1: 2 - 0.5 * 6 = -1.
        t.add_child(
            2,
            (1, 0),
            &Expansion {
                logits: &[0.0, 0.0],
                value: 6.0,
                reward: 2.0,
            },
            true,
        );
        assert_eq!(t.to_play(2), 1);
        let mut seen = vec![];
        t.backup(2, 0.5, -1.0, |q| seen.push(q));
        // node 1 gets -1: value (2 + 4 - 1) / 3 = 5/3, Q = 1 - 0.5 * 5/3 = 1/6;
        // the root gets 1 - 0.5 * (-1) = 1.5: value (0.5 + 0 + 1.5) / 3.
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[0], -1.0);
        assert!((seen[1] - 1.0 / 6.0).abs() < 1e-6, "{seen:?}");
        assert_eq!(t.children_q(ROOT), &[0.0, seen[1]]);
        assert_eq!(t.children_visits(ROOT), &[0, 3]);
        assert!((t.value(ROOT) - 2.0 / 3.0).abs() < 1e-6);
        assert_eq!(t.depth(2), 2);
        t.reset(3, 2);
        assert!(t.is_empty());
        t.init_root(&[0.0, 0.0], &[true, true], 0.0);
        assert_eq!(t.child(ROOT, 1), None);
        assert_eq!(t.children_visits(ROOT), &[0, 0]);
    }
}
