//! `metafork verify DIR` and `gen --verify`: check that every file of DIR is what metafork
//! generates from the source DIR was generated from, verify every kernel leaf, print the
//! report, and set the exit status (`command::exit`: 0 proved, 1 unusable input, 3 a defect or
//! a file that differs, 4 unverified or over budget).
//!
//! DIR is untrusted. Only files inside it are read, each a regular file (no symbolic link is
//! followed), named by its manifest; the source is DIR's own copy unless `--source FILE` is
//! given, and the copy is read (and its lines may appear in diagnostics) only when its hash is
//! the manifest's.

use super::{exit_code, render, verify_tree_reporting, LeafReport, Options};
use crate::command::{self, exit, Failure};
use crate::emit::command::{files, SOURCE_COPY};
use crate::emit::dispatch::Wisdom;
use crate::frontend::model::KernelFunction;
use crate::output::manifest::{read_entry, sha256_hex, Manifest, MANIFEST, MAX_ENTRY_BYTES};
use crate::tree::Tree;
use constraints::solver::Backend;
use std::path::Path;

fn unusable(message: String) -> Failure {
    Failure::input(format!("error: {message}"))
}

fn differs(message: String) -> Failure {
    Failure { message: format!("error: {message}"), code: exit::DEFECT }
}

/// Verify the trees and print the report; `Err` carries the exit status when not 0.
pub fn report(trees: &[(&KernelFunction, Tree)], options: Options, json: bool) -> Result<(), Failure> {
    let reports = verify_all(trees, options)?;
    command::print(&if json { super::render_json(&reports) } else { render(&reports) })?;
    finish(&reports)
}

/// The exit status of a verification: `Ok` when every leaf is proved or unreachable, else
/// the status naming the worst outcome (printed nothing: the report says why).
pub fn finish(reports: &[LeafReport]) -> Result<(), Failure> {
    match exit_code(reports) {
        exit::OK => Ok(()),
        code => Err(Failure::silent(code)),
    }
}

/// Every kernel leaf of `trees` verified, in order, with a progress bar on a terminal.
pub fn verify_all(trees: &[(&KernelFunction, Tree)], options: Options) -> Result<Vec<LeafReport>, Failure> {
    let backend = Backend::new(super::QUERY_TIMEOUT_MS);
    let leaves = |tree: &Tree| tree.leaves().filter(|n| matches!(n.kind, crate::tree::NodeKind::Leaf)).count();
    let total: usize = trees.iter().map(|(_, t)| leaves(t)).sum();
    let bar = std::sync::Mutex::new((command::Progress::new("verify"), 0usize));
    let tick = || {
        if let Ok(mut b) = bar.lock() {
            b.1 += 1;
            let fraction = b.1 as f64 / total.max(1) as f64;
            if let Some(p) = b.0.as_mut() {
                p.set(fraction);
            }
        }
    };
    let mut reports = Vec::new();
    for (k, (function, tree)) in trees.iter().enumerate() {
        let later_leaves = trees[k + 1..].iter().map(|(_, t)| leaves(t)).sum();
        reports.extend(verify_tree_reporting(function, tree, &backend, Options { later_leaves, ..options }, &tick).map_err(|e| Failure::of_work(format!("error: {e}")))?);
    }
    drop(bar);
    Ok(reports)
}

/// A file of DIR named by its manifest, whose hash must be the manifest's.
fn listed(dir: &Path, manifest: &Manifest, name: &str) -> Result<Vec<u8>, Failure> {
    let path = dir.join(name);
    let bytes = read_entry(dir, name, MAX_ENTRY_BYTES).map_err(|e| unusable(format!("cannot read `{}`: {e}", command::shown(&path))))?;
    if manifest.files.get(name) != Some(&sha256_hex(&bytes)) {
        return Err(differs(format!("`{}` is not the file the manifest lists (changed after `metafork gen`)", command::shown(&path))));
    }
    Ok(bytes)
}

pub fn run(dir: &Path, source: Option<&Path>, points: usize, json: bool, files_only: bool, color: bool) -> Result<(), Failure> {
    let shown_dir = command::shown(dir);
    let meta = std::fs::metadata(dir).map_err(|e| unusable(format!("cannot read `{shown_dir}`: {e}")))?;
    if meta.is_file() {
        return Err(unusable(format!("`{shown_dir}` is a file; `verify` takes a directory written by `metafork gen --emit-cuda` (for a program: `metafork gen --emit-cuda {shown_dir} -o DIR --verify`)")));
    }
    let manifest = Manifest::read(dir).map_err(unusable)?.ok_or_else(|| {
        unusable(format!("`{shown_dir}` has no `{MANIFEST}`: it is not a directory written by `metafork gen` (or by a version before manifests); run `metafork gen --emit-cuda` again"))
    })?;
    if manifest.kind() != crate::output::manifest::OutputKind::Gen {
        return Err(unusable(format!("`{shown_dir}` holds the output of `{}`, not of `metafork gen`: there is no tree to verify (a harness checks its answers against the serial program when it runs)", manifest.kind().command())));
    }
    let origin = manifest.source.clone().ok_or_else(|| unusable(format!("`{shown_dir}/{MANIFEST}` names no source program")))?;
    if origin.file != SOURCE_COPY {
        return Err(unusable(format!("`{shown_dir}/{MANIFEST}` names `{}` as the source's copy; metafork writes `{SOURCE_COPY}`", origin.file.escape_debug())));
    }
    let (text, diagnostics_name) = match source {
        Some(path) => {
            let text = command::read_source(path)?;
            // Another program than DIR's: every file would differ; say why at once (the first
            // difference found was a missing file of the other program's).
            if manifest.files.get(SOURCE_COPY).is_some_and(|h| *h != sha256_hex(text.as_bytes())) {
                return Err(differs(format!("`{}` is not the program `{shown_dir}` was generated from (it differs from `{shown_dir}/{SOURCE_COPY}`); run `metafork gen --emit-cuda {} -o {shown_dir}` again", command::shown(path), command::shown(path))));
            }
            (text, command::shown(path))
        }
        None => {
            let bytes = listed(dir, &manifest, SOURCE_COPY)?;
            let text = String::from_utf8(bytes).map_err(|_| unusable(format!("`{shown_dir}/{SOURCE_COPY}` is not UTF-8")))?;
            (text, format!("{shown_dir}/{SOURCE_COPY}"))
        }
    };
    let program = command::check(&diagnostics_name, &text, color).map_err(|f| unusable(format!("the program `{shown_dir}` was generated from does not check:\n{}", f.message)))?;
    // A directory of `gen` without --emit-cuda holds the tree only: nothing runs, so there is
    // nothing to verify (and no file is missing: it is a usage error, not a defect).
    if !manifest.files.keys().any(|n| n.ends_with(".cu")) {
        return Err(unusable(format!("`{shown_dir}` was written by `metafork gen` without --emit-cuda: it holds the decision tree but no kernel to verify; run `metafork gen --emit-cuda {} -o {shown_dir}` first", origin.name.escape_debug())));
    }
    let wisdom_text = match &manifest.wisdom {
        Some(w) => Some(String::from_utf8(listed(dir, &manifest, w)?).map_err(|_| unusable(format!("`{shown_dir}/{}` is not UTF-8", w.escape_debug())))?),
        None => None,
    };
    let wisdom = wisdom_text.as_deref().map(|t| Wisdom::parse(t, &format!("{shown_dir}/{}", manifest.wisdom.as_deref().unwrap_or_default()))).transpose().map_err(unusable)?;
    // Every file must be what this program generates: what is verified is what runs.
    if !manifest.ptxas.is_empty() && llvm_passes::ptxas::find_nvcc().is_none() {
        return Err(unusable(format!("`{shown_dir}` records register counts from ptxas ({}); re-deriving them needs `nvcc` on PATH", manifest.ptxas.join(", "))));
    }
    let extras = crate::emit::command::Extras { wisdom: wisdom_text.as_deref().zip(wisdom.as_deref()), ptxas: &manifest.ptxas };
    let (expected, trees, _) = files(&origin.name, &text, &program, true, &extras).map_err(|e| Failure::of_work(format!("error: {e}")))?;
    if !expected.keys().any(|n| n.ends_with(".cu") && n.contains("_leaf")) {
        return Err(unusable(format!("`{shown_dir}` holds no kernel: its program has no kernel leaf")));
    }
    for (name, body) in &expected {
        let path = dir.join(name);
        match read_entry(dir, name, MAX_ENTRY_BYTES) {
            Ok(on_disk) if on_disk == *body => {}
            Ok(_) => return Err(differs(format!("`{}` is not what metafork generates from the source (edited, or generated by another version); run `metafork gen --emit-cuda` again", command::shown(&path)))),
            Err(e) => return Err(differs(format!("`{}`: {e} (run `metafork gen --emit-cuda` again)", command::shown(&path)))),
        }
    }
    let want = Manifest::of(&expected, crate::output::manifest::Provenance { output: manifest.kind(), source: manifest.source.clone(), wisdom: manifest.wisdom.clone(), ptxas: manifest.ptxas.clone() });
    if manifest.files != want.files {
        let extra: Vec<&String> = manifest.files.keys().filter(|n| !expected.contains_key(*n)).collect();
        return Err(differs(match extra.first() {
            Some(n) => format!("`{shown_dir}/{MANIFEST}` lists `{}`, which metafork does not generate from the source", n.escape_debug()),
            None => format!("`{shown_dir}/{MANIFEST}` does not list what metafork generates from the source"),
        }));
    }
    if files_only {
        let others = fs_entries(dir).saturating_sub(expected.len() + 1);
        let others = match others {
            0 => String::new(),
            n => format!("; {n} other entr{} of the directory, not metafork's, not checked", if n == 1 { "y" } else { "ies" }),
        };
        return command::print(&format!("{shown_dir}: every file metafork generates from the source is as generated ({} files{others}; not proved: --files-only)\n", expected.len()));
    }
    report(&trees, Options { points, ..Options::default() }, json)
}

/// How many entries `dir` holds (0 where it cannot be read).
fn fs_entries(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| entries.count())
}
