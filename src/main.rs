//! The `metafork` binary: parse the command line, run, print failures, set the exit status.
//! The work runs on a thread with a large stack: the front end bounds its recursion depth,
//! and the extra room keeps that bound far from the platform's limit.

use clap::Parser;

const STACK_BYTES: usize = 64 << 20;

/// mimalloc serves the Rust side's many small, short-lived allocations (trees, systems,
/// polynomials) in fewer instructions than the C library's allocator (bench/RESULTS.md,
/// sixteenth session); LLVM's and Z3's own allocations still go through `malloc`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let cli = metafork::cli::Cli::parse();
    let worker = std::thread::Builder::new().stack_size(STACK_BYTES).spawn(move || metafork::cli::run(cli));
    let result = match worker.map(|h| h.join()) {
        Ok(Ok(r)) => r,
        Ok(Err(_)) => {
            eprintln!("error: internal failure (a bug in metafork); please report it with the input");
            std::process::exit(metafork::command::exit::INTERNAL);
        }
        Err(e) => {
            eprintln!("error: cannot start the worker thread: {e}");
            std::process::exit(metafork::command::exit::INTERNAL);
        }
    };
    if let Err(f) = result {
        if !f.message.trim().is_empty() {
            eprintln!("{}", f.message.trim_end());
        }
        std::process::exit(f.code);
    }
}
