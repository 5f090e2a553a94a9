//! The optimisation pipeline that runs before counting. It is part of every counter's
//! definition: counts are of the IR *after* this pipeline, for the `sm_90` target machine.
//!
//! The definition is LLVM 19's `default<O2>` ([`REFERENCE`]): promote allocas to registers,
//! simplify, hoist loop invariants, strength-reduce, unroll; the usual shape of what
//! `nvcc -O3` hands to `ptxas`. What runs is [`PIPELINE`], `default<O2>` without the passes
//! that have nothing to act on in our kernels (coroutines, OpenMP, the SLP vectoriser, global
//! clean-ups, ...) and two `instcombine` runs placed around the SLP vectoriser. That is measured, not
//! assumed: `make bench-pipeline` lowers every code at a node of every tree of the corpus and
//! compares the function bodies after each pipeline (all identical, held-out programs
//! included: bench/RESULTS.md, twentieth and twenty-ninth sessions), and an integration
//! test does the same on the examples. A kernel whose IR the two pipelines optimise
//! differently would still be counted, on IR a subset of O2 made.

use crate::target;
use inkwell::module::Module;
use inkwell::passes::PassBuilderOptions;

/// The pipeline the counters are defined on.
pub const REFERENCE: &str = "default<O2>";

/// `simplifycfg` as `default<O2>` runs it, with its options (they differ between its runs).
macro_rules! simplifycfg {
    ($options:literal) => {
        concat!("simplifycfg<bonus-inst-threshold=1;", $options, ">")
    };
}

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
///   coroutine and OpenMP passes, `called-value-propagation`, `tailcallelim` (it only marks
///   calls `tail`), the SLP vectoriser and `vector-combine` (NVPTX's 32-bit vector registers),
///   `loop-distribute` and `loop-sink` (metadata and profiles only), the module clean-ups
///   (`globaldce`, `deadargelim`, `constmerge`, ...), `inferattrs`, `lower-expect`,
///   `lower-constant-intrinsics`, `libcalls-shrinkwrap`, `nvvm-reflect`, `verify` (the counters
///   verify the module themselves);
/// - two `instcombine` runs, the sixth and seventh of O2's eight, placed around the SLP
///   vectoriser: with nothing vectorised they changed no function body of the corpus (the
///   only passes dropped on evidence rather than by construction).
///
/// `loop-vectorize` is kept although it vectorises nothing here: a held-out program's code
/// (batched Thomas solves, double divisions in a loop of four copies) came out of it with its
/// address arithmetic in another order (twenty-ninth session).
///
/// Every pass that can change a user's kernel is kept, cheap ones included (`sroa` after
/// unrolling, `loop-idiom`, `jump-threading`, ...), even where the corpus never needed it.
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
    "globalopt,",
    "function<eager-inv>(",
        "mem2reg,",
        instcombine!(),
        ",",
        simplifycfg!("no-forward-switch-cond;switch-range-to-icmp;no-switch-to-lookup;keep-loops;no-hoist-common-insts;no-sink-common-insts;speculate-blocks;simplify-cond-branch;no-speculate-unpredictables"),
    "),",
    "always-inline,",
    "cgscc(",
        "devirt<4>(",
            "inline,",
            "function-attrs<skip-non-recursive-function-attrs>,",
            "function<eager-inv;no-rerun>(",
                "sroa<modify-cfg>,",
                "early-cse<memssa>,",
                "speculative-execution<only-if-divergent-target>,",
                "jump-threading,",
                "correlated-propagation,",
                simplifycfg!("no-forward-switch-cond;switch-range-to-icmp;no-switch-to-lookup;keep-loops;no-hoist-common-insts;no-sink-common-insts;speculate-blocks;simplify-cond-branch;no-speculate-unpredictables"),
                ",",
                instcombine!(),
                ",",
                "aggressive-instcombine,",
                simplifycfg!("no-forward-switch-cond;switch-range-to-icmp;no-switch-to-lookup;keep-loops;no-hoist-common-insts;no-sink-common-insts;speculate-blocks;simplify-cond-branch;no-speculate-unpredictables"),
                ",",
                "reassociate,",
                "constraint-elimination,",
                "loop-mssa(",
                    "loop-instsimplify,",
                    "loop-simplifycfg,",
                    "licm<no-allowspeculation>,",
                    "loop-rotate<header-duplication;no-prepare-for-lto>,",
                    "licm<allowspeculation>,",
                    "simple-loop-unswitch<no-nontrivial;trivial>",
                "),",
                simplifycfg!("no-forward-switch-cond;switch-range-to-icmp;no-switch-to-lookup;keep-loops;no-hoist-common-insts;no-sink-common-insts;speculate-blocks;simplify-cond-branch;no-speculate-unpredictables"),
                ",",
                instcombine!(),
                ",",
                "loop(",
                    "loop-idiom,",
                    "indvars,",
                    "simple-loop-unswitch<no-nontrivial;trivial>,",
                    "loop-deletion,",
                    "loop-unroll-full",
                "),",
                "sroa<modify-cfg>,",
                "mldst-motion<no-split-footer-bb>,",
                "gvn<>,",
                "sccp,",
                "bdce,",
                instcombine!(),
                ",",
                "jump-threading,",
                "correlated-propagation,",
                "adce,",
                "memcpyopt,",
                "dse,",
                "loop-mssa(",
                    "licm<allowspeculation>",
                "),",
                simplifycfg!("no-forward-switch-cond;switch-range-to-icmp;no-switch-to-lookup;keep-loops;hoist-common-insts;sink-common-insts;speculate-blocks;simplify-cond-branch;no-speculate-unpredictables"),
                ",",
                instcombine!(),
            "),",
            "function-attrs",
        ")",
    "),",
    "globalopt,",
    "function<eager-inv>(",
        "float2int,",
        "loop(",
            "loop-rotate<header-duplication;no-prepare-for-lto>,",
            "loop-deletion",
        "),",
        "loop-vectorize<no-interleave-forced-only;no-vectorize-forced-only>,",
        "infer-alignment,",
        "loop-load-elim,",
        simplifycfg!("forward-switch-cond;switch-range-to-icmp;switch-to-lookup;no-keep-loops;hoist-common-insts;sink-common-insts;speculate-blocks;simplify-cond-branch;no-speculate-unpredictables"),
        ",",
        "loop-unroll<O2>,",
        "sroa<preserve-cfg>,",
        "infer-alignment,",
        instcombine!(),
        ",",
        "loop-mssa(",
            "licm<allowspeculation>",
        "),",
        "instsimplify,",
        "div-rem-pairs,",
        simplifycfg!("no-forward-switch-cond;switch-range-to-icmp;no-switch-to-lookup;keep-loops;no-hoist-common-insts;no-sink-common-insts;speculate-blocks;simplify-cond-branch;speculate-unpredictables"),
    ")",
);

/// The architecture whose target machine drives the pipeline (target-specific cost models).
pub const PIPELINE_ARCH: &str = "sm_90";

/// Run [`PIPELINE`] on `module`.
pub fn optimize(module: &Module<'_>) -> Result<(), String> {
    run(module, PIPELINE)
}

/// Run [`REFERENCE`] on `module`: for the checks that [`PIPELINE`] makes the same IR.
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
