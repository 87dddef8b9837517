//! Replays MinAtar trajectories recorded from the `minatar` package 1.0.15 (see
//! `tests/data/README.md`): seeded the same way, given the same actions, each game must give
//! the same reward, terminal flag and observation at every step, its sticky actions and other
//! random draws included (the games draw from a reproduction of numpy's stream).

use cumind_envs::{Asterix, Breakout, Environment, Freeway, Seaquest, SpaceInvaders};
use serde_json::Value;

fn reference(game: &str) -> Value {
    let path = format!(
        "{}/tests/data/minatar/{game}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
    serde_json::from_str(&text).expect("valid JSON")
}

/// The indices of the set cells of an observation (the recording's form).
fn set_cells(observation: &[f32]) -> Vec<u64> {
    observation
        .iter()
        .enumerate()
        .filter(|(_, &v)| v == 1.0)
        .map(|(i, _)| i as u64)
        .collect()
}

fn indices(v: &Value) -> Vec<u64> {
    v.as_array()
        .expect("an array of indices")
        .iter()
        .map(|i| i.as_u64().expect("an index"))
        .collect()
}

/// Plays every recorded run of `game` on `env` (reset with the run's seed, then reset after
/// each ended episode, as the recording did) and returns the steps compared.
fn replay(game: &str, env: &mut dyn Environment) -> usize {
    let data = reference(game);
    let mut compared = 0;
    for run in data["runs"].as_array().unwrap() {
        let seed = run["seed"].as_u64().unwrap();
        let mut observation = env.reset(Some(seed)).0;
        for (e, episode) in run["episodes"].as_array().unwrap().iter().enumerate() {
            if e > 0 {
                observation = env.reset(None).0;
            }
            assert_eq!(
                set_cells(&observation),
                indices(&episode["initial"]),
                "{game}, seed {seed}, episode {e}: the state after reset"
            );
            for (t, step) in episode["steps"].as_array().unwrap().iter().enumerate() {
                let action = step[0].as_u64().unwrap() as usize;
                let out = env.step(action).unwrap();
                let at = format!("{game}, seed {seed}, episode {e}, step {t}");
                assert_eq!(out.reward, step[1].as_f64().unwrap(), "{at}: reward");
                assert_eq!(out.terminated, step[2].as_bool().unwrap(), "{at}: terminal");
                assert_eq!(
                    set_cells(&out.observation),
                    indices(&step[3]),
                    "{at}: state"
                );
                assert!(out.observation.iter().all(|&v| v == 0.0 || v == 1.0));
                compared += 1;
            }
        }
    }
    compared
}

#[test]
fn breakout_replays_the_package_s_trajectories() {
    let steps = replay("breakout", &mut Breakout::new());
    assert!(steps > 300, "{steps} steps compared");
}

#[test]
fn asterix_replays_the_package_s_trajectories() {
    let steps = replay("asterix", &mut Asterix::new());
    assert!(steps > 1000, "{steps} steps compared");
}

#[test]
fn freeway_replays_the_package_s_trajectories() {
    let steps = replay("freeway", &mut Freeway::new());
    assert!(steps > 5000, "{steps} steps compared");
}

#[test]
fn space_invaders_replays_the_package_s_trajectories() {
    let steps = replay("space_invaders", &mut SpaceInvaders::new());
    assert!(steps > 1000, "{steps} steps compared");
}

#[test]
fn seaquest_replays_the_package_s_trajectories() {
    let steps = replay("seaquest", &mut Seaquest::new());
    assert!(steps > 1000, "{steps} steps compared");
}
