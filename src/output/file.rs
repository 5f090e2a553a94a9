//! One output file, written atomically: a temporary created with `O_EXCL` and an unpredictable
//! short name (`tempfile`) in the target's directory, written, flushed to disk, then renamed
//! over the target. A reader never sees a half-written file, a failure leaves the old file (or
//! none), and a name planted beside the target cannot redirect the write. The target itself
//! must be a regular file or absent: a symbolic link, FIFO, device or directory there is
//! refused (renaming over it would replace it; opening it would write through it).

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

pub(crate) use constraints::input::kind_of;

/// The error for a target that is not a regular file.
pub(crate) fn not_regular(t: fs::FileType) -> io::Error {
    io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!("it exists and is {}; metafork only replaces regular files (remove it or choose another path)", kind_of(t)),
    )
}

/// An error about the temporary, restated without the temporary's name.
fn plain(e: io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::new(e.kind(), e.kind().to_string()),
    }
}

/// Whether `output` names the file `input` names (links followed, as the input was read):
/// writing it would replace the program a command was given.
pub fn is_same_file(output: &Path, input: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (fs::metadata(output), fs::metadata(input)) {
        (Ok(o), Ok(i)) => o.dev() == i.dev() && o.ino() == i.ino(),
        _ => false,
    }
}

pub fn write_atomic(path: &Path, contents: &[u8]) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if path.file_name().is_none() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a file path"));
    }
    let mode = match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_file() => m.permissions().mode() & 0o7777,
        Ok(m) => return Err(not_regular(m.file_type())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => 0o666, // the umask applies
        Err(e) => return Err(e),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".mf")
        .permissions(fs::Permissions::from_mode(mode))
        .tempfile_in(dir)
        .map_err(plain)?;
    tmp.write_all(contents).map_err(plain)?;
    tmp.as_file().sync_all().map_err(plain)?;
    // A target that became non-regular since the check is refused too (the window is short;
    // renaming over a symbolic link replaces the link, never what it points to).
    if let Ok(m) = fs::symlink_metadata(path) {
        if !m.file_type().is_file() {
            return Err(not_regular(m.file_type()));
        }
    }
    // Interrupted (Ctrl-C) while it was made, the output may be incomplete: the old file stays.
    if constraints::budget::interrupted() {
        return Err(io::Error::new(io::ErrorKind::Interrupted, "interrupted; the file is as it was"));
    }
    tmp.persist(path).map(|_| ()).map_err(|e| plain(e.error))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileTypeExt;

    #[test]
    fn replaces_whole_files_and_leaves_no_temporaries() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.yaml");
        write_atomic(&p, b"first").unwrap();
        write_atomic(&p, b"second").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"second");
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 1, "{names:?}");
        assert!(write_atomic(&dir.path().join("missing").join("x"), b"y").is_err());
    }

    #[test]
    fn refuses_symbolic_links_fifos_and_directories() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        fs::write(&outside, b"precious").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        let e = write_atomic(&link, b"x").unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(fs::read(&outside).unwrap(), b"precious");
        assert!(fs::symlink_metadata(&link).unwrap().file_type().is_symlink());

        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = write_atomic(&fifo, b"x").unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{e}");
        assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());

        let e = write_atomic(dir.path(), b"x").unwrap_err();
        assert!(e.to_string().contains("directory") || e.to_string().contains("file path"), "{e}");
    }

    #[test]
    fn keeps_the_mode_of_a_replaced_file_and_names_no_temporary_in_errors() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("script.sh");
        fs::write(&p, b"old").unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o751)).unwrap();
        write_atomic(&p, b"new").unwrap();
        assert_eq!(fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o751);
        let e = write_atomic(&dir.path().join("no").join("such"), b"x").unwrap_err();
        assert!(!e.to_string().contains(".mf"), "{e}");
    }

    #[test]
    fn a_long_target_name_gets_a_short_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("n".repeat(250));
        write_atomic(&p, b"x").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"x");
    }
}
