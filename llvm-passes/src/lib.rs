//! IR-level passes and resource counters for NVPTX kernels, on inkwell (LLVM 19).
//!
//! Contract: this crate knows nothing of MetaFork syntax. It takes LLVM modules (built by the
//! `metafork` lowering, or by hand in tests) for the `nvptx64-nvidia-cuda` target and offers
//! the target set-up ([`target`]), the fixed optimisation pipeline that precedes counting
//! ([`pipeline`]), the register-pressure transformations ([`pressure`]), the register estimate
//! from IR ([`registers`], on the control-flow graph of [`cfg`], the uniform-register model
//! of [`uniform`] and the immediate offsets of [`addressing`]), and the exact mode that reads `ptxas -v` ([`ptxas`]), with an opt-in cache of its reports
//! ([`compile_cache`]).

pub mod addressing;
pub mod cfg;
pub mod compile_cache;
pub mod pipeline;
pub mod pressure;
pub mod ptxas;
pub mod registers;
pub mod target;
pub mod uniform;
