"""gpu-check's one table (results.md) from the logs run.sh wrote."""
import glob
import os
import re
from collections import defaultdict

print("# gpu-check results\n")
print("Device: " + " / ".join(l.strip() for l in open("logs/device.txt") if l.strip()) + "\n")

# 1. Every distinct kernel at two sizes against the serial program.
rows = defaultdict(lambda: {"kernels": set(), "PASS": 0, "FAIL": 0, "SKIP": 0, "worst": 0.0, "failures": []})
if os.path.exists("logs/cases.tsv"):
    for line in open("logs/cases.tsv"):
        f = line.rstrip("\n").split("\t")
        if len(f) < 9 or f[0] != "CASE":
            continue
        _, program, schedule, kernel, size, point, verdict, worst, detail = f[:9]
        r = rows[program]
        r["kernels"].add(kernel)
        r[verdict] = r.get(verdict, 0) + 1
        r["worst"] = max(r["worst"], float(worst))
        if verdict != "PASS":
            r["failures"].append(f"{kernel} ({size}: {point}): {verdict} {detail}")
runs = {}
if os.path.exists("logs/runs.tsv"):
    for line in open("logs/runs.tsv"):
        _, program, exe, status = line.rstrip("\n").split("\t")
        runs[(program, exe)] = status
built_failed = set()
if os.path.exists("logs/build-failures.tsv"):
    built_failed = {l.split("\t")[1].strip() for l in open("logs/build-failures.tsv")}
print("## Every distinct leaf kernel at two sizes against the serial program\n")
print("Tolerance: integers exact; floating point |got - expected| <= rtol * max(1, |expected|), rtol 1e-5 (float), 1e-12 (double); device code built with -fmad=false, host without contraction; a function calling exp, log or pow adds twice the spread of three serial runs with those calls' results moved by their ulp bounds (src/gpucheck/host.rs); exit 124 is a check program stopped by its 300 s limit.\n")
print("| program | kernels run | cases passed | failed | skipped | max relative error | exit |")
print("|---|---|---|---|---|---|---|")
programs = sorted(os.path.basename(p) for p in glob.glob("programs/*"))
total = defaultdict(int)
for p in programs:
    r = rows[p]
    status = ",".join(s for (q, _), s in sorted(runs.items()) if q == p) or ("build failed" if p in built_failed else "not run")
    print(f"| {p} | {len(r['kernels'])} | {r['PASS']} | {r['FAIL']} | {r['SKIP']} | {r['worst']:.1e} | {status} |")
    for k in ("PASS", "FAIL", "SKIP"):
        total[k] += r[k]
    total["kernels"] += len(r["kernels"])
print(f"| **all** | {total['kernels']} | {total['PASS']} | {total['FAIL']} | {total['SKIP']} | | |\n")
for p in programs:
    for f in rows[p]["failures"][:5]:
        print(f"- {p}: {f}")
print()

# 2. compute-sanitizer.
print("## compute-sanitizer (small sizes, every distinct kernel once per tool)\n")
print("| program | memcheck | racecheck |")
print("|---|---|---|")
san = defaultdict(dict)
if os.path.exists("logs/sanitizer.tsv"):
    for line in open("logs/sanitizer.tsv"):
        f = line.rstrip("\n").split("\t")
        if len(f) >= 4 and f[0] == "SAN":
            summary = f[4] if len(f) > 4 else ""
            san[f[1]][f[2]] = ("clean" if f[3] == "0" else f"exit {f[3]}") + (f" ({summary.strip()})" if summary.strip() else "")
for exe in sorted(san):
    print(f"| {exe} | {san[exe].get('memcheck', '-')} | {san[exe].get('racecheck', '-')} |")
print()

# 3. The model's first choice against the exhaustive sweep.
profile = open("tune/profile.txt").read().strip() if os.path.exists("tune/profile.txt") else "h100"
print(f"## Tuning: the model's first choice against every admissible configuration ({profile} profile)\n")
print("| program | sizes | configurations timed | model's #1 (ms) | fastest (ms) | fastest's model rank | #1 / fastest | mismatches | other answers | launch failures | search: timed | search: found (ms) | found / fastest |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
row = re.compile(r"^(\d+)\s+(\S+)\s+(.*?)\s+([0-9.]+)\s+(matches|MISMATCH|OTHER ANSWER)")


def timings(path):
    timed, failed = [], 0
    for line in open(path):
        m = row.match(line)
        if m:
            timed.append((int(m.group(1)), m.group(2), m.group(3), float(m.group(4)), m.group(5)))
        elif "launch failed" in line:
            failed += 1
    return timed, failed

best_of = {}
for d in sorted(glob.glob("tune/*/")):
    name = os.path.basename(d.rstrip("/"))
    sizes = open(os.path.join(d, "sizes.txt")).read().strip() if os.path.exists(os.path.join(d, "sizes.txt")) else ""
    harnesses = sorted(glob.glob(os.path.join(d, "harness-*.txt")))
    if not harnesses:
        print(f"| {name} | {sizes} | not run | | | | | | |")
        continue
    for path in harnesses:
        schedule = os.path.basename(path)[len("harness-"):-len(".txt")]
        shown = name if len(harnesses) == 1 else f"{name}: {schedule}"
        timed, failed = timings(path)
        mismatches = sum(t[4] == "MISMATCH" for t in timed)
        others = sum(t[4] == "OTHER ANSWER" for t in timed)
        if not timed:
            print(f"| {shown} | {sizes} | 0 | | | | | | | {failed} | | | |")
            continue
        first = min(timed, key=lambda t: t[0])
        fastest = min((t for t in timed if t[4] == "matches"), key=lambda t: t[3], default=first)
        best_of[shown] = (first, fastest)
        search = os.path.join(d, f"search-{schedule}.txt")
        found = min((t for t in timings(search)[0] if t[4] == "matches"), key=lambda t: t[3], default=None) if os.path.exists(search) else None
        searched = len(timings(search)[0]) if os.path.exists(search) else 0
        found_text = f"{found[3]:.4f} ({found[1]} {found[2]}) | {found[3] / fastest[3]:.2f}" if found else "- | -"
        print(f"| {shown} | {sizes} | {len(timed)} | {first[3]:.4f} ({first[1]} {first[2]}) | {fastest[3]:.4f} ({fastest[1]} {fastest[2]}) | {fastest[0]} | {first[3] / fastest[3]:.2f} | {mismatches} | {others} | {failed} | {searched} | {found_text} |")
print()

# 4. cuBLAS.
print("## matmul against cuBLAS SGEMM\n")
text = open("logs/cublas.txt").read() if os.path.exists("logs/cublas.txt") else ""
m = re.search(r"n=(\d+) median_ms=([0-9.]+) gflops=([0-9.]+)", text)
if m and "matmul" in best_of:
    n, ms = int(m.group(1)), float(m.group(2))
    first, fastest = best_of["matmul"]
    gf = lambda t: 2 * n ** 3 / t / 1e6
    print("| kernel | median ms | GFLOP/s | share of cuBLAS |")
    print("|---|---|---|---|")
    print(f"| cuBLAS SGEMM (TF32 off) | {ms:.4f} | {gf(ms):.0f} | 100% |")
    print(f"| metafork, model's #1 | {first[3]:.4f} | {gf(first[3]):.0f} | {100 * ms / first[3]:.1f}% |")
    print(f"| metafork, fastest admissible | {fastest[3]:.4f} | {gf(fastest[3]):.0f} | {100 * ms / fastest[3]:.1f}% |")
else:
    print("not available: " + text.strip()[:300])
