//! End-to-end tests of the `cumind` binary, each in its own temporary directory.

mod common;

use std::time::{Duration, Instant};

use common::{
    assert_fails_with, cumind, latest_metadata, preset, run_in_place, sets, text, train_in_place,
};

fn catch_preset() -> String {
    preset("catch.json")
}

#[test]
fn help_and_version() {
    let dir = tempfile::tempdir().unwrap();
    let out = cumind(dir.path()).arg("--help").output().unwrap();
    assert!(out.status.success());
    let t = text(&out);
    for cmd in ["config", "train", "eval"] {
        assert!(t.contains(cmd), "{cmd} missing from --help:\n{t}");
    }
    let out = cumind(dir.path()).arg("--version").output().unwrap();
    let t = text(&out);
    assert!(t.contains(env!("CARGO_PKG_VERSION")), "{t}");
    // The features are named, so a script can refuse a CPU build (scripts/benchmark_gpu.sh).
    assert!(t.contains("features:"), "{t}");
    assert_eq!(t.contains("cuda"), cfg!(feature = "cuda"), "{t}");
}

#[test]
fn config_round_trips_through_a_file_and_layers_apply() {
    let dir = tempfile::tempdir().unwrap();
    let out = cumind(dir.path())
        .args(["config", "--set", "training.batch_size=48"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let printed = String::from_utf8(out.stdout).unwrap();
    let json: serde_json::Value = serde_json::from_str(&printed).unwrap();
    assert_eq!(json["Training"]["batch_size"], 48);
    std::fs::write(dir.path().join("my.json"), &printed).unwrap();
    let again = cumind(dir.path())
        .args(["--config", "my.json", "config"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8(again.stdout).unwrap(), printed);

    let env = cumind(dir.path())
        .args(["--config", "my.json", "config"])
        .env("CUMIND_TRAINING__BATCH_SIZE", "24")
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&env.stdout).unwrap();
    assert_eq!(json["Training"]["batch_size"], 24);
}

#[test]
fn invalid_configuration_fails_with_the_key_named() {
    let dir = tempfile::tempdir().unwrap();
    let out = cumind(dir.path())
        .args(["config", "--set", "mcts.num_simulations=0"])
        .output()
        .unwrap();
    assert_fails_with(&out, "mcts.num_simulations");
    std::fs::write(
        dir.path().join("bad.json"),
        "{\"Training\": {\"batch_size\": 3,}}",
    )
    .unwrap();
    let out = cumind(dir.path())
        .args(["--config", "bad.json", "train"])
        .output()
        .unwrap();
    assert_fails_with(&out, "bad.json");
    let out = cumind(dir.path())
        .args(["train", "--device", "cuda"])
        .output()
        .unwrap();
    assert_fails_with(&out, "cuda");
}

#[test]
fn train_eval_resume_and_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let out = train_in_place(
        dir.path(),
        "catch.json",
        "catch",
        &[
            "training.checkpoint_interval=100",
            "training.max_env_steps=640",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("reached max_env_steps = 640"),
        "{}",
        text(&out)
    );
    let run = dir.path().join("ckpt/catch");
    assert!(run.join("latest").is_file());
    assert!(
        std::fs::read_dir(dir.path().join("runs/catch"))
            .unwrap()
            .count()
            >= 1
    );

    let out = cumind(dir.path())
        .args(["eval", "--checkpoint", "ckpt/catch", "--episodes", "5"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("mean return"), "{}", text(&out));

    // Resuming uses the stored configuration: its budget is spent, so it stops at once with its
    // counters intact; a larger budget given with --set continues the run.
    let out = cumind(dir.path())
        .args(["train", "--no-progress", "--resume", "ckpt/catch"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("640 env steps"), "{}", text(&out));
    let out = cumind(dir.path())
        .args([
            "--set",
            "training.max_env_steps=960",
            "train",
            "--no-progress",
            "--resume",
            "ckpt/catch",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("960 env steps"), "{}", text(&out));
    let out = cumind(dir.path())
        .args([
            "--set",
            "network_architecture.hidden_dim=8",
            "train",
            "--resume",
            "ckpt/catch",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());

    // A truncated weights file is a clear error naming the file.
    let latest = std::fs::read_to_string(run.join("latest")).unwrap();
    let model = run.join(latest.trim()).join("model.safetensors");
    let bytes = std::fs::read(&model).unwrap();
    std::fs::write(&model, &bytes[..bytes.len() - 7]).unwrap();
    let out = cumind(dir.path())
        .args(["eval", "--checkpoint", "ckpt/catch"])
        .output()
        .unwrap();
    assert_fails_with(&out, "model.safetensors");
    let out = cumind(dir.path())
        .args(["eval", "--checkpoint", "nowhere"])
        .output()
        .unwrap();
    assert_fails_with(&out, "no checkpoint at nowhere");
}

#[test]
fn the_best_evaluation_keeps_its_own_checkpoint_and_a_run_resumes_from_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = train_in_place(
        dir.path(),
        "catch.json",
        "catch",
        &[
            "training.max_env_steps=960",
            "training.eval_interval=160",
            "training.eval_episodes=5",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let log = text(&out);
    // "eval @ N env steps, M training steps, Ts: mean return X +- S over E episodes"
    let evals: Vec<(u64, f64)> = log
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("eval @ ")?;
            let steps = rest.split(' ').next()?.parse().ok()?;
            let mean = rest.split("mean return ").nth(1)?.split(' ').next()?;
            Some((steps, mean.parse().ok()?))
        })
        .collect();
    assert_eq!(evals.len(), 6, "{log}");
    let best_return = evals.iter().map(|e| e.1).fold(f64::MIN, f64::max);
    // Of equal evaluations the newest network is kept.
    let last_best = evals.iter().rev().find(|e| e.1 == best_return).unwrap().0;
    let best = dir.path().join("ckpt/catch/best");
    assert!(
        log.contains(&format!(
            "best checkpoint: {}",
            std::path::Path::new("ckpt/catch/best").display()
        )),
        "{log}"
    );
    let steps: Vec<_> = std::fs::read_dir(&best)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("step-"))
        .collect();
    assert_eq!(steps.len(), 1, "one step directory in best/");
    assert!(!steps[0].path().join("replay.safetensors").exists());
    let meta = latest_metadata(&best);
    assert_eq!(meta["counters"]["env_steps"], last_best, "{log}");
    let stored = meta["counters"]["best_eval_return"].as_f64().unwrap();
    assert!(
        (stored - best_return).abs() <= 0.05,
        "{stored} against {log}"
    );
    let out = cumind(dir.path())
        .args(["eval", "--checkpoint", "ckpt/catch/best", "--episodes", "5"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));

    // Resuming from the best checkpoint goes on in the run directory, from the best's counters.
    let out = cumind(dir.path())
        .args(sets(&["training.max_env_steps=1280"]))
        .args(["train", "--no-progress", "--resume", "ckpt/catch/best"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("1280 env steps"), "{}", text(&out));
    assert_eq!(
        latest_metadata(&dir.path().join("ckpt/catch"))["counters"]["env_steps"],
        1280
    );
    let meta = latest_metadata(&best);
    assert!(meta["counters"]["best_eval_return"].as_f64().unwrap() >= stored);
}

#[test]
fn sigkill_then_resume_loses_at_most_the_work_since_the_last_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = cumind(dir.path())
        .args(["--config", &catch_preset()])
        .args(run_in_place("killed"))
        .args(sets(&[
            "training.checkpoint_interval=50",
            "training.max_env_steps=200000",
        ]))
        .args(["train", "--no-progress"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let run = dir.path().join("ckpt/killed");
    let start = Instant::now();
    // Wait for the second checkpoint, so one was replaced while the process ran.
    loop {
        if let Ok(name) = std::fs::read_to_string(run.join("latest")) {
            if name.trim() >= "step-0000000100" {
                break;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no checkpoint appeared"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let meta = latest_metadata(&run);
    let saved_steps = meta["counters"]["training_steps"].as_u64().unwrap();
    let saved_env = meta["counters"]["env_steps"].as_u64().unwrap();
    assert!(saved_steps >= 100);

    // Resume with a budget just past the checkpoint: continues from its counters.
    let budget = format!("training.max_env_steps={}", saved_env + 64);
    let out = cumind(dir.path())
        .args([
            "--set",
            &budget,
            "train",
            "--no-progress",
            "--resume",
            "ckpt/killed",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let t = text(&out);
    assert!(t.contains(&format!("{} env steps", saved_env + 64)), "{t}");
    let meta = latest_metadata(&run);
    assert!(meta["counters"]["training_steps"].as_u64().unwrap() > saved_steps);
}

#[test]
fn tictactoe_agent_is_evaluated_against_random_and_can_be_played() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let out = train_in_place(
        dir.path(),
        "tictactoe.json",
        "ttt",
        &[
            "training.max_env_steps=640",
            "memory.min_memory_size=200",
            "mcts.num_simulations=20",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));

    let out = cumind(dir.path())
        .args(["eval", "--checkpoint", "ckpt/ttt", "--episodes", "10"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("TicTacToe: 10 episodes"),
        "{}",
        text(&out)
    );

    // Matches against each kind of opponent print a win/draw/loss row per side that adds up.
    for opponent in ["random", "perfect", "alphabeta:2", "checkpoint:ckpt/ttt"] {
        let out = cumind(dir.path())
            .args(["eval", "--checkpoint", "ckpt/ttt", "--opponent", opponent])
            .args(["--games", "4", "--random-opening", "1"])
            .output()
            .unwrap();
        let t = text(&out);
        assert!(out.status.success(), "{t}");
        for side in ["first", "second"] {
            let row = t
                .lines()
                .find(|l| l.starts_with(&format!("| {side} |")))
                .unwrap_or_else(|| panic!("no {side} row:\n{t}"));
            let total: usize = row
                .split('|')
                .filter_map(|c| c.trim().parse::<usize>().ok())
                .sum();
            assert_eq!(total, 4, "{row}");
        }
    }
    // Every opponent at once: one row per side with the positions checked, and each mistake
    // printed with the moves that lead to it.
    let out = cumind(dir.path())
        .args(["eval", "--checkpoint", "ckpt/ttt", "--opponent", "all"])
        .output()
        .unwrap();
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    for side in ["first", "second"] {
        let row = t
            .lines()
            .find(|l| l.starts_with(&format!("| {side} |")))
            .unwrap_or_else(|| panic!("no {side} row:\n{t}"));
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let mistakes: usize = cells[3].parse().unwrap();
        assert_eq!(
            t.matches(&format!("mistake ({side} player)")).count(),
            mistakes,
            "{t}"
        );
        assert!(["win", "draw", "loss"].contains(&cells[4]), "{row}");
        assert_eq!(cells[5], "draw", "tic-tac-toe is a draw: {row}");
    }
    let out = cumind(dir.path())
        .args(["eval", "--checkpoint", "ckpt/ttt", "--opponent", "minimax"])
        .output()
        .unwrap();
    assert_fails_with(&out, "alphabeta:DEPTH");

    // A human typing every cell in turn, with one typo: occupied cells and the typo are refused
    // with a message and the game goes on to its end.
    let mut child = cumind(dir.path())
        .args(["play", "--checkpoint", "ckpt/ttt"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"0\nx\n1\n2\n3\n4\n5\n6\n7\n8\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("not a number"), "{t}");
    assert!(t.contains("agent plays"), "{t}");
    assert!(t.contains("search values the position at"), "{t}");
    assert!(t.contains("your move ["), "{t}");
    assert!(
        t.contains("game over") || t.contains("game abandoned"),
        "{t}"
    );

    // Random lines (garbage, huge and negative numbers, blanks, non-ASCII, a very long line,
    // bytes that are not UTF-8), then the end of input: the game refuses what is not a move and
    // ends cleanly, never with a panic. Fixed seeds, 24 games.
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(41);
    for game in 0..24 {
        let mut input: Vec<u8> = Vec::new();
        for _ in 0..rng.random_range(0..30) {
            let line: Vec<u8> = match rng.random_range(0..8) {
                0 => b"".to_vec(),
                1 => rng.random_range(-5i64..15).to_string().into_bytes(),
                2 => u64::MAX.to_string().into_bytes(),
                3 => "-99999999999999999999".into(),
                4 => "\u{e9}\u{1f600} 3".as_bytes().to_vec(),
                5 => vec![b'7'; 5000],
                6 => (0..rng.random_range(1..20))
                    .map(|_| rng.random::<u8>())
                    .collect(),
                _ => rng.random_range(0..9).to_string().into_bytes(),
            };
            input.extend(line);
            input.push(b'\n');
        }
        let mut command = cumind(dir.path());
        command.args(["play", "--checkpoint", "ckpt/ttt"]);
        if game % 2 == 1 {
            command.arg("--second");
        }
        let mut child = command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The game may end before it has read everything: a closed pipe is fine.
        let _ = child.stdin.take().unwrap().write_all(&input);
        let out = child.wait_with_output().unwrap();
        let t = text(&out);
        assert!(
            !t.contains("panicked") && matches!(out.status.code(), Some(0) | Some(1)),
            "game {game} ({:?}): {t}",
            String::from_utf8_lossy(&input)
        );
    }
}

#[test]
fn check_env_passes_the_built_ins_and_refuses_unknown_names() {
    let dir = tempfile::tempdir().unwrap();
    let out = cumind(dir.path()).args(["check-env"]).output().unwrap();
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    for name in cumind::envs::names() {
        assert!(t.contains(&format!("{name}: ok (10 episodes, ")), "{t}");
    }
    let out = cumind(dir.path())
        .args(["check-env", "TicTacToe", "--episodes", "3", "--seed", "5"])
        .output()
        .unwrap();
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.starts_with("TicTacToe: ok (3 episodes, "), "{t}");
    assert!(!t.contains("CartPole"), "{t}");
    // An unknown name is refused before any environment is played.
    let out = cumind(dir.path())
        .args(["check-env", "Catch", "Pong"])
        .output()
        .unwrap();
    assert_fails_with(&out, "unknown environment \"Pong\"");
    assert!(!text(&out).contains("Catch: ok"), "{}", text(&out));
}

#[test]
fn check_env_refuses_configuration_and_zero_episodes() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &["check-env", "--set", "environment.env_name=Catch"][..],
        &["--config", "agents/catch.json", "check-env"],
    ] {
        let out = cumind(dir.path()).args(args).output().unwrap();
        assert_fails_with(
            &out,
            "reads no configuration; --config and --set would have no effect",
        );
    }
    let out = cumind(dir.path())
        .args(["check-env", "--episodes", "0"])
        .output()
        .unwrap();
    assert_fails_with(&out, "--episodes 0 would check nothing");
}

/// `--device auto` resolves from the network's size and the batch, and says which and why:
/// CartPole's small network goes to the CPU; Connect Four's conv net at batch 64 is one the
/// rule gives to a GPU, which a build without `cuda` does not have, and it says so. `--device
/// cuda` on the small network names the CPU as likely faster before it opens the GPU.
#[test]
fn device_auto_resolves_by_the_network_and_the_batch_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let bench = [
        "--dtypes",
        "float32",
        "--repetitions",
        "1",
        "--warmup",
        "0",
        "--no-training",
        "--out",
        "b.json",
    ];
    let out = cumind(dir.path())
        .args(["benchmark", "--device", "auto", "--batch-sizes", "4"])
        .args(bench)
        .output()
        .unwrap();
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("device auto: cpu ("), "{t}");
    assert!(
        t.contains("MFLOP per recurrent inference at batch 4"),
        "{t}"
    );
    assert!(!t.contains("no GPU is available"), "{t}");

    let out = cumind(dir.path())
        .args(["--config", &preset("connect4_gpu.json")])
        .args(["--set", "mcts.num_simulations=1"])
        .args(["benchmark", "--device", "auto", "--batch-sizes", "64"])
        .args(bench)
        .output()
        .unwrap();
    let t = text(&out);
    if cfg!(feature = "cuda") {
        assert!(t.contains("device auto: "), "{t}");
    } else {
        assert!(out.status.success(), "{t}");
        assert!(
            t.contains("device auto: cpu (no GPU is available to this binary"),
            "{t}"
        );
    }

    let out = cumind(dir.path())
        .args(["benchmark", "--device", "cuda", "--batch-sizes", "4"])
        .args(bench)
        .output()
        .unwrap();
    let t = text(&out);
    assert!(
        t.contains("note: this network is likely faster on the CPU"),
        "{t}"
    );
}
