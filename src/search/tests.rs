//! End-to-end tests of the batched search with fake models whose right answers are known.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::model::{Model, ModelError, Prediction};

fn puct_config(num_simulations: usize, discount: f32) -> SearchConfig {
    SearchConfig {
        num_simulations,
        discount,
        policy: SearchPolicy::Puct,
        ..SearchConfig::default()
    }
}

fn gumbel_config(num_simulations: usize, discount: f32) -> SearchConfig {
    SearchConfig {
        num_simulations,
        discount,
        policy: SearchPolicy::default_gumbel(),
        ..SearchConfig::default()
    }
}

/// A one-step bandit: from the root, action `best` gives reward 1, the others 0; every value
/// is 0, every prior uniform and nothing below the root gives any reward. Also checks and
/// counts the calls the search makes.
struct Bandit {
    num_actions: usize,
    best: usize,
    batch: usize,
    capacity: usize,
    recurrent_calls: usize,
    initial_calls: usize,
}

impl Bandit {
    fn new(num_actions: usize, best: usize) -> Self {
        Self {
            num_actions,
            best,
            batch: 0,
            capacity: 0,
            recurrent_calls: 0,
            initial_calls: 0,
        }
    }
}

impl Model for Bandit {
    fn num_actions(&self) -> usize {
        self.num_actions
    }

    fn initial_inference(
        &mut self,
        observations: &[f32],
        batch: usize,
        capacity: usize,
    ) -> Result<Prediction, ModelError> {
        assert_eq!(observations.len(), batch);
        self.batch = batch;
        self.capacity = capacity;
        self.initial_calls += 1;
        self.recurrent_calls = 0;
        Ok(Prediction {
            policy_logits: vec![0.0; batch * self.num_actions],
            values: vec![0.0; batch],
            rewards: vec![0.0; batch],
        })
    }

    fn recurrent_inference(
        &mut self,
        parents: &[usize],
        actions: &[usize],
        new_node: usize,
    ) -> Result<Prediction, ModelError> {
        assert_eq!(parents.len(), self.batch);
        assert_eq!(actions.len(), self.batch);
        self.recurrent_calls += 1;
        assert_eq!(new_node, self.recurrent_calls, "node s + 1 at simulation s");
        assert!(new_node < self.capacity);
        assert!(parents.iter().all(|&p| p < new_node));
        assert!(actions.iter().all(|&a| a < self.num_actions));
        let rewards = parents
            .iter()
            .zip(actions)
            .map(|(&p, &a)| if p == 0 && a == self.best { 1.0 } else { 0.0 })
            .collect();
        Ok(Prediction {
            policy_logits: vec![0.0; self.batch * self.num_actions],
            values: vec![0.0; self.batch],
            rewards,
        })
    }
}

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

/// One action only: the simulations build the chain root -> 1 -> 2 -> 3 with
/// rewards 1, 2, 3 into nodes 1, 2, 3 and values 0.5 (root), 10, 20, 30.
struct Chain {
    batch: usize,
}

impl Model for Chain {
    fn num_actions(&self) -> usize {
        1
    }

    fn initial_inference(
        &mut self,
        _: &[f32],
        batch: usize,
        _: usize,
    ) -> Result<Prediction, ModelError> {
        self.batch = batch;
        Ok(Prediction {
            policy_logits: vec![0.0; batch],
            values: vec![0.5; batch],
            rewards: vec![0.0; batch],
        })
    }

    fn recurrent_inference(
        &mut self,
        parents: &[usize],
        _: &[usize],
        new_node: usize,
    ) -> Result<Prediction, ModelError> {
        assert!(parents.iter().all(|&p| p + 1 == new_node), "a chain");
        Ok(Prediction {
            policy_logits: vec![0.0; self.batch],
            values: vec![10.0 * new_node as f32; self.batch],
            rewards: vec![new_node as f32; self.batch],
        })
    }
}

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
            &mut Chain { batch: 0 },
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
            &mut Chain { batch: 0 },
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

/// Two actions, discount 1. From the root, action 0 pays the mover 1 and action 1 pays 0; one
/// level down, every action pays the mover 5 after root action 0 and 0 after root action 1.
/// One player: action 0 is worth 6. Two players: 1 - 5 = -4, so action 1 (worth 0) is better.
struct Trap {
    batch: usize,
    capacity: usize,
    /// Root action leading to each node, per tree.
    branch: Vec<usize>,
    depth: Vec<usize>,
}

impl Model for Trap {
    fn num_actions(&self) -> usize {
        2
    }

    fn initial_inference(
        &mut self,
        _: &[f32],
        batch: usize,
        capacity: usize,
    ) -> Result<Prediction, ModelError> {
        self.batch = batch;
        self.capacity = capacity;
        self.branch = vec![0; batch * capacity];
        self.depth = vec![0; batch * capacity];
        Ok(Prediction {
            policy_logits: vec![0.0; batch * 2],
            values: vec![0.0; batch],
            rewards: vec![0.0; batch],
        })
    }

    fn recurrent_inference(
        &mut self,
        parents: &[usize],
        actions: &[usize],
        new_node: usize,
    ) -> Result<Prediction, ModelError> {
        let mut rewards = vec![0.0; self.batch];
        for b in 0..self.batch {
            let (p, n) = (b * self.capacity + parents[b], b * self.capacity + new_node);
            self.depth[n] = self.depth[p] + 1;
            self.branch[n] = if self.depth[n] == 1 {
                actions[b]
            } else {
                self.branch[p]
            };
            rewards[b] = match (self.depth[n], self.branch[n]) {
                (1, 0) => 1.0,
                (2, 0) => 5.0,
                _ => 0.0,
            };
        }
        Ok(Prediction {
            policy_logits: vec![0.0; self.batch * 2],
            values: vec![0.0; self.batch],
            rewards,
        })
    }
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
            let mut model = Trap {
                batch: 0,
                capacity: 0,
                branch: vec![],
                depth: vec![],
            };
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

/// A deterministic pseudo-random model: each node's state is a hash of its parent's state and
/// the action, and logits/values/rewards are hashes of the state. Illegal root actions get
/// large logits to tempt the search.
struct Hashy {
    num_actions: usize,
    batch: usize,
    capacity: usize,
    states: Vec<u64>,
    legal: Vec<bool>,
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn unit(z: u64) -> f32 {
    (z >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
}

impl Hashy {
    fn new(num_actions: usize, legal: Vec<bool>) -> Self {
        Self {
            num_actions,
            batch: 0,
            capacity: 0,
            states: vec![],
            legal,
        }
    }

    fn predict(&self, states: impl Iterator<Item = u64>, root: bool) -> Prediction {
        let mut pred = Prediction::default();
        for (b, s) in states.enumerate() {
            for a in 0..self.num_actions {
                let l = 2.0 * unit(mix(s ^ (a as u64 + 1)));
                let illegal = root && !self.legal[b * self.num_actions + a];
                pred.policy_logits.push(if illegal { l + 8.0 } else { l });
            }
            pred.values.push(unit(mix(s ^ 0xdead)));
            pred.rewards.push(if root {
                0.0
            } else {
                0.5 * unit(mix(s ^ 0xbeef))
            });
        }
        pred
    }
}

impl Model for Hashy {
    fn num_actions(&self) -> usize {
        self.num_actions
    }

    fn initial_inference(
        &mut self,
        observations: &[f32],
        batch: usize,
        capacity: usize,
    ) -> Result<Prediction, ModelError> {
        if observations.len() != batch {
            return Err(ModelError::ObservationShape {
                got: observations.len(),
                expected: batch,
                batch,
                per_observation: 1,
            });
        }
        self.batch = batch;
        self.capacity = capacity;
        self.states = vec![0; batch * capacity];
        for (b, o) in observations.iter().enumerate() {
            self.states[b * capacity] = mix(u64::from(o.to_bits()));
        }
        let roots: Vec<u64> = (0..batch).map(|b| self.states[b * capacity]).collect();
        Ok(self.predict(roots.into_iter(), true))
    }

    fn recurrent_inference(
        &mut self,
        parents: &[usize],
        actions: &[usize],
        new_node: usize,
    ) -> Result<Prediction, ModelError> {
        let cap = self.capacity;
        for b in 0..self.batch {
            let parent = self.states[b * cap + parents[b]];
            self.states[b * cap + new_node] = mix(parent ^ mix(actions[b] as u64 + 17));
        }
        let new: Vec<u64> = (0..self.batch)
            .map(|b| self.states[b * cap + new_node])
            .collect();
        Ok(self.predict(new.into_iter(), false))
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
        let mut model = Hashy::new(num_actions, masks.clone());
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
    struct Dead;
    impl Model for Dead {
        fn num_actions(&self) -> usize {
            3
        }
        fn initial_inference(
            &mut self,
            _: &[f32],
            batch: usize,
            _: usize,
        ) -> Result<Prediction, ModelError> {
            Ok(Prediction {
                policy_logits: vec![f32::NEG_INFINITY; batch * 3],
                values: vec![0.0; batch],
                rewards: vec![],
            })
        }
        fn recurrent_inference(
            &mut self,
            parents: &[usize],
            _: &[usize],
            _: usize,
        ) -> Result<Prediction, ModelError> {
            let n = parents.len();
            Ok(Prediction {
                policy_logits: vec![f32::NAN; n * 3],
                values: vec![0.0; n],
                rewards: vec![0.0; n],
            })
        }
    }
    let mask = [false, false, true];
    for policy in [SearchPolicy::Puct, SearchPolicy::default_gumbel()] {
        let config = SearchConfig {
            policy,
            ..puct_config(10, 1.0)
        };
        let mut rng = StdRng::seed_from_u64(0);
        let out = run_search(&mut Dead, &config, &[], 1, &mask, true, &mut rng).unwrap();
        assert_eq!(out.visit_counts, vec![0, 0, 10]);
        assert_eq!(out.policy_targets, vec![0.0, 0.0, 1.0]);
    }
}

/// Every transition costs 1: all Q-values equal -1, so the min-max stats never widen and the
/// Q term stays at -1 (unnormalised), below the 0 score of an unvisited zero-prior action.
struct Costly;

impl Model for Costly {
    fn num_actions(&self) -> usize {
        4
    }

    fn initial_inference(
        &mut self,
        _: &[f32],
        batch: usize,
        _: usize,
    ) -> Result<Prediction, ModelError> {
        Ok(Prediction {
            policy_logits: vec![0.0; batch * 4],
            values: vec![0.0; batch],
            rewards: vec![0.0; batch],
        })
    }

    fn recurrent_inference(
        &mut self,
        parents: &[usize],
        _: &[usize],
        _: usize,
    ) -> Result<Prediction, ModelError> {
        let n = parents.len();
        Ok(Prediction {
            policy_logits: vec![0.0; n * 4],
            values: vec![0.0; n],
            rewards: vec![-1.0; n],
        })
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
fn one_recurrent_call_per_simulation_with_batch_sized_inputs() {
    for (batch, sims) in [(1, 1), (3, 17), (40, 9)] {
        for config in [puct_config(sims, 0.99), gumbel_config(sims, 0.99)] {
            let mut model = Bandit::new(5, 1);
            let mut rng = StdRng::seed_from_u64(3);
            let obs = vec![0.0; batch];
            let masks = vec![true; batch * 5];
            let out = run_search(&mut model, &config, &obs, batch, &masks, true, &mut rng).unwrap();
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
fn parallel_batches_match_single_searches() {
    // 48 trees take the rayon path; each must equal its own batch-of-one (serial) search.
    let (batch, num_actions) = (48, 6);
    let mut rng = StdRng::seed_from_u64(9);
    let masks = random_masks(&mut rng, batch, num_actions);
    let obs: Vec<f32> = (0..batch).map(|b| b as f32 * 0.37).collect();
    for policy in [SearchPolicy::Puct, SearchPolicy::default_gumbel()] {
        let config = SearchConfig {
            policy,
            ..puct_config(20, 0.97)
        };
        let mut model = Hashy::new(num_actions, masks.clone());
        let all = run_search(&mut model, &config, &obs, batch, &masks, false, &mut rng).unwrap();
        let mut searcher = Searcher::new();
        for b in 0..batch {
            let row = b * num_actions..(b + 1) * num_actions;
            let mut single = Hashy::new(num_actions, masks[row.clone()].to_vec());
            let one = searcher
                .run(
                    &mut single,
                    &config,
                    &obs[b..b + 1],
                    1,
                    &masks[row.clone()],
                    false,
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
            let mut m1 = Hashy::new(num_actions, masks.clone());
            let mut m2 = Hashy::new(num_actions, masks.clone());
            let (mut r1, mut r2) = (StdRng::seed_from_u64(5), StdRng::seed_from_u64(5));
            let reused = searcher
                .run(&mut m1, &config, &obs, batch, &masks, true, &mut r1)
                .unwrap();
            let fresh = run_search(&mut m2, &config, &obs, batch, &masks, true, &mut r2).unwrap();
            assert_eq!(reused, fresh);
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
    let mut hashy = Hashy::new(3, vec![true; 3]);
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
    struct Flaky {
        fail_at: usize,
        short: bool,
    }
    impl Model for Flaky {
        fn num_actions(&self) -> usize {
            2
        }
        fn initial_inference(
            &mut self,
            _: &[f32],
            batch: usize,
            _: usize,
        ) -> Result<Prediction, ModelError> {
            Ok(Prediction {
                policy_logits: vec![0.0; batch * 2],
                values: vec![0.0; batch],
                rewards: vec![0.0; batch],
            })
        }
        fn recurrent_inference(
            &mut self,
            parents: &[usize],
            _: &[usize],
            new_node: usize,
        ) -> Result<Prediction, ModelError> {
            if new_node == self.fail_at {
                if self.short {
                    return Ok(Prediction::default());
                }
                return Err(ModelError::Backend("device lost".into()));
            }
            let n = parents.len();
            Ok(Prediction {
                policy_logits: vec![0.0; n * 2],
                values: vec![0.0; n],
                rewards: vec![0.0; n],
            })
        }
    }
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

#[test]
fn config_serde_round_trip() {
    let config = SearchConfig {
        policy: SearchPolicy::default_gumbel(),
        two_player: true,
        ..SearchConfig::default()
    };
    let json = serde_json::to_string(&config).unwrap();
    let back: SearchConfig = serde_json::from_str(&json).unwrap();
    assert_eq!(back, config);
    // Missing fields take their defaults.
    let partial: SearchConfig = serde_json::from_str(r#"{"num_simulations": 8}"#).unwrap();
    assert_eq!(partial.num_simulations, 8);
    assert_eq!(partial.c2, 19652.0);
}
