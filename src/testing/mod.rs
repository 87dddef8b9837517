//! Helpers shared by the unit tests and the integration tests in `tests/`: fake models whose
//! right answer is known, tiny network specs and random games. Not part of the stable API.

pub mod convolutions;
pub mod games;
pub mod learner;
pub mod models;
pub mod specs;
pub mod take_away;
pub mod tensors;
