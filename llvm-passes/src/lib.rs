//! IR-level passes and resource counters for NVPTX kernels, on inkwell (LLVM 19).
//!
//! Contract: this crate knows nothing of MetaFork syntax. It takes LLVM modules (built by the
//! `metafork` lowering, or by hand in tests) for the `nvptx64-nvidia-cuda` target and offers
//! the target set-up ([`target`]) and, as later work lands, the optimisation pipeline and the
//! counters computed from IR.

pub mod target;
