//! Prioritized replay buffer of whole games, with MuZero training targets.
//!
//! # Storage
//!
//! Games are kept whole, oldest first. Every transition (searched position `t` in `0..T`)
//! of every stored game owns one *slot* in a ring of `capacity` slots, except a segment's
//! padding ([`GameHistory::padding`]: the transitions after its cut, kept for the targets of
//! the positions before it and not sampled); a game occupies
//! consecutive slots (wrapping around the end of the ring). A sum tree over the slots holds
//! `priority^alpha` for each occupied slot and 0 for free ones, so sampling and priority
//! updates are `O(log capacity)`.
//!
//! When a new game does not fit, the oldest whole games are evicted until it does, so
//! `num_transitions() <= capacity` always holds. A game longer than the capacity is
//! rejected with [`ReplayError::GameTooLong`]; a game with no transitions is rejected with
//! [`ReplayError::EmptyGame`].
//!
//! # Priorities
//!
//! A stored priority is `|p| + per_epsilon`, where `p` is the value given to
//! [`ReplayBuffer::update_priorities`] (pass the absolute value error of the learner's
//! prediction). The initial priority of position `t` when a game is saved is
//! `|root_values[t] - z_t| + per_epsilon`, where `z_t` is the n-step value target of `t`
//! (the same number as `Batch::target_values` at `k = 0`). Positions are sampled with
//! probability `priority^alpha / sum`; `per_alpha == 0` is uniform sampling over positions.
//!
//! # Targets (MuZero appendix)
//!
//! For a sampled position `t` and `k in 0..=K`, let `u = t + k`:
//!
//! * `u < T`: `z_u = sum_{i < n, u+i < T} discount^i * s(u+i) * r_{u+i} + discount^(b-u) * s(b) * v_b`
//!   where the bootstrap position is `b = u + n` with `v_b = root_values[b]` if `u + n < T`;
//!   otherwise `b = T` with `v_b = final_value` for a truncated game, and no bootstrap term
//!   at all for a terminated game.
//! * `u == T`: terminated games: 0; truncated games: `final_value` (bootstrap at `b = T`
//!   with factor 1). Value mask 1 in both cases.
//! * `u > T`: terminated games: 0 with value mask 1 (absorbing state); truncated games:
//!   unknown, value mask 0 (all value numbers 0).
//!
//! `s(j)` is the two-player sign: `+1` when `config.two_player` is false or
//! `to_play[j] == to_play[u]`, else `-1`. Rewards `r_j` are stored from the perspective of
//! the player who moved at `j`, root values and `final_value` from the perspective of the
//! player to move at that observation (`to_play[j]`, resp. `to_play[T]`).
//!
//! The reward target at `k >= 1` is `r_{u-1}` as stored (perspective of the player who
//! moved at `u - 1`) when `u - 1 < T`, else 0; index `k = 0` is 0. Its mask is the value
//! mask at `k`. The policy target is `policies[u]` for `u < T` (policy mask 1), else
//! uniform (policy mask 0). The action at step `k < K` is `actions[u]` for `u < T`, else a
//! uniformly random action.
//!
//! With `td_age_transitions > 0` (off-policy correction), `n` is not `td_steps` but
//! `max(1, td_steps - age / td_age_transitions)`, where `age` is the number of transitions
//! stored after position `t` (integer division), for every `k` of the row.
//!
//! For bootstrapping with a target network, the batch also carries `reward_sums` (the
//! discounted reward sum alone), `bootstrap_discounts` (`discount^(b-u) * s(b)`, 0 when there
//! is no bootstrap) and `bootstrap_observations` (observation `b`, zeros when there is no
//! bootstrap), so that `target_values == reward_sums + bootstrap_discounts * stored_value(b)`
//! with [`GameHistory::stored_value`].
//!
//! # Files
//!
//! * `game.rs`: [`GameHistory`], one game as self-play records it, and its validation.
//! * `targets.rs`: the targets above, one batch row at a time.
//! * `sum_tree.rs`: the sum tree over the slots.
//! * `batch.rs`: [`Batch`], the training batch, and [`PositionId`].
//! * `buffer.rs`: [`ReplayBuffer`]: storage, eviction, sampling and priorities.
//! * `snapshot.rs`: the buffer's serialized form for checkpoints, checked on load.
//! * `reanalyse.rs`: fresh search policies for a sampled batch ([`reanalyse_policies`]).

use serde::{Deserialize, Serialize};
use thiserror::Error;

mod augment;
mod batch;
mod binary;
mod buffer;
mod game;
pub mod reanalyse;
mod snapshot;
mod sum_tree;
mod targets;
pub mod value_prefix;

pub use batch::{Batch, PositionId};
pub use buffer::ReplayBuffer;
pub use game::GameHistory;
pub use reanalyse::{reanalyse_policies, reanalysed_rows};

/// Everything that can go wrong with games, the buffer or its checkpoints.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum ReplayError {
    /// `sample` was called on a buffer with no games.
    #[error("the replay buffer is empty")]
    EmptyBuffer,
    /// Every stored priority is zero (only possible with `per_epsilon == 0`).
    #[error("all stored priorities are zero; nothing can be sampled")]
    ZeroPriorityMass,
    /// A game with no transitions was saved.
    #[error("game has no transitions")]
    EmptyGame,
    /// A segment's padding leaves no position to sample.
    #[error("segment padding of {padding} transitions leaves none of its {transitions} transitions to sample")]
    PaddingTooLong { padding: usize, transitions: usize },
    /// `obs_len` or `num_actions` of a game is zero.
    #[error("game has {what} == 0")]
    ZeroDimension { what: &'static str },
    /// One of the game's vectors does not have the length implied by `T`.
    #[error("inconsistent game: `{field}` has length {actual}, expected {expected}")]
    InconsistentLength {
        field: &'static str,
        expected: usize,
        actual: usize,
    },
    /// A stored action is not below `num_actions`.
    #[error("action {action} at step {step} is out of range (num_actions = {num_actions})")]
    ActionOutOfRange {
        step: usize,
        action: usize,
        num_actions: usize,
    },
    /// The game's observation length differs from the games already in the buffer.
    #[error("observation length mismatch: buffer has {expected}, game has {actual}")]
    ObsLenMismatch { expected: usize, actual: usize },
    /// The game's number of actions differs from the games already in the buffer.
    #[error("number of actions mismatch: buffer has {expected}, game has {actual}")]
    NumActionsMismatch { expected: usize, actual: usize },
    /// The game has more transitions than the whole buffer can hold.
    #[error("game has {len} transitions, more than the buffer capacity of {capacity}")]
    GameTooLong { len: usize, capacity: usize },
    /// `update_priorities` got different numbers of ids and priorities.
    #[error("got {ids} position ids but {priorities} priorities")]
    IdsPrioritiesMismatch { ids: usize, priorities: usize },
    /// A priority is NaN or infinite.
    #[error("priority {value} is not finite")]
    InvalidPriority { value: f32 },
    /// A position id names no stored position (used by `batch_from_ids`).
    #[error("position {position} of game {game} is not in the buffer")]
    UnknownPosition { game: u64, position: usize },
    /// A single game is larger than the memory budget.
    #[error("a game of {bytes} bytes does not fit in the replay memory budget of {budget} bytes")]
    GameTooLarge { bytes: usize, budget: usize },
    /// A deserialized buffer is internally inconsistent.
    #[error("corrupt replay buffer snapshot: {0}")]
    Corrupt(String),
}

/// Replay buffer hyper-parameters.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ReplayConfig {
    /// Maximum number of stored transitions (sampleable positions).
    pub capacity: usize,
    /// `K`: number of unrolled model steps per sample.
    pub num_unroll_steps: usize,
    /// `n`: number of steps of the n-step value target.
    pub td_steps: usize,
    pub discount: f32,
    /// Priority exponent; 0 = uniform sampling.
    pub per_alpha: f32,
    /// Importance-sampling exponent.
    pub per_beta: f32,
    /// Added to every stored priority.
    pub per_epsilon: f32,
    /// Sign rewards and values relative to the player to move (two-player zero-sum games).
    pub two_player: bool,
    /// Off-policy correction (EfficientZero): a position's bootstrap horizon shrinks by one
    /// step for every this many transitions stored after it, down to 1 (0: off, always
    /// `td_steps`). The whole row (every unrolled step) uses the position's horizon.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub td_age_transitions: usize,
    /// Bytes the stored games may occupy (0: no limit); the oldest games are evicted when a
    /// new one would exceed it, as when the capacity in transitions is reached.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max_bytes: usize,
    /// The game's symmetries (identity excluded): each sampled position is seen through one
    /// of them or the identity, uniformly at random. Not stored in snapshots: the trainer sets
    /// them from the environment.
    #[serde(skip)]
    pub symmetries: Vec<cumind_envs::Symmetry>,
}

fn is_zero(value: &usize) -> bool {
    *value == 0
}
