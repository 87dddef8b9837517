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
    /// A stop was requested while the search ran ([`Interruptible`]).
    #[error("stopped by a stop request")]
    Interrupted,
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

    /// After a recurrent inference, whether the game had ended at each new node (`[batch]`):
    /// known only to a model that steps the real game (the exact-rules model); `None` (the
    /// default) for a learned model. The search's solver reads it.
    fn ended(&self) -> Option<&[bool]> {
        None
    }

    /// Compute the network calls from here on in bf16 where this model can (a hint from the
    /// search's configuration, `SearchConfig::bf16_inference`); the default ignores it.
    fn set_bf16_inference(&mut self, _on: bool) {}
}

impl<M: Model + ?Sized> Model for Box<M> {
    fn num_actions(&self) -> usize {
        (**self).num_actions()
    }

    fn initial_inference(
        &mut self,
        observations: &[f32],
        batch: usize,
        capacity: usize,
    ) -> Result<Prediction, ModelError> {
        (**self).initial_inference(observations, batch, capacity)
    }

    fn recurrent_inference(
        &mut self,
        parents: &[usize],
        actions: &[usize],
        new_node: usize,
    ) -> Result<Prediction, ModelError> {
        (**self).recurrent_inference(parents, actions, new_node)
    }

    fn fork(&self) -> Option<Box<dyn Model + Send + '_>> {
        (**self).fork()
    }

    fn ended(&self) -> Option<&[bool]> {
        (**self).ended()
    }

    fn set_bf16_inference(&mut self, on: bool) {
        (**self).set_bf16_inference(on)
    }
}

/// A model whose every inference first checks a stop flag and fails with
/// [`ModelError::Interrupted`] once it is set: a search over it ends within one simulation of
/// a stop request (its forks check the same flag).
pub struct Interruptible<'s, M> {
    inner: M,
    stop: &'s std::sync::atomic::AtomicBool,
}

impl<'s, M> Interruptible<'s, M> {
    pub fn new(inner: M, stop: &'s std::sync::atomic::AtomicBool) -> Self {
        Self { inner, stop }
    }

    fn check(&self) -> Result<(), ModelError> {
        if self.stop.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(ModelError::Interrupted);
        }
        Ok(())
    }
}

impl<M: Model> Model for Interruptible<'_, M> {
    fn num_actions(&self) -> usize {
        self.inner.num_actions()
    }

    fn initial_inference(
        &mut self,
        observations: &[f32],
        batch: usize,
        capacity: usize,
    ) -> Result<Prediction, ModelError> {
        self.check()?;
        self.inner.initial_inference(observations, batch, capacity)
    }

    fn recurrent_inference(
        &mut self,
        parents: &[usize],
        actions: &[usize],
        new_node: usize,
    ) -> Result<Prediction, ModelError> {
        self.check()?;
        self.inner.recurrent_inference(parents, actions, new_node)
    }

    fn fork(&self) -> Option<Box<dyn Model + Send + '_>> {
        let inner = self.inner.fork()?;
        Some(Box::new(Interruptible {
            inner,
            stop: self.stop,
        }))
    }

    fn ended(&self) -> Option<&[bool]> {
        self.inner.ended()
    }

    fn set_bf16_inference(&mut self, on: bool) {
        self.inner.set_bf16_inference(on)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use rand::SeedableRng;

    use super::*;
    use crate::search::{run_search, SearchConfig, SearchError};
    use crate::testing::models::Bandit;

    /// A bandit that raises the stop flag during its `after`-th recurrent inference.
    struct RaisesStop<'s> {
        bandit: Bandit,
        after: usize,
        stop: &'s AtomicBool,
    }

    impl Model for RaisesStop<'_> {
        fn num_actions(&self) -> usize {
            self.bandit.num_actions()
        }

        fn initial_inference(
            &mut self,
            observations: &[f32],
            batch: usize,
            capacity: usize,
        ) -> Result<Prediction, ModelError> {
            self.bandit.initial_inference(observations, batch, capacity)
        }

        fn recurrent_inference(
            &mut self,
            parents: &[usize],
            actions: &[usize],
            new_node: usize,
        ) -> Result<Prediction, ModelError> {
            if self.bandit.recurrent_calls + 1 == self.after {
                self.stop.store(true, Ordering::SeqCst);
            }
            self.bandit.recurrent_inference(parents, actions, new_node)
        }
    }

    /// A search over an interruptible model ends at the first inference after the stop: here
    /// after the 3rd of 16 simulations, with the model's own error; without a stop it runs all.
    #[test]
    fn an_interruptible_search_ends_at_the_first_inference_after_a_stop() {
        let config = SearchConfig {
            num_simulations: 16,
            ..Default::default()
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let (obs, masks) = (vec![0.0; 2], vec![true; 6]);
        let stop = AtomicBool::new(false);
        let mut model = Interruptible::new(
            RaisesStop {
                bandit: Bandit::new(3, 1),
                after: 3,
                stop: &stop,
            },
            &stop,
        );
        let out = run_search(&mut model, &config, &obs, 2, &masks, false, &mut rng);
        assert!(
            matches!(out, Err(SearchError::Model(ModelError::Interrupted))),
            "{out:?}"
        );
        assert_eq!(model.inner.bandit.recurrent_calls, 3);
        let calm = AtomicBool::new(false);
        let mut whole = Interruptible::new(Bandit::new(3, 1), &calm);
        let out = run_search(&mut whole, &config, &obs, 2, &masks, false, &mut rng).unwrap();
        assert_eq!(whole.inner.recurrent_calls, 16);
        assert_eq!(out.policy_targets.len(), 6);
        // A flag already set stops even the initial inference.
        let mut refused = Interruptible::new(Bandit::new(3, 1), &stop);
        let out = run_search(&mut refused, &config, &obs, 2, &masks, false, &mut rng);
        assert!(matches!(
            out,
            Err(SearchError::Model(ModelError::Interrupted))
        ));
        assert_eq!(refused.inner.initial_calls, 0);
    }
}
