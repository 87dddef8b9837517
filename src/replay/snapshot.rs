//! The replay buffer's snapshot for checkpoints: its serialized form (configuration, stored
//! games with their priorities, write slot, game counter, dimensions) and the checks that
//! rebuild a buffer from it. The sum tree is not stored; it is rebuilt from the priorities,
//! bit for bit.
//!
//! The field names and layout are the checkpoint format: checkpoints written before a change
//! must still load (the `golden_snapshot_loads_and_writes_back_unchanged` test pins it).

use std::collections::VecDeque;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::buffer::StoredGame;
use super::{ReplayBuffer, ReplayConfig, ReplayError};

/// What `Serialize` writes: the buffer's state without the sum tree, borrowed.
#[derive(Serialize)]
struct SnapshotRef<'a> {
    config: &'a ReplayConfig,
    games: &'a VecDeque<StoredGame>,
    write_slot: usize,
    next_game_id: u64,
    dims: Option<(usize, usize)>,
}

/// What `Deserialize` reads: the fields of [`SnapshotRef`], owned, not yet checked.
#[derive(Deserialize)]
pub(super) struct Snapshot {
    pub(super) config: ReplayConfig,
    pub(super) games: VecDeque<StoredGame>,
    pub(super) write_slot: usize,
    pub(super) next_game_id: u64,
    pub(super) dims: Option<(usize, usize)>,
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

impl ReplayBuffer {
    /// Rebuilds a buffer from a snapshot, checking its consistency.
    pub(super) fn from_snapshot(s: Snapshot) -> Result<Self, ReplayError> {
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
            // Slots and priorities belong to the sampled positions (not the padding).
            let t_len = g.game.sampled_len();
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
            buffer.bytes += g.bytes();
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

#[cfg(test)]
mod tests {
    use crate::replay::{PositionId, ReplayBuffer};
    use crate::testing::games::{replay_config, scripted_game};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    #[test]
    fn serde_round_trip_preserves_sampling() {
        let mut cfg = replay_config(12, 3, 2, 0.7);
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
                .save_game(scripted_game(&rewards, &values, &to_play, i % 2 == 1, 0.1))
                .unwrap();
        }
        let ids = buffer.sample(5, &mut rng).unwrap().ids;
        buffer
            .update_priorities(&ids, &[0.3, 1.7, 0.01, 2.5, 0.9])
            .unwrap();

        let json = serde_json::to_string(&buffer).unwrap();
        let restored: ReplayBuffer = serde_json::from_str(&json).unwrap();
        restored.assert_invariants();
        assert_eq!(restored.num_games(), buffer.num_games());
        assert_eq!(restored.num_transitions(), buffer.num_transitions());
        assert_eq!(restored.total_games_seen(), buffer.total_games_seen());
        assert_eq!(restored.tree, buffer.tree);
        let a = buffer.sample(64, &mut StdRng::seed_from_u64(99)).unwrap();
        let b = restored.sample(64, &mut StdRng::seed_from_u64(99)).unwrap();
        assert_eq!(a, b);

        // A tampered snapshot is rejected.
        let mut value: serde_json::Value = serde_json::from_str(&json).unwrap();
        value["write_slot"] = serde_json::json!(5_000);
        assert!(serde_json::from_value::<ReplayBuffer>(value).is_err());
    }

    /// A snapshot as written before the replay module was split: one game evicted, the kept
    /// game wraps around the end of the ring (slots 2, 3, 0).
    const GOLDEN: &str = concat!(
        r#"{"config":{"capacity":4,"num_unroll_steps":1,"td_steps":1,"discount":0.5,"#,
        r#""per_alpha":1.0,"per_beta":1.0,"per_epsilon":0.01,"two_player":false},"#,
        r#""games":[{"id":1,"start":2,"priorities":[0.51,0.01,0.51],"#,
        r#""game":{"obs_len":2,"num_actions":2,"#,
        r#""observations":[0.0,0.0,1.0,10.0,2.0,20.0,3.0,30.0],"actions":[0,1,0],"#,
        r#""rewards":[1.0,2.0,3.0],"to_play":[0,0,0,0],"root_values":[4.0,5.0,6.0],"#,
        r#""policies":[0.0,1.0,1.0,1.0,2.0,1.0],"terminated":false,"final_value":7.0}}],"#,
        r#""write_slot":1,"next_game_id":2,"dims":[2,2]}"#
    );

    #[test]
    fn golden_snapshot_loads_and_writes_back_unchanged() {
        let mut cfg = replay_config(4, 1, 1, 0.5);
        cfg.per_alpha = 1.0;
        let mut built = ReplayBuffer::new(cfg);
        built
            .save_game(scripted_game(&[0.0; 2], &[0.0; 2], &[0; 3], true, 0.0))
            .unwrap();
        built
            .save_game(scripted_game(
                &[1.0, 2.0, 3.0],
                &[4.0, 5.0, 6.0],
                &[0; 4],
                false,
                7.0,
            ))
            .unwrap();
        assert_eq!(serde_json::to_string(&built).unwrap(), GOLDEN);

        let loaded: ReplayBuffer = serde_json::from_str(GOLDEN).unwrap();
        loaded.assert_invariants();
        assert_eq!(loaded.total_games_seen(), 2);
        assert_eq!(loaded.priority(PositionId::new(1, 1)), Some(0.01));
        assert_eq!(loaded.tree, built.tree);
        assert_eq!(serde_json::to_string(&loaded).unwrap(), GOLDEN);
        let a = built.sample(16, &mut StdRng::seed_from_u64(3)).unwrap();
        let b = loaded.sample(16, &mut StdRng::seed_from_u64(3)).unwrap();
        assert_eq!(a, b);
    }
}
