//! How much of a Connect Four match with random opening plies is decided before the players'
//! own moves: for each of the 49 openings of two random plies, the exact result with best play
//! for the first player, who moves next; then the move (or the equally good moves) that
//! `alphabeta:DEPTH` plays there as first player, and the exact result for the second player
//! after it. With `cumind eval --random-opening 2`, an agent playing first starts from the first
//! of these positions, and one playing second against `alphabeta:DEPTH` from the second.
//!
//! ```sh
//! cargo run --release --example connect4_openings -- 4     # DEPTH (default 4)
//! ```
//!
//! Openings are solved in parallel (one exact solver per thread, `RAYON_NUM_THREADS`), a
//! minute or more each on one core; each is printed to stderr as it is solved.

use cumind::arena::connect_four::{alphabeta_move_values, exact_result, Board};
use cumind::envs::{ConnectFour, Environment};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rayon::prelude::*;

fn main() {
    let depth: usize = std::env::args()
        .nth(1)
        .map_or(4, |s| s.parse().expect("DEPTH: a whole number"));
    let start = std::time::Instant::now();
    // In a fixed shuffled order, so that the openings solved first (each printed to stderr
    // as it is solved) are a fair sample should the run be stopped early.
    let mut openings: Vec<(usize, usize)> =
        (0..7).flat_map(|a| (0..7).map(move |b| (a, b))).collect();
    openings.shuffle(&mut rand::rngs::StdRng::seed_from_u64(49));
    let mut rows: Vec<Opening> = openings
        .par_iter()
        .map(|&(a, b)| {
            let board = after(&[a, b]);
            let first = exact_result(&board);
            let values = alphabeta_move_values(&board, depth);
            let top = values.iter().map(|v| v.1).fold(f32::MIN, f32::max);
            let replies = values
                .iter()
                .filter(|v| v.1 >= top - 1e-6)
                .map(|&(column, _)| {
                    let second = exact_result(&after(&[a, b, column]));
                    (column, second)
                })
                .collect();
            eprintln!(
                "opening {a}{b} at {:.0}s: first player {first}, alphabeta:{depth} replies {replies:?} \
                 (column, result for the second player)",
                start.elapsed().as_secs_f64()
            );
            Opening {
                moves: (a, b),
                first,
                replies,
            }
        })
        .collect();
    let word = |r: i32| ["lost", "drawn", "won"][(r + 1) as usize];
    println!(
        "| opening | first player to move | alphabeta:{depth} plays | then for the second player |"
    );
    println!("|---|---|---|---|");
    // Counts: the first player's results; the second player's, each opening weighing 1 shared
    // among alphabeta's equally good moves (it picks one of them at random).
    let (mut first, mut second) = ([0usize; 3], [0f64; 3]);
    rows.sort_by_key(|o| o.moves);
    for Opening {
        moves: (a, b),
        first: result,
        replies,
    } in &rows
    {
        first[(result + 1) as usize] += 1;
        for &(_, r) in replies {
            second[(r + 1) as usize] += 1.0 / replies.len() as f64;
        }
        let moves: Vec<String> = replies.iter().map(|(c, _)| c.to_string()).collect();
        let results: Vec<&str> = replies.iter().map(|&(_, r)| word(r)).collect();
        println!(
            "| {a}{b} | {} | {} | {} |",
            word(*result),
            moves.join(" or "),
            results.join(" / ")
        );
    }
    println!();
    println!(
        "Of the 49 openings (in {:.0} s):",
        start.elapsed().as_secs_f64()
    );
    println!(
        "- playing first: won {}, drawn {}, lost {} with best play",
        first[2], first[1], first[0]
    );
    println!(
        "- playing second against alphabeta:{depth}: won {:.1}, drawn {:.1}, lost {:.1}",
        second[2], second[1], second[0]
    );
}

/// One opening of two plies and what the solver says of it.
struct Opening {
    /// The first player's column, then the second's.
    moves: (usize, usize),
    /// The result for the first player, to move after the opening.
    first: i32,
    /// `alphabeta:DEPTH`'s equally good moves there, each with the result for the second
    /// player after it.
    replies: Vec<(usize, i32)>,
}

/// The board after `moves` (columns, first player first) from the empty board.
fn after(moves: &[usize]) -> Board {
    let mut env = ConnectFour::new();
    let (mut observation, _) = env.reset(None);
    for &column in moves {
        observation = env.step(column).expect("a legal move").observation;
    }
    Board::from_observation(&observation, &env.observation_space().shape())
        .expect("a Connect Four board")
}
