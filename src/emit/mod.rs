//! Emitters: what `metafork gen` writes. [`cuda`] prints a [`crate::kernel::Kernel`] as a
//! readable CUDA source file with its host launch wrapper; [`dispatch`] writes the run-time
//! leaf selection; [`tree_picture`] draws `tree.dot`; [`tree_files`] assembles what `gen` writes.

pub mod casts;
pub mod command;
pub mod cuda;
pub mod dispatch;
pub mod host;
pub mod tree_files;
pub mod tree_picture;
