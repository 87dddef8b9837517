//! Replays MinAtar trajectories recorded from the `minatar` package 1.0.15 (see
//! `tests/data/README.md`): seeded the same way, given the same actions, each game must give
//! the same reward, terminal flag and observation at every step, its sticky actions and other
//! random draws included (the games draw from a reproduction of numpy's stream). The recordings
//! use the package's own action numbers, which are the actions of the `-v0` environments (all
//! six); a `-v1` environment maps its minimal action set onto them.

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
    let steps = replay("breakout", &mut Breakout::with_all_actions());
    assert!(steps > 300, "{steps} steps compared");
}

#[test]
fn asterix_replays_the_package_s_trajectories() {
    let steps = replay("asterix", &mut Asterix::with_all_actions());
    assert!(steps > 1000, "{steps} steps compared");
}

#[test]
fn freeway_replays_the_package_s_trajectories() {
    let steps = replay("freeway", &mut Freeway::with_all_actions());
    assert!(steps > 5000, "{steps} steps compared");
}

#[test]
fn space_invaders_replays_the_package_s_trajectories() {
    let steps = replay("space_invaders", &mut SpaceInvaders::with_all_actions());
    assert!(steps > 1000, "{steps} steps compared");
}

#[test]
fn seaquest_replays_the_package_s_trajectories() {
    let steps = replay("seaquest", &mut Seaquest::with_all_actions());
    assert!(steps > 1000, "{steps} steps compared");
}

/// `MinAtar/<Game>-v1` takes the package's minimal action set (as the package registers it
/// with Gymnasium): its action `i` is the `-v0` action `MINIMAL_ACTIONS[i]`, step for step,
/// sticky actions included.
#[test]
fn the_v1_games_take_the_minimal_action_sets() {
    use cumind_envs::minatar::{Game, MinAtar};
    fn same<G: Game>(sizes: usize) {
        let (mut v1, mut v0) = (MinAtar::<G>::new(), MinAtar::<G>::with_all_actions());
        assert_eq!(v1.action_space().n(), Some(sizes), "{}", v1.name());
        assert_eq!(v0.action_space().n(), Some(6));
        assert!(v1.name().ends_with("-v1") && v0.name().ends_with("-v0"));
        for seed in 0..3 {
            assert_eq!(v1.reset(Some(seed)).0, v0.reset(Some(seed)).0);
            for t in 0..300 {
                let i = (t * 7 + seed as usize) % sizes;
                let (a, b) = (v1.step(i).unwrap(), v0.step(G::MINIMAL_ACTIONS[i]).unwrap());
                assert_eq!(a.observation, b.observation, "{} step {t}", v1.name());
                assert_eq!((a.reward, a.terminated), (b.reward, b.terminated));
                if a.terminated {
                    break;
                }
            }
        }
    }
    same::<cumind_envs::minatar::BreakoutGame>(3);
    same::<cumind_envs::minatar::AsterixGame>(5);
    same::<cumind_envs::minatar::FreewayGame>(3);
    same::<cumind_envs::minatar::SeaquestGame>(6);
    same::<cumind_envs::minatar::SpaceInvadersGame>(4);
}
