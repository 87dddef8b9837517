//! Can a preset's network learn a two-player game's win condition when the data is plentiful?
//!
//! Self-play gives one winning move per game. This program instead labels positions with the
//! rules: it plays `GAMES` games uniformly at random, and stores every position as a one-move
//! game (the mover plays a winning move half the time when it has one, otherwise a random legal
//! move; reward 1 when the move wins), then trains the preset's network on them with the
//! learner `cumind train` uses (uniform replay, `BATCH` from the preset). Every tenth random
//! game is held out: at five points it reports, over 500 held-out positions where the mover
//! can win at once, the reward the dynamics predicts for the winning moves against the other
//! legal moves, and in how many the highest predicted reward is on a winning move.
//! docs/results.md has the Connect Four figures.
//!
//! ```sh
//! cargo run --release --example win_condition_supervised -- agents/connect4.json 20000 4000
//! # more arguments are --set style overrides, e.g. network_architecture.hidden_dim=256
//! ```

use candle_core::{DType, Device};
use rand::{Rng, SeedableRng};

use cumind::arena::search::winning_moves;
use cumind::components::{self, EnvInfo};
use cumind::network::MuZeroNetwork;
use cumind::replay::{GameHistory, ReplayBuffer};
use cumind::train::Learner;
use cumind::{Config, ConfigSources};

#[path = "common/predicted_rewards.rs"]
mod predicted_rewards;

/// A held-out position: observation, legal moves, winning moves.
type HeldOut = (Vec<f32>, Vec<usize>, Vec<usize>);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: win_condition_supervised CONFIG STEPS GAMES [section.key=value ...]";
    let (file, steps, games) = match &args[..] {
        [f, s, g, ..] => (
            f.clone(),
            s.parse::<usize>().expect(usage),
            g.parse::<usize>().expect(usage),
        ),
        _ => panic!("{usage}"),
    };
    let mut sets = args[3..].to_vec();
    sets.push("memory.per_alpha=0".into());
    let config = Config::load(&ConfigSources {
        files: vec![file.into()],
        sets,
        ..ConfigSources::default()
    })
    .expect("configuration");
    let env_info = EnvInfo::of(&config).expect("environment");
    let spec = components::network_spec(&config, &env_info);
    let (a_n, obs_len) = (spec.num_actions, spec.obs_len());
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let mut replay = ReplayBuffer::new(components::replay_config(&config, &env_info));
    let mut held: Vec<HeldOut> = Vec::new();
    let (mut stored, mut won) = (0, 0);
    for g in 0..games {
        let mut env = cumind::envs::make(&config.environment.env_name).expect("a game");
        let (mut observation, _) = env.reset(None);
        loop {
            let legal = env.legal_actions();
            if legal.is_empty() {
                break;
            }
            let winning = winning_moves(env.as_ref());
            if g % 10 == 0 {
                if !winning.is_empty() && held.len() < 500 {
                    held.push((observation.clone(), legal.clone(), winning));
                }
            } else {
                let action = if !winning.is_empty() && rng.random_bool(0.5) {
                    winning[rng.random_range(0..winning.len())]
                } else {
                    legal[rng.random_range(0..legal.len())]
                };
                let mut after = env.clone_box();
                let step = after.step(action).expect("a legal move");
                let uniform: Vec<f32> = (0..a_n)
                    .map(|a| {
                        if legal.contains(&a) {
                            1.0 / legal.len() as f32
                        } else {
                            0.0
                        }
                    })
                    .collect();
                let mut game = GameHistory::new(obs_len, a_n, &observation, env.to_play() as u8);
                game.push(
                    action,
                    step.reward as f32,
                    0.0,
                    &uniform,
                    &step.observation,
                    after.to_play() as u8,
                );
                game.finish(true, 0.0);
                replay.save_game(game).expect("a valid game");
                stored += 1;
                won += usize::from(step.reward > 0.5);
            }
            let a = legal[rng.random_range(0..legal.len())];
            let step = env.step(a).expect("a legal move");
            if step.terminated {
                break;
            }
            observation = step.observation;
        }
    }
    println!(
        "{} positions stored ({won} won by the stored move), {} held out",
        stored,
        held.len()
    );
    let network = MuZeroNetwork::new(spec.clone(), 0, &Device::Cpu, DType::F32).expect("network");
    let mut learner =
        Learner::new(network, components::learner_config(&config, steps)).expect("learner");
    for step in 1..=steps {
        let batch = replay
            .sample(config.training.batch_size, &mut rng)
            .expect("a batch");
        learner.train_step(&batch).expect("a training step");
        if step % (steps / 5).max(1) != 0 {
            continue;
        }
        let net = learner.network();
        let flat: Vec<f32> = held.iter().flat_map(|h| h.0.iter().copied()).collect();
        let latent = net
            .represent(&net.observation_tensor(&flat).expect("observations"))
            .expect("representation");
        let rewards = predicted_rewards::for_every_action(net, &latent, held.len());
        let (mut on_wins, mut n_wins, mut on_others, mut n_others, mut hits) = (0.0, 0, 0.0, 0, 0);
        for ((_, legal, winning), r) in held.iter().zip(&rewards) {
            for &m in legal {
                if winning.contains(&m) {
                    on_wins += r[m];
                    n_wins += 1;
                } else {
                    on_others += r[m];
                    n_others += 1;
                }
            }
            let best = legal
                .iter()
                .copied()
                .max_by(|&x, &y| r[x].total_cmp(&r[y]))
                .expect("legal moves");
            hits += usize::from(winning.contains(&best));
        }
        println!(
            "step {step}: predicted reward of winning moves {:.3}, of other moves {:.3}; highest \
             on a winning move in {hits} of {}",
            on_wins / n_wins.max(1) as f32,
            on_others / n_others.max(1) as f32,
            held.len()
        );
    }
}
