//! The exact Connect Four solver behind `cumind eval --opponent perfect`, on positions given
//! as the columns played from the empty board: each legal move's exact result for the player
//! to move (a win or loss with the number of stones the winner still drops, or a draw), and the
//! time the position took.
//!
//! ```sh
//! cargo run --release --example connect4_solve -- "" 3 33 3324
//! ```
//!
//! Each argument is one position: digits 0-6, the columns of the moves played so far (first
//! player first); "" is the empty board. Positions are solved in the order given on one
//! thread, and the solver keeps its table from one to the next, as it does in a match.

use cumind::arena::connect_four::{exact_move_value, Board};
use cumind::envs::{ConnectFour, Environment};

fn main() {
    let positions: Vec<String> = std::env::args().skip(1).collect();
    if positions.is_empty() {
        eprintln!("usage: connect4_solve MOVES... (e.g. \"\" 3 33 3324)");
        std::process::exit(2);
    }
    for moves in positions {
        let mut env = ConnectFour::new();
        let (mut observation, _) = env.reset(None);
        for (ply, ch) in moves.chars().enumerate() {
            let column = ch.to_digit(10).filter(|&c| c < 7).unwrap_or_else(|| {
                panic!("{moves:?}: move {} is {ch:?}, not a column 0-6", ply + 1)
            }) as usize;
            let step = env
                .step(column)
                .unwrap_or_else(|e| panic!("{moves:?}: move {} ({column}): {e}", ply + 1));
            if step.terminated {
                panic!("{moves:?}: the game ended at move {}", ply + 1);
            }
            observation = step.observation;
        }
        let board = Board::from_observation(&observation, &env.observation_space().shape())
            .expect("a Connect Four board");
        let start = std::time::Instant::now();
        let values: Vec<String> = (0..7)
            .filter_map(|column| {
                let value = exact_move_value(&board, column)?;
                Some(format!(
                    "{column}: {}",
                    describe(value, board.empty_cells())
                ))
            })
            .collect();
        println!(
            "{:>12} | {} to move, {} empty | {} | {:.3}s",
            format!("{moves:?}"),
            if moves.len() % 2 == 0 {
                "first"
            } else {
                "second"
            },
            board.empty_cells(),
            values.join(", "),
            start.elapsed().as_secs_f64()
        );
    }
}

/// A solver value (wins 1 + 0.01 x the empty cells left after the winning stone, losses the
/// same negated, draws 0) as words, from the side of the player to move on a board with
/// `empty` empty cells.
fn describe(value: f32, empty: usize) -> String {
    if value == 0.0 {
        return "draw".into();
    }
    let left = ((value.abs() - 1.0) / 0.01).round() as usize;
    // Stones dropped from now to the end, by both players; the winner's share of them.
    let plies = empty - left;
    if value > 0.0 {
        format!("win in {}", plies.div_ceil(2))
    } else {
        format!("loss in {}", plies / 2)
    }
}
