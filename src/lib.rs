//! metafork: comprehensive parametric CUDA kernels from MetaFork loop nests.
//!
//! Modules: [`frontend`] (source to checked program), [`report`] (what `metafork parse`
//! prints), [`cli`] (the command line). The polynomial and constraint engine is the
//! `constraints` crate; IR passes and counters are the `llvm-passes` crate.

pub mod access;
pub mod cexpr;
pub mod cli;
pub mod command;
pub mod compiled;
pub mod emit;
pub mod counters;
pub mod dispatch;
pub mod frontend;
pub mod gpucheck;
pub mod join;
pub mod kernel;
pub mod lower;
pub mod names;
pub mod output;
pub mod perf;
pub mod report;
pub mod sass;
pub mod strategy;
pub mod tree;
pub mod tune;
pub mod verify;
