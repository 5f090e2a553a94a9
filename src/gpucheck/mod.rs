//! `make gpu-check`: a self-contained folder that checks the generated kernels on a real GPU.
//!
//! Contract: [`prepare`] writes, for each source program, `programs/<name>/` holding every
//! distinct leaf kernel of every schedule (the files `gen --emit-cuda` writes) and `check.cu`
//! ([`host`]): each kernel run at two parameter points ([`points`]) against the serial program,
//! compiled on the GPU machine by nvcc, whose host compiler runs the serial reference there.
//! The points lie in the leaf's correctness constraints on a device no larger than the `h100`
//! profile (the machine limits `R`, `Z_B`, `T_B`, `R_B` at most its values), so that a leaf
//! meant for a smaller device runs on an H100 too; a case the device at hand cannot launch
//! (more registers than it has) is reported as skipped, not passed.
//! Nothing in the folder needs metafork, Rust, Z3 or LLVM: only nvcc, compute-sanitizer and
//! python3 (PyTorch for the cuBLAS reference), which is what `bench/gpu_check/run.sh`, copied
//! into the folder, uses. The folder's content is a pure function of the sources.

pub mod host;
pub mod points;

use crate::emit::tree_files::leaf_kernel_name;
use crate::tree::NodeKind;
use constraints::device::DeviceProfile;
use constraints::solver::Backend;
use constraints::{Constraint, Poly};
use host::{Case, ScheduleKernels};
use std::collections::BTreeMap;
use std::path::Path;

/// The profile bounding the machine limits of the points: the GPU the folder is meant for.
pub const DEVICE: &str = "h100";

/// What was prepared for one program.
#[derive(Clone, Debug)]
pub struct Prepared {
    pub name: String,
    pub kernels: usize,
    pub cases: usize,
    /// Kernels without any runnable point (none found), with the reason.
    pub unchecked: Vec<(String, String)>,
}

/// The folder name of a source path: its stem, with `prefix-` when given; characters outside
/// `[A-Za-z0-9_-]` become `_`.
pub fn program_name(prefix: Option<&str>, path: &Path) -> String {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "program".into());
    let name = match prefix {
        Some(p) => format!("{p}-{stem}"),
        None => stem,
    };
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect()
}

/// The files of `programs/<name>/` for source `text` (shown as `source`): file name to contents.
pub fn program_files(source: &str, name: &str, text: &str) -> Result<(BTreeMap<String, String>, Prepared), String> {
    let checked = crate::frontend::check_source(source, text).map_err(|d| d.render(false))?;
    let backend = Backend::default();
    let device = DeviceProfile::load(DEVICE).map_err(|e| e.to_string())?;
    let trees = crate::tree::build_all(&checked, &backend)?;
    let generated = crate::emit::tree_files::generate_with_wisdom(source, &trees, true, &[], &Default::default())?;
    let mut files = BTreeMap::new();
    let mut prepared = Prepared { name: name.to_string(), kernels: 0, cases: 0, unchecked: Vec::new() };
    for function in &checked.kernels {
        let mut schedules: Vec<ScheduleKernels> = Vec::new();
        let mut cases: Vec<Case> = Vec::new();
        for (k, schedule) in function.schedules.iter().enumerate() {
            let (_, tree) = trees.iter().find(|(f, t)| f.name == function.name && t.schedule == schedule.name).ok_or_else(|| format!("no tree for schedule `{}`", schedule.name))?;
            let mut kernels = ScheduleKernels { kernels: Vec::new() };
            for leaf in tree.leaves().filter(|n| matches!(n.kind, NodeKind::Leaf)) {
                let kernel = leaf_kernel_name(tree, leaf.id);
                if kernels.kernels.iter().any(|(n, _)| *n == kernel) {
                    continue;
                }
                let file = format!("{kernel}.cu");
                let code = generated.files.get(&file).ok_or_else(|| format!("gen wrote no `{file}`"))?;
                files.insert(file, code.clone());
                let which = kernels.kernels.len();
                kernels.kernels.push((kernel.clone(), &leaf.staged));
                let seed = 0x6770_7563_6865_636b ^ (leaf.id as u64).wrapping_mul(0x9e37_79b9);
                let mut system = leaf.correctness_constraints(&tree.machine);
                let m = &tree.machine;
                for (symbol, most) in [(&m.registers_per_thread, device.registers_per_thread), (&m.shared_per_block, device.shared_memory_per_block_optin), (&m.threads_per_block, device.threads_per_block), (&m.registers_per_block, device.registers_per_block)] {
                    system.add(Constraint::le(&Poly::var(symbol), &Poly::int(i64::from(most))));
                }
                match points::two_points(function, &system, &backend, seed) {
                    Ok(found) => cases.extend(found.into_iter().map(|(size, point)| Case { schedule: k, which, kernel: kernel.clone(), size, point })),
                    Err(e) => prepared.unchecked.push((kernel.clone(), e)),
                }
            }
            prepared.kernels += kernels.kernels.len();
            schedules.push(kernels);
        }
        prepared.cases += cases.len();
        let check = host::program(source, name, function, &schedules, &cases)?;
        let file = if checked.kernels.len() == 1 { "check.cu".to_string() } else { format!("check_{}.cu", crate::names::c_ident(&function.name)) };
        files.insert(file, check);
    }
    Ok((files, prepared))
}
