//! The `metafork` binary: parse the command line, run, print failures, set the exit status.

use clap::Parser;

fn main() {
    let cli = metafork::cli::Cli::parse();
    if let Err(f) = metafork::cli::run(cli) {
        eprintln!("{}", f.message.trim_end());
        std::process::exit(f.code);
    }
}
