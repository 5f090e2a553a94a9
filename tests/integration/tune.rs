//! `metafork tune`: the admissible configurations are exactly those of the candidate product
//! that satisfy the facts and that some leaf admits (checked against brute force with the
//! Rust selection), ranked best first; tune.yaml and --json carry them; the harness compiles
//! with nvcc and, without a GPU, fails with the runtime's message; standalone spaces; errors.

use constraints::device::DeviceProfile;
use metafork::dispatch::{DeviceLimits, Dispatcher, Selection};
use metafork::frontend::check_source;
use metafork::kernel::Kernel;
use metafork::tune::rank::{block_candidates, GRANULARITY_CANDIDATES};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{cxx, nvcc, scratch};

fn example(name: &str) -> String {
    format!("{}/examples/{name}.mf", env!("CARGO_MANIFEST_DIR"))
}

fn metafork(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_metafork")).current_dir(dir).args(args).output().unwrap()
}

#[test]
fn admissible_configurations_equal_brute_force_and_are_ranked() {
    let dir = scratch("tune-brute");
    // Without -o nothing is written (issue 28: tune wrote ./tune.yaml wherever it ran).
    let out = metafork(&dir, &["tune", &example("matvec"), "--device", "h200", "--size", "N=256"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "tune without -o writes no file");
    // With the estimates, as the brute force below selects (real counts: the test further down).
    let out = metafork(&dir, &["tune", &example("matmul"), "--device", "h200", "--size", "n=4096", "--estimates", "--json", "-o", "tune.yaml"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty(), "no progress output when stderr is not a terminal: {}", String::from_utf8_lossy(&out.stderr));
    let json: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let yaml: serde_yaml::Value = serde_yaml::from_slice(&std::fs::read(dir.join("tune.yaml")).unwrap()).unwrap();
    assert_eq!(yaml[0]["admissible"].as_sequence().unwrap().len(), json.len(), "tune.yaml and --json list the same configurations");
    let scores: Vec<f64> = json.iter().map(|c| c["score"].as_f64().unwrap()).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "best first");

    // Brute force over the same candidate product with the Rust selection.
    let text = std::fs::read_to_string(example("matmul")).unwrap();
    let program = check_source("matmul.mf", &text).unwrap();
    let k = &program.kernels[0];
    let tree = metafork::tree::build(k, Kernel::from_schedule(k, &k.schedules[0]).unwrap(), &Default::default()).unwrap();
    let d = Dispatcher::new(k, &tree).unwrap();
    let h200 = DeviceProfile::load("h200").unwrap();
    let limits = DeviceLimits::of(&h200);
    let mut expected = BTreeMap::new();
    for &b0 in &block_candidates(&h200) {
        for &ub1 in &block_candidates(&h200) {
            for &s in &GRANULARITY_CANDIDATES {
                let point = BTreeMap::from([("n".to_string(), 4096), ("B0".to_string(), b0), ("ub1".to_string(), ub1), ("s".to_string(), s)]);
                if let Selection::Leaf(i) = d.select_exact(&limits, &[], &point).unwrap() {
                    expected.insert((b0, ub1, s), d.kernels[i].clone());
                }
            }
        }
    }
    let got: BTreeMap<(i64, i64, i64), String> = json
        .iter()
        .map(|c| {
            let p = &c["parameters"];
            ((p["B0"].as_i64().unwrap(), p["ub1"].as_i64().unwrap(), p["s"].as_i64().unwrap()), c["leaf"].as_str().unwrap().to_string())
        })
        .collect();
    assert!(!expected.is_empty());
    assert_eq!(got, expected);
    for c in &json {
        let occ = c["counters"]["occupancy"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&occ) && occ > 0.0, "{c}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn ranges_and_spaces_restrict_the_enumeration() {
    let dir = scratch("tune-ranges");
    let out = metafork(&dir, &["tune", &example("jacobi1d"), "--device", "a100", "--size", "N=4096", "--size", "T=10", "--range", "s=1..3", "--range", "B=32,64,100", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!json.is_empty());
    for c in &json {
        let p = &c["parameters"];
        assert!([1, 2, 3].contains(&p["s"].as_i64().unwrap()) && [32, 64, 100].contains(&p["B"].as_i64().unwrap()), "{p}");
    }
    std::fs::write(dir.join("space.yaml"), "params:\n  B0: [8, 16, 32]\n  ub1: [16, 32, 64]\n  s: [1, 2]\nrestrictions:\n  - \"B0 * ub1 <= 256\"\n").unwrap();
    let out = metafork(&dir, &["tune", &example("matmul"), "--device", "h100", "--size", "n=1024", "--space", "space.yaml", "--estimates", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!json.is_empty());
    for c in &json {
        let p = &c["parameters"];
        assert!(p["B0"].as_i64().unwrap() * p["ub1"].as_i64().unwrap() <= 256, "{p}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn standalone_space_reports_counts() {
    let dir = scratch("tune-standalone");
    let spaces = format!("{}/bench/tuning-spaces.yaml", env!("CARGO_MANIFEST_DIR"));
    let out = metafork(&dir, &["tune", "--space", &spaces, "--space-name", "conv_milo"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("conv_milo") && text.contains("10240") && text.contains("4362"), "{text}");
    let out = metafork(&dir, &["tune", "--space", &spaces, "--space-name", "conv_milo", "--json"]);
    let json: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json[0]["configurations"].as_array().unwrap().len(), 4362);
    let out = metafork(&dir, &["tune", "--space", &spaces, "--space-name", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no space named `nope`"));
    // A space of no parameter is refused with its line (it read as "more than 5000000
    // admissible configurations").
    std::fs::write(dir.join("empty.yaml"), "# nothing to tune\nparams: {}\n").unwrap();
    let out = metafork(&dir, &["tune", "--space", "empty.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("empty.yaml:2: `params` names no parameter"), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A program with no integer parameter has one configuration, the empty one: tune lists it
/// (the search took its zero-width rows for a full space), and its harness writes a wisdom
/// with nothing to set.
#[test]
fn a_program_without_parameters_has_its_one_configuration() {
    let dir = scratch("tune-no-parameter");
    std::fs::write(dir.join("f.mf"), "void f(const float a[1024], float c[1024]) {\n  meta_schedule {\n    meta_for (int i = 0; i < 8; i++)\n      meta_for (int j = 0; j < 128; j++)\n        c[i * 128 + j] = a[i * 128 + j] * 2.0f;\n  }\n}\n").unwrap();
    let out = metafork(&dir, &["tune", "f.mf", "--device", "h200", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json.len(), 1, "{json:?}");
    assert_eq!(json[0]["parameters"].as_object().map(|o| o.len()), Some(0));
    let out = metafork(&dir, &["tune", "f.mf", "--device", "h200", "--emit-harness", "h"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    if let Some(nvcc) = nvcc() {
        let leaves: Vec<String> = std::fs::read_dir(dir.join("h")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).filter(|n| n.ends_with(".cu") && n != "f_harness.cu").collect();
        let o = Command::new(&nvcc).current_dir(dir.join("h")).args(["-arch=sm_80", "-O0", "-Werror", "all-warnings", "-o", "harness", "f_harness.cu"]).args(&leaves).output().unwrap();
        assert!(o.status.success(), "nvcc rejected the harness:\n{}", String::from_utf8_lossy(&o.stderr));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_requests_get_clear_errors() {
    let dir = scratch("tune-errors");
    let cases: [(&[&str], &str, i32); 10] = [
        (&["tune", &example("jacobi2d"), "--device", "h200", "--size", "N=2"], "at N = 2, the program's assume `N >= 3` does not hold", 1),
        (&["tune", &example("matmul"), "--device", "h200", "--size", "n=64", "--size", "n=128"], "--size n=128: `n` is given twice", 1),
        (&["tune", &example("matmul"), "--device", "h200", "--size", "n=64", "--range", "n=64,128"], "--range n=64,128: `n` is fixed by --size", 1),
        (&["tune", &example("matmul"), "--device", "h200", "--size", "n=64", "--range", "s=1,2", "--range", "s=4"], "--range s=4: `s` is given twice", 1),
        (&["tune", &example("matmul"), "--device", "h200"], "give the data size with --size: n=VALUE", 1),
        (&["tune", &example("matmul"), "--device", "h999", "--size", "n=64"], "unknown device `h999`", 1),
        (&["tune", &example("matmul"), "--size", "n=64"], "the following required arguments were not provided:\n  --device <DEVICE>", 2),
        (&["tune", &example("matmul"), "--device", "h200", "--size", "n=sixty"], "`sixty` is not an integer", 2),
        (&["tune", &example("matmul"), "--device", "h200", "--size", "n=64", "--range", "q=1..4"], "`q` is not an integer parameter of `matmul`", 1),
        (&["tune"], "the following required arguments were not provided:\n  <FILE>", 2),
    ];
    // A usage error (a missing argument, a malformed NAME=VALUE) exits 2, as clap's own do; a
    // value the program refuses exits 1.
    for (args, message, code) in cases {
        let mut args = args.to_vec();
        args.extend(["-o", "tune.yaml"]);
        let out = metafork(&dir, &args);
        assert_eq!(out.status.code(), Some(code), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(message), "{args:?}: {err}");
        assert!(!dir.join("tune.yaml").exists(), "{args:?}: no output on failure");
    }
    // A program the front end refuses: its diagnostic as `gen` prints it, with one prefix.
    std::fs::write(dir.join("bad.mf"), "void f(int N, int B, float a[N]) {\n  meta_schedule {\n    meta_for (int i = 0; i < N; i++) a[i] = 1.0f +;\n  }\n}\n").unwrap();
    let out = metafork(&dir, &["tune", "bad.mf", "--device", "h200", "--size", "N=64", "--color", "never"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.starts_with("Error: bad.mf:3:") && !err.contains("error: Error"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The harness (issue 28), for matmul, transpose and Jacobi (host loops around the launch):
/// compiles with nvcc; holds every admissible configuration in the model's order (`--list`);
/// its local search steps one enumerated parameter one value at a time (`--neighbours`); it
/// resumes from its cache, keyed by device, sizes and parameters, ignoring other devices and a
/// line an interrupted run cut (`--restored`); `--help` states the warm-up/repeat policy and the
/// tolerance; bad options exit 64; where no GPU answers it fails with the runtime's message
/// (with one, it writes wisdom.yaml).
#[test]
fn harness_compiles_with_nvcc_and_runs_or_reports() {
    let Some(nvcc) = nvcc() else { return };
    let dir = scratch("tune-harness");
    for (name, sizes) in [("matmul", vec!["--size", "n=256"]), ("transpose", vec!["--size", "N=256"]), ("jacobi1d", vec!["--size", "N=1024", "--size", "T=4"])] {
        let h = dir.join(name);
        let (ex, hs) = (example(name), h.display().to_string());
        let mut args = vec!["tune", &ex, "--device", "h200", "--top", "4", "--emit-harness", &hs, "--estimates", "--json"];
        args.extend(sizes.iter().copied());
        let out = metafork(&dir, &args);
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        let ranked: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
        let sources: Vec<PathBuf> = std::fs::read_dir(&h).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "cu")).collect();
        assert!(sources.iter().any(|p| p.ends_with(format!("{name}_harness.cu"))));
        let o = Command::new(&nvcc).args(["-O3", "-arch=sm_90", "-Xcompiler", "-Wall", "-o"]).arg(h.join("harness")).args(&sources).output().unwrap();
        assert!(o.status.success(), "{name}: nvcc: {}", String::from_utf8_lossy(&o.stderr));
        assert!(!String::from_utf8_lossy(&o.stderr).contains("warning"), "{name}: {}", String::from_utf8_lossy(&o.stderr));
        let harness = |args: &[&str]| Command::new(h.join("harness")).current_dir(&h).args(args).output().unwrap();
        let help = String::from_utf8(harness(&["--help"]).stdout).unwrap();
        assert!(help.contains("1 warm-up run(s), then 7 timed runs") && help.contains("1e-04 float") && help.contains("serial program"), "{help}");
        // Every admissible configuration, in the model's order, with its leaf.
        let list = String::from_utf8(harness(&["--list"]).stdout).unwrap();
        let rows: Vec<Vec<&str>> = list.lines().map(|l| l.split('\t').collect()).collect();
        assert_eq!(rows.len(), ranked.len(), "{name}: the harness holds every admissible configuration");
        let enumerated: Vec<&String> = ranked[0]["parameters"].as_object().unwrap().keys().filter(|k| rows[0][2].split(' ').any(|kv| kv.starts_with(&format!("{k}=")))).collect();
        assert!(!enumerated.is_empty());
        let values = |row: &[&str]| -> BTreeMap<String, i64> { row[2].split(' ').map(|kv| { let (k, v) = kv.split_once('=').unwrap(); (k.to_string(), v.parse().unwrap()) }).collect() };
        for (row, c) in rows.iter().zip(&ranked) {
            assert_eq!(row[1], c["leaf"].as_str().unwrap(), "{name}");
            for (k, v) in values(row) {
                assert_eq!(c["parameters"][&k].as_i64().unwrap(), v, "{name}: {row:?}");
            }
        }
        // Neighbours of the model's best: one enumerated parameter one step along its values.
        let neighbours = String::from_utf8(harness(&["--neighbours", "1"]).stdout).unwrap();
        assert!(!neighbours.trim().is_empty(), "{name}: the best has neighbours");
        let first = values(&rows[0]);
        for line in neighbours.lines() {
            let rank: usize = line.split('\t').next().unwrap().parse().unwrap();
            let other = values(&rows[rank - 1]);
            let differing: Vec<&String> = first.keys().filter(|k| first[*k] != other[*k]).collect();
            assert_eq!(differing.len(), 1, "{name}: {line}");
            let p = differing[0];
            let (lo, hi) = (first[p].min(other[p]), first[p].max(other[p]));
            assert!(!rows.iter().any(|r| { let v = values(r)[p]; lo < v && v < hi }), "{name}: {line} skips a value of {p}");
        }
        // The cache: one line for candidate 2 on the device, one for another device, one cut
        // short, and times that are none (candidate 1 `nan`, candidate 3 `-5`: a damaged or
        // hand-edited cache), which are measured again, not restored.
        let key_of = |rank: usize, device: &str| {
            let all: Vec<String> = ranked[rank]["parameters"].as_object().unwrap().iter().map(|(k, v)| format!("{k}={v}")).collect();
            let fixed: Vec<String> = ranked[rank]["parameters"].as_object().unwrap().iter().filter(|(k, _)| !enumerated.contains(k)).map(|(k, v)| format!("{k}: {v}")).collect();
            format!("{device}\t{name}\t{}\t{}", fixed.join(", "), all.join(" "))
        };
        let key = |device: &str| key_of(1, device);
        let bad_times = format!("{}\tmatches\tnan\t0\t\n{}\tmatches\t-5.0\t0\t\n", key_of(0, "NVIDIA H100 80GB HBM3"), key_of(ranked.len().min(3) - 1, "NVIDIA H100 80GB HBM3"));
        std::fs::write(h.join("c.tsv"), format!("{bad_times}{}\tmatches\t0.125000\t1.000e-07\t\n{}\tmatches\t0.5\t0\t\n{}\tMISMATCH\t0.1", key("NVIDIA H100 80GB HBM3"), key("Other GPU"), key("NVIDIA H100 80GB HBM3"))).unwrap();
        let restored = String::from_utf8(harness(&["--cache", "c.tsv", "--restored", "NVIDIA H100 80GB HBM3"]).stdout).unwrap();
        assert_eq!(restored, "2\tmatches\t0.125000\n", "{name}");
        assert_eq!(harness(&["--top", "0"]).status.code(), Some(64));
        assert_eq!(harness(&["--frobnicate"]).status.code(), Some(64));
        let run = harness(&["wisdom.yaml"]);
        if run.status.success() {
            let wisdom: serde_yaml::Value = serde_yaml::from_slice(&std::fs::read(h.join("wisdom.yaml")).unwrap()).unwrap();
            assert!(wisdom["best"]["leaf"].as_str().is_some(), "{name}: {wisdom:?}");
        } else {
            let err = String::from_utf8_lossy(&run.stderr);
            assert!(err.contains(".cu:") && !err.trim().is_empty(), "{name}: a failure must carry the CUDA message: {err}");
            assert!(!h.join("wisdom.yaml").exists());
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Wisdom per device and size bucket (issue 28): several harnesses' wisdom (files, or documents
/// of one file) become one table; `metafork_<s>_wisdom` picks the entry of the named device at
/// the same power-of-two size bucket, else the nearest one the point admits, says when it falls
/// back, and leaves the parameters alone when none applies (n = 4095: the configurations
/// measured at 4096 and 96 violate `n % B0 == 0`). A second wisdom for the same device and sizes,
/// a wisdom for another schedule, and a parameter the program lacks are refused with the line.
#[test]
fn wisdom_sets_the_dispatch_defaults() {
    let dir = scratch("tune-wisdom");
    // Each configuration names the kernel leaf it selects on an H200, as a harness does (the
    // first kernel leaf where it selects none: refused for another reason first).
    let text = std::fs::read_to_string(example("matmul")).unwrap();
    let checked = check_source("matmul.mf", &text).unwrap();
    let k = &checked.kernels[0];
    let tree = metafork::tree::build(k, Kernel::from_schedule(k, &k.schedules[0]).unwrap(), &Default::default()).unwrap();
    let d = Dispatcher::new(k, &tree).unwrap();
    let limits = DeviceLimits::of(&DeviceProfile::load("h200").unwrap());
    let leaf_of = |n: i64, b0: i64, s: i64, ub1: i64| {
        let point = BTreeMap::from([("n".to_string(), n), ("B0".to_string(), b0), ("ub1".to_string(), ub1), ("s".to_string(), s)]);
        match d.select_exact(&limits, &[], &point) {
            Ok(Selection::Leaf(i)) => d.kernels[i].clone(),
            _ => d.kernels[0].clone(),
        }
    };
    let entry = |device: &str, n: i64, b0: i64, s: i64, ub1: i64| format!("schedule: matmul\ndevice: \"{device}\"\nsizes: {{n: {n}}}\nrepetitions: 7\nbest: {{leaf: {}, parameters: {{B0: {b0}, s: {s}, ub1: {ub1}}}, median_ms: 1.5, model_rank: 3}}\nleaves: []\n", leaf_of(n, b0, s, ub1));
    let leaf = leaf_of(4096, 16, 2, 32);
    std::fs::write(dir.join("h200.yaml"), entry("NVIDIA H200", 4096, 16, 2, 32)).unwrap();
    std::fs::write(dir.join("more.yaml"), format!("{}---\n{}", entry("NVIDIA H200", 96, 8, 1, 32), entry("NVIDIA A100-SXM4-80GB", 4096, 32, 1, 32))).unwrap();
    let out = metafork(&dir, &["gen", "--emit-cuda", "--wisdom", "h200.yaml", "--wisdom", "more.yaml", &example("matmul"), "-o", "out"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let header = std::fs::read_to_string(dir.join("out/matmul_dispatch.h")).unwrap();
    assert_eq!(header.matches("/* wisdom entry: ").count(), 3, "{header}");
    assert!(std::fs::read_to_string(dir.join("out/matmul_dispatch.cu")).unwrap().contains("metafork_matmul_tuned("));
    // The joined wisdom copy re-derives the same files. Only the files: the wisdom sets host
    // defaults, not kernels, and matmul's leaves are proved by
    // `verify::every_example_leaf_is_proved`.
    let check = metafork(&dir, &["verify", "--files-only", "out"]);
    assert_eq!(check.status.code(), Some(0), "{}", String::from_utf8_lossy(&check.stderr));
    assert!(String::from_utf8_lossy(&check.stdout).contains("not proved: --files-only"));
    let header_path = dir.join("out/matmul_dispatch.h");
    std::fs::write(&header_path, header.replace("/* wisdom entry: ", "/* wisdom entry (edited): ")).unwrap();
    let edited = metafork(&dir, &["verify", "--files-only", "out"]);
    assert_eq!(edited.status.code(), Some(3), "an edited file differs");
    assert!(String::from_utf8_lossy(&edited.stderr).contains("matmul_dispatch.h"), "{}", String::from_utf8_lossy(&edited.stderr));
    std::fs::write(&header_path, &header).unwrap();
    if let Some(cxx) = cxx() {
        std::fs::write(dir.join("out/main.cpp"), r#"#include "matmul_dispatch.h"
#include <cstdio>
int main() {
  const metafork_device d = {255, 232448, 49152, 1024, 65536, 65536, 64, 132};
  const struct { const char *device; long long n; } cases[] = {{"NVIDIA H200", 4096}, {"NVIDIA H200", 8192}, {"NVIDIA H200", 4095}, {"NVIDIA H200", 128}, {"Tesla X", 4096}, {"NVIDIA A100-SXM4-80GB", 4096}};
  for (auto &c : cases) {
    metafork_matmul_params p = {c.n, 0, 0, 0};
    const char *detail = 0;
    int r = metafork_matmul_wisdom(c.device, &d, 0, &p, &detail);
    printf("%s|%lld|%d|%lld|%lld|%lld|%d|%s\n", c.device, c.n, r, p.B0, p.s, p.ub1, r == METAFORK_WISDOM_NONE ? -9 : metafork_matmul_select(&d, 0, &p, 0), detail);
  }
}
"#).unwrap();
        let o = Command::new(&cxx).args(["-std=c++11", "-o"]).arg(dir.join("out/main")).arg(dir.join("out/main.cpp")).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let o = Command::new(dir.join("out/main")).output().unwrap();
        let lines: Vec<Vec<String>> = String::from_utf8(o.stdout).unwrap().lines().map(|l| l.split('|').map(String::from).collect()).collect();
        let row = |i: usize| lines[i][2..6].join(" ");
        assert_eq!(row(0), "0 16 2 32", "exact bucket: {:?}", lines[0]);
        assert_eq!(row(1), "1 16 2 32", "n = 8192: the nearest bucket, and said so: {:?}", lines[1]);
        assert!(lines[1][7].contains("measured at other sizes"), "{:?}", lines[1]);
        assert_eq!(row(2), "2 0 0 0", "n = 4095: no entry admits it, parameters unchanged: {:?}", lines[2]);
        assert!(lines[2][7].contains("n % B0 == 0"), "{:?}", lines[2]);
        assert_eq!(row(3), "1 8 1 32", "n = 128: the entry measured at 96: {:?}", lines[3]);
        assert_eq!(row(4), "2 0 0 0", "{:?}", lines[4]);
        assert!(lines[4][7].contains("no wisdom for device `Tesla X`"), "{:?}", lines[4]);
        assert_eq!(row(5), "0 32 1 32", "{:?}", lines[5]);
        for l in [&lines[0], &lines[1], &lines[3], &lines[5]] {
            assert!(l[6].parse::<i32>().unwrap() >= 0, "what the wisdom sets is admissible: {l:?}");
        }
    }
    // Refused, with the line at fault.
    let refused = |args: &[&str], message: &str| {
        let mut all = vec!["gen", "--emit-cuda"];
        all.extend(args);
        let ex = example("matmul");
        all.extend([ex.as_str(), "-o", "bad"]);
        let out = metafork(&dir, &all);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(message), "{args:?}: {err}");
        assert!(!dir.join("bad").exists(), "nothing written on failure");
    };
    // What needs no tree is refused before any is built: the same messages from the program alone.
    let program = check_source("matmul.mf", &std::fs::read_to_string(example("matmul")).unwrap()).unwrap();
    let early = |files: &[&str]| {
        let wisdom: Vec<_> = files.iter().flat_map(|f| metafork::emit::dispatch::Wisdom::parse(&std::fs::read_to_string(dir.join(f)).unwrap(), f).unwrap()).collect();
        metafork::emit::dispatch::check_before_build("matmul.mf", &program, &wisdom)
    };
    assert_eq!(early(&["h200.yaml", "more.yaml"]), Ok(()));
    assert!(early(&["h200.yaml", "h200.yaml"]).unwrap_err().contains("h200.yaml:1: a second wisdom for `matmul` on `NVIDIA H200` at the same sizes"));
    refused(&["--wisdom", "h200.yaml", "--wisdom", "h200.yaml"], "h200.yaml:1: a second wisdom for `matmul` on `NVIDIA H200` at the same sizes");
    std::fs::write(dir.join("other.yaml"), format!("{}---\n{}", entry("NVIDIA H200", 64, 8, 1, 32), entry("NVIDIA H200", 64, 8, 1, 32).replace("schedule: matmul", "schedule: gemm"))).unwrap();
    refused(&["--wisdom", "other.yaml"], "other.yaml:8: the wisdom is for schedule `gemm`");
    std::fs::write(dir.join("empty.yaml"), "# nothing\n").unwrap();
    refused(&["--wisdom", "empty.yaml"], "empty.yaml: holds no wisdom");
    std::fs::write(dir.join("size.yaml"), entry("NVIDIA H200", 0, 8, 1, 32)).unwrap();
    refused(&["--wisdom", "size.yaml"], "size.yaml:3: size `n` = 0 is not a positive C `int`");
    for (file, message) in [("other.yaml", "other.yaml:8: the wisdom is for schedule `gemm`"), ("size.yaml", "size.yaml:3: size `n` = 0")] {
        assert!(early(&[file]).unwrap_err().contains(message), "{file}");
    }
    std::fs::write(dir.join("bad.yaml"), format!("schedule: matmul\ndevice: x\nbest: {{leaf: {leaf}, parameters: {{Q: 1}}}}\n")).unwrap();
    let out = metafork(&dir, &["gen", "--emit-cuda", "--wisdom", "bad.yaml", &example("matmul"), "-o", "bad"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("`Q`, which is not a program parameter"));
    assert!(!dir.join("bad").exists(), "nothing written on failure");
    // The line at fault is the key's, not the first line naming the value (the device's name
    // here holds every parameter's name); in flow style, the line of the mapping holding it.
    std::fs::write(dir.join("lines.yaml"), format!("schedule: matmul\ndevice: \"B0 s ub1 n GPU\"\nsizes:\n  n: 4096\nbest:\n  leaf: {leaf}\n  parameters:\n    s: 1\n    'B0': 5000000000\n    ub1: 32\n")).unwrap();
    let e = early(&["lines.yaml"]).unwrap_err();
    assert!(e.contains("lines.yaml:9: `B0` = 5000000000 does not fit a C `int`"), "{e}");
    std::fs::write(dir.join("lines.yaml"), entry("n B0 s ub1", 4096, 16, 2, 32).replace("ub1: 32}", "ub1: 32, n: 1}")).unwrap();
    let e = early(&["lines.yaml"]).unwrap_err();
    assert!(e.contains("lines.yaml:5: the wisdom for `matmul` sets `n`, which is not a program parameter"), "{e}");
    // A misspelt key is refused, not ignored.
    let e = metafork::emit::dispatch::Wisdom::parse(&entry("NVIDIA H200", 4096, 16, 2, 32).replace("sizes:", "size:"), "typo.yaml").unwrap_err();
    assert!(e.starts_with("typo.yaml:3:1: not a wisdom document: unknown field `size`"), "the misspelt key's line: {e}");
    // A key given twice is refused (YAML keeps the last), in a flow or a block mapping, and in a
    // later document the line is the file's.
    let two = format!("{}---\n{}", entry("A", 64, 8, 1, 32), entry("B", 64, 8, 1, 32).replace("{n: 64}", "{n: 64, n: 128}"));
    let e = metafork::emit::dispatch::Wisdom::parse(&two, "two.yaml").unwrap_err();
    assert!(e.starts_with("two.yaml:10:") && e.contains("duplicate key `n`"), "{e}");
    let block = entry("A", 64, 8, 1, 32).replace("device: \"A\"\n", "device: \"A\"\ndevice: \"B\"\n");
    let e = metafork::emit::dispatch::Wisdom::parse(&block, "block.yaml").unwrap_err();
    assert!(e.starts_with("block.yaml:3:1: not a wisdom document: duplicate field `device`"), "{e}");
    // A leaf the configuration cannot select (its path needs another `s`) is refused: the
    // dispatcher would run another while naming it.
    let at: BTreeMap<constraints::Var, constraints::Rational> = [("n", 4096), ("B0", 16), ("s", 2), ("ub1", 32)].into_iter().map(|(v, x)| (constraints::Var::new(v), constraints::Rational::from_integer(x.into()))).collect();
    let excluded = |name: &str| d.rules.iter().filter(|r| matches!(&r.outcome, metafork::dispatch::Outcome::Kernel { name: n, .. } if n == name)).all(|r| r.path.iter().any(|c| c.holds_at(&at) == Ok(false)));
    let other = d.kernels.iter().find(|l| excluded(l)).expect("some leaf's path needs another `s`");
    std::fs::write(dir.join("wrong.yaml"), entry("NVIDIA H200", 4096, 16, 2, 32).replace(&format!("leaf: {leaf},"), &format!("leaf: {other},"))).unwrap();
    refused(&["--wisdom", "wrong.yaml"], &format!("wrong.yaml:5: leaf `{other}` is never selected at these parameters and sizes: its constraint `"));
    // `cudaDeviceProp::name` is `char[256]`: 255 bytes of name at most, counted in bytes (200
    // three-byte characters are 600).
    std::fs::write(dir.join("long.yaml"), entry(&"A".repeat(255), 4096, 16, 2, 32)).unwrap();
    assert_eq!(early(&["long.yaml"]), Ok(()));
    for (name, bytes) in ["A".repeat(256), "\u{2713}".repeat(200)].iter().zip([256, 600]) {
        std::fs::write(dir.join("long.yaml"), entry(name, 4096, 16, 2, 32)).unwrap();
        let e = early(&["long.yaml"]).unwrap_err();
        assert!(e.contains(&format!("long.yaml:2: the device name must be 1 to 255 bytes of UTF-8 (the CUDA runtime's `cudaDeviceProp::name` is `char[256]`); this one has {bytes} bytes")), "{e}");
    }
    // A median that is no time (a damaged or hand-edited harness output) is refused.
    for ms in ["-5.0", ".nan", "0.0", ".inf"] {
        std::fs::write(dir.join("ms.yaml"), entry("NVIDIA H200", 4096, 16, 2, 32).replace("median_ms: 1.5", &format!("median_ms: {ms}"))).unwrap();
        let e = early(&["ms.yaml"]).unwrap_err();
        assert!(e.contains("ms.yaml:5: `median_ms: ") && e.contains("is not a time"), "{ms}: {e}");
    }
    std::fs::write(dir.join("nul.yaml"), entry("NVIDIA\\0H200", 4096, 16, 2, 32)).unwrap();
    let e = early(&["nul.yaml"]).unwrap_err();
    assert!(e.contains("nul.yaml:2: the device name `NVIDIA\\0H200` holds a control character"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The branch factor of the score: matvec's guard `r < N` with `N = 40` splits the first block's
/// second warp (lanes 32..63) when the block has 64 or 96 threads, so a half or a third of its
/// warps diverge (`1 - d/2`: 0.75, 5/6); a block of 32 or fewer threads holds no divergence.
/// With a profile that lacks the throughput fields, the score is the product of the counters;
/// with a built-in profile it is the best estimated time over each configuration's.
#[test]
fn tune_scores_divergent_warps() {
    let dir = scratch("tune-divergence");
    let h200 = constraints::device::BUILT_IN.iter().find(|(n, _)| *n == "h200").unwrap().1;
    let stripped: String = h200.lines().filter(|l| !l.starts_with("memory_bandwidth_gb_s:") && !l.starts_with("boost_clock_mhz:")).map(|l| format!("{l}\n")).collect();
    std::fs::write(dir.join("plain.yaml"), stripped).unwrap();
    let out = metafork(&dir, &["tune", &example("matvec"), "--device", "h200", "--size", "N=40", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let timed: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let best = timed.iter().map(|c| c["estimated_seconds"].as_f64().expect("h200 has throughput fields")).fold(f64::INFINITY, f64::min);
    for c in &timed {
        let s = c["estimated_seconds"].as_f64().unwrap();
        assert!((c["score"].as_f64().unwrap() - best / s).abs() < 1e-12, "the score is the best time over this one's: {c}");
        assert!(["compute", "global", "shared"].contains(&c["bound"].as_str().unwrap()), "{c}");
    }
    let out = metafork(&dir, &["tune", &example("matvec"), "--device", "plain.yaml", "--size", "N=40", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(json.iter().all(|c| c["estimated_seconds"].is_null()), "no estimate without the throughput fields");
    let by_block: BTreeMap<i64, &serde_json::Value> = json.iter().map(|c| (c["parameters"]["B"].as_i64().unwrap(), c)).collect();
    for (b, want) in [(8, 1.0), (32, 1.0), (64, 0.75), (96, 1.0 - 1.0 / 6.0)] {
        let c = by_block.get(&b).unwrap_or_else(|| panic!("B = {b} not admissible: {json:?}"));
        let counters = &c["counters"];
        let got = counters["branch_efficiency"].as_f64().unwrap();
        assert!((got - want).abs() < 1e-9, "B = {b}: branch efficiency {got}, expected {want}");
        let product = ["occupancy", "coalescing", "bank_efficiency", "branch_efficiency"].iter().map(|k| counters[k].as_f64().unwrap()).product::<f64>();
        assert!((c["score"].as_f64().unwrap() - product).abs() < 1e-12, "B = {b}: the score is the product of the counters");
    }
    // The table says why there is no time, for a missing field or a capability the throughput
    // table lacks (it used to leave the column empty without a word).
    let future: String = h200.lines().map(|l| if l.starts_with("compute_capability:") { "compute_capability: '99.9'\n".to_string() } else { format!("{l}\n") }).collect();
    std::fs::write(dir.join("future.yaml"), future).unwrap();
    for (profile, why) in [("plain.yaml", "no estimated time: the profile has no `memory_bandwidth_gb_s`"), ("future.yaml", "no estimated time: compute capability 99.9 is not in the throughput table")] {
        let out = metafork(&dir, &["tune", &example("matvec"), "--device", profile, "--size", "N=40", "--estimates"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stdout).contains(why), "{profile}: {}", String::from_utf8_lossy(&out.stdout));
    }
    let out = metafork(&dir, &["tune", &example("matvec"), "--device", "h200", "--size", "N=40"]);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("no estimated time"), "{}", String::from_utf8_lossy(&out.stdout));
}

/// Issue 24.2: `tune` decides with what the compiled leaves really use. On an sm_80 profile
/// (the a100's, with 32768 registers per block, as sm_80 parts with half the register file
/// would have) matmul's favourite leaf needs more registers than estimated (40 against 32);
/// every configuration `tune` lists is one the generated dispatcher, given the same compiled
/// counts (as `cudaFuncGetAttributes` reports them), selects with the same leaf, and some
/// configurations the estimates would list (1024 threads of 40 registers) are ones it refuses.
#[test]
fn tune_lists_only_what_the_dispatcher_selects_with_real_counts() {
    let (Some(_), Some(cxx)) = (nvcc(), cxx()) else { return };
    let dir = scratch("tune-real-counts");
    let ex = example("matmul");
    let a100 = constraints::device::BUILT_IN.iter().find(|(n, _)| *n == "a100").unwrap().1;
    let small: String = a100.lines().map(|l| if l.starts_with("registers_per_block:") { "registers_per_block: 32768\n".to_string() } else if l.starts_with("name:") { "name: a100-32k\n".to_string() } else { format!("{l}\n") }).collect();
    let profile = dir.join("a100-32k.yaml");
    std::fs::write(&profile, small).unwrap();
    let profile = profile.display().to_string();
    let listed = |extra: &[&str]| -> Vec<serde_json::Value> {
        let mut args = vec!["tune", ex.as_str(), "--device", profile.as_str(), "--size", "n=2048", "--json"];
        args.extend(extra);
        let out = metafork(&dir, &args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let real = listed(&[]);
    let estimated = listed(&["--estimates"]);
    let key = |c: &serde_json::Value| c["parameters"].to_string();
    let real_leaf: std::collections::BTreeMap<String, String> = real.iter().map(|c| (key(c), c["leaf"].to_string())).collect();
    let refused: Vec<&serde_json::Value> = estimated.iter().filter(|c| !real_leaf.contains_key(&key(c))).collect();
    // Where the real counts exceed the estimates, they decide otherwise: a configuration
    // refused, or taken by another leaf (the selection's second pass).
    let moved = estimated.iter().filter(|c| real_leaf.get(&key(c)).is_some_and(|leaf| *leaf != c["leaf"].to_string())).count();
    assert!(!refused.is_empty() || moved > 0, "the estimates and the real counts decide alike everywhere");
    // The dispatcher, with the compiled counts.
    let out = metafork(&dir, &["gen", "--emit-cuda", &ex, "-o", "out"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&ex).unwrap();
    let program = check_source(&ex, &text).unwrap();
    let function = &program.kernels[0];
    let backend = constraints::solver::Backend::default();
    let tree = metafork::tree::build(function, Kernel::from_schedule(function, &function.schedules[0]).unwrap(), &backend).unwrap();
    let device = DeviceProfile::load(&profile).unwrap();
    let reports = metafork::compiled::compile_leaves(function, &tree, "sm_80").unwrap();
    let dispatcher = Dispatcher::new(function, &tree).unwrap();
    let registers: Vec<String> = dispatcher.kernels.iter().map(|k| reports[k].registers.to_string()).collect();
    let most: Vec<String> = dispatcher.kernels.iter().map(|k| metafork::compiled::max_threads(reports[k].registers, &device).to_string()).collect();
    assert!(dispatcher.kernels.iter().any(|k| { let leaf = estimated.iter().find(|c| c["leaf"] == k.as_str()); leaf.is_some_and(|c| c["counters"]["registers"].as_i64().unwrap() < reports[k].registers as i64) }), "estimate and real count differ");
    let row = |c: &serde_json::Value, expect: &str| format!("  {{{}, {}, {}, {}, {}}},\n", c["parameters"]["n"], c["parameters"]["B0"], c["parameters"]["ub1"], c["parameters"]["s"], expect);
    let mut cases = String::new();
    for c in &real {
        let leaf = dispatcher.kernels.iter().position(|k| c["leaf"] == k.as_str()).unwrap();
        cases += &row(c, &leaf.to_string());
    }
    for c in &refused {
        let leaf = dispatcher.kernels.iter().position(|k| c["leaf"] == k.as_str()).unwrap();
        cases += &row(c, &format!("-100 - {leaf}"));
    }
    let l = DeviceLimits::of(&device);
    std::fs::write(
        dir.join("out/main.cpp"),
        format!(
            "#include <cstdio>\n#include \"matmul_dispatch.h\"\nint main() {{\n  const metafork_device d = {{{}, {}, {}, {}, {}, {}, {}, {}}};\n  const metafork_matmul_compiled k = {{{{{}}}, {{{}}}}};\n  const long long cases[][5] = {{\n{cases}  }};\n  int bad = 0;\n  for (auto &c : cases) {{\n    metafork_matmul_params p = {{c[0], c[1], c[2], c[3]}};\n    int got = metafork_matmul_select(&d, &k, &p, 0);\n    bool ok = c[4] >= 0 ? got == c[4] : got != -100 - c[4];\n    if (!ok) {{ printf(\"B0=%lld ub1=%lld s=%lld: select %d, expected %lld\\n\", c[1], c[2], c[3], got, c[4]); bad++; }}\n  }}\n  return bad != 0;\n}}\n",
            l.registers_per_thread, l.shared_memory_per_block_optin, l.shared_memory_per_block, l.threads_per_block, l.registers_per_block, l.registers_per_multiprocessor, l.warps_per_multiprocessor, l.multiprocessors,
            registers.join(", "), most.join(", ")
        ),
    )
    .unwrap();
    let o = Command::new(&cxx).args(["-std=c++11", "-O1", "-o"]).arg(dir.join("out/main")).arg(dir.join("out/main.cpp")).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let run = Command::new(dir.join("out/main")).output().unwrap();
    assert!(run.status.success(), "tune and the dispatcher disagree:\n{}", String::from_utf8_lossy(&run.stdout));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Sweep H's register-heavy kernel on an H200: with the estimates as the counts (`--estimates`)
/// as with ptxas's, the block sizes where the code's own leaves do not fit by the registers
/// allocated per warp (928 and 960 threads: 68-72 registers) are listed on the register-capped
/// leaf the dispatcher falls back to, never on a leaf whose block cannot be resident
/// (before: listed at occupancy 0 on the 68-register leaf, or not at all and unexplained);
/// a block size no leaf takes (more threads than the device's blocks hold) is counted.
#[test]
fn block_sizes_where_only_the_capped_leaf_fits_are_listed_on_it_and_refusals_counted() {
    let dir = scratch("tune-capped");
    std::fs::write(dir.join("acc.mf"), crate::common::accumulators_source(56)).unwrap();
    let mut modes = vec![vec!["--estimates"]];
    if nvcc().is_some() {
        modes.push(vec![]);
    }
    for mode in modes {
        let mut args = vec!["tune", "acc.mf", "--device", "h200", "--size", "N=1000000", "--size", "M=8", "--range", "B=896,928,960,2048", "--json"];
        args.extend(&mode);
        let out = metafork(&dir, &args);
        assert!(out.status.success(), "{mode:?}: {}", String::from_utf8_lossy(&out.stderr));
        let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
        for b in [928, 960] {
            let row = rows.iter().find(|c| c["parameters"]["B"] == b).unwrap_or_else(|| panic!("{mode:?}: B = {b} not listed: {rows:?}"));
            let registers = row["counters"]["registers"].as_i64().unwrap();
            // Resident: registers allocated per warp in units of 256 (8 per thread) for every thread.
            assert!((registers + 7) / 8 * 8 * b <= 65536, "{mode:?}: B = {b} on {} with {registers} registers", row["leaf"]);
        }
        assert!(rows.iter().all(|c| c["counters"]["occupancy"].as_f64().unwrap() > 0.0), "{mode:?}: {rows:?}");
        assert!(rows.iter().all(|c| c["parameters"]["B"] != 2048));
        args.retain(|a| *a != "--json");
        let table = String::from_utf8(metafork(&dir, &args).stdout).unwrap();
        assert!(table.contains("1 more have no kernel leaf that fits the device"), "{mode:?}: {table}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A reduction's answer in the harness (found on an H200: at n = 2^24 every block-reduced dot
/// product differed from the serial float sum by 2.3% and was reported MISMATCH). The harness's
/// own host functions, compiled by nvcc around a driver that replaces its `main`, try five
/// answers for the dot product: the serial float sum, the exact sum, the exact sum 1% high, the
/// sum without a tenth of its terms, NaN. At n = 1024 the rounding bound of any order is tight:
/// only the first two match. At n = 2^22 the serial sum is itself beyond rtol of the exact one
/// (the accurate sum is what lets the exact answer match), and the bound of 2^22 float terms
/// is two thirds of the sum: everything finite matches (the weakness the help text states).
#[test]
fn harness_accepts_any_order_of_a_reduction_and_refuses_a_wrong_sum() {
    let Some(nvcc) = nvcc() else { return };
    let dir = scratch("tune-harness-reduction");
    for (n, expected) in [(1024, "1 1 0 0 0"), (4194304, "1 1 1 1 0")] {
        let h = dir.join(format!("dot{n}"));
        let size = format!("n={n}");
        let out = metafork(&dir, &["tune", &example("dot"), "--device", "h200", "--size", &size, "--top", "2", "--emit-harness", h.to_str().unwrap()]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let harness = std::fs::read_to_string(h.join("dot_harness.cu")).unwrap();
        assert!(harness.contains("METAFORK_REDUCE(s["), "the serial program's reduction goes through the macro");
        std::fs::write(h.join("driver.cu"), r#"#define main metafork_harness_main
#include "dot_harness.cu"
#undef main
int main() {
  metafork_setup();
  if (metafork_serial(metafork_candidates[0].v, true) != 0) return 10;
  size_t n = metafork_arrays[0].bytes / sizeof(float);
  const float *x = (const float *)metafork_arrays[0].host, *y = (const float *)metafork_arrays[1].host;
  double exact = ((const float *)metafork_arrays[2].host)[0], tenth = 0;
  for (size_t i = 0; i < n; i++) { exact += (double)x[i] * y[i]; if (i % 10 == 0) tenth += (double)x[i] * y[i]; }
  float serial = ((const float *)metafork_arrays[2].answer)[0];
  float *got = (float *)metafork_arrays[2].result;
  const double tried[] = {serial, exact, exact * 1.01, exact - tenth, NAN};
  for (double t : tried) {
    got[0] = (float)t;
    bool within = false;
    metafork_difference(true, &within);
    printf("%d ", within);
  }
  printf("\n%.9g %.9g\n", serial, exact);
  return 0;
}
"#).unwrap();
        let mut sources: Vec<PathBuf> = std::fs::read_dir(&h).unwrap().map(|e| e.unwrap().path()).filter(|p| p.file_name().unwrap().to_str().unwrap().contains("_leaf")).collect();
        sources.sort();
        let o = Command::new(&nvcc).args(["-O2", "-arch=sm_90", "-Xcompiler", "-Wall", "-o"]).arg(h.join("driver")).arg(h.join("driver.cu")).args(&sources).output().unwrap();
        assert!(o.status.success(), "nvcc: {}", String::from_utf8_lossy(&o.stderr));
        let o = Command::new(h.join("driver")).current_dir(&h).output().unwrap();
        assert!(o.status.success(), "n = {n}: {}", String::from_utf8_lossy(&o.stderr));
        let text = String::from_utf8(o.stdout).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0].trim(), expected, "n = {n}: {text}");
        let sums: Vec<f64> = lines[1].split(' ').map(|v| v.parse().unwrap()).collect();
        let apart = (sums[0] - sums[1]).abs() > 1e-4 * sums[1].abs();
        assert_eq!(apart, n > 1024, "n = {n}: the serial float sum is beyond rtol of the exact one only at the large size: {text}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A program of two schedules gets one harness program each (found by a user: `nvcc *.cu` in
/// the directory met two `main`s). `tune` prints each one's build command, which builds it from
/// its own files without a warning (`-Wall`; the schedule without a floating reduction has no
/// reduction machinery to leave unused), and each program lists its own schedule's candidates.
#[test]
fn each_schedule_gets_a_harness_built_by_the_printed_command() {
    let Some(nvcc) = nvcc() else { return };
    let dir = scratch("tune-harness-schedules");
    let out = metafork(&dir, &["tune", &example("polybench/atax"), "--device", "h100", "--size", "m=512", "--size", "n=512", "--top", "2", "--emit-harness", "h"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let builds: Vec<(&str, &str)> = text.lines().filter_map(|l| l.strip_prefix("harness for `")).map(|l| { let (s, rest) = l.split_once('`').unwrap(); (s, rest.split_once(": ").unwrap().1) }).collect();
    assert_eq!(builds.iter().map(|(s, _)| *s).collect::<Vec<_>>(), ["kernel_atax_0", "kernel_atax_1"], "{text}");
    for (schedule, command) in &builds {
        let words: Vec<&str> = command.split(' ').collect();
        assert_eq!(words[0], "nvcc");
        let o = Command::new(&nvcc).current_dir(dir.join("h")).args(&words[1..]).args(["-Xcompiler", "-Wall"]).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success() && !err.contains("warning"), "{schedule}: {command}: {err}");
        let harness = std::fs::read_to_string(dir.join(format!("h/{schedule}_harness.cu"))).unwrap();
        assert!(harness.lines().nth(1).unwrap().contains(command.as_ref() as &str), "the harness's own build line");
        let list = Command::new(dir.join(format!("h/{schedule}_harness"))).arg("--list").output().unwrap();
        let listed = String::from_utf8(list.stdout).unwrap();
        assert!(!listed.is_empty() && listed.lines().all(|l| l.split('\t').nth(1).unwrap().starts_with(&format!("{schedule}_leaf"))), "{schedule}: {listed}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Sizes at which the program's own host arithmetic overflows its C types are refused (a
/// helper's: `tune` ranked `x[n * n * n]` at n = 2000 as 8e9 elements while the harness's `int`
/// product wrapped to nothing, and every configuration "matched"). Where only some
/// configurations overflow (`(n + B - 1) / B` near INT_MAX), those are not admissible.
#[test]
fn sizes_that_overflow_the_programs_arithmetic_are_refused() {
    let dir = scratch("tune-overflow");
    std::fs::write(dir.join("cube.mf"), "void cube(int n, int B, const float x[n * n * n], float s[1]) {\n  assume(n >= 1 && B >= 1);\n  int g = (n * n * n + B - 1) / B;\n  meta_schedule {\n    meta_for (int v = 0; v < g; v++)\n      meta_for (int u = 0; u < B; u++) {\n        int i = v * B + u;\n        if (i < n * n * n) s[0] += x[i];\n      }\n  }\n}\n").unwrap();
    let out = metafork(&dir, &["tune", "cube.mf", "--device", "h100", "--size", "n=2000", "--estimates", "-o", "t.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("at n = 2000, `g` = `(n * n * n + B - 1) / B`: `n * n * n` overflows `int`"), "{err}");
    assert!(!dir.join("t.yaml").exists());
    let out = metafork(&dir, &["tune", "cube.mf", "--device", "h100", "--size", "n=1000", "--estimates", "--json"]);
    assert!(out.status.success(), "n = 1000 fits: {}", String::from_utf8_lossy(&out.stderr));
    let out = metafork(&dir, &["tune", &example("dot"), "--device", "h100", "--size", "n=2147483647", "--estimates"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no configuration keeps the program's arithmetic defined"), "{}", String::from_utf8_lossy(&out.stderr));
    let count = |n: &str| -> usize {
        let out = metafork(&dir, &["tune", &example("dot"), "--device", "h100", "--size", n, "--estimates", "--json"]);
        assert!(out.status.success(), "{n}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<Vec<serde_json::Value>>(&out.stdout).unwrap().len()
    };
    let (near, far) = (count("n=2147483000"), count("n=4096"));
    assert!(0 < near && near < far, "the block sizes for which n + B - 1 overflows are left out: {near} of {far}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A configuration whose grid is empty at the given sizes (transposition's `N / (B1*s)` is 0
/// when `B1*s > N`) runs nothing. It is left out of the ranking, and counted in the table,
/// instead of being listed with a time of 0, which used to turn the whole schedule's ranking
/// over to the occupancy fallback: every transposition configuration was then ordered by
/// occupancy alone (the ninth session's H200 sweep: the measured fastest went from the
/// model's 69th to its 11th place once they were left out, bench/RESULTS.md).
#[test]
fn configurations_that_launch_nothing_are_left_out_and_the_model_ranks_the_rest() {
    let dir = scratch("tune-idle");
    let args = ["tune", &example("transpose"), "--device", "h200", "--size", "N=4096", "--estimates"];
    let out = metafork(&dir, &args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let idle: usize = text.lines().find_map(|l| l.trim().strip_suffix(" more run no thread block at these sizes (a grid extent is 0): not listed")).expect(&text).parse().unwrap();
    assert!(idle > 0, "{text}");
    let out = metafork(&dir, &[&args[..], &["--json"]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let times: Vec<f64> = json.iter().map(|c| c["estimated_seconds"].as_f64().expect("every listed configuration has a time")).collect();
    let best = times.iter().cloned().fold(f64::INFINITY, f64::min);
    for (c, t) in json.iter().zip(&times) {
        let p = &c["parameters"];
        let (b0, b1, s) = (p["B0"].as_i64().unwrap(), p["B1"].as_i64().unwrap(), p["s"].as_i64().unwrap());
        assert!(b0 <= 4096 && b1 * s <= 4096, "a configuration with an empty grid is listed: {c}");
        assert!(*t > 0.0, "{c}");
        // Ranked by the data-movement model: the score is the best time over this one's.
        assert!((c["score"].as_f64().unwrap() - best / t).abs() < 1e-9, "{c}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A `long` data parameter at a size past `int`, in a `max` with a `long` element: the harness
/// holds each parameter in its declared type (the candidates' table in `long long`), so nvcc
/// compiles it (before: `const int L`, a narrowing table and an ambiguous `max(int, long)`).
#[test]
fn harness_keeps_long_parameters_long() {
    let dir = scratch("tune-long-parameter");
    let source = dir.join("f.mf");
    std::fs::write(&source, "void f(int N, int B, long L, long ly[N]) {\n  assume(N >= 1 && B >= 1);\n  meta_schedule {\n    meta_for (int i = 0; i < (N + B - 1) / B; i++)\n      meta_for (int j = 0; j < B; j++) {\n        int p = i * B + j;\n        if (p < N) ly[p] = max(L, ly[p]);\n      }\n  }\n}\n").unwrap();
    let out = metafork(&dir, &["tune", source.to_str().unwrap(), "--device", "a100", "--size", "N=1024", "--size", "L=5000000000", "--top", "2", "--emit-harness", "h"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let harness = std::fs::read_dir(dir.join("h")).unwrap().map(|e| e.unwrap().path()).find(|p| p.to_string_lossy().ends_with("_harness.cu")).expect("a harness");
    let text = std::fs::read_to_string(&harness).unwrap();
    assert!(text.contains("const long L = (long)metafork_v[") && text.contains("5000000000"), "{text}");
    if let Some(nvcc) = nvcc() {
        let o = Command::new(&nvcc).current_dir(dir.join("h")).args(["-arch=sm_80", "-O0", "-c", harness.file_name().unwrap().to_str().unwrap(), "-o", "h.o"]).output().unwrap();
        assert!(o.status.success(), "nvcc rejected the harness:\n{}", String::from_utf8_lossy(&o.stderr));
    }
}

/// A matrix of 70000 rows puts matadd's grid past 65535 blocks along y wherever a block holds
/// one row (`N / B0` with `B0 = 1`): the launch would fail, so neither the dispatcher nor tune
/// admits those configurations. tune counts them, and every configuration it lists has a grid
/// the H200 allows.
#[test]
fn configurations_whose_grid_the_device_refuses_are_not_listed() {
    let dir = scratch("tune-grid-limit");
    let out = metafork(&dir, &["tune", &example("matadd"), "--device", "h200", "--size", "N=70000", "--estimates", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!json.is_empty());
    let text = std::fs::read_to_string(example("matadd")).unwrap();
    let program = check_source("matadd.mf", &text).unwrap();
    let k = &program.kernels[0];
    let tree = metafork::tree::build(k, Kernel::from_schedule(k, &k.schedules[0]).unwrap(), &Default::default()).unwrap();
    let d = Dispatcher::new(k, &tree).unwrap();
    let h200 = DeviceProfile::load("h200").unwrap();
    let limits = DeviceLimits::of(&h200);
    let leaf_code = |name: &str| tree.leaves().find(|l| metafork::emit::tree_files::leaf_kernel_name(&tree, l.id) == name).map(|l| l.staged.clone()).unwrap();
    for c in &json {
        let point: BTreeMap<String, i64> = c["parameters"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.as_i64().unwrap())).collect();
        let (grid, _) = metafork::perf::movement::launch_shape(k, &leaf_code(c["leaf"].as_str().unwrap()), &point).unwrap();
        assert!((0..3).all(|i| grid[i] <= limits.max_grid[i]), "{c}: grid {grid:?}");
    }
    // One row per block: the grid's y extent is 70000, and the selection says so.
    let one_row = BTreeMap::from([("N".to_string(), 70000), ("B0".to_string(), 1), ("B1".to_string(), 256)]);
    assert_eq!(d.select(&limits, &[], &one_row).unwrap(), Selection::GridTooLarge(1));
    assert_eq!(d.select_exact(&limits, &[], &one_row).unwrap(), Selection::GridTooLarge(1));
    assert!(json.iter().all(|c| c["parameters"]["B0"].as_i64() != Some(1)), "B0 = 1 needs 70000 blocks along y");
    let unknown = DeviceLimits { max_grid: [0, 0, 0], ..limits };
    assert!(matches!(d.select(&unknown, &[], &one_row).unwrap(), Selection::Leaf(_)), "limits not known are not checked");
    let table = metafork(&dir, &["tune", &example("matadd"), "--device", "h200", "--size", "N=70000", "--estimates"]);
    let table = String::from_utf8_lossy(&table.stdout);
    let refused: usize = table.lines().find_map(|l| l.trim().strip_suffix(" more need more thread blocks along a grid dimension than the device allows: not listed")).expect(&table).parse().unwrap();
    assert!(refused > 0, "{table}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A host loop's local (`int u = t * 2` inside `for (t ...)`) is declared inside that loop in
/// the harness's serial program, where its counter is bound (it was declared above the loop,
/// and nvcc refused the harness).
#[test]
fn harness_declares_a_host_loop_local_inside_its_loop() {
    let dir = scratch("tune-host-local");
    let source = dir.join("f.mf");
    std::fs::write(&source, "void f(int N, int B, int T, float y[N]) {\n  assume(N >= 1 && B >= 1 && T >= 1);\n  int w = N * 2;\n  for (int t = 0; t < T; t++) {\n    int u = t * 2 + w;\n    int v = u + 1;\n    meta_schedule {\n      meta_for (int i = 0; i < (N + B - 1) / B; i++)\n        meta_for (int j = 0; j < B; j++) {\n          int p = i * B + j;\n          if (p < N) y[p] = y[p] + v;\n        }\n    }\n  }\n}\n").unwrap();
    let out = metafork(&dir, &["tune", source.to_str().unwrap(), "--device", "h200", "--size", "N=4096", "--size", "T=3", "--top", "2", "--emit-harness", "h"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let harness = dir.join("h/f_harness.cu");
    let text = std::fs::read_to_string(&harness).unwrap();
    let serial = &text[text.find("static int metafork_serial_run").unwrap()..];
    let at = |needle: &str| serial.find(needle).unwrap_or_else(|| panic!("no `{needle}` in {serial}"));
    assert!(at("const int w = ") < at("for (int t = 0;") && at("for (int t = 0;") < at("const int u = ") && at("const int u = ") < at("const int v = "), "{serial}");
    if let Some(nvcc) = nvcc() {
        let leaves: Vec<String> = std::fs::read_dir(dir.join("h")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).filter(|n| n.ends_with(".cu") && n != "f_harness.cu").collect();
        let o = Command::new(&nvcc).current_dir(dir.join("h")).args(["-arch=sm_80", "-O0", "-o", "harness", "f_harness.cu"]).args(&leaves).output().unwrap();
        assert!(o.status.success(), "nvcc rejected the harness:\n{}", String::from_utf8_lossy(&o.stderr));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The harness's wisdom gives the data sizes as `sizes` and every program parameter as the
/// configuration, a program parameter fixed with `--size` too: `gen --wisdom` refuses a
/// program parameter among the sizes, and a configuration without every program parameter.
#[test]
fn the_harness_wisdom_sets_every_program_parameter_and_sizes_only_data() {
    let dir = scratch("tune-wisdom-roles");
    let out = metafork(&dir, &["tune", &example("saxpy"), "--device", "h200", "--size", "N=1024", "--size", "B=64", "--emit-harness", "h"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(dir.join("h/saxpy_harness.cu")).unwrap();
    assert!(text.contains("static const char *const metafork_param_names[METAFORK_PARAMS] = {\"B\", \"N\"};"), "{text}");
    assert!(text.contains("static const int metafork_param_tuned[METAFORK_PARAMS] = {1, 0};"), "{text}");
    assert!(text.contains("static const char *const metafork_sizes = \"N: 1024\";"), "{text}");
    // Built for the device's architecture (an sm_90 binary has no image for an A100).
    assert!(text.contains("nvcc -O3 -arch=sm_90 "), "{text}");
    let out = metafork(&dir, &["tune", &example("saxpy"), "--device", "a100", "--size", "N=1024", "--emit-harness", "h80"]);
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("nvcc -O3 -arch=sm_80 "), "{}", String::from_utf8_lossy(&out.stdout));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A parameter only another schedule reads (`G`, the second schedule's granularity) does not
/// multiply the first schedule's list: configurations that differ only in it are one, and the
/// table says how many were folded; the second schedule still enumerates it.
#[test]
fn parameters_a_schedule_does_not_read_are_not_enumerated_for_it() {
    let dir = scratch("tune-unread");
    std::fs::write(dir.join("two.mf"), "void two(int N, int B, int G, const float x[N], float y[N], float z[N]) {\n  assume(N >= 1 && B >= 1 && G >= 1);\n  meta_schedule {\n    meta_for (int b = 0; b < (N + B - 1) / B; b++)\n      meta_for (int t = 0; t < B; t++) {\n        int i = b * B + t;\n        if (i < N) y[i] = 2.0f * x[i];\n      }\n  }\n  meta_schedule {\n    meta_for (int b = 0; b < (N + B * G - 1) / (B * G); b++)\n      meta_for (int t = 0; t < B; t++)\n        for (int k = 0; k < G; k++) {\n          int i = (b * B + t) * G + k;\n          if (i < N) z[i] = x[i] + 1.0f;\n        }\n  }\n}\n").unwrap();
    let listed = |schedule: &str| -> Vec<(i64, i64)> {
        let out = metafork(&dir, &["tune", "two.mf", "--device", "h100", "--size", "N=100000", "--schedule", schedule, "--estimates", "--json"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let json: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
        json.iter().map(|c| (c["parameters"]["B"].as_i64().unwrap(), c["parameters"]["G"].as_i64().unwrap())).collect()
    };
    let first = listed("two_0");
    let blocks: BTreeSet<i64> = first.iter().map(|(b, _)| *b).collect();
    assert_eq!(blocks.len(), first.len(), "each block size once: {first:?}");
    let second = listed("two_1");
    assert!(second.len() > first.len() && second.iter().any(|(_, g)| *g > 1), "{second:?}");
    let table = metafork(&dir, &["tune", "two.mf", "--device", "h100", "--size", "N=100000", "--schedule", "two_0", "--estimates"]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.contains("more differ from a listed one only in parameters schedule `two_0` does not read: not listed"), "{table}");
    // The heading says what `G` is to this schedule, not that it is its granularity.
    assert!(table.contains("G (not read by this schedule)") && !table.contains("G (granularity)"), "{table}");
    let table = metafork(&dir, &["tune", "two.mf", "--device", "h100", "--size", "N=100000", "--schedule", "two_1", "--estimates"]);
    assert!(String::from_utf8_lossy(&table.stdout).contains("G (granularity)"), "{}", String::from_utf8_lossy(&table.stdout));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A serial loop bounded by a host loop's counter (`k < d` inside `for (d ...)`) has a trip
/// count at the launch of the middle iteration, so the data-movement model times every
/// configuration (it gave none a time, and ranked by the counters alone without saying why).
#[test]
fn a_loop_bounded_by_a_host_counter_is_timed_at_the_middle_iteration() {
    let dir = scratch("tune-host-counter-bound");
    std::fs::write(dir.join("hl.mf"), "void hl(int N, int T, int B, const float x[N], float y[T][N]) {\n  assume(N >= 1 && T >= 1 && B >= 1);\n  for (int d = 0; d < T; d++) {\n    meta_schedule {\n      meta_for (int b = 0; b < (N + B - 1) / B; b++)\n        meta_for (int t = 0; t < B; t++) {\n          int i = b * B + t;\n          if (i < N) {\n            float s = 0.0f;\n            for (int k = 0; k < d; k++)\n              s += x[(i + k) % N];\n            y[d][i] = s;\n          }\n        }\n    }\n  }\n}\n").unwrap();
    let time_at = |t: &str| -> f64 {
        let out = metafork(&dir, &["tune", "hl.mf", "--device", "h100", "--size", "N=100000", "--size", t, "--estimates", "--json"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let json: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
        assert!(!json.is_empty() && json.iter().all(|c| c["estimated_seconds"].as_f64().is_some_and(|s| s > 0.0)), "{json:?}");
        json[0]["estimated_seconds"].as_f64().unwrap()
    };
    // The middle iteration's loop runs about T/2 times: more steps, more time.
    assert!(time_at("T=256") > time_at("T=16"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A banded loop (`j` from `max(0, i - K)` to `min(N - 1, i + K)`) gets an estimated time: the
/// model counts the trips of loops bounded by `min`/`max`. Where it cannot count them (a bound
/// read from an array), the table says why every configuration is ranked by the counters,
/// instead of showing "-" with no reason.
#[test]
fn banded_loops_are_estimated_and_a_missing_estimate_is_explained() {
    let dir = scratch("tune-banded");
    let band = |bound: &str| format!("void band(int N, int K, int B, const double A[N][2 * K + 1], const double x[N], const int len[N], double y[N]) {{\n  assume(N >= 1 && K >= 0 && B >= 1);\n  meta_schedule {{\n    meta_for (int v = 0; v < (N + B - 1) / B; v++)\n      meta_for (int u = 0; u < B; u++) {{\n        int i = v * B + u;\n        if (i < N) {{\n          double acc = 0.0;\n          for (int j = max(0, i - K); j <= {bound}; j++)\n            acc += A[i][j - i + K] * x[j];\n          y[i] = acc;\n        }}\n      }}\n  }}\n}}\n");
    std::fs::write(dir.join("band.mf"), band("min(N - 1, i + K)")).unwrap();
    let out = metafork(&dir, &["tune", "band.mf", "--device", "h100", "--size", "N=100000", "--size", "K=3", "--estimates", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!json.is_empty() && json.iter().all(|c| c["estimated_seconds"].as_f64().is_some_and(|s| s > 0.0)), "{json:?}");
    // A bound the model cannot evaluate: said once, in the table's head.
    std::fs::write(dir.join("len.mf"), band("min(N - 1, i + len[i])")).unwrap();
    let out = metafork(&dir, &["tune", "len.mf", "--device", "h100", "--size", "N=100000", "--size", "K=3", "--estimates"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("have no estimated time (the model could not count the trips of a loop"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--schedule` with a name the file does not have lists the names it has, with their functions
/// (a function's schedules may be named otherwise: `f_0`, `f_1`, or `mfu_...` where a name
/// would clash with generated symbols).
#[test]
fn an_unknown_schedule_is_answered_with_the_names_there_are() {
    let dir = scratch("tune-unknown-schedule");
    let out = metafork(&dir, &["tune", &example("jacobi1d"), "--device", "h100", "--size", "N=1024", "--size", "T=4", "--schedule", "jacobi"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no schedule named `jacobi`") && err.contains("its schedules: `"), "{err}");
    let program = check_source("j.mf", &std::fs::read_to_string(example("jacobi1d")).unwrap()).unwrap();
    for s in program.kernels.iter().flat_map(|k| &k.schedules) {
        assert!(err.contains(&format!("`{}`", s.name)), "{} missing: {err}", s.name);
    }
}

/// Every candidate is either listed or counted with why (the header's "k of n candidates"):
/// a configuration where the program is undefined (a grid `N * M + B - 1` past `int`) was
/// dropped without a word, as was one the facts rule out. And a leaf whose own grid
/// (a strategy's `N / B * 2`) overflows `int` no longer takes the point out of the program:
/// another leaf is listed there.
#[test]
fn every_candidate_is_listed_or_counted_with_why() {
    let dir = scratch("tune-counted");
    let undefined = "void ov(int N, int M, int B, const float a[N], float c[N]) {\n  meta_schedule {\n    meta_for (int v = 0; v < (N * M + B - 1) / B; v++)\n      meta_for (int u = 0; u < B; u++) {\n        int i = v * B + u;\n        if (i < N) c[i] = a[i];\n      }\n  }\n}\n";
    std::fs::write(dir.join("ov.mf"), undefined).unwrap();
    let split = "void split(int N, int B, float a[N], float b[N]) {\n  assume(N >= 1 && B >= 1);\n  meta_schedule {\n    meta_for (int v = 0; v < N / B; v++)\n      meta_for (int u = 0; u < B; u++) {\n        int i = v * B + u;\n        a[i] = 1.0f;\n        b[i] = 2.0f;\n      }\n  }\n}\n";
    std::fs::write(dir.join("split.mf"), split).unwrap();
    // (candidates in the header, listed + every "k more ..." line).
    let sum_of_counts = |text: &str| -> (u64, u64) {
        let of: Vec<u64> = text.lines().next().unwrap().split(' ').filter_map(|w| w.parse().ok()).collect();
        let counted: u64 = text.lines().filter_map(|l| l.trim().split_once(" more ")).filter_map(|(n, _)| n.parse::<u64>().ok()).sum();
        (of[1], of[0] + counted)
    };
    let runs: [(&str, &[&str], &str); 3] = [
        ("ov", &["--size", "N=46341", "--size", "M=46341", "--range", "B=1,2,64"], "3 more are ruled out by the program's facts"),
        ("ov", &["--size", "N=46341", "--size", "M=46340", "--range", "B=1,2,64"], "ov on h200: 3 of 3 "),
        ("split", &["--size", "N=1073741824", "--range", "B=1,2"], "split on h200: 2 of 2 "),
    ];
    for (name, args, wanted) in runs {
        let file = format!("{name}.mf");
        let out = metafork(&dir, &[&["tune", file.as_str(), "--device", "h200", "--estimates"][..], args].concat());
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout);
        let (candidates, accounted) = sum_of_counts(&text);
        assert_eq!(candidates, accounted, "{name} {args:?}: {text}");
        assert!(text.contains(wanted), "{name} {args:?}: {text}");
    }
    let out = metafork(&dir, &["tune", &example("matadd"), "--device", "h200", "--estimates", "--size", "N=1000"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let (candidates, accounted) = sum_of_counts(&text);
    assert_eq!(candidates, accounted, "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A grid that truncates a division (`dim1 = N / (2 * B1)`) runs fewer iterations where the
/// divisor leaves a remainder: at N = 1000, B1 = 256 matrix addition computes 512 of the 1000
/// columns, and the time model ranked it first for that. Such configurations are marked, with
/// the division and its remainder, and ranked after every configuration that runs them all;
/// exactly those where a division has a remainder are marked. A grid rounded up
/// (`(N + B - 1) / B`) marks nothing.
#[test]
fn configurations_whose_grid_truncates_are_marked_and_ranked_last() {
    let dir = scratch("tune-truncates");
    let out = metafork(&dir, &["tune", &example("matadd"), "--device", "h200", "--estimates", "--size", "N=1000", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let configs: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let mut seen_partial = false;
    let (mut all, mut partial) = (0, 0);
    for c in &configs {
        let (b0, b1) = (c["parameters"]["B0"].as_i64().unwrap(), c["parameters"]["B1"].as_i64().unwrap());
        let truncates = 1000 % b0 != 0 || 1000 % (2 * b1) != 0;
        assert_eq!(c["leaves_out"].is_string(), truncates, "{c}");
        if truncates {
            seen_partial = true;
            partial += 1;
            let why = c["leaves_out"].as_str().unwrap();
            assert!(why.contains("has remainder") && why.contains("N = 1000"), "{why}");
        } else {
            assert!(!seen_partial, "a configuration that runs every iteration is ranked after one that does not: {c}");
            all += 1;
        }
    }
    assert!(all > 0 && partial > 0, "{all} {partial}");
    let text = metafork(&dir, &["tune", &example("matadd"), "--device", "h200", "--estimates", "--size", "N=1000"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains(&format!("{partial} of them leave iterations out")) && text.contains("`N / (2 * B1)` has remainder"), "{text}");
    let out = metafork(&dir, &["tune", &example("saxpy"), "--device", "h200", "--estimates", "--size", "N=1000", "--json"]);
    let configs: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!configs.is_empty() && configs.iter().all(|c| c["leaves_out"].is_null()), "a grid rounded up runs every iteration");
    std::fs::remove_dir_all(&dir).unwrap();
}
