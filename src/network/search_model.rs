//! The bridge between the search and a network: implements [`crate::model::Model`].
//!
//! Latent states stay on the network's device in one buffer of `capacity * B` rows, node-major
//! (row `node * B + b` holds node `node` of tree `b`); only logits, values and rewards are
//! copied to the host.

use candle_core::Tensor;

use super::{MuZeroNetwork, NetworkError};
use crate::model::{Model, ModelError, Prediction};

impl From<NetworkError> for ModelError {
    fn from(err: NetworkError) -> Self {
        match err {
            NetworkError::ObservationShape {
                got,
                per_observation,
                ..
            } => ModelError::ObservationShape {
                got,
                expected: got.div_ceil(per_observation.max(1)) * per_observation,
                batch: got / per_observation.max(1),
                per_observation,
            },
            other => ModelError::Backend(other.to_string()),
        }
    }
}

fn backend(err: candle_core::Error) -> ModelError {
    ModelError::Backend(err.to_string())
}

/// A network seen by the search, with the latent buffer of the current batch of trees.
pub struct SearchModel<'a> {
    network: &'a MuZeroNetwork,
    latents: Option<Tensor>,
    batch: usize,
    capacity: usize,
}

impl<'a> SearchModel<'a> {
    pub fn new(network: &'a MuZeroNetwork) -> Self {
        Self {
            network,
            latents: None,
            batch: 0,
            capacity: 0,
        }
    }

    fn outputs(
        &self,
        policy: &Tensor,
        value: &Tensor,
        reward: Option<&Tensor>,
    ) -> Result<Prediction, ModelError> {
        let spec = self.network.spec();
        let policy_logits = policy
            .flatten_all()
            .and_then(|t| t.to_vec1::<f32>())
            .map_err(backend)?;
        let value_logits = value
            .flatten_all()
            .and_then(|t| t.to_vec1::<f32>())
            .map_err(backend)?;
        let values = spec.value_support.logits_to_scalars(&value_logits);
        let rewards = match reward {
            Some(r) => {
                let logits = r
                    .flatten_all()
                    .and_then(|t| t.to_vec1::<f32>())
                    .map_err(backend)?;
                spec.reward_support.logits_to_scalars(&logits)
            }
            None => vec![0.0; values.len()],
        };
        Ok(Prediction {
            policy_logits,
            values,
            rewards,
        })
    }
}

impl Model for SearchModel<'_> {
    fn num_actions(&self) -> usize {
        self.network.spec().num_actions
    }

    fn initial_inference(
        &mut self,
        observations: &[f32],
        batch: usize,
        capacity: usize,
    ) -> Result<Prediction, ModelError> {
        let per = self.network.spec().obs_len();
        if observations.len() != batch * per {
            return Err(ModelError::ObservationShape {
                got: observations.len(),
                expected: batch * per,
                batch,
                per_observation: per,
            });
        }
        let obs = self.network.observation_tensor(observations)?;
        let latent = self.network.represent(&obs)?;
        let (policy, value) = self.network.predict(&latent)?;
        let latent_dim = latent.dim(1).map_err(backend)?;
        let buffer = Tensor::zeros(
            (capacity.max(1) * batch, latent_dim),
            latent.dtype(),
            latent.device(),
        )
        .map_err(backend)?;
        buffer
            .slice_set(&latent.contiguous().map_err(backend)?, 0, 0)
            .map_err(backend)?;
        self.latents = Some(buffer);
        self.batch = batch;
        self.capacity = capacity.max(1);
        self.outputs(&policy, &value, None)
    }

    fn recurrent_inference(
        &mut self,
        parents: &[usize],
        actions: &[usize],
        new_node: usize,
    ) -> Result<Prediction, ModelError> {
        let buffer = self.latents.as_ref().ok_or_else(|| {
            ModelError::Backend("recurrent_inference called before initial_inference".into())
        })?;
        let b = self.batch;
        if parents.len() != b || actions.len() != b || new_node >= self.capacity {
            return Err(ModelError::Backend(format!(
                "recurrent_inference: {} parents and {} actions for a batch of {b}, node {new_node} of {}",
                parents.len(),
                actions.len(),
                self.capacity
            )));
        }
        let rows: Vec<u32> = parents
            .iter()
            .enumerate()
            .map(|(i, &p)| (p * b + i) as u32)
            .collect();
        let index = Tensor::from_vec(rows, b, buffer.device()).map_err(backend)?;
        let parent_latents = buffer.index_select(&index, 0).map_err(backend)?;
        let one_hot = self.network.action_tensor(actions)?;
        let (next, reward) = self.network.dynamics(&parent_latents, &one_hot)?;
        let (policy, value) = self.network.predict(&next)?;
        let next = next.to_dtype(buffer.dtype()).map_err(backend)?;
        buffer
            .slice_set(&next.contiguous().map_err(backend)?, 0, new_node * b)
            .map_err(backend)?;
        self.outputs(&policy, &value, Some(&reward))
    }
}
