//! The library API: load a trained agent and ask it for actions.
//!
//! ```no_run
//! use cumind::agent::Agent;
//! let mut agent = Agent::load("checkpoints/CartPole-v1-1700000000").unwrap();
//! let action = agent.select_action(&[0.01, 0.0, -0.02, 0.0], false).unwrap();
//! assert!(action < agent.num_actions());
//! ```

use std::path::Path;

use candle_core::Device;
use cumind_envs::Environment;
use rand::rngs::StdRng;
use rand::SeedableRng;
use thiserror::Error;

use crate::checkpoint::{self, CheckpointError};
use crate::components::{self, EnvInfo};
use crate::config::Config;
use crate::exact_model::search_games;
use crate::network::{compute_dtype, MuZeroNetwork, NetworkError, SearchModel};
use crate::search::{choose_actions, SearchConfig, SearchError, SearchInput};

/// Errors of the library API.
#[derive(Debug, Error)]
pub enum AgentError {
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error("the checkpoint's environment `{0}` is not known to this build")]
    UnknownEnvironment(String),
    #[error(
        "the checkpoint's network description does not match its configuration (corrupt metadata?)"
    )]
    InconsistentCheckpoint,
    #[error("network error")]
    Network(#[from] NetworkError),
    #[error("search failed")]
    Search(#[from] SearchError),
    #[error(
        "observation {index} has {got} values, expected {expected} (observation shape {shape:?})"
    )]
    ObservationShape {
        index: usize,
        got: usize,
        expected: usize,
        shape: Vec<usize>,
    },
    #[error("legal-action mask {index} has {got} entries, expected {expected} (one per action)")]
    MaskShape {
        index: usize,
        got: usize,
        expected: usize,
    },
    #[error("{got} legal-action masks for {expected} observations")]
    MaskCount { got: usize, expected: usize },
    #[error("this agent searches the real game (mcts.model = \"exact\"): pass the games with Agent::select_actions_in_games")]
    NeedsGames,
    #[error("{got} games for {expected} observations")]
    GameCount { got: usize, expected: usize },
}

/// A trained agent: its network and search configuration.
pub struct Agent {
    network: MuZeroNetwork,
    config: Config,
    /// The search of greedy play (`training = false`).
    search: SearchConfig,
    /// The search of self-play (`training = true`): differs by `mcts.symmetric_search`.
    training_search: SearchConfig,
    env: EnvInfo,
    rng: StdRng,
    /// Root values of the last search, one per observation.
    last_root_values: Vec<f32>,
}

impl Agent {
    /// Load the latest checkpoint of a run directory (or a `step-*` directory) onto the CPU,
    /// whatever device it was trained on. [`Agent::load_on`] takes the device (for example a
    /// `Device::new_cuda(0)?` in a `cuda` build); the library never picks a GPU by itself.
    pub fn load(dir: impl AsRef<Path>) -> Result<Self, AgentError> {
        Self::load_on(dir, &Device::Cpu)
    }

    /// Load onto `device`.
    pub fn load_on(dir: impl AsRef<Path>, device: &Device) -> Result<Self, AgentError> {
        let (meta, tensors) = checkpoint::load_model(dir.as_ref(), device)?;
        let config = meta.config()?;
        let env = match EnvInfo::of(&config) {
            Ok(env) => env,
            // A Gymnasium environment this process cannot make (an object the training
            // program registered, or a build without Python): the stored network says what
            // the agent observes, and the bridge's environments have one player.
            Err(_)
                if config
                    .environment
                    .env_name
                    .starts_with(cumind_envs::GYMNASIUM_PREFIX) =>
            {
                EnvInfo {
                    observation_shape: meta.network.observation_shape.clone(),
                    num_actions: meta.network.num_actions,
                    num_players: 1,
                    symmetries: Vec::new(),
                    action_planes: (!meta.network.action_planes.is_empty())
                        .then(|| meta.network.action_planes.clone()),
                }
            }
            Err(_) => {
                return Err(AgentError::UnknownEnvironment(
                    config.environment.env_name.clone(),
                ))
            }
        };
        if components::network_spec(&config, &env) != meta.network {
            return Err(AgentError::InconsistentCheckpoint);
        }
        let dtype = compute_dtype(config.data_types.model_dtype, device);
        let network = MuZeroNetwork::from_tensors(meta.network.clone(), tensors, device, dtype)?;
        Ok(Self::from_network(network, config))
    }

    /// Wrap an in-memory network trained with `config`.
    pub fn from_network(network: MuZeroNetwork, config: Config) -> Self {
        let known = EnvInfo::of(&config).ok();
        let env = EnvInfo {
            observation_shape: network.spec().observation_shape.clone(),
            num_actions: network.spec().num_actions,
            num_players: known.as_ref().map_or(1, |e| e.num_players),
            action_planes: known.as_ref().and_then(|e| e.action_planes.clone()),
            // For `mcts.symmetric_search`; an environment this process cannot build has none.
            symmetries: known.map(|e| e.symmetries).unwrap_or_default(),
        };
        let search = components::search_config(&config, &env);
        let training_search = components::self_play_search_config(&config, &env);
        let rng = StdRng::seed_from_u64(config.other.seed);
        Self {
            network,
            config,
            search,
            training_search,
            env,
            rng,
            last_root_values: Vec::new(),
        }
    }

    pub fn num_actions(&self) -> usize {
        self.env.num_actions
    }

    pub fn observation_shape(&self) -> &[usize] {
        &self.env.observation_shape
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The search the agent plans with when it plays greedily (`training = false`; from its
    /// configuration).
    pub fn search_config(&self) -> &SearchConfig {
        &self.search
    }

    /// The search the agent plans with when `training = true`: self-play's, which searches
    /// through the symmetries only with `mcts.symmetric_search = "always"`.
    pub fn training_search_config(&self) -> &SearchConfig {
        &self.training_search
    }

    pub fn network(&self) -> &MuZeroNetwork {
        &self.network
    }

    /// Plan with other search settings (for example more simulations) than the checkpoint's.
    /// The network is unchanged; the agent's configuration records the new `mcts` section.
    pub fn set_search(&mut self, mcts: crate::config::MctsConfig) {
        self.config.mcts = mcts;
        self.search = components::search_config(&self.config, &self.env);
        self.training_search = components::self_play_search_config(&self.config, &self.env);
    }

    /// The search's value of each position of the last `select_action*` call, from the point
    /// of view of the player to move there (in [-1, 1] for board games: +1 a sure win).
    pub fn last_root_values(&self) -> &[f32] {
        &self.last_root_values
    }

    /// Reseed the agent's random stream (noise and sampling when `training`).
    pub fn seed(&mut self, seed: u64) {
        self.rng = StdRng::seed_from_u64(seed);
    }

    /// Search from `observation` and pick an action. `training = false`: no root noise, most
    /// visited action (greedy); `training = true`: root noise and sampling at temperature 1.
    /// Every action is taken to be legal; use [`Agent::select_actions_masked`] for games.
    pub fn select_action(
        &mut self,
        observation: &[f32],
        training: bool,
    ) -> Result<usize, AgentError> {
        Ok(self.select_actions(&[observation], training)?[0])
    }

    /// Batched form: one search for all observations.
    pub fn select_actions(
        &mut self,
        observations: &[&[f32]],
        training: bool,
    ) -> Result<Vec<usize>, AgentError> {
        let masks = vec![vec![true; self.env.num_actions]; observations.len()];
        let masks: Vec<&[bool]> = masks.iter().map(Vec::as_slice).collect();
        self.select_actions_masked(observations, &masks, training)
    }

    /// Batched form with one legal-action mask per observation (`true` = legal). An agent
    /// whose search steps the real game (`mcts.model = "exact"`) needs the games themselves:
    /// [`Agent::select_actions_in_games`].
    pub fn select_actions_masked(
        &mut self,
        observations: &[&[f32]],
        legal_masks: &[&[bool]],
        training: bool,
    ) -> Result<Vec<usize>, AgentError> {
        if self.search.exact_rules {
            return Err(AgentError::NeedsGames);
        }
        self.select(observations, legal_masks, &[], training)
    }

    /// Batched form for games in progress: `observations[i]` is what `games[i]` shows now,
    /// and its legal moves are the game's. Any agent takes this form; one whose search steps
    /// the real game (`mcts.model = "exact"`) searches through copies of `games`.
    pub fn select_actions_in_games(
        &mut self,
        games: &[&dyn Environment],
        observations: &[&[f32]],
        training: bool,
    ) -> Result<Vec<usize>, AgentError> {
        if games.len() != observations.len() {
            return Err(AgentError::GameCount {
                got: games.len(),
                expected: observations.len(),
            });
        }
        let masks: Vec<Vec<bool>> = games.iter().map(|g| g.legal_action_mask()).collect();
        let masks: Vec<&[bool]> = masks.iter().map(Vec::as_slice).collect();
        self.select(observations, &masks, games, training)
    }

    /// The search behind the `select_actions` forms; `games` empty unless the search steps
    /// the real game.
    fn select(
        &mut self,
        observations: &[&[f32]],
        legal_masks: &[&[bool]],
        games: &[&dyn Environment],
        training: bool,
    ) -> Result<Vec<usize>, AgentError> {
        let expected: usize = self.env.observation_shape.iter().product();
        let a = self.env.num_actions;
        if legal_masks.len() != observations.len() {
            return Err(AgentError::MaskCount {
                got: legal_masks.len(),
                expected: observations.len(),
            });
        }
        for (index, obs) in observations.iter().enumerate() {
            if obs.len() != expected {
                return Err(AgentError::ObservationShape {
                    index,
                    got: obs.len(),
                    expected,
                    shape: self.env.observation_shape.clone(),
                });
            }
        }
        for (index, mask) in legal_masks.iter().enumerate() {
            if mask.len() != a {
                return Err(AgentError::MaskShape {
                    index,
                    got: mask.len(),
                    expected: a,
                });
            }
        }
        if observations.is_empty() {
            return Ok(Vec::new());
        }
        let flat: Vec<f32> = observations.concat();
        let masks: Vec<bool> = legal_masks.concat();
        let search = if training {
            &self.training_search
        } else {
            &self.search
        };
        let input = SearchInput {
            observations: &flat,
            batch: observations.len(),
            legal_masks: &masks,
            add_noise: training,
        };
        let out = search_games(
            &mut SearchModel::new(&self.network),
            search,
            games,
            &input,
            &mut self.rng,
        )?;
        let temperature = if training { 1.0 } else { 0.0 };
        self.last_root_values.clone_from(&out.root_values);
        Ok(choose_actions(&out, &masks, temperature, &mut self.rng))
    }
}
