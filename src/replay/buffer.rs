//! [`ReplayBuffer`]: whole games in a ring of slots, eviction of the oldest games, prioritized
//! sampling and priority updates. The storage and priority rules are in the module docs of
//! [`crate::replay`], sections "Storage" and "Priorities".

use std::collections::VecDeque;

use rand::Rng;
use serde::{Deserialize, Serialize};

use super::augment::{apply_symmetry, policy_as_played};
use super::sum_tree::SumTree;
use super::targets::{fill_row, ValueParts};
use super::{Batch, GameHistory, PositionId, ReplayConfig, ReplayError};

/// One stored game, its place in the slot ring and its priorities. Its serialized form is
/// part of the snapshot format (see `snapshot.rs`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct StoredGame {
    /// Global game counter, see [`PositionId::game`].
    pub(super) id: u64,
    /// First slot of the game; position `t` lives in slot `(start + t) % capacity`.
    pub(super) start: usize,
    /// Stored priorities (`|p| + eps`), one per position.
    pub(super) priorities: Vec<f32>,
    pub(super) game: GameHistory,
}

impl StoredGame {
    /// Bytes of a game's stored vectors, with its priorities.
    pub(super) fn bytes_of(game: &GameHistory) -> usize {
        let f32s = game.observations.len()
            + game.rewards.len()
            + game.root_values.len()
            + game.policies.len()
            + game.sampled_len();
        f32s * 4 + game.actions.len() * std::mem::size_of::<usize>() + game.to_play.len()
    }

    pub(super) fn bytes(&self) -> usize {
        Self::bytes_of(&self.game)
    }
}

/// Prioritized replay of whole games. Serialize/Deserialize (in `snapshot.rs`: the sum tree
/// is rebuilt and the snapshot checked on load; sampling with the same seed gives the same
/// batches).
#[derive(Clone, Debug)]
pub struct ReplayBuffer {
    pub(super) config: ReplayConfig,
    /// Oldest first, with consecutive ids.
    pub(super) games: VecDeque<StoredGame>,
    /// `leaf_value(priority)` of every occupied slot, 0 for free slots.
    pub(super) tree: SumTree,
    /// Slot where the next game starts.
    pub(super) write_slot: usize,
    pub(super) num_transitions: usize,
    /// Bytes the stored games occupy ([`StoredGame::bytes`] summed).
    pub(super) bytes: usize,
    pub(super) next_game_id: u64,
    /// `(obs_len, num_actions)` fixed by the first game ever saved.
    pub(super) dims: Option<(usize, usize)>,
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
            bytes: 0,
            next_game_id: 0,
            dims: None,
        }
    }

    /// Bytes the stored games occupy (their vectors' contents; what `memory.memory_budget_mb`
    /// limits).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn config(&self) -> &ReplayConfig {
        &self.config
    }

    /// Changes the importance-sampling exponent (for annealing).
    pub fn set_per_beta(&mut self, beta: f32) {
        self.config.per_beta = beta;
    }

    /// Change the memory budget in bytes (0: none); takes effect at the next saved game.
    pub fn set_max_bytes(&mut self, max_bytes: usize) {
        self.config.max_bytes = max_bytes;
    }

    /// Change the off-policy correction (`td_age_transitions`; 0: off).
    pub fn set_td_age_transitions(&mut self, transitions: usize) {
        self.config.td_age_transitions = transitions;
    }

    /// The symmetries sampled positions are augmented with (empty: none).
    pub fn set_symmetries(&mut self, symmetries: Vec<cumind_envs::Symmetry>) {
        self.config.symmetries = symmetries;
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
        // Slots and priorities belong to the sampled positions (not a segment's padding).
        let t_len = game.sampled_len();
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
        let new_bytes = StoredGame::bytes_of(&game);
        let budget = self.config.max_bytes;
        if budget > 0 && new_bytes > budget {
            return Err(ReplayError::GameTooLarge {
                bytes: new_bytes,
                budget,
            });
        }
        while self.num_transitions + t_len > capacity
            || (budget > 0 && self.bytes + new_bytes > budget)
        {
            self.evict_oldest();
        }
        let priorities: Vec<f32> = (0..t_len)
            .map(|t| {
                let target =
                    ValueParts::at(&game, t, &self.config, self.config.td_steps).target(&game);
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
        self.bytes += new_bytes;
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
            for t in 0..old.game.sampled_len() {
                self.tree.set((old.start + t) % capacity, 0.0);
            }
            self.num_transitions -= old.game.sampled_len();
            self.bytes -= old.bytes();
        }
    }

    /// Sum-tree leaf for a stored priority.
    pub(super) fn leaf_value(&self, priority: f32) -> f64 {
        if self.config.per_alpha == 0.0 {
            1.0
        } else {
            f64::from(priority).powf(f64::from(self.config.per_alpha))
        }
    }

    /// The bootstrap horizon of position `t` of `self.games[gi]`: `td_steps`, shortened with
    /// the position's age when `td_age_transitions > 0` (see the module docs, "Targets").
    fn td_steps_at(&self, gi: usize, t: usize) -> usize {
        let c = &self.config;
        if c.td_age_transitions == 0 {
            return c.td_steps;
        }
        // Stored games fill the ring contiguously from the oldest game's first slot, so a
        // position's offset from there says how many transitions were stored after it.
        let origin = self.games[0].start;
        let offset = (self.games[gi].start + t + c.capacity - origin) % c.capacity;
        let age = self.num_transitions - 1 - offset;
        c.td_steps.saturating_sub(age / c.td_age_transitions).max(1)
    }

    /// `(index in self.games, position)` of a live id.
    fn locate(&self, id: PositionId) -> Option<(usize, usize)> {
        let first = self.games.front()?.id;
        let gi = usize::try_from(id.game().checked_sub(first)?).ok()?;
        let stored = self.games.get(gi)?;
        debug_assert_eq!(stored.id, id.game());
        (id.position() < stored.game.sampled_len()).then_some((gi, id.position()))
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
                game: id.game(),
                position: id.position(),
            })?;
            let stored = &self.games[gi];
            let td_steps = self.td_steps_at(gi, t);
            fill_row(
                &mut batch,
                b,
                (&stored.game, t),
                td_steps,
                &self.config,
                rng,
            );
            let symmetries = &self.config.symmetries;
            if !symmetries.is_empty() {
                // 0 is the identity.
                let s = rng.random_range(0..=symmetries.len());
                if s > 0 {
                    apply_symmetry(&mut batch, b, &symmetries[s - 1]);
                }
                batch.symmetries[b] = s;
            }
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

    /// Store reanalysed policy targets in place of the stored ones. For each flat row
    /// `b * (K+1) + k` of `rows`, the batch's policy target there, seen back through row `b`'s
    /// symmetry, becomes the policy of position `t + k` of row `b`'s game. Rows whose game
    /// has left the memory since the batch was sampled are skipped. Returns the number of
    /// positions written.
    ///
    /// Games do not store their legal actions; reanalyse reads them from the stored policy
    /// (its positive entries). So an action the stored policy gave a positive probability
    /// keeps at least `f32::MIN_POSITIVE` (a pUCT search may not have visited it, a Gumbel
    /// policy may underflow): writing back never makes a legal action illegal.
    pub fn write_back_policies(&mut self, batch: &Batch, rows: &[usize]) -> usize {
        let steps = batch.num_unroll_steps + 1;
        let a = batch.num_actions;
        let mut written = 0;
        let mut policy = vec![0f32; a];
        for &row in rows {
            let (b, k) = (row / steps, row % steps);
            let Some(&id) = batch.ids.get(b) else {
                continue;
            };
            let Some((gi, t)) = self.locate(id) else {
                continue;
            };
            let game = &mut self.games[gi].game;
            if game.num_actions != a || t + k >= game.len() {
                continue;
            }
            let searched = &batch.target_policies[row * a..(row + 1) * a];
            match batch.symmetries.get(b).copied().unwrap_or(0) {
                0 => policy.copy_from_slice(searched),
                s => policy_as_played(&self.config.symmetries[s - 1], searched, &mut policy),
            }
            let stored = &mut game.policies[(t + k) * a..(t + k + 1) * a];
            for (old, &new) in stored.iter_mut().zip(&policy) {
                *old = if *old > 0.0 {
                    new.max(f32::MIN_POSITIVE)
                } else {
                    new
                };
            }
            written += 1;
        }
        written
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

#[cfg(test)]
impl ReplayBuffer {
    /// Checks the sum tree against the stored priorities, that free slots are zero and that
    /// the transitions fit.
    pub(super) fn assert_invariants(&self) {
        let cap = self.config.capacity;
        let mut expected = vec![0.0f64; cap];
        let mut count = 0;
        for g in &self.games {
            for (t, &p) in g.priorities.iter().enumerate() {
                expected[(g.start + t) % cap] = self.leaf_value(p);
                count += 1;
            }
        }
        assert_eq!(count, self.num_transitions);
        assert!(count <= cap);
        for (slot, &e) in expected.iter().enumerate() {
            assert_eq!(self.tree.get(slot), e, "slot {slot}");
        }
        let sum: f64 = expected.iter().sum();
        assert!((self.tree.total() - sum).abs() < 1e-9 * sum.max(1.0));
    }
}

#[cfg(test)]
#[path = "buffer_tests.rs"]
mod tests;
