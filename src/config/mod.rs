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
//! A resumed run layers its stored configuration after the files ([`Config::load_resumed`]).
//!
//! Unknown keys, wrong types, unknown choices and out-of-range values are errors that name the
//! key path. Files: `sections.rs` (the typed sections), `layers.rs` (layering and
//! deserialisation), `validate.rs` (ranges and cross-key checks), `ignored.rs` (keys a run would
//! not read).

use serde::{Deserialize, Serialize};
use thiserror::Error;

mod ignored;
mod layers;
mod sections;
mod validate;

pub use ignored::{is_read_by, IgnoredKey, BENCHMARK_READS};
pub use layers::{
    env_var_key, normalise_section_name, parse_set, ConfigSources, DEFAULT_CONFIGURATION,
    ENV_PREFIX,
};
pub use sections::{
    parse_device, ActionDtype, DataTypesConfig, DeviceConfig, DeviceKind, EnvironmentConfig,
    InferenceDtype, MctsConfig, MemoryConfig, ModelDtype, NetworkConfig, NetworkType, OtherConfig,
    ReanalyseNetwork, SearchModelKind, SearchPolicyKind, SelfPlayConfig, SymmetricSearch,
    TargetDtype, TrainingConfig, ValueTargetSource,
};
pub use validate::EnvCheck;

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

impl Config {
    /// Pretty JSON with the original section names; loads back to the same configuration.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a Config always serialises")
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
        assert_eq!(c.device.device_type, DeviceKind::Cpu);
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
        assert_eq!(c.data_types.model_dtype, ModelDtype::Bfloat16);
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
        assert_eq!(c.data_types.action_dtype, ActionDtype::Int32);
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
        assert_eq!(c.data_types.model_dtype, ModelDtype::Float16);
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

    /// One multiplier per observation value, each finite and non-zero; a bad list names the
    /// key and what is wrong.
    #[test]
    fn an_observation_scale_must_fit_the_environment() {
        let ok = load_with(sets(&["environment.observation_scale=[1, 1, 10, 1]"])).unwrap();
        assert_eq!(ok.environment.observation_scale, vec![1.0, 1.0, 10.0, 1.0]);
        let short = error_text(load_with(sets(&["environment.observation_scale=[1, 10]"])));
        assert!(
            short.contains("environment.observation_scale") && short.contains("4"),
            "{short}"
        );
        let zero = error_text(load_with(sets(&[
            "environment.observation_scale=[1, 0, 1, 1]",
        ])));
        assert!(
            zero.contains("environment.observation_scale") && zero.contains("non-zero"),
            "{zero}"
        );
    }

    /// `spatial_actions` needs a conv network over a board whose environment places its
    /// actions; the network spec then carries the environment's planes.
    #[test]
    fn spatial_actions_need_a_board_that_places_its_actions() {
        let c4 = load_with(sets(&[
            "environment.env_name=ConnectFour",
            "network_architecture.spatial_actions=true",
        ]))
        .unwrap();
        let env = crate::components::EnvInfo::of(&c4).unwrap();
        let spec = crate::components::network_spec(&c4, &env);
        assert!(spec.uses_conv());
        assert_eq!(
            spec.action_planes,
            cumind_envs::board_action_planes(6, 7, 7)
        );
        let off = load_with(sets(&["environment.env_name=ConnectFour"])).unwrap();
        assert!(crate::components::network_spec(&off, &env)
            .action_planes
            .is_empty());
        let mlp = error_text(load_with(sets(&[
            "environment.env_name=ConnectFour",
            "network_architecture.network_type=mlp",
            "network_architecture.spatial_actions=true",
        ])));
        assert!(
            mlp.contains("network_architecture.spatial_actions") && mlp.contains("conv"),
            "{mlp}"
        );
        let cartpole = error_text(load_with(sets(&[
            "network_architecture.spatial_actions=true",
        ])));
        assert!(
            cartpole.contains("network_architecture.spatial_actions"),
            "{cartpole}"
        );
        let minatar = error_text(load_with(sets(&[
            "environment.env_name=MinAtar/Breakout-v1",
            "network_architecture.spatial_actions=true",
        ])));
        assert!(
            minatar.contains("network_architecture.spatial_actions")
                && minatar.contains("no action planes"),
            "{minatar}"
        );
    }

    /// A frame stack multiplies the observation's first dimension, so checks against the
    /// environment (here `observation_scale`'s length) see the stacked shape; 0 frames is an
    /// error that names the key.
    #[test]
    fn a_frame_stack_changes_the_observation_the_checks_see() {
        let c = load_with(sets(&[
            "environment.frame_stack=3",
            "environment.observation_shape=[12]",
        ]))
        .unwrap();
        let env = crate::components::EnvInfo::of(&c).unwrap();
        assert_eq!(env.observation_shape, vec![12]);
        let short = error_text(load_with(sets(&[
            "environment.frame_stack=3",
            "environment.observation_scale=[1, 1, 10, 1]",
        ])));
        assert!(short.contains("environment.observation_scale"), "{short}");
        let none = error_text(load_with(sets(&["environment.frame_stack=0"])));
        assert!(none.contains("environment.frame_stack"), "{none}");
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
        let text = error_text(load_with(sets(&[
            "mcts.num_simulations=16",
            "self_play.fast_simulations=16",
        ])));
        assert!(
            text.contains("self_play.fast_simulations") && text.contains("below"),
            "{text}"
        );
        let text = error_text(load_with(sets(&[
            "self_play.fast_simulations=4",
            "self_play.full_search_fraction=0",
        ])));
        assert!(
            text.contains("self_play.full_search_fraction") && text.contains("(0, 1]"),
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
        for bounds in ["[1,-1]", "[0,0]", "[-1]"] {
            let text = error_text(load_with(sets(&[&format!("mcts.value_bounds={bounds}")])));
            assert!(text.contains("mcts.value_bounds"), "{bounds}: {text}");
        }
        let text = error_text(load_with(sets(&["mcts.unvisited_value=max"])));
        assert!(
            text.contains("mcts.unvisited_value") && text.contains("parent"),
            "{text}"
        );
    }

    #[test]
    fn a_choice_of_the_wrong_type_names_every_variant_too() {
        for (flag, key, variants) in [
            (
                "mcts.symmetric_search=true",
                "mcts.symmetric_search",
                &["off", "evaluation", "always"][..],
            ),
            (
                "mcts.search_policy=3",
                "mcts.search_policy",
                &["puct", "gumbel"][..],
            ),
        ] {
            let text = error_text(load_with(sets(&[flag])));
            assert!(text.contains(key), "{text}");
            assert!(text.contains("invalid type"), "{text}");
            for variant in variants {
                assert!(text.contains(&format!("`{variant}`")), "{flag}: {text}");
            }
        }
        // A wrong type for a key that is not a choice keeps serde's own message.
        let text = error_text(load_with(sets(&["training.batch_size=true"])));
        assert!(text.contains("training.batch_size"), "{text}");
        assert!(text.contains("invalid type"), "{text}");
        assert!(
            !text.contains("one of") && !text.contains("gumbel"),
            "{text}"
        );
    }

    #[test]
    fn an_unknown_choice_names_the_key_and_every_variant() {
        let text = error_text(load_with(sets(&["mcts.search_policy=alphazero"])));
        assert!(
            text.contains("mcts.search_policy")
                && text.contains("alphazero")
                && text.contains("puct")
                && text.contains("gumbel"),
            "{text}"
        );
        let text = error_text(load_with(sets(&["network_architecture.network_type=cnn"])));
        assert!(
            text.contains("network_architecture.network_type")
                && text.contains("auto")
                && text.contains("mlp")
                && text.contains("conv"),
            "{text}"
        );
        let text = error_text(load_with(sets(&["self_play.value_target=mc"])));
        assert!(text.contains("target_network"), "{text}");
    }

    #[test]
    fn device_type_round_trips_as_text() {
        for text in ["cpu", "cuda", "cuda:3", "auto"] {
            let c = load_with(sets(&[&format!("device.device_type={text}")])).unwrap();
            assert_eq!(c.device.device_type.to_string(), text);
            let json: serde_json::Value = serde_json::from_str(&c.to_json()).unwrap();
            assert_eq!(json["Device"]["device_type"], text);
        }
        assert_eq!(
            load_with(sets(&["device.device_type=cuda:0"]))
                .unwrap()
                .device
                .device_type,
            DeviceKind::Cuda(0)
        );
    }

    #[test]
    fn a_resumed_run_keeps_its_environment_and_network() {
        let stored = Config::default_config().to_json();
        let c = Config::load_resumed(
            "stored",
            &stored,
            Vec::new(),
            vec!["training.max_env_steps=5".into()],
        )
        .unwrap();
        assert_eq!(c.training.max_env_steps, 5);
        for flag in [
            "environment.env_name=Catch",
            "network_architecture.hidden_dim=8",
        ] {
            let err = Config::load_resumed("stored", &stored, Vec::new(), vec![flag.into()])
                .unwrap_err()
                .to_string();
            assert!(err.contains("a resumed run cannot change"), "{err}");
        }
    }

    #[test]
    fn a_clock_budget_is_a_budget_and_must_be_a_number_of_seconds() {
        let c = load_with(sets(&[
            "training.max_env_steps=0",
            "training.max_seconds=90.5",
        ]))
        .unwrap();
        assert_eq!(c.training.max_seconds, 90.5);
        for bad in ["-1", "NaN", "inf"] {
            let text = error_text(load_with(sets(&[&format!("training.max_seconds={bad}")])));
            assert!(text.contains("training.max_seconds"), "{bad}: {text}");
        }
        let text = error_text(load_with(sets(&[
            "training.max_env_steps=0",
            "training.max_seconds=0",
        ])));
        assert!(text.contains("a run needs a budget"), "{text}");
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
        assert_eq!(c.network_architecture.network_type, NetworkType::Conv);
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
