//! Learning smoke test: MuZero solves Catch (a small deterministic environment, see
//! `cumind_envs::Catch`) from scratch within a small budget; and the synchronous mode is
//! reproducible for a given seed.

mod common;

use candle_core::Device;
use common::catch_config;
use cumind::components::{self, EnvInfo};
use cumind::config::{Config, ConfigSources};
use cumind::metrics::MemorySink;
use cumind::selfplay::evaluate;
use cumind::trainer::{train, RunOptions};

fn options() -> RunOptions {
    RunOptions {
        no_checkpoints: true,
        ..Default::default()
    }
}

#[test]
fn muzero_learns_to_catch() {
    learns_to_catch(&["training.eval_interval=0"]);
}

/// The same with EfficientZero's value prefix: Catch's only reward comes at the end, so the
/// search must read it off the difference of two prefixes.
#[test]
fn muzero_learns_to_catch_with_a_value_prefix() {
    learns_to_catch(&[
        "training.eval_interval=0",
        "network_architecture.value_prefix_dim=16",
        "network_architecture.value_prefix_horizon=3",
    ]);
}

fn learns_to_catch(sets: &[&str]) {
    let config = catch_config(sets);
    let mut sink = MemorySink::default();
    let summary = train(&config, &[Device::Cpu], &options(), &mut sink).unwrap();
    assert_eq!(
        summary.counters.env_steps,
        config.training.max_env_steps as u64
    );
    assert!(summary.counters.training_steps > 1000);
    let losses = &sink.series["loss/total"];
    let early: f64 = losses[..10].iter().map(|(_, v)| v).sum::<f64>() / 10.0;
    let late: f64 = losses[losses.len() - 10..]
        .iter()
        .map(|(_, v)| v)
        .sum::<f64>()
        / 10.0;
    assert!(late < early, "loss did not fall: {early} -> {late}");

    // Greedy play with the learned model catches every ball.
    let env = EnvInfo::of(&config).unwrap();
    let search = components::search_config(&config, &env);
    let eval = evaluate(&summary.network, &"Catch".into(), 40, &search, 777).unwrap();
    assert_eq!(eval.mean_return(), 1.0, "returns: {:?}", eval.returns);
}

#[test]
fn synchronous_training_is_reproducible_for_a_seed() {
    let config = catch_config(&[
        "training.max_env_steps=480",
        "training.eval_interval=0",
        "memory.min_memory_size=100",
    ]);
    let run = fingerprint;
    let (steps_a, weights_a, returns_a) = run(&config);
    let (steps_b, weights_b, returns_b) = run(&config);
    assert!(steps_a > 50);
    assert_eq!(steps_a, steps_b);
    assert_eq!(returns_a, returns_b);
    assert_eq!(weights_a, weights_b);

    let mut other = config.clone();
    other.other.seed += 1;
    let (_, weights_c, _) = run(&other);
    assert_ne!(
        weights_a, weights_c,
        "a different seed should give a different run"
    );
}

/// Reanalyse runs one step ahead on a worker thread beside the learner: the run is still
/// reproducible for a seed, and every training step's batch was reanalysed (half of its 64
/// rows, each with at least the position it starts from). With `reanalyse_write_back` too.
#[test]
fn reanalyse_beside_the_learner_searches_every_batch_and_is_reproducible() {
    let config = catch_config(&[
        "training.max_env_steps=480",
        "training.eval_interval=0",
        "memory.min_memory_size=100",
        "training.reanalyse_fraction=0.5",
        "training.reanalyse_simulations=4",
    ]);
    let mut sink = MemorySink::default();
    let summary = train(&config, &[Device::Cpu], &options(), &mut sink).unwrap();
    let searched = &sink.series["reanalyse/positions"];
    assert!(!searched.is_empty());
    for &(step, positions) in searched {
        assert!(
            positions >= 32.0 * step as f64,
            "{positions} positions by step {step}"
        );
    }
    let (steps_a, weights_a, returns_a) = fingerprint(&config);
    assert_eq!(steps_a, summary.counters.training_steps);
    let (steps_b, weights_b, returns_b) = fingerprint(&config);
    assert_eq!(steps_a, steps_b);
    assert_eq!(returns_a, returns_b);
    assert_eq!(weights_a, weights_b);

    // Writing the searched targets back into the memory changes what the unsearched rows
    // train on, so the run differs, and it stays reproducible.
    let mut write_back = config.clone();
    write_back.training.reanalyse_write_back = true;
    let (steps_c, weights_c, returns_c) = fingerprint(&write_back);
    assert_eq!(steps_c, steps_a);
    assert_ne!(weights_c, weights_a, "writing back changed nothing");
    assert_eq!((steps_c, weights_c, returns_c), fingerprint(&write_back));
}

#[test]
fn actor_threads_learn_beside_the_learner() {
    let config = catch_config(&["self_play.num_actors=2", "training.eval_interval=0"]);
    let mut sink = MemorySink::default();
    let summary = train(&config, &[Device::Cpu], &options(), &mut sink).unwrap();
    let c = &summary.counters;
    assert!(c.env_steps >= config.training.max_env_steps as u64);
    // The replay ratio holds: training steps follow the environment steps after warm-up.
    let max_steps = (c.env_steps as f64 * config.training.train_ratio).ceil() as u64;
    assert!(
        c.training_steps <= max_steps && c.training_steps > max_steps / 2,
        "{c:?}"
    );
    // The threads' own time is counted, apart from the learner's waits for it.
    assert!(summary.timing.actor_threads > 0.0, "{:?}", summary.timing);
    // A random policy scores about -0.6 on Catch; the threads' data taught something.
    let env = EnvInfo::of(&config).unwrap();
    let search = components::search_config(&config, &env);
    let eval = evaluate(&summary.network, &"Catch".into(), 40, &search, 99).unwrap();
    assert!(eval.mean_return() > 0.0, "returns: {:?}", eval.returns);
}

/// Weights, training steps and episode returns of a run.
type RunFingerprint = (u64, Vec<Vec<f32>>, Vec<(u64, f64)>);

fn fingerprint(config: &Config) -> RunFingerprint {
    let mut sink = MemorySink::default();
    let summary = train(config, &[Device::Cpu], &options(), &mut sink).unwrap();
    let weights = summary
        .network
        .params()
        .named()
        .map(|(_, v)| {
            v.as_tensor()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap()
        })
        .collect();
    (
        summary.counters.training_steps,
        weights,
        sink.series["episode/return"].clone(),
    )
}

/// With actor threads, what the agent learns must not depend on how the threads are
/// scheduled. The second run competes with threads that keep every core busy, which changes
/// the interleaving; the weights, training steps and episode returns must still be identical.
#[test]
fn actor_threads_give_the_same_run_however_the_threads_are_scheduled() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let config = catch_config(&[
        "self_play.num_actors=2",
        "training.max_env_steps=960",
        "training.eval_interval=0",
        "memory.min_memory_size=100",
    ]);
    let quiet = fingerprint(&config);
    assert!(quiet.0 > 100, "training steps: {}", quiet.0);

    let stop = Arc::new(AtomicBool::new(false));
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let hogs: Vec<_> = (0..cores)
        .map(|i| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = i as u64;
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..10_000 {
                        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    }
                    if x.is_multiple_of(7) {
                        std::thread::yield_now();
                    }
                }
                x
            })
        })
        .collect();
    let busy = fingerprint(&config);
    stop.store(true, Ordering::Relaxed);
    for hog in hogs {
        hog.join().unwrap();
    }
    assert_eq!(quiet.0, busy.0, "training steps differ");
    assert_eq!(quiet.2, busy.2, "episode returns differ");
    assert!(quiet.1 == busy.1, "weights differ");
}

#[test]
fn train_frequency_spaces_the_learner_phases() {
    // 480 env steps = 30 actor steps of 16 environments: a phase every 20 actor steps runs
    // once (at step 20); a phase every 40 never comes.
    let run = |frequency: &str| {
        let config = catch_config(&[
            "training.max_env_steps=480",
            "training.eval_interval=0",
            "memory.min_memory_size=16",
            frequency,
        ]);
        train(
            &config,
            &[Device::Cpu],
            &options(),
            &mut MemorySink::default(),
        )
        .unwrap()
        .counters
        .training_steps
    };
    let every = run("training.train_frequency=1");
    let once = run("training.train_frequency=20");
    let never = run("training.train_frequency=40");
    assert_eq!(never, 0);
    assert!(
        once > 0 && once < every,
        "every step: {every}, every 20: {once}"
    );
}

/// The replay buffer a short tic-tac-toe run keeps in its checkpoint (8 games at once, 400
/// environment steps, a small MLP), with `actors` self-play threads and the keys `sets`.
fn tictactoe_replay(actors: usize, sets: &[&str]) -> cumind::replay::ReplayBuffer {
    let dir = tempfile::tempdir().unwrap();
    let mut all: Vec<String> = vec![
        "environment.env_name=TicTacToe".into(),
        "environment.num_envs=8".into(),
        "network_architecture.hidden_dim=16".into(),
        "network_architecture.latent_dim=8".into(),
        "training.batch_size=16".into(),
        "training.max_env_steps=400".into(),
        "training.eval_interval=0".into(),
        "memory.min_memory_size=100".into(),
        format!("self_play.num_actors={actors}"),
        format!(
            "training.checkpoint_root_dir={}",
            dir.path().join("ckpt").display()
        ),
        format!("other.log_dir={}", dir.path().join("runs").display()),
    ];
    all.extend(sets.iter().map(|s| s.to_string()));
    let config = Config::load(&ConfigSources {
        sets: all,
        ..Default::default()
    })
    .unwrap();
    let summary = train(
        &config,
        &[Device::Cpu],
        &RunOptions::default(),
        &mut MemorySink::default(),
    )
    .unwrap();
    let checkpoint = cumind::checkpoint::load(&summary.run_dir, &Device::Cpu).unwrap();
    checkpoint.replay.expect("the checkpoint keeps the replay")
}

/// `self_play.fast_simulations` reaches self-play in both modes: the stored tic-tac-toe games
/// hold positions without a policy target (the fast searches') beside positions with one.
#[test]
fn a_playout_cap_reaches_the_replay_in_both_self_play_modes() {
    for actors in [0, 1] {
        let replay = tictactoe_replay(
            actors,
            &[
                "mcts.num_simulations=6",
                "self_play.fast_simulations=2",
                "self_play.full_search_fraction=0.3",
            ],
        );
        let (mut with, mut without) = (0, 0);
        for (_, game) in replay.games() {
            for t in 0..game.len() {
                if game.policy(t).iter().any(|&p| p > 0.0) {
                    with += 1;
                } else {
                    without += 1;
                }
            }
        }
        assert!(
            with > 0 && without > with,
            "{actors} actors: {with} positions with a policy target, {without} without"
        );
    }
}

/// `self_play.random_opening_plies` reaches the replay buffer in both self-play modes: stored
/// tic-tac-toe games start after 0..=N random moves, the player to move matching the stones.
#[test]
fn random_openings_reach_the_replay_in_both_self_play_modes() {
    for actors in [0, 1] {
        let replay = tictactoe_replay(
            actors,
            &["mcts.num_simulations=4", "self_play.random_opening_plies=3"],
        );
        let mut stones_seen = [0usize; 4];
        for (_, game) in replay.games() {
            let stones = game.observation(0)[..18]
                .iter()
                .filter(|&&x| x > 0.5)
                .count();
            assert!(stones <= 3, "a game opened with {stones} stones");
            assert_eq!(game.to_play[0] as usize, stones % 2);
            stones_seen[stones] += 1;
        }
        assert!(
            stones_seen.iter().all(|&n| n > 0),
            "{actors} actors: games by opening stones {stones_seen:?}"
        );
    }
}

/// A short learning run on a tiny two-player game with a known solution (take one or
/// two stones, the last stone wins). Checked by the exhaustive audit against every opponent:
/// as first player the agent wins whatever the opponent does, and on neither side does it miss
/// a winning move or give away a won position.
#[test]
fn muzero_solves_a_tiny_two_player_game() {
    use cumind::arena::audit::audit_side;
    use cumind::testing::take_away::TakeAway;
    cumind::envs::register("TakeAway", || Box::new(TakeAway::new())).unwrap();
    let config = Config::load(&ConfigSources {
        sets: [
            "environment.env_name=TakeAway",
            "environment.num_envs=8",
            "mcts.search_policy=puct",
            "mcts.num_simulations=16",
            "network_architecture.hidden_dim=32",
            "network_architecture.latent_dim=16",
            "network_architecture.value_support_size=2",
            "network_architecture.reward_support_size=2",
            "training.batch_size=32",
            "training.max_env_steps=3000",
            "training.train_ratio=0.5",
            "training.eval_interval=0",
            "memory.min_memory_size=200",
            "self_play.discount=1.0",
            "self_play.td_steps=7",
            "self_play.num_unroll_steps=3",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        ..Default::default()
    })
    .unwrap();
    let summary = train(
        &config,
        &[Device::Cpu],
        &options(),
        &mut MemorySink::default(),
    )
    .unwrap();
    let mut agent = cumind::Agent::from_network(summary.network, config);
    for player in [0, 1] {
        let audit = audit_side(&mut agent, &mut TakeAway::new(), player).unwrap();
        let lines: Vec<_> = audit.mistakes.iter().map(|m| &m.line).collect();
        assert!(
            lines.is_empty(),
            "player {player}: mistakes after {lines:?}"
        );
        assert_eq!(audit.worst_result, audit.exact_value, "player {player}");
    }
}
