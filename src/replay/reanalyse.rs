//! Reanalyse (Schrittwieser et al. 2021, "Online and offline reinforcement learning by
//! planning with a learned model"; LightZero's `reanalyze_ratio`): fresh search policies for a
//! fraction of a sampled batch, so the policy targets of old games follow the current model
//! instead of the one that played them.
//!
//! The rows `0..round(fraction * B)` are reanalysed (rows are drawn independently, so the
//! first rows are a random subset). For each of them every unrolled position with a policy
//! target (`policy_mask == 1`, that is `t+k < T`) is searched from its real observation
//! (`Batch::unroll_observations`) in one batched search, with root noise as in self-play, and
//! its policy target is replaced by the search's. Value targets are not touched here: with
//! `value_target = "target_network"` (the default) every bootstrap value is already
//! recomputed by the target network at each training step.
//!
//! Legal actions are not stored in games; a reanalysed root considers the actions its stored
//! policy gave a positive probability. Gumbel's improved policy is positive on every legal
//! action, so under Gumbel these are the legal actions; under pUCT they are the actions the
//! original search visited.
//!
//! Free of candle: the model is any [`Model`] (the trainer passes a
//! [`crate::network::SearchModel`] of the target network or of the latest parameters,
//! `training.reanalyse_network`).

use rand::Rng;

use super::Batch;
use crate::model::Model;
use crate::search::{SearchConfig, SearchError, SearchInput, Searcher};

/// The batch rows `fraction` selects: `round(fraction * batch_size)`, clamped to the batch.
pub fn reanalysed_rows(batch_size: usize, fraction: f64) -> usize {
    ((fraction.clamp(0.0, 1.0) * batch_size as f64).round() as usize).min(batch_size)
}

/// Replace the policy targets of the first [`reanalysed_rows`] rows of `batch` with those of
/// a fresh search with `model`; returns the flat indices `b * (K+1) + k` of the positions
/// searched (what [`crate::replay::ReplayBuffer::write_back_policies`] stores).
pub fn reanalyse_policies<M: Model + ?Sized, R: Rng + ?Sized>(
    batch: &mut Batch,
    model: &mut M,
    config: &SearchConfig,
    fraction: f64,
    searcher: &mut Searcher,
    rng: &mut R,
) -> Result<Vec<usize>, SearchError> {
    let rows = reanalysed_rows(batch.batch_size, fraction);
    let (steps, obs_len, a) = (batch.num_unroll_steps + 1, batch.obs_len, batch.num_actions);
    // Flat row indices (b * steps + k) of the positions to search.
    let positions: Vec<usize> = (0..rows * steps)
        .filter(|&row| batch.policy_mask[row] != 0.0)
        .collect();
    if positions.is_empty() {
        return Ok(positions);
    }
    let mut observations = Vec::with_capacity(positions.len() * obs_len);
    let mut legal = Vec::with_capacity(positions.len() * a);
    for &row in &positions {
        observations
            .extend_from_slice(&batch.unroll_observations[row * obs_len..(row + 1) * obs_len]);
        let policy = &batch.target_policies[row * a..(row + 1) * a];
        if policy.iter().any(|&p| p > 0.0) {
            legal.extend(policy.iter().map(|&p| p > 0.0));
        } else {
            legal.extend(std::iter::repeat_n(true, a));
        }
    }
    let output = searcher.run(
        model,
        config,
        &SearchInput {
            observations: &observations,
            batch: positions.len(),
            legal_masks: &legal,
            add_noise: true,
        },
        rng,
    )?;
    for (i, &row) in positions.iter().enumerate() {
        batch.target_policies[row * a..(row + 1) * a].copy_from_slice(output.policy_target_of(i));
    }
    Ok(positions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::ReplayBuffer;
    use crate::search::{run_search, SearchPolicy};
    use crate::testing::games::{replay_config, RandomGame};
    use crate::testing::models::{HashModel, HashParams};
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    /// A batch of 8 rows from random one-value-observation games (the hash model reads one
    /// observation value per tree), some shorter than the unroll.
    fn batch() -> Batch {
        let mut rng = StdRng::seed_from_u64(5);
        let mut buffer = ReplayBuffer::new(replay_config(1000, 3, 2, 0.9));
        for len in [2usize, 4, 9, 20] {
            let game = RandomGame {
                obs_len: 1,
                num_actions: 3,
                len,
                rewards: -1.0..1.0,
                root_values: -1.0..1.0,
                terminated: len % 2 == 0,
                final_value: 0.0,
            }
            .draw(&mut rng);
            buffer.save_game(game).unwrap();
        }
        buffer.sample(8, &mut rng).unwrap()
    }

    fn configs() -> [SearchConfig; 2] {
        let base = SearchConfig {
            num_simulations: 12,
            ..SearchConfig::default()
        };
        [
            base.clone(),
            SearchConfig {
                policy: SearchPolicy::default_gumbel(),
                ..base
            },
        ]
    }

    #[test]
    fn reanalysed_targets_equal_a_fresh_search_of_the_same_positions() {
        for config in configs() {
            let original = batch();
            let mut reanalysed = original.clone();
            let mut model = HashModel::new(3, HashParams::UNIT_TESTS);
            let searched = reanalyse_policies(
                &mut reanalysed,
                &mut model,
                &config,
                0.5,
                &mut Searcher::new(),
                &mut StdRng::seed_from_u64(9),
            )
            .unwrap();
            // Rows 0..4 are reanalysed: every position with a policy target.
            let steps = original.num_unroll_steps + 1;
            let rows: Vec<usize> = (0..4 * steps)
                .filter(|&r| original.policy_mask[r] == 1.0)
                .collect();
            assert_eq!(searched, rows);
            assert!(rows.len() > 4, "the unrolled positions are searched too");
            // The same search, run directly on those observations.
            let observations: Vec<f32> = rows
                .iter()
                .map(|&r| original.unroll_observations[r])
                .collect();
            let legal: Vec<bool> = rows
                .iter()
                .flat_map(|&r| {
                    original.target_policies[r * 3..r * 3 + 3]
                        .iter()
                        .map(|&p| p > 0.0)
                })
                .collect();
            let fresh = run_search(
                &mut HashModel::new(3, HashParams::UNIT_TESTS),
                &config,
                &observations,
                rows.len(),
                &legal,
                true,
                &mut StdRng::seed_from_u64(9),
            )
            .unwrap();
            for (i, &r) in rows.iter().enumerate() {
                assert_eq!(
                    &reanalysed.target_policies[r * 3..r * 3 + 3],
                    fresh.policy_target_of(i)
                );
                assert_ne!(
                    &reanalysed.target_policies[r * 3..r * 3 + 3],
                    &original.target_policies[r * 3..r * 3 + 3],
                    "row {r} kept its stored policy"
                );
            }
            // Everything else is untouched.
            for r in 0..8 * steps {
                if !rows.contains(&r) {
                    assert_eq!(
                        &reanalysed.target_policies[r * 3..r * 3 + 3],
                        &original.target_policies[r * 3..r * 3 + 3]
                    );
                }
            }
            let mut rest = reanalysed.clone();
            rest.target_policies = original.target_policies.clone();
            assert_eq!(rest, original);
        }
    }

    #[test]
    fn fraction_zero_searches_nothing_and_the_fraction_is_clamped() {
        let original = batch();
        let mut same = original.clone();
        let n = reanalyse_policies(
            &mut same,
            &mut HashModel::new(3, HashParams::UNIT_TESTS),
            &configs()[0],
            0.0,
            &mut Searcher::new(),
            &mut StdRng::seed_from_u64(1),
        )
        .unwrap();
        assert_eq!((n, same), (vec![], original));
        assert_eq!(reanalysed_rows(128, 0.25), 32);
        assert_eq!(reanalysed_rows(128, 3.0), 128);
        assert_eq!(reanalysed_rows(128, -1.0), 0);
    }
}
