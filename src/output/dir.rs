//! A whole output directory, replaced in one step.
//!
//! `write_dir(DIR, files)`:
//! 1. locks DIR's parent directory (`flock`), so concurrent runs writing there take turns;
//! 2. finishes what an interrupted run left: a staging directory `.metafork-<h>-*` beside DIR
//!    (`<h>` from DIR's name) is stale under the lock; entries it carried from DIR are moved
//!    back (as `<name>.recovered-<k>`, with a warning, where DIR has a new `<name>` since),
//!    then it is removed; where DIR is gone, it is kept, with a warning, for the next run;
//! 3. writes every file, and the manifest last, into a fresh staging directory beside DIR, and
//!    waits for their data to reach the disk; a file DIR already holds with the same bytes is
//!    hard-linked instead (a rerun rewrites only what changed, and unchanged files keep their
//!    modification times);
//! 4. carries over DIR's entries that metafork did not write: all but the manifest, the
//!    journal (`.metafork-carried`), the new files' names, and files the old manifest lists
//!    whose contents are unchanged (those are metafork's, and dropped when the new output
//!    lacks them).
//!    A regular file is hard-linked; anything else (a directory, a link, a FIFO) is renamed,
//!    with a journal first so that step 2 can put it back;
//! 5. exchanges staging and DIR with `renameat2(RENAME_EXCHANGE)` (a plain rename when DIR is
//!    new) and removes the old contents.
//!
//! Before any of it, a file of DIR that the new output would replace must be metafork's (listed
//! in DIR's manifest and unchanged since): a user's own `tree.yaml`, or a leaf's `.cu` edited
//! by hand, is refused unless the caller says to replace it ([`Foreign::Replace`], `--force`).
//! So is a directory that holds another command's output (the manifest's `output`): `tune
//! --emit-harness` into `gen`'s directory would otherwise drop its dispatch code and tree.
//!
//! So an interrupted or failed run leaves DIR as it was, two runs never mix their files, and a
//! user's own files survive. DIR itself must be a real directory: a symbolic link is refused
//! (an archive's `out -> ~/.ssh` would otherwise be written through).

use super::manifest::{Manifest, Provenance, MANIFEST};
use super::{file::kind_of, is_plain_file_name};
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{self, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// An output directory's files: name to contents.
pub type DirFiles = BTreeMap<String, Vec<u8>>;

/// Names beginning with this, in an output directory or beside it, are metafork's own.
pub const STAGING_PREFIX: &str = ".metafork-";
/// The journal of entries carried from the old directory into a staging directory.
const JOURNAL: &str = ".metafork-carried";

fn err(target: &Path, what: impl std::fmt::Display) -> String {
    format!("cannot write `{}`: {what}", target.display())
}

/// What to do with an entry of the output directory that the new output would replace and that
/// metafork did not write (not in the old manifest, or changed since).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Foreign {
    /// Refuse to write, naming it.
    Refuse,
    /// Replace it (`--force`).
    Replace,
}

impl Foreign {
    /// What `--force` (`force`) asks for.
    pub fn forced(force: bool) -> Foreign {
        if force {
            Foreign::Replace
        } else {
            Foreign::Refuse
        }
    }
}

pub fn write_dir(target: &Path, files: &DirFiles, from: Provenance, foreign: Foreign) -> Result<(), String> {
    // `out/.` and `out/` name `out` (renaming `out/.` fails with "busy", and `link/` would
    // follow a symbolic link `link`, which is refused below as `link`).
    let target = &target.components().collect::<PathBuf>();
    for name in files.keys() {
        if !is_plain_file_name(name) || name == MANIFEST {
            return Err(err(target, format!("internal error: `{}` is not a plain file name", name.escape_debug())));
        }
    }
    let name = target.file_name().ok_or_else(|| err(target, "give the output directory a name (not `.`, `..` or `/`)"))?;
    let parent = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&parent).map_err(|e| err(target, format!("cannot create `{}`: {e}", parent.display())))?;
    let lock = fs::File::open(&parent).map_err(|e| err(target, format!("cannot open `{}`: {e}", parent.display())))?;
    if lock.try_lock().is_err() {
        crate::command::warn(&format!("metafork: waiting for another run writing in `{}`", parent.display()));
        lock.lock().map_err(|e| err(target, format!("cannot lock `{}`: {e}", parent.display())))?;
    }
    let exists = match fs::symlink_metadata(target) {
        Ok(m) if m.is_dir() => Some(m.permissions().mode() & 0o7777),
        Ok(m) => return Err(err(target, format!("it is {}; give a directory (a symbolic link is not followed)", kind_of(m.file_type())))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(err(target, e)),
    };
    // The directory is replaced whole: where the command runs in it (`-o "$PWD"`, `-o ../out`
    // from `out`), the caller's working directory would be deleted under it.
    if exists.is_some() {
        if let (Ok(dir), Ok(here)) = (fs::canonicalize(target), std::env::current_dir().and_then(fs::canonicalize)) {
            if here.starts_with(&dir) {
                return Err(err(target, "it is the working directory, or holds it; the output directory is replaced whole, which would delete the directory this command runs in (give another directory, or run from elsewhere)"));
            }
        }
    }
    let prefix = format!("{STAGING_PREFIX}{}-", &super::manifest::sha256_hex(name.as_bytes())[..12]);
    recover(&parent, &prefix, target).map_err(|e| err(target, format!("cannot clean up an interrupted run: {e}")))?;
    // The old manifest, read once: what it lists unchanged is metafork's to replace or drop.
    let old = match exists {
        Some(_) => Manifest::read(target),
        None => Ok(None),
    };
    if let (Ok(Some(m)), Foreign::Refuse) = (&old, foreign) {
        if m.kind() != from.output {
            return Err(err(target, format!("it holds the output of `{}` (its `{MANIFEST}` says so), which this `{}` output would replace; give another directory, or --force to replace it", m.kind().command(), from.output.command())));
        }
    }
    if exists.is_some() && foreign == Foreign::Refuse {
        let theirs = not_metaforks(target, files, &old);
        if let Some(first) = theirs.first() {
            let (more, them) = match theirs.len() {
                1 => (String::new(), "it"),
                n => (format!(" and {} more", n - 1), "them"),
            };
            let why = match &old {
                Ok(Some(_)) => format!("not listed in its `{MANIFEST}`, or changed since metafork wrote it"),
                Ok(None) => format!("it has no `{MANIFEST}`, so nothing in it is known to be metafork's"),
                Err(e) => format!("its manifest is unusable: {e}"),
            };
            return Err(err(target, format!("it holds `{}`{more}, which this output would replace but metafork did not write ({why}); move {them} away, or give --force to replace {them}", first.escape_debug())));
        }
    }
    // A directory where a file goes is someone's tree of files: even --force, which replaces
    // files metafork did not write, does not delete it.
    if exists.is_some() {
        let mut names: Vec<&str> = files.keys().map(String::as_str).chain([MANIFEST]).collect();
        names.sort_unstable();
        if let Some(n) = names.into_iter().find(|n| fs::symlink_metadata(target.join(n)).is_ok_and(|m| m.is_dir())) {
            return Err(err(target, format!("it holds a directory `{}` where this output writes a file; move it away (not even --force removes a directory)", n.escape_debug())));
        }
    }
    let old = old.unwrap_or_else(|e| {
        crate::command::warn(&format!("metafork: warning: {e}; every entry of the old directory is kept"));
        None
    });

    let staging = tempfile::Builder::new()
        .prefix(&prefix)
        .permissions(fs::Permissions::from_mode(exists.unwrap_or(0o777)))
        .tempdir_in(&parent)
        .map_err(|e| err(target, format!("cannot create a staging directory in `{}`: {}", parent.display(), e.kind())))?;
    // The new DIR keeps the old one's mode whole (a shared `2775` stays so: `mkdir` applies
    // the umask and drops the set-group-ID bit) and, where the user may give it, its group.
    // Best effort: the output is still right without them.
    if let (Some(mode), Ok(old)) = (exists, fs::symlink_metadata(target)) {
        use std::os::unix::fs::MetadataExt;
        let _ = std::os::unix::fs::chown(staging.path(), None, Some(old.gid()));
        let _ = fs::set_permissions(staging.path(), fs::Permissions::from_mode(mode));
    }
    let manifest = Manifest::of(files, from);
    let manifest_json = manifest.to_json();
    let all: Vec<(&str, &[u8])> = files.iter().map(|(n, b)| (n.as_str(), b.as_slice())).chain(std::iter::once((MANIFEST, manifest_json.as_bytes()))).collect();
    // A file the old directory holds with the same bytes is linked, not written again, and
    // keeps its modification time (a build that compiles the leaves does not redo an
    // unchanged one). One the old manifest lists with these bytes was made durable by the run
    // that wrote it; any other is waited for as a written one is.
    let durable: std::collections::BTreeSet<&str> = old.as_ref().map_or_else(Default::default, |m| manifest.files.iter().filter(|(n, h)| m.files.get(*n) == Some(*h)).map(|(n, _)| n.as_str()).collect());
    let same = exists.map(|_| Same { dir: target, durable: &durable });
    for batch in all.chunks(SYNC_BATCH) {
        write_durably(staging.path(), batch, same.as_ref()).map_err(|(n, e)| err(target, written_error(n, &e)))?;
    }

    // Interrupted (Ctrl-C) while it was made, the output may be incomplete: the old one stays.
    if constraints::budget::interrupted() {
        return Err(err(target, "interrupted; the directory is as it was"));
    }
    let carried = match exists {
        Some(_) => carry(target, staging.path(), files, old.as_ref()).map_err(|e| err(target, format!("cannot carry over its other entries: {e}")))?,
        None => Vec::new(),
    };
    let swapped = fs::File::open(staging.path()).and_then(|d| d.sync_all()).and_then(|_| match exists {
        Some(_) => exchange(staging.path(), target),
        None => fs::rename(staging.path(), target),
    });
    if let Err(e) = swapped {
        put_back(staging.path(), target, &carried);
        return Err(err(target, e));
    }
    let _ = fs::remove_file(target.join(JOURNAL));
    let _ = lock.sync_all();
    // `staging` now names the old contents (or nothing, for a new directory): dropping it
    // removes them, without following links.
    drop(staging);
    Ok(())
}

/// Files written before their data is waited for: each batch holds this many descriptors open.
const SYNC_BATCH: usize = 64;

/// What went wrong writing `name` into the fresh staging directory. The output's names are
/// distinct, so one that exists already met another under the file system's rules: names that
/// differ only in case (`Scale_dispatch.cu`, `scale_dispatch.cu`) are one file on a
/// case-insensitive file system (macOS's and Windows' defaults).
fn written_error(name: &str, e: &io::Error) -> String {
    if e.kind() == io::ErrorKind::AlreadyExists {
        format!("`{name}` is the name of another of its files on this file system (one that differs only in case, on a case-insensitive file system): rename one of the functions or schedules they are named after, or write to a case-sensitive file system")
    } else {
        format!("`{name}`: {e}")
    }
}

/// The old directory, whose files holding the new bytes are linked rather than written, and
/// the names among them whose data is known to be on disk.
struct Same<'a> {
    dir: &'a Path,
    durable: &'a std::collections::BTreeSet<&'a str>,
}

/// Create and write each `(name, bytes)` of `batch` in `dir`, then make their data durable.
/// Where `same.dir` holds `name` as a regular file with exactly `bytes`, that file is linked
/// into `dir` instead ([`link_same`]), and waited for unless `same.durable` names it; a link
/// that fails falls back to writing.
/// Writeback of every file is started before the first is waited for (`sync_file_range`), so
/// the disk sees one stream instead of a flush per file: 25 files took 2.1 ms instead of 5.4 ms
/// on ext4 (bench/RESULTS.md). `fdatasync` still guarantees each file's data and size; the
/// first call is only a hint, and its failure is ignored. The first failure, in file order
/// within each thread's share, is the one reported.
fn write_durably<'a>(dir: &Path, batch: &[(&'a str, &[u8])], same: Option<&Same>) -> Result<(), (&'a str, io::Error)> {
    use std::os::fd::AsRawFd;
    let mut open = Vec::with_capacity(batch.len());
    for &(n, bytes) in batch {
        if let Some((f, same)) = same.and_then(|same| link_same(same.dir, dir, n, bytes).map(|f| (f, same))) {
            if !same.durable.contains(n) {
                open.push((n, f));
            }
            continue;
        }
        let mut f = fs::File::create_new(dir.join(n)).map_err(|e| (n, e))?;
        f.write_all(bytes).map_err(|e| (n, e))?;
        // SAFETY: a valid open descriptor; the call only schedules writeback of its pages.
        unsafe { libc::sync_file_range(f.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
        open.push((n, f));
    }
    // Waited for on a few threads: the file system commits waits that overlap together.
    let per_thread = open.len().div_ceil(SYNC_THREADS).max(1);
    let failed = std::thread::scope(|scope| {
        let waits: Vec<_> = open.chunks(per_thread).map(|files| (files, std::thread::Builder::new().spawn_scoped(scope, move || files.iter().find_map(|(n, f)| f.sync_data().err().map(|e| (*n, e)))))).collect();
        // A chunk without a thread is waited for here.
        waits.into_iter().find_map(|(files, wait)| match wait {
            Ok(handle) => handle.join().unwrap_or_else(|_| Some((files[0].0, io::Error::other("the thread waiting for the disk failed")))),
            Err(_) => files.iter().find_map(|(n, f)| f.sync_data().err().map(|e| (*n, e))),
        })
    });
    failed.map_or(Ok(()), Err)
}

/// `old/name`, linked as `dir/name` when it is a regular file holding exactly `bytes`; the
/// linked file, open, or `None` (then the caller writes it). The file is opened without
/// following a link and the link is made to that open file (through `/proc/self/fd`), so a
/// name swapped for another file between the comparison and the link is never taken.
fn link_same(old: &Path, dir: &Path, name: &str, bytes: &[u8]) -> Option<fs::File> {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(old.join(name)).ok()?;
    let meta = f.metadata().ok()?;
    if !meta.file_type().is_file() || meta.len() != bytes.len() as u64 {
        return None;
    }
    let mut held = Vec::with_capacity(bytes.len() + 1);
    (&mut f).take(bytes.len() as u64 + 1).read_to_end(&mut held).ok()?;
    if held != bytes {
        return None;
    }
    let fd_path = std::ffi::CString::new(format!("/proc/self/fd/{}", f.as_raw_fd())).ok()?;
    let to = std::ffi::CString::new(dir.join(name).into_os_string().into_vec()).ok()?;
    // SAFETY: two NUL-terminated paths that live across the call.
    let linked = unsafe { libc::linkat(libc::AT_FDCWD, fd_path.as_ptr(), libc::AT_FDCWD, to.as_ptr(), libc::AT_SYMLINK_FOLLOW) } == 0;
    linked.then_some(f)
}

/// Threads that wait for a batch's data (25 files: 4.1 ms on one, 1.9 ms on four; bench/RESULTS.md).
const SYNC_THREADS: usize = 4;

/// Carry `target`'s entries that metafork did not write into `staging`; returns the entries
/// moved (not linked), which a failure must put back.
fn carry(target: &Path, staging: &Path, files: &DirFiles, old: Option<&Manifest>) -> io::Result<Vec<OsString>> {
    let mut carry = Vec::new();
    for entry in fs::read_dir(target)? {
        let entry = entry?;
        let name = entry.file_name();
        let text = name.to_str();
        // Only the journal is metafork's inside DIR (left there by a run stopped just after
        // its exchange); a user's `.metafork-notes`, or another output's staging directory
        // (`gen -o DIR/sub` interrupted), is carried like any other entry.
        if name == JOURNAL || text.is_some_and(|t| t == MANIFEST || files.contains_key(t)) {
            continue;
        }
        if let (Some(m), Some(t)) = (old, text) {
            if m.unchanged(target, t) {
                continue;
            }
        }
        carry.push((name, entry.file_type()?));
    }
    let moved: Vec<OsString> = carry.iter().filter(|(_, t)| !t.is_file()).map(|(n, _)| n.clone()).collect();
    if !moved.is_empty() {
        let journal: Vec<Vec<u8>> = moved.iter().map(|n| n.as_bytes().to_vec()).collect();
        let mut f = fs::File::create_new(staging.join(JOURNAL))?;
        f.write_all(&serde_json::to_vec(&journal).map_err(io::Error::other)?)?;
        f.sync_all()?;
    }
    let mut done = Vec::new();
    for (name, t) in &carry {
        let (from, to) = (target.join(name), staging.join(name));
        let r = if t.is_file() { fs::hard_link(&from, &to).or_else(|_| fs::copy(&from, &to).map(|_| ())) } else { fs::rename(&from, &to).map(|_| done.push(name.clone())) };
        if let Err(e) = r {
            put_back(staging, target, &done);
            return Err(io::Error::new(e.kind(), format!("`{}`: {e}", Path::new(name).display())));
        }
    }
    Ok(done)
}

/// The entries of `target` that the new `files` (and the manifest) would replace but that are
/// not metafork's: present, and not listed unchanged in the `old` manifest (a manifest that
/// cannot be read is itself one of them), sorted.
fn not_metaforks(target: &Path, files: &DirFiles, old: &Result<Option<Manifest>, String>) -> Vec<String> {
    let present = |n: &str| fs::symlink_metadata(target.join(n)).is_ok();
    let mut theirs: Vec<String> = files.keys().filter(|n| present(n) && !old.as_ref().is_ok_and(|m| m.as_ref().is_some_and(|m| m.unchanged(target, n)))).cloned().collect();
    if old.is_err() && present(MANIFEST) {
        theirs.push(MANIFEST.to_string());
    }
    theirs.sort();
    theirs
}

/// Move `names` from `staging` back into `target` where `target` lacks them.
fn put_back(staging: &Path, target: &Path, names: &[OsString]) {
    for n in names {
        if fs::symlink_metadata(target.join(n)).is_err() {
            let _ = fs::rename(staging.join(n), target.join(n));
        }
    }
}

/// Staging directories an interrupted run left beside `target`: put back what they carried,
/// then remove them. Only called under the parent's lock, so none of them is in use.
fn recover(parent: &Path, prefix: &str, target: &Path) -> io::Result<()> {
    for entry in fs::read_dir(parent)? {
        let entry = entry?;
        if !entry.file_name().as_bytes().starts_with(prefix.as_bytes()) || !entry.file_type()?.is_dir() {
            continue;
        }
        let stale = entry.path();
        if let Ok(bytes) = read_journal(&stale) {
            let names: Vec<Vec<u8>> = serde_json::from_slice(&bytes).unwrap_or_default();
            let names: Vec<OsString> = names.into_iter().map(OsString::from_vec).filter(|n| is_single_component(n)).collect();
            let left: Vec<&OsString> = names.iter().filter(|n| fs::symlink_metadata(stale.join(n)).is_ok()).collect();
            if !left.is_empty() && !fs::symlink_metadata(target).is_ok_and(|m| m.is_dir()) {
                // DIR is gone: the user's entries stay where they are, for the run that
                // makes DIR again to put back.
                crate::command::warn(&format!("metafork: warning: `{}` holds entries an interrupted run had moved out of `{}`, which is gone; kept there (the next run into `{}` puts them back)", stale.display(), target.display(), target.display()));
                continue;
            }
            for n in left {
                // A name DIR holds again (the user made it anew) keeps both: never a loss.
                let to = free_name(target, n);
                fs::rename(stale.join(n), &to)?;
                if to != target.join(n) {
                    crate::command::warn(&format!("metafork: warning: `{}` was moved out of `{}` by an interrupted run, and the directory holds a new `{}` since: the old one is put back as `{}`", Path::new(n).display(), target.display(), Path::new(n).display(), to.display()));
                }
            }
        }
        fs::remove_dir_all(&stale)?;
    }
    Ok(())
}

/// `target/n`, or where that is taken, the first free `target/n.recovered-<k>`.
fn free_name(target: &Path, n: &OsStr) -> PathBuf {
    let plain = target.join(n);
    if fs::symlink_metadata(&plain).is_err() {
        return plain;
    }
    (1u32..)
        .map(|k| {
            let mut name = n.to_os_string();
            name.push(format!(".recovered-{k}"));
            target.join(name)
        })
        .find(|p| fs::symlink_metadata(p).is_err())
        .expect("some suffix is free")
}

fn read_journal(stale: &Path) -> io::Result<Vec<u8>> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(stale.join(JOURNAL))?;
    let mut bytes = Vec::new();
    io::Read::read_to_end(&mut io::Read::take(&mut f, 1 << 20), &mut bytes)?;
    Ok(bytes)
}

fn is_single_component(n: &OsStr) -> bool {
    let b = n.as_bytes();
    !b.is_empty() && b != b"." && b != b".." && !b.contains(&b'/') && !b.contains(&0)
}

/// Exchange two directories atomically (Linux `renameat2`); where the file system cannot, move
/// the old one aside first (a short window without `b`).
fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(io::Error::other);
    let (ca, cb) = (c(a)?, c(b)?);
    // SAFETY: two valid NUL-terminated paths; renameat2 reads them only.
    let r = unsafe { libc::renameat2(libc::AT_FDCWD, ca.as_ptr(), libc::AT_FDCWD, cb.as_ptr(), libc::RENAME_EXCHANGE) };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if !matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOSYS) | Some(libc::ENOTSUP)) {
        return Err(e);
    }
    let aside = a.with_extension("old");
    fs::rename(b, &aside)?;
    if let Err(e) = fs::rename(a, b) {
        let _ = fs::rename(&aside, b);
        return Err(e);
    }
    fs::rename(&aside, a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(pairs: &[(&str, &str)]) -> DirFiles {
        pairs.iter().map(|(n, t)| (n.to_string(), t.as_bytes().to_vec())).collect()
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    }

    /// Two of the output's names that the file system takes for one file (here the same name
    /// twice, as `Scale_dispatch.cu` and `scale_dispatch.cu` are one on a case-insensitive
    /// file system): the second is refused with a message that says why, not overwritten.
    #[test]
    fn a_name_the_file_system_already_holds_is_refused_and_explained() {
        let dir = tempfile::tempdir().unwrap();
        let (name, e) = write_durably(dir.path(), &[("scale_dispatch.cu", b"one"), ("scale_dispatch.cu", b"two")], None).unwrap_err();
        assert_eq!(name, "scale_dispatch.cu");
        assert!(written_error(name, &e).contains("differs only in case"), "{}", written_error(name, &e));
        assert_eq!(fs::read_to_string(dir.path().join("scale_dispatch.cu")).unwrap(), "one");
    }

    /// A shared output directory (`2775`: group-writable, new files in its group) keeps its
    /// mode when it is replaced: `mkdir`'s umask dropped the group's write and the set-group-ID
    /// bit.
    #[test]
    fn a_replaced_directory_keeps_its_mode() {
        let root = tempfile::tempdir().unwrap();
        let out = root.path().join("out");
        write_dir(&out, &files(&[("tree.yaml", "t")]), Provenance::default(), Foreign::Refuse).unwrap();
        fs::set_permissions(&out, fs::Permissions::from_mode(0o2775)).unwrap();
        write_dir(&out, &files(&[("tree.yaml", "u")]), Provenance::default(), Foreign::Refuse).unwrap();
        assert_eq!(fs::read_to_string(out.join("tree.yaml")).unwrap(), "u");
        assert_eq!(fs::metadata(&out).unwrap().permissions().mode() & 0o7777, 0o2775);
    }

    #[test]
    fn replaces_the_output_keeps_user_files_and_drops_stale_ones() {
        let root = tempfile::tempdir().unwrap();
        let out = root.path().join("out");
        write_dir(&out, &files(&[("a_leaf1.cu", "1"), ("a_leaf2.cu", "2"), ("tree.yaml", "t")]), Provenance::default(), Foreign::Refuse).unwrap();
        fs::write(out.join("notes.txt"), "mine").unwrap();
        fs::create_dir(out.join("build")).unwrap();
        fs::write(out.join("build").join("x.o"), "obj").unwrap();
        fs::write(out.join("a_leaf2.cu"), "edited by hand").unwrap();
        // An output that would replace the edited file is refused, naming it, unless forced.
        let e = write_dir(&out, &files(&[("a_leaf1.cu", "1'"), ("a_leaf2.cu", "2'"), ("tree.yaml", "t'")]), Provenance::default(), Foreign::Refuse).unwrap_err();
        assert!(e.contains("it holds `a_leaf2.cu`, which this output would replace but metafork did not write") && e.contains("move it away, or give --force to replace it"), "{e}");
        assert_eq!(fs::read_to_string(out.join("a_leaf2.cu")).unwrap(), "edited by hand");
        assert_eq!(fs::read_to_string(out.join("a_leaf1.cu")).unwrap(), "1", "nothing was written");
        write_dir(&out, &files(&[("a_leaf1.cu", "1'"), ("tree.yaml", "t'")]), Provenance::default(), Foreign::Refuse).unwrap();
        // a_leaf2.cu was edited: kept; notes and build are the user's: kept; nothing else.
        assert_eq!(names(&out), ["a_leaf1.cu", "a_leaf2.cu", "build", "manifest.json", "notes.txt", "tree.yaml"]);
        assert_eq!(fs::read_to_string(out.join("a_leaf2.cu")).unwrap(), "edited by hand");
        assert_eq!(fs::read_to_string(out.join("build").join("x.o")).unwrap(), "obj");
        assert_eq!(fs::read_to_string(out.join("a_leaf1.cu")).unwrap(), "1'");
        // An unchanged stale file of metafork's is dropped.
        write_dir(&out, &files(&[("tree.yaml", "t''")]), Provenance::default(), Foreign::Refuse).unwrap();
        assert_eq!(names(&out), ["a_leaf2.cu", "build", "manifest.json", "notes.txt", "tree.yaml"]);
        assert_eq!(names(root.path()), ["out"], "no staging directory is left");
    }

    /// A rerun whose file holds the bytes already there links the old file (same inode, same
    /// modification time: a build does not redo it); a changed file is written anew; a link
    /// planted in place of an unchanged file is replaced by a written file, never linked
    /// through.
    #[test]
    fn an_unchanged_file_is_linked_a_changed_one_written() {
        use std::os::unix::fs::MetadataExt;
        let root = tempfile::tempdir().unwrap();
        let out = root.path().join("out");
        write_dir(&out, &files(&[("a_leaf1.cu", "1"), ("a_leaf2.cu", "2")]), Provenance::default(), Foreign::Refuse).unwrap();
        let meta = |n: &str| fs::symlink_metadata(out.join(n)).unwrap();
        let (one, two) = (meta("a_leaf1.cu"), meta("a_leaf2.cu"));
        write_dir(&out, &files(&[("a_leaf1.cu", "1"), ("a_leaf2.cu", "2'")]), Provenance::default(), Foreign::Refuse).unwrap();
        assert_eq!((meta("a_leaf1.cu").ino(), meta("a_leaf1.cu").modified().unwrap()), (one.ino(), one.modified().unwrap()), "the unchanged file is the same file");
        assert_eq!(meta("a_leaf1.cu").nlink(), 1, "the old directory's name for it is gone");
        assert_ne!(meta("a_leaf2.cu").ino(), two.ino());
        assert_eq!(fs::read_to_string(out.join("a_leaf2.cu")).unwrap(), "2'");
        let elsewhere = root.path().join("elsewhere");
        fs::write(&elsewhere, "1").unwrap();
        fs::remove_file(out.join("a_leaf1.cu")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, out.join("a_leaf1.cu")).unwrap();
        write_dir(&out, &files(&[("a_leaf1.cu", "1")]), Provenance::default(), Foreign::Replace).unwrap();
        assert!(meta("a_leaf1.cu").is_file(), "a regular file, not the link");
        assert_ne!(meta("a_leaf1.cu").ino(), fs::metadata(&elsewhere).unwrap().ino());
        assert_eq!(fs::read_to_string(out.join("a_leaf1.cu")).unwrap(), "1");
        assert_eq!(names(root.path()), ["elsewhere", "out"], "no staging directory is left");
    }

    #[test]
    fn refuses_a_symbolic_link_or_a_file_as_the_directory() {
        let root = tempfile::tempdir().unwrap();
        let real = root.path().join("real");
        fs::create_dir(&real).unwrap();
        fs::write(real.join("keep"), "k").unwrap();
        let link = root.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = write_dir(&link, &files(&[("tree.yaml", "t")]), Provenance::default(), Foreign::Refuse).unwrap_err();
        assert!(e.contains("symbolic link") && e.contains("link"), "{e}");
        // `link/` (which the system would follow) is `link`; `real/.` is `real`.
        let e = write_dir(&root.path().join("link/"), &files(&[("tree.yaml", "t")]), Provenance::default(), Foreign::Refuse).unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");
        write_dir(&real.join("."), &files(&[("tree.yaml", "t")]), Provenance::default(), Foreign::Refuse).unwrap();
        assert_eq!(names(&real), ["keep", "manifest.json", "tree.yaml"]);
        fs::remove_file(real.join("tree.yaml")).unwrap();
        fs::remove_file(real.join("manifest.json")).unwrap();
        assert_eq!(names(&real), ["keep"]);
        let file = root.path().join("file");
        fs::write(&file, "f").unwrap();
        let e = write_dir(&file, &files(&[("tree.yaml", "t")]), Provenance::default(), Foreign::Refuse).unwrap_err();
        assert!(e.contains("a regular file; give a directory"), "{e}");
        assert_eq!(fs::read_to_string(&file).unwrap(), "f");
    }

    #[test]
    fn another_commands_output_is_refused_unless_forced() {
        use super::super::manifest::OutputKind;
        let root = tempfile::tempdir().unwrap();
        let out = root.path().join("out");
        let harness = || Provenance { output: OutputKind::Harness, ..Default::default() };
        write_dir(&out, &files(&[("tree.yaml", "t"), ("a_leaf1.cu", "1")]), Provenance::default(), Foreign::Refuse).unwrap();
        let e = write_dir(&out, &files(&[("a_harness.cu", "h")]), harness(), Foreign::Refuse).unwrap_err();
        assert!(e.contains("the output of `metafork gen`") && e.contains("--force"), "{e}");
        assert_eq!(names(&out), ["a_leaf1.cu", "manifest.json", "tree.yaml"]);
        write_dir(&out, &files(&[("a_harness.cu", "h")]), harness(), Foreign::Replace).unwrap();
        assert_eq!(names(&out), ["a_harness.cu", "manifest.json"]);
        // The same command again replaces its own output without --force.
        write_dir(&out, &files(&[("a_harness.cu", "h2")]), harness(), Foreign::Refuse).unwrap();
        let e = write_dir(&out, &files(&[("tree.yaml", "t")]), Provenance::default(), Foreign::Refuse).unwrap_err();
        assert!(e.contains("the output of `metafork tune --emit-harness`"), "{e}");
    }

    #[test]
    fn a_planted_link_inside_the_directory_is_refused_or_replaced_never_written_through() {
        let root = tempfile::tempdir().unwrap();
        let out = root.path().join("out");
        fs::create_dir(&out).unwrap();
        let victim = root.path().join("victim");
        fs::write(&victim, "precious").unwrap();
        std::os::unix::fs::symlink(&victim, out.join("tree.yaml")).unwrap();
        let e = write_dir(&out, &files(&[("tree.yaml", "t")]), Provenance::default(), Foreign::Refuse).unwrap_err();
        assert!(e.contains("it holds `tree.yaml`") && e.contains("has no `manifest.json`"), "{e}");
        assert!(fs::symlink_metadata(out.join("tree.yaml")).unwrap().is_symlink());
        write_dir(&out, &files(&[("tree.yaml", "t")]), Provenance::default(), Foreign::Replace).unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
        assert!(fs::symlink_metadata(out.join("tree.yaml")).unwrap().is_file());
    }

    #[test]
    fn a_directory_named_like_an_output_file_is_never_removed() {
        let root = tempfile::tempdir().unwrap();
        let out = root.path().join("out");
        write_dir(&out, &files(&[("tree.yaml", "t"), ("a_leaf1.cu", "1")]), Provenance::default(), Foreign::Refuse).unwrap();
        fs::remove_file(out.join("a_leaf1.cu")).unwrap();
        fs::create_dir(out.join("a_leaf1.cu")).unwrap();
        fs::write(out.join("a_leaf1.cu/data"), "precious").unwrap();
        for foreign in [Foreign::Refuse, Foreign::Replace] {
            let e = write_dir(&out, &files(&[("tree.yaml", "t2"), ("a_leaf1.cu", "1")]), Provenance::default(), foreign).unwrap_err();
            assert!(e.contains("a directory `a_leaf1.cu`") || e.contains("it holds `a_leaf1.cu`"), "{e}");
            assert_eq!(fs::read_to_string(out.join("a_leaf1.cu/data")).unwrap(), "precious");
            assert_eq!(fs::read_to_string(out.join("tree.yaml")).unwrap(), "t", "nothing written");
        }
    }

    #[test]
    fn a_stale_staging_directory_is_recovered() {
        let root = tempfile::tempdir().unwrap();
        let out = root.path().join("out");
        write_dir(&out, &files(&[("tree.yaml", "t")]), Provenance::default(), Foreign::Refuse).unwrap();
        // As if a run died after carrying the user's `build/` into its staging directory.
        let prefix = format!("{STAGING_PREFIX}{}-", &super::super::manifest::sha256_hex(b"out")[..12]);
        let stale = root.path().join(format!("{prefix}dead"));
        fs::create_dir(&stale).unwrap();
        fs::create_dir(stale.join("build")).unwrap();
        fs::write(stale.join("build").join("x.o"), "obj").unwrap();
        fs::write(stale.join("half.cu"), "partial").unwrap();
        fs::write(stale.join(JOURNAL), serde_json::to_vec(&vec![b"build".to_vec()]).unwrap()).unwrap();
        write_dir(&out, &files(&[("tree.yaml", "t2")]), Provenance::default(), Foreign::Refuse).unwrap();
        assert_eq!(names(root.path()), ["out"]);
        assert_eq!(names(&out), ["build", "manifest.json", "tree.yaml"]);
        assert_eq!(fs::read_to_string(out.join("build").join("x.o")).unwrap(), "obj");
    }

    /// A stale staging directory carried `userdir` out of DIR, and the user made a new
    /// `userdir` before the next run: both are kept (a helper's sweep: the old one was deleted
    /// with the staging directory, exit 0).
    #[test]
    fn a_recovered_entry_never_replaces_or_loses_one_made_since() {
        let root = tempfile::tempdir().unwrap();
        let out = root.path().join("out");
        write_dir(&out, &files(&[("tree.yaml", "t")]), Provenance::default(), Foreign::Refuse).unwrap();
        let prefix = format!("{STAGING_PREFIX}{}-", &super::super::manifest::sha256_hex(b"out")[..12]);
        let stale = root.path().join(format!("{prefix}dead"));
        fs::create_dir_all(stale.join("userdir")).unwrap();
        fs::write(stale.join("userdir").join("f.txt"), "OLD").unwrap();
        fs::write(stale.join(JOURNAL), serde_json::to_vec(&vec![b"userdir".to_vec()]).unwrap()).unwrap();
        fs::create_dir(out.join("userdir")).unwrap();
        fs::write(out.join("userdir").join("f.txt"), "NEW").unwrap();
        write_dir(&out, &files(&[("tree.yaml", "t2")]), Provenance::default(), Foreign::Refuse).unwrap();
        assert_eq!(names(root.path()), ["out"]);
        assert_eq!(names(&out), ["manifest.json", "tree.yaml", "userdir", "userdir.recovered-1"]);
        assert_eq!(fs::read_to_string(out.join("userdir/f.txt")).unwrap(), "NEW");
        assert_eq!(fs::read_to_string(out.join("userdir.recovered-1/f.txt")).unwrap(), "OLD");
    }

    /// Entries of DIR whose names begin `.metafork-` are the user's (or another output's
    /// staging directory): carried over, never deleted (a helper's sweep: `.metafork-notes.txt`
    /// and `.metafork-backup/` vanished, exit 0). Only the journal is metafork's.
    #[test]
    fn a_users_dot_metafork_entries_are_kept() {
        let root = tempfile::tempdir().unwrap();
        let out = root.path().join("out");
        fs::create_dir(&out).unwrap();
        fs::write(out.join(".metafork-notes.txt"), "notes").unwrap();
        fs::create_dir_all(out.join(".metafork-backup/sub")).unwrap();
        fs::write(out.join(".metafork-backup/sub/data.txt"), "data").unwrap();
        fs::write(out.join(JOURNAL), "[]").unwrap();
        write_dir(&out, &files(&[("tree.yaml", "t")]), Provenance::default(), Foreign::Refuse).unwrap();
        write_dir(&out, &files(&[("tree.yaml", "t2")]), Provenance::default(), Foreign::Refuse).unwrap();
        assert_eq!(names(&out), [".metafork-backup", ".metafork-notes.txt", "manifest.json", "tree.yaml"]);
        assert_eq!(fs::read_to_string(out.join(".metafork-backup/sub/data.txt")).unwrap(), "data");
        assert_eq!(fs::read_to_string(out.join(".metafork-notes.txt")).unwrap(), "notes");
    }

    #[test]
    fn concurrent_writers_never_mix_their_files() {
        let root = tempfile::tempdir().unwrap();
        let out = root.path().join("out");
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let out = out.clone();
                std::thread::spawn(move || {
                    for i in 0..10 {
                        let tag = format!("{t}-{i}");
                        let f: DirFiles = (0..5).map(|k| (format!("f{}_{k}.cu", t), tag.clone().into_bytes())).chain([("tree.yaml".to_string(), tag.clone().into_bytes())]).collect();
                        write_dir(&out, &f, Provenance::default(), Foreign::Refuse).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // The last writer's files only, all of one run.
        let tag = fs::read_to_string(out.join("tree.yaml")).unwrap();
        let t = tag.split('-').next().unwrap();
        let expected: Vec<String> = (0..5).map(|k| format!("f{t}_{k}.cu")).chain(["manifest.json".into(), "tree.yaml".into()]).collect();
        let mut expected = expected;
        expected.sort();
        assert_eq!(names(&out), expected);
        for k in 0..5 {
            assert_eq!(fs::read_to_string(out.join(format!("f{t}_{k}.cu"))).unwrap(), tag);
        }
    }
}
