//! Floating scalars defined outside the schedules (issue 26.1): computed once on the host from
//! the parameters (floating ones included), passed to every kernel like an integer derived
//! scalar, and refused where an integer is needed (a size, a bound, a fact) or where they would
//! read an array.

use crate::common::{nvcc, scratch};
use std::process::{Command, Output};

fn metafork(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_metafork")).args(args).output().unwrap()
}

fn program(decl: &str, used: &str) -> String {
    format!("void f(int n, int B, float alpha, const float x[n], float y[n]) {{\n  assume(n >= 1 && B >= 1);\n  {decl}\n  int g = (n + B - 1) / B;\n  meta_schedule {{\n    meta_for (int v = 0; v < g; v++)\n      meta_for (int u = 0; u < B; u++) {{\n        int i = v * B + u;\n        if (i < n)\n          y[i] = {used} * x[i];\n      }}\n  }}\n}}\n")
}

#[test]
fn floating_scalars_reach_every_kernel_and_are_proved() {
    let dir = scratch("floating-scalars");
    let source = dir.join("f.mf");
    std::fs::write(&source, program("double k = exp(-alpha) / 3.0; float k2 = (float)(k * k) + alpha;", "k2")).unwrap();
    let out = dir.join("out");
    let g = metafork(&["gen", "--emit-cuda", source.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert!(g.status.success(), "{}", String::from_utf8_lossy(&g.stderr));
    let v = metafork(&["verify", out.to_str().unwrap()]);
    let report = String::from_utf8_lossy(&v.stdout);
    assert!(v.status.success() && report.contains("leaves proved") && !report.contains(" 0 of"), "{report}");
    let leaves: Vec<_> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().path()).filter(|p| p.to_string_lossy().contains("_leaf") && p.extension().is_some_and(|x| x == "cu")).collect();
    assert!(!leaves.is_empty());
    for leaf in &leaves {
        let code = std::fs::read_to_string(leaf).unwrap();
        // The launch wrapper computes them in order; the kernel takes them as arguments.
        // `exp` of a `float` is C's `double` function, not C++'s `float` overload.
        let at_k = code.find("double k = exp((double)-alpha) / 3.0;").unwrap_or_else(|| panic!("{}:\n{code}", leaf.display()));
        let at_k2 = code.find("float k2 = (float)(k * k) + alpha;").unwrap();
        assert!(at_k < at_k2, "{}: `k2` is computed before `k`", leaf.display());
        assert!(code.contains("double k, float k2") || (code.contains("double k") && code.contains("float k2")), "{}:\n{code}", leaf.display());
        assert!(!code.contains("if ((3.0) == 0)"), "a floating division is defined for a zero divisor; no check refuses it");
    }
    if let Some(nvcc) = nvcc() {
        let mut args: Vec<String> = vec!["-arch=sm_75".into(), "-c".into()];
        args.push(out.join("metafork_run_f.cu").to_string_lossy().into_owned());
        args.push("-o".into());
        args.push("/dev/null".into());
        let o = Command::new(&nvcc).current_dir(&out).args(&args).output().unwrap();
        assert!(o.status.success(), "nvcc rejected the host driver:\n{}", String::from_utf8_lossy(&o.stderr));
        let o = Command::new(&nvcc).current_dir(&out).args(["-arch=sm_75", "-c", leaves[0].to_str().unwrap(), "-o", "/dev/null"]).output().unwrap();
        assert!(o.status.success(), "nvcc rejected {}:\n{}", leaves[0].display(), String::from_utf8_lossy(&o.stderr));
    }
}

/// Each misuse is an error where it is written, and the refused definition adds no second
/// error where the scalar is used.
#[test]
fn floating_scalars_are_refused_where_an_integer_or_an_array_read_would_be_needed() {
    let cases = [
        ("float k = x[0];", "k", "3:13", "cannot read the array `x`"),
        ("float k = alpha; int m = (int)k;", "k", "3:28", "`k` is a floating value"),
        ("float k = alpha; assume(n > (int)k);", "k", "3:27", "`k` is a floating value"),
        ("float g = alpha;", "1.0f", "4:7", "`g` is already defined"),
    ];
    for (decl, used, at, message) in cases {
        let dir = scratch("floating-scalars-bad");
        let source = dir.join("f.mf");
        std::fs::write(&source, program(decl, used)).unwrap();
        let o = metafork(&["parse", source.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{decl}: {err}");
        assert!(err.contains(&format!("f.mf:{at}")) && err.contains(message), "{decl}: expected {message} at {at}:\n{err}");
        assert!(!err.contains("unknown identifier"), "{decl}: a refused definition made its uses errors too:\n{err}");
    }
}
