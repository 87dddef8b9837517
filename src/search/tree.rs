//! The search tree of one batch element: a flat, preallocated arena of scalars.
//!
//! Node `0` is the root ([`ROOT`]); simulation `s` creates node `s + 1`, so a search with
//! `num_simulations` simulations needs exactly `num_simulations + 1` nodes, allocated up front.
//! Per-child arrays (`priors`, `log_priors`, `children`) are stored row-major,
//! `[node * num_actions + action]`. [`Tree::reset`] reuses the allocations across searches.
//!
//! Values are stored from the perspective of the player to move at the node (`to_play`);
//! [`Tree::q`] converts a child's value to its parent's perspective.

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
}

impl Tree {
    /// An empty tree with room for `capacity` nodes of `num_actions` children each.
    pub fn new(capacity: usize, num_actions: usize) -> Self {
        let mut tree = Self::default();
        tree.reset(capacity, num_actions);
        tree
    }

    /// Empty the tree for a new search, keeping (and growing if needed) the allocations.
    pub fn reset(&mut self, capacity: usize, num_actions: usize) {
        assert!(
            capacity < u32::MAX as usize,
            "tree capacity must fit in u32"
        );
        self.num_actions = num_actions;
        self.len = 0;
        let per_child = capacity * num_actions;
        reset_vec(&mut self.parent, capacity, NO_PARENT);
        reset_vec(&mut self.action, capacity, 0);
        reset_vec(&mut self.depth, capacity, 0);
        reset_vec(&mut self.visits, capacity, 0);
        reset_vec(&mut self.value_sum, capacity, 0.0);
        reset_vec(&mut self.reward, capacity, 0.0);
        reset_vec(&mut self.raw_value, capacity, 0.0);
        reset_vec(&mut self.to_play, capacity, 1);
        reset_vec(&mut self.priors, per_child, 0.0);
        reset_vec(&mut self.log_priors, per_child, f32::NEG_INFINITY);
        reset_vec(&mut self.children, per_child, UNVISITED);
    }

    /// Number of nodes the tree can hold.
    pub fn capacity(&self) -> usize {
        self.parent.len()
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
    /// root) and count its predicted value as its first visit. `flip` negates the player to move
    /// (two-player games). Returns the depth of the new node.
    ///
    /// # Panics
    /// If `node` is not the next free index or the child slot is already taken.
    #[allow(clippy::too_many_arguments)]
    pub fn add_child(
        &mut self,
        node: usize,
        parent: usize,
        action: usize,
        logits: &[f32],
        value: f32,
        reward: f32,
        flip: bool,
    ) -> usize {
        assert_eq!(node, self.len, "nodes must be created in order");
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
            &mut self.log_priors[row],
        );
        self.visits[node] = 1;
        self.value_sum[node] = value;
        self.raw_value[node] = value;
    }

    /// Add one backed-up return (from the node's own perspective).
    #[inline]
    pub fn record_visit(&mut self, node: usize, value: f32) {
        self.visits[node] += 1;
        self.value_sum[node] += value;
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

    /// Visit count of the child through `action` (0 when not expanded).
    #[inline]
    pub fn child_visits(&self, node: usize, action: usize) -> u32 {
        self.child(node, action).map_or(0, |c| self.visits[c])
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

fn reset_vec<T: Copy>(v: &mut Vec<T>, len: usize, value: T) {
    v.clear();
    v.resize(len, value);
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
        masked_softmax(&[0.0, 100.0, 0.0], Some(&[true, false, true]), &mut p, &mut lp);
        assert_eq!(p, [0.5, 0.0, 0.5]);
        assert_eq!(lp[1], f32::NEG_INFINITY);
        assert!((lp[0] - 0.5f32.ln()).abs() < 1e-6);
        masked_softmax(&[f32::NEG_INFINITY; 3], Some(&[false, true, true]), &mut p, &mut lp);
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
        let d = t.add_child(1, ROOT, 1, &[0.0, 0.0], 2.0, 1.0, true);
        assert_eq!(d, 1);
        assert_eq!(t.child(ROOT, 1), Some(1));
        assert_eq!(t.to_play(1), -1);
        assert_eq!(t.action(1), 1);
        // Q from the root: 1 + 0.5 * (-1) * 2 = 0.
        assert_eq!(t.q(1, 0.5, -1.0), 0.0);
        t.record_visit(1, 4.0);
        assert_eq!(t.value(1), 3.0);
        assert_eq!(t.child_visits(ROOT, 1), 2);
        t.reset(3, 2);
        assert!(t.is_empty());
        assert_eq!(t.child(ROOT, 1), None);
    }
}
