//! `--device auto`, and a one-line note when `--device cuda` is given a network that the
//! measured rule (`cumind::network::cost`) says runs faster on the CPU.

use anyhow::Result;

use cumind::components::{network_spec, EnvInfo};
use cumind::config::{Config, DeviceKind};
use cumind::network::cost::{gpu_pays, recurrent_flops, GPU_THRESHOLD_FLOPS};

/// What the rule says of a network at a batch.
struct Verdict {
    /// Floating-point operations of one recurrent inference of the whole batch.
    flops: f64,
    gpu_pays: bool,
}

fn verdict(config: &Config, batch: usize) -> Result<Verdict> {
    let env = EnvInfo::of(config)?;
    let flops = recurrent_flops(&network_spec(config, &env)) * batch.max(1) as f64;
    Ok(Verdict {
        flops,
        gpu_pays: gpu_pays(flops),
    })
}

/// The GPUs this binary can open (those `CUDA_VISIBLE_DEVICES` leaves visible; 0 without the
/// `cuda` feature or a driver).
pub fn gpu_count() -> usize {
    #[cfg(feature = "cuda")]
    {
        candle_core::cuda_backend::cudarc::driver::CudaContext::device_count()
            .map(|n| n.max(0) as usize)
            .unwrap_or(0)
    }
    #[cfg(not(feature = "cuda"))]
    0
}

/// Whether this binary can open a GPU: built with `cuda` and a device present.
fn gpu_present() -> bool {
    gpu_count() > 0
}

/// The device `kind` stands for when `config`'s network runs at `batch` positions per call
/// (`what` names the batch in the messages): `auto` becomes GPU 0 where the rule says a GPU
/// pays and one is present, else the CPU, with a line saying which and why; `cuda` on a
/// network the rule gives to the CPU stays `cuda`, with a line saying so.
pub fn resolve(kind: DeviceKind, config: &Config, batch: usize, what: &str) -> Result<DeviceKind> {
    let describe = |v: &Verdict| {
        format!(
            "{:.1} MFLOP per recurrent inference at {what} {batch}; a GPU pays above {:.0} MFLOP \
             (docs/benchmarks.md, \"Choosing the device\")",
            v.flops / 1e6,
            GPU_THRESHOLD_FLOPS / 1e6,
        )
    };
    match kind {
        DeviceKind::Auto => {
            let v = verdict(config, batch)?;
            let chosen = if v.gpu_pays && gpu_present() {
                DeviceKind::Cuda(0)
            } else {
                DeviceKind::Cpu
            };
            let why = if v.gpu_pays && chosen == DeviceKind::Cpu {
                "no GPU is available to this binary, ".to_string()
            } else {
                String::new()
            };
            eprintln!("device auto: {chosen} ({why}{})", describe(&v));
            Ok(chosen)
        }
        DeviceKind::Cuda(_) => {
            let v = verdict(config, batch)?;
            if !v.gpu_pays {
                eprintln!(
                    "note: this network is likely faster on the CPU ({}); `--device cpu` or \
                     `--device auto` would use it",
                    describe(&v)
                );
            }
            Ok(kind)
        }
        DeviceKind::Cpu => Ok(kind),
    }
}
