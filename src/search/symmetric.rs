//! Symmetric search: every root is searched once as it is and once through each of the game's
//! symmetries, and the root statistics of the copies are pooled before the policy target and
//! the action are computed. The result is equivariant under the symmetries (a mirrored root
//! gets the mirrored policy and action), and each root's Q-values average independent
//! estimates from differently-seen inputs. AlphaGo averaged its network over the board's
//! symmetries the same way; here the pooling is of whole searches, because a latent state has
//! no mirror image.
//!
//! Pooling, for root action `a` (copy `c` sees it as `actions_c[a]`):
//! - visits `N(a) = sum_c N_c(actions_c[a])`;
//! - `Q(a)`: the visit-weighted mean of the copies' `Q_c(actions_c[a])` (0 when unvisited);
//! - the root value: the mean of the copies' root values;
//! - pUCT: the policy target is the pooled visit distribution, and actions are sampled from the
//!   pooled visits as usual;
//! - Gumbel: the logits are the mean of the copies' root log-priors; unvisited actions are
//!   completed with the pooled root value; `sigma` is Gumbel MuZero's (min-max rescaled over the
//!   legal actions, times `(c_visit + max_a N(a) / copies) * c_scale`); the policy target is
//!   `softmax(logits + sigma)`, and the action is the best of `g + logits + sigma` over the
//!   legal actions with the most pooled visits, `g` fresh Gumbel noise (times the noise scale)
//!   in self-play and 0 otherwise.

use cumind_envs::Symmetry;
use rand::Rng;

use super::gumbel::{rescale_sigma, sample_gumbel, softmax_in_place, SigmaParams};
use super::output::SearchOutput;
use super::targets::visit_count_policy;
use super::SearchPolicy;

/// The `(1 + symmetries) * batch` observations: first `batch` observations as they are, then
/// every one through the first symmetry, and so on.
pub fn with_images(observations: &[f32], batch: usize, symmetries: &[Symmetry]) -> Vec<f32> {
    let obs_len = observations.len() / batch.max(1);
    let mut obs = Vec::with_capacity((1 + symmetries.len()) * observations.len());
    obs.extend_from_slice(observations);
    for symmetry in symmetries {
        for b in 0..batch {
            obs.extend(
                symmetry.apply_to_observation(&observations[b * obs_len..(b + 1) * obs_len]),
            );
        }
    }
    obs
}

/// The `(1 + symmetries) * batch` roots: first the roots as they are, then every root through
/// the first symmetry, and so on. Returns the observations ([`with_images`]) and the legal
/// masks.
pub(super) fn expand(
    observations: &[f32],
    legal_masks: &[bool],
    batch: usize,
    num_actions: usize,
    symmetries: &[Symmetry],
) -> (Vec<f32>, Vec<bool>) {
    let obs = with_images(observations, batch, symmetries);
    let mut masks = Vec::with_capacity((1 + symmetries.len()) * legal_masks.len());
    masks.extend_from_slice(legal_masks);
    for symmetry in symmetries {
        for b in 0..batch {
            let mut mask = vec![false; num_actions];
            for (a, &legal) in legal_masks[b * num_actions..(b + 1) * num_actions]
                .iter()
                .enumerate()
            {
                mask[symmetry.actions[a]] = legal;
            }
            masks.extend(mask);
        }
    }
    (obs, masks)
}

/// Pool `out` (the search of [`expand`]'s roots) into one row per original root.
/// `legal_masks` are the original roots' masks.
pub(super) fn pool<R: Rng + ?Sized>(
    out: &SearchOutput,
    batch: usize,
    legal_masks: &[bool],
    symmetries: &[Symmetry],
    policy: &SearchPolicy,
    add_noise: bool,
    rng: &mut R,
) -> SearchOutput {
    let a_len = out.num_actions;
    let copies = 1 + symmetries.len();
    // Where copy `c` keeps original action `a`.
    let position = |c: usize, a: usize| {
        if c == 0 {
            a
        } else {
            symmetries[c - 1].actions[a]
        }
    };
    let mut pooled = SearchOutput {
        batch,
        num_actions: a_len,
        root_values: Vec::with_capacity(batch),
        visit_counts: vec![0; batch * a_len],
        policy_targets: vec![0.0; batch * a_len],
        root_q: vec![0.0; batch * a_len],
        root_priors: vec![0.0; batch * a_len],
        gumbel_actions: matches!(policy, SearchPolicy::Gumbel { .. }).then(Vec::new),
        max_depth: out.max_depth,
    };
    let mut logits = vec![0.0f32; a_len];
    let mut sigma = vec![0.0f32; a_len];
    let mut noise = vec![0.0f32; a_len];
    for b in 0..batch {
        let row = b * a_len..(b + 1) * a_len;
        let legal = &legal_masks[row.clone()];
        let root_value = (0..copies)
            .map(|c| out.root_values[c * batch + b])
            .sum::<f32>()
            / copies as f32;
        pooled.root_values.push(root_value);
        for (a, logit) in logits.iter_mut().enumerate() {
            let (mut visits, mut weighted, mut log_prior, mut prior) = (0u32, 0.0f32, 0.0f32, 0.0);
            for c in 0..copies {
                let i = (c * batch + b) * a_len + position(c, a);
                visits += out.visit_counts[i];
                weighted += out.visit_counts[i] as f32 * out.root_q[i];
                log_prior += out.root_priors[i].max(f32::MIN_POSITIVE).ln();
                prior += out.root_priors[i];
            }
            pooled.visit_counts[b * a_len + a] = visits;
            pooled.root_q[b * a_len + a] = if visits > 0 {
                weighted / visits as f32
            } else {
                0.0
            };
            pooled.root_priors[b * a_len + a] = prior / copies as f32;
            *logit = log_prior / copies as f32;
        }
        let visits = &pooled.visit_counts[row.clone()];
        let targets = &mut pooled.policy_targets[row.clone()];
        match *policy {
            SearchPolicy::Puct => visit_count_policy(visits, targets),
            SearchPolicy::Gumbel {
                c_visit,
                c_scale,
                noise_scale,
                ..
            } => {
                let q = &pooled.root_q[row.clone()];
                let most = (0..a_len)
                    .filter(|&a| legal[a])
                    .map(|a| visits[a])
                    .max()
                    .unwrap_or(0);
                for a in 0..a_len {
                    sigma[a] = if visits[a] > 0 { q[a] } else { root_value };
                }
                let params = SigmaParams { c_visit, c_scale };
                rescale_sigma(&mut sigma, most as f32 / copies as f32, params, Some(legal));
                for a in 0..a_len {
                    targets[a] = logits[a] + sigma[a];
                }
                softmax_in_place(targets, Some(legal));
                if add_noise {
                    sample_gumbel(rng, &mut noise);
                } else {
                    noise.fill(0.0);
                }
                let action = (0..a_len)
                    .filter(|&a| legal[a] && visits[a] == most)
                    .map(|a| (a, noise_scale * noise[a] + logits[a] + sigma[a]))
                    .fold(None, |best: Option<(usize, f32)>, (a, score)| match best {
                        Some((_, s)) if s >= score => best,
                        _ => Some((a, score)),
                    })
                    .map_or(0, |(a, _)| a);
                if let Some(actions) = pooled.gumbel_actions.as_mut() {
                    actions.push(action);
                }
            }
        }
    }
    pooled
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    use super::*;
    use crate::search::config::tests::{gumbel_config, puct_config};
    use crate::search::{run_search, SearchConfig};
    use crate::testing::models::{HashModel, HashParams};

    /// A one-value observation that changes sign, three actions whose ends swap (Catch's
    /// left / stay / right).
    fn mirror() -> Symmetry {
        Symmetry {
            observation: vec![0],
            negate: vec![true],
            actions: vec![2, 1, 0],
        }
    }

    fn search(config: &SearchConfig, observation: f32, legal: [bool; 3]) -> SearchOutput {
        let mut model = HashModel::new(3, HashParams::UNIT_TESTS);
        let mut rng = StdRng::seed_from_u64(3);
        run_search(
            &mut model,
            config,
            &[observation],
            1,
            &legal,
            false,
            &mut rng,
        )
        .unwrap()
    }

    fn mirrored<T: Copy>(row: &[T]) -> Vec<T> {
        vec![row[2], row[1], row[0]]
    }

    fn assert_close(a: &[f32], b: &[f32]) {
        assert!(
            a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6),
            "{a:?} against {b:?}"
        );
    }

    #[test]
    fn a_symmetric_search_is_equivariant_and_a_plain_one_is_not() {
        let (legal, legal_mirrored) = ([true, true, false], [false, true, true]);
        for base in [puct_config(24, 0.9), gumbel_config(24, 0.9)] {
            let plain = search(&base, 0.7, legal);
            let plain_mirrored = search(&base, -0.7, legal_mirrored);
            // The hash model sees two unrelated positions.
            assert!((plain.root_values[0] - plain_mirrored.root_values[0]).abs() > 1e-4);

            let config = SearchConfig {
                symmetries: vec![mirror()],
                ..base.clone()
            };
            let out = search(&config, 0.7, legal);
            let out_mirrored = search(&config, -0.7, legal_mirrored);
            assert_eq!(out.batch, 1);
            assert_eq!(
                out.visit_counts_of(0).iter().sum::<u32>(),
                48,
                "two searches"
            );
            assert_eq!(out.visit_counts_of(0)[2], 0, "illegal");
            assert_close(&out.root_values, &out_mirrored.root_values);
            assert_eq!(
                mirrored(out.visit_counts_of(0)),
                out_mirrored.visit_counts_of(0)
            );
            assert_close(&mirrored(out.root_q_of(0)), out_mirrored.root_q_of(0));
            assert_close(
                &mirrored(out.policy_target_of(0)),
                out_mirrored.policy_target_of(0),
            );
            assert!((out.policy_target_of(0).iter().sum::<f32>() - 1.0).abs() < 1e-5);
            assert_eq!(out.policy_target_of(0)[2], 0.0);
            match (&out.gumbel_actions, &out_mirrored.gumbel_actions) {
                (Some(a), Some(b)) => {
                    assert!(a[0] < 2, "legal");
                    assert_eq!(2 - a[0], b[0]);
                }
                (None, None) => assert!(base.policy == SearchPolicy::Puct),
                _ => panic!("one search chose a Gumbel action, the other did not"),
            }
        }
    }

    #[test]
    fn pooling_sums_the_visits_and_weights_q_by_them() {
        // One root (batch 1) searched as it is (row 0) and mirrored (row 1), where original
        // action a sits at 2 - a.
        let out = SearchOutput {
            batch: 2,
            num_actions: 3,
            root_values: vec![1.0, 0.5],
            visit_counts: vec![2, 1, 0, 0, 3, 4],
            policy_targets: vec![0.0; 6],
            root_q: vec![1.0, 0.5, 0.0, 0.0, 0.2, 0.4],
            root_priors: vec![0.5, 0.3, 0.2, 0.2, 0.3, 0.5],
            gumbel_actions: None,
            max_depth: 3,
        };
        let mut rng = StdRng::seed_from_u64(0);
        let legal = [true; 3];
        let pooled = pool(
            &out,
            1,
            &legal,
            &[mirror()],
            &SearchPolicy::Puct,
            false,
            &mut rng,
        );
        assert_eq!(pooled.visit_counts, vec![6, 4, 0]);
        assert_close(&pooled.root_q, &[3.6 / 6.0, 1.1 / 4.0, 0.0]);
        assert_close(&pooled.root_values, &[0.75]);
        assert_close(&pooled.policy_targets, &[0.6, 0.4, 0.0]);
        assert_close(&pooled.root_priors, &[0.5, 0.3, 0.2]);
        assert_eq!(pooled.max_depth, 3);
    }
}
