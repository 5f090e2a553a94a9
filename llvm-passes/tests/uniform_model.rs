//! Which values the register model places in uniform registers (`llvm_passes::uniform`):
//! each rule on a pair of kernels that differ only in what the rule is about.

use inkwell::context::Context;
use inkwell::memory_buffer::MemoryBuffer;
use inkwell::values::AsValueRef;
use llvm_passes::uniform::{key, uniform_values};

/// The named values of kernel `k` in `ir`, each with whether it is uniform.
fn uniformity(ir: &str) -> Vec<(String, bool)> {
    let context = Context::create();
    let buffer = MemoryBuffer::create_from_memory_range_copy(ir.as_bytes(), "test");
    let module = context.create_module_from_ir(buffer).expect("test IR parses");
    module.verify().expect("test IR verifies");
    let function = module.get_function("k").expect("kernel k");
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
    // In the loop, `a + (i64) i` with `i` per thread: ptxas's IMAD.WIDE takes `a` in vector
    // registers.
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
