//! Gymnasium environments through the Python bridge (the `python` feature; needs `gymnasium`
//! importable by the Python this crate links, or by the virtual environment in `VIRTUAL_ENV`).
//!
//! Run with `cargo test --release -p cumind-envs --features python --test gymnasium_bridge`.
#![cfg(feature = "python")]

use cumind_envs::gymnasium::GymnasiumEnv;
use cumind_envs::{check_env, make, make_with, CartPole, EnvError, Environment, Kwargs, Space};
use pyo3::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A Python object defined by `code`, which must bind `env`.
fn python_env(code: &str) -> Py<PyAny> {
    // A `gymnasium:` make starts the interpreter first.
    drop(make("gymnasium:CartPole-v1").unwrap());
    Python::attach(|py| {
        let code = std::ffi::CString::new(code).unwrap();
        let globals = pyo3::types::PyDict::new(py);
        py.run(&code, Some(&globals), None).unwrap();
        globals.get_item("env").unwrap().unwrap().unbind()
    })
}

/// The CartPole state Gymnasium holds (float64), which its float32 observation rounds.
fn gymnasium_state(env: &GymnasiumEnv) -> [f64; 4] {
    Python::attach(|py| {
        env.object()
            .bind(py)
            .getattr("unwrapped")
            .unwrap()
            .getattr("state")
            .unwrap()
            .call_method0("tolist")
            .unwrap()
            .extract::<Vec<f64>>()
            .unwrap()
            .try_into()
            .unwrap()
    })
}

/// Gymnasium's CartPole-v1 and the built-in one, started from the state Gymnasium draws for
/// each seed (the two draw it from different generators) and given the same actions, agree
/// at every step: observation, reward, termination and the truncation at 500 steps.
#[test]
fn gymnasium_cartpole_steps_as_the_built_in_one() {
    let mut ours_total = 0;
    for seed in 0..6u64 {
        let mut theirs = GymnasiumEnv::make("CartPole-v1", &Kwargs::new()).unwrap();
        assert_eq!(theirs.name(), "gymnasium:CartPole-v1");
        assert_eq!(theirs.max_episode_steps(), Some(500));
        assert_eq!(theirs.action_space(), Space::Discrete { n: 2 });
        assert_eq!(
            theirs.observation_space(),
            CartPole::new().observation_space()
        );
        let (first, _) = theirs.reset(Some(seed));
        let mut ours = CartPole::new();
        ours.reset(Some(seed));
        ours.set_state(gymnasium_state(&theirs));
        assert_eq!(
            first,
            gymnasium_state(&theirs).map(|x| x as f32).to_vec(),
            "seed {seed}"
        );
        // Even seeds: random actions (early termination); odd: a balancing policy that
        // lasts until the time limit.
        let mut rng = StdRng::seed_from_u64(seed);
        let mut obs = first;
        for t in 0..600 {
            let action = if seed % 2 == 0 {
                rng.random_range(0..2)
            } else {
                usize::from(3.0 * obs[2] + obs[3] > 0.0)
            };
            let a = theirs.step(action).unwrap();
            let b = ours.step(action).unwrap();
            assert_eq!(a.observation, b.observation, "seed {seed}, step {t}");
            assert_eq!(a.reward, b.reward, "seed {seed}, step {t}");
            assert_eq!(
                (a.terminated, a.truncated),
                (b.terminated, b.truncated),
                "seed {seed}, step {t}"
            );
            ours_total += 1;
            obs = a.observation;
            if a.terminated || a.truncated {
                assert_eq!(a.truncated, seed % 2 == 1, "seed {seed}");
                break;
            }
        }
        assert!(matches!(theirs.step(0), Err(EnvError::EpisodeOver)));
    }
    assert!(ours_total > 1500, "{ours_total} steps compared");
}

#[test]
fn keyword_arguments_reach_gymnasium_make() {
    let mut kwargs = Kwargs::new();
    kwargs.insert("max_episode_steps".into(), serde_json::json!(20));
    let mut env = make_with("gymnasium:CartPole-v1", &kwargs).unwrap();
    assert_eq!(env.max_episode_steps(), Some(20));
    env.reset(Some(3));
    let mut steps = 0;
    loop {
        steps += 1;
        let obs = env.step(steps % 2).unwrap();
        if obs.terminated || obs.truncated {
            break;
        }
    }
    assert!(steps <= 20);
}

#[test]
fn a_discrete_observation_is_one_hot() {
    let mut kwargs = Kwargs::new();
    kwargs.insert("is_slippery".into(), serde_json::json!(false));
    let mut env = make_with("gymnasium:FrozenLake-v1", &kwargs).unwrap();
    assert_eq!(env.observation_space().shape(), vec![16]);
    assert_eq!(env.action_space().n(), Some(4));
    let (obs, _) = env.reset(Some(0));
    assert_eq!(obs[0], 1.0);
    assert_eq!(obs.iter().sum::<f32>(), 1.0);
    // Right (action 2) from the top-left corner of the non-slippery lake: cell 1.
    let step = env.step(2).unwrap();
    assert_eq!(step.observation[1], 1.0);
    assert_eq!(step.observation.iter().sum::<f32>(), 1.0);
}

#[test]
fn spaces_cumind_cannot_learn_on_are_refused_by_name() {
    let err = make("gymnasium:Pendulum-v1").unwrap_err();
    assert!(matches!(err, EnvError::UnsupportedSpace { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("action space is Box"), "{text}");
    assert!(text.contains("Discrete"), "{text}");

    let dict = python_env(
        r#"
import gymnasium as gym
from gymnasium import spaces

class DictEnv(gym.Env):
    action_space = spaces.Discrete(2)
    observation_space = spaces.Dict({"a": spaces.Discrete(3)})

env = DictEnv()
"#,
    );
    let err = GymnasiumEnv::from_object("gymnasium:DictEnv".into(), dict).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("observation space is Dict"), "{text}");
}

#[test]
fn a_python_exception_carries_its_traceback() {
    let failing = python_env(
        r#"
import numpy as np
import gymnasium as gym
from gymnasium import spaces

class Failing(gym.Env):
    action_space = spaces.Discrete(2)
    observation_space = spaces.Box(-1.0, 1.0, (3,), np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(3, np.float32), {"level": 2, "note": "text is dropped"}

    def step(self, action):
        self.t += 1
        if self.t == 3:
            raise ValueError("the simulator broke at step three")
        return np.ones(3, np.float32), 1.0, False, False, {}

env = Failing()
"#,
    );
    let mut env = GymnasiumEnv::from_object("gymnasium:Failing".into(), failing).unwrap();
    let (obs, info) = env.reset(Some(1));
    assert_eq!(obs, vec![0.0; 3]);
    assert_eq!(info.get("level"), Some(&2.0));
    assert!(!info.contains_key("note"));
    env.step(0).unwrap();
    env.step(1).unwrap();
    let err = env.step(0).unwrap_err();
    let EnvError::Python {
        during, traceback, ..
    } = &err
    else {
        panic!("expected a Python error, got {err}");
    };
    assert_eq!(during, "step");
    assert!(
        traceback.contains("ValueError: the simulator broke at step three"),
        "{traceback}"
    );
    assert!(traceback.contains("in step"), "{traceback}");
    // Out-of-range actions never reach Python.
    assert!(matches!(
        env.step(2),
        Err(EnvError::ActionOutOfRange { action: 2, n: 2 })
    ));
}

#[test]
fn an_unknown_id_and_a_missing_module_are_python_errors_that_say_so() {
    let err = make("gymnasium:NoSuchGame-v9").unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, EnvError::Python { .. }), "{text}");
    assert!(text.contains("NoSuchGame"), "{text}");
    assert!(text.contains("gymnasium.make"), "{text}");
}

#[test]
fn gymnasium_environments_pass_the_checker_and_copy_their_state() {
    for name in ["gymnasium:CartPole-v1", "gymnasium:Acrobot-v1"] {
        let mut env = make(name).unwrap();
        let report = check_env(env.as_mut());
        assert!(report.passed(), "{name}: {report}");
        env.reset(Some(4));
        env.step(1).unwrap();
        let mut copy = env.clone_box();
        for a in [0, 1, 1, 0] {
            assert_eq!(env.step(a).unwrap(), copy.step(a).unwrap(), "{name}");
        }
    }
}
