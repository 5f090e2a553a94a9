//! Every integration test of the `metafork` crate, in one binary: one link instead of one per
//! file, shared fixtures (`common`: the examples' trees, built once per run) and one pool of
//! test threads for all of them, so a long test never leaves a core idle while the rest of its
//! file is done (issue 25).

/// The allocator the `metafork` binary runs with (src/main.rs), for the same work done
/// in-process here: the shared trees, the proofs, the lane sweeps.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod common;

mod caching;
mod char_arrays;
mod cli;
mod counters;
mod diagnostics;
mod dispatch;
mod downward;
mod emit_cuda;
mod examples;
mod floating_scalars;
mod gpucheck;
mod granularity;
mod host_statements;
mod hostile;
mod hygiene;
mod joins;
mod local_arrays;
mod mixed_calls;
mod ilp;
mod perf;
mod pressure_and_cse;
mod reduction;
mod robustness;
mod spaces;
mod tree;
mod triangles;
mod tune;
mod verify;
