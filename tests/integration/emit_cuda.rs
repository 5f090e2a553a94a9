//! Every example's kernel, emitted as CUDA, compiles with the real `nvcc` for sm_75, sm_80
//! and sm_90 (host and device code).

use metafork::emit::cuda::emit_kernel;
use metafork::frontend::check_source;
use metafork::kernel::Kernel;
use std::path::PathBuf;
use std::process::Command;

fn nvcc() -> Option<PathBuf> {
    let found = llvm_passes::ptxas::find_nvcc();
    if found.is_none() && std::env::var("METAFORK_REQUIRE_NVCC").as_deref() == Ok("1") {
        panic!("METAFORK_REQUIRE_NVCC=1 but `nvcc` is not on PATH");
    }
    found
}

#[test]
fn emitted_examples_compile_with_nvcc_for_three_architectures() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples");
    let mut files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "mf")).collect();
    files.sort();
    let out = crate::common::scratch("emit");
    std::fs::create_dir_all(&out).unwrap();
    let mut sources = Vec::new();
    for f in &files {
        let p = check_source(&f.display().to_string(), &std::fs::read_to_string(f).unwrap()).unwrap();
        for k in &p.kernels {
            for s in &k.schedules {
                let kernel = Kernel::from_schedule(k, s).unwrap();
                let text = emit_kernel(k, &kernel, &[format!("from {}", f.display())]).unwrap();
                assert!(text.contains(&format!("__global__ void {}(", kernel.name)));
                let path = out.join(format!("{}.cu", kernel.name));
                std::fs::write(&path, text).unwrap();
                sources.push(path);
            }
        }
    }
    let Some(nvcc) = nvcc() else { return };
    // Each file on its own through nvcc's front end (host and device code checked, nothing
    // taken from another file), then one translation unit including every file compiled in
    // full for the three architectures: the CUDA headers are parsed once, not once per file.
    let alone = Command::new(&nvcc).args(["-ptx", "-fdevice-syntax-only", "-arch=sm_90", "-odir"]).arg(&out).args(&sources).output().unwrap();
    assert!(alone.status.success(), "a file does not compile on its own:\n{}", String::from_utf8_lossy(&alone.stderr));
    let unit: String = sources.iter().map(|p| format!("#include \"{}\"\n", p.display())).collect();
    let unit_path = out.join("metafork_test_unit.cu");
    std::fs::write(&unit_path, unit).unwrap();
    let mut cmd = Command::new(&nvcc);
    cmd.args(["-c", "-O3", "-Xptxas", "-w", "-o"]).arg(out.join("unit.o"));
    for sm in ["75", "80", "90"] {
        cmd.args(["-gencode", &format!("arch=compute_{sm},code=sm_{sm}")]);
    }
    cmd.arg(&unit_path);
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "nvcc failed for sm_75, sm_80 or sm_90:\n{}", String::from_utf8_lossy(&o.stderr));
    // Code a person would write: no local that nothing reads (issue 28: jacobi1d's leaves kept
    // `p1` after caching rewrote its accesses).
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("declared but never referenced") && !err.contains("set but never used"), "unused variables in emitted kernels:\n{err}");
    std::fs::remove_dir_all(&out).unwrap();
}
