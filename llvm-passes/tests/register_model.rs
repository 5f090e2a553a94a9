//! The register model's refinements, each on a pair of kernels that differ only in what the
//! refinement is about: rematerialisation of argument arithmetic, ptxas's expansion of precise
//! division, and arithmetic sinking to its first use.

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
fn arithmetic_on_arguments_is_rematerialised_not_held_across_the_loop() {
    let from_arguments = estimate_ir(&loop_kernel("%stride = mul i64 %n64, %m64"));
    let from_memory = estimate_ir(&loop_kernel("%stride = load i64, ptr addrspace(1) %strides"));
    // The loaded stride is a 64-bit value live through the loop; the product of two
    // arguments is recomputed where it is used.
    assert_eq!(from_memory.max_live_words, from_arguments.max_live_words + 2, "{from_memory:?} vs {from_arguments:?}");
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
    // At the division: its result and the four temporaries of `div.rn.f32`; the multiply's
    // peak is at the load (the loaded value and the 64-bit address).
    assert_eq!(divide.max_live_words, 1 + 4, "{divide:?}");
    assert_eq!(multiply.max_live_words, 3, "{multiply:?}");
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
