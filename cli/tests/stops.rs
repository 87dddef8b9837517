//! Stops that lose nothing. SIGINT (Ctrl-C), SIGTERM and SIGHUP save a checkpoint; a write that fails
//! part-way keeps the last good checkpoint; a damaged `latest` falls back to the newest complete
//! checkpoint. Each case then resumes from the checkpoint that survived.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{cumind, latest_metadata, preset, run_in_place, sets, text, train_in_place, Watched};

/// Environment and training steps stored in the latest checkpoint of `run`.
fn counters(run: &Path) -> (u64, u64) {
    let meta = latest_metadata(run);
    (
        meta["counters"]["env_steps"].as_u64().unwrap(),
        meta["counters"]["training_steps"].as_u64().unwrap(),
    )
}

/// Resume `run_name` in `dir` with an environment-step budget of `budget`; must succeed.
fn resume(dir: &Path, run_name: &str, budget: u64) -> String {
    resume_with(
        dir,
        run_name,
        &format!("training.max_env_steps={budget}"),
        &format!("{budget} env steps"),
    )
}

/// Resume `run_name` in `dir` with one `--set` of `setting`; must succeed and print `expected`.
fn resume_with(dir: &Path, run_name: &str, setting: &str, expected: &str) -> String {
    let out = cumind(dir)
        .args(sets(&[setting]))
        .args([
            "train",
            "--no-progress",
            "--resume",
            &format!("ckpt/{run_name}"),
        ])
        .output()
        .unwrap();
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains(expected), "{t}");
    t
}

#[test]
fn sigint_sigterm_and_sighup_save_a_checkpoint_and_the_run_resumes() {
    // SIGINT is Ctrl-C; SIGTERM comes from schedulers, containers and systemd; SIGHUP from a
    // closed terminal. No periodic checkpoint comes before the signal.
    for signal in ["INT", "TERM", "HUP"] {
        let dir = tempfile::tempdir().unwrap();
        let name = format!("sig{signal}");
        let mut cmd = cumind(dir.path());
        cmd.args(["--config", &preset("catch.json")])
            .args(run_in_place(&name))
            .args(sets(&[
                "training.checkpoint_interval=100000",
                "training.max_env_steps=10000000",
                "training.eval_interval=320",
                "training.eval_episodes=2",
            ]))
            .args(["train", "--no-progress"]);
        let mut run = Watched::spawn(cmd);
        run.wait_for_line("eval @ 640 env steps", Duration::from_secs(300));
        let sent = Command::new("kill")
            .args([&format!("-{signal}"), &run.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let (status, t) = run.finish();
        assert!(status.success(), "SIG{signal}: {t}");
        assert!(t.contains("stopped: interrupted"), "SIG{signal}: {t}");
        let run_dir = dir.path().join("ckpt").join(&name);
        let (env_steps, training_steps) = counters(&run_dir);
        assert!(env_steps >= 640 && training_steps > 0, "SIG{signal}");

        // The resumed run starts from those counters and goes on.
        resume(dir.path(), &name, env_steps + 64);
        let (env_after, training_after) = counters(&run_dir);
        assert_eq!(env_after, env_steps + 64);
        assert!(training_after > training_steps);
    }
}

#[test]
fn the_clock_stops_a_run_with_a_checkpoint_and_a_resumed_run_counts_it_on() {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("ckpt").join("clock");
    let budget = &[
        "training.checkpoint_interval=100000",
        "training.max_env_steps=100000000",
        "training.max_seconds=2",
    ];
    let out = train_in_place(dir.path(), "catch.json", "clock", budget);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("stopped: reached max_seconds = 2"), "{t}");
    let meta = latest_metadata(&run_dir);
    let elapsed = meta["counters"]["elapsed_seconds"].as_f64().unwrap();
    assert!(elapsed >= 2.0, "{elapsed}");
    let (env_steps, _) = counters(&run_dir);
    assert!(env_steps > 0);

    // The budget is the run's clock, not the segment's: a resume with the same budget stops
    // at once, one with more goes on until its clock passes it.
    let resumed = |seconds: f64| {
        resume_with(
            dir.path(),
            "clock",
            &format!("training.max_seconds={seconds}"),
            &format!("stopped: reached max_seconds = {seconds}"),
        );
        counters(&run_dir).0
    };
    assert_eq!(resumed(2.0), env_steps);
    let later = resumed(elapsed + 1.0);
    assert!(later > env_steps, "{later} after {env_steps}");
    let elapsed_after = latest_metadata(&run_dir)["counters"]["elapsed_seconds"]
        .as_f64()
        .unwrap();
    assert!(elapsed_after >= elapsed + 1.0, "{elapsed_after}");
}

#[test]
fn a_write_that_fails_part_way_keeps_the_last_good_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    // Files may grow to 120 KiB: the first checkpoints fit, and the replay snapshot outgrows it
    // as the buffer fills. SIGXFSZ is ignored, so the write fails with EFBIG instead of
    // killing the process.
    let cumind_args = [
        vec!["--config".to_string(), preset("catch.json")],
        run_in_place("limited"),
        sets(&[
            "training.checkpoint_interval=25",
            "training.max_env_steps=4000",
        ]),
        vec!["train".into(), "--no-progress".into()],
    ]
    .concat();
    let script = format!(
        "trap '' XFSZ; ulimit -f 120; exec \"$0\" {}",
        cumind_args
            .iter()
            .map(|a| format!("'{a}'"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut cmd = Command::new("bash");
    cmd.current_dir(dir.path())
        .env("RAYON_NUM_THREADS", "1")
        .args(["-c", &script, env!("CARGO_BIN_EXE_cumind")]);
    let out = cmd.output().unwrap();
    let t = text(&out);
    assert!(
        !out.status.success(),
        "the size limit was never reached:\n{t}"
    );
    assert!(
        t.contains("replay.safetensors") && t.contains("File too large"),
        "the error must name the file and the cause:\n{t}"
    );

    // The last good checkpoint loads, no temporary directory is left, and training resumes.
    let run_dir = dir.path().join("ckpt/limited");
    let (env_steps, training_steps) = counters(&run_dir);
    assert!(training_steps >= 25, "{t}");
    assert!(std::fs::read_dir(&run_dir).unwrap().all(|e| !e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .starts_with(".tmp")));
    let out = cumind(dir.path())
        .args(["eval", "--checkpoint", "ckpt/limited", "--episodes", "2"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    resume(dir.path(), "limited", env_steps + 64);
}

#[test]
fn a_damaged_latest_falls_back_to_the_newest_complete_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let out = train_in_place(
        dir.path(),
        "catch.json",
        "damaged",
        &[
            "training.checkpoint_interval=50",
            "training.max_env_steps=640",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let run_dir = dir.path().join("ckpt/damaged");
    let (env_steps, _) = counters(&run_dir);
    let newest = std::fs::read_to_string(run_dir.join("latest")).unwrap();
    std::fs::write(run_dir.join("latest"), "\0\0 not a step").unwrap();

    let out = cumind(dir.path())
        .args(["eval", "--checkpoint", "ckpt/damaged", "--episodes", "2"])
        .output()
        .unwrap();
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(
        t.contains("warning") && t.contains(newest.trim()),
        "the fallback must be announced with the directory it uses:\n{t}"
    );
    let t = resume(dir.path(), "damaged", env_steps + 64);
    assert!(t.contains("warning"), "{t}");
}

/// Sends SIGTERM to a run `after` it printed its first line, and returns how long it took to
/// exit and what it printed. The run must stop with a checkpoint.
fn stop_during(name: &str, keys: &[&str], after: Duration) -> (Duration, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = cumind(dir.path());
    cmd.args(run_in_place(name))
        .args(sets(keys))
        .args(["train", "--no-progress"]);
    let mut run = Watched::spawn(cmd);
    run.wait_for_line("training ", Duration::from_secs(60));
    std::thread::sleep(after);
    let sent_at = std::time::Instant::now();
    let sent = Command::new("kill")
        .args(["-TERM", &run.child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let (status, t) = run.finish();
    let took = sent_at.elapsed();
    assert!(status.success(), "{name}: {t}");
    assert!(t.contains("stopped: interrupted"), "{name}: {t}");
    assert!(
        dir.path().join("ckpt").join(name).join("latest").is_file(),
        "{name}: no checkpoint\n{t}"
    );
    (took, t)
}

/// A stop arriving during an evaluation is acted on before the evaluation ends: here one
/// evaluation is 256 MountainCar episodes of 200 steps with 500 simulations a move, about 40
/// s on one core, checked before every step of 0.2 s. The bound is far under the evaluation
/// and far over a step.
#[test]
fn sigterm_during_an_evaluation_stops_the_run_before_the_evaluation_ends() {
    let (took, t) = stop_during(
        "during_eval",
        &[
            "environment.env_name=MountainCar-v0",
            "training.stop_return=0",
            "training.eval_interval=200",
            "training.eval_episodes=256",
            "mcts.eval_simulations=500",
            "training.max_env_steps=100000",
        ],
        Duration::from_secs(2),
    );
    assert!(!t.contains("eval @"), "the evaluation ran to its end:\n{t}");
    assert!(
        took < Duration::from_secs(20),
        "took {took:?} to stop:\n{t}"
    );
}

/// A stop arriving during a long burst of training steps (3,200 steps of batch 1,024 owed
/// after each actor step, about 50 s) is acted on between two steps.
#[test]
fn sigterm_during_a_burst_of_training_steps_stops_the_run_before_the_burst_ends() {
    let (took, t) = stop_during(
        "during_burst",
        &[
            "training.train_ratio=200",
            "training.batch_size=1024",
            "memory.min_memory_size=100",
            "training.eval_interval=0",
            "training.checkpoint_interval=1000000",
            "training.max_env_steps=100000",
        ],
        Duration::from_secs(4),
    );
    assert!(
        took < Duration::from_secs(20),
        "took {took:?} to stop:\n{t}"
    );
}

/// A stop arriving during a self-play step's search abandons the search, on actor threads
/// (the default) and in the learner's own thread: here the first step alone (256 games,
/// 2,000 simulations of a network with 1,024-wide layers: about 100 s on two cores) is
/// stopped 2 s in, so the checkpoint holds no environment step at all, where a step run to
/// its end would have stored 256.
#[test]
fn sigterm_during_a_self_play_step_abandons_its_search() {
    for actors in ["1", "0"] {
        let (_, t) = stop_during(
            &format!("during_step_{actors}"),
            &[
                &format!("self_play.num_actors={actors}"),
                "network_architecture.hidden_dim=1024",
                "network_architecture.num_blocks=4",
                "environment.num_envs=256",
                "mcts.num_simulations=2000",
                "training.eval_interval=0",
                "training.max_env_steps=100000",
            ],
            Duration::from_secs(2),
        );
        assert!(
            t.contains("| 0 env steps, 0 training steps"),
            "{actors} actors: {t}"
        );
    }
}
