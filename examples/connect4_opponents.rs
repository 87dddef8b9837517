//! Two of `cumind eval`'s built-in Connect Four opponents against each other: how strong a
//! yardstick is, for example how often a deep alpha-beta beats `alphabeta:4` from the random
//! openings the agent's matches use.
//!
//! The program plays `GAMES` games a side (PLAYER first in half of them), each opened with
//! `OPENING` random plies by both players (default 2, as `cumind eval --random-opening 2`),
//! and prints PLAYER's wins, draws and losses per side. Where the exact solver answers (at
//! most 24 empty cells) it also gives, per side, how many games were won, drawn or lost for
//! PLAYER (with best play) at PLAYER's first move there, and the won or drawn positions
//! PLAYER's moves threw away: the same split as `cumind eval --check-moves`.
//!
//! ```sh
//! cargo run --release --example connect4_opponents -- PLAYER OPPONENT [GAMES] [OPENING]
//! cargo run --release --example connect4_opponents -- alphabeta:10 alphabeta:4 100
//! ```
//!
//! Games are seeded 0, 1, ...; the random plies and the players' ties come from a generator
//! seeded 7.

use cumind::arena::connect_four::{exact_move_value, exact_move_values, Board};
use cumind::arena::{Opponent, OpponentSpec};
use rand::{Rng, SeedableRng};

/// Win (1), draw (0) or loss (-1) of a solver value.
fn outcome(value: f32) -> i32 {
    if value > 0.0 {
        1
    } else if value < 0.0 {
        -1
    } else {
        0
    }
}

/// One side's tallies, from PLAYER's point of view.
#[derive(Default)]
struct Side {
    results: [usize; 3],
    first_checked: [usize; 3],
    never_checked: usize,
    threw_win: usize,
    threw_draw: usize,
}

/// Index of a result in the tallies: win, draw, loss.
fn slot(result: i32) -> usize {
    (1 - result) as usize
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        eprintln!("usage: connect4_opponents PLAYER OPPONENT [GAMES] [OPENING]");
        std::process::exit(2);
    }
    let spec = |s: &str| -> OpponentSpec { s.parse().unwrap_or_else(|e| panic!("{s}: {e}")) };
    let (player_spec, opponent_spec) = (spec(&args[0]), spec(&args[1]));
    let games: usize = args.get(2).map_or(100, |s| s.parse().expect("GAMES"));
    let opening: usize = args.get(3).map_or(2, |s| s.parse().expect("OPENING"));
    let device = candle_core::Device::Cpu;
    let mut player = Opponent::new(&player_spec, &device).unwrap_or_else(|e| panic!("{e}"));
    let mut opponent = Opponent::new(&opponent_spec, &device).unwrap_or_else(|e| panic!("{e}"));
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let start = std::time::Instant::now();
    let mut sides = [Side::default(), Side::default()];
    for (player_index, side) in sides.iter_mut().enumerate() {
        for game in 0..games {
            let mut env = cumind::envs::make("ConnectFour").expect("Connect Four");
            let (mut observation, _) = env.reset(Some(game as u64));
            let mut ply = 0;
            let mut checked = false;
            loop {
                let mover = env.to_play();
                let action = if ply < opening {
                    let legal = env.legal_actions();
                    legal[rng.random_range(0..legal.len())]
                } else if mover == player_index {
                    let action = player
                        .choose(env.as_ref(), &observation, &mut rng)
                        .unwrap_or_else(|e| panic!("{player_spec}: {e}"));
                    let board = Board::from_observation(&observation, &[3, 6, 7])
                        .expect("a Connect Four board");
                    if let Some(values) = exact_move_values(&board) {
                        let best = values
                            .iter()
                            .map(|&(_, v)| outcome(v))
                            .max()
                            .expect("a legal move");
                        let played = outcome(exact_move_value(&board, action).expect("legal"));
                        if !checked {
                            checked = true;
                            side.first_checked[slot(best)] += 1;
                        }
                        match (best, played) {
                            (1, p) if p < 1 => side.threw_win += 1,
                            (0, -1) => side.threw_draw += 1,
                            _ => {}
                        }
                    }
                    action
                } else {
                    opponent
                        .choose(env.as_ref(), &observation, &mut rng)
                        .unwrap_or_else(|e| panic!("{opponent_spec}: {e}"))
                };
                let step = env.step(action).expect("a legal move");
                ply += 1;
                observation = step.observation;
                if step.terminated || step.truncated {
                    let result = match (step.reward > 0.0, mover == player_index) {
                        (false, _) => 0,
                        (true, true) => 1,
                        (true, false) => -1,
                    };
                    side.results[slot(result)] += 1;
                    if !checked {
                        side.never_checked += 1;
                    }
                    break;
                }
            }
        }
    }
    println!(
        "{player_spec} against {opponent_spec}, {games} games a side, {opening} random opening \
         plies, in {:.1}s",
        start.elapsed().as_secs_f64()
    );
    println!(
        "| {player_spec} plays | wins | draws | losses | won at first check | drawn | lost | \
         never checked | won positions thrown | drawn positions thrown |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (name, s) in ["first", "second"].iter().zip(&sides) {
        println!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            s.results[0],
            s.results[1],
            s.results[2],
            s.first_checked[0],
            s.first_checked[1],
            s.first_checked[2],
            s.never_checked,
            s.threw_win,
            s.threw_draw
        );
    }
}
