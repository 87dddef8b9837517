//! Why a search failed: bad inputs, a bad configuration or a failing [`Model`].
//!
//! [`Model`]: crate::model::Model

use thiserror::Error;

use crate::model::ModelError;

/// Why a search failed.
#[derive(Debug, Error)]
pub enum SearchError {
    /// The model failed.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// A search parameter is out of range.
    #[error("invalid search config: {0}")]
    InvalidConfig(String),
    /// The model reports no actions.
    #[error("the model has no actions")]
    NoActions,
    /// `legal_masks` is not `[batch * num_actions]`.
    #[error("legal_masks has {got} entries, expected {expected} ({batch} x {num_actions})")]
    LegalMaskLength {
        got: usize,
        expected: usize,
        batch: usize,
        num_actions: usize,
    },
    /// A batch element has no legal action.
    #[error("batch element {index} has no legal action")]
    NoLegalAction { index: usize },
    /// The model returned a prediction of the wrong shape.
    #[error("{call} returned {field} with {got} values, expected {expected}")]
    PredictionShape {
        call: &'static str,
        field: &'static str,
        got: usize,
        expected: usize,
    },
}
