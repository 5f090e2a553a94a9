//! The LLVM 19 install works end to end: a kernel built through inkwell verifies, becomes PTX
//! for every target architecture, and that PTX assembles with the real `ptxas`.

mod common;

use inkwell::context::Context;
use inkwell::intrinsics::Intrinsic;
use inkwell::AddressSpace;
use llvm_passes::target::{self, address_space, ARCHITECTURES};
use std::path::PathBuf;
use std::process::Command;

/// `a[tid.x] += 1.0f` when `tid.x < n`.
fn build_kernel(context: &Context) -> inkwell::module::Module<'_> {
    let module = target::new_module(context, "add_one").unwrap();
    let builder = context.create_builder();
    let f32t = context.f32_type();
    let i32t = context.i32_type();
    let gptr = context.ptr_type(AddressSpace::from(address_space::GLOBAL));
    let fn_type = context.void_type().fn_type(&[gptr.into(), i32t.into()], false);
    let function = module.add_function("add_one", fn_type, None);
    target::mark_kernel(function);
    let entry = context.append_basic_block(function, "entry");
    let body = context.append_basic_block(function, "body");
    let exit = context.append_basic_block(function, "exit");
    builder.position_at_end(entry);
    let tid_decl = Intrinsic::find("llvm.nvvm.read.ptx.sreg.tid.x").unwrap().get_declaration(&module, &[]).unwrap();
    let inkwell::values::ValueKind::Basic(tid) = builder.build_call(tid_decl, &[], "tid").unwrap().try_as_basic_value() else { panic!("tid.x returns a value") };
    let tid = tid.into_int_value();
    let n = function.get_nth_param(1).unwrap().into_int_value();
    let in_range = builder.build_int_compare(inkwell::IntPredicate::SLT, tid, n, "in_range").unwrap();
    builder.build_conditional_branch(in_range, body, exit).unwrap();
    builder.position_at_end(body);
    let a = function.get_nth_param(0).unwrap().into_pointer_value();
    let idx = builder.build_int_s_extend(tid, context.i64_type(), "idx").unwrap();
    let p = unsafe { builder.build_gep(f32t, a, &[idx], "p").unwrap() };
    let x = builder.build_load(f32t, p, "x").unwrap().into_float_value();
    let y = builder.build_float_add(x, f32t.const_float(1.0), "y").unwrap();
    builder.build_store(p, y).unwrap();
    builder.build_unconditional_branch(exit).unwrap();
    builder.position_at_end(exit);
    builder.build_return(None).unwrap();
    module
}

/// `ptxas` from PATH. With METAFORK_REQUIRE_NVCC=1 (as `make test` sets) its absence fails.
fn ptxas() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths).map(|d| d.join("ptxas")).find(|p| p.is_file())
    });
    if found.is_none() && std::env::var("METAFORK_REQUIRE_NVCC").as_deref() == Ok("1") {
        panic!("METAFORK_REQUIRE_NVCC=1 but `ptxas` is not on PATH: run `make setup`");
    }
    found
}

#[test]
fn kernel_module_verifies_and_becomes_ptx_that_ptxas_assembles() {
    let context = Context::create();
    let module = build_kernel(&context);
    target::verify(&module).unwrap();
    let ptxas = ptxas();
    let tmp = tempfile::Builder::new().prefix("metafork-ptx-").tempdir().unwrap();
    let dir = tmp.path();
    for arch in ARCHITECTURES {
        let ptx = target::emit_ptx(&module, arch).unwrap();
        assert!(ptx.contains(".entry add_one"), "no kernel entry in PTX for {arch}:\n{ptx}");
        assert!(ptx.contains(&format!(".target {arch}")), "wrong target in PTX:\n{ptx}");
        if let Some(ptxas) = &ptxas {
            let file = dir.join(format!("add_one_{arch}.ptx"));
            std::fs::write(&file, &ptx).unwrap();
            let out = Command::new(ptxas)
                .args(["-arch", arch, "-v"])
                .arg(&file)
                .arg("-o")
                .arg(dir.join(format!("add_one_{arch}.cubin")))
                .output()
                .unwrap();
            let log = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "ptxas failed for {arch}: {log}");
            assert!(log.contains("Used") && log.contains("registers"), "no register report: {log}");
        }
    }
    tmp.close().unwrap();
}

#[test]
fn a_broken_module_is_rejected_by_the_verifier() {
    let context = Context::create();
    let module = target::new_module(&context, "broken").unwrap();
    let function = module.add_function("no_terminator", context.void_type().fn_type(&[], false), None);
    context.append_basic_block(function, "entry");
    assert!(target::verify(&module).is_err());
}

#[test]
fn emitting_ptx_leaves_the_module_unchanged() {
    let context = Context::create();
    let module = build_kernel(&context);
    let before = module.print_to_string().to_string();
    let first_sm90 = target::emit_ptx(&module, "sm_90").unwrap();
    target::emit_ptx(&module, "sm_75").unwrap();
    assert_eq!(module.print_to_string().to_string(), before);
    assert_eq!(target::emit_ptx(&module, "sm_90").unwrap(), first_sm90);
}

/// LLVM 19's NVPTX back end keeps a process-wide cache of each module's `nvvm.annotations`,
/// keyed by the module's and the function's addresses. A module that went through the
/// optimisation pipeline (whose NVPTX passes fill the cache) and was then freed must not lend
/// its `maxnreg` to a later module that happens to be allocated at the same address. Many
/// threads build, optimise and emit kernels with and without a cap, some optimised and dropped
/// without PTX, so that freed addresses are reused in every order; each PTX carries exactly
/// its own module's cap.
#[test]
fn each_module_gets_its_own_register_cap_in_ptx() {
    let threads: Vec<_> = (0..4u32)
        .map(|t| {
            std::thread::spawn(move || {
                for i in 0..150u32 {
                    let cap = ((i + t) % 3 != 0).then_some(24 + (i * 7 + t) % 40);
                    let context = Context::create();
                    let module = build_kernel(&context);
                    if let Some(n) = cap {
                        let kernel = module.get_function("add_one").unwrap();
                        llvm_passes::pressure::cap_registers(&context, &module, kernel, n).unwrap();
                    }
                    llvm_passes::pipeline::optimize(&module).unwrap();
                    if (i + t) % 4 == 0 {
                        continue; // optimised and dropped without PTX
                    }
                    let ptx = target::emit_ptx(&module, "sm_90").unwrap();
                    let found = ptx.lines().find_map(|l| l.trim().strip_prefix(".maxnreg ").map(|n| n.trim().parse::<u32>().unwrap()));
                    assert_eq!(found, cap, "thread {t}, round {i}: the PTX's .maxnreg is not this module's cap");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// A loop of `loads` loads of `a[k*B + tid + j]` summed into `b[k*B + tid]`: `n` times under
/// `#pragma unroll 1` when `rolled`, else 8 times, which the pipeline unrolls by the target's
/// cost model (so the optimised body depends on what the target machine says).
fn loop_ir(loads: usize, rolled: bool) -> String {
    common::loop_over(&common::load_sum_body(loads), if rolled { "%n" } else { "8" }, rolled)
}

/// The optimised function bodies of `ir` (parsed into a context of its own).
fn optimised_bodies(ir: &str) -> String {
    let context = Context::create();
    let buffer = inkwell::memory_buffer::MemoryBuffer::create_from_memory_range_copy(ir.as_bytes(), "test");
    let module = context.create_module_from_ir(buffer).expect("test IR parses");
    llvm_passes::pipeline::optimize(&module).unwrap();
    llvm_passes::pipeline::function_bodies(&module)
}

/// Every thread's pipeline runs on one shared target machine (`target::pipeline_machine`):
/// what it makes of a module must not depend on what other threads optimise meanwhile. Each
/// kernel's body, optimised by four threads at once in every order, is the one a lone run
/// makes; and the kernels differ after the pipeline, so a mix-up would show.
#[test]
fn the_shared_pipeline_machine_optimises_alike_from_many_threads() {
    let kernels: Vec<String> = (1..=6).flat_map(|loads| [loop_ir(loads, false), loop_ir(loads, true)]).collect();
    let alone: Vec<String> = kernels.iter().map(|ir| optimised_bodies(ir)).collect();
    let distinct: std::collections::BTreeSet<&String> = alone.iter().collect();
    assert_eq!(distinct.len(), kernels.len(), "each kernel optimises to its own body");
    assert!(alone.iter().any(|b| b.matches("load float").count() >= 8), "some loop was unrolled:\n{}", alone.join("\n"));
    assert!(alone.iter().any(|b| b.matches("load float").count() == 1), "some loop stayed rolled:\n{}", alone.join("\n"));
    let (kernels, alone) = (std::sync::Arc::new(kernels), std::sync::Arc::new(alone));
    let threads: Vec<_> = (0..4usize)
        .map(|t| {
            let (kernels, alone) = (kernels.clone(), alone.clone());
            std::thread::spawn(move || {
                for round in 0..30usize {
                    let k = (round * 5 + t * 7) % kernels.len();
                    assert_eq!(optimised_bodies(&kernels[k]), alone[k], "thread {t}, round {round}, kernel {k}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// LLVM 19 does not know sm_100: PTX for it is sm_90's (forward compatible), which ptxas
/// assembles for sm_100, and never LLVM's `.version 6.0` with an unknown `.target`.
#[test]
fn a_processor_newer_than_llvm_gets_the_newest_ptx_llvm_writes() {
    assert_eq!(target::codegen_arch("sm_100").as_deref(), Some("sm_90"));
    assert_eq!(target::codegen_arch("sm_120").as_deref(), Some("sm_90"));
    assert_eq!(target::codegen_arch("sm_88").as_deref(), Some("sm_87"));
    assert_eq!(target::codegen_arch("sm_80").as_deref(), Some("sm_80"));
    for not_one in ["sm_", "sm_x", "compute_90", "sm_10", "", "sm_-5"] {
        assert_eq!(target::codegen_arch(not_one), None, "{not_one}");
    }
    let context = Context::create();
    let module = build_kernel(&context);
    let ptx = target::emit_ptx(&module, "sm_100").unwrap();
    assert!(ptx.contains(".target sm_90"), "{ptx}");
    assert!(target::emit_ptx(&module, "compute_90").is_err());
    if let Some(ptxas) = ptxas() {
        let tmp = tempfile::Builder::new().prefix("metafork-ptx-").tempdir().unwrap();
        let file = tmp.path().join("add_one.ptx");
        std::fs::write(&file, &ptx).unwrap();
        let out = Command::new(ptxas).args(["-arch", "sm_100", "-v"]).arg(&file).arg("-o").arg(tmp.path().join("add_one.cubin")).output().unwrap();
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "ptxas failed for sm_100: {log}");
        assert!(log.contains("for 'sm_100'") && log.contains("registers"), "{log}");
    }
}
