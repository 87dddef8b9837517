//! Building environments by name: the built-in ones, and any a program registers.
//!
//! Like Gymnasium's `register`, [`register`] adds a name to the process-wide registry, after
//! which [`make`] builds it and everything that goes by name (the configuration's `env_name`,
//! training, evaluation, `Agent::load` of a checkpoint trained on it) works on it unchanged.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock, RwLock};

use crate::env::{EnvError, Environment};
use crate::{CartPole, Catch, ConnectFour, MountainCar, TicTacToe};

/// Builds a fresh environment (seeded later by `reset`).
pub type EnvFactory = Arc<dyn Fn() -> Box<dyn Environment> + Send + Sync>;

fn registered() -> &'static RwLock<BTreeMap<String, EnvFactory>> {
    static REGISTERED: OnceLock<RwLock<BTreeMap<String, EnvFactory>>> = OnceLock::new();
    REGISTERED.get_or_init(Default::default)
}

/// Make `name` build environments with `factory` in this process. A built-in name cannot be
/// taken ([`EnvError::NameTaken`]); registering a name again replaces its factory.
pub fn register(
    name: &str,
    factory: impl Fn() -> Box<dyn Environment> + Send + Sync + 'static,
) -> Result<(), EnvError> {
    if NAMES.contains(&name) || name.trim().is_empty() {
        return Err(EnvError::NameTaken {
            name: name.to_string(),
        });
    }
    registered()
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(name.to_string(), Arc::new(factory));
    Ok(())
}

/// Every name [`make`] understands: the built-in ones, then the registered ones.
pub fn all_names() -> Vec<String> {
    let custom = registered().read().unwrap_or_else(|e| e.into_inner());
    NAMES
        .iter()
        .map(|n| n.to_string())
        .chain(custom.keys().cloned())
        .collect()
}

const NAMES: &[&str] = &[
    "CartPole-v1",
    "MountainCar-v0",
    "TicTacToe",
    "ConnectFour",
    "Catch",
    "MinAtar/Breakout-v1",
    "MinAtar/Asterix-v1",
    "MinAtar/Freeway-v1",
    "MinAtar/Seaquest-v1",
    "MinAtar/SpaceInvaders-v1",
    "MinAtar/Breakout-v0",
    "MinAtar/Asterix-v0",
    "MinAtar/Freeway-v0",
    "MinAtar/Seaquest-v0",
    "MinAtar/SpaceInvaders-v0",
];

/// The names of the built-in environments ([`all_names`] adds the registered ones).
pub fn names() -> &'static [&'static str] {
    NAMES
}

/// Names of Gymnasium environments made in Python start with this (`gymnasium:Acrobot-v1`);
/// they need the `python` feature.
pub const GYMNASIUM_PREFIX: &str = "gymnasium:";

/// Keyword arguments of `gymnasium.make`, as JSON.
pub type Kwargs = serde_json::Map<String, serde_json::Value>;

/// What builds an environment: its name and, for `gymnasium:` names, the keyword arguments
/// of `gymnasium.make` (empty for every other environment), as Gymnasium's own `EnvSpec`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EnvSpec {
    /// A name [`make`] understands.
    pub name: String,
    /// Keyword arguments for `gymnasium.make`; must be empty for other names.
    pub kwargs: Kwargs,
    /// Observations of this many newest frames ([`crate::FrameStack`]); 0 and 1: single
    /// frames, the environment itself.
    pub frame_stack: usize,
}

impl EnvSpec {
    /// A name without keyword arguments.
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            kwargs: Kwargs::new(),
            frame_stack: 1,
        }
    }

    /// A name with keyword arguments for `gymnasium.make`.
    pub fn with_kwargs(name: impl Into<String>, kwargs: Kwargs) -> Self {
        Self {
            name: name.into(),
            kwargs,
            frame_stack: 1,
        }
    }

    /// The same environment with observations of its `frames` newest frames.
    pub fn with_frame_stack(self, frames: usize) -> Self {
        Self {
            frame_stack: frames,
            ..self
        }
    }

    /// A new environment of this spec ([`make_with`]), inside a [`crate::FrameStack`] when
    /// `frame_stack` is above 1.
    pub fn make(&self) -> Result<Box<dyn Environment>, EnvError> {
        let env = make_with(&self.name, &self.kwargs)?;
        if self.frame_stack > 1 {
            Ok(Box::new(crate::FrameStack::new(env, self.frame_stack)?))
        } else {
            Ok(env)
        }
    }
}

impl From<&str> for EnvSpec {
    fn from(name: &str) -> Self {
        Self::named(name)
    }
}

/// [`make`] with keyword arguments, which only `gymnasium:` environments take
/// ([`EnvError::KwargsNotTaken`] for the others). A `gymnasium:` name that a program has
/// registered (the Python package registers the environment objects it is given) is made by
/// its factory when no arguments are given.
pub fn make_with(name: &str, kwargs: &Kwargs) -> Result<Box<dyn Environment>, EnvError> {
    if kwargs.is_empty() {
        return make(name);
    }
    if !name.starts_with(GYMNASIUM_PREFIX) {
        return Err(EnvError::KwargsNotTaken {
            name: name.to_string(),
            kwargs: serde_json::Value::Object(kwargs.clone()).to_string(),
        });
    }
    make_gymnasium(name, kwargs)
}

/// `gymnasium:ID` made by `gymnasium.make(ID, **kwargs)` in Python.
#[cfg(feature = "python")]
fn make_gymnasium(name: &str, kwargs: &Kwargs) -> Result<Box<dyn Environment>, EnvError> {
    let id = &name[GYMNASIUM_PREFIX.len()..];
    Ok(Box::new(crate::gymnasium::GymnasiumEnv::make(id, kwargs)?))
}

/// Without the `python` feature: an error that names the build it needs.
#[cfg(not(feature = "python"))]
fn make_gymnasium(name: &str, _kwargs: &Kwargs) -> Result<Box<dyn Environment>, EnvError> {
    Err(EnvError::PythonNotBuilt {
        name: name.to_string(),
    })
}

/// A new environment by name (see [`all_names`]), reset with seed 0 for the built-in ones.
/// `gymnasium:ID` makes Gymnasium's `ID` in Python (the `python` feature) unless a program
/// has registered that name.
///
/// An unknown name gives [`EnvError::UnknownEnvironment`], whose message lists the known names.
pub fn make(name: &str) -> Result<Box<dyn Environment>, EnvError> {
    Ok(match name {
        "CartPole-v1" => Box::new(CartPole::new()),
        "MountainCar-v0" => Box::new(MountainCar::new()),
        "TicTacToe" => Box::new(TicTacToe::new()),
        "ConnectFour" => Box::new(ConnectFour::new()),
        "MinAtar/Breakout-v1" => Box::new(crate::Breakout::new()),
        "MinAtar/Asterix-v1" => Box::new(crate::Asterix::new()),
        "MinAtar/Freeway-v1" => Box::new(crate::Freeway::new()),
        "MinAtar/Seaquest-v1" => Box::new(crate::Seaquest::new()),
        "MinAtar/SpaceInvaders-v1" => Box::new(crate::SpaceInvaders::new()),
        "MinAtar/Breakout-v0" => Box::new(crate::Breakout::with_all_actions()),
        "MinAtar/Asterix-v0" => Box::new(crate::Asterix::with_all_actions()),
        "MinAtar/Freeway-v0" => Box::new(crate::Freeway::with_all_actions()),
        "MinAtar/Seaquest-v0" => Box::new(crate::Seaquest::with_all_actions()),
        "MinAtar/SpaceInvaders-v0" => Box::new(crate::SpaceInvaders::with_all_actions()),
        "Catch" => Box::new(Catch::new()),
        _ => {
            let factory = registered()
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .get(name)
                .cloned();
            match factory {
                Some(factory) => factory(),
                None if name.starts_with(GYMNASIUM_PREFIX) => {
                    return make_gymnasium(name, &Kwargs::new())
                }
                None => {
                    return Err(EnvError::UnknownEnvironment {
                        name: name.to_string(),
                        known: all_names(),
                    })
                }
            }
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
    fn a_registered_environment_is_made_by_name_and_listed() {
        register("registry-test-catch", || Box::new(Catch::new())).unwrap();
        assert!(all_names().iter().any(|n| n == "registry-test-catch"));
        let env = make("registry-test-catch").unwrap();
        assert_eq!(env.action_space().n(), Some(3));
        let err = register("CartPole-v1", || Box::new(Catch::new())).unwrap_err();
        assert!(err.to_string().contains("CartPole-v1"), "{err}");
    }

    #[test]
    fn keyword_arguments_are_for_gymnasium_environments_only() {
        let mut kwargs = Kwargs::new();
        kwargs.insert("size".into(), serde_json::json!(7));
        let err = make_with("Catch", &kwargs).unwrap_err();
        assert!(matches!(err, EnvError::KwargsNotTaken { .. }), "{err}");
        assert!(err.to_string().contains("\"size\":7"), "{err}");
        // Without arguments a spec makes what the name makes.
        let env = EnvSpec::named("Catch").make().unwrap();
        assert_eq!(env.name(), "Catch");
    }

    #[cfg(not(feature = "python"))]
    #[test]
    fn a_gymnasium_name_without_the_python_feature_says_which_build_it_needs() {
        let err = make("gymnasium:Acrobot-v1").unwrap_err();
        assert!(matches!(err, EnvError::PythonNotBuilt { .. }), "{err}");
        assert!(err.to_string().contains("--features python"), "{err}");
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
            EnvError::UnknownEnvironment { ref known, .. } if known.len() >= names().len()
        ));
    }
}
