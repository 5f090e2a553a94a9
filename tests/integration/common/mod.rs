//! Helpers shared by integration tests: the example programs, their trees, a seeded generator.
#![allow(dead_code)] // each test crate uses its own subset

use constraints::solver::Backend;
use metafork::frontend::check_source;
use metafork::frontend::model::KernelFunction;
use metafork::kernel::Kernel;
use metafork::tree::{build, Tree};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Every `examples/*.mf` as (path, text), sorted by path.
pub fn examples() -> Vec<(String, String)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples");
    let mut v: Vec<(String, String)> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "mf")).map(|p| (p.display().to_string(), std::fs::read_to_string(&p).unwrap())).collect();
    v.sort();
    v
}

/// The decision tree of every schedule of a program, with its function. Built once per test
/// run for each distinct (path, text): the tests share one binary (`main.rs`), and building
/// the examples' trees is the most expensive fixture they have; a tree is a pure function of
/// the source, so every caller gets the same trees a fresh build would give. `backend` is
/// charged with the queries of the builds it triggers.
pub fn trees_of(path: &str, text: &str, backend: &Backend) -> Vec<(KernelFunction, Tree)> {
    type Trees = Vec<(KernelFunction, Tree)>;
    static BUILT: OnceLock<Mutex<HashMap<(String, String), Arc<OnceLock<Trees>>>>> = OnceLock::new();
    let slot = BUILT.get_or_init(Default::default).lock().unwrap().entry((path.to_string(), text.to_string())).or_default().clone();
    // Another thread building the same trees is waited for, not repeated.
    slot.get_or_init(|| {
        let p = check_source(path, text).unwrap();
        let mut out = Vec::new();
        for k in p.kernels {
            for s in &k.schedules {
                let t = build(&k, Kernel::from_schedule(&k, s).unwrap(), backend).unwrap();
                out.push((k.clone(), t));
            }
        }
        out
    })
    .clone()
}

/// A small deterministic generator (xorshift), so tests need no extra dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % ((hi - lo + 1) as u64)) as i64
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// Whether `make test` demands the CUDA tools (and a C++ compiler): then a missing one fails.
fn tools_required() -> bool {
    std::env::var("METAFORK_REQUIRE_NVCC").as_deref() == Ok("1")
}

/// `nvcc`, or `None` (a failure under `make test`).
pub fn nvcc() -> Option<std::path::PathBuf> {
    let found = llvm_passes::ptxas::find_nvcc();
    if found.is_none() && tools_required() {
        panic!("METAFORK_REQUIRE_NVCC=1 but `nvcc` is not on PATH");
    }
    found
}

/// `cuobjdump` (NVIDIA's pip wheel, which `make setup` installs into .toolchain/sass), or
/// `None` (a failure under `make test`).
pub fn cuobjdump() -> Option<std::path::PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| std::env::split_paths(&paths).map(|d| d.join("cuobjdump")).find(|p| p.is_file()));
    let installed = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".toolchain/sass/nvidia/cu13/bin/cuobjdump");
    let found = on_path.or_else(|| installed.is_file().then_some(installed));
    if found.is_none() && tools_required() {
        panic!("METAFORK_REQUIRE_NVCC=1 but `cuobjdump` is not on PATH nor in .toolchain/sass (run `make setup`)");
    }
    found
}

/// The system C++ compiler (`c++`, `g++` or `clang++`), or `None` (a failure under `make test`).
pub fn cxx() -> Option<std::path::PathBuf> {
    let which = |name: &str| std::env::var_os("PATH").and_then(|paths| std::env::split_paths(&paths).map(|d| d.join(name)).find(|p| p.is_file()));
    let found = ["c++", "g++", "clang++"].iter().find_map(|c| which(c));
    if found.is_none() && tools_required() {
        panic!("METAFORK_REQUIRE_NVCC=1 but no system C++ compiler (c++, g++, clang++) is on PATH");
    }
    found
}

/// A fresh, empty temporary folder for one test, named unpredictably (`metafork-NAME-XXXXXX`,
/// so that no other user of the machine can place a file or a link there first). Every such
/// folder is removed, with what it holds, when the test process exits (the paths tests keep
/// into it stay valid until then); set `METAFORK_KEEP_SCRATCH=1` to keep them for a look after
/// a failure.
pub fn scratch(name: &str) -> std::path::PathBuf {
    let dir = tempfile::Builder::new().prefix(&format!("metafork-{name}-")).tempdir().unwrap().keep();
    remove_at_exit(dir.clone());
    dir
}

/// Folders [`scratch`] made, removed by [`remove_scratch`] when the process exits.
static SCRATCH: std::sync::Mutex<Vec<std::path::PathBuf>> = std::sync::Mutex::new(Vec::new());

fn remove_at_exit(dir: std::path::PathBuf) {
    static REGISTER: std::sync::Once = std::sync::Once::new();
    REGISTER.call_once(|| {
        // SAFETY: registers a function that takes no arguments and does not unwind.
        unsafe { libc::atexit(remove_scratch) };
    });
    SCRATCH.lock().unwrap_or_else(|e| e.into_inner()).push(dir);
}

extern "C" fn remove_scratch() {
    if std::env::var_os("METAFORK_KEEP_SCRATCH").is_some() {
        return;
    }
    let dirs = std::mem::take(&mut *SCRATCH.lock().unwrap_or_else(|e| e.into_inner()));
    for d in dirs {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// Run the serial program (every `meta_for` a sequential loop) with the integer parameters
/// `ints` (by name), floating scalars 0, and the arrays filled by `fill(array, flat index)`;
/// the arrays as it leaves them.
pub fn run_serial(f: &KernelFunction, ints: &[(&str, i64)], fill: &dyn Fn(&str, usize) -> metafork::verify::value::Value) -> std::collections::BTreeMap<String, metafork::verify::machine::Buffer> {
    use metafork::frontend::model::Role;
    use metafork::verify::machine::{self, Buffer, RunOptions};
    use metafork::verify::value::Value;
    use std::collections::BTreeMap;
    let point: BTreeMap<String, i64> = ints.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let exact = constraints::exact_point(&point);
    let args: Vec<Value> = f
        .params
        .iter()
        .filter(|p| p.role != Role::Array)
        .map(|p| match p.role {
            Role::Value => Value::zero(p.ty),
            _ => Value::Long(point[&p.name]).to(p.ty),
        })
        .collect();
    let mut buffers: Vec<Buffer> = f
        .arrays
        .iter()
        .map(|a| {
            let dims: Vec<i64> = a.extents.iter().map(|e| i64::try_from(e.eval(&exact).unwrap().to_integer()).unwrap()).collect();
            let mut b = Buffer::new(&a.name, a.elem, dims, Value::zero(a.elem));
            for (i, x) in b.data.iter_mut().enumerate() {
                *x = fill(&a.name, i).to(a.elem);
            }
            b
        })
        .collect();
    let host = metafork::verify::code::host(f, None).unwrap();
    machine::run(&host, &args, &mut buffers, None, RunOptions::default()).unwrap_or_else(|s| panic!("the serial program stopped at {ints:?}: {:?}", s.fault));
    buffers.into_iter().map(|b| (b.name.clone(), b)).collect()
}

/// Every leaf of every schedule of `src` proved by the verifier at `points` differential points.
pub fn assert_every_leaf_proved(name: &str, src: &str, backend: &Backend, points: usize) {
    use metafork::verify::{verify_tree, Options, Status};
    for (f, tree) in trees_of(name, src, backend) {
        let reports = verify_tree(&f, &tree, backend, Options { points, ..Options::default() }).unwrap();
        assert!(!reports.is_empty(), "{name}: no kernel leaf");
        for r in &reports {
            assert_eq!(r.status(), Status::Proved, "{name} leaf {}: {:?}", r.leaf, r.status());
        }
    }
}

/// `src` written as `file` in a fresh scratch folder `dir`, then `metafork gen --emit-cuda` into
/// its `out` and `metafork verify` of that, both asserted to succeed (every leaf proved); the
/// scratch folder and the output folder.
pub fn gen_and_verify(dir: &str, file: &str, src: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let metafork = |args: &[&str]| std::process::Command::new(env!("CARGO_BIN_EXE_metafork")).args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().unwrap();
    let dir = scratch(dir);
    let path = dir.join(file);
    std::fs::write(&path, src).unwrap();
    let out = dir.join("out");
    let o = metafork(&["gen", "--emit-cuda", path.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let o = metafork(&["verify", out.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&o.stderr));
    assert!(text.contains(" leaves proved"), "{text}");
    (dir, out)
}

/// The `.cu` files of a `gen` output folder whose name holds `holding` (`"_leaf"`: the kernels).
pub fn cu_files(out: &std::path::Path, holding: &str) -> Vec<std::path::PathBuf> {
    let mut v: Vec<std::path::PathBuf> = std::fs::read_dir(out).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "cu") && p.to_string_lossy().contains(holding)).collect();
    v.sort();
    assert!(!v.is_empty(), "no `{holding}` file written in {}", out.display());
    v
}

/// `units` compile with `nvcc -c` for sm_80, where nvcc is installed, objects into `dir`, and
/// with no local that nothing reads (nvcc's warnings 177 and 550).
pub fn assert_nvcc_compiles(dir: &std::path::Path, units: &[std::path::PathBuf]) {
    if let Some(nvcc) = nvcc() {
        let o = std::process::Command::new(nvcc).args(["-c", "-O1", "-arch=sm_80", "-odir"]).arg(dir).args(units).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "nvcc:\n{err}");
        assert!(!err.contains("declared but never referenced") && !err.contains("set but never used"), "unused variables in generated code:\n{err}");
    }
}

/// A register-heavy kernel: `accumulators` sums kept live across a loop of `M` (sweep H's
/// `acc56`), whose tree forks on registers per block and caps the registers on the refuse side.
pub fn accumulators_source(accumulators: usize) -> String {
    let decls: String = (0..accumulators).map(|i| format!("          float s{i} = 0.0f;\n")).collect();
    let sums: String = (0..accumulators).map(|i| format!("            s{i} += v * a[p + k + {i}];\n")).collect();
    let total: String = (0..accumulators).map(|i| format!("s{i}")).collect::<Vec<_>>().join(" + ");
    format!("void acc(int N, int M, int B, const float a[N + M + {accumulators}], float b[N]) {{\n  assume(N >= 1 && M >= 1 && B >= 1);\n  int g = (N + B - 1) / B;\n  meta_schedule {{\n    meta_for (int i = 0; i < g; i++)\n      meta_for (int j = 0; j < B; j++) {{\n        int p = i * B + j;\n        if (p < N) {{\n{decls}          for (int k = 0; k < M; k++) {{\n            float v = a[p + k];\n{sums}          }}\n          b[p] = {total};\n        }}\n      }}\n  }}\n}}\n")
}
