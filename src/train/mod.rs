//! Training: the unrolled loss, the optimizer, the learner step and the training run.

pub mod learner;
pub mod loss;
#[cfg(feature = "nccl")]
pub mod nccl;
pub mod optimizer;

pub use learner::{Learner, LearnerConfig, TrainStats, ValueTarget};
pub mod run;
