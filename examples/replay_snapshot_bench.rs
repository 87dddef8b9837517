//! Size and write/read time of the replay snapshot in a checkpoint: the binary form
//! (`replay.safetensors`) against the JSON form earlier checkpoints used, for a CartPole-sized
//! buffer (16,000 transitions of 4 floats, 2 actions) and a Connect Four-sized one (1,000,000
//! transitions of 126 floats, 7 actions), measured in one run.
//!
//! ```sh
//! cargo run --release --example replay_snapshot_bench [DIR]
//! ```
//!
//! Times include serialising and writing the file (no fsync), and reading and rebuilding the
//! buffer with all its consistency checks; best of three after an untimed round. DIR (default: the system temp directory) receives
//! the files, which are deleted afterwards.

use std::time::Instant;

use cumind::replay::{GameHistory, ReplayBuffer, ReplayConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn buffer(transitions: usize, obs_len: usize, actions: usize, game_len: usize) -> ReplayBuffer {
    let mut rng = StdRng::seed_from_u64(1);
    let mut replay = ReplayBuffer::new(ReplayConfig {
        capacity: transitions,
        num_unroll_steps: 5,
        td_steps: 10,
        discount: 0.997,
        per_alpha: 1.0,
        per_beta: 1.0,
        per_epsilon: 1e-6,
        two_player: false,
        max_bytes: 0,
        td_age_transitions: 0,
        symmetries: Vec::new(),
    });
    let random_obs = |rng: &mut StdRng| -> Vec<f32> {
        (0..obs_len).map(|_| rng.random_range(-1.0..1.0)).collect()
    };
    for _ in 0..transitions / game_len {
        let mut game = GameHistory::new(obs_len, actions, &random_obs(&mut rng), 0);
        for _ in 0..game_len {
            let mut policy: Vec<f32> = (0..actions).map(|_| rng.random_range(0.0..1.0)).collect();
            let sum: f32 = policy.iter().sum();
            policy.iter_mut().for_each(|p| *p /= sum);
            let next = random_obs(&mut rng);
            game.push(
                rng.random_range(0..actions),
                1.0,
                rng.random_range(0.0..100.0),
                &policy,
                &next,
                0,
            );
        }
        game.finish(true, 0.0);
        replay.save_game(game).expect("a valid game");
    }
    replay
}

fn measure(name: &str, replay: &ReplayBuffer, dir: &std::path::Path) -> anyhow::Result<()> {
    let json_path = dir.join("bench-replay.json");
    let bin_path = dir.join("bench-replay.safetensors");

    // Best of three of each, after an untimed round, so page-cache and allocator warm-up
    // count against neither format.
    let (mut bin_write, mut bin_read, mut json_write, mut json_read) =
        (f64::MAX, f64::MAX, f64::MAX, f64::MAX);
    for round in 0..4 {
        let clock = Instant::now();
        std::fs::write(&bin_path, replay.to_binary()?)?;
        let w = clock.elapsed().as_secs_f64();
        let clock = Instant::now();
        let back = ReplayBuffer::from_binary(&std::fs::read(&bin_path)?)?;
        let r = clock.elapsed().as_secs_f64();
        assert_eq!(back.num_transitions(), replay.num_transitions());
        drop(back);
        let clock = Instant::now();
        std::fs::write(&json_path, serde_json::to_vec(replay)?)?;
        let jw = clock.elapsed().as_secs_f64();
        let clock = Instant::now();
        let back: ReplayBuffer = serde_json::from_slice(&std::fs::read(&json_path)?)?;
        let jr = clock.elapsed().as_secs_f64();
        assert_eq!(back.num_transitions(), replay.num_transitions());
        if round > 0 {
            bin_write = bin_write.min(w);
            bin_read = bin_read.min(r);
            json_write = json_write.min(jw);
            json_read = json_read.min(jr);
        }
    }
    let bin_size = std::fs::metadata(&bin_path)?.len();
    let json_size = std::fs::metadata(&json_path)?.len();

    let mb = |b: u64| b as f64 / 1e6;
    println!(
        "| {name} | JSON | {:.1} MB | {:.0} ms | {:.0} ms |",
        mb(json_size),
        json_write * 1e3,
        json_read * 1e3
    );
    println!(
        "| {name} | binary | {:.1} MB | {:.0} ms | {:.0} ms |",
        mb(bin_size),
        bin_write * 1e3,
        bin_read * 1e3
    );
    println!(
        "| {name} | ratio JSON/binary | {:.1}x | {:.1}x | {:.1}x |",
        json_size as f64 / bin_size as f64,
        json_write / bin_write,
        json_read / bin_read
    );
    std::fs::remove_file(json_path)?;
    std::fs::remove_file(bin_path)?;
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let dir = std::env::args()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    println!("| buffer | format | size | write | read |\n|---|---|---:|---:|---:|");
    measure("CartPole 16k x 4 floats", &buffer(16_000, 4, 2, 200), &dir)?;
    measure(
        "Connect Four 1M x 126 floats",
        &buffer(1_000_000, 126, 7, 40),
        &dir,
    )?;
    Ok(())
}
