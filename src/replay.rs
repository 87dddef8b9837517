//! Prioritized replay buffer of whole games, with MuZero training targets.
//!
//! # Storage
//!
//! Games are kept whole, oldest first. Every transition (searched position `t` in `0..T`)
//! of every stored game owns one *slot* in a ring of `capacity` slots; a game occupies
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
//! For bootstrapping with a target network, the batch also carries `value_sums` (the reward
//! sum alone), `bootstrap_discounts` (`discount^(b-u) * s(b)`, 0 when there is no bootstrap)
//! and `bootstrap_observations` (observation `b`, zeros when there is no bootstrap), so that
//! `target_values == value_sums + bootstrap_discounts * stored_value(b)` with
//! [`GameHistory::stored_value`].

use std::collections::VecDeque;

use rand::Rng;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use thiserror::Error;

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
    /// A deserialized buffer is internally inconsistent.
    #[error("corrupt replay buffer snapshot: {0}")]
    Corrupt(String),
}

/// One game (episode) with its search statistics. `T` = number of transitions.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GameHistory {
    pub obs_len: usize,
    pub num_actions: usize,
    /// `[(T+1) * obs_len]`, including the final observation.
    pub observations: Vec<f32>,
    /// `[T]`
    pub actions: Vec<usize>,
    /// `[T]` reward of the transition `t -> t+1`, from the perspective of the player who moved at `t`.
    pub rewards: Vec<f32>,
    /// `[T+1]` player to move at each observation (always 0 for one-player games).
    pub to_play: Vec<u8>,
    /// `[T]` search value at `t`, from the perspective of `to_play[t]`.
    pub root_values: Vec<f32>,
    /// `[T * A]` search policy targets.
    pub policies: Vec<f32>,
    /// true: ended in a terminal state (absorbing after it); false: truncated or cut off.
    pub terminated: bool,
    /// Value estimate of the final observation (perspective of `to_play[T]`), used to
    /// bootstrap a truncated game; ignored if `terminated`.
    pub final_value: f32,
}

impl GameHistory {
    /// Starts a game at its first observation. `terminated` starts false, `final_value` 0.
    pub fn new(
        obs_len: usize,
        num_actions: usize,
        first_observation: &[f32],
        first_to_play: u8,
    ) -> Self {
        Self {
            obs_len,
            num_actions,
            observations: first_observation.to_vec(),
            actions: Vec::new(),
            rewards: Vec::new(),
            to_play: vec![first_to_play],
            root_values: Vec::new(),
            policies: Vec::new(),
            terminated: false,
            final_value: 0.0,
        }
    }

    /// Appends one transition. Lengths are not checked here; `ReplayBuffer::save_game`
    /// (through `validate`) reports any inconsistency.
    pub fn push(
        &mut self,
        action: usize,
        reward: f32,
        root_value: f32,
        policy: &[f32],
        next_observation: &[f32],
        next_to_play: u8,
    ) {
        self.actions.push(action);
        self.rewards.push(reward);
        self.root_values.push(root_value);
        self.policies.extend_from_slice(policy);
        self.observations.extend_from_slice(next_observation);
        self.to_play.push(next_to_play);
    }

    /// Marks the end of the game: `terminated` (absorbing) or truncated with a bootstrap value.
    pub fn finish(&mut self, terminated: bool, final_value: f32) {
        self.terminated = terminated;
        self.final_value = final_value;
    }

    /// Number of transitions `T`.
    pub fn len(&self) -> usize {
        self.actions.len()
    }

    /// True when the game has no transitions.
    pub fn is_empty(&self) -> bool {
        self.actions.is_empty()
    }

    /// Observation at `t` in `0..=T` (`T` is the final observation). Panics if out of range.
    pub fn observation(&self, t: usize) -> &[f32] {
        &self.observations[t * self.obs_len..(t + 1) * self.obs_len]
    }

    /// Search policy at `t` in `0..T`. Panics if out of range.
    pub fn policy(&self, t: usize) -> &[f32] {
        &self.policies[t * self.num_actions..(t + 1) * self.num_actions]
    }

    /// The value stored for observation `u` (perspective of `to_play[u]`): `root_values[u]`
    /// for `u < T`; at `u == T` 0 for a terminated game, `final_value` for a truncated one;
    /// 0 beyond. This is the value that bootstrapped targets use.
    pub fn stored_value(&self, u: usize) -> f32 {
        let t_len = self.len();
        if u < t_len {
            self.root_values[u]
        } else if u == t_len && !self.terminated {
            self.final_value
        } else {
            0.0
        }
    }

    /// Checks that all lengths are consistent with `T = actions.len()` and the actions are in range.
    pub fn validate(&self) -> Result<(), ReplayError> {
        if self.obs_len == 0 {
            return Err(ReplayError::ZeroDimension { what: "obs_len" });
        }
        if self.num_actions == 0 {
            return Err(ReplayError::ZeroDimension {
                what: "num_actions",
            });
        }
        let t_len = self.len();
        let check = |field: &'static str, expected: usize, actual: usize| {
            if expected == actual {
                Ok(())
            } else {
                Err(ReplayError::InconsistentLength {
                    field,
                    expected,
                    actual,
                })
            }
        };
        check(
            "observations",
            (t_len + 1) * self.obs_len,
            self.observations.len(),
        )?;
        check("rewards", t_len, self.rewards.len())?;
        check("to_play", t_len + 1, self.to_play.len())?;
        check("root_values", t_len, self.root_values.len())?;
        check("policies", t_len * self.num_actions, self.policies.len())?;
        if let Some((step, &action)) = self
            .actions
            .iter()
            .enumerate()
            .find(|(_, &a)| a >= self.num_actions)
        {
            return Err(ReplayError::ActionOutOfRange {
                step,
                action,
                num_actions: self.num_actions,
            });
        }
        Ok(())
    }

    /// The value-target decomposition at `u` (see the module docs).
    fn value_parts(&self, u: usize, config: &ReplayConfig) -> ValueParts {
        let t_len = self.len();
        if u > t_len {
            return ValueParts {
                sum: 0.0,
                discount: 0.0,
                bootstrap: None,
                known: self.terminated,
            };
        }
        let sign = |j: usize| -> f64 {
            if config.two_player && self.to_play[j] != self.to_play[u] {
                -1.0
            } else {
                1.0
            }
        };
        let gamma = f64::from(config.discount);
        let end = u.saturating_add(config.td_steps).min(t_len);
        let mut sum = 0.0f64;
        let mut factor = 1.0f64;
        for j in u..end {
            sum += factor * sign(j) * f64::from(self.rewards[j]);
            factor *= gamma;
        }
        // `factor` is now discount^(end - u).
        let bootstrap = if end < t_len || !self.terminated {
            Some(end)
        } else {
            None
        };
        let discount = match bootstrap {
            Some(b) => (factor * sign(b)) as f32,
            None => 0.0,
        };
        ValueParts {
            sum: sum as f32,
            discount,
            bootstrap,
            known: true,
        }
    }
}

/// Decomposed value target at one unrolled position.
struct ValueParts {
    sum: f32,
    discount: f32,
    /// Bootstrap position `b` in `0..=T`, if any.
    bootstrap: Option<usize>,
    /// Whether the value / reward targets are known (value mask).
    known: bool,
}

impl ValueParts {
    fn target(&self, game: &GameHistory) -> f32 {
        match self.bootstrap {
            Some(b) => self.sum + self.discount * game.stored_value(b),
            None => self.sum,
        }
    }
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
}

/// Identifies one sampled position: global game counter and position `t` in the game.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PositionId {
    /// Global game counter (0 for the first game ever saved).
    pub game: u64,
    /// Position `t` in `0..T`.
    pub position: usize,
}

impl PositionId {
    pub fn new(game: u64, position: usize) -> Self {
        Self { game, position }
    }
    pub fn game(&self) -> u64 {
        self.game
    }
    pub fn position(&self) -> usize {
        self.position
    }
}

/// Training batch, plain `Vec<f32>`. B = batch size, K = unroll steps, A = actions.
/// Layouts are row-major with the batch index outermost.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Batch {
    pub batch_size: usize,
    pub num_unroll_steps: usize,
    pub obs_len: usize,
    pub num_actions: usize,
    /// `[B * obs_len]` observation at position `t`.
    pub observations: Vec<f32>,
    /// `[B * K]` action at `t+k` for `k = 0..K-1`; past the episode's end a uniformly random action.
    pub actions: Vec<usize>,
    /// `[B * (K+1)]` n-step value target.
    pub target_values: Vec<f32>,
    /// `[B * (K+1)]` index `k` = reward of transition `t+k-1 -> t+k` (`k = 0` is 0 and unused).
    pub target_rewards: Vec<f32>,
    /// `[B * (K+1) * A]`
    pub target_policies: Vec<f32>,
    /// `[B * (K+1)]` 1 where `t+k < T`, else 0.
    pub policy_mask: Vec<f32>,
    /// `[B * (K+1)]` 1 where value / reward targets are known, else 0.
    pub value_mask: Vec<f32>,
    /// `[B]` importance-sampling weights `(N * P(i))^-beta` divided by the batch maximum.
    pub weights: Vec<f32>,
    /// `[B]`
    pub ids: Vec<PositionId>,
    /// `[B * (K+1)]` the n-step discounted reward sum alone.
    pub value_sums: Vec<f32>,
    /// `[B * (K+1)]` factor multiplying the bootstrap value; 0 when there is no bootstrap.
    pub bootstrap_discounts: Vec<f32>,
    /// `[B * (K+1) * obs_len]` observation whose value is bootstrapped (zeros when none).
    pub bootstrap_observations: Vec<f32>,
}

impl Batch {
    fn zeros(batch_size: usize, k: usize, obs_len: usize, num_actions: usize) -> Self {
        let rows = batch_size * (k + 1);
        Self {
            batch_size,
            num_unroll_steps: k,
            obs_len,
            num_actions,
            observations: vec![0.0; batch_size * obs_len],
            actions: vec![0; batch_size * k],
            target_values: vec![0.0; rows],
            target_rewards: vec![0.0; rows],
            target_policies: vec![0.0; rows * num_actions],
            policy_mask: vec![0.0; rows],
            value_mask: vec![0.0; rows],
            weights: vec![1.0; batch_size],
            ids: Vec::with_capacity(batch_size),
            value_sums: vec![0.0; rows],
            bootstrap_discounts: vec![0.0; rows],
            bootstrap_observations: vec![0.0; rows * obs_len],
        }
    }

    /// Split into `parts` consecutive batches of equal size (data-parallel replicas); `None`
    /// when the batch size is not a multiple of `parts`.
    pub fn split(&self, parts: usize) -> Option<Vec<Batch>> {
        if parts == 0 || !self.batch_size.is_multiple_of(parts) {
            return None;
        }
        let n = self.batch_size / parts;
        let (k, steps) = (self.num_unroll_steps, self.num_unroll_steps + 1);
        let (o, a) = (self.obs_len, self.num_actions);
        Some(
            (0..parts)
                .map(|p| {
                    let (lo, hi) = (p * n, (p + 1) * n);
                    Batch {
                        batch_size: n,
                        num_unroll_steps: k,
                        obs_len: o,
                        num_actions: a,
                        observations: self.observations[lo * o..hi * o].to_vec(),
                        actions: self.actions[lo * k..hi * k].to_vec(),
                        target_values: self.target_values[lo * steps..hi * steps].to_vec(),
                        target_rewards: self.target_rewards[lo * steps..hi * steps].to_vec(),
                        target_policies: self.target_policies[lo * steps * a..hi * steps * a]
                            .to_vec(),
                        policy_mask: self.policy_mask[lo * steps..hi * steps].to_vec(),
                        value_mask: self.value_mask[lo * steps..hi * steps].to_vec(),
                        weights: self.weights[lo..hi].to_vec(),
                        ids: self.ids[lo..hi].to_vec(),
                        value_sums: self.value_sums[lo * steps..hi * steps].to_vec(),
                        bootstrap_discounts: self.bootstrap_discounts[lo * steps..hi * steps]
                            .to_vec(),
                        bootstrap_observations: self.bootstrap_observations
                            [lo * steps * o..hi * steps * o]
                            .to_vec(),
                    }
                })
                .collect(),
        )
    }
}

/// A binary sum tree over `len` leaves (padded to a power of two), in `f64`.
/// Every internal node is recomputed from its children on update, so it is always exactly
/// the sum of its children and a rebuild from the leaves reproduces it bit for bit.
#[derive(Clone, Debug)]
struct SumTree {
    /// Number of leaves, a power of two.
    size: usize,
    /// `nodes[1]` is the root; leaf `i` is `nodes[size + i]`.
    nodes: Vec<f64>,
}

impl SumTree {
    fn new(len: usize) -> Self {
        let size = len.max(1).next_power_of_two();
        Self {
            size,
            nodes: vec![0.0; 2 * size],
        }
    }

    fn total(&self) -> f64 {
        self.nodes[1]
    }

    fn get(&self, i: usize) -> f64 {
        self.nodes[self.size + i]
    }

    fn set(&mut self, i: usize, value: f64) {
        let mut idx = self.size + i;
        self.nodes[idx] = value;
        idx /= 2;
        while idx >= 1 {
            self.nodes[idx] = self.nodes[2 * idx] + self.nodes[2 * idx + 1];
            idx /= 2;
        }
    }

    /// Leaf whose cumulative range contains `mass` (in `[0, total)`). Never returns a
    /// zero leaf while `total > 0`, even under rounding.
    fn find(&self, mut mass: f64) -> usize {
        let mut idx = 1;
        while idx < self.size {
            let left = self.nodes[2 * idx];
            let right = self.nodes[2 * idx + 1];
            if (mass < left && left > 0.0) || right <= 0.0 {
                idx *= 2;
            } else {
                mass -= left;
                idx = 2 * idx + 1;
            }
        }
        idx - self.size
    }
}

/// One stored game, its place in the slot ring and its priorities.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct StoredGame {
    id: u64,
    /// First slot of the game; position `t` lives in slot `(start + t) % capacity`.
    start: usize,
    /// Stored priorities (`|p| + eps`), one per position.
    priorities: Vec<f32>,
    game: GameHistory,
}

/// Prioritized replay of whole games. Serialize/Deserialize (the sum tree is rebuilt and the
/// snapshot checked on load; sampling with the same seed gives the same batches).
#[derive(Clone, Debug)]
pub struct ReplayBuffer {
    config: ReplayConfig,
    games: VecDeque<StoredGame>,
    tree: SumTree,
    /// Slot where the next game starts.
    write_slot: usize,
    num_transitions: usize,
    next_game_id: u64,
    /// `(obs_len, num_actions)` fixed by the first game ever saved.
    dims: Option<(usize, usize)>,
}

impl ReplayBuffer {
    /// An empty buffer. `config.capacity == 0` gives a buffer that rejects every game.
    pub fn new(config: ReplayConfig) -> Self {
        let tree = SumTree::new(config.capacity);
        Self {
            config,
            games: VecDeque::new(),
            tree,
            write_slot: 0,
            num_transitions: 0,
            next_game_id: 0,
            dims: None,
        }
    }

    pub fn config(&self) -> &ReplayConfig {
        &self.config
    }

    /// Changes the importance-sampling exponent (for annealing).
    pub fn set_per_beta(&mut self, beta: f32) {
        self.config.per_beta = beta;
    }

    pub fn num_games(&self) -> usize {
        self.games.len()
    }

    pub fn num_transitions(&self) -> usize {
        self.num_transitions
    }

    /// Number of games ever accepted by `save_game` (including evicted ones).
    pub fn total_games_seen(&self) -> u64 {
        self.next_game_id
    }

    /// `(obs_len, num_actions)` of the stored games, once a game has been saved.
    pub fn dims(&self) -> Option<(usize, usize)> {
        self.dims
    }

    /// Stored games, oldest first, with their global ids.
    pub fn games(&self) -> impl Iterator<Item = (u64, &GameHistory)> + '_ {
        self.games.iter().map(|g| (g.id, &g.game))
    }

    /// The stored priority of a position, if it is still in the buffer.
    pub fn priority(&self, id: PositionId) -> Option<f32> {
        self.locate(id).map(|(gi, t)| self.games[gi].priorities[t])
    }

    /// Validates and stores a game, evicting the oldest games as needed. The initial
    /// priority of each position is `|root_value - value target| + per_epsilon`.
    pub fn save_game(&mut self, game: GameHistory) -> Result<(), ReplayError> {
        game.validate()?;
        if let Some((obs_len, num_actions)) = self.dims {
            if game.obs_len != obs_len {
                return Err(ReplayError::ObsLenMismatch {
                    expected: obs_len,
                    actual: game.obs_len,
                });
            }
            if game.num_actions != num_actions {
                return Err(ReplayError::NumActionsMismatch {
                    expected: num_actions,
                    actual: game.num_actions,
                });
            }
        }
        let t_len = game.len();
        if t_len == 0 {
            return Err(ReplayError::EmptyGame);
        }
        let capacity = self.config.capacity;
        if t_len > capacity {
            return Err(ReplayError::GameTooLong {
                len: t_len,
                capacity,
            });
        }
        while self.num_transitions + t_len > capacity {
            self.evict_oldest();
        }
        let priorities: Vec<f32> = (0..t_len)
            .map(|t| {
                let target = game.value_parts(t, &self.config).target(&game);
                let error = (game.root_values[t] - target).abs();
                sanitize_priority(error + self.config.per_epsilon)
            })
            .collect();
        let start = self.write_slot;
        for (t, &p) in priorities.iter().enumerate() {
            let leaf = self.leaf_value(p);
            self.tree.set((start + t) % capacity, leaf);
        }
        self.write_slot = (start + t_len) % capacity;
        self.num_transitions += t_len;
        self.dims = Some((game.obs_len, game.num_actions));
        self.games.push_back(StoredGame {
            id: self.next_game_id,
            start,
            priorities,
            game,
        });
        self.next_game_id += 1;
        Ok(())
    }

    fn evict_oldest(&mut self) {
        if let Some(old) = self.games.pop_front() {
            let capacity = self.config.capacity;
            for t in 0..old.game.len() {
                self.tree.set((old.start + t) % capacity, 0.0);
            }
            self.num_transitions -= old.game.len();
        }
    }

    /// Sum-tree leaf for a stored priority.
    fn leaf_value(&self, priority: f32) -> f64 {
        if self.config.per_alpha == 0.0 {
            1.0
        } else {
            f64::from(priority).powf(f64::from(self.config.per_alpha))
        }
    }

    /// `(index in self.games, position)` of a live id.
    fn locate(&self, id: PositionId) -> Option<(usize, usize)> {
        let first = self.games.front()?.id;
        let gi = usize::try_from(id.game.checked_sub(first)?).ok()?;
        let stored = self.games.get(gi)?;
        debug_assert_eq!(stored.id, id.game);
        (id.position < stored.game.len()).then_some((gi, id.position))
    }

    /// `(index in self.games, position)` of an occupied slot.
    fn slot_owner(&self, slot: usize) -> (usize, usize) {
        let capacity = self.config.capacity;
        let origin = self.games[0].start;
        let offset = |s: usize| (s + capacity - origin) % capacity;
        let target = offset(slot);
        let gi = self.games.partition_point(|g| offset(g.start) <= target) - 1;
        (gi, target - offset(self.games[gi].start))
    }

    /// Samples `batch_size` positions independently (with replacement), with probability
    /// `priority^alpha / sum`, and builds their training batch.
    pub fn sample<R: Rng + ?Sized>(
        &self,
        batch_size: usize,
        rng: &mut R,
    ) -> Result<Batch, ReplayError> {
        if self.games.is_empty() {
            return Err(ReplayError::EmptyBuffer);
        }
        let total = self.tree.total();
        if total <= 0.0 || !total.is_finite() {
            return Err(ReplayError::ZeroPriorityMass);
        }
        let mut ids = Vec::with_capacity(batch_size);
        for _ in 0..batch_size {
            let mass = rng.random::<f64>() * total;
            let slot = self.tree.find(mass);
            let (gi, t) = self.slot_owner(slot);
            ids.push(PositionId::new(self.games[gi].id, t));
        }
        self.batch_from_ids(&ids, rng)
    }

    /// Builds the training batch of the given live positions (the RNG only picks the
    /// actions past the end of games). Weights follow the same formula as `sample`; a
    /// position of zero sampling probability gets the largest weight.
    pub fn batch_from_ids<R: Rng + ?Sized>(
        &self,
        ids: &[PositionId],
        rng: &mut R,
    ) -> Result<Batch, ReplayError> {
        let (obs_len, num_actions) = self.dims.ok_or(ReplayError::EmptyBuffer)?;
        let k_steps = self.config.num_unroll_steps;
        let mut batch = Batch::zeros(ids.len(), k_steps, obs_len, num_actions);
        let total = self.tree.total();
        let n = self.num_transitions as f64;
        let beta = f64::from(self.config.per_beta);
        let mut raw_weights = Vec::with_capacity(ids.len());
        for (b, &id) in ids.iter().enumerate() {
            let (gi, t) = self.locate(id).ok_or(ReplayError::UnknownPosition {
                game: id.game,
                position: id.position,
            })?;
            let stored = &self.games[gi];
            self.fill_row(&mut batch, b, &stored.game, t, rng);
            batch.ids.push(id);
            if self.config.per_alpha != 0.0 {
                let slot = (stored.start + t) % self.config.capacity;
                let prob = self.tree.get(slot) / total;
                raw_weights.push((n * prob).max(f64::MIN_POSITIVE).powf(-beta));
            }
        }
        if self.config.per_alpha != 0.0 {
            let max = raw_weights.iter().copied().fold(0.0f64, f64::max);
            for (w, raw) in batch.weights.iter_mut().zip(&raw_weights) {
                *w = if max.is_finite() && max > 0.0 {
                    (raw / max) as f32
                } else {
                    1.0
                };
            }
        }
        Ok(batch)
    }

    /// Fills row `b` of the batch for position `t` of `game`.
    fn fill_row<R: Rng + ?Sized>(
        &self,
        batch: &mut Batch,
        b: usize,
        game: &GameHistory,
        t: usize,
        rng: &mut R,
    ) {
        let (obs_len, num_actions) = (game.obs_len, game.num_actions);
        let k_steps = self.config.num_unroll_steps;
        let t_len = game.len();
        batch.observations[b * obs_len..(b + 1) * obs_len].copy_from_slice(game.observation(t));
        for k in 0..k_steps {
            let u = t + k;
            batch.actions[b * k_steps + k] = if u < t_len {
                game.actions[u]
            } else {
                rng.random_range(0..num_actions)
            };
        }
        let uniform = 1.0 / num_actions as f32;
        for k in 0..=k_steps {
            let u = t + k;
            let row = b * (k_steps + 1) + k;
            let parts = game.value_parts(u, &self.config);
            if parts.known {
                batch.value_mask[row] = 1.0;
                batch.target_values[row] = parts.target(game);
                batch.value_sums[row] = parts.sum;
                batch.bootstrap_discounts[row] = parts.discount;
                if let Some(bp) = parts.bootstrap {
                    batch.bootstrap_observations[row * obs_len..(row + 1) * obs_len]
                        .copy_from_slice(game.observation(bp));
                }
                if k >= 1 && u - 1 < t_len {
                    batch.target_rewards[row] = game.rewards[u - 1];
                }
            }
            let policy = &mut batch.target_policies[row * num_actions..(row + 1) * num_actions];
            if u < t_len {
                batch.policy_mask[row] = 1.0;
                policy.copy_from_slice(game.policy(u));
            } else {
                policy.fill(uniform);
            }
        }
    }

    /// Sets the priorities of the given positions to `|p| + per_epsilon`. Ids of positions
    /// no longer in the buffer are skipped. Nothing is changed if any priority is not finite.
    pub fn update_priorities(
        &mut self,
        ids: &[PositionId],
        priorities: &[f32],
    ) -> Result<(), ReplayError> {
        if ids.len() != priorities.len() {
            return Err(ReplayError::IdsPrioritiesMismatch {
                ids: ids.len(),
                priorities: priorities.len(),
            });
        }
        if let Some(&value) = priorities.iter().find(|p| !p.is_finite()) {
            return Err(ReplayError::InvalidPriority { value });
        }
        for (&id, &p) in ids.iter().zip(priorities) {
            if let Some((gi, t)) = self.locate(id) {
                let priority = sanitize_priority(p.abs() + self.config.per_epsilon);
                let leaf = self.leaf_value(priority);
                let slot = (self.games[gi].start + t) % self.config.capacity;
                self.games[gi].priorities[t] = priority;
                self.tree.set(slot, leaf);
            }
        }
        Ok(())
    }

    /// Rebuilds a buffer from a snapshot, checking its consistency.
    fn from_snapshot(s: Snapshot) -> Result<Self, ReplayError> {
        let corrupt = |msg: String| ReplayError::Corrupt(msg);
        let mut buffer = ReplayBuffer::new(s.config);
        let capacity = buffer.config.capacity;
        if s.write_slot >= capacity.max(1) {
            return Err(corrupt(format!("write slot {} out of range", s.write_slot)));
        }
        buffer.write_slot = s.write_slot;
        buffer.next_game_id = s.next_game_id;
        buffer.dims = s.dims;
        let mut expected_start = s.games.front().map(|g| g.start);
        let mut expected_id = s.games.front().map(|g| g.id);
        for g in &s.games {
            g.game.validate()?;
            let t_len = g.game.len();
            if t_len == 0 {
                return Err(ReplayError::EmptyGame);
            }
            if Some((g.game.obs_len, g.game.num_actions)) != s.dims {
                return Err(corrupt(format!("game {} has other dimensions", g.id)));
            }
            if Some(g.id) != expected_id || g.id >= s.next_game_id {
                return Err(corrupt(format!("unexpected game id {}", g.id)));
            }
            if Some(g.start) != expected_start || g.start >= capacity {
                return Err(corrupt(format!("game {} starts at slot {}", g.id, g.start)));
            }
            if g.priorities.len() != t_len {
                return Err(ReplayError::InconsistentLength {
                    field: "priorities",
                    expected: t_len,
                    actual: g.priorities.len(),
                });
            }
            if let Some(&value) = g.priorities.iter().find(|p| !p.is_finite() || **p < 0.0) {
                return Err(ReplayError::InvalidPriority { value });
            }
            buffer.num_transitions += t_len;
            if buffer.num_transitions > capacity {
                return Err(corrupt("more transitions than capacity".into()));
            }
            for (t, &p) in g.priorities.iter().enumerate() {
                let leaf = buffer.leaf_value(p);
                buffer.tree.set((g.start + t) % capacity, leaf);
            }
            expected_start = Some((g.start + t_len) % capacity);
            expected_id = Some(g.id + 1);
        }
        if !s.games.is_empty() && expected_start != Some(s.write_slot) {
            return Err(corrupt("write slot does not follow the newest game".into()));
        }
        buffer.games = s.games;
        Ok(buffer)
    }
}

/// Stored priorities are finite and non-negative.
fn sanitize_priority(p: f32) -> f32 {
    if p.is_finite() {
        p.max(0.0)
    } else {
        f32::MAX
    }
}

/// Serialized form of a buffer (the sum tree is derived from the priorities).
#[derive(Serialize)]
struct SnapshotRef<'a> {
    config: &'a ReplayConfig,
    games: &'a VecDeque<StoredGame>,
    write_slot: usize,
    next_game_id: u64,
    dims: Option<(usize, usize)>,
}

#[derive(Deserialize)]
struct Snapshot {
    config: ReplayConfig,
    games: VecDeque<StoredGame>,
    write_slot: usize,
    next_game_id: u64,
    dims: Option<(usize, usize)>,
}

impl Serialize for ReplayBuffer {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        SnapshotRef {
            config: &self.config,
            games: &self.games,
            write_slot: self.write_slot,
            next_game_id: self.next_game_id,
            dims: self.dims,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ReplayBuffer {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let snapshot = Snapshot::deserialize(deserializer)?;
        ReplayBuffer::from_snapshot(snapshot).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    const TOL: f32 = 1e-5;

    fn config(capacity: usize, k: usize, n: usize, discount: f32) -> ReplayConfig {
        ReplayConfig {
            capacity,
            num_unroll_steps: k,
            td_steps: n,
            discount,
            per_alpha: 0.0,
            per_beta: 1.0,
            per_epsilon: 0.01,
            two_player: false,
        }
    }

    /// A one-player game; observation t is `[t, 10 t]`, policy t is `[t, 1]`, action t % 2.
    fn game(
        rewards: &[f32],
        values: &[f32],
        to_play: &[u8],
        terminated: bool,
        fv: f32,
    ) -> GameHistory {
        let mut g = GameHistory::new(2, 2, &[0.0, 0.0], to_play[0]);
        for t in 0..rewards.len() {
            let next = (t + 1) as f32;
            g.push(
                t % 2,
                rewards[t],
                values[t],
                &[t as f32, 1.0],
                &[next, 10.0 * next],
                to_play[t + 1],
            );
        }
        g.finish(terminated, fv);
        g
    }

    fn five_step(terminated: bool) -> GameHistory {
        game(
            &[1.0, 2.0, 3.0, 4.0, 5.0],
            &[10.0, 20.0, 30.0, 40.0, 50.0],
            &[0; 6],
            terminated,
            60.0,
        )
    }

    fn single_batch(buffer: &ReplayBuffer, game_id: u64, t: usize) -> Batch {
        let mut rng = StdRng::seed_from_u64(7);
        buffer
            .batch_from_ids(&[PositionId::new(game_id, t)], &mut rng)
            .unwrap()
    }

    fn assert_close(actual: &[f32], expected: &[f32]) {
        assert_eq!(actual.len(), expected.len(), "{actual:?} vs {expected:?}");
        for (a, e) in actual.iter().zip(expected) {
            assert!((a - e).abs() < TOL, "{actual:?} vs {expected:?}");
        }
    }

    /// Checks the sum tree against the stored priorities and that free slots are zero.
    fn check_invariants(buffer: &ReplayBuffer) {
        let cap = buffer.config.capacity;
        let mut expected = vec![0.0f64; cap];
        let mut count = 0;
        for g in &buffer.games {
            for (t, &p) in g.priorities.iter().enumerate() {
                expected[(g.start + t) % cap] = buffer.leaf_value(p);
                count += 1;
            }
        }
        assert_eq!(count, buffer.num_transitions);
        assert!(count <= cap);
        for (slot, &e) in expected.iter().enumerate() {
            assert_eq!(buffer.tree.get(slot), e, "slot {slot}");
        }
        let sum: f64 = expected.iter().sum();
        assert!((buffer.tree.total() - sum).abs() < 1e-9 * sum.max(1.0));
    }

    #[test]
    fn hand_computed_targets_terminated() {
        // discount 0.5, n = 2, K = 3; rewards [1..5], root values [10..50], T = 5.
        let mut buffer = ReplayBuffer::new(config(100, 3, 2, 0.5));
        buffer.save_game(five_step(true)).unwrap();

        let b = single_batch(&buffer, 0, 1);
        // u=1: 2 + .5*3 + .25*40 = 13.5; u=2: 3 + .5*4 + .25*50 = 17.5;
        // u=3: 4 + .5*5 = 6.5 (no bootstrap); u=4: 5.
        assert_close(&b.target_values, &[13.5, 17.5, 6.5, 5.0]);
        assert_close(&b.target_rewards, &[0.0, 2.0, 3.0, 4.0]);
        assert_close(&b.value_mask, &[1.0; 4]);
        assert_close(&b.policy_mask, &[1.0; 4]);
        assert_close(&b.value_sums, &[3.5, 5.0, 6.5, 5.0]);
        assert_close(&b.bootstrap_discounts, &[0.25, 0.25, 0.0, 0.0]);
        assert_eq!(b.actions, vec![1, 0, 1]);
        assert_close(&b.observations, &[1.0, 10.0]);
        assert_close(
            &b.bootstrap_observations,
            &[3.0, 30.0, 4.0, 40.0, 0.0, 0.0, 0.0, 0.0],
        );
        assert_close(
            &b.target_policies,
            &[1.0, 1.0, 2.0, 1.0, 3.0, 1.0, 4.0, 1.0],
        );

        let b = single_batch(&buffer, 0, 3);
        // u=3: 6.5; u=4: 5; u=5 (final, terminal): 0; u=6: absorbing 0.
        assert_close(&b.target_values, &[6.5, 5.0, 0.0, 0.0]);
        assert_close(&b.target_rewards, &[0.0, 4.0, 5.0, 0.0]);
        assert_close(&b.value_mask, &[1.0; 4]);
        assert_close(&b.policy_mask, &[1.0, 1.0, 0.0, 0.0]);
        assert_close(&b.target_policies[4..], &[0.5; 4]);
        assert_eq!(&b.actions[..2], &[1, 0]);
        assert!(b.actions[2] < 2);
        assert_close(&b.bootstrap_discounts, &[0.0; 4]);
        assert_close(&b.bootstrap_observations, &[0.0; 8]);
    }

    #[test]
    fn hand_computed_targets_truncated() {
        let mut buffer = ReplayBuffer::new(config(100, 3, 2, 0.5));
        buffer.save_game(five_step(false)).unwrap(); // final_value 60

        let b = single_batch(&buffer, 0, 1);
        // u=3: 4 + .5*5 + .25*60 = 21.5; u=4: 5 + .5*60 = 35.
        assert_close(&b.target_values, &[13.5, 17.5, 21.5, 35.0]);
        assert_close(&b.target_rewards, &[0.0, 2.0, 3.0, 4.0]);
        assert_close(&b.value_mask, &[1.0; 4]);
        assert_close(&b.policy_mask, &[1.0; 4]);
        assert_close(&b.bootstrap_discounts, &[0.25, 0.25, 0.25, 0.5]);
        assert_close(
            &b.bootstrap_observations,
            &[3.0, 30.0, 4.0, 40.0, 5.0, 50.0, 5.0, 50.0],
        );

        let b = single_batch(&buffer, 0, 3);
        // u=5 is the final observation: final_value; u=6 is unknown.
        assert_close(&b.target_values, &[21.5, 35.0, 60.0, 0.0]);
        assert_close(&b.target_rewards, &[0.0, 4.0, 5.0, 0.0]);
        assert_close(&b.value_mask, &[1.0, 1.0, 1.0, 0.0]);
        assert_close(&b.policy_mask, &[1.0, 1.0, 0.0, 0.0]);
        assert_close(&b.value_sums, &[6.5, 5.0, 0.0, 0.0]);
        assert_close(&b.bootstrap_discounts, &[0.25, 0.5, 1.0, 0.0]);
        assert_close(&b.bootstrap_observations[4..], &[5.0, 50.0, 0.0, 0.0]);
    }

    #[test]
    fn initial_priorities_are_value_errors() {
        let mut buffer = ReplayBuffer::new(config(100, 3, 2, 0.5));
        buffer.save_game(five_step(false)).unwrap();
        // targets at k=0: [1+1+.25*30, 13.5, 17.5, 21.5, 35] = [9.5, 13.5, 17.5, 21.5, 35]
        let expected = [0.5, 6.5, 12.5, 18.5, 15.0];
        for (t, e) in expected.iter().enumerate() {
            let p = buffer.priority(PositionId::new(0, t)).unwrap();
            assert!((p - (e + 0.01)).abs() < TOL, "t={t}: {p}");
        }
        assert_eq!(buffer.priority(PositionId::new(0, 5)), None);
        assert_eq!(buffer.priority(PositionId::new(1, 0)), None);
    }

    #[test]
    fn two_player_signs_alternate() {
        // Players alternate; player 0 makes the winning move at t = 4 (reward +1 to the mover).
        let to_play = [0u8, 1, 0, 1, 0, 1];
        let g = game(&[0.0, 0.0, 0.0, 0.0, 1.0], &[0.0; 5], &to_play, true, 0.0);
        let mut cfg = config(100, 5, 10, 0.9);
        cfg.two_player = true;
        let mut buffer = ReplayBuffer::new(cfg.clone());
        buffer.save_game(g.clone()).unwrap();
        let b = single_batch(&buffer, 0, 0);
        let d = 0.9f32;
        assert_close(
            &b.target_values,
            &[d.powi(4), -d.powi(3), d * d, -d, 1.0, 0.0],
        );
        // Reward targets stay in the mover's perspective.
        assert_close(&b.target_rewards, &[0.0, 0.0, 0.0, 0.0, 0.0, 1.0]);

        // Bootstrapped two-player values: n = 1, root values from each mover's perspective.
        let g2 = game(
            &[0.0; 4],
            &[0.5, -0.5, 0.25, -0.25],
            &to_play[..5],
            false,
            0.75,
        );
        cfg.td_steps = 1;
        cfg.num_unroll_steps = 4;
        let mut buffer = ReplayBuffer::new(cfg.clone());
        buffer.save_game(g2).unwrap();
        let b = single_batch(&buffer, 0, 0);
        // z_u = -0.9 * v_{u+1}; at u=3 bootstrap from final_value (to_play[4]=0 != 1); u=4: 0.75.
        assert_close(&b.target_values, &[0.45, -0.225, 0.225, -0.675, 0.75]);
        assert_close(&b.bootstrap_discounts, &[-0.9, -0.9, -0.9, -0.9, 1.0]);

        // The same game as one-player: no sign flips.
        cfg.two_player = false;
        cfg.td_steps = 10;
        let mut buffer = ReplayBuffer::new(cfg);
        buffer.save_game(g).unwrap();
        let b = single_batch(&buffer, 0, 0);
        assert_close(
            &b.target_values[..5],
            &[d.powi(4), d.powi(3), d * d, d, 1.0],
        );
    }

    #[test]
    fn absorbing_and_unknown_past_the_end() {
        let g = game(&[1.0, 1.0], &[0.0, 0.0], &[0; 3], true, 99.0);
        let mut buffer = ReplayBuffer::new(config(100, 5, 3, 1.0));
        buffer.save_game(g.clone()).unwrap();
        let b = single_batch(&buffer, 0, 1);
        assert_close(&b.target_values, &[1.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
        assert_close(&b.value_mask, &[1.0; 6]);
        assert_close(&b.target_rewards, &[0.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
        assert_close(&b.policy_mask, &[1.0, 0.0, 0.0, 0.0, 0.0, 0.0]);

        let mut g = g;
        g.terminated = false;
        let mut buffer = ReplayBuffer::new(config(100, 5, 3, 1.0));
        buffer.save_game(g).unwrap();
        let b = single_batch(&buffer, 0, 1);
        assert_close(&b.target_values, &[100.0, 99.0, 0.0, 0.0, 0.0, 0.0]);
        assert_close(&b.value_mask, &[1.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
        assert_close(&b.target_rewards, &[0.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
        assert_close(&b.bootstrap_discounts, &[1.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn target_identity_with_stored_values() {
        let mut rng = StdRng::seed_from_u64(3);
        for two_player in [false, true] {
            for terminated in [false, true] {
                let mut cfg = config(1000, 4, 3, 0.8);
                cfg.two_player = two_player;
                let mut buffer = ReplayBuffer::new(cfg);
                for len in [1usize, 3, 7] {
                    let rewards: Vec<f32> = (0..len).map(|_| rng.random_range(-1.0..1.0)).collect();
                    let values: Vec<f32> = (0..len).map(|_| rng.random_range(-1.0..1.0)).collect();
                    let to_play: Vec<u8> = (0..=len).map(|_| rng.random_range(0..2)).collect();
                    let g = game(&rewards, &values, &to_play, terminated, 0.3);
                    buffer.save_game(g).unwrap();
                }
                let batch = buffer.sample(64, &mut rng).unwrap();
                let k1 = batch.num_unroll_steps + 1;
                for (b, id) in batch.ids.iter().enumerate() {
                    let (gi, t) = buffer.locate(*id).unwrap();
                    let g = &buffer.games[gi].game;
                    for k in 0..k1 {
                        let row = b * k1 + k;
                        let u = t + k;
                        let bp = (u + 3).min(g.len());
                        let stored = if u <= g.len() {
                            g.stored_value(bp)
                        } else {
                            0.0
                        };
                        let rhs = batch.value_sums[row] + batch.bootstrap_discounts[row] * stored;
                        assert!((batch.target_values[row] - rhs).abs() < TOL);
                        if batch.bootstrap_discounts[row] != 0.0 {
                            assert_eq!(
                                &batch.bootstrap_observations[row * 2..row * 2 + 2],
                                g.observation(bp)
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn sum_tree_finds_ranges_and_never_a_zero_leaf() {
        let mut tree = SumTree::new(7);
        assert_eq!(tree.size, 8);
        for (i, v) in [0.0, 2.0, 0.0, 0.0, 3.0, 0.0, 0.0].into_iter().enumerate() {
            tree.set(i, v);
        }
        assert_eq!(tree.total(), 5.0);
        assert_eq!(tree.find(0.0), 1);
        assert_eq!(tree.find(1.999), 1);
        assert_eq!(tree.find(2.0), 4);
        assert_eq!(tree.find(4.999), 4);
        // Masses at or past the total (rounding) still land on a positive leaf.
        assert_eq!(tree.find(5.0), 4);
        assert_eq!(tree.find(7.5), 4);
        tree.set(4, 0.0);
        assert_eq!(tree.find(2.0), 1);
        assert_eq!(tree.total(), 2.0);
    }

    fn prioritized_buffer() -> ReplayBuffer {
        let mut cfg = config(100, 1, 1, 1.0);
        cfg.per_alpha = 1.0;
        cfg.per_beta = 0.5;
        cfg.per_epsilon = 0.0;
        let mut buffer = ReplayBuffer::new(cfg);
        buffer
            .save_game(game(&[0.0; 4], &[0.0; 4], &[0; 5], true, 0.0))
            .unwrap();
        let ids: Vec<_> = (0..4).map(|t| PositionId::new(0, t)).collect();
        buffer
            .update_priorities(&ids, &[1.0, 0.0, 0.0, 3.0])
            .unwrap();
        buffer
    }

    fn frequencies(buffer: &ReplayBuffer, slots: usize, seed: u64) -> Vec<f64> {
        let mut rng = StdRng::seed_from_u64(seed);
        let batch = buffer.sample(20_000, &mut rng).unwrap();
        let mut counts = vec![0.0; slots];
        for id in &batch.ids {
            counts[id.position] += 1.0 / batch.ids.len() as f64;
        }
        counts
    }

    #[test]
    fn prioritized_sampling_frequencies_and_weights() {
        let mut buffer = prioritized_buffer();
        check_invariants(&buffer);
        let f = frequencies(&buffer, 4, 11);
        assert!((f[0] - 0.25).abs() < 0.02, "{f:?}");
        assert_eq!(f[1], 0.0);
        assert_eq!(f[2], 0.0);
        assert!((f[3] - 0.75).abs() < 0.02, "{f:?}");

        // Importance weights: (N P)^-beta / max, N = 4, beta = 0.5.
        let mut rng = StdRng::seed_from_u64(5);
        let batch = buffer.sample(32, &mut rng).unwrap();
        let raw = |pos: usize| -> f64 { (4.0 * [0.25f64, 0.0, 0.0, 0.75][pos]).powf(-0.5) };
        let max = batch
            .ids
            .iter()
            .map(|id| raw(id.position))
            .fold(0.0, f64::max);
        for (id, &w) in batch.ids.iter().zip(&batch.weights) {
            assert!((f64::from(w) - raw(id.position) / max).abs() < 1e-6);
        }
        assert!(batch.ids.iter().any(|id| id.position == 0));
        assert!(batch.weights.iter().any(|&w| (w - 1.0).abs() < 1e-6));
        assert!(batch
            .weights
            .iter()
            .any(|&w| (w - 3f32.powf(-0.5)).abs() < 1e-6));

        // Updating priorities changes the frequencies.
        let ids: Vec<_> = (0..4).map(|t| PositionId::new(0, t)).collect();
        buffer
            .update_priorities(&ids, &[0.0, -2.0, 2.0, 0.0])
            .unwrap();
        check_invariants(&buffer);
        let f = frequencies(&buffer, 4, 12);
        assert_eq!(f[0], 0.0);
        assert!((f[1] - 0.5).abs() < 0.02, "{f:?}");
        assert!((f[2] - 0.5).abs() < 0.02, "{f:?}");
        assert_eq!(f[3], 0.0);

        // Errors leave the priorities untouched.
        assert_eq!(
            buffer.update_priorities(&ids, &[1.0]),
            Err(ReplayError::IdsPrioritiesMismatch {
                ids: 4,
                priorities: 1
            })
        );
        assert!(matches!(
            buffer.update_priorities(&ids, &[1.0, f32::NAN, 1.0, 1.0]),
            Err(ReplayError::InvalidPriority { .. })
        ));
        assert_eq!(buffer.priority(ids[0]), Some(0.0));
        buffer.update_priorities(&ids, &[0.0; 4]).unwrap();
        assert_eq!(
            buffer.sample(1, &mut rng).unwrap_err(),
            ReplayError::ZeroPriorityMass
        );
    }

    #[test]
    fn uniform_sampling_has_unit_weights() {
        let mut buffer = ReplayBuffer::new(config(100, 2, 2, 0.9));
        buffer.save_game(five_step(true)).unwrap();
        buffer
            .save_game(game(&[1.0; 3], &[0.0; 3], &[0; 4], false, 0.0))
            .unwrap();
        let mut rng = StdRng::seed_from_u64(1);
        let batch = buffer.sample(16_000, &mut rng).unwrap();
        assert!(batch.weights.iter().all(|&w| w == 1.0));
        let mut counts = [0usize; 8];
        for id in &batch.ids {
            counts[id.game as usize * 5 + id.position] += 1;
        }
        for c in counts {
            assert!((c as f64 / 16_000.0 - 0.125).abs() < 0.015, "{counts:?}");
        }
    }

    #[test]
    fn eviction_drops_oldest_games_and_skips_stale_ids() {
        let mut buffer = ReplayBuffer::new(config(10, 2, 2, 0.9));
        let mut rng = StdRng::seed_from_u64(9);
        let g4 = || game(&[1.0; 4], &[0.5; 4], &[0; 5], true, 0.0);
        buffer.save_game(g4()).unwrap();
        buffer.save_game(g4()).unwrap();
        let stale = buffer.sample(20, &mut rng).unwrap().ids;
        assert!(stale.iter().any(|id| id.game == 0));
        buffer.save_game(g4()).unwrap();
        assert_eq!(buffer.num_games(), 2);
        assert_eq!(buffer.num_transitions(), 8);
        assert_eq!(buffer.total_games_seen(), 3);
        assert_eq!(
            buffer.games().map(|(id, _)| id).collect::<Vec<_>>(),
            vec![1, 2]
        );
        check_invariants(&buffer);
        buffer.update_priorities(&stale, &[7.0; 20]).unwrap();
        for id in &stale {
            if id.game == 0 {
                assert_eq!(buffer.priority(*id), None);
            } else {
                assert!((buffer.priority(*id).unwrap() - 7.01).abs() < TOL);
            }
        }
        check_invariants(&buffer);

        // Many games of varied lengths wrap around the ring.
        for i in 0..200usize {
            let len = 1 + (i * 7) % 10;
            let g = game(
                &vec![1.0; len],
                &vec![0.0; len],
                &vec![0; len + 1],
                i % 2 == 0,
                0.0,
            );
            buffer.save_game(g).unwrap();
            assert!(buffer.num_transitions() <= 10);
            check_invariants(&buffer);
            let batch = buffer.sample(8, &mut rng).unwrap();
            for id in &batch.ids {
                assert!(buffer.priority(*id).is_some());
            }
            let newest = buffer.games().last().unwrap().0;
            assert_eq!(newest, 3 + i as u64);
        }
        assert_eq!(buffer.total_games_seen(), 203);
        let mut single = ReplayBuffer::new(config(10, 2, 2, 0.9));
        single
            .save_game(game(&[1.0; 10], &[0.0; 10], &[0; 11], true, 0.0))
            .unwrap();
        assert_eq!(single.num_transitions(), 10);
        check_invariants(&single);
    }

    #[test]
    fn errors() {
        let mut buffer = ReplayBuffer::new(config(4, 2, 2, 0.9));
        let mut rng = StdRng::seed_from_u64(0);
        assert_eq!(
            buffer.sample(4, &mut rng).unwrap_err(),
            ReplayError::EmptyBuffer
        );
        assert_eq!(
            buffer.save_game(game(&[1.0; 5], &[0.0; 5], &[0; 6], true, 0.0)),
            Err(ReplayError::GameTooLong {
                len: 5,
                capacity: 4
            })
        );
        let empty = GameHistory::new(2, 2, &[0.0, 0.0], 0);
        assert_eq!(buffer.save_game(empty), Err(ReplayError::EmptyGame));
        let mut bad = game(&[1.0; 2], &[0.0; 2], &[0; 3], true, 0.0);
        bad.rewards.push(0.0);
        assert_eq!(
            buffer.save_game(bad),
            Err(ReplayError::InconsistentLength {
                field: "rewards",
                expected: 2,
                actual: 3
            })
        );
        let mut bad = game(&[1.0; 2], &[0.0; 2], &[0; 3], true, 0.0);
        bad.observations.pop();
        assert_eq!(
            buffer.save_game(bad),
            Err(ReplayError::InconsistentLength {
                field: "observations",
                expected: 6,
                actual: 5
            })
        );
        let mut bad = game(&[1.0; 2], &[0.0; 2], &[0; 3], true, 0.0);
        bad.actions[1] = 2;
        assert_eq!(
            buffer.save_game(bad),
            Err(ReplayError::ActionOutOfRange {
                step: 1,
                action: 2,
                num_actions: 2
            })
        );
        buffer
            .save_game(game(&[1.0; 2], &[0.0; 2], &[0; 3], true, 0.0))
            .unwrap();
        let mut other = GameHistory::new(3, 2, &[0.0; 3], 0);
        other.push(0, 0.0, 0.0, &[0.5, 0.5], &[0.0; 3], 0);
        assert_eq!(
            buffer.save_game(other),
            Err(ReplayError::ObsLenMismatch {
                expected: 2,
                actual: 3
            })
        );
        assert_eq!(buffer.num_games(), 1);
        assert_eq!(
            buffer
                .batch_from_ids(&[PositionId::new(0, 2)], &mut rng)
                .unwrap_err(),
            ReplayError::UnknownPosition {
                game: 0,
                position: 2
            }
        );
        assert!(ReplayError::GameTooLong {
            len: 5,
            capacity: 4
        }
        .to_string()
        .contains('5'));
    }

    #[test]
    fn serde_round_trip_preserves_sampling() {
        let mut cfg = config(12, 3, 2, 0.7);
        cfg.per_alpha = 0.6;
        cfg.per_beta = 0.4;
        cfg.two_player = true;
        let mut buffer = ReplayBuffer::new(cfg);
        let mut rng = StdRng::seed_from_u64(21);
        for i in 0..6usize {
            let len = 2 + i % 4;
            let rewards: Vec<f32> = (0..len).map(|_| rng.random_range(-1.0..1.0)).collect();
            let values: Vec<f32> = (0..len).map(|_| rng.random_range(-1.0..1.0)).collect();
            let to_play: Vec<u8> = (0..=len).map(|j| (j % 2) as u8).collect();
            buffer
                .save_game(game(&rewards, &values, &to_play, i % 2 == 1, 0.1))
                .unwrap();
        }
        let ids = buffer.sample(5, &mut rng).unwrap().ids;
        buffer
            .update_priorities(&ids, &[0.3, 1.7, 0.01, 2.5, 0.9])
            .unwrap();

        let json = serde_json::to_string(&buffer).unwrap();
        let restored: ReplayBuffer = serde_json::from_str(&json).unwrap();
        check_invariants(&restored);
        assert_eq!(restored.num_games(), buffer.num_games());
        assert_eq!(restored.num_transitions(), buffer.num_transitions());
        assert_eq!(restored.total_games_seen(), buffer.total_games_seen());
        assert_eq!(restored.tree.nodes, buffer.tree.nodes);
        let a = buffer.sample(64, &mut StdRng::seed_from_u64(99)).unwrap();
        let b = restored.sample(64, &mut StdRng::seed_from_u64(99)).unwrap();
        assert_eq!(a, b);

        // A tampered snapshot is rejected.
        let mut value: serde_json::Value = serde_json::from_str(&json).unwrap();
        value["write_slot"] = serde_json::json!(5_000);
        assert!(serde_json::from_value::<ReplayBuffer>(value).is_err());
    }
}
