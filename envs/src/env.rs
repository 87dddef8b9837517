//! The [`Environment`] trait and the types it speaks in: [`Space`], [`StepResult`], [`Info`]
//! and [`EnvError`].

use std::collections::BTreeMap;

/// Extra per-step or per-reset information, keyed by name (for example `"winner"` at the end of
/// a board game). Most environments leave it empty.
pub type Info = BTreeMap<String, f64>;

/// The shape and range of actions or observations.
#[derive(Debug, Clone, PartialEq)]
pub enum Space {
    /// The integers `0..n`.
    Discrete {
        /// Number of values.
        n: usize,
    },
    /// A box of `f32` values of the given shape, element `i` (in row-major order) within
    /// `[low[i], high[i]]`. `low` and `high` hold one bound per element (`flat_len` of them).
    Box {
        /// Lower bound of each element.
        low: Vec<f32>,
        /// Upper bound of each element.
        high: Vec<f32>,
        /// Dimensions, outermost first.
        shape: Vec<usize>,
    },
}

impl Space {
    /// A box with the same bounds for every element.
    pub fn uniform_box(low: f32, high: f32, shape: Vec<usize>) -> Space {
        let len = shape.iter().product();
        Space::Box {
            low: vec![low; len],
            high: vec![high; len],
            shape,
        }
    }

    /// The number of values of a discrete space; `None` for a box.
    pub fn n(&self) -> Option<usize> {
        match self {
            Space::Discrete { n } => Some(*n),
            Space::Box { .. } => None,
        }
    }

    /// The shape of one element of the space: empty (a scalar) for a discrete space.
    pub fn shape(&self) -> Vec<usize> {
        match self {
            Space::Discrete { .. } => Vec::new(),
            Space::Box { shape, .. } => shape.clone(),
        }
    }

    /// How many numbers one element holds once flattened: the product of the shape (1 for a
    /// discrete space).
    pub fn flat_len(&self) -> usize {
        self.shape().iter().product()
    }

    /// Whether `x` (flattened, row-major) lies in the space. For a discrete space `x` must be a
    /// single whole number in `0..n`. NaN is never contained.
    pub fn contains(&self, x: &[f32]) -> bool {
        match self {
            Space::Discrete { n } => {
                x.len() == 1 && x[0] >= 0.0 && x[0].fract() == 0.0 && (x[0] as f64) < *n as f64
            }
            Space::Box { low, high, .. } => {
                x.len() == self.flat_len()
                    && x.len() == low.len()
                    && x.len() == high.len()
                    && x.iter()
                        .zip(low.iter().zip(high))
                        .all(|(v, (lo, hi))| *lo <= *v && *v <= *hi)
            }
        }
    }

    /// Whether `action` is a value of this (discrete) space; always false for a box.
    pub fn contains_action(&self, action: usize) -> bool {
        matches!(self, Space::Discrete { n } if action < *n)
    }
}

/// What one call to [`Environment::step`] returns.
#[derive(Debug, Clone, PartialEq)]
pub struct StepResult {
    /// The observation after the step, flattened row-major in the observation space's shape.
    pub observation: Vec<f32>,
    /// The reward for the step (for two-player games: from the point of view of the player who
    /// just moved).
    pub reward: f64,
    /// The episode reached a terminal state.
    pub terminated: bool,
    /// The episode was cut off by a time limit.
    pub truncated: bool,
    /// Extra information.
    pub info: Info,
}

/// Everything that can go wrong when driving an environment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvError {
    /// The action is in range but not allowed in the current state (an occupied square, a full
    /// column).
    #[error("illegal action {action}: the legal actions are {legal:?}")]
    IllegalAction {
        /// The rejected action.
        action: usize,
        /// The actions that are legal now.
        legal: Vec<usize>,
    },
    /// The action is not in the action space `0..n`.
    #[error("action {action} is out of range: the action space is 0..{n}")]
    ActionOutOfRange {
        /// The rejected action.
        action: usize,
        /// The size of the action space.
        n: usize,
    },
    /// `step` was called after the episode terminated or was truncated.
    #[error("the episode is over (terminated or truncated): call reset before stepping again")]
    EpisodeOver,
    /// [`crate::make`] was given a name it does not know.
    #[error("unknown environment {name:?}; the known environments are: {}", known.join(", "))]
    UnknownEnvironment {
        /// The name asked for.
        name: String,
        /// The names that exist.
        known: Vec<String>,
    },
    /// [`crate::FrameStack`] was asked for no frames, or for an environment whose
    /// observations are not a box of at least one dimension.
    #[error("cannot stack {frames} frames of {name}: the number of frames must be at least 1 and the observations a box")]
    InvalidFrameStack {
        /// The environment's name.
        name: String,
        /// The number of frames asked for.
        frames: usize,
    },
    /// [`crate::register`] was asked for a built-in (or empty) name.
    #[error("cannot register an environment as \"{name}\": the name is built in (or empty); choose another")]
    NameTaken {
        /// The name asked for.
        name: String,
    },
    /// [`crate::VectorEnv::step`] was given a different number of actions than it has
    /// environments.
    #[error("expected {expected} actions (one per environment), got {got}")]
    ActionCountMismatch {
        /// The number of environments.
        expected: usize,
        /// The number of actions given.
        got: usize,
    },
    /// Keyword arguments were given for an environment that takes none (only `gymnasium:`
    /// environments take them, as `gymnasium.make` does).
    #[error("{name} takes no keyword arguments (only gymnasium: environments do); got {kwargs}")]
    KwargsNotTaken {
        /// The environment's name.
        name: String,
        /// The arguments given, as JSON.
        kwargs: String,
    },
    /// A `gymnasium:` name in a build without the `python` feature.
    #[error(
        "{name} is a Gymnasium environment, which needs a build with the `python` feature \
         (cargo build --release --features python)"
    )]
    PythonNotBuilt {
        /// The name asked for.
        name: String,
    },
    /// The environment's spaces are ones CuMind cannot learn on (it needs a discrete action
    /// space, and a box or discrete observation space).
    #[error("{name}: {problem}")]
    UnsupportedSpace {
        /// The environment's name.
        name: String,
        /// Which space, what it is, and what CuMind needs.
        problem: String,
    },
    /// Python raised an exception inside the environment (or while making it).
    #[error("{name}: Python raised an exception in {during}:\n{traceback}")]
    Python {
        /// The environment's name.
        name: String,
        /// The call that raised it (`gymnasium.make`, `reset`, `step`, ...).
        during: String,
        /// The exception with its traceback, as Python prints it.
        traceback: String,
    },
    /// A [`crate::VectorEnv`] was asked to hold no environments.
    #[error("a vector environment needs at least one environment")]
    EmptyVectorEnv,
    /// The environments given to a [`crate::VectorEnv`] do not share their spaces.
    #[error(
        "environment {index} ({got}) does not have the same action and observation spaces as \
         environment 0 ({expected})"
    )]
    IncompatibleEnvironments {
        /// The index of the first environment that differs from environment 0.
        index: usize,
        /// The name of environment 0.
        expected: String,
        /// The name of the differing environment.
        got: String,
    },
}

/// A Gymnasium-style environment with a discrete action space and a flat `f32` observation.
///
/// Every environment in this crate is ready to step as soon as it is constructed (it has been
/// reset once with its default seed). After a step returns `terminated` or `truncated`, further
/// steps fail with [`EnvError::EpisodeOver`] until [`Environment::reset`] is called. A step that
/// returns an error leaves the environment unchanged.
pub trait Environment: Send {
    /// The registry name, such as `"CartPole-v1"`.
    fn name(&self) -> &str;

    /// Starts a new episode and returns its first observation. `Some(seed)` reseeds the
    /// environment's random number generator (`StdRng::seed_from_u64(seed)`) first; `None`
    /// continues the current generator.
    fn reset(&mut self, seed: Option<u64>) -> (Vec<f32>, Info);

    /// Applies `action`. On error the environment is unchanged.
    fn step(&mut self, action: usize) -> Result<StepResult, EnvError>;

    /// The action space; always [`Space::Discrete`] in this crate.
    fn action_space(&self) -> Space;

    /// The observation space; always [`Space::Box`] in this crate.
    fn observation_space(&self) -> Space;

    /// The number of players: 1, or 2 for board games.
    fn num_players(&self) -> usize {
        1
    }

    /// The player to move now (0 or 1); always 0 for single-player environments.
    fn to_play(&self) -> usize {
        0
    }

    /// The actions allowed now, in increasing order.
    fn legal_actions(&self) -> Vec<usize> {
        (0..self.action_space().n().unwrap_or(0)).collect()
    }

    /// One flag per action of the action space: true where the action is legal now.
    fn legal_action_mask(&self) -> Vec<bool> {
        let n = self.action_space().n().unwrap_or(0);
        let mut mask = vec![false; n];
        for a in self.legal_actions() {
            if a < n {
                mask[a] = true;
            }
        }
        mask
    }

    /// The time limit after which an episode is truncated; `None` if there is none (the
    /// episode always ends by itself).
    fn max_episode_steps(&self) -> Option<usize>;

    /// A human-readable text picture of the current state.
    fn render(&self) -> String;

    /// A boxed copy of the environment, including its state and random number generator.
    fn clone_box(&self) -> Box<dyn Environment>;

    /// The game's symmetries other than the identity (rotations and reflections of a board):
    /// transformations of observations and actions under which the rules, rewards and values
    /// are unchanged. Training may apply them to replayed positions (data augmentation). None
    /// by default.
    fn symmetries(&self) -> Vec<Symmetry> {
        Vec::new()
    }

    /// Where each action acts on the board, for games whose observation is `[planes, rows,
    /// cols]` boards: `[actions, rows, cols]`, 1 on the cells action `a` concerns (its column,
    /// its cell) and 0 elsewhere (see [`board_action_planes`]). A conv network may read the
    /// action it is given as these planes instead of constant ones
    /// (`network_architecture.spatial_actions`). None by default: the actions have no place
    /// on the board.
    fn action_planes(&self) -> Option<Vec<f32>> {
        None
    }
}

/// The action planes (`[actions, rows, cols]`) of a board of `rows x cols` cells whose actions
/// are its cells (`actions == rows * cols`, row by row) or its columns (`actions == cols`), the
/// two kinds [`Symmetry::of_board`] knows: 1 on the action's cell or column, 0 elsewhere.
///
/// # Panics
/// If `actions` is neither.
pub fn board_action_planes(rows: usize, cols: usize, actions: usize) -> Vec<f32> {
    let cells = rows * cols;
    assert!(
        actions == cells || actions == cols,
        "a board's actions are its {cells} cells or its {cols} columns, not {actions}"
    );
    let mut planes = vec![0f32; actions * cells];
    for (a, plane) in planes.chunks_exact_mut(cells).enumerate() {
        for (i, x) in plane.iter_mut().enumerate() {
            let on = if actions == cells {
                i == a
            } else {
                i % cols == a
            };
            *x = f32::from(u8::from(on));
        }
    }
    planes
}

/// A symmetry of a game, as a signed permutation: the transformed observation is
/// `new[i] = old[observation[i]]`, negated where `negate[i]`, and action `a` becomes
/// `actions[a]` (so a policy becomes `new[actions[a]] = old[a]`). A board's rotations and
/// reflections only permute; a physical mirror (CartPole's left-right) also flips signs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symmetry {
    /// `[observation length]`: where each transformed element comes from.
    pub observation: Vec<usize>,
    /// `[observation length]`: whether each transformed element changes sign.
    pub negate: Vec<bool>,
    /// `[number of actions]`: where each action goes.
    pub actions: Vec<usize>,
}

impl Symmetry {
    /// The symmetry of `planes` square or rectangular boards of `rows x cols` cells (an
    /// observation of `[planes, rows, cols]`) that moves cell `(r, c)` to `map(r, c)`, where
    /// actions are cells (`actions == rows * cols`) or columns (`actions == cols`, the map must
    /// then keep columns together).
    pub fn of_board(
        planes: usize,
        rows: usize,
        cols: usize,
        actions: usize,
        map: impl Fn(usize, usize) -> (usize, usize),
    ) -> Symmetry {
        let cells = rows * cols;
        let mut observation = vec![0; planes * cells];
        for r in 0..rows {
            for c in 0..cols {
                let (nr, nc) = map(r, c);
                for p in 0..planes {
                    observation[p * cells + nr * cols + nc] = p * cells + r * cols + c;
                }
            }
        }
        let actions = if actions == cells {
            (0..cells)
                .map(|a| {
                    let (nr, nc) = map(a / cols, a % cols);
                    nr * cols + nc
                })
                .collect()
        } else {
            (0..cols).map(|c| map(0, c).1).collect()
        };
        Symmetry {
            negate: vec![false; observation.len()],
            observation,
            actions,
        }
    }

    /// The transformed value of element `i` of `observation`.
    pub fn element(&self, observation: &[f32], i: usize) -> f32 {
        let x = observation[self.observation[i]];
        if self.negate[i] {
            -x
        } else {
            x
        }
    }

    /// `observation` transformed.
    pub fn apply_to_observation(&self, observation: &[f32]) -> Vec<f32> {
        (0..self.observation.len())
            .map(|i| self.element(observation, i))
            .collect()
    }
}

impl Clone for Box<dyn Environment> {
    fn clone(&self) -> Self {
        self.clone_box()
    }
}

impl std::fmt::Debug for dyn Environment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Environment")
            .field("name", &self.name())
            .finish_non_exhaustive()
    }
}

/// Checks that `action` lies in `0..n`.
pub(crate) fn check_range(action: usize, n: usize) -> Result<(), EnvError> {
    if action < n {
        Ok(())
    } else {
        Err(EnvError::ActionOutOfRange { action, n })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A board's action planes mark the action's column or cell, and a game's symmetries move
    /// the plane of action `a` onto the plane of the action `a` becomes.
    #[test]
    fn action_planes_mark_the_actions_place_and_follow_the_symmetries() {
        let columns = board_action_planes(2, 3, 3);
        assert_eq!(
            columns,
            [
                [1., 0., 0., 1., 0., 0.],
                [0., 1., 0., 0., 1., 0.],
                [0., 0., 1., 0., 0., 1.]
            ]
            .concat()
        );
        let cells = board_action_planes(2, 2, 4);
        for a in 0..4 {
            let plane = &cells[a * 4..(a + 1) * 4];
            assert_eq!(plane.iter().sum::<f32>(), 1.0);
            assert_eq!(plane[a], 1.0, "action {a} is cell {a}");
        }
        let games: [Box<dyn Environment>; 2] = [
            Box::new(crate::ConnectFour::new()),
            Box::new(crate::TicTacToe::new()),
        ];
        for env in games {
            let planes = env.action_planes().expect("a board game has action planes");
            let shape = env.observation_space().shape();
            let cells = shape[1] * shape[2];
            let actions = env.action_space().n().unwrap();
            assert_eq!(planes.len(), actions * cells);
            for symmetry in env.symmetries() {
                for a in 0..actions {
                    // The board's own cell map: plane `p` of the observation moves as any.
                    let moved: Vec<f32> = (0..cells)
                        .map(|i| planes[a * cells + symmetry.observation[i] % cells])
                        .collect();
                    let b = symmetry.actions[a];
                    assert_eq!(
                        moved,
                        planes[b * cells..(b + 1) * cells],
                        "action {a} -> {b}"
                    );
                }
            }
        }
    }

    #[test]
    fn discrete_space() {
        let s = Space::Discrete { n: 3 };
        assert_eq!(s.n(), Some(3));
        assert!(s.shape().is_empty());
        assert_eq!(s.flat_len(), 1);
        assert!(s.contains(&[2.0]));
        assert!(!s.contains(&[3.0]));
        assert!(!s.contains(&[1.5]));
        assert!(!s.contains(&[-1.0]));
        assert!(!s.contains(&[0.0, 1.0]));
        assert!(s.contains_action(0) && s.contains_action(2) && !s.contains_action(3));
    }

    #[test]
    fn box_space() {
        let s = Space::Box {
            low: vec![-1.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            high: vec![1.0, 1.0, 1.0, 1.0, 1.0, f32::INFINITY],
            shape: vec![2, 3],
        };
        assert_eq!(s.n(), None);
        assert_eq!(s.shape(), vec![2, 3]);
        assert_eq!(s.flat_len(), 6);
        assert!(s.contains(&[-1.0, 0.5, 1.0, 0.0, 0.0, 1e30]));
        assert!(!s.contains(&[-1.1, 0.5, 1.0, 0.0, 0.0, 0.0]));
        assert!(!s.contains(&[f32::NAN, 0.5, 1.0, 0.0, 0.0, 0.0]));
        assert!(!s.contains(&[0.0; 5]));
        assert!(!s.contains_action(0));
        assert_eq!(Space::uniform_box(0.0, 1.0, vec![3, 3, 3]).flat_len(), 27);
    }

    #[test]
    fn error_messages_name_their_values() {
        let e = EnvError::IllegalAction {
            action: 4,
            legal: vec![0, 1, 8],
        };
        let m = e.to_string();
        assert!(m.contains('4') && m.contains("[0, 1, 8]"), "{m}");
        let m = EnvError::ActionOutOfRange { action: 9, n: 7 }.to_string();
        assert!(m.contains('9') && m.contains('7'), "{m}");
        assert!(EnvError::EpisodeOver.to_string().contains("reset"));
        let m = EnvError::ActionCountMismatch {
            expected: 4,
            got: 3,
        }
        .to_string();
        assert!(m.contains('4') && m.contains('3'), "{m}");
    }
}
