//! The corpus the benches read: the `.mf` programs of a list of folders.

use std::path::{Path, PathBuf};

/// Every `.mf` file directly in `root`/`dir` for each of `dirs`, sorted within each folder,
/// folders in the order given; a folder that does not exist adds nothing.
pub fn programs(root: &Path, dirs: &[&str]) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else { continue };
        let mut here: Vec<_> = entries.map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "mf")).collect();
        here.sort();
        v.extend(here);
    }
    v
}
