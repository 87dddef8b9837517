//! A training run: self-play, replay, learner, evaluation, metrics and checkpoints.
//!
//! Synchronous schedule (`num_actors = 0`, deterministic on the CPU for a given seed): the actor
//! steps every environment once, finished games enter the replay buffer, then the learner takes
//! as many training steps as the replay ratio (`train_ratio` training steps per environment
//! step, counted from the moment the buffer first holds enough data) allows.
//!
//! With actor threads (`num_actors > 0`, one by default) the loop is the same, but each actor step comes from
//! an [`ActorPool`] in a fixed round-robin order and the learner publishes its weights after
//! every step it consumes (see [`ActorPool`] for the schedule); a run is then reproducible for
//! a seed too, however the threads are scheduled.
//!
//! Over several ranks ([`RunOptions::collective`]): each rank runs this loop with its own
//! self-play (seeds offset by the rank) and replay, samples `batch_size / ranks` positions per
//! step and averages its gradients with the other ranks' ([`crate::distributed`]). Every
//! iteration the ranks agree on whether to stop (any rank's budget or interrupt, or rank 0's
//! evaluation reaching `stop_return`) and on how many training steps to take (the fewest any
//! rank owes), so they call the same collective operations in the same order. The counters
//! add up every rank's environment steps and episodes. Rank 0 alone evaluates and writes
//! checkpoints; at each checkpoint the other ranks send it their replay memories, saved as one
//! shard per rank, and a resumed run deals the shards out over its ranks, whatever their
//! number.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use candle_core::Device;
use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::arena::{Opponent, OpponentSpec};
use crate::checkpoint::{self, CheckpointData, Counters};
use crate::components::{self, EnvInfo};
use crate::config::{Config, ReanalyseNetwork};
use crate::distributed::Collective;
use crate::error_chain::error_chain;
use crate::metrics::{MetricSink, Progress};
use crate::network::SearchModel;
use crate::network::{compute_dtype, MuZeroNetwork};
use crate::replay::{reanalyse_policies, Batch, ReplayBuffer};
use crate::search::Searcher;
use crate::selfplay::{
    evaluate_against, Actor, ActorPool, ActorPoolConfig, Evaluation, EvaluationRules, OpponentMove,
};
use crate::train::{Learner, TrainStats};

mod error;
mod naming;
mod rate;
mod schedule;

pub use error::TrainError;
pub use naming::planned_run_name;
use naming::run_name;
use rate::RateMeter;
pub use schedule::Schedule;

type Result<T, E = TrainError> = std::result::Result<T, E>;

/// How to run, besides the configuration.
#[derive(Clone, Default)]
pub struct RunOptions {
    /// Continue from this checkpoint (step or run directory).
    pub resume: Option<PathBuf>,
    /// Set to true (for example by Ctrl-C) to stop after the current step with a checkpoint.
    pub stop: Arc<AtomicBool>,
    /// Write no checkpoint at all (tests and benchmarks). Over several ranks it must be the
    /// same on every rank: at each checkpoint every rank sends its replay memory to rank 0,
    /// which alone writes.
    pub no_checkpoints: bool,
    /// Name of the run directory under `checkpoint_root_dir` (default: [`planned_run_name`]).
    pub run_name: Option<String>,
    /// Train together with the other ranks of this group (several processes); `None`: alone.
    pub collective: Option<Arc<dyn Collective>>,
}

/// What a finished run reports.
#[derive(Clone)]
pub struct RunSummary {
    /// The trained network (online parameters).
    pub network: MuZeroNetwork,
    pub counters: Counters,
    pub last_eval: Option<Evaluation>,
    /// The run's checkpoint directory (holds `latest`).
    pub run_dir: PathBuf,
    /// Why the run stopped.
    pub stop_reason: String,
    /// Mean return of the last (up to) 20 training episodes.
    pub recent_return: f64,
    /// Where this segment's time went.
    pub timing: Timing,
}

/// The training loop's state.
struct TrainingRun<'a> {
    config: &'a Config,
    env: EnvInfo,
    learner: Learner,
    replay: ReplayBuffer,
    counters: Counters,
    run_dir: PathBuf,
    sampler: StdRng,
    recent_returns: VecDeque<f64>,
    last_stats: Option<TrainStats>,
    last_eval: Option<Evaluation>,
    timing: Timing,
    /// Whether the replay memory budget has been reported as reached.
    budget_reached: bool,
    /// Search buffers of reanalyse, and the positions it has searched in this segment.
    reanalyse_searcher: Searcher,
    reanalysed: u64,
    /// Reanalyse runs one step ahead: the next training step's batch, sampled and reanalysed
    /// on a worker thread while the learner took the current step.
    reanalysed_next: Option<Batch>,
    /// The worker's own copy of the network reanalyse searches with, and the version of the
    /// learner's network it copies (see [`TrainingRun::reanalyse_model_version`]).
    reanalyse_model: Option<(MuZeroNetwork, usize)>,
    /// The other ranks, when there are any.
    collective: Option<Arc<dyn Collective>>,
}

/// Wall-clock seconds spent in each phase of this segment of the run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Timing {
    /// The learner's thread on self-play: the whole of it in the synchronous schedule; with
    /// actor threads, only the time it waited for their steps.
    pub self_play: f64,
    /// With actor threads: the seconds they spent on the steps the learner consumed, beside
    /// the learner's own work (0 in the synchronous schedule).
    pub actor_threads: f64,
    pub training: f64,
    pub evaluation: f64,
    /// Writing checkpoints, in total.
    pub checkpoints: f64,
    /// The last checkpoint save alone.
    pub last_save: f64,
    /// Over several ranks: the part of `training` spent averaging gradients over the ranks
    /// (host copies and the all-reduce, including waits for the slowest rank).
    pub rank_average: f64,
}

/// Train with `config` on `devices` (one model replica per device; at least one); scalars go
/// to `sink`.
pub fn train(
    config: &Config,
    devices: &[Device],
    options: &RunOptions,
    sink: &mut dyn MetricSink,
) -> Result<RunSummary> {
    if devices.is_empty() {
        return Err(TrainError::NoDevice);
    }
    // Process-wide, as the CLI sets it too: a library caller gets the configured kernels.
    crate::network::fused::set_fused_kernels(config.device.fused_kernels);
    if let Some(problem) = options
        .resume
        .as_deref()
        .and_then(checkpoint::latest_problem)
    {
        sink.log(&format!("warning: {problem}"));
    }
    let mut run = TrainingRun::start(config, devices, options)?;
    let result = run.main_loop(options, sink);
    if let Err(err) = &result {
        // Say what failed before anything is dropped: after a CUDA fault the destructors of
        // cudarc's handles (NCCL communicators, cuBLAS) panic, which would hide this error.
        sink.log(&format!(
            "training stopped on an error: {}",
            error_chain(err)
        ));
        // Keep what was learned before the failure; a failed save is reported too.
        if !options.no_checkpoints && run.counters.training_steps > 0 {
            match run.save_checkpoint_alone() {
                Ok(None) => {}
                Ok(Some(dir)) => sink.log(&format!(
                    "saved {} before stopping on that error",
                    dir.display()
                )),
                Err(save) => sink.log(&format!(
                    "could not save a checkpoint after that error: {}",
                    error_chain(&save)
                )),
            }
        }
        sink.flush();
    }
    let stop_reason = result?;
    if !options.no_checkpoints {
        run.save_checkpoint()?;
    }
    sink.flush();
    Ok(RunSummary {
        network: run.learner.network().clone(),
        counters: run.counters.clone(),
        last_eval: run.last_eval.clone(),
        run_dir: run.run_dir.clone(),
        stop_reason,
        recent_return: mean(&run.recent_returns),
        timing: run.timing,
    })
}

fn mean(values: &VecDeque<f64>) -> f64 {
    if values.is_empty() {
        0.0
    } else {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

impl<'a> TrainingRun<'a> {
    fn start(config: &'a Config, devices: &[Device], options: &RunOptions) -> Result<Self> {
        let device = &devices[0];
        let env = EnvInfo::of(config)?;
        let spec = components::network_spec(config, &env);
        let dtype = compute_dtype(config.data_types.model_dtype, device);
        let learner_config =
            components::learner_config(config, components::expected_training_steps(config));
        let collective = options.collective.clone().filter(|c| c.size() > 1);
        let (rank, ranks) = collective.as_ref().map_or((0, 1), |c| (c.rank(), c.size()));
        let (mut learner, replay, counters, run_dir) = match &options.resume {
            None => {
                let network = MuZeroNetwork::new(spec, config.other.seed, device, dtype)?;
                let learner = Learner::with_devices(network, learner_config, devices)?;
                let replay = ReplayBuffer::new(components::replay_config(config, &env));
                let name = options.run_name.clone().unwrap_or_else(|| run_name(config));
                let run_dir = PathBuf::from(&config.training.checkpoint_root_dir).join(name);
                (learner, replay, Counters::default(), run_dir)
            }
            Some(path) => {
                let ckpt = checkpoint::load(path, device).map_err(|source| TrainError::Resume {
                    path: path.clone(),
                    source,
                })?;
                let network = MuZeroNetwork::from_tensors(spec.clone(), ckpt.model, device, dtype)
                    .map_err(TrainError::CheckpointMismatch)?;
                let mut learner = Learner::with_devices(network, learner_config, devices)?;
                let target = MuZeroNetwork::from_tensors(spec, ckpt.target, device, dtype)?;
                learner.restore(&target, ckpt.optimizer, ckpt.metadata.optimizer_step)?;
                let mut replay =
                    resumed_replay(ckpt.replay, &ckpt.dir, &ckpt.metadata, (rank, ranks))?
                        .unwrap_or_else(|| {
                            ReplayBuffer::new(components::replay_config(config, &env))
                        });
                // Snapshots do not store the symmetries (they come from the environment), and a
                // resumed run may change its memory budget and off-policy correction.
                let fresh = components::replay_config(config, &env);
                replay.set_symmetries(fresh.symmetries);
                replay.set_max_bytes(fresh.max_bytes);
                replay.set_td_age_transitions(fresh.td_age_transitions);
                let mut run_dir = ckpt
                    .dir
                    .parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_else(|| PathBuf::from("."));
                // Resuming from the best checkpoint goes on in its run directory.
                if run_dir.file_name() == Some(checkpoint::BEST.as_ref()) {
                    run_dir.pop();
                }
                let mut counters = ckpt.metadata.counters;
                // The best checkpoint may be newer than the one resumed from: only an
                // evaluation at least as good replaces it.
                if let Ok((_, best)) = checkpoint::load_metadata(&run_dir.join(checkpoint::BEST)) {
                    counters.best_eval_return =
                        match (counters.best_eval_return, best.counters.best_eval_return) {
                            (Some(a), Some(b)) => Some(a.max(b)),
                            (a, b) => a.or(b),
                        };
                }
                (learner, replay, counters, run_dir)
            }
        };
        if let Some(c) = &collective {
            if !config.training.batch_size.is_multiple_of(c.size()) {
                return Err(TrainError::BatchOverRanks {
                    batch_size: config.training.batch_size,
                    ranks: c.size(),
                });
            }
            learner.set_collective(c.clone())?;
        }
        // Fresh random streams per segment, derived from the seed and the counters, so a
        // resumed run does not replay the exact samples of the first segment.
        let sampler = StdRng::seed_from_u64(
            rank_seed(config.other.seed, collective.as_deref())
                ^ (counters.training_steps.wrapping_mul(0x9e37_79b9)),
        );
        Ok(Self {
            config,
            env,
            learner,
            replay,
            counters,
            run_dir,
            sampler,
            recent_returns: VecDeque::new(),
            last_stats: None,
            last_eval: None,
            timing: Timing::default(),
            budget_reached: false,
            reanalyse_searcher: Searcher::new(),
            reanalysed: 0,
            reanalysed_next: None,
            reanalyse_model: None,
            collective,
        })
    }

    /// A checkpoint of the run. Over several ranks every rank calls this at the same point:
    /// each sends its replay memory to rank 0, which writes them all into the step directory
    /// (a shard per rank); the other ranks write nothing and get `None`.
    fn save_checkpoint(&mut self) -> Result<Option<PathBuf>> {
        let shards = match &self.collective {
            Some(c) => {
                // Rank 0's own memory is written directly, not sent to itself.
                let mine = if c.rank() == 0 {
                    Vec::new()
                } else {
                    self.replay.to_binary()?
                };
                let mut all = c.gather_bytes(&mine)?;
                if c.rank() != 0 {
                    return Ok(None);
                }
                all.remove(0);
                all
            }
            None => Vec::new(),
        };
        self.save_into(false, &shards).map(Some)
    }

    /// A checkpoint of this process alone (after an error, when the other ranks may not
    /// answer): rank 0 writes its own replay memory, the other ranks nothing.
    fn save_checkpoint_alone(&mut self) -> Result<Option<PathBuf>> {
        if self.rank() != 0 {
            return Ok(None);
        }
        self.save_into(false, &[]).map(Some)
    }

    /// The checkpoint of the best evaluation so far: `run_dir/best`, one step directory,
    /// without the replay buffer (for `eval` and `play`; resuming reads the run directory).
    fn save_best_checkpoint(&mut self) -> Result<PathBuf> {
        self.save_into(true, &[])
    }

    fn save_into(&mut self, best: bool, replay_shards: &[Vec<u8>]) -> Result<PathBuf> {
        let clock = Instant::now();
        let (optimizer, optimizer_step) = self.learner.optimizer().state()?;
        let data = CheckpointData {
            config: self.config,
            network: self.learner.network().spec(),
            counters: self.counters.clone(),
            model: self.learner.network().params().to_tensors()?,
            target: self.learner.target_network().params().to_tensors()?,
            optimizer,
            optimizer_step,
            replay: (!best).then_some(&self.replay),
            replay_shards,
        };
        let dir = if best {
            checkpoint::save_keeping(&self.run_dir.join(checkpoint::BEST), &data, 1)?
        } else {
            checkpoint::save(&self.run_dir, &data)?
        };
        self.timing.last_save = clock.elapsed().as_secs_f64();
        self.timing.checkpoints += self.timing.last_save;
        Ok(dir)
    }

    fn main_loop(&mut self, options: &RunOptions, sink: &mut dyn MetricSink) -> Result<String> {
        let config = self.config;
        let search = components::self_play_search_config(config, &self.env);
        let segment_start = Instant::now();
        let elapsed_before = self.counters.elapsed_seconds;
        // The run's clock: every earlier segment of a resumed run, and this one so far.
        let run_clock = || elapsed_before + segment_start.elapsed().as_secs_f64();
        let env_steps_before = self.counters.env_steps;
        let training_steps_before = self.counters.training_steps;
        if let Some(c) = &self.collective {
            sink.log(&format!(
                "{} ranks: gradients averaged {}",
                c.size(),
                if self.learner.nccl_spans_ranks() {
                    "by NCCL over every rank's GPUs"
                } else {
                    "on the host, through the ranks' all-reduce"
                }
            ));
        }
        let ranks = self.collective.as_ref().map_or(1, |c| c.size());
        let mut schedule =
            Schedule::new(config, &self.counters, self.replay.num_transitions(), ranks);
        let seed = rank_seed(config.other.seed, self.collective.as_deref())
            .wrapping_add(self.counters.env_steps.wrapping_mul(7919));
        let mut source = if config.self_play.num_actors == 0 {
            Source::Synchronous(Box::new(
                Actor::new(
                    &config.environment.spec(),
                    config.environment.num_envs,
                    seed,
                    config.self_play.game_segment_length,
                )?
                .with_random_opening(config.self_play.random_opening_plies)
                .with_segment_padding(components::segment_padding(config))
                .with_playout_cap(components::playout_cap(config))
                .with_cuda_graphs(config.device.cuda_graphs),
            ))
        } else {
            Source::Threads(ActorPool::spawn(
                self.learner.network(),
                &ActorPoolConfig {
                    env: config.environment.spec(),
                    num_actors: config.self_play.num_actors,
                    num_envs: config.environment.num_envs,
                    seed,
                    segment_length: config.self_play.game_segment_length,
                    random_opening_plies: config.self_play.random_opening_plies,
                    segment_padding: components::segment_padding(config),
                    playout_cap: components::playout_cap(config),
                    search: search.clone(),
                },
                config.temperature_at(schedule.progress(&self.counters)) as f32,
                // Alone, a stop abandons the actors' searches; over several ranks every rank
                // takes its step whole (the ranks must call the same exchanges).
                if self.collective.is_none() {
                    options.stop.clone()
                } else {
                    Arc::new(AtomicBool::new(false))
                },
            )?)
        };
        let mut rate = RateMeter::new(&self.counters);
        // Over several ranks, rank 0's evaluation stops the run at the next agreement.
        let mut evaluation_stop: Option<String> = None;

        let reason = loop {
            // For `max_seconds`.
            self.counters.elapsed_seconds = run_clock();
            let mut stop = if options.stop.load(Ordering::SeqCst) {
                Some((StopKind::Interrupted, "interrupted".to_string()))
            } else if let Some(reason) = schedule.budget_spent(&self.counters) {
                Some((StopKind::Budget, reason))
            } else {
                evaluation_stop
                    .take()
                    .map(|reason| (StopKind::Evaluation, reason))
            };
            if let Some(c) = &self.collective {
                stop = agree_on_stop(c.as_ref(), stop)?;
            }
            if let Some((_, reason)) = stop {
                break reason;
            }
            let temperature = config.temperature_at(schedule.progress(&self.counters)) as f32;
            let clock = Instant::now();
            let step = match &mut source {
                // Alone, a stop request abandons the step's search (the loop's top then stops);
                // over several ranks every rank takes the step, and the next agreement stops.
                Source::Synchronous(actor) if self.collective.is_none() => {
                    let network = self.learner.network();
                    match actor.step_unless(network, &search, temperature, &options.stop)? {
                        Some(step) => step,
                        None => continue,
                    }
                }
                Source::Synchronous(actor) => {
                    actor.step(self.learner.network(), &search, temperature)?
                }
                Source::Threads(pool) => match pool.next_step()? {
                    Some(step) => step,
                    None => continue,
                },
            };
            self.timing.self_play += clock.elapsed().as_secs_f64();
            self.timing.actor_threads += step.seconds;
            // The counters hold every rank's steps and episodes, so budgets, evaluation
            // intervals and the logged x axis mean the same at any rank count.
            let (mut steps, mut episodes) = (step.env_steps, step.finished_episodes.len());
            if let Some(c) = &self.collective {
                // Per iteration a few hundred at most: exact in f32.
                let mut both = [steps as f32, episodes as f32];
                c.sum_f32(&mut both)?;
                (steps, episodes) = (both[0] as usize, both[1] as usize);
            }
            let own_episodes = step.finished_episodes.len() as u64;
            self.counters.env_steps += steps as u64;
            self.record_step(step, temperature, sink)?;
            self.counters.episodes = self.counters.episodes - own_episodes + episodes as u64;

            let mut due = schedule.after_actor_step(&self.counters, self.replay.num_transitions());
            if let Some(c) = &self.collective {
                // Every rank takes as many steps as the rank that owes the fewest.
                let mut agreed = [due as i64];
                c.min_i64(&mut agreed)?;
                due = agreed[0].max(0) as u64;
            }
            for _ in 0..due {
                // A stop request ends the burst (alone: over several ranks every rank must
                // take the same steps, and the next agreement stops them all).
                if self.collective.is_none() && options.stop.load(Ordering::SeqCst) {
                    break;
                }
                let clock = Instant::now();
                self.train_once(sink)?;
                self.timing.training += clock.elapsed().as_secs_f64();
                if schedule.checkpoint_due(self.counters.training_steps) && !options.no_checkpoints
                {
                    self.counters.elapsed_seconds = run_clock();
                    self.save_checkpoint()?;
                }
            }

            if let Source::Threads(pool) = &mut source {
                // One version per consumed step, so the actors' schedule is fixed by the seed.
                pool.publish(
                    self.learner.network(),
                    self.counters.training_steps,
                    config.temperature_at(schedule.progress(&self.counters)) as f32,
                )?;
            }

            if schedule.eval_due(self.counters.env_steps) && self.rank() == 0 {
                let elapsed = run_clock();
                // `None`: a stop request abandoned the evaluation; the loop's top stops.
                if let Some(improved) = self.evaluate(elapsed, &options.stop, sink)? {
                    if improved && !options.no_checkpoints {
                        self.counters.elapsed_seconds = elapsed;
                        self.save_best_checkpoint()?;
                    }
                    if let Some(reason) = self.evaluation_stop(&options.stop, sink)? {
                        if self.collective.is_none() {
                            break reason;
                        }
                        evaluation_stop = Some(reason);
                    }
                }
            }

            if let Some(progress) = rate.tick(&self.counters) {
                sink.scalar(
                    "throughput/env_steps_per_second",
                    progress.env_steps_per_second,
                    self.counters.env_steps,
                );
                sink.scalar(
                    "throughput/training_steps_per_second",
                    progress.training_steps_per_second,
                    self.counters.env_steps,
                );
                sink.scalar(
                    "replay/transitions",
                    self.replay.num_transitions() as f64,
                    self.counters.env_steps,
                );
                sink.scalar(
                    "replay/bytes",
                    self.replay.bytes() as f64,
                    self.counters.env_steps,
                );
                // The x axes of `cumind plot`: training steps and wall time per env step.
                sink.scalar(
                    "progress/training_steps",
                    self.counters.training_steps as f64,
                    self.counters.env_steps,
                );
                sink.scalar(
                    "progress/elapsed_seconds",
                    run_clock(),
                    self.counters.env_steps,
                );
                sink.progress(&Progress {
                    max_env_steps: config.training.max_env_steps as u64,
                    episodes: self.counters.episodes,
                    recent_return: mean(&self.recent_returns),
                    loss: self.last_stats.as_ref().map_or(f32::NAN, |s| s.total_loss),
                    ..progress
                });
            }
        };
        self.counters.elapsed_seconds = run_clock();
        let (hits, lookups) = self.learner.target_value_counts();
        if lookups > 0 {
            sink.log(&format!(
                "target network values: {hits} of {lookups} bootstrap observations ({:.1}%) \
                 answered from the values kept for the current target",
                100.0 * hits as f64 / lookups as f64
            ));
        }
        if let Some(c) = &self.collective {
            let difference = self.learner.max_difference_from_rank_0()?;
            if difference != 0.0 {
                return Err(TrainError::RanksDiverged(difference));
            }
            // The counters add up every rank's environment steps.
            let all_ranks = self.counters.env_steps - env_steps_before;
            sink.log(&format!(
                "{} ranks hold identical parameters after {} training steps ({} environment \
                 steps over all ranks, {} per rank, since this process started)",
                c.size(),
                self.counters.training_steps,
                all_ranks,
                all_ranks / c.size() as u64
            ));
            self.timing.rank_average = self.learner.rank_average_seconds();
            let steps = (self.counters.training_steps - training_steps_before).max(1) as f64;
            sink.log(&format!(
                "rank {}: averaging gradients over the ranks took {:.2} ms of the {:.2} ms per \
                 training step",
                c.rank(),
                1e3 * self.timing.rank_average / steps,
                1e3 * self.timing.training / steps
            ));
        }
        Ok(reason)
    }

    /// This process's rank (0 when training alone).
    fn rank(&self) -> usize {
        self.collective.as_ref().map_or(0, |c| c.rank())
    }

    /// Store an actor step's finished games and report its episodes and search statistics.
    fn record_step(
        &mut self,
        step: crate::selfplay::ActorStep,
        temperature: f32,
        sink: &mut dyn MetricSink,
    ) -> Result<()> {
        for game in step.finished_games {
            self.replay.save_game(game)?;
        }
        let budget = self.replay.config().max_bytes;
        if budget > 0 && !self.budget_reached && self.replay.bytes() as f64 >= 0.95 * budget as f64
        {
            self.budget_reached = true;
            sink.log(&format!(
                "replay memory budget reached: {:.1} MB of {:.1} MB in {} transitions; the oldest games are evicted from now on",
                self.replay.bytes() as f64 / 1e6,
                budget as f64 / 1e6,
                self.replay.num_transitions()
            ));
        }
        let at = self.counters.env_steps;
        for episode in &step.finished_episodes {
            self.counters.episodes += 1;
            self.recent_returns.push_back(episode.episode_return);
            if self.recent_returns.len() > 20 {
                self.recent_returns.pop_front();
            }
            sink.scalar("episode/return", episode.episode_return, at);
            sink.scalar("episode/length", episode.length as f64, at);
        }
        sink.scalar("search/root_value", step.search.mean_root_value as f64, at);
        sink.scalar("search/max_depth", step.search.max_depth as f64, at);
        sink.scalar("search/temperature", temperature as f64, at);
        Ok(())
    }

    /// `episodes` greedy episodes of the learner's network, their starting states seeded by
    /// the run's seed plus `seed_offset` plus the environment steps so far; the time goes to
    /// the evaluation timer.
    fn play_greedy(
        &mut self,
        episodes: usize,
        seed_offset: u64,
        stop: &AtomicBool,
    ) -> Result<Option<Evaluation>> {
        let config = self.config;
        let clock = Instant::now();
        let t = &config.training;
        // Validated with the configuration.
        let spec: OpponentSpec = t.eval_opponent.parse()?;
        let mut opponent = match (self.env.num_players > 1, &spec) {
            (true, OpponentSpec::Random) | (false, _) => None,
            (true, spec) => Some(Opponent::new(spec, &candle_core::Device::Cpu)?),
        };
        let mut choose = opponent.as_mut().map(|opponent| {
            move |env: &dyn cumind_envs::Environment,
                  observation: &[f32],
                  rng: &mut rand::rngs::StdRng| {
                opponent
                    .choose(env, observation, rng)
                    .map_err(|e| crate::error_chain::error_chain(&e))
            }
        });
        let rules = EvaluationRules {
            opening_plies: t.eval_opening_plies,
            opponent: choose.as_mut().map(|c| c as &mut OpponentMove<'_>),
        };
        let eval = evaluate_against(
            self.learner.network(),
            &config.environment.spec(),
            episodes,
            &components::training_evaluation_search_config(config, &self.env),
            config
                .other
                .seed
                .wrapping_add(seed_offset)
                .wrapping_add(self.counters.env_steps),
            stop,
            rules,
        )?;
        self.timing.evaluation += clock.elapsed().as_secs_f64();
        Ok(eval)
    }

    /// A greedy evaluation; returns whether its mean return equals or beats every earlier
    /// evaluation of the run (the first one does), or `None` when `stop` abandoned it.
    fn evaluate(
        &mut self,
        elapsed: f64,
        stop: &AtomicBool,
        sink: &mut dyn MetricSink,
    ) -> Result<Option<bool>> {
        let Some(eval) = self.play_greedy(self.config.training.eval_episodes, 1_000_003, stop)?
        else {
            return Ok(None);
        };
        let at = self.counters.env_steps;
        let mean_return = eval.mean_return();
        sink.scalar("eval/mean_return", mean_return, at);
        sink.scalar("eval/std_return", eval.std_return(), at);
        sink.scalar("eval/mean_length", eval.mean_length(), at);
        sink.scalar("progress/elapsed_seconds", elapsed, at);
        sink.scalar(
            "progress/training_steps",
            self.counters.training_steps as f64,
            at,
        );
        // An evaluation as good as the best so far replaces it too: of equal scores the newer
        // network has trained longer, and at a capped return (CartPole's 500) the first of two
        // perfect evaluations is often one that a stop's confirmation then failed.
        let improved = self
            .counters
            .best_eval_return
            .is_none_or(|b| mean_return >= b);
        if improved {
            self.counters.best_eval_return = Some(mean_return);
        }
        sink.log(&format!(
            "eval @ {} env steps, {} training steps, {:.0}s: mean return {:.1} +- {:.1} over {} episodes",
            at,
            self.counters.training_steps,
            elapsed,
            mean_return,
            eval.std_return(),
            eval.returns.len()
        ));
        if self.env.num_players > 1 {
            // Outcomes per side: the agent moves first in the even episodes.
            let mut sides = Vec::new();
            for (side, first) in [("first", 0), ("second", 1)] {
                let outcomes: Vec<f64> = eval
                    .returns
                    .iter()
                    .skip(first)
                    .step_by(2)
                    .copied()
                    .collect();
                let n = outcomes.len().max(1) as f64;
                let count = |f: &dyn Fn(f64) -> bool| outcomes.iter().filter(|&&r| f(r)).count();
                let (w, d, l) = (
                    count(&|r| r > 0.5),
                    count(&|r| r.abs() <= 0.5),
                    count(&|r| r < -0.5),
                );
                sink.scalar(&format!("eval/{side}/win_rate"), w as f64 / n, at);
                sink.scalar(&format!("eval/{side}/draw_rate"), d as f64 / n, at);
                sink.scalar(&format!("eval/{side}/loss_rate"), l as f64 / n, at);
                sides.push(format!("as {side} {w}-{d}-{l}"));
            }
            sink.log(&format!(
                "  against {} (wins-draws-losses): {}",
                self.config.training.eval_opponent,
                sides.join(", ")
            ));
        }
        self.last_eval = Some(eval);
        Ok(Some(improved))
    }

    /// The stop reason when the last evaluation reached `stop_return` (and, with
    /// `stop_confirm_episodes`, a confirming evaluation from other starting states did too).
    fn evaluation_stop(
        &mut self,
        stop_request: &AtomicBool,
        sink: &mut dyn MetricSink,
    ) -> Result<Option<String>> {
        let config = self.config;
        let stop = config.training.stop_return;
        let Some(mean_return) = self.last_eval.as_ref().map(|e| e.mean_return()) else {
            return Ok(None);
        };
        if stop == 0.0 || mean_return < stop {
            return Ok(None);
        }
        let reached =
            format!("evaluation mean return {mean_return:.1} reached stop_return = {stop}");
        let episodes = config.training.stop_confirm_episodes;
        if episodes == 0 {
            return Ok(Some(reached));
        }
        // Starting states of their own: not those of any regular evaluation.
        let Some(confirm) = self.play_greedy(episodes, 7_777_777, stop_request)? else {
            return Ok(None);
        };
        let at = self.counters.env_steps;
        let confirmed = confirm.mean_return();
        let passed = confirmed >= stop;
        sink.scalar("eval/confirm_mean_return", confirmed, at);
        let verdict = if passed {
            "confirmed"
        } else {
            "not confirmed, training on"
        };
        sink.log(&format!(
            "confirm @ {at} env steps: mean return {confirmed:.1} +- {:.1} over {episodes} more episodes ({verdict})",
            confirm.std_return()
        ));
        Ok(passed.then(|| {
            format!("{reached}, confirmed by {confirmed:.1} over {episodes} more episodes")
        }))
    }

    /// Which version of the learner's network reanalyse searches with: the target network
    /// changes every `target_update_frequency` steps, the latest parameters every step.
    fn reanalyse_model_version(&self) -> usize {
        let steps = self.learner.steps();
        match self.config.training.reanalyse_network {
            ReanalyseNetwork::TargetNetwork => {
                steps / self.config.training.target_update_frequency.max(1)
            }
            ReanalyseNetwork::Latest => steps,
        }
    }

    /// Bring the reanalyse worker's copy of the network up to the learner's (a copy only when
    /// the version changed).
    fn refresh_reanalyse_model(&mut self) -> Result<()> {
        let version = self.reanalyse_model_version();
        if self.reanalyse_model.as_ref().map(|(_, v)| *v) != Some(version) {
            let source = match self.config.training.reanalyse_network {
                ReanalyseNetwork::TargetNetwork => self.learner.target_network(),
                ReanalyseNetwork::Latest => self.learner.network(),
            };
            self.reanalyse_model = Some((source.deep_copy(source.device())?, version));
        }
        Ok(())
    }

    /// One training step. With reanalyse, the batch of the next step is sampled and
    /// reanalysed on a worker thread while the learner trains on this one (off the learner's
    /// critical path), so it is sampled before this step's priorities are written and
    /// searched with the network as it was before this step. The first step of a run segment
    /// reanalyses its own batch first.
    fn train_once(&mut self, sink: &mut dyn MetricSink) -> Result<()> {
        let ranks = self.collective.as_ref().map_or(1, |c| c.size());
        let batch_size = self.config.training.batch_size / ranks;
        let t = &self.config.training;
        let (batch, stats) = if t.reanalyse_fraction > 0.0 {
            let mut search = components::self_play_search_config(self.config, &self.env);
            if t.reanalyse_simulations > 0 {
                search.num_simulations = t.reanalyse_simulations;
            }
            let fraction = t.reanalyse_fraction;
            let write_back = t.reanalyse_write_back;
            self.refresh_reanalyse_model()?;
            let Self {
                replay,
                sampler,
                reanalyse_searcher,
                reanalyse_model,
                reanalysed_next,
                reanalysed,
                learner,
                ..
            } = self;
            let network = &reanalyse_model.as_ref().expect("refreshed above").0;
            let mut prepare = |replay: &ReplayBuffer| -> Result<(Batch, Vec<usize>)> {
                let mut batch = replay.sample(batch_size, sampler)?;
                let searched = reanalyse_policies(
                    &mut batch,
                    &mut SearchModel::new(network),
                    &search,
                    fraction,
                    reanalyse_searcher,
                    sampler,
                )?;
                Ok((batch, searched))
            };
            // With `reanalyse_write_back` the searched targets also replace the stored ones,
            // once the worker no longer reads the memory.
            let mut keep = |replay: &mut ReplayBuffer, batch: &Batch, searched: &[usize]| {
                *reanalysed += searched.len() as u64;
                if write_back {
                    replay.write_back_policies(batch, searched);
                }
            };
            let batch = match reanalysed_next.take() {
                Some(batch) => batch,
                None => {
                    let (batch, searched) = prepare(replay)?;
                    keep(replay, &batch, &searched);
                    batch
                }
            };
            let (stats, next) = std::thread::scope(|scope| {
                let worker = scope.spawn(|| prepare(replay));
                let stats = learner.train_step(&batch);
                let next = worker
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                (stats, next)
            });
            let stats = stats?;
            let (next, searched) = next?;
            keep(replay, &next, &searched);
            *reanalysed_next = Some(next);
            (batch, stats)
        } else {
            let batch = self.replay.sample(batch_size, &mut self.sampler)?;
            let stats = self.learner.train_step(&batch)?;
            (batch, stats)
        };
        self.replay
            .update_priorities(&batch.ids, &stats.priorities)?;
        self.counters.training_steps += 1;
        let step = self.counters.training_steps;
        if step.is_multiple_of(10) {
            sink.scalar("loss/total", stats.total_loss as f64, step);
            sink.scalar("loss/value", stats.value_loss as f64, step);
            sink.scalar("loss/reward", stats.reward_loss as f64, step);
            sink.scalar("loss/policy", stats.policy_loss as f64, step);
            if self.config.training.consistency_loss_weight > 0.0 {
                sink.scalar("loss/consistency", stats.consistency_loss as f64, step);
            }
            sink.scalar("train/grad_norm", stats.grad_norm, step);
            sink.scalar("train/learning_rate", stats.learning_rate, step);
            if self.config.training.reanalyse_fraction > 0.0 {
                sink.scalar("reanalyse/positions", self.reanalysed as f64, step);
            }
        }
        self.last_stats = Some(stats);
        Ok(())
    }
}

/// Why the ranks stop, in increasing precedence when they disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum StopKind {
    Budget = 1,
    Evaluation = 2,
    Interrupted = 3,
}

impl StopKind {
    fn from_code(code: i64) -> Option<Self> {
        match code {
            1 => Some(Self::Budget),
            2 => Some(Self::Evaluation),
            3 => Some(Self::Interrupted),
            _ => None,
        }
    }
}

/// The stop every rank agrees on: the most pressing of the ranks' reasons (this rank's own
/// words when it had that reason, a description of another rank's otherwise).
fn agree_on_stop(
    collective: &dyn Collective,
    mine: Option<(StopKind, String)>,
) -> Result<Option<(StopKind, String)>> {
    let mut code = [mine.as_ref().map_or(0, |(kind, _)| *kind as i64)];
    collective.max_i64(&mut code)?;
    let Some(kind) = StopKind::from_code(code[0]) else {
        return Ok(None);
    };
    Ok(Some(match mine {
        Some((k, reason)) if k == kind => (k, reason),
        _ => (
            kind,
            match kind {
                StopKind::Budget => "another rank spent its budget",
                StopKind::Evaluation => "rank 0's evaluation reached stop_return",
                StopKind::Interrupted => "another rank was interrupted",
            }
            .to_string(),
        ),
    }))
}

/// The replay memory rank `rank` of `ranks` resumes with from a checkpoint holding `S` ranks'
/// shards (`first` is shard 0, read with the checkpoint): shards `rank`, `rank + ranks`,
/// `rank + 2 ranks`, ... below `S`, merged in that order (the later shards' games enter as
/// new games, with fresh priorities), so every saved game goes to exactly one rank at any rank
/// count; `None` when no shard falls to this rank (more ranks than shards: it starts empty).
fn resumed_replay(
    first: Option<ReplayBuffer>,
    dir: &Path,
    metadata: &checkpoint::Metadata,
    (rank, ranks): (usize, usize),
) -> Result<Option<ReplayBuffer>> {
    let shards = checkpoint::replay_shards(metadata);
    let mut mine = (rank..shards).step_by(ranks.max(1));
    let Some(start) = mine.next() else {
        return Ok(None);
    };
    let mut replay = if start == 0 {
        match first {
            Some(replay) => replay,
            None => return Ok(None),
        }
    } else {
        checkpoint::load_replay_shard(dir, metadata, start)?
    };
    for shard in mine {
        let more = checkpoint::load_replay_shard(dir, metadata, shard)?;
        for (_, game) in more.games() {
            replay.save_game(game.clone())?;
        }
    }
    Ok(Some(replay))
}

/// The seed of a rank's own random streams (self-play, sampling): `seed` itself on rank 0 and
/// when training alone, so a one-process run is unchanged.
fn rank_seed(seed: u64, collective: Option<&dyn Collective>) -> u64 {
    let rank = collective.map_or(0, |c| c.rank()) as u64;
    seed.wrapping_add(rank.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// Where experience comes from: an actor stepped in turn with the learner (deterministic), or
/// actor threads running beside it.
enum Source {
    Synchronous(Box<Actor>),
    Threads(ActorPool),
}
