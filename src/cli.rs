//! The command line: argument parsing and the subcommands. Exit codes (`command::exit`, the
//! same for every command): 0 success, 1 rejected input (a diagnostic, an unreadable or
//! unwritable file, a bad value), 2 usage error, 3 a defect `verify` found, 4 unverified or a
//! budget ran out, 130 interrupted.

use crate::command::{self, print, text_table, Failure};
use crate::counters::count_with_cuda;
use crate::kernel::Kernel;
use crate::output::write_atomic;
use crate::report::parse_report;
use clap::{Parser, Subcommand, ValueEnum};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

/// The exit statuses, as `--help` prints them; the README's "Exit status" paragraph says the
/// same (a test holds them together).
pub const EXIT_CODES: &str = "Exit status: 0 success (verify: every leaf proved); 1 rejected input (a diagnostic with \
file, line and column; an unreadable or unwritable file; a bad value, profile or wisdom file, with the line at \
fault); 2 usage error; 3 a defect found by verify (a race, barrier divergence, an out-of-bounds access, a \
mismatch with the serial program, or a file in the directory that is not what the source generates); 4 \
unverified or unfinished (Z3 unknown, a construct the model cannot express, a differential run \
stopped by its step budget, --time-limit spent); 130 interrupted (Ctrl-C, SIGTERM, SIGHUP or SIGQUIT: the work stops, tool runs \
and temporaries are removed, and an output not yet complete is not written; a second Ctrl-C ends it at once).";

#[derive(Parser, Debug)]
#[command(
    name = "metafork",
    version,
    about = "Comprehensive parametric CUDA kernels from MetaFork loop nests",
    long_about = "metafork reads C functions whose bodies hold `meta_schedule { meta_for ... }` loop \
nests (the MetaFork language), keeps machine parameters (registers, shared memory, threads per \
block) and program parameters (block sizes, granularity) as symbols, and builds kernels that \
stay correct for every value the constraints allow.\n\nStart with `metafork parse FILE` to see \
how a program is understood: which integer scalars are program parameters (block sizes and \
granularities, which `tune` chooses) and which are data parameters (every other one, given at run \
time: the sizes of arrays, a time-step count), the facts, and how each schedule maps to the grid \
and thread block.",
    after_long_help = EXIT_CODES
)]
pub struct Cli {
    /// Colour diagnostics: auto (when stderr is a terminal and NO_COLOR is unset), always, never.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto, global = true)]
    pub color: ColorChoice,

    /// Stop every long phase (building trees, verifying, searching a tuning space, running
    /// ptxas) once this many seconds have passed; what was not finished is reported as
    /// unverified or unfinished, with exit status 4. 0: no limit.
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_TIME_LIMIT_S, global = true)]
    pub time_limit: u64,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Parse and check a MetaFork file, then print its kernels as YAML.
    ///
    /// For each kernel function: `program_parameters` (the integer scalars that size a thread
    /// loop or divide a grid or serial loop's extent: block sizes and granularities, which `tune`
    /// chooses), `data_parameters` (every other integer scalar, given at run time: array sizes, a
    /// time-step count, an integer coefficient), `values` (floating scalars),
    /// `arrays` (element type and extents as polynomials), `derived` scalars, `facts`
    /// (each `assume`/`assert` conjunct, with its polynomial constraint when it has one), and
    /// `schedules` (the grid and block loops with the index each maps to). Errors are printed
    /// with file, line and column, and the exit status is 1.
    Parse {
        /// The MetaFork source file (`.mf`, or `.c`).
        file: PathBuf,
        /// Write the report to this file (atomically) instead of standard output.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Print JSON instead of YAML.
        #[arg(long)]
        json: bool,
    },
    /// Build the comprehensive decision tree of each schedule and write its kernels.
    ///
    /// For each counter (shared memory per block, registers per thread, threads per block,
    /// registers per block) the tree forks: accept (`value <= limit`) or refuse (`limit <
    /// value`, then a strategy that lowers the counter is applied and the counters evaluated
    /// again). Then it forks on coalescing and bank conflicts access by access, and, where the
    /// innermost serial loop can be unrolled by 4, on its trip count and on whether the unrolled
    /// code fits and leaves occupancy as it was; last, where two grid-x iterations can share a
    /// block, on whether the merged grid still fills the device and the merged code fits.
    /// Every branch's constraints are kept consistent with Z3. Machine limits are the symbols
    /// R, Z_B (bytes), T_B, R_B, per multiprocessor R_SM (registers) and W_SM (warps), and N_SM
    /// (multiprocessors), renamed with `_dev` if the program uses the name.
    /// Writes DIR/tree.yaml, DIR/tree.svg and DIR/tree.dot (the tree as a decision diagram, one
    /// box per kernel, drawn and in Graphviz's language) and, with --emit-cuda, one .cu per kernel leaf and the
    /// dispatch code; also DIR/source.mf (the program's copy), DIR/wisdom.yaml (with --wisdom)
    /// and DIR/manifest.json (every file's SHA-256), so `verify DIR` needs nothing else. DIR is
    /// replaced whole: built beside it and swapped in under a lock, so an interrupted or
    /// concurrent run never leaves a mix; a file whose contents did not change is kept as it
    /// was (same file, same modification time, so a build over DIR does not redo it); files of
    /// yours in DIR are kept (one the output would replace, or a `tune --emit-harness` output
    /// there, is refused without --force). Prints the tree.
    Gen {
        /// The MetaFork source file.
        file: PathBuf,
        /// The output directory (created if missing).
        #[arg(short, long, value_name = "DIR")]
        output: PathBuf,
        /// Write one CUDA source per kernel leaf, and each schedule's dispatch code
        /// (`<schedule>_dispatch.h`: plain C++ leaf selection; `<schedule>_dispatch.cu`: query
        /// the device and launch the admissible leaf).
        #[arg(long)]
        emit_cuda: bool,
        /// A `wisdom.yaml` from a tuning harness (`tune --emit-harness`); repeatable, one per
        /// device and size (a file may also hold several, separated by `---` lines). The
        /// dispatch header gets `metafork_<schedule>_wisdom()` (and the .cu
        /// `metafork_<schedule>_tuned()` for the current device): the program parameters
        /// measured best on that device at the nearest power-of-two size bucket that the point
        /// admits, saying when it falls back.
        #[arg(long, value_name = "FILE", requires = "emit_cuda")]
        wisdom: Vec<PathBuf>,
        /// Also compile every kernel leaf with nvcc for ARCH (repeatable) and record what ptxas
        /// reports (registers, static shared memory, spills) beside each leaf's estimate in
        /// tree.yaml and in the picture; `verify` compiles again to check them. With
        /// METAFORK_CACHE_DIR set to a directory, nvcc's reports are kept there and a repeated
        /// compile (same nvcc, architecture and source), `verify`'s included, is answered from
        /// it (its entries are trusted as your own files; one that cannot be ptxas's report is
        /// compiled again); unset it for `verify` to compile everything.
        #[arg(long = "ptxas", value_name = "ARCH", value_parser = crate::compiled::ARCHS)]
        ptxas: Vec<String>,
        /// After writing the files, verify every kernel leaf as `metafork verify` does; the exit
        /// status is then verify's (0 proved, 3 defect, 4 unverified).
        #[arg(long)]
        verify: bool,
        /// Print a JSON summary (per schedule: nodes, kernel leaves, leaves without a kernel,
        /// distinct kernels, height, Z3 queries; the files written) instead of the tree, as one
        /// JSON object; with --verify, its `verdicts` member holds the records `verify --json`
        /// prints. `z3_queries` counts the branch checks that reached Z3: exact pre-checks (a
        /// linear relaxation, a search for a point) decide most of them first, so 0 is common.
        #[arg(long)]
        json: bool,
        /// Replace files in DIR that metafork did not write (not listed in DIR's manifest, or
        /// changed since: your own `tree.yaml`, a leaf's `.cu` edited by hand), or a timing
        /// harness that `tune --emit-harness` wrote there. Without it such a file is named and
        /// nothing is written. Your other files are kept either way.
        #[arg(long)]
        force: bool,
    },
    /// Prove the kernel leaves of a `gen` output directory.
    ///
    /// Reads only DIR: its manifest (`manifest.json`), the copy of the source program `gen`
    /// put there (`source.mf`; or --source FILE), and the generated files, each a regular file
    /// (symbolic links are not followed). Rebuilds the trees from the source and refuses DIR when
    /// any file differs from what that program generates, naming the file (exit 3). Then, for
    /// every kernel leaf: Z3 checks, for every parameter value the
    /// leaf's constraints admit, that no two threads race on an element (shared memory within a
    /// block between barriers; global memory across blocks), that threads of a block never
    /// disagree on reaching a barrier, and that no access leaves its array (the two-thread
    /// reduction); and the kernel is run on the CPU with CUDA semantics at small parameter points
    /// sampled from the constraints, on seeded random inputs, and compared bit for bit with the
    /// serial program (each operation rounded on its own: nvcc's default `-fmad=true` fuses
    /// `a * b + c`, so a device matches bit for bit only with `-fmad=false`), but for a floating
    /// element a reduction updates (`+=` by several threads,
    /// an atomic add): the threads of a `meta_for` run in no set order, so its sum may be any
    /// order's, and it must lie within the rounding bound of any order of its terms (2 g(k+1)
    /// sum|x|, g(n) = n u / (1 - n u)). Prints one line per leaf. Exit status: 0 when every leaf is proved and
    /// matches, or is unreachable (Z3: no parameter values satisfy the program's facts and its
    /// constraints), 1 when DIR is unusable (not written by `gen`, its source does not check), 3 when
    /// a defect is found (`race`, `barrier divergence`, `out of bounds`, `mismatch`, `division by zero`, with a
    /// witness, or a file that differs), 4 when something stays unverified (Z3 unknown, a
    /// construct the model cannot express, a kernel's CPU run stopped by its step budget, or a
    /// leaf's share of --time-limit spent: the proofs several leaves share may take half the time
    /// left, and each leaf the time left over the leaves still to check, per core, so one costly
    /// proof or leaf cannot leave the others unchecked).
    Verify {
        /// A directory written by `metafork gen --emit-cuda`.
        dir: PathBuf,
        /// Re-derive DIR from this program instead of DIR's own copy of its source
        /// (`source.mf`).
        #[arg(long, value_name = "FILE")]
        source: Option<PathBuf>,
        /// Differential points per leaf, from 1 to 10000 (a leaf whose region holds fewer small
        /// points says so; the points not run when --time-limit is spent are counted and said).
        #[arg(long, default_value_t = crate::verify::Options::DEFAULT_POINTS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=crate::verify::Options::MAX_POINTS as u64))]
        points: usize,
        /// Print the verdicts as JSON (one object per kernel leaf: schedule, leaf, kernel,
        /// status `proved`/`defect`/`unverified`, defect, detail, Z3 queries, points, sampling:
        /// a note when fewer points than asked were found, or why none was) instead.
        #[arg(long)]
        json: bool,
        /// Only re-derive DIR's files from the source and compare them (exit 0 when every
        /// file is what metafork generates, 3 naming the first that is not), without the proofs
        /// and runs: a quick check that generated code is up to date.
        #[arg(long, conflicts_with_all = ["points", "json"])]
        files_only: bool,
    },
    /// Print each kernel's resource counters: registers per thread, shared memory per block,
    /// threads per block, of the code that runs at the root of its tree (`cache(...)` staged in
    /// shared memory where its checks pass).
    ///
    /// Registers are estimated from the kernel's LLVM IR after the fixed `default<O2>`
    /// pipeline (a liveness count of 32-bit words plus a fixed cost; see
    /// `llvm-passes/src/registers.rs`; the pipeline runs without the passes that never change
    /// these kernels' IR, and `make bench-pipeline` checks that the IR is O2's). With `--ptxas ARCH` (repeatable: sm_75, sm_80, sm_86,
    /// sm_89, sm_90, sm_100) the same IR is compiled to PTX by LLVM's NVPTX back end (LLVM 19
    /// writes PTX up to sm_90; for sm_100 it is sm_90's PTX, as the driver would JIT it) and
    /// assembled by the real `ptxas -v` for ARCH, whose register count is shown beside the estimate for that architecture (a
    /// loop ptxas unrolls fills registers up to what costs no occupancy there, and loads
    /// issued early are held only up to it: 32 on sm_80 and sm_90, 64 on sm_75; the tree keys
    /// its forks on the sm_90 estimate); the kernel is also
    /// emitted as CUDA and compiled by `nvcc` for the same architecture, and that count shown too.
    /// Shared memory is a polynomial in the parameters, in elements and bytes.
    Counters {
        /// The MetaFork source file.
        file: PathBuf,
        /// Also report the registers `ptxas` allocates for this architecture (repeatable).
        #[arg(long = "ptxas", value_name = "ARCH", value_parser = crate::compiled::ARCHS)]
        ptxas: Vec<String>,
        /// Print a JSON array (kernel, estimate, shared_memory, ptxas, nvcc) instead of a table.
        #[arg(long)]
        json: bool,
        /// Also report each access's memory counters at this point, NAME=VALUE (repeatable,
        /// every integer parameter once; the program's facts must hold there): global-memory
        /// coalescing (bytes used over 32-byte sectors moved) and shared-memory bank passes, for
        /// the first warp of the first block, of the code the table counts (`cache(...)`
        /// staged: the tiles' loads and the shared accesses).
        #[arg(long = "at", value_name = "NAME=VALUE", value_parser = size_argument)]
        at: Vec<String>,
        /// With --at: also the occupancy on this device (a built-in profile or a .yaml file) at
        /// that point, from the estimated registers, and the resource that limits it.
        #[arg(long, value_name = "NAME", requires = "at")]
        device: Option<String>,
    },
    /// Rank program-parameter values for a device, or build a standalone search space.
    ///
    /// With a MetaFork FILE and --device: builds each schedule's decision tree, enumerates the
    /// program parameters (block sizes: powers of two and warp multiples up to the device's
    /// threads per block; other program parameters: 1, 2, 4, ..., 32; or the values of --range
    /// or of a --space file), keeps the configurations that satisfy the program's facts and that
    /// some kernel leaf admits on the device for the given --size values (leaving out, and
    /// counting, those whose launch runs no thread block there or whose grid is larger than
    /// the device's, those no kernel leaf fits or whose leaf's block could not be resident on a
    /// multiprocessor, and those that differ from a kept one only in parameters the schedule
    /// does not read), ranks them by the
    /// time a data-movement model estimates (flops, global bytes moved and shared-memory passes
    /// per launch, from the leaf's code and accesses at that point, against the device's FP
    /// rate, bandwidth and shared-memory rate, with the resident warps hiding latency, and the
    /// rate at which multiprocessors take new blocks; a profile without
    /// `memory_bandwidth_gb_s` and `boost_clock_mhz` ranks by occupancy times coalescing times
    /// bank and branch efficiency), ranks after all others, and marks `partial`, those where a
    /// division in the schedule's grid (`N / (2 * B1)`) has a remainder and so runs fewer
    /// iterations, prints the top --top as a table and, with --output FILE,
    /// writes every admissible configuration, with its leaf, counters and score, to FILE.
    /// --emit-harness DIR writes a CUDA program holding every admissible configuration that, on
    /// a GPU, times the model's top --top, then searches locally around the fastest (or times
    /// all, with its --all), checks each answer against the serial program, keeps a cache to
    /// resume from, and writes wisdom.yaml (`./harness --help` says more). Without FILE, --space FILE.yaml builds the space(s) in the file
    /// (parameters with value lists or {range: [lo, hi]}, restrictions as C expressions) and
    /// reports their sizes and construction times.
    Tune {
        /// The MetaFork source file (omit it to build a --space file on its own).
        #[arg(requires = "device", required_unless_present = "space")]
        file: Option<PathBuf>,
        /// A built-in device profile (m2050, v100, a100, l4, h100, h200) or a .yaml profile.
        #[arg(long)]
        device: Option<String>,
        /// Fix a parameter: NAME=VALUE (repeatable; every data parameter needs one).
        #[arg(long = "size", value_name = "NAME=VALUE", value_parser = size_argument)]
        sizes: Vec<String>,
        /// Enumerate a parameter over LO..HI (inclusive) or V1,V2,... (repeatable).
        #[arg(long = "range", value_name = "NAME=LO..HI", value_parser = range_argument)]
        ranges: Vec<String>,
        /// A search space in YAML: its parameters' values and its restrictions are used.
        #[arg(long, value_name = "FILE.yaml")]
        space: Option<PathBuf>,
        /// The space to use when the file holds several (under `spaces:`).
        #[arg(long, value_name = "NAME", requires = "space")]
        space_name: Option<String>,
        /// Only this schedule (by name).
        #[arg(long)]
        schedule: Option<String>,
        /// How many configurations the table shows (and how many of the model's best the
        /// harness times before its local search).
        #[arg(long, default_value_t = 10)]
        top: usize,
        /// Also write every admissible configuration, with its leaf, counters and score, to
        /// FILE (YAML, written atomically). Nothing is written without it.
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Print the admissible configurations as JSON (best first) instead of the table.
        #[arg(long)]
        json: bool,
        /// Write a CUDA timing harness for this schedule's admissible configurations into DIR.
        #[arg(long, value_name = "DIR")]
        emit_harness: Option<PathBuf>,
        /// With --emit-harness: replace files in DIR that metafork did not write, or `gen`'s
        /// output there (as `gen --force`); without it nothing is written.
        #[arg(long, requires = "emit_harness")]
        force: bool,
        /// Count registers with the tree's estimates, taken as the counts the device would
        /// report (with the threads per block it would allow for them). By default, when nvcc
        /// is on PATH, the kernel leaves are compiled for the device's architecture and ptxas's
        /// counts decide, as the generated dispatcher's `cudaFuncGetAttributes` will on the device.
        #[arg(long)]
        estimates: bool,
    },
    /// List the built-in device profiles, or check and print one.
    ///
    /// Without an argument, prints a table of the built-in profiles (from NVIDIA's published
    /// tables; the files are in `constraints/devices/`). With a name (`h200`) or the path of a
    /// YAML profile of your own, checks it (every field present and sensible; an error names the
    /// field) and prints it as YAML. Shared memory is in bytes; registers are 32-bit.
    Devices {
        /// A built-in profile name (m2050, v100, a100, l4, h100, h200) or a path to a .yaml profile.
        device: Option<String>,
        /// Print JSON (an array of every built-in profile, or the one profile) instead.
        #[arg(long)]
        json: bool,
    },
}

/// A `NAME=VALUE` argument, checked as clap parses it (a malformed one is a usage error, exit
/// 2); whether the program has the name is the command's to check.
fn size_argument(text: &str) -> Result<String, String> {
    crate::tune::command::parse_size(text).map(|_| text.to_string())
}

/// A `NAME=LO..HI` or `NAME=V1,V2,...` argument, checked as clap parses it.
fn range_argument(text: &str) -> Result<String, String> {
    crate::tune::command::parse_range(text).map(|_| text.to_string())
}

fn use_color(choice: ColorChoice) -> bool {
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
    }
}

fn emit(text: &str, output: Option<&Path>) -> Result<(), Failure> {
    match output {
        Some(p) => write_atomic(p, text.as_bytes()).map_err(|e| Failure::input(format!("error: cannot write `{}`: {e}", command::shown(p)))),
        None => print(text),
    }
}

/// The default of `--time-limit`: far above what any program of the corpus needs (the slowest
/// `verify` of an example takes about a minute on two cores).
pub const DEFAULT_TIME_LIMIT_S: u64 = 1800;

pub fn run(cli: Cli) -> Result<(), Failure> {
    let color = use_color(cli.color);
    let limit = (cli.time_limit > 0).then(|| std::time::Duration::from_secs(cli.time_limit));
    constraints::budget::set(limit);
    if let Some(l) = limit {
        llvm_passes::ptxas::set_time_limit(l.min(std::time::Duration::from_secs(300)));
        if let Some(end) = std::time::Instant::now().checked_add(l) {
            llvm_passes::ptxas::set_deadline(end);
        }
    }
    match cli.command {
        Command::Parse { file, output, json } => {
            if let Some(o) = output.as_deref().filter(|o| crate::output::is_same_file(o, &file)) {
                return Err(Failure::input(format!("error: `-o {}` is the program itself; writing the report there would replace it (choose another path)", command::shown(o))));
            }
            let program = command::load(&file, color)?;
            let report = parse_report(&command::shown(&file), &program);
            let text = if json {
                serde_json::to_string_pretty(&report).map(|s| s + "\n").map_err(|e| Failure::input(e.to_string()))?
            } else {
                serde_yaml::to_string(&report).map_err(|e| Failure::input(e.to_string()))?
            };
            emit(&text, output.as_deref())
        }
        Command::Verify { dir, source, points, json, files_only } => crate::verify::command::run(&dir, source.as_deref(), points, json, files_only, color),
        Command::Gen { file, output, emit_cuda, wisdom, ptxas, verify, json, force } => crate::emit::command::run(&crate::emit::command::Request { file: &file, output: &output, emit_cuda, wisdom: &wisdom, ptxas: &ptxas, verify, json, force, color }),
        Command::Counters { file, mut ptxas, json, at, device } => {
            // An architecture asked twice is one column, compiled once (as `gen --ptxas`).
            let mut seen = std::collections::BTreeSet::new();
            ptxas.retain(|a| seen.insert(a.clone()));
            let program = command::load(&file, color)?;
            let device = device.map(|d| constraints::device::DeviceProfile::load(&d)).transpose().map_err(|e| Failure::input(format!("error: {e}")))?;
            let point = at_point(&program, &at).map_err(Failure::input)?;
            let backend = constraints::solver::Backend::default();
            let mut rows = Vec::new();
            let mut accesses = Vec::new();
            for k in &program.kernels {
                for s in &k.schedules {
                    let kernel = Kernel::from_schedule(k, s).map_err(|e| Failure::input(format!("error: {}: {e}", s.name)))?;
                    // The code that runs, as the tree's root counts it: `cache(...)` staged in
                    // shared memory where its safety checks pass (issue 24: the unstaged form
                    // reported 0 shared bytes for every cached schedule).
                    // The root's own choices too (CSE, prefetching) and what follows from them
                    // (32-bit tile indices, promoted accumulators): the code `gen` writes.
                    let staged = crate::tree::code_at_root(k, &kernel, &backend).map_err(|e| Failure::of_work(format!("error: {}: {e}", s.name)))?;
                    rows.push(count_with_cuda(Some(k), &staged, &ptxas).map_err(|e| Failure::of_work(format!("error: {}: {e}", s.name)))?);
                    // The accesses of the same code: with `cache(...)` staged, the tiles' global
                    // loads and the shared accesses that replace the program's.
                    if !at.is_empty() {
                        let missing: Vec<String> = k.integer_parameters().into_iter().filter(|p| !point.contains_key(p)).map(|p| format!("`{p}`")).collect();
                        if !missing.is_empty() {
                            return Err(Failure::input(format!("error: {}: give {} with --at (every integer parameter of `{}`, once)", s.name, missing.join(", "), k.name)));
                        }
                        let mut r = crate::perf::report(k, &staged, &backend, &point).map_err(|e| Failure::input(format!("error: {}: {e}", s.name)))?;
                        r.iter_mut().for_each(|a| a.access = spelled_as_emitted(&a.access));
                        accesses.push((s.name.clone(), r));
                    }
                }
            }
            let text = if json {
                let mut records: Vec<serde_json::Value> = rows.iter().map(|r| serde_json::to_value(r.record()).unwrap_or_default()).collect();
                for (record, (_, r)) in records.iter_mut().zip(&accesses) {
                    record["accesses"] = serde_json::to_value(r).unwrap_or_default();
                }
                if let Some(d) = &device {
                    for (record, row) in records.iter_mut().zip(&rows) {
                        let (value, limiter) = occupancy_at(d, row, &point).map_err(Failure::input)?;
                        record["occupancy"] = serde_json::json!({ "device": d.name, "value": value, "limited_by": limiter });
                    }
                }
                serde_json::to_string_pretty(&records).map(|s| s + "\n").map_err(|e| Failure::input(e.to_string()))?
            } else {
                let mut t = counters_table(&rows, &ptxas);
                for (name, r) in &accesses {
                    t.push_str(&format!("\n{name}: memory counters of the first warp at {}\n", point.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ")));
                    for a in r {
                        let value = if a.memory == "shared" { format!("{} bank pass{}", a.value, if a.value == 1.0 { "" } else { "es" }) } else { format!("coalescing {:.3}", a.value) };
                        t.push_str(&format!("  {:<8} {:<50} {:<22} ({})\n", a.memory, a.access, value, a.case));
                    }
                }
                if let Some(d) = &device {
                    for row in &rows {
                        let (value, limiter) = occupancy_at(d, row, &point).map_err(Failure::input)?;
                        t.push_str(&format!("\n{}: occupancy on {} {value:.3} (limited by {limiter}; {} registers estimated)\n", row.kernel, d.name, row.registers.registers));
                    }
                }
                t
            };
            emit(&text, None)
        }
        Command::Tune { file, device, sizes, ranges, space, space_name, schedule, top, output, json, emit_harness, force, estimates } => {
            let options = crate::tune::command::Options { file, device, sizes, ranges, space, space_name, schedule, top, output, json, emit_harness, force, estimates };
            // The loader's failures are whole diagnostics already (`Error: f.mf:5:25: ...`).
            let diagnosed = std::cell::Cell::new(false);
            let loader = |p: &Path| command::load(p, color).map_err(|f| {
                diagnosed.set(true);
                f.message
            });
            let text = crate::tune::command::run(&options, &loader).map_err(|e| if diagnosed.get() || e.starts_with("error") { Failure::of_work(e) } else { Failure::of_work(format!("error: {e}")) })?;
            emit(&text, None)
        }
        Command::Devices { device, json } => {
            let text = match (device, json) {
                (None, false) => devices_table(&constraints::device::DeviceProfile::built_in()),
                (None, true) => serde_json::to_string_pretty(&constraints::device::DeviceProfile::built_in()).map(|s| s + "\n").map_err(|e| Failure::input(e.to_string()))?,
                (Some(d), json) => {
                    let profile = constraints::device::DeviceProfile::load(&d).map_err(|e| Failure::input(format!("error: {e}")))?;
                    if json {
                        serde_json::to_string_pretty(&profile).map(|s| s + "\n").map_err(|e| Failure::input(e.to_string()))?
                    } else {
                        serde_yaml::to_string(&profile).map_err(|e| Failure::input(e.to_string()))?
                    }
                }
            };
            emit(&text, None)
        }
    }
}

/// An access's text with the tool's own names as the kernel files spell the readable ones
/// (`$:a_tile0` is `a_tile0`) and as generated code spells the others (`$e`: `metafork_e`).
fn spelled_as_emitted(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(crate::names::INTERNAL) {
        out.push_str(&rest[..at]);
        let tail = &rest[at + 1..];
        let (readable, tail) = match tail.strip_prefix(':') {
            Some(t) => (true, t),
            None => (false, tail),
        };
        let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        out.push_str(if readable { "" } else { "metafork_" });
        out.push_str(&tail[..end]);
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// The point of `counters --at`: every NAME=VALUE once, each an integer parameter of a function
/// of the program, and the facts of each function whose integer parameters it all gives holding
/// there (the counters of a point the program excludes would describe no run).
fn at_point(program: &crate::frontend::CheckedProgram, at: &[String]) -> Result<std::collections::BTreeMap<String, i64>, String> {
    let mut point = std::collections::BTreeMap::new();
    for a in at {
        let (name, value) = crate::tune::command::parse_size(a).map_err(|e| format!("error: --at {e}"))?;
        if !program.kernels.iter().any(|k| k.integer_parameters().contains(&name)) {
            let known: Vec<String> = program.kernels.iter().flat_map(|k| k.integer_parameters()).collect();
            return Err(format!("error: --at {}: `{name}` is not an integer parameter of the program (its integer parameters: {})", a.escape_debug(), known.join(", ")));
        }
        // A value the parameter's C type cannot hold describes no call of the function.
        let ty = program.kernels.iter().flat_map(|k| &k.params).find(|p| p.name == name).map(|p| p.ty);
        let fits = ty.and_then(|t| t.integer_range()).is_none_or(|(least, most)| (least..=most).contains(&value));
        if !fits {
            return Err(format!("error: --at {}: `{name}` = {value} does not fit `{}`", a.escape_debug(), ty.map_or("int", |t| t.c_name())));
        }
        if point.insert(name.clone(), value).is_some() {
            return Err(format!("error: --at {}: `{name}` is given twice", a.escape_debug()));
        }
    }
    for k in &program.kernels {
        let params = k.integer_parameters();
        if point.is_empty() || !params.iter().all(|p| point.contains_key(p)) {
            continue;
        }
        let facts = crate::dispatch::facts::FactSet::of(k).map_err(|e| format!("error: {}: {e}", k.name))?;
        if let Some(f) = facts.first_failing(&point) {
            return Err(format!("error: --at: the point violates the fact `{}` of `{}`", f.text, k.name));
        }
    }
    Ok(point)
}

fn devices_table(profiles: &[constraints::device::DeviceProfile]) -> String {
    let header = ["device", "cc", "SMs", "regs/thread", "regs/block", "shared/block", "shared/block opt-in", "threads/block", "warps/SM", "blocks/SM"];
    let mut table = vec![header.iter().map(|h| h.to_string()).collect::<Vec<_>>()];
    for p in profiles {
        table.push(
            [
                p.name.clone(),
                p.compute_capability.clone(),
                p.multiprocessors.to_string(),
                p.registers_per_thread.to_string(),
                p.registers_per_block.to_string(),
                p.shared_memory_per_block.to_string(),
                p.shared_memory_per_block_optin.to_string(),
                p.threads_per_block.to_string(),
                p.warps_per_multiprocessor.to_string(),
                p.blocks_per_multiprocessor.to_string(),
            ]
            .to_vec(),
        );
    }
    text_table(&table)
}

/// A kernel's occupancy on `device` at `point`, from the piecewise form (`perf::occupancy`),
/// checked against the standard calculation, with the resource that limits it.
fn occupancy_at(device: &constraints::device::DeviceProfile, row: &crate::counters::Counters, point: &std::collections::BTreeMap<String, i64>) -> Result<(f64, &'static str), String> {
    let registers = u64::from(row.registers.registers);
    let occ = crate::perf::occupancy::Occupancy::of(device, registers, &row.threads_per_block, &row.shared_bytes);
    let (value, limiter) = occ.at(point).ok_or_else(|| format!("error: {}: give every parameter of `{}` and `{}` with --at", row.kernel, row.threads_per_block, row.shared_bytes))?;
    let values = constraints::exact_point(point);
    let int = |p: &constraints::Poly| p.eval(&values).ok().and_then(|r| u64::try_from(r.to_integer()).ok()).unwrap_or(0);
    let expected = crate::tune::occupancy::occupancy(device, registers, int(&row.shared_bytes), int(&row.threads_per_block));
    if (value - expected).abs() > 1e-12 {
        return Err(format!("internal error: {}: the piecewise occupancy {value} differs from the calculation {expected}", row.kernel));
    }
    Ok((value, limiter.unwrap_or("nothing: the block does not fit")))
}

fn counters_table(rows: &[crate::counters::Counters], archs: &[String]) -> String {
    let mut header = vec!["kernel".to_string(), "registers (estimate)".into(), "shared elements".into(), "shared bytes".into(), "threads/block".into()];
    // Per architecture: the estimate for it (its occupancy-free budget), then the real counts.
    header.extend(archs.iter().map(|a| format!("estimate {a}")));
    header.extend(archs.iter().map(|a| format!("ptxas {a}")));
    header.extend(archs.iter().map(|a| format!("nvcc {a}")));
    let mut table = vec![header];
    for r in rows {
        let mut row = vec![r.kernel.clone(), r.registers.registers.to_string(), r.shared_elements.to_string(), r.shared_bytes.to_string(), r.threads_per_block.to_string()];
        row.extend(archs.iter().map(|a| r.registers.for_architecture(a).to_string()));
        row.extend(archs.iter().map(|a| r.ptxas.get(a).map_or("-".into(), |p| p.registers.to_string())));
        row.extend(archs.iter().map(|a| r.nvcc.get(a).map_or("-".into(), |p| p.registers.to_string())));
        table.push(row);
    }
    text_table(&table)
}
