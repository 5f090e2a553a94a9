//! The exact mode: registers, spills and static shared memory as `ptxas -v` reports them.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What `ptxas -v` says about one kernel.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PtxasReport {
    pub kernel: String,
    pub arch: String,
    pub registers: u32,
    pub spill_stores: u32,
    pub spill_loads: u32,
    pub stack_frame: u32,
    pub static_shared: u32,
}

/// An executable of this name on PATH, if any.
fn find_tool(name: &str) -> Option<PathBuf> {
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths).map(|d| d.join(name)).find(|p| p.is_file())
}

/// `ptxas` on PATH, if any.
pub fn find_ptxas() -> Option<PathBuf> {
    find_tool("ptxas")
}

/// `nvcc` on PATH, if any.
pub fn find_nvcc() -> Option<PathBuf> {
    find_tool("nvcc")
}

/// The longest one tool run may take before it is killed (default 300 s; the command line
/// lowers it to what is left of `--time-limit`).
static TIME_LIMIT_MS: AtomicU64 = AtomicU64::new(300_000);

/// Set the longest one `ptxas`/`nvcc` run may take.
pub fn set_time_limit(limit: Duration) {
    TIME_LIMIT_MS.store(limit.as_millis().min(u128::from(u64::MAX)) as u64, Ordering::Relaxed);
}

/// Set by [`stop`]: no tool run starts, and a running one is killed at its next poll.
static STOPPED: AtomicBool = AtomicBool::new(false);

/// Stop every tool run, now and later (the user interrupted metafork): each ends with an
/// error and its temporary directory is removed. Async-signal-safe (one atomic store).
pub fn stop() {
    STOPPED.store(true, Ordering::SeqCst);
}

/// The error of a tool run stopped by [`stop`].
pub const STOPPED_REASON: &str = "stopped: metafork was interrupted";

/// When every tool run must have ended (the whole command's time budget), if anything.
static DEADLINE: std::sync::Mutex<Option<Instant>> = std::sync::Mutex::new(None);

/// Kill any tool run still going at `at`, and start none after it: the end of the whole
/// command's time budget, of which a single run's limit ([`set_time_limit`]) is only a cap.
pub fn set_deadline(at: Instant) {
    if let Ok(mut d) = DEADLINE.lock() {
        *d = Some(at);
    }
}

/// Whether the deadline of [`set_deadline`] has passed.
fn past_deadline() -> bool {
    DEADLINE.lock().ok().and_then(|d| *d).is_some_and(|d| Instant::now() >= d)
}

/// The error of a tool run the command's time budget ended.
pub const BUDGET_REASON: &str = "stopped: the time budget ran out (see --time-limit)";

/// The longest one tool run may take now.
pub(crate) fn time_limit() -> Duration {
    Duration::from_millis(TIME_LIMIT_MS.load(Ordering::Relaxed))
}

/// Run `command` to its end, or kill it once `limit` has passed; its status and its stderr
/// followed by its stdout.
pub(crate) fn run_bounded(mut command: Command, limit: Duration) -> Result<(std::process::ExitStatus, String), String> {
    use std::io::Read;
    if STOPPED.load(Ordering::SeqCst) {
        return Err(STOPPED_REASON.into());
    }
    if past_deadline() {
        return Err(BUDGET_REASON.into());
    }
    // Its own process group, so that a stop kills what it started too (nvcc's cicc and ptxas
    // were left running, orphaned, when only nvcc was killed).
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let mut child = command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(|e| e.to_string())?;
    let read = |mut r: Box<dyn Read + Send>| std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = r.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    let out = read(Box::new(child.stdout.take().expect("piped")));
    let err = read(Box::new(child.stderr.take().expect("piped")));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if STOPPED.load(Ordering::SeqCst) {
            kill_group(&mut child);
            return Err(STOPPED_REASON.into());
        }
        if past_deadline() {
            kill_group(&mut child);
            return Err(BUDGET_REASON.into());
        }
        if start.elapsed() >= limit {
            kill_group(&mut child);
            return Err(format!("did not finish within {} s and was stopped (see --time-limit)", limit.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let log = err.join().unwrap_or_default() + &out.join().unwrap_or_default();
    Ok((status, log))
}

/// Kill `child` and every process of its group (it leads one: [`run_bounded`]), and reap it.
fn kill_group(child: &mut std::process::Child) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: `kill` has no memory effects; the group is the child's own.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The start of a tool run's temporary directory's name, followed by the process id and `-`.
const TEMP_PREFIX: &str = "metafork-";

/// Remove the tool runs' temporary directories in `tmp` that a process killed outright
/// (`kill -9`, a crash) left: named by a process that no longer exists, untouched for `age`,
/// real directories (not links) of this user. A directory whose process lives on is never
/// touched, so concurrent runs keep theirs; failures are ignored (it is only tidying).
fn remove_stale(tmp: &Path, age: Duration) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(tmp) else { return };
    // SAFETY: `getuid` has no preconditions.
    let me = unsafe { libc::getuid() };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(TEMP_PREFIX)).and_then(|rest| rest.split_once('-')).and_then(|(pid, _)| pid.parse::<libc::pid_t>().ok()).filter(|p| *p > 0) else { continue };
        // SAFETY: signal 0 only checks that the process exists.
        let gone = unsafe { libc::kill(pid, 0) } != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        let Ok(meta) = std::fs::symlink_metadata(entry.path()) else { continue };
        let old = meta.modified().ok().and_then(|m| m.elapsed().ok()).is_some_and(|e| e >= age);
        if gone && old && meta.is_dir() && meta.uid() == me {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Write `source` to `input_name` in a fresh temporary directory (created with an
/// unpredictable name, removed after; the tool's own temporaries go there too), run
/// `tool ARGS input -o kernel.cubin` within the time limit; its output (ptxas's report among
/// it).
fn run_in_temp(tool: &Path, input_name: &str, source: &str, args: &[String], arch: &str) -> Result<String, String> {
    static SWEEP: std::sync::Once = std::sync::Once::new();
    SWEEP.call_once(|| remove_stale(&std::env::temp_dir(), Duration::from_secs(60)));
    let prefix = format!("{TEMP_PREFIX}{}-", std::process::id());
    let dir = tempfile::Builder::new().prefix(&prefix).tempdir().map_err(|e| e.to_string())?;
    let input = dir.path().join(input_name);
    std::fs::write(&input, source).map_err(|e| e.to_string())?;
    let name = tool.file_name().map_or_else(|| tool.display().to_string(), |n| n.to_string_lossy().into_owned());
    let mut command = Command::new(tool);
    command.args(args).arg(&input).arg("-o").arg(dir.path().join("kernel.cubin"));
    // nvcc's own temporaries (`tmpxft_*`) go into the directory too, so that they are removed
    // with it even when the run is killed (time limit, interrupt).
    command.env("TMPDIR", dir.path());
    let (status, log) = run_bounded(command, time_limit()).map_err(|e| format!("{name} for {arch}: {e}"))?;
    if !status.success() {
        return Err(format!("{name} failed for {arch}:\n{log}"));
    }
    Ok(log)
}

/// Compile a CUDA source with `nvcc` for `arch` and read ptxas's per-kernel report; from the
/// cache when `METAFORK_CACHE_DIR` names one ([`crate::compile_cache`]).
pub fn compile_cuda(nvcc: &Path, source: &str, arch: &str) -> Result<Vec<PtxasReport>, String> {
    let args = ["-cubin".to_string(), format!("-arch={arch}"), "-O3".into(), "-Xptxas".into(), "-v".into()];
    let cached = crate::compile_cache::dir().and_then(|dir| crate::compile_cache::key(nvcc, &args, source).map(|key| (dir, key)));
    if let Some(log) = cached.as_ref().and_then(|(dir, key)| crate::compile_cache::load(dir, key)) {
        let reports = parse_report(&log, arch);
        // An entry is the user's file, but not taken on faith where it cannot be ptxas's own
        // report of this source: it is then compiled again (and the entry replaced).
        if plausible(&log, source, &reports) {
            return Ok(reports);
        }
    }
    let log = run_in_temp(nvcc, "kernel.cu", source, &args, arch)?;
    if let Some((dir, key)) = &cached {
        crate::compile_cache::store(dir, key, &log);
    }
    Ok(parse_report(&log, arch))
}

/// Whether a cached log reads as ptxas's report of `source`: at least one kernel, each named in
/// the source, and each `Used N registers` a plain decimal of at most 255 (the most any
/// architecture gives a thread); a count written `-5` or past `u32`, or a kernel the source
/// does not define, is not.
fn plausible(log: &str, source: &str, reports: &[PtxasReport]) -> bool {
    let counts_ok = log.lines().filter(|l| l.contains("Used ") && l.contains(" registers")).all(|line| {
        let Some(after) = line.split("Used ").nth(1) else { return false };
        let Some(number) = after.split(" registers").next() else { return false };
        !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()) && number.parse::<u32>().is_ok_and(|n| n <= 255)
    });
    counts_ok && !reports.is_empty() && reports.iter().all(|r| !r.kernel.is_empty() && source.contains(&r.kernel) && r.registers <= 255)
}

/// Assemble PTX for `arch` and read the per-kernel resource report.
pub fn assemble(ptxas: &Path, ptx: &str, arch: &str) -> Result<Vec<PtxasReport>, String> {
    let args = ["-arch".to_string(), arch.to_string(), "-v".into(), "-O3".into()];
    run_in_temp(ptxas, "kernel.ptx", ptx, &args, arch).map(|log| parse_report(&log, arch))
}


/// Parse the `ptxas info` lines: `Compiling entry function 'k' for 'sm_90'`, then
/// `N bytes stack frame, N bytes spill stores, N bytes spill loads` and
/// `Used N registers, ... N bytes smem, ...`.
pub fn parse_report(log: &str, arch: &str) -> Vec<PtxasReport> {
    let number_before = |line: &str, unit: &str| -> Option<u32> {
        let i = line.find(unit)?;
        line[..i].split(|c: char| !c.is_ascii_digit()).rfind(|s| !s.is_empty())?.parse().ok()
    };
    let mut reports: Vec<PtxasReport> = Vec::new();
    for line in log.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let name = rest.split('\'').next().unwrap_or("").to_string();
            reports.push(PtxasReport { kernel: name, arch: arch.to_string(), ..Default::default() });
            continue;
        }
        let Some(r) = reports.last_mut() else { continue };
        if line.contains("stack frame") {
            r.stack_frame = number_before(line, " bytes stack frame").unwrap_or(0);
            r.spill_stores = number_before(line, " bytes spill stores").unwrap_or(0);
            r.spill_loads = number_before(line, " bytes spill loads").unwrap_or(0);
        }
        if line.contains("Used ") && line.contains(" registers") {
            r.registers = number_before(line, " registers").unwrap_or(0);
            r.static_shared = number_before(line, " bytes smem").unwrap_or(0);
        }
    }
    reports
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_cached_report_that_ptxas_could_not_have_written_is_not_taken() {
        let source = "__global__ void k(float *x) {}";
        let log = |used: &str, name: &str| format!("ptxas info    : Compiling entry function '{name}' for 'sm_90'\nptxas info    : Used {used} registers, 380 bytes cmem[0]\n");
        let ok = |used: &str, name: &str| {
            let l = log(used, name);
            plausible(&l, source, &parse_report(&l, "sm_90"))
        };
        assert!(ok("37", "k"));
        assert!(ok("255", "k"));
        for used in ["256", "4294967295", "-5", "99999999999999999999999", ""] {
            assert!(!ok(used, "k"), "{used}");
        }
        assert!(!ok("37", "other"), "a kernel the source does not define");
        assert!(!plausible("", source, &[]), "no kernel at all");
    }

    #[test]
    fn folders_of_killed_runs_are_removed_and_live_ones_kept() {
        let tmp = tempfile::tempdir().unwrap();
        // A process id that cannot exist (above the kernel's maximum), and this process's.
        let dead = tmp.path().join(format!("{TEMP_PREFIX}2147483646-abc"));
        let live = tmp.path().join(format!("{TEMP_PREFIX}{}-abc", std::process::id()));
        let other = tmp.path().join("metafork-x-abc");
        for d in [&dead, &live, &other] {
            std::fs::create_dir(d).unwrap();
            std::fs::write(d.join("kernel.cu"), "x").unwrap();
        }
        let elsewhere = tmp.path().join("keep");
        std::fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, tmp.path().join(format!("{TEMP_PREFIX}2147483645-lnk"))).unwrap();
        remove_stale(tmp.path(), Duration::from_secs(3600));
        assert!(dead.exists(), "too recent");
        remove_stale(tmp.path(), Duration::ZERO);
        assert!(!dead.exists());
        assert!(live.join("kernel.cu").exists() && other.exists() && elsewhere.exists());
    }

    #[test]
    fn a_run_ends_at_its_own_limit_and_at_the_deadline() {
        let sleep = || {
            let mut c = Command::new("sleep");
            c.arg("30");
            c
        };
        let start = Instant::now();
        let e = run_bounded(sleep(), Duration::from_millis(200)).unwrap_err();
        assert!(e.starts_with("did not finish within"), "{e}");
        assert!(start.elapsed() < Duration::from_secs(10), "{:?}", start.elapsed());
        // The command's whole budget: a deadline 200 ms away ends a run whose own limit is far.
        set_deadline(Instant::now() + Duration::from_millis(200));
        let start = Instant::now();
        assert_eq!(run_bounded(sleep(), Duration::from_secs(300)).unwrap_err(), BUDGET_REASON);
        assert!(start.elapsed() < Duration::from_secs(10), "{:?}", start.elapsed());
        // Past it, no run starts.
        assert_eq!(run_bounded(sleep(), Duration::from_secs(300)).unwrap_err(), BUDGET_REASON);
    }
    use super::*;

    #[test]
    fn reads_a_ptxas_log() {
        let log = "ptxas info    : 0 bytes gmem\nptxas info    : Compiling entry function 'k' for 'sm_90'\nptxas info    : Function properties for k\n    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\nptxas info    : Used 37 registers, used 1 barriers, 1024 bytes smem, 380 bytes cmem[0]\n";
        let r = &parse_report(log, "sm_90")[0];
        assert_eq!((r.kernel.as_str(), r.registers, r.spill_stores, r.spill_loads, r.stack_frame, r.static_shared), ("k", 37, 4, 12, 8, 1024));
    }
}
