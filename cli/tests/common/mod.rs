//! Helpers shared by the end-to-end tests: driving the `cumind` binary, loading presets.
#![allow(dead_code)] // each test crate uses a different subset

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Output};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

/// The `cumind` binary in `dir`, with the caller's `CUMIND_*` variables removed (they must not
/// leak into a test) and one rayon thread.
pub fn cumind(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cumind"));
    cmd.current_dir(dir);
    for (key, _) in std::env::vars() {
        if key.starts_with("CUMIND_") {
            cmd.env_remove(key);
        }
    }
    cmd.env("RAYON_NUM_THREADS", "1");
    cmd
}

/// stdout followed by stderr.
pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The command failed and said `needle` (stdout or stderr).
pub fn assert_fails_with(out: &Output, needle: &str) {
    let t = text(out);
    assert!(
        !out.status.success(),
        "succeeded, expected an error with {needle:?}:\n{t}"
    );
    assert!(t.contains(needle), "expected {needle:?} in:\n{t}");
}

/// The path of a preset in agents/.
pub fn preset(name: &str) -> String {
    format!("{}/../agents/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// The Catch preset as `cumind --config agents/catch.json` loads it, with `extra`
/// `section.key=value` overrides.
pub fn catch_config(extra: &[&str]) -> cumind::config::Config {
    cumind::config::Config::load(&cumind::config::ConfigSources {
        files: vec![std::path::PathBuf::from(preset("catch.json"))],
        text: None,
        env_vars: Vec::new(),
        sets: extra.iter().map(|s| s.to_string()).collect(),
    })
    .unwrap()
}

/// `--set` before each of `keys` (`["a=1", "b=2"]` -> `["--set", "a=1", "--set", "b=2"]`).
pub fn sets(keys: &[&str]) -> Vec<String> {
    keys.iter()
        .flat_map(|k| ["--set".to_string(), k.to_string()])
        .collect()
}

/// A run named `name` that checkpoints to `ckpt/<name>` and logs to `runs/<name>` inside the
/// test's directory, with evaluation off.
pub fn run_in_place(name: &str) -> Vec<String> {
    sets(&[
        "training.checkpoint_root_dir=ckpt",
        "other.log_dir=runs",
        &format!("other.run_name={name}"),
        "training.eval_interval=0",
    ])
}

/// `cumind --config agents/<preset> train --no-progress` run to the end in `dir` as `name`
/// ([`run_in_place`]), with `keys` (`section.key=value`) set on top.
pub fn train_in_place(dir: &Path, preset_name: &str, name: &str, keys: &[&str]) -> Output {
    cumind(dir)
        .args(["--config", &preset(preset_name)])
        .args(run_in_place(name))
        .args(sets(keys))
        .args(["train", "--no-progress"])
        .output()
        .unwrap()
}

/// The metadata.json of a run's latest checkpoint.
pub fn latest_metadata(run: &Path) -> serde_json::Value {
    let latest = std::fs::read_to_string(run.join("latest")).unwrap();
    serde_json::from_slice(&std::fs::read(run.join(latest.trim()).join("metadata.json")).unwrap())
        .unwrap()
}

/// A spawned `cumind` whose stderr lines arrive on a channel as they are written.
pub struct Watched {
    pub child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Watched {
    /// Spawn `cmd` with stdout and stderr piped; stderr is read line by line.
    pub fn spawn(mut cmd: Command) -> Self {
        let mut child = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (sender, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    return;
                }
            }
        });
        Self {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Wait (at most `timeout`) for a stderr line containing `needle`.
    pub fn wait_for_line(&mut self, needle: &str, timeout: Duration) -> String {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(_) => panic!(
                    "no line with {needle:?} within {timeout:?}; stderr so far:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
    }

    /// Wait for the process to end: its status, and stdout followed by all of stderr.
    pub fn finish(mut self) -> (std::process::ExitStatus, String) {
        let mut stdout = String::new();
        if let Some(mut out) = self.child.stdout.take() {
            out.read_to_string(&mut stdout).unwrap();
        }
        let status = self.child.wait().unwrap();
        self.seen.extend(self.lines.iter());
        (status, format!("{stdout}{}", self.seen.join("\n")))
    }
}
