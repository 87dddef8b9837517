//! The train step: the unrolled loss, the optimizer, the learner and its replicas. The loop
//! that calls it (actors, evaluation, checkpoints, metrics) is [`crate::trainer`].

pub mod adamw_cpu;
pub mod host_conv_loss;
pub mod host_loss;
pub mod learner;
pub mod loss;
#[cfg(feature = "nccl")]
pub mod nccl;
pub mod optimizer;
pub mod value_cache;

pub use learner::{Learner, LearnerConfig, TrainStats, ValueTarget};
