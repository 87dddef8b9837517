//! Self-play actors: many environments stepped in parallel, one batched search for all of them.
//!
//! An [`Actor`] owns a vector of environments and the games in progress. Each
//! [`Actor::step`] searches every environment's current observation in one batch (one network
//! call per simulation for the whole batch), picks actions by visit-count temperature, steps the
//! environments and hands back every game that finished.

use std::collections::{HashMap, VecDeque};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use candle_core::Tensor;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;

use cumind_envs::{EnvError, EnvSpec, Environment, EpisodeStats, VectorEnv};

use crate::exact_model::search_games;
use crate::model::{Interruptible, ModelError};
use crate::network::{MuZeroNetwork, SearchModel};
use crate::replay::GameHistory;
use crate::search::{
    choose_actions, choose_actions_in_games, SearchConfig, SearchError, SearchInput,
};

/// Errors of self-play and evaluation.
#[derive(Debug, thiserror::Error)]
pub enum SelfPlayError {
    #[error("environment error")]
    Env(#[from] EnvError),
    #[error("search failed")]
    Search(#[from] SearchError),
    #[error("model error")]
    Model(#[from] ModelError),
    #[error("the evaluation's opponent: {0}")]
    Opponent(String),
}

/// The other player of a two-player evaluation: its move in a game, given the game's
/// current observation.
pub type OpponentMove<'a> =
    dyn FnMut(&dyn Environment, &[f32], &mut StdRng) -> Result<usize, String> + 'a;

/// Who the agent plays in a two-player evaluation.
pub struct EvaluationRules<'a> {
    /// Plies played at random by both players at the start of each game.
    pub opening_plies: usize,
    /// The opponent's moves; `None`: a uniformly random legal move.
    pub opponent: Option<&'a mut OpponentMove<'a>>,
}

impl EvaluationRules<'_> {
    /// Random moves against a random opponent from the first ply: what `evaluate` plays.
    pub fn random() -> Self {
        Self {
            opening_plies: 0,
            opponent: None,
        }
    }
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
    /// Wall-clock seconds an [`ActorPool`] thread spent taking this step (search and
    /// environments); 0 for a step taken on the learner's thread, which times it itself.
    pub seconds: f64,
}

/// Playout cap randomization (Wu, "Accelerating Self-Play Learning in Go", 2019): each
/// self-play move is searched in full with probability `full_fraction` and stored with its
/// policy target; the others get a fast search of `fast_simulations`, without root noise,
/// that chooses the move and gives the value targets but stores no policy target. More moves
/// per second of self-play, and policy targets from searches as deep as the full one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlayoutCap {
    pub fast_simulations: usize,
    pub full_fraction: f32,
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
    /// Most random plies that open a game (0: none); see [`Actor::with_random_opening`].
    opening_plies: usize,
    /// Random plies still to play in each environment's current game.
    opening_left: Vec<usize>,
    /// Transitions a segment is padded with after its cut (0: none); see
    /// [`Actor::with_segment_padding`].
    segment_padding: usize,
    /// Per environment: cut segments still collecting their padding.
    padding_segments: Vec<Vec<GameHistory>>,
    /// Searches replay their recurrent inference from a CUDA graph (see
    /// [`Actor::with_cuda_graphs`]).
    cuda_graphs: bool,
    /// Fast searches for most moves (see [`Actor::with_playout_cap`]).
    playout_cap: Option<PlayoutCap>,
}

impl Actor {
    /// `num_envs` copies of the named environment, seeded from `seed`. Games longer than
    /// `segment_length` transitions are handed over in segments of that length (0: whole games).
    pub fn new(
        env: &EnvSpec,
        num_envs: usize,
        seed: u64,
        segment_length: usize,
    ) -> Result<Self, SelfPlayError> {
        let mut envs = VectorEnv::from_spec(env, num_envs)?;
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
            opening_plies: 0,
            opening_left: vec![0; num_envs],
            segment_padding: 0,
            cuda_graphs: false,
            padding_segments: vec![Vec::new(); num_envs],
            playout_cap: None,
        })
    }

    /// Search each step in full (and store its policy targets) with probability
    /// `cap.full_fraction`, else with `cap.fast_simulations` and no root noise, storing no
    /// policy target (see [`PlayoutCap`]); one draw per step, for every environment of the
    /// batch. `None` (the default) searches every step in full and draws nothing from the
    /// random stream.
    pub fn with_playout_cap(mut self, cap: Option<PlayoutCap>) -> Self {
        self.playout_cap = cap;
        self
    }

    /// Pad every segment cut from a long episode with the `transitions` that follow the cut
    /// (or with the rest of the episode, if it ends sooner) before it is handed over, so that
    /// the positions before the cut get the same unroll and n-step targets as in the whole
    /// game: `num_unroll_steps + td_steps` transitions are enough. The padding is stored but
    /// not sampled ([`GameHistory::padding`]). 0 (the default) hands segments over at the cut.
    pub fn with_segment_padding(mut self, transitions: usize) -> Self {
        self.segment_padding = transitions;
        self
    }

    /// On a CUDA device, replay each search's recurrent inference from a captured CUDA graph
    /// ([`SearchModel::with_cuda_graphs`]): only for an actor on the thread that alone drives
    /// the device (not for the threads of an [`ActorPool`], which share its stream).
    pub fn with_cuda_graphs(mut self, enabled: bool) -> Self {
        self.cuda_graphs = enabled;
        self
    }

    /// Open every game with a number of uniformly random legal moves drawn uniformly from
    /// `0..=plies`, played by both sides and not stored: the game enters replay from the
    /// position they lead to, so the agent learns positions its own play would not reach (in a
    /// two-player game, the replies to openings its first player never plays) without the
    /// random moves biasing any stored value target. 0 (the default) draws nothing from the
    /// random stream, so runs without it are unchanged.
    pub fn with_random_opening(mut self, plies: usize) -> Self {
        self.opening_plies = plies;
        for i in 0..self.opening_left.len() {
            self.opening_left[i] = self.draw_opening();
        }
        self
    }

    fn draw_opening(&mut self) -> usize {
        if self.opening_plies == 0 {
            0
        } else {
            self.rng.random_range(0..=self.opening_plies)
        }
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
        let never = std::sync::atomic::AtomicBool::new(false);
        self.step_unless(network, search, temperature, &never)?
            .ok_or(SelfPlayError::Model(ModelError::Interrupted))
    }

    /// [`Self::step`], abandoned (`None`) when `stop` is set before or during its search: the
    /// search checks the flag before every simulation, and an abandoned step changes no
    /// environment and stores nothing (only the actor's random stream has moved on).
    pub fn step_unless(
        &mut self,
        network: &MuZeroNetwork,
        search: &SearchConfig,
        temperature: f32,
        stop: &std::sync::atomic::AtomicBool,
    ) -> Result<Option<ActorStep>, SelfPlayError> {
        let n = self.envs.len();
        let a = self.num_actions;
        let flat: Vec<f32> = self.observations.concat();
        let masks: Vec<bool> = self.envs.legal_action_masks().concat();
        let games: Vec<&dyn Environment> = self.envs.envs().iter().map(|e| e.as_ref()).collect();
        let fast = match self.playout_cap {
            Some(cap) if self.rng.random::<f32>() >= cap.full_fraction => Some(SearchConfig {
                num_simulations: cap.fast_simulations,
                ..search.clone()
            }),
            _ => None,
        };
        let input = SearchInput {
            observations: &flat,
            batch: n,
            legal_masks: &masks,
            add_noise: fast.is_none(),
        };
        let searched = search_games(
            &mut Interruptible::new(
                SearchModel::new(network).with_cuda_graphs(self.cuda_graphs),
                stop,
            ),
            fast.as_ref().unwrap_or(search),
            &games,
            &input,
            &mut self.rng,
        );
        let out = match searched {
            Err(SearchError::Model(ModelError::Interrupted)) => return Ok(None),
            other => other?,
        };
        let moves_played: Vec<usize> = self.games.iter().map(|g| g.actions.len()).collect();
        let mut actions: Vec<usize> = choose_actions_in_games(
            &out,
            &masks,
            temperature,
            &moves_played,
            search.sampling_moves,
            &mut self.rng,
        );
        // Environments still in their random opening play a random legal move instead.
        let opening: Vec<bool> = self.opening_left.iter().map(|&left| left > 0).collect();
        for i in (0..n).filter(|&i| opening[i]) {
            let legal: Vec<usize> = (0..a).filter(|&j| masks[i * a + j]).collect();
            actions[i] = legal[self.rng.random_range(0..legal.len())];
            self.opening_left[i] -= 1;
        }
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
        let no_policy = vec![0.0; a];
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
            if opening[i] {
                // Not stored: the game starts again from the position the move leads to (or
                // from the new episode, with a new opening, if the move ended the game).
                if ended {
                    self.opening_left[i] = self.draw_opening();
                    self.games[i] = GameHistory::new(
                        self.obs_len,
                        a,
                        &result.observations[i],
                        to_play[i] as u8,
                    );
                } else {
                    self.games[i] = GameHistory::new(self.obs_len, a, &next_obs, next_to_play);
                }
                continue;
            }
            // A fast search's visits are no policy target: stored as zeros, which replay
            // reads as none.
            let policy = if fast.is_some() {
                &no_policy[..]
            } else {
                &out.policy_targets[i * a..(i + 1) * a]
            };
            let reward = result.rewards[i] as f32;
            self.games[i].push(
                actions[i],
                reward,
                out.root_values[i],
                policy,
                &next_obs,
                next_to_play,
            );
            // Cut segments collect the same transition as padding; one whose padding is
            // complete is handed over, and every one of them when the episode ends.
            for segment in &mut self.padding_segments[i] {
                segment.push_padding(
                    actions[i],
                    reward,
                    out.root_values[i],
                    policy,
                    &next_obs,
                    next_to_play,
                );
            }
            if let Some(stats) = &result.finished[i] {
                self.opening_left[i] = self.draw_opening();
                let fresh =
                    GameHistory::new(self.obs_len, a, &result.observations[i], to_play[i] as u8);
                let game = std::mem::replace(&mut self.games[i], fresh);
                // The episode's end also ends the segments still collecting padding.
                for mut ended in self.padding_segments[i].drain(..).chain([game]) {
                    if result.terminated[i] {
                        ended.finish(true, 0.0);
                        step.finished_games.push(ended);
                    } else {
                        truncated_games.push(ended);
                    }
                }
                step.finished_episodes.push(*stats);
                continue;
            }
            let padding = self.segment_padding;
            truncated_games.extend(
                self.padding_segments[i].extract_if(.., |segment| segment.padding >= padding),
            );
            if self.segment_length > 0 && self.games[i].len() >= self.segment_length {
                // Hand long episodes to the replay buffer in segments, so fresh data arrives
                // while the episode goes on; a segment is bootstrapped like a truncated game.
                let fresh = GameHistory::new(self.obs_len, a, &next_obs, next_to_play);
                let segment = std::mem::replace(&mut self.games[i], fresh);
                if self.segment_padding > 0 {
                    self.padding_segments[i].push(segment);
                } else {
                    truncated_games.push(segment);
                }
            }
        }
        if !truncated_games.is_empty() {
            // Bootstrap values of truncated games and segments: the network's value of the
            // final observation.
            let finals: Vec<f32> = truncated_games
                .iter()
                .flat_map(|g| g.observation(g.len()).to_vec())
                .collect();
            let values = network.values(&finals).map_err(ModelError::from)?;
            for (mut game, value) in truncated_games.into_iter().zip(values) {
                game.finish(false, value);
                step.finished_games.push(game);
            }
        }
        self.observations = result.observations;
        Ok(Some(step))
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
/// action) and report their returns. The unfinished episodes are searched together, split in
/// two batches that run on two threads on the CPU (one after the other on a GPU).
///
/// In two-player games the agent plays against a uniformly random legal mover, as the first
/// player in even-numbered episodes and the second in odd ones; the return is from the agent's
/// point of view (+1 win, 0 draw, -1 loss).
pub fn evaluate(
    network: &MuZeroNetwork,
    env: &EnvSpec,
    episodes: usize,
    search: &SearchConfig,
    seed: u64,
) -> Result<Evaluation, SelfPlayError> {
    let never = std::sync::atomic::AtomicBool::new(false);
    let played = evaluate_unless(network, env, episodes, search, seed, &never)?;
    Ok(played.expect("an evaluation nothing stops plays to its end"))
}

/// One half of an evaluation's searches: the episodes, the seed, and copies of their games
/// for the exact-rules search (empty otherwise).
type SearchJob<'a> = (&'a [usize], u64, Vec<Box<dyn Environment>>);

/// [`evaluate`], abandoned (`None`) as soon as `stop` is set: it is checked before every
/// batched search step, so a stop request waits for one step of the unfinished episodes, not
/// for the whole evaluation.
pub fn evaluate_unless(
    network: &MuZeroNetwork,
    env: &EnvSpec,
    episodes: usize,
    search: &SearchConfig,
    seed: u64,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<Option<Evaluation>, SelfPlayError> {
    evaluate_against(
        network,
        env,
        episodes,
        search,
        seed,
        stop,
        EvaluationRules::random(),
    )
}

/// [`evaluate_unless`] against the opponent of `rules` after its random opening (two-player
/// games: the agent moves first in the even episodes, second in the odd ones; its returns
/// are +1 for a win, 0 for a draw, -1 for a loss).
pub fn evaluate_against(
    network: &MuZeroNetwork,
    env: &EnvSpec,
    episodes: usize,
    search: &SearchConfig,
    seed: u64,
    stop: &std::sync::atomic::AtomicBool,
    mut rules: EvaluationRules<'_>,
) -> Result<Option<Evaluation>, SelfPlayError> {
    let mut envs = VectorEnv::from_spec(env, episodes)?;
    let mut observations = envs.reset(Some(seed));
    let a = envs.envs()[0].action_space().n().unwrap_or(0);
    let two_player = envs.envs()[0].num_players() > 1;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut returns = vec![0f64; episodes];
    let mut lengths = vec![0usize; episodes];
    let mut done = vec![false; episodes];
    let mut env_steps = 0;
    while done.iter().any(|d| !d) {
        if stop.load(std::sync::atomic::Ordering::SeqCst) {
            return Ok(None);
        }
        let all_masks = envs.legal_action_masks();
        let to_play = envs.to_play();
        let opening: Vec<bool> = (0..episodes)
            .map(|i| lengths[i] < rules.opening_plies)
            .collect();
        let agent_moves: Vec<bool> = (0..episodes)
            .map(|i| !opening[i] && (!two_player || to_play[i] == i % 2))
            .collect();
        // The side whose move it is, for the rewards: the agent's unless the opponent moves.
        let agents_side: Vec<bool> = (0..episodes)
            .map(|i| !two_player || to_play[i] == i % 2)
            .collect();
        // Search only the unfinished episodes where the agent moves, in two halves side by
        // side (a fixed split with seeds drawn in order, so a seed plays the same games on
        // any number of cores). Finished environments get any legal action; it is ignored.
        let searched: Vec<usize> = (0..episodes)
            .filter(|&i| !done[i] && agent_moves[i])
            .collect();
        let halves: Vec<&[usize]> = searched.chunks(searched.len().div_ceil(2).max(1)).collect();
        let seeds: Vec<u64> = halves.iter().map(|_| rng.random()).collect();
        // The exact-rules search steps copies of each half's games.
        let jobs: Vec<SearchJob> = halves
            .iter()
            .zip(&seeds)
            .map(|(&half, &seed)| {
                let games = if search.exact_rules {
                    half.iter().map(|&i| envs.envs()[i].clone_box()).collect()
                } else {
                    Vec::new()
                };
                (half, seed, games)
            })
            .collect();
        let search_half = |(half, seed, games): SearchJob| -> Result<Vec<usize>, SelfPlayError> {
            let mut rng = StdRng::seed_from_u64(seed);
            let flat: Vec<f32> = half
                .iter()
                .flat_map(|&i| observations[i].iter().copied())
                .collect();
            let masks: Vec<bool> = half
                .iter()
                .flat_map(|&i| all_masks[i].iter().copied())
                .collect();
            let games: Vec<&dyn Environment> = games.iter().map(|e| e.as_ref()).collect();
            let out = search_games(
                &mut SearchModel::new(network),
                search,
                &games,
                &SearchInput {
                    observations: &flat,
                    batch: half.len(),
                    legal_masks: &masks,
                    add_noise: false,
                },
                &mut rng,
            )?;
            Ok(choose_actions(&out, &masks, 0.0, &mut rng))
        };
        // On the CPU the halves run on two threads; on a GPU one after the other (the same
        // games), so one device is never driven from two threads at once.
        let chosen = if network.device().is_cpu() {
            jobs.into_par_iter()
                .map(search_half)
                .collect::<Result<Vec<_>, _>>()?
        } else {
            jobs.into_iter()
                .map(search_half)
                .collect::<Result<Vec<_>, _>>()?
        };
        let mut actions: Vec<usize> = all_masks
            .iter()
            .map(|m| m.iter().position(|&legal| legal).unwrap_or(0))
            .collect();
        for (half, moves) in halves.iter().zip(chosen) {
            for (&i, action) in half.iter().zip(moves) {
                actions[i] = action;
            }
        }
        for (i, action) in actions.iter_mut().enumerate() {
            if done[i] || agent_moves[i] {
                continue;
            }
            match (&mut rules.opponent, opening[i]) {
                (Some(opponent), false) => {
                    *action = opponent(envs.envs()[i].as_ref(), &observations[i], &mut rng)
                        .map_err(SelfPlayError::Opponent)?;
                }
                _ => {
                    let legal: Vec<usize> = (0..a).filter(|&k| all_masks[i][k]).collect();
                    *action = legal[rng.random_range(0..legal.len())];
                }
            }
        }
        let result = envs.step(&actions)?;
        for i in 0..episodes {
            if done[i] {
                continue;
            }
            env_steps += 1;
            lengths[i] += 1;
            // Rewards belong to the player who moved.
            let sign = if agents_side[i] { 1.0 } else { -1.0 };
            returns[i] += sign * result.rewards[i];
            if result.finished[i].is_some() {
                done[i] = true;
            }
        }
        observations = result.observations;
    }
    Ok(Some(Evaluation {
        returns,
        lengths,
        env_steps,
    }))
}

/// One version of the weights, published by the learner after it consumed an actor step.
struct Published {
    /// The learner's training step when these weights were taken (equal ids: equal weights).
    weights_id: u64,
    tensors: Arc<HashMap<String, Tensor>>,
    temperature: f32,
}

/// The versions the actors may still need: `versions[k]` is version `first + k`.
#[derive(Default)]
struct BoardState {
    first: u64,
    versions: VecDeque<Arc<Published>>,
    stopped: bool,
}

/// Weights published by the learner, one version per consumed actor step.
#[derive(Default)]
struct WeightBoard {
    state: Mutex<BoardState>,
    changed: Condvar,
}

impl WeightBoard {
    fn lock(&self) -> std::sync::MutexGuard<'_, BoardState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wait until `version` is published; `None` once the pool stops.
    fn wait_for(&self, version: u64) -> Option<Arc<Published>> {
        let mut state = self.lock();
        loop {
            if state.stopped {
                return None;
            }
            let end = state.first + state.versions.len() as u64;
            if version < end {
                let k = version.checked_sub(state.first)? as usize;
                return Some(state.versions[k].clone());
            }
            state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn stop(&self) {
        self.lock().stopped = true;
        self.changed.notify_all();
    }
}

/// What an [`ActorPool`] runs.
#[derive(Debug, Clone)]
pub struct ActorPoolConfig {
    pub env: EnvSpec,
    /// Actor threads (at least 1).
    pub num_actors: usize,
    /// Environments per actor, searched in one batch.
    pub num_envs: usize,
    pub seed: u64,
    /// Games longer than this enter replay in segments (0: whole games).
    pub segment_length: usize,
    /// Most random plies opening each game (see [`Actor::with_random_opening`]).
    pub random_opening_plies: usize,
    /// Transitions each cut segment is padded with (see [`Actor::with_segment_padding`]).
    pub segment_padding: usize,
    /// Fast searches for most moves (see [`Actor::with_playout_cap`]).
    pub playout_cap: Option<PlayoutCap>,
    pub search: SearchConfig,
}

/// Actor threads playing beside the learner, on a schedule that does not depend on timing.
///
/// The learner consumes actor steps in a fixed round-robin order (global step `g` is step
/// `g / A` of actor `g % A`, with `A` actors) and publishes one weight version after each
/// (version `v`: the weights after `v` consumed steps). Global step `g` is computed with
/// exactly version `g - A` (version 0 for the first round): each actor may run ahead of the
/// learner by one round, overlapping its search with the learner's training, and waits when
/// it would get further ahead. So the replay ratio holds in phase, every step's weights,
/// temperature and data are fixed by the seed, and a threaded run is reproducible however the
/// threads are scheduled.
pub struct ActorPool {
    /// Each actor's steps in order; `None` for a step a stop request abandoned (the actor then
    /// ends).
    receivers: Vec<Receiver<Result<Option<ActorStep>, SelfPlayError>>>,
    board: Arc<WeightBoard>,
    handles: Vec<JoinHandle<()>>,
    /// Actor steps consumed so far (the next global step).
    consumed: u64,
    /// Versions published so far.
    published: u64,
}

impl ActorPool {
    /// Start `config.num_actors` threads, actor `i` seeded with `seed + i * 1_000_003`, each
    /// with its own copy of `network`, and publish the initial weights at `temperature` as
    /// version 0. Once `stop` is set, each actor abandons the search of the step it is in
    /// ([`Actor::step_unless`]) and ends.
    pub fn spawn(
        network: &MuZeroNetwork,
        config: &ActorPoolConfig,
        temperature: f32,
        stop: Arc<std::sync::atomic::AtomicBool>,
    ) -> Result<Self, SelfPlayError> {
        let ActorPoolConfig {
            env,
            num_actors,
            num_envs,
            seed,
            segment_length,
            random_opening_plies,
            segment_padding,
            playout_cap,
            search,
        } = config;
        let (num_actors, num_envs, seed, segment_length) =
            (*num_actors, *num_envs, *seed, *segment_length);
        let board = Arc::new(WeightBoard::default());
        let lag = num_actors as u64;
        let mut receivers = Vec::new();
        let mut handles = Vec::new();
        for i in 0..num_actors {
            let mut actor = Actor::new(
                env,
                num_envs,
                seed.wrapping_add(i as u64 * 1_000_003),
                segment_length,
            )?
            .with_random_opening(*random_opening_plies)
            .with_segment_padding(*segment_padding)
            .with_playout_cap(*playout_cap);
            let network = network
                .deep_copy(network.device())
                .map_err(ModelError::from)?;
            let (sender, receiver) = sync_channel(1);
            receivers.push(receiver);
            let (board, search, stop) = (board.clone(), search.clone(), stop.clone());
            handles.push(std::thread::spawn(move || {
                let mut weights_id = None;
                for local in 0u64.. {
                    let global = local * lag + i as u64;
                    let Some(published) = board.wait_for(global.saturating_sub(lag)) else {
                        return;
                    };
                    if weights_id != Some(published.weights_id) {
                        if let Err(err) = network.params().copy_from_tensors(&published.tensors) {
                            let _ = sender.send(Err(ModelError::from(err).into()));
                            return;
                        }
                        weights_id = Some(published.weights_id);
                    }
                    let clock = std::time::Instant::now();
                    let mut step =
                        actor.step_unless(&network, &search, published.temperature, &stop);
                    if let Ok(Some(step)) = &mut step {
                        step.seconds = clock.elapsed().as_secs_f64();
                    }
                    let last = !matches!(step, Ok(Some(_)));
                    if sender.send(step).is_err() || last {
                        return;
                    }
                }
            }));
        }
        let mut pool = Self {
            receivers,
            board,
            handles,
            consumed: 0,
            published: 0,
        };
        pool.publish(network, 0, temperature)?;
        Ok(pool)
    }

    /// Publish the weights and temperature the learner holds after the step it consumed last.
    /// Call it exactly once after every [`ActorPool::next_step`]. `weights_id` is the learner's
    /// training step count: an unchanged id reuses the previous version's tensors.
    pub fn publish(
        &mut self,
        network: &MuZeroNetwork,
        weights_id: u64,
        temperature: f32,
    ) -> Result<(), SelfPlayError> {
        assert_eq!(
            self.published, self.consumed,
            "ActorPool::publish must follow each ActorPool::next_step exactly once"
        );
        let lag = self.receivers.len() as u64;
        let mut state = self.board.lock();
        let tensors = match state.versions.back() {
            Some(last) if last.weights_id == weights_id => last.tensors.clone(),
            _ => Arc::new(network.params().to_tensors().map_err(ModelError::from)?),
        };
        state.versions.push_back(Arc::new(Published {
            weights_id,
            tensors,
            temperature,
        }));
        // This is version `published`, after `consumed == published` steps: every step still
        // to come is `g >= consumed` and needs version `g - lag` or later.
        let oldest_needed = self.consumed.saturating_sub(lag);
        while state.first < oldest_needed && state.versions.len() > 1 {
            state.versions.pop_front();
            state.first += 1;
        }
        drop(state);
        self.board.changed.notify_all();
        self.published += 1;
        Ok(())
    }

    /// The next actor step in round-robin order (blocks until that actor has it ready);
    /// `None` when a stop request abandoned it.
    pub fn next_step(&mut self) -> Result<Option<ActorStep>, SelfPlayError> {
        assert_eq!(
            self.published,
            self.consumed + 1,
            "ActorPool::next_step must follow a publish"
        );
        let actor = (self.consumed % self.receivers.len() as u64) as usize;
        let step = match self.receivers[actor].recv() {
            Ok(step) => step,
            Err(_) => Err(SelfPlayError::Model(ModelError::Backend(format!(
                "actor thread {actor} stopped"
            )))),
        };
        self.consumed += 1;
        step
    }
}

impl Drop for ActorPool {
    fn drop(&mut self) {
        self.board.stop();
        // Dropping the receivers unblocks actors waiting to send.
        self.receivers.clear();
        for handle in self.handles.drain(..) {
            let _ = handle.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use candle_core::{DType, Device};

    use super::*;
    use crate::search::SearchPolicy;
    use crate::testing::specs::tiny_spec;

    /// Stones on the board at the first stored position of each of the first finished
    /// tic-tac-toe games (120), with random openings of up to `plies` moves; every game is also
    /// checked to be consistent (the player to move follows the stones).
    fn opening_stones(plies: usize, seed: u64) -> Vec<usize> {
        let network =
            MuZeroNetwork::new(tiny_spec(vec![3, 3, 3], 9), 1, &Device::Cpu, DType::F32).unwrap();
        let search = SearchConfig {
            num_simulations: 4,
            discount: 1.0,
            c1: 1.25,
            c2: 19652.0,
            dirichlet_alpha: 0.3,
            exploration_fraction: 0.25,
            two_player: true,
            policy: SearchPolicy::Puct,
            symmetries: Vec::new(),
            exact_rules: false,
            sampling_moves: None,
            value_bounds: None,
            unvisited_value: Default::default(),
            decisive_moves: false,
            solver: false,
            helper_threads: 0,
            bf16_inference: false,
        };
        let mut actor = Actor::new(&"TicTacToe".into(), 8, seed, 0)
            .unwrap()
            .with_random_opening(plies);
        let mut stones = Vec::new();
        while stones.len() < 120 {
            for game in actor.step(&network, &search, 1.0).unwrap().finished_games {
                game.validate().unwrap();
                assert!(!game.is_empty());
                // Planes: the mover's stones, the opponent's, the player to move.
                let on_board = game.observation(0)[..18]
                    .iter()
                    .filter(|&&x| x > 0.5)
                    .count();
                assert_eq!(game.to_play[0] as usize, on_board % 2);
                stones.push(on_board);
            }
        }
        stones
    }

    /// The games one actor hands over, until `episodes` episodes have finished: CartPole, 4
    /// environments, seed 9, segments of `segment_length` padded with `padding` transitions.
    fn cartpole_games(segment_length: usize, padding: usize, steps: usize) -> Vec<GameHistory> {
        let network =
            MuZeroNetwork::new(tiny_spec(vec![4], 2), 1, &Device::Cpu, DType::F32).unwrap();
        let search = SearchConfig {
            num_simulations: 3,
            discount: 0.97,
            c1: 1.25,
            c2: 19652.0,
            dirichlet_alpha: 0.3,
            exploration_fraction: 0.25,
            two_player: false,
            policy: SearchPolicy::Puct,
            symmetries: Vec::new(),
            exact_rules: false,
            sampling_moves: None,
            value_bounds: None,
            unvisited_value: Default::default(),
            decisive_moves: false,
            solver: false,
            helper_threads: 0,
            bf16_inference: false,
        };
        let mut actor = Actor::new(&"CartPole-v1".into(), 4, 9, segment_length)
            .unwrap()
            .with_segment_padding(padding);
        let mut games = Vec::new();
        for _ in 0..steps {
            games.extend(actor.step(&network, &search, 1.0).unwrap().finished_games);
        }
        games
    }

    /// For every sampled position of every segment: whether its training row (targets, masks,
    /// actions, observations) equals the row of the same position in the whole game.
    fn segment_rows_match_whole_games(padding: usize) -> Vec<bool> {
        use crate::replay::{PositionId, ReplayBuffer};
        use rand::SeedableRng;
        let (k, n) = (2, 3);
        let whole = cartpole_games(0, 0, 150);
        let segments = cartpole_games(4, padding, 150);
        let config = crate::testing::games::replay_config(100_000, k, n, 0.97);
        let mut whole_buffer = ReplayBuffer::new(config.clone());
        let mut segment_buffer = ReplayBuffer::new(config);
        for game in &whole {
            whole_buffer.save_game(game.clone()).unwrap();
        }
        let row = |buffer: &ReplayBuffer, id: PositionId| {
            let mut rng = rand::rngs::StdRng::seed_from_u64(0);
            let mut batch = buffer.batch_from_ids(&[id], &mut rng).unwrap();
            batch.ids.clear();
            batch
        };
        let mut matches = Vec::new();
        for (s, segment) in segments.iter().enumerate() {
            segment_buffer.save_game(segment.clone()).unwrap();
            // The whole game and offset where this segment starts (CartPole states are unique).
            let Some((g, offset)) = whole.iter().enumerate().find_map(|(g, game)| {
                (0..game.len())
                    .find(|&t| game.observation(t) == segment.observation(0))
                    .map(|t| (g, t))
            }) else {
                continue; // a segment of an episode the whole-game actor did not finish
            };
            if offset + segment.len() > whole[g].len() {
                continue;
            }
            for t in 0..segment.sampled_len() {
                let a = row(&segment_buffer, PositionId::new(s as u64, t));
                let b = row(&whole_buffer, PositionId::new(g as u64, offset + t));
                matches.push(a == b);
            }
        }
        matches
    }

    #[test]
    fn padded_segments_give_the_targets_of_the_whole_game() {
        // Padding with num_unroll_steps + td_steps transitions: every position matches.
        let padded = segment_rows_match_whole_games(2 + 3);
        assert!(
            padded.len() > 300,
            "only {} positions compared",
            padded.len()
        );
        assert!(padded.iter().all(|&m| m), "{padded:?}");
        // Without padding the positions just before each cut lose targets.
        let cut = segment_rows_match_whole_games(0);
        assert!(cut.len() > 300);
        assert!(cut.iter().any(|&m| !m));
    }

    /// Tic-tac-toe games of 8 environments over 40 steps with the playout cap `cap`.
    fn capped_games(cap: Option<PlayoutCap>) -> Vec<GameHistory> {
        let network =
            MuZeroNetwork::new(tiny_spec(vec![3, 3, 3], 9), 1, &Device::Cpu, DType::F32).unwrap();
        let search = SearchConfig {
            num_simulations: 8,
            two_player: true,
            discount: 1.0,
            ..SearchConfig::default()
        };
        let mut actor = Actor::new(&"TicTacToe".into(), 8, 3, 0)
            .unwrap()
            .with_playout_cap(cap);
        (0..40)
            .flat_map(|_| actor.step(&network, &search, 1.0).unwrap().finished_games)
            .collect()
    }

    /// With a playout cap, the moves of fast searches store no policy target (zeros, which
    /// replay masks out) but keep their value targets; full searches store theirs. Without
    /// one every move has a policy target.
    #[test]
    fn a_playout_cap_stores_policy_targets_for_full_searches_only() {
        use crate::replay::{PositionId, ReplayBuffer};
        use rand::SeedableRng;
        let has_target = |games: &[GameHistory]| -> Vec<bool> {
            games
                .iter()
                .flat_map(|g| (0..g.len()).map(move |t| g.policy(t).iter().any(|&p| p > 0.0)))
                .collect()
        };
        let full = has_target(&capped_games(None));
        assert!(full.len() > 100 && full.iter().all(|&t| t));
        let capped_games = capped_games(Some(PlayoutCap {
            fast_simulations: 2,
            full_fraction: 0.3,
        }));
        let capped = has_target(&capped_games);
        let with_target = capped.iter().filter(|&&t| t).count();
        assert!(
            with_target > 0 && with_target < capped.len() / 2,
            "{with_target} of {} positions with a policy target",
            capped.len()
        );
        // Replay: a row's policy mask follows the stored target; every row keeps its value.
        let config = crate::testing::games::replay_config(100_000, 0, 3, 1.0);
        let mut buffer = ReplayBuffer::new(config);
        for game in &capped_games {
            buffer.save_game(game.clone()).unwrap();
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(0);
        let mut at = 0;
        for (g, game) in capped_games.iter().enumerate() {
            for t in 0..game.len() {
                let id = PositionId::new(g as u64, t);
                let batch = buffer.batch_from_ids(&[id], &mut rng).unwrap();
                assert_eq!(batch.policy_mask[0], if capped[at] { 1.0 } else { 0.0 });
                assert_eq!(batch.value_mask[0], 1.0);
                at += 1;
            }
        }
    }

    #[test]
    fn random_openings_start_stored_games_after_zero_to_n_random_moves() {
        let none = opening_stones(0, 5);
        assert!(none.iter().all(|&s| s == 0), "{none:?}");
        let some = opening_stones(4, 5);
        for n in 0..=4 {
            assert!(some.contains(&n), "no game opened with {n} moves: {some:?}");
        }
        assert!(some.iter().all(|&s| s <= 4), "{some:?}");
        assert_eq!(some, opening_stones(4, 5), "the seed fixes the openings");
    }

    /// Against a perfect tic-tac-toe player an untrained agent never wins; the openings
    /// are random, and an opponent's failure stops the evaluation with its message.
    #[test]
    fn an_evaluation_against_a_perfect_opponent_never_wins_and_opens_at_random() {
        let network =
            MuZeroNetwork::new(tiny_spec(vec![3, 3, 3], 9), 3, &Device::Cpu, DType::F32).unwrap();
        let search = SearchConfig {
            num_simulations: 6,
            two_player: true,
            discount: 1.0,
            ..SearchConfig::default()
        };
        let never = std::sync::atomic::AtomicBool::new(false);
        let mut perfect = crate::arena::Opponent::Perfect(HashMap::new());
        let mut choose = |env: &dyn Environment, obs: &[f32], rng: &mut StdRng| {
            perfect.choose(env, obs, rng).map_err(|e| e.to_string())
        };
        let rules = EvaluationRules {
            opening_plies: 2,
            opponent: Some(&mut choose),
        };
        let eval = evaluate_against(&network, &"TicTacToe".into(), 8, &search, 5, &never, rules)
            .unwrap()
            .unwrap();
        assert!(eval.returns.iter().all(|&r| r <= 0.0), "{eval:?}");
        assert!(eval.lengths.iter().all(|&l| l >= 5), "{eval:?}");
        let mut failing =
            |_: &dyn Environment, _: &[f32], _: &mut StdRng| Err("no move".to_string());
        let rules = EvaluationRules {
            opening_plies: 0,
            opponent: Some(&mut failing),
        };
        let err = evaluate_against(&network, &"TicTacToe".into(), 2, &search, 5, &never, rules)
            .unwrap_err()
            .to_string();
        assert!(err.contains("no move"), "{err}");
    }

    #[test]
    fn evaluation_plays_the_same_games_on_one_thread_or_two() {
        let network =
            MuZeroNetwork::new(tiny_spec(vec![3, 3, 3], 9), 3, &Device::Cpu, DType::F32).unwrap();
        let search = SearchConfig {
            num_simulations: 6,
            discount: 1.0,
            c1: 1.25,
            c2: 19652.0,
            dirichlet_alpha: 0.3,
            exploration_fraction: 0.25,
            two_player: true,
            policy: SearchPolicy::Puct,
            symmetries: Vec::new(),
            exact_rules: false,
            sampling_moves: None,
            value_bounds: None,
            unvisited_value: Default::default(),
            decisive_moves: false,
            solver: false,
            helper_threads: 0,
            bf16_inference: false,
        };
        let on = |threads: usize| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| evaluate(&network, &"TicTacToe".into(), 7, &search, 11).unwrap())
        };
        let one = on(1);
        assert_eq!(one, on(2));
        // Games of different lengths (finished ones leave the batch), outcomes from the
        // agent's side, every step counted once.
        assert!(one.lengths.iter().any(|&l| l != one.lengths[0]), "{one:?}");
        assert!(one.returns.iter().all(|r| [-1.0, 0.0, 1.0].contains(r)));
        assert_eq!(one.env_steps, one.lengths.iter().sum::<usize>());
        assert!(one.lengths.iter().all(|&l| (5..=9).contains(&l)));
    }
}
