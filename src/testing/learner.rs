//! A tiny learner set-up shared by the learner's unit tests and `tests/mpi.rs`: a network, a
//! configuration and a replay buffer of random games, all fixed by their seeds.

use candle_core::{DType, Device};
use rand::{Rng, SeedableRng};

use crate::network::MuZeroNetwork;
use crate::replay::{GameHistory, ReplayBuffer, ReplayConfig};
use crate::train::learner::{LearnerConfig, ValueTarget};
use crate::train::optimizer::{AdamWConfig, LrSchedule};

/// A small AdamW learner configuration with a short warm-up.
pub fn config(value_target: ValueTarget) -> LearnerConfig {
    LearnerConfig {
        optimizer: AdamWConfig {
            learning_rate: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 1e-4,
            max_grad_norm: 5.0,
        },
        schedule: LrSchedule {
            peak: 1e-3,
            warmup_steps: 2,
            total_steps: 100,
            final_fraction: 0.1,
        },
        value_loss_weight: 0.25,
        consistency_loss_weight: 0.0,
        target_update_frequency: 3,
        value_target,
    }
}

/// A tiny network (4 inputs, 2 actions) with fixed initial weights.
pub fn network() -> MuZeroNetwork {
    let spec = crate::testing::specs::tiny_spec(vec![4], 2);
    MuZeroNetwork::new(spec, 11, &Device::Cpu, DType::F32).unwrap()
}

/// A replay buffer of 5 random 12-step games, the same every call.
pub fn replay() -> ReplayBuffer {
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let mut replay = ReplayBuffer::new(ReplayConfig {
        per_alpha: 1.0,
        per_epsilon: 1e-3,
        ..super::games::replay_config(1000, 3, 3, 0.97)
    });
    for _ in 0..5 {
        let mut game = GameHistory::new(4, 2, &[0.1, 0.2, 0.3, 0.4], 0);
        for _ in 0..12 {
            let next: Vec<f32> = (0..4).map(|_| rng.random_range(-1.0..1.0)).collect();
            game.push(
                rng.random_range(0..2),
                1.0,
                rng.random_range(0.0..5.0),
                &[0.4, 0.6],
                &next,
                0,
            );
        }
        game.finish(false, 2.0);
        replay.save_game(game).unwrap();
    }
    replay
}

/// Every parameter of `net`, flattened in a fixed order.
pub fn weights(net: &MuZeroNetwork) -> Vec<f32> {
    net.params()
        .named()
        .flat_map(|(_, v)| {
            v.as_tensor()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap()
        })
        .collect()
}
