//! Golden-tree regression tests of the batched search.
//!
//! A deterministic pseudo-random fake model ([`HashModel`]: logits, values and rewards are hashes
//! of a node state, itself a hash of the parent's state and the action) and a self-contained SplitMix64
//! rng (for the legal masks, observations, Dirichlet and Gumbel noise) make every search fully
//! reproducible. The visit counts, root values, root Q-values, policy targets and Gumbel actions
//! are compared with `tests/data/search_golden_puct.json` and
//! `tests/data/search_golden_gumbel.json`.
//!
//! Those files were produced by this implementation (and their trees hand-inspected for
//! plausibility: visits sum to the budget, illegal actions get nothing, the most valuable
//! children get the most visits). They are a regression guard, not an external reference.
//! Regenerate them after an intended behaviour change with
//! `UPDATE_GOLDEN=1 cargo test --release --test search_golden`.

use std::path::PathBuf;

use cumind::search::{run_search, SearchConfig, SearchOutput, SearchPolicy};
use cumind::testing::models::{mix, unit, HashModel, HashParams};
use rand::RngCore;
use serde::{Deserialize, Serialize};

const NUM_ACTIONS: usize = 5;
const BATCH: usize = 3;
const NUM_SIMULATIONS: usize = 24;
const SEEDS: [u64; 2] = [7, 2024];
const TOLERANCE: f32 = 1e-5;

/// SplitMix64: a tiny rng whose stream never changes with dependency versions.
struct SplitMix(u64);

impl RngCore for SplitMix {
    fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0.wrapping_sub(0x9e37_79b9_7f4a_7c15))
    }

    fn fill_bytes(&mut self, dst: &mut [u8]) {
        for chunk in dst.chunks_mut(8) {
            let bytes = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }
}

/// The golden hash model's constants (see [`HashParams`]).
const HASH: HashParams = HashParams {
    logit_scale: 1.5,
    value_salt: 0x5eed,
    reward_scale: 0.3,
    action_salt: 99,
};

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Case {
    name: String,
    seed: u64,
    two_player: bool,
    add_noise: bool,
    legal_masks: Vec<bool>,
    visit_counts: Vec<u32>,
    root_values: Vec<f32>,
    root_q: Vec<f32>,
    policy_targets: Vec<f32>,
    gumbel_actions: Option<Vec<usize>>,
    max_depth: usize,
}

#[derive(Debug, Serialize, Deserialize)]
struct GoldenFile {
    description: String,
    cases: Vec<Case>,
}

fn run_case(policy: &SearchPolicy, seed: u64, two_player: bool, add_noise: bool) -> Case {
    let mut rng = SplitMix(seed);
    let mut legal_masks: Vec<bool> = (0..BATCH * NUM_ACTIONS)
        .map(|_| !rng.next_u32().is_multiple_of(3))
        .collect();
    for row in legal_masks.chunks_exact_mut(NUM_ACTIONS) {
        if !row.contains(&true) {
            row[0] = true;
        }
    }
    let observations: Vec<f32> = (0..BATCH).map(|_| unit(rng.next_u64())).collect();
    let config = SearchConfig {
        num_simulations: NUM_SIMULATIONS,
        discount: 0.95,
        two_player,
        policy: policy.clone(),
        ..SearchConfig::default()
    };
    let mut model = HashModel::new(NUM_ACTIONS, HASH);
    let out: SearchOutput = run_search(
        &mut model,
        &config,
        &observations,
        BATCH,
        &legal_masks,
        add_noise,
        &mut rng,
    )
    .expect("search succeeds");
    let kind = match policy {
        SearchPolicy::Puct => "puct",
        SearchPolicy::Gumbel { .. } => "gumbel",
    };
    Case {
        name: format!("{kind}_seed{seed}_two_player{two_player}_noise{add_noise}"),
        seed,
        two_player,
        add_noise,
        legal_masks,
        visit_counts: out.visit_counts,
        root_values: out.root_values,
        root_q: out.root_q,
        policy_targets: out.policy_targets,
        gumbel_actions: out.gumbel_actions,
        max_depth: out.max_depth,
    }
}

fn cases(policy: &SearchPolicy) -> Vec<Case> {
    let mut out = Vec::new();
    for seed in SEEDS {
        for (two_player, add_noise) in [(false, true), (true, true), (false, false)] {
            out.push(run_case(policy, seed, two_player, add_noise));
        }
    }
    out
}

fn golden_path(kind: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(format!("search_golden_{kind}.json"))
}

fn assert_close(name: &str, field: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{name}: {field} length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= TOLERANCE * (1.0 + w.abs()),
            "{name}: {field}[{i}] = {g}, golden {w}"
        );
    }
}

fn check_against_golden(kind: &str, policy: SearchPolicy) {
    let got = cases(&policy);
    // Sanity checks that hold whatever the golden files say.
    for case in &got {
        for b in 0..BATCH {
            let row = b * NUM_ACTIONS..(b + 1) * NUM_ACTIONS;
            let visits = &case.visit_counts[row.clone()];
            assert_eq!(visits.iter().sum::<u32>() as usize, NUM_SIMULATIONS);
            let target_sum: f32 = case.policy_targets[row.clone()].iter().sum();
            assert!((target_sum - 1.0).abs() < 1e-5);
            for a in row {
                if !case.legal_masks[a] {
                    assert_eq!(case.visit_counts[a], 0, "{}", case.name);
                    assert_eq!(case.policy_targets[a], 0.0, "{}", case.name);
                }
            }
        }
    }
    let path = golden_path(kind);
    if std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1") {
        let file = GoldenFile {
            description: format!(
                "Golden {kind} searches of cumind::search (B = {BATCH}, A = {NUM_ACTIONS}, \
                 {NUM_SIMULATIONS} simulations, discount 0.95, hash model and SplitMix64 rng of \
                 tests/search_golden.rs). Generated by this implementation as a regression \
                 guard; regenerate with UPDATE_GOLDEN=1 cargo test --release --test search_golden."
            ),
            cases: got,
        };
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let text = serde_json::to_string_pretty(&file).unwrap();
        std::fs::write(&path, text + "\n").unwrap();
        eprintln!("wrote {}", path.display());
        return;
    }
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {} ({e}); generate it with UPDATE_GOLDEN=1 cargo test --release --test \
             search_golden",
            path.display()
        )
    });
    let golden: GoldenFile = serde_json::from_str(&text).expect("valid golden JSON");
    assert_eq!(golden.cases.len(), got.len(), "number of cases");
    for (g, w) in got.iter().zip(&golden.cases) {
        assert_eq!(g.name, w.name);
        assert_eq!(g.legal_masks, w.legal_masks, "{}: legal masks", g.name);
        assert_eq!(g.visit_counts, w.visit_counts, "{}: visit counts", g.name);
        assert_eq!(
            g.gumbel_actions, w.gumbel_actions,
            "{}: gumbel actions",
            g.name
        );
        assert_eq!(g.max_depth, w.max_depth, "{}: max depth", g.name);
        assert_close(&g.name, "root_values", &g.root_values, &w.root_values);
        assert_close(&g.name, "root_q", &g.root_q, &w.root_q);
        assert_close(
            &g.name,
            "policy_targets",
            &g.policy_targets,
            &w.policy_targets,
        );
    }
}

#[test]
fn golden_puct_trees() {
    check_against_golden("puct", SearchPolicy::Puct);
}

#[test]
fn golden_gumbel_trees() {
    check_against_golden("gumbel", SearchPolicy::default_gumbel());
}

#[test]
fn golden_searches_are_deterministic() {
    for policy in [SearchPolicy::Puct, SearchPolicy::default_gumbel()] {
        assert_eq!(cases(&policy), cases(&policy));
    }
}
