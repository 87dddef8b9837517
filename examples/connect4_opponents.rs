//! Two of `cumind eval`'s built-in Connect Four opponents against each other: how strong a
//! yardstick is, for example how often a deep alpha-beta beats `alphabeta:4` from the random
//! openings the agent's matches use.
//!
//! The program plays `GAMES` games a side (PLAYER first in half of them), each opened with
//! `OPENING` random plies by both players (default 2, as `cumind eval --random-opening 2`),
//! and prints PLAYER's wins, draws and losses per side. Where the exact solver answers (at
//! most 24 empty cells) it also gives, per side, how many games were won, drawn or lost for
//! PLAYER (with best play) at PLAYER's first move there, and the won or drawn positions
//! PLAYER's moves threw away: the same split as `cumind eval --check-moves`. With
//! `OPENING_VALUES=1` it also solves the position at PLAYER's first move of each game (the
//! exact solver, however early) and counts, per side, the games PLAYER started won, drawn or
//! lost with best play: how many games the random openings and the opponent's first moves
//! decide before PLAYER's play counts.
//!
//! ```sh
//! cargo run --release --example connect4_opponents -- PLAYER OPPONENT [GAMES] [OPENING]
//! cargo run --release --example connect4_opponents -- alphabeta:10 alphabeta:4 100
//! ```
//!
//! Games are seeded 0, 1, ...; the random plies and the players' ties come from a generator
//! seeded 7.

use std::collections::HashMap;

use cumind::arena::connect_four::{exact_result, Board};
use cumind::arena::move_check::{exact_values, SideCheck};
use cumind::arena::{Opponent, OpponentSpec, Record};
use rand::{Rng, SeedableRng};

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
    let mut sides = [
        (Record::default(), SideCheck::default()),
        Default::default(),
    ];
    let mut memo = HashMap::new();
    let opening_values = std::env::var("OPENING_VALUES").is_ok_and(|v| v == "1");
    // Per side: games PLAYER started won, drawn, lost with best play.
    let mut started = [[0usize; 3]; 2];
    for (player_index, (record, check)) in sides.iter_mut().enumerate() {
        for game in 0..games {
            let mut first_move = true;
            let mut env = cumind::envs::make("ConnectFour").expect("Connect Four");
            let (mut observation, _) = env.reset(Some(game as u64));
            let mut ply = 0;
            loop {
                let mover = env.to_play();
                let action = if ply < opening {
                    let legal = env.legal_actions();
                    legal[rng.random_range(0..legal.len())]
                } else if mover == player_index {
                    if std::mem::take(&mut first_move) && opening_values {
                        let shape = env.observation_space().shape();
                        let board = Board::from_observation(&observation, &shape)
                            .expect("a Connect Four board");
                        started[player_index][(exact_result(&board) + 1) as usize] += 1;
                    }
                    let action = player
                        .choose(env.as_ref(), &observation, &mut rng)
                        .unwrap_or_else(|e| panic!("{player_spec}: {e}"));
                    if let Some((best, played)) =
                        exact_values(env.as_ref(), &observation, action, &mut memo)
                    {
                        check.agent_move(best, played);
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
                    match (step.reward > 0.0, mover == player_index) {
                        (false, _) => record.draws += 1,
                        (true, true) => record.wins += 1,
                        (true, false) => record.losses += 1,
                    }
                    check.game_over();
                    eprintln!(
                        "{} game {} of {games} over at {:.1}s: {} wins, {} draws, {} losses",
                        ["first", "second"][player_index],
                        game + 1,
                        start.elapsed().as_secs_f64(),
                        record.wins,
                        record.draws,
                        record.losses
                    );
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
    for (name, (r, side)) in ["first", "second"].iter().zip(&sides) {
        let c = &side.check;
        println!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.wins,
            r.draws,
            r.losses,
            c.first_won,
            c.first_drawn,
            c.first_lost,
            c.never_checked,
            c.threw_win,
            c.threw_draw
        );
    }
    if opening_values {
        println!("| {player_spec} plays | started won | drawn | lost (exact, at its first move) |");
        println!("|---|---:|---:|---:|");
        for (name, [lost, drawn, won]) in ["first", "second"].iter().zip(started) {
            println!("| {name} | {won} | {drawn} | {lost} |");
        }
    }
}
