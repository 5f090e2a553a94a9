//! An opt-in cache of what nvcc's ptxas reported: with `METAFORK_CACHE_DIR` set to a directory,
//! [`crate::ptxas::compile_cuda`] keeps each run's report there, keyed by the SHA-256 of the
//! compiler's identity (its canonical path and `nvcc --version`), the arguments and the source
//! text, and answers the same request from it again without running nvcc. Unset or empty: no
//! cache, every request compiles. `make test` gives each run a fresh directory, so the
//! tests share compiles within a run and never across runs.
//!
//! Contract: an entry is a regular file whose first line names the format, the key and the
//! SHA-256 of the log that follows; any other file (a symbolic link, a directory, a truncated,
//! corrupted or foreign entry) is a miss and is never followed or read further. Entries are written whole (a temporary with an
//! unpredictable name in the same directory, then renamed) and never over anything but a
//! regular file. The directory is the user's: its entries are trusted as the user's own
//! files are (what a hit reports is what was written there), and it may be deleted at any time;
//! a hit that cannot be ptxas's report of the source (a count past 255, a kernel the source
//! does not define: `ptxas::plausible`) is compiled again.

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// The environment variable naming the cache directory.
pub const ENV: &str = "METAFORK_CACHE_DIR";

/// The first line's prefix: the format's version, then the key.
const FORMAT: &str = "metafork ptxas cache v2 ";

/// The cache directory, when one is asked for.
pub fn dir() -> Option<PathBuf> {
    std::env::var_os(ENV).filter(|d| !d.is_empty()).map(PathBuf::from)
}

/// `nvcc --version`'s output for the compiler at `tool`, once per process and compiler; `None`
/// when it cannot be run (then nothing is cached).
fn identity(tool: &Path) -> Option<String> {
    static SEEN: OnceLock<Mutex<HashMap<PathBuf, Option<String>>>> = OnceLock::new();
    let canonical = std::fs::canonicalize(tool).ok()?;
    let seen = SEEN.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(known) = seen.lock().ok()?.get(&canonical) {
        return known.clone();
    }
    let mut command = Command::new(&canonical);
    command.arg("--version");
    // Bounded as every compiler run is: a compiler that hangs must not hang the lookup.
    let version = crate::ptxas::run_bounded(command, crate::ptxas::time_limit()).ok().filter(|(status, _)| status.success()).map(|(_, out)| format!("{}\n{out}", canonical.display()));
    seen.lock().ok()?.insert(canonical, version.clone());
    version
}

/// The key of compiling `source` with `tool` and `args`, when the compiler can be identified.
pub fn key(tool: &Path, args: &[String], source: &str) -> Option<String> {
    let mut hash = Sha256::new();
    for part in [identity(tool)?.as_str(), &args.join("\u{0}"), source] {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part.as_bytes());
    }
    Some(hex(&hash.finalize()))
}

fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// An entry's first line: the format, the key, and the digest of `log`.
fn header(key: &str, log: &str) -> String {
    format!("{FORMAT}{key} {}", hex(&Sha256::digest(log.as_bytes())))
}

/// The whole text of the entry keeping `log` under `key`, as [`store`] writes it.
pub fn entry(key: &str, log: &str) -> String {
    format!("{}\n{log}", header(key, log))
}

/// The log kept under `key` in `dir`, if its entry is a regular file written for that key.
pub fn load(dir: &Path, key: &str) -> Option<String> {
    let path = dir.join(key);
    if !std::fs::symlink_metadata(&path).ok()?.file_type().is_file() {
        return None;
    }
    let text = std::fs::read_to_string(&path).ok()?;
    let (first, log) = text.split_once('\n')?;
    // A log cut short or altered since it was written no longer matches its digest.
    (first == header(key, log)).then(|| log.to_string())
}

/// Keep `log` under `key` in `dir` (created if missing). Failing to is not an error: the
/// next request compiles again.
pub fn store(dir: &Path, key: &str, log: &str) {
    let path = dir.join(key);
    if std::fs::symlink_metadata(&path).is_ok_and(|m| !m.file_type().is_file()) {
        return;
    }
    let write = || -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let mut temp = tempfile::Builder::new().prefix(".metafork-cache-").tempfile_in(dir)?;
        temp.write_all(entry(key, log).as_bytes())?;
        temp.persist(&path).map_err(|e| e.error)?;
        Ok(())
    };
    let _ = write();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry is read back for its own key only; a foreign or truncated entry, or a symbolic
    /// link, is a miss, and a link is never written through.
    #[test]
    fn entries_are_read_only_for_their_key_and_links_are_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = ("a".repeat(64), "b".repeat(64));
        assert_eq!(load(dir.path(), &a), None);
        store(dir.path(), &a, "ptxas info : Used 3 registers\n");
        assert_eq!(load(dir.path(), &a).as_deref(), Some("ptxas info : Used 3 registers\n"));
        std::fs::copy(dir.path().join(&a), dir.path().join(&b)).unwrap();
        assert_eq!(load(dir.path(), &b), None, "an entry written for another key");
        std::fs::write(dir.path().join(&b), "metafork ptxas cache v2 ").unwrap();
        assert_eq!(load(dir.path(), &b), None, "a truncated entry");
        // An entry whose log was cut short or altered after its header was written.
        let whole = std::fs::read_to_string(dir.path().join(&a)).unwrap();
        std::fs::write(dir.path().join(&a), &whole[..whole.len() - 12]).unwrap();
        assert_eq!(load(dir.path(), &a), None, "a log cut short");
        std::fs::write(dir.path().join(&a), whole.replace("Used 3", "Used 9")).unwrap();
        assert_eq!(load(dir.path(), &a), None, "an altered log");
        std::fs::write(dir.path().join(&a), &whole).unwrap();
        assert_eq!(load(dir.path(), &a).as_deref(), Some("ptxas info : Used 3 registers\n"));
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "mine").unwrap();
        let c = "c".repeat(64);
        std::os::unix::fs::symlink(&target, dir.path().join(&c)).unwrap();
        std::fs::write(&target, format!("{}\nlog", header(&c, "log"))).unwrap();
        assert_eq!(load(dir.path(), &c), None, "a link is not followed");
        store(dir.path(), &c, "new");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), format!("{}\nlog", header(&c, "log")), "nor written through");
        assert!(std::fs::symlink_metadata(dir.path().join(&c)).unwrap().file_type().is_symlink());
    }
}
