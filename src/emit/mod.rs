//! Emitters: what `metafork gen` writes. [`cuda`] prints a [`crate::kernel::Kernel`] as a
//! readable CUDA source file with its host launch wrapper; [`dispatch`] writes the run-time
//! leaf selection; [`tree_picture`] reduces a tree to its decision diagram and writes it as
//! `tree.dot`, [`tree_svg`] lays it out and draws `tree.svg`; [`tree_files`] assembles what `gen`
//! writes.

pub mod casts;
pub mod command;
pub mod cuda;
pub mod data_reads;
pub mod dispatch;
pub mod host;
pub mod overloads;
pub mod tree_files;
pub mod tree_picture;
pub mod tree_svg;
