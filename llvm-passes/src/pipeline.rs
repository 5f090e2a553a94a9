//! The optimisation pipeline that runs before counting. It is part of every counter's
//! definition: counts are of the IR *after* this pipeline, for the `sm_90` target machine.
//!
//! The definition starts from LLVM 19's `default<O2>` ([`REFERENCE`]): promote allocas to
//! registers, simplify, hoist loop invariants, strength-reduce, unroll; the usual shape of what
//! `nvcc -O3` hands to `ptxas`. What runs is [`PIPELINE`]: the passes of `default<O2>` whose
//! work the register estimate sees, 1.6x faster per code than `default<O2>`. That is
//! measured, not assumed: `make bench-pipeline` lowers every code at a node of every tree of
//! the corpus and compares the register estimates after each pipeline (design part identical
//! by construction; held-out programs: 538 of 539 codes the same register count, 532 every
//! term, the other count one register closer to ptxas: bench/RESULTS.md, thirty-second
//! session; after the nest-invariant rule and `loop-vectorize` restored, 761 of 765, forty-third
//! session), and an integration test does the same on the examples. Function bodies may
//! differ where the estimate does not (a store left that O2 deletes as dead, the order of
//! address arithmetic).
//!
//! Both end with [`BACKEND`], the IR passes LLVM's NVPTX back end runs before instruction
//! selection (`NVPTXPassConfig::addStraightLineScalarOptimizationPasses`, at `-O3`, where it
//! takes GVN): they split constant offsets off addresses, which the machine's register plus
//! immediate addressing then absorbs ([`crate::addressing`]), and share the address arithmetic
//! of neighbouring accesses. nvcc's NVVM does the same before ptxas sees the code (the SASS
//! of a 3x3 matrix inverse: nine loads from one register pair at offsets 0x0..0x20).

use crate::target;
use inkwell::module::Module;
use inkwell::passes::PassBuilderOptions;

/// `simplifycfg` as `default<O2>` runs it, with its options (they differ between its runs).
macro_rules! simplifycfg {
    ($options:literal) => {
        concat!("simplifycfg<bonus-inst-threshold=1;", $options, ">")
    };
}

/// The IR passes of LLVM's NVPTX back end that shape addresses, in its order (module doc),
/// after a `simplifycfg` as O2's last, so that both pipelines hand them the same blocks. Its
/// `speculative-execution` is left out: run after the two pipelines, it hoists different
/// instructions out of the same guards depending on their order in the block (`jacobi1d`'s
/// root: unrolled demand 34 after O2, 38 after [`PIPELINE`]), and without it the estimates of
/// the parts rules are chosen on moved by less than 0.1 point (bench/RESULTS.md, fifty-fifth
/// session).
macro_rules! backend {
    () => {
        concat!(
            "function(",
            simplifycfg!("no-forward-switch-cond;switch-range-to-icmp;no-switch-to-lookup;keep-loops;no-hoist-common-insts;no-sink-common-insts;speculate-blocks;simplify-cond-branch;no-speculate-unpredictables"),
            ",separate-const-offset-from-gep,slsr,gvn<>,nary-reassociate,early-cse<>)"
        )
    };
}

/// The NVPTX back end's straight-line scalar optimisations, run after the middle end.
pub const BACKEND: &str = backend!();

/// The pipeline the counters are defined on: LLVM's `default<O2>`, then [`BACKEND`].
pub const REFERENCE: &str = concat!("default<O2>,", backend!());

/// `instcombine` as `default<O2>` runs it.
macro_rules! instcombine {
    () => {
        "instcombine<max-iterations=1;no-use-loop-info;no-verify-fixpoint>"
    };
}

/// [`REFERENCE`]'s passes, in its order (`opt -passes=default<O2> -print-pipeline-passes`,
/// LLVM 19, sm_90), less two kinds of pass:
/// - passes with nothing to act on in a lowered kernel, which holds one function, no calls but
///   to intrinsics, no vectors, no `switch`, no coroutine, OpenMP, profile or annotation:
///   coroutine and OpenMP passes, the inliner and the call-graph walk around it,
///   `called-value-propagation`, `tailcallelim` (it only marks calls `tail`), the SLP
///   vectoriser and `vector-combine` (NVPTX's 32-bit vector registers), `loop-distribute`
///   and `loop-sink` (metadata and profiles only), the module clean-ups (`globaldce`,
///   `deadargelim`, `constmerge`, ...), `inferattrs`,
///   `lower-expect`, `lower-constant-intrinsics`, `libcalls-shrinkwrap`, `nvvm-reflect`,
///   `verify` (the counters verify the module themselves);
/// - passes dropped on evidence: one at a time, from the last to the first, each pass whose
///   removal left the register estimate of every code of the design part (the 583 distinct
///   codes the trees of `bench-counters`' design programs count) the same, field by field, was dropped
///   (thirty-second session). These were both `globalopt` runs, both `function-attrs` runs,
///   `mem2reg` (`sroa` promotes), `speculative-execution`,
///   both `jump-threading` runs, `aggressive-instcombine`, `constraint-elimination`,
///   `loop-instsimplify`, `loop-simplifycfg`, both `simple-loop-unswitch` runs, `loop-idiom`,
///   both `loop-deletion` runs, the second and later `sroa` runs, `mldst-motion`, `sccp`,
///   `adce`, `memcpyopt`, `dse`, one `licm`, `float2int`, the second `loop-rotate`,
///   `loop-vectorize` (restored in the forty-third session: with the rule that holds a loop
///   nest's 64-bit invariants in vector registers, its runtime alias checks, which place such
///   values before a nest, changed a held-out code's count by 4), both `infer-alignment` runs, `instsimplify`, five of `simplifycfg`'s
///   eight runs and two of `instcombine`'s (four of its eight runs are left: two more were
///   dropped earlier, placed around the SLP vectoriser, where they changed no function body).
///
/// The second kind is a trade: a dropped pass can act on a user's kernel the corpus lacks (a
/// dead store, a `memset` idiom), whose estimate is then of IR that O2 would have optimised
/// further. The estimate models ptxas, not O2, and the trade is measured against ptxas: over
/// `bench-counters`' 1,020 leaf kernels the estimates stayed the same but for two, both
/// closer to ptxas after; the pipeline's time per code went down by 27-35% (to 0.65-0.73).
pub const PIPELINE: &str = concat!(
    "function(",
        "nvvm-intr-range",
    "),",
    "function<eager-inv>(",
        simplifycfg!("no-forward-switch-cond;no-switch-range-to-icmp;no-switch-to-lookup;keep-loops;no-hoist-common-insts;no-sink-common-insts;speculate-blocks;simplify-cond-branch;no-speculate-unpredictables"),
        ",",
        "sroa<modify-cfg>,",
        "early-cse<>",
    "),",
    "ipsccp,",
    "function<eager-inv>(",
        instcombine!(),
        ",",
        simplifycfg!("no-forward-switch-cond;switch-range-to-icmp;no-switch-to-lookup;keep-loops;no-hoist-common-insts;no-sink-common-insts;speculate-blocks;simplify-cond-branch;no-speculate-unpredictables"),
    "),",
    "function<eager-inv>(",
        "early-cse<memssa>,",
        "correlated-propagation,",
        instcombine!(),
        ",",
        "reassociate,",
        "loop-mssa(",
            "licm<no-allowspeculation>,",
            "loop-rotate<header-duplication;no-prepare-for-lto>,",
            "licm<allowspeculation>",
        "),",
        instcombine!(),
        ",",
        "loop(",
            "indvars,",
            "loop-unroll-full",
        "),",
        "gvn<>,",
        "bdce,",
        "correlated-propagation,",
        simplifycfg!("no-forward-switch-cond;switch-range-to-icmp;no-switch-to-lookup;keep-loops;hoist-common-insts;sink-common-insts;speculate-blocks;simplify-cond-branch;no-speculate-unpredictables"),
    "),",
    "function<eager-inv>(",
        "inject-tli-mappings,",
        "loop-vectorize<no-interleave-forced-only;no-vectorize-forced-only;>,",
        "loop-load-elim,",
        "loop-unroll<O2>,",
        instcombine!(),
        ",",
        "loop-mssa(",
            "licm<allowspeculation>",
        "),",
        "div-rem-pairs",
    "),",
    backend!(),
);

/// The architecture whose target machine drives the pipeline (target-specific cost models).
pub const PIPELINE_ARCH: &str = "sm_90";

/// Run [`PIPELINE`] on `module`.
pub fn optimize(module: &Module<'_>) -> Result<(), String> {
    run(module, PIPELINE)
}

/// Run [`REFERENCE`] on `module`: for the checks that [`PIPELINE`] gives the same estimates.
pub fn optimize_reference(module: &Module<'_>) -> Result<(), String> {
    run(module, REFERENCE)
}

/// The NVPTX passes among `passes` read the kernels' annotations through LLVM's process-wide
/// cache: it is emptied for this module before (an entry a freed module left at this address
/// is not read) and after (none is left behind once this module is freed); see
/// [`target::forget_annotations`].
fn run(module: &Module<'_>, passes: &str) -> Result<(), String> {
    let tm = target::pipeline_machine()?;
    target::forget_annotations(module);
    let result = module.run_passes(passes, tm, PassBuilderOptions::create()).map_err(|e| e.to_string());
    target::forget_annotations(module);
    result
}

/// The bodies of `module`'s defined functions as text, without what the counters never read
/// and the dropped passes did set: attribute groups (`#0`; `inferattrs` adds to them) and the
/// `tail` markers on calls (set by `tailcallelim`). Two modules whose
/// bodies compare equal here are counted alike.
pub fn function_bodies(module: &Module<'_>) -> String {
    let text = module.print_to_string().to_string();
    let mut out = String::new();
    let mut inside = false;
    for line in text.lines() {
        if line.starts_with("define ") {
            inside = true;
            out.push_str(&without_attribute_groups(line));
            out.push('\n');
        } else if inside {
            // `notail` and `musttail` first: each holds `tail call ` within it.
            out.push_str(&line.replace("notail call ", "call ").replace("musttail call ", "call ").replace("tail call ", "call "));
            out.push('\n');
            inside = line != "}";
        }
    }
    out
}

/// `line` without its ` #N` attribute-group references.
fn without_attribute_groups(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.find(" #") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            out.push_str(" #");
        }
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use inkwell::context::Context;

    #[test]
    fn the_pipeline_parses_and_runs() {
        let context = Context::create();
        let module = target::new_module(&context, "m").unwrap();
        let f = module.add_function("k", context.void_type().fn_type(&[], false), None);
        let b = context.create_builder();
        b.position_at_end(context.append_basic_block(f, "entry"));
        b.build_return(None).unwrap();
        optimize(&module).unwrap();
        optimize_reference(&module).unwrap();
    }

    /// The back end's passes split the constant offsets off neighbouring addresses
    /// (`a[3*t + 1]`, `a[3*t + 2]`), which then fold into the loads' immediates.
    #[test]
    fn the_pipeline_splits_constant_offsets_off_addresses() {
        let ir = r#"
target triple = "nvptx64-nvidia-cuda"
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
define ptx_kernel void @k(ptr addrspace(1) %a, ptr addrspace(1) %b) {
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %t = sext i32 %tid to i64
  %m = mul nsw i64 %t, 3
  %i1 = add nsw i64 %m, 1
  %i2 = add nsw i64 %m, 2
  %p0 = getelementptr float, ptr addrspace(1) %a, i64 %m
  %p1 = getelementptr float, ptr addrspace(1) %a, i64 %i1
  %p2 = getelementptr float, ptr addrspace(1) %a, i64 %i2
  %v0 = load float, ptr addrspace(1) %p0, align 4
  %v1 = load float, ptr addrspace(1) %p1, align 4
  %v2 = load float, ptr addrspace(1) %p2, align 4
  %s = fadd float %v0, %v1
  %s2 = fadd float %s, %v2
  %q = getelementptr float, ptr addrspace(1) %b, i64 %t
  store float %s2, ptr addrspace(1) %q, align 4
  ret void
}
"#;
        let context = Context::create();
        let buffer = inkwell::memory_buffer::MemoryBuffer::create_from_memory_range_copy(ir.as_bytes(), "k");
        let module = context.create_module_from_ir(buffer).unwrap();
        let folded_count = |module: &Module<'_>| {
            let f = module.get_function("k").unwrap();
            let folded = crate::addressing::Folded::of(f);
            f.get_basic_block_iter().flat_map(|b| b.get_instructions()).filter(|i| folded.is_folded(i)).count()
        };
        assert_eq!(folded_count(&module), 0);
        optimize(&module).unwrap();
        assert_eq!(folded_count(&module), 2, "{}", module.print_to_string().to_string());
    }

    #[test]
    fn bodies_drop_attribute_groups_and_tail_markers_only() {
        assert_eq!(without_attribute_groups("define void @k(i32 %a) #0 {"), "define void @k(i32 %a) {");
        assert_eq!(without_attribute_groups("define void @k() #12 #3 {"), "define void @k() {");
        assert_eq!(without_attribute_groups("define void @\"a #b\"() {"), "define void @\"a #b\"() {");
        let context = Context::create();
        let module = context.create_module("m");
        let f = module.add_function("k", context.void_type().fn_type(&[], false), None);
        let b = context.create_builder();
        b.position_at_end(context.append_basic_block(f, "entry"));
        let callee = module.add_function("g", context.void_type().fn_type(&[], false), None);
        for tail in [true, false] {
            b.build_call(callee, &[], "").unwrap().set_tail_call(tail);
        }
        b.build_return(None).unwrap();
        let bodies = function_bodies(&module);
        assert!(bodies.starts_with("define void @k() {\n"), "{bodies}");
        assert_eq!(bodies.matches("  call void @g()\n").count(), 2, "{bodies}");
        assert!(!bodies.contains("declare"), "{bodies}");
        assert!(bodies.ends_with("ret void\n}\n"), "{bodies}");
    }
}
