//! IR text shared by the crate's integration tests.

/// One loop iteration's body: `loads` loads of `a[base + j]` (`%base` an `i32` the loop
/// defines), summed in order, the sum stored to `b[base]`.
pub fn load_sum_body(loads: usize) -> String {
    let mut body = String::new();
    for j in 0..loads {
        body += &format!("  %i{j} = add i32 %base, {j}\n  %w{j} = sext i32 %i{j} to i64\n  %p{j} = getelementptr float, ptr addrspace(1) %a, i64 %w{j}\n  %x{j} = load float, ptr addrspace(1) %p{j}\n");
    }
    body += "  %s0 = fadd float %x0, 0.0\n";
    for j in 1..loads {
        body += &format!("  %s{j} = fadd float %s{}, %x{j}\n", j - 1);
    }
    body += &format!("  %wb = sext i32 %base to i64\n  %q = getelementptr float, ptr addrspace(1) %b, i64 %wb\n  store float %s{}, ptr addrspace(1) %q\n", loads - 1);
    body
}

/// A kernel of one loop `for (k = 0; k != trips; k++)` over `body` (IR lines that may use
/// `%a`, `%b`, `%base` = `k*B + tid`); `trips` is `%n` or a constant; `rolled` marks the loop
/// `llvm.loop.unroll.disable` (`#pragma unroll 1`).
pub fn loop_over(body: &str, trips: &str, rolled: bool) -> String {
    let (mark, metadata) = if rolled { (", !llvm.loop !0", "!0 = distinct !{!0, !1}\n!1 = !{!\"llvm.loop.unroll.disable\"}\n") } else { ("", "") };
    format!(
        r#"
target triple = "nvptx64-nvidia-cuda"
define ptx_kernel void @k(ptr addrspace(1) %a, ptr addrspace(1) %b, i32 %n, i32 %B) {{
entry:
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  br label %body
body:
  %k = phi i32 [ 0, %entry ], [ %next, %body ]
  %kB = mul i32 %k, %B
  %base = add i32 %kB, %t
{body}  %next = add i32 %k, 1
  %done = icmp eq i32 %next, {trips}
  br i1 %done, label %exit, label %body{mark}
exit:
  ret void
}}
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
{metadata}"#
    )
}
