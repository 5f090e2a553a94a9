//! `char` (issue 26.1): 8-bit signed elements and scalars, promoted to `int` in arithmetic and
//! wrapped to 8 bits when stored, spelled `signed char` in generated code so that no host's
//! choice of sign changes what the kernels compute.

use crate::common::{nvcc, scratch};
use metafork::frontend::ast::ScalarType;
use metafork::verify::value::Value;
use std::process::Command;

#[test]
fn chars_wrap_as_signed_eight_bit_integers_and_promote_to_int() {
    assert_eq!(Value::Int(200).to(ScalarType::Char), Value::Int(-56));
    assert_eq!(Value::Int(-129).to(ScalarType::Char), Value::Int(127));
    assert_eq!(Value::Double(-3.7).to(ScalarType::Char), Value::Int(-3));
    assert_eq!(ScalarType::promote(ScalarType::Char, ScalarType::Char), ScalarType::Int);
    assert_eq!(ScalarType::promote(ScalarType::Char, ScalarType::Float), ScalarType::Float);
    assert_eq!(ScalarType::Char.size_bytes(), 1);
}

#[test]
fn a_char_program_is_proved_and_every_file_compiles() {
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/charpairs.mf");
    let dir = scratch("char-arrays");
    let out = dir.join("out");
    let bin = env!("CARGO_BIN_EXE_metafork");
    let g = Command::new(bin).args(["gen", "--emit-cuda", source, "-o", out.to_str().unwrap()]).output().unwrap();
    assert!(g.status.success(), "{}", String::from_utf8_lossy(&g.stderr));
    let v = Command::new(bin).args(["verify", out.to_str().unwrap()]).output().unwrap();
    let report = String::from_utf8_lossy(&v.stdout);
    assert!(v.status.success() && report.contains("leaves proved"), "{report}");
    let files: Vec<std::path::PathBuf> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "cu")).collect();
    for f in files.iter().filter(|f| f.to_string_lossy().contains("_leaf")) {
        let code = std::fs::read_to_string(f).unwrap();
        assert!(code.contains("const signed char *__restrict__ seq") && code.contains("signed char *__restrict__ flag"), "{}:\n{code}", f.display());
        // The kernel computes in `signed char`; only its launch function takes the arrays as the
        // program spells them (`char *`: a caller's C++ passes that), and casts them.
        let (kernel, launch) = code.split_once("// Launch `").expect("a launch function");
        let plain = kernel.replace("signed char", "");
        assert!(!plain.contains("(char)") && !plain.contains(" char "), "{}: a plain `char`:\n{code}", f.display());
        assert!(launch.contains("const char *seq") && launch.contains("(const signed char *)seq"), "{}:\n{launch}", f.display());
    }
    // gpu-check's program for it (a char array is kind 4, one byte per element).
    let text = std::fs::read_to_string(source).unwrap();
    let (check, prepared) = metafork::gpucheck::program_files(source, "charpairs", &text).unwrap();
    assert!(prepared.cases > 0 && check["check.cu"].contains("case 4: ((signed char *)in[k])[i]"));
    let Some(nvcc) = nvcc() else { return };
    for f in &files {
        let o = Command::new(&nvcc).current_dir(&out).args(["-arch=sm_75", "-c", f.to_str().unwrap(), "-o", "/dev/null"]).output().unwrap();
        assert!(o.status.success(), "nvcc rejected {}:\n{}", f.display(), String::from_utf8_lossy(&o.stderr));
    }
    let gc = dir.join("gpucheck");
    std::fs::create_dir_all(&gc).unwrap();
    for (name, t) in &check {
        std::fs::write(gc.join(name), t).unwrap();
    }
    let o = Command::new(&nvcc).current_dir(&gc).args(["-O2", "-arch=sm_75", "-o", "check"]).args(check.keys()).output().unwrap();
    assert!(o.status.success(), "nvcc rejected gpu-check's program:\n{}", String::from_utf8_lossy(&o.stderr));
}

/// The host-facing functions take arrays as the program spells their types: a caller's
/// `char *` or `long long *` is no `signed char *` or `long *` in C++, and the driver and the
/// dispatcher's launch function were declared with the latter (a helper's user code did not
/// compile). The kernels still compute in `signed char` and `long`.
#[test]
fn a_callers_char_and_long_long_arrays_pass_to_the_generated_functions() {
    let dir = scratch("char-spelling");
    let source = "void ch(int N, int B, char c[N], long int l[N], const long long ll[N]) {\n  assume(N >= 1 && B >= 1);\n  meta_schedule {\n    meta_for (int v = 0; v < N / B; v++)\n      meta_for (int u = 0; u < B; u++) {\n        c[v * B + u] = c[v * B + u] + 1;\n        l[v * B + u] = ll[v * B + u] * 3;\n      }\n  }\n}\n";
    std::fs::write(dir.join("ch.mf"), source).unwrap();
    let g = Command::new(env!("CARGO_BIN_EXE_metafork")).current_dir(&dir).args(["gen", "--emit-cuda", "ch.mf", "-o", "out"]).output().unwrap();
    assert!(g.status.success(), "{}", String::from_utf8_lossy(&g.stderr));
    let driver = std::fs::read_to_string(dir.join("out/metafork_run_ch.h")).unwrap();
    assert!(driver.contains("metafork_run_ch(int N, int B, char *c, long *l, const long long *ll,"), "{driver}");
    let dispatch = std::fs::read_to_string(dir.join("out/ch_dispatch.h")).unwrap();
    assert!(dispatch.contains("metafork_ch_launch(int N, int B, char *c, long *l, const long long *ll,"), "{dispatch}");
    let Some(nvcc) = nvcc() else { return };
    let user = "#include <cuda_runtime.h>\n#include \"metafork_run_ch.h\"\nint main() {\n  int N = 1024, B = 128;\n  char *c; long *l; long long *ll;\n  cudaMalloc(&c, N); cudaMalloc(&l, 8 * N); cudaMalloc(&ll, 8 * N);\n  cudaError_t e; const char *detail;\n  return metafork_run_ch(N, B, c, l, ll, 0, &e, &detail) + metafork_ch_launch(N, B, c, l, ll, 0, &e, &detail);\n}\n";
    std::fs::write(dir.join("user.cu"), user).unwrap();
    let mut units: Vec<String> = std::fs::read_dir(dir.join("out")).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "cu")).map(|p| p.display().to_string()).collect();
    units.sort();
    units.push(dir.join("user.cu").display().to_string());
    for unit in &units {
        let o = Command::new(&nvcc).args(["-arch=sm_80", "-c", "-I"]).arg(dir.join("out")).arg(unit).args(["-o", "/dev/null"]).output().unwrap();
        assert!(o.status.success(), "nvcc rejected {unit}:\n{}", String::from_utf8_lossy(&o.stderr));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
