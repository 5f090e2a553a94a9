//! Benchmark (`make bench-sass`, issue 27.5): the machine code of what `tune` ranks first.
//! For every example and PolyBench program, each schedule is tuned on the h100 profile (real
//! register counts, as `metafork tune` does) at a realistic size (every data parameter 4096 for
//! programs of 1-D and 2-D arrays, 256 for 3-D ones); the top configuration's leaf is compiled
//! with `nvcc -cubin -O3 -arch=sm_90`, disassembled with `cuobjdump -sass`, and its hot loop
//! (`metafork::sass::hot_loop`) measured: instructions, FMA share, shared and global loads per
//! FMA, 64-bit integer operations, and ptxas's registers. Prints a Markdown table and the
//! targets of issue 27 for matmul (>= 70% FMA, <= 0.25 shared loads per FMA, no 64-bit integer
//! operation in the hot loop). Needs nvcc and cuobjdump/nvdisasm on PATH (`make bench-sass`
//! installs the two wheels into .toolchain/sass).

use constraints::device::DeviceProfile;
use metafork::frontend::check_source;
use metafork::kernel::Kernel;
use metafork::tree::NodeKind;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

fn programs(root: &Path) -> Vec<std::path::PathBuf> {
    let mut v = Vec::new();
    for dir in ["examples", "examples/polybench"] {
        let mut here: Vec<_> = std::fs::read_dir(root.join(dir)).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "mf")).collect();
        here.sort();
        v.extend(here);
    }
    v
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let device = DeviceProfile::load("h100").unwrap();
    let backend = constraints::solver::Backend::default();
    let work = tempfile::tempdir().unwrap();
    println!("| program | schedule | top configuration | leaf | registers | hot loop | FMA | FMA share | LDS / FMA | LDG / FMA | 64-bit int ops |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    // `cargo bench --bench sass -- NAME...`: only the programs whose path holds one of them.
    let only: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    for path in programs(root) {
        let shown = path.strip_prefix(root).unwrap().display().to_string();
        if !only.is_empty() && !only.iter().any(|o| shown.contains(o.as_str())) {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let program = check_source(&shown, &text).unwrap();
        for function in &program.kernels {
            let dims = function.arrays.iter().map(|a| a.extent_exprs.len()).max().unwrap_or(1);
            let size = if dims >= 3 { 256 } else { 4096 };
            let sizes: BTreeMap<String, i64> = function.data_parameters().into_iter().map(|d| (d, size)).collect();
            for schedule in &function.schedules {
                let tree = metafork::tree::build(function, Kernel::from_schedule(function, schedule).unwrap(), &backend).unwrap();
                let compiled = metafork::compiled::compile_leaves(function, &tree, "sm_90").unwrap();
                let request = metafork::tune::rank::Request {
                    sizes: sizes.clone(),
                    compiled: compiled.iter().map(|(k, r)| (k.clone(), metafork::dispatch::CompiledLeaf { registers: r.registers.into(), max_threads: metafork::compiled::max_threads(r.registers, &device) })).collect(),
                    registers_from: "ptxas sm_90".into(),
                    ..Default::default()
                };
                let tuned = match metafork::tune::rank::tune(function, &tree, &device, &request, None) {
                    Ok(t) if !t.admissible.is_empty() => t,
                    Ok(_) => {
                        println!("| {shown} | {} | none admissible at {size} | | | | | | | | |", schedule.name);
                        continue;
                    }
                    Err(e) => {
                        println!("| {shown} | {} | {e} | | | | | | | | |", schedule.name);
                        continue;
                    }
                };
                let best = &tuned.admissible[0];
                let node = tree.nodes.iter().find(|n| matches!(n.kind, NodeKind::Leaf) && metafork::emit::tree_files::leaf_kernel_name(&tree, n.id) == best.leaf).unwrap();
                let mut code = (*node.staged).clone();
                code.name = best.leaf.clone();
                let source = metafork::emit::cuda::emit_kernel(function, &code, &[]).unwrap();
                let cu = work.path().join(format!("{}.cu", best.leaf));
                let cubin = work.path().join(format!("{}.cubin", best.leaf));
                std::fs::write(&cu, source).unwrap();
                let o = Command::new("nvcc").args(["-cubin", "-O3", "-arch=sm_90", "-o"]).arg(&cubin).arg(&cu).output().expect("nvcc on PATH");
                assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
                let o = Command::new("cuobjdump").arg("-sass").arg(&cubin).output().expect("cuobjdump on PATH (make bench-sass installs it)");
                assert!(o.status.success(), "cuobjdump: {}", String::from_utf8_lossy(&o.stderr));
                let kernels = metafork::sass::parse(&String::from_utf8_lossy(&o.stdout));
                let code = &kernels[&best.leaf];
                let config: Vec<String> = best.parameters.iter().filter(|(k, _)| tuned.enumeration.get(*k).is_some_and(|h| h != "fixed")).map(|(k, v)| format!("{k}={v}")).collect();
                let registers = compiled[&best.leaf].registers;
                match metafork::sass::hot_loop(code) {
                    Some(hot) => {
                        let m = metafork::sass::mix(hot);
                        let per = |x: usize| if m.fma == 0 { "-".to_string() } else { format!("{:.2}", x as f64 / m.fma as f64) };
                        println!(
                            "| {shown} | {} | {} | {} | {registers} | {} | {} | {:.0}% | {} | {} | {} |",
                            schedule.name,
                            config.join(" "),
                            best.leaf,
                            m.instructions,
                            m.fma,
                            100.0 * m.fma as f64 / m.instructions as f64,
                            per(m.shared_loads),
                            per(m.global_loads),
                            m.wide_integer_ops
                        );
                    }
                    None => {
                        let m = metafork::sass::mix(code);
                        println!("| {shown} | {} | {} | {} | {registers} | no loop ({} in all) | {} | {:.0}% | | | {} |", schedule.name, config.join(" "), best.leaf, m.instructions, m.fma, 100.0 * m.fma as f64 / m.instructions.max(1) as f64, m.wide_integer_ops);
                    }
                }
            }
        }
    }
    println!("\nissue 27's targets for matmul: FMA share >= 70%, LDS / FMA <= 0.25, no 64-bit integer operation in the hot loop");
}
