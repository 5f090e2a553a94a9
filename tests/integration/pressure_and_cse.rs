//! Register pressure levels 2 and 3 and common sub-expression elimination: each is a real
//! transformation whose effect the counters (and ptxas) see, and the tree takes them.

use constraints::solver::Backend;
use metafork::counters::{count, count_with_cuda};
use metafork::frontend::ast::{Stmt, StmtKind};
use metafork::frontend::check_source;
use metafork::kernel::Kernel;
use metafork::strategy::caching::stage;
use metafork::strategy::{cse, narrow};
use metafork::tree::{build, NodeKind, Strategy, REGISTER_CAP};

fn program(text: &str) -> (metafork::frontend::model::KernelFunction, Kernel) {
    let p = check_source("test.mf", text).unwrap_or_else(|d| panic!("{}", d.render(false)));
    let k = p.kernels.into_iter().next().unwrap();
    let kernel = Kernel::from_schedule(&k, &k.schedules[0]).unwrap();
    (k, kernel)
}

fn example(name: &str) -> (metafork::frontend::model::KernelFunction, Kernel) {
    program(&std::fs::read_to_string(format!("{}/examples/{name}.mf", env!("CARGO_MANIFEST_DIR"))).unwrap())
}

/// ptxas is required under `make test` (METAFORK_REQUIRE_NVCC=1); elsewhere its absence skips.
fn archs() -> Vec<String> {
    let found = llvm_passes::ptxas::find_ptxas().is_some() && llvm_passes::ptxas::find_nvcc().is_some();
    if !found && std::env::var("METAFORK_REQUIRE_NVCC").as_deref() == Ok("1") {
        panic!("METAFORK_REQUIRE_NVCC=1 but `ptxas`/`nvcc` are not on PATH");
    }
    if found { vec!["sm_90".to_string()] } else { Vec::new() }
}

/// A kernel whose threads each load forty values `x0`..`x39` of the read-only `a`, all before
/// `combine` (statements that store into `c[i]`).
fn forty_loads(combine: &str) -> String {
    let loads: String = (0..40).map(|k| format!("float x{k} = a[i + {k}]; ")).collect();
    format!(
        "void many(int N, int B, const float a[N], float c[N]) {{
  assume(N >= 64 && B >= 1 && N % B == 0);
  int blocks = N / B;
  meta_schedule {{
    meta_for (int v = 0; v < blocks; v++)
      meta_for (int u = 0; u < B; u++) {{
        int i = v * B + u;
        if (i + 40 <= N) {{
          {loads}
          {combine}
        }}
      }}
  }}
}}
"
    )
}

/// `x0 * x39 + x1 * x38 + ... + x19 * x20`.
fn pairs() -> String {
    (0..20).map(|k| format!("x{k} * x{}", 39 - k)).collect::<Vec<_>>().join(" + ")
}

/// Forty values loaded, summed, then combined again in pairs: each is held from its load to its
/// second use, so far more than 32 registers are live at once in any order of the loads
/// (ptxas: 48 at sm_90).
fn pressure() -> String {
    let sum = (0..40).map(|k| format!("x{k}")).collect::<Vec<_>>().join(" + ");
    forty_loads(&format!("float d = {sum};\n          c[i] = ({}) / d;", pairs()))
}

/// Forty values loaded before any is combined, each used once: held at once in LLVM's order, a
/// few at a time when each load is issued at its use.
fn early_loads() -> String {
    forty_loads(&format!("c[i] = {};", pairs()))
}

#[test]
fn early_loads_are_held_up_to_the_occupancy_free_budget_as_nvcc_does() {
    let (f, kernel) = program(&early_loads());
    let archs: Vec<String> = if archs().is_empty() { Vec::new() } else { vec!["sm_75".to_string(), "sm_90".to_string()] };
    let counted = count_with_cuda(Some(&f), &kernel, &archs).unwrap();
    let e = &counted.registers;
    assert!(e.max_live_words + llvm_passes::registers::FIXED_COST > 40, "{e:?}");
    assert_eq!(e.for_architecture("sm_90"), 32, "{e:?}");
    assert!(e.for_architecture("sm_75") > 32, "{e:?}");
    // What the device runs, the emitted CUDA through nvcc: within the budget at sm_90, beyond
    // it at sm_75, whose budget is 64.
    if !archs.is_empty() {
        assert!(counted.nvcc["sm_90"].registers <= 32, "{:?}", counted.nvcc);
        assert!(counted.nvcc["sm_75"].registers > 32, "{:?}", counted.nvcc);
    }
}

#[test]
fn level_3_caps_the_registers_and_ptxas_obeys_the_cap() {
    let (f, kernel) = program(&pressure());
    let before = count(&kernel, &[]).unwrap().registers;
    assert!(before.registers > REGISTER_CAP, "the test kernel must need more than the cap: {}", before.registers);
    let capped = Kernel { max_registers: Some(REGISTER_CAP), ..kernel.clone() };
    let ir = metafork::lower::kernel_ir(&capped).unwrap();
    assert!(ir.contains("!\"maxnreg\", i32 32"), "the kernel carries the NVVM annotation:\n{ir}");
    let archs = archs();
    let after = count_with_cuda(Some(&f), &capped, &archs).unwrap();
    assert_eq!(after.registers.registers, REGISTER_CAP);
    assert_eq!(after.registers.uncapped, before.registers);
    for arch in &archs {
        let uncapped = count_with_cuda(Some(&f), &kernel, &archs).unwrap();
        assert!(uncapped.ptxas[arch].registers > REGISTER_CAP, "ptxas needs more than the cap without it: {:?}", uncapped.ptxas[arch]);
        assert!(after.ptxas[arch].registers <= REGISTER_CAP, "LLVM's .maxnreg: {:?}", after.ptxas[arch]);
        assert!(after.nvcc[arch].registers <= REGISTER_CAP, "the emitted __maxnreg__: {:?}", after.nvcc[arch]);
    }
}

#[test]
fn the_tree_takes_level_3_when_nothing_else_lowers_the_registers() {
    let (f, kernel) = program(&pressure());
    let backend = Backend::default();
    let tree = build(&f, kernel, &backend).unwrap();
    let capped: Vec<_> = tree.leaves().filter(|l| matches!(l.kind, NodeKind::Leaf) && l.applied.contains(&Strategy::ReduceRegisterPressure3)).collect();
    assert!(!capped.is_empty(), "a leaf with the register cap");
    for l in capped {
        assert_eq!(l.counters.registers, REGISTER_CAP);
        assert_eq!(l.staged.max_registers, Some(REGISTER_CAP));
    }
}

#[test]
fn level_2_narrows_tile_arithmetic_and_lowers_the_registers() {
    let (f, kernel) = example("matmul");
    let backend = Backend::default();
    let staged = stage(&f, &kernel, &backend).unwrap();
    assert!(!staged.cached.is_empty());
    let narrowed = narrow::narrow(&staged.kernel).expect("the staged code has tiles");
    assert!(narrow::narrow(&narrowed).is_none(), "narrowing twice changes nothing");
    let archs = archs();
    let wide = count_with_cuda(Some(&f), &Kernel { no_unroll: true, ..staged.kernel.clone() }, &archs).unwrap();
    let thin = count_with_cuda(Some(&f), &Kernel { no_unroll: true, ..narrowed.clone() }, &archs).unwrap();
    assert!(thin.registers.registers < wide.registers.registers, "estimate {} -> {}", wide.registers.registers, thin.registers.registers);
    for arch in &archs {
        assert!(thin.ptxas[arch].registers < wide.ptxas[arch].registers, "ptxas {arch}: {} -> {}", wide.ptxas[arch].registers, thin.ptxas[arch].registers);
    }
    let cuda = metafork::emit::cuda::emit_kernel(&f, &narrowed, &[]).unwrap();
    assert!(cuda.contains("int metafork_e ="), "{cuda}");
    assert!(cuda.contains("c[(long)"), "global arrays keep 64-bit linearisation: {cuda}");
}

fn loops_without(stmts: &[Stmt], array: &str) -> usize {
    let mut n = 0;
    for s in stmts {
        match &s.kind {
            StmtKind::For(l) => {
                let text = format!("{:?}", l.body);
                if !text.contains(&format!("name: \"{array}\"")) {
                    n += 1;
                }
                n += loops_without(std::slice::from_ref(&l.body), array);
            }
            StmtKind::Block(items) => n += loops_without(items, array),
            StmtKind::If { then_branch, else_branch, .. } => {
                n += loops_without(std::slice::from_ref(then_branch), array);
                if let Some(e) = else_branch {
                    n += loops_without(std::slice::from_ref(e), array);
                }
            }
            _ => {}
        }
    }
    n
}

#[test]
fn cse_level_2_holds_the_accumulator_in_a_local_across_the_loop() {
    let (_, kernel) = example("matmul");
    let kernel = Kernel { cache: Vec::new(), ..kernel };
    let level1 = cse::eliminate(&kernel, 1);
    let level2 = cse::eliminate(&kernel, 2);
    assert_eq!(loops_without(&kernel.body, "c"), loops_without(&level1.body, "c"), "level 1 does not touch loops");
    assert!(loops_without(&level2.body, "c") > loops_without(&kernel.body, "c"), "the loop no longer accesses c");
    let text = format!("{:?}", level2.body);
    assert!(text.contains(&metafork::names::internal("cse0")), "{text}");
    // The loop's own entry test guards the read and the write-back.
    let ir = metafork::lower::kernel_ir(&level2).unwrap();
    assert!(ir.contains("define ptx_kernel"), "{ir}");
}

#[test]
fn cse_level_1_reads_a_repeated_element_once_and_respects_writes() {
    let text = "void f(int N, int B, const float a[N], float c[N], float d[N]) {
  assume(N >= 1 && B >= 1 && N % B == 0);
  int blocks = N / B;
  meta_schedule {
    meta_for (int v = 0; v < blocks; v++)
      meta_for (int u = 0; u < B; u++) {
        int i = v * B + u;
        c[i] = a[i] + 1.0f;
        d[i] = a[i] * c[i];
        c[i] = c[i] * 2.0f;
        d[i] = d[i] + c[i];
      }
  }
}
";
    let (_, kernel) = program(text);
    let out = cse::eliminate(&kernel, 1);
    let printed = metafork::emit::cuda::emit_kernel(&program(text).0, &out, &[]).unwrap();
    // a[i] is read twice with no write to `a` in between: one read. c[i] is written between
    // its reads: every read stays.
    assert_eq!(printed.matches("a[(long)i]").count(), 1, "{printed}");
    assert_eq!(printed.matches("c[(long)i]").count(), 4, "{printed}");
    // LLVM alone must reload a[i] after the store to c (the arrays may alias in C); the local
    // saves that load in the optimised IR.
    let loads = |k: &Kernel| {
        let ctx = inkwell::context::Context::create();
        let m = metafork::lower::lower_kernel(&ctx, k).unwrap();
        llvm_passes::pipeline::optimize(&m).unwrap();
        m.print_to_string().to_string().matches(" = load float").count()
    };
    assert!(loads(&out) < loads(&kernel), "{} -> {}", loads(&kernel), loads(&out));
}

#[test]
fn cse_refuses_loops_with_barriers_and_varying_subscripts() {
    // Two subscripts of `c` in one loop, or a bound that reads `c`: no scalar replacement.
    let text = "void f(int N, int B, const float a[N], float c[N]) {
  assume(N >= 2 && B >= 1 && N % B == 0);
  int blocks = N / B;
  meta_schedule {
    meta_for (int v = 0; v < blocks; v++)
      meta_for (int u = 0; u < B; u++) {
        int i = v * B + u;
        for (int k = 0; k < 4; k++) {
          c[i] += a[i];
          c[N - 1 - i] += 1.0f;
        }
        for (int k = 0; k < (int)c[i]; k++)
          c[i] += 1.0f;
      }
  }
}
";
    let (_, kernel) = program(text);
    let out = cse::eliminate(&kernel, 2);
    assert_eq!(loops_without(&out.body, "c"), 0, "c keeps its accesses in the loop");
    // The staged Jacobi has barriers around its loops' tile accesses; CSE must leave the
    // barrier-carrying loop alone and keep every barrier.
    let (f, kernel) = example("jacobi1d");
    let staged = stage(&f, &kernel, &Backend::default()).unwrap().kernel;
    let barriers = |s: &[Stmt]| format!("{s:?}").matches("Barrier").count();
    let out = cse::eliminate(&staged, 2);
    assert_eq!(barriers(&out.body), barriers(&staged.body));
}
