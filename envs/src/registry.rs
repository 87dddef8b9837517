//! Building environments by name.

use crate::env::{EnvError, Environment};
use crate::{CartPole, Catch, ConnectFour, MountainCar, TicTacToe};

const NAMES: &[&str] = &[
    "CartPole-v1",
    "MountainCar-v0",
    "TicTacToe",
    "ConnectFour",
    "Catch",
];

/// The names [`make`] understands.
pub fn names() -> &'static [&'static str] {
    NAMES
}

/// A new environment by name (see [`names`]), reset with seed 0.
///
/// An unknown name gives [`EnvError::UnknownEnvironment`], whose message lists the known names.
pub fn make(name: &str) -> Result<Box<dyn Environment>, EnvError> {
    Ok(match name {
        "CartPole-v1" => Box::new(CartPole::new()),
        "MountainCar-v0" => Box::new(MountainCar::new()),
        "TicTacToe" => Box::new(TicTacToe::new()),
        "ConnectFour" => Box::new(ConnectFour::new()),
        "Catch" => Box::new(Catch::new()),
        _ => {
            return Err(EnvError::UnknownEnvironment {
                name: name.to_string(),
                known: NAMES.iter().map(|n| n.to_string()).collect(),
            })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Space;

    #[test]
    fn every_name_makes_its_environment() {
        for &name in names() {
            let mut env = make(name).unwrap();
            assert_eq!(env.name(), name);
            let n = env.action_space().n().expect("discrete actions");
            assert!(n >= 2);
            let space = env.observation_space();
            assert!(matches!(space, Space::Box { .. }));
            let (obs, _) = env.reset(Some(1));
            assert_eq!(obs.len(), space.flat_len(), "{name}");
            assert!(space.contains(&obs), "{name}");
            assert_eq!(env.legal_action_mask().len(), n);
            assert!(env.to_play() < env.num_players());
            let r = env.step(env.legal_actions()[0]).unwrap();
            assert_eq!(r.observation.len(), space.flat_len());
            assert!(!env.render().is_empty());
            // A clone carries the state and the generator.
            let mut copy = env.clone_box();
            let a = env.legal_actions()[0];
            assert_eq!(env.step(a), copy.step(a), "{name}");
            assert_eq!(env.reset(None), copy.reset(None), "{name}");
        }
    }

    #[test]
    fn unknown_name_lists_the_known_ones() {
        let err = make("Pong").unwrap_err();
        let message = err.to_string();
        assert!(message.contains("Pong"), "{message}");
        for name in names() {
            assert!(message.contains(name), "{message}");
        }
        assert!(matches!(
            err,
            EnvError::UnknownEnvironment { ref known, .. } if known.len() == names().len()
        ));
    }
}
