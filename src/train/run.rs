//! A training run: self-play, replay, learner, evaluation, metrics and checkpoints.
//!
//! Synchronous schedule (the default, deterministic on the CPU for a given seed): the actor
//! steps every environment once, finished games enter the replay buffer, then the learner takes
//! as many training steps as the replay ratio (`train_ratio` training steps per environment
//! step, counted from the moment the buffer first holds enough data) allows.
//!
//! With actor threads (`num_actors > 0`) the loop is the same, but each actor step comes from
//! an [`ActorPool`] in a fixed round-robin order and the learner publishes its weights after
//! every step it consumes (see [`ActorPool`] for the schedule); a run is then reproducible for
//! a seed too, however the threads are scheduled.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use candle_core::Device;
use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::checkpoint::{self, CheckpointData, Counters};
use crate::components::{self, EnvInfo};
use crate::config::Config;
use crate::metrics::MetricSink;
use crate::network::{compute_dtype, MuZeroNetwork};
use crate::replay::ReplayBuffer;
use crate::selfplay::{evaluate, Actor, ActorPool, Evaluation};
use crate::train::{Learner, TrainStats};

/// How to run, besides the configuration.
#[derive(Clone, Default)]
pub struct RunOptions {
    /// Continue from this checkpoint (step or run directory).
    pub resume: Option<PathBuf>,
    /// Show an indicatif progress bar.
    pub progress: bool,
    /// Set to true (for example by Ctrl-C) to stop after the current step with a checkpoint.
    pub stop: Arc<AtomicBool>,
    /// Write no checkpoint at all (tests and benchmarks).
    pub no_checkpoints: bool,
    /// Name of the run directory under `checkpoint_root_dir` (default: [`planned_run_name`]).
    pub run_name: Option<String>,
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
struct Run<'a> {
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
}

/// Wall-clock seconds spent in each phase of this segment of the run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Timing {
    pub self_play: f64,
    pub training: f64,
    pub evaluation: f64,
}

/// The run's name: the resumed run's directory name, else `other.run_name`, else the
/// environment name and the current Unix time.
pub fn planned_run_name(config: &Config, resume: Option<&Path>) -> Result<String> {
    if let Some(path) = resume {
        let dir = checkpoint::resolve(path)?;
        let run = dir
            .parent()
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().to_string());
        return Ok(run.unwrap_or_else(|| run_name(config)));
    }
    Ok(run_name(config))
}

fn run_name(config: &Config) -> String {
    if !config.other.run_name.is_empty() {
        return config.other.run_name.clone();
    }
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!("{}-{secs}", config.environment.env_name)
}

/// Train with `config` on `devices` (one model replica per device; at least one); scalars go
/// to `sink`.
pub fn train(
    config: &Config,
    devices: &[Device],
    options: &RunOptions,
    sink: &mut dyn MetricSink,
) -> Result<RunSummary> {
    anyhow::ensure!(!devices.is_empty(), "training needs at least one device");
    let mut run = Run::start(config, devices, options)?;
    let result = run.main_loop(options, sink);
    if let Err(err) = &result {
        // Keep what was learned before the failure.
        if !options.no_checkpoints && run.counters.training_steps > 0 {
            let _ = run.save_checkpoint();
        }
        return Err(anyhow::anyhow!("{err:#}"));
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

impl<'a> Run<'a> {
    fn start(config: &'a Config, devices: &[Device], options: &RunOptions) -> Result<Self> {
        let device = &devices[0];
        let env = EnvInfo::of(config)?;
        let spec = components::network_spec(config, &env);
        let dtype = compute_dtype(&config.data_types.model_dtype, device);
        let learner_config =
            components::learner_config(config, components::expected_training_steps(config));
        let (learner, replay, counters, run_dir) = match &options.resume {
            None => {
                let network = MuZeroNetwork::new(spec, config.other.seed, device, dtype)?;
                let learner = Learner::with_devices(network, learner_config, devices)?;
                let replay = ReplayBuffer::new(components::replay_config(config, &env));
                let name = options.run_name.clone().unwrap_or_else(|| run_name(config));
                let run_dir = PathBuf::from(&config.training.checkpoint_root_dir).join(name);
                (learner, replay, Counters::default(), run_dir)
            }
            Some(path) => {
                let ckpt = checkpoint::load(path, device)
                    .with_context(|| format!("cannot resume from {}", path.display()))?;
                let network = MuZeroNetwork::from_tensors(spec.clone(), ckpt.model, device, dtype)
                    .context("checkpoint weights do not fit the configured network")?;
                let mut learner = Learner::with_devices(network, learner_config, devices)?;
                let target = MuZeroNetwork::from_tensors(spec, ckpt.target, device, dtype)?;
                learner.restore(&target, ckpt.optimizer, ckpt.metadata.optimizer_step)?;
                let replay = ckpt
                    .replay
                    .unwrap_or_else(|| ReplayBuffer::new(components::replay_config(config, &env)));
                let run_dir = ckpt
                    .dir
                    .parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_else(|| PathBuf::from("."));
                (learner, replay, ckpt.metadata.counters, run_dir)
            }
        };
        // Fresh random streams per segment, derived from the seed and the counters, so a
        // resumed run does not replay the exact samples of the first segment.
        let sampler = StdRng::seed_from_u64(
            config.other.seed ^ (counters.training_steps.wrapping_mul(0x9e37_79b9)),
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
        })
    }

    fn save_checkpoint(&self) -> Result<PathBuf> {
        let (optimizer, optimizer_step) = self.learner.optimizer().state();
        let data = CheckpointData {
            config: self.config,
            network: self.learner.network().spec(),
            counters: self.counters.clone(),
            model: self.learner.network().params().to_tensors()?,
            target: self.learner.target_network().params().to_tensors()?,
            optimizer,
            optimizer_step,
            replay: Some(&self.replay),
        };
        Ok(checkpoint::save(&self.run_dir, &data)?)
    }

    fn progress(&self) -> f64 {
        let t = &self.config.training;
        let mut p: f64 = 0.0;
        if t.max_env_steps > 0 {
            p = p.max(self.counters.env_steps as f64 / t.max_env_steps as f64);
        }
        if t.max_training_steps > 0 {
            p = p.max(self.counters.training_steps as f64 / t.max_training_steps as f64);
        }
        if t.num_episodes > 0 {
            p = p.max(self.counters.episodes as f64 / t.num_episodes as f64);
        }
        p.min(1.0)
    }

    fn budget_spent(&self) -> Option<String> {
        let t = &self.config.training;
        let c = &self.counters;
        if t.max_env_steps > 0 && c.env_steps >= t.max_env_steps as u64 {
            return Some(format!("reached max_env_steps = {}", t.max_env_steps));
        }
        if t.max_training_steps > 0 && c.training_steps >= t.max_training_steps as u64 {
            return Some(format!(
                "reached max_training_steps = {}",
                t.max_training_steps
            ));
        }
        if t.num_episodes > 0 && c.episodes >= t.num_episodes as u64 {
            return Some(format!("reached num_episodes = {}", t.num_episodes));
        }
        None
    }

    fn main_loop(&mut self, options: &RunOptions, sink: &mut dyn MetricSink) -> Result<String> {
        let config = self.config;
        let search = components::search_config(config, &self.env);
        let eval_search = search.clone();
        let segment_start = Instant::now();
        let elapsed_before = self.counters.elapsed_seconds;
        let seed = config
            .other
            .seed
            .wrapping_add(self.counters.env_steps.wrapping_mul(7919));
        let mut source = if config.self_play.num_actors == 0 {
            Source::Synchronous(Box::new(Actor::new(
                &config.environment.env_name,
                config.environment.num_envs,
                seed,
                config.self_play.game_segment_length,
            )?))
        } else {
            let pool = ActorPool::spawn(
                self.learner.network(),
                &config.environment.env_name,
                config.self_play.num_actors,
                config.environment.num_envs,
                seed,
                config.self_play.game_segment_length,
                &search,
                config.temperature_at(self.progress()) as f32,
            )?;
            Source::Threads(pool)
        };
        // Actor steps since the last learner phase (phases come every `train_frequency`).
        let mut actor_steps_since_training = 0usize;
        let min_replay = config.min_replay_transitions();
        let ratio = config.training.train_ratio;
        // Env steps at which training became possible (replay warm); counts the ratio from there.
        let mut warm_at: Option<u64> =
            (self.replay.num_transitions() >= min_replay).then_some(self.counters.env_steps);
        let trained_at_warm = self.counters.training_steps;
        let mut next_eval = next_multiple(
            self.counters.env_steps,
            config.training.eval_interval as u64,
        );
        let mut next_checkpoint = next_multiple(
            self.counters.training_steps,
            config.training.checkpoint_interval as u64,
        );
        let bar = progress_bar(options.progress, config);
        let mut last_log = Instant::now();
        let mut env_steps_at_log = self.counters.env_steps;
        let mut train_steps_at_log = self.counters.training_steps;

        let reason = loop {
            if options.stop.load(Ordering::SeqCst) {
                break "interrupted".to_string();
            }
            if let Some(reason) = self.budget_spent() {
                break reason;
            }
            let temperature = config.temperature_at(self.progress()) as f32;
            let clock = Instant::now();
            let step = match &mut source {
                Source::Synchronous(actor) => {
                    actor.step(self.learner.network(), &search, temperature)?
                }
                Source::Threads(pool) => pool.next_step()?,
            };
            self.timing.self_play += clock.elapsed().as_secs_f64();
            self.counters.env_steps += step.env_steps as u64;
            for game in step.finished_games {
                self.replay.save_game(game)?;
            }
            for episode in &step.finished_episodes {
                self.counters.episodes += 1;
                self.recent_returns.push_back(episode.episode_return);
                if self.recent_returns.len() > 20 {
                    self.recent_returns.pop_front();
                }
                sink.scalar(
                    "episode/return",
                    episode.episode_return,
                    self.counters.env_steps,
                );
                sink.scalar(
                    "episode/length",
                    episode.length as f64,
                    self.counters.env_steps,
                );
            }
            sink.scalar(
                "search/root_value",
                step.search.mean_root_value as f64,
                self.counters.env_steps,
            );
            sink.scalar(
                "search/max_depth",
                step.search.max_depth as f64,
                self.counters.env_steps,
            );
            sink.scalar(
                "search/temperature",
                temperature as f64,
                self.counters.env_steps,
            );

            if warm_at.is_none() && self.replay.num_transitions() >= min_replay {
                warm_at = Some(self.counters.env_steps);
            }
            actor_steps_since_training += 1;
            let phase_due = actor_steps_since_training >= config.training.train_frequency;
            if let (Some(warm), true) = (warm_at, phase_due) {
                actor_steps_since_training = 0;
                let owed = trained_at_warm
                    + ((self.counters.env_steps - warm) as f64 * ratio).ceil() as u64;
                while self.counters.training_steps < owed {
                    let clock = Instant::now();
                    self.train_once(sink)?;
                    self.timing.training += clock.elapsed().as_secs_f64();
                    if self.counters.training_steps >= next_checkpoint && !options.no_checkpoints {
                        self.counters.elapsed_seconds =
                            elapsed_before + segment_start.elapsed().as_secs_f64();
                        self.save_checkpoint()?;
                        next_checkpoint += config.training.checkpoint_interval as u64;
                    }
                    if config.training.max_training_steps > 0
                        && self.counters.training_steps >= config.training.max_training_steps as u64
                    {
                        break;
                    }
                }
            }

            if let Source::Threads(pool) = &mut source {
                // One version per consumed step, so the actors' schedule is fixed by the seed.
                pool.publish(
                    self.learner.network(),
                    self.counters.training_steps,
                    config.temperature_at(self.progress()) as f32,
                )?;
            }

            if config.training.eval_interval > 0 && self.counters.env_steps >= next_eval {
                next_eval += config.training.eval_interval as u64;
                let clock = Instant::now();
                let eval = evaluate(
                    self.learner.network(),
                    &config.environment.env_name,
                    config.training.eval_episodes,
                    &eval_search,
                    config
                        .other
                        .seed
                        .wrapping_add(1_000_003)
                        .wrapping_add(self.counters.env_steps),
                )?;
                self.timing.evaluation += clock.elapsed().as_secs_f64();
                let mean_return = eval.mean_return();
                sink.scalar("eval/mean_return", mean_return, self.counters.env_steps);
                sink.scalar(
                    "eval/std_return",
                    eval.std_return(),
                    self.counters.env_steps,
                );
                sink.scalar(
                    "eval/mean_length",
                    eval.mean_length(),
                    self.counters.env_steps,
                );
                let best = self
                    .counters
                    .best_eval_return
                    .map_or(mean_return, |b| b.max(mean_return));
                self.counters.best_eval_return = Some(best);
                let line = format!(
                    "eval @ {} env steps, {} training steps, {:.0}s: mean return {:.1} +- {:.1} over {} episodes",
                    self.counters.env_steps,
                    self.counters.training_steps,
                    elapsed_before + segment_start.elapsed().as_secs_f64(),
                    mean_return,
                    eval.std_return(),
                    eval.returns.len()
                );
                match &bar {
                    // A hidden bar (not a terminal) would swallow the line.
                    Some(b) if !b.is_hidden() => b.println(line),
                    _ => eprintln!("{line}"),
                }
                self.last_eval = Some(eval);
                if config.training.stop_return != 0.0 && mean_return >= config.training.stop_return
                {
                    break format!(
                        "evaluation mean return {mean_return:.1} reached stop_return = {}",
                        config.training.stop_return
                    );
                }
            }

            let since = last_log.elapsed().as_secs_f64();
            if since >= 1.0 {
                let env_rate = (self.counters.env_steps - env_steps_at_log) as f64 / since;
                let train_rate = (self.counters.training_steps - train_steps_at_log) as f64 / since;
                sink.scalar(
                    "throughput/env_steps_per_second",
                    env_rate,
                    self.counters.env_steps,
                );
                sink.scalar(
                    "throughput/training_steps_per_second",
                    train_rate,
                    self.counters.env_steps,
                );
                sink.scalar(
                    "replay/transitions",
                    self.replay.num_transitions() as f64,
                    self.counters.env_steps,
                );
                if let Some(b) = &bar {
                    b.set_position(self.counters.env_steps);
                    b.set_message(format!(
                        "episodes {} | return {:.1} | loss {:.3} | {:.0} env/s, {:.0} train/s",
                        self.counters.episodes,
                        mean(&self.recent_returns),
                        self.last_stats.as_ref().map_or(f32::NAN, |s| s.total_loss),
                        env_rate,
                        train_rate
                    ));
                }
                last_log = Instant::now();
                env_steps_at_log = self.counters.env_steps;
                train_steps_at_log = self.counters.training_steps;
            }
        };
        self.counters.elapsed_seconds = elapsed_before + segment_start.elapsed().as_secs_f64();
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        Ok(reason)
    }

    fn train_once(&mut self, sink: &mut dyn MetricSink) -> Result<()> {
        let batch = self
            .replay
            .sample(self.config.training.batch_size, &mut self.sampler)?;
        let stats = self.learner.train_step(&batch)?;
        self.replay
            .update_priorities(&batch.ids, &stats.priorities)?;
        self.counters.training_steps += 1;
        let step = self.counters.training_steps;
        if step.is_multiple_of(10) {
            sink.scalar("loss/total", stats.total_loss as f64, step);
            sink.scalar("loss/value", stats.value_loss as f64, step);
            sink.scalar("loss/reward", stats.reward_loss as f64, step);
            sink.scalar("loss/policy", stats.policy_loss as f64, step);
            sink.scalar("train/grad_norm", stats.grad_norm, step);
            sink.scalar("train/learning_rate", stats.learning_rate, step);
        }
        self.last_stats = Some(stats);
        Ok(())
    }
}

/// Where experience comes from: an actor stepped in turn with the learner (deterministic), or
/// actor threads running beside it.
enum Source {
    Synchronous(Box<Actor>),
    Threads(ActorPool),
}

fn next_multiple(current: u64, interval: u64) -> u64 {
    match current.checked_div(interval) {
        Some(q) => (q + 1) * interval,
        None => u64::MAX,
    }
}

fn progress_bar(show: bool, config: &Config) -> Option<indicatif::ProgressBar> {
    if !show {
        return None;
    }
    let total = config.training.max_env_steps as u64;
    let bar = if total > 0 {
        indicatif::ProgressBar::new(total)
    } else {
        indicatif::ProgressBar::new_spinner()
    };
    let style = indicatif::ProgressStyle::with_template(
        "{elapsed_precise} [{bar:30}] {pos}/{len} env steps | {msg}",
    )
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
    .progress_chars("=> ");
    bar.set_style(style);
    Some(bar)
}
