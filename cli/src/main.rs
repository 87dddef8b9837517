//! The `cumind` command: parse the arguments, run, print the error chain and exit 1 on failure.

use clap::Parser;

use cumind_cli::cli;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let cli = cli::Cli::parse();
    if let Err(err) = cli::run(cli) {
        if !cli::error_already_printed() {
            eprintln!("error: {err:#}");
        }
        std::process::exit(1);
    }
}
