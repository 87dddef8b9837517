//! Configuration: raw layered sources -> a validated [`Config`].
//!
//! Layers, each overriding the one before:
//! 1. the embedded defaults (`configuration.json` at the repository root, compiled in);
//! 2. a file given by `--config PATH` (an agents/ preset or a file written by `cumind config`);
//! 3. environment variables `CUMIND_<SECTION>__<KEY>` (for example `CUMIND_TRAINING__BATCH_SIZE=64`);
//! 4. `--set section.key=value` flags (the value is parsed as JSON, else taken as a string).
//!
//! Sections keep the names of the original Python CuMind file ("Network architecture",
//! "Training", "MCTS", "Environment", "Self-Play", "Memory", "Data Types", "Device", "Other") so
//! an existing file loads. Internally every section name is normalised to lowercase snake_case
//! (`"Data Types"` -> `data_types`) before layering: the `config` crate lowercases environment
//! variable keys, and a key with a space could not be overridden otherwise.
//!
//! Unknown keys, wrong types and out-of-range values are errors that name the key path.

use serde::{Deserialize, Serialize};
use thiserror::Error;

mod ignored;
pub use ignored::{is_read_by, IgnoredKey, BENCHMARK_READS};

/// The embedded default configuration.
pub const DEFAULT_CONFIGURATION: &str = include_str!("../../configuration.json");

/// Prefix of the environment variables that override configuration keys.
pub const ENV_PREFIX: &str = "CUMIND";

/// A configuration that could not be loaded.
#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read configuration file {path}: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("{origin} is not valid JSON: {error}")]
    Json {
        origin: String,
        error: serde_json::Error,
    },
    #[error("{origin} must be a JSON object of sections, found {found}")]
    NotAnObject { origin: String, found: String },
    #[error(
        "bad --set flag `{flag}`: expected section.key=value (for example training.batch_size=64)"
    )]
    BadSet { flag: String },
    #[error("configuration layering failed")]
    Layering(#[from] config::ConfigError),
    #[error("configuration key `{key}`: {message}")]
    Invalid { key: String, message: String },
}

fn invalid(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_string(),
        message: message.into(),
    }
}

/// "Network architecture": sizes of the representation, dynamics and prediction networks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkConfig {
    /// Width of the hidden layers of every MLP (and of the residual blocks).
    pub hidden_dim: usize,
    /// Size of the latent state produced by representation and dynamics.
    pub latent_dim: usize,
    /// Residual blocks in each trunk.
    pub num_blocks: usize,
    /// Channels of the conv ResNet used for image-like (board) observations.
    pub conv_channels: usize,
    /// "auto" (conv ResNet for `[C, H, W]` observations, MLP otherwise), "mlp" or "conv".
    pub network_type: String,
    /// Value head support is the integers `-n..=n` (after the h(x) transform).
    pub value_support_size: usize,
    /// Reward head support is the integers `-n..=n` (after the h(x) transform).
    pub reward_support_size: usize,
}

/// "Training": the learner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainingConfig {
    pub batch_size: usize,
    /// Peak learning rate of AdamW (after warm-up).
    pub learning_rate: f64,
    pub weight_decay: f64,
    /// Training steps between refreshes of the target network.
    pub target_update_frequency: usize,
    /// Training steps between checkpoints (one is always written at the end).
    pub checkpoint_interval: usize,
    /// Stop after this many finished self-play episodes (0: no limit).
    pub num_episodes: usize,
    /// Actor steps (one step of every environment) between learner phases; each phase takes
    /// the training steps `train_ratio` has accumulated since the last one.
    pub train_frequency: usize,
    /// Directory that holds one checkpoint directory per run.
    pub checkpoint_root_dir: String,
    /// Stop after this many environment steps (0: no limit).
    pub max_env_steps: usize,
    /// Stop after this many training steps (0: no limit).
    pub max_training_steps: usize,
    /// Training steps per environment step (the replay ratio).
    pub train_ratio: f64,
    /// Linear learning-rate warm-up, in training steps.
    pub lr_warmup_steps: usize,
    /// The learning rate decays (cosine) to this fraction of its peak by the end of the run.
    pub lr_final_fraction: f64,
    /// Global gradient-norm clipping (0: off).
    pub max_grad_norm: f64,
    /// Weight of the value loss relative to reward and policy losses.
    pub value_loss_weight: f64,
    /// Environment steps between greedy evaluations (0: off).
    pub eval_interval: usize,
    /// Episodes per evaluation.
    pub eval_episodes: usize,
    /// Stop early once an evaluation's mean return reaches this (0: never).
    pub stop_return: f64,
}

/// "MCTS": the search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MctsConfig {
    pub num_simulations: usize,
    /// c1 of MuZero's pUCT formula.
    pub c_puct: f64,
    /// c2 of MuZero's pUCT formula.
    pub c_base: f64,
    pub dirichlet_alpha: f64,
    pub exploration_fraction: f64,
    /// "puct" (MuZero) or "gumbel" (Gumbel MuZero, sequential halving).
    pub search_policy: String,
    pub max_considered_actions: usize,
    pub gumbel_c_visit: f64,
    pub gumbel_c_scale: f64,
    /// Visit-count temperature: `[[progress, temperature], ...]`, progress in [0, 1] of the
    /// training budget, sorted; the last entry whose progress has been reached applies.
    pub temperature_schedule: Vec<(f64, f64)>,
}

/// "Environment".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvironmentConfig {
    /// A registered environment name (see `cumind_envs::names()`).
    pub env_name: String,
    /// Optional consistency check: must equal the environment's number of actions.
    pub action_space_size: Option<usize>,
    /// Optional consistency check: must equal the environment's observation shape.
    pub observation_shape: Option<Vec<usize>>,
    /// Environments stepped in parallel (and searched in one batch) by each actor.
    pub num_envs: usize,
}

/// "Self-Play".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SelfPlayConfig {
    /// K: steps the dynamics network is unrolled in training.
    pub num_unroll_steps: usize,
    /// n: steps of the bootstrapped value target.
    pub td_steps: usize,
    pub discount: f64,
    /// Self-play threads running beside the learner (0: synchronous, deterministic mode).
    pub num_actors: usize,
    /// Bootstrap values from "root" (stored search values) or "target_network".
    pub value_target: String,
    /// Long episodes enter the replay buffer in segments of this many transitions (0: whole
    /// episodes only), so training sees fresh data while an episode goes on.
    pub game_segment_length: usize,
}

/// "Memory": the replay buffer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryConfig {
    /// Capacity in transitions; the oldest games are evicted first.
    pub memory_capacity: usize,
    /// Transitions stored before training starts.
    pub min_memory_size: usize,
    /// Fraction of the capacity stored before training starts (the larger bound applies).
    pub min_memory_pct: f64,
    /// Priority exponent (0: uniform sampling).
    pub per_alpha: f64,
    pub per_epsilon: f64,
    /// Importance-sampling exponent.
    pub per_beta: f64,
}

/// "Data Types".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataTypesConfig {
    /// Compute dtype of the forward pass: float32, bfloat16, float16 or auto
    /// (bfloat16 on CUDA, float32 on the CPU). Parameters stay float32.
    pub model_dtype: String,
    /// int64 or int32. Accepted (and validated) for files of the Python CuMind; unused here,
    /// since actions enter the networks one-hot.
    pub action_dtype: String,
    /// Dtype in which targets and losses are reduced: float32 only.
    pub target_dtype: String,
}

/// "Device".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceConfig {
    /// cpu, cuda or cuda:N.
    pub device_type: String,
    /// Model replicas (data parallelism).
    pub num_devices: usize,
}

/// "Other".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtherConfig {
    pub seed: u64,
    /// Worker threads for rayon and candle (0: the number of cores).
    pub num_threads: usize,
    /// TensorBoard logs go to `<log_dir>/<run_name>/`.
    pub log_dir: String,
    /// Name of the run ("": env name + time stamp).
    pub run_name: String,
}

/// The whole validated configuration. Field names are the normalised section names; serialised
/// with the original section names so `cumind config` output loads in the Python tool too.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(rename(serialize = "Network architecture"))]
    pub network_architecture: NetworkConfig,
    #[serde(rename(serialize = "Training"))]
    pub training: TrainingConfig,
    #[serde(rename(serialize = "MCTS"))]
    pub mcts: MctsConfig,
    #[serde(rename(serialize = "Environment"))]
    pub environment: EnvironmentConfig,
    #[serde(rename(serialize = "Self-Play"))]
    pub self_play: SelfPlayConfig,
    #[serde(rename(serialize = "Memory"))]
    pub memory: MemoryConfig,
    #[serde(rename(serialize = "Data Types"))]
    pub data_types: DataTypesConfig,
    #[serde(rename(serialize = "Device"))]
    pub device: DeviceConfig,
    #[serde(rename(serialize = "Other"))]
    pub other: OtherConfig,
}

/// Where configuration comes from, besides the embedded defaults.
#[derive(Debug, Clone, Default)]
pub struct ConfigSources {
    /// `--config` files, layered in the order given (a later file overrides an earlier one).
    pub files: Vec<std::path::PathBuf>,
    /// A JSON layer given as text, applied after the file (a resumed run's stored configuration).
    pub text: Option<(String, String)>,
    /// Environment variables (name, value); the binary passes `std::env::vars()`, tests their own.
    pub env_vars: Vec<(String, String)>,
    /// `--set section.key=value` flags, in order.
    pub sets: Vec<String>,
}

/// Lowercase snake_case form of a section name: `"Data Types"` -> `data_types`,
/// `"Self-Play"` -> `self_play`.
pub fn normalise_section_name(name: &str) -> String {
    name.trim()
        .chars()
        .map(|c| match c {
            ' ' | '-' => '_',
            c => c.to_ascii_lowercase(),
        })
        .collect()
}

fn normalised_json(text: &str, origin: &str) -> Result<String, ConfigError> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|error| ConfigError::Json {
            origin: origin.to_string(),
            error,
        })?;
    let serde_json::Value::Object(sections) = value else {
        return Err(ConfigError::NotAnObject {
            origin: origin.to_string(),
            found: json_kind(&value).to_string(),
        });
    };
    let mut out = serde_json::Map::new();
    for (name, section) in sections {
        let key = normalise_section_name(&name);
        if let (Some(serde_json::Value::Object(existing)), serde_json::Value::Object(new)) =
            (out.get_mut(&key), &section)
        {
            existing.extend(new.clone());
        } else {
            out.insert(key, section);
        }
    }
    Ok(serde_json::Value::Object(out).to_string())
}

fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Split one `--set section.key=value` flag into its normalised `section.key` and its value
/// (parsed as JSON, else taken as a string).
pub fn parse_set(flag: &str) -> Result<(String, serde_json::Value), ConfigError> {
    let bad = || ConfigError::BadSet {
        flag: flag.to_string(),
    };
    let (path, raw) = flag.split_once('=').ok_or_else(bad)?;
    let (section, key) = path.trim().split_once('.').ok_or_else(bad)?;
    if section.is_empty() || key.is_empty() || key.contains('.') {
        return Err(bad());
    }
    let value = serde_json::from_str(raw.trim())
        .unwrap_or_else(|_| serde_json::Value::String(raw.to_string()));
    Ok((
        format!("{}.{}", normalise_section_name(section), key.trim()),
        value,
    ))
}

/// The `section.key` an environment variable `CUMIND_<SECTION>__<KEY>` overrides, if it is one.
pub fn env_var_key(name: &str) -> Option<String> {
    let rest = name.strip_prefix(&format!("{ENV_PREFIX}_"))?;
    let (section, key) = rest.split_once("__")?;
    Some(format!(
        "{}.{}",
        section.to_ascii_lowercase(),
        key.to_ascii_lowercase()
    ))
}

/// Turn `--set` flags into one JSON layer: `{"section": {"key": value}}`; a later flag on the
/// same key wins.
fn sets_to_json(sets: &[String]) -> Result<String, ConfigError> {
    let mut root = serde_json::Map::new();
    for flag in sets {
        let (path, value) = parse_set(flag)?;
        let (section, key) = path.split_once('.').expect("parse_set returns section.key");
        let entry = root
            .entry(section.to_string())
            .or_insert_with(|| serde_json::Value::Object(Default::default()));
        if let serde_json::Value::Object(map) = entry {
            map.insert(key.to_string(), value);
        }
    }
    Ok(serde_json::Value::Object(root).to_string())
}

impl Config {
    /// The embedded defaults alone.
    pub fn default_config() -> Config {
        Self::load(&ConfigSources::default()).expect("embedded configuration.json is valid")
    }

    /// Layer every source over the embedded defaults, deserialise and validate.
    pub fn load(sources: &ConfigSources) -> Result<Config, ConfigError> {
        use config::{Environment, File, FileFormat};
        let mut builder = config::Config::builder().add_source(File::from_str(
            &normalised_json(DEFAULT_CONFIGURATION, "the embedded configuration.json")?,
            FileFormat::Json,
        ));
        for path in &sources.files {
            let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
                path: path.display().to_string(),
                error,
            })?;
            let origin = format!("configuration file {}", path.display());
            builder = builder.add_source(File::from_str(
                &normalised_json(&text, &origin)?,
                FileFormat::Json,
            ));
        }
        if let Some((origin, text)) = &sources.text {
            builder = builder.add_source(File::from_str(
                &normalised_json(text, origin)?,
                FileFormat::Json,
            ));
        }
        let env_map: std::collections::HashMap<String, String> = sources
            .env_vars
            .iter()
            .filter(|(name, _)| name.starts_with(&format!("{ENV_PREFIX}_")))
            .cloned()
            .collect();
        builder = builder
            .add_source(
                Environment::with_prefix(ENV_PREFIX)
                    .prefix_separator("_")
                    .separator("__")
                    .try_parsing(true)
                    .source(Some(env_map)),
            )
            .add_source(File::from_str(
                &sets_to_json(&sources.sets)?,
                FileFormat::Json,
            ));
        let merged: serde_json::Value = builder.build()?.try_deserialize()?;
        let config: Config = serde_path_to_error::deserialize(merged).map_err(|err| {
            let path = err.path().to_string();
            let key = if path == "." {
                "(top level)".to_string()
            } else {
                path
            };
            invalid(&key, err.into_inner().to_string())
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Pretty JSON with the original section names; loads back to the same configuration.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a Config always serialises")
    }

    /// Check every value's range and every cross-key constraint.
    pub fn validate(&self) -> Result<(), ConfigError> {
        fn at_least(key: &str, value: usize, min: usize) -> Result<(), ConfigError> {
            if value < min {
                return Err(invalid(
                    key,
                    format!("{value} is too small: must be >= {min}"),
                ));
            }
            Ok(())
        }
        fn within(key: &str, value: f64, lo: f64, hi: f64) -> Result<(), ConfigError> {
            if !(value >= lo && value <= hi) {
                return Err(invalid(
                    key,
                    format!("{value} is out of range: must be in [{lo}, {hi}]"),
                ));
            }
            Ok(())
        }
        fn one_of(key: &str, value: &str, allowed: &[&str]) -> Result<(), ConfigError> {
            if !allowed.contains(&value) {
                return Err(invalid(
                    key,
                    format!(
                        "\"{value}\" is not allowed: use one of {}",
                        allowed.join(", ")
                    ),
                ));
            }
            Ok(())
        }
        let n = &self.network_architecture;
        at_least("network_architecture.hidden_dim", n.hidden_dim, 1)?;
        at_least("network_architecture.latent_dim", n.latent_dim, 1)?;
        at_least("network_architecture.conv_channels", n.conv_channels, 1)?;
        one_of(
            "network_architecture.network_type",
            &n.network_type,
            &["auto", "mlp", "conv"],
        )?;
        at_least(
            "network_architecture.value_support_size",
            n.value_support_size,
            1,
        )?;
        at_least(
            "network_architecture.reward_support_size",
            n.reward_support_size,
            1,
        )?;

        let t = &self.training;
        at_least("training.batch_size", t.batch_size, 1)?;
        within("training.learning_rate", t.learning_rate, 1e-9, 10.0)?;
        within("training.weight_decay", t.weight_decay, 0.0, 1.0)?;
        at_least(
            "training.target_update_frequency",
            t.target_update_frequency,
            1,
        )?;
        at_least("training.checkpoint_interval", t.checkpoint_interval, 1)?;
        at_least("training.train_frequency", t.train_frequency, 1)?;
        if t.checkpoint_root_dir.trim().is_empty() {
            return Err(invalid("training.checkpoint_root_dir", "must not be empty"));
        }
        if t.max_env_steps == 0 && t.max_training_steps == 0 && t.num_episodes == 0 {
            return Err(invalid(
                "training.max_env_steps",
                "a run needs a budget: set max_env_steps, max_training_steps or num_episodes above 0",
            ));
        }
        within("training.train_ratio", t.train_ratio, 1e-6, 1000.0)?;
        within("training.lr_final_fraction", t.lr_final_fraction, 0.0, 1.0)?;
        within("training.max_grad_norm", t.max_grad_norm, 0.0, 1e9)?;
        within("training.value_loss_weight", t.value_loss_weight, 0.0, 1e3)?;
        if t.eval_interval > 0 {
            at_least("training.eval_episodes", t.eval_episodes, 1)?;
        }
        if !t.stop_return.is_finite() {
            return Err(invalid("training.stop_return", "must be a finite number"));
        }

        let m = &self.mcts;
        at_least("mcts.num_simulations", m.num_simulations, 1)?;
        within("mcts.c_puct", m.c_puct, 0.0, 1e6)?;
        within("mcts.c_base", m.c_base, 1e-6, 1e12)?;
        within("mcts.dirichlet_alpha", m.dirichlet_alpha, 1e-6, 1e3)?;
        within(
            "mcts.exploration_fraction",
            m.exploration_fraction,
            0.0,
            1.0,
        )?;
        one_of("mcts.search_policy", &m.search_policy, &["puct", "gumbel"])?;
        at_least("mcts.max_considered_actions", m.max_considered_actions, 1)?;
        within("mcts.gumbel_c_visit", m.gumbel_c_visit, 0.0, 1e9)?;
        within("mcts.gumbel_c_scale", m.gumbel_c_scale, 0.0, 1e9)?;
        if m.temperature_schedule.is_empty() {
            return Err(invalid(
                "mcts.temperature_schedule",
                "must hold at least one [progress, temperature] pair",
            ));
        }
        let mut last = f64::NEG_INFINITY;
        for (i, &(progress, temperature)) in m.temperature_schedule.iter().enumerate() {
            let key = format!("mcts.temperature_schedule[{i}]");
            within(&key, progress, 0.0, 1.0)?;
            within(&key, temperature, 0.0, 100.0)?;
            if progress < last {
                return Err(invalid(
                    &key,
                    "progress values must be sorted in increasing order",
                ));
            }
            last = progress;
        }

        let e = &self.environment;
        if !cumind_envs::names().contains(&e.env_name.as_str()) {
            return Err(invalid(
                "environment.env_name",
                format!(
                    "unknown environment \"{}\": use one of {}",
                    e.env_name,
                    cumind_envs::names().join(", ")
                ),
            ));
        }
        at_least("environment.num_envs", e.num_envs, 1)?;
        let env = cumind_envs::make(&e.env_name)
            .map_err(|err| invalid("environment.env_name", err.to_string()))?;
        if let Some(n) = e.action_space_size {
            let actual = env.action_space().n().unwrap_or(0);
            if n != actual {
                return Err(invalid(
                    "environment.action_space_size",
                    format!(
                        "{n} does not match {}, which has {actual} actions (or set it to null)",
                        e.env_name
                    ),
                ));
            }
        }
        if let Some(shape) = &e.observation_shape {
            let actual = env.observation_space().shape();
            if *shape != actual {
                return Err(invalid(
                    "environment.observation_shape",
                    format!("{shape:?} does not match {}, whose observations have shape {actual:?} (or set it to null)", e.env_name),
                ));
            }
        }

        if n.network_type == "conv" && env.observation_space().shape().len() != 3 {
            return Err(invalid(
                "network_architecture.network_type",
                format!(
                    "\"conv\" needs [C, H, W] observations; {} has shape {:?} (use \"mlp\" or \"auto\")",
                    e.env_name,
                    env.observation_space().shape()
                ),
            ));
        }

        let s = &self.self_play;
        at_least("self_play.td_steps", s.td_steps, 1)?;
        within("self_play.discount", s.discount, 0.0, 1.0)?;
        one_of(
            "self_play.value_target",
            &s.value_target,
            &["root", "target_network"],
        )?;

        let mem = &self.memory;
        at_least("memory.memory_capacity", mem.memory_capacity, 1)?;
        within("memory.min_memory_pct", mem.min_memory_pct, 0.0, 1.0)?;
        if mem.min_memory_size > mem.memory_capacity {
            return Err(invalid(
                "memory.min_memory_size",
                format!(
                    "{} exceeds memory.memory_capacity ({})",
                    mem.min_memory_size, mem.memory_capacity
                ),
            ));
        }
        within("memory.per_alpha", mem.per_alpha, 0.0, 10.0)?;
        within("memory.per_epsilon", mem.per_epsilon, 0.0, 1.0)?;
        within("memory.per_beta", mem.per_beta, 0.0, 1.0)?;

        let d = &self.data_types;
        one_of(
            "data_types.model_dtype",
            &d.model_dtype,
            &["auto", "float32", "bfloat16", "float16"],
        )?;
        one_of(
            "data_types.action_dtype",
            &d.action_dtype,
            &["int64", "int32"],
        )?;
        one_of("data_types.target_dtype", &d.target_dtype, &["float32"])?;

        let dev = &self.device;
        parse_device(&dev.device_type).map_err(|m| invalid("device.device_type", m))?;
        at_least("device.num_devices", dev.num_devices, 1)?;
        if !t.batch_size.is_multiple_of(dev.num_devices) {
            return Err(invalid(
                "training.batch_size",
                format!(
                    "{} does not divide evenly over device.num_devices = {}",
                    t.batch_size, dev.num_devices
                ),
            ));
        }
        Ok(())
    }

    /// Transitions required in replay before training starts.
    pub fn min_replay_transitions(&self) -> usize {
        let pct = (self.memory.min_memory_pct * self.memory.memory_capacity as f64).ceil() as usize;
        self.memory.min_memory_size.max(pct).max(1)
    }

    /// Visit-count temperature at training progress `progress` in [0, 1].
    pub fn temperature_at(&self, progress: f64) -> f64 {
        let mut temperature = self.mcts.temperature_schedule[0].1;
        for &(from, t) in &self.mcts.temperature_schedule {
            if progress >= from {
                temperature = t;
            }
        }
        temperature
    }
}

/// A parsed `device_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    Cpu,
    Cuda(usize),
}

/// Parse `cpu`, `cuda` or `cuda:N`.
pub fn parse_device(text: &str) -> Result<DeviceKind, String> {
    match text.trim() {
        "cpu" => Ok(DeviceKind::Cpu),
        "cuda" => Ok(DeviceKind::Cuda(0)),
        other => match other.strip_prefix("cuda:").map(str::parse::<usize>) {
            Some(Ok(i)) => Ok(DeviceKind::Cuda(i)),
            _ => Err(format!(
                "\"{other}\" is not a device: use cpu, cuda or cuda:N (N = GPU index)"
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_with(sources: ConfigSources) -> Result<Config, ConfigError> {
        Config::load(&sources)
    }

    fn sets(flags: &[&str]) -> ConfigSources {
        ConfigSources {
            sets: flags.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    fn error_text(result: Result<Config, ConfigError>) -> String {
        result
            .expect_err("expected an invalid configuration")
            .to_string()
    }

    #[test]
    fn embedded_defaults_load_and_validate() {
        let c = Config::default_config();
        assert_eq!(c.environment.env_name, "CartPole-v1");
        assert_eq!(c.device.device_type, "cpu");
    }

    #[test]
    fn file_layer_overrides_defaults_and_keeps_original_section_names() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.json");
        std::fs::write(
            &path,
            r#"{"Training": {"batch_size": 48}, "Data Types": {"model_dtype": "bfloat16"}, "Self-Play": {"td_steps": 7}}"#,
        )
        .unwrap();
        let c = load_with(ConfigSources {
            files: vec![path],
            ..Default::default()
        })
        .unwrap();
        assert_eq!(c.training.batch_size, 48);
        assert_eq!(c.data_types.model_dtype, "bfloat16");
        assert_eq!(c.self_play.td_steps, 7);
        // Untouched keys keep their defaults.
        assert_eq!(c.mcts, Config::default_config().mcts);
    }

    #[test]
    fn original_python_cumind_file_loads() {
        // The key set of the original CuMind configuration.json (values changed to ones valid here).
        let text = r#"{
          "Network architecture": {"hidden_dim": 128, "num_blocks": 2, "conv_channels": 32},
          "Training": {"batch_size": 32, "learning_rate": 0.001, "weight_decay": 0.0001,
             "target_update_frequency": 1000, "checkpoint_interval": 100, "num_episodes": 500,
             "train_frequency": 5, "checkpoint_root_dir": "checkpoints"},
          "MCTS": {"num_simulations": 10, "c_puct": 1.0, "dirichlet_alpha": 0.3, "exploration_fraction": 0.25},
          "Environment": {"env_name": "CartPole-v1", "action_space_size": 2, "observation_shape": [4]},
          "Self-Play": {"num_unroll_steps": 3, "td_steps": 5, "discount": 0.997},
          "Memory": {"memory_capacity": 1000, "min_memory_size": 3, "min_memory_pct": 0.0,
             "per_alpha": 0.6, "per_epsilon": 1e-06, "per_beta": 0.4},
          "Data Types": {"model_dtype": "float32", "action_dtype": "int32", "target_dtype": "float32"},
          "Device": {"device_type": "cpu"},
          "Other": {"seed": 42}
        }"#;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.json");
        std::fs::write(&path, text).unwrap();
        let c = load_with(ConfigSources {
            files: vec![path],
            ..Default::default()
        })
        .unwrap();
        assert_eq!(c.network_architecture.hidden_dim, 128);
        assert_eq!(c.training.num_episodes, 500);
        assert_eq!(c.memory.per_alpha, 0.6);
        assert_eq!(c.data_types.action_dtype, "int32");
    }

    #[test]
    fn environment_variable_layer_overrides_file_and_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.json");
        std::fs::write(&path, r#"{"Training": {"batch_size": 48}}"#).unwrap();
        let c = load_with(ConfigSources {
            files: vec![path],
            env_vars: vec![
                ("CUMIND_TRAINING__BATCH_SIZE".into(), "64".into()),
                ("CUMIND_DATA_TYPES__MODEL_DTYPE".into(), "float16".into()),
                ("CUMIND_SELF_PLAY__DISCOUNT".into(), "0.5".into()),
                ("UNRELATED".into(), "x".into()),
            ],
            ..Default::default()
        })
        .unwrap();
        assert_eq!(c.training.batch_size, 64);
        assert_eq!(c.data_types.model_dtype, "float16");
        assert_eq!(c.self_play.discount, 0.5);
    }

    #[test]
    fn set_flags_override_environment_variables() {
        let c = load_with(ConfigSources {
            env_vars: vec![("CUMIND_TRAINING__BATCH_SIZE".into(), "64".into())],
            sets: vec![
                "training.batch_size=96".into(),
                "Environment.env_name=Catch".into(),
                "mcts.temperature_schedule=[[0.0, 0.5]]".into(),
            ],
            ..Default::default()
        })
        .unwrap();
        assert_eq!(c.training.batch_size, 96);
        assert_eq!(c.environment.env_name, "Catch");
        assert_eq!(c.mcts.temperature_schedule, vec![(0.0, 0.5)]);
    }

    #[test]
    fn unknown_key_is_named() {
        let text = error_text(load_with(sets(&["training.batch_sise=3"])));
        assert!(
            text.contains("training") && text.contains("batch_sise"),
            "{text}"
        );
        let text = error_text(load_with(ConfigSources {
            env_vars: vec![("CUMIND_MCTS__SIMS".into(), "3".into())],
            ..Default::default()
        }));
        assert!(text.contains("sims"), "{text}");
    }

    #[test]
    fn unknown_section_is_named() {
        let text = error_text(load_with(sets(&["trainer.batch_size=3"])));
        assert!(text.contains("trainer"), "{text}");
    }

    #[test]
    fn wrong_type_is_named() {
        let text = error_text(load_with(sets(&["training.batch_size=\"many\""])));
        assert!(text.contains("training.batch_size"), "{text}");
        let text = error_text(load_with(sets(&["mcts.num_simulations=-3"])));
        assert!(text.contains("mcts.num_simulations"), "{text}");
    }

    #[test]
    fn out_of_range_values_are_named_with_what_is_allowed() {
        let text = error_text(load_with(sets(&["self_play.discount=1.5"])));
        assert!(
            text.contains("self_play.discount") && text.contains("[0, 1]"),
            "{text}"
        );
        let text = error_text(load_with(sets(&["data_types.model_dtype=float8"])));
        assert!(
            text.contains("data_types.model_dtype") && text.contains("bfloat16"),
            "{text}"
        );
        let text = error_text(load_with(sets(&["environment.env_name=Pong"])));
        assert!(
            text.contains("CartPole-v1") && text.contains("Pong"),
            "{text}"
        );
        let text = error_text(load_with(sets(&["environment.action_space_size=3"])));
        assert!(text.contains("environment.action_space_size"), "{text}");
        let text = error_text(load_with(sets(&["device.device_type=gpu"])));
        assert!(
            text.contains("device.device_type") && text.contains("cuda:N"),
            "{text}"
        );
        let text = error_text(load_with(sets(&[
            "training.batch_size=10",
            "device.num_devices=3",
        ])));
        assert!(text.contains("divide"), "{text}");
    }

    #[test]
    fn malformed_file_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("broken.json");
        std::fs::write(&path, "{\"Training\": {").unwrap();
        let text = error_text(load_with(ConfigSources {
            files: vec![path],
            ..Default::default()
        }));
        assert!(text.contains("broken.json"), "{text}");
        let text = error_text(load_with(sets(&["no_equals_sign"])));
        assert!(text.contains("no_equals_sign"), "{text}");
    }

    #[test]
    fn printed_configuration_round_trips() {
        let c = load_with(sets(&[
            "training.batch_size=80",
            "mcts.search_policy=gumbel",
        ]))
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dump.json");
        std::fs::write(&path, c.to_json()).unwrap();
        let back = load_with(ConfigSources {
            files: vec![path],
            ..Default::default()
        })
        .unwrap();
        assert_eq!(back, c);
        assert!(c.to_json().contains("\"Network architecture\""));
    }

    #[test]
    fn network_type_is_validated_against_the_observations() {
        let text = error_text(load_with(sets(&["network_architecture.network_type=conv"])));
        assert!(
            text.contains("[C, H, W]") && text.contains("CartPole-v1"),
            "{text}"
        );
        let text = error_text(load_with(sets(&[
            "network_architecture.network_type=transformer",
        ])));
        assert!(text.contains("network_architecture.network_type"), "{text}");
        let c = load_with(sets(&[
            "environment.env_name=TicTacToe",
            "network_architecture.network_type=conv",
        ]))
        .unwrap();
        assert_eq!(c.network_architecture.network_type, "conv");
    }

    #[test]
    fn temperature_schedule_applies_the_last_reached_entry() {
        let c = Config::default_config();
        let schedule = &c.mcts.temperature_schedule;
        assert_eq!(c.temperature_at(0.0), schedule[0].1);
        let last = schedule[schedule.len() - 1];
        assert_eq!(c.temperature_at(1.0), last.1);
    }
}
