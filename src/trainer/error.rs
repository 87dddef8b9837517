//! What can stop a training run, as one typed error.

use std::path::PathBuf;

use thiserror::Error;

use crate::checkpoint::CheckpointError;
use crate::network::NetworkError;
use crate::replay::ReplayError;
use crate::selfplay::SelfPlayError;

/// Errors of [`crate::trainer::train`].
#[derive(Debug, Error)]
pub enum TrainError {
    #[error("training needs at least one device")]
    NoDevice,
    #[error("cannot create the run directory {path}")]
    RunDirectory {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the configured environment is not available")]
    Environment(#[from] cumind_envs::EnvError),
    #[error("cannot resume from {path}")]
    Resume {
        path: PathBuf,
        #[source]
        source: CheckpointError,
    },
    #[error("the checkpoint's weights do not fit the configured network")]
    CheckpointMismatch(#[source] NetworkError),
    #[error("checkpoint")]
    Checkpoint(#[from] CheckpointError),
    #[error("network")]
    Network(#[from] NetworkError),
    #[error("replay buffer")]
    Replay(#[from] ReplayError),
    #[error("self-play")]
    SelfPlay(#[from] SelfPlayError),
    #[error("the evaluations' opponent")]
    EvaluationOpponent(#[from] crate::arena::ArenaError),
    #[error("reanalyse search")]
    Reanalyse(#[from] crate::search::SearchError),
    #[error("training.batch_size = {batch_size} does not split evenly over {ranks} ranks (each rank trains on batch_size / ranks)")]
    BatchOverRanks { batch_size: usize, ranks: usize },
    #[error("exchange with the other ranks")]
    Collective(#[from] crate::distributed::CollectiveError),
    #[error("the ranks' parameters diverged: the largest differences from rank 0 sum to {0}")]
    RanksDiverged(f32),
}
