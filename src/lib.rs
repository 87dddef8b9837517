//! CuMind: a MuZero-style reinforcement-learning agent.
//!
//! The pure core ([`search`], [`replay`], [`support`], [`model`]) has no candle and no I/O.

pub mod agent;
pub mod benchmark;
pub mod checkpoint;
pub mod cli;
pub mod components;
pub mod config;
pub mod metrics;
pub mod model;
pub mod network;
pub mod replay;
pub mod search;
pub mod selfplay;
pub mod support;
#[doc(hidden)]
pub mod testing;
pub mod train;

pub use cumind_envs as envs;
