//! The `metafork` binary as a user runs it: output, exit codes, help, atomic files.

use std::path::PathBuf;
use std::process::{Command, Output};

fn metafork(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_metafork")).args(args).output().unwrap()
}

fn example(name: &str) -> String {
    format!("{}/examples/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn temp_dir(tag: &str) -> PathBuf {
    crate::common::scratch(&format!("cli-{tag}"))
}

#[test]
fn parse_prints_the_documented_keys_for_every_example() {
    for name in ["matadd.mf", "matmul.mf", "jacobi1d.mf", "transpose.mf"] {
        let out = metafork(&["parse", &example(name)]);
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        let yaml: serde_yaml::Value = serde_yaml::from_slice(&out.stdout).unwrap();
        let kernel = &yaml["kernels"][0];
        for key in ["data_parameters", "program_parameters", "arrays", "facts", "schedules"] {
            assert!(!kernel[key].is_null(), "{name}: missing `{key}`");
        }
        let schedule = &kernel["schedules"][0];
        assert!(schedule["grid"].as_sequence().is_some_and(|g| !g.is_empty()));
        assert!(schedule["block"].as_sequence().is_some_and(|b| !b.is_empty()));
        assert_eq!(kernel["arrays"][0]["element_type"].as_str(), Some("float"));
    }
}

#[test]
fn output_is_deterministic() {
    let a = metafork(&["parse", &example("matmul.mf")]);
    let b = metafork(&["parse", &example("matmul.mf")]);
    assert_eq!(a.stdout, b.stdout);
}

#[test]
fn json_output_parses_and_matches_the_yaml() {
    let y = metafork(&["parse", &example("transpose.mf")]);
    let j = metafork(&["parse", "--json", &example("transpose.mf")]);
    let from_yaml: serde_json::Value = serde_yaml::from_slice(&y.stdout).unwrap();
    let from_json: serde_json::Value = serde_json::from_slice(&j.stdout).unwrap();
    assert_eq!(from_yaml, from_json);
}

#[test]
fn bad_input_exits_1_with_file_line_column() {
    let dir = temp_dir("bad");
    let f = dir.join("bad.mf");
    std::fs::write(&f, "void f(int N, int B, float a[N]) {\n  meta_schedule {\n    meta_for (int i = 0; i < N / B; i++)\n      meta_for (int j = 0; j < B; j++)\n        a[i * B + j] = b;\n  }\n}\n").unwrap();
    let out = metafork(&["parse", "--color", "never", f.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.mf:5:24: unknown identifier `b`"), "{err}");
    assert!(err.contains("a[i * B + j] = b;"), "the source line is shown: {err}");
    assert!(out.stdout.is_empty());
    // Standard error a pipe nobody reads (`2>&1 | head` once `head` is gone): still exit 1,
    // not a panic's 101.
    let mut fds = [0; 2];
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    unsafe { libc::close(fds[0]) };
    let write_end = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fds[1]) };
    let out = Command::new(env!("CARGO_BIN_EXE_metafork")).args(["parse", f.to_str().unwrap()]).stderr(std::process::Stdio::from(write_end)).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "with standard error closed");
    // A legal name too long to name files after (a helper's: 300 characters gave `gen` an
    // internal error): refused at its place, by every command; 200 characters work.
    for (length, ok) in [(300, false), (200, true)] {
        let name = "k".repeat(length);
        std::fs::write(&f, format!("void {name}(int n, int B, float a[n]) {{\n  assume(n >= 1 && B >= 1);\n  meta_schedule {{\n    meta_for (int v = 0; v < (n + B - 1) / B; v++)\n      meta_for (int u = 0; u < B; u++)\n        if (v * B + u < n) a[v * B + u] = 0.0f;\n  }}\n}}\n")).unwrap();
        let out = metafork(&["gen", "--emit-cuda", "--color", "never", f.to_str().unwrap(), "-o", dir.join("long").to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.success(), ok, "{length}: {err}");
        if !ok {
            assert_eq!(out.status.code(), Some(1));
            assert!(err.contains("bad.mf:1:6: function name of 300 characters") && !err.contains("internal error"), "{err}");
            assert!(!dir.join("long").exists());
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn missing_and_binary_files_are_clear_errors() {
    let out = metafork(&["parse", "/nonexistent/x.mf"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read `/nonexistent/x.mf`"));
    let dir = temp_dir("bin");
    let f = dir.join("bin.mf");
    std::fs::write(&f, [0xffu8, 0xfe, 0x00, 0x41]).unwrap();
    let out = metafork(&["parse", f.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bin.mf:1:1: the source is not valid UTF-8 (byte offset 0)"), "{}", String::from_utf8_lossy(&out.stderr));
    // A bad byte further in is located by line and column (in characters: `é` is one).
    std::fs::write(&f, b"void f(int N) {\n  // caf\xc3\xa9 \xe9t\xe9\n}\n").unwrap();
    let out = metafork(&["parse", f.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bin.mf:2:11: the source is not valid UTF-8 (byte offset 27)"), "{}", String::from_utf8_lossy(&out.stderr));
    // `verify` takes gen's directory: given the program itself, it says so.
    let out = metafork(&["verify", &example("saxpy.mf")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is a file; `verify` takes a directory written by `metafork gen --emit-cuda`"), "{}", String::from_utf8_lossy(&out.stderr));
    // Given a directory of `gen` without --emit-cuda, it says that is a usage error (1), not
    // a defect (3).
    let tree_only = dir.join("tree-only");
    let out = metafork(&["gen", &example("saxpy.mf"), "-o", tree_only.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = metafork(&["verify", tree_only.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("without --emit-cuda"), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::remove_dir_all(dir).unwrap();
}

/// What `child` printed once it ended; killed (and the test failed) if it runs `seconds`
/// more: `what` names it.
fn finished_within(mut child: std::process::Child, seconds: u64, what: &str) -> Output {
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > std::time::Duration::from_secs(seconds) {
            child.kill().unwrap();
            panic!("{what} still ran after {seconds} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// `metafork ARGS`, killed (and the test failed) if it has not finished within 30 seconds.
fn metafork_within_30_s(args: &[&str]) -> Output {
    let child = Command::new(env!("CARGO_BIN_EXE_metafork")).args(args).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    finished_within(child, 30, &format!("`metafork {}`", args.join(" ")))
}

/// Every file a user names (source, device profile, wisdom, tuning space) is read only if it
/// is a regular file of bounded size: a FIFO used to hang, `/dev/zero` to fill memory; and a
/// YAML one only if its nesting is bounded.
#[test]
fn inputs_that_are_not_regular_files_are_refused_at_once() {
    let dir = temp_dir("fifo");
    let fifo = dir.join("in.yaml");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    // Sparse: 17 MiB long, nothing written.
    let huge = dir.join("huge.yaml");
    std::fs::File::create(&huge).unwrap().set_len(17 << 20).unwrap();
    let (program, out_dir) = (example("saxpy.mf"), dir.join("out"));
    let (program, out_dir) = (program.as_str(), out_dir.to_str().unwrap());
    for (bad, why) in [(fifo.to_str().unwrap(), "it is a FIFO, not a regular file"), ("/dev/zero", "it is a device, not a regular file"), (huge.to_str().unwrap(), "it is larger than 16 MiB")] {
        let profile_why = if bad == huge.to_str().unwrap() { "it is larger than 1 MiB" } else { why };
        for (args, expected) in [
            (vec!["parse", bad], format!("cannot read `{bad}`: {why}")),
            (vec!["devices", bad], format!("cannot read device profile `{bad}`: {profile_why}")),
            (vec!["tune", "--device", bad, program], format!("cannot read device profile `{bad}`: {profile_why}")),
            (vec!["tune", "--device", "h100", "--space", bad, program], format!("cannot read `{bad}`: {why}")),
            (vec!["gen", "--emit-cuda", "--wisdom", bad, program, "-o", out_dir], format!("cannot read `{bad}`: {why}")),
        ] {
            let out = metafork_within_30_s(&args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
            assert!(err.contains(&expected), "{args:?}: {err}");
        }
    }
    // A settings file nested 100,000 deep (200 KB; libyaml took 17 s on it) is refused before
    // it is parsed, at its line.
    let deep = dir.join("deep.yaml");
    std::fs::write(&deep, format!("# settings\nname: {}{}\n", "[".repeat(100_000), "]".repeat(100_000))).unwrap();
    let deep = deep.to_str().unwrap();
    for args in [vec!["devices", deep], vec!["tune", "--device", "h100", "--space", deep, program], vec!["gen", "--emit-cuda", "--wisdom", deep, program, "-o", out_dir]] {
        let out = metafork_within_30_s(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(&format!("{deep}:2: collections nested deeper than 128 levels")), "{args:?}: {err}");
    }
    assert!(!dir.join("out").exists());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn output_file_is_written_whole_and_not_on_failure() {
    let dir = temp_dir("out");
    let target = dir.join("report.yaml");
    let out = metafork(&["parse", &example("matadd.mf"), "-o", target.to_str().unwrap()]);
    assert!(out.status.success());
    let written = std::fs::read(&target).unwrap();
    assert_eq!(written, metafork(&["parse", &example("matadd.mf")]).stdout);
    // A failing run leaves the previous file untouched and no temporary behind.
    let bad = dir.join("bad.mf");
    std::fs::write(&bad, "void f(").unwrap();
    let out = metafork(&["parse", bad.to_str().unwrap(), "-o", target.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(std::fs::read(&target).unwrap(), written);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn help_explains_the_commands() {
    let out = metafork(&["--help"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("parse") && text.contains("MetaFork"), "{text}");
    let out = metafork(&["parse", "--help"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("data_parameters") && text.contains("program_parameters"), "{text}");
    let out = metafork(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn devices_lists_the_built_in_profiles_and_checks_a_users_profile() {
    let out = metafork(&["devices"]);
    assert!(out.status.success());
    let table = String::from_utf8(out.stdout).unwrap();
    for name in ["m2050", "v100", "a100", "l4", "h100", "h200"] {
        assert!(table.lines().any(|l| l.starts_with(name)), "{name} missing from\n{table}");
    }
    let out = metafork(&["devices", "h200"]);
    assert!(out.status.success());
    let yaml: serde_yaml::Value = serde_yaml::from_slice(&out.stdout).unwrap();
    assert_eq!(yaml["multiprocessors"].as_u64(), Some(132));

    let dir = temp_dir("devices");
    let bad = dir.join("bad.yaml");
    let text = String::from_utf8(metafork(&["devices", "h200"]).stdout).unwrap().replace("warps_per_multiprocessor: 64\n", "");
    std::fs::write(&bad, text).unwrap();
    let out = metafork(&["devices", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("warps_per_multiprocessor") && err.contains("bad.yaml"), "{err}");
    let out = metafork(&["devices", "h300"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("built-in profiles"));
    std::fs::remove_dir_all(&dir).ok();
}

/// `--json` on `devices`, `gen` and `verify` (issue 28): machine-readable output that agrees
/// with the files and the text report.
#[test]
fn devices_gen_and_verify_speak_json() {
    let out = metafork(&["devices", "--json"]);
    assert!(out.status.success());
    let all: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(all.len(), constraints::device::DeviceProfile::built_in().len());
    assert!(all.iter().any(|d| d["name"] == "h100" && d["threads_per_block"] == 1024));
    let out = metafork(&["devices", "a100", "--json"]);
    let one: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(one["name"], "a100");
    let out = metafork(&["devices", "h999", "--json"]);
    assert_eq!(out.status.code(), Some(1));

    let dir = temp_dir("json");
    let target = dir.join("out");
    let out = metafork(&["gen", "--emit-cuda", "--json", &example("saxpy.mf"), "-o", target.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let schedule = &summary["schedules"][0];
    assert_eq!(schedule["schedule"], "saxpy");
    let mut kernels: Vec<String> = schedule["kernels"].as_array().unwrap().iter().map(|k| format!("{}.cu", k.as_str().unwrap())).collect();
    kernels.sort();
    let mut written: Vec<String> = std::fs::read_dir(&target).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).filter(|f| f.ends_with(".cu") && !f.ends_with("_dispatch.cu") && !f.starts_with("metafork_run_")).collect();
    written.sort();
    assert!(summary["files"].as_array().unwrap().iter().any(|f| f == "metafork_run_saxpy.cu"), "the host driver is among the files");
    assert_eq!(kernels, written, "the summary's kernels are the files written");
    // The files listed are exactly the files written, the manifest among them.
    let listed: Vec<&str> = summary["files"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
    let mut on_disk: Vec<String> = std::fs::read_dir(&target).unwrap().map(|e| e.unwrap()).filter(|e| e.file_type().unwrap().is_file()).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    on_disk.sort();
    assert_eq!(listed, on_disk, "the summary lists every file written, in order");
    assert!(listed.contains(&"manifest.json"), "{listed:?}");
    let out = metafork(&["verify", "--json", target.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let verdicts: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(verdicts.len() as u64, schedule["kernel_leaves"].as_u64().unwrap(), "one verdict per kernel leaf");
    assert!(verdicts.iter().all(|v| v["status"] == "proved" && v["points"].as_u64().unwrap() > 0), "{verdicts:?}");
    // With --verify, one JSON value still: the summary with the verdicts as its member (it
    // printed two documents back to back, which no JSON reader takes).
    let out = metafork(&["gen", "--emit-cuda", "--json", "--verify", "--force", &example("saxpy.mf"), "-o", target.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let both: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(both["schedules"], summary["schedules"]);
    let with_gen = both["verdicts"].as_array().unwrap();
    assert_eq!(with_gen.len(), verdicts.len());
    assert!(with_gen.iter().zip(&verdicts).all(|(a, b)| a["kernel"] == b["kernel"] && a["status"] == "proved"), "{with_gen:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The README and `--help` agree (issue 28): the exit statuses say the same, and every option
/// the README's command table shows is one the command's `--help` documents.
#[test]
fn readme_and_help_agree() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let plain = |t: &str| t.replace(['*', '`'], "").split_whitespace().collect::<Vec<_>>().join(" ");
    let help = String::from_utf8(metafork(&["--help"]).stdout).unwrap();
    let statuses = |t: &str| -> String {
        let t = plain(t);
        let from = t.find("0 success").expect("the exit statuses");
        let to = from + t[from..].find("at once).").expect("their end") + "at once).".len();
        t[from..to].to_string()
    };
    let paragraph = &readme[readme.find("**Exit status**").unwrap()..];
    assert_eq!(statuses(paragraph), statuses(&help), "README and --help give different exit statuses");
    let table = &readme[readme.find("## Commands").unwrap()..];
    let mut checked = 0;
    for row in table.lines().take_while(|l| !l.starts_with("## ") || l.starts_with("## Commands")).filter(|l| l.starts_with("| `metafork ")) {
        let usage = row.split('|').nth(1).unwrap();
        let Some(command) = usage.trim().trim_matches('`').split_whitespace().nth(1).filter(|c| c.chars().all(|ch| ch.is_ascii_lowercase())) else { continue };
        let help = String::from_utf8(metafork(&[command, "--help"]).stdout).unwrap();
        assert!(!help.is_empty(), "README lists `metafork {command}`, which has no help");
        for option in usage.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')).filter(|w| w.starts_with("--") && w.len() > 2) {
            assert!(help.contains(option), "README shows `metafork {command} {option}`, which `metafork {command} --help` does not document");
            checked += 1;
        }
    }
    assert!(checked >= 15, "the README's command table was not found ({checked} options checked)");
}

/// Requests that cannot mean anything are usage errors (exit 2, as clap's), not a verdict:
/// `verify --points 0` said every leaf was unverified because Z3 found no point. A value a
/// `tune --range` lists twice is one candidate.
#[test]
fn meaningless_counts_are_usage_errors_and_repeated_values_one_candidate() {
    let out = metafork(&["verify", "--points", "0", "no-such-dir"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--points"), "{}", String::from_utf8_lossy(&out.stderr));
    // More points than --points allows (the search once never ended), and an option that
    // means nothing without another, are usage errors too.
    for (args, says) in [
        (vec!["verify", "--points", "18446744073709551615", "no-such-dir"], "not in 1..=10000"),
        (vec!["tune", "--space-name", "a", "--device", "h100", "no-such.mf"], "--space"),
    ] {
        let out = metafork(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stderr).contains(says), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let out = metafork(&["tune", &example("dot.mf"), "--device", "h100", "--size", "n=4096", "--range", "B=1,1,64,1", "--estimates", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ranked: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let mut blocks: Vec<i64> = ranked.iter().map(|c| c["parameters"]["B"].as_i64().unwrap()).collect();
    blocks.sort_unstable();
    assert_eq!(blocks, [1, 64]);
}

/// Ctrl-C (SIGINT), or SIGHUP, while `gen --ptxas` compiles: the work stops, nvcc and what it started are
/// killed, every temporary (metafork's and nvcc's own) is removed, no output is written, and
/// the exit status is 130. Z3's own SIGINT handler, installed per check from several threads,
/// used to swallow the signal or crash the process.
#[test]
fn an_interrupt_stops_the_work_and_leaves_nothing_behind() {
    if crate::common::nvcc().is_none() {
        return;
    }
    let dir = temp_dir("interrupt");
    let tmp = dir.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let out_dir = dir.join("out");
    // SIGHUP (a closed terminal, a dropped ssh session) as Ctrl-C: it left the temporaries.
    for signal in [libc::SIGINT, libc::SIGHUP] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_metafork"))
            .args(["gen", "--emit-cuda", "--ptxas", "sm_90", &example("matmul.mf"), "-o", out_dir.to_str().unwrap()])
            .env("TMPDIR", &tmp)
            .env_remove("METAFORK_CACHE_DIR")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Signalled once a compile is under way (its temporary directory exists).
        let start = std::time::Instant::now();
        while std::fs::read_dir(&tmp).unwrap().next().is_none() {
            assert!(child.try_wait().unwrap().is_none(), "gen ended before its first compile");
            assert!(start.elapsed() < std::time::Duration::from_secs(120), "no compile started");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, signal) }, 0);
        let out = finished_within(child, 60, "gen after the signal");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(130), "{err}");
        assert!(err.contains("metafork: interrupted"), "{err}");
        assert!(!out_dir.exists(), "an interrupted gen wrote its output");
        let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(left.is_empty(), "temporaries left behind: {left:?}");
    }
    // During `verify`, Z3 checks run on every core: the interrupt still reaches metafork.
    let generated = metafork(&["gen", "--emit-cuda", &example("matmul.mf"), "-o", out_dir.to_str().unwrap()]);
    assert!(generated.status.success(), "{}", String::from_utf8_lossy(&generated.stderr));
    let mut child = Command::new(env!("CARGO_BIN_EXE_metafork")).args(["verify", out_dir.to_str().unwrap()]).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(child.try_wait().unwrap().is_none(), "verify of matmul ended within 0.3 s: signal it earlier");
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) }, 0);
    let out = finished_within(child, 60, "verify after Ctrl-C");
    assert_eq!(out.status.code(), Some(130), "{}", String::from_utf8_lossy(&out.stderr));
    // What the checks saw as they wound down is no verdict: nothing is printed.
    assert!(out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
    std::fs::remove_dir_all(dir).unwrap();
}

/// `-o` naming the input program (or a space file, or a device profile file) is refused before anything is written:
/// the report or the configurations would have replaced what the user gave.
#[test]
fn an_output_that_is_the_input_is_refused_and_the_input_kept() {
    let dir = crate::common::scratch("output-is-input");
    let program = dir.join("victim.mf");
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/saxpy.mf")).unwrap();
    std::fs::write(&program, &text).unwrap();
    let p = program.to_str().unwrap();
    let same = dir.join(".").join("victim.mf");
    for args in [vec!["parse", "-o", p, p], vec!["tune", p, "--device", "a100", "-o", same.to_str().unwrap()]] {
        let o = metafork(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("would replace it"), "{args:?}: {err}");
        assert_eq!(std::fs::read_to_string(&program).unwrap(), text, "{args:?} changed the program");
    }
    // A device profile given as a file is an input too.
    let profile = dir.join("mygpu.yaml");
    let o = metafork(&["devices", "h200"]);
    assert!(o.status.success());
    std::fs::write(&profile, &o.stdout).unwrap();
    let prof = profile.to_str().unwrap();
    let o = metafork(&["tune", "--estimates", "--device", prof, "--size", "N=64", "-o", prof, p]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("would replace it"), "{err}");
    assert_eq!(std::fs::read(&profile).unwrap(), metafork(&["devices", "h200"]).stdout, "the profile was changed");
    let o = metafork(&["parse", "-o", dir.join("report.yaml").to_str().unwrap(), p]);
    assert!(o.status.success() && dir.join("report.yaml").is_file(), "{}", String::from_utf8_lossy(&o.stderr));
}
