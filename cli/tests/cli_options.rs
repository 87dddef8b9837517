//! Every `--config` and `--set` counts wherever it stands (before the subcommand, after
//! it, or both), in the order written; input a command would not read is refused or warned
//! about. Each test drives the real binary in its own temporary directory.

mod common;

use std::path::Path;

use common::{assert_fails_with, cumind, latest_metadata, preset, text};

/// `cumind <args>` must succeed; its stdout parsed as the printed configuration.
fn config_of(dir: &Path, args: &[&str]) -> serde_json::Value {
    let out = cumind(dir).args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn set_before_after_and_on_both_sides_of_config() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // The command that once lost the `--set` before the subcommand.
    let json = config_of(
        d,
        &[
            "--set",
            "mcts.num_simulations=7",
            "config",
            "--set",
            "other.seed=3",
        ],
    );
    assert_eq!(json["MCTS"]["num_simulations"], 7);
    assert_eq!(json["Other"]["seed"], 3);

    let before = config_of(d, &["--set", "other.seed=5", "config"]);
    assert_eq!(before["Other"]["seed"], 5);
    let after = config_of(d, &["config", "--set", "other.seed=6"]);
    assert_eq!(after["Other"]["seed"], 6);
    // Several on each side, all kept.
    let many = config_of(
        d,
        &[
            "--set",
            "other.seed=8",
            "--set",
            "training.batch_size=32",
            "config",
            "--set",
            "mcts.num_simulations=9",
            "--set",
            "environment.num_envs=3",
        ],
    );
    assert_eq!(many["Other"]["seed"], 8);
    assert_eq!(many["Training"]["batch_size"], 32);
    assert_eq!(many["MCTS"]["num_simulations"], 9);
    assert_eq!(many["Environment"]["num_envs"], 3);
    // The same key on both sides: the one written last wins.
    let last = config_of(
        d,
        &["--set", "other.seed=1", "config", "--set", "other.seed=2"],
    );
    assert_eq!(last["Other"]["seed"], 2);
}

#[test]
fn config_files_on_both_sides_layer_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("a.json"),
        r#"{"Training": {"batch_size": 16}, "Other": {"seed": 11}}"#,
    )
    .unwrap();
    std::fs::write(d.join("b.json"), r#"{"Other": {"seed": 12}}"#).unwrap();
    let json = config_of(d, &["--config", "a.json", "config", "--config", "b.json"]);
    assert_eq!(json["Training"]["batch_size"], 16, "a.json was dropped");
    assert_eq!(json["Other"]["seed"], 12, "b.json, written last, wins");
    let json = config_of(d, &["--config", "b.json", "config", "--config", "a.json"]);
    assert_eq!(json["Other"]["seed"], 11);
    // A preset before the subcommand and a --set after it.
    let json = config_of(
        d,
        &[
            "--config",
            &preset("catch.json"),
            "config",
            "--set",
            "other.seed=4",
        ],
    );
    assert_eq!(json["Environment"]["env_name"], "Catch");
    assert_eq!(json["Other"]["seed"], 4);
}

/// The configuration a training run stored in its latest checkpoint.
fn stored_config(run: &Path) -> serde_json::Value {
    latest_metadata(run)["config"].clone()
}

#[test]
fn train_stores_every_set_from_both_sides() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let catch = preset("catch.json");
    let out = cumind(d)
        .args([
            "--config",
            &catch,
            "--set",
            "mcts.num_simulations=3",
            "--set",
            "training.max_env_steps=64",
            "train",
            "--no-progress",
            "--set",
            "other.run_name=both",
            "--set",
            "training.checkpoint_root_dir=ckpt",
            "--set",
            "other.log_dir=runs",
            "--set",
            "training.eval_interval=0",
            "--seed",
            "9",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let stored = stored_config(&d.join("ckpt/both"));
    assert_eq!(stored["MCTS"]["num_simulations"], 3);
    assert_eq!(stored["Training"]["max_env_steps"], 64);
    assert_eq!(stored["Other"]["run_name"], "both");
    assert_eq!(stored["Other"]["seed"], 9);
    assert_eq!(stored["Environment"]["env_name"], "Catch");
    assert!(
        text(&out).contains("reached max_env_steps = 64"),
        "{}",
        text(&out)
    );

    // Resume with a --set on each side: both reach the stored configuration.
    let out = cumind(d)
        .args([
            "--set",
            "training.max_env_steps=96",
            "train",
            "--no-progress",
            "--resume",
            "ckpt/both",
            "--set",
            "mcts.num_simulations=4",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("96 env steps"), "{}", text(&out));
    let stored = stored_config(&d.join("ckpt/both"));
    assert_eq!(stored["Training"]["max_env_steps"], 96);
    assert_eq!(stored["MCTS"]["num_simulations"], 4);

    // A dedicated flag and a --set on the same key: refused, naming both.
    let out = cumind(d)
        .args(["train", "--seed", "3", "--set", "other.seed=4"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out).contains("--seed 3") && text(&out).contains("other.seed"),
        "{}",
        text(&out)
    );

    // eval takes mcts.* keys from either side and refuses the rest.
    for args in [
        vec!["--set", "mcts.num_simulations=2", "eval"],
        vec!["eval", "--set", "mcts.num_simulations=2"],
    ] {
        let out = cumind(d)
            .args(&args)
            .args(["--checkpoint", "ckpt/both", "--episodes", "2"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", text(&out));
    }
    for args in [
        vec!["--set", "training.batch_size=8", "eval"],
        vec!["eval", "--set", "other.seed=1"],
    ] {
        let out = cumind(d)
            .args(&args)
            .args(["--checkpoint", "ckpt/both"])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(
            text(&out).contains("reads only mcts.* keys"),
            "{}",
            text(&out)
        );
    }
    let out = cumind(d)
        .args(["eval", "--checkpoint", "ckpt/both", "--config", &catch])
        .output()
        .unwrap();
    assert_fails_with(&out, "does not take --config");
    // An invalid search value is still an error naming the key.
    let out = cumind(d)
        .args(["eval", "--checkpoint", "ckpt/both"])
        .args(["--set", "mcts.num_simulations=0"])
        .output()
        .unwrap();
    assert_fails_with(&out, "mcts.num_simulations");
}

#[test]
fn benchmark_takes_sets_from_both_sides_and_warns_about_unread_keys() {
    let dir = tempfile::tempdir().unwrap();
    let out = cumind(dir.path())
        .args([
            "--set",
            "mcts.num_simulations=3",
            "--set",
            "training.max_env_steps=5",
            "benchmark",
            "--set",
            "network_architecture.hidden_dim=24",
            "--no-training",
            "--dtypes",
            "float32",
            "--batch-sizes",
            "2",
            "--repetitions",
            "1",
            "--warmup",
            "0",
            "--out",
            "bench.json",
        ])
        .output()
        .unwrap();
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("hidden 24"), "{t}");
    assert!(t.contains("3 simulations"), "{t}");
    // The device as `--device` names it (candle's Debug form said `Cpu`, or `DeviceId(1)` for
    // GPU 0).
    assert!(t.contains("device cpu |"), "{t}");
    assert!(
        t.contains("`training.max_env_steps` has no effect on `benchmark`"),
        "{t}"
    );
}

#[test]
fn keys_the_run_would_not_read_are_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Gumbel MuZero (the default) reads no pUCT constant.
    let out = cumind(d)
        .args(["config", "--set", "mcts.c_puct=2.0"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning: `mcts.c_puct` = 2.0 has no effect") && err.contains("search_policy"),
        "{err}"
    );
    // The same key under pUCT is read: no warning.
    let out = cumind(d)
        .args(["config", "--set", "mcts.search_policy=puct"])
        .args(["--set", "mcts.c_puct=2.0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("c_puct"), "{err}");
    // An environment variable counts as explicit too.
    let out = cumind(d)
        .args(["config"])
        .env("CUMIND_MCTS__GUMBEL_C_SCALE", "1.0")
        .env("CUMIND_MCTS__SEARCH_POLICY", "puct")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`mcts.gumbel_c_scale`"), "{err}");
    // The shipped presets and defaults set nothing that goes unread.
    for args in [
        vec!["config".to_string()],
        vec!["--config".into(), preset("catch.json"), "config".into()],
        vec!["--config".into(), preset("tictactoe.json"), "config".into()],
        vec!["--config".into(), preset("cartpole.json"), "config".into()],
        vec![
            "--config".into(),
            preset("cartpole_sample_efficient.json"),
            "config".into(),
        ],
        vec!["--config".into(), preset("connect4.json"), "config".into()],
        vec![
            "--config".into(),
            preset("connect4_gpu.json"),
            "config".into(),
        ],
    ] {
        let out = cumind(d).args(&args).output().unwrap();
        assert!(out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("warning"), "{args:?}: {err}");
    }
}

/// `train --env` and `--env-kwargs` set `environment.env_name` and `environment.env_kwargs`:
/// the run trains the named environment; keyword arguments for a built-in environment, a
/// `--set` on the same key, or a Gymnasium name in a build without Python are refused with
/// the reason.
#[test]
fn train_takes_the_environment_and_its_keyword_arguments_from_flags() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let catch = preset("catch.json");
    let base = [
        "--config",
        &catch,
        "--set",
        "training.max_env_steps=64",
        "--set",
        "training.eval_interval=0",
        "--set",
        "training.checkpoint_root_dir=ckpt",
        "--set",
        "other.log_dir=runs",
    ];
    let out = cumind(d)
        .args(base)
        .args(["train", "--no-progress", "--env", "Catch"])
        .args(["--set", "other.run_name=flag"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        stored_config(&d.join("ckpt/flag"))["Environment"]["env_name"],
        "Catch"
    );

    let out = cumind(d)
        .args(base)
        .args(["train", "--env", "Catch", "--env-kwargs", r#"{"rows": 7}"#])
        .output()
        .unwrap();
    assert_fails_with(&out, "Catch takes no keyword arguments");
    let out = cumind(d)
        .args(base)
        .args([
            "train",
            "--env",
            "Catch",
            "--set",
            "environment.env_name=Catch",
        ])
        .output()
        .unwrap();
    assert_fails_with(&out, "--env Catch and --set environment.env_name");
    if !cumind::build_info::features().contains(&"python") {
        let out = cumind(d)
            .args(base)
            .args(["train", "--env", "gymnasium:Acrobot-v1"])
            .output()
            .unwrap();
        assert_fails_with(&out, "--features python");
    }
}
