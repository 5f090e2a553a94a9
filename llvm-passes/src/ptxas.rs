//! The exact mode: registers, spills and static shared memory as `ptxas -v` reports them.

use std::path::{Path, PathBuf};
use std::process::Command;

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

/// Write `source` to `input_name` in a fresh temporary directory, run `tool ARGS input -o
/// kernel.cubin`, and parse the ptxas report from its output. The directory is removed after.
fn run_in_temp(tool: &Path, input_name: &str, source: &str, args: &[String], arch: &str) -> Result<Vec<PtxasReport>, String> {
    let dir = std::env::temp_dir().join(format!("metafork-{input_name}-{}-{}", std::process::id(), unique()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let input = dir.join(input_name);
    let result = (|| {
        std::fs::write(&input, source).map_err(|e| e.to_string())?;
        let out = Command::new(tool)
            .args(args)
            .arg(&input)
            .arg("-o")
            .arg(dir.join("kernel.cubin"))
            .output()
            .map_err(|e| format!("cannot run {}: {e}", tool.display()))?;
        let log = String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            let name = tool.file_name().map_or_else(|| tool.display().to_string(), |n| n.to_string_lossy().into_owned());
            return Err(format!("{name} failed for {arch}:\n{log}"));
        }
        Ok(parse_report(&log, arch))
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Compile a CUDA source with `nvcc` for `arch` and read ptxas's per-kernel report.
pub fn compile_cuda(nvcc: &Path, source: &str, arch: &str) -> Result<Vec<PtxasReport>, String> {
    let args = ["-cubin".to_string(), format!("-arch={arch}"), "-O3".into(), "-Xptxas".into(), "-v".into()];
    run_in_temp(nvcc, "kernel.cu", source, &args, arch)
}

/// Assemble PTX for `arch` and read the per-kernel resource report.
pub fn assemble(ptxas: &Path, ptx: &str, arch: &str) -> Result<Vec<PtxasReport>, String> {
    let args = ["-arch".to_string(), arch.to_string(), "-v".into(), "-O3".into()];
    run_in_temp(ptxas, "kernel.ptx", ptx, &args, arch)
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
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
