//! When the training loop trains, evaluates, checkpoints and stops: counters in, decisions out.
//!
//! The loop ([`crate::trainer`]) owns the network, the actors and the replay buffer; this file
//! owns only numbers, so every rule below is unit-tested without a network.
//!
//! - **Replay ratio.** Training starts once replay holds `min_replay` transitions; from then on
//!   the learner owes `ceil((env_steps - env_steps_when_warm) / ranks * train_ratio)` training
//!   steps beyond those it had taken when replay became warm. The counters' environment steps
//!   are those of every rank together, so each rank's replay ratio is `train_ratio` over its
//!   own steps, at any rank count.
//! - **Learner phases.** A phase (paying what is owed) comes every `train_frequency` actor
//!   steps.
//! - **Evaluation** every `eval_interval` environment steps (0: never), **checkpoints** every
//!   `checkpoint_interval` training steps, both at multiples of the interval, so a resumed run
//!   keeps the same grid.
//! - **Budget:** `max_env_steps`, `max_training_steps`, `num_episodes` (0: no limit each), and
//!   `max_seconds` of the run's clock, which stops the run but, unlike the step budgets, does
//!   not count towards [`Schedule::progress`]: the schedules stay a function of the steps.

use crate::checkpoint::Counters;
use crate::config::Config;

/// The loop's schedule for one segment of a run (from its start or a resume).
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    train_ratio: f64,
    /// The ranks whose environment steps the counters add up (1 training alone).
    ranks: u64,
    min_replay: usize,
    train_frequency: usize,
    eval_interval: u64,
    checkpoint_interval: u64,
    max_env_steps: u64,
    max_training_steps: u64,
    num_episodes: u64,
    max_seconds: f64,
    /// Environment steps when replay first held `min_replay` transitions.
    warm_at: Option<u64>,
    /// Training steps already taken when this segment started.
    trained_before: u64,
    actor_steps_since_phase: usize,
    next_eval: u64,
    next_checkpoint: u64,
}

impl Schedule {
    /// The schedule of `config` for a segment that starts at `counters` with
    /// `replay_transitions` already stored, over `ranks` ranks (1: training alone).
    pub fn new(
        config: &Config,
        counters: &Counters,
        replay_transitions: usize,
        ranks: usize,
    ) -> Self {
        let t = &config.training;
        let min_replay = config.min_replay_transitions();
        Self {
            train_ratio: t.train_ratio,
            ranks: ranks.max(1) as u64,
            min_replay,
            train_frequency: t.train_frequency,
            eval_interval: t.eval_interval as u64,
            checkpoint_interval: t.checkpoint_interval as u64,
            max_env_steps: t.max_env_steps as u64,
            max_training_steps: t.max_training_steps as u64,
            num_episodes: t.num_episodes as u64,
            max_seconds: t.max_seconds,
            warm_at: (replay_transitions >= min_replay).then_some(counters.env_steps),
            trained_before: counters.training_steps,
            actor_steps_since_phase: 0,
            next_eval: next_multiple(counters.env_steps, t.eval_interval as u64),
            next_checkpoint: next_multiple(counters.training_steps, t.checkpoint_interval as u64),
        }
    }

    /// Record one actor step that brought the counters to `counters` and replay to
    /// `replay_transitions`; returns how many training steps the learner should take now (0
    /// when no learner phase is due).
    pub fn after_actor_step(&mut self, counters: &Counters, replay_transitions: usize) -> u64 {
        if self.warm_at.is_none() && replay_transitions >= self.min_replay {
            self.warm_at = Some(counters.env_steps);
        }
        self.actor_steps_since_phase += 1;
        if self.actor_steps_since_phase < self.train_frequency {
            return 0;
        }
        let Some(warm) = self.warm_at else {
            return 0;
        };
        self.actor_steps_since_phase = 0;
        let own_steps = (counters.env_steps - warm) as f64 / self.ranks as f64;
        let owed = self.trained_before + (own_steps * self.train_ratio).ceil() as u64;
        let mut due = owed.saturating_sub(counters.training_steps);
        if self.max_training_steps > 0 {
            due = due.min(
                self.max_training_steps
                    .saturating_sub(counters.training_steps),
            );
        }
        due
    }

    /// Whether a checkpoint is due after the learner reached `training_steps` (moves the next
    /// checkpoint on when it is).
    pub fn checkpoint_due(&mut self, training_steps: u64) -> bool {
        if training_steps >= self.next_checkpoint {
            self.next_checkpoint = next_multiple(training_steps, self.checkpoint_interval);
            return true;
        }
        false
    }

    /// Whether an evaluation is due at `env_steps` (moves the next one on when it is).
    pub fn eval_due(&mut self, env_steps: u64) -> bool {
        if self.eval_interval > 0 && env_steps >= self.next_eval {
            self.next_eval = next_multiple(env_steps, self.eval_interval);
            return true;
        }
        false
    }

    /// Fraction of the budget spent, in [0, 1] (the largest over the step and episode limits
    /// that are set; `max_seconds` does not count, so the temperature follows the steps).
    pub fn progress(&self, counters: &Counters) -> f64 {
        let mut p: f64 = 0.0;
        for (done, limit) in [
            (counters.env_steps, self.max_env_steps),
            (counters.training_steps, self.max_training_steps),
            (counters.episodes, self.num_episodes),
        ] {
            if limit > 0 {
                p = p.max(done as f64 / limit as f64);
            }
        }
        p.min(1.0)
    }

    /// Why the run must stop, once a budget is spent.
    pub fn budget_spent(&self, counters: &Counters) -> Option<String> {
        if self.max_env_steps > 0 && counters.env_steps >= self.max_env_steps {
            return Some(format!("reached max_env_steps = {}", self.max_env_steps));
        }
        if self.max_training_steps > 0 && counters.training_steps >= self.max_training_steps {
            return Some(format!(
                "reached max_training_steps = {}",
                self.max_training_steps
            ));
        }
        if self.num_episodes > 0 && counters.episodes >= self.num_episodes {
            return Some(format!("reached num_episodes = {}", self.num_episodes));
        }
        if self.max_seconds > 0.0 && counters.elapsed_seconds >= self.max_seconds {
            return Some(format!("reached max_seconds = {}", self.max_seconds));
        }
        None
    }
}

/// The first multiple of `interval` above `current` (`u64::MAX` for interval 0: never).
fn next_multiple(current: u64, interval: u64) -> u64 {
    match current.checked_div(interval) {
        Some(q) => (q + 1) * interval,
        None => u64::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(sets: &[&str]) -> Config {
        Config::load(&crate::config::ConfigSources {
            sets: sets.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        })
        .unwrap()
    }

    fn counters(env_steps: u64, training_steps: u64) -> Counters {
        Counters {
            env_steps,
            training_steps,
            ..Default::default()
        }
    }

    #[test]
    fn nothing_is_owed_before_replay_is_warm_then_the_ratio_applies_from_there() {
        let c = config(&["memory.min_memory_size=100", "training.train_ratio=0.25"]);
        let mut s = Schedule::new(&c, &counters(0, 0), 0, 1);
        // 16 env steps per actor step; replay warm at 112 transitions (7th step).
        let mut trained = 0;
        let mut owed_per_step = Vec::new();
        for step in 1..=10u64 {
            let due = s.after_actor_step(&counters(16 * step, trained), 16 * step as usize);
            trained += due;
            owed_per_step.push(due);
        }
        assert_eq!(owed_per_step[..6], [0, 0, 0, 0, 0, 0]);
        // Warm at 112: then (128 - 112) * 0.25 = 4 per step.
        assert_eq!(owed_per_step[6..], [0, 4, 4, 4]);
        assert_eq!(trained, 12);
    }

    /// Over K ranks the counters hold every rank's steps: each rank owes what one process
    /// owes for its own share, so the replay ratio per rank is the configured one.
    #[test]
    fn over_several_ranks_the_ratio_applies_to_each_rank_s_share() {
        let c = config(&["memory.min_memory_size=1", "training.train_ratio=0.25"]);
        let mut alone = Schedule::new(&c, &counters(0, 0), 0, 1);
        let mut three = Schedule::new(&c, &counters(0, 0), 0, 3);
        let (mut trained_alone, mut trained_three) = (0, 0);
        for step in 1..=8u64 {
            // 16 steps an actor step on each of the three ranks: 48 over all of them.
            trained_alone += alone.after_actor_step(&counters(16 * step, trained_alone), 1);
            trained_three += three.after_actor_step(&counters(48 * step, trained_three), 1);
            assert_eq!(trained_three, trained_alone, "after actor step {step}");
        }
        assert_eq!(trained_alone, 28); // (128 - 16) * 0.25
    }

    #[test]
    fn owed_steps_round_up_and_catch_up_after_a_pause() {
        let c = config(&["memory.min_memory_size=1", "training.train_ratio=0.1"]);
        let mut s = Schedule::new(&c, &counters(0, 0), 0, 1);
        assert_eq!(s.after_actor_step(&counters(5, 0), 5), 0); // warm at 5
        assert_eq!(s.after_actor_step(&counters(10, 0), 10), 1); // ceil(0.5)
                                                                 // The learner took none of it: 2 owed by 20 env steps.
        assert_eq!(s.after_actor_step(&counters(20, 0), 20), 2);
    }

    #[test]
    fn phases_come_every_train_frequency_actor_steps() {
        let c = config(&[
            "memory.min_memory_size=1",
            "training.train_ratio=1.0",
            "training.train_frequency=3",
        ]);
        let mut s = Schedule::new(&c, &counters(0, 0), 10, 1);
        let dues: Vec<u64> = (1..=6)
            .map(|k| s.after_actor_step(&counters(10 * k, 0), 10))
            .collect();
        assert_eq!(dues, [0, 0, 30, 0, 0, 60]);
    }

    #[test]
    fn a_resumed_segment_counts_from_its_own_start() {
        let c = config(&["memory.min_memory_size=1", "training.train_ratio=0.5"]);
        let mut s = Schedule::new(&c, &counters(1000, 400), 500, 1);
        assert_eq!(s.after_actor_step(&counters(1010, 400), 510), 5);
    }

    #[test]
    fn max_training_steps_caps_what_is_owed() {
        let c = config(&[
            "memory.min_memory_size=1",
            "training.train_ratio=1.0",
            "training.max_training_steps=15",
        ]);
        let mut s = Schedule::new(&c, &counters(0, 0), 10, 1);
        assert_eq!(s.after_actor_step(&counters(10, 0), 10), 10);
        assert_eq!(s.after_actor_step(&counters(20, 10), 20), 5);
        assert_eq!(
            s.budget_spent(&counters(20, 15)).unwrap(),
            "reached max_training_steps = 15"
        );
    }

    #[test]
    fn evaluations_and_checkpoints_fall_on_multiples_of_their_interval() {
        let c = config(&[
            "training.eval_interval=100",
            "training.checkpoint_interval=50",
        ]);
        let mut s = Schedule::new(&c, &counters(130, 70), 0, 1);
        assert!(!s.eval_due(199));
        assert!(s.eval_due(216));
        assert!(!s.eval_due(250));
        assert!(s.eval_due(300));
        assert!(!s.checkpoint_due(99));
        assert!(s.checkpoint_due(100));
        assert!(!s.checkpoint_due(120));
        assert!(s.checkpoint_due(151));
        let off = config(&["training.eval_interval=0"]);
        let mut s = Schedule::new(&off, &counters(0, 0), 0, 1);
        assert!(!s.eval_due(u64::MAX - 1));
    }

    #[test]
    fn progress_and_budget_use_every_limit_that_is_set() {
        let c = config(&["training.max_env_steps=1000", "training.num_episodes=10"]);
        let s = Schedule::new(&c, &counters(0, 0), 0, 1);
        let mut at = counters(250, 0);
        at.episodes = 5;
        assert_eq!(s.progress(&at), 0.5);
        assert_eq!(s.budget_spent(&at), None);
        at.episodes = 10;
        assert_eq!(s.budget_spent(&at).unwrap(), "reached num_episodes = 10");
        assert_eq!(
            s.budget_spent(&counters(1000, 0)).unwrap(),
            "reached max_env_steps = 1000"
        );
    }

    #[test]
    fn the_clock_stops_the_run_without_moving_the_schedules() {
        let c = config(&["training.max_env_steps=1000", "training.max_seconds=60"]);
        let s = Schedule::new(&c, &counters(0, 0), 0, 1);
        let mut at = counters(250, 0);
        at.elapsed_seconds = 59.5;
        assert_eq!(s.budget_spent(&at), None);
        at.elapsed_seconds = 60.0;
        assert_eq!(s.budget_spent(&at).unwrap(), "reached max_seconds = 60");
        // A quarter of the steps, whatever the clock says.
        assert_eq!(s.progress(&at), 0.25);
        let unlimited = Schedule::new(&config(&[]), &counters(0, 0), 0, 1);
        at.elapsed_seconds = 1e9;
        assert_eq!(unlimited.budget_spent(&at), None);
    }
}
