//! The model as the search sees it: batched initial and recurrent inference.
//!
//! The search never touches a network, a tensor or a device. It asks a [`Model`] for priors,
//! values and rewards, and names latent states by *node index*: the tree of every batch element
//! is allocated up front with `num_simulations + 1` nodes, node 0 is the root and node `s + 1`
//! is the node created by simulation `s`. The model keeps the latent state of node `n` of batch
//! element `b` wherever it likes (on its device); only scalars cross to the search.

use thiserror::Error;

/// Errors a model can report to the search.
#[derive(Debug, Error)]
pub enum ModelError {
    /// The observation batch has the wrong length.
    #[error("observation batch has {got} values, expected {expected} ({batch} observations of {per_observation} values)")]
    ObservationShape {
        got: usize,
        expected: usize,
        batch: usize,
        per_observation: usize,
    },
    /// Anything the backend (candle, a device) reports.
    #[error("model backend error: {0}")]
    Backend(String),
}

/// What one inference returns for a batch of `B` states.
///
/// # Shapes
/// - `policy_logits`: `[B * num_actions]`, row-major (batch element, action)
/// - `values`: `[B]`, scalar values (already converted from the categorical support)
/// - `rewards`: `[B]`, scalar rewards of the transition into the state (0 for initial inference)
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prediction {
    pub policy_logits: Vec<f32>,
    pub values: Vec<f32>,
    pub rewards: Vec<f32>,
}

/// A MuZero model: representation + prediction at the root, dynamics + prediction below it.
pub trait Model {
    /// Number of discrete actions.
    fn num_actions(&self) -> usize;

    /// Encode `batch` observations (flattened, `[batch * obs_len]`) and predict at the roots.
    ///
    /// The model stores the root latent of batch element `b` as node 0 of tree `b`, and must be
    /// ready to hold `capacity` nodes per tree (`num_simulations + 1`); previous trees are
    /// discarded.
    fn initial_inference(
        &mut self,
        observations: &[f32],
        batch: usize,
        capacity: usize,
    ) -> Result<Prediction, ModelError>;

    /// Step the dynamics for every batch element: from node `parents[b]` of tree `b` take action
    /// `actions[b]`, store the resulting latent as node `new_node` of tree `b` (the same index in
    /// every tree) and predict there. `parents.len() == actions.len() == batch`.
    fn recurrent_inference(
        &mut self,
        parents: &[usize],
        actions: &[usize],
        new_node: usize,
    ) -> Result<Prediction, ModelError>;

    /// An independent model over the same weights, with its own latent store, for searching
    /// another batch of trees on another thread at the same time. `None` (the default): this
    /// model cannot be forked, and a large batch is searched as one.
    fn fork(&self) -> Option<Box<dyn Model + Send + '_>> {
        None
    }
}
