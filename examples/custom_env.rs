//! Train CuMind on an environment of your own, without touching the crates.
//!
//! `GridWorld` below is not one of the built-in environments: a 5 x 5 grid, the agent starts in
//! a random cell of the left column and is rewarded +1 only when it reaches the bottom-right
//! corner (a sparse reward); an episode is cut after 20 steps. The program registers it under a
//! name, checks it against the environment contract, trains with the same loop as
//! `cumind train` (checkpoints in `checkpoints/gridworld`, logs in `runs/gridworld`), then loads
//! the checkpoint as an `Agent` and plays one episode.
//!
//! ```sh
//! cargo run --release --example custom_env
//! ```
//!
//! docs/custom_environments.md walks through it.

use candle_core::Device;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use cumind::envs::{EnvError, Environment, Info, Space, StepResult};
use cumind::metrics::{MetricSink, Progress};
use cumind::{Agent, Config, ConfigSources, RunOptions};

const SIZE: usize = 5;
const MAX_STEPS: usize = 20;
const NAME: &str = "GridWorld";

/// Actions: 0 up, 1 down, 2 left, 3 right (a move into a wall leaves the agent where it is).
#[derive(Clone)]
struct GridWorld {
    row: usize,
    col: usize,
    steps: usize,
    done: bool,
    rng: StdRng,
}

impl GridWorld {
    fn new() -> Self {
        let mut env = GridWorld {
            row: 0,
            col: 0,
            steps: 0,
            done: false,
            rng: StdRng::seed_from_u64(0),
        };
        env.reset(Some(0));
        env
    }

    /// One-hot position on the grid, flattened: shape `[SIZE * SIZE]`.
    fn observation(&self) -> Vec<f32> {
        let mut obs = vec![0.0; SIZE * SIZE];
        obs[self.row * SIZE + self.col] = 1.0;
        obs
    }
}

impl Environment for GridWorld {
    fn name(&self) -> &str {
        NAME
    }

    fn reset(&mut self, seed: Option<u64>) -> (Vec<f32>, Info) {
        if let Some(seed) = seed {
            self.rng = StdRng::seed_from_u64(seed);
        }
        self.row = self.rng.random_range(0..SIZE);
        self.col = 0;
        self.steps = 0;
        self.done = false;
        (self.observation(), Info::new())
    }

    fn step(&mut self, action: usize) -> Result<StepResult, EnvError> {
        if self.done {
            return Err(EnvError::EpisodeOver);
        }
        match action {
            0 => self.row = self.row.saturating_sub(1),
            1 => self.row = (self.row + 1).min(SIZE - 1),
            2 => self.col = self.col.saturating_sub(1),
            3 => self.col = (self.col + 1).min(SIZE - 1),
            _ => return Err(EnvError::ActionOutOfRange { action, n: 4 }),
        }
        self.steps += 1;
        let terminated = self.row == SIZE - 1 && self.col == SIZE - 1;
        // Truncated: cut by the time limit, not ended by the task (the value target
        // bootstraps from the network there instead of treating the state as final).
        let truncated = !terminated && self.steps >= MAX_STEPS;
        self.done = terminated || truncated;
        Ok(StepResult {
            observation: self.observation(),
            reward: if terminated { 1.0 } else { 0.0 },
            terminated,
            truncated,
            info: Info::new(),
        })
    }

    fn action_space(&self) -> Space {
        Space::Discrete { n: 4 }
    }

    fn observation_space(&self) -> Space {
        Space::uniform_box(0.0, 1.0, vec![SIZE * SIZE])
    }

    fn max_episode_steps(&self) -> Option<usize> {
        Some(MAX_STEPS)
    }

    fn render(&self) -> String {
        let mut text = String::new();
        for r in 0..SIZE {
            for c in 0..SIZE {
                text.push(
                    match (
                        r == self.row && c == self.col,
                        (r, c) == (SIZE - 1, SIZE - 1),
                    ) {
                        (true, _) => 'A',
                        (false, true) => 'G',
                        _ => '.',
                    },
                );
            }
            text.push('\n');
        }
        text
    }

    fn clone_box(&self) -> Box<dyn Environment> {
        Box::new(self.clone())
    }
}

/// Prints evaluation lines and a progress line now and then.
struct Printer;

impl MetricSink for Printer {
    fn scalar(&mut self, _tag: &str, _value: f64, _step: u64) {}

    fn log(&mut self, line: &str) {
        println!("{line}");
    }

    fn progress(&mut self, p: &Progress) {
        if p.env_steps % 2000 < 200 {
            println!(
                "{} env steps, {} episodes, training return {:.2}",
                p.env_steps, p.episodes, p.recent_return
            );
        }
    }
}

fn main() -> anyhow::Result<()> {
    // Give candle an explicit thread count (it is much slower without one; the CLI does this).
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        std::env::set_var("RAYON_NUM_THREADS", cores.to_string());
    }

    // 1. Check it against the Environment contract, then register it under a name; from here
    //    on it is used by name.
    let report = cumind::envs::check_env(&mut GridWorld::new());
    anyhow::ensure!(
        report.passed(),
        "GridWorld breaks the Environment contract: {report}"
    );
    cumind::envs::register(NAME, || Box::new(GridWorld::new()))?;

    // 2. The embedded defaults with a few keys changed, as `--set` would change them.
    let sets = [
        "environment.env_name=GridWorld",
        "self_play.discount=0.97",
        "self_play.td_steps=10",
        "training.max_env_steps=30000",
        "training.eval_interval=2000",
        "training.eval_episodes=32",
        "training.stop_return=0.99",
        "other.run_name=gridworld",
    ];
    let config = Config::load(&ConfigSources {
        sets: sets.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    })?;

    // 3. The same training loop as `cumind train`.
    let start = std::time::Instant::now();
    let options = RunOptions {
        run_name: Some("gridworld".into()),
        ..Default::default()
    };
    let summary = cumind::train(&config, &[Device::Cpu], &options, &mut Printer)?;
    println!(
        "stopped: {} after {} env steps in {:.1}s",
        summary.stop_reason,
        summary.counters.env_steps,
        start.elapsed().as_secs_f64()
    );

    // 4. The checkpoint loads as an Agent, like any built-in environment's.
    let mut agent = Agent::load(&summary.run_dir)?;
    let mut env = GridWorld::new();
    let (mut obs, _) = env.reset(Some(7));
    println!("{}", env.render());
    for _ in 0..MAX_STEPS {
        let action = agent.select_action(&obs, false)?;
        let step = env.step(action)?;
        obs = step.observation;
        if step.terminated || step.truncated {
            println!("{}", env.render());
            println!(
                "{} after {} steps",
                if step.terminated {
                    "goal reached"
                } else {
                    "time is up"
                },
                env.steps
            );
            break;
        }
    }
    Ok(())
}
