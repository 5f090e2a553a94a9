//! Calls whose arguments have two types (`min(float, int)`, `max(long, int)`, `sqrt(int)`,
//! `fmax(float, int)`): MetaFork types them as C does, and the generated CUDA must say so,
//! since CUDA C++ finds `min(float, int)` ambiguous and takes `sqrt(int)` to a host-only
//! template. Every file `gen` writes compiles, and every leaf is proved against the serial
//! program, which computes in C's types.

use crate::common::{nvcc, scratch};
use std::process::Command;

const PROGRAM: &str = "void mixed(int size, int B, long big, float alpha, const float data[size], const int ival[size], const double dv[size],
           float out[size], int iout[size], double dout[size], long lout[size]) {
  assume(size >= 1 && B >= 1 && big >= 1);
  double floor_at = fmax(alpha, 1) + max(alpha, 2);
  meta_schedule {
    meta_for (int g = 0; g < (size + B - 1) / B; g++)
      meta_for (int t = 0; t < B; t++) {
        int i = g * B + t;
        if (i < size) {
          out[i] = min(data[i], 2) + max(1, data[i]) + fmin(data[i], ival[i]) + fmax(ival[i], 3);
          iout[i] = abs(ival[i]) + min(ival[i], i) + max(i, 7) % 5;
          dout[i] = sqrt(ival[i] * ival[i]) + fabs(ival[i]) + exp(data[i]) + sqrtf(dv[i]) + expf(ival[i]) + floor_at;
          lout[i] = max(big, i) + min((long)i, big) + abs((int)(i - big));
          dout[i] += min(dv[i], data[i]) + max(dv[i], 1) + fabsf(data[i] - 0.5f) + pow(i, 2) + fmin(data[i], dv[i]);
        }
      }
  }
}
";

#[test]
fn calls_of_mixed_types_compile_and_are_proved() {
    let dir = scratch("mixed-calls");
    let source = dir.join("mixed.mf");
    std::fs::write(&source, PROGRAM).unwrap();
    let out = dir.join("out");
    let bin = env!("CARGO_BIN_EXE_metafork");
    let g = Command::new(bin).args(["gen", "--emit-cuda", source.to_str().unwrap(), "-o", out.to_str().unwrap()]).output().unwrap();
    assert!(g.status.success(), "{}", String::from_utf8_lossy(&g.stderr));
    let v = Command::new(bin).args(["verify", out.to_str().unwrap()]).output().unwrap();
    let report = String::from_utf8_lossy(&v.stdout);
    assert!(v.status.success() && report.contains("leaves proved"), "{report}");
    let sources: Vec<String> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).filter(|n| n.ends_with(".cu")).collect();
    let mut leaves: Vec<&String> = sources.iter().filter(|n| n.contains("_leaf")).collect();
    leaves.sort();
    assert!(!leaves.is_empty(), "no kernel leaf");
    let codes: Vec<String> = leaves.iter().map(|leaf| std::fs::read_to_string(out.join(leaf)).unwrap()).collect();
    // The integer arguments converted as C converts them.
    // Two floating types too: nvcc has no device `fmin(float, double)`. And a `float` argument
    // of a `double` function: C computes `exp(float)` in `double`, CUDA's overload in `float`.
    // (A leaf with common sub-expressions eliminated reads `data[i]` through a local: the
    // casts are looked for in every leaf, the leaf with the lowest CSE level spelling them out.)
    for cast in ["(float)2", "(long)i", "(double)3", "sqrt((double)", "fmin((double)data[(long)i], dv[(long)i])", "exp((double)data[(long)i])"] {
        assert!(codes.iter().any(|code| code.contains(cast)), "no leaf has `{cast}`:\n{}", codes.join("\n"));
    }
    // Where CSE holds `data[i]` in a local, the call still converts it to `double`.
    assert!(codes.iter().all(|code| code.contains("fmin((double)data[(long)i], dv[(long)i])") || code.contains("fmin((double)metafork_cse")), "{}", codes.join("\n"));
    if let Some(nvcc) = nvcc() {
        let unit: String = sources.iter().map(|s| format!("#include \"{s}\"\n")).collect();
        std::fs::write(out.join("unit.cu"), unit).unwrap();
        let o = Command::new(&nvcc).current_dir(&out).args(["-c", "-O0", "-arch=sm_80", "-o", "unit.o", "unit.cu"]).output().unwrap();
        assert!(o.status.success(), "nvcc rejected the files:\n{}", String::from_utf8_lossy(&o.stderr));
    }
}

/// `abs` of a floating value is refused at the call: C converts the argument to `int`
/// (`abs(-2.75f)` is 2), CUDA's overload keeps the fraction, and the serial program is C.
#[test]
fn abs_of_a_floating_value_is_refused_with_the_fix() {
    let src = "void f(int N, int B, const float x[N], float y[N]) {\n  meta_schedule {\n    meta_for (int i = 0; i < N / B; i++)\n      meta_for (int j = 0; j < B; j++)\n        y[i * B + j] = abs(x[i * B + j] - 0.5f);\n  }\n}\n";
    let err = metafork::frontend::check_source("f.mf", src).unwrap_err().render(false);
    assert!(err.contains("f.mf:5:24: `abs` of a `float`") && err.contains("write `fabsf`"), "{err}");
    assert!(metafork::frontend::check_source("f.mf", &src.replace("abs(x[i * B + j] - 0.5f)", "abs((int)x[i * B + j])")).is_ok());
}

/// `abs` of a `long` is refused too: C converts it to `int` (`abs(4294967295L)` is 1), CUDA's
/// overload keeps 64 bits. A `char` is promoted to `int`, as C does, and accepted.
#[test]
fn abs_of_a_long_is_refused_and_of_a_char_accepted() {
    let src = "void f(long N, int B, const long x[N], long y[N]) {\n  meta_schedule {\n    meta_for (long i = 0; i < N / B; i++)\n      meta_for (int j = 0; j < B; j++)\n        y[i * B + j] = abs(x[i * B + j] - N);\n  }\n}\n";
    let err = metafork::frontend::check_source("f.mf", src).unwrap_err().render(false);
    assert!(err.contains("f.mf:5:24: `abs` of a `long`") && err.contains("x < 0 ? -x : x"), "{err}");
    assert!(metafork::frontend::check_source("f.mf", &src.replace("abs(x[i * B + j] - N)", "abs((int)(x[i * B + j] - N))")).is_ok());
    assert!(metafork::frontend::check_source("f.mf", &src.replace("abs(x[i * B + j] - N)", "abs((char)x[i * B + j])")).is_ok());
}
