//! The replay buffer's snapshot in a compact binary form: one safetensors file whose tensors
//! are the stored games' fields laid end to end, and whose header metadata holds the scalars.
//! It restores the same buffer as the JSON snapshot (`snapshot.rs`), through the same checks,
//! at a fraction of the size and time (figures in docs/benchmarks.md).
//!
//! Tensors (games in storage order, oldest first; `T` = a game's transitions, `A` = actions):
//! - `observations` F32 `[sum (T + 1) * obs_len]`, `to_play` U8 `[sum (T + 1)]`;
//! - `actions` U32, `rewards`, `root_values` F32, each `[sum T]`;
//! - `priorities` F32 `[sum (T - padding)]` (sampled positions only);
//! - `policies` F32 `[sum T * A]`;
//! - per game: `lengths` U64, `ids` U64, `starts` U64, `terminated` U8, `final_values` F32,
//!   `paddings` U64 (segment padding; absent in snapshots written before it existed: 0).
//!
//! Metadata: `format` (`cumind-replay-1`), `config` (the ReplayConfig as JSON), `write_slot`,
//! `next_game_id`, `dims` (JSON `[obs_len, num_actions]` or `null`).

use std::collections::{HashMap, VecDeque};

use safetensors::tensor::{Dtype, SafeTensors, TensorView};

use super::buffer::StoredGame;
use super::snapshot::Snapshot;
use super::{GameHistory, ReplayBuffer, ReplayError};

/// The value of the `format` metadata entry.
pub const BINARY_FORMAT: &str = "cumind-replay-1";

fn corrupt(message: impl Into<String>) -> ReplayError {
    ReplayError::Corrupt(message.into())
}

/// Little-endian bytes of every value of every slice, in order.
fn f32_slices<'a>(slices: impl Iterator<Item = &'a [f32]> + Clone) -> Vec<u8> {
    let len: usize = slices.clone().map(<[f32]>::len).sum();
    let mut out = Vec::with_capacity(len * 4);
    for slice in slices {
        for x in slice {
            out.extend_from_slice(&x.to_le_bytes());
        }
    }
    out
}

fn f32_bytes(values: impl Iterator<Item = f32>) -> Vec<u8> {
    let mut out = Vec::new();
    for x in values {
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

fn u64_bytes(values: impl Iterator<Item = u64>) -> Vec<u8> {
    let mut out = Vec::new();
    for x in values {
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

impl ReplayBuffer {
    /// The snapshot as safetensors bytes.
    pub fn to_binary(&self) -> Result<Vec<u8>, ReplayError> {
        let games = &self.games;
        let g = |f: fn(&StoredGame) -> f32| f32_bytes(games.iter().map(f));
        let mut tensors: Vec<(&str, Dtype, Vec<u8>)> = vec![
            (
                "observations",
                Dtype::F32,
                f32_slices(games.iter().map(|s| s.game.observations.as_slice())),
            ),
            (
                "to_play",
                Dtype::U8,
                games
                    .iter()
                    .flat_map(|s| s.game.to_play.iter().copied())
                    .collect(),
            ),
            (
                "actions",
                Dtype::U32,
                games
                    .iter()
                    .flat_map(|s| s.game.actions.iter().map(|&a| a as u32))
                    .flat_map(u32::to_le_bytes)
                    .collect(),
            ),
            (
                "rewards",
                Dtype::F32,
                f32_slices(games.iter().map(|s| s.game.rewards.as_slice())),
            ),
            (
                "root_values",
                Dtype::F32,
                f32_slices(games.iter().map(|s| s.game.root_values.as_slice())),
            ),
            (
                "priorities",
                Dtype::F32,
                f32_slices(games.iter().map(|s| s.priorities.as_slice())),
            ),
            (
                "policies",
                Dtype::F32,
                f32_slices(games.iter().map(|s| s.game.policies.as_slice())),
            ),
            (
                "lengths",
                Dtype::U64,
                u64_bytes(games.iter().map(|s| s.game.len() as u64)),
            ),
            ("ids", Dtype::U64, u64_bytes(games.iter().map(|s| s.id))),
            (
                "starts",
                Dtype::U64,
                u64_bytes(games.iter().map(|s| s.start as u64)),
            ),
            (
                "terminated",
                Dtype::U8,
                games.iter().map(|s| s.game.terminated as u8).collect(),
            ),
            ("final_values", Dtype::F32, g(|s| s.game.final_value)),
            (
                "paddings",
                Dtype::U64,
                u64_bytes(games.iter().map(|s| s.game.padding as u64)),
            ),
        ];
        let views = tensors
            .iter_mut()
            .map(|(name, dtype, bytes)| {
                let width = match dtype {
                    Dtype::U8 => 1,
                    Dtype::U32 | Dtype::F32 => 4,
                    _ => 8,
                };
                let shape = vec![bytes.len() / width];
                TensorView::new(*dtype, shape, bytes)
                    .map(|view| (name.to_string(), view))
                    .map_err(|e| corrupt(format!("cannot lay out `{name}`: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let metadata = HashMap::from([
            ("format".to_string(), BINARY_FORMAT.to_string()),
            (
                "config".to_string(),
                serde_json::to_string(&self.config).expect("a ReplayConfig serialises"),
            ),
            ("write_slot".to_string(), self.write_slot.to_string()),
            ("next_game_id".to_string(), self.next_game_id.to_string()),
            (
                "dims".to_string(),
                serde_json::to_string(&self.dims).expect("dims serialise"),
            ),
        ]);
        safetensors::tensor::serialize(views, Some(metadata))
            .map_err(|e| corrupt(format!("cannot serialise the replay snapshot: {e}")))
    }

    /// Rebuild a buffer from [`ReplayBuffer::to_binary`]'s bytes, with every consistency check
    /// of the JSON snapshot.
    pub fn from_binary(bytes: &[u8]) -> Result<ReplayBuffer, ReplayError> {
        let (_, header) = SafeTensors::read_metadata(bytes)
            .map_err(|e| corrupt(format!("not a safetensors file: {e}")))?;
        let meta = header
            .metadata()
            .clone()
            .ok_or_else(|| corrupt("no metadata in the replay snapshot"))?;
        let get = |key: &str| {
            meta.get(key)
                .ok_or_else(|| corrupt(format!("replay snapshot metadata lacks `{key}`")))
        };
        if get("format")? != BINARY_FORMAT {
            return Err(corrupt(format!(
                "replay snapshot format {:?}, this build reads {BINARY_FORMAT:?}",
                get("format")?
            )));
        }
        let config = serde_json::from_str(get("config")?)
            .map_err(|e| corrupt(format!("replay snapshot config: {e}")))?;
        let number = |key: &str| -> Result<u64, ReplayError> {
            get(key)?
                .parse()
                .map_err(|e| corrupt(format!("replay snapshot `{key}`: {e}")))
        };
        let write_slot = number("write_slot")? as usize;
        let next_game_id = number("next_game_id")?;
        let dims: Option<(usize, usize)> = serde_json::from_str(get("dims")?)
            .map_err(|e| corrupt(format!("replay snapshot dims: {e}")))?;
        let file = SafeTensors::deserialize(bytes)
            .map_err(|e| corrupt(format!("not a safetensors file: {e}")))?;
        let raw = |name: &str, dtype: Dtype| -> Result<Vec<u8>, ReplayError> {
            let view = file
                .tensor(name)
                .map_err(|e| corrupt(format!("replay snapshot tensor `{name}`: {e}")))?;
            if view.dtype() != dtype {
                return Err(corrupt(format!(
                    "replay snapshot tensor `{name}` has dtype {:?}",
                    view.dtype()
                )));
            }
            Ok(view.data().to_vec())
        };
        let f32s = |name: &str| -> Result<Vec<f32>, ReplayError> {
            Ok(raw(name, Dtype::F32)?
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
                .collect())
        };
        let u64s = |name: &str| -> Result<Vec<u64>, ReplayError> {
            Ok(raw(name, Dtype::U64)?
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect())
        };
        let observations = f32s("observations")?;
        let to_play = raw("to_play", Dtype::U8)?;
        let actions: Vec<usize> = raw("actions", Dtype::U32)?
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")) as usize)
            .collect();
        let rewards = f32s("rewards")?;
        let root_values = f32s("root_values")?;
        let priorities = f32s("priorities")?;
        let policies = f32s("policies")?;
        let lengths = u64s("lengths")?;
        let ids = u64s("ids")?;
        let starts = u64s("starts")?;
        let terminated = raw("terminated", Dtype::U8)?;
        let final_values = f32s("final_values")?;
        let n = lengths.len();
        let paddings = if file.names().contains(&"paddings") {
            u64s("paddings")?
        } else {
            vec![0; n]
        };
        if [
            ids.len(),
            starts.len(),
            terminated.len(),
            final_values.len(),
            paddings.len(),
        ]
        .iter()
        .any(|&len| len != n)
        {
            return Err(corrupt("per-game tensors of different lengths"));
        }
        let (obs_len, num_actions) = dims.unwrap_or((0, 0));
        let total: usize = lengths.iter().map(|&t| t as usize).sum();
        if lengths.iter().zip(&paddings).any(|(&t, &p)| p > t) {
            return Err(corrupt("a game's padding exceeds its length"));
        }
        let sampled = total - paddings.iter().map(|&p| p as usize).sum::<usize>();
        let expected = [
            ("observations", observations.len(), (total + n) * obs_len),
            ("to_play", to_play.len(), total + n),
            ("actions", actions.len(), total),
            ("rewards", rewards.len(), total),
            ("root_values", root_values.len(), total),
            ("priorities", priorities.len(), sampled),
            ("policies", policies.len(), total * num_actions),
        ];
        for (name, got, want) in expected {
            if got != want {
                return Err(corrupt(format!(
                    "replay snapshot tensor `{name}` has {got} values, the games need {want}"
                )));
            }
        }
        let mut games = VecDeque::with_capacity(n);
        let (mut at, mut at_obs, mut at_priority) = (0, 0, 0);
        for i in 0..n {
            let t = lengths[i] as usize;
            let game = GameHistory {
                obs_len,
                num_actions,
                observations: observations[at_obs * obs_len..(at_obs + t + 1) * obs_len].to_vec(),
                actions: actions[at..at + t].to_vec(),
                rewards: rewards[at..at + t].to_vec(),
                to_play: to_play[at_obs..at_obs + t + 1].to_vec(),
                root_values: root_values[at..at + t].to_vec(),
                policies: policies[at * num_actions..(at + t) * num_actions].to_vec(),
                terminated: terminated[i] != 0,
                final_value: final_values[i],
                padding: paddings[i] as usize,
            };
            games.push_back(StoredGame {
                id: ids[i],
                start: starts[i] as usize,
                priorities: priorities[at_priority..at_priority + t - paddings[i] as usize]
                    .to_vec(),
                game,
            });
            at_priority += t - paddings[i] as usize;
            at += t;
            at_obs += t + 1;
        }
        ReplayBuffer::from_snapshot(Snapshot {
            config,
            games,
            write_slot,
            next_game_id,
            dims,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::games::{replay_config, scripted_game};
    use rand::SeedableRng;

    fn buffer() -> ReplayBuffer {
        let mut r = ReplayBuffer::new(replay_config(12, 3, 2, 0.7));
        r.save_game(scripted_game(
            &[1.0, 0.5, -1.0],
            &[0.2, 0.1, 0.3],
            &[0, 1, 0, 1],
            true,
            0.0,
        ))
        .unwrap();
        r.save_game(scripted_game(
            &[0.0, 2.0],
            &[0.4, 0.6],
            &[1, 0, 1],
            false,
            0.8,
        ))
        .unwrap();
        // A segment with one transition of padding.
        let mut segment = scripted_game(&[0.5, 1.5, 2.5], &[0.1, 0.2, 0.3], &[0; 4], false, 0.9);
        segment.padding = 1;
        r.save_game(segment).unwrap();
        r
    }

    #[test]
    fn the_binary_snapshot_restores_the_same_buffer_and_sampling() {
        let original = buffer();
        let restored = ReplayBuffer::from_binary(&original.to_binary().unwrap()).unwrap();
        assert_eq!(
            serde_json::to_string(&original).unwrap(),
            serde_json::to_string(&restored).unwrap()
        );
        let mut a = rand::rngs::StdRng::seed_from_u64(3);
        let mut b = rand::rngs::StdRng::seed_from_u64(3);
        for _ in 0..5 {
            let x = original.sample(4, &mut a).unwrap();
            let y = restored.sample(4, &mut b).unwrap();
            assert_eq!(x.ids, y.ids);
            assert_eq!(x.target_values, y.target_values);
            assert_eq!(x.weights, y.weights);
        }
        // An empty buffer round-trips too.
        let empty = ReplayBuffer::new(replay_config(4, 1, 1, 0.5));
        let back = ReplayBuffer::from_binary(&empty.to_binary().unwrap()).unwrap();
        assert_eq!(back.num_transitions(), 0);
    }

    #[test]
    fn a_snapshot_written_before_segment_padding_still_loads() {
        // The same bytes without the `paddings` tensor, as written before it existed.
        let mut original = ReplayBuffer::new(replay_config(12, 3, 2, 0.7));
        original
            .save_game(scripted_game(
                &[1.0, 0.5],
                &[0.2, 0.1],
                &[0, 0, 0],
                true,
                0.0,
            ))
            .unwrap();
        let bytes = original.to_binary().unwrap();
        let file = SafeTensors::deserialize(&bytes).unwrap();
        let (_, header) = SafeTensors::read_metadata(&bytes).unwrap();
        let views: Vec<(String, TensorView)> = file
            .tensors()
            .into_iter()
            .filter(|(name, _)| name != "paddings")
            .collect();
        assert_eq!(views.len(), file.len() - 1);
        let old = safetensors::tensor::serialize(views, header.metadata().clone()).unwrap();
        let restored = ReplayBuffer::from_binary(&old).unwrap();
        assert_eq!(
            serde_json::to_string(&original).unwrap(),
            serde_json::to_string(&restored).unwrap()
        );
    }

    #[test]
    fn damaged_bytes_are_errors_not_panics() {
        let bytes = buffer().to_binary().unwrap();
        for cut in [0, 8, bytes.len() / 2, bytes.len() - 1] {
            assert!(
                ReplayBuffer::from_binary(&bytes[..cut]).is_err(),
                "cut at {cut}"
            );
        }
        // A game count that disagrees with the data: caught by the consistency checks.
        let mut other = buffer();
        other.next_game_id = 0;
        assert!(ReplayBuffer::from_binary(&other.to_binary().unwrap()).is_err());
    }
}
