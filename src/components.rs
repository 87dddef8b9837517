//! Builds the parts of an agent from a validated [`Config`]: the network spec, the search,
//! replay and learner configurations. Shared by training, evaluation and the library API.

use crate::config::{
    Config, InferenceDtype, NetworkType, SearchModelKind, SearchPolicyKind, SymmetricSearch,
    ValueTargetSource,
};
use crate::network::NetworkSpec;
use crate::replay::ReplayConfig;
use crate::search::{SearchConfig, SearchPolicy};
use crate::selfplay::PlayoutCap;
use crate::support::Support;
use crate::train::optimizer::{AdamWConfig, LrSchedule};
use crate::train::{LearnerConfig, ValueTarget};

/// What the agent needs to know of its environment.
#[derive(Debug, Clone, PartialEq)]
pub struct EnvInfo {
    pub observation_shape: Vec<usize>,
    pub num_actions: usize,
    pub num_players: usize,
    /// The game's symmetries other than the identity.
    pub symmetries: Vec<cumind_envs::Symmetry>,
    /// Where each action acts on the board (`Environment::action_planes`), if anywhere.
    pub action_planes: Option<Vec<f32>>,
}

impl EnvInfo {
    /// Read the spaces of the configured environment.
    pub fn of(config: &Config) -> Result<Self, cumind_envs::EnvError> {
        let env = config.environment.spec().make()?;
        Ok(Self {
            observation_shape: env.observation_space().shape(),
            num_actions: env.action_space().n().unwrap_or(0),
            num_players: env.num_players(),
            symmetries: env.symmetries(),
            action_planes: env.action_planes(),
        })
    }
}

/// The network architecture for `config` and `env`.
pub fn network_spec(config: &Config, env: &EnvInfo) -> NetworkSpec {
    let n = &config.network_architecture;
    NetworkSpec {
        observation_shape: env.observation_shape.clone(),
        num_actions: env.num_actions,
        hidden_dim: n.hidden_dim,
        latent_dim: n.latent_dim,
        num_blocks: n.num_blocks,
        conv_channels: n.conv_channels,
        value_head_channels: n.value_head_channels,
        policy_head_channels: n.policy_head_channels,
        reward_head_channels: n.reward_head_channels,
        force_mlp: n.network_type == NetworkType::Mlp,
        value_support: Support::symmetric(n.value_support_size as u32)
            .with_transform(n.support_transform),
        reward_support: Support::symmetric(n.reward_support_size as u32)
            .with_transform(n.support_transform),
        projection_dim: if config.training.consistency_loss_weight > 0.0 {
            n.hidden_dim
        } else {
            0
        },
        observation_scale: config
            .environment
            .observation_scale
            .iter()
            .map(|&s| s as f32)
            .collect(),
        value_prefix_dim: n.value_prefix_dim,
        value_prefix_horizon: n.value_prefix_horizon,
        // The configuration's checks make sure the environment gives them.
        action_planes: match (&env.action_planes, n.spatial_actions) {
            (Some(planes), true) => planes.clone(),
            _ => Vec::new(),
        },
    }
}

/// The search configuration of greedy play (evaluation, `eval`, `play`, the `Agent`).
pub fn search_config(config: &Config, env: &EnvInfo) -> SearchConfig {
    let mut search = search_config_for(
        config,
        env,
        config.mcts.symmetric_search != SymmetricSearch::Off,
    );
    if config.mcts.eval_simulations > 0 {
        search.num_simulations = config.mcts.eval_simulations;
    }
    search
}

/// The search configuration of the evaluations during training: greedy play's, with
/// `training.eval_simulations` in place of its simulations where that is set.
pub fn training_evaluation_search_config(config: &Config, env: &EnvInfo) -> SearchConfig {
    let mut search = search_config(config, env);
    if config.training.eval_simulations > 0 {
        search.num_simulations = config.training.eval_simulations;
    }
    search
}

/// The search configuration of self-play and reanalyse.
pub fn self_play_search_config(config: &Config, env: &EnvInfo) -> SearchConfig {
    search_config_for(
        config,
        env,
        config.mcts.symmetric_search == SymmetricSearch::Always,
    )
}

fn search_config_for(config: &Config, env: &EnvInfo, symmetric: bool) -> SearchConfig {
    let m = &config.mcts;
    SearchConfig {
        num_simulations: m.num_simulations,
        discount: config.self_play.discount as f32,
        c1: m.c_puct as f32,
        c2: m.c_base as f32,
        dirichlet_alpha: m.dirichlet_alpha as f32,
        exploration_fraction: m.exploration_fraction as f32,
        two_player: env.num_players > 1,
        policy: if m.search_policy == SearchPolicyKind::Gumbel {
            SearchPolicy::Gumbel {
                max_considered_actions: m.max_considered_actions,
                c_visit: m.gumbel_c_visit as f32,
                c_scale: m.gumbel_c_scale as f32,
                noise_scale: m.gumbel_noise_scale as f32,
            }
        } else {
            SearchPolicy::Puct
        },
        symmetries: if symmetric {
            env.symmetries.clone()
        } else {
            Vec::new()
        },
        exact_rules: m.model == SearchModelKind::Exact,
        sampling_moves: m.sampling_moves,
        value_bounds: m.value_bounds.map(|(lo, hi)| (lo as f32, hi as f32)),
        unvisited_value: m.unvisited_value,
        decisive_moves: m.decisive_moves,
        solver: m.solver,
        helper_threads: config.device.search_helper_threads,
        bf16_inference: m.inference_dtype == InferenceDtype::Bfloat16,
    }
}

/// The replay configuration.
pub fn replay_config(config: &Config, env: &EnvInfo) -> ReplayConfig {
    let mem = &config.memory;
    ReplayConfig {
        capacity: mem.memory_capacity,
        num_unroll_steps: config.self_play.num_unroll_steps,
        td_steps: config.self_play.td_steps,
        discount: config.self_play.discount as f32,
        per_alpha: mem.per_alpha as f32,
        per_beta: mem.per_beta as f32,
        per_epsilon: mem.per_epsilon as f32,
        two_player: env.num_players > 1,
        max_bytes: (mem.memory_budget_mb * 1e6) as usize,
        td_age_transitions: config.self_play.td_age_transitions,
        symmetries: if config.self_play.symmetry_augmentation {
            env.symmetries.clone()
        } else {
            Vec::new()
        },
    }
}

/// Self-play's fast searches, when `self_play.fast_simulations` turns them on.
pub fn playout_cap(config: &Config) -> Option<PlayoutCap> {
    let sp = &config.self_play;
    (sp.fast_simulations > 0).then_some(PlayoutCap {
        fast_simulations: sp.fast_simulations,
        full_fraction: sp.full_search_fraction as f32,
    })
}

/// Transitions a cut segment is padded with: `num_unroll_steps + td_steps`, enough for the
/// targets of every position before the cut (0 with `self_play.pad_segments` off, or
/// without segments).
pub fn segment_padding(config: &Config) -> usize {
    let sp = &config.self_play;
    if sp.pad_segments && sp.game_segment_length > 0 {
        sp.num_unroll_steps + sp.td_steps
    } else {
        0
    }
}

/// The learner configuration; `total_steps` is the expected length of the run in training
/// steps (for the learning-rate decay).
pub fn learner_config(config: &Config, total_steps: usize) -> LearnerConfig {
    let t = &config.training;
    LearnerConfig {
        optimizer: AdamWConfig {
            learning_rate: t.learning_rate,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: t.weight_decay,
            max_grad_norm: t.max_grad_norm,
        },
        schedule: LrSchedule {
            peak: t.learning_rate,
            warmup_steps: t.lr_warmup_steps,
            total_steps,
            final_fraction: t.lr_final_fraction,
        },
        value_loss_weight: t.value_loss_weight,
        consistency_loss_weight: t.consistency_loss_weight,
        target_update_frequency: t.target_update_frequency,
        value_target: if config.self_play.value_target == ValueTargetSource::Root {
            ValueTarget::StoredRoot
        } else {
            ValueTarget::TargetNetwork
        },
    }
}

/// Expected training steps of a run: the explicit cap, else env budget x ratio.
pub fn expected_training_steps(config: &Config) -> usize {
    let t = &config.training;
    if t.max_training_steps > 0 {
        t.max_training_steps
    } else if t.max_env_steps > 0 {
        (t.max_env_steps as f64 * t.train_ratio) as usize
    } else {
        100_000
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symmetric_search_reaches_greedy_play_and_self_play_as_configured() {
        let mut config = Config::default_config(); // CartPole-v1: one mirror image
        let env = EnvInfo::of(&config).unwrap();
        for (mode, greedy, self_play) in [
            (SymmetricSearch::Off, 0, 0),
            (SymmetricSearch::Evaluation, 1, 0),
            (SymmetricSearch::Always, 1, 1),
        ] {
            config.mcts.symmetric_search = mode;
            assert_eq!(search_config(&config, &env).symmetries.len(), greedy);
            assert_eq!(
                self_play_search_config(&config, &env).symmetries.len(),
                self_play
            );
        }
    }

    #[test]
    fn inference_dtype_reaches_every_search() {
        let mut config = Config::default_config();
        let env = EnvInfo::of(&config).unwrap();
        assert!(!search_config(&config, &env).bf16_inference);
        config.mcts.inference_dtype = InferenceDtype::Bfloat16;
        assert!(search_config(&config, &env).bf16_inference);
        assert!(self_play_search_config(&config, &env).bf16_inference);
    }

    #[test]
    fn eval_simulations_set_greedy_play_only() {
        let mut config = Config::default_config();
        let env = EnvInfo::of(&config).unwrap();
        config.mcts.num_simulations = 4;
        config.mcts.eval_simulations = 0;
        assert_eq!(search_config(&config, &env).num_simulations, 4);
        config.mcts.eval_simulations = 16;
        assert_eq!(search_config(&config, &env).num_simulations, 16);
        assert_eq!(self_play_search_config(&config, &env).num_simulations, 4);
    }

    #[test]
    fn training_eval_simulations_set_the_evaluations_during_training_only() {
        let mut config = Config::default_config();
        let env = EnvInfo::of(&config).unwrap();
        config.mcts.num_simulations = 4;
        config.mcts.eval_simulations = 16;
        config.training.eval_simulations = 0;
        assert_eq!(
            training_evaluation_search_config(&config, &env).num_simulations,
            16
        );
        config.training.eval_simulations = 8;
        assert_eq!(
            training_evaluation_search_config(&config, &env).num_simulations,
            8
        );
        assert_eq!(search_config(&config, &env).num_simulations, 16);
        assert_eq!(self_play_search_config(&config, &env).num_simulations, 4);
    }
}
