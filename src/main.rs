use clap::Parser;

fn main() {
    let cli = cumind::cli::Cli::parse();
    if let Err(err) = cumind::cli::run(cli) {
        eprintln!("error: {err:#}");
        std::process::exit(1);
    }
}
