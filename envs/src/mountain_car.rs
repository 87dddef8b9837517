//! MountainCar-v0, with Gymnasium's dynamics and constants.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::env::{check_range, EnvError, Environment, Info, Space, StepResult};

const MIN_POSITION: f64 = -1.2;
const MAX_POSITION: f64 = 0.6;
const MAX_SPEED: f64 = 0.07;
const GOAL_POSITION: f64 = 0.5;
const GOAL_VELOCITY: f64 = 0.0;
const FORCE: f64 = 0.001;
const GRAVITY: f64 = 0.0025;
const MAX_EPISODE_STEPS: usize = 200;

/// An under-powered car in a valley that must rock back and forth to reach the flag on the
/// right hill, as Gymnasium's `MountainCar-v0` with its default 200-step time limit.
///
/// * Actions: `0` accelerate left, `1` coast, `2` accelerate right.
/// * State (kept in `f64`): position in `[-1.2, 0.6]`, velocity in `[-0.07, 0.07]`; the
///   observation is the state cast to `f32`.
/// * Dynamics: `velocity += (action - 1) * 0.001 - 0.0025 * cos(3 * position)`, clipped;
///   `position += velocity`, clipped; a car stopped by the left wall loses its leftward speed.
/// * Reward: `-1` per step. Termination: `position >= 0.5` and `velocity >= 0`.
///   Truncation: the 200th step of an episode.
/// * Reset: position uniform in `[-0.6, -0.4)`, velocity 0.
#[derive(Debug, Clone)]
pub struct MountainCar {
    position: f64,
    velocity: f64,
    steps: usize,
    done: bool,
    rng: StdRng,
}

impl Default for MountainCar {
    fn default() -> Self {
        Self::new()
    }
}

impl MountainCar {
    /// A mountain car reset with seed 0.
    pub fn new() -> Self {
        Self::with_seed(0)
    }

    /// A mountain car reset with the given seed.
    pub fn with_seed(seed: u64) -> Self {
        let mut env = MountainCar {
            position: 0.0,
            velocity: 0.0,
            steps: 0,
            done: false,
            rng: StdRng::seed_from_u64(seed),
        };
        env.reset(None);
        env
    }

    /// The internal state `[position, velocity]`.
    pub fn state(&self) -> [f64; 2] {
        [self.position, self.velocity]
    }

    /// Puts the environment in the given state `[position, velocity]` at the start of a new
    /// episode (step counter zero, episode not over). The generator is left alone.
    pub fn set_state(&mut self, s: [f64; 2]) {
        [self.position, self.velocity] = s;
        self.steps = 0;
        self.done = false;
    }

    fn observation(&self) -> Vec<f32> {
        vec![self.position as f32, self.velocity as f32]
    }
}

impl Environment for MountainCar {
    fn name(&self) -> &str {
        "MountainCar-v0"
    }

    fn reset(&mut self, seed: Option<u64>) -> (Vec<f32>, Info) {
        if let Some(seed) = seed {
            self.rng = StdRng::seed_from_u64(seed);
        }
        self.position = self.rng.random_range(-0.6..-0.4);
        self.velocity = 0.0;
        self.steps = 0;
        self.done = false;
        (self.observation(), Info::new())
    }

    fn step(&mut self, action: usize) -> Result<StepResult, EnvError> {
        if self.done {
            return Err(EnvError::EpisodeOver);
        }
        check_range(action, 3)?;

        let push = action as f64 - 1.0;
        let mut velocity =
            self.velocity + (push * FORCE + (3.0 * self.position).cos() * (-GRAVITY));
        velocity = velocity.clamp(-MAX_SPEED, MAX_SPEED);
        let position = (self.position + velocity).clamp(MIN_POSITION, MAX_POSITION);
        if position == MIN_POSITION && velocity < 0.0 {
            velocity = 0.0;
        }
        self.position = position;
        self.velocity = velocity;
        self.steps += 1;

        let terminated = position >= GOAL_POSITION && velocity >= GOAL_VELOCITY;
        let truncated = self.steps >= MAX_EPISODE_STEPS;
        self.done = terminated || truncated;
        Ok(StepResult {
            observation: self.observation(),
            reward: -1.0,
            terminated,
            truncated,
            info: Info::new(),
        })
    }

    fn action_space(&self) -> Space {
        Space::Discrete { n: 3 }
    }

    fn observation_space(&self) -> Space {
        Space::Box {
            low: vec![MIN_POSITION as f32, -MAX_SPEED as f32],
            high: vec![MAX_POSITION as f32, MAX_SPEED as f32],
            shape: vec![2],
        }
    }

    fn max_episode_steps(&self) -> Option<usize> {
        Some(MAX_EPISODE_STEPS)
    }

    fn render(&self) -> String {
        // A 37-column track from -1.2 to 0.6 with the car as `C` and the flag as `F`.
        const WIDTH: usize = 37;
        let column = |p: f64| {
            ((p - MIN_POSITION) / (MAX_POSITION - MIN_POSITION) * (WIDTH - 1) as f64).round()
                as usize
        };
        let mut track = vec!['_'; WIDTH];
        track[column(GOAL_POSITION)] = 'F';
        track[column(self.position).min(WIDTH - 1)] = 'C';
        let track: String = track.into_iter().collect();
        format!(
            "|{track}|\nposition={:+.4} velocity={:+.5} step={}",
            self.position, self.velocity, self.steps
        )
    }

    fn clone_box(&self) -> Box<dyn Environment> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_checked_step() {
        let mut env = MountainCar::new();
        env.set_state([-0.5, 0.0]);
        let r = env.step(2).unwrap();
        // velocity = 0.001 - 0.0025 * cos(-1.5), cos(1.5) = 0.0707372016677029...
        let v = 0.001 - 0.0025 * 0.070_737_201_667_702_9;
        assert!((env.state()[1] - v).abs() < 1e-15, "{:?}", env.state());
        assert!((env.state()[0] - (-0.5 + v)).abs() < 1e-15);
        assert!((v - 0.000_823_156_995_830_742_8).abs() < 1e-15);
        assert_eq!(r.observation, vec![(-0.5 + v) as f32, v as f32]);
        assert_eq!(r.reward, -1.0);
        assert!(!r.terminated && !r.truncated);

        // Coasting at the bottom of the valley (cos(3x) = 0 at x = -pi/6) keeps the speed.
        env.set_state([-std::f64::consts::PI / 6.0, 0.01]);
        env.step(1).unwrap();
        assert!((env.state()[1] - 0.01).abs() < 1e-9);
    }

    #[test]
    fn speed_is_clipped_and_left_wall_stops_the_car() {
        let mut env = MountainCar::new();
        env.set_state([-1.19, -0.07]);
        env.step(0).unwrap();
        assert_eq!(env.state(), [-1.2, 0.0]);

        // At -0.6 gravity pulls right too, so the speed would exceed 0.07 unclipped.
        env.set_state([-0.6, 0.07]);
        env.step(2).unwrap();
        assert_eq!(env.state(), [-0.6 + 0.07, 0.07]);
    }

    #[test]
    fn truncates_at_200_steps() {
        let mut env = MountainCar::with_seed(1);
        for t in 1..=200 {
            let r = env.step(1).unwrap();
            assert!(!r.terminated);
            assert_eq!(r.truncated, t == 200, "step {t}");
        }
        assert_eq!(env.step(1), Err(EnvError::EpisodeOver));
    }

    #[test]
    fn pushing_with_the_velocity_reaches_the_goal() {
        let mut env = MountainCar::new();
        for seed in 0..10 {
            env.reset(Some(seed));
            let mut steps = 0;
            let r = loop {
                let action = if env.state()[1] >= 0.0 { 2 } else { 0 };
                let r = env.step(action).unwrap();
                steps += 1;
                if r.terminated || r.truncated {
                    break r;
                }
            };
            assert!(r.terminated && !r.truncated, "seed {seed}: {steps} steps");
            assert!(env.state()[0] >= 0.5 && env.state()[1] >= 0.0);
        }
    }

    #[test]
    fn reset_range_and_reproducibility() {
        let mut env = MountainCar::new();
        for seed in 0..20 {
            let (obs, _) = env.reset(Some(seed));
            assert!((-0.6..-0.4).contains(&env.state()[0]));
            assert_eq!(obs[1], 0.0);
            assert!(env.observation_space().contains(&obs));
        }
        let a = env.reset(Some(4)).0;
        let b = env.reset(Some(4)).0;
        assert_eq!(a, b);
        assert_eq!(
            env.step(3),
            Err(EnvError::ActionOutOfRange { action: 3, n: 3 })
        );
        assert!(env.render().contains('C'));
    }
}
