//! `cumind benchmark`: inference, search and training throughput per compute dtype and batch
//! size, on any device. Warm-up first, the device synchronised inside every timed region,
//! medians reported.

use std::time::Instant;

use candle_core::{DType, Device, DeviceLocation};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::components::{self, EnvInfo};
use crate::config::Config;
use crate::model::Model;
use crate::network::cost::NetworkFlops;
use crate::network::{MuZeroNetwork, NetworkError, SearchModel};
use crate::replay::{GameHistory, ReplayBuffer};
use crate::search::{SearchInput, Searcher};
use crate::train::Learner;

/// Errors of [`measure`].
#[derive(Debug, thiserror::Error)]
pub enum BenchmarkError {
    #[error("the benchmark needs a device")]
    NoDevice,
    #[error("the configured environment is not available")]
    Environment(#[from] cumind_envs::EnvError),
    #[error("network")]
    Network(#[from] NetworkError),
    #[error("replay buffer")]
    Replay(#[from] crate::replay::ReplayError),
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchmarkPlan {
    pub dtypes: Vec<DType>,
    pub batch_sizes: Vec<usize>,
    /// Timed repetitions per measurement (the median is reported).
    pub repetitions: usize,
    /// Untimed repetitions first.
    pub warmup: usize,
    /// Also time training steps (batch and unroll from the configuration).
    pub training: bool,
    /// Devices for the training measurement: it is repeated with 1, 2, ... replicas up to
    /// `devices.len()` (the first device is the one inference and search run on).
    pub devices: Vec<Device>,
}

/// One row of the results table.
#[derive(Debug, Clone, Serialize)]
pub struct BenchmarkRow {
    pub dtype: String,
    pub batch: usize,
    /// Initial inference (representation + prediction): observations per second.
    pub initial_per_second: f64,
    /// Recurrent inference (dynamics + prediction): states per second.
    pub recurrent_per_second: f64,
    /// The search's recurrent inference ([`SearchModel`]: the parents' latents gathered,
    /// dynamics and prediction, the children's latents stored, one read of the logits;
    /// replayed from a CUDA graph where `device.cuda_graphs` allows): states per second.
    pub search_recurrent_per_second: f64,
    /// A whole search (initial inference + `simulations` recurrent steps), median ms.
    pub search_ms: f64,
    /// Simulations per second: batch x simulations / search time.
    pub simulations_per_second: f64,
    /// The recurrent inferences' arithmetic rate (`network::cost`), GFLOP/s.
    pub recurrent_gflops: f64,
}

/// Training throughput for one dtype.
#[derive(Debug, Clone, Serialize)]
pub struct TrainingRow {
    pub dtype: String,
    pub replicas: usize,
    pub batch: usize,
    pub unroll_steps: usize,
    pub step_ms: f64,
    pub steps_per_second: f64,
    /// The training step's arithmetic rate (`network::cost`, the target network left out),
    /// GFLOP/s.
    pub gflops: f64,
}

/// Everything `cumind benchmark` reports.
#[derive(Debug, Clone, Serialize)]
pub struct BenchmarkReport {
    pub device: String,
    pub env_name: String,
    pub observation_shape: Vec<usize>,
    pub num_actions: usize,
    pub hidden_dim: usize,
    pub latent_dim: usize,
    pub num_blocks: usize,
    pub simulations: usize,
    /// Whether the search's host conv calls ran in bf16 (`mcts.inference_dtype` on a CPU with
    /// AVX-512 BF16): the last three columns' rows then computed their convolutions in bf16,
    /// whatever their dtype column says.
    pub search_bf16: bool,
    pub threads: String,
    pub rows: Vec<BenchmarkRow>,
    pub training: Vec<TrainingRow>,
    /// Peak resident memory of the process (CPU), in MiB; `None` where not readable.
    pub peak_rss_mib: Option<f64>,
    /// This CPU's f32 matrix-product rate, GFLOP/s: every rayon thread multiplying 512 x 512
    /// matrices at once with the `gemm` crate, the kernel the CPU's networks use (CPU runs only).
    pub cpu_matmul_gflops: Option<f64>,
}

/// This machine's f32 matrix-product rate in GFLOP/s: every thread of the rayon pool
/// multiplies its own 512 x 512 matrices (the `gemm` crate, one thread each) `rounds` times,
/// all at once; the total arithmetic over the wall time, best of three.
pub fn cpu_matmul_gflops(rounds: usize) -> f64 {
    const N: usize = 512;
    let lhs = vec![0.5f32; N * N];
    let rhs = vec![0.25f32; N * N];
    let threads = rayon::current_num_threads();
    let flops = 2.0 * (N * N * N * rounds * threads) as f64;
    (0..3)
        .map(|_| {
            let start = Instant::now();
            rayon::broadcast(|_| {
                let mut out = vec![0f32; N * N];
                for _ in 0..rounds {
                    crate::network::host_mlp::gemm_strided(
                        N,
                        N,
                        N,
                        (&lhs, N, 1),
                        (&rhs, N, 1),
                        &mut out,
                        false,
                    );
                }
                std::hint::black_box(&out);
            });
            flops / start.elapsed().as_secs_f64() / 1e9
        })
        .fold(0.0, f64::max)
}

/// `cpu`, or `cuda:N` with N the GPU's ordinal (as `--device` takes it). candle's `Debug`
/// shows the id of its device handle instead, so GPU 0 read as `DeviceId(1)`.
fn device_label(device: &Device) -> String {
    match device.location() {
        DeviceLocation::Cpu => "cpu".into(),
        DeviceLocation::Cuda { gpu_id } => format!("cuda:{gpu_id}"),
        DeviceLocation::Metal { gpu_id } => format!("metal:{gpu_id}"),
    }
}

fn dtype_name(dtype: DType) -> String {
    match dtype {
        DType::F32 => "float32".into(),
        DType::BF16 => "bfloat16".into(),
        DType::F16 => "float16".into(),
        other => format!("{other:?}"),
    }
}

/// Parse `float32`, `bfloat16`, `float16` (or f32, bf16, f16).
pub fn parse_dtype(text: &str) -> Result<DType, String> {
    match text.trim() {
        "float32" | "f32" => Ok(DType::F32),
        "bfloat16" | "bf16" => Ok(DType::BF16),
        "float16" | "f16" => Ok(DType::F16),
        other => Err(format!(
            "unknown dtype \"{other}\": use float32, bfloat16 or float16"
        )),
    }
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(|a, b| a.total_cmp(b));
    samples[samples.len() / 2]
}

/// Median seconds of `f` over `reps` runs after `warmup` runs, synchronising `device` after each.
fn time<F: FnMut() -> Result<(), NetworkError>>(
    device: &Device,
    warmup: usize,
    reps: usize,
    mut f: F,
) -> Result<f64, NetworkError> {
    for _ in 0..warmup {
        f()?;
        device.synchronize()?;
    }
    let mut samples = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        let start = Instant::now();
        f()?;
        device.synchronize()?;
        samples.push(start.elapsed().as_secs_f64());
    }
    Ok(median(samples))
}

fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// A replay buffer of random games for timing training steps: 500 steps each (a CartPole
/// episode at its limit), so nearly every position has an n-step bootstrap term and the
/// target network's pass is part of the step.
fn random_replay(
    config: &Config,
    env: &EnvInfo,
    rng: &mut StdRng,
) -> Result<ReplayBuffer, BenchmarkError> {
    let obs_len: usize = env.observation_shape.iter().product();
    let a = env.num_actions;
    let mut replay = ReplayBuffer::new(components::replay_config(config, env));
    for _ in 0..20 {
        let first: Vec<f32> = (0..obs_len).map(|_| rng.random_range(-1.0..1.0)).collect();
        let mut game = GameHistory::new(obs_len, a, &first, 0);
        for _ in 0..500 {
            let next: Vec<f32> = (0..obs_len).map(|_| rng.random_range(-1.0..1.0)).collect();
            let policy = vec![1.0 / a as f32; a];
            game.push(
                rng.random_range(0..a),
                1.0,
                rng.random_range(0.0..50.0),
                &policy,
                &next,
                0,
            );
        }
        game.finish(true, 0.0);
        replay.save_game(game)?;
    }
    Ok(replay)
}

/// A search's or search model's error as a benchmark's network error.
fn model_error(err: impl std::fmt::Display) -> NetworkError {
    NetworkError::Candle(candle_core::Error::Msg(err.to_string()))
}

/// Run the benchmark for the network and search of `config` on `device`.
pub fn measure(config: &Config, plan: &BenchmarkPlan) -> Result<BenchmarkReport, BenchmarkError> {
    if plan.devices.is_empty() {
        return Err(BenchmarkError::NoDevice);
    }
    let device = &plan.devices[0];
    let env = EnvInfo::of(config)?;
    let spec = components::network_spec(config, &env);
    let search = components::search_config(config, &env);
    let obs_len = spec.obs_len();
    let mut rng = StdRng::seed_from_u64(config.other.seed);
    let flops = NetworkFlops::of(&spec);
    let mut rows = Vec::new();
    let mut training = Vec::new();
    for &dtype in &plan.dtypes {
        let network = MuZeroNetwork::new(spec.clone(), config.other.seed, device, dtype)?;
        for &batch in &plan.batch_sizes {
            let observations: Vec<f32> = (0..batch * obs_len)
                .map(|_| rng.random_range(-0.1..0.1))
                .collect();
            let actions: Vec<usize> = (0..batch).map(|i| i % env.num_actions).collect();
            let obs_tensor = network.observation_tensor(&observations)?;
            let latent = network.represent(&obs_tensor)?;
            let one_hot = network.action_tensor(&actions)?;
            let initial = time(device, plan.warmup, plan.repetitions, || {
                let latent = network.represent(&obs_tensor)?;
                let (p, v) = network.predict(&latent)?;
                // Bring the outputs to the host, as the search does.
                p.flatten_all()?.to_vec1::<f32>()?;
                v.flatten_all()?.to_vec1::<f32>()?;
                Ok(())
            })?;
            let recurrent = time(device, plan.warmup, plan.repetitions, || {
                let (next, r) = network.dynamics(&latent, &one_hot)?;
                let (p, v) = network.predict(&next)?;
                p.flatten_all()?.to_vec1::<f32>()?;
                v.flatten_all()?.to_vec1::<f32>()?;
                r.flatten_all()?.to_vec1::<f32>()?;
                Ok(())
            })?;
            let graphs = config.device.cuda_graphs;
            let search_recurrent = {
                let mut model = SearchModel::new(&network).with_cuda_graphs(graphs);
                model.set_bf16_inference(search.bf16_inference);
                model
                    .initial_inference(&observations, batch, 2)
                    .map_err(model_error)?;
                let parents = vec![0; batch];
                time(device, plan.warmup, plan.repetitions, || {
                    model
                        .recurrent_inference(&parents, &actions, 1)
                        .map_err(model_error)?;
                    Ok(())
                })?
            };
            let masks = vec![true; batch * env.num_actions];
            let mut searcher = Searcher::new();
            let mut search_rng = StdRng::seed_from_u64(1);
            let search_time = time(device, plan.warmup.min(3), plan.repetitions, || {
                let mut model = SearchModel::new(&network).with_cuda_graphs(graphs);
                searcher
                    .run(
                        &mut model,
                        &search,
                        &SearchInput {
                            observations: &observations,
                            batch,
                            legal_masks: &masks,
                            add_noise: true,
                        },
                        &mut search_rng,
                    )
                    .map_err(model_error)?;
                Ok(())
            })?;
            rows.push(BenchmarkRow {
                dtype: dtype_name(dtype),
                batch,
                initial_per_second: batch as f64 / initial,
                recurrent_per_second: batch as f64 / recurrent,
                search_recurrent_per_second: batch as f64 / search_recurrent,
                search_ms: search_time * 1e3,
                simulations_per_second: (batch * search.num_simulations) as f64 / search_time,
                recurrent_gflops: batch as f64 * flops.recurrent() / recurrent / 1e9,
            });
        }
        if plan.training {
            let replay = random_replay(config, &env, &mut rng)?;
            let batch_size = config.training.batch_size;
            for replicas in 1..=plan.devices.len() {
                if !batch_size.is_multiple_of(replicas) {
                    continue;
                }
                let mut learner = Learner::with_devices(
                    network.clone(),
                    components::learner_config(config, 1_000_000),
                    &plan.devices[..replicas],
                )?;
                let mut sample_rng = StdRng::seed_from_u64(2);
                let step = time(device, plan.warmup.min(3), plan.repetitions, || {
                    let batch = replay.sample(batch_size, &mut sample_rng).map_err(|e| {
                        NetworkError::Candle(candle_core::Error::Msg(e.to_string()))
                    })?;
                    learner.train_step(&batch)?;
                    for d in &plan.devices[..replicas] {
                        d.synchronize()?;
                    }
                    Ok(())
                })?;
                training.push(TrainingRow {
                    dtype: dtype_name(dtype),
                    replicas,
                    batch: batch_size,
                    unroll_steps: config.self_play.num_unroll_steps,
                    step_ms: step * 1e3,
                    steps_per_second: 1.0 / step,
                    gflops: flops.training_step(batch_size, config.self_play.num_unroll_steps)
                        / step
                        / 1e9,
                });
            }
        }
    }
    Ok(BenchmarkReport {
        device: device_label(device),
        env_name: config.environment.env_name.clone(),
        observation_shape: env.observation_shape.clone(),
        num_actions: env.num_actions,
        hidden_dim: spec.hidden_dim,
        latent_dim: spec.latent_dim,
        num_blocks: spec.num_blocks,
        simulations: search.num_simulations,
        search_bf16: search.bf16_inference
            && spec.uses_conv()
            && crate::network::bf16_inference_runs_here(),
        threads: std::env::var("RAYON_NUM_THREADS").unwrap_or_else(|_| "unset".into()),
        rows,
        training,
        peak_rss_mib: peak_rss_mib(),
        cpu_matmul_gflops: device.is_cpu().then(|| cpu_matmul_gflops(20)),
    })
}

impl BenchmarkReport {
    /// ` (N% of this CPU's matrix-product rate)` where that rate was measured.
    fn share(&self, gflops: f64) -> String {
        match self.cpu_matmul_gflops {
            Some(rate) if rate > 0.0 => format!(" ({:.0}%)", 100.0 * gflops / rate),
            _ => String::new(),
        }
    }

    /// A plain-text (Markdown) table.
    pub fn table(&self) -> String {
        let mut out = format!(
            "device {} | {} obs {:?}, {} actions | hidden {}, latent {}, blocks {} | {} simulations{} | RAYON_NUM_THREADS={}\n\n",
            self.device,
            self.env_name,
            self.observation_shape,
            self.num_actions,
            self.hidden_dim,
            self.latent_dim,
            self.num_blocks,
            self.simulations,
            if self.search_bf16 {
                " (the search's convolutions in bf16)"
            } else {
                ""
            },
            self.threads
        );
        out.push_str(
            "| dtype | batch | initial inf/s | recurrent inf/s | the search's recurrent inf/s | ms/search | simulations/s | recurrent GFLOP/s |\n",
        );
        out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|\n");
        for r in &self.rows {
            out.push_str(&format!(
                "| {} | {} | {:.0} | {:.0} | {:.0} | {:.2} | {:.0} | {:.1}{} |\n",
                r.dtype,
                r.batch,
                r.initial_per_second,
                r.recurrent_per_second,
                r.search_recurrent_per_second,
                r.search_ms,
                r.simulations_per_second,
                r.recurrent_gflops,
                self.share(r.recurrent_gflops)
            ));
        }
        if !self.training.is_empty() {
            out.push_str("\n| dtype | replicas | train batch | unroll K | ms/step | steps/s | GFLOP/s |\n|---|---:|---:|---:|---:|---:|---:|\n");
            for t in &self.training {
                out.push_str(&format!(
                    "| {} | {} | {} | {} | {:.2} | {:.2} | {:.1}{} |\n",
                    t.dtype,
                    t.replicas,
                    t.batch,
                    t.unroll_steps,
                    t.step_ms,
                    t.steps_per_second,
                    t.gflops,
                    self.share(t.gflops)
                ));
            }
        }
        if let Some(rate) = self.cpu_matmul_gflops {
            out.push_str(&format!(
                "\nthis CPU's f32 matrix products: {rate:.1} GFLOP/s ({} threads, 512 x 512 each); the percentages above are of this rate\n",
                rayon::current_num_threads()
            ));
        }
        if let Some(mib) = self.peak_rss_mib {
            out.push_str(&format!("\npeak resident memory: {mib:.0} MiB\n"));
        }
        out
    }
}
