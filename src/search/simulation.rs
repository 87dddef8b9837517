//! One tree's share of a simulation. The batched loop ([`Searcher`](super::Searcher)) calls,
//! for every tree:
//! - **simulate** ([`TreeState::select_leaf`]): descend from the root with the selection rule
//!   ([`puct`] everywhere, or [`gumbel`] at the root and below it) to an unexpanded child;
//! - **expand and backward** ([`TreeState::expand_and_backup`]): create that child from the
//!   model's prediction and back its value up to the root ([`Tree::backup`]), widening the
//!   tree's min-max statistics with every updated Q.

use super::config::UnvisitedValue;
use super::gumbel::{self, SigmaParams};
use super::min_max::MinMaxStats;
use super::puct;
use super::tree::{Expansion, Tree, ROOT};

/// The return the solver takes as a win nothing can beat: games searched with the solver
/// return at most 1 (see `SearchConfig::solver`).
pub(super) const SOLVED_WIN: f32 = 1.0;

/// Per-tree state of one batch element.
#[derive(Debug, Default)]
pub(super) struct TreeState {
    pub(super) tree: Tree,
    /// Range of the Q-values seen in this tree (pUCT normalisation).
    pub(super) stats: MinMaxStats,
    /// `[A]` root legal mask.
    pub(super) legal: Vec<bool>,
    /// `[A]` root Gumbel noise (zeros without noise or with pUCT).
    pub(super) gumbel: Vec<f32>,
    /// `[A]` scratch for the Gumbel scores.
    pub(super) scratch: Vec<f32>,
    /// Root actions Sequential Halving starts from (Gumbel only).
    pub(super) num_considered: usize,
    /// Deepest node created so far (root = 0).
    pub(super) max_depth: usize,
}

/// The selection/backup parameters shared by all trees of one search.
#[derive(Clone, Copy)]
pub(super) struct Rules<'a> {
    pub(super) discount: f32,
    /// `-1` for two-player games (the child's value is the opponent's), else `+1`.
    pub(super) sign: f32,
    pub(super) two_player: bool,
    pub(super) c1: f32,
    pub(super) c2: f32,
    /// pUCT: the value term of an unvisited child.
    pub(super) unvisited: UnvisitedValue,
    pub(super) gumbel: Option<SigmaParams>,
    /// Sequential Halving schedules indexed by the number of considered actions.
    pub(super) schedules: &'a [Vec<u32>],
    /// MCTS-Solver: prove nodes from where the game ended (see `SearchConfig::solver`).
    pub(super) solver: bool,
}

impl TreeState {
    /// Empty the tree for a new search with `capacity` nodes over `num_actions` actions and the
    /// root mask `legal` (`[A]`), keeping the allocations; the min-max statistics start from
    /// `bounds` when given. The root is created by the caller.
    pub(super) fn reset(
        &mut self,
        capacity: usize,
        num_actions: usize,
        legal: &[bool],
        bounds: Option<(f32, f32)>,
    ) {
        self.tree.reset(capacity, num_actions);
        self.stats = match bounds {
            Some((lo, hi)) => MinMaxStats::with_bounds(lo, hi),
            None => MinMaxStats::new(),
        };
        self.legal.clear();
        self.legal.extend_from_slice(legal);
        self.gumbel.clear();
        self.gumbel.resize(num_actions, 0.0);
        self.scratch.clear();
        self.scratch.resize(num_actions, 0.0);
        self.num_considered = 0;
        self.max_depth = 0;
    }

    /// Descend from the root to an unexpanded child: `(parent node, action)`.
    pub(super) fn select_leaf(&mut self, rules: &Rules<'_>, simulation: usize) -> (usize, usize) {
        let (c1, c2) = (rules.c1, rules.c2);
        let mut node = ROOT;
        loop {
            let action = match (rules.gumbel, node == ROOT) {
                (None, root) => puct::select_child(
                    &self.tree,
                    node,
                    &self.stats,
                    c1,
                    c2,
                    rules.unvisited,
                    root.then_some(self.legal.as_slice()),
                ),
                (Some(params), true) => gumbel::select_root_action(
                    &self.tree,
                    ROOT,
                    &self.gumbel,
                    rules.schedules[self.num_considered][simulation],
                    &self.legal,
                    params,
                    &mut self.scratch,
                ),
                (Some(params), false) => {
                    gumbel::select_interior_action(&self.tree, node, params, &mut self.scratch)
                }
            };
            match self.tree.child(node, action) {
                Some(child) => node = child,
                None => return (node, action),
            }
        }
    }

    /// Create `node` as the child of `edge = (parent, action)` from the model's `expansion`
    /// and back its value up to the root. With the solver, a node where the game `ended` is
    /// proven at its value, and so is each ancestor that its proven children prove.
    pub(super) fn expand_and_backup(
        &mut self,
        rules: &Rules<'_>,
        node: usize,
        edge: (usize, usize),
        expansion: &Expansion<'_>,
        ended: bool,
    ) {
        let depth = self.tree.add_child(node, edge, expansion, rules.two_player);
        self.max_depth = self.max_depth.max(depth);
        if rules.solver && ended {
            self.tree.solve(node, expansion.value);
            let mut child = node;
            while child != ROOT {
                let parent = self.tree.parent(child) as usize;
                if self.tree.solved(parent).is_some() {
                    break;
                }
                match self
                    .tree
                    .proven_value(parent, rules.discount, rules.sign, SOLVED_WIN)
                {
                    Some(v) => self.tree.solve(parent, v),
                    None => break,
                }
                child = parent;
            }
        }
        let stats = &mut self.stats;
        self.tree
            .backup(node, rules.discount, rules.sign, |q| stats.update(q));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn puct_rules(two_player: bool) -> Rules<'static> {
        Rules {
            discount: 0.5,
            sign: if two_player { -1.0 } else { 1.0 },
            two_player,
            c1: puct::DEFAULT_C1,
            c2: puct::DEFAULT_C2,
            unvisited: UnvisitedValue::Min,
            gumbel: None,
            schedules: &[],
            solver: false,
        }
    }

    /// A fresh tree (4 nodes, 2 actions) whose root logits 0 and 1 favour action 1.
    fn fresh(legal: &[bool]) -> TreeState {
        let mut ts = TreeState::default();
        ts.reset(4, 2, legal, None);
        ts.tree.init_root(&[0.0, 1.0], legal, 0.0);
        ts
    }

    #[test]
    fn puct_simulation_descends_expands_and_backs_up() {
        let rules = puct_rules(false);
        let mut ts = fresh(&[true, true]);
        assert_eq!(ts.select_leaf(&rules, 0), (ROOT, 1));
        // Reward 1, value 2: Q(root, 1) = 1 + 0.5 * 2 = 2, root value (0 + 2) / 2 = 1.
        ts.expand_and_backup(
            &rules,
            1,
            (ROOT, 1),
            &Expansion {
                logits: &[0.0, 0.0],
                value: 2.0,
                reward: 1.0,
            },
            false,
        );
        assert_eq!(ts.tree.children_q(ROOT), &[0.0, 2.0]);
        assert_eq!(ts.tree.value(ROOT), 1.0);
        assert_eq!((ts.stats.min, ts.stats.max), (2.0, 2.0));
        assert_eq!(ts.max_depth, 1);
        // Q = 2 (unnormalised while min == max) beats the unvisited action 0, so the next leaf
        // is below node 1, whose uniform children tie: action 0.
        assert_eq!(ts.select_leaf(&rules, 1), (1, 0));
        ts.expand_and_backup(
            &rules,
            2,
            (1, 0),
            &Expansion {
                logits: &[0.0, 0.0],
                value: 0.0,
                reward: 0.0,
            },
            false,
        );
        assert_eq!(ts.max_depth, 2);
        assert_eq!(ts.tree.visits(ROOT), 3);
    }

    #[test]
    fn known_bounds_seed_the_range_and_values_outside_widen_it() {
        let rules = puct_rules(false);
        let mut ts = fresh(&[true, true]);
        ts.reset(4, 2, &[true, true], Some((-1.0, 1.0)));
        ts.tree.init_root(&[0.0, 1.0], &[true, true], 0.0);
        assert_eq!((ts.stats.min, ts.stats.max), (-1.0, 1.0));
        let (node, action) = ts.select_leaf(&rules, 0);
        // Q = 1 + 0.5 * 2 = 2 lies above the bound: the range widens to [-1, 2].
        let leaf = Expansion {
            logits: &[0.0, 0.0],
            value: 2.0,
            reward: 1.0,
        };
        ts.expand_and_backup(&rules, 1, (node, action), &leaf, false);
        assert_eq!((ts.stats.min, ts.stats.max), (-1.0, 2.0));
        // A reset without bounds starts from nothing again.
        ts.reset(4, 2, &[true, true], None);
        assert_eq!(ts.stats, MinMaxStats::new());
    }

    #[test]
    fn root_mask_holds_and_two_players_alternate() {
        let rules = puct_rules(true);
        let mut ts = fresh(&[true, false]);
        assert_eq!(ts.select_leaf(&rules, 0), (ROOT, 0));
        ts.expand_and_backup(
            &rules,
            1,
            (ROOT, 0),
            &Expansion {
                logits: &[0.0, 0.0],
                value: 2.0,
                reward: 1.0,
            },
            false,
        );
        assert_eq!(ts.tree.to_play(1), -1);
        // Two players: Q(root, 0) = 1 - 0.5 * 2 = 0.
        assert_eq!(ts.tree.children_q(ROOT), &[0.0, 0.0]);
        // The illegal action 1 stays out of reach: the next leaf is below node 1.
        assert_eq!(ts.select_leaf(&rules, 1), (1, 0));
    }

    #[test]
    fn gumbel_root_follows_the_schedule() {
        // Two considered actions, 4 simulations: considered visits 0, 0, 1, 1.
        let schedules = vec![vec![], vec![], gumbel::considered_visit_sequence(2, 4)];
        let rules = Rules {
            gumbel: Some(SigmaParams::default()),
            schedules: &schedules,
            ..puct_rules(false)
        };
        let mut ts = fresh(&[true, true]);
        ts.num_considered = 2;
        // Simulation 0: both unvisited, the better prior wins; simulation 1: the other one.
        assert_eq!(ts.select_leaf(&rules, 0), (ROOT, 1));
        ts.expand_and_backup(
            &rules,
            1,
            (ROOT, 1),
            &Expansion {
                logits: &[0.0, 0.0],
                value: 0.0,
                reward: 0.0,
            },
            false,
        );
        assert_eq!(ts.select_leaf(&rules, 1), (ROOT, 0));
    }
}
