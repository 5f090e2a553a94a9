//! Identifier hygiene and injection (issues 23 and 30): every example with each of its
//! identifiers renamed to a name that collides with something (a C/C++ keyword, a CUDA
//! built-in, a macro of the headers generated code includes, a name the generator itself uses,
//! a single letter), and generated from a file whose name is hostile text, still emits files
//! that `nvcc` compiles as one translation unit per example (so no two generated names meet),
//! a dispatch header that plain C++ compiles, and trees whose every leaf `verify` proves.


use crate::common::{cxx, examples, nvcc, Rng};
use metafork::frontend::check_source;
use metafork::frontend::lexer::{lex, Tok};
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// Names that collide with something in generated code. The MetaFork language's own keywords
/// (`int`, `for`, `if`, ...) cannot be identifiers in a source, so they are not here.
const COLLIDING: &[&str] = &[
    // C++ keywords and alternative tokens
    "class", "new", "delete", "template", "this", "namespace", "operator", "typename", "virtual", "friend", "private",
    "public", "protected", "explicit", "mutable", "and", "or", "not", "xor", "bitand", "compl", "true", "false",
    "nullptr", "decltype", "constexpr", "noexcept", "throw", "try", "catch", "using", "export", "asm", "restrict",
    // CUDA built-ins and types
    "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize", "dim3", "int8_t", "uint32_t", "size_t", "half",
    "cudaStream_t", "cudaSuccess", "__global__", "__syncthreads", "_Bool",
    // macros of the headers generated code includes
    "errno", "linux", "unix", "stdin", "stdout", "NULL", "EOF", "INT_MAX", "M_PI", "INFINITY", "NAN",
    // names the generator uses, or its escapes
    "p", "dev", "leaf", "stream", "detail", "compiled", "ok", "v", "vals", "e", "a", "i", "grid_x", "block_x",
    "shared_bytes", "metafork_e", "metafork_it", "metafork_shared", "metafork_offset", "metafork_p", "METAFORK_OVERFLOW",
    "mfu_p", "mfu_class", "a_tile0", "a_reg", "c_reg", "b_tile1", "x_leaf1", "f_leaf4", "std", "mutex", "main",
    "min", "max", "sqrt", "exp", "printf", "free",
    // single letters
    "b", "c", "d", "f", "g", "h", "k", "n", "q", "r", "s", "t", "u", "w", "x", "y", "z", "B", "N", "T",
];

/// Hostile text for a source's name: newlines, comment ends, directives, quotes, backslashes,
/// non-ASCII.
const HOSTILE_TEXT: &[&str] = &["nl\n#error injected\n.mf", "x */ #error injected /* .mf", "trail\\", "q\"uote'.mf", "\u{e9}t\u{e9} \u{2028} \u{1F600}.mf", "??/\n#error trigraph", "// */ \r\n#define int void"];

/// `text` with every user identifier renamed by `map` (names in call position, the language's
/// math functions, stay).
fn rename(text: &str, map: &BTreeMap<String, String>) -> String {
    let tokens = lex(text).unwrap();
    let mut out = String::new();
    let mut at = 0;
    for (i, t) in tokens.iter().enumerate() {
        if let Tok::Ident(name) = &t.tok {
            let call = matches!(tokens.get(i + 1).map(|n| &n.tok), Some(Tok::Sym("(")));
            if let (false, Some(new)) = (call, map.get(name)) {
                out.push_str(&text[at..t.span.start]);
                out.push_str(new);
                at = t.span.end;
            }
        }
    }
    out.push_str(&text[at..]);
    out
}

/// The identifiers of a source, in order of first appearance (call targets aside).
fn identifiers(text: &str) -> Vec<String> {
    let tokens = lex(text).unwrap();
    let mut seen = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        if let Tok::Ident(name) = &t.tok {
            let call = matches!(tokens.get(i + 1).map(|n| &n.tok), Some(Tok::Sym("(")));
            if !call && !seen.contains(name) {
                seen.push(name.clone());
            }
        }
    }
    seen
}

#[test]
fn renamed_examples_from_hostile_file_names_compile_and_verify() {
    let dir = crate::common::scratch("hygiene");
    let mut rng = Rng(0x5eed_0f_6e6e);
    // Each example with its identifiers renamed to distinct colliding names, drawn without
    // replacement, and named by hostile text.
    let mut sources = Vec::new();
    for (k, (path, text)) in examples().iter().enumerate() {
        let mut pool: Vec<&str> = COLLIDING.to_vec();
        let map: BTreeMap<String, String> = identifiers(text).into_iter().map(|id| (id, pool.remove(rng.range(0, pool.len() as i64 - 1) as usize).to_string())).collect();
        let renamed = rename(text, &map);
        let program = check_source(HOSTILE_TEXT[k % HOSTILE_TEXT.len()], &renamed).unwrap_or_else(|d| panic!("{path} renamed ({map:?}) does not check:\n{}", d.render(false)));
        sources.push((path.clone(), HOSTILE_TEXT[k % HOSTILE_TEXT.len()], renamed, map, program));
    }
    let backend = constraints::solver::Backend::new(metafork::verify::QUERY_TIMEOUT_MS);
    let mut units = Vec::new();
    let mut proved = 0;
    for (k, (path, source_name, renamed, map, program)) in sources.iter().enumerate() {
        let (files, trees, _) = metafork::emit::command::files(source_name, renamed, program, true, &Default::default()).unwrap_or_else(|e| panic!("{path} renamed: {e}"));
        let out = dir.join(format!("ex{k}"));
        std::fs::create_dir_all(&out).unwrap();
        let mut unit = String::new();
        for (name, bytes) in &files {
            std::fs::write(out.join(name), bytes).unwrap();
            if name.ends_with(".cu") {
                unit += &format!("#include \"{name}\"\n");
            }
            if name.ends_with(".cu") || name.ends_with(".h") {
                let text = String::from_utf8(bytes.clone()).unwrap();
                assert!(text.is_ascii(), "{path}: {name} is not ASCII");
                // The name of the source appears only inside comments, escaped.
                for line in text.lines().filter(|l| l.contains("Generated by metafork")) {
                    assert!(line.starts_with("// "), "{path}: {name}: {line}");
                }
            }
        }
        std::fs::write(out.join("unit.cu"), unit).unwrap();
        units.push((path.clone(), out, map.clone()));
        // Every kernel leaf of every renamed program is proved.
        for (function, tree) in &trees {
            let reports = metafork::verify::verify_tree(function, tree, &backend, metafork::verify::Options { points: 1, ..Default::default() }).unwrap();
            for r in &reports {
                assert_eq!(r.status(), metafork::verify::Status::Proved, "{path} renamed {map:?}: leaf {}", r.leaf);
                proved += 1;
            }
        }
    }
    assert!(proved >= 100, "{proved} leaves");

    // One nvcc process per example (all its files as one translation unit), two at a time.
    if let Some(nvcc) = nvcc() {
        for chunk in units.chunks(2) {
            let children: Vec<_> = chunk
                .iter()
                .map(|(path, out, map)| {
                    // Host code at -O0 (device code is ptxas's -O3 either way): whether it
                    // compiles does not depend on the host optimiser, and matmul's unit takes
                    // 3.2 s instead of 4.3 s.
                    let child = Command::new(&nvcc).current_dir(out).args(["-c", "-O0", "-arch=sm_90", "-o", "unit.o", "unit.cu"]).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
                    (path, map, child)
                })
                .collect();
            for (path, map, child) in children {
                let o = child.wait_with_output().unwrap();
                assert!(o.status.success(), "{path} renamed {map:?}: nvcc failed:\n{}", String::from_utf8_lossy(&o.stderr));
            }
        }
    }
    // The dispatch headers are plain C++ too.
    if let Some(cxx) = cxx() {
        for (path, out, map) in &units {
            for h in std::fs::read_dir(out).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "h")) {
                let o = Command::new(&cxx).args(["-std=c++11", "-fsyntax-only", "-x", "c++"]).arg(&h).output().unwrap();
                assert!(o.status.success(), "{path} renamed {map:?}: {} is not plain C++:\n{}", h.display(), String::from_utf8_lossy(&o.stderr));
            }
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every identifier the generated code uses that is neither the user's nor its own
/// (`metafork_*`, `METAFORK_*`) is one a user's name is escaped from: else a user's name could
/// shadow it. And every non-underscore macro the included headers define is escaped, checked
/// against the installed toolchain.
#[test]
fn every_name_generated_code_borrows_is_reserved_for_it() {
    let mut borrowed = BTreeSet::new();
    for (path, text) in examples() {
        let program = check_source(&path, &text).unwrap();
        let user: BTreeSet<String> = identifiers(&text).into_iter().collect();
        let (files, trees, _) = metafork::emit::command::files(&path, &text, &program, true, &Default::default()).unwrap();
        // The dispatch headers' common part and the harness's driver hold no user name: their
        // locals cannot be shadowed, and they are left out.
        let mut texts: Vec<String> = files.iter().filter(|(n, _)| n.ends_with(".cu") || n.ends_with(".h")).map(|(_, b)| String::from_utf8(b.clone()).unwrap().replace(metafork::emit::dispatch::COMMON, "")).collect();
        // The tuning harness too.
        let device = constraints::device::DeviceProfile::load("h100").unwrap();
        for (function, tree) in &trees {
            let sizes: BTreeMap<String, i64> = function.data_parameters().into_iter().map(|d| (d, 64)).collect();
            // A few values per program parameter: the harness's names do not depend on how
            // many configurations it measures, and the full default space is `tune`'s test.
            let values: BTreeMap<String, Vec<i64>> = function.program_parameters().into_iter().map(|p| (p, vec![1, 4, 16, 64])).collect();
            let request = metafork::tune::rank::Request { sizes, values, ..Default::default() };
            if let Ok(tuned) = metafork::tune::rank::tune(function, tree, &device, &request, None) {
                if !tuned.admissible.is_empty() {
                    let mut h = metafork::output::DirFiles::new();
                    metafork::tune::harness::files(&path, function, tree, &tuned, 2, "sm_90", &mut h).unwrap();
                    // The driver (from `metafork_restore` on) is a fixed template.
                    texts.extend(h.values().map(|b| String::from_utf8(b.clone()).unwrap().split("static void metafork_restore()").next().unwrap_or_default().to_string()));
                }
            }
        }
        for t in texts {
            // The tool's own struct definitions declare fields, which no name shadows.
            let t: String = t.lines().filter(|l| !l.trim_start().starts_with("struct metafork_")).map(|l| format!("{l}\n")).collect();
            let (ids, members) = c_identifiers(&t);
            for id in ids.difference(&members) {
                let kernel_shape = id.contains("_leaf");
                // A tile or register copy named after its array (`a_tile0`, `c_reg`): spelled
                // so only where no user name of its kernel is that (`names::Spelling`).
                // Register blocking's per-copy names (`c_reg_b3`, and coarsening's copies of
                // those, `c_reg_b3_b1`) are readable names too.
                let mut unblocked = id.as_str();
                while let Some((stem, _)) = unblocked.rsplit_once("_b").filter(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) {
                    unblocked = stem;
                }
                // A per-thread array's elements (`taps_3`, `m_1_0`; `acc2_0` where `acc_0` is
                // the user's): named after the user's array, apart from every name of the file.
                let mut element = id.as_str();
                while let Some((stem, _)) = element.rsplit_once('_').filter(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) {
                    element = stem;
                }
                let local_array = element != id && (user.contains(element) || user.contains(element.trim_end_matches(|c: char| c.is_ascii_digit())));
                // A block reduction's partial sum and shared sums (`s_part`, `s_sums2`).
                let digits_off = id.trim_end_matches(|c: char| c.is_ascii_digit());
                let reduction = digits_off.ends_with("_part") || digits_off.ends_with("_sums");
                let readable = local_array || reduction || unblocked.trim_end_matches('_').ends_with("_reg") || id.rsplit_once("_tile").is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
                if readable {
                    continue;
                }
                let id = id.clone();
                if !user.contains(&id) && !id.starts_with("metafork_") && !id.starts_with("METAFORK_") && !kernel_shape && !id.starts_with("mfu_") {
                    borrowed.insert(id);
                }
            }
        }
    }
    // Members (`.x`, `->registers`) and the words of comments and strings are not names a
    // declaration can shadow; `c_identifiers` leaves them out.
    let unreserved: Vec<&String> = borrowed.iter().filter(|n| !metafork::names::is_reserved(n)).collect();
    assert!(unreserved.is_empty(), "generated code uses these names, which a user's name is not escaped from: {unreserved:?}");

    let Some(nvcc) = nvcc() else { return };
    let dir = crate::common::scratch("macros");
    std::fs::write(dir.join("inc.cu"), "#include <cuda_runtime.h>\n#include <mutex>\n#include <algorithm>\n#include <cmath>\n#include <cstdio>\n#include <cstdlib>\n#include <cstring>\n#include <vector>\n#include <limits.h>\n#include <stddef.h>\n").unwrap();
    let o = Command::new(&nvcc).current_dir(&dir).args(["-E", "-Xcompiler", "-dM", "-x", "cu", "inc.cu"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let defined: Vec<String> = String::from_utf8_lossy(&o.stdout).lines().filter_map(|l| l.strip_prefix("#define ")).map(|l| l.split(|c: char| c == ' ' || c == '(').next().unwrap_or("").to_string()).filter(|m| !m.is_empty()).collect();
    assert!(defined.len() > 500, "{}", defined.len());
    let missing: Vec<&String> = defined.iter().filter(|m| !metafork::names::is_reserved(m)).collect();
    assert!(missing.is_empty(), "macros a user's name would collide with: {missing:?} (add them to src/names/macros.txt)");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The identifiers of C/C++ text (comments, string and character literals and preprocessor
/// lines left out), and apart those that appear as members (after `.` or `->`): a struct's
/// fields, which no declaration shadows.
fn c_identifiers(text: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let b = text.as_bytes();
    let mut out = BTreeSet::new();
    let mut members = BTreeSet::new();
    let mut i = 0;
    let mut line_start = true;
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            line_start = true;
            i += 1;
            continue;
        }
        if line_start && c == b'#' {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if !c.is_ascii_whitespace() {
            line_start = false;
        }
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            i += 2;
            while i + 1 < b.len() && !b[i..].starts_with(b"*/") {
                i += 1;
            }
            i += 2;
        } else if c == b'"' || c == b'\'' {
            i += 1;
            while i < b.len() && b[i] != c {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            let member = text[..start].trim_end().ends_with('.') || text[..start].trim_end().ends_with("->");
            if member {
                members.insert(text[start..i].to_string());
            } else {
                out.insert(text[start..i].to_string());
            }
        } else if c.is_ascii_digit() {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.') {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    (out, members)
}

/// The host driver's message for a failing fact quotes the program as written: a parameter
/// named `blockDim` is `mfu_blockDim` in the generated code, never in what the user reads.
#[test]
fn a_failing_fact_is_reported_in_the_programs_own_names() {
    let dir = crate::common::scratch("hygiene-fact-text");
    std::fs::write(dir.join("f.mf"), "void f(int size, int blockDim, const float d[size], float o[size]) {\n  assume(size >= 1 && blockDim >= 1);\n  meta_schedule {\n    meta_for (int b = 0; b < (size + blockDim - 1) / blockDim; b++)\n      meta_for (int t = 0; t < blockDim; t++) {\n        int i = b * blockDim + t;\n        if (i < size) o[i] = d[i];\n      }\n  }\n}\n").unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_metafork")).current_dir(&dir).args(["gen", "--emit-cuda", "f.mf", "-o", "out"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let driver = std::fs::read_to_string(dir.join("out/metafork_run_f.cu")).unwrap();
    assert!(driver.contains("\"assume(size >= 1 && blockDim >= 1) does not hold\""), "{driver}");
    assert!(driver.contains("(mfu_blockDim) >= (1LL)"), "the code itself uses the escaped name: {driver}");
}

/// Functions named with the generated code's prefix: `metafork_launch_a` beside `a` (its kernel
/// `metafork_launch_a_leaf7` was `a`'s launcher of leaf 7: the files did not link), and
/// `metafork_run_x` beside `x_dispatch` (their files `metafork_run_x_dispatch.h` collided and
/// `gen` refused the program). Their schedules take the escape prefix; so does the schedule of
/// a function `run` beside a function `launch` (its launcher `metafork_run_launch` was the
/// other's host driver). Every file of the one output links into one program, and every leaf
/// is proved.
#[test]
fn functions_named_like_generated_symbols_get_their_own() {
    let body = "(int N, int B, const float a[N], float c[N]) {\n  assume(N >= 1 && B >= 1);\n  assume(N % B == 0);\n  int dim = N / B;\n  meta_schedule {\n    meta_for (int v = 0; v < dim; v++)\n      meta_for (int u = 0; u < B; u++) {\n        int i = v * B + u;\n        c[i] = a[i] + 1.0f;\n      }\n  }\n}\n";
    let src: String = ["a", "metafork_launch_a", "metafork_run_x", "x_dispatch", "run", "launch"].iter().map(|f| format!("void {f}{body}\n")).collect();
    let (dir, out) = crate::common::gen_and_verify("hygiene-prefix", "prefix.mf", &src);
    let yaml = std::fs::read_to_string(out.join("tree.yaml")).unwrap();
    for schedule in ["a", "mfu_metafork_launch_a", "mfu_metafork_run_x", "x_dispatch", "mfu_run", "launch"] {
        assert!(yaml.contains(&format!("- name: {schedule}\n")), "schedule `{schedule}`:\n{yaml}");
    }
    // Only a real clash renames: a function `run` alone, or beside `x`, keeps its name.
    for others in [vec![], vec!["x"]] {
        let src: String = std::iter::once("run").chain(others).map(|f| format!("void {f}{body}\n")).collect();
        let program = metafork::frontend::check_source("p.mf", &src).unwrap();
        assert_eq!(program.kernels[0].schedules[0].name, "run");
    }
    let Some(nvcc) = nvcc() else { return };
    std::fs::write(out.join("main.cu"), "int main() { return 0; }\n").unwrap();
    let units: Vec<String> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).filter(|n| n.ends_with(".cu")).collect();
    let o = Command::new(&nvcc).current_dir(&out).args(["-O0", "-arch=sm_80", "-o", "linked"]).args(&units).output().unwrap();
    assert!(o.status.success(), "the output does not link:\n{}", String::from_utf8_lossy(&o.stderr));
    std::fs::remove_dir_all(&dir).unwrap();
}
