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

use cumind::checkpoint;
use cumind::config::{
    env_var_key, is_read_by, parse_set, Config, ConfigError, ConfigSources, DeviceKind,
    BENCHMARK_READS,
};
use cumind::metrics::{MetricSink, Progress, TensorBoardSink};
use cumind::selfplay::evaluate;
use cumind::trainer::{train, RunOptions};

/// CuMind: a MuZero-style agent that learns a model of its environment and plans inside it.
///
/// `--config` and `--set` may stand before or after the subcommand, or both: all of them
/// count, in the order written.
#[derive(Debug, Parser)]
#[command(name = "cumind", version, about, long_about = None)]
pub struct Cli {
    /// Configuration options written before the subcommand (applied first).
    #[command(flatten)]
    pub config: ConfigArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Configuration options; accepted before and after the subcommand.
///
/// Not declared `global`: clap replaces a global multi-value option's earlier occurrences with
/// the later ones, so `--set a=1 train --set b=2` used to drop `a=1`. Each subcommand declares
/// its own copy and [`Cli::config_args`] concatenates them in the order written.
#[derive(Debug, Args, Clone, Default, PartialEq)]
pub struct ConfigArgs {
    /// A configuration file (JSON) layered over the embedded defaults, e.g. agents/catch.json
    /// (repeatable: later files override earlier ones).
    #[arg(long = "config", value_name = "PATH")]
    pub files: Vec<PathBuf>,
    /// Override one key: --set section.key=value (repeatable; value parsed as JSON, else a string).
    #[arg(long = "set", value_name = "SECTION.KEY=VALUE")]
    pub sets: Vec<String>,
}

impl ConfigArgs {
    /// These options followed by `later`'s.
    pub fn then(&self, later: &ConfigArgs) -> ConfigArgs {
        ConfigArgs {
            files: self.files.iter().chain(&later.files).cloned().collect(),
            sets: self.sets.iter().chain(&later.sets).cloned().collect(),
        }
    }
}

impl Cli {
    /// Every `--config` and `--set`, before and after the subcommand, in the order written.
    pub fn config_args(&self) -> ConfigArgs {
        let after = match &self.command {
            Command::Config(args) => &args.config,
            Command::Train(args) => &args.config,
            Command::Eval(args) => &args.config,
            Command::Play(args) => &args.config,
            Command::Benchmark(args) => &args.config,
        };
        self.config.then(after)
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the effective configuration as JSON (defaults <- --config <- CUMIND_* <- --set).
    Config(ConfigCommandArgs),
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
pub struct ConfigCommandArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
}

#[derive(Debug, Args)]
pub struct BenchmarkArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
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
    /// Only `--set mcts.KEY=VALUE` is accepted here: the rest is the checkpoint's configuration.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Checkpoint of the agent (a run directory or a step directory).
    #[arg(long, value_name = "DIR")]
    pub checkpoint: PathBuf,
    /// Let the agent move first.
    #[arg(long)]
    pub second: bool,
}

#[derive(Debug, Args)]
pub struct TrainArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
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
    /// Only `--set mcts.KEY=VALUE` is accepted here: the rest is the checkpoint's configuration.
    #[command(flatten)]
    pub config: ConfigArgs,
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
    pub device: DeviceKind,
}

impl ConfigArgs {
    /// Load and validate the layered configuration, with extra `--set` style overrides
    /// (from dedicated flags such as `--seed`) applied last.
    pub fn load_with(&self, extra: Vec<String>) -> Result<Config> {
        let mut sets = self.sets.clone();
        sets.extend(extra);
        let sources = ConfigSources {
            files: self.files.clone(),
            text: None,
            env_vars: std::env::vars().collect(),
            sets,
        };
        Config::load(&sources).context("invalid configuration")
    }

    /// The `section.key` of every `--set`, in order.
    fn set_keys(&self) -> Result<Vec<String>> {
        self.sets
            .iter()
            .map(|flag| Ok(parse_set(flag)?.0))
            .collect::<Result<_, ConfigError>>()
            .context("invalid configuration")
    }
}

/// `--set` flags for dedicated options (`--seed` -> `other.seed`); an option and a `--set` on
/// the same key would leave one of them unread, so that is an error.
fn dedicated_flags(
    config: &ConfigArgs,
    flags: &[(&str, &str, Option<String>)],
) -> Result<Vec<String>> {
    let keys = config.set_keys()?;
    let mut extra = Vec::new();
    for (flag, key, value) in flags {
        if let Some(value) = value {
            if keys.iter().any(|k| k == key) {
                bail!("{flag} {value} and --set {key}=... both set `{key}`: give only one");
            }
            extra.push(format!("{key}={value}"));
        }
    }
    Ok(extra)
}

/// The `section.key`s named explicitly: by `--set` flags and by `CUMIND_*` variables.
fn explicit_keys(config: &ConfigArgs) -> Result<Vec<String>> {
    let mut keys = config.set_keys()?;
    keys.extend(std::env::vars().filter_map(|(name, _)| env_var_key(&name)));
    Ok(keys)
}

/// Warn on stderr about keys a training run would not read: those set explicitly, and those
/// whose value differs from the embedded default (say, in a preset file).
fn warn_ignored_keys(config: &Config, explicit: &[String]) -> Result<()> {
    let image = cumind_envs::make(&config.environment.env_name)?
        .observation_space()
        .shape()
        .len()
        == 3;
    let defaults = Config::default_config();
    for ignored in config.ignored_keys(image) {
        let value = config.value_of(ignored.key);
        let named = explicit.iter().any(|k| k == ignored.key);
        if named || value != defaults.value_of(ignored.key) {
            let shown = value.map(|v| v.to_string()).unwrap_or_default();
            eprintln!(
                "warning: `{}` = {shown} has no effect: {}",
                ignored.key, ignored.reason
            );
        }
    }
    Ok(())
}

/// The training run's sink on a terminal: TensorBoard scalars, lines on stderr and an
/// indicatif progress bar (lines are printed above the bar so it does not swallow them).
struct ConsoleSink {
    tensorboard: TensorBoardSink,
    bar: Option<indicatif::ProgressBar>,
}

impl ConsoleSink {
    fn new(tensorboard: TensorBoardSink, show_progress: bool) -> Self {
        Self {
            tensorboard,
            bar: show_progress.then(indicatif::ProgressBar::new_spinner),
        }
    }

    fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        self.tensorboard.flush();
    }
}

impl MetricSink for ConsoleSink {
    fn scalar(&mut self, tag: &str, value: f64, step: u64) {
        self.tensorboard.scalar(tag, value, step);
    }

    fn log(&mut self, line: &str) {
        match &self.bar {
            // A hidden bar (not a terminal) would swallow the line.
            Some(bar) if !bar.is_hidden() => bar.println(line),
            _ => eprintln!("{line}"),
        }
    }

    fn progress(&mut self, p: &Progress) {
        let Some(bar) = &self.bar else {
            return;
        };
        if p.max_env_steps > 0 && bar.length() != Some(p.max_env_steps) {
            bar.set_length(p.max_env_steps);
            let style = indicatif::ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len} env steps | {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> ");
            bar.set_style(style);
        }
        bar.set_position(p.env_steps);
        bar.set_message(format!(
            "episodes {} | return {:.1} | loss {:.3} | {:.0} env/s, {:.0} train/s",
            p.episodes,
            p.recent_return,
            p.loss,
            p.env_steps_per_second,
            p.training_steps_per_second
        ));
    }

    fn flush(&mut self) {
        self.tensorboard.flush();
    }
}

/// Open `kind` (the only place a device is chosen).
pub fn open_device(kind: DeviceKind) -> Result<Device> {
    match kind {
        DeviceKind::Cpu => Ok(Device::Cpu),
        DeviceKind::Cuda(index) => {
            if !candle_core::utils::cuda_is_available() {
                bail!(
                    "device `{kind}` asked for, but this cumind was built without the `cuda` feature: \
                     rebuild with `cargo build --release --features cuda` (see README, \"GPU build\")"
                );
            }
            Device::new_cuda(index).with_context(|| {
                format!("cannot open CUDA device {index} (is a GPU with a driver present?)")
            })
        }
    }
}

/// `count` devices starting at `first`: on the CPU, `count` CPU replicas; on CUDA,
/// consecutive GPUs from the given index.
pub fn open_devices(first: DeviceKind, count: usize) -> Result<Vec<Device>> {
    match first {
        DeviceKind::Cpu => Ok(vec![Device::Cpu; count.max(1)]),
        DeviceKind::Cuda(first) => (first..first + count.max(1))
            .map(|i| open_device(DeviceKind::Cuda(i)))
            .collect(),
    }
}

/// Give rayon and candle an explicit thread count before any thread starts: with
/// RAYON_NUM_THREADS unset, candle re-derives it on every matmul (see docs/dependencies.md).
fn set_thread_count(config: &Config) {
    if let Some(set) = std::env::var_os("RAYON_NUM_THREADS") {
        let wanted = config.other.num_threads;
        if wanted > 0 && set.to_string_lossy() != wanted.to_string() {
            eprintln!(
                "warning: `other.num_threads` = {wanted} has no effect: RAYON_NUM_THREADS={} is set",
                set.to_string_lossy()
            );
        }
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
    let config_args = cli.config_args();
    match cli.command {
        Command::Config(_) => {
            let config = config_args.load_with(Vec::new())?;
            warn_ignored_keys(&config, &explicit_keys(&config_args)?)?;
            println!("{}", config.to_json());
            Ok(())
        }
        Command::Train(args) => run_train(&config_args, args),
        Command::Eval(args) => run_eval(&config_args, args),
        Command::Play(args) => run_play(&config_args, args),
        Command::Benchmark(args) => run_benchmark(&config_args, args),
    }
}

fn run_train(config_args: &ConfigArgs, args: TrainArgs) -> Result<()> {
    let extra = dedicated_flags(
        config_args,
        &[
            ("--device", "device.device_type", args.device.clone()),
            (
                "--num-devices",
                "device.num_devices",
                args.num_devices.map(|n| n.to_string()),
            ),
            ("--seed", "other.seed", args.seed.map(|n| n.to_string())),
        ],
    )?;
    let config = match &args.resume {
        None => config_args.load_with(extra)?,
        Some(path) => {
            if !config_args.files.is_empty() {
                bail!("--config cannot be combined with --resume: a resumed run uses its stored configuration (change keys with --set)");
            }
            let (dir, meta) = checkpoint::load_metadata(path)?;
            let mut sets = config_args.sets.clone();
            sets.extend(extra);
            Config::load_resumed(
                &format!("the configuration stored in {}", dir.display()),
                &meta.config.to_string(),
                std::env::vars().collect(),
                sets,
            )
            .context("invalid configuration")?
        }
    };
    warn_ignored_keys(&config, &explicit_keys(config_args)?)?;
    set_thread_count(&config);
    let devices = open_devices(config.device.device_type, config.device.num_devices)?;
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
    let run_name_hint = cumind::trainer::planned_run_name(&config, args.resume.as_deref())?;
    let options = RunOptions {
        resume: args.resume.clone(),
        stop,
        no_checkpoints: false,
        run_name: Some(run_name_hint.clone()),
    };
    let log_dir = PathBuf::from(&config.other.log_dir).join(&run_name_hint);
    let tensorboard = TensorBoardSink::new(&log_dir)
        .with_context(|| format!("cannot create {}", log_dir.display()))?;
    let mut sink = ConsoleSink::new(tensorboard, !args.no_progress);
    eprintln!(
        "training {} on {} | logs: {} | checkpoints: {}",
        config.environment.env_name,
        config.device.device_type,
        log_dir.display(),
        PathBuf::from(&config.training.checkpoint_root_dir)
            .join(&run_name_hint)
            .display()
    );
    let result = train(&config, &devices, &options, &mut sink);
    sink.finish();
    let summary = result?;
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

/// Load a trained agent for `eval` or `play`: the checkpoint's configuration, with the search
/// changed by `--set mcts.KEY=VALUE` and `CUMIND_MCTS__*` variables. Everything else comes from
/// the checkpoint, so `--config` and `--set` on other sections are refused, and other
/// `CUMIND_*` variables are reported as ignored.
fn load_agent(
    command: &str,
    config_args: &ConfigArgs,
    checkpoint: &std::path::Path,
    device: &Device,
) -> Result<cumind::agent::Agent> {
    if !config_args.files.is_empty() {
        bail!(
            "`{command}` uses the configuration stored in the checkpoint and does not take --config; \
             change the search with --set mcts.KEY=VALUE"
        );
    }
    for key in config_args.set_keys()? {
        if !key.starts_with("mcts.") {
            bail!(
                "`{command}` reads only mcts.* keys from --set (the rest of its configuration is the \
                 checkpoint's); `--set {key}=...` would have no effect"
            );
        }
    }
    let mut env_vars = Vec::new();
    for (name, value) in std::env::vars() {
        match env_var_key(&name) {
            Some(key) if key.starts_with("mcts.") => env_vars.push((name, value)),
            Some(_) => eprintln!(
                "warning: {name} is ignored by `{command}`: it reads only CUMIND_MCTS__* variables"
            ),
            None => {}
        }
    }
    let mut agent = cumind::agent::Agent::load_on(checkpoint, device)?;
    if !config_args.sets.is_empty() || !env_vars.is_empty() {
        let sources = ConfigSources {
            files: Vec::new(),
            text: Some((
                format!("the configuration stored in {}", checkpoint.display()),
                agent.config().to_json(),
            )),
            env_vars,
            sets: config_args.sets.clone(),
        };
        let config = Config::load(&sources).context("invalid configuration")?;
        warn_ignored_keys(&config, &explicit_keys(config_args)?)?;
        agent.set_search(config.mcts);
    }
    Ok(agent)
}

fn run_eval(config_args: &ConfigArgs, args: EvalArgs) -> Result<()> {
    let device = open_device(args.device)?;
    let agent = load_agent("eval", config_args, &args.checkpoint, &device)?;
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

fn run_play(config_args: &ConfigArgs, args: PlayArgs) -> Result<()> {
    use std::io::{BufRead, Write};
    let mut agent = load_agent("play", config_args, &args.checkpoint, &Device::Cpu)?;
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
    let extra = dedicated_flags(
        config_args,
        &[("--device", "device.device_type", args.device.clone())],
    )?;
    let config = config_args.load_with(extra)?;
    let explicit = explicit_keys(config_args)?;
    for key in &explicit {
        if !is_read_by(key, BENCHMARK_READS) {
            let hint = match key.as_str() {
                "device.num_devices" => " (use benchmark --num-devices)",
                "data_types.model_dtype" => " (use benchmark --dtypes)",
                "environment.num_envs" => " (use benchmark --batch-sizes)",
                _ => "",
            };
            eprintln!("warning: `{key}` has no effect on `benchmark`{hint}");
        }
    }
    warn_ignored_keys(&config, &explicit)?;
    set_thread_count(&config);
    let devices = open_devices(config.device.device_type, args.num_devices)?;
    let dtypes = args
        .dtypes
        .iter()
        .map(|d| cumind::benchmark::parse_dtype(d).map_err(anyhow::Error::msg))
        .collect::<Result<Vec<_>>>()?;
    if args.batch_sizes.is_empty() || args.batch_sizes.contains(&0) {
        bail!("--batch-sizes must list sizes of at least 1");
    }
    let plan = cumind::benchmark::BenchmarkPlan {
        dtypes,
        batch_sizes: args.batch_sizes.clone(),
        repetitions: args.repetitions.max(1),
        warmup: args.warmup,
        training: !args.no_training,
        devices,
    };
    let report = cumind::benchmark::run(&config, &plan)?;
    println!("{}", report.table());
    let json = serde_json::to_string_pretty(&report)?;
    std::fs::write(&args.out, json)
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    println!("results written to {}", args.out.display());
    Ok(())
}
