//! Self-play actors: many environments stepped in parallel, one batched search for all of them.
//!
//! An [`Actor`] owns a vector of environments and the games in progress. Each
//! [`Actor::step`] searches every environment's current observation in one batch (one network
//! call per simulation for the whole batch), picks actions by visit-count temperature, steps the
//! environments and hands back every game that finished.

use rand::rngs::StdRng;
use rand::SeedableRng;

use cumind_envs::{EnvError, EpisodeStats, VectorEnv};

use crate::model::ModelError;
use crate::network::{MuZeroNetwork, SearchModel};
use crate::replay::GameHistory;
use crate::search::{run_search, select_action, SearchConfig, SearchError};

/// Errors of self-play and evaluation.
#[derive(Debug, thiserror::Error)]
pub enum SelfPlayError {
    #[error("environment: {0}")]
    Env(#[from] EnvError),
    #[error("search: {0}")]
    Search(#[from] SearchError),
    #[error("model: {0}")]
    Model(#[from] ModelError),
}

/// Search statistics of one actor step.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SearchStats {
    /// Mean root value over the batch.
    pub mean_root_value: f32,
    /// Deepest node reached.
    pub max_depth: usize,
}

/// What one actor step produced.
#[derive(Debug, Default)]
pub struct ActorStep {
    /// Environment steps taken (one per environment).
    pub env_steps: usize,
    /// Games that ended in this step, ready for the replay buffer.
    pub finished_games: Vec<GameHistory>,
    /// Return and length of each finished episode.
    pub finished_episodes: Vec<EpisodeStats>,
    pub search: SearchStats,
}

/// A batch of environments playing with the search.
pub struct Actor {
    envs: VectorEnv,
    games: Vec<GameHistory>,
    observations: Vec<Vec<f32>>,
    rng: StdRng,
    num_actions: usize,
    obs_len: usize,
    segment_length: usize,
}

impl Actor {
    /// `num_envs` copies of the named environment, seeded from `seed`. Games longer than
    /// `segment_length` transitions are handed over in segments of that length (0: whole games).
    pub fn new(
        env_name: &str,
        num_envs: usize,
        seed: u64,
        segment_length: usize,
    ) -> Result<Self, SelfPlayError> {
        let mut envs = VectorEnv::from_name(env_name, num_envs)?;
        let observations = envs.reset(Some(seed));
        let first = &envs.envs()[0];
        let num_actions = first.action_space().n().unwrap_or(0);
        let obs_len = first.observation_space().flat_len();
        let to_play = envs.to_play();
        let games = observations
            .iter()
            .zip(&to_play)
            .map(|(obs, &p)| GameHistory::new(obs_len, num_actions, obs, p as u8))
            .collect();
        Ok(Self {
            envs,
            games,
            observations,
            rng: StdRng::seed_from_u64(seed ^ 0x5eed_a570),
            num_actions,
            obs_len,
            segment_length,
        })
    }

    pub fn num_envs(&self) -> usize {
        self.envs.len()
    }

    /// Play one step in every environment with a search on `network`.
    pub fn step(
        &mut self,
        network: &MuZeroNetwork,
        search: &SearchConfig,
        temperature: f32,
    ) -> Result<ActorStep, SelfPlayError> {
        let n = self.envs.len();
        let a = self.num_actions;
        let flat: Vec<f32> = self.observations.concat();
        let masks: Vec<bool> = self.envs.legal_action_masks().concat();
        let mut model = SearchModel::new(network);
        let out = run_search(&mut model, search, &flat, n, &masks, true, &mut self.rng)?;
        let actions: Vec<usize> = match &out.gumbel_actions {
            // Gumbel MuZero acts with its own selected action while training.
            Some(g) => g.clone(),
            None => (0..n)
                .map(|i| {
                    select_action(
                        &out.visit_counts[i * a..(i + 1) * a],
                        &masks[i * a..(i + 1) * a],
                        temperature,
                        &mut self.rng,
                    )
                })
                .collect(),
        };
        let result = self.envs.step(&actions)?;
        let to_play = self.envs.to_play();
        let mut step = ActorStep {
            env_steps: n,
            search: SearchStats {
                mean_root_value: out.root_values.iter().sum::<f32>() / n as f32,
                max_depth: out.max_depth,
            },
            ..Default::default()
        };
        let mut truncated_games = Vec::new();
        for i in 0..n {
            let ended = result.finished[i].is_some();
            let next_obs = match (&result.final_observations[i], ended) {
                (Some(final_obs), true) => final_obs.clone(),
                _ => result.observations[i].clone(),
            };
            let next_to_play = if ended {
                // The final state's player: the other one in a two-player game.
                let p = self.games[i].to_play.last().copied().unwrap_or(0);
                if self.envs.envs()[i].num_players() > 1 {
                    1 - p
                } else {
                    p
                }
            } else {
                to_play[i] as u8
            };
            self.games[i].push(
                actions[i],
                result.rewards[i] as f32,
                out.root_values[i],
                &out.policy_targets[i * a..(i + 1) * a],
                &next_obs,
                next_to_play,
            );
            if let Some(stats) = &result.finished[i] {
                let fresh =
                    GameHistory::new(self.obs_len, a, &result.observations[i], to_play[i] as u8);
                let mut game = std::mem::replace(&mut self.games[i], fresh);
                if result.terminated[i] {
                    game.finish(true, 0.0);
                    step.finished_games.push(game);
                } else {
                    truncated_games.push(game);
                }
                step.finished_episodes.push(*stats);
            } else if self.segment_length > 0 && self.games[i].len() >= self.segment_length {
                // Hand long episodes to the replay buffer in segments, so fresh data arrives
                // while the episode goes on; a segment is bootstrapped like a truncated game.
                let fresh = GameHistory::new(self.obs_len, a, &next_obs, next_to_play);
                truncated_games.push(std::mem::replace(&mut self.games[i], fresh));
            }
        }
        if !truncated_games.is_empty() {
            // Bootstrap values of truncated games and segments: the network's value of the
            // final observation.
            let finals: Vec<f32> = truncated_games
                .iter()
                .flat_map(|g| g.observation(g.len()).to_vec())
                .collect();
            let obs = network
                .observation_tensor(&finals)
                .map_err(ModelError::from)?;
            let latent = network.represent(&obs).map_err(ModelError::from)?;
            let (_, value_logits) = network.predict(&latent).map_err(ModelError::from)?;
            let logits = value_logits
                .flatten_all()
                .and_then(|t| t.to_vec1::<f32>())
                .map_err(|e| ModelError::Backend(e.to_string()))?;
            let values = network.spec().value_support.logits_to_scalars(&logits);
            for (mut game, value) in truncated_games.into_iter().zip(values) {
                game.finish(false, value);
                step.finished_games.push(game);
            }
        }
        self.observations = result.observations;
        Ok(step)
    }
}

/// Result of a greedy evaluation.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    pub returns: Vec<f64>,
    pub lengths: Vec<usize>,
    /// Environment steps taken in total.
    pub env_steps: usize,
}

impl Evaluation {
    pub fn mean_return(&self) -> f64 {
        self.returns.iter().sum::<f64>() / self.returns.len().max(1) as f64
    }

    pub fn std_return(&self) -> f64 {
        let m = self.mean_return();
        let var = self.returns.iter().map(|r| (r - m).powi(2)).sum::<f64>()
            / self.returns.len().max(1) as f64;
        var.sqrt()
    }

    pub fn mean_length(&self) -> f64 {
        self.lengths.iter().sum::<usize>() as f64 / self.lengths.len().max(1) as f64
    }
}

/// Play `episodes` episodes greedily (no noise, most-visited action; Gumbel: its selected
/// action), all in one batch, and report their returns.
pub fn evaluate(
    network: &MuZeroNetwork,
    env_name: &str,
    episodes: usize,
    search: &SearchConfig,
    seed: u64,
) -> Result<Evaluation, SelfPlayError> {
    let mut envs = VectorEnv::from_name(env_name, episodes)?;
    let mut observations = envs.reset(Some(seed));
    let a = envs.envs()[0].action_space().n().unwrap_or(0);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut done: Vec<Option<EpisodeStats>> = vec![None; episodes];
    let mut env_steps = 0;
    while done.iter().any(Option::is_none) {
        let flat: Vec<f32> = observations.concat();
        let masks: Vec<bool> = envs.legal_action_masks().concat();
        let mut model = SearchModel::new(network);
        let out = run_search(&mut model, search, &flat, episodes, &masks, false, &mut rng)?;
        let actions: Vec<usize> = match &out.gumbel_actions {
            Some(g) => g.clone(),
            None => (0..episodes)
                .map(|i| {
                    select_action(
                        &out.visit_counts[i * a..(i + 1) * a],
                        &masks[i * a..(i + 1) * a],
                        0.0,
                        &mut rng,
                    )
                })
                .collect(),
        };
        let result = envs.step(&actions)?;
        for (i, finished) in result.finished.iter().enumerate() {
            if done[i].is_none() {
                env_steps += 1;
                if let Some(stats) = finished {
                    done[i] = Some(*stats);
                }
            }
        }
        observations = result.observations;
    }
    let stats: Vec<EpisodeStats> = done
        .into_iter()
        .map(|s| s.expect("all episodes finished"))
        .collect();
    Ok(Evaluation {
        returns: stats.iter().map(|s| s.episode_return).collect(),
        lengths: stats.iter().map(|s| s.length).collect(),
        env_steps,
    })
}
