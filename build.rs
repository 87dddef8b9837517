//! With the `cuda` feature, compiles the fused ops' kernels (src/network/fused_kernels.cu) to
//! PTX for `network::fused_cuda` with nvcc: `$CUDA_HOME/bin/nvcc` (or `$CUDA_PATH`'s, else
//! `nvcc` on `PATH`), for `compute_$CUDA_COMPUTE_CAP` (75 when unset: PTX is compiled on to the
//! GPU's own architecture when first loaded), with `$NVCC_CCBIN` as the host compiler when set.
//! Without the feature it does nothing.

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    #[cfg(feature = "cuda")]
    cuda::compile_kernels();
}

#[cfg(feature = "cuda")]
mod cuda {
    use std::path::PathBuf;
    use std::process::Command;

    const SOURCE: &str = "src/network/fused_kernels.cu";

    fn nvcc() -> PathBuf {
        for var in ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"] {
            if let Some(root) = std::env::var_os(var) {
                let candidate = PathBuf::from(root).join("bin").join("nvcc");
                if candidate.exists() {
                    return candidate;
                }
            }
        }
        PathBuf::from("nvcc")
    }

    pub fn compile_kernels() {
        for var in [
            "CUDA_HOME",
            "CUDA_PATH",
            "CUDA_ROOT",
            "CUDA_COMPUTE_CAP",
            "NVCC_CCBIN",
        ] {
            println!("cargo::rerun-if-env-changed={var}");
        }
        println!("cargo::rerun-if-changed={SOURCE}");
        let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
        let ptx = out_dir.join("fused_kernels.ptx");
        let cap = std::env::var("CUDA_COMPUTE_CAP").unwrap_or_else(|_| "75".into());
        // The kernels' Rust side reads it: bf16 tensor-core kernels need compute_80 or later.
        println!("cargo::rustc-env=CUMIND_PTX_ARCH={cap}");
        let nvcc = nvcc();
        let mut command = Command::new(&nvcc);
        command
            .arg("--ptx")
            .arg(format!("-arch=compute_{cap}"))
            .args(["-std=c++17", "-O3", "-o"])
            .arg(&ptx)
            .arg(SOURCE);
        if let Ok(ccbin) = std::env::var("NVCC_CCBIN") {
            command.arg("-ccbin").arg(ccbin);
        }
        let status = command.status().unwrap_or_else(|e| {
            panic!(
                "running {} to compile {SOURCE} (the `cuda` feature needs the CUDA toolkit's \
                 nvcc; see docs/gpu.md): {e}",
                nvcc.display()
            )
        });
        assert!(
            status.success(),
            "{} failed to compile {SOURCE} to PTX ({status})",
            nvcc.display()
        );
    }
}
