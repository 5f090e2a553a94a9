//! What the compiled kernels really use: every distinct kernel leaf of a tree compiled by nvcc
//! for an architecture, with ptxas's report (registers, static shared memory, spills).
//!
//! Contract: [`compile_leaves`] emits each distinct kernel leaf exactly as `gen` writes it,
//! compiles them all in one nvcc run (`-cubin -O3 -Xptxas -v`, the flags the README's build
//! uses), and returns ptxas's report per kernel name; a kernel missing from the report is an
//! error. [`max_threads`] is what `cudaFuncAttributes::maxThreadsPerBlock` says for a kernel of
//! that many registers (registers are allocated per warp in units of 256), so that `tune` and
//! the generated dispatcher, which reads the real attribute, decide alike.

use crate::emit::tree_files::leaf_kernel_name;
use crate::frontend::model::KernelFunction;
use crate::tree::{NodeKind, Tree};
use constraints::device::DeviceProfile;
use llvm_passes::ptxas::{self, PtxasReport};
use std::collections::BTreeMap;

/// The architectures `--ptxas` accepts (nvcc 13's, from sm_75 on; the pinned toolchain).
pub const ARCHS: [&str; 6] = ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100"];

/// Where `nvcc` is needed and not found.
pub const NO_NVCC: &str = "`nvcc` is not on PATH: install NVIDIA's CUDA toolkit (metafork is tested with 13.5) and put its `bin` on PATH (in metafork's own repository, `make setup` installs one under .toolchain/cuda/nvidia/cu13/bin)";

/// Where `ptxas` is needed and not found.
pub const NO_PTXAS: &str = "`ptxas` is not on PATH: install NVIDIA's CUDA toolkit (metafork is tested with 13.5) and put its `bin` on PATH (in metafork's own repository, `make setup` installs one under .toolchain/cuda/nvidia/cu13/bin)";

/// The register allocation unit (registers per warp are rounded up to it), for every compute
/// capability from 3.0 on (NVIDIA's occupancy calculator).
const REGISTER_UNIT: i64 = 256;

/// `sm_XY` for a profile's compute capability `X.Y`, when nvcc compiles for it.
pub fn arch_of(device: &DeviceProfile) -> Option<String> {
    let arch = format!("sm_{}", device.compute_capability.replace('.', ""));
    ARCHS.contains(&arch.as_str()).then_some(arch)
}

/// Every distinct kernel leaf of `tree`, compiled for `arch`: ptxas's report by kernel name.
pub fn compile_leaves(function: &KernelFunction, tree: &Tree, arch: &str) -> Result<BTreeMap<String, PtxasReport>, String> {
    if !ARCHS.contains(&arch) {
        return Err(format!("`{arch}` is not an architecture metafork compiles for (accepted: {})", ARCHS.join(", ")));
    }
    let nvcc = ptxas::find_nvcc().ok_or(crate::compiled::NO_NVCC)?;
    let mut names = Vec::new();
    let mut unit = String::new();
    for node in tree.leaves().filter(|n| matches!(n.kind, NodeKind::Leaf)) {
        let name = leaf_kernel_name(tree, node.id);
        if names.contains(&name) {
            continue;
        }
        let mut code = (*node.staged).clone();
        code.name = name.clone();
        unit += &crate::emit::cuda::emit_kernel(function, &code, &[])?;
        unit.push('\n');
        names.push(name);
    }
    if names.is_empty() {
        return Ok(BTreeMap::new());
    }
    let reports = ptxas::compile_cuda(&nvcc, &unit, arch)?;
    let mut found = BTreeMap::new();
    for name in names {
        let report = reports.iter().find(|r| r.kernel == name).cloned().ok_or_else(|| format!("ptxas reported nothing for `{name}` ({arch})"))?;
        found.insert(name, report);
    }
    Ok(found)
}

/// `cudaFuncAttributes::maxThreadsPerBlock` for a kernel using `registers` per thread on `device`.
pub fn max_threads(registers: u32, device: &DeviceProfile) -> i64 {
    let warp = i64::from(device.warp_size);
    let per_warp = (i64::from(registers.max(1)) * warp + REGISTER_UNIT - 1) / REGISTER_UNIT * REGISTER_UNIT;
    let warps = i64::from(device.registers_per_block) / per_warp;
    (warps * warp).min(i64::from(device.threads_per_block))
}
