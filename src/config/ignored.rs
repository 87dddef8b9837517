//! Keys a configuration accepts but a command would not read, so the CLI can say so.
//!
//! A valid configuration can still hold values that change nothing: pUCT's constants under
//! Gumbel MuZero, the conv width of an MLP, the evaluation size with evaluation off. A user who
//! sets one believes they changed the run. [`Config::ignored_keys`] lists such keys for a
//! training run, with the reason; [`Config::value_of`] reads a key's value so the caller can
//! warn only about values that differ from the defaults or were set explicitly.

use super::{Config, NetworkType, SearchModelKind, SearchPolicyKind, ValueTargetSource};

/// A key whose value has no effect, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IgnoredKey {
    /// `section.key` (snake case, as `--set` writes it).
    pub key: &'static str,
    /// Why nothing reads it, naming the key that decides.
    pub reason: String,
}

/// Keys `cumind benchmark` reads (a prefix ending in `.` covers a whole section); it takes its
/// dtypes, batch sizes and replica count from its own flags.
pub const BENCHMARK_READS: &[&str] = &[
    "network_architecture.",
    "mcts.",
    "environment.env_name",
    "environment.env_kwargs",
    "environment.action_space_size",
    "environment.observation_shape",
    "environment.observation_scale",
    "training.batch_size",
    "training.learning_rate",
    "training.weight_decay",
    "training.max_grad_norm",
    "training.value_loss_weight",
    "training.consistency_loss_weight",
    "training.lr_warmup_steps",
    "training.target_update_frequency",
    "self_play.num_unroll_steps",
    "self_play.td_steps",
    "self_play.discount",
    "self_play.value_target",
    "memory.per_alpha",
    "memory.per_beta",
    "memory.per_epsilon",
    "device.device_type",
    "device.fused_kernels",
    "device.cuda_graphs",
    "device.search_helper_threads",
    "other.seed",
    "other.num_threads",
];

/// Whether `key` (`section.key`) is among `reads` (exact keys, or section prefixes ending in `.`).
pub fn is_read_by(key: &str, reads: &[&str]) -> bool {
    reads.iter().any(|r| {
        if r.ends_with('.') {
            key.starts_with(r)
        } else {
            key == *r
        }
    })
}

impl Config {
    /// Keys that a training run with this configuration would not read. `image_observations`
    /// says whether the environment's observations are `[C, H, W]` planes (which decides
    /// between the conv ResNet and the MLP when `network_type` is "auto").
    pub fn ignored_keys(&self, image_observations: bool) -> Vec<IgnoredKey> {
        let mut out = Vec::new();
        let mut add = |key: &'static str, reason: String| out.push(IgnoredKey { key, reason });

        let m = &self.mcts;
        if m.search_policy == SearchPolicyKind::Gumbel {
            let why = "mcts.search_policy is \"gumbel\"";
            add("mcts.c_puct", format!("{why}; only pUCT reads it"));
            add("mcts.c_base", format!("{why}; only pUCT reads it"));
            add(
                "mcts.dirichlet_alpha",
                format!("{why}; Gumbel MuZero explores with Gumbel noise, not Dirichlet noise"),
            );
            add(
                "mcts.exploration_fraction",
                format!("{why}; Gumbel MuZero explores with Gumbel noise, not Dirichlet noise"),
            );
            add(
                "mcts.temperature_schedule",
                format!("{why}; Gumbel MuZero plays the action its sequential halving selects, not a visit-count sample"),
            );
            if m.sampling_moves.is_some() {
                add(
                    "mcts.sampling_moves",
                    format!("{why}; Gumbel MuZero plays the action its sequential halving selects, not a visit-count sample"),
                );
            }
            if m.value_bounds.is_some() {
                add(
                    "mcts.value_bounds",
                    format!("{why}; Gumbel MuZero scales Q by its own range (completed Q-values)"),
                );
            }
            if m.unvisited_value != crate::search::UnvisitedValue::Min {
                add(
                    "mcts.unvisited_value",
                    format!(
                        "{why}; Gumbel MuZero completes unvisited Q-values with the mixed value"
                    ),
                );
            }
        } else {
            let why = "mcts.search_policy is \"puct\"; only Gumbel MuZero reads it";
            add("mcts.max_considered_actions", why.to_string());
            add("mcts.gumbel_c_visit", why.to_string());
            add("mcts.gumbel_c_scale", why.to_string());
            add("mcts.gumbel_noise_scale", why.to_string());
        }

        if m.decisive_moves && m.model != SearchModelKind::Exact {
            add(
                "mcts.decisive_moves",
                "mcts.model is \"learned\": only the exact-rules search knows the rules one move ahead".to_string(),
            );
        }
        if m.solver && m.model != SearchModelKind::Exact {
            add(
                "mcts.solver",
                "mcts.model is \"learned\": only the exact-rules search knows where the game ends"
                    .to_string(),
            );
        }

        let n = &self.network_architecture;
        if !n.uses_conv(image_observations) {
            let why = format!(
                "the network is an MLP (network_type {}{})",
                serde_json::json!(n.network_type),
                if n.network_type == NetworkType::Auto {
                    " with vector observations"
                } else {
                    ""
                }
            );
            for key in [
                "network_architecture.conv_channels",
                "network_architecture.value_head_channels",
                "network_architecture.policy_head_channels",
                "network_architecture.reward_head_channels",
            ] {
                add(key, why.clone());
            }
        } else {
            add(
                "network_architecture.latent_dim",
                "the conv ResNet's latent state is conv_channels planes of the board's size"
                    .to_string(),
            );
        }

        if n.spatial_actions
            && m.model == SearchModelKind::Exact
            && self.self_play.num_unroll_steps == 0
        {
            add(
                "network_architecture.spatial_actions",
                "mcts.model is \"exact\" and self_play.num_unroll_steps is 0: the dynamics network, \
                 which alone reads the action planes, is neither searched nor trained"
                    .to_string(),
            );
        }

        let t = &self.training;
        if t.eval_interval == 0 {
            add(
                "training.eval_episodes",
                "training.eval_interval is 0 (no evaluation)".to_string(),
            );
            add(
                "training.stop_return",
                "training.eval_interval is 0 (no evaluation, so no evaluation can stop the run)"
                    .to_string(),
            );
            add(
                "training.stop_confirm_episodes",
                "training.eval_interval is 0 (no evaluation, so none to confirm)".to_string(),
            );
        } else if t.stop_return == 0.0 {
            add(
                "training.stop_confirm_episodes",
                "training.stop_return is 0 (no evaluation stops the run, so none to confirm)"
                    .to_string(),
            );
        }
        if t.reanalyse_fraction == 0.0 {
            for key in [
                "training.reanalyse_simulations",
                "training.reanalyse_network",
                "training.reanalyse_write_back",
            ] {
                add(
                    key,
                    "training.reanalyse_fraction is 0 (no reanalyse)".to_string(),
                );
            }
        }
        if self.self_play.value_target == ValueTargetSource::Root && t.reanalyse_fraction == 0.0 {
            add(
                "training.target_update_frequency",
                "self_play.value_target is \"root\" and there is no reanalyse: no target network is used"
                    .to_string(),
            );
        }
        if self.memory.per_alpha == 0.0 {
            add(
                "memory.per_beta",
                "memory.per_alpha is 0: sampling is uniform and every importance weight is 1"
                    .to_string(),
            );
            add(
                "memory.per_epsilon",
                "memory.per_alpha is 0: sampling is uniform".to_string(),
            );
        }
        add(
            "data_types.action_dtype",
            "accepted for files of the Python CuMind only: actions enter the networks one-hot"
                .to_string(),
        );
        out
    }

    /// The value of `section.key` (snake case), as JSON; `None` for an unknown key.
    pub fn value_of(&self, key: &str) -> Option<serde_json::Value> {
        let (section, name) = key.split_once('.')?;
        let json = serde_json::to_value(self).ok()?;
        let sections = json.as_object()?;
        sections
            .iter()
            .find(|(title, _)| super::normalise_section_name(title) == section)
            .and_then(|(_, values)| values.get(name))
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(config: &Config, image: bool) -> Vec<&'static str> {
        config
            .ignored_keys(image)
            .into_iter()
            .map(|k| k.key)
            .collect()
    }

    #[test]
    fn search_policy_decides_which_search_keys_are_read() {
        let mut config = Config::default_config();
        config.mcts.search_policy = SearchPolicyKind::Gumbel;
        let gumbel = keys(&config, false);
        assert!(gumbel.contains(&"mcts.c_puct"));
        assert!(gumbel.contains(&"mcts.dirichlet_alpha"));
        assert!(!gumbel.contains(&"mcts.gumbel_c_scale"));
        config.mcts.search_policy = SearchPolicyKind::Puct;
        let puct = keys(&config, false);
        assert!(puct.contains(&"mcts.gumbel_c_scale"));
        assert!(!puct.contains(&"mcts.c_puct"));
        assert!(!puct.contains(&"mcts.temperature_schedule"));
    }

    #[test]
    fn network_type_and_observations_decide_conv_channels() {
        let mut config = Config::default_config();
        config.network_architecture.network_type = NetworkType::Auto;
        assert!(keys(&config, false).contains(&"network_architecture.conv_channels"));
        assert!(!keys(&config, true).contains(&"network_architecture.conv_channels"));
        config.network_architecture.network_type = NetworkType::Mlp;
        assert!(keys(&config, true).contains(&"network_architecture.conv_channels"));
    }

    #[test]
    fn action_planes_are_ignored_only_where_no_dynamics_is_trained() {
        let mut config = Config::default_config();
        config.network_architecture.spatial_actions = true;
        config.mcts.model = SearchModelKind::Exact;
        config.self_play.num_unroll_steps = 0;
        assert!(keys(&config, true).contains(&"network_architecture.spatial_actions"));
        config.self_play.num_unroll_steps = 5;
        assert!(!keys(&config, true).contains(&"network_architecture.spatial_actions"));
        config.self_play.num_unroll_steps = 0;
        config.mcts.model = SearchModelKind::Learned;
        assert!(!keys(&config, true).contains(&"network_architecture.spatial_actions"));
    }

    #[test]
    fn evaluation_keys_are_ignored_only_without_evaluation() {
        let mut config = Config::default_config();
        config.training.eval_interval = 1000;
        assert!(!keys(&config, false).contains(&"training.stop_return"));
        assert!(!keys(&config, false).contains(&"training.stop_confirm_episodes"));
        config.training.stop_return = 0.0;
        assert!(keys(&config, false).contains(&"training.stop_confirm_episodes"));
        config.training.stop_return = 490.0;
        config.training.eval_interval = 0;
        assert!(keys(&config, false).contains(&"training.stop_return"));
        assert!(keys(&config, false).contains(&"training.eval_episodes"));
        assert!(keys(&config, false).contains(&"training.stop_confirm_episodes"));
    }

    #[test]
    fn value_of_reads_keys_by_their_snake_case_path() {
        let config = Config::default_config();
        assert_eq!(
            config.value_of("mcts.num_simulations"),
            Some(serde_json::json!(config.mcts.num_simulations))
        );
        assert_eq!(
            config.value_of("data_types.model_dtype"),
            Some(serde_json::json!(config.data_types.model_dtype))
        );
        assert_eq!(config.value_of("mcts.nope"), None);
        assert_eq!(config.value_of("nosection"), None);
    }

    #[test]
    fn benchmark_reads_whole_sections_and_single_keys() {
        assert!(is_read_by("mcts.c_puct", BENCHMARK_READS));
        assert!(is_read_by("training.batch_size", BENCHMARK_READS));
        assert!(!is_read_by("training.max_env_steps", BENCHMARK_READS));
        assert!(!is_read_by("environment.num_envs", BENCHMARK_READS));
    }
}
