//! The occupancy gate's arithmetic: the registers a warp is allocated, and the constraint under
//! which registers do not limit the warps resident on a multiprocessor.

use super::*;

/// Registers a warp is allocated with `registers` per thread: 32 threads' worth, in units of
/// 256 (every compute capability from 3.0 on; the occupancy calculator's allocation rule, as
/// in `perf::occupancy`).
pub fn warp_allocation(registers: u32) -> i64 {
    (u64::from(registers.max(1)) * 32).div_ceil(256) as i64 * 256
}

/// Registers do not limit the warps resident on a multiprocessor: `warp_allocation(r) * W_SM
/// <= R_SM`. Then the blocks the register file admits, `floor(R_SM / (alloc * w))` for `w` warps
/// per block, are at least the `floor(W_SM / w)` the warp limit admits, so the code's occupancy is
/// what it would be with fewer registers (the per-block register limit is the `R_B` counter's).
pub fn occupancy_allows(machine: &MachineSymbols, registers: u32) -> Constraint {
    Constraint::le(&(&Poly::int(warp_allocation(registers)) * &Poly::var(&machine.warps_per_multiprocessor)), &Poly::var(&machine.registers_per_multiprocessor))
}
