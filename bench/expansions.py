#!/usr/bin/env python3
"""Registers ptxas's expansions hold: the measurement behind the register model's
`expansion_temporaries` (llvm-passes/src/registers.rs).

Each micro-kernel (hand-written PTX) loads M floats, holds them across one instruction, then
sums them with its result, so the instruction's cost comes on top of M live values, as in a
real kernel. The same kernel with the cheap counterpart (a multiply) is the baseline. Prints,
per instruction, `ptxas -v`'s registers for each M, the difference from the baseline, and its
median over M <= 20 (at M = 24 ptxas moves the loads after the instruction to stay near 32
registers, so that column no longer holds M values across it).

Then, per architecture, the registers of the subroutines ptxas calls for the slow paths of
`div.rn.f32`, `div.rn.f64`, `div.s64`, `rem.s64`, `div.u64`, `rem.u64` and `sqrt.rn.f64`: the distinct registers the
subroutine's SASS names (from the `CALL.REL` target to the end of the kernel, `cuobjdump
-sass`), operands and result included. The model's `expansion_temporaries` for such an
instruction is that count less its operands' words (the operands arrive in the subroutine's
registers, and the model already counts them where they are live).

Last, divisions and remainders by a constant, which ptxas never sees as such: nvcc's front end
(as LLVM's back end) turns them into a multiply-high and shifts, so they are measured from CUDA
through nvcc, against a multiplication by the same constant, at sm_75, sm_80 and sm_90, with
8, 12 and 16 floats held across them (fewer leave ptxas free slots; at 20 it begins to reorder
the loads). The register model's `expansion_temporaries` takes 0 for 32 bits and for powers of
two, and `CONSTANT_DIVISION_64_TEMPORARIES` for the rest.

Run: `make bench-expansions` (needs `ptxas` and `cuobjdump` on PATH; `make setup` installs them).
"""
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ARCH = "sm_90"
HELD = [0, 2, 4, 8, 12, 16, 20, 24]

# name -> (operand type, PTX of the instruction on %a, %b into %q, conversion of %q to %f_out)
INSTRUCTIONS = {
    "mul.rn.f32": ("f32", "mul.rn.f32 %q, %a, %b;", "mov.f32 %out, %q;"),
    "div.rn.f32": ("f32", "div.rn.f32 %q, %a, %b;", "mov.f32 %out, %q;"),
    "mul.lo.s32": ("s32", "mul.lo.s32 %q, %a, %b;", "cvt.rn.f32.s32 %out, %q;"),
    "div.s32": ("s32", "div.s32 %q, %a, %b;", "cvt.rn.f32.s32 %out, %q;"),
    "rem.s32": ("s32", "rem.s32 %q, %a, %b;", "cvt.rn.f32.s32 %out, %q;"),
    "mul.lo.s64": ("s64", "mul.lo.s64 %q, %a, %b;", "cvt.rn.f32.s64 %out, %q;"),
    "div.s64": ("s64", "div.s64 %q, %a, %b;", "cvt.rn.f32.s64 %out, %q;"),
    "rem.s64": ("s64", "rem.s64 %q, %a, %b;", "cvt.rn.f32.s64 %out, %q;"),
    "sqrt.rn.f32": ("f32", "sqrt.rn.f32 %q, %a;", "mov.f32 %out, %q;"),
    "mul.rn.f64": ("f64", "mul.rn.f64 %q, %a, %b;", "cvt.rn.f32.f64 %out, %q;"),
    "div.rn.f64": ("f64", "div.rn.f64 %q, %a, %b;", "cvt.rn.f32.f64 %out, %q;"),
    "sqrt.rn.f64": ("f64", "sqrt.rn.f64 %q, %a;", "cvt.rn.f32.f64 %out, %q;"),
    "rcp.rn.f64": ("f64", "rcp.rn.f64 %q, %a;", "cvt.rn.f32.f64 %out, %q;"),
    "rcp.rn.f32": ("f32", "rcp.rn.f32 %q, %a;", "mov.f32 %out, %q;"),
    "div.u64": ("s64", "div.u64 %q, %a, %b;", "cvt.rn.f32.u64 %out, %q;"),
    "rem.u64": ("s64", "rem.u64 %q, %a, %b;", "cvt.rn.f32.u64 %out, %q;"),
}
SUBROUTINES = ["div.rn.f32", "div.rn.f64", "rcp.rn.f32", "rcp.rn.f64", "div.s64", "rem.s64", "div.u64", "rem.u64", "sqrt.rn.f64"]
SUBROUTINE_ARCHS = ["sm_75", "sm_80", "sm_90"]
BASELINE = {"div.rn.f32": "mul.rn.f32", "div.s32": "mul.lo.s32", "rem.s32": "mul.lo.s32",
            "div.s64": "mul.lo.s64", "rem.s64": "mul.lo.s64", "sqrt.rn.f32": "mul.rn.f32",
            "div.rn.f64": "mul.rn.f64", "sqrt.rn.f64": "mul.rn.f64", "rcp.rn.f64": "mul.rn.f64",
            "div.u64": "mul.lo.s64", "rem.u64": "mul.lo.s64", "rcp.rn.f32": "mul.rn.f32"}


def kernel(held: int, instruction: str, arch: str = ARCH) -> str:
    ty, op, convert = INSTRUCTIONS[instruction]
    reg = {"f32": ".f32", "s32": ".b32", "s64": ".b64", "f64": ".f64"}[ty]
    size = {"f32": 4, "s32": 4, "s64": 8, "f64": 8}[ty]
    lines = [
        f".version 8.0\n.target {arch}\n.address_size 64\n",
        ".visible .entry k(.param .u64 pa, .param .u64 pb)\n{",
        f"  .reg .f32 %f<{held + 2}>;\n  .reg .f32 %out;\n  .reg .b64 %rd<8>;\n  .reg .b32 %r1;",
        f"  .reg {reg} %a;\n  .reg {reg} %b;\n  .reg {reg} %q;",
        "  ld.param.u64 %rd1, [pa];\n  ld.param.u64 %rd2, [pb];",
        "  cvta.to.global.u64 %rd1, %rd1;\n  cvta.to.global.u64 %rd2, %rd2;",
        "  mov.u32 %r1, %tid.x;\n  mul.wide.u32 %rd3, %r1, 4;\n  add.s64 %rd4, %rd1, %rd3;",
    ]
    lines += [f"  ld.global.f32 %f{i}, [%rd4+{4096 * i}];" for i in range(held)]
    lines += [f"  ld.global.{ty if ty != 'f32' else 'f32'} %a, [%rd4+{4096 * held + 8 * size}];",
              f"  ld.global.{ty if ty != 'f32' else 'f32'} %b, [%rd4+{4096 * held + 16 * size}];",
              f"  {op}", f"  {convert}"]
    lines += [f"  add.f32 %out, %out, %f{i};" for i in range(held)]
    lines += ["  st.global.f32 [%rd2], %out;\n  ret;\n}"]
    return "\n".join(lines)


def registers(ptx: str, work: Path) -> int:
    source = work / "k.ptx"
    source.write_text(ptx)
    run = subprocess.run(["ptxas", f"-arch={ARCH}", "-v", str(source), "-o", str(work / "k.cubin")],
                         capture_output=True, text=True)
    found = re.search(r"Used (\d+) registers", run.stderr)
    if run.returncode != 0 or not found:
        sys.exit(f"ptxas failed on a micro-kernel:\n{run.stderr}\n{ptx}")
    return int(found.group(1))


def subroutine_registers(ptx: str, arch: str, work: Path) -> int | None:
    """Distinct registers named by the subroutine the kernel calls (None: no call)."""
    source, cubin = work / "s.ptx", work / "s.cubin"
    source.write_text(ptx)
    run = subprocess.run(["ptxas", f"-arch={arch}", str(source), "-o", str(cubin)], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"ptxas failed on a micro-kernel:\n{run.stderr}\n{ptx}")
    sass = subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    lines = [(int(m.group(1), 16), m.group(2)) for m in re.finditer(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", sass)]
    targets = [int(m.group(1), 16) for _, text in lines for m in [re.search(r"CALL\.REL\S*\s+0x([0-9a-f]+)", text)] if m]
    if not targets:
        return None
    start = min(targets)
    return len({int(r) for address, text in lines if address >= start for r in re.findall(r"\bR(\d+)\b", text)})


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        counts = {name: [registers(kernel(m, name), work) for m in HELD] for name in INSTRUCTIONS}
    header = " | ".join(f"M={m}" for m in HELD)
    print(f"| instruction | {header} | minus baseline (M <= 20) | median |")
    print("|---|" + "---|" * len(HELD) + "---|---|")
    for name, row in counts.items():
        base = BASELINE.get(name)
        if base:
            diffs = [a - b for a, b, m in zip(row, counts[base], HELD) if m <= 20]
            extra = f"{diffs} | {statistics.median(diffs):g}"
        else:
            extra = "(baseline) | "
        print(f"| `{name}` | " + " | ".join(str(r) for r in row) + f" | {extra} |")
    print(f"\n`ptxas -arch={ARCH} -v` registers with M floats held across the instruction.")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        found = {name: [subroutine_registers(kernel(0, name, arch), arch, work) for arch in SUBROUTINE_ARCHS] for name in SUBROUTINES}
    print("\n| instruction | " + " | ".join(SUBROUTINE_ARCHS) + " |")
    print("|---|" + "---|" * len(SUBROUTINE_ARCHS))
    for name, row in found.items():
        print(f"| `{name}` | " + " | ".join("no call" if r is None else str(r) for r in row) + " |")
    print("\nRegisters of the subroutine each instruction's slow path calls (`cuobjdump -sass`).")
    constant_divisions()


# name -> (type of the operand, C expression on `a`); each is compared with `a * 3` of its type.
CONSTANT_DIVISIONS = {
    "int / 2": ("int", "a / 2"), "int / -2": ("int", "a / -2"), "int / 3": ("int", "a / 3"),
    "int / 7": ("int", "a / 7"), "int % 3": ("int", "a % 3"), "int % 8": ("int", "a % 8"),
    "unsigned / 3": ("unsigned", "a / 3u"), "long / 8": ("long", "a / 8L"), "long / 3": ("long", "a / 3L"),
    "long % 3": ("long", "a % 3L"), "long / -5": ("long", "a / -5L"),
    "long % 2147483647": ("long", "a % 2147483647L"), "unsigned long / 3": ("unsigned long", "a / 3UL"),
}
CONSTANT_HELD = [8, 12, 16]


def nvcc_registers(ty: str, expression: str, held: int, arch: str, work: Path) -> int:
    loads = "".join(f"float f{i} = x[t + {1024 * i}]; " for i in range(held))
    sums = "".join(f"o += f{i}; " for i in range(held))
    source = work / "c.cu"
    source.write_text(f'extern "C" __global__ void k(const float *__restrict__ x, const {ty} *__restrict__ y, float *out) '
                      f"{{ int t = threadIdx.x; {loads}{ty} a = y[t + 5000000]; float o = (float)({expression}); {sums}out[t] = o; }}\n")
    run = subprocess.run(["nvcc", "-cubin", f"-arch={arch}", "-Xptxas", "-v", str(source), "-o", str(work / "c.cubin")],
                         capture_output=True, text=True)
    found = re.search(r"Used (\d+) registers", run.stderr)
    if run.returncode != 0 or not found:
        sys.exit(f"nvcc failed on a micro-kernel:\n{run.stderr}")
    return int(found.group(1))


def constant_divisions() -> None:
    print("\n| division by a constant | " + " | ".join(f"{a} minus `a * 3`, M = {', '.join(map(str, CONSTANT_HELD))}" for a in SUBROUTINE_ARCHS) + " | median |")
    print("|---|" + "---|" * len(SUBROUTINE_ARCHS) + "---|")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name, (ty, expression) in CONSTANT_DIVISIONS.items():
            cells, diffs = [], []
            for arch in SUBROUTINE_ARCHS:
                row = [nvcc_registers(ty, expression, m, arch, work) - nvcc_registers(ty, "a * 3", m, arch, work) for m in CONSTANT_HELD]
                cells.append(str(row))
                diffs += row
            print(f"| `{name}` | " + " | ".join(cells) + f" | {statistics.median(diffs):g} |")
    print("\nRegisters beyond a multiplication by a constant (nvcc `-Xptxas -v`, CUDA micro-kernels).")


if __name__ == "__main__":
    main()
