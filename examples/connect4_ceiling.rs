//! The most a player can score against one of `cumind eval`'s Connect Four opponents from the
//! random openings the agent's matches use: the exact solver plays SIDE (`first` or `second`)
//! against OPPONENT from every one of the 49 openings of two random plies, PLAYS games each
//! (default 2; the opponent and the solver break ties at random), and the program prints the
//! solver's wins, draws and losses, split by the result of the position at the solver's first
//! move (won, drawn or lost with best play on both sides). With `cumind eval --random-opening 2`
//! every opening is equally likely, so these games weigh them as a match does.
//!
//! The solver plays from any position, not only from [`PERFECT_MAX_EMPTY`] empty cells on: in a
//! won position the first move found to keep the win, trying the columns in random order (it
//! wins whichever it plays, so the result is the one of `perfect`'s soonest win, found without
//! the exact distances); in a drawn one a random move that keeps the draw; in a lost one the
//! latest loss, as `perfect` does. Still slow from the first moves: as second player a game
//! takes minutes on one core, most of it in the solver's first moves (39 and 37 empty cells).
//!
//! ```sh
//! cargo run --release --example connect4_ceiling -- alphabeta:4 second      # OPPONENT SIDE [PLAYS [GAME...]]
//! cargo run --release --example connect4_ceiling -- alphabeta:4 second 2 05:1 23 # only these games
//! ```
//!
//! GAME picks games instead of all 49 openings, written as the progress lines write them: `XY`
//! for every play of the opening whose first stone went into column X and second into column Y,
//! `XY:P` for play P of it alone. A game is seeded by its opening and play, so a run stopped
//! early is finished by naming the games it did not print.
//!
//! Openings are played in parallel (one exact solver per thread, `RAYON_NUM_THREADS`), in a
//! fixed shuffled order, each printed to stderr as it ends, so that a run stopped early has
//! played a fair sample.
//!
//! [`PERFECT_MAX_EMPTY`]: cumind::arena::connect_four::PERFECT_MAX_EMPTY

use cumind::arena::connect_four::{exact_move_result, solved_move_values, Board};
use cumind::arena::search::pick_best;
use cumind::arena::{Opponent, OpponentSpec};
use cumind::envs::{ConnectFour, Environment};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rayon::prelude::*;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        eprintln!("usage: connect4_ceiling OPPONENT first|second [PLAYS [GAME...]]");
        std::process::exit(2);
    }
    let opponent_spec: OpponentSpec = args[0]
        .parse()
        .unwrap_or_else(|e| panic!("{}: {e}", args[0]));
    let side = match args[1].as_str() {
        "first" => 0,
        "second" => 1,
        other => panic!("SIDE: first or second, not '{other}'"),
    };
    let plays: usize = args
        .get(2)
        .map_or(2, |s| s.parse().expect("PLAYS: a whole number"));
    let start = std::time::Instant::now();
    let mut openings: Vec<(usize, usize)> =
        (0..7).flat_map(|a| (0..7).map(move |b| (a, b))).collect();
    openings.shuffle(&mut StdRng::seed_from_u64(49));
    let all: Vec<(usize, usize)> = openings
        .iter()
        .flat_map(|&o| (0..plays).map(move |p| (o, p)))
        .map(|((a, b), p)| (a * 7 + b, p))
        .collect();
    let chosen: Vec<(usize, Option<usize>)> = args[3.min(args.len())..]
        .iter()
        .map(|s| parse_game(s, plays).unwrap_or_else(|e| panic!("GAME '{s}': {e}")))
        .collect();
    let games: Vec<(usize, usize)> = if chosen.is_empty() {
        all
    } else {
        all.into_iter()
            .filter(|&(o, p)| {
                chosen
                    .iter()
                    .any(|&(co, cp)| co == o && cp.is_none_or(|cp| cp == p))
            })
            .collect()
    };
    let results: Vec<Game> = games
        .par_iter()
        .map(|&(opening, play)| {
            let game = play_one(&opponent_spec, side, opening, play);
            eprintln!(
                "opening {}{} play {play} at {:.0}s: started {}, {} in {} plies",
                opening / 7,
                opening % 7,
                start.elapsed().as_secs_f64(),
                word(game.started),
                word(game.outcome),
                game.plies
            );
            game
        })
        .collect();

    // counts[started][outcome], each indexed by result + 1 (lost, drawn, won).
    let mut counts = [[0usize; 3]; 3];
    for g in &results {
        counts[(g.started + 1) as usize][(g.outcome + 1) as usize] += 1;
    }
    let total = results.len();
    let side_name = ["first", "second"][side];
    let which = if chosen.is_empty() {
        format!("{plays} games from each of the 49 two-ply openings")
    } else {
        let openings: std::collections::BTreeSet<usize> = games.iter().map(|g| g.0).collect();
        format!("the chosen games of {} openings", openings.len())
    };
    println!(
        "the exact solver playing {side_name} against {opponent_spec}, {which} ({total} games), \
         in {:.0} s",
        start.elapsed().as_secs_f64()
    );
    println!("| at the solver's first move | games | won | drawn | lost |");
    println!("|---|---:|---:|---:|---:|");
    for started in [1, 0, -1] {
        let [lost, drawn, won] = counts[(started + 1) as usize];
        println!(
            "| {} | {} | {won} | {drawn} | {lost} |",
            word(started),
            won + drawn + lost
        );
    }
    let [lost, drawn, won] = (0..3).fold([0; 3], |acc, o| {
        std::array::from_fn(|i| acc[i] + counts[o][i])
    });
    println!("| all | {total} | {won} | {drawn} | {lost} |");
    println!(
        "score (a draw half a win): {:.1}%",
        100.0 * (won as f64 + 0.5 * drawn as f64) / total.max(1) as f64
    );
}

/// One game's record, for the solver: results are 1 won, 0 drawn, -1 lost.
struct Game {
    /// The result with best play at the solver's first move.
    started: i32,
    outcome: i32,
    plies: usize,
}

/// The solver's move on `board` and the position's result with best play: a move that keeps a
/// win or a draw, the first found in random order; in a lost position the latest loss.
fn solver_move(board: &Board, rng: &mut StdRng) -> (i32, usize) {
    let mut columns: Vec<usize> = (0..7).collect();
    columns.shuffle(rng);
    let mut draw = None;
    for column in columns {
        match exact_move_result(board, column) {
            Some(1) => return (1, column),
            Some(0) => {
                draw.get_or_insert(column);
            }
            _ => {}
        }
    }
    match draw {
        Some(column) => (0, column),
        None => (-1, pick_best(&solved_move_values(board), 0.0, rng)),
    }
}

/// A GAME argument: `XY` (every play of an opening) or `XY:P` (one play), as (first column * 7 +
/// second, play).
fn parse_game(text: &str, plays: usize) -> Result<(usize, Option<usize>), String> {
    let (opening, play) = match text.split_once(':') {
        Some((o, p)) => (o, Some(p)),
        None => (text, None),
    };
    let columns: Vec<usize> = opening
        .chars()
        .map(|c| c.to_digit(10).map(|d| d as usize).filter(|&d| d < 7))
        .collect::<Option<_>>()
        .filter(|c: &Vec<usize>| c.len() == 2)
        .ok_or("an opening is two columns 0-6, as 05")?;
    let play = match play {
        None => None,
        Some(p) => match p.parse::<usize>() {
            Ok(p) if p < plays => Some(p),
            _ => return Err(format!("the play after ':' must be below PLAYS ({plays})")),
        },
    };
    Ok((columns[0] * 7 + columns[1], play))
}

fn word(result: i32) -> &'static str {
    ["lost", "drawn", "won"][(result + 1) as usize]
}

/// The game from opening `opening` (first column * 7 + second) with the solver on `side` (0
/// first, 1 second), seeded by the opening and `play`.
fn play_one(opponent_spec: &OpponentSpec, side: usize, opening: usize, play: usize) -> Game {
    let mut rng = StdRng::seed_from_u64((opening * 1000 + play) as u64);
    let mut opponent = Opponent::new(opponent_spec, &candle_core::Device::Cpu)
        .unwrap_or_else(|e| panic!("{opponent_spec}: {e}"));
    let mut env = ConnectFour::new();
    let shape = env.observation_space().shape();
    let (mut observation, _) = env.reset(None);
    for column in [opening / 7, opening % 7] {
        observation = env.step(column).expect("a legal move").observation;
    }
    let mut started = None;
    let mut plies = 2;
    loop {
        let mover = env.to_play();
        let action = if mover == side {
            let board =
                Board::from_observation(&observation, &shape).expect("a Connect Four board");
            let (result, column) = solver_move(&board, &mut rng);
            started.get_or_insert(result);
            column
        } else {
            opponent
                .choose(&env, &observation, &mut rng)
                .unwrap_or_else(|e| panic!("{opponent_spec}: {e}"))
        };
        let step = env.step(action).expect("a legal move");
        plies += 1;
        observation = step.observation;
        if step.terminated || step.truncated {
            let outcome = match (step.reward > 0.0, mover == side) {
                (false, _) => 0,
                (true, true) => 1,
                (true, false) => -1,
            };
            return Game {
                started: started.expect("the solver moved"),
                outcome,
                plies,
            };
        }
    }
}
