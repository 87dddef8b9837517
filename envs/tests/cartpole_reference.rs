//! Replays CartPole-v1 episodes recorded from Gymnasium 1.4.0 (see `tests/data/README.md`) and
//! requires our port to agree at every step: the `f32` observation exactly, the `f64` state to
//! 1e-12, and reward, terminated and truncated identically.

use cumind_envs::{CartPole, EnvError, Environment, Space};
use serde_json::Value;

const REFERENCE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/cartpole_v1_reference.json"
);

/// Python's `json` writes infinite bounds as the bare words `Infinity` and `-Infinity`, which
/// are not JSON; turn them into the strings `"inf"` and `"-inf"` before parsing.
fn parse_python_json(text: &str) -> Value {
    let text = text
        .replace("-Infinity", "\"-inf\"")
        .replace("Infinity", "\"inf\"");
    serde_json::from_str(&text).expect("valid JSON")
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .expect("an array of numbers")
        .iter()
        .map(|x| match x {
            Value::String(s) => s.parse().expect("inf or -inf"),
            _ => x.as_f64().expect("a number"),
        })
        .collect()
}

fn state4(v: &Value) -> [f64; 4] {
    floats(v).try_into().expect("four numbers")
}

#[test]
fn replays_gymnasium_episodes_exactly() {
    let text = std::fs::read_to_string(REFERENCE)
        .unwrap_or_else(|e| panic!("cannot read {REFERENCE}: {e}"));
    let data = parse_python_json(&text);
    let meta = &data["meta"];
    assert_eq!(meta["env_id"], "CartPole-v1");
    assert_eq!(meta["max_episode_steps"], 500);
    assert_eq!(meta["n_actions"], 2);

    let mut env = CartPole::new();
    assert_eq!(env.max_episode_steps(), Some(500));
    assert_eq!(env.action_space().n(), Some(2));
    let Space::Box { low, high, shape } = env.observation_space() else {
        panic!("CartPole observes a box");
    };
    assert_eq!(shape, vec![4]);
    let as_f32 = |v: &Value| floats(v).iter().map(|&x| x as f32).collect::<Vec<_>>();
    assert_eq!(low, as_f32(&meta["observation_space_low"]));
    assert_eq!(high, as_f32(&meta["observation_space_high"]));

    let episodes = data["episodes"].as_array().expect("episodes");
    assert!(!episodes.is_empty());
    let (mut truncated_episodes, mut terminated_episodes, mut total_steps) = (0, 0, 0);
    let mut max_state_error: f64 = 0.0;
    for episode in episodes {
        let seed = &episode["seed"];
        env.set_state(state4(&episode["initial_state"]));
        let initial_obs: Vec<f32> = env.state().iter().map(|&v| v as f32).collect();
        let expected_obs: Vec<f32> = floats(&episode["initial_obs"])
            .iter()
            .map(|&v| v as f32)
            .collect();
        assert_eq!(initial_obs, expected_obs, "episode {seed}: initial obs");

        let actions = episode["actions"].as_array().expect("actions");
        let steps = episode["steps"].as_array().expect("steps");
        assert_eq!(actions.len(), steps.len());
        assert_eq!(episode["length"].as_u64(), Some(steps.len() as u64));
        let mut total = 0.0;
        for (t, (action, want)) in actions.iter().zip(steps).enumerate() {
            let action = action.as_u64().expect("an action") as usize;
            let got = env.step(action).unwrap();

            // JSON keeps float32 values at full float64 precision; narrowing is exact.
            let want_obs: Vec<f32> = floats(&want["obs"]).iter().map(|&v| v as f32).collect();
            assert_eq!(got.observation, want_obs, "episode {seed} step {t}: obs");
            let want_state = state4(&want["state"]);
            for (k, (g, w)) in env.state().iter().zip(want_state).enumerate() {
                max_state_error = max_state_error.max((g - w).abs());
                assert!(
                    (g - w).abs() <= 1e-12,
                    "episode {seed} step {t}: state[{k}] {g} vs {w}"
                );
            }
            assert_eq!(
                Some(got.reward),
                want["reward"].as_f64(),
                "episode {seed} step {t}"
            );
            assert_eq!(
                Some(got.terminated),
                want["terminated"].as_bool(),
                "episode {seed} step {t}: terminated"
            );
            assert_eq!(
                Some(got.truncated),
                want["truncated"].as_bool(),
                "episode {seed} step {t}: truncated"
            );
            total += got.reward;
            total_steps += 1;
        }
        assert_eq!(Some(total), episode["return"].as_f64(), "episode {seed}");
        let last = steps.last().expect("a step");
        if last["truncated"] == true {
            truncated_episodes += 1;
            assert_eq!(steps.len(), 500);
        }
        if last["terminated"] == true {
            terminated_episodes += 1;
        }
        // The episode is over: our port refuses further steps.
        assert_eq!(env.step(0), Err(EnvError::EpisodeOver), "episode {seed}");
    }
    // The recording holds both kinds of endings.
    assert!(truncated_episodes > 0 && terminated_episodes > 0);
    assert_eq!(truncated_episodes + terminated_episodes, episodes.len());
    eprintln!(
        "{} episodes, {total_steps} steps replayed ({terminated_episodes} terminated, \
         {truncated_episodes} truncated); largest state difference {max_state_error:e}",
        episodes.len()
    );
}
