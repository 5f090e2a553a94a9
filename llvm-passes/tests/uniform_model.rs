//! Which values the register model places in uniform registers (`llvm_passes::uniform`):
//! each rule on a pair of kernels that differ only in what the rule is about.

use inkwell::context::Context;
use inkwell::memory_buffer::MemoryBuffer;
use inkwell::values::AsValueRef;
use inkwell::values::FunctionValue;
use llvm_passes::cfg::Cfg;
use llvm_passes::uniform::{key, uniform_values, uniformities, Bases};

/// `look` at kernel `k` of `ir` (which must parse and verify).
fn with_kernel<R>(ir: &str, look: impl FnOnce(FunctionValue<'_>) -> R) -> R {
    let context = Context::create();
    let buffer = MemoryBuffer::create_from_memory_range_copy(ir.as_bytes(), "test");
    let module = context.create_module_from_ir(buffer).expect("test IR parses");
    module.verify().expect("test IR verifies");
    look(module.get_function("k").expect("kernel k"))
}

/// The named values of kernel `k` in `ir`, each with whether it is uniform.
fn uniformity(ir: &str) -> Vec<(String, bool)> {
    with_kernel(ir, named_uniformity)
}

fn named_uniformity(function: FunctionValue<'_>) -> Vec<(String, bool)> {
    let uniform = uniform_values(function);
    let mut named = Vec::new();
    for p in function.get_param_iter() {
        let name = p.into_int_value_or_pointer_name();
        named.push((name, uniform.contains(&key(p.as_value_ref()))));
    }
    for block in function.get_basic_blocks() {
        for i in block.get_instructions() {
            if let Some(name) = i.get_name().and_then(|n| n.to_str().ok()).filter(|n| !n.is_empty()) {
                named.push((name.to_string(), uniform.contains(&key(i.as_value_ref()))));
            }
        }
    }
    named
}

trait ParamName {
    fn into_int_value_or_pointer_name(self) -> String;
}

impl ParamName for inkwell::values::BasicValueEnum<'_> {
    fn into_int_value_or_pointer_name(self) -> String {
        let name = match self {
            inkwell::values::BasicValueEnum::IntValue(v) => v.get_name().to_owned(),
            inkwell::values::BasicValueEnum::PointerValue(v) => v.get_name().to_owned(),
            other => panic!("unexpected parameter {other:?}"),
        };
        name.to_str().expect("UTF-8 name").to_string()
    }
}

fn is_uniform(ir: &str, name: &str) -> bool {
    uniformity(ir)
        .into_iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no value named {name}"))
        .1
}

const DECLARATIONS: &str = r#"
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
"#;

/// A loop over `k < n` storing `a[k + index]` where `index` is given by `index_def` (a value
/// computed in the entry block, from `%t` = threadIdx.x and `%c` = blockIdx.x).
fn loop_kernel(index_def: &str, exit: &str) -> String {
    format!(
        r#"
target triple = "nvptx64-nvidia-cuda"
define ptx_kernel void @k(ptr addrspace(1) %a, i32 %n, i32 %B) {{
entry:
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %c = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  {index_def}
  br label %body
body:
  %k = phi i32 [ 0, %entry ], [ %next, %body ]
  %i = add i32 %k, %index
  %w = zext i32 %i to i64
  %p = getelementptr float, ptr addrspace(1) %a, i64 %w
  store float 1.0, ptr addrspace(1) %p
  %next = add i32 %k, 1
  %done = icmp {exit}
  br i1 %done, label %exit, label %body
exit:
  ret void
}}
{DECLARATIONS}"#
    )
}

#[test]
fn block_index_arithmetic_is_uniform_and_thread_index_arithmetic_is_not() {
    let by_block = loop_kernel("%index = mul i32 %c, %B", "eq i32 %next, %n");
    let by_thread = loop_kernel("%index = mul i32 %t, %B", "eq i32 %next, %n");
    assert!(is_uniform(&by_block, "c") && is_uniform(&by_block, "index") && is_uniform(&by_block, "i"));
    assert!(!is_uniform(&by_thread, "t") && !is_uniform(&by_thread, "index") && !is_uniform(&by_thread, "i"));
    // The loop counter is uniform in both: its exit condition is.
    assert!(is_uniform(&by_block, "k") && is_uniform(&by_thread, "k") && is_uniform(&by_thread, "next"));
    // Arguments are uniform.
    assert!(is_uniform(&by_thread, "n") && is_uniform(&by_thread, "B"));
}

#[test]
fn a_loop_leaving_on_a_thread_dependent_condition_has_a_vector_counter() {
    let uniform_exit = loop_kernel("%index = mul i32 %c, %B", "eq i32 %next, %n");
    let thread_exit = loop_kernel("%index = mul i32 %c, %B\n  %tn = add i32 %n, %t", "eq i32 %next, %tn");
    assert!(is_uniform(&uniform_exit, "k"));
    // Lanes leave at different iterations, so the counter (and what uses it) is per lane.
    assert!(!is_uniform(&thread_exit, "k") && !is_uniform(&thread_exit, "next") && !is_uniform(&thread_exit, "i"));
}

fn join_kernel(condition: &str) -> String {
    format!(
        r#"
target triple = "nvptx64-nvidia-cuda"
define ptx_kernel void @k(ptr addrspace(1) %a, i32 %n) {{
entry:
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %c = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %cond = icmp slt i32 {condition}, %n
  br i1 %cond, label %then, label %join
then:
  br label %join
join:
  %x = phi i32 [ 1, %then ], [ 2, %entry ]
  %w = zext i32 %x to i64
  %p = getelementptr float, ptr addrspace(1) %a, i64 %w
  store float 1.0, ptr addrspace(1) %p
  ret void
}}
{DECLARATIONS}"#
    )
}

#[test]
fn a_phi_is_uniform_exactly_when_the_branch_deciding_it_is() {
    // Both incoming values are constants; only the deciding branch differs.
    assert!(is_uniform(&join_kernel("%c"), "x"));
    assert!(!is_uniform(&join_kernel("%t"), "x"));
}

#[test]
fn a_global_base_indexed_by_a_widened_thread_value_in_a_loop_is_held_in_vector_registers() {
    // In the loop, `a + (i64) i` with `i` per thread: ptxas's IMAD.WIDE takes `a` from the
    // constant bank and the element size in a vector register, which `a` stands for.
    let in_loop = loop_kernel("%index = mul i32 %t, %B", "eq i32 %next, %n");
    assert!(!is_uniform(&in_loop, "a"));
    // The same address with a uniform index keeps `a` uniform ...
    let uniform_index = loop_kernel("%index = mul i32 %c, %B", "eq i32 %next, %n");
    assert!(is_uniform(&uniform_index, "a"));
    // ... and so does a per-thread address outside a loop (ptxas uses LEA with a uniform base).
    assert!(is_uniform(&join_kernel("%t"), "a"));
}

fn division_kernel(op: &str) -> String {
    format!(
        r#"
target triple = "nvptx64-nvidia-cuda"
define ptx_kernel void @k(ptr addrspace(1) %a, i32 %s, i32 %B) {{
entry:
  %c = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %q = {op} i32 %c, %s
  %cB = mul i32 %c, %B
  %i = add i32 %cB, %q
  %w = zext i32 %i to i64
  %p = getelementptr float, ptr addrspace(1) %a, i64 %w
  store float 1.0, ptr addrspace(1) %p
  ret void
}}
{DECLARATIONS}"#
    )
}

#[test]
fn a_block_index_divided_is_read_into_a_vector_register() {
    // A quotient of the block index: ptxas reads it with S2R, and what else it feeds (`cB`)
    // is computed from that vector copy.
    let quotient = division_kernel("sdiv");
    assert!(!is_uniform(&quotient, "c") && !is_uniform(&quotient, "cB") && !is_uniform(&quotient, "q"));
    // A remainder alone leaves the block index uniform; the remainder itself is a vector
    // value (division has no uniform datapath).
    let remainder = division_kernel("srem");
    assert!(is_uniform(&remainder, "c") && is_uniform(&remainder, "cB"));
    assert!(!is_uniform(&remainder, "q") && !is_uniform(&remainder, "i"));
}

/// `row = (i64) blockIdx.x * n`, defined by `before` ahead of the loops or by `in_outer` in the
/// outer loop's body, and read in the innermost loop; `nested` says whether that loop sits in
/// an outer loop.
fn nest_kernel(row_width: u32, before: &str, in_outer: &str, nested: bool) -> String {
    let row = if row_width == 64 { "%row" } else { "%row64" };
    let widen = if row_width == 64 { "" } else { "  %row64 = zext i32 %row to i64" };
    let (outer_head, outer_tail) = if nested {
        (
            "  br label %outer\nouter:\n  %i = phi i32 [ 0, %entry ], [ %inext, %latch ]",
            "latch:\n  %inext = add i32 %i, 1\n  %idone = icmp sge i32 %inext, %m\n  br i1 %idone, label %exit, label %outer",
        )
    } else {
        ("  br label %outer\nouter:", "latch:\n  br label %exit")
    };
    format!(
        r#"
target triple = "nvptx64-nvidia-cuda"
{DECLARATIONS}
define ptx_kernel void @k(ptr addrspace(1) noalias %a, i32 %n, i32 %m) {{
entry:
  %c = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %t64 = zext i32 %t to i64
  %c64 = zext i32 %c to i64
  %n64 = sext i32 %n to i64
{before}
{outer_head}
{in_outer}
{widen}
  br label %inner
inner:
  %j = phi i32 [ 0, %outer ], [ %jnext, %inner ]
  %j64 = zext i32 %j to i64
  %rj = add i64 {row}, %j64
  %idx = add i64 %rj, %t64
  %p = getelementptr float, ptr addrspace(1) %a, i64 %idx
  store float 0.0, ptr addrspace(1) %p
  %jnext = add i32 %j, 1
  %jdone = icmp sge i32 %jnext, %n
  br i1 %jdone, label %latch, label %inner
{outer_tail}
exit:
  ret void
}}
"#
    )
}

#[test]
fn a_64_bit_uniform_value_computed_before_a_loop_nest_is_held_in_vector_registers() {
    // Computed before the nest, ptxas hoists it with the nest's other invariants into a vector
    // register pair (SASS of `dilated_conv1d`'s leaves at sm_90: the 64-bit products of the
    // block index and the extents sit in `R2:R3`, `R6:R7`, ... through both loops).
    let row64 = "  %row = mul i64 %c64, %n64";
    let row32 = "  %row = mul i32 %c, %n";
    assert!(!is_uniform(&nest_kernel(64, row64, "", true), "row"));
    assert!(!is_uniform(&nest_kernel(64, row64, "", true), "rj"), "computed from a vector value");
    // Computed in the outer loop's body, once per outer iteration (from the 32-bit block index
    // and extent: their 64-bit forms before the nest would be such values themselves), it stays
    // uniform.
    let row64_in_outer = "  %cw = zext i32 %c to i64\n  %nw = sext i32 %n to i64\n  %row = mul i64 %cw, %nw";
    assert!(is_uniform(&nest_kernel(64, "", row64_in_outer, true), "row"));
    assert!(is_uniform(&nest_kernel(64, "", row64_in_outer, true), "rj"));
    // Before a single loop, as before a nest but 32 bits wide, it stays uniform.
    assert!(is_uniform(&nest_kernel(64, row64, "", false), "row"));
    assert!(is_uniform(&nest_kernel(32, row32, "", true), "row"));
}

/// A loop copying `src[k + t]` to `dst[k + t]` (`t` = threadIdx.x); `dst` is the argument
/// `%d`, or, with `computed_dst`, `%d` offset by `%n` bytes (a uniform value computed before
/// the loop).
fn copy_kernel(src_type: &str, dst_type: &str, computed_dst: bool) -> String {
    let (dst_def, dst) = if computed_dst { ("%off = zext i32 %n to i64\n  %dst = getelementptr i8, ptr addrspace(1) %d, i64 %off", "%dst") } else { ("", "%d") };
    let convert = if src_type == dst_type { format!("%y = bitcast {src_type} %x to {dst_type}") } else { format!("%y = fpext {src_type} %x to {dst_type}") };
    format!(
        r#"
target triple = "nvptx64-nvidia-cuda"
target datalayout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
define ptx_kernel void @k(ptr addrspace(1) %s, ptr addrspace(1) %d, i32 %n) {{
entry:
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  {dst_def}
  br label %body
body:
  %k = phi i32 [ 0, %entry ], [ %next, %body ]
  %i = add i32 %k, %t
  %w = zext i32 %i to i64
  %p = getelementptr {src_type}, ptr addrspace(1) %s, i64 %w
  %x = load {src_type}, ptr addrspace(1) %p
  {convert}
  %q = getelementptr {dst_type}, ptr addrspace(1) {dst}, i64 %w
  store {dst_type} %y, ptr addrspace(1) %q
  %next = add i32 %k, 1
  %done = icmp eq i32 %next, %n
  br i1 %done, label %exit, label %body
exit:
  ret void
}}
{DECLARATIONS}"#
    )
}

/// The kernel arguments of `k` that stand for an element-size register before sm_90; `None`
/// when no argument base is read from the constant bank (the uniformity is sm_90's).
fn scale_registers(ir: &str) -> Option<Vec<String>> {
    with_kernel(ir, |function| {
        let bank = uniformities(&Cfg::of(function), function).constant_bank?;
        Some(function.get_param_iter().filter(|p| bank.scale_registers.contains(&key(p.as_value_ref()))).map(|p| p.into_int_value_or_pointer_name()).collect())
    })
}

/// The register estimate of kernel `k` at sm_80 and at sm_90.
fn estimates(ir: &str) -> (u32, u32) {
    with_kernel(ir, |function| {
        let e = llvm_passes::registers::estimate(function);
        (e.for_architecture("sm_80"), e.for_architecture("sm_90"))
    })
}

#[test]
fn before_sm_90_arguments_indexed_per_thread_in_a_loop_share_one_element_size_register() {
    assert_eq!(Bases::of("sm_75"), Bases::ConstantBank);
    assert_eq!(Bases::of("sm_89"), Bases::ConstantBank);
    assert_eq!(Bases::of("sm_90"), Bases::Pairs);
    assert_eq!(Bases::of("sm_100"), Bases::Pairs);
    // Two float arrays: one register holds the 4 both `IMAD.WIDE`s multiply by (SASS of
    // `vecadd`'s rolled leaf at sm_80: `a`, `b` and `c` from `c[0x0][...]`, the size in R7).
    let same = copy_kernel("float", "float", false);
    assert_eq!(scale_registers(&same).expect("argument bases"), ["s"]);
    // sm_90 loads both bases into pairs (`LDC.64`): three words more than the one register.
    let (sm80, sm90) = estimates(&same);
    assert_eq!(sm90, sm80 + 3, "sm_80 {sm80}, sm_90 {sm90}");
    // A float and a double array: one register each, 4 and 8.
    assert_eq!(scale_registers(&copy_kernel("float", "double", false)).expect("argument bases"), ["s", "d"]);
    // A base computed before the loop is not in the constant bank: its pair is held on every
    // architecture, where the argument held one word before sm_90.
    let computed = copy_kernel("float", "double", true);
    assert_eq!(scale_registers(&computed).expect("argument bases"), ["s"]);
    assert!(!is_uniform(&computed, "dst"));
    let (argument80, argument90) = estimates(&copy_kernel("float", "double", false));
    let (computed80, computed90) = estimates(&computed);
    assert_eq!((computed80, computed90), (argument80 + 1, argument90), "computed base against the argument");
    // Outside a loop the base is a uniform pair everywhere: no second uniformity, one estimate.
    let straight = format!(
        r#"
target triple = "nvptx64-nvidia-cuda"
define ptx_kernel void @k(ptr addrspace(1) %s) {{
entry:
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %w = zext i32 %t to i64
  %p = getelementptr float, ptr addrspace(1) %s, i64 %w
  store float 1.0, ptr addrspace(1) %p
  ret void
}}
{DECLARATIONS}"#
    );
    assert_eq!(scale_registers(&straight), None);
    let (straight80, straight90) = estimates(&straight);
    assert_eq!(straight80, straight90);
}
