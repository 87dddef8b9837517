//! CartPole-v1, matching Gymnasium 1.4.0's dynamics step for step.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::env::{check_range, EnvError, Environment, Info, Space, StepResult};

const GRAVITY: f64 = 9.8;
const MASS_CART: f64 = 1.0;
const MASS_POLE: f64 = 0.1;
const TOTAL_MASS: f64 = MASS_POLE + MASS_CART;
/// Half the pole's length.
const LENGTH: f64 = 0.5;
const POLE_MASS_LENGTH: f64 = MASS_POLE * LENGTH;
const FORCE_MAG: f64 = 10.0;
/// Seconds between state updates.
const TAU: f64 = 0.02;
/// 12 degrees, computed the way Gymnasium does (`12 * 2 * pi / 360`).
const THETA_THRESHOLD: f64 = 12.0 * 2.0 * std::f64::consts::PI / 360.0;
const X_THRESHOLD: f64 = 2.4;
const MAX_EPISODE_STEPS: usize = 500;
const RESET_BOUND: f64 = 0.05;

/// The classic cart-pole balancing task (Barto, Sutton and Anderson), as Gymnasium's
/// `CartPole-v1` with its default 500-step time limit.
///
/// * Actions: `0` pushes the cart left, `1` pushes it right (force 10 N).
/// * State (kept in `f64`): cart position, cart velocity, pole angle, pole angular velocity; the
///   observation is the state cast to `f32`.
/// * Dynamics: Gymnasium's equations with the explicit Euler integrator and `tau = 0.02`.
/// * Reward: `1.0` on every step, including the one that terminates.
/// * Termination: `|x| > 2.4` or `|theta| > 12°`. Truncation: the 500th step of an episode
///   (as Gymnasium's `TimeLimit`, `truncated` is set on step 500 whatever `terminated` says).
/// * Reset: all four state values uniform in `[-0.05, 0.05)` from the environment's generator.
#[derive(Debug, Clone)]
pub struct CartPole {
    state: [f64; 4],
    steps: usize,
    done: bool,
    rng: StdRng,
}

impl Default for CartPole {
    fn default() -> Self {
        Self::new()
    }
}

impl CartPole {
    /// A cart-pole reset with seed 0.
    pub fn new() -> Self {
        Self::with_seed(0)
    }

    /// A cart-pole reset with the given seed.
    pub fn with_seed(seed: u64) -> Self {
        let mut env = CartPole {
            state: [0.0; 4],
            steps: 0,
            done: false,
            rng: StdRng::seed_from_u64(seed),
        };
        env.reset(None);
        env
    }

    /// The internal state `[x, x_dot, theta, theta_dot]`.
    pub fn state(&self) -> [f64; 4] {
        self.state
    }

    /// Puts the environment in the given state `[x, x_dot, theta, theta_dot]` at the start of a
    /// new episode (step counter zero, episode not over). The generator is left alone.
    pub fn set_state(&mut self, s: [f64; 4]) {
        self.state = s;
        self.steps = 0;
        self.done = false;
    }

    fn observation(&self) -> Vec<f32> {
        self.state.iter().map(|&v| v as f32).collect()
    }
}

impl Environment for CartPole {
    fn name(&self) -> &str {
        "CartPole-v1"
    }

    fn reset(&mut self, seed: Option<u64>) -> (Vec<f32>, Info) {
        if let Some(seed) = seed {
            self.rng = StdRng::seed_from_u64(seed);
        }
        for v in &mut self.state {
            *v = self.rng.random_range(-RESET_BOUND..RESET_BOUND);
        }
        self.steps = 0;
        self.done = false;
        (self.observation(), Info::new())
    }

    fn step(&mut self, action: usize) -> Result<StepResult, EnvError> {
        if self.done {
            return Err(EnvError::EpisodeOver);
        }
        check_range(action, 2)?;

        let [x, x_dot, theta, theta_dot] = self.state;
        let force = if action == 1 { FORCE_MAG } else { -FORCE_MAG };
        let cos_theta = theta.cos();
        let sin_theta = theta.sin();
        // The operations are grouped exactly as in Gymnasium so that results agree bit for bit.
        let temp = (force + POLE_MASS_LENGTH * (theta_dot * theta_dot) * sin_theta) / TOTAL_MASS;
        let theta_acc = (GRAVITY * sin_theta - cos_theta * temp)
            / (LENGTH * (4.0 / 3.0 - MASS_POLE * (cos_theta * cos_theta) / TOTAL_MASS));
        let x_acc = temp - POLE_MASS_LENGTH * theta_acc * cos_theta / TOTAL_MASS;

        // Explicit Euler: positions advance with the old velocities.
        let x = x + TAU * x_dot;
        let x_dot = x_dot + TAU * x_acc;
        let theta = theta + TAU * theta_dot;
        let theta_dot = theta_dot + TAU * theta_acc;
        self.state = [x, x_dot, theta, theta_dot];
        self.steps += 1;

        let terminated = !(-X_THRESHOLD..=X_THRESHOLD).contains(&x)
            || !(-THETA_THRESHOLD..=THETA_THRESHOLD).contains(&theta);
        let truncated = self.steps >= MAX_EPISODE_STEPS;
        self.done = terminated || truncated;

        Ok(StepResult {
            observation: self.observation(),
            reward: 1.0,
            terminated,
            truncated,
            info: Info::new(),
        })
    }

    fn action_space(&self) -> Space {
        Space::Discrete { n: 2 }
    }

    fn observation_space(&self) -> Space {
        let high = vec![
            (X_THRESHOLD * 2.0) as f32,
            f32::INFINITY,
            (THETA_THRESHOLD * 2.0) as f32,
            f32::INFINITY,
        ];
        Space::Box {
            low: high.iter().map(|v| -v).collect(),
            high,
            shape: vec![4],
        }
    }

    fn max_episode_steps(&self) -> Option<usize> {
        Some(MAX_EPISODE_STEPS)
    }

    fn render(&self) -> String {
        let [x, x_dot, theta, theta_dot] = self.state;
        // A 41-column track from -2.4 to 2.4 with the cart as `#`, plus the numbers.
        const WIDTH: usize = 41;
        let pos = ((x + X_THRESHOLD) / (2.0 * X_THRESHOLD) * (WIDTH - 1) as f64).round();
        let mut track: Vec<char> = vec!['-'; WIDTH];
        if (0.0..WIDTH as f64).contains(&pos) {
            track[pos as usize] = '#';
        }
        let track: String = track.into_iter().collect();
        format!(
            "|{track}|\nx={x:+.4} x_dot={x_dot:+.4} theta={:+.2}deg theta_dot={theta_dot:+.4} step={}",
            theta.to_degrees(),
            self.steps
        )
    }

    /// The left-right mirror image: every state value changes sign and the two pushes swap.
    /// The equations are odd in `(x, x_dot, theta, theta_dot, force)`, and the bounds, the
    /// reward and the reset distribution are symmetric about zero.
    fn symmetries(&self) -> Vec<crate::Symmetry> {
        vec![crate::Symmetry {
            observation: vec![0, 1, 2, 3],
            negate: vec![true; 4],
            actions: vec![1, 0],
        }]
    }

    fn clone_box(&self) -> Box<dyn Environment> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reset_draws_small_state_and_is_reproducible() {
        let mut env = CartPole::new();
        let (obs, _) = env.reset(Some(3));
        assert_eq!(obs.len(), 4);
        assert!(env.state().iter().all(|v| v.abs() <= 0.05));
        assert!(env.observation_space().contains(&obs));
        let (obs2, _) = env.reset(Some(3));
        assert_eq!(obs, obs2);
        let (obs3, _) = env.reset(None);
        assert_ne!(obs, obs3);
    }

    #[test]
    fn pushing_one_way_terminates_and_then_refuses_to_step() {
        let mut env = CartPole::new();
        env.set_state([0.0; 4]);
        let mut n = 0;
        loop {
            let r = env.step(1).unwrap();
            n += 1;
            assert_eq!(r.reward, 1.0);
            assert!(!r.truncated);
            if r.terminated {
                break;
            }
        }
        // Always pushing right tips the pole left within a few dozen steps.
        assert!(n < 50, "{n}");
        assert!(env.state()[2] < -THETA_THRESHOLD);
        assert_eq!(env.step(0), Err(EnvError::EpisodeOver));
        assert_eq!(
            env.clone().step(2).unwrap_err(),
            EnvError::EpisodeOver,
            "the episode check comes first"
        );
        env.reset(None);
        assert!(env.step(0).is_ok());
    }

    #[test]
    fn out_of_range_action_leaves_state_alone() {
        let mut env = CartPole::with_seed(5);
        let before = env.state();
        assert_eq!(
            env.step(2),
            Err(EnvError::ActionOutOfRange { action: 2, n: 2 })
        );
        assert_eq!(env.state(), before);
    }

    #[test]
    fn observation_space_matches_gymnasium() {
        let s = CartPole::new().observation_space();
        let Space::Box { low, high, shape } = s else {
            panic!("not a box")
        };
        assert_eq!(shape, vec![4]);
        assert_eq!(high[0], 4.8_f32);
        assert_eq!(high[2], 0.41887903_f32);
        assert_eq!(high[1], f32::INFINITY);
        assert_eq!(low[3], f32::NEG_INFINITY);
        assert_eq!(low[0], -4.8_f32);
    }

    #[test]
    fn render_shows_cart() {
        let mut env = CartPole::new();
        env.set_state([0.0, 0.0, 0.1, 0.0]);
        let r = env.render();
        assert_eq!(r.lines().next().unwrap().chars().nth(21), Some('#'));
        assert!(r.contains("theta=+5.73deg"), "{r}");
    }

    #[test]
    fn the_mirror_image_commutes_with_the_dynamics() {
        let symmetry = &CartPole::new().symmetries()[0];
        let mut rng = StdRng::seed_from_u64(11);
        let mut steps = 0;
        for episode in 0..30 {
            let mut plain = CartPole::with_seed(episode);
            let mut mirrored = CartPole::new();
            mirrored.set_state(plain.state().map(|v| -v));
            loop {
                let action = rng.random_range(0..2);
                let x = plain.step(action).unwrap();
                let y = mirrored.step(symmetry.actions[action]).unwrap();
                steps += 1;
                // Bit for bit: negation is exact and sin is odd in IEEE arithmetic.
                assert_eq!(symmetry.apply_to_observation(&x.observation), y.observation);
                assert_eq!(mirrored.state(), plain.state().map(|v| -v));
                assert_eq!(
                    (x.reward, x.terminated, x.truncated),
                    (y.reward, y.terminated, y.truncated)
                );
                if x.terminated || x.truncated {
                    break;
                }
            }
        }
        assert!(steps > 300, "{steps}");
    }
}
