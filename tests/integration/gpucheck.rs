//! `make gpu-check`'s CPU part (issue 27.6): the folder's check programs are complete (every
//! distinct leaf kernel at a small and, where the facts allow, a larger point inside the leaf's
//! constraints, bounded by the h100 profile), and they build and link with nvcc against the
//! kernels `gen` writes; without a GPU a program says so and exits 2. The GPU run itself is
//! `bash gpu-check/run.sh` (bench/RESULTS.md).

use crate::common::{nvcc, scratch};
use metafork::dispatch::facts::FactSet;
use metafork::frontend::check_source;
use std::process::Command;

/// `(case kernel, size, point)` rows of a check program's table.
fn cases(check: &str) -> Vec<(String, String, String)> {
    check
        .lines()
        .filter(|l| l.trim_start().starts_with('{') && (l.contains("\"small\"") || l.contains("\"large\"")))
        .map(|l| {
            let q: Vec<&str> = l.split('"').collect();
            (q[1].to_string(), q[3].to_string(), q[5].to_string())
        })
        .collect()
}

fn parse_point(text: &str) -> std::collections::BTreeMap<String, i64> {
    text.split_whitespace().map(|kv| {
        let (k, v) = kv.split_once('=').unwrap();
        (k.to_string(), v.parse().unwrap())
    }).collect()
}

#[test]
fn check_programs_cover_every_kernel_and_link_with_nvcc() {
    // A function with two schedules in a host time loop, and a plain 2-D one.
    for (path, name) in [("examples/polybench/jacobi2d.mf", "polybench-jacobi2d"), ("examples/matadd.mf", "matadd")] {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/").to_string() + path).unwrap();
        let (files, prepared) = metafork::gpucheck::program_files(path, name, &text).unwrap();
        assert!(prepared.unchecked.is_empty(), "{path}: kernels without a point: {:?}", prepared.unchecked);
        let check = &files["check.cu"];
        let kernels: Vec<&String> = files.keys().filter(|f| f.as_str() != "check.cu").collect();
        assert_eq!(kernels.len(), prepared.kernels, "{path}");
        let rows = cases(check);
        assert_eq!(rows.len(), prepared.cases, "{path}: the case table");
        let function = &check_source(path, &text).unwrap().kernels[0];
        let facts = FactSet::of(function).unwrap();
        for k in &kernels {
            let kernel = k.trim_end_matches(".cu");
            let mine: Vec<_> = rows.iter().filter(|(n, _, _)| n == kernel).collect();
            assert!(mine.iter().any(|(_, s, _)| s == "small"), "{path}: `{kernel}` has no small case");
            let small = mine.iter().find(|(_, s, _)| s == "small").map(|(_, _, p)| parse_point(p)).unwrap();
            for (_, size, p) in &mine {
                let point = parse_point(p);
                assert!(facts.holds(&point), "{path}: `{kernel}` {size} point {p} breaks the facts");
                if size == "large" {
                    for d in function.data_parameters() {
                        assert!(point[&d] > small[&d], "{path}: `{kernel}`'s large point does not grow `{d}`");
                    }
                    assert!(metafork::gpucheck::points::elements(function, &point).unwrap() <= metafork::gpucheck::points::MAX_ELEMENTS);
                }
            }
        }
        assert!(rows.iter().any(|(_, s, _)| s == "large"), "{path}: no large case at all");
        if path.contains("jacobi2d") {
            assert!(check.contains("metafork_with_s0") && check.contains("metafork_with_s1"), "both schedules are launched in turn");
        }
        let Some(nvcc) = nvcc() else { continue };
        let dir = scratch(&format!("gpucheck-{name}"));
        for (f, t) in &files {
            std::fs::write(dir.join(f), t).unwrap();
        }
        let o = Command::new(&nvcc).current_dir(&dir).args(["-O2", "-fmad=false", "-Xcompiler", "-ffp-contract=off,-fwrapv", "-arch=sm_90", "-o", "check"]).args(files.keys()).output().unwrap();
        assert!(o.status.success(), "{path}: nvcc could not build the check program:\n{}", String::from_utf8_lossy(&o.stderr));
        // No GPU here (or one): either way the program runs without crashing; without a device
        // it says so and exits 2.
        let run = Command::new(dir.join("check")).output().unwrap();
        match run.status.code() {
            Some(2) => assert!(String::from_utf8_lossy(&run.stderr).contains("no CUDA device")),
            Some(0) => assert!(String::from_utf8_lossy(&run.stdout).contains("\tPASS\t")),
            other => panic!("{path}: the check program exited {other:?}:\n{}", String::from_utf8_lossy(&run.stdout)),
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// Names a C++ compiler or the check program itself could trip on: C++ keywords, CUDA
/// built-ins, the harness's own prefix, a function named like a launch wrapper's prefix. The
/// check program spells them as the kernels do, and it links.
#[test]
fn check_programs_survive_hostile_names() {
    let text = "void metafork_run(int new, int class, float template, const float threadIdx[new], float metafork_host[new]) {\n  assume(new >= 1 && class >= 1);\n  int blockDim = (new + class - 1) / class;\n  meta_schedule {\n    meta_for (int warpSize = 0; warpSize < blockDim; warpSize++)\n      meta_for (int main = 0; main < class; main++) {\n        int p = warpSize * class + main;\n        if (p < new)\n          metafork_host[p] = template * threadIdx[p] + metafork_host[p];\n      }\n  }\n}\n";
    let (files, prepared) = metafork::gpucheck::program_files("hostile.mf", "hostile", text).unwrap();
    assert!(prepared.cases > 0 && prepared.unchecked.is_empty(), "{prepared:?}");
    let Some(nvcc) = nvcc() else { return };
    let dir = scratch("gpucheck-hostile");
    for (f, t) in &files {
        std::fs::write(dir.join(f), t).unwrap();
    }
    let o = Command::new(&nvcc).current_dir(&dir).args(["-O2", "-arch=sm_90", "-o", "check"]).args(files.keys()).output().unwrap();
    assert!(o.status.success(), "nvcc could not build the check program:\n{}", String::from_utf8_lossy(&o.stderr));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A schedule inside host loops launches once per iteration, and the check program copies every
/// array around each launch: the large point keeps the launches and the copied elements within
/// their bounds (seidel-2d's wavefront loop inside its time loop launched 3.3 million times at
/// the unbounded large point, past any run's time limit).
#[test]
fn large_points_bound_the_launches_of_schedules_in_host_loops() {
    use metafork::gpucheck::points::{elements, launches, MAX_COPIED, MAX_LAUNCHES};
    for (path, name) in [("examples/polybench/seidel2d.mf", "polybench-seidel2d"), ("examples/polybench/jacobi1d.mf", "polybench-jacobi1d")] {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/").to_string() + path).unwrap();
        let function = check_source(path, &text).unwrap().kernels[0].clone();
        let (files, _) = metafork::gpucheck::program_files(path, name, &text).unwrap();
        let rows = cases(&files["check.cu"]);
        assert!(!rows.is_empty(), "{path}");
        for (kernel, size, p) in &rows {
            let point = parse_point(p);
            let launched = launches(&function, &point).expect("the host loops' trip counts are polynomials in the parameters");
            assert!(launched >= 1, "{path}: {kernel} at {p} launches nothing");
            if size == "large" {
                let n = elements(&function, &point).unwrap();
                assert!(launched <= MAX_LAUNCHES && launched * n <= MAX_COPIED, "{path}: {kernel}'s large point {p}: {launched} launches of {n} elements");
            }
        }
    }
    // The count itself: jacobi-1d launches each of its two schedules once per time step.
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/polybench/jacobi1d.mf")).unwrap();
    let function = check_source("jacobi1d.mf", &text).unwrap().kernels[0].clone();
    let point = parse_point("tsteps=7 n=40 B=4");
    assert_eq!(launches(&function, &point), Some(7));
}

/// A function calling `expf` gets the sensitivity runs (the math library's last ulps may differ
/// between host and device, and a recursive filter amplifies them); one without gets none. Both
/// build with nvcc.
#[test]
fn check_programs_widen_the_tolerance_only_for_inexact_math() {
    let filter = "void filter(int n, int B, float alpha, const float x[n], float y[n]) {\n  assume(n >= 1 && B >= 1);\n  int g = (n + B - 1) / B;\n  meta_schedule {\n    meta_for (int v = 0; v < g; v++)\n      meta_for (int u = 0; u < B; u++) {\n        int i = v * B + u;\n        if (i < n)\n          y[i] = expf(-alpha) * x[i] + logf(1.0f + x[i] * x[i]) + powf(2.0f, alpha);\n      }\n  }\n}\n";
    let plain = filter.replace("expf(-alpha) * x[i] + logf(1.0f + x[i] * x[i]) + powf(2.0f, alpha)", "alpha * x[i] + sqrtf(x[i] * x[i])");
    for (text, sensitive) in [(filter.to_string(), true), (plain, false)] {
        let (files, prepared) = metafork::gpucheck::program_files("filter.mf", "filter", &text).unwrap();
        assert!(prepared.cases > 0, "{prepared:?}");
        let check = &files["check.cu"];
        assert_eq!(check.contains("#define METAFORK_MATH 1"), sensitive);
        assert_eq!(check.contains("#define expf(a) metafork_nudge(expf(a), 3)"), sensitive);
        assert_eq!(check.contains("#define powf(a, b) metafork_nudge(powf(a, b), 5)"), sensitive);
        let Some(nvcc) = nvcc() else { continue };
        let dir = scratch(&format!("gpucheck-filter-{sensitive}"));
        for (f, t) in &files {
            std::fs::write(dir.join(f), t).unwrap();
        }
        let o = Command::new(&nvcc).current_dir(&dir).args(["-O2", "-fmad=false", "-Xcompiler", "-ffp-contract=off,-fwrapv", "-arch=sm_90", "-o", "check"]).args(files.keys()).output().unwrap();
        assert!(o.status.success(), "nvcc could not build the check program:\n{}", String::from_utf8_lossy(&o.stderr));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// A reduction's array gets the rounding bound of any order of its additions (the GPU adds
/// atomically, in any order): the serial code updates it through `METAFORK_REDUCE`, two more
/// serial runs measure the terms, and the program builds with nvcc.
#[test]
fn check_programs_bound_the_rounding_of_reductions() {
    let path = "tests/programs/colsum.mf";
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/").to_string() + path).unwrap();
    let (files, prepared) = metafork::gpucheck::program_files(path, "colsum", &text).unwrap();
    assert!(prepared.cases > 0 && prepared.unchecked.is_empty(), "{prepared:?}");
    let check = &files["check.cu"];
    assert!(check.contains("METAFORK_REDUCE(s[(long)j], a[(long)i * (long)m + (long)j]);"), "{check}");
    // `s` is array 1: its passes and its slack; `a` (array 0, only read) has none.
    assert!(check.contains("metafork_reduction_pass(1, metafork_mode,") && check.contains("metafork_reduction_slack(1, metafork_in[1]);"));
    assert!(!check.contains("metafork_reduction_slack(0,"));
    // A program without reductions has none of it.
    let plain = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/matadd.mf")).unwrap();
    let (other, _) = metafork::gpucheck::program_files("examples/matadd.mf", "matadd", &plain).unwrap();
    let other = &other["check.cu"];
    assert!(!other.contains("metafork_mode <= 2") && !other.contains("metafork_reduction_slack(0,") && !other.lines().any(|l| l.trim_start().starts_with("METAFORK_REDUCE(")), "{other}");
    let Some(nvcc) = nvcc() else { return };
    let dir = scratch("gpucheck-colsum");
    for (f, t) in &files {
        std::fs::write(dir.join(f), t).unwrap();
    }
    let o = Command::new(&nvcc).current_dir(&dir).args(["-O2", "-fmad=false", "-Xcompiler", "-ffp-contract=off,-fwrapv", "-arch=sm_90", "-o", "check"]).args(files.keys()).output().unwrap();
    assert!(o.status.success(), "nvcc could not build the check program:\n{}", String::from_utf8_lossy(&o.stderr));
    std::fs::remove_dir_all(&dir).unwrap();
}
