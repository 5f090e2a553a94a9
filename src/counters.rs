//! Resource counters of a kernel: registers per thread (estimated from optimised IR, and
//! exactly from `ptxas -v` when asked), shared memory per block and threads per block (as
//! polynomials in the parameters).

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
    /// Ground truth per architecture, when `ptxas` ran.
    pub ptxas: BTreeMap<String, PtxasReport>,
}

/// The JSON record `metafork counters --json` prints per kernel.
#[derive(Serialize, Debug)]
pub struct CountersRecord {
    pub kernel: String,
    /// Estimated registers per thread.
    pub estimate: u32,
    /// Shared memory per block, in elements.
    pub shared_memory: String,
    pub shared_memory_bytes: String,
    pub threads_per_block: String,
    /// Registers per thread reported by ptxas, by architecture.
    pub ptxas: BTreeMap<String, u32>,
}

impl Counters {
    pub fn record(&self) -> CountersRecord {
        CountersRecord {
            kernel: self.kernel.clone(),
            estimate: self.registers.registers,
            shared_memory: self.shared_elements.to_string(),
            shared_memory_bytes: self.shared_bytes.to_string(),
            threads_per_block: self.threads_per_block.to_string(),
            ptxas: self.ptxas.iter().map(|(a, r)| (a.clone(), r.registers)).collect(),
        }
    }
}

/// Lower, optimise with the fixed pipeline, and count; run `ptxas` for each architecture given.
pub fn count(kernel: &Kernel, ptxas_archs: &[String]) -> Result<Counters, String> {
    let context = Context::create();
    let module = lower_kernel(&context, kernel).map_err(|e| e.to_string())?;
    pipeline::optimize(&module)?;
    target::verify(&module).map_err(|e| format!("IR invalid after the pipeline: {e}"))?;
    let function = module.get_function(&kernel.name).ok_or("kernel function missing after the pipeline")?;
    let estimate = registers::estimate(function);
    let mut truth = BTreeMap::new();
    if !ptxas_archs.is_empty() {
        let tool = ptxas::find_ptxas().ok_or("`ptxas` is not on PATH (run `make setup`, then put .toolchain/cuda/nvidia/cu13/bin on PATH)")?;
        for arch in ptxas_archs {
            let ptx = target::emit_ptx(&module, arch)?;
            let report = ptxas::assemble(&tool, &ptx, arch)?
                .into_iter()
                .find(|r| r.kernel == kernel.name)
                .ok_or_else(|| format!("ptxas reported nothing for `{}`", kernel.name))?;
            truth.insert(arch.clone(), report);
        }
    }
    Ok(Counters {
        kernel: kernel.name.clone(),
        registers: estimate,
        shared_elements: kernel.shared_elements(),
        shared_bytes: kernel.shared_bytes(),
        threads_per_block: kernel.threads_per_block(),
        ptxas: truth,
    })
}
