//! Training over real MPI processes (feature `mpi`; needs Open MPI's `mpirun`): ranks that end
//! bit-identical, a learner whose two ranks match one process on the global batch, a killed
//! rank that stops the run with an error naming it, a resume with a different number of ranks,
//! checkpoints holding every rank's replay memory, and the watchdog over work outside the
//! exchanges. The same loop with threads for ranks is tested in `tests/distributed.rs`.
//!
//! `.ci/run` installs Open MPI and runs `cargo test --release --features mpi --test mpi`.
#![cfg(feature = "mpi")]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{preset, sets, text, Watched};

const CUMIND: &str = env!("CARGO_BIN_EXE_cumind");

/// `mpirun -np <ranks> <program> <args>` on this machine: allowed as root, more ranks than
/// cores allowed, ranks not pinned to one core each.
fn mpirun(ranks: usize, program: &str, args: &[&str]) -> Command {
    mpirun_exporting(ranks, &[], program, args)
}

/// [`mpirun`], with the environment variables `exported` passed on to every rank.
fn mpirun_exporting(ranks: usize, exported: &[&str], program: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new("mpirun");
    cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .args(["-np", &ranks.to_string(), "--oversubscribe"])
        .args(["--bind-to", "none"]);
    for name in exported {
        cmd.args(["-x", name]);
    }
    cmd.arg(program).args(args);
    cmd
}

/// `cumind train` arguments for Catch, with every file under `dir`.
fn catch_args(dir: &Path, max_env_steps: u64) -> Vec<String> {
    let mut args = vec!["train".into(), "--config".into(), preset("catch.json")];
    args.extend(sets(&[
        &format!("training.max_env_steps={max_env_steps}"),
        &format!(
            "training.checkpoint_root_dir={}",
            dir.join("ckpt").display()
        ),
        &format!("other.log_dir={}", dir.join("runs").display()),
    ]));
    args.extend(["--no-progress".into(), "--distributed".into(), "mpi".into()]);
    args
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn two_ranks_train_catch_and_end_with_identical_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let args = catch_args(dir.path(), 2048);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = mpirun(2, CUMIND, &args).output().unwrap();
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    assert!(all.contains("rank 1 of 2 on "), "{all}");
    // MPI itself groups the ranks of this machine: local ranks 0 and 1 of 2.
    assert!(
        all.contains("local rank 0 of 2") && all.contains("local rank 1 of 2"),
        "{all}"
    );
    assert!(all.contains("on cpu x 2 MPI ranks"), "{all}");
    assert!(
        all.contains("2 ranks hold identical parameters after"),
        "{all}"
    );
    // The budget counts every rank's steps: 2,048 in all (64 iterations of 16 games on each
    // of the 2 ranks), 1,024 on each rank.
    assert!(
        all.contains("2048 environment steps over all ranks, 1024 per rank"),
        "{all}"
    );
    // Rank 0 alone writes: one run directory of checkpoints and one of logs.
    assert_eq!(entries(&dir.path().join("ckpt")).len(), 1, "{all}");
    assert_eq!(entries(&dir.path().join("runs")).len(), 1, "{all}");
    // Its checkpoint holds both ranks' replay memories, gathered over MPI.
    let run = dir
        .path()
        .join("ckpt")
        .join(&entries(&dir.path().join("ckpt"))[0]);
    let ckpt = cumind::checkpoint::load(&run, &candle_core::Device::Cpu).unwrap();
    assert_eq!(
        cumind::checkpoint::replay_shards(&ckpt.metadata),
        2,
        "{all}"
    );
    let shard = cumind::checkpoint::load_replay_shard(&ckpt.dir, &ckpt.metadata, 1).unwrap();
    assert!(shard.num_games() > 0, "{all}");
}

/// The rank body of the next test, run by it under mpirun in a copy of this test binary.
const RANK_BODY: &str = "CUMIND_MPI_TEST_RANK_BODY";

/// Under mpirun (`RANK_BODY` set), each rank trains the shared tiny learner on its half of
/// every batch, averaging gradients over MPI, and checks that it ends with exactly rank 0's
/// parameters and within 1e-4 of one process trained on the whole batches; launched without
/// `RANK_BODY`, the test starts two ranks of itself and checks that both passed.
#[test]
fn under_mpi_two_ranks_match_one_learner_on_the_global_batch() {
    use cumind::distributed::Collective;
    use cumind::testing::learner::{config, network, replay, weights};
    use cumind::train::{Learner, ValueTarget};
    use rand::SeedableRng;

    if std::env::var_os(RANK_BODY).is_none() {
        let me = std::env::current_exe().unwrap();
        let out = mpirun_exporting(
            2,
            &[RANK_BODY],
            me.to_str().unwrap(),
            &[
                "--exact",
                "under_mpi_two_ranks_match_one_learner_on_the_global_batch",
                "--nocapture",
                "--test-threads=1",
            ],
        )
        .env(RANK_BODY, "1")
        .output()
        .unwrap();
        let all = text(&out);
        assert!(out.status.success(), "{all}");
        for rank in 0..2 {
            assert!(
                all.contains(&format!("rank {rank} of 2: parameters match")),
                "{all}"
            );
        }
        return;
    }

    let steps = 6;
    let world =
        cumind::distributed::mpi::MpiWorld::init(Duration::from_secs(120)).expect("MPI starts");
    let (rank, size) = (world.rank(), world.size());
    assert_eq!(size, 2);
    let train = |learner: &mut Learner, shard: Option<usize>| {
        let replay = replay();
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        for _ in 0..steps {
            let batch = replay.sample(12, &mut rng).unwrap();
            match shard {
                Some(rank) => learner.train_step(&batch.split(2).unwrap().swap_remove(rank)),
                None => learner.train_step(&batch),
            }
            .unwrap();
        }
    };
    let mut alone = Learner::new(network(), config(ValueTarget::TargetNetwork)).unwrap();
    train(&mut alone, None);
    // Rank 1 starts from other weights: joining the group gives it rank 0's.
    let start = if rank == 0 {
        network()
    } else {
        let spec = cumind::testing::specs::tiny_spec(vec![4], 2);
        cumind::network::MuZeroNetwork::new(
            spec,
            99,
            &candle_core::Device::Cpu,
            candle_core::DType::F32,
        )
        .unwrap()
    };
    let mut learner = Learner::new(start, config(ValueTarget::TargetNetwork)).unwrap();
    // MPI is called from this thread only.
    #[allow(clippy::arc_with_non_send_sync)]
    let world = std::sync::Arc::new(world);
    learner.set_collective(world).unwrap();
    train(&mut learner, Some(rank));
    let difference = learner.max_difference_from_rank_0().unwrap();
    assert_eq!(difference, 0.0, "rank {rank} differs from rank 0");
    let worst = weights(learner.network())
        .iter()
        .zip(&weights(alone.network()))
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(
        worst < 1e-4,
        "rank {rank} differs from one learner by {worst}"
    );
    println!(
        "rank {rank} of {size}: parameters match (largest difference from one process {worst:e})"
    );
}

/// A 2-rank Catch run with a budget it will not reach, stopped by `signal` (`kill -SIGNAL`)
/// to rank 1 once rank 0 has written a checkpoint. Returns whether mpirun succeeded and all
/// it printed.
fn signal_rank_1(dir: &Path, signal: &str, extra: &[&str]) -> (bool, String) {
    let args = catch_args(dir, 10_000_000);
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    args.extend_from_slice(extra);
    let mut run = Watched::spawn(mpirun(2, CUMIND, &args));
    // Searched anywhere in the line: another rank's output may share it.
    let line = run.wait_for_line("rank 1 of 2 on ", Duration::from_secs(120));
    let after = &line[line.find("rank 1 of 2 on ").unwrap()..];
    let pid: String = after[after.find("(pid ").unwrap() + 5..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    // Wait for a first checkpoint (every 500 training steps).
    let started = Instant::now();
    while !ckpt_has_step(&dir.join("ckpt")) {
        if let Some(status) = run.child.try_wait().unwrap() {
            panic!(
                "the run ended ({status}) before rank 1 was signalled:\n{}",
                run.finish().1
            );
        }
        if started.elapsed() > Duration::from_secs(120) {
            let _ = run.child.kill();
            panic!("no checkpoint after 120 s:\n{}", run.finish().1);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let sent = Command::new("kill")
        .args([&format!("-{signal}"), &pid])
        .status()
        .unwrap();
    assert!(sent.success());
    let signalled_at = Instant::now();
    while run.child.try_wait().unwrap().is_none() {
        if signalled_at.elapsed() > Duration::from_secs(60) {
            let _ = run.child.kill();
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
            panic!("the run did not stop within 60 s of SIG{signal} to rank 1");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // A stopped rank that mpirun failed to end must not outlive the test.
    let _ = Command::new("kill")
        .args(["-KILL", &pid])
        .stderr(Stdio::null())
        .status();
    let (status, all) = run.finish();
    (status.success(), all)
}

// In both tests below the line looked for can only come after the signal: mpirun names a lost
// rank once it has died, and the watchdog speaks once a rank has waited past its timeout.

#[test]
fn a_stalled_rank_makes_the_others_stop_after_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, all) = signal_rank_1(dir.path(), "STOP", &["--distributed-timeout", "10"]);
    assert!(!ok, "{all}");
    assert!(
        all.lines()
            .any(|l| l.contains("rank 0 of 2 waited") && l.contains("timeout 10 s")),
        "rank 0 reports the stall:\n{all}"
    );
}

#[test]
fn a_killed_rank_stops_the_run_with_its_name_and_the_run_resumes_on_four_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, all) = signal_rank_1(dir.path(), "KILL", &[]);
    assert!(!ok, "{all}");
    assert!(
        all.contains("process rank 1 "),
        "mpirun names the lost rank:\n{all}"
    );
    let ckpt_root = dir.path().join("ckpt");

    // Resume the run's last checkpoint on four ranks, for 300 more training steps.
    let run = entries(&ckpt_root).pop().unwrap();
    let run_dir = ckpt_root.join(&run);
    let resumed_from: u64 = step_dirs(&run_dir).last().unwrap().parse().unwrap();
    let out = mpirun(
        4,
        CUMIND,
        &[
            "train",
            "--resume",
            run_dir.to_str().unwrap(),
            "--set",
            "training.max_env_steps=0",
            "--set",
            &format!("training.max_training_steps={}", resumed_from + 300),
            "--no-progress",
            "--distributed",
            "mpi",
        ],
    )
    .output()
    .unwrap();
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    assert!(all.contains("on cpu x 4 MPI ranks"), "{all}");
    assert!(
        all.contains("4 ranks hold identical parameters after"),
        "{all}"
    );
    let last: u64 = step_dirs(&run_dir).last().unwrap().parse().unwrap();
    assert!(
        last >= resumed_from + 300,
        "resumed at training step {resumed_from}, last checkpoint at {last}:\n{all}"
    );
}

fn step_dirs(run_dir: &Path) -> Vec<String> {
    let mut steps: Vec<String> = entries(run_dir)
        .into_iter()
        .filter_map(|n| n.strip_prefix("step-").map(str::to_string))
        .collect();
    steps.sort();
    steps
}

fn ckpt_has_step(root: &Path) -> bool {
    entries(root)
        .iter()
        .any(|run| !step_dirs(&root.join(run)).is_empty())
}

/// The body of the next test under mpirun, run by it in a copy of this test binary.
const WATCH_BODY: &str = "CUMIND_MPI_TEST_WATCH_BODY";

/// Work outside the MPI exchanges that waits on the other ranks (`Collective::watched`: what
/// an NCCL reduction over every rank's GPUs runs under) is under the same watchdog: here rank
/// 0's watched work stalls past a 2 s timeout, and the rank stops with the watchdog's message
/// naming that work, which ends the run.
#[test]
fn watched_work_that_stalls_past_the_timeout_stops_the_run() {
    use cumind::distributed::Collective;

    if std::env::var_os(WATCH_BODY).is_none() {
        let me = std::env::current_exe().unwrap();
        let out = mpirun_exporting(
            2,
            &[WATCH_BODY],
            me.to_str().unwrap(),
            &[
                "--exact",
                "watched_work_that_stalls_past_the_timeout_stops_the_run",
                "--nocapture",
                "--test-threads=1",
            ],
        )
        .env(WATCH_BODY, "1")
        .output()
        .unwrap();
        let all = text(&out);
        assert!(!out.status.success(), "{all}");
        assert!(
            all.lines().any(|l| l.contains("rank 0 of 2 waited")
                && l.contains("in the test's stalled work")
                && l.contains("timeout 2 s")),
            "{all}"
        );
        return;
    }

    let world =
        cumind::distributed::mpi::MpiWorld::init(Duration::from_secs(2)).expect("MPI starts");
    if world.rank() == 0 {
        world.watched("the test's stalled work", &mut || {
            std::thread::sleep(Duration::from_secs(60))
        });
    } else {
        std::thread::sleep(Duration::from_secs(60));
    }
    panic!("rank {}: the watchdog did not stop the run", world.rank());
}
