//! Whole-search properties: fake models whose right answer is known (bandits, a trap that the
//! two-player sign must avoid), root masks that hold whatever the model says, and batching or
//! buffer reuse that never changes a result. Unit tests of each part live beside it; the golden
//! trees are in `tests/search_golden.rs`.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::config::tests::{gumbel_config, puct_config};
use super::*;
use crate::testing::models::{Bandit, Costly, DeadLogits, HashModel, HashParams, Trap};

#[test]
fn puct_finds_the_bandit_arm() {
    let mut model = Bandit::new(4, 2);
    let mut rng = StdRng::seed_from_u64(0);
    let config = puct_config(50, 0.9);
    let out = run_search(
        &mut model, &config, &[0.0; 2], 2, &[true; 8], false, &mut rng,
    )
    .unwrap();
    assert_eq!(model.initial_calls, 1);
    assert_eq!(model.recurrent_calls, 50);
    assert_eq!(model.capacity, 51);
    for b in 0..2 {
        let visits = out.visit_counts_of(b);
        assert_eq!(visits.iter().sum::<u32>(), 50);
        let most = (0..4)
            .max_by_key(|&a| (visits[a], std::cmp::Reverse(a)))
            .unwrap();
        assert_eq!(most, 2, "{visits:?}");
        assert!(visits[2] >= 35, "{visits:?}");
        // Root value: (0 + sum of returns) / 51, each return 1 through arm 2, else 0.
        let expected = visits[2] as f32 / 51.0;
        assert!((out.root_values[b] - expected).abs() < 1e-6);
        assert!(out.root_values[b] > 0.65 && out.root_values[b] <= 1.0);
        assert!((out.root_q_of(b)[2] - 1.0).abs() < 1e-6);
        assert_eq!(out.root_q_of(b)[0], 0.0);
        let target = out.policy_target_of(b);
        assert!((target.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!((target[2] - visits[2] as f32 / 50.0).abs() < 1e-6);
    }
    assert!(out.gumbel_actions.is_none());
    assert!(out.max_depth >= 1);
}

#[test]
fn gumbel_finds_the_bandit_arm_with_four_simulations() {
    for seed in 0..20 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut model = Bandit::new(4, 2);
        let config = gumbel_config(4, 0.9);
        let out = run_search(
            &mut model,
            &config,
            &[0.0; 3],
            3,
            &[true; 12],
            true,
            &mut rng,
        )
        .unwrap();
        assert_eq!(model.recurrent_calls, 4);
        assert_eq!(out.gumbel_actions, Some(vec![2; 3]), "seed {seed}");
        for b in 0..3 {
            // Sequential Halving with 4 actions and 4 simulations visits each arm once.
            assert_eq!(out.visit_counts_of(b), &[1, 1, 1, 1]);
            let target = out.policy_target_of(b);
            assert!(target[2] > 0.99, "{target:?}");
            assert!((target.iter().sum::<f32>() - 1.0).abs() < 1e-5);
            assert!((out.root_values[b] - 0.2).abs() < 1e-6); // (0 + 1 + 0 + 0 + 0) / 5
        }
    }
    // Without noise (evaluation) too.
    let mut model = Bandit::new(4, 2);
    let mut rng = StdRng::seed_from_u64(0);
    let out = run_search(
        &mut model,
        &gumbel_config(4, 0.9),
        &[0.0],
        1,
        &[true; 4],
        false,
        &mut rng,
    )
    .unwrap();
    assert_eq!(out.gumbel_actions, Some(vec![2]));
}

#[test]
fn gumbel_concentrates_visits_on_the_arm_with_more_simulations() {
    // 8 arms, 16 considered (-> 8), 40 simulations: the best arm survives every halving.
    let mut model = Bandit::new(8, 5);
    let mut rng = StdRng::seed_from_u64(11);
    let out = run_search(
        &mut model,
        &gumbel_config(40, 1.0),
        &[0.0],
        1,
        &[true; 8],
        true,
        &mut rng,
    )
    .unwrap();
    let visits = out.visit_counts_of(0);
    assert_eq!(visits.iter().sum::<u32>(), 40);
    assert_eq!(
        visits.iter().enumerate().max_by_key(|(_, &n)| n).unwrap().0,
        5
    );
    assert_eq!(out.gumbel_actions, Some(vec![5]));
}

#[test]
fn two_player_sign_changes_the_preferred_action() {
    for policy in [SearchPolicy::Puct, SearchPolicy::default_gumbel()] {
        for two_player in [false, true] {
            let config = SearchConfig {
                two_player,
                policy: policy.clone(),
                ..puct_config(30, 1.0)
            };
            let mut model = Trap::default();
            let mut rng = StdRng::seed_from_u64(1);
            let out = run_search(&mut model, &config, &[], 1, &[true; 2], false, &mut rng).unwrap();
            let (v, q) = (out.visit_counts_of(0), out.root_q_of(0));
            let (good, bad) = if two_player { (1, 0) } else { (0, 1) };
            if two_player {
                assert!(q[0] < -1.0 && q[0] > -4.0 - 1e-5, "{q:?}");
                assert!(q[1].abs() < 1e-6, "{q:?}");
            } else {
                assert!(q[0] > 4.0 && q[0] < 6.0 + 1e-5, "{q:?}");
            }
            match &out.gumbel_actions {
                // Sequential Halving over 2 actions splits the visits evenly.
                Some(actions) => {
                    assert_eq!(v, &[15, 15]);
                    assert_eq!(actions[0], good);
                    assert!(
                        out.policy_target_of(0)[good] > 0.9,
                        "{:?}",
                        out.policy_targets
                    );
                }
                None => assert!(v[good] > 2 * v[bad], "{v:?}"),
            }
        }
    }
}

fn random_masks(rng: &mut impl Rng, batch: usize, num_actions: usize) -> Vec<bool> {
    let mut masks: Vec<bool> = (0..batch * num_actions)
        .map(|_| rng.random_bool(0.5))
        .collect();
    for row in masks.chunks_exact_mut(num_actions) {
        if !row.contains(&true) {
            row[rng.random_range(0..num_actions)] = true;
        }
    }
    masks
}

#[test]
fn illegal_root_actions_are_never_visited_or_chosen() {
    let mut rng = StdRng::seed_from_u64(42);
    let (batch, num_actions) = (6, 7);
    let policies = [
        SearchPolicy::Puct,
        SearchPolicy::default_gumbel(),
        SearchPolicy::Gumbel {
            max_considered_actions: 2,
            c_visit: 50.0,
            c_scale: 1.0,
            noise_scale: 1.0,
        },
    ];
    for round in 0..60 {
        let masks = random_masks(&mut rng, batch, num_actions);
        let obs: Vec<f32> = (0..batch).map(|_| rng.random::<f32>()).collect();
        let config = SearchConfig {
            exploration_fraction: 1.0, // noise only: the priors of illegal actions are huge
            two_player: round % 2 == 1,
            policy: policies[round % 3].clone(),
            ..puct_config(12 + round % 7, 0.95)
        };
        let mut model = HashModel::tempting(num_actions, masks.clone());
        let out = run_search(&mut model, &config, &obs, batch, &masks, true, &mut rng).unwrap();
        for b in 0..batch {
            let legal = &masks[b * num_actions..(b + 1) * num_actions];
            let visits = out.visit_counts_of(b);
            let target = out.policy_target_of(b);
            assert_eq!(visits.iter().sum::<u32>() as usize, config.num_simulations);
            assert!((target.iter().sum::<f32>() - 1.0).abs() < 1e-5);
            for a in 0..num_actions {
                if !legal[a] {
                    assert_eq!(visits[a], 0, "round {round}: visited illegal {a}");
                    assert_eq!(target[a], 0.0);
                    assert_eq!(out.root_q_of(b)[a], 0.0);
                }
            }
            if let Some(actions) = &out.gumbel_actions {
                assert!(legal[actions[b]], "round {round}: Gumbel chose illegal");
            }
            for t in [0.0, 1.0, 0.25] {
                assert!(legal[select_action(visits, legal, t, &mut rng)]);
            }
            assert!(out.root_values[b].is_finite());
        }
    }
}

#[test]
fn all_zero_priors_still_respect_the_mask() {
    // Root logits -inf everywhere: the priors fall back to uniform over the legal actions.
    let mask = [false, false, true];
    for policy in [SearchPolicy::Puct, SearchPolicy::default_gumbel()] {
        let config = SearchConfig {
            policy,
            ..puct_config(10, 1.0)
        };
        let mut rng = StdRng::seed_from_u64(0);
        let out = run_search(&mut DeadLogits, &config, &[], 1, &mask, true, &mut rng).unwrap();
        assert_eq!(out.visit_counts, vec![0, 0, 10]);
        assert_eq!(out.policy_targets, vec![0.0, 0.0, 1.0]);
    }
}

#[test]
fn negative_q_never_pulls_search_into_illegal_actions() {
    let mask = [false, true, false, true];
    for add_noise in [false, true] {
        let mut rng = StdRng::seed_from_u64(4);
        let out = run_search(
            &mut Costly,
            &puct_config(20, 1.0),
            &[],
            1,
            &mask,
            add_noise,
            &mut rng,
        )
        .unwrap();
        assert_eq!(
            out.visit_counts[0] + out.visit_counts[2],
            0,
            "{:?}",
            out.visit_counts
        );
        assert_eq!(out.visit_counts[1] + out.visit_counts[3], 20);
        // Below the root every action is allowed, so the tree does grow deeper.
        assert!(out.max_depth > 1);
    }
}

#[test]
fn parallel_batches_match_single_searches() {
    // 130 trees take the rayon path (PARALLEL_MIN_BATCH is 128), or helper threads; each must
    // equal its own batch-of-one (serial) search.
    let (batch, num_actions) = (130, 6);
    let mut rng = StdRng::seed_from_u64(9);
    let masks = random_masks(&mut rng, batch, num_actions);
    let obs: Vec<f32> = (0..batch).map(|b| b as f32 * 0.37).collect();
    let cases = [
        (SearchPolicy::Puct, 0),
        (SearchPolicy::default_gumbel(), 0),
        (SearchPolicy::Puct, 2),
        (SearchPolicy::default_gumbel(), 3),
    ];
    for (policy, helper_threads) in cases {
        let config = SearchConfig {
            policy,
            helper_threads,
            ..puct_config(20, 0.97)
        };
        let mut model = HashModel::tempting(num_actions, masks.clone());
        let all = run_search(&mut model, &config, &obs, batch, &masks, false, &mut rng).unwrap();
        let mut searcher = Searcher::new();
        for b in 0..batch {
            let row = b * num_actions..(b + 1) * num_actions;
            let mut single = HashModel::tempting(num_actions, masks[row.clone()].to_vec());
            let one = searcher
                .run(
                    &mut single,
                    &config,
                    &SearchInput {
                        observations: &obs[b..b + 1],
                        batch: 1,
                        legal_masks: &masks[row.clone()],
                        add_noise: false,
                    },
                    &mut rng,
                )
                .unwrap();
            assert_eq!(one.visit_counts, all.visit_counts[row.clone()]);
            assert_eq!(one.policy_targets, all.policy_targets[row.clone()]);
            assert_eq!(one.root_values[0], all.root_values[b]);
            if let Some(actions) = &all.gumbel_actions {
                assert_eq!(one.gumbel_actions.as_ref().unwrap()[0], actions[b]);
            }
        }
    }
}

#[test]
fn searcher_reuse_is_identical_to_fresh_searches() {
    let mut searcher = Searcher::new();
    let num_actions = 5;
    for (i, (batch, sims)) in [(4, 10), (2, 30), (6, 5), (4, 10)].into_iter().enumerate() {
        for policy in [SearchPolicy::Puct, SearchPolicy::default_gumbel()] {
            let config = SearchConfig {
                policy,
                ..puct_config(sims, 0.9)
            };
            let mut rng_masks = StdRng::seed_from_u64(i as u64);
            let masks = random_masks(&mut rng_masks, batch, num_actions);
            let obs: Vec<f32> = (0..batch).map(|b| (b + i) as f32).collect();
            let mut m1 = HashModel::tempting(num_actions, masks.clone());
            let mut m2 = HashModel::tempting(num_actions, masks.clone());
            let (mut r1, mut r2) = (StdRng::seed_from_u64(5), StdRng::seed_from_u64(5));
            let reused = searcher
                .run(
                    &mut m1,
                    &config,
                    &SearchInput {
                        observations: &obs,
                        batch,
                        legal_masks: &masks,
                        add_noise: true,
                    },
                    &mut r1,
                )
                .unwrap();
            let fresh = run_search(&mut m2, &config, &obs, batch, &masks, true, &mut r2).unwrap();
            assert_eq!(reused, fresh);
        }
    }
}

/// The Gumbel noise scale: at 0 self-play's chosen actions and visits no longer depend on the
/// noise (every seed plays the same), at 1 they do, and the policy targets stay a function
/// of the search alone (at 0 they are equal across seeds too).
#[test]
fn a_gumbel_noise_scale_of_zero_makes_self_play_deterministic() {
    let (batch, num_actions) = (8, 5);
    let masks = vec![true; batch * num_actions];
    let obs: Vec<f32> = (0..batch).map(|i| i as f32 * 0.37).collect();
    let run = |noise_scale: f32, seed: u64| {
        let config = SearchConfig {
            policy: SearchPolicy::Gumbel {
                max_considered_actions: 4,
                c_visit: 50.0,
                c_scale: 1.0,
                noise_scale,
            },
            ..puct_config(16, 0.95)
        };
        let mut model = HashModel::new(num_actions, HashParams::UNIT_TESTS);
        let mut rng = StdRng::seed_from_u64(seed);
        run_search(&mut model, &config, &obs, batch, &masks, true, &mut rng).unwrap()
    };
    let (a, b) = (run(0.0, 1), run(0.0, 2));
    assert_eq!(a.gumbel_actions, b.gumbel_actions);
    assert_eq!(a.visit_counts, b.visit_counts);
    assert_eq!(a.policy_targets, b.policy_targets);
    let (c, d) = (run(1.0, 1), run(1.0, 2));
    assert_ne!(
        c.gumbel_actions, d.gumbel_actions,
        "noise at scale 1 moves the actions"
    );
}
