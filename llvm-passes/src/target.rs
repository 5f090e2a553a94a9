//! The NVPTX target: modules for `nvptx64-nvidia-cuda` with the right data layout, kernel
//! marking, verification and PTX emission for a chosen architecture (`sm_75`, `sm_80`, ...).

use inkwell::context::Context;
use inkwell::module::Module;
use inkwell::targets::{CodeModel, FileType, InitializationConfig, RelocMode, Target, TargetData, TargetMachine, TargetTriple};
use inkwell::values::FunctionValue;
use inkwell::OptimizationLevel;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::{Once, OnceLock};

pub const TRIPLE: &str = "nvptx64-nvidia-cuda";

/// LLVM's `ptx_kernel` calling convention: a function with it becomes a PTX `.entry`.
pub const PTX_KERNEL_CALL_CONV: u32 = 71;

/// The architectures every generated kernel is compiled for.
pub const ARCHITECTURES: &[&str] = &["sm_75", "sm_80", "sm_90"];

/// Address spaces of the NVPTX back end.
pub mod address_space {
    pub const GLOBAL: u16 = 1;
    pub const SHARED: u16 = 3;
}

fn initialize() {
    static INIT: Once = Once::new();
    INIT.call_once(|| Target::initialize_nvptx(&InitializationConfig::default()));
}

/// A target machine for code generation on one architecture, e.g. `sm_90`: one per
/// architecture and thread, made at first use and kept (making one builds the target's
/// lowering tables). Code generation writes to its machine, so these are not shared between
/// threads; a code generation leaves nothing in it that the next module sees. The
/// optimisation pipeline, which only reads its machine, shares one ([`pipeline_machine`]).
pub fn target_machine(arch: &str) -> Result<Rc<TargetMachine>, String> {
    thread_local! {
        static MACHINES: RefCell<HashMap<String, Rc<TargetMachine>>> = RefCell::new(HashMap::new());
    }
    if let Some(tm) = MACHINES.with(|m| m.borrow().get(arch).cloned()) {
        return Ok(tm);
    }
    let tm = Rc::new(create_machine(arch)?);
    MACHINES.with(|m| m.borrow_mut().insert(arch.to_string(), tm.clone()));
    Ok(tm)
}

/// A new NVPTX target machine for `arch`.
fn create_machine(arch: &str) -> Result<TargetMachine, String> {
    initialize();
    let triple = TargetTriple::create(TRIPLE);
    let target = Target::from_triple(&triple).map_err(|e| format!("NVPTX target unavailable: {e}"))?;
    target
        .create_target_machine(&triple, arch, "", OptimizationLevel::Default, RelocMode::Default, CodeModel::Default)
        .ok_or_else(|| format!("LLVM cannot create an NVPTX target machine for `{arch}`"))
}

/// A target machine that threads may share, for the optimisation pipeline only.
///
/// SAFETY (why `Send` and `Sync` hold for this use): LLVM 19's NVPTX target machine is only
/// read while a pass pipeline runs. `LLVMRunPasses` builds a `PassBuilder` on it, whose
/// constructor calls `registerPassBuilderCallbacks` (it adds callbacks to that builder,
/// capturing the machine by const pointer); the passes ask it for target transform info
/// (`NVPTXTTIImpl` is made from the const machine, its subtarget and lowering tables, all
/// fixed once the machine is built) and for its options. Code generation is different: it
/// writes to the machine (`resetTargetOptions`, the machine's string pool), so
/// [`emit_ptx`] keeps a machine per thread ([`target_machine`]). The machine lives as long as
/// the process (a static that is never dropped).
struct PipelineMachine(TargetMachine);
unsafe impl Send for PipelineMachine {}
unsafe impl Sync for PipelineMachine {}

/// The target machine for [`crate::pipeline::PIPELINE_ARCH`] that every thread's optimisation
/// pipeline uses: made once per process. A machine per thread cost each counting thread its
/// own lowering tables, about 96 fresh pages whose first writes, beside another thread's
/// work, took up to 23 ms of system time on the 2-core development machine (bench/RESULTS.md,
/// twenty-eighth session). Only for [`crate::pipeline`], never for code generation (see
/// [`PipelineMachine`]).
pub(crate) fn pipeline_machine() -> Result<&'static TargetMachine, String> {
    static MACHINE: OnceLock<Result<PipelineMachine, String>> = OnceLock::new();
    MACHINE.get_or_init(|| create_machine(crate::pipeline::PIPELINE_ARCH).map(PipelineMachine)).as_ref().map(|m| &m.0).map_err(Clone::clone)
}

/// The NVPTX data layout, the same for every architecture (LLVM derives it from the pointer
/// width only): taken once per process from the pipeline's shared machine, so that a thread
/// that only lowers builds none (a target machine's lowering tables are hundreds of kilobytes
/// of fresh pages, each first write a page fault).
fn data_layout() -> Result<&'static str, String> {
    static LAYOUT: OnceLock<Result<String, String>> = OnceLock::new();
    LAYOUT.get_or_init(|| Ok(pipeline_machine()?.get_target_data().get_data_layout().as_str().to_string_lossy().into_owned())).as_deref().map_err(Clone::clone)
}

/// An empty module with the NVPTX triple and data layout.
pub fn new_module<'ctx>(context: &'ctx Context, name: &str) -> Result<Module<'ctx>, String> {
    let layout = TargetData::create(data_layout()?);
    let module = context.create_module(name);
    module.set_triple(&TargetTriple::create(TRIPLE));
    module.set_data_layout(&layout.get_data_layout());
    Ok(module)
}

/// Make a function a kernel entry point (`.entry` in PTX).
pub fn mark_kernel(function: FunctionValue<'_>) {
    function.set_call_conventions(PTX_KERNEL_CALL_CONV);
}

/// Run LLVM's verifier on the module.
pub fn verify(module: &Module<'_>) -> Result<(), String> {
    module.verify().map_err(|e| e.to_string())
}

/// The processors LLVM 19's NVPTX back end knows (`llc -march=nvptx64 -mcpu=help`), oldest
/// first. Given one it does not know, LLVM warns on standard error, ignores the processor and
/// prints `.version 6.0` with the unknown `.target`, which ptxas refuses: so the unknown ones
/// never reach it ([`codegen_arch`]).
const LLVM_PROCESSORS: &[u32] = &[20, 21, 30, 32, 35, 37, 50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90];

/// The processor LLVM generates PTX for when the PTX is to be assembled for `arch`: `arch`
/// itself where LLVM knows it, else the newest it knows below `arch` (sm_90 for sm_100).
/// PTX is forward compatible: ptxas assembles PTX written for sm_90 for any later processor,
/// as the driver's JIT does for a kernel shipped as sm_90 PTX. `None` for a name that is not
/// `sm_N`, or below every known processor.
pub fn codegen_arch(arch: &str) -> Option<String> {
    let number: u32 = arch.strip_prefix("sm_")?.parse().ok()?;
    LLVM_PROCESSORS.iter().rev().find(|&&known| known <= number).map(|known| format!("sm_{known}"))
}

/// PTX text for the module, to be assembled for `arch`: written for [`codegen_arch`]`(arch)`,
/// which is `arch` itself wherever LLVM knows it. Code generation runs IR passes on the module
/// it is given, so it works on a clone: the module is unchanged, and PTX for one architecture
/// never depends on which others were emitted before.
pub fn emit_ptx(module: &Module<'_>, arch: &str) -> Result<String, String> {
    let processor = codegen_arch(arch).ok_or_else(|| format!("`{arch}` is not an NVPTX processor LLVM 19 can generate PTX for (sm_20 to sm_90, and later ones through sm_90's PTX)"))?;
    let tm = target_machine(&processor)?;
    let copy = module.clone();
    // The copy may sit where a freed module left annotations in LLVM's cache; and a failed
    // code generation leaves its own behind.
    forget_annotations(&copy);
    let buffer = tm.write_to_memory_buffer(&copy, FileType::Assembly).map_err(|e| e.to_string());
    forget_annotations(&copy);
    String::from_utf8(buffer?.as_slice().to_vec()).map_err(|e| format!("PTX is not UTF-8: {e}"))
}

/// Forget what LLVM's NVPTX back end has cached about `module`'s `nvvm.annotations`.
///
/// LLVM 19 keeps one process-wide map from a module's address, then each function's address,
/// to that function's annotations (`maxnreg`, `maxntid`, `kernel`, ...). The NVPTX passes of
/// the optimisation pipeline and of code generation fill it, and only the PTX printer's
/// finalisation empties it, for the module it printed. An entry left for a freed module is
/// read by the next module allocated at the same addresses: a kernel then got another
/// kernel's `.maxnreg`, or lost its own (four threads building kernels reproduced it on every
/// run, and a CI run of `make test` once). Every pass run and every code generation here is
/// therefore bracketed by this call, which also keeps the map from growing with each module
/// counted.
///
/// Why an LLVM-internal symbol: the C API has no call for this, and the function,
/// `llvm::clearAnnotationCache(const Module *)`, is an ordinary external function of the NVPTX
/// code generator, which llvm-sys links statically (as it does by default) and which calls
/// it itself. It takes one pointer and returns nothing, so the C calling convention matches.
pub fn forget_annotations(module: &Module<'_>) {
    extern "C" {
        #[link_name = "_ZN4llvm20clearAnnotationCacheEPKNS_6ModuleE"]
        fn clear_annotation_cache(module: inkwell::llvm_sys::prelude::LLVMModuleRef);
    }
    // SAFETY: the pointer is a live module (borrowed for the call); the function takes the
    // cache's own lock and only erases the map entry keyed by that address.
    unsafe { clear_annotation_cache(module.as_mut_ptr()) }
}
