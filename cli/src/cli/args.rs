//! The command line as typed values (clap derive). `--config` and `--set` are accepted before
//! and after the subcommand and joined in the order written.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};

use cumind::config::{parse_set, Config, ConfigError, ConfigSources, DeviceKind};

/// CuMind: a MuZero-style agent that learns a model of its environment and plans inside it.
///
/// `--config` and `--set` may stand before or after the subcommand, or both: all of them
/// count, in the order written.
#[derive(Debug, Parser)]
#[command(name = "cumind", version = version_text(), about, long_about = None)]
pub struct Cli {
    /// Configuration options written before the subcommand (applied first).
    #[command(flatten)]
    pub config: ConfigArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// `--version`: the crate version and the features this binary was built with (cuda, nccl).
fn version_text() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(cumind::build_info::version_line)
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
            Command::Plot(args) => &args.config,
            Command::CheckEnv(args) => &args.config,
        };
        self.config.then(after)
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the effective configuration as JSON (defaults <- --config <- CUMIND_* <- --set).
    Config(ConfigCommandArgs),
    /// Train an agent (default: CartPole-v1 on the CPU from the embedded configuration).
    ///
    /// SIGINT (Ctrl-C), SIGTERM and SIGHUP finish the current step, save a complete checkpoint
    /// (about 0.1 s for a full 100,000-transition CartPole buffer) and exit 0; a second signal
    /// exits at once, keeping the previous checkpoint as the latest.
    Train(TrainArgs),
    /// Play greedy episodes with a trained agent and print the mean and std of the return.
    Eval(EvalArgs),
    /// Play a two-player board game against a trained agent in the terminal.
    Play(PlayArgs),
    /// Measure inference, search and training throughput per dtype and batch size.
    Benchmark(BenchmarkArgs),
    /// Draw learning curves of one or more runs (their log directories) into a PNG.
    Plot(PlotArgs),
    /// Check built-in environments against the Environment contract (all of them by default;
    /// reads no configuration, so --config and --set are refused).
    CheckEnv(CheckEnvArgs),
}

#[derive(Debug, Args)]
pub struct CheckEnvArgs {
    /// Not read: `check-env` takes the environments by name, not from the configuration.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Environments to check (default: every built-in one; `environment.env_name` is not read).
    #[arg(value_name = "NAME")]
    pub names: Vec<String>,
    /// Episodes played with random legal actions per environment (at least 1).
    #[arg(long, default_value_t = 10)]
    pub episodes: usize,
    /// Seed of the random actions; episode i starts with reset(seed + i).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

#[derive(Debug, Args)]
pub struct PlotArgs {
    /// Not read: `plot` takes everything from the runs' metrics.csv files.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Run log directories (`<log_dir>/<run_name>`, holding metrics.csv), or peers' curves:
    /// CSV files with the header `env_steps,wall_seconds,mean_return` (as
    /// scripts/peers/sb3_minatar.py writes), drawn beside the runs.
    #[arg(required = true, value_name = "RUN_DIR_OR_CSV")]
    pub runs: Vec<PathBuf>,
    /// The PNG to write.
    #[arg(long, default_value = "curves.png")]
    pub out: PathBuf,
    /// The legend's name for each run, in the order the runs are given (repeat it once per
    /// run; default: each directory's or file's name).
    #[arg(long = "label", value_name = "NAME")]
    pub labels: Vec<String>,
    /// A TrueType font for the labels (default: DejaVu Sans, built into the binary).
    #[arg(long, value_name = "PATH")]
    pub font: Option<PathBuf>,
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
    /// Device: cpu, cuda, cuda:N or auto (overrides device.device_type).
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
    /// Device: cpu, cuda, cuda:N or auto (overrides device.device_type).
    #[arg(long)]
    pub device: Option<String>,
    /// Model replicas (overrides device.num_devices).
    #[arg(long)]
    pub num_devices: Option<usize>,
    /// Random seed (overrides other.seed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Environment (overrides environment.env_name): a built-in name, or `gymnasium:ID` for
    /// any Gymnasium environment with discrete actions (a build with the `python` feature).
    #[arg(long, value_name = "NAME")]
    pub env: Option<String>,
    /// Keyword arguments of `gymnasium.make` as a JSON object, e.g. '{"continuous": false}'
    /// (overrides environment.env_kwargs).
    #[arg(long, value_name = "JSON")]
    pub env_kwargs: Option<String>,
    /// Hide the progress bar.
    #[arg(long)]
    pub no_progress: bool,
    /// Train over several processes: `mpi` under `mpirun -np K` (a build with the `mpi`
    /// feature). Each rank plays its own games and trains on batch_size / K positions per step;
    /// rank 0 alone evaluates and writes logs and checkpoints.
    #[arg(long, value_enum, default_value_t = Distributed::None)]
    pub distributed: Distributed,
    /// With --distributed: a rank that waits longer than this many seconds for the others in
    /// one exchange stops with an error (a stalled rank; a dead one is noticed by mpirun at
    /// once). Rank 0's evaluations and checkpoint saves count as waiting for the others.
    #[arg(long, default_value_t = 600.0, value_name = "SECONDS")]
    pub distributed_timeout: f64,
}

/// How `train` spreads over processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Distributed {
    /// One process.
    None,
    /// MPI ranks, launched by mpirun.
    Mpi,
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
    /// Device: cpu, cuda, cuda:N or auto (the CPU or GPU 0, by the network's size and the
    /// episodes played at once).
    #[arg(long, default_value = "cpu")]
    pub device: DeviceKind,
    /// Two-player games: play a match against random, perfect (an exact solver: tic-tac-toe,
    /// or Connect Four from 36 empty cells), alphabeta:DEPTH or checkpoint:DIR, and print wins/draws/losses per side; or `all`:
    /// every opponent at once (each legal reply tried at every opponent turn, the agent's
    /// moves checked against exact values; small games such as tic-tac-toe).
    #[arg(long, value_name = "OPPONENT")]
    pub opponent: Option<cumind::arena::OpponentSpec>,
    /// With --opponent: games per side.
    #[arg(long, default_value_t = 100)]
    pub games: usize,
    /// With --opponent: which side the agent takes.
    #[arg(long, value_enum, default_value = "both")]
    pub agent_plays: AgentPlays,
    /// With --opponent: plies played at random by both players first, to vary the games.
    #[arg(long, default_value_t = 0)]
    pub random_opening: usize,
    /// With --opponent: check the agent's moves against exact values where a solver
    /// answers (tic-tac-toe; Connect Four from 24 empty cells) and print, per side, the
    /// games already lost at the first checked move and the won or drawn positions thrown
    /// away.
    #[arg(long, requires = "opponent")]
    pub check_moves: bool,
}

/// `eval --agent-plays`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AgentPlays {
    First,
    Second,
    Both,
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
    pub fn set_keys(&self) -> Result<Vec<String>> {
        self.sets
            .iter()
            .map(|flag| Ok(parse_set(flag)?.0))
            .collect::<Result<_, ConfigError>>()
            .context("invalid configuration")
    }
}
