//! [`Batch`], the training batch built by the buffer, and [`PositionId`], the name of a
//! sampled position that the learner hands back with its new priority.

use serde::{Deserialize, Serialize};

/// Identifies one sampled position: global game counter and position `t` in the game.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PositionId {
    game: u64,
    position: usize,
}

impl PositionId {
    pub fn new(game: u64, position: usize) -> Self {
        Self { game, position }
    }

    /// Global game counter (0 for the first game ever saved).
    pub fn game(&self) -> u64 {
        self.game
    }

    /// Position `t` in `0..T`.
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
    /// `[B * (K+1)]` the discounted reward sum of the n-step value target, without its
    /// bootstrap term: `target_values == reward_sums + bootstrap_discounts * v` where `v` is
    /// the stored value of the bootstrap observation.
    pub reward_sums: Vec<f32>,
    /// `[B * (K+1)]` factor multiplying the bootstrap value; 0 when there is no bootstrap.
    pub bootstrap_discounts: Vec<f32>,
    /// `[B * (K+1) * obs_len]` observation whose value is bootstrapped (zeros when none).
    pub bootstrap_observations: Vec<f32>,
    /// `[B * (K+1) * obs_len]` the real observation at `t+k` (zeros past the game's end): what
    /// reanalyse searches from and the consistency loss compares the dynamics' latents with.
    pub unroll_observations: Vec<f32>,
    /// `[B * (K+1)]` 1 where the observation at `t+k` exists (`t+k <= T`), else 0.
    pub observation_mask: Vec<f32>,
    /// `[B]` the symmetry row `b` is seen through: 0 as played, `s` the replay memory's
    /// `symmetries[s - 1]` (what writing a reanalysed target back has to undo).
    #[serde(default)]
    pub symmetries: Vec<usize>,
}

impl Batch {
    /// A batch of `batch_size` empty rows: zero targets and masks, unit weights, no ids.
    pub(super) fn zeros(batch_size: usize, k: usize, obs_len: usize, num_actions: usize) -> Self {
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
            reward_sums: vec![0.0; rows],
            bootstrap_discounts: vec![0.0; rows],
            bootstrap_observations: vec![0.0; rows * obs_len],
            unroll_observations: vec![0.0; rows * obs_len],
            observation_mask: vec![0.0; rows],
            symmetries: vec![0; batch_size],
        }
    }

    /// Split into `parts` consecutive batches of equal size (data-parallel replicas); `None`
    /// when the batch size is not a multiple of `parts`.
    pub fn split(&self, parts: usize) -> Option<Vec<Batch>> {
        if parts == 0 || !self.batch_size.is_multiple_of(parts) {
            return None;
        }
        let n = self.batch_size / parts;
        Some((0..parts).map(|p| self.rows(p * n, (p + 1) * n)).collect())
    }

    /// Consecutive batches of `rows` samples each, the last one shorter when `rows` does not
    /// divide the batch size (none for an empty batch).
    pub fn chunks(&self, rows: usize) -> Vec<Batch> {
        let rows = rows.max(1);
        (0..self.batch_size.div_ceil(rows))
            .map(|c| self.rows(c * rows, ((c + 1) * rows).min(self.batch_size)))
            .collect()
    }

    /// Samples `lo..hi` as a batch of their own.
    fn rows(&self, lo: usize, hi: usize) -> Batch {
        let (k, steps) = (self.num_unroll_steps, self.num_unroll_steps + 1);
        let (o, a) = (self.obs_len, self.num_actions);
        Batch {
            batch_size: hi - lo,
            num_unroll_steps: k,
            obs_len: o,
            num_actions: a,
            observations: self.observations[lo * o..hi * o].to_vec(),
            actions: self.actions[lo * k..hi * k].to_vec(),
            target_values: self.target_values[lo * steps..hi * steps].to_vec(),
            target_rewards: self.target_rewards[lo * steps..hi * steps].to_vec(),
            target_policies: self.target_policies[lo * steps * a..hi * steps * a].to_vec(),
            policy_mask: self.policy_mask[lo * steps..hi * steps].to_vec(),
            value_mask: self.value_mask[lo * steps..hi * steps].to_vec(),
            weights: self.weights[lo..hi].to_vec(),
            ids: self.ids[lo..hi].to_vec(),
            reward_sums: self.reward_sums[lo * steps..hi * steps].to_vec(),
            bootstrap_discounts: self.bootstrap_discounts[lo * steps..hi * steps].to_vec(),
            bootstrap_observations: self.bootstrap_observations[lo * steps * o..hi * steps * o]
                .to_vec(),
            unroll_observations: self.unroll_observations[lo * steps * o..hi * steps * o].to_vec(),
            observation_mask: self.observation_mask[lo * steps..hi * steps].to_vec(),
            symmetries: self.symmetries[lo..hi].to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::replay::ReplayBuffer;
    use crate::testing::games::{five_step_game, replay_config, scripted_game};
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn split_cuts_every_field_into_consecutive_rows() {
        let mut buffer = ReplayBuffer::new(replay_config(100, 2, 2, 0.9));
        buffer.save_game(five_step_game(false)).unwrap();
        buffer
            .save_game(scripted_game(&[1.0; 3], &[0.5; 3], &[0; 4], true, 0.0))
            .unwrap();
        let batch = buffer.sample(6, &mut StdRng::seed_from_u64(4)).unwrap();
        assert_eq!(batch.split(0), None);
        assert_eq!(batch.split(4), None);
        assert_eq!(batch.split(1), Some(vec![batch.clone()]));
        let parts = batch.split(3).unwrap();
        assert_eq!(parts.len(), 3);
        assert!(parts.iter().all(|p| p.batch_size == 2
            && p.num_unroll_steps == 2
            && p.obs_len == 2
            && p.num_actions == 2));
        macro_rules! joined {
            ($field:ident) => {
                assert_eq!(
                    parts
                        .iter()
                        .flat_map(|p| p.$field.clone())
                        .collect::<Vec<_>>(),
                    batch.$field,
                    stringify!($field)
                )
            };
        }
        joined!(observations);
        joined!(actions);
        joined!(target_values);
        joined!(target_rewards);
        joined!(target_policies);
        joined!(policy_mask);
        joined!(value_mask);
        joined!(weights);
        joined!(ids);
        joined!(reward_sums);
        joined!(bootstrap_discounts);
        joined!(bootstrap_observations);
        joined!(unroll_observations);
        joined!(observation_mask);
        joined!(symmetries);
    }
}
