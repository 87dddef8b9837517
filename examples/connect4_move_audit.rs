//! Where a Connect Four checkpoint loses its games: every move it plays in a match is checked
//! against deeper searches with the real rules.
//!
//! The program plays `GAMES` games a side against an opponent (as `cumind eval --opponent`
//! writes it), both players opening with 2 random plies, the agent playing as it does in
//! `cumind eval` (greedy, its search). At each of the agent's moves it asks the bitboard
//! alpha-beta of `cumind::arena::connect_four`, at depths 1, 3, 5 and 7 plies:
//!
//! * **missed win**: a forced win was there within that depth and the move played does not
//!   keep it;
//! * **into a loss**: the move played lets the opponent force a win within that depth while
//!   another move does not.
//!
//! Once at most 24 cells are empty, the exact solver also says whether the move played keeps
//! the position's game-theoretic value (win, draw, loss), whether the policy head's first
//! choice would have, and whether the value head has the sign of the position's value (in
//! positions that are not draws). For each lost game it prints the first ply at which one of
//! these checks (at depth 7, or exact) failed: a loss with none came from a position that was
//! already lost further than 7 plies ahead of the agent's mistake.
//!
//! ```sh
//! cargo run --release --example connect4_move_audit -- CHECKPOINT_DIR [OPPONENT] [GAMES] [SIMULATIONS] [--decisive]
//! ```
//!
//! Defaults: `alphabeta:4`, 25 games a side, the checkpoint's own simulations; `--decisive`
//! turns on `mcts.decisive_moves`. Games are seeded 0, 1, ...; the openings' random plies and
//! the opponent's ties come from a generator seeded 7.

use cumind::agent::Agent;
use cumind::arena::connect_four::{
    alphabeta_move_value, alphabeta_move_values, exact_move_value, exact_move_values, Board,
};
use cumind::arena::{Opponent, OpponentSpec};
use cumind::op_count::read_f32;
use rand::{Rng, SeedableRng};

/// Depths (plies) of the alpha-beta checks.
const DEPTHS: [usize; 4] = [1, 3, 5, 7];

/// Plies played at random by both players first.
const OPENING: usize = 2;

#[derive(Default)]
struct Audit {
    moves: usize,
    missed_win: [usize; DEPTHS.len()],
    into_loss: [usize; DEPTHS.len()],
    solved: usize,
    solved_kept: usize,
    prior_kept: usize,
    decided: usize,
    value_sign_right: usize,
}

/// Win (1), draw (0) or loss (-1) of an exact value.
fn outcome(value: f32) -> i32 {
    if value > 0.5 {
        1
    } else if value < -0.5 {
        -1
    } else {
        0
    }
}

impl Audit {
    /// Checks the agent's `action` in `board` (observation `observation`); whether it was a
    /// mistake at depth 7 or against the exact value.
    fn check(&mut self, agent: &Agent, board: &Board, observation: &[f32], action: usize) -> bool {
        self.moves += 1;
        let mut mistake = false;
        for (i, &depth) in DEPTHS.iter().enumerate() {
            let values = alphabeta_move_values(board, depth);
            let best = values.iter().map(|v| v.1).fold(f32::MIN, f32::max);
            // The played move's own value: in `values` a move worse than the best may carry
            // only a bound.
            let chosen = alphabeta_move_value(board, action, depth).expect("a legal move");
            let last = i + 1 == DEPTHS.len();
            // Above 1: a forced win; below -1: a forced loss (see alphabeta_move_values).
            if best > 1.0 && chosen <= 1.0 {
                self.missed_win[i] += 1;
                mistake |= last;
            }
            if chosen < -1.0 && best >= -1.0 {
                self.into_loss[i] += 1;
                mistake |= last;
            }
        }
        let Some(exact) = exact_move_values(board) else {
            return mistake;
        };
        let net = agent.network();
        let latent = net
            .represent(&net.observation_tensor(observation).expect("an observation"))
            .expect("a representation");
        let (policy, value) = net.predict(&latent).expect("a prediction");
        let value = net
            .spec()
            .value_support
            .logits_to_scalars(&read_f32(&value).expect("values"))[0];
        let logits = read_f32(&policy).expect("logits");
        let prior_top = exact
            .iter()
            .map(|v| v.0)
            .max_by(|a, b| logits[*a].total_cmp(&logits[*b]))
            .expect("a legal move");
        let best = exact.iter().map(|v| outcome(v.1)).max().expect("a move");
        self.solved += 1;
        if outcome(exact_move_value(board, action).expect("a legal move")) == best {
            self.solved_kept += 1;
        } else {
            mistake = true;
        }
        if outcome(exact_move_value(board, prior_top).expect("a legal move")) == best {
            self.prior_kept += 1;
        }
        if best != 0 {
            self.decided += 1;
            if (value > 0.0) == (best > 0) {
                self.value_sign_right += 1;
            }
        }
        mistake
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let decisive = args.iter().any(|a| a == "--decisive");
    let args: Vec<&String> = args.iter().filter(|a| *a != "--decisive").collect();
    let Some(dir) = args.first() else {
        eprintln!(
            "usage: connect4_move_audit CHECKPOINT_DIR [OPPONENT] [GAMES] [SIMULATIONS] [--decisive]"
        );
        std::process::exit(2);
    };
    let opponent: OpponentSpec = args
        .get(1)
        .map_or("alphabeta:4", |s| s.as_str())
        .parse()
        .unwrap_or_else(|e| panic!("opponent: {e}"));
    let games: usize = args.get(2).map_or(25, |s| s.parse().expect("GAMES"));
    let loaded = Agent::load(dir.as_str()).unwrap_or_else(|e| panic!("{dir}: {e}"));
    let mut config = loaded.config().clone();
    if config.environment.env_name != "ConnectFour" {
        panic!(
            "{dir} plays {}, not ConnectFour",
            config.environment.env_name
        );
    }
    if let Some(s) = args.get(3) {
        config.mcts.num_simulations = s.parse().expect("SIMULATIONS");
        config.mcts.eval_simulations = 0;
    }
    config.mcts.decisive_moves |= decisive;
    let mut agent = Agent::from_network(loaded.network().clone(), config);
    let mut opponent =
        Opponent::new(&opponent, &candle_core::Device::Cpu).unwrap_or_else(|e| panic!("{e}"));
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut audit = Audit::default();
    let (mut wins, mut draws) = (0, 0);
    let mut lost_at = Vec::new();
    for game in 0..2 * games {
        let agent_player = game % 2;
        let mut env = cumind::envs::make("ConnectFour").expect("Connect Four");
        let (mut observation, _) = env.reset(Some(game as u64));
        let mut first_mistake = None;
        for ply in 0.. {
            let mover = env.to_play();
            let action = if ply < OPENING {
                let legal = env.legal_actions();
                legal[rng.random_range(0..legal.len())]
            } else if mover == agent_player {
                let board = Board::from_observation(&observation, &[3, 6, 7]).expect("a board");
                let action = agent
                    .select_actions_in_games(&[env.as_ref()], &[&observation], false)
                    .expect("a move")[0];
                if audit.check(&agent, &board, &observation, action) {
                    first_mistake.get_or_insert(ply);
                }
                action
            } else {
                opponent
                    .choose(env.as_ref(), &observation, &mut rng)
                    .expect("a move")
            };
            let step = env.step(action).expect("a legal move");
            observation = step.observation;
            if step.terminated || step.truncated {
                match (step.reward > 0.0, mover == agent_player) {
                    (false, _) => draws += 1,
                    (true, true) => wins += 1,
                    (true, false) => lost_at.push(first_mistake),
                }
                break;
            }
        }
    }
    let a = &audit;
    println!(
        "{} games: {wins} won, {draws} drawn, {} lost; {} moves of the agent",
        2 * games,
        lost_at.len(),
        a.moves
    );
    println!(
        "depths {DEPTHS:?}: missed wins {:?}, moves into a loss {:?}",
        a.missed_win, a.into_loss
    );
    println!(
        "solved positions (at most 24 empty cells): {}; the move played keeps the exact value in {}, \
         the policy head's first choice in {}; the value head has the right sign in {} of {} won or lost positions",
        a.solved, a.solved_kept, a.prior_kept, a.value_sign_right, a.decided
    );
    let shown: Vec<String> = lost_at
        .iter()
        .map(|p| p.map_or("none".to_string(), |p| p.to_string()))
        .collect();
    println!("lost games, first mistake at ply: {}", shown.join(", "));
}
