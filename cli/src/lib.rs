//! The `cumind` command as a library: argument parsing ([`cli::Cli`]), the commands
//! ([`cli::run`]) and a training run as the command makes it ([`cli::train_config`]), for the
//! binary and for programs that embed CuMind (the Python package).

pub mod cli;
pub mod plot;
