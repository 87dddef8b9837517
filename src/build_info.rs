//! What this build of CuMind can do: the cargo features it was compiled with.
//!
//! `cumind --version` prints [`version_line`], so a script can tell a CPU build from a CUDA one
//! before it looks for a GPU (scripts/benchmark_gpu.sh does).

/// The optional features compiled into this build, in a fixed order: `cuda`, `nccl`, `mpi`,
/// `python`.
pub fn features() -> Vec<&'static str> {
    let mut out = Vec::new();
    if cfg!(feature = "cuda") {
        out.push("cuda");
    }
    if cfg!(feature = "nccl") {
        out.push("nccl");
    }
    if cfg!(feature = "mpi") {
        out.push("mpi");
    }
    if cfg!(feature = "python") {
        out.push("python");
    }
    out
}

/// `0.1.0 (features: cuda, nccl)`, or `0.1.0 (features: none, CPU only)`.
pub fn version_line() -> String {
    let features = features();
    let list = if features.is_empty() {
        "none, CPU only".to_string()
    } else {
        features.join(", ")
    };
    format!("{} (features: {list})", env!("CARGO_PKG_VERSION"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_version_line_names_exactly_the_compiled_features() {
        let line = super::version_line();
        assert!(line.starts_with(env!("CARGO_PKG_VERSION")), "{line}");
        assert_eq!(line.contains("cuda"), cfg!(feature = "cuda"), "{line}");
        assert_eq!(line.contains("nccl"), cfg!(feature = "nccl"), "{line}");
        assert_eq!(line.contains("mpi"), cfg!(feature = "mpi"), "{line}");
    }
}
