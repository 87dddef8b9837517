//! The GPU scripts' checks that need no GPU: scripts/benchmark_gpu.sh must refuse a binary
//! built without the `cuda` feature before it looks for a GPU, so these pass on any machine.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

fn benchmark_gpu(bin: &Path, out_dir: &Path) -> Output {
    Command::new("bash")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../scripts/benchmark_gpu.sh"
        ))
        .env("BIN", bin)
        .env("OUT_DIR", out_dir)
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A stand-in `cumind` that prints `version` for `--version` and does nothing otherwise.
fn fake_binary(dir: &Path, version: &str) -> std::path::PathBuf {
    let path = dir.join("cumind");
    std::fs::write(
        &path,
        format!("#!/bin/sh\n[ \"$1\" = --version ] && echo 'cumind {version}'\nexit 0\n"),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

const REFUSAL: &str = "built without the `cuda` feature";

#[test]
fn benchmark_gpu_refuses_this_cpu_build_by_its_missing_cuda_feature() {
    let dir = tempfile::tempdir().unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_cumind"));
    let out = benchmark_gpu(bin, dir.path());
    let t = text(&out);
    if cfg!(feature = "cuda") {
        assert!(!t.contains(REFUSAL), "a cuda build was refused:\n{t}");
    } else {
        assert_eq!(out.status.code(), Some(2), "{t}");
        assert!(t.contains(REFUSAL), "{t}");
        assert!(t.contains("--features cuda"), "no rebuild hint:\n{t}");
    }
}

#[test]
fn benchmark_gpu_checks_the_features_not_just_that_the_binary_runs() {
    let dir = tempfile::tempdir().unwrap();
    // Runs and answers --version, but names no cuda feature: refused.
    let cpu = fake_binary(dir.path(), "0.1.0 (features: none, CPU only)");
    let out = benchmark_gpu(&cpu, dir.path());
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains(REFUSAL), "{}", text(&out));
    // An older binary whose --version names no features at all: refused too.
    let old = fake_binary(dir.path(), "0.1.0");
    let out = benchmark_gpu(&old, dir.path());
    assert!(text(&out).contains(REFUSAL), "{}", text(&out));
    // Names cuda (and nccl): passes the feature check; what follows depends on the machine
    // (no GPU: exit 1 saying so), but it is never the feature refusal.
    let gpu = fake_binary(dir.path(), "0.1.0 (features: cuda, nccl)");
    let out = benchmark_gpu(&gpu, &dir.path().join("out"));
    assert!(!text(&out).contains(REFUSAL), "{}", text(&out));
}

#[test]
fn the_benchmark_scripts_parse() {
    for script in [
        "benchmark_gpu.sh",
        "gpu_first_run.sh",
        "compare_mctx.sh",
        "device_rule.sh",
    ] {
        let path = format!("{}/../scripts/{script}", env!("CARGO_MANIFEST_DIR"));
        let out = Command::new("bash").args(["-n", &path]).output().unwrap();
        assert!(out.status.success(), "{script}: {}", text(&out));
    }
}
