//! CuMind: a MuZero-style reinforcement-learning agent.
//!
//! It learns a model of its environment (representation, dynamics and prediction networks),
//! plans with Monte Carlo tree search inside that model, and trains from a replay buffer of its
//! own games, on the CPU or (feature `cuda`) on NVIDIA GPUs.
//!
//! The pure core ([`search`], [`replay`], [`support`], [`model`]) has no candle and no I/O.
//! The curated entry points:
//!
//! - [`Agent`]: load a trained checkpoint and ask it for actions ([`Agent::select_action`]).
//! - [`Config`]: the layered, validated configuration ([`ConfigSources`] says where from).
//! - [`train()`]: the training loop ([`RunOptions`], [`RunSummary`], [`TrainError`]), reporting
//!   to a [`MetricSink`].
//! - [`run_search`] / [`Searcher`]: batched MCTS on any [`Model`].
//! - [`Environment`]: the Gymnasium-style trait of the environments in [`envs`].
//!
//! The command-line interface lives in the `cumind` binary, not in this library.

pub mod agent;
pub mod arena;
pub mod benchmark;
pub mod build_info;
pub mod checkpoint;
pub mod components;
pub mod config;
pub mod distributed;
pub mod error_chain;
pub mod exact_model;
pub mod fast_exp;
pub mod metrics;
pub mod model;
pub mod network;
pub mod op_count;
pub mod replay;
pub mod search;
pub mod selfplay;
pub mod support;
#[doc(hidden)]
pub mod testing;
pub mod threads;
pub mod train;
pub mod trainer;

pub use agent::{Agent, AgentError};
pub use config::{Config, ConfigError, ConfigSources};
pub use cumind_envs as envs;
pub use cumind_envs::Environment;
pub use metrics::MetricSink;
pub use model::Model;
pub use search::{run_search, SearchConfig, SearchOutput, Searcher};
pub use trainer::{train, RunOptions, RunSummary, TrainError};
