//! Unit tests of [`ReplayBuffer`]: priorities, sampling, eviction and errors.

use super::ReplayBuffer;
use crate::replay::{GameHistory, PositionId, ReplayError};
use crate::testing::games::{five_step_game, replay_config, scripted_game};
use rand::rngs::StdRng;
use rand::SeedableRng;

const TOL: f32 = 1e-5;

#[test]
fn initial_priorities_are_value_errors() {
    let mut buffer = ReplayBuffer::new(replay_config(100, 3, 2, 0.5));
    buffer.save_game(five_step_game(false)).unwrap();
    // targets at k=0: [1+1+.25*30, 13.5, 17.5, 21.5, 35] = [9.5, 13.5, 17.5, 21.5, 35]
    let expected = [0.5, 6.5, 12.5, 18.5, 15.0];
    for (t, e) in expected.iter().enumerate() {
        let p = buffer.priority(PositionId::new(0, t)).unwrap();
        assert!((p - (e + 0.01)).abs() < TOL, "t={t}: {p}");
    }
    assert_eq!(buffer.priority(PositionId::new(0, 5)), None);
    assert_eq!(buffer.priority(PositionId::new(1, 0)), None);
}

fn prioritized_buffer() -> ReplayBuffer {
    let mut cfg = replay_config(100, 1, 1, 1.0);
    cfg.per_alpha = 1.0;
    cfg.per_beta = 0.5;
    cfg.per_epsilon = 0.0;
    let mut buffer = ReplayBuffer::new(cfg);
    buffer
        .save_game(scripted_game(&[0.0; 4], &[0.0; 4], &[0; 5], true, 0.0))
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
        counts[id.position()] += 1.0 / batch.ids.len() as f64;
    }
    counts
}

#[test]
fn prioritized_sampling_frequencies_and_weights() {
    let mut buffer = prioritized_buffer();
    buffer.assert_invariants();
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
        .map(|id| raw(id.position()))
        .fold(0.0, f64::max);
    for (id, &w) in batch.ids.iter().zip(&batch.weights) {
        assert!((f64::from(w) - raw(id.position()) / max).abs() < 1e-6);
    }
    assert!(batch.ids.iter().any(|id| id.position() == 0));
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
    buffer.assert_invariants();
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
    let mut buffer = ReplayBuffer::new(replay_config(100, 2, 2, 0.9));
    buffer.save_game(five_step_game(true)).unwrap();
    buffer
        .save_game(scripted_game(&[1.0; 3], &[0.0; 3], &[0; 4], false, 0.0))
        .unwrap();
    let mut rng = StdRng::seed_from_u64(1);
    let batch = buffer.sample(16_000, &mut rng).unwrap();
    assert!(batch.weights.iter().all(|&w| w == 1.0));
    let mut counts = [0usize; 8];
    for id in &batch.ids {
        counts[id.game() as usize * 5 + id.position()] += 1;
    }
    for c in counts {
        assert!((c as f64 / 16_000.0 - 0.125).abs() < 0.015, "{counts:?}");
    }
}

#[test]
fn eviction_drops_oldest_games_and_skips_stale_ids() {
    let mut buffer = ReplayBuffer::new(replay_config(10, 2, 2, 0.9));
    let mut rng = StdRng::seed_from_u64(9);
    let g4 = || scripted_game(&[1.0; 4], &[0.5; 4], &[0; 5], true, 0.0);
    buffer.save_game(g4()).unwrap();
    buffer.save_game(g4()).unwrap();
    let stale = buffer.sample(20, &mut rng).unwrap().ids;
    assert!(stale.iter().any(|id| id.game() == 0));
    buffer.save_game(g4()).unwrap();
    assert_eq!(buffer.num_games(), 2);
    assert_eq!(buffer.num_transitions(), 8);
    assert_eq!(buffer.total_games_seen(), 3);
    assert_eq!(
        buffer.games().map(|(id, _)| id).collect::<Vec<_>>(),
        vec![1, 2]
    );
    buffer.assert_invariants();
    buffer.update_priorities(&stale, &[7.0; 20]).unwrap();
    for id in &stale {
        if id.game() == 0 {
            assert_eq!(buffer.priority(*id), None);
        } else {
            assert!((buffer.priority(*id).unwrap() - 7.01).abs() < TOL);
        }
    }
    buffer.assert_invariants();

    // Many games of varied lengths wrap around the ring.
    for i in 0..200usize {
        let len = 1 + (i * 7) % 10;
        let g = scripted_game(
            &vec![1.0; len],
            &vec![0.0; len],
            &vec![0; len + 1],
            i % 2 == 0,
            0.0,
        );
        buffer.save_game(g).unwrap();
        assert!(buffer.num_transitions() <= 10);
        buffer.assert_invariants();
        let batch = buffer.sample(8, &mut rng).unwrap();
        for id in &batch.ids {
            assert!(buffer.priority(*id).is_some());
        }
        let newest = buffer.games().last().unwrap().0;
        assert_eq!(newest, 3 + i as u64);
    }
    assert_eq!(buffer.total_games_seen(), 203);
    let mut single = ReplayBuffer::new(replay_config(10, 2, 2, 0.9));
    single
        .save_game(scripted_game(&[1.0; 10], &[0.0; 10], &[0; 11], true, 0.0))
        .unwrap();
    assert_eq!(single.num_transitions(), 10);
    single.assert_invariants();
}

#[test]
fn errors() {
    let mut buffer = ReplayBuffer::new(replay_config(4, 2, 2, 0.9));
    let mut rng = StdRng::seed_from_u64(0);
    assert_eq!(
        buffer.sample(4, &mut rng).unwrap_err(),
        ReplayError::EmptyBuffer
    );
    assert_eq!(
        buffer.save_game(scripted_game(&[1.0; 5], &[0.0; 5], &[0; 6], true, 0.0)),
        Err(ReplayError::GameTooLong {
            len: 5,
            capacity: 4
        })
    );
    let empty = GameHistory::new(2, 2, &[0.0, 0.0], 0);
    assert_eq!(buffer.save_game(empty), Err(ReplayError::EmptyGame));
    // Games are validated before anything is stored.
    let mut bad = scripted_game(&[1.0; 2], &[0.0; 2], &[0; 3], true, 0.0);
    bad.rewards.push(0.0);
    assert_eq!(
        buffer.save_game(bad),
        Err(ReplayError::InconsistentLength {
            field: "rewards",
            expected: 2,
            actual: 3
        })
    );
    // The other invalid games are in `game.rs`.
    buffer
        .save_game(scripted_game(&[1.0; 2], &[0.0; 2], &[0; 3], true, 0.0))
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
fn a_memory_budget_evicts_the_oldest_games_by_bytes() {
    let game_bytes = {
        let mut probe = ReplayBuffer::new(replay_config(100, 3, 2, 0.5));
        probe.save_game(five_step_game(false)).unwrap();
        probe.bytes()
    };
    assert!(game_bytes > 0);
    // Room for two games by bytes, ten by transitions.
    let mut cfg = replay_config(100, 3, 2, 0.5);
    cfg.max_bytes = 2 * game_bytes + game_bytes / 2;
    let mut buffer = ReplayBuffer::new(cfg);
    for _ in 0..3 {
        buffer.save_game(five_step_game(false)).unwrap();
    }
    assert_eq!(buffer.num_games(), 2);
    assert_eq!(buffer.bytes(), 2 * game_bytes);
    assert!(
        buffer.priority(PositionId::new(0, 0)).is_none(),
        "oldest game evicted"
    );
    assert!(buffer.priority(PositionId::new(2, 0)).is_some());
    // A game larger than the whole budget is refused with both numbers.
    buffer.set_max_bytes(game_bytes / 2);
    let err = buffer.save_game(five_step_game(false)).unwrap_err();
    assert!(matches!(err, ReplayError::GameTooLarge { .. }), "{err}");
    assert!(err.to_string().contains(&(game_bytes / 2).to_string()));
}

#[test]
fn a_segments_padding_is_stored_for_targets_but_never_sampled() {
    let mut buffer = ReplayBuffer::new(replay_config(100, 3, 2, 0.5));
    let mut padded = five_step_game(false);
    padded.padding = 2;
    let mut whole = ReplayBuffer::new(replay_config(100, 3, 2, 0.5));
    whole.save_game(five_step_game(false)).unwrap();
    buffer.save_game(padded.clone()).unwrap();
    assert_eq!(buffer.num_transitions(), 3);
    buffer.assert_invariants();
    let mut rng = StdRng::seed_from_u64(1);
    let batch = buffer.sample(500, &mut rng).unwrap();
    assert!(batch.ids.iter().all(|id| id.position() < 3));
    for t in 0..3 {
        assert!(
            batch.ids.iter().any(|id| id.position() == t),
            "t={t} never sampled"
        );
    }
    // A position's targets use the padding, as in the game without it.
    let id = PositionId::new(0, 2);
    let a = buffer
        .batch_from_ids(&[id], &mut StdRng::seed_from_u64(2))
        .unwrap();
    let b = whole
        .batch_from_ids(&[id], &mut StdRng::seed_from_u64(2))
        .unwrap();
    assert_eq!(a.target_values, b.target_values);
    assert_eq!(a.target_rewards, b.target_rewards);
    assert_eq!(a.target_policies, b.target_policies);
    // Padding positions are not live ids, and padding must leave a position to sample.
    assert!(buffer.priority(PositionId::new(0, 3)).is_none());
    padded.padding = 5;
    assert_eq!(
        buffer.save_game(padded),
        Err(ReplayError::PaddingTooLong {
            padding: 5,
            transitions: 5
        })
    );
}

#[test]
fn written_back_policies_are_stored_through_the_rows_symmetry_and_keep_every_legal_action() {
    use crate::testing::games::RandomGame;
    use cumind_envs::Symmetry;
    let mut buffer = ReplayBuffer::new(replay_config(100, 3, 2, 0.9));
    // A three-cycle of the actions: not its own inverse, so undoing it the wrong way fails.
    buffer.set_symmetries(vec![Symmetry {
        observation: vec![1, 0],
        negate: vec![false, true],
        actions: vec![1, 2, 0],
    }]);
    let mut rng = StdRng::seed_from_u64(3);
    let game = RandomGame {
        obs_len: 2,
        num_actions: 3,
        len: 9,
        rewards: -1.0..1.0,
        root_values: -1.0..1.0,
        terminated: true,
        final_value: 0.0,
    };
    for _ in 0..3 {
        buffer.save_game(game.draw(&mut rng)).unwrap();
    }
    let stored_before: Vec<GameHistory> = buffer.games().map(|(_, g)| g.clone()).collect();
    let mut batch = buffer.sample(12, &mut rng).unwrap();
    assert!(batch.symmetries.contains(&0) && batch.symmetries.contains(&1));
    let steps = batch.num_unroll_steps + 1;
    // "Searched" targets for the first 8 rows: distinct per position, zero on action 2 of
    // the row's frame (legal in every stored policy, so it must keep a positive floor).
    let rows: Vec<usize> = (0..8 * steps)
        .filter(|&r| batch.policy_mask[r] == 1.0)
        .collect();
    for &r in &rows {
        let x = 0.1 + 0.8 * (r as f32 / rows.len() as f32).fract();
        batch.target_policies[r * 3..r * 3 + 3].copy_from_slice(&[x, 1.0 - x, 0.0]);
    }
    assert_eq!(buffer.write_back_policies(&batch, &rows), rows.len());
    let first = buffer.games().next().unwrap().0;
    // The same position can be in several rows (sampling with replacement, overlapping
    // unrolls): the last write stays.
    let mut written = std::collections::HashMap::new();
    for &r in &rows {
        let (b, k) = (r / steps, r % steps);
        let id = batch.ids[b];
        let searched = &batch.target_policies[r * 3..r * 3 + 3];
        // Row-frame action j is game action a with actions[a] == j.
        let expected: Vec<f32> = match batch.symmetries[b] {
            0 => searched.to_vec(),
            _ => [1usize, 2, 0].iter().map(|&j| searched[j]).collect(),
        };
        written.insert((id.game(), id.position() + k), expected);
    }
    for ((g, t), expected) in &written {
        let stored = buffer.games().find(|(id, _)| id == g).unwrap().1.policy(*t);
        for a in 0..3 {
            if expected[a] == 0.0 {
                assert_eq!(
                    stored[a],
                    f32::MIN_POSITIVE,
                    "{g}/{t}: a legal action was dropped"
                );
            } else {
                assert_eq!(stored[a], expected[a], "{g}/{t} action {a}");
            }
        }
    }
    // Every other stored policy is untouched.
    for (g, game) in buffer.games() {
        let before = &stored_before[(g - first) as usize];
        for t in 0..game.len() {
            if !written.contains_key(&(g, t)) {
                assert_eq!(game.policy(t), before.policy(t), "game {g} position {t}");
            }
        }
    }
    // A batch sampled later trains on the written targets (seen through its own symmetry).
    let again = buffer.batch_from_ids(&batch.ids, &mut rng).unwrap();
    for &r in &rows {
        let (b, k) = (r / steps, r % steps);
        let expected = &written[&(batch.ids[b].game(), batch.ids[b].position() + k)];
        let new = &again.target_policies[r * 3..r * 3 + 3];
        for a in 0..3 {
            let j = if again.symmetries[b] == 0 {
                a
            } else {
                [1, 2, 0][a]
            };
            if expected[a] != 0.0 {
                assert_eq!(new[j], expected[a], "row {r} action {a}");
            }
        }
    }
    // Once the games have left the memory, nothing is written.
    for _ in 0..20 {
        buffer.save_game(game.draw(&mut rng)).unwrap();
    }
    assert_eq!(buffer.write_back_policies(&batch, &rows), 0);
    buffer.assert_invariants();
}
