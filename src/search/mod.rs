//! Batched Monte Carlo tree search over a learned [`Model`] (MuZero pUCT or Gumbel MuZero).
//!
//! One search runs `B` independent trees in lockstep. The roots come from one
//! [`Model::initial_inference`] call; then every simulation descends each tree to an
//! unexpanded child, makes **one** [`Model::recurrent_inference`] call for the whole batch
//! (`new_node = simulation + 1`, the same index in every tree), expands the new nodes and backs
//! their values up. Trees are flat preallocated arenas ([`tree::Tree`]) reused across searches
//! by a [`Searcher`]; nothing is allocated inside the simulation loop. Large batches run the
//! per-tree work on the rayon pool (results do not depend on it).
//!
//! Conventions:
//! - **Perspective**: values are stored from the point of view of the player to move at each
//!   node. With `two_player`, players alternate at every level: a child's value is negated when
//!   seen from its parent, `Q = r + discount * (-v_child)`, and the backed-up return is
//!   `G_parent = r + discount * (-G_child)`. Rewards are from the perspective of the player who
//!   acted.
//! - **Visits**: every expanded node counts its expansion (with the model's value) as its first
//!   visit, so a node's visit count is `1 + sum of its children's visits` (as in mctx).
//! - **Root value**: `value_sum / visits` at the root, i.e. the mean of the initial value
//!   prediction and the `num_simulations` backed-up returns, from the root player's perspective.
//! - **Legal masks** apply at the root only; inside the learned model every action is allowed
//!   (as in MuZero). An illegal root action is never selected, visited nor given policy mass.
//! - **Noise**: with `add_noise`, pUCT mixes Dirichlet noise into the legal root priors; Gumbel
//!   samples its root Gumbel noise (without `add_noise` the Gumbel noise is 0: a deterministic
//!   search for evaluation). Gumbel never uses Dirichlet noise.
//! - **Ties** go to the lowest action index everywhere (deterministic given the noise).
//!
//! See [`puct`] and [`gumbel`] for the selection rules.
//!
//! Layout, one idea per file: [`tree`] (the arena), [`puct`] and [`gumbel`] (selection rules),
//! [`min_max`] (Q normalisation), [`noise`] (root exploration noise), [`targets`] (root policy
//! targets), [`action`] (choosing the action to play); `simulation.rs` holds one tree's share of
//! a simulation (descend, expand, back up). The configuration ([`SearchConfig`],
//! `config.rs`), the batched searcher ([`Searcher`], `searcher.rs`), its output
//! ([`SearchOutput`], `output.rs`) and its errors ([`SearchError`], `error.rs`) are re-exported
//! here.
//!
//! [`Model`]: crate::model::Model
//! [`Model::initial_inference`]: crate::model::Model::initial_inference
//! [`Model::recurrent_inference`]: crate::model::Model::recurrent_inference

pub mod action;
mod config;
mod error;
pub mod gumbel;
pub mod min_max;
pub mod noise;
mod output;
pub mod puct;
mod searcher;
mod simulation;
pub(crate) mod symmetric;
pub mod targets;
pub mod tree;

#[cfg(test)]
mod tests;

pub use action::{choose_actions, choose_actions_in_games, select_action};
pub use config::{SearchConfig, SearchPolicy, UnvisitedValue};
pub use error::SearchError;
pub use output::SearchOutput;
pub use searcher::{run_search, SearchInput, Searcher};
