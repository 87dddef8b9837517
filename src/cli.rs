//! Command-line interface: argument parsing and dispatch, and nothing else.
//!
//! This is the only place that picks a device; library code receives it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use candle_core::Device;
use clap::{Args, Parser, Subcommand};

use crate::checkpoint;
use crate::config::{parse_device, Config, ConfigSources, DeviceKind};
use crate::metrics::TensorBoardSink;
use crate::selfplay::evaluate;
use crate::train::run::{train, RunOptions};

/// CuMind: a MuZero-style agent that learns a model of its environment and plans inside it.
#[derive(Debug, Parser)]
#[command(name = "cumind", version, about, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    pub config: ConfigArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Options shared by every subcommand that reads the configuration.
#[derive(Debug, Args)]
pub struct ConfigArgs {
    /// A configuration file (JSON) layered over the embedded defaults, e.g. agents/catch.json.
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Override one key: --set section.key=value (repeatable; value parsed as JSON, else a string).
    #[arg(long = "set", global = true, value_name = "SECTION.KEY=VALUE")]
    pub sets: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the effective configuration as JSON (defaults <- --config <- CUMIND_* <- --set).
    Config,
    /// Train an agent (default: CartPole-v1 on the CPU from the embedded configuration).
    Train(TrainArgs),
    /// Play greedy episodes with a trained agent and print the mean and std of the return.
    Eval(EvalArgs),
    /// Play a two-player board game against a trained agent in the terminal.
    Play(PlayArgs),
    /// Measure inference, search and training throughput per dtype and batch size.
    Benchmark(BenchmarkArgs),
}

#[derive(Debug, Args)]
pub struct BenchmarkArgs {
    /// Device: cpu, cuda or cuda:N (overrides device.device_type).
    #[arg(long)]
    pub device: Option<String>,
    /// Compute dtypes to compare, comma-separated.
    #[arg(long, default_value = "float32,bfloat16", value_delimiter = ',')]
    pub dtypes: Vec<String>,
    /// Search/inference batch sizes, comma-separated.
    #[arg(long, default_value = "1,16,64,256", value_delimiter = ',')]
    pub batch_sizes: Vec<usize>,
    /// Timed repetitions per measurement (medians are reported).
    #[arg(long, default_value_t = 15)]
    pub repetitions: usize,
    /// Untimed warm-up repetitions.
    #[arg(long, default_value_t = 5)]
    pub warmup: usize,
    /// Skip the training-step measurement.
    #[arg(long)]
    pub no_training: bool,
    /// Measure training with 1..=N model replicas (N CPU replicas, or N consecutive GPUs).
    #[arg(long, default_value_t = 1)]
    pub num_devices: usize,
    /// Write the results as JSON here.
    #[arg(long, default_value = "benchmark.json")]
    pub out: PathBuf,
}

#[derive(Debug, Args)]
pub struct PlayArgs {
    /// Checkpoint of the agent (a run directory or a step directory).
    #[arg(long, value_name = "DIR")]
    pub checkpoint: PathBuf,
    /// Let the agent move first.
    #[arg(long)]
    pub second: bool,
}

#[derive(Debug, Args)]
pub struct TrainArgs {
    /// Continue a run from its checkpoint (a run directory or one of its step directories);
    /// the run's stored configuration is used.
    #[arg(long, value_name = "DIR")]
    pub resume: Option<PathBuf>,
    /// Device: cpu, cuda or cuda:N (overrides device.device_type).
    #[arg(long)]
    pub device: Option<String>,
    /// Model replicas (overrides device.num_devices).
    #[arg(long)]
    pub num_devices: Option<usize>,
    /// Random seed (overrides other.seed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Hide the progress bar.
    #[arg(long)]
    pub no_progress: bool,
}

#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Checkpoint to evaluate (a run directory or a step directory).
    #[arg(long, value_name = "DIR")]
    pub checkpoint: PathBuf,
    /// Episodes to play.
    #[arg(long, default_value_t = 20)]
    pub episodes: usize,
    /// Seed of the evaluation episodes.
    #[arg(long, default_value_t = 12345)]
    pub seed: u64,
    /// Device: cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: String,
}

impl ConfigArgs {
    /// Load and validate the layered configuration, with extra `--set` style overrides.
    pub fn load_with(&self, extra: Vec<String>) -> Result<Config> {
        let mut sets = self.sets.clone();
        sets.extend(extra);
        let sources = ConfigSources {
            file: self.config.clone(),
            text: None,
            env_vars: std::env::vars().collect(),
            sets,
        };
        Config::load(&sources).context("invalid configuration")
    }
}

/// Open the device named by `text` (the only place a device is chosen).
pub fn open_device(text: &str) -> Result<Device> {
    match parse_device(text).map_err(anyhow::Error::msg)? {
        DeviceKind::Cpu => Ok(Device::Cpu),
        DeviceKind::Cuda(index) => {
            if !candle_core::utils::cuda_is_available() {
                bail!(
                    "device `{text}` asked for, but this cumind was built without the `cuda` feature: \
                     rebuild with `cargo build --release --features cuda` (see README, \"GPU build\")"
                );
            }
            Device::new_cuda(index).with_context(|| {
                format!("cannot open CUDA device {index} (is a GPU with a driver present?)")
            })
        }
    }
}

/// `count` devices starting at the one named by `text`: on the CPU, `count` CPU replicas; on
/// CUDA, consecutive GPUs from the given index.
pub fn open_devices(text: &str, count: usize) -> Result<Vec<Device>> {
    match parse_device(text).map_err(anyhow::Error::msg)? {
        DeviceKind::Cpu => Ok(vec![Device::Cpu; count.max(1)]),
        DeviceKind::Cuda(first) => (first..first + count.max(1))
            .map(|i| open_device(&format!("cuda:{i}")))
            .collect(),
    }
}

/// Give rayon and candle an explicit thread count before any thread starts: with
/// RAYON_NUM_THREADS unset, candle re-derives it on every matmul (see DEPENDENCIES.md).
fn set_thread_count(config: &Config) {
    if std::env::var_os("RAYON_NUM_THREADS").is_some() {
        return;
    }
    let n = if config.other.num_threads > 0 {
        config.other.num_threads
    } else {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    };
    std::env::set_var("RAYON_NUM_THREADS", n.to_string());
}

/// Run the parsed command line.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Config => {
            let config = cli.config.load_with(Vec::new())?;
            println!("{}", config.to_json());
            Ok(())
        }
        Command::Train(args) => run_train(&cli.config, args),
        Command::Eval(args) => run_eval(args),
        Command::Play(args) => run_play(args),
        Command::Benchmark(args) => run_benchmark(&cli.config, args),
    }
}

fn run_train(config_args: &ConfigArgs, args: TrainArgs) -> Result<()> {
    let mut extra = Vec::new();
    if let Some(d) = &args.device {
        extra.push(format!("device.device_type={d}"));
    }
    if let Some(n) = args.num_devices {
        extra.push(format!("device.num_devices={n}"));
    }
    if let Some(s) = args.seed {
        extra.push(format!("other.seed={s}"));
    }
    let config = match &args.resume {
        None => config_args.load_with(extra)?,
        Some(path) => {
            if config_args.config.is_some() {
                bail!("--config cannot be combined with --resume: a resumed run uses its stored configuration (change keys with --set)");
            }
            let (dir, meta) = checkpoint::load_metadata(path)?;
            let mut sets = config_args.sets.clone();
            sets.extend(extra);
            let sources = ConfigSources {
                file: None,
                text: Some((
                    format!("the configuration stored in {}", dir.display()),
                    meta.config.to_string(),
                )),
                env_vars: std::env::vars().collect(),
                sets,
            };
            let config = Config::load(&sources).context("invalid configuration")?;
            let stored = meta.config()?;
            if config.environment.env_name != stored.environment.env_name
                || config.network_architecture != stored.network_architecture
            {
                bail!("a resumed run cannot change its environment or network architecture");
            }
            config
        }
    };
    set_thread_count(&config);
    let devices = open_devices(&config.device.device_type, config.device.num_devices)?;
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        ctrlc::set_handler(move || {
            if stop.swap(true, Ordering::SeqCst) {
                eprintln!("second Ctrl-C: exiting without a checkpoint");
                std::process::exit(130);
            }
            eprintln!("Ctrl-C: saving a checkpoint before exiting (press again to abort)");
        })
        .context("cannot install the Ctrl-C handler")?;
    }
    let options = RunOptions {
        resume: args.resume.clone(),
        progress: !args.no_progress,
        stop,
        no_checkpoints: false,
        run_name: None,
    };
    let run_name_hint = crate::train::run::planned_run_name(&config, args.resume.as_deref())?;
    let options = RunOptions {
        run_name: Some(run_name_hint.clone()),
        ..options
    };
    let log_dir = PathBuf::from(&config.other.log_dir).join(&run_name_hint);
    let mut sink = TensorBoardSink::new(&log_dir)
        .with_context(|| format!("cannot create {}", log_dir.display()))?;
    eprintln!(
        "training {} on {} | logs: {} | checkpoints: {}",
        config.environment.env_name,
        config.device.device_type,
        log_dir.display(),
        PathBuf::from(&config.training.checkpoint_root_dir)
            .join(&run_name_hint)
            .display()
    );
    let summary = train(&config, &devices, &options, &mut sink)?;
    let c = &summary.counters;
    println!(
        "stopped: {} | {} env steps, {} training steps, {} episodes in {:.1}s | recent return {:.1}{}",
        summary.stop_reason,
        c.env_steps,
        c.training_steps,
        c.episodes,
        c.elapsed_seconds,
        summary.recent_return,
        summary
            .last_eval
            .as_ref()
            .map(|e| format!(" | last eval {:.1} +- {:.1}", e.mean_return(), e.std_return()))
            .unwrap_or_default()
    );
    println!(
        "time: self-play {:.1}s, training {:.1}s, evaluation {:.1}s",
        summary.timing.self_play, summary.timing.training, summary.timing.evaluation
    );
    println!("checkpoint: {}", summary.run_dir.display());
    Ok(())
}

fn run_eval(args: EvalArgs) -> Result<()> {
    let device = open_device(&args.device)?;
    let agent = crate::agent::Agent::load_on(&args.checkpoint, &device)?;
    let config = agent.config();
    set_thread_count(config);
    if args.episodes == 0 {
        bail!("--episodes must be at least 1");
    }
    let start = Instant::now();
    let eval = evaluate(
        agent.network(),
        &config.environment.env_name,
        args.episodes,
        agent.search_config(),
        args.seed,
    )?;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{}: {} episodes, mean return {:.2} +- {:.2} (std), min {:.1}, max {:.1}",
        config.environment.env_name,
        eval.returns.len(),
        eval.mean_return(),
        eval.std_return(),
        eval.returns.iter().cloned().fold(f64::INFINITY, f64::min),
        eval.returns
            .iter()
            .cloned()
            .fold(f64::NEG_INFINITY, f64::max),
    );
    println!(
        "episode lengths: mean {:.1}; {} env steps in {:.2}s ({:.0} steps/s)",
        eval.mean_length(),
        eval.env_steps,
        secs,
        eval.env_steps as f64 / secs.max(1e-9)
    );
    Ok(())
}

fn run_play(args: PlayArgs) -> Result<()> {
    use std::io::{BufRead, Write};
    let mut agent = crate::agent::Agent::load(&args.checkpoint)?;
    let name = agent.config().environment.env_name.clone();
    let mut env = cumind_envs::make(&name)?;
    if env.num_players() < 2 {
        bail!("`play` is for two-player games; {name} has one player (use `cumind eval`)");
    }
    let human = if args.second { 1 } else { 0 };
    let (mut observation, _) = env.reset(Some(0));
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    println!(
        "{name}: you are player {human} ({})",
        if human == 0 { "first" } else { "second" }
    );
    loop {
        println!("{}", env.render());
        let legal = env.legal_action_mask();
        let mover = env.to_play();
        let action = if mover == human {
            print!("your move {:?}: ", env.legal_actions());
            std::io::stdout().flush()?;
            let Some(line) = lines.next() else {
                println!("\nno more input: game abandoned");
                return Ok(());
            };
            match line?.trim().parse::<usize>() {
                Ok(a) => a,
                Err(_) => {
                    println!("not a number: enter one of {:?}", env.legal_actions());
                    continue;
                }
            }
        } else {
            let a = agent.select_actions_masked(&[&observation], &[&legal], false)?[0];
            println!("agent plays {a}");
            a
        };
        match env.step(action) {
            Ok(step) => {
                observation = step.observation;
                if step.terminated || step.truncated {
                    println!("{}", env.render());
                    let result = match step.info.get("winner").copied() {
                        Some(w) if w as usize == human && w >= 0.0 => "you win",
                        Some(w) if w >= 0.0 => "the agent wins",
                        _ => "draw",
                    };
                    println!("game over: {result}");
                    return Ok(());
                }
            }
            // Illegal human input: say why and ask again (the game is unchanged).
            Err(err) if mover == human => println!("{err}"),
            Err(err) => return Err(err.into()),
        }
    }
}

fn run_benchmark(config_args: &ConfigArgs, args: BenchmarkArgs) -> Result<()> {
    let mut extra = Vec::new();
    if let Some(d) = &args.device {
        extra.push(format!("device.device_type={d}"));
    }
    let config = config_args.load_with(extra)?;
    set_thread_count(&config);
    let devices = open_devices(&config.device.device_type, args.num_devices)?;
    let dtypes = args
        .dtypes
        .iter()
        .map(|d| crate::benchmark::parse_dtype(d).map_err(anyhow::Error::msg))
        .collect::<Result<Vec<_>>>()?;
    if args.batch_sizes.is_empty() || args.batch_sizes.contains(&0) {
        bail!("--batch-sizes must list sizes of at least 1");
    }
    let plan = crate::benchmark::BenchmarkPlan {
        dtypes,
        batch_sizes: args.batch_sizes.clone(),
        repetitions: args.repetitions.max(1),
        warmup: args.warmup,
        training: !args.no_training,
        devices,
    };
    let report = crate::benchmark::run(&config, &plan)?;
    println!("{}", report.table());
    let json = serde_json::to_string_pretty(&report)?;
    std::fs::write(&args.out, json)
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    println!("results written to {}", args.out.display());
    Ok(())
}
