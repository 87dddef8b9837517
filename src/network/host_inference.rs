//! What the search asks of a network whose weights sit on the host ([`super::host_mlp`],
//! [`super::host_conv_net`]): the first call (observations to latents and their prediction)
//! and the recurrent call (latents and actions to the next latents, the reward and the
//! prediction there), with the outputs as row-major `Vec<f32>`.
//!
//! [`HostInference`] holds the one policy both networks share: a call of at least
//! [`HostInference::split_rows`] rows runs as two halves side by side, split at the same row
//! whatever the number of threads, so the result does not depend on it.

use super::NetworkError;
use crate::threads::side_by_side;

/// Calls of at least this many rows run as two halves side by side (rayon) by default, a fixed
/// split whatever the number of threads, so results do not depend on it: for small networks,
/// whose rows cost microseconds each, a thread's start is worth it only for many.
pub(crate) const SPLIT_ROWS: usize = 64;

/// One call's outputs, row-major.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostOutputs {
    pub policy_logits: Vec<f32>,
    pub value_logits: Vec<f32>,
}

impl HostOutputs {
    /// `self`'s rows, then `other`'s.
    pub(crate) fn append(mut self, other: HostOutputs) -> HostOutputs {
        self.policy_logits.extend(other.policy_logits);
        self.value_logits.extend(other.value_logits);
        self
    }
}

/// What a search needs from one recurrent call: the next latents, the reward logits and the
/// prediction at the next latents.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostStep {
    pub latents: Vec<f32>,
    pub reward_logits: Vec<f32>,
    pub outputs: HostOutputs,
}

impl HostStep {
    /// `self`'s rows, then `other`'s.
    pub(crate) fn append(mut self, other: HostStep) -> HostStep {
        self.latents.extend(other.latents);
        self.reward_logits.extend(other.reward_logits);
        self.outputs = self.outputs.append(other.outputs);
        self
    }
}

/// A network's search calls on host buffers. Implementors give the calls on one thread;
/// [`Self::initial`] and [`Self::recurrent`] run large batches in two halves.
pub trait HostInference: Sync {
    /// Values of one observation.
    fn obs_len(&self) -> usize;

    /// Values of one latent.
    fn latent_dim(&self) -> usize;

    /// Whether calls of [`Self::split_rows`] rows or more run as two halves side by side (off
    /// in a model that already runs on one half of a split search).
    fn splits(&self) -> bool;

    /// The fewest rows a call splits in two: 64 unless a row costs enough that
    /// fewer pay for a second thread.
    fn split_rows(&self) -> usize {
        SPLIT_ROWS
    }

    /// [`Self::initial`] on this thread.
    fn initial_serial(&self, observations: &[f32]) -> (Vec<f32>, HostOutputs);

    /// [`Self::recurrent`] on this thread.
    fn recurrent_serial(
        &self,
        latents: &[f32],
        actions: &[usize],
    ) -> Result<HostStep, NetworkError>;

    /// The search's first call: latents of the observations `[B * obs_len]` and the
    /// prediction there.
    fn initial(&self, observations: &[f32]) -> (Vec<f32>, HostOutputs) {
        let obs_len = self.obs_len().max(1);
        let batch = observations.len() / obs_len;
        if !self.splits() || batch < self.split_rows().max(2) {
            return self.initial_serial(observations);
        }
        let (first, second) = observations.split_at(batch / 2 * obs_len);
        let ((mut latents, outputs), (more_latents, more)) = side_by_side(
            || self.initial_serial(first),
            || self.initial_serial(second),
        );
        latents.extend(more_latents);
        (latents, outputs.append(more))
    }

    /// The search's recurrent call: dynamics from `latents` `[B * latent_dim]` with
    /// `actions` `[B]`, then the prediction at the new latents.
    fn recurrent(&self, latents: &[f32], actions: &[usize]) -> Result<HostStep, NetworkError> {
        let batch = actions.len();
        if !self.splits() || batch < self.split_rows().max(2) {
            return self.recurrent_serial(latents, actions);
        }
        let half = batch / 2;
        let (first_latents, second_latents) = latents.split_at(half * self.latent_dim());
        let (first_actions, second_actions) = actions.split_at(half);
        let (first, second) = side_by_side(
            || self.recurrent_serial(first_latents, first_actions),
            || self.recurrent_serial(second_latents, second_actions),
        );
        Ok(first?.append(second?))
    }
}
