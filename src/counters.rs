//! Resource counters of a kernel: registers per thread (estimated from optimised IR, and
//! exactly from `ptxas -v` when asked), shared memory per block and threads per block (as
//! polynomials in the parameters).

use crate::frontend::model::KernelFunction;
use crate::kernel::Kernel;
use crate::lower::lower_kernel;
use constraints::Poly;
use inkwell::context::Context;
use llvm_passes::ptxas::{self, PtxasReport};
use llvm_passes::{pipeline, registers, target};
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Clone, Debug)]
pub struct Counters {
    pub kernel: String,
    pub registers: registers::RegisterEstimate,
    pub shared_elements: Poly,
    pub shared_bytes: Poly,
    pub threads_per_block: Poly,
    /// Ground truth per architecture, when `ptxas` ran: on LLVM's PTX ...
    pub ptxas: BTreeMap<String, PtxasReport>,
    /// ... and on the emitted CUDA compiled by `nvcc`.
    pub nvcc: BTreeMap<String, PtxasReport>,
}

/// The JSON record `metafork counters --json` prints per kernel.
#[derive(Serialize, Debug)]
pub struct CountersRecord {
    pub kernel: String,
    /// Estimated registers per thread (the tree's: sm_80/sm_90's occupancy-free budget).
    pub estimate: u32,
    /// The estimate for each architecture ptxas ran for (`RegisterEstimate::for_architecture`).
    pub estimate_by_architecture: BTreeMap<String, u32>,
    /// Shared memory per block, in elements.
    pub shared_memory: String,
    pub shared_memory_bytes: String,
    pub threads_per_block: String,
    /// Registers per thread ptxas reports for LLVM's PTX, by architecture.
    pub ptxas: BTreeMap<String, u32>,
    /// Registers per thread ptxas reports for the emitted CUDA compiled by nvcc.
    pub nvcc: BTreeMap<String, u32>,
}

impl Counters {
    pub fn record(&self) -> CountersRecord {
        CountersRecord {
            kernel: self.kernel.clone(),
            estimate: self.registers.registers,
            estimate_by_architecture: self.ptxas.keys().map(|a| (a.clone(), self.registers.for_architecture(a))).collect(),
            shared_memory: self.shared_elements.to_string(),
            shared_memory_bytes: self.shared_bytes.to_string(),
            threads_per_block: self.threads_per_block.to_string(),
            ptxas: self.ptxas.iter().map(|(a, r)| (a.clone(), r.registers)).collect(),
            nvcc: self.nvcc.iter().map(|(a, r)| (a.clone(), r.registers)).collect(),
        }
    }
}

/// Register estimates by the IR they were made from, for the whole process (a pure function
/// of the IR: the pipeline and the model are fixed). The IR is keyed by its bitcode, which
/// encodes the same module as its text and is cheaper to make: printing the text, with its
/// column bookkeeping, was 4% of mvt's `gen` (bench/RESULTS.md, seventeenth session).
/// Bounded by the bitcode it holds: a
/// long-lived process (the fuzzer, a tool embedding the library) builds thousands of trees, and
/// an unbounded memo grew by about 70 KB per program (bench/RESULTS.md, eleventh session); past
/// [`MEMO_BYTES`] it starts over, which costs only re-counting.
#[derive(Default)]
struct EstimateMemo {
    by_ir: std::collections::HashMap<Vec<u8>, registers::RegisterEstimate>,
    ir_bytes: usize,
}

/// The most bitcode the memo keeps (a tree's distinct IR is a few hundred KB at most).
const MEMO_BYTES: usize = 16 << 20;

impl EstimateMemo {
    fn get(&self, ir: &[u8]) -> Option<registers::RegisterEstimate> {
        self.by_ir.get(ir).cloned()
    }

    fn insert(&mut self, ir: Vec<u8>, estimate: registers::RegisterEstimate) {
        if self.ir_bytes + ir.len() > MEMO_BYTES {
            self.by_ir.clear();
            self.ir_bytes = 0;
        }
        let bytes = ir.len();
        // Two threads may count the same IR at once: its bitcode is held, and counted, once.
        if self.by_ir.insert(ir, estimate).is_none() {
            self.ir_bytes += bytes;
        }
    }
}

fn estimates() -> std::sync::MutexGuard<'static, EstimateMemo> {
    static ESTIMATES: std::sync::OnceLock<std::sync::Mutex<EstimateMemo>> = std::sync::OnceLock::new();
    ESTIMATES.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner())
}

/// The register estimate of the kernel `name` in `module`, which the pipeline has optimised:
/// the model's count, capped by the kernel's `maxnreg` annotation where it has one.
pub fn estimate_of(module: &inkwell::module::Module<'_>, name: &str) -> Result<registers::RegisterEstimate, String> {
    let function = module.get_function(name).ok_or("kernel function missing after the pipeline")?;
    Ok(registers::estimate(function).capped(llvm_passes::pressure::register_cap(module, function)))
}

/// Lower, optimise with the fixed pipeline, and count; for each architecture given, run
/// `ptxas` on LLVM's PTX and, when `function` is given, `nvcc` on the emitted CUDA.
pub fn count(kernel: &Kernel, ptxas_archs: &[String]) -> Result<Counters, String> {
    count_with_cuda(None, kernel, ptxas_archs)
}

pub fn count_with_cuda(source_function: Option<&KernelFunction>, kernel: &Kernel, ptxas_archs: &[String]) -> Result<Counters, String> {
    let context = Context::create();
    let module = lower_kernel(&context, kernel).map_err(|e| e.to_string())?;
    // Codes that differ as kernels (flags, strategy results) often lower to the same IR, and
    // the estimate is a function of the IR: the pipeline (2-4 ms) runs once per distinct IR.
    let lowered = module.write_bitcode_to_memory().as_slice().to_vec();
    let known = ptxas_archs.is_empty().then(|| estimates().get(&lowered)).flatten();
    if known.is_none() {
        pipeline::optimize(&module)?;
        // `lower_kernel` verified the module; LLVM's passes keep valid IR valid. Checking their
        // output costs 1.4-1.8% of a short program's `gen` (atax, jacobi1d), so, as Clang does
        // in its release builds (`-disable-llvm-verifier`), only the builds with debug
        // assertions, which every test runs, check it again.
        if cfg!(debug_assertions) {
            target::verify(&module).map_err(|e| format!("IR invalid after the pipeline: {e}"))?;
        }
    }
    let estimate = match known {
        Some(e) => e,
        None => {
            let e = estimate_of(&module, &kernel.name)?;
            estimates().insert(lowered, e.clone());
            e
        }
    };
    let mut truth = BTreeMap::new();
    if !ptxas_archs.is_empty() {
        let tool = ptxas::find_ptxas().ok_or(crate::compiled::NO_PTXAS)?;
        for arch in ptxas_archs {
            let ptx = target::emit_ptx(&module, arch)?;
            let report = ptxas::assemble(&tool, &ptx, arch)?
                .into_iter()
                .find(|r| r.kernel == kernel.name)
                .ok_or_else(|| format!("ptxas reported nothing for `{}`", kernel.name))?;
            truth.insert(arch.clone(), report);
        }
    }
    let mut via_nvcc = BTreeMap::new();
    if let (Some(f), false) = (source_function, ptxas_archs.is_empty()) {
        let nvcc = ptxas::find_nvcc().ok_or(crate::compiled::NO_NVCC)?;
        let source = crate::emit::cuda::emit_kernel(f, kernel, &[])?;
        for arch in ptxas_archs {
            let report = ptxas::compile_cuda(&nvcc, &source, arch)?
                .into_iter()
                .find(|r| r.kernel == kernel.name)
                .ok_or_else(|| format!("nvcc's ptxas reported nothing for `{}`", kernel.name))?;
            via_nvcc.insert(arch.clone(), report);
        }
    }
    Ok(Counters {
        kernel: kernel.name.clone(),
        registers: estimate,
        shared_elements: kernel.shared_elements(),
        shared_bytes: kernel.shared_bytes(),
        threads_per_block: kernel.threads_per_block(),
        ptxas: truth,
        nvcc: via_nvcc,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn an_estimate(registers: u32) -> registers::RegisterEstimate {
        registers::RegisterEstimate { registers, max_live_words: registers, least_live_words: registers, max_live_words_uniform_addresses: registers, max_live_predicates: 0, unrolled_loop: false, rolled_loop: false, unrolled_demand: 0, cap: None, uncapped: registers, constant_bank_bases: None }
    }

    #[test]
    fn the_estimate_memo_holds_at_most_its_bound_of_ir() {
        let mut memo = EstimateMemo::default();
        let ir_of = |i: usize| format!("{i:08}{}", "x".repeat(1 << 20)).into_bytes();
        for i in 0..40 {
            memo.insert(ir_of(i), an_estimate(i as u32));
            assert!(memo.ir_bytes <= MEMO_BYTES, "after {i} inserts the memo holds {} bytes", memo.ir_bytes);
            assert_eq!(memo.ir_bytes, memo.by_ir.keys().map(Vec::len).sum::<usize>());
            assert_eq!(memo.get(&ir_of(i)), Some(an_estimate(i as u32)), "the newest entry is always kept");
        }
        // The same IR again is held, and counted, once.
        let before = memo.ir_bytes;
        memo.insert(ir_of(39), an_estimate(39));
        assert_eq!(memo.ir_bytes, before);
    }
}
