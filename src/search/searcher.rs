//! The batched search itself: [`Searcher`] runs `B` trees in lockstep, one model call per
//! simulation for the whole batch (see the [module docs](super) for the conventions).
//!
//! Here live the batch-wide steps: validate the inputs, one [`Model::initial_inference`] for
//! the roots and their noise, then per simulation one [`Model::recurrent_inference`] for the
//! leaves of all trees, and finally the root statistics and [`targets`]. Each tree's own share
//! of a simulation (descend, expand, back up) is in [`simulation`](super::simulation); large
//! batches run it on the rayon pool, or on helper threads kept awake for the search
//! ([`SearchConfig::helper_threads`]).

use std::sync::Mutex;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;

use super::config::{SearchConfig, SearchPolicy};
use super::error::SearchError;
use super::gumbel::{self, SigmaParams};
use super::output::SearchOutput;
use super::simulation::{Rules, TreeState};
use super::tree::{Expansion, ROOT};
use super::{noise, symmetric, targets};
use crate::model::{Model, Prediction};
use crate::threads::{self, side_by_side, Team};

/// Batches at least this large run the per-tree work on the rayon pool (below it, waking a
/// thread cost more than it saved: batch 64, latent 64, 4.95 -> 4.45 ms per search serial).
const PARALLEL_MIN_BATCH: usize = 128;
/// Trees per rayon task.
const PARALLEL_CHUNK: usize = 8;
/// Batches at least this large are searched as two halves side by side, each with its own
/// trees and its own fork of the model (when the model forks, [`Model::fork`]): one thread
/// hand-off per search instead of one or two per simulation. The split does not depend on the
/// number of threads, so neither does the result.
const SPLIT_SEARCH_BATCH: usize = 64;

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
        &SearchInput {
            observations,
            batch,
            legal_masks,
            add_noise,
        },
        rng,
    )
}

/// The roots of one batched search and how to search them.
///
/// # Shapes
/// `observations`: `[batch * obs_len]`, passed to the model as is; `legal_masks`:
/// `[batch * A]` (`true` = legal; root only).
#[derive(Debug, Clone, Copy)]
pub struct SearchInput<'a> {
    pub observations: &'a [f32],
    pub batch: usize,
    pub legal_masks: &'a [bool],
    /// Root exploration noise (training).
    pub add_noise: bool,
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
    /// The buffers of a split search's second half.
    second_half: Option<Box<Searcher>>,
}

impl Searcher {
    /// Empty buffers; they grow on first use.
    pub fn new() -> Self {
        Self::default()
    }

    /// Run one batched search of `input`'s roots (see the [module docs](super) and
    /// [`run_search`]). The rng is used only for the root noise.
    pub fn run<M: Model + ?Sized, R: Rng + ?Sized>(
        &mut self,
        model: &mut M,
        config: &SearchConfig,
        input: &SearchInput<'_>,
        rng: &mut R,
    ) -> Result<SearchOutput, SearchError> {
        let SearchInput {
            observations,
            batch,
            legal_masks,
            add_noise,
        } = *input;
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

        model.set_bf16_inference(config.bf16_inference);
        if !config.symmetries.is_empty() {
            return self.run_symmetric(model, config, input, num_actions, rng);
        }
        if batch >= SPLIT_SEARCH_BATCH && observations.len().is_multiple_of(batch) {
            if let (Some(mut first), Some(mut second)) = (model.fork(), model.fork()) {
                return self.run_halves(first.as_mut(), second.as_mut(), config, input, rng);
            }
        }
        self.run_whole(model, config, input, rng, true)
    }

    /// [`Searcher::run`] of every root and of its images under `config.symmetries`, pooled
    /// (see [`symmetric`]).
    fn run_symmetric<M: Model + ?Sized, R: Rng + ?Sized>(
        &mut self,
        model: &mut M,
        config: &SearchConfig,
        input: &SearchInput<'_>,
        num_actions: usize,
        rng: &mut R,
    ) -> Result<SearchOutput, SearchError> {
        let symmetries = &config.symmetries;
        let obs_len = input.observations.len() / input.batch;
        if let Some(i) = symmetries.iter().position(|s| {
            s.observation.len() != obs_len
                || s.negate.len() != obs_len
                || s.actions.len() != num_actions
                || s.observation.iter().any(|&j| j >= obs_len)
                || s.actions.iter().any(|&a| a >= num_actions)
        }) {
            return Err(SearchError::InvalidConfig(format!(
                "symmetry {i} does not fit observations of {obs_len} values and {num_actions} \
                 actions"
            )));
        }
        let (observations, legal_masks) = symmetric::expand(
            input.observations,
            input.legal_masks,
            input.batch,
            num_actions,
            symmetries,
        );
        let plain = SearchConfig {
            symmetries: Vec::new(),
            ..config.clone()
        };
        let all = self.run(
            model,
            &plain,
            &SearchInput {
                observations: &observations,
                batch: (1 + symmetries.len()) * input.batch,
                legal_masks: &legal_masks,
                add_noise: input.add_noise,
            },
            rng,
        )?;
        Ok(symmetric::pool(
            &all,
            input.batch,
            input.legal_masks,
            symmetries,
            &config.policy,
            input.add_noise,
            rng,
        ))
    }

    /// [`Searcher::run`] as two half batches side by side, one on this thread and one on the
    /// rayon pool, each with a model of its own. Each half draws its root noise from a
    /// generator seeded from `rng`.
    fn run_halves<R: Rng + ?Sized>(
        &mut self,
        first: &mut (dyn Model + Send + '_),
        second: &mut (dyn Model + Send + '_),
        config: &SearchConfig,
        input: &SearchInput<'_>,
        rng: &mut R,
    ) -> Result<SearchOutput, SearchError> {
        let (batch, num_actions) = (input.batch, first.num_actions());
        let half = batch / 2;
        let obs_len = input.observations.len() / batch;
        let (first_obs, second_obs) = input.observations.split_at(half * obs_len);
        let (first_legal, second_legal) = input.legal_masks.split_at(half * num_actions);
        let halves = [
            SearchInput {
                observations: first_obs,
                batch: half,
                legal_masks: first_legal,
                add_noise: input.add_noise,
            },
            SearchInput {
                observations: second_obs,
                batch: batch - half,
                legal_masks: second_legal,
                add_noise: input.add_noise,
            },
        ];
        let seeds: [u64; 2] = [rng.random(), rng.random()];
        let mut other = self.second_half.take().unwrap_or_default();
        let (a, b) = side_by_side(
            || {
                let mut rng = StdRng::seed_from_u64(seeds[0]);
                self.run_whole(first, config, &halves[0], &mut rng, false)
            },
            || {
                let mut rng = StdRng::seed_from_u64(seeds[1]);
                other.run_whole(second, config, &halves[1], &mut rng, false)
            },
        );
        self.second_half = Some(other);
        Ok(a?.append(b?))
    }

    /// One batched search of every tree of `input` (validated by [`Searcher::run`]); the
    /// per-tree work goes to the rayon pool for large batches only with `parallel_trees` (off
    /// for the halves of a split search, which already run side by side).
    fn run_whole<M: Model + ?Sized, R: Rng + ?Sized>(
        &mut self,
        model: &mut M,
        config: &SearchConfig,
        input: &SearchInput<'_>,
        rng: &mut R,
        parallel_trees: bool,
    ) -> Result<SearchOutput, SearchError> {
        let SearchInput {
            observations,
            batch,
            ..
        } = *input;
        let num_actions = model.num_actions();
        let num_simulations = config.num_simulations;
        let root = model.initial_inference(observations, batch, num_simulations + 1)?;
        check_prediction("initial_inference", &root, batch, num_actions, false)?;

        let gumbel_params = match config.policy {
            SearchPolicy::Puct => None,
            SearchPolicy::Gumbel {
                c_visit, c_scale, ..
            } => Some(SigmaParams { c_visit, c_scale }),
        };
        self.prepare_roots(config, &root, input, num_actions, rng);

        let rules = Rules {
            discount: config.discount,
            sign: if config.two_player { -1.0 } else { 1.0 },
            two_player: config.two_player,
            c1: config.c1,
            c2: config.c2,
            unvisited: config.unvisited_value,
            gumbel: gumbel_params,
            schedules: &self.schedules,
            solver: config.solver,
        };
        let trees = &mut self.trees[..batch];
        self.parents.resize(batch, 0);
        self.actions.resize(batch, 0);
        let parents = &mut self.parents[..batch];
        let actions = &mut self.actions[..batch];
        // Large batches spread the per-tree work over the rayon pool, or over helper threads
        // kept awake for the whole search when the configuration asks for them.
        let parallel = parallel_trees && batch >= PARALLEL_MIN_BATCH;
        let helpers = if parallel { config.helper_threads } else { 0 };

        threads::with_helpers(helpers, |team| -> Result<(), SearchError> {
            let work = TreeWork { parallel, team };
            work.for_each_tree(trees, parents, actions, |_, ts, parent, action| {
                (*parent, *action) = ts.select_leaf(&rules, 0);
            });
            for simulation in 0..num_simulations {
                let node = simulation + 1;
                let pred = model.recurrent_inference(parents, actions, node)?;
                check_prediction("recurrent_inference", &pred, batch, num_actions, true)?;
                let ended = if rules.solver { model.ended() } else { None };
                let last = node == num_simulations;
                work.for_each_tree(trees, parents, actions, |b, ts, parent, action| {
                    let logits = &pred.policy_logits[b * num_actions..(b + 1) * num_actions];
                    let expansion = Expansion {
                        logits,
                        value: pred.values[b],
                        reward: pred.rewards[b],
                    };
                    let ended = ended.is_some_and(|e| e.get(b) == Some(&true));
                    ts.expand_and_backup(&rules, node, (*parent, *action), &expansion, ended);
                    if !last {
                        (*parent, *action) = ts.select_leaf(&rules, node);
                    }
                });
            }
            Ok(())
        })?;

        Ok(collect_output(trees, &rules, num_actions))
    }

    /// Reset the trees, expand the roots, add the root noise and build the Sequential Halving
    /// schedules. The rng is used in batch order (Dirichlet or Gumbel noise per root).
    fn prepare_roots<R: Rng + ?Sized>(
        &mut self,
        config: &SearchConfig,
        root: &Prediction,
        input: &SearchInput<'_>,
        num_actions: usize,
        rng: &mut R,
    ) {
        let SearchInput {
            batch,
            legal_masks,
            add_noise,
            ..
        } = *input;
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
            ts.reset(num_simulations + 1, num_actions, legal, config.value_bounds);
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
                    noise_scale,
                    ..
                } => {
                    if add_noise {
                        gumbel::sample_gumbel(rng, &mut ts.gumbel);
                        if noise_scale != 1.0 {
                            ts.gumbel.iter_mut().for_each(|g| *g *= noise_scale);
                        }
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

/// Where a search's per-tree work runs: on the caller alone, on the rayon pool, or on the
/// caller and a team of helper threads ([`threads::with_helpers`]).
struct TreeWork<'a> {
    parallel: bool,
    team: &'a Team,
}

impl TreeWork<'_> {
    /// Run `f(b, tree, parent, action)` for every batch element. Each call touches only its
    /// own tree, so the result does not depend on the order.
    fn for_each_tree<F>(
        &self,
        trees: &mut [TreeState],
        parents: &mut [usize],
        actions: &mut [usize],
        f: F,
    ) where
        F: Fn(usize, &mut TreeState, &mut usize, &mut usize) + Sync + Send,
    {
        if self.parallel && self.team.helpers() > 0 {
            // One chunk per thread, each behind a lock that only its taker takes.
            let threads = self.team.helpers() + 1;
            let per_chunk = trees.len().div_ceil(threads);
            let chunks: Vec<Mutex<TreeChunk<'_>>> = trees
                .chunks_mut(per_chunk)
                .zip(parents.chunks_mut(per_chunk))
                .zip(actions.chunks_mut(per_chunk))
                .enumerate()
                .map(|(i, ((trees, parents), actions))| {
                    Mutex::new(TreeChunk {
                        first: i * per_chunk,
                        trees,
                        parents,
                        actions,
                    })
                })
                .collect();
            self.team.for_each(chunks.len(), &|i| {
                let mut chunk = chunks[i].lock().unwrap_or_else(|e| e.into_inner());
                let TreeChunk {
                    first,
                    trees,
                    parents,
                    actions,
                } = &mut *chunk;
                each_in_turn(*first, trees, parents, actions, &f);
            });
        } else if self.parallel {
            let per_task = PARALLEL_CHUNK.max(trees.len().div_ceil(rayon::current_num_threads()));
            trees
                .par_iter_mut()
                .zip(parents.par_iter_mut())
                .zip(actions.par_iter_mut())
                .enumerate()
                // One task per thread (at least PARALLEL_CHUNK trees each): each task wakes a
                // thread, and the per-tree work is a few microseconds.
                .with_min_len(per_task)
                .for_each(|(b, ((ts, p), a))| f(b, ts, p, a));
        } else {
            each_in_turn(0, trees, parents, actions, &f);
        }
    }
}

/// `f(first + j, tree j, parent j, action j)` for each tree of the slices, on this thread.
fn each_in_turn<F>(
    first: usize,
    trees: &mut [TreeState],
    parents: &mut [usize],
    actions: &mut [usize],
    f: &F,
) where
    F: Fn(usize, &mut TreeState, &mut usize, &mut usize),
{
    for (j, ((ts, p), a)) in trees
        .iter_mut()
        .zip(parents.iter_mut())
        .zip(actions.iter_mut())
        .enumerate()
    {
        f(first + j, ts, p, a);
    }
}

/// A run of consecutive trees (from batch index `first`) and their leaves' slots.
struct TreeChunk<'a> {
    first: usize,
    trees: &'a mut [TreeState],
    parents: &'a mut [usize],
    actions: &'a mut [usize],
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

/// Gather the `[B]` root values and `[B * A]` root statistics and targets of the finished
/// trees.
fn collect_output(trees: &mut [TreeState], rules: &Rules<'_>, num_actions: usize) -> SearchOutput {
    let batch = trees.len();
    let mut out = SearchOutput {
        batch,
        num_actions,
        root_values: Vec::with_capacity(batch),
        visit_counts: vec![0; batch * num_actions],
        policy_targets: vec![0.0; batch * num_actions],
        root_q: vec![0.0; batch * num_actions],
        root_priors: vec![0.0; batch * num_actions],
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
        out.root_priors[row.clone()].copy_from_slice(tree.priors(ROOT));
        let policy_targets = &mut out.policy_targets[row];
        match rules.gumbel {
            None => targets::visit_count_policy(visits, policy_targets),
            Some(params) => {
                let action = targets::gumbel_root_target(
                    tree,
                    &ts.legal,
                    &ts.gumbel,
                    params,
                    policy_targets,
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

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    use super::*;
    use crate::model::ModelError;
    use crate::search::config::tests::{gumbel_config, puct_config};
    use crate::testing::models::{Bandit, Chain, Flaky, HashModel};

    #[test]
    fn backup_with_discount_hand_computed() {
        // d = 0.9. Returns at the root:
        //   sim 0: 1 + 0.9 * 10 = 10
        //   sim 1: node 1 gets 2 + 0.9 * 20 = 20, root 1 + 0.9 * 20 = 19
        //   sim 2: node 2 gets 3 + 0.9 * 30 = 30, node 1 2 + 0.9 * 30 = 29, root 1 + 0.9 * 29 = 27.1
        // root value = (0.5 + 10 + 19 + 27.1) / 4 = 14.15
        // v(node 1) = (10 + 20 + 29) / 3, Q(root, 0) = 1 + 0.9 * 59 / 3 = 18.7
        for config in [puct_config(3, 0.9), gumbel_config(3, 0.9)] {
            let mut rng = StdRng::seed_from_u64(0);
            let out = run_search(
                &mut Chain::default(),
                &config,
                &[],
                2,
                &[true; 2],
                true,
                &mut rng,
            )
            .unwrap();
            for b in 0..2 {
                assert!(
                    (out.root_values[b] - 14.15).abs() < 1e-4,
                    "{:?}",
                    out.root_values
                );
                assert!((out.root_q[b] - 18.7).abs() < 1e-4, "{:?}", out.root_q);
                assert_eq!(out.visit_counts[b], 3);
                assert_eq!(out.policy_targets[b], 1.0);
            }
            assert_eq!(out.max_depth, 3);
        }
    }

    #[test]
    fn backup_two_player_hand_computed() {
        // Same chain, players alternate: G_parent = r - 0.9 * G_child.
        //   sim 0: root 1 - 0.9 * 10 = -8
        //   sim 1: node 1 2 - 0.9 * 20 = -16, root 1 + 0.9 * 16 = 15.4
        //   sim 2: node 2 3 - 0.9 * 30 = -24, node 1 2 + 0.9 * 24 = 23.6, root 1 - 0.9 * 23.6 = -20.24
        // root value = (0.5 - 8 + 15.4 - 20.24) / 4 = -3.085
        // v(node 1) = (10 - 16 + 23.6) / 3 = 17.6 / 3, Q(root, 0) = 1 - 0.9 * 17.6 / 3 = -4.28
        for policy in [SearchPolicy::Puct, SearchPolicy::default_gumbel()] {
            let config = SearchConfig {
                two_player: true,
                policy,
                ..puct_config(3, 0.9)
            };
            let mut rng = StdRng::seed_from_u64(0);
            let out = run_search(
                &mut Chain::default(),
                &config,
                &[],
                1,
                &[true],
                false,
                &mut rng,
            )
            .unwrap();
            assert!(
                (out.root_values[0] + 3.085).abs() < 1e-4,
                "{:?}",
                out.root_values
            );
            assert!((out.root_q[0] + 4.28).abs() < 1e-4, "{:?}", out.root_q);
        }
    }

    #[test]
    fn one_recurrent_call_per_simulation_with_batch_sized_inputs() {
        for (batch, sims) in [(1, 1), (3, 17), (40, 9)] {
            for config in [puct_config(sims, 0.99), gumbel_config(sims, 0.99)] {
                let mut model = Bandit::new(5, 1);
                let mut rng = StdRng::seed_from_u64(3);
                let obs = vec![0.0; batch];
                let masks = vec![true; batch * 5];
                let out =
                    run_search(&mut model, &config, &obs, batch, &masks, true, &mut rng).unwrap();
                assert_eq!(model.initial_calls, 1);
                assert_eq!(model.recurrent_calls, sims);
                assert_eq!(model.capacity, sims + 1);
                assert_eq!(out.batch, batch);
                assert_eq!(out.root_values.len(), batch);
                assert_eq!(out.visit_counts.len(), batch * 5);
            }
        }
    }

    #[test]
    fn invalid_inputs_are_reported() {
        let mut rng = StdRng::seed_from_u64(0);
        let mut model = Bandit::new(3, 0);
        let config = puct_config(5, 1.0);
        let err = run_search(
            &mut model, &config, &[0.0; 2], 2, &[true; 5], false, &mut rng,
        );
        assert!(matches!(
            err,
            Err(SearchError::LegalMaskLength {
                got: 5,
                expected: 6,
                ..
            })
        ));
        let masks = [true, true, true, false, false, false];
        let err = run_search(&mut model, &config, &[0.0; 2], 2, &masks, false, &mut rng);
        assert!(matches!(err, Err(SearchError::NoLegalAction { index: 1 })));
        let bad = SearchConfig {
            num_simulations: 0,
            ..config.clone()
        };
        let err = run_search(&mut model, &bad, &[0.0], 1, &[true; 3], false, &mut rng);
        assert!(matches!(err, Err(SearchError::InvalidConfig(_))));
        let bad = SearchConfig {
            dirichlet_alpha: 0.0,
            ..config.clone()
        };
        assert!(run_search(&mut model, &bad, &[0.0], 1, &[true; 3], false, &mut rng).is_ok());
        let err = run_search(&mut model, &bad, &[0.0], 1, &[true; 3], true, &mut rng);
        assert!(matches!(err, Err(SearchError::InvalidConfig(_))));
        // A model error (wrong observation length) comes back as an error, not a panic.
        let mut hashy = HashModel::tempting(3, vec![true; 3]);
        let err = run_search(
            &mut hashy, &config, &[0.0; 4], 1, &[true; 3], false, &mut rng,
        );
        assert!(matches!(
            err,
            Err(SearchError::Model(ModelError::ObservationShape { .. }))
        ));
        // Empty batch: nothing to do.
        let out = run_search(&mut model, &config, &[], 0, &[], false, &mut rng).unwrap();
        assert_eq!(out.batch, 0);
        assert!(out.root_values.is_empty());
    }

    #[test]
    fn model_failures_and_bad_shapes_are_errors() {
        let mut rng = StdRng::seed_from_u64(0);
        let config = puct_config(8, 1.0);
        let mut model = Flaky {
            fail_at: 3,
            short: false,
        };
        let err = run_search(&mut model, &config, &[], 2, &[true; 4], false, &mut rng);
        assert!(matches!(
            err,
            Err(SearchError::Model(ModelError::Backend(_)))
        ));
        let mut model = Flaky {
            fail_at: 5,
            short: true,
        };
        let err = run_search(&mut model, &config, &[], 2, &[true; 4], false, &mut rng);
        match err {
            Err(SearchError::PredictionShape {
                call,
                field,
                got,
                expected,
            }) => {
                assert_eq!(
                    (call, field, got, expected),
                    ("recurrent_inference", "policy_logits", 0, 4)
                );
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
