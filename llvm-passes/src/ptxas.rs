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

/// Write `source` to `input_name` in a fresh temporary directory (created with an
/// unpredictable name, removed after; the tool's own temporaries go there too), run
/// `tool ARGS input -o kernel.cubin` within the time limit; its output (ptxas's report among
/// it).
fn run_in_temp(tool: &Path, input_name: &str, source: &str, args: &[String], arch: &str) -> Result<String, String> {
    let dir = tempfile::Builder::new().prefix("metafork-").tempdir().map_err(|e| e.to_string())?;
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
        return Ok(parse_report(&log, arch));
    }
    let log = run_in_temp(nvcc, "kernel.cu", source, &args, arch)?;
    if let Some((dir, key)) = &cached {
        crate::compile_cache::store(dir, key, &log);
    }
    Ok(parse_report(&log, arch))
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
    use super::*;

    #[test]
    fn reads_a_ptxas_log() {
        let log = "ptxas info    : 0 bytes gmem\nptxas info    : Compiling entry function 'k' for 'sm_90'\nptxas info    : Function properties for k\n    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\nptxas info    : Used 37 registers, used 1 barriers, 1024 bytes smem, 380 bytes cmem[0]\n";
        let r = &parse_report(log, "sm_90")[0];
        assert_eq!((r.kernel.as_str(), r.registers, r.spill_stores, r.spill_loads, r.stack_frame, r.static_shared), ("k", 37, 4, 12, 8, 1024));
    }
}
