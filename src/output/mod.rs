//! Everything metafork writes to disk goes through this module.
//!
//! Contract:
//! - [`write_atomic`]: one file, replaced whole (a temporary with an unpredictable name created
//!   `O_EXCL` beside it, flushed, renamed over it). A target that exists and is not a regular
//!   file (a symbolic link, a FIFO, a device, a directory) is refused, never replaced.
//! - [`write_dir`]: a whole output directory, replaced whole: built in a fresh temporary
//!   directory beside the target and exchanged with it in one `renameat2(RENAME_EXCHANGE)`, under
//!   a lock on the parent directory, so that readers, interrupted runs and concurrent runs see
//!   either the old output or the new one, never a mix. A file the old directory holds with
//!   exactly the new bytes is hard-linked into the new one (same inode and modification time).
//!   Entries of the old directory that
//!   metafork did not write (not in its [`manifest`], or changed since) are carried over; files
//!   it wrote and the new output no longer contains are dropped.
//! - Errors name the target the user gave, never a temporary.

mod dir;
mod file;
pub mod manifest;

pub use dir::{write_dir, DirFiles, Foreign, STAGING_PREFIX};
pub use file::{is_same_file, write_atomic};

/// Whether `name` may be the name of a file metafork writes into an output directory: one
/// plain component (no separator, not `.` or `..`, not empty, not hidden), at most 255 bytes.
pub fn is_plain_file_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('.')
        && !name.contains(['/', '\\', '\0'])
        && !name.chars().any(char::is_control)
}
