//! The optimisation pipeline that runs before counting. It is part of every counter's
//! definition: counts are of the IR *after* this pipeline, for the `sm_90` target machine.

use crate::target;
use inkwell::module::Module;
use inkwell::passes::PassBuilderOptions;

/// LLVM's new-pass-manager O2 pipeline: promotes allocas to registers, simplifies, hoists
/// loop invariants, strength-reduces; the usual shape of what `nvcc -O3` hands to `ptxas`.
pub const PIPELINE: &str = "default<O2>";

/// The architecture whose target machine drives the pipeline (target-specific cost models).
pub const PIPELINE_ARCH: &str = "sm_90";

pub fn optimize(module: &Module<'_>) -> Result<(), String> {
    let tm = target::target_machine(PIPELINE_ARCH)?;
    module.run_passes(PIPELINE, &tm, PassBuilderOptions::create()).map_err(|e| e.to_string())
}
