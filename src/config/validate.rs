//! Range and cross-key checks of a deserialised [`Config`]; errors name the key and what is
//! allowed.

use super::{invalid, Config, ConfigError, NetworkType, SearchModelKind};

/// The most helper threads a search may keep awake (`device.search_helper_threads`).
const MAX_SEARCH_HELPERS: usize = 64;

/// Whether validation needs the configured environment to be makeable in this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvCheck {
    /// It must be made and the configuration checked against it (a run, a new config).
    Required,
    /// A `gymnasium:` environment this process cannot make is taken on trust (a checkpoint's
    /// stored configuration, loaded to act: the network holds the spaces).
    IfMakeable,
}

impl Config {
    /// Check every value's range and every cross-key constraint.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_with(EnvCheck::Required)
    }

    /// [`Config::validate`], with the environment checked as `env_check` says.
    pub fn validate_with(&self, env_check: EnvCheck) -> Result<(), ConfigError> {
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
        let n = &self.network_architecture;
        at_least("network_architecture.hidden_dim", n.hidden_dim, 1)?;
        at_least("network_architecture.latent_dim", n.latent_dim, 1)?;
        at_least("network_architecture.conv_channels", n.conv_channels, 1)?;
        at_least(
            "network_architecture.value_head_channels",
            n.value_head_channels,
            1,
        )?;
        at_least(
            "network_architecture.policy_head_channels",
            n.policy_head_channels,
            1,
        )?;
        at_least(
            "network_architecture.reward_head_channels",
            n.reward_head_channels,
            1,
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
        if !(t.max_seconds.is_finite() && t.max_seconds >= 0.0) {
            return Err(invalid(
                "training.max_seconds",
                format!(
                    "{} is not a number of seconds: must be 0 (no limit) or more",
                    t.max_seconds
                ),
            ));
        }
        if t.max_env_steps == 0
            && t.max_training_steps == 0
            && t.num_episodes == 0
            && t.max_seconds == 0.0
        {
            return Err(invalid(
                "training.max_env_steps",
                "a run needs a budget: set max_env_steps, max_training_steps, num_episodes or \
                 max_seconds above 0",
            ));
        }
        within("training.train_ratio", t.train_ratio, 1e-6, 1000.0)?;
        within(
            "training.reanalyse_fraction",
            t.reanalyse_fraction,
            0.0,
            1.0,
        )?;
        within("training.lr_final_fraction", t.lr_final_fraction, 0.0, 1.0)?;
        within("training.max_grad_norm", t.max_grad_norm, 0.0, 1e9)?;
        within("training.value_loss_weight", t.value_loss_weight, 0.0, 1e3)?;
        within(
            "training.consistency_loss_weight",
            t.consistency_loss_weight,
            0.0,
            1e3,
        )?;
        if t.eval_interval > 0 {
            at_least("training.eval_episodes", t.eval_episodes, 1)?;
        }
        match t.eval_opponent.parse::<crate::arena::OpponentSpec>() {
            Ok(crate::arena::OpponentSpec::All) => {
                return Err(invalid(
                    "training.eval_opponent",
                    "\"all\" is an audit, not a player: use random, perfect, alphabeta:DEPTH or checkpoint:DIR",
                ))
            }
            Ok(_) => {}
            Err(err) => return Err(invalid("training.eval_opponent", err.to_string())),
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
        at_least("mcts.max_considered_actions", m.max_considered_actions, 1)?;
        within("mcts.gumbel_c_visit", m.gumbel_c_visit, 0.0, 1e9)?;
        within("mcts.gumbel_c_scale", m.gumbel_c_scale, 0.0, 1e9)?;
        within("mcts.gumbel_noise_scale", m.gumbel_noise_scale, 0.0, 100.0)?;
        if let Some((lo, hi)) = m.value_bounds {
            if !(lo.is_finite() && hi.is_finite() && lo < hi && hi - lo < 1e30) {
                return Err(invalid(
                    "mcts.value_bounds",
                    format!(
                        "must be [min, max] with finite min < max and max - min below 1e30, got [{lo}, {hi}]"
                    ),
                ));
            }
        }
        if m.model == SearchModelKind::Exact && self.training.reanalyse_fraction > 0.0 {
            return Err(invalid(
                "training.reanalyse_fraction",
                "must be 0 with mcts.model = \"exact\" (reanalyse searches stored observations, which hold no game to step)",
            ));
        }
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
        let known = cumind_envs::all_names();
        let gymnasium = e.env_name.starts_with(cumind_envs::GYMNASIUM_PREFIX);
        if !known.contains(&e.env_name) && !gymnasium {
            return Err(invalid(
                "environment.env_name",
                format!(
                    "unknown environment \"{}\": use one of {}",
                    e.env_name,
                    known.join(", ")
                ),
            ));
        }
        at_least("environment.num_envs", e.num_envs, 1)?;
        at_least("environment.frame_stack", e.frame_stack, 1)?;
        match e.spec().make() {
            Ok(env) => self.validate_against(env.as_ref())?,
            // A checkpoint's stored configuration of a Gymnasium environment that this process
            // cannot make (an object registered by the program that trained it): the checks
            // against the environment were made when it trained.
            Err(_) if gymnasium && env_check == EnvCheck::IfMakeable => {}
            Err(err) => return Err(invalid("environment.env_name", err.to_string())),
        }

        let s = &self.self_play;
        at_least("self_play.td_steps", s.td_steps, 1)?;
        within("self_play.discount", s.discount, 0.0, 1.0)?;
        if s.fast_simulations > 0 {
            if s.fast_simulations >= m.num_simulations {
                return Err(invalid(
                    "self_play.fast_simulations",
                    format!(
                        "{} must be below mcts.num_simulations ({}): the fast searches are the \
                         cheap ones (0 turns them off)",
                        s.fast_simulations, m.num_simulations
                    ),
                ));
            }
            if !(s.full_search_fraction > 0.0 && s.full_search_fraction <= 1.0) {
                return Err(invalid(
                    "self_play.full_search_fraction",
                    format!(
                        "{} is out of range: must be in (0, 1] (the share of moves searched in \
                         full, with a policy target)",
                        s.full_search_fraction
                    ),
                ));
            }
        }

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
        within("memory.memory_budget_mb", mem.memory_budget_mb, 0.0, 1e9)?;

        let dev = &self.device;
        at_least("device.num_devices", dev.num_devices, 1)?;
        // Each helper takes a core for the length of every search.
        if dev.search_helper_threads > MAX_SEARCH_HELPERS {
            return Err(invalid(
                "device.search_helper_threads",
                format!(
                    "{} is too large: must be at most {MAX_SEARCH_HELPERS}",
                    dev.search_helper_threads
                ),
            ));
        }
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

    /// The checks of the configuration against its environment: the optional consistency
    /// keys, the observation scale's length and the conv network's need for planes.
    fn validate_against(&self, env: &dyn cumind_envs::Environment) -> Result<(), ConfigError> {
        let e = &self.environment;
        let n = &self.network_architecture;

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

        if !e.observation_scale.is_empty() {
            let per: usize = env.observation_space().shape().iter().product();
            if e.observation_scale.len() != per {
                return Err(invalid(
                    "environment.observation_scale",
                    format!(
                        "{} values for {}, whose observations have {per} (one per value, or [] for none)",
                        e.observation_scale.len(),
                        e.env_name
                    ),
                ));
            }
            if let Some(bad) = e
                .observation_scale
                .iter()
                .find(|s| !(s.is_finite() && **s != 0.0))
            {
                return Err(invalid(
                    "environment.observation_scale",
                    format!("{bad} is not a finite, non-zero multiplier"),
                ));
            }
        }

        if n.spatial_actions {
            if !n.uses_conv(env.observation_space().shape().len() == 3) {
                return Err(invalid(
                    "network_architecture.spatial_actions",
                    "needs the conv network (action planes are planes over a board)",
                ));
            }
            if env.action_planes().is_none() {
                return Err(invalid(
                    "network_architecture.spatial_actions",
                    format!(
                        "{} gives no action planes (its actions have no place on the board); \
                         set it to false",
                        e.env_name
                    ),
                ));
            }
        }

        if n.network_type == NetworkType::Conv && env.observation_space().shape().len() != 3 {
            return Err(invalid(
                "network_architecture.network_type",
                format!(
                    "\"conv\" needs [C, H, W] observations; {} has shape {:?} (use \"mlp\" or \"auto\")",
                    e.env_name,
                    env.observation_space().shape()
                ),
            ));
        }
        Ok(())
    }
}
