//! Gymnasium-style environments for CuMind.
//!
//! Every environment implements [`Environment`]: discrete actions, a flat `f32` observation laid
//! out row-major in the shape of its [`Space::Box`] observation space, `reset(seed)` and
//! `step(action)` returning a [`StepResult`] with separate `terminated` and `truncated` flags.
//!
//! | name               | type            | players | actions | observation |
//! |--------------------|-----------------|---------|---------|-------------|
//! | `"CartPole-v1"`    | [`CartPole`]    | 1       | 2       | `[4]`       |
//! | `"MountainCar-v0"` | [`MountainCar`] | 1       | 3       | `[2]`       |
//! | `"TicTacToe"`      | [`TicTacToe`]   | 2       | 9       | `[3, 3, 3]` |
//! | `"ConnectFour"`    | [`ConnectFour`] | 2       | 7       | `[3, 6, 7]` |
//! | `"Catch"`          | [`Catch`]       | 1       | 3       | `[5, 5]`    |
//!
//! CartPole and MountainCar follow Gymnasium 1.4.0 (CartPole is checked step for step against
//! recorded Gymnasium episodes). In the two-player games the observation is from the point of
//! view of the player to move and the reward from the point of view of the player who just moved.
//!
//! With the `python` feature, `gymnasium:ID` names are Gymnasium's own environments, made and
//! stepped in Python (the `gymnasium` module: any discrete-action environment, or an
//! environment object).
//!
//! [`make`] builds an environment by name, [`FrameStack`] makes its observations the newest
//! few frames, [`VectorEnv`] steps several in parallel with automatic resets, and
//! [`check_env`] plays one with random legal actions and reports every rule of the
//! [`Environment`] contract it breaks.
//!
//! ```
//! use cumind_envs::{make, Environment};
//!
//! let mut env = make("CartPole-v1").unwrap();
//! let (mut obs, _info) = env.reset(Some(42));
//! let mut total = 0.0;
//! loop {
//!     // Push the cart toward the side the pole leans to.
//!     let action = usize::from(3.0 * obs[2] + obs[3] > 0.0);
//!     let step = env.step(action).unwrap();
//!     total += step.reward;
//!     obs = step.observation;
//!     if step.terminated || step.truncated {
//!         break;
//!     }
//! }
//! assert!(total > 100.0);
//! ```

pub mod cartpole;
pub mod catch;
pub mod check;
pub mod connect_four;
pub mod env;
pub mod frame_stack;
#[cfg(feature = "python")]
pub mod gymnasium;
pub mod minatar;
pub mod mountain_car;
pub mod registry;
pub mod tictactoe;
pub mod vector;

pub use cartpole::CartPole;
pub use catch::Catch;
pub use check::{check_env, check_env_with, CheckOptions, CheckReport, Violation};
pub use connect_four::ConnectFour;
pub use env::{board_action_planes, EnvError, Environment, Info, Space, StepResult, Symmetry};
pub use frame_stack::FrameStack;
pub use minatar::{Asterix, Breakout, Freeway, Seaquest, SpaceInvaders};
pub use mountain_car::MountainCar;
pub use registry::{
    all_names, make, make_with, names, register, EnvFactory, EnvSpec, Kwargs, GYMNASIUM_PREFIX,
};
pub use tictactoe::TicTacToe;
pub use vector::{EpisodeStats, VectorEnv, VectorStep};
