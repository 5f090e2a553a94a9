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

/// The first Ctrl-C, SIGTERM, SIGHUP (a closed terminal or ssh session) or SIGQUIT spends the time budget and stops tool runs, so the work winds
/// down, temporaries are removed and no output is replaced; a second one ends the process at
/// once. Only atomic stores here: a signal handler may do nothing else safely.
extern "C" fn on_interrupt(_signal: libc::c_int) {
    static SEEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if SEEN.swap(true, std::sync::atomic::Ordering::SeqCst) {
        // SAFETY: `_exit` is async-signal-safe.
        unsafe { libc::_exit(metafork::command::exit::INTERRUPTED) };
    }
    constraints::budget::interrupt();
    llvm_passes::ptxas::stop();
}

fn catch_interrupts() {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
        // SAFETY: a zeroed `sigaction` is valid (no flags, empty mask), and the handler only
        // stores atomics or calls `_exit`.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_interrupt as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

/// End the process once the work is done: standard output and error flushed, then `_exit`,
/// skipping the exit handlers. Every file has been written and closed, every temporary
/// removed and every tool run waited for before this point; what the handlers would do is
/// run the C++ static destructors of LLVM and Z3 (thousands of command-line options, pass
/// registries) over memory the kernel frees anyway (Clang's `-disable-free` leaves its own to
/// the system for the same reason).
/// 0.5 ms of each `gen` run (bench/RESULTS.md, thirty-third session).
fn end(code: i32) -> ! {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: `_exit` only ends the process (every thread at once) and runs no handler.
    unsafe { libc::_exit(code) }
}

fn main() {
    let cli = match metafork::cli::Cli::try_parse() {
        Ok(cli) => cli,
        // `--help`, `--version` (to standard output) and usage errors (to standard error), as
        // clap prints them; but a help lost to a full standard output is an error, as any
        // other output of ours is (`command::print`; a closed pipe is not). A standard output
        // closed outright cannot be told from `> /dev/null`: Rust's runtime opens /dev/null
        // on a closed standard descriptor before `main`.
        Err(e) => {
            if let Err(why) = e.print() {
                if !e.use_stderr() && why.kind() != std::io::ErrorKind::BrokenPipe {
                    metafork::command::warn(&format!("error: cannot write to standard output: {why}"));
                    end(1);
                }
            }
            end(e.exit_code());
        }
    };
    catch_interrupts();
    let worker = std::thread::Builder::new().stack_size(STACK_BYTES).spawn(move || metafork::cli::run(cli));
    let result = match worker.map(|h| h.join()) {
        Ok(Ok(r)) => r,
        Ok(Err(_)) => {
            metafork::command::warn("error: internal failure (a bug in metafork); please report it with the input");
            end(metafork::command::exit::INTERNAL);
        }
        Err(e) => {
            metafork::command::warn(&format!("error: cannot start the worker thread: {e}"));
            end(metafork::command::exit::INTERNAL);
        }
    };
    if constraints::budget::interrupted() {
        // Interrupted while committing, the output may be whole already: say which.
        metafork::command::warn(match &result {
            Ok(()) => "metafork: interrupted, after its output was written in full",
            Err(_) => "metafork: interrupted (an output it had not finished writing is left as it was)",
        });
        end(metafork::command::exit::INTERRUPTED);
    }
    if let Err(f) = result {
        if !f.message.trim().is_empty() {
            metafork::command::warn(f.message.trim_end());
        }
        end(f.code);
    }
    end(0);
}
