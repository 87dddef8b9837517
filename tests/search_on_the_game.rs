//! The search run over a model that *is* tic-tac-toe (the real rules as the
//! dynamics, the exact minimax value and a policy that prefers the minimax moves as the
//! prediction) must find the winning move and the only blocking move, with pUCT and with Gumbel
//! MuZero. If the search's signs, discounting or backups were wrong for two players, these
//! positions would show it.
//!
//! Why not uniform priors: MCTS backs up *mean* returns, and with uniform priors below the root
//! the opponent's bad replies get as many visits as its good ones, so after 50 simulations a
//! losing move's mean Q sits near 0 (measured: Q = 0.0 after 12 visits for a move that loses at
//! once). That is how MCTS works, not a sign error; a trained network's policy is what makes
//! the means approach minimax values. With uniform priors the test uses many more simulations.

use std::collections::HashMap;

use cumind::arena::search::exact_move_values;
use cumind::envs::{Environment, TicTacToe};
use cumind::model::{Model, ModelError, Prediction};
use cumind::search::{choose_actions, run_search, SearchConfig, SearchPolicy};
use rand::SeedableRng;

/// One tree's nodes: the game state after the path to the node, or `None` once the game is
/// over (absorbing: reward 0, value 0 from there on).
type Tree = Vec<Option<Box<dyn Environment>>>;

struct ExactTicTacToe {
    /// The root positions of the current batch (the search passes observations; the test
    /// knows the games behind them).
    roots: Vec<Box<dyn Environment>>,
    trees: Vec<Tree>,
    memo: HashMap<(Vec<u32>, usize), f32>,
    /// How strongly the policy prefers minimax moves (0: uniform over legal moves).
    sharpness: f32,
}

impl ExactTicTacToe {
    /// The exact value for the player to move, and the policy logits: `sharpness` times each
    /// legal move's exact value (0 for every move when `sharpness` is 0), -10 for occupied cells.
    fn predict(&mut self, env: &dyn Environment) -> (f32, [f32; 9]) {
        let moves = exact_move_values(env, &mut self.memo);
        let value = moves.iter().map(|m| m.1).fold(f32::NEG_INFINITY, f32::max);
        let mut logits = [-10.0; 9];
        for (a, v) in moves {
            logits[a] = self.sharpness * v;
        }
        (value, logits)
    }
}

impl Model for ExactTicTacToe {
    fn num_actions(&self) -> usize {
        9
    }

    fn initial_inference(
        &mut self,
        _observations: &[f32],
        batch: usize,
        capacity: usize,
    ) -> Result<Prediction, ModelError> {
        assert_eq!(batch, self.roots.len());
        self.trees = self
            .roots
            .iter()
            .map(|root| {
                let mut tree: Tree = (0..capacity).map(|_| None).collect();
                tree[0] = Some(root.clone_box());
                tree
            })
            .collect();
        let roots: Vec<Box<dyn Environment>> = self.roots.iter().map(|r| r.clone_box()).collect();
        let mut out = Prediction::default();
        for root in &roots {
            let (value, logits) = self.predict(root.as_ref());
            out.values.push(value);
            out.policy_logits.extend(logits);
            out.rewards.push(0.0);
        }
        Ok(out)
    }

    fn recurrent_inference(
        &mut self,
        parents: &[usize],
        actions: &[usize],
        new_node: usize,
    ) -> Result<Prediction, ModelError> {
        let mut out = Prediction::default();
        for (b, (&parent, &action)) in parents.iter().zip(actions).enumerate() {
            let Some(state) = &self.trees[b][parent] else {
                // Past the end of the game: absorbing.
                out.policy_logits.extend([0.0; 9]);
                out.rewards.push(0.0);
                out.values.push(0.0);
                continue;
            };
            let mut next = state.clone_box();
            match next.step(action) {
                // An occupied cell: the model calls it a loss for the mover, ending the game.
                Err(_) => {
                    out.policy_logits.extend([0.0; 9]);
                    out.rewards.push(-1.0);
                    out.values.push(0.0);
                }
                Ok(step) if step.terminated || step.truncated => {
                    out.policy_logits.extend([0.0; 9]);
                    out.rewards.push(step.reward as f32);
                    out.values.push(0.0);
                }
                Ok(step) => {
                    let (value, logits) = self.predict(next.as_ref());
                    out.policy_logits.extend(logits);
                    out.rewards.push(step.reward as f32);
                    out.values.push(value);
                    self.trees[b][new_node] = Some(next);
                }
            }
        }
        Ok(out)
    }
}

fn position(moves: &[usize]) -> (Box<dyn Environment>, Vec<f32>) {
    let mut env: Box<dyn Environment> = Box::new(TicTacToe::new());
    let (mut obs, _) = env.reset(Some(0));
    for &m in moves {
        obs = env.step(m).unwrap().observation;
    }
    (env, obs)
}

/// The move the search picks at the root of `moves` (greedy, no noise), with priors of the
/// given sharpness.
fn searched_move_with(
    moves: &[usize],
    policy: SearchPolicy,
    simulations: usize,
    sharpness: f32,
) -> usize {
    let (env, obs) = position(moves);
    let mask = env.legal_action_mask();
    let mut model = ExactTicTacToe {
        roots: vec![env],
        trees: Vec::new(),
        memo: HashMap::new(),
        sharpness,
    };
    let config = SearchConfig {
        num_simulations: simulations,
        discount: 1.0,
        two_player: true,
        policy,
        ..Default::default()
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let out = run_search(&mut model, &config, &obs, 1, &mask, false, &mut rng).unwrap();
    choose_actions(&out, &mask, 0.0, &mut rng)[0]
}

/// With priors that prefer minimax moves, as a trained network's would.
fn searched_move(moves: &[usize], policy: SearchPolicy, simulations: usize) -> usize {
    searched_move_with(moves, policy, simulations, 2.0)
}

/// Whether `action` is among the best moves of `moves` by exact value.
fn is_optimal(moves: &[usize], action: usize) -> bool {
    let (env, _) = position(moves);
    let values = exact_move_values(env.as_ref(), &mut HashMap::new());
    let best = values.iter().map(|v| v.1).fold(f32::MIN, f32::max);
    values.iter().any(|&(a, v)| a == action && v == best)
}

fn policies() -> Vec<(&'static str, SearchPolicy)> {
    vec![
        ("puct", SearchPolicy::Puct),
        (
            "gumbel",
            SearchPolicy::Gumbel {
                max_considered_actions: 9,
                c_visit: 50.0,
                c_scale: 1.0,
                noise_scale: 1.0,
            },
        ),
    ]
}

#[test]
fn the_search_on_the_exact_game_takes_the_win() {
    // X: 0, 1; O: 4, 8. X to move wins at 2.
    for (name, policy) in policies() {
        assert_eq!(searched_move(&[0, 4, 1, 8], policy, 50), 2, "{name}");
    }
    // X: 0, 4; O: 1, 2. X wins at 8 at once; 3 (a fork) also wins, later: with discount 1
    // both are worth +1, so either is a correct answer.
    for (name, policy) in policies() {
        let action = searched_move(&[0, 1, 4, 2], policy, 50);
        assert!(is_optimal(&[0, 1, 4, 2], action), "{name}: {action}");
    }
}

#[test]
fn the_search_on_the_exact_game_makes_the_only_block() {
    // X: 0, 1; O: 4. O to move must block at 2; every other move loses.
    for (name, policy) in policies() {
        assert_eq!(searched_move(&[0, 4, 1], policy, 50), 2, "{name}");
    }
    // X: 2, 4; O: 0. O must block the diagonal at 6.
    for (name, policy) in policies() {
        assert_eq!(searched_move(&[2, 0, 4], policy, 50), 6, "{name}");
    }
}

#[test]
fn with_uniform_priors_more_simulations_still_find_the_only_block() {
    for (name, policy) in policies() {
        assert_eq!(
            searched_move_with(&[2, 0, 4], policy, 800, 0.0),
            6,
            "{name}"
        );
    }
}

#[test]
fn a_win_beats_a_block_when_both_are_on_the_board() {
    // X: 0, 1; O: 3, 4. X to move: winning at 2 (+1) beats blocking O's row at 5 (a draw).
    for (name, policy) in policies() {
        assert_eq!(searched_move(&[0, 3, 1, 4], policy, 50), 2, "{name}");
    }
    // X: 0, 1, 8; O: 3, 4, O to move: 5 wins at once (2 blocks and forks, and wins later).
    for (name, policy) in policies() {
        let action = searched_move(&[0, 3, 1, 4, 8], policy, 50);
        assert!(is_optimal(&[0, 3, 1, 4, 8], action), "{name}: {action}");
    }
}
