//! The emitted dispatch code: its pure C++ selection, compiled with the system C++ compiler,
//! agrees with the Rust side's exact evaluation of the leaf constraints on random (device,
//! parameters, compiled register counts) points for every example; the fast Rust evaluator
//! agrees too; the dispatch and leaf files compile and link with nvcc, and the linked program
//! reports a missing device as an error instead of launching.

use constraints::device::DeviceProfile;
use constraints::solver::Backend;
use metafork::dispatch::{CompiledLeaf, DeviceLimits, Dispatcher, Selection};
use metafork::frontend::model::KernelFunction;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{cxx, examples, nvcc, scratch, trees_of, Rng};

/// A device: a built-in profile, or (one time in three) one with its limits scaled at random,
/// (one time in four) few, small multiprocessors, (one time in four) a register file near
/// the leaves' estimates, so that points land near every boundary of the trees, and (one time
/// in five) a small grid, or (one time in ten) grid limits not known.
fn random_device(rng: &mut Rng, profiles: &[DeviceProfile]) -> DeviceLimits {
    let mut d = DeviceLimits::of(&profiles[rng.range(0, profiles.len() as i64 - 1) as usize]);
    if rng.chance(33) {
        let mut scale = |v: i64| (v * rng.range(1, 200) / 100).max(1);
        d.registers_per_thread = scale(d.registers_per_thread);
        d.registers_per_block = scale(d.registers_per_block);
        d.shared_memory_per_block = scale(d.shared_memory_per_block);
        d.shared_memory_per_block_optin = scale(d.shared_memory_per_block_optin).max(d.shared_memory_per_block);
        d.threads_per_block = scale(d.threads_per_block);
        d.registers_per_multiprocessor = scale(d.registers_per_multiprocessor);
        d.warps_per_multiprocessor = scale(d.warps_per_multiprocessor);
        d.multiprocessors = scale(d.multiprocessors);
    }
    if rng.chance(25) {
        // Small devices put the data sizes the points take on both sides of the grid-fill
        // condition of iteration merging.
        d.multiprocessors = rng.range(1, 4);
        d.warps_per_multiprocessor = rng.range(1, 8);
    }
    if rng.chance(25) {
        // Register files near the leaves' estimates reach the deep register-pressure leaves.
        d.registers_per_thread = rng.range(16, 64);
        d.registers_per_block = rng.range(1024, 65536);
    }
    if rng.chance(20) {
        d.max_grid = [rng.range(1, 64), rng.range(1, 64), rng.range(1, 4)];
    } else if rng.chance(10) {
        d.max_grid = [0, 0, 0];
    }
    d
}

/// Parameters: program parameters mostly powers of two, data parameters mostly multiples of
/// the program parameters' product (so that divisibility facts often hold), and now and then
/// zero or a negative value (so that facts fail too).
fn random_params(rng: &mut Rng, function: &KernelFunction) -> BTreeMap<String, i64> {
    let mut point = BTreeMap::new();
    let mut product: i64 = 1;
    let program = function.program_parameters();
    // Powers of two up to a bound that keeps the product near a block's 1024 threads.
    let top = (10 / program.len().max(1)) as i64;
    for p in program {
        let v = match rng.range(0, 9) {
            0 => rng.range(-2, 0),
            1..=2 => rng.range(1, 1 << (top + 1)),
            _ => 1 << rng.range(0, top),
        };
        product = product.saturating_mul(v.max(1)).min(1 << 20);
        point.insert(p, v);
    }
    for p in function.data_parameters() {
        let v = if rng.chance(75) { product * rng.range(1, 8) } else { rng.range(-1, 5000) };
        point.insert(p, v);
    }
    point
}

fn random_compiled(rng: &mut Rng, kernels: usize) -> Vec<CompiledLeaf> {
    if rng.chance(50) {
        return Vec::new();
    }
    (0..kernels)
        .map(|_| CompiledLeaf { registers: if rng.chance(20) { 0 } else { rng.range(8, 96) }, max_threads: [0, 128, 256, 512, 640, 1024][rng.range(0, 5) as usize] })
        .collect()
}

/// The status code and detail the C++ selection returns for a Rust selection.
fn expected(s: &Selection) -> (i64, String) {
    match s {
        Selection::Leaf(i) => (*i as i64, String::new()),
        Selection::AssertFails(f) => (-1, f.clone()),
        Selection::OutsideAssumptions(f) => (-2, f.clone()),
        Selection::NoKernel(c) => (-3, format!("{} cannot be lowered far enough", c.name())),
        Selection::NoLeaf => (-5, String::new()),
        Selection::GridTooLarge(d) => (-8, format!("the grid's {} extent", ["x", "y", "z"][*d])),
    }
}

/// A C++ driver: reads points (device, compiled counts, parameters) from stdin, prints the
/// selection and its detail for each.
fn driver(schedule: &str, params: &[String]) -> String {
    let reads: String = params.iter().map(|p| format!(" && scanf(\"%lld\", &p.{p}) == 1")).collect();
    format!(
        r#"#include <stdio.h>
#include "{schedule}_dispatch.h"
int main(void) {{
  metafork_device d;
  while (scanf("%lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld", &d.registers_per_thread, &d.registers_per_block, &d.shared_memory_per_block,
               &d.shared_memory_per_block_optin, &d.threads_per_block, &d.registers_per_multiprocessor, &d.warps_per_multiprocessor,
               &d.multiprocessors, &d.max_grid_size[0], &d.max_grid_size[1], &d.max_grid_size[2]) == 11) {{
    int known = 0;
    metafork_{schedule}_compiled c;
    metafork_{schedule}_params p;
    if (scanf("%d", &known) != 1) return 2;
    for (int i = 0; i < (int)(sizeof c.registers / sizeof c.registers[0]); i++)
      if (scanf("%lld %lld", &c.registers[i], &c.max_threads[i]) != 2) return 2;
    if (!(1{reads})) return 2;
    const char *detail = 0;
    int r = metafork_{schedule}_select(&d, known ? &c : 0, &p, &detail);
    printf("%d|%s\n", r, detail ? detail : "(null)");
  }}
  return 0;
}}
"#
    )
}

#[test]
fn cpp_selection_agrees_with_rust_on_random_points() {
    let Some(cxx) = cxx() else { return };
    let backend = Backend::default();
    let profiles = DeviceProfile::built_in();
    let mut rng = Rng(0x2545F4914F6CDD1D);
    let dir = scratch("dispatch-agree");
    let (mut total_points, mut grid_refused) = (0, 0);
    for (path, text) in examples() {
        for (function, tree) in trees_of(&path, &text, &backend) {
            let d = Dispatcher::new(&function, &tree).unwrap();
            let s = d.schedule.clone();
            for (name, body) in metafork::emit::dispatch::emit(&path, &function, &tree.nodes[0].code, &d).unwrap() {
                std::fs::write(dir.join(name), body).unwrap();
            }
            std::fs::write(dir.join(format!("{s}_driver.cpp")), driver(&s, &d.params)).unwrap();
            let exe = dir.join(format!("{s}_driver"));
            let o = Command::new(&cxx).args(["-std=c++11", "-O1", "-Wall", "-Wextra", "-Werror", "-Wno-unused-function", "-o"]).arg(&exe).arg(dir.join(format!("{s}_driver.cpp"))).output().unwrap();
            assert!(o.status.success(), "{path}: the selection header does not compile with {}: {}", cxx.display(), String::from_utf8_lossy(&o.stderr));

            let slots = d.kernels.len().max(1);
            let mut input = String::new();
            let mut wanted = Vec::new();
            let (mut leaves_hit, mut selected) = (std::collections::BTreeSet::new(), 0);
            // Random points, then points Z3 samples from each leaf's own system, so that
            // every leaf, however narrow its region, is reached.
            let mut points: Vec<(DeviceLimits, Vec<CompiledLeaf>, BTreeMap<String, i64>)> = (0..1200)
                .map(|_| (random_device(&mut rng, &profiles), random_compiled(&mut rng, d.kernels.len()), random_params(&mut rng, &function)))
                .collect();
            for leaf in tree.leaves() {
                for model in backend.sample(&leaf.constraints, 3).models {
                    let value = |v: &str| model.get(v).map(|q| q.to_integer().try_into().unwrap_or(i64::MAX / 4));
                    // A device's limits are CUDA's `int`s (the dispatchers refuse others).
                    let limit = |v: &str| value(v).map(|x| x.min(i64::from(i32::MAX)));
                    let m = &tree.machine;
                    let (r, z, t, rb) = (limit(&m.registers_per_thread), limit(&m.shared_per_block), limit(&m.threads_per_block), limit(&m.registers_per_block));
                    let (rsm, wsm, nsm) = (limit(&m.registers_per_multiprocessor), limit(&m.warps_per_multiprocessor), limit(&m.multiprocessors));
                    let z = z.unwrap_or(49152);
                    let dev = DeviceLimits {
                        registers_per_thread: r.unwrap_or(255),
                        shared_memory_per_block_optin: z,
                        shared_memory_per_block: z.min(49152),
                        threads_per_block: t.unwrap_or(1024),
                        registers_per_block: rb.unwrap_or(65536),
                        registers_per_multiprocessor: rsm.unwrap_or(65536),
                        warps_per_multiprocessor: wsm.unwrap_or(64),
                        multiprocessors: nsm.unwrap_or(132),
                        max_grid: [2147483647, 65535, 65535],
                    };
                    let mut params: BTreeMap<String, i64> = d.params.iter().map(|p| (p.clone(), value(p).unwrap_or(1))).collect();
                    points.push((dev, Vec::new(), params.clone()));
                    // The same point with data sizes that are multiples of the program parameters.
                    let product = function.program_parameters().iter().fold(1i64, |acc, p| acc.saturating_mul(params[p].max(1)));
                    for p in function.data_parameters() {
                        params.insert(p, product.saturating_mul(2));
                    }
                    points.push((dev, Vec::new(), params));
                }
            }
            for (dev, compiled, params) in points {
                let exact = d.select_exact(&dev, &compiled, &params).unwrap();
                assert_eq!(d.select(&dev, &compiled, &params).unwrap(), exact, "{path}: the fast evaluator disagrees at {params:?} on {dev:?}");
                if let Selection::Leaf(i) = exact {
                    leaves_hit.insert(i);
                    selected += 1;
                }
                wanted.push((format!("{params:?} on {dev:?} with {compiled:?}"), expected(&exact)));
                input += &format!(
                    "{} {} {} {} {} {} {} {} {} {} {}\n{}\n",
                    dev.registers_per_thread,
                    dev.registers_per_block,
                    dev.shared_memory_per_block,
                    dev.shared_memory_per_block_optin,
                    dev.threads_per_block,
                    dev.registers_per_multiprocessor,
                    dev.warps_per_multiprocessor,
                    dev.multiprocessors,
                    dev.max_grid[0],
                    dev.max_grid[1],
                    dev.max_grid[2],
                    !compiled.is_empty() as i32
                );
                for i in 0..slots {
                    let c = compiled.get(i).copied().unwrap_or_default();
                    input += &format!("{} {} ", c.registers, c.max_threads);
                }
                input += &format!("\n{}\n", d.params.iter().map(|p| params[p].to_string()).collect::<Vec<_>>().join(" "));
            }
            let out = run_with_input(&exe, &input);
            let lines: Vec<&str> = out.lines().collect();
            assert_eq!(lines.len(), wanted.len(), "{path}: the driver answered {} of {} points", lines.len(), wanted.len());
            for (line, (point, (code, detail))) in lines.iter().zip(&wanted) {
                let (got_code, got_detail) = line.split_once('|').unwrap();
                assert_eq!((got_code.parse::<i64>().unwrap(), got_detail), (*code, detail.as_str()), "{path}: C++ and Rust disagree at {point}");
            }
            // The points must exercise the trees, not only the facts.
            assert!(selected * 5 >= wanted.len(), "{path}: only {selected} of {} points selected a kernel", wanted.len());
            assert_eq!(leaves_hit.len(), d.kernels.len(), "{path}: points reached only leaves {leaves_hit:?} of {}", d.kernels.len());
            let refused = wanted.iter().filter(|(_, (c, _))| *c < 0).count();
            eprintln!("{s}: {} points, {selected} selected a kernel ({} distinct of {}), {refused} refused", wanted.len(), leaves_hit.len(), d.kernels.len());
            total_points += wanted.len();
            grid_refused += wanted.iter().filter(|(_, (c, _))| *c == -8).count();
        }
    }
    assert!(total_points >= 1000);
    // The small grids of `random_device` reach the grid check on both sides.
    assert!(grid_refused > 0, "no point was refused for its grid");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn run_with_input(exe: &Path, input: &str) -> String {
    use std::io::Write;
    let mut child = Command::new(exe).stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{} exited with {:?}", exe.display(), o.status);
    String::from_utf8(o.stdout).unwrap()
}

/// The selection reports why it refuses: a failing fact by its text, a region without a
/// kernel by the counter at fault.
#[test]
fn refusals_name_the_fact_or_the_counter() {
    let backend = Backend::default();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/matmul.mf");
    let text = std::fs::read_to_string(path).unwrap();
    let (function, tree) = trees_of(path, &text, &backend).remove(0);
    let d = Dispatcher::new(&function, &tree).unwrap();
    let h200 = DeviceLimits::of(&DeviceProfile::load("h200").unwrap());
    let point = |n: i64, b0: i64, ub1: i64, s: i64| BTreeMap::from([("n".to_string(), n), ("B0".to_string(), b0), ("ub1".to_string(), ub1), ("s".to_string(), s)]);
    assert!(matches!(d.select(&h200, &[], &point(4096, 16, 16, 2)).unwrap(), Selection::Leaf(_)));
    assert_eq!(d.select(&h200, &[], &point(4100, 16, 16, 2)).unwrap(), Selection::OutsideAssumptions("n % B0 == 0".into()));
    // 64 x 64 threads exceed every device's threads per block, and with `s == 1` the code
    // cannot be blocked, so not coarsened either: nothing lowers that.
    match d.select(&h200, &[], &point(4096, 64, 64, 1)).unwrap() {
        Selection::NoKernel(c) => assert_eq!(c, metafork::tree::Counter::ThreadsPerBlock),
        other => panic!("expected no kernel, got {other:?}"),
    }
    // 128 x 32 threads exceed it too, but with `s == 4` the refusal blocks and coarsens by 4:
    // 1024 threads, a kernel (the fastest of a scratch sweep on an H100, bench/RESULTS.md).
    let Selection::Leaf(i) = d.select(&h200, &[], &point(2048, 128, 32, 4)).unwrap() else { panic!("128 x 32 with s = 4 must have a coarsened kernel") };
    let leaf = tree.leaves().find(|l| metafork::emit::tree_files::leaf_kernel_name(&tree, l.id) == d.kernels[i]).unwrap_or_else(|| panic!("no leaf named {}", d.kernels[i]));
    assert!(leaf.applied.contains(&metafork::tree::Strategy::Coarsen), "leaf {}: {:?}", leaf.id, leaf.applied);
    assert_eq!(leaf.counters.threads_per_block.to_string(), "1/4*ub1*B0");
    // A compiled leaf that needs more registers than the model said is not launched where the
    // block no longer fits; its max_threads is respected too.
    let Selection::Leaf(i) = d.select(&h200, &[], &point(4096, 32, 32, 1)).unwrap() else { panic!("32 x 32 must fit an H200") };
    let mut compiled = vec![CompiledLeaf::default(); d.kernels.len()];
    compiled[i] = CompiledLeaf { registers: 0, max_threads: 512 };
    assert_ne!(d.select(&h200, &compiled, &point(4096, 32, 32, 1)).unwrap(), Selection::Leaf(i));
}

/// The dispatch and leaf files compile with nvcc (host and device code), link into a program,
/// and that program, where no GPU answers, returns METAFORK_CUDA_ERROR with the runtime's
/// message rather than launching (with a GPU, it launches a leaf).
#[test]
fn dispatch_compiles_links_and_refuses_without_a_device() {
    let Some(nvcc) = nvcc() else { return };
    let dir = scratch("dispatch-link");
    let out = Command::new(env!("CARGO_BIN_EXE_metafork")).args(["gen", "--emit-cuda", concat!(env!("CARGO_MANIFEST_DIR"), "/examples/transpose.mf"), "-o"]).arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(dir.join("transpose_dispatch.h").is_file() && dir.join("transpose_dispatch.cu").is_file());
    std::fs::write(
        dir.join("main.cu"),
        r#"#include <cstdio>
#include <cuda_runtime.h>
#include "transpose_dispatch.h"
int main() {
  cudaError_t e = cudaSuccess;
  const char *detail = 0;
  float *a = 0, *b = 0;
  int n = 1024;
  if (cudaMalloc(&a, sizeof(float) * n * n) == cudaSuccess && cudaMalloc(&b, sizeof(float) * n * n) == cudaSuccess) {
    int r = metafork_transpose_launch(n, 16, 16, 1, a, b, 0, &e, &detail);
    printf("%d|%s|%s\n", r, cudaGetErrorString(e), metafork_status_string(r));
    return cudaDeviceSynchronize() == cudaSuccess && r >= 0 ? 0 : 1;
  }
  int r = metafork_transpose_launch(n, 16, 16, 1, a, b, 0, &e, &detail);
  printf("%d|%s|%s\n", r, cudaGetErrorString(e), metafork_status_string(r));
  return 0;
}
"#,
    )
    .unwrap();
    let sources: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "cu")).collect();
    let o = Command::new(&nvcc).args(["-arch=sm_90", "-O2", "-o"]).arg(dir.join("prog")).args(&sources).output().unwrap();
    assert!(o.status.success(), "nvcc: {}", String::from_utf8_lossy(&o.stderr));
    let run = Command::new(dir.join("prog")).output().unwrap();
    let line = String::from_utf8_lossy(&run.stdout).trim().to_string();
    let (code, rest) = line.split_once('|').unwrap_or_else(|| panic!("unexpected output {line:?}"));
    let code: i64 = code.parse().unwrap();
    if code == -7 {
        assert!(!rest.starts_with("no error"), "a CUDA error must carry the runtime's message: {line}");
    } else {
        assert!(code >= 0 && run.status.success(), "with a device, a leaf must launch: {line}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every `.cu` file of `out` (a `main.cu` among them) built by nvcc for sm_80 without a
/// warning, and the program run to a successful exit (it prints what failed).
fn build_and_run_main(nvcc: &std::path::Path, out: &std::path::Path) {
    let sources: Vec<String> = std::fs::read_dir(out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).filter(|n| n.ends_with(".cu")).collect();
    let o = Command::new(nvcc).current_dir(out).args(["-O2", "-arch=sm_80", "-o", "main"]).args(&sources).output().unwrap();
    assert!(o.status.success(), "nvcc: {}", String::from_utf8_lossy(&o.stderr));
    assert!(!String::from_utf8_lossy(&o.stderr).contains("warning"), "nvcc warned: {}", String::from_utf8_lossy(&o.stderr));
    let run = Command::new(out.join("main")).output().unwrap();
    assert!(run.status.success(), "{:?} {}", run.status, String::from_utf8_lossy(&run.stdout));
}

/// The generated host driver (issue 26.2, used by the README's guide): for the PolyBench
/// jacobi-2d (two schedules in order inside a host time loop) `metafork_run_kernel_jacobi_2d`
/// runs the loop on the host and each schedule through its dispatcher, in source order; it
/// compiles and links with nvcc without a warning; a call outside the program's facts returns
/// METAFORK_OUTSIDE_ASSUMPTIONS naming the fact before touching the device; otherwise it
/// launches (with a GPU: returns 0) or, without one, returns METAFORK_CUDA_ERROR naming the
/// first schedule.
#[test]
fn the_host_driver_runs_the_whole_function() {
    let dir = scratch("driver");
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/polybench/jacobi2d.mf");
    let out = Command::new(env!("CARGO_BIN_EXE_metafork")).args(["gen", "--emit-cuda", source, "-o"]).arg(dir.join("out")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let driver = std::fs::read_to_string(dir.join("out/metafork_run_kernel_jacobi_2d.cu")).unwrap();
    let (first, second) = (driver.find("metafork_kernel_jacobi_2d_0_launch(").expect("schedule 0 launched"), driver.find("metafork_kernel_jacobi_2d_1_launch(").expect("schedule 1 launched"));
    let time_loop = driver.find("for (int t = 0; t < tsteps; t++)").expect("the time loop stays on the host");
    assert!(time_loop < first && first < second, "in source order, inside the loop:\n{driver}");
    let Some(nvcc) = nvcc() else { return };
    std::fs::write(
        dir.join("out/main.cu"),
        r#"#include <cstdio>
#include <cstring>
#include "metafork_run_kernel_jacobi_2d.h"
int main() {
  cudaError_t err; const char *why = 0;
  int r = metafork_run_kernel_jacobi_2d(1, 2, 8, 8, 0, 0, 0, &err, &why);
  if (r != METAFORK_OUTSIDE_ASSUMPTIONS || !strstr(why, "assume(")) { printf("facts: %d %s\n", r, why); return 1; }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    r = metafork_run_kernel_jacobi_2d(2, 64, 8, 8, 0, 0, 0, &err, &why);
    if (r != METAFORK_CUDA_ERROR || !strstr(why, "schedule kernel_jacobi_2d_0")) { printf("no device: %d %s\n", r, why); return 1; }
    printf("no device: %s\n", why);
    return 0;
  }
  double *a, *b;
  cudaMalloc(&a, 64 * 64 * sizeof(double)); cudaMalloc(&b, 64 * 64 * sizeof(double));
  cudaMemset(a, 0, 64 * 64 * sizeof(double)); cudaMemset(b, 0, 64 * 64 * sizeof(double));
  r = metafork_run_kernel_jacobi_2d(2, 64, 8, 8, a, b, 0, &err, &why);
  if (r != 0 || cudaDeviceSynchronize() != cudaSuccess) { printf("run: %d %s\n", r, why); return 1; }
  return 0;
}
"#,
    )
    .unwrap();
    build_and_run_main(&nvcc, &dir.join("out"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The host driver evaluates the facts as the dispatcher does, in checked 64-bit arithmetic,
/// whatever their order. Before, it printed them as plain C: `assert(N % B == 0)` written
/// before `assume(B >= 1)` killed the caller with SIGFPE at `B = 0`, and `N * N <= 1048576`
/// wrapped to true at `N = 65536`. Its derived scalars likewise: `int dim = N / B` with no
/// fact on `B` trapped at `B = 0` and at `N = INT_MIN, B = -1`; both are now refused, the
/// quotient being undefined. So is one defined inside a host loop from its counter
/// (`int q = N / (t + M)` at `M = 0`), and a host loop's bound (`t < N / M`). Each operation
/// is checked in the type C gives it: `int d = (N * M + B - 1) / B` at `N = M = B = 65536`
/// fits `int` in 64-bit arithmetic, but `N * M` overflows `int` in the program (and in the
/// launch, which then ran an empty grid and returned success): refused. So are `min(N * M, 5)`
/// past `int` and `abs(INT_MIN)`, which were printed as plain C, and an array parameter's
/// extent `a[N * N]` past `int`, which C evaluates on entry, and a host loop `t <= T; t += 2`
/// at `T = INT_MAX`, whose counter steps past `int` after its last iteration.
#[test]
fn the_host_driver_checks_facts_without_trapping_or_wrapping() {
    let dir = scratch("driver-facts");
    let source = dir.join("ord.mf");
    std::fs::write(&source, "void ord(int N, int B, float x[N]) {\n  assert(N % B == 0);\n  assume(N >= 1 && B >= 1);\n  assume(N * N <= 1048576);\n  meta_schedule {\n    meta_for (int v = 0; v < N / B; v++)\n      meta_for (int u = 0; u < B; u++)\n        x[v * B + u] = 2.0f * x[v * B + u];\n  }\n}\n\nvoid dz(int N, int B, const float a[N], float c[N]) {\n  int dim = N / B;\n  meta_schedule {\n    meta_for (int v = 0; v < dim; v++)\n      meta_for (int u = 0; u < B; u++) {\n        int i = v * B + u;\n        if (i < N) c[i] = a[i] + 1.0f;\n      }\n  }\n}\n\nvoid lp(int N, int M, int B, int T, float a[N]) {\n  int d = N / B;\n  for (int t = 0; t < T; t++) {\n    int q = N / (t + M);\n    meta_schedule {\n      meta_for (int v = 0; v < d; v++)\n        meta_for (int u = 0; u < B; u++) {\n          int i = v * B + u;\n          if (i >= 0 && i < N) a[i] = a[i] + q;\n        }\n    }\n  }\n}\n\nvoid lb(int N, int M, int B, float a[N]) {\n  for (int t = 0; t < N / M; t++) {\n    meta_schedule {\n      meta_for (int v = 0; v < N / B; v++)\n        meta_for (int u = 0; u < B; u++)\n          a[v * B + u] = a[v * B + u] + t;\n    }\n  }\n}\n\nvoid ov(int N, int M, int B, const float a[N], float c[N]) {\n  int d = (N * M + B - 1) / B;\n  meta_schedule {\n    meta_for (int v = 0; v < d; v++)\n      meta_for (int u = 0; u < B; u++) {\n        int i = v * B + u;\n        if (i < N) c[i] = a[i];\n      }\n  }\n}\n\nvoid mm(int N, int M, int B, const float a[N], float c[N]) {\n  int m1 = min(N * M, 5), ab = abs(M);\n  meta_schedule {\n    meta_for (int v = 0; v < (N + B - 1) / B; v++)\n      meta_for (int u = 0; u < B; u++) {\n        int i = v * B + u;\n        if (i < N) c[i] = a[i] + m1 + ab;\n      }\n  }\n}\n\nvoid ext(int N, int B, const float a[N * N], float c[N]) {\n  meta_schedule {\n    meta_for (int v = 0; v < (N + B - 1) / B; v++)\n      meta_for (int u = 0; u < B; u++) {\n        int i = v * B + u;\n        if (i < N) c[i] = a[i * N];\n      }\n  }\n}\n\nvoid st(int N, int T, int B, float a[N]) {\n  for (int t = 0; t <= T; t += 2) {\n    meta_schedule {\n      meta_for (int v = 0; v < (N + B - 1) / B; v++)\n        meta_for (int u = 0; u < B; u++) {\n          int i = v * B + u;\n          if (i < N) a[i] = a[i] + t;\n        }\n    }\n  }\n}\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_metafork")).args(["gen", "--emit-cuda", source.to_str().unwrap(), "-o"]).arg(dir.join("out")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let Some(nvcc) = nvcc() else { return };
    std::fs::write(
        dir.join("out/main.cu"),
        r#"#include <cstdio>
#include <cstring>
#include "metafork_run_ord.h"
#include "metafork_run_dz.h"
#include "metafork_run_lp.h"
#include "metafork_run_lb.h"
#include "metafork_run_ov.h"
#include "metafork_run_mm.h"
#include "metafork_run_ext.h"
#include "metafork_run_st.h"
int main() {
  cudaError_t err; const char *why = 0;
  int r = metafork_run_ord(64, 0, 0, 0, &err, &why);
  if (r != METAFORK_ASSERT_FAILED || !strstr(why, "assert(N % B == 0)")) { printf("B = 0: %d %s\n", r, why); return 1; }
  r = metafork_run_ord(65536, 64, 0, 0, &err, &why);
  if (r != METAFORK_OUTSIDE_ASSUMPTIONS || !strstr(why, "assume(N * N <= 1048576)")) { printf("N = 65536: %d %s\n", r, why); return 1; }
  r = metafork_run_dz(16, 0, 0, 0, 0, &err, &why);
  if (r != METAFORK_OUTSIDE_ASSUMPTIONS || !strstr(why, "int dim = N / B is undefined here")) { printf("dz B = 0: %d %s\n", r, why); return 1; }
  r = metafork_run_dz(-2147483647 - 1, -1, 0, 0, 0, &err, &why);
  if (r != METAFORK_OUTSIDE_ASSUMPTIONS || !strstr(why, "int dim = N / B is undefined here")) { printf("dz INT_MIN / -1: %d %s\n", r, why); return 1; }
  r = metafork_run_lp(8, 0, 2, 1, 0, 0, &err, &why);
  if (r != METAFORK_OUTSIDE_ASSUMPTIONS || !strstr(why, "int q = N / (t + M) is undefined here")) { printf("lp M = 0: %d %s\n", r, why); return 1; }
  r = metafork_run_lb(8, 0, 2, 0, 0, &err, &why);
  if (r != METAFORK_OUTSIDE_ASSUMPTIONS || !strstr(why, "the bounds of loop `t` (0 to N / M) are undefined here")) { printf("lb M = 0: %d %s\n", r, why); return 1; }
  r = metafork_run_ov(65536, 65536, 65536, 0, 0, 0, &err, &why);
  if (r != METAFORK_OUTSIDE_ASSUMPTIONS || !strstr(why, "int d = (N * M + B - 1) / B is undefined here")) { printf("ov N * M past int: %d %s\n", r, why); return 1; }
  r = metafork_run_mm(65536, 65536, 32, 0, 0, 0, &err, &why);
  if (r != METAFORK_OUTSIDE_ASSUMPTIONS || !strstr(why, "int m1 = min(N * M, 5) is undefined here")) { printf("mm min(N * M, 5): %d %s\n", r, why); return 1; }
  r = metafork_run_mm(0, -2147483647 - 1, 32, 0, 0, 0, &err, &why);
  if (r != METAFORK_OUTSIDE_ASSUMPTIONS || !strstr(why, "int ab = abs(M) is undefined here")) { printf("mm abs(INT_MIN): %d %s\n", r, why); return 1; }
  r = metafork_run_ext(50000, 32, 0, 0, 0, &err, &why);
  if (r != METAFORK_OUTSIDE_ASSUMPTIONS || !strstr(why, "the extent N * N of array `a` is undefined here")) { printf("ext N * N: %d %s\n", r, why); return 1; }
  r = metafork_run_st(8, 2147483647, 4, 0, 0, &err, &why);
  if (r != METAFORK_OUTSIDE_ASSUMPTIONS || !strstr(why, "loop `t` (0 to T) steps its counter past `int`")) { printf("st T = INT_MAX: %d %s\n", r, why); return 1; }
  return 0;
}
"#,
    )
    .unwrap();
    build_and_run_main(&nvcc, &dir.join("out"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A grid that a host loop's counter sizes (`n - t`, `(n - t) / B` inside `for (t ...)`): the
/// dispatcher reads the function's parameters, so no fork may read `t` (merging's grid-fill
/// gate did, and `gen --emit-cuda` failed with "reads `t`, which is neither a parameter nor
/// a machine symbol"). Every file compiles, and `verify` reports no defect: the first program
/// is proved; the second's quotient has no model here (`n - t` is not known to be
/// nonnegative), so its bounds are at worst unverified, never a defect at a launch that does
/// not exist.
#[test]
fn a_grid_sized_by_a_host_loop_counter_generates_and_has_no_false_defect() {
    let bin = env!("CARGO_BIN_EXE_metafork");
    for (k, (grid, guard)) in [("n - t", "if (u == 0) "), ("(n - t) / B", "")].into_iter().enumerate() {
        let dir = scratch("host-loop-grid");
        let source = dir.join("k.mf");
        let index = if guard.is_empty() { "g * B + u" } else { "g" };
        std::fs::write(&source, format!("void k(int n, int T, int B, float a[n]) {{\n  assume(n >= 1 && T >= 1 && B >= 1);\n  for (int t = 0; t < T; t++) {{\n    meta_schedule {{\n      meta_for (int g = 0; g < {grid}; g++)\n        meta_for (int u = 0; u < B; u++)\n          {guard}a[{index}] = a[{index}] + 1.0f;\n    }}\n  }}\n}}\n")).unwrap();
        let out = dir.join("out");
        let g = Command::new(bin).args(["gen", "--emit-cuda", source.to_str().unwrap(), "-o", out.to_str().unwrap()]).output().unwrap();
        assert!(g.status.success(), "{grid}: {}", String::from_utf8_lossy(&g.stderr));
        let v = Command::new(bin).args(["verify", out.to_str().unwrap()]).output().unwrap();
        let report = String::from_utf8_lossy(&v.stdout);
        assert!(!report.contains("DEFECT") && v.status.code() != Some(3), "{grid}: {report}");
        if k == 0 {
            assert!(v.status.success(), "{grid}: {report}");
        }
        if let Some(nvcc) = nvcc() {
            let sources: Vec<String> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).filter(|n| n.ends_with(".cu")).collect();
            let unit: String = sources.iter().map(|s| format!("#include \"{s}\"\n")).collect();
            std::fs::write(out.join("unit.cu"), unit).unwrap();
            let o = Command::new(&nvcc).current_dir(&out).args(["-c", "-O0", "-arch=sm_80", "-o", "unit.o", "unit.cu"]).output().unwrap();
            assert!(o.status.success(), "{grid}: nvcc rejected the files:\n{}", String::from_utf8_lossy(&o.stderr));
        }
    }
}

/// The first function of `src`, its first schedule's tree and that tree's dispatcher.
fn dispatcher_of(file: &str, src: &str) -> (KernelFunction, metafork::tree::Tree, Dispatcher) {
    let k = metafork::frontend::check_source(file, src).unwrap().kernels.remove(0);
    let tree = metafork::tree::build(&k, metafork::kernel::Kernel::from_schedule(&k, &k.schedules[0]).unwrap(), &Default::default()).unwrap();
    let d = Dispatcher::new(&k, &tree).unwrap();
    (k, tree, d)
}

/// The dispatcher evaluates a grid as the launch computes it, each operation in its C type:
/// `d = (N * M + B - 1) / B` at `N = M = 65536, B = 1024` is 2^22 in 64 bits, but `N * M`
/// overflows `int` in the launch (the grid came out 0: nothing ran, and success was
/// returned). The selection now puts the point outside the program, as the generated one
/// does; so for a grid written inline, `(N * M + B - 1) / B`.
#[test]
fn a_grid_whose_int_arithmetic_overflows_is_refused() {
    let src = "void ov(int N, int M, int B, const float a[N], float c[N]) {\n  int d = (N * M + B - 1) / B;\n  meta_schedule {\n    meta_for (int v = 0; v < d; v++)\n      meta_for (int u = 0; u < B; u++) {\n        int i = v * B + u;\n        if (i < N) c[i] = a[i];\n      }\n  }\n}\n";
    let (_, _, d) = dispatcher_of("ov.mf", src);
    let limits = DeviceLimits::of(&DeviceProfile::load("h200").unwrap());
    let point = |n: i64, m: i64, b: i64| BTreeMap::from([("N".to_string(), n), ("M".to_string(), m), ("B".to_string(), b)]);
    assert!(matches!(d.select(&limits, &[], &point(1000, 1000, 128)).unwrap(), Selection::Leaf(_)));
    for p in [point(65536, 65536, 1024), point(46341, 46341, 1024)] {
        for s in [d.select(&limits, &[], &p).unwrap(), d.select_exact(&limits, &[], &p).unwrap()] {
            assert!(matches!(&s, Selection::OutsideAssumptions(t) if t.starts_with("int d = (N * M + B - 1) / B is undefined here")), "{p:?}: {s:?}");
        }
    }
    // Just within `int`: 46340^2 < 2^31.
    assert!(matches!(d.select(&limits, &[], &point(46340, 46340, 1024)).unwrap(), Selection::Leaf(_)));
    // Inline, the grid's own arithmetic.
    let inline = src.replace("  int d = (N * M + B - 1) / B;\n", "").replace("v < d;", "v < (N * M + B - 1) / B;");
    let (_, _, d) = dispatcher_of("ov.mf", &inline);
    let s = d.select(&limits, &[], &point(65536, 65536, 1024)).unwrap();
    assert!(matches!(&s, Selection::OutsideAssumptions(t) if t.starts_with("the grid extent (N * M + B - 1) / B of schedule `ov` is undefined here")), "{s:?}");
    assert_eq!(s, d.select_exact(&limits, &[], &point(65536, 65536, 1024)).unwrap());
}

/// A leaf whose own grid the launch cannot compute (a strategy's `N / B * 2` past `int`) is
/// passed over at that point, as a grid too large is: the point stays inside the program, whose
/// own grid `N / B` is defined, and another leaf takes it (before, the whole point was "outside
/// the assumptions" for a leaf that would not have been selected). Where only that leaf admits
/// the point, its grid is the refusal. The generated selection agrees.
#[test]
fn a_leaf_grid_past_int_passes_that_leaf_over_not_the_point() {
    let src = "void split(int N, int B, float a[N], float b[N]) {\n  assume(N >= 1 && B >= 1);\n  meta_schedule {\n    meta_for (int v = 0; v < N / B; v++)\n      meta_for (int u = 0; u < B; u++) {\n        int i = v * B + u;\n        a[i] = 1.0f;\n        b[i] = 2.0f;\n      }\n  }\n}\n";
    let (k, tree, d) = dispatcher_of("split.mf", src);
    // A leaf whose grid doubles the blocks (the statements split over them).
    let doubled = d.grids.iter().position(|g| g[0].as_ref().is_some_and(|e| e.expr.to_string().contains("* 2"))).expect("a leaf with a doubled grid");
    let h200 = DeviceLimits::of(&DeviceProfile::load("h200").unwrap());
    let point = |n: i64, b: i64| BTreeMap::from([("N".to_string(), n), ("B".to_string(), b)]);
    let mut checks = Vec::new();
    for n in [(1 << 30) - 1, 1 << 30, i64::from(i32::MAX)] {
        let s = d.select(&h200, &[], &point(n, 1)).unwrap();
        assert_eq!(s, d.select_exact(&h200, &[], &point(n, 1)).unwrap());
        assert!(matches!(s, Selection::Leaf(i) if i != doubled), "N = {n}: {s:?}");
        checks.push((h200, n, s));
    }
    // Registers short: only the doubled grid's leaf admits the point.
    let short = DeviceLimits { registers_per_thread: d.rules.iter().filter_map(|r| matches!(r.outcome, metafork::dispatch::Outcome::Kernel { index, .. } if index == doubled).then_some(i64::from(r.registers))).min().unwrap(), ..h200 };
    assert_eq!(d.select(&short, &[], &point(1000, 1)).unwrap(), Selection::Leaf(doubled));
    let s = d.select(&short, &[], &point(1 << 30, 1)).unwrap();
    assert_eq!(s, Selection::GridTooLarge(0));
    assert_eq!(s, d.select_exact(&short, &[], &point(1 << 30, 1)).unwrap());
    checks.push((short, 1 << 30, s));
    let Some(cxx) = cxx() else { return };
    let dir = scratch("dispatch-leaf-grid");
    for (name, body) in metafork::emit::dispatch::emit("split.mf", &k, &tree.nodes[0].code, &d).unwrap() {
        std::fs::write(dir.join(name), body).unwrap();
    }
    let cases: String = checks.iter().map(|(dev, n, s)| {
        let (code, _) = expected(s);
        format!("  {{ metafork_device d = {{{}, {}, {}, {}, {}, {}, {}, {}, {{{}LL, {}, {}}}}}; metafork_split_params p = {{{n}LL, 1}}; const char *w = 0; int r = metafork_split_select(&d, 0, &p, &w); if (r != {code}) {{ printf(\"N=%lld: %d %s\\n\", {n}LL, r, w); return 1; }} }}\n",
            dev.registers_per_thread, dev.shared_memory_per_block_optin, dev.shared_memory_per_block, dev.threads_per_block, dev.registers_per_block, dev.registers_per_multiprocessor, dev.warps_per_multiprocessor, dev.multiprocessors, dev.max_grid[0], dev.max_grid[1], dev.max_grid[2])
    }).collect();
    std::fs::write(dir.join("main.cpp"), format!("#include <stdio.h>\n#include \"split_dispatch.h\"\nint main(void) {{\n{cases}  return 0;\n}}\n")).unwrap();
    let exe = dir.join("main");
    let o = Command::new(&cxx).args(["-std=c++11", "-O1", "-o"]).arg(&exe).arg(dir.join("main.cpp")).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stdout));
}

/// A scalar the launch computes and passes to the kernel (`int e = N * M`, read in the body
/// only) is checked by the dispatcher as C computes it: where it overflows, the selection is
/// outside the program (before, the dispatcher chose a leaf whose launch overflowed).
#[test]
fn a_scalar_the_launch_computes_is_checked_by_the_dispatcher() {
    let src = "void ds(int N, int M, int B, const float a[N], float c[N]) {\n  int e = N * M;\n  meta_schedule {\n    meta_for (int v = 0; v < (N + B - 1) / B; v++)\n      meta_for (int u = 0; u < B; u++) {\n        int i = v * B + u;\n        if (i < N) c[i] = a[i] + e;\n      }\n  }\n}\n";
    let (k, tree, d) = dispatcher_of("ds.mf", src);
    let limits = DeviceLimits::of(&DeviceProfile::load("h200").unwrap());
    let point = |n: i64, m: i64| BTreeMap::from([("N".to_string(), n), ("M".to_string(), m), ("B".to_string(), 128)]);
    assert!(matches!(d.select(&limits, &[], &point(1000, 1000)).unwrap(), Selection::Leaf(_)));
    for s in [d.select(&limits, &[], &point(100000, 100000)).unwrap(), d.select_exact(&limits, &[], &point(100000, 100000)).unwrap()] {
        assert!(matches!(&s, Selection::OutsideAssumptions(t) if t.starts_with("int e = N * M is undefined here")), "{s:?}");
    }
    let header: String = metafork::emit::dispatch::emit("ds.mf", &k, &tree.nodes[0].code, &d).unwrap().into_iter().map(|(_, body)| body).collect();
    assert!(header.contains("int e = N * M is undefined here"), "the generated selection checks it too");
}

/// A kernel's `int i = v * B + u` over `long n` wraps past 2^31 (and then writes before the
/// array under `if (i < n)`): the selection refuses those sizes by the front end's range
/// fact, naming the operation, in Rust and in the generated code, and keeps the sizes within.
#[test]
fn sizes_where_a_kernels_int_arithmetic_overflows_are_refused() {
    let src = "void wrap(long n, int B, const float a[n], float c[n]) {\n  assume(n >= 1 && B >= 1);\n  meta_schedule {\n    meta_for (int v = 0; v < (n + B - 1) / B; v++)\n      meta_for (int u = 0; u < B; u++) {\n        int i = v * B + u;\n        if (i < n)\n          c[i] = 2.0f * a[i];\n      }\n  }\n}\n";
    let (k, tree, d) = dispatcher_of("wrap.mf", src);
    let limits = DeviceLimits::of(&DeviceProfile::load("h200").unwrap());
    let point = |n: i64, b: i64| BTreeMap::from([("n".to_string(), n), ("B".to_string(), b)]);
    let refused = "((n + B - 1) / B - 1) * B + (B - 1) <= 2147483647 (`v * B + u` stays within `int`)";
    for p in [point(3_000_000_000, 256), point(2_147_483_647, 1000)] {
        for s in [d.select(&limits, &[], &p).unwrap(), d.select_exact(&limits, &[], &p).unwrap()] {
            assert_eq!(s, Selection::OutsideAssumptions(refused.into()), "{p:?}");
        }
    }
    // 2^31 - 1 elements in blocks of 1024 (a divisor of 2^31): the last index is 2^31 - 1.
    for p in [point(1_000_000, 256), point(2_147_483_647, 1024)] {
        assert!(matches!(d.select(&limits, &[], &p).unwrap(), Selection::Leaf(_)), "{p:?}");
    }
    let header: String = metafork::emit::dispatch::emit("wrap.mf", &k, &tree.nodes[0].code, &d).unwrap().into_iter().map(|(_, body)| body).collect();
    assert!(header.contains("`v * B + u` stays within `int`"), "the generated selection checks it too");
}

/// A register-heavy code (56 accumulators) whose tree forks on registers per block: the
/// accept side keeps the code, the refuse side caps its registers. The refuse side's rules
/// carry `R_B < r*B` with `r` the *estimate* of the code above it. Where the compiled code
/// needs more registers than estimated (sweep H: 72 for 68 on an H200), blocks between
/// `R_B / real` and `R_B / estimate` threads were refused by the code's own leaves (real
/// count) and kept from the capped leaves (estimate): no leaf at all, though a compiled leaf
/// fit. The second pass takes it, in Rust (exact and fast) and in the generated C++ alike.
#[test]
fn the_capped_leaves_stay_reachable_where_the_code_above_needs_more_registers_than_estimated() {
    let src = crate::common::accumulators_source(56);
    let (k, tree, d) = dispatcher_of("acc.mf", &src);
    let limits = DeviceLimits::of(&DeviceProfile::load("h200").unwrap());
    // The kernels under a register refusal (capped) and those of the code as it is.
    let capped: std::collections::BTreeSet<usize> = d.rules.iter().filter(|r| r.estimated.iter().any(|e| *e)).filter_map(|r| match r.outcome {
        metafork::dispatch::Outcome::Kernel { index, .. } => Some(index),
        _ => None,
    }).collect();
    assert!(!capped.is_empty() && capped.len() < d.kernels.len(), "the tree has both sides: {:?}", d.rules.iter().map(|r| (r.node, r.estimated.clone())).collect::<Vec<_>>());
    // Real counts: 4 registers over the estimate on the uncapped kernels, the estimate on the capped.
    let estimate = |i: usize| d.rules.iter().find(|r| matches!(r.outcome, metafork::dispatch::Outcome::Kernel { index, .. } if index == i)).unwrap().registers as i64;
    let compiled: Vec<CompiledLeaf> = (0..d.kernels.len()).map(|i| CompiledLeaf { registers: estimate(i) + if capped.contains(&i) { 0 } else { 4 }, max_threads: 0 }).collect();
    let (mut rescued, mut points) = (0, Vec::new());
    for b in 1..=1024 {
        let params = BTreeMap::from([("N".to_string(), 1_000_000), ("M".to_string(), 8), ("B".to_string(), b)]);
        let exact = d.select_exact(&limits, &compiled, &params).unwrap();
        assert_eq!(d.select(&limits, &compiled, &params).unwrap(), exact, "B = {b}");
        // Some capped kernel fits by its own count wherever 32-register blocks do.
        let capped_fits = capped.iter().any(|&i| compiled[i].registers * b <= limits.registers_per_block);
        match &exact {
            &Selection::Leaf(i) => {
                // Taken by the second pass: every rule of the kernel has a register fork on the
                // code above that its estimate decides against.
                let values = [1_000_000, 8, b, limits.registers_per_thread, limits.shared_memory_per_block_optin, limits.threads_per_block, limits.registers_per_block, limits.registers_per_multiprocessor, limits.warps_per_multiprocessor, limits.multiprocessors];
                let kept_out = d.rules.iter().zip(d.fast_rules()).filter(|(r, _)| matches!(r.outcome, metafork::dispatch::Outcome::Kernel { index, .. } if index == i)).all(|(_, f)| f.path.iter().any(|c| c.estimated && c.holds(&values) == Some(false)));
                if kept_out {
                    assert!(capped.contains(&i), "B = {b}: {} kept out by an estimate", d.kernels[i]);
                    rescued += 1;
                }
            }
            other => assert!(!capped_fits, "B = {b}: {other:?}, though a capped kernel fits by its compiled count"),
        }
        points.push((params, exact));
    }
    assert!(rescued > 0, "no block size fell between the estimate's limit and the real count's");
    // The generated selection answers alike.
    let Some(cxx) = cxx() else { return };
    let dir = scratch("dispatch-capped");
    for (name, body) in metafork::emit::dispatch::emit("acc.mf", &k, &tree.nodes[0].code, &d).unwrap() {
        std::fs::write(dir.join(name), body).unwrap();
    }
    let s = d.schedule.clone();
    std::fs::write(dir.join(format!("{s}_driver.cpp")), driver(&s, &d.params)).unwrap();
    let exe = dir.join(format!("{s}_driver"));
    let o = Command::new(&cxx).args(["-std=c++11", "-O1", "-o"]).arg(&exe).arg(dir.join(format!("{s}_driver.cpp"))).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut input = String::new();
    for (params, _) in &points {
        let l = &limits;
        input += &format!("{} {} {} {} {} {} {} {} {} {} {}\n1\n", l.registers_per_thread, l.registers_per_block, l.shared_memory_per_block, l.shared_memory_per_block_optin, l.threads_per_block, l.registers_per_multiprocessor, l.warps_per_multiprocessor, l.multiprocessors, l.max_grid[0], l.max_grid[1], l.max_grid[2]);
        input += &compiled.iter().map(|c| format!("{} {} ", c.registers, c.max_threads)).collect::<String>();
        input += &format!("\n{}\n", d.params.iter().map(|p| params[p].to_string()).collect::<Vec<_>>().join(" "));
    }
    let out = run_with_input(&exe, &input);
    for (line, (params, exact)) in out.lines().zip(&points) {
        assert_eq!(line.split_once('|').unwrap().0.parse::<i64>().unwrap(), expected(exact).0, "{params:?}");
    }
    assert_eq!(out.lines().count(), points.len());
}
