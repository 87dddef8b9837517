//! Batched Monte Carlo tree search over a learned [`Model`] (MuZero pUCT or Gumbel MuZero).
//!
//! One search runs `B` independent trees in lockstep. The roots come from one
//! [`Model::initial_inference`] call; then every simulation descends each tree to an
//! unexpanded child, makes **one** [`Model::recurrent_inference`] call for the whole batch
//! (`new_node = simulation + 1`, the same index in every tree), expands the new nodes and backs
//! their values up. Trees are flat preallocated arenas ([`tree::Tree`]) reused across searches
//! by a [`Searcher`]; nothing is allocated inside the simulation loop. Large batches run the
//! per-tree work on the rayon pool (results do not depend on it).
//!
//! Conventions:
//! - **Perspective**: values are stored from the point of view of the player to move at each
//!   node. With `two_player`, players alternate at every level: a child's value is negated when
//!   seen from its parent, `Q = r + discount * (-v_child)`, and the backed-up return is
//!   `G_parent = r + discount * (-G_child)`. Rewards are from the perspective of the player who
//!   acted.
//! - **Visits**: every expanded node counts its expansion (with the model's value) as its first
//!   visit, so a node's visit count is `1 + sum of its children's visits` (as in mctx).
//! - **Root value**: `value_sum / visits` at the root, i.e. the mean of the initial value
//!   prediction and the `num_simulations` backed-up returns, from the root player's perspective.
//! - **Legal masks** apply at the root only; inside the learned model every action is allowed
//!   (as in MuZero). An illegal root action is never selected, visited nor given policy mass.
//! - **Noise**: with `add_noise`, pUCT mixes Dirichlet noise into the legal root priors; Gumbel
//!   samples its root Gumbel noise (without `add_noise` the Gumbel noise is 0: a deterministic
//!   search for evaluation). Gumbel never uses Dirichlet noise.
//! - **Ties** go to the lowest action index everywhere (deterministic given the noise).
//!
//! See [`puct`] and [`gumbel`] for the selection rules.

pub mod action;
pub mod gumbel;
pub mod min_max;
pub mod noise;
pub mod puct;
pub mod tree;

#[cfg(test)]
mod tests;

use rand::Rng;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::model::{Model, ModelError, Prediction};

pub use action::{choose_actions, select_action};
use gumbel::SigmaParams;
use min_max::MinMaxStats;
use tree::{Tree, ROOT};

/// Batches at least this large run the per-tree work on the rayon pool.
const PARALLEL_MIN_BATCH: usize = 32;
/// Trees per rayon task.
const PARALLEL_CHUNK: usize = 8;

/// The selection rule.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub enum SearchPolicy {
    /// MuZero's pUCT everywhere (see [`puct`]).
    #[default]
    Puct,
    /// Gumbel MuZero: Sequential Halving with Gumbel noise at the root, deterministic improved
    /// policy selection below it (see [`gumbel`]).
    Gumbel {
        max_considered_actions: usize,
        c_visit: f32,
        c_scale: f32,
    },
}

impl SearchPolicy {
    /// Gumbel MuZero with the paper's defaults: 16 considered actions, `c_visit = 50`,
    /// `c_scale = 1`.
    pub fn default_gumbel() -> Self {
        SearchPolicy::Gumbel {
            max_considered_actions: gumbel::DEFAULT_MAX_CONSIDERED_ACTIONS,
            c_visit: gumbel::DEFAULT_C_VISIT,
            c_scale: gumbel::DEFAULT_C_SCALE,
        }
    }
}

/// Search hyper-parameters.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct SearchConfig {
    /// Simulations per search (at least 1); each tree gets `num_simulations + 1` nodes.
    pub num_simulations: usize,
    /// Discount in `[0, 1]`.
    pub discount: f32,
    /// pUCT `c1` (`pb_c_init`), default 1.25.
    pub c1: f32,
    /// pUCT `c2` (`pb_c_base`), default 19652.
    pub c2: f32,
    /// Dirichlet concentration of the root noise (pUCT, `add_noise` only).
    pub dirichlet_alpha: f32,
    /// Weight of the root noise in `[0, 1]` (pUCT, `add_noise` only).
    pub exploration_fraction: f32,
    /// Alternate the player at every level (values negated from parent to child).
    pub two_player: bool,
    pub policy: SearchPolicy,
}

impl Default for SearchConfig {
    fn default() -> Self {
        Self {
            num_simulations: 50,
            discount: 0.997,
            c1: puct::DEFAULT_C1,
            c2: puct::DEFAULT_C2,
            dirichlet_alpha: 0.25,
            exploration_fraction: 0.25,
            two_player: false,
            policy: SearchPolicy::Puct,
        }
    }
}

impl SearchConfig {
    /// Check the parameters (noise parameters only when `add_noise` and pUCT).
    pub fn validate(&self, add_noise: bool) -> Result<(), SearchError> {
        let bad = |msg: String| Err(SearchError::InvalidConfig(msg));
        if self.num_simulations == 0 || self.num_simulations >= u32::MAX as usize - 1 {
            return bad(format!(
                "num_simulations must be in 1..{}, got {}",
                u32::MAX - 1,
                self.num_simulations
            ));
        }
        if !(0.0..=1.0).contains(&self.discount) {
            return bad(format!("discount must be in [0, 1], got {}", self.discount));
        }
        if !(self.c1.is_finite() && self.c1 >= 0.0) {
            return bad(format!("c1 must be finite and >= 0, got {}", self.c1));
        }
        if !(self.c2.is_finite() && self.c2 > 0.0) {
            return bad(format!("c2 must be finite and > 0, got {}", self.c2));
        }
        match self.policy {
            SearchPolicy::Puct => {
                if add_noise {
                    if !(self.dirichlet_alpha.is_finite() && self.dirichlet_alpha > 0.0) {
                        return bad(format!(
                            "dirichlet_alpha must be finite and > 0, got {}",
                            self.dirichlet_alpha
                        ));
                    }
                    if !(0.0..=1.0).contains(&self.exploration_fraction) {
                        return bad(format!(
                            "exploration_fraction must be in [0, 1], got {}",
                            self.exploration_fraction
                        ));
                    }
                }
            }
            SearchPolicy::Gumbel {
                max_considered_actions,
                c_visit,
                c_scale,
            } => {
                if max_considered_actions == 0 {
                    return bad("max_considered_actions must be at least 1".into());
                }
                if !(c_visit.is_finite() && c_visit >= 0.0) {
                    return bad(format!("c_visit must be finite and >= 0, got {c_visit}"));
                }
                if !(c_scale.is_finite() && c_scale >= 0.0) {
                    return bad(format!("c_scale must be finite and >= 0, got {c_scale}"));
                }
            }
        }
        Ok(())
    }
}

/// Why a search failed.
#[derive(Debug, Error)]
pub enum SearchError {
    /// The model failed.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// A search parameter is out of range.
    #[error("invalid search config: {0}")]
    InvalidConfig(String),
    /// The model reports no actions.
    #[error("the model has no actions")]
    NoActions,
    /// `legal_masks` is not `[batch * num_actions]`.
    #[error("legal_masks has {got} entries, expected {expected} ({batch} x {num_actions})")]
    LegalMaskLength {
        got: usize,
        expected: usize,
        batch: usize,
        num_actions: usize,
    },
    /// A batch element has no legal action.
    #[error("batch element {index} has no legal action")]
    NoLegalAction { index: usize },
    /// The model returned a prediction of the wrong shape.
    #[error("{call} returned {field} with {got} values, expected {expected}")]
    PredictionShape {
        call: &'static str,
        field: &'static str,
        got: usize,
        expected: usize,
    },
}

/// The result of a batched search. Per-action arrays are `[batch * num_actions]`, row-major.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SearchOutput {
    pub batch: usize,
    pub num_actions: usize,
    /// `[B]` search value of each root (mean of the initial value and the backed-up returns),
    /// from the root player's perspective.
    pub root_values: Vec<f32>,
    /// `[B * A]` visit counts of the root children (they sum to `num_simulations`).
    pub visit_counts: Vec<u32>,
    /// `[B * A]` normalised visit counts (pUCT) or the improved policy (Gumbel); 0 on illegal
    /// actions.
    pub policy_targets: Vec<f32>,
    /// `[B * A]` Q of each root child from the root player's perspective (0 if unvisited).
    pub root_q: Vec<f32>,
    /// `[B]` the action chosen by Gumbel MuZero (Gumbel only).
    pub gumbel_actions: Option<Vec<usize>>,
    /// Deepest node reached in any tree (root = 0).
    pub max_depth: usize,
}

impl SearchOutput {
    /// Visit counts of the root children of batch element `b`.
    pub fn visit_counts_of(&self, b: usize) -> &[u32] {
        &self.visit_counts[b * self.num_actions..(b + 1) * self.num_actions]
    }

    /// Policy target of batch element `b`.
    pub fn policy_target_of(&self, b: usize) -> &[f32] {
        &self.policy_targets[b * self.num_actions..(b + 1) * self.num_actions]
    }

    /// Root-child Q-values of batch element `b`.
    pub fn root_q_of(&self, b: usize) -> &[f32] {
        &self.root_q[b * self.num_actions..(b + 1) * self.num_actions]
    }
}

/// Run one batched search with fresh buffers (see [`Searcher::run`], which reuses them).
///
/// `observations`: `[B * obs_len]`, passed to the model as is; `legal_masks`: `[B * A]`
/// (`true` = legal; root only); `add_noise`: root exploration noise (training).
pub fn run_search<M: Model + ?Sized, R: Rng + ?Sized>(
    model: &mut M,
    config: &SearchConfig,
    observations: &[f32],
    batch: usize,
    legal_masks: &[bool],
    add_noise: bool,
    rng: &mut R,
) -> Result<SearchOutput, SearchError> {
    Searcher::new().run(
        model,
        config,
        observations,
        batch,
        legal_masks,
        add_noise,
        rng,
    )
}

/// Per-tree state of one batch element.
#[derive(Debug, Default)]
struct TreeState {
    tree: Tree,
    stats: MinMaxStats,
    legal: Vec<bool>,
    gumbel: Vec<f32>,
    scratch: Vec<f32>,
    num_considered: usize,
    max_depth: usize,
}

/// The selection/backup parameters shared by all trees of one search.
#[derive(Clone, Copy)]
struct Rules<'a> {
    discount: f32,
    /// `-1` for two-player games (the child's value is the opponent's), else `+1`.
    sign: f32,
    two_player: bool,
    c1: f32,
    c2: f32,
    gumbel: Option<SigmaParams>,
    /// Sequential Halving schedules indexed by the number of considered actions.
    schedules: &'a [Vec<u32>],
}

impl TreeState {
    fn reset(&mut self, capacity: usize, num_actions: usize, legal: &[bool]) {
        self.tree.reset(capacity, num_actions);
        self.stats = MinMaxStats::new();
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
    fn select_leaf(&mut self, rules: &Rules<'_>, simulation: usize) -> (usize, usize) {
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

    /// Create `node` from the model's prediction and back its value up to the root.
    #[allow(clippy::too_many_arguments)]
    fn expand_and_backup(
        &mut self,
        rules: &Rules<'_>,
        node: usize,
        parent: usize,
        action: usize,
        logits: &[f32],
        value: f32,
        reward: f32,
    ) {
        let depth = self.tree.add_child(
            node,
            parent,
            action,
            logits,
            value,
            reward,
            rules.two_player,
        );
        self.max_depth = self.max_depth.max(depth);
        let stats = &mut self.stats;
        self.tree
            .backup(node, rules.discount, rules.sign, |q| stats.update(q));
    }
}

/// Reusable search buffers: keep one per actor/thread to avoid reallocating the trees.
#[derive(Debug, Default)]
pub struct Searcher {
    trees: Vec<TreeState>,
    parents: Vec<usize>,
    actions: Vec<usize>,
    schedules: Vec<Vec<u32>>,
    schedule_simulations: usize,
    noise_scratch: Vec<f32>,
}

impl Searcher {
    /// Empty buffers; they grow on first use.
    pub fn new() -> Self {
        Self::default()
    }

    /// Run one batched search (see the module docs and [`run_search`]).
    #[allow(clippy::too_many_arguments)]
    pub fn run<M: Model + ?Sized, R: Rng + ?Sized>(
        &mut self,
        model: &mut M,
        config: &SearchConfig,
        observations: &[f32],
        batch: usize,
        legal_masks: &[bool],
        add_noise: bool,
        rng: &mut R,
    ) -> Result<SearchOutput, SearchError> {
        config.validate(add_noise)?;
        let num_actions = model.num_actions();
        if num_actions == 0 {
            return Err(SearchError::NoActions);
        }
        let expected = batch * num_actions;
        if legal_masks.len() != expected {
            return Err(SearchError::LegalMaskLength {
                got: legal_masks.len(),
                expected,
                batch,
                num_actions,
            });
        }
        if let Some(index) = legal_masks
            .chunks_exact(num_actions)
            .position(|row| !row.contains(&true))
        {
            return Err(SearchError::NoLegalAction { index });
        }
        if batch == 0 {
            return Ok(SearchOutput {
                num_actions,
                gumbel_actions: matches!(config.policy, SearchPolicy::Gumbel { .. }).then(Vec::new),
                ..SearchOutput::default()
            });
        }

        let num_simulations = config.num_simulations;
        let root = model.initial_inference(observations, batch, num_simulations + 1)?;
        check_prediction("initial_inference", &root, batch, num_actions, false)?;

        let gumbel_params = match config.policy {
            SearchPolicy::Puct => None,
            SearchPolicy::Gumbel {
                c_visit, c_scale, ..
            } => Some(SigmaParams { c_visit, c_scale }),
        };
        self.prepare_roots(
            config,
            &root,
            batch,
            num_actions,
            legal_masks,
            add_noise,
            rng,
        );

        let rules = Rules {
            discount: config.discount,
            sign: if config.two_player { -1.0 } else { 1.0 },
            two_player: config.two_player,
            c1: config.c1,
            c2: config.c2,
            gumbel: gumbel_params,
            schedules: &self.schedules,
        };
        let trees = &mut self.trees[..batch];
        self.parents.resize(batch, 0);
        self.actions.resize(batch, 0);
        let parents = &mut self.parents[..batch];
        let actions = &mut self.actions[..batch];

        for_each_tree(trees, parents, actions, |_, ts, parent, action| {
            (*parent, *action) = ts.select_leaf(&rules, 0);
        });
        for simulation in 0..num_simulations {
            let node = simulation + 1;
            let pred = model.recurrent_inference(parents, actions, node)?;
            check_prediction("recurrent_inference", &pred, batch, num_actions, true)?;
            let last = node == num_simulations;
            for_each_tree(trees, parents, actions, |b, ts, parent, action| {
                let logits = &pred.policy_logits[b * num_actions..(b + 1) * num_actions];
                let (value, reward) = (pred.values[b], pred.rewards[b]);
                ts.expand_and_backup(&rules, node, *parent, *action, logits, value, reward);
                if !last {
                    (*parent, *action) = ts.select_leaf(&rules, node);
                }
            });
        }

        Ok(collect_output(trees, &rules, num_actions))
    }

    /// Reset the trees, expand the roots, add the root noise and build the Sequential Halving
    /// schedules. The rng is used in batch order (Dirichlet or Gumbel noise per root).
    #[allow(clippy::too_many_arguments)]
    fn prepare_roots<R: Rng + ?Sized>(
        &mut self,
        config: &SearchConfig,
        root: &Prediction,
        batch: usize,
        num_actions: usize,
        legal_masks: &[bool],
        add_noise: bool,
        rng: &mut R,
    ) {
        let num_simulations = config.num_simulations;
        if self.trees.len() < batch {
            self.trees.resize_with(batch, TreeState::default);
        }
        if self.schedule_simulations != num_simulations {
            self.schedules.clear();
            self.schedule_simulations = num_simulations;
        }
        self.noise_scratch.resize(num_actions, 0.0);
        for (b, ts) in self.trees[..batch].iter_mut().enumerate() {
            let row = b * num_actions..(b + 1) * num_actions;
            let legal = &legal_masks[row.clone()];
            ts.reset(num_simulations + 1, num_actions, legal);
            ts.tree
                .init_root(&root.policy_logits[row], legal, root.values[b]);
            match config.policy {
                SearchPolicy::Puct => {
                    if add_noise {
                        noise::add_dirichlet_noise(
                            ts.tree.priors_mut(ROOT),
                            legal,
                            config.dirichlet_alpha,
                            config.exploration_fraction,
                            rng,
                            &mut self.noise_scratch,
                        );
                    }
                }
                SearchPolicy::Gumbel {
                    max_considered_actions,
                    ..
                } => {
                    if add_noise {
                        gumbel::sample_gumbel(rng, &mut ts.gumbel);
                    }
                    let num_legal = legal.iter().filter(|&&ok| ok).count();
                    let m = max_considered_actions.min(num_legal);
                    ts.num_considered = m;
                    if self.schedules.len() <= m {
                        self.schedules.resize_with(m + 1, Vec::new);
                    }
                    if self.schedules[m].is_empty() {
                        self.schedules[m] = gumbel::considered_visit_sequence(m, num_simulations);
                    }
                }
            }
        }
    }
}

/// Run `f(b, tree, parent, action)` for every batch element, on the rayon pool for large
/// batches. Each call touches only its own tree, so the result does not depend on the order.
fn for_each_tree<F>(trees: &mut [TreeState], parents: &mut [usize], actions: &mut [usize], f: F)
where
    F: Fn(usize, &mut TreeState, &mut usize, &mut usize) + Sync + Send,
{
    if trees.len() >= PARALLEL_MIN_BATCH {
        trees
            .par_iter_mut()
            .zip(parents.par_iter_mut())
            .zip(actions.par_iter_mut())
            .enumerate()
            .with_min_len(PARALLEL_CHUNK)
            .for_each(|(b, ((ts, p), a))| f(b, ts, p, a));
    } else {
        for (b, ((ts, p), a)) in trees
            .iter_mut()
            .zip(parents.iter_mut())
            .zip(actions.iter_mut())
            .enumerate()
        {
            f(b, ts, p, a);
        }
    }
}

fn check_prediction(
    call: &'static str,
    pred: &Prediction,
    batch: usize,
    num_actions: usize,
    rewards: bool,
) -> Result<(), SearchError> {
    let fields = [
        (
            "policy_logits",
            pred.policy_logits.len(),
            batch * num_actions,
        ),
        ("values", pred.values.len(), batch),
        ("rewards", pred.rewards.len(), batch),
    ];
    let checked = if rewards { 3 } else { 2 };
    for &(field, got, expected) in &fields[..checked] {
        if got != expected {
            return Err(SearchError::PredictionShape {
                call,
                field,
                got,
                expected,
            });
        }
    }
    Ok(())
}

fn collect_output(trees: &mut [TreeState], rules: &Rules<'_>, num_actions: usize) -> SearchOutput {
    let batch = trees.len();
    let mut out = SearchOutput {
        batch,
        num_actions,
        root_values: Vec::with_capacity(batch),
        visit_counts: vec![0; batch * num_actions],
        policy_targets: vec![0.0; batch * num_actions],
        root_q: vec![0.0; batch * num_actions],
        gumbel_actions: rules.gumbel.map(|_| Vec::with_capacity(batch)),
        max_depth: 0,
    };
    for (b, ts) in trees.iter_mut().enumerate() {
        let row = b * num_actions..(b + 1) * num_actions;
        let tree = &ts.tree;
        out.root_values.push(tree.value(ROOT));
        out.max_depth = out.max_depth.max(ts.max_depth);
        let visits = &mut out.visit_counts[row.clone()];
        visits.copy_from_slice(tree.children_visits(ROOT));
        out.root_q[row.clone()].copy_from_slice(tree.children_q(ROOT));
        let targets = &mut out.policy_targets[row];
        match rules.gumbel {
            None => {
                let total: u32 = visits.iter().sum();
                let inv = if total > 0 { 1.0 / total as f32 } else { 0.0 };
                for (t, &n) in targets.iter_mut().zip(visits.iter()) {
                    *t = n as f32 * inv;
                }
            }
            Some(params) => {
                gumbel::improved_policy(tree, ROOT, params, Some(&ts.legal), targets);
                let most = visits
                    .iter()
                    .zip(&ts.legal)
                    .filter(|(_, &ok)| ok)
                    .map(|(&n, _)| n)
                    .max()
                    .unwrap_or(0);
                let action = gumbel::select_root_action(
                    tree,
                    ROOT,
                    &ts.gumbel,
                    most,
                    &ts.legal,
                    params,
                    &mut ts.scratch,
                );
                if let Some(actions) = out.gumbel_actions.as_mut() {
                    actions.push(action);
                }
            }
        }
    }
    out
}
