//! Register-pressure transformations at the IR level (the paper's strategy O_1).
//!
//! Contract: each function changes only what its name says and keeps the module valid.
//! - Level 1, [`disable_unrolling`]: a loop latch gets `llvm.loop.unroll.disable`; LLVM's
//!   unroller honours it and the NVPTX back end emits `.pragma "nounroll"`, so ptxas keeps the
//!   loop rolled too (CUDA's `#pragma unroll 1`).
//! - Level 2, 32-bit tile index arithmetic, is made by the lowering from the kernel form's
//!   flag: the emitted CUDA must compute the same way, so the decision lives in the kernel form
//!   (`metafork::strategy::narrow`), not here.
//! - Level 3, [`cap_registers`]: the kernel gets the NVVM annotation `maxnreg`, which the NVPTX
//!   back end emits as `.maxnreg N`; ptxas then allocates at most N registers and spills the
//!   rest to local memory (CUDA's `__maxnreg__(N)`). [`register_cap`] reads it back, and the
//!   register counter is the smaller of its estimate and the cap.

use inkwell::context::Context;
use inkwell::module::Module;
use inkwell::values::{AsValueRef, BasicMetadataValueEnum, FunctionValue, InstructionValue};

/// The NVVM annotation NVPTX reads for `.maxnreg`.
const MAXNREG: &str = "maxnreg";

/// Attach `!llvm.loop !{!self, !{!"llvm.loop.unroll.disable"}}` to a loop's latch branch.
/// A loop ID must be a distinct node whose first operand is itself, which inkwell cannot
/// build, so this uses the C API: a temporary node, then replace-all-uses.
pub fn disable_unrolling(context: &Context, latch: InstructionValue<'_>) {
    use inkwell::llvm_sys::core::*;
    let name = "llvm.loop.unroll.disable";
    let kind = "llvm.loop";
    // SAFETY: every pointer passed is created here from the same live context, and the
    // temporary node is disposed of only after all its uses were replaced.
    unsafe {
        let ctx = context.raw();
        let tmp = inkwell::llvm_sys::debuginfo::LLVMTemporaryMDNode(ctx, std::ptr::null_mut(), 0);
        let mut hint = [LLVMMDStringInContext2(ctx, name.as_ptr() as *const _, name.len())];
        let hint_node = LLVMMDNodeInContext2(ctx, hint.as_mut_ptr(), 1);
        let mut ops = [tmp, hint_node];
        let loop_id = LLVMMDNodeInContext2(ctx, ops.as_mut_ptr(), 2);
        // Replaces the temporary everywhere and deletes it.
        inkwell::llvm_sys::debuginfo::LLVMMetadataReplaceAllUsesWith(tmp, loop_id);
        let kind_id = LLVMGetMDKindIDInContext(ctx, kind.as_ptr() as *const _, kind.len() as u32);
        LLVMSetMetadata(latch.as_value_ref(), kind_id, LLVMMetadataAsValue(ctx, loop_id));
    }
}

/// Limit `kernel` to `registers` registers per thread: `!nvvm.annotations = !{ptr @kernel,
/// !"maxnreg", i32 N}`.
pub fn cap_registers<'ctx>(context: &'ctx Context, module: &Module<'ctx>, kernel: FunctionValue<'ctx>, registers: u32) -> Result<(), String> {
    let ops: [BasicMetadataValueEnum; 3] = [
        kernel.as_global_value().as_pointer_value().into(),
        context.metadata_string(MAXNREG).into(),
        context.i32_type().const_int(registers as u64, false).into(),
    ];
    module.add_global_metadata("nvvm.annotations", &context.metadata_node(&ops)).map_err(|e| format!("cannot annotate `maxnreg`: {e}"))
}

/// The `maxnreg` annotation of `kernel`, if it has one.
pub fn register_cap(module: &Module<'_>, kernel: FunctionValue<'_>) -> Option<u32> {
    let me = kernel.as_global_value().as_pointer_value().as_value_ref();
    module.get_global_metadata("nvvm.annotations").into_iter().find_map(|node| {
        let ops = node.get_node_values()?;
        let [target, key, value] = ops.as_slice() else { return None };
        if target.as_value_ref() != me || key.into_metadata_value().get_string_value()? != MAXNREG.as_bytes() {
            return None;
        }
        value.into_int_value().get_zero_extended_constant().map(|n| n as u32)
    })
}
