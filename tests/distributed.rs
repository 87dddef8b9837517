//! The training loop over several ranks, with threads standing in for processes
//! (`cumind::distributed::ThreadWorld`): the ranks agree on every training step and on when to
//! stop, and end with identical parameters. The same loop over MPI processes is tested in
//! `tests/mpi.rs` (feature `mpi`).

mod common;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use candle_core::Device;
use common::catch_config;
use cumind::config::Config;
use cumind::distributed::{Collective, ThreadWorld};
use cumind::metrics::MemorySink;
use cumind::trainer::{train, RunOptions, RunSummary};

/// Train `config` on `ranks` threads; `interrupt(rank)` says which ranks start with their stop
/// flag set. Returns each rank's summary (or error text) and log lines, in rank order.
fn train_ranks(
    config: &Config,
    ranks: usize,
    interrupt: fn(usize) -> bool,
) -> Vec<(Result<RunSummary, String>, Vec<String>)> {
    let handles: Vec<_> = ThreadWorld::group(ranks)
        .into_iter()
        .map(|world| {
            let config = config.clone();
            std::thread::spawn(move || {
                let rank = world.rank();
                let options = RunOptions {
                    no_checkpoints: true,
                    stop: Arc::new(AtomicBool::new(interrupt(rank))),
                    collective: Some(Arc::new(world)),
                    ..Default::default()
                };
                let mut sink = MemorySink::default();
                let result = train(&config, &[Device::Cpu], &options, &mut sink)
                    .map_err(|e| cumind::error_chain::error_chain(&e));
                (result, sink.lines)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

fn weights(summary: &RunSummary) -> Vec<f32> {
    cumind::testing::learner::weights(&summary.network)
}

#[test]
fn two_ranks_train_in_step_and_end_identical() {
    let config = catch_config(&["training.max_env_steps=640", "training.eval_interval=0"]);
    let results = train_ranks(&config, 2, |_| false);
    let (a, a_log) = &results[0];
    let (b, _) = &results[1];
    let (a, b) = (a.as_ref().unwrap(), b.as_ref().unwrap());
    assert!(a.counters.training_steps > 0);
    assert_eq!(a.counters.training_steps, b.counters.training_steps);
    assert_eq!(a.counters.env_steps, b.counters.env_steps);
    assert_eq!(weights(a), weights(b), "the ranks diverged");
    // Different self-play on each rank: the seeds are offset by the rank.
    assert_ne!(a.counters.episodes, 0);
    assert!(
        a_log
            .iter()
            .any(|l| l.contains("2 ranks hold identical parameters")),
        "{a_log:?}"
    );
    assert!(
        a_log
            .iter()
            .any(|l| l == "2 ranks: gradients averaged on the host, through the ranks' all-reduce"),
        "{a_log:?}"
    );
    // And the rank's shard is half the batch: one rank alone trains differently.
    let alone = train(
        &config,
        &[Device::Cpu],
        &RunOptions {
            no_checkpoints: true,
            ..Default::default()
        },
        &mut MemorySink::default(),
    )
    .unwrap();
    assert_ne!(weights(&alone), weights(a));
}

/// Budgets count every rank's environment steps, and each rank keeps the configured replay
/// ratio over its own: two ranks with a budget of 640 steps play 320 each and take as many
/// training steps as one process with a budget of 320.
#[test]
fn budgets_count_every_rank_s_steps_and_the_ratio_holds_per_rank() {
    let two = catch_config(&["training.max_env_steps=640", "training.eval_interval=0"]);
    let results = train_ranks(&two, 2, |_| false);
    let (a, log) = &results[0];
    let a = a.as_ref().unwrap();
    assert_eq!(a.counters.env_steps, 640, "{log:?}");
    assert!(
        log.iter()
            .any(|l| l.contains("640 environment steps over all ranks, 320 per rank")),
        "{log:?}"
    );
    let one = catch_config(&["training.max_env_steps=320", "training.eval_interval=0"]);
    let alone = train(
        &one,
        &[Device::Cpu],
        &RunOptions {
            no_checkpoints: true,
            ..Default::default()
        },
        &mut MemorySink::default(),
    )
    .unwrap();
    assert_eq!(alone.counters.env_steps, 320);
    assert!(alone.counters.training_steps > 0);
    assert_eq!(a.counters.training_steps, alone.counters.training_steps);
    // Episodes are counted over the ranks too: both ranks hold the same count.
    let (b, _) = &results[1];
    assert_eq!(b.as_ref().unwrap().counters.episodes, a.counters.episodes);
}

/// Train `config` on `ranks` threads with checkpoints under `root` (run `name`), resuming from
/// `resume` when given; returns rank 0's summary.
fn train_ranks_saving(
    config: &Config,
    ranks: usize,
    name: &str,
    resume: Option<std::path::PathBuf>,
) -> RunSummary {
    let handles: Vec<_> = ThreadWorld::group(ranks)
        .into_iter()
        .map(|world| {
            let (config, name, resume) = (config.clone(), name.to_string(), resume.clone());
            std::thread::spawn(move || {
                let options = RunOptions {
                    resume,
                    run_name: Some(name),
                    collective: Some(Arc::new(world)),
                    ..Default::default()
                };
                train(
                    &config,
                    &[Device::Cpu],
                    &options,
                    &mut MemorySink::default(),
                )
                .map_err(|e| cumind::error_chain::error_chain(&e))
            })
        })
        .collect();
    let mut results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    for r in &results {
        assert!(r.is_ok(), "{:?}", r.as_ref().err());
    }
    results.remove(0).unwrap()
}

/// The games of each replay shard in a run's newest checkpoint.
fn shard_games(run_dir: &std::path::Path) -> Vec<usize> {
    use cumind::checkpoint;
    let ckpt = checkpoint::load(run_dir, &Device::Cpu).unwrap();
    (0..checkpoint::replay_shards(&ckpt.metadata))
        .map(|rank| match rank {
            0 => ckpt.replay.as_ref().unwrap().num_games(),
            r => checkpoint::load_replay_shard(&ckpt.dir, &ckpt.metadata, r)
                .unwrap()
                .num_games(),
        })
        .collect()
}

/// Every rank's replay memory is saved, a shard per rank, and a resumed run deals the shards
/// out over its own ranks: on four ranks the third and fourth start empty, on one rank it
/// holds every game of both shards.
#[test]
fn every_rank_s_replay_is_saved_and_dealt_out_on_resume_at_any_rank_count() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display().to_string();
    let config = catch_config(&[
        "training.max_env_steps=640",
        "training.eval_interval=0",
        &format!("training.checkpoint_root_dir={root}"),
    ]);
    let two = train_ranks_saving(&config, 2, "two", None);
    let games = shard_games(&two.run_dir);
    assert_eq!(games.len(), 2, "one shard per rank");
    assert!(games.iter().all(|&g| g > 0), "{games:?}");
    // The budget is spent: each resumed run saves at once what it resumed with.
    let four = train_ranks_saving(&config, 4, "two", Some(two.run_dir.clone()));
    assert_eq!(shard_games(&four.run_dir), vec![games[0], games[1], 0, 0]);
    let one = train(
        &config,
        &[Device::Cpu],
        &RunOptions {
            resume: Some(four.run_dir.clone()),
            run_name: Some("two".into()),
            ..Default::default()
        },
        &mut MemorySink::default(),
    )
    .unwrap();
    assert_eq!(shard_games(&one.run_dir), vec![games[0] + games[1]]);
}

#[test]
fn rank_0s_evaluation_stops_every_rank_at_the_same_step() {
    // A stop_return every evaluation reaches: rank 0 stops the run at its first evaluation.
    let config = catch_config(&[
        "training.max_env_steps=4000",
        "training.eval_interval=320",
        "training.eval_episodes=2",
        "training.stop_return=-1",
    ]);
    let results = train_ranks(&config, 2, |_| false);
    let a = results[0].0.as_ref().unwrap();
    let b = results[1].0.as_ref().unwrap();
    assert!(
        a.stop_reason.contains("reached stop_return"),
        "{}",
        a.stop_reason
    );
    assert_eq!(b.stop_reason, "rank 0's evaluation reached stop_return");
    assert_eq!(a.counters.env_steps, b.counters.env_steps);
    assert!(a.counters.env_steps < 4000);
    assert!(
        a.last_eval.is_some() && b.last_eval.is_none(),
        "only rank 0 evaluates"
    );
}

#[test]
fn an_interrupt_on_one_rank_stops_them_all() {
    let config = catch_config(&["training.max_env_steps=4000", "training.batch_size=63"]);
    let results = train_ranks(&config, 3, |rank| rank == 2);
    for (rank, (result, _)) in results.iter().enumerate() {
        let summary = result.as_ref().unwrap();
        assert_eq!(summary.counters.env_steps, 0, "rank {rank} went on");
        let want = if rank == 2 {
            "interrupted"
        } else {
            "another rank was interrupted"
        };
        assert_eq!(summary.stop_reason, want, "rank {rank}");
    }
}

#[test]
fn a_batch_that_does_not_split_over_the_ranks_is_refused_on_every_rank() {
    let config = catch_config(&["training.batch_size=63"]);
    for (rank, (result, _)) in train_ranks(&config, 2, |_| false).iter().enumerate() {
        let err = result.as_ref().err().expect("refused");
        assert!(
            err.contains("batch_size = 63") && err.contains("2 ranks"),
            "rank {rank}: {err}"
        );
    }
}
