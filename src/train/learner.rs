//! The learner: network, target network, optimizer and one training step on a batch.

use candle_core::Device;

use super::loss::unrolled_loss;
use super::optimizer::{AdamW, AdamWConfig, LrSchedule};
use crate::network::{MuZeroNetwork, NetworkError};
use crate::replay::Batch;

/// Where bootstrap values of the n-step targets come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueTarget {
    /// The search values stored with each game (MuZero's original choice).
    StoredRoot,
    /// A periodically refreshed copy of the network evaluated on the bootstrap observations.
    TargetNetwork,
}

/// Learner hyperparameters.
#[derive(Debug, Clone)]
pub struct LearnerConfig {
    pub optimizer: AdamWConfig,
    pub schedule: LrSchedule,
    pub value_loss_weight: f64,
    pub target_update_frequency: usize,
    pub value_target: ValueTarget,
}

/// What one training step measured.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainStats {
    pub total_loss: f32,
    pub value_loss: f32,
    pub reward_loss: f32,
    pub policy_loss: f32,
    pub grad_norm: f64,
    pub learning_rate: f64,
    /// New replay priorities for the batch's positions.
    pub priorities: Vec<f32>,
}

/// Owns the trainable network and everything needed to update it.
pub struct Learner {
    network: MuZeroNetwork,
    target: MuZeroNetwork,
    optimizer: AdamW,
    config: LearnerConfig,
}

impl Learner {
    pub fn new(network: MuZeroNetwork, config: LearnerConfig) -> Result<Self, NetworkError> {
        let target = network.deep_copy(network.device())?;
        let named = network
            .params()
            .named()
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect();
        let optimizer = AdamW::new(named, config.optimizer.clone())?;
        Ok(Self {
            network,
            target,
            optimizer,
            config,
        })
    }

    pub fn network(&self) -> &MuZeroNetwork {
        &self.network
    }

    pub fn target_network(&self) -> &MuZeroNetwork {
        &self.target
    }

    pub fn optimizer(&self) -> &AdamW {
        &self.optimizer
    }

    pub fn optimizer_mut(&mut self) -> &mut AdamW {
        &mut self.optimizer
    }

    /// Training steps taken so far.
    pub fn steps(&self) -> usize {
        self.optimizer.step_count()
    }

    pub fn device(&self) -> &Device {
        self.network.device()
    }

    /// Value targets for `batch`: the stored ones, or re-bootstrapped with the target network.
    pub fn value_targets(&self, batch: &Batch) -> Result<Vec<f32>, NetworkError> {
        match self.config.value_target {
            ValueTarget::StoredRoot => Ok(batch.target_values.clone()),
            ValueTarget::TargetNetwork => {
                let obs = self
                    .target
                    .observation_tensor(&batch.bootstrap_observations)?;
                let latent = self.target.represent(&obs)?;
                let (_, value_logits) = self.target.predict(&latent)?;
                let values = self
                    .target
                    .spec()
                    .value_support
                    .logits_to_scalars(&value_logits.flatten_all()?.to_vec1::<f32>()?);
                Ok(batch
                    .value_sums
                    .iter()
                    .zip(&batch.bootstrap_discounts)
                    .zip(&values)
                    .map(|((sum, discount), v)| sum + discount * v)
                    .collect())
            }
        }
    }

    /// One optimisation step on `batch`.
    pub fn train_step(&mut self, batch: &Batch) -> Result<TrainStats, NetworkError> {
        let targets = self.value_targets(batch)?;
        let loss = unrolled_loss(
            &self.network,
            batch,
            &targets,
            self.config.value_loss_weight,
        )?;
        let grads = loss.total.backward()?;
        let lr = self.config.schedule.at(self.optimizer.step_count());
        let report = self.optimizer.step(&grads, lr)?;
        if self
            .optimizer
            .step_count()
            .is_multiple_of(self.config.target_update_frequency)
        {
            self.refresh_target()?;
        }
        Ok(TrainStats {
            total_loss: loss.total.to_scalar::<f32>()?,
            value_loss: loss.value,
            reward_loss: loss.reward,
            policy_loss: loss.policy,
            grad_norm: report.grad_norm,
            learning_rate: report.learning_rate,
            priorities: loss.priorities,
        })
    }

    /// Copy the online parameters into the target network.
    pub fn refresh_target(&mut self) -> Result<(), NetworkError> {
        self.target.params().copy_from(self.network.params())
    }
}
