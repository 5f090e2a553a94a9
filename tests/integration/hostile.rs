//! Inputs and situations a compiler tool meets in the field (issues 23 and 30): output paths
//! that are links, FIFOs or devices; interrupted and concurrent runs; tampered output
//! directories; hostile names; programs that used to crash, hang or exhaust memory; values out
//! of range; bad profiles and wisdom. Each test runs the real binary.


use crate::common::{cxx, scratch};
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_metafork"))
}

fn metafork(dir: &Path, args: &[&str]) -> Output {
    bin().current_dir(dir).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

const SAXPY: &str = "void saxpy(int N, int B, float alpha, const float x[N], float y[N]) {
  assume(N >= 1 && B >= 1);
  int dim = (N + B - 1) / B;
  meta_schedule {
    meta_for (int i = 0; i < dim; i++)
      meta_for (int j = 0; j < B; j++) {
        int p = i * B + j;
        if (p < N)
          y[p] = alpha * x[p] + y[p];
      }
  }
}
";

const COPY: &str = "void copy(int N, int B, const float a[N], float c[N]) {
  assume(N >= 1 && B >= 1);
  int d = (N + B - 1) / B;
  meta_schedule {
    meta_for (int i = 0; i < d; i++)
      meta_for (int j = 0; j < B; j++) {
        int p = i * B + j;
        if (p < N) c[p] = a[p];
      }
  }
}
";

/// Every entry of a directory with its contents (directories as `None`).
fn snapshot(dir: &Path) -> BTreeMap<String, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        let t = e.file_type().unwrap();
        out.insert(name, if t.is_file() { Some(fs::read(e.path()).unwrap()) } else { None });
    }
    out
}

/// A directory `gen` wrote is whole: its manifest lists exactly its metafork files, each with
/// its hash; other entries are `extra`.
fn assert_whole(dir: &Path, extra: &[&str]) {
    let manifest: serde_json::Value = serde_json::from_slice(&fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    let files = manifest["files"].as_object().unwrap();
    for (name, hash) in files {
        let bytes = fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(metafork::output::manifest::sha256_hex(&bytes), hash.as_str().unwrap(), "{name} is not the file of the manifest's run");
    }
    let mut on_disk: Vec<String> = snapshot(dir).into_keys().collect();
    on_disk.retain(|n| n != "manifest.json" && !extra.contains(&n.as_str()));
    let listed: Vec<String> = files.keys().cloned().collect();
    assert_eq!(on_disk, listed, "the directory holds files of another run");
}

#[test]
fn gen_replaces_its_output_whole_and_keeps_the_users_files() {
    let dir = scratch("hostile-whole");
    fs::write(dir.join("saxpy.mf"), SAXPY).unwrap();
    fs::write(dir.join("copy.mf"), COPY).unwrap();
    assert!(metafork(&dir, &["gen", "--emit-cuda", "saxpy.mf", "-o", "out"]).status.success());
    fs::write(dir.join("out/notes.txt"), "mine").unwrap();
    fs::create_dir(dir.join("out/build")).unwrap();
    let o = metafork(&dir, &["gen", "--emit-cuda", "copy.mf", "-o", "out"]);
    assert!(o.status.success(), "{}", text(&o));
    let names: Vec<String> = snapshot(&dir.join("out")).into_keys().collect();
    assert!(!names.iter().any(|n| n.starts_with("saxpy")), "stale files of the earlier program stay: {names:?}");
    assert_eq!(fs::read_to_string(dir.join("out/notes.txt")).unwrap(), "mine");
    assert!(dir.join("out/build").is_dir());
    assert_whole(&dir.join("out"), &["notes.txt", "build"]);
    assert_eq!(snapshot(&dir).keys().filter(|n| n.starts_with('.')).count(), 0, "no staging directory is left");
}

#[test]
fn an_interrupted_gen_leaves_the_old_output_and_the_next_run_cleans_up() {
    let dir = scratch("hostile-interrupt");
    fs::write(dir.join("saxpy.mf"), SAXPY).unwrap();
    let matmul = fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/matmul.mf")).unwrap();
    fs::write(dir.join("matmul.mf"), matmul).unwrap();
    assert!(metafork(&dir, &["gen", "--emit-cuda", "saxpy.mf", "-o", "out"]).status.success());
    let before = snapshot(&dir.join("out"));
    // Stopped at many moments: before, during and after building the tree and writing.
    // Whenever it stops, the directory is the old output or the new one, whole.
    let mut unchanged = 0;
    let mut before = before;
    for (signal, after_ms) in [(libc::SIGINT, 30), (libc::SIGKILL, 150), (libc::SIGINT, 400), (libc::SIGKILL, 900), (libc::SIGTERM, 1500), (libc::SIGKILL, 3000)] {
        let mut child = bin().current_dir(&dir).args(["gen", "--emit-cuda", "matmul.mf", "-o", "out"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(after_ms));
        unsafe { libc::kill(child.id() as i32, signal) };
        child.wait().unwrap();
        let now = snapshot(&dir.join("out"));
        if now == before {
            unchanged += 1;
        } else {
            assert_whole(&dir.join("out"), &[]);
            before = now;
        }
    }
    assert!(unchanged > 0, "no run was stopped before it finished");
    let o = metafork(&dir, &["gen", "--emit-cuda", "saxpy.mf", "-o", "out"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_whole(&dir.join("out"), &[]);
    let hidden: Vec<String> = snapshot(&dir).into_keys().filter(|n| n.starts_with('.')).collect();
    assert!(hidden.is_empty(), "staging directories left: {hidden:?}");
}

#[test]
fn concurrent_gens_into_one_directory_never_mix_their_files() {
    let dir = scratch("hostile-concurrent");
    fs::write(dir.join("saxpy.mf"), SAXPY).unwrap();
    fs::write(dir.join("copy.mf"), COPY).unwrap();
    for _ in 0..3 {
        let children: Vec<_> = ["saxpy.mf", "copy.mf", "saxpy.mf", "copy.mf"].iter().map(|f| bin().current_dir(&dir).args(["gen", "--emit-cuda", f, "-o", "out"]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap()).collect();
        for c in children {
            let o = c.wait_with_output().unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        }
        assert_whole(&dir.join("out"), &[]);
    }
}

#[test]
fn writers_never_write_through_links_fifos_or_devices() {
    let dir = scratch("hostile-targets");
    fs::write(dir.join("saxpy.mf"), SAXPY).unwrap();
    fs::write(dir.join("precious"), "precious").unwrap();
    symlink(dir.join("precious"), dir.join("link.yaml")).unwrap();
    let fifo = dir.join("fifo.yaml");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for target in ["link.yaml", "fifo.yaml", "/dev/null"] {
        for args in [vec!["parse", "saxpy.mf", "-o", target], vec!["tune", "saxpy.mf", "--device", "h100", "--size", "N=1024", "-o", target]] {
            let start = Instant::now();
            let o = metafork(&dir, &args);
            assert_eq!(o.status.code(), Some(1), "{args:?}: {}", text(&o));
            assert!(text(&o).contains("metafork only replaces regular files"), "{args:?}: {}", text(&o));
            assert!(start.elapsed() < Duration::from_secs(60), "{args:?} blocked");
        }
    }
    assert_eq!(fs::read_to_string(dir.join("precious")).unwrap(), "precious");
    assert!(fs::symlink_metadata(dir.join("link.yaml")).unwrap().file_type().is_symlink());
    assert!(Path::new("/dev/null").metadata().is_ok());
    // The output directory as a link, out of harm's way: refused, the target untouched.
    fs::create_dir(dir.join("elsewhere")).unwrap();
    symlink(dir.join("elsewhere"), dir.join("out")).unwrap();
    let o = metafork(&dir, &["gen", "--emit-cuda", "saxpy.mf", "-o", "out"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("symbolic link"), "{}", text(&o));
    assert!(snapshot(&dir.join("elsewhere")).is_empty());
    // A long output name (near the 255-byte limit) gets a short temporary.
    let long = "n".repeat(250);
    let o = metafork(&dir, &["parse", "saxpy.mf", "-o", &long]);
    assert!(o.status.success(), "{}", text(&o));
}

fn gen_into(dir: &Path, source: &str, out: &str) {
    let o = metafork(dir, &["gen", "--emit-cuda", source, "-o", out]);
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn verify_refuses_any_file_that_differs_and_reads_nothing_outside_the_directory() {
    let dir = scratch("hostile-verify");
    fs::write(dir.join("saxpy.mf"), SAXPY).unwrap();
    gen_into(&dir, "saxpy.mf", "good");
    let o = metafork(&dir, &["verify", "good"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    type Tamper = fn(&Path);
    let tampers: [(&str, &str, Tamper); 7] = [
        ("tree.yaml", "tree.yaml", |d| fs::write(d.join("tree.yaml"), fs::read_to_string(d.join("tree.yaml")).unwrap().replace("R_B", "R")).unwrap()),
        ("dispatch header", "saxpy_dispatch.h", |d| fs::write(d.join("saxpy_dispatch.h"), fs::read_to_string(d.join("saxpy_dispatch.h")).unwrap() + "// x\n").unwrap()),
        ("dispatch source", "saxpy_dispatch.cu", |d| fs::write(d.join("saxpy_dispatch.cu"), "int x;\n").unwrap()),
        ("a removed file", "tree.dot", |d| fs::remove_file(d.join("tree.dot")).unwrap()),
        ("an extra manifest entry", "extra.cu", |d| {
            let m = fs::read_to_string(d.join("manifest.json")).unwrap();
            fs::write(d.join("extra.cu"), "").unwrap();
            fs::write(d.join("manifest.json"), m.replace("\"files\": {", &format!("\"files\": {{\n    \"extra.cu\": \"{}\",", metafork::output::manifest::sha256_hex(b"")))).unwrap();
        }),
        ("the source's copy", "source.mf", |d| fs::write(d.join("source.mf"), SAXPY.replace("B >= 1", "B >= 2")).unwrap()),
        ("the source as a link", "source.mf", |d| {
            fs::remove_file(d.join("source.mf")).unwrap();
            symlink("/etc/passwd", d.join("source.mf")).unwrap();
        }),
    ];
    for (i, (what, file, tamper)) in tampers.into_iter().enumerate() {
        let d = dir.join(format!("tampered{i}"));
        gen_into(&dir, "saxpy.mf", d.to_str().unwrap());
        tamper(&d);
        let o = metafork(&dir, &["verify", d.to_str().unwrap()]);
        let t = text(&o);
        assert!(matches!(o.status.code(), Some(1) | Some(3)), "{what}: {t}");
        assert!(t.contains(file), "{what}: the message names no file: {t}");
        assert!(!t.contains("root:"), "{what}: a line of another file was shown: {t}");
    }
    // Generating again over a tampered file refuses to replace it, naming it, unless forced.
    let d = dir.join("tampered0");
    let o = metafork(&dir, &["gen", "--emit-cuda", "saxpy.mf", "-o", d.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("it holds `tree.yaml`, which this output would replace but metafork did not write"), "{}", text(&o));
    assert!(fs::read_to_string(d.join("tree.yaml")).unwrap().contains("R") && !fs::read_to_string(d.join("tree.yaml")).unwrap().contains("R_B"), "the user's edit is kept");
    let o = metafork(&dir, &["gen", "--emit-cuda", "--force", "saxpy.mf", "-o", d.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(metafork(&dir, &["verify", "--files-only", d.to_str().unwrap()]).status.code(), Some(0));
    // A user's file beside the output is kept and not checked, and the check says so (it said
    // "every file is what metafork generates" over a planted `.cu`).
    fs::write(d.join("notes_leaf99.cu"), "__global__ void k() {}\n").unwrap();
    let o = metafork(&dir, &["verify", "--files-only", d.to_str().unwrap()]);
    assert!(o.status.code() == Some(0) && text(&o).contains("1 other entry of the directory, not metafork's, not checked"), "{}", text(&o));
    fs::remove_file(d.join("notes_leaf99.cu")).unwrap();
    // One command's output never silently replaces another's: a timing harness written into
    // `gen`'s directory used to drop its dispatch code and tree; and back.
    let harness = ["tune", "saxpy.mf", "--device", "a100", "--size", "N=4096", "--top", "1", "--emit-harness"];
    let o = metafork(&dir, &[&harness[..], &[d.to_str().unwrap()]].concat());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("it holds the output of `metafork gen`"), "{}", text(&o));
    assert!(d.join("saxpy_dispatch.cu").is_file() && d.join("tree.yaml").is_file());
    assert_eq!(metafork(&dir, &["verify", "--files-only", d.to_str().unwrap()]).status.code(), Some(0));
    let h = dir.join("harness");
    let o = metafork(&dir, &[&harness[..], &[h.to_str().unwrap()]].concat());
    assert!(o.status.success(), "{}", text(&o));
    let o = metafork(&dir, &["gen", "--emit-cuda", "saxpy.mf", "-o", h.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("it holds the output of `metafork tune --emit-harness`"), "{}", text(&o));
    assert!(h.join("saxpy_harness.cu").is_file());
    let o = metafork(&dir, &["verify", h.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("holds the output of `metafork tune --emit-harness`, not of `metafork gen`"), "{}", text(&o));
    let o = metafork(&dir, &[&harness[..], &[d.to_str().unwrap(), "--force"]].concat());
    assert!(o.status.success(), "{}", text(&o));
    assert!(d.join("saxpy_harness.cu").is_file() && !d.join("tree.yaml").exists());
    // A source named in a manifest must be the directory's own copy.
    let d = dir.join("elsewhere");
    gen_into(&dir, "saxpy.mf", d.to_str().unwrap());
    let m = fs::read_to_string(d.join("manifest.json")).unwrap();
    fs::write(d.join("manifest.json"), m.replace("\"file\": \"source.mf\"", "\"file\": \"../../../etc/passwd\"")).unwrap();
    let o = metafork(&dir, &["verify", d.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(!text(&o).contains("root:"), "{}", text(&o));
    // A manifest whose architectures repeat (each used to be compiled again, past
    // --time-limit) is refused before anything is compiled.
    let m = fs::read_to_string(dir.join("good/manifest.json")).unwrap();
    let mut repeated: serde_json::Value = serde_json::from_str(&m).unwrap();
    repeated["ptxas"] = serde_json::json!(vec!["sm_90"; 1000]);
    fs::write(d.join("manifest.json"), repeated.to_string()).unwrap();
    let o = metafork(&dir, &["verify", "--files-only", d.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("its `ptxas` list is not as `metafork gen` writes it (`sm_90` after `sm_90`"), "{}", text(&o));
    // With the source given on the command line, a directory moved elsewhere still verifies.
    fs::rename(dir.join("good"), dir.join("moved")).unwrap();
    let o = metafork(Path::new("/"), &["verify", dir.join("moved").to_str().unwrap(), "--source", dir.join("saxpy.mf").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // Another program given as the source: a difference (exit 3) that says so, not the first
    // missing file of the other program's output (a helper's sweep).
    fs::write(dir.join("other.mf"), SAXPY.replace("assume(N >= 1", "assume(N >= 2")).unwrap();
    let o = metafork(Path::new("/"), &["verify", "--files-only", dir.join("moved").to_str().unwrap(), "--source", dir.join("other.mf").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("other.mf` is not the program") && text(&o).contains("moved` was generated from"), "{}", text(&o));
}

#[test]
fn hostile_file_names_and_wisdom_cannot_inject_code() {
    let dir = scratch("hostile-inject");
    // A directory's name ends the comment, a newline starts a directive, a backslash ends.
    let name = "nl\n#error injected\n*/ \\.mf";
    fs::create_dir_all(dir.join("nl\n#error injected\n*")).unwrap();
    fs::write(dir.join(name), SAXPY).unwrap();
    let o = metafork(&dir, &["gen", "--emit-cuda", name, "-o", "out"]);
    assert!(o.status.success(), "{}", text(&o));
    for e in fs::read_dir(dir.join("out")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "cu" || x == "h") {
            let t = fs::read_to_string(&p).unwrap();
            assert!(!t.lines().any(|l| l.starts_with("#error")), "{}: {t}", p.display());
        }
    }
    if let Some(cxx) = cxx() {
        let o = Command::new(&cxx).args(["-std=c++11", "-fsyntax-only", "-x", "c++"]).arg(dir.join("out/saxpy_dispatch.h")).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let o = metafork(&dir, &["verify", "out"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // Wisdom: a leaf that is not a leaf of the tree, with a comment end in it, is refused with
    // its line; a device name with one is written escaped.
    let leaf = fs::read_to_string(dir.join("out/tree.yaml")).unwrap().lines().find_map(|l| l.trim().strip_prefix("kernel_name: ").map(str::to_string)).unwrap();
    fs::write(dir.join("bad.yaml"), "schedule: saxpy\ndevice: x\nsizes: {N: 4096}\nbest:\n  leaf: \"saxpy_leaf7 */ #error injected /*\"\n  parameters: {B: 64}\n").unwrap();
    let o = metafork(&dir, &["gen", "--emit-cuda", "--wisdom", "bad.yaml", name, "-o", "w"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("bad.yaml:5:") && text(&o).contains("is not a kernel leaf"), "{}", text(&o));
    // A line end is a control character, which no device's name holds: refused with its line.
    fs::write(dir.join("good.yaml"), format!("schedule: saxpy\ndevice: \"evil */ #error injected /* \\n#define x\"\nsizes: {{N: 4096}}\nbest: {{leaf: {leaf}, parameters: {{B: 64}}}}\n")).unwrap();
    let o = metafork(&dir, &["gen", "--emit-cuda", "--wisdom", "good.yaml", name, "-o", "w"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("good.yaml:2: the device name `evil */ #error injected /* \\n#define x` holds a control character"), "{}", text(&o));
    fs::write(dir.join("good.yaml"), format!("schedule: saxpy\ndevice: \"evil */ #error injected /* #define x\"\nsizes: {{N: 4096}}\nbest: {{leaf: {leaf}, parameters: {{B: 64}}}}\n")).unwrap();
    let o = metafork(&dir, &["gen", "--emit-cuda", "--wisdom", "good.yaml", name, "-o", "w"]);
    assert!(o.status.success(), "{}", text(&o));
    let h = fs::read_to_string(dir.join("w/saxpy_dispatch.h")).unwrap();
    assert!(h.contains("metafork_saxpy_wisdom") && !h.lines().any(|l| l.trim_start().starts_with("#error") || l.trim_start().starts_with("#define x")), "{h}");
    if let Some(cxx) = cxx() {
        let o = Command::new(&cxx).args(["-std=c++11", "-fsyntax-only", "-x", "c++"]).arg(dir.join("w/saxpy_dispatch.h")).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    assert_eq!(metafork(&dir, &["verify", "w"]).status.code(), Some(0));
    // A wisdom violating the program's facts, or setting a value beyond `int`.
    fs::write(dir.join("facts.yaml"), format!("schedule: saxpy\ndevice: x\nsizes: {{N: 4096}}\nbest: {{leaf: {leaf}, parameters: {{B: 0}}}}\n")).unwrap();
    let o = metafork(&dir, &["gen", "--emit-cuda", "--wisdom", "facts.yaml", name, "-o", "w2"]);
    assert!(o.status.code() == Some(1) && text(&o).contains("violates the program's fact"), "{}", text(&o));
    fs::write(dir.join("huge.yaml"), format!("schedule: saxpy\ndevice: x\nbest: {{leaf: {leaf}, parameters: {{B: 4294967296}}}}\n")).unwrap();
    let o = metafork(&dir, &["gen", "--emit-cuda", "--wisdom", "huge.yaml", name, "-o", "w2"]);
    assert!(o.status.code() == Some(1) && text(&o).contains("does not fit a C `int`"), "{}", text(&o));
    // A wisdom without every data size would match any size as measured there, one without
    // every program parameter would call the caller's values tuned: both refused.
    fs::write(dir.join("nosizes.yaml"), format!("schedule: saxpy\ndevice: x\nsizes: {{}}\nbest: {{leaf: {leaf}, parameters: {{B: 64}}}}\n")).unwrap();
    let o = metafork(&dir, &["gen", "--emit-cuda", "--wisdom", "nosizes.yaml", name, "-o", "w2"]);
    assert!(o.status.code() == Some(1) && text(&o).contains("nosizes.yaml:3: the wisdom's sizes do not give `N`"), "{}", text(&o));
    fs::write(dir.join("noparams.yaml"), format!("schedule: saxpy\ndevice: x\nsizes: {{N: 4096}}\nbest: {{leaf: {leaf}, parameters: {{}}}}\n")).unwrap();
    let o = metafork(&dir, &["gen", "--emit-cuda", "--wisdom", "noparams.yaml", name, "-o", "w2"]);
    assert!(o.status.code() == Some(1) && text(&o).contains("does not set `B`"), "{}", text(&o));
    assert!(!dir.join("w2").exists());
}

/// Programs and arguments that crashed, hung or ran out of memory, each now a clear error.
#[test]
fn what_crashed_or_hung_is_now_a_clear_error() {
    let dir = scratch("hostile-crash");
    let program = |body: &str| format!("void f(int N, int B, const float a[N], float c[N]) {{\n  assume(N >= 1 && B >= 1);\n{body}\n  meta_schedule {{\n    meta_for (int i = 0; i < d; i++)\n      meta_for (int j = 0; j < B; j++) {{\n        int p = i * B + j;\n        if (p < N) c[p] = a[p];\n      }}\n  }}\n}}\n");
    // A scalar in terms of itself through a shadowed name; a squared chain; a chain whose
    // expansion a fact would need.
    let cases: Vec<(&str, String, &str)> = vec![
        ("shadow", program("  int B2 = B;\n  { int B = B2 * 2; }\n  int d = (N + B - 1) / B;"), "is already a parameter"),
        ("square", program(&((0..12).map(|k| if k == 0 { "  int s0 = N + B + 1;".to_string() } else { format!("  int s{k} = s{} * s{};", k - 1, k - 1) }).collect::<Vec<_>>().join("\n") + "\n  int d = (N + B - 1) / B;")), "too large"),
        ("chain", program(&((0..40).map(|k| match k { 0 => "  int d0 = N;".to_string(), 1 => "  int d1 = B;".to_string(), _ => format!("  int d{k} = d{} + d{};", k - 1, k - 2) }).collect::<Vec<_>>().join("\n") + "\n  assume(d39 >= 1);\n  int d = (N + B - 1) / B;")), "more than 10000 operations"),
        ("min in a fact", program("  assume(min(N, B) >= 1);\n  int d = (N + B - 1) / B;"), "cannot appear in a fact"),
        ("contradiction", program("  assume(N < 0);\n  int d = (N + B - 1) / B;"), "contradict each other"),
        // A negated comparison and a constant are facts Z3 reads too (they were accepted, and
        // every leaf left unverified).
        ("negation", program("  assume(!(N >= 1));\n  int d = (N + B - 1) / B;"), "p.mf:3:10: the facts of `f` contradict each other"),
        ("zero", program("  assume(0);\n  int d = (N + B - 1) / B;"), "p.mf:3:10: the facts of `f` contradict each other"),
        // An extent the facts keep negative was accepted, then reported as an extent of 0.
        ("negative extent", program("  int d = (N + B - 1) / B;").replacen("const float a[N]", "const float a[1 - N]", 1).replace("  assume(N >= 1 && B >= 1);", "  assume(N >= 2 && B >= 1);"), "p.mf:1:36: the extent `1 - N` of array `a` is below 1 for every value the facts of `f` allow"),
        // Remainders that contradict (`N` even and `N % 4 == 1`): refused, not left to `verify`.
        ("remainders", program("  assume(N % 2 == 0 && N % 4 == 1);\n  int d = (N + B - 1) / B;"), "p.mf:3:24: the facts of `f` contradict each other"),
        // Two remainders of one division by a parameter: Z3 left it unknown while each fact
        // had its own quotient.
        ("same division", program("  assume(N % B == 0 && N % B == 1);\n  int d = (N + B - 1) / B;"), "p.mf:3:24: the facts of `f` contradict each other"),
        // A fact no `int` satisfies (it holds over unbounded integers): refused with the type.
        ("past int", program("  assume(N >= 2147483648);\n  int d = (N + B - 1) / B;"), "p.mf:3:10: the facts of `f` admit no value of the parameters' C types"),
        // Facts that leave the kernel's `int` index no value (`N * N` past `int` for every
        // `N >= 70000`): every leaf was unreachable and `gen` said nothing (a helper's sweep).
        ("overflow forced", "void overflow(int N, int B, const float a[N * N], float b[N * N]) {\n  assume(N >= 70000 && B >= 1);\n  meta_schedule {\n    meta_for (int i = 0; i < N; i++)\n      meta_for (int g = 0; g < (N + B - 1) / B; g++)\n        meta_for (int t = 0; t < B; t++) {\n          int j = g * B + t;\n          if (j < N)\n            b[i * N + j] = a[i * N + j] + 1.0f;\n        }\n  }\n}\n".to_string(), "p.mf:2:10: no parameter value the facts of `overflow` admit keeps the kernel's arithmetic defined: `N * N <= 2147483647` is needed"),
        ("huge literal", program("  int d = (N + B - 1) / B;").replace("c[p] = a[p]", "c[p] = a[p] * 1e400"), "out of the range of `double`"),
    ];
    for (what, source, expected) in cases {
        fs::write(dir.join("p.mf"), &source).unwrap();
        let start = Instant::now();
        let o = metafork(&dir, &["gen", "--emit-cuda", "p.mf", "-o", "out"]);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(1), "{what}: {t}");
        assert!(t.contains(expected) && t.contains("p.mf:"), "{what}: {t}");
        assert!(start.elapsed() < Duration::from_secs(60), "{what}: {:?}", start.elapsed());
    }
    // Every `meta_for` extent a plain program parameter: no panic, a kernel.
    fs::write(dir.join("plain.mf"), "void f(int N, int B, int G, const float a[N], float c[N]) {\n  assume(N >= 1 && B >= 1 && G >= 1);\n  meta_schedule {\n    meta_for (int i = 0; i < G; i++)\n      meta_for (int j = 0; j < B; j++) {\n        int p = i * B + j;\n        if (p < N) c[p] = a[p];\n      }\n  }\n}\n").unwrap();
    let o = metafork(&dir, &["gen", "--emit-cuda", "plain.mf", "-o", "plain"]);
    assert!(o.status.success(), "{}", text(&o));
    // Huge tuning spaces: refused, never an abort.
    fs::write(dir.join("s.mf"), SAXPY).unwrap();
    fs::write(dir.join("space.yaml"), "params:\n  a: {range: [-9223372036854775807, 9223372036854775807]}\n").unwrap();
    let o = metafork(&dir, &["tune", "--space", "space.yaml"]);
    assert!(o.status.code() == Some(1) && text(&o).contains("more than"), "{}", text(&o));
    // A hundred two-valued parameters: under the configurations' cap long after their rows
    // fill memory (a helper's file aborted on a 1.6 GB allocation); the cap counts values.
    let wide: String = (0..100).map(|k| format!("  p{k}: [1, 2]\n")).collect();
    fs::write(dir.join("wide.yaml"), format!("params:\n{wide}")).unwrap();
    let o = metafork(&dir, &["tune", "--space", "wide.yaml"]);
    assert!(o.status.code() == Some(1) && text(&o).contains("admissible configurations of its 100 parameters"), "{}", text(&o));
    fs::write(dir.join("cart.yaml"), "params:\n  a: {range: [1, 1000000]}\n  b: {range: [1, 1000000]}\n  c: {range: [1, 1000000]}\n").unwrap();
    let start = Instant::now();
    let o = metafork(&dir, &["tune", "--space", "cart.yaml", "--time-limit", "20"]);
    assert!(matches!(o.status.code(), Some(1) | Some(4)) && text(&o).contains("space"), "{}", text(&o));
    assert!(start.elapsed() < Duration::from_secs(60));
    // A range of more values than any space holds: a usage error, as clap reads the argument.
    let o = metafork(&dir, &["tune", "s.mf", "--device", "h100", "--size", "N=1024", "--range", "B=-9223372036854775807..9223372036854775807"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("at most 1000000 values"), "{}", text(&o));
    // Sizes beyond `int`.
    let o = metafork(&dir, &["tune", "s.mf", "--device", "h100", "--size", "N=3000000000"]);
    assert!(o.status.code() == Some(1) && text(&o).contains("does not fit `int`"), "{}", text(&o));
    // And beyond `char`: a sweep found 200, -129 and 100000 ranked for a `char` size.
    fs::write(dir.join("c.mf"), "void cs(int N, char c, int B, float y[N]) {\n  assume(N >= 1 && B >= 1);\n  meta_schedule {\n    meta_for (int v = 0; v < (N + B - 1) / B; v++)\n      meta_for (int u = 0; u < B; u++) {\n        int i = v * B + u;\n        if (i < N) y[i] = (float)c;\n      }\n  }\n}\n").unwrap();
    for c in ["200", "-129", "100000"] {
        let o = metafork(&dir, &["tune", "c.mf", "--device", "h100", "--size", "N=1024", "--size", &format!("c={c}")]);
        assert!(o.status.code() == Some(1) && text(&o).contains(&format!("`c` = {c} does not fit `signed char`")), "{}", text(&o));
    }
    let o = metafork(&dir, &["tune", "c.mf", "--device", "h100", "--size", "N=1024", "--size", "c=-128"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // A full standard output is an error, not a panic.
    gen_into(&dir, "s.mf", "sx");
    let full = fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    let o = bin().current_dir(&dir).args(["verify", "sx"]).stdout(full).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot write to standard output"), "{}", text(&o));
    // The help and the version too (clap printed them and exited 0), but a pipe closed early
    // (`metafork --help | head -1`) is no error.
    for flag in ["--help", "--version", "-h"] {
        let full = fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
        let o = bin().arg(flag).stdout(full).output().unwrap();
        assert_eq!(o.status.code(), Some(1), "{flag}: {}", text(&o));
        assert!(String::from_utf8_lossy(&o.stderr).contains("cannot write to standard output"), "{flag}: {}", text(&o));
    }
    let mut child = bin().arg("--help").stdout(std::process::Stdio::piped()).spawn().unwrap();
    drop(child.stdout.take());
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

#[test]
fn budgets_end_long_phases_with_their_own_exit_code() {
    let dir = scratch("hostile-budget");
    let matmul = fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/matmul.mf")).unwrap();
    fs::write(dir.join("matmul.mf"), &matmul).unwrap();
    let start = Instant::now();
    let o = metafork(&dir, &["gen", "--emit-cuda", "matmul.mf", "-o", "out", "--time-limit", "1"]);
    // A debug build needs longer than a second for matmul's tree.
    if !o.status.success() {
        assert_eq!(o.status.code(), Some(4), "{}", text(&o));
        assert!(text(&o).contains("time budget"), "{}", text(&o));
        assert!(!dir.join("out").exists(), "nothing is written when the tree is not finished");
    }
    assert!(start.elapsed() < Duration::from_secs(30), "{:?}", start.elapsed());
    // A ptxas that never ends is stopped.
    let fake = dir.join("bin");
    fs::create_dir(&fake).unwrap();
    for tool in ["ptxas", "nvcc"] {
        fs::write(fake.join(tool), "#!/bin/sh\nsleep 600\n").unwrap();
        let mut p = fs::metadata(fake.join(tool)).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut p, 0o755);
        fs::set_permissions(fake.join(tool), p).unwrap();
    }
    fs::write(dir.join("s.mf"), SAXPY).unwrap();
    let path = format!("{}:{}", fake.display(), std::env::var("PATH").unwrap_or_default());
    let start = Instant::now();
    let o = bin().current_dir(&dir).env("PATH", &path).args(["counters", "s.mf", "--ptxas", "sm_90", "--time-limit", "3"]).output().unwrap();
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    assert!(text(&o).contains("ptxas for sm_90: stopped: the time budget ran out"), "{}", text(&o));
    assert!(start.elapsed() < Duration::from_secs(30), "{:?}", start.elapsed());
    // `tune` compiling the leaves, and `verify` re-deriving `gen --ptxas`'s counts, end with the
    // budget too, and say so with exit 4 (they said 1, as for bad input), on time.
    let o = metafork(&dir, &["gen", "--emit-cuda", "--ptxas", "sm_90", "s.mf", "-o", "px"]);
    assert!(o.status.success(), "{}", text(&o));
    for args in [&["tune", "s.mf", "--device", "h100", "--size", "N=4096", "--time-limit", "3"][..], &["verify", "px", "--time-limit", "3"]] {
        let start = Instant::now();
        let o = bin().current_dir(&dir).env("PATH", &path).args(args).output().unwrap();
        assert_eq!(o.status.code(), Some(4), "{args:?}: {}", text(&o));
        assert!(text(&o).contains("time budget"), "{args:?}: {}", text(&o));
        assert!(start.elapsed() < Duration::from_secs(20), "{args:?}: {:?}", start.elapsed());
    }
    // A single run's own limit (300 s at most) is `ptxas::run_bounded`'s unit test.
    // Thousands of facts on one size: the search for a point that satisfies them was
    // quadratic in them and never asked the budget (a sweep's 5,000 `assume`s took 50 s under
    // `--time-limit 5`, and a Ctrl-C as long). The budget now ends it.
    let mut facts = String::from("void f(int N, int B, const float x[N], float y[N]) {\n  assume(N >= 1 && B >= 1);\n");
    for i in 0..5000 {
        facts += &format!("  assume(N >= {i});\n");
    }
    facts += "  meta_schedule {\n    meta_for (int v = 0; v < (N + B - 1) / B; v++)\n      meta_for (int u = 0; u < B; u++) {\n        int i = v * B + u;\n        if (i < N) y[i] = x[i];\n      }\n  }\n}\n";
    fs::write(dir.join("facts.mf"), facts).unwrap();
    let start = Instant::now();
    let o = metafork(&dir, &["gen", "--emit-cuda", "facts.mf", "-o", "facts", "--time-limit", "1"]);
    assert!(matches!(o.status.code(), Some(0) | Some(4)), "{}", text(&o));
    assert!(start.elapsed() < Duration::from_secs(20), "{:?}", start.elapsed());
}

#[test]
fn diagnostics_count_characters_read_any_line_end_and_exit_codes_follow_one_scheme() {
    let dir = scratch("hostile-diag");
    // A column after non-ASCII text counts characters.
    fs::write(dir.join("u.mf"), SAXPY.replace("y[p] = alpha * x[p] + y[p];", "y[p] = /* é */ alpha * x[p] + @;")).unwrap();
    let o = metafork(&dir, &["parse", "u.mf"]);
    assert_eq!(o.status.code(), Some(1));
    let line = SAXPY.lines().position(|l| l.contains("y[p] = alpha")).unwrap() + 1;
    let col = "          y[p] = /* é */ alpha * x[p] + ".chars().count() + 1;
    assert!(text(&o).contains(&format!("u.mf:{line}:{col}:")), "{}", text(&o));
    // Lone carriage returns end lines.
    fs::write(dir.join("cr.mf"), SAXPY.replace('\n', "\r").replace("y[p] = alpha * x[p] + y[p];", "y[p] = alpha * x[p] + @;")).unwrap();
    let o = metafork(&dir, &["parse", "cr.mf"]);
    assert!(text(&o).contains(&format!("cr.mf:{line}:")), "{}", text(&o));
    fs::write(dir.join("crlf.mf"), SAXPY.replace('\n', "\r\n")).unwrap();
    assert!(metafork(&dir, &["parse", "crlf.mf"]).status.success());
    // Usage errors exit 2; input errors 1; the scheme is in --help.
    assert_eq!(metafork(&dir, &["gen"]).status.code(), Some(2));
    assert_eq!(metafork(&dir, &["frobnicate"]).status.code(), Some(2));
    assert_eq!(metafork(&dir, &["parse", "missing.mf"]).status.code(), Some(1));
    let help = text(&metafork(&dir, &["--help"]));
    assert!(help.contains("3 a defect") && help.contains("4 unverified"), "{help}");
    // A device profile no device has, with the line at fault.
    let h100 = text(&metafork(&dir, &["devices", "h100"]));
    fs::write(dir.join("dev.yaml"), h100.replace("warp_size: 32", "warp_size: 31")).unwrap();
    let o = metafork(&dir, &["devices", "dev.yaml"]);
    let at = h100.lines().position(|l| l.starts_with("warp_size")).unwrap() + 1;
    assert!(o.status.code() == Some(1) && text(&o).contains(&format!("dev.yaml:{at}: field `warp_size` must be 32")), "{}", text(&o));
}

/// A block size the facts do not bound: the division by it becomes a fact, so the dispatcher
/// refuses `B = 0` and the tree (and so `verify`) covers only points where `B != 0`.
#[test]
fn a_division_by_a_parameter_is_refused_where_it_is_zero() {
    let source = SAXPY.replace("assume(N >= 1 && B >= 1);", "assume(N >= 1);");
    let program = metafork::frontend::check_source("z.mf", &source).unwrap();
    let f = &program.kernels[0];
    assert!(f.facts.iter().any(|x| x.kind == metafork::frontend::model::FactKind::Defined && x.condition.to_string() == "B != 0"), "{:?}", f.facts);
    let backend = constraints::solver::Backend::default();
    let (_, trees, _) = metafork::emit::command::files("z.mf", &source, &program, true, &Default::default()).unwrap();
    let (function, tree) = &trees[0];
    assert!(tree.root_constraints.constraints().iter().any(|c| c.to_string() == "B != 0"), "{:?}", tree.root_constraints);
    let d = metafork::dispatch::Dispatcher::new(function, tree).unwrap();
    let limits = metafork::dispatch::DeviceLimits::of(&constraints::device::DeviceProfile::load("h100").unwrap());
    let at = |b: i64| d.select_exact(&limits, &[], &[("N".to_string(), 1000), ("B".to_string(), b)].into()).unwrap();
    assert!(matches!(at(0), metafork::dispatch::Selection::OutsideAssumptions(ref t) if t.contains("B != 0")), "{:?}", at(0));
    assert!(matches!(at(128), metafork::dispatch::Selection::Leaf(_)));
    let reports = metafork::verify::verify_tree(function, tree, &backend, Default::default()).unwrap();
    assert!(reports.iter().all(|r| r.status() == metafork::verify::Status::Proved));
    // The launch wrapper refuses it too, before dividing.
    let (files, _, _) = metafork::emit::command::files("z.mf", &source, &program, true, &Default::default()).unwrap();
    let leaf = files.iter().find(|(n, _)| n.ends_with(".cu") && n.contains("_leaf")).unwrap();
    let text = String::from_utf8(leaf.1.clone()).unwrap();
    let guard = text.find("if ((B) == 0) return cudaErrorInvalidValue;").expect("a guard");
    assert!(guard < text.find("int dim = ").unwrap(), "{text}");
}

/// A fact holds for the whole call and is checked once: one reading a host loop's counter, or
/// a scalar defined from it, is refused where it stands (it was refused by `gen` with no place).
#[test]
fn a_fact_on_a_host_loop_counter_is_refused_at_its_place() {
    let program = |before: &str, fact: &str| format!("void f(int N, int T, int B, float a[N], float b[N]) {{\n  for (int t = 0; t < T; t++) {{\n    {before}\n    assert({fact});\n    meta_schedule {{\n      meta_for (int i = 0; i < N / B; i++)\n        meta_for (int j = 0; j < B; j++)\n          b[i * B + j] = a[i * B + j] + t;\n    }}\n  }}\n}}\n");
    let err = metafork::frontend::check_source("h.mf", &program("", "t < N")).unwrap_err().render(false);
    assert!(err.contains("h.mf:4:12: `t` is a host loop's counter and cannot appear in a fact"), "{err}");
    let err = metafork::frontend::check_source("h.mf", &program("int d = N - t;", "B < N && d > 0")).unwrap_err().render(false);
    assert!(err.contains("h.mf:4:21: `d` is defined from a host loop's counter"), "{err}");
    // A scalar of the parameters only, inside the loop, may be stated.
    assert!(metafork::frontend::check_source("h.mf", &program("int d = N - B;", "d > 0")).is_ok());
}

/// Constant arithmetic that overflows the C type it is computed in (`2147483647 + 1` is an
/// `int` sum) is undefined in C: refused where it stands, as a constant division by zero is.
/// nvcc only warned, and `verify` proved such leaves. A `long` operand makes it defined.
#[test]
fn constant_arithmetic_past_its_type_is_refused() {
    let program = |e: &str| format!("void f(int N, long a[N]) {{\n  meta_schedule {{\n    meta_for (int v = 0; v < N; v++)\n      meta_for (int u = 0; u < 1; u++)\n        a[v] = {e};\n  }}\n}}\n");
    for (e, quoted) in [("2147483647 + 1", "(2147483647 + 1)"), ("46341 * 46341", "(46341 * 46341)"), ("(-2147483647 - 1) % -1", "(-2147483648 % -1)"), ("-(-2147483647 - 1)", "(-(-2147483648))")] {
        let err = metafork::frontend::check_source("c.mf", &program(e)).unwrap_err().render(false);
        assert!(err.contains("c.mf:5:16: this constant arithmetic overflows `int` ") && err.contains(quoted), "{e}: {err}");
    }
    for e in ["2147483647L + 1", "(long)46341 * 46341", "-2147483647 - 1", "N * 3000000000", "9223372036854775807 - 1"] {
        assert!(metafork::frontend::check_source("c.mf", &program(e)).is_ok(), "{e}");
    }
}

/// A division the program guards (`M != 0 ? a[i] / M : a[i]`, `B > 0 && N / B > 2`, an `if`)
/// is defined wherever it runs: it adds no fact `M != 0`, so the dispatcher does not refuse
/// `M = 0`, where the program is well defined. An unguarded one still does.
#[test]
fn a_guarded_division_adds_no_fact() {
    let program = |body: &str| format!("void g(int N, int M, int B, const int a[N], int c[N]) {{\n  assume(N >= 1 && B >= 1);\n  meta_schedule {{\n    meta_for (int v = 0; v < (N + B - 1) / B; v++)\n      meta_for (int u = 0; u < B; u++) {{\n        int i = v * B + u;\n        if (i < N) {body}\n      }}\n  }}\n}}\n");
    let defined = |body: &str| -> Vec<String> {
        let p = metafork::frontend::check_source("g.mf", &program(body)).unwrap();
        p.kernels[0].facts.iter().filter(|f| f.kind == metafork::frontend::model::FactKind::Defined).map(|f| f.condition.to_string()).collect()
    };
    for guarded in ["c[i] = M != 0 ? a[i] / M : a[i];", "c[i] = M == 0 ? a[i] : a[i] % M;", "c[i] = M > 0 && a[i] / M > 2;", "c[i] = M == 0 || a[i] / M > 2;", "if (0 < M) c[i] = a[i] / M;", "if (!(M == 0)) c[i] = a[i] / M; else c[i] = 0;", "if (M == 0) c[i] = 0; else c[i] = a[i] / M;"] {
        assert!(!defined(guarded).iter().any(|f| f.contains('M')), "{guarded}: {:?}", defined(guarded));
    }
    for unguarded in ["c[i] = a[i] / M;", "c[i] = M >= 0 ? a[i] / M : 0;", "c[i] = M != 1 ? a[i] / M : 0;", "if (M == 0) c[i] = a[i] / M;"] {
        assert!(defined(unguarded).iter().any(|f| f == "M != 0"), "{unguarded}: {:?}", defined(unguarded));
    }
}

/// Functions `scale` and `Scale`: their files differ only in case, one replaces the other on
/// macOS's and Windows' default file systems. `gen` writes them (they are distinct here) and
/// warns once, naming a pair; a program without such names gets no warning.
#[test]
fn output_files_that_differ_only_in_case_are_warned_of() {
    let dir = scratch("case-only-names");
    let lower = SAXPY.replace("saxpy", "scale");
    fs::write(dir.join("c.mf"), format!("{lower}\n{}", SAXPY.replace("saxpy", "Scale"))).unwrap();
    let o = metafork(&dir, &["gen", "--emit-cuda", "c.mf", "-o", "out"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(err.matches("differ only in case").count(), 1, "{err}");
    assert!(err.contains("`metafork_run_Scale.cu` and `metafork_run_scale.cu` (and 5 more pairs)"), "{err}");
    assert!(dir.join("out/scale_dispatch.cu").exists() && dir.join("out/Scale_dispatch.cu").exists());
    fs::write(dir.join("d.mf"), lower).unwrap();
    let o = metafork(&dir, &["gen", "--emit-cuda", "d.mf", "-o", "out2"]);
    assert!(o.status.success() && !String::from_utf8_lossy(&o.stderr).contains("differ only in case"), "{}", text(&o));
}

/// A sweep's findings on the output directory: the generated files named the source by the
/// path as typed, so `saxpy.mf`, its absolute path and `../saxpy.mf` gave three different
/// outputs (and the user's directories in every file); `-o "$PWD"` and `-o ../out` from inside
/// `out` replaced the working directory under the caller (only `-o .` was refused); a manifest
/// listing a file twice was read with the last hash winning.
#[test]
fn outputs_do_not_depend_on_the_source_paths_spelling_nor_replace_the_working_directory() {
    let dir = scratch("hostile-spelling");
    fs::write(dir.join("saxpy.mf"), SAXPY).unwrap();
    fs::create_dir(dir.join("sub")).unwrap();
    gen_into(&dir, "saxpy.mf", "relative");
    gen_into(&dir, dir.join("saxpy.mf").to_str().unwrap(), "absolute");
    gen_into(&dir.join("sub"), "../saxpy.mf", "../parent");
    let relative = snapshot(&dir.join("relative"));
    assert!(relative.len() > 5, "{:?}", relative.keys());
    assert_eq!(relative, snapshot(&dir.join("absolute")));
    assert_eq!(relative, snapshot(&dir.join("parent")));
    let header = fs::read_to_string(dir.join("relative/saxpy_dispatch.h")).unwrap();
    assert!(header.contains("Generated by metafork from saxpy.mf:") && !header.contains(dir.to_str().unwrap()), "{header}");
    // The working directory, or a directory holding it, is not replaced, however it is spelt.
    fs::create_dir_all(dir.join("out/inner")).unwrap();
    fs::write(dir.join("out/mine.txt"), "mine").unwrap();
    let here = dir.join("out");
    let source = dir.join("saxpy.mf");
    let abs = here.to_str().unwrap().to_string();
    for (cwd, target) in [(&here, abs.as_str()), (&here, "../out"), (&here.join("inner"), ".."), (&here.join("inner"), "../../out")] {
        let o = metafork(cwd, &["gen", "--emit-cuda", "--force", source.to_str().unwrap(), "-o", target]);
        assert_eq!(o.status.code(), Some(1), "{target}: {}", text(&o));
        assert!(text(&o).contains("is the working directory, or holds it") || text(&o).contains("give the output directory a name"), "{target}: {}", text(&o));
        assert_eq!(fs::read_to_string(dir.join("out/mine.txt")).unwrap(), "mine");
        assert!(dir.join("out/inner").is_dir());
    }
    // A file listed twice in the manifest is refused, as a field given twice is.
    let m = fs::read_to_string(dir.join("relative/manifest.json")).unwrap();
    fs::write(dir.join("relative/manifest.json"), m.replace("\"files\": {", &format!("\"files\": {{\n    \"source.mf\": \"{}\",", "0".repeat(64)))).unwrap();
    let o = metafork(&dir, &["verify", "--files-only", "relative"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("duplicate key `source.mf`"), "{}", text(&o));
}
