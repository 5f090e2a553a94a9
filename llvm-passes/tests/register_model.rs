//! The register model's refinements, each on a pair of kernels that differ only in what the
//! refinement is about: uniform argument arithmetic, ptxas's expansion of precise and 64-bit
//! division, arithmetic sinking to its first use, the copies of a loop ptxas unrolls, the
//! early loads of a loop it keeps rolled, phis of uniform values, square roots, and addresses
//! at constant offsets that the addressing mode absorbs.

mod common;

use inkwell::context::Context;
use inkwell::memory_buffer::MemoryBuffer;
use llvm_passes::registers::{estimate, RegisterEstimate};

fn estimate_ir(ir: &str) -> RegisterEstimate {
    let context = Context::create();
    let buffer = MemoryBuffer::create_from_memory_range_copy(ir.as_bytes(), "test");
    let module = context.create_module_from_ir(buffer).expect("test IR parses");
    module.verify().expect("test IR verifies");
    estimate(module.get_function("k").expect("kernel k"))
}

/// A loop adding one to every `stride`-th element; `stride` is the 64-bit value given by
/// `stride_def` in the entry block, used only to step the loop.
fn loop_kernel(stride_def: &str) -> String {
    format!(
        r#"
target triple = "nvptx64-nvidia-cuda"
define ptx_kernel void @k(ptr addrspace(1) %a, ptr addrspace(1) %strides, i32 %n, i32 %m) {{
entry:
  %n64 = sext i32 %n to i64
  %m64 = sext i32 %m to i64
  {stride_def}
  br label %body
body:
  %i = phi i64 [ 0, %entry ], [ %next, %body ]
  %p = getelementptr i64, ptr addrspace(1) %a, i64 %i
  %x = load i64, ptr addrspace(1) %p
  %y = add i64 %x, 1
  store i64 %y, ptr addrspace(1) %p
  %next = add i64 %i, %stride
  %done = icmp sge i64 %next, %n64
  br i1 %done, label %exit, label %body
exit:
  ret void
}}
"#
    )
}

#[test]
fn arithmetic_on_arguments_is_uniform_not_held_across_the_loop() {
    let from_arguments = estimate_ir(&loop_kernel("%stride = mul i64 %n64, %m64"));
    let from_memory = estimate_ir(&loop_kernel("%stride = load i64, ptr addrspace(1) %strides"));
    // The loaded stride is a 64-bit vector value live through the loop, and so is the
    // counter it steps; the product of two arguments, and the counter it steps, live in
    // uniform registers.
    assert_eq!(from_memory.max_live_words, from_arguments.max_live_words + 4, "{from_memory:?} vs {from_arguments:?}");
}

fn division_kernel(op: &str) -> String {
    format!(
        r#"
target triple = "nvptx64-nvidia-cuda"
define ptx_kernel void @k(ptr addrspace(1) %a) {{
entry:
  %x = load float, ptr addrspace(1) %a
  %y = {op} float %x, 3.0
  store float %y, ptr addrspace(1) %a
  ret void
}}
"#
    )
}

#[test]
fn precise_division_holds_the_temporaries_of_its_expansion() {
    let multiply = estimate_ir(&division_kernel("fmul"));
    let divide = estimate_ir(&division_kernel("fdiv"));
    // At the division: its result, the registers of `div.rn.f32`'s subroutine (11) less its
    // two operands' words, and the store's address, copied into its pair while the load was
    // in flight; the multiply's peak is at the load (the loaded value and the address).
    assert_eq!(divide.max_live_words, 1 + (11 - 2) + 2, "{divide:?}");
    assert_eq!(multiply.max_live_words, 3, "{multiply:?}");
}

/// nvcc turns `1.0 / x` into `rcp.rn.f64`, whose subroutine (8 registers, one operand) is
/// not `div.rn.f64`'s (20, two operands); `2.0 / x` stays a division.
#[test]
fn a_reciprocal_holds_the_registers_of_its_own_subroutine() {
    let kernel = |dividend: &str| division_kernel("fdiv").replace("float", "double").replace("fdiv double %x, 3.0", &format!("fdiv double {dividend}, %x"));
    let reciprocal = estimate_ir(&kernel("1.0"));
    let negated = estimate_ir(&kernel("-1.0"));
    let divide = estimate_ir(&kernel("2.0"));
    // The result's two words, the subroutine's registers less its operands', the store's address.
    assert_eq!(reciprocal.max_live_words, 2 + (8 - 2) + 2, "{reciprocal:?}");
    assert_eq!(negated.max_live_words, reciprocal.max_live_words, "{negated:?}");
    assert_eq!(divide.max_live_words, 2 + (20 - 4) + 2, "{divide:?}");
}

#[test]
fn arithmetic_sinks_to_its_first_use() {
    // `%q` (a 64-bit address) is computed first but used last: the model places it next to
    // its store, so it is not live while the two loads and their sum are.
    let early = r#"
target triple = "nvptx64-nvidia-cuda"
define ptx_kernel void @k(ptr addrspace(1) %a, ptr addrspace(1) %b) {
entry:
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %i = zext i32 %t to i64
  %q = getelementptr float, ptr addrspace(1) %b, i64 %i
  %p = getelementptr float, ptr addrspace(1) %a, i64 %i
  %x = load float, ptr addrspace(1) %p
  %p1 = getelementptr float, ptr addrspace(1) %p, i64 1
  %y = load float, ptr addrspace(1) %p1
  %s = fadd float %x, %y
  store float %s, ptr addrspace(1) %q
  ret void
}
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
"#;
    let late = early.replace("  %q = getelementptr float, ptr addrspace(1) %b, i64 %i\n", "").replace("  store float %s", "  %q = getelementptr float, ptr addrspace(1) %b, i64 %i\n  store float %s");
    assert_ne!(early, late);
    assert_eq!(estimate_ir(early), estimate_ir(&late));
}

#[test]
fn a_64_bit_division_holds_the_registers_of_ptxas_subroutine() {
    let kernel = |op: &str| {
        format!(
            r#"
target triple = "nvptx64-nvidia-cuda"
define ptx_kernel void @k(ptr addrspace(1) %a) {{
entry:
  %x = load i64, ptr addrspace(1) %a
  %p = getelementptr i64, ptr addrspace(1) %a, i64 1
  %y = load i64, ptr addrspace(1) %p
  %q = {op} i64 %x, %y
  store i64 %q, ptr addrspace(1) %a
  ret void
}}
"#
        )
    };
    let multiply = estimate_ir(&kernel("mul"));
    let divide = estimate_ir(&kernel("sdiv"));
    let remainder = estimate_ir(&kernel("srem"));
    // At the division: its 64-bit result (the operands die there), the registers of the
    // subroutine ptxas calls (16 for `div.s64`, 15 for `rem.s64`) less the operands' four
    // words, and the store's address (copied early, as above); the multiply's peak is at the
    // loads (two 64-bit values). ptxas on LLVM's PTX: 22 registers at sm_90.
    assert_eq!(divide.max_live_words, 2 + (16 - 4) + 2, "{divide:?}");
    assert_eq!(remainder.max_live_words, 2 + (15 - 4) + 2, "{remainder:?}");
    let unsigned = estimate_ir(&kernel("udiv"));
    assert_eq!(unsigned.max_live_words, 2 + (13 - 4) + 2, "{unsigned:?}");
    assert!(multiply.max_live_words < divide.max_live_words, "{multiply:?}");
}

/// A division or remainder by a constant is a multiply-high and shifts in nvcc's and LLVM's
/// code, never ptxas's reciprocal expansion or subroutine call: at 32 bits it holds what a
/// multiplication holds, at 64 bits the words of the emulated wide product unless the
/// divisor is a power of two (`make bench-expansions`, third table).
#[test]
fn a_division_by_a_constant_holds_what_a_multiplication_holds() {
    let kernel = |ty: &str, op: &str| {
        format!(
            r#"
target triple = "nvptx64-nvidia-cuda"
define ptx_kernel void @k(ptr addrspace(1) %a) {{
entry:
  %x = load {ty}, ptr addrspace(1) %a
  %q = {op}
  store {ty} %q, ptr addrspace(1) %a
  ret void
}}
"#
        )
    };
    for ty in ["i32", "i64"] {
        let multiply = estimate_ir(&kernel(ty, &format!("mul {ty} %x, 3")));
        assert!(!multiply.unrolled_loop);
        for op in ["sdiv", "udiv", "srem", "urem"] {
            // Unsigned, -2 is 2^64 - 2 (not a power of two; at 32 bits no cost either way).
            for divisor in ["2", "-2", "8", "3", "-7", "2147483647"] {
                let divided = estimate_ir(&kernel(ty, &format!("{op} {ty} %x, {divisor}")));
                let power_of_two = ["2", "-2", "8"].contains(&divisor) && !(op.starts_with('u') && divisor == "-2");
                let beyond = if ty == "i64" && !power_of_two { llvm_passes::registers::CONSTANT_DIVISION_64_TEMPORARIES } else { 0 };
                // The peak is at the quotient (its words, the store's address) in both.
                assert_eq!(divided.max_live_words, multiply.max_live_words + beyond, "{ty} {op} {divisor}: {divided:?} vs {multiply:?}");
            }
        }
        // A divisor the kernel reads is expanded (32 bits) or calls a subroutine (64 bits).
        let by_value = estimate_ir(&kernel(ty, &format!("sdiv {ty} %x, %x")));
        assert!(by_value.max_live_words >= multiply.max_live_words + 6, "{ty}: {by_value:?} vs {multiply:?}");
    }
}

/// A kernel of one loop `for (k = 0; k != n; k++)` over `body` (IR lines that may use `%a`,
/// `%b`, `%base` = `k*B + tid`).
fn loop_over(body: &str) -> String {
    common::loop_over(body, "%n", false)
}

/// A loop whose body (one block) ptxas unrolls: `loads` loads of `a[k*B + tid + j]`, summed
/// into `b[k*B + tid]`.
fn unrolled_loop_kernel(loads: usize) -> String {
    loop_over(&common::load_sum_body(loads))
}

/// A loop body of `copies` copies of `into[k*B + tid + j] = 2 * a[k*B + tid + j]`, each
/// copy's load after the previous copy's store (a strategy's unrolled copies).
fn copies_kernel(copies: usize, into: &str) -> String {
    let mut body = String::new();
    for j in 0..copies {
        body += &format!("  %i{j} = add i32 %base, {j}\n  %w{j} = sext i32 %i{j} to i64\n  %p{j} = getelementptr float, ptr addrspace(1) %a, i64 %w{j}\n  %x{j} = load float, ptr addrspace(1) %p{j}\n  %y{j} = fmul float %x{j}, 2.0\n  %q{j} = getelementptr float, ptr addrspace(1) %{into}, i64 %w{j}\n  store float %y{j}, ptr addrspace(1) %q{j}\n");
    }
    loop_over(&body)
}

#[test]
fn a_loop_ptxas_unrolls_holds_four_copies_of_an_iteration_up_to_the_occupancy_free_budget() {
    use llvm_passes::registers::{FIXED_COST, OCCUPANCY_FREE_REGISTERS_SM90};
    let small = estimate_ir(&unrolled_loop_kernel(1));
    let large = estimate_ir(&unrolled_loop_kernel(8));
    assert!(small.unrolled_loop && large.unrolled_loop);
    assert!(!small.rolled_loop && !large.rolled_loop);
    // One load per iteration: four copies are more than one iteration holds, less than 32.
    assert!(small.registers > small.max_live_words + FIXED_COST, "{small:?}");
    assert!(small.registers < OCCUPANCY_FREE_REGISTERS_SM90, "{small:?}");
    // Eight loads per iteration: four copies would need more than 32; ptxas stops there.
    assert_eq!(large.registers, OCCUPANCY_FREE_REGISTERS_SM90, "{large:?}");
    // The same small loop with unrolling disabled keeps one iteration's words.
    let disabled = unrolled_loop_kernel(1)
        .replace("br i1 %done, label %exit, label %body", "br i1 %done, label %exit, label %body, !llvm.loop !0")
        + "!0 = distinct !{!0, !1}\n!1 = !{!\"llvm.loop.unroll.disable\"}\n";
    let disabled = estimate_ir(&disabled);
    assert!(!disabled.unrolled_loop && disabled.rolled_loop, "{disabled:?}");
    assert_eq!(disabled.registers, disabled.max_live_words + FIXED_COST, "{disabled:?}");
    assert!(disabled.registers < small.registers);
    // Per architecture: sm_80 and sm_90 keep 2048 threads per multiprocessor (budget 32);
    // sm_80 reads the argument bases from the constant bank (its own liveness, one word for
    // the element size where sm_90 holds `a`'s and `b`'s pairs). sm_75 keeps 1024 (budget 64),
    // so the large loop's copies may hold more there, the small one's are below both budgets,
    // and a loop ptxas does not unroll has no budget to reach.
    for e in [&small, &large, &disabled] {
        assert_eq!(e.for_architecture("sm_90"), e.registers, "{e:?}");
        let bank = e.constant_bank_bases.as_deref().expect("argument bases indexed per thread in the loop");
        assert_eq!(e.for_architecture("sm_80"), bank.registers, "{e:?}");
        assert!(bank.max_live_words < e.max_live_words, "{e:?}");
    }
    assert!(large.for_architecture("sm_75") > OCCUPANCY_FREE_REGISTERS_SM90, "{large:?}");
    // Kept rolled, eight loads of the read-only `a` per iteration (a strategy's unrolled
    // copies): ptxas issues them before the sum, so all eight are live at once.
    let rolled = |kernel: String| {
        estimate_ir(&(kernel.replace("br i1 %done, label %exit, label %body", "br i1 %done, label %exit, label %body, !llvm.loop !0")
            + "!0 = distinct !{!0, !1}\n!1 = !{!\"llvm.loop.unroll.disable\"}\n"))
    };
    let sequential = rolled(copies_kernel(8, "b"));
    let hoisted = sequential.clone();
    assert!(hoisted.registers >= hoisted.max_live_words + FIXED_COST + 6, "{hoisted:?}");
    assert!(hoisted.registers <= OCCUPANCY_FREE_REGISTERS_SM90, "{hoisted:?}");
    // If the loop also stores into `a`, the loads may not pass the stores: nothing is hoisted.
    let written = rolled(copies_kernel(8, "a"));
    assert_eq!(written.registers, written.max_live_words + FIXED_COST, "{written:?}");
    assert!(large.for_architecture("sm_75") <= 64);
    // Below the budgets sm_75's estimate is sm_80's (both read the bases from the constant bank).
    assert_eq!(small.for_architecture("sm_75"), small.for_architecture("sm_80"));
    assert_eq!(disabled.for_architecture("sm_75"), disabled.for_architecture("sm_80"));
    assert_eq!(llvm_passes::registers::occupancy_free_registers("sm_86"), Some(42));
}

/// A loop whose body calls one of ptxas's slow-path subroutines (here a precise division) is
/// unrolled too, but each copy branches to its call, so fewer copies run at once: the loop
/// holds `CALLING_COPIES` iterations' words where the same loop with a multiplication holds
/// `UNROLL_COPIES`'.
#[test]
fn copies_of_a_loop_that_calls_a_subroutine_overlap_less() {
    use llvm_passes::registers::FIXED_COST;
    let body = common::load_sum_body(4);
    let with = |op: &str| {
        let changed = body.replace("%s3 = fadd float %s2, %x3", &format!("%s3 = {op} float %s2, %x3"));
        assert_ne!(changed, body);
        estimate_ir(&loop_over(&changed))
    };
    let multiplied = with("fmul");
    let divided = with("fdiv");
    assert!(multiplied.unrolled_loop && divided.unrolled_loop, "{multiplied:?} {divided:?}");
    // What the copies add over one iteration: (copies - 1) x one iteration's words.
    let raise = |e: &RegisterEstimate| e.unrolled_demand.saturating_sub(e.max_live_words + FIXED_COST);
    assert!(raise(&multiplied) > 0 && raise(&divided) > 0, "{multiplied:?} {divided:?}");
    assert!(raise(&divided) < raise(&multiplied), "{divided:?} against {multiplied:?}");
    assert!(divided.registers < multiplied.registers, "{divided:?} {multiplied:?}");
}

/// A phi chooses one incoming value per path: five uniform addresses (kernel argument plus
/// constant) merged by a phi count as one 64-bit address at the phi, not five.
#[test]
fn a_phi_of_uniform_values_holds_one_of_them() {
    let mut arms = String::new();
    let mut incoming = Vec::new();
    for j in 0..5 {
        arms += &format!("c{j}:\n  %q{j} = getelementptr i8, ptr addrspace(1) %bins, i64 {}\n  br label %join\n", 4 * j);
        incoming.push(format!("[ %q{j}, %c{j} ]"));
    }
    let ir = format!(
        r#"
target triple = "nvptx64-nvidia-cuda"
define ptx_kernel void @k(ptr addrspace(1) readonly %code, ptr addrspace(1) %bins) {{
entry:
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %w = sext i32 %t to i64
  %p = getelementptr i32, ptr addrspace(1) %code, i64 %w
  %c = load i32, ptr addrspace(1) %p
  switch i32 %c, label %c4 [ i32 0, label %c0
                             i32 1, label %c1
                             i32 2, label %c2
                             i32 3, label %c3 ]
{arms}join:
  %at = phi ptr addrspace(1) {}
  %old = atomicrmw add ptr addrspace(1) %at, i32 1 monotonic
  ret void
}}
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
"#,
        incoming.join(", ")
    );
    let e = estimate_ir(&ir);
    // The phi's 64-bit result, and one 64-bit incoming value read at it.
    assert!(e.max_live_words <= 4, "{e:?}");
}

/// `llvm.sqrt.f64` becomes `sqrt.rn.f64`, whose slow path calls a subroutine of 13 registers
/// (`make bench-expansions`), one operand's two words among them; a multiply does not.
#[test]
fn a_double_square_root_holds_its_expansion() {
    let kernel = |op: &str| {
        format!(
            r#"
target triple = "nvptx64-nvidia-cuda"
define ptx_kernel void @k(ptr addrspace(1) %a) {{
entry:
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %w = sext i32 %t to i64
  %p = getelementptr double, ptr addrspace(1) %a, i64 %w
  %x = load double, ptr addrspace(1) %p
  {op}
  store double %y, ptr addrspace(1) %p
  ret void
}}
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare double @llvm.sqrt.f64(double)
"#
        )
    };
    let root = estimate_ir(&kernel("%y = call double @llvm.sqrt.f64(double %x)"));
    let multiply = estimate_ir(&kernel("%y = fmul double %x, %x"));
    assert_eq!(root.max_live_words, multiply.max_live_words + (13 - 2), "{root:?} against {multiply:?}");
}

/// Straight-line code: `loads` loads of `a[tid + j]`, all issued before their sum, which is
/// stored to `into[tid]`.
fn early_loads_kernel(loads: usize, into: &str) -> String {
    let body = common::load_sum_body(loads).replace("getelementptr float, ptr addrspace(1) %b,", &format!("getelementptr float, ptr addrspace(1) %{into},"));
    format!(
        r#"
target triple = "nvptx64-nvidia-cuda"
define ptx_kernel void @k(ptr addrspace(1) %a, ptr addrspace(1) %b) {{
entry:
  %base = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
{body}  ret void
}}
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
"#
    )
}

#[test]
fn early_loads_of_a_read_only_array_are_held_only_up_to_the_occupancy_free_budget() {
    use llvm_passes::registers::{FIXED_COST, OCCUPANCY_FREE_REGISTERS_SM90};
    // 48 values loaded before the first addition: 48 words live in LLVM's order, a few when
    // each load is issued where its value is added.
    let many = estimate_ir(&early_loads_kernel(48, "b"));
    assert!(many.max_live_words >= 48, "{many:?}");
    assert!(many.least_live_words + FIXED_COST < OCCUPANCY_FREE_REGISTERS_SM90, "{many:?}");
    // ptxas keeps the early loads up to what costs no occupancy, and no further.
    assert_eq!(many.registers, OCCUPANCY_FREE_REGISTERS_SM90, "{many:?}");
    assert_eq!(many.for_architecture("sm_80"), OCCUPANCY_FREE_REGISTERS_SM90, "{many:?}");
    assert_eq!(many.for_architecture("sm_75"), many.max_live_words + FIXED_COST, "{many:?}");
    assert_eq!(estimate_ir(&early_loads_kernel(80, "b")).for_architecture("sm_75"), 64);
    // Below the budget LLVM's order stands.
    let few = estimate_ir(&early_loads_kernel(20, "b"));
    assert!(few.max_live_words + FIXED_COST <= OCCUPANCY_FREE_REGISTERS_SM90, "{few:?}");
    assert_eq!(few.registers, few.max_live_words + FIXED_COST, "{few:?}");
    // The sum stored into `a` itself: the loads may not pass that store's kind of write, so
    // they are not moved and everything LLVM's order holds is counted.
    let written = estimate_ir(&early_loads_kernel(48, "a"));
    assert_eq!(written.least_live_words, written.max_live_words, "{written:?}");
    assert_eq!(written.registers, written.max_live_words + FIXED_COST, "{written:?}");
}

#[test]
fn sm_75_computes_uniform_addresses_on_the_uniform_datapath() {
    use llvm_passes::registers::FIXED_COST;
    // Five stores of zero to `%bins + 4k` (a histogram cleared by one thread, as
    // `examples/design-red/bincount.mf` does). sm_75's SASS holds the base in uniform registers
    // and stores to `[UR4+0x4]`...: no vector register for the address arithmetic or the
    // addresses (ptxas: 4 registers, its least). From sm_80 on the base is copied into a vector
    // register pair (`STG desc[UR4][R2.64+0x4]`; 6 at sm_90).
    let ir = r#"
target triple = "nvptx64-nvidia-cuda"
define ptx_kernel void @k(ptr addrspace(1) %bins) {
entry:
  store i32 0, ptr addrspace(1) %bins
  %b1 = getelementptr i8, ptr addrspace(1) %bins, i64 4
  store i32 0, ptr addrspace(1) %b1
  %b2 = getelementptr i8, ptr addrspace(1) %bins, i64 8
  store i32 0, ptr addrspace(1) %b2
  %b3 = getelementptr i8, ptr addrspace(1) %bins, i64 12
  store i32 0, ptr addrspace(1) %b3
  %b4 = getelementptr i8, ptr addrspace(1) %bins, i64 16
  store i32 0, ptr addrspace(1) %b4
  ret void
}
"#;
    let e = estimate_ir(ir);
    assert_eq!(e.max_live_words, 2, "{e:?}");
    assert_eq!(e.max_live_words_uniform_addresses, 0, "{e:?}");
    assert_eq!(e.for_architecture("sm_75"), FIXED_COST, "{e:?}");
    assert_eq!(e.for_architecture("sm_90"), 2 + FIXED_COST, "{e:?}");
}

#[test]
fn sm_75_reads_a_uniform_global_address_from_uniform_registers() {
    use llvm_passes::registers::uniform_global_addresses;
    // A scalar loaded, negated and stored to two arguments (`address` for the first): from
    // sm_80 on each address is copied into a vector register pair at its access; sm_75's loads
    // and stores take a uniform one from uniform registers.
    let kernel = |defs: &str, address: &str| {
        format!(
            r#"
target triple = "nvptx64-nvidia-cuda"
define ptx_kernel void @k(ptr addrspace(1) %r, ptr addrspace(1) %y, ptr addrspace(1) %z) {{
entry:
  %c = load float, ptr addrspace(1) %r
  %n = fneg float %c
{defs}  store float %n, ptr addrspace(1) {address}
  store float 1.0, ptr addrspace(1) %z
  ret void
}}
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
"#
        )
    };
    let uniform = estimate_ir(&kernel("", "%y"));
    let per_thread = estimate_ir(&kernel("  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n  %w = zext i32 %t to i64\n  %p = getelementptr float, ptr addrspace(1) %y, i64 %w\n", "%p"));
    assert_eq!(uniform.for_architecture("sm_80"), uniform.registers, "{uniform:?}");
    // From sm_80 on, at the load: its value, its address and both store addresses (copied in
    // while it is in flight); at sm_75 only the value (ptxas on LLVM's PTX: 5 registers at
    // sm_75, 14 at sm_80 and sm_90).
    assert_eq!(uniform.max_live_words, 1 + 2 + 2 * 2, "{uniform:?}");
    assert_eq!(uniform.for_architecture("sm_75"), 1 + llvm_passes::registers::FIXED_COST, "{uniform:?}");
    // A per-thread address is in vector registers everywhere: at sm_75 only `%z`'s pair,
    // copied early from sm_80 on, is not held.
    assert!(per_thread.for_architecture("sm_75") > uniform.for_architecture("sm_75"), "{per_thread:?} against {uniform:?}");
    assert_eq!(per_thread.for_architecture("sm_75") + 2, per_thread.registers, "{per_thread:?}");
    assert!(uniform_global_addresses("sm_75"));
    for arch in ["sm_80", "sm_86", "sm_89", "sm_90", "sm_100"] {
        assert!(!uniform_global_addresses(arch), "{arch}");
    }
}

#[test]
fn store_addresses_are_copied_in_while_the_first_load_is_in_flight() {
    // Three stores to uniform addresses (arguments), after a load or without one (as
    // `durbin`'s first kernel: `y[0] = -r[0]; beta[0] = 1; alpha[0] = -r[0]`). From sm_80 on,
    // ptxas copies every store address into its vector register pair right after the load
    // is issued (`LDC.64 R4, c[0x0][0x220]` ... before the first `STG`), so all three are
    // held at once (nvcc: 16 registers at sm_80 and sm_90); without a load each is copied at
    // its store. sm_75's stores read them from uniform registers (nvcc: 5 registers).
    let kernel = |first: &str| {
        format!(
            r#"
target triple = "nvptx64-nvidia-cuda"
define ptx_kernel void @k(ptr addrspace(1) %r, ptr addrspace(1) %y, ptr addrspace(1) %beta, ptr addrspace(1) %alpha) {{
entry:
{first}
  %n = fneg float %c
  store float %n, ptr addrspace(1) %y
  store float 1.0, ptr addrspace(1) %beta
  store float %n, ptr addrspace(1) %alpha
  ret void
}}
"#
        )
    };
    let after_a_load = estimate_ir(&kernel("  %c = load float, ptr addrspace(1) %r"));
    let without = estimate_ir(&kernel("  %c = fadd float 0.0, 2.0"));
    // At the load: its address, its value and the three store addresses.
    assert_eq!(after_a_load.max_live_words, 2 + 1 + 3 * 2, "{after_a_load:?}");
    // One store address at a time, beside the negated value.
    assert_eq!(without.max_live_words, 1 + 2, "{without:?}");
    // sm_75 holds none of the addresses in vector registers, load or not.
    assert_eq!(after_a_load.max_live_words_uniform_addresses, 1, "{after_a_load:?}");
    assert_eq!(after_a_load.for_architecture("sm_75"), 1 + llvm_passes::registers::FIXED_COST, "{after_a_load:?}");
}

/// A kernel loading `a[9*tid + c]` for each offset `c` in `offsets` through `address(c)` (IR
/// lines defining `%p<c>` from `%row`, the pair `a + 9*tid`), summing the values into
/// `b[tid]`; `extra` adds lines before the return.
fn offsets_kernel(offsets: &[i64], address: &dyn Fn(i64) -> String, extra: &str) -> String {
    let mut body = String::new();
    let mut sum = "0.0".to_string();
    for &c in offsets {
        body += &address(c);
        body += &format!("  %v{c} = load float, ptr addrspace(1) %p{c}, align 4\n  %s{c} = fadd float {sum}, %v{c}\n");
        sum = format!("%s{c}");
    }
    format!(
        r#"
target triple = "nvptx64-nvidia-cuda"
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
define ptx_kernel void @k(ptr addrspace(1) %a, ptr addrspace(1) %b, ptr addrspace(1) %c) {{
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %t = sext i32 %tid to i64
  %m9 = mul nsw i64 %t, 9
  %row = getelementptr float, ptr addrspace(1) %a, i64 %m9
{body}  %out = getelementptr float, ptr addrspace(1) %b, i64 %t
  store float {sum}, ptr addrspace(1) %out, align 4
{extra}  ret void
}}
"#
    )
}

/// An address at a constant offset from another, read only by memory instructions, is the
/// machine's register plus an immediate: it holds no register of its own, as if each load read
/// the base (SASS of a 3x3 matrix inverse: nine loads from one pair at offsets 0x0..0x20).
/// An offset address used as a value, or an offset past the immediate's range, still holds
/// its pair.
#[test]
fn constant_offsets_from_an_address_take_no_register_of_their_own() {
    let offsets: Vec<i64> = (0..9).collect();
    let offset = |c: i64| format!("  %p{c} = getelementptr i8, ptr addrspace(1) %row, i64 {}\n", 4 * c);
    let same_address = |c: i64| format!("  %p{c} = getelementptr i8, ptr addrspace(1) %row, i64 0\n");
    let by_index = |c: i64| format!("  %i{c} = add nsw i64 %m9, {c}\n  %p{c} = getelementptr float, ptr addrspace(1) %a, i64 %i{c}\n");
    let folded = estimate_ir(&offsets_kernel(&offsets, &offset, ""));
    let base_only = estimate_ir(&offsets_kernel(&offsets, &same_address, ""));
    let indexed = estimate_ir(&offsets_kernel(&offsets, &by_index, ""));
    let hoisted = |c: i64| if c == 0 { offsets.iter().map(|&d| offset(d)).collect() } else { String::new() };
    let early = estimate_ir(&offsets_kernel(&offsets, &hoisted, ""));
    let escaping = estimate_ir(&offsets_kernel(&offsets, &hoisted, "  store ptr addrspace(1) %p8, ptr addrspace(1) %c, align 8\n"));
    let far = |c: i64| format!("  %p{c} = getelementptr i8, ptr addrspace(1) %row, i64 {}\n", (4 * c) << 20);
    let far = estimate_ir(&offsets_kernel(&offsets, &far, ""));
    assert_eq!(folded.max_live_words, base_only.max_live_words, "{folded:?} vs {base_only:?}");
    // Computed before the loads (where LLVM may leave them), the offsets cost nothing either.
    assert_eq!(early.max_live_words, folded.max_live_words, "{early:?} vs {folded:?}");
    // Each index computed apart (`9*tid + c`, before the back end splits the offsets off)
    // makes a pair of its own.
    assert!(indexed.max_live_words > folded.max_live_words, "{indexed:?} vs {folded:?}");
    // Used as a value too (stored), or beyond the immediate's range: a pair again.
    assert!(escaping.max_live_words > folded.max_live_words, "{escaping:?} vs {folded:?}");
    assert!(far.max_live_words > folded.max_live_words, "{far:?} vs {folded:?}");
}
