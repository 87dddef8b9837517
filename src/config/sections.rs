//! The sections of the configuration file as typed values: every choice is an enum, so an
//! invalid choice fails to parse with the key named and the variants listed, and nothing
//! compares strings after loading.

use serde::{Deserialize, Serialize};

use crate::support::Transform;

/// `network_architecture.network_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkType {
    /// The conv ResNet for `[C, H, W]` observations, the MLP otherwise.
    Auto,
    /// The MLP on flattened observations.
    Mlp,
    /// The conv ResNet (`[C, H, W]` observations only).
    Conv,
}

/// `mcts.search_policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchPolicyKind {
    /// MuZero's pUCT with Dirichlet root noise and visit-count temperature.
    Puct,
    /// Gumbel MuZero: Gumbel-top-k root sampling and sequential halving.
    Gumbel,
}

/// `mcts.symmetric_search`: where every root is also searched through the environment's
/// symmetries, with the roots' statistics pooled (see `search::symmetric`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SymmetricSearch {
    /// Each root is searched once.
    Off,
    /// Greedy play only: evaluations during training, `eval`, `play` and the `Agent`.
    /// Self-play and reanalyse search each root once.
    Evaluation,
    /// Everywhere, self-play and reanalyse included.
    Always,
}

/// `mcts.model`: what the search steps through below the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchModelKind {
    /// MuZero: the learned dynamics network.
    Learned,
    /// AlphaZero: copies of the real game (the network gives the policy and the value only).
    Exact,
}

/// `self_play.value_target`: where n-step targets take their bootstrap value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ValueTargetSource {
    /// The root values stored with the game when it was played.
    Root,
    /// The target network's value of the bootstrap observation, at training time.
    TargetNetwork,
}

/// `training.reanalyse_network`: the network reanalyse searches with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReanalyseNetwork {
    /// The target network (refreshed every `target_update_frequency` steps; EfficientZero).
    TargetNetwork,
    /// The parameters being trained, as they are at the training step.
    Latest,
}

/// `data_types.model_dtype`: the compute dtype of the forward pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelDtype {
    /// bfloat16 on CUDA, float32 on the CPU (where candle emulates bf16).
    Auto,
    Float32,
    Bfloat16,
    Float16,
}

/// `mcts.inference_dtype`: the compute dtype of the search's network calls on the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InferenceDtype {
    Float32,
    /// The conv networks' 3 x 3 convolutions in bf16 with f32 sums, where the CPU has AVX-512
    /// BF16; float32 elsewhere.
    Bfloat16,
}

/// `data_types.action_dtype`: accepted for files of the Python CuMind; unused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionDtype {
    Int64,
    Int32,
}

/// `data_types.target_dtype`: targets and losses are reduced in float32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetDtype {
    Float32,
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
    /// Conv ResNet: planes of the 1 x 1 convolution in front of the value head (AlphaZero and
    /// MuZero: 1; EfficientZero: 16 on Atari).
    pub value_head_channels: usize,
    /// Conv ResNet: planes of the 1 x 1 convolution in front of the policy's linear layer
    /// (AlphaZero and MuZero: 2).
    pub policy_head_channels: usize,
    /// Conv ResNet: planes of the dynamics' 1 x 1 convolution in front of the reward head (1).
    pub reward_head_channels: usize,
    /// "auto" (conv ResNet for `[C, H, W]` observations, MLP otherwise), "mlp" or "conv".
    pub network_type: NetworkType,
    /// Value head support is the integers `-n..=n` (after the h(x) transform).
    pub value_support_size: usize,
    /// Reward head support is the integers `-n..=n` (after the h(x) transform); with a value
    /// prefix it must hold the sums of up to `value_prefix_horizon` rewards.
    pub reward_support_size: usize,
    /// Between values or rewards and the supports' atoms: "h" (MuZero's h(x), wide ranges on
    /// few atoms) or "none" (the atoms are the values: with a support size of 1, win / draw /
    /// loss heads for a board game's outcomes of -1, 0 and 1).
    pub support_transform: Transform,
    /// Width of the LSTM of EfficientZero's value prefix: the dynamics predicts the sum of
    /// the rewards since the last reset instead of each reward (0: off).
    pub value_prefix_dim: usize,
    /// The value prefix resets every this many steps of an unroll or a search path (0: only
    /// at the root). EfficientZero uses 5.
    pub value_prefix_horizon: usize,
    /// Conv ResNet: the dynamics reads its action as planes over the board that mark where the
    /// action acts (a Connect Four move's column, a tic-tac-toe move's cell; the environment's
    /// `action_planes`) instead of constant planes. For board games whose environment gives
    /// them.
    #[serde(default)]
    pub spatial_actions: bool,
}

impl NetworkConfig {
    /// Whether the network is the conv ResNet: "conv", or "auto" where the observations are
    /// `[C, H, W]` planes (`image_observations`).
    pub fn uses_conv(&self, image_observations: bool) -> bool {
        match self.network_type {
            NetworkType::Conv => true,
            NetworkType::Mlp => false,
            NetworkType::Auto => image_observations,
        }
    }
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
    /// Step directories kept per run, the newest ones (0: every one, to compare or evaluate
    /// the steps of a run later).
    pub keep_checkpoints: usize,
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
    /// Stop once the run's clock (every segment of a resumed run together) passes this many
    /// seconds (0: no limit). A stop only: the learning-rate and temperature schedules follow
    /// the step budgets, so a run stopped by the clock is the same run as far as it went.
    pub max_seconds: f64,
    /// Training steps per environment step (the replay ratio).
    pub train_ratio: f64,
    /// Fraction of each sampled batch whose policy targets are recomputed by a fresh search
    /// (MuZero Reanalyse; 0: off).
    pub reanalyse_fraction: f64,
    /// Simulations of a reanalyse search (0: `mcts.num_simulations`).
    pub reanalyse_simulations: usize,
    /// The network reanalyse searches with.
    pub reanalyse_network: ReanalyseNetwork,
    /// Store each reanalysed policy target in the replay memory in place of the one the game
    /// was played with, so positions sampled later without a search of their own train on the
    /// newest target (MuZero Reanalyse keeps its targets this way).
    pub reanalyse_write_back: bool,
    /// Linear learning-rate warm-up, in training steps.
    pub lr_warmup_steps: usize,
    /// The learning rate decays (cosine) to this fraction of its peak by the end of the run.
    pub lr_final_fraction: f64,
    /// Global gradient-norm clipping (0: off).
    pub max_grad_norm: f64,
    /// Weight of the value loss relative to reward and policy losses.
    pub value_loss_weight: f64,
    /// Weight of EfficientZero's self-supervised temporal consistency loss (0: off, and the
    /// network has no projection heads).
    pub consistency_loss_weight: f64,
    /// Environment steps between greedy evaluations (0: off).
    pub eval_interval: usize,
    /// Episodes per evaluation.
    pub eval_episodes: usize,
    /// Two-player games: the evaluations' opponent, written as `cumind eval --opponent`
    /// takes it ("random", "alphabeta:DEPTH", "perfect", "checkpoint:DIR"); the agent plays
    /// first in half the episodes and second in the other half.
    pub eval_opponent: String,
    /// Plies played at random by both players at the start of each evaluation game.
    pub eval_opening_plies: usize,
    /// Simulations of the evaluations during training (0: those of greedy play,
    /// `mcts.eval_simulations`), so that a preset can play `eval` with a deep search and
    /// still evaluate cheaply while it trains.
    pub eval_simulations: usize,
    /// Stop early once an evaluation's mean return reaches this (0: never).
    pub stop_return: f64,
    /// Episodes of a confirming evaluation (0: none). When an evaluation reaches
    /// `stop_return`, this many more greedy episodes, from other starting states, must reach it
    /// too before the run stops; otherwise training goes on.
    pub stop_confirm_episodes: usize,
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
    pub search_policy: SearchPolicyKind,
    pub max_considered_actions: usize,
    pub gumbel_c_visit: f64,
    pub gumbel_c_scale: f64,
    /// Scale of the root's Gumbel noise in self-play (1: the paper's sampling; 0: always the
    /// improved policy's best action).
    pub gumbel_noise_scale: f64,
    /// Search every root also through each of the environment's symmetries and pool the
    /// roots' statistics (an equivariant search at `1 + symmetries` times the cost; no effect
    /// for environments without symmetries): "off", "evaluation" or "always". With the exact
    /// model, every network evaluation inside the search is pooled over the symmetries instead
    /// (see `crate::exact_model`), at `1 + symmetries` times the network's cost.
    pub symmetric_search: SymmetricSearch,
    /// "learned" (MuZero: the dynamics network) or "exact" (AlphaZero: the search steps
    /// copies of the real game for the next state, the reward, the end and the legal moves).
    pub model: SearchModelKind,
    /// Simulations of greedy play (`eval`, `play`, the `Agent` with `training = false`, and
    /// the evaluations during training unless `training.eval_simulations` is set); 0:
    /// `num_simulations`, as self-play.
    pub eval_simulations: usize,
    /// Visit-count temperature: `[[progress, temperature], ...]`, progress in [0, 1] of the
    /// training budget, sorted; the last entry whose progress has been reached applies.
    pub temperature_schedule: Vec<(f64, f64)>,
    /// pUCT self-play: moves of each game (after any random opening) sampled at the
    /// schedule's temperature; later moves are the most visited one (AlphaZero's 30 sampling
    /// moves in chess). `null`: every move is sampled.
    pub sampling_moves: Option<usize>,
    /// pUCT: known bounds `[min, max]` of the values, where Q's normalisation starts (MuZero's
    /// known bounds, `[-1, 1]` for a board game's outcome); `null`: each tree's own range.
    pub value_bounds: Option<(f64, f64)>,
    /// pUCT: an unvisited child's value term, "min" (the bottom of the normalised range, as
    /// MuZero) or "parent" (the parent's mean value).
    pub unvisited_value: crate::search::UnvisitedValue,
    /// With the exact model: check every searched position one move ahead with the real
    /// rules (a win at once sets its value and prior; moves that leave the opponent a win at
    /// once lose their prior when others do not). See `crate::exact_model`.
    pub decisive_moves: bool,
    /// With the exact model: prove wins and losses inside the tree from the game's ends and
    /// back up proven values exactly (MCTS-Solver). For games whose returns lie in [-1, 1].
    #[serde(default)]
    pub solver: bool,
    /// Compute dtype of the search's network calls on the CPU (self-play, the evaluations,
    /// `eval`, `play`, the `Agent`): "float32", or "bfloat16" for a conv network's 3 x 3
    /// convolutions on CPUs with AVX-512 BF16 (the input and the filters rounded to bf16, the
    /// sums in f32; float32 on other CPUs and other networks). Training is not affected.
    #[serde(default = "default_inference_dtype")]
    pub inference_dtype: InferenceDtype,
}

fn default_inference_dtype() -> InferenceDtype {
    InferenceDtype::Float32
}

/// "Environment".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvironmentConfig {
    /// A built-in or registered environment name (see `cumind_envs::all_names()`).
    pub env_name: String,
    /// Keyword arguments of `gymnasium.make` for a `gymnasium:ID` environment (empty for the
    /// others, which take none).
    pub env_kwargs: cumind_envs::Kwargs,
    /// Optional consistency check: must equal the environment's number of actions.
    pub action_space_size: Option<usize>,
    /// Optional consistency check: must equal the environment's observation shape.
    pub observation_shape: Option<Vec<usize>>,
    /// Environments stepped in parallel (and searched in one batch) by each actor.
    pub num_envs: usize,
    /// Fixed per-feature multipliers of the observations, applied at the network's input
    /// (empty: none). One per value of a flattened observation; stored observations stay raw.
    pub observation_scale: Vec<f64>,
    /// Observations of the environment's newest this many frames, oldest first along the
    /// first dimension (`cumind_envs::FrameStack`; 1: single frames).
    pub frame_stack: usize,
}

impl EnvironmentConfig {
    /// The environment's name with its keyword arguments: what builds it.
    pub fn spec(&self) -> cumind_envs::EnvSpec {
        cumind_envs::EnvSpec::with_kwargs(self.env_name.clone(), self.env_kwargs.clone())
            .with_frame_stack(self.frame_stack)
    }
}

/// "Self-Play".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SelfPlayConfig {
    /// K: steps the dynamics network is unrolled in training.
    pub num_unroll_steps: usize,
    /// n: steps of the bootstrapped value target.
    pub td_steps: usize,
    /// Off-policy correction (EfficientZero): a replayed position's bootstrap horizon shrinks
    /// by one step for every this many transitions stored after it, down to 1 (0: off).
    pub td_age_transitions: usize,
    pub discount: f64,
    /// Self-play threads running beside the learner (0: actor and learner take turns in one
    /// thread); a seed reproduces a run either way.
    pub num_actors: usize,
    /// Bootstrap values from "root" (stored search values) or "target_network".
    pub value_target: ValueTargetSource,
    /// Long episodes enter the replay buffer in segments of this many transitions (0: whole
    /// episodes only), so training sees fresh data while an episode goes on.
    pub game_segment_length: usize,
    /// A segment cut from a long episode waits for the `num_unroll_steps + td_steps`
    /// transitions after its cut and keeps them (not sampled), so the positions before the
    /// cut get the unroll and n-step targets of the whole game; false hands segments over at
    /// the cut (their last positions then bootstrap early and lose unroll targets).
    pub pad_segments: bool,
    /// Replayed positions of environments that declare symmetries (TicTacToe, ConnectFour,
    /// CartPole) are seen through a random one of them (rotations, reflections, mirrors).
    pub symmetry_augmentation: bool,
    /// Each self-play game opens with 0..=N uniformly random legal moves (N drawn uniformly
    /// per game), which are not stored: the agent learns positions its own play would not
    /// reach. For board games; 0 turns it off.
    pub random_opening_plies: usize,
    /// Playout cap randomization: simulations of the fast searches that play most moves
    /// without storing a policy target (0: every move gets the full `mcts.num_simulations`
    /// search and its policy target). See `selfplay::PlayoutCap`.
    #[serde(default)]
    pub fast_simulations: usize,
    /// With `fast_simulations`: the probability that a move gets the full search (and a
    /// policy target).
    #[serde(default = "default_full_search_fraction")]
    pub full_search_fraction: f64,
}

fn default_full_search_fraction() -> f64 {
    0.25
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
    /// Megabytes (10^6 bytes) the replay buffer's games may occupy (0: no limit); the oldest
    /// games are evicted past it, as past `memory_capacity` transitions.
    pub memory_budget_mb: f64,
}

/// "Data Types".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataTypesConfig {
    /// Compute dtype of the forward pass: float32, bfloat16, float16 or auto
    /// (bfloat16 on CUDA, float32 on the CPU). Parameters stay float32.
    pub model_dtype: ModelDtype,
    /// int64 or int32. Accepted (and validated) for files of the Python CuMind; unused here,
    /// since actions enter the networks one-hot.
    pub action_dtype: ActionDtype,
    /// Dtype in which targets and losses are reduced: float32 only.
    pub target_dtype: TargetDtype,
}

/// `true`, for keys that files written before the key existed leave out.
fn default_true() -> bool {
    true
}

/// "Device".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceConfig {
    /// cpu, cuda, cuda:N or auto.
    pub device_type: DeviceKind,
    /// Model replicas (data parallelism).
    pub num_devices: usize,
    /// Fused kernels (layer norm, bias add, ReLU, soft cross-entropy, each with its backward)
    /// for f32 compute on the CPU and CUDA; false runs candle's elementary ops instead (slower,
    /// the same numbers to float rounding): a fallback should a kernel misbehave on a new GPU.
    pub fused_kernels: bool,
    /// On CUDA, each search's recurrent inference after its first two calls replays one
    /// captured CUDA graph instead of launching its ops one by one (the same numbers, less
    /// host work per call). Used where one thread drives the device: `cumind benchmark`, and
    /// self-play without actor threads. No effect on the CPU.
    #[serde(default = "default_true")]
    pub cuda_graphs: bool,
    /// Threads kept awake beside each search of 128 or more trees to share its per-tree work
    /// (0: the rayon pool's threads, which sleep between simulations). Meant for a search whose
    /// network runs on a GPU, where the search thread waits for every call; the helpers spin
    /// for the length of each search. Results do not depend on it.
    #[serde(default)]
    pub search_helper_threads: usize,
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

/// `device.device_type`: `cpu`, `cuda` (GPU 0), `cuda:N`, or `auto` (GPU 0 where the
/// network's calls are large enough for a GPU to pay, else the CPU: see
/// `network::cost::gpu_pays`); written and read as that text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    Cpu,
    Cuda(usize),
    Auto,
}

impl std::fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceKind::Cpu => write!(f, "cpu"),
            DeviceKind::Cuda(0) => write!(f, "cuda"),
            DeviceKind::Cuda(i) => write!(f, "cuda:{i}"),
            DeviceKind::Auto => write!(f, "auto"),
        }
    }
}

impl std::str::FromStr for DeviceKind {
    type Err = String;

    /// Parse `cpu`, `cuda`, `cuda:N` or `auto`.
    fn from_str(text: &str) -> Result<Self, String> {
        match text.trim() {
            "cpu" => Ok(DeviceKind::Cpu),
            "auto" => Ok(DeviceKind::Auto),
            "cuda" => Ok(DeviceKind::Cuda(0)),
            other => match other.strip_prefix("cuda:").map(str::parse::<usize>) {
                Some(Ok(i)) => Ok(DeviceKind::Cuda(i)),
                _ => Err(format!(
                    "\"{other}\" is not a device: use cpu, cuda, cuda:N (N = GPU index) or auto"
                )),
            },
        }
    }
}

impl Serialize for DeviceKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for DeviceKind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Parse `cpu`, `cuda`, `cuda:N` or `auto`.
pub fn parse_device(text: &str) -> Result<DeviceKind, String> {
    text.parse()
}
