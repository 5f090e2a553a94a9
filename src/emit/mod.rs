//! Emitters: what `metafork gen` writes. [`cuda`] prints a [`crate::kernel::Kernel`] as a
//! readable CUDA source file with its host launch wrapper.

pub mod cuda;
pub mod tree_files;
