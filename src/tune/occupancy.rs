//! Occupancy: active warps per multiprocessor over the maximum, for concrete counters.
//!
//! Contract: the standard calculation (NVIDIA's CUDA Occupancy Calculator, as
//! `cudaOccupancyMaxActiveBlocksPerMultiprocessor` does it), with the allocation rules of
//! compute capability 7.0 and later (the documented ones for the profiles in
//! `constraints/devices/`): registers are allocated per warp in units of 256, shared memory per
//! block in units of 128 bytes plus 1 KiB the runtime reserves per block (compute capability
//! 8.0 and later), and blocks are limited by warps, registers, shared memory and the
//! per-multiprocessor block limit. A block that does not fit at all has occupancy 0.

use constraints::device::DeviceProfile;

/// The occupancy of a kernel using `registers` per thread and `shared_bytes` of shared
/// memory per block, launched with `threads` per block: a value in [0, 1].
pub fn occupancy(device: &DeviceProfile, registers: u64, shared_bytes: u64, threads: u64) -> f64 {
    let blocks = active_blocks(device, registers, shared_bytes, threads);
    let warps = threads.div_ceil(device.warp_size.into());
    (blocks * warps) as f64 / f64::from(device.warps_per_multiprocessor)
}

/// Blocks resident on one multiprocessor.
pub fn active_blocks(device: &DeviceProfile, registers: u64, shared_bytes: u64, threads: u64) -> u64 {
    if threads == 0 || threads > device.threads_per_block.into() || registers > device.registers_per_thread.into() {
        return 0;
    }
    let warps = threads.div_ceil(device.warp_size.into());
    let by_warps = u64::from(device.warps_per_multiprocessor) / warps;
    let by_blocks = u64::from(device.blocks_per_multiprocessor);
    let regs_per_warp = (registers.max(1) * u64::from(device.warp_size)).div_ceil(256) * 256;
    let regs_per_block = regs_per_warp * warps;
    if regs_per_block > device.registers_per_block.into() {
        return 0;
    }
    let by_registers = u64::from(device.registers_per_multiprocessor) / regs_per_block;
    let reserved = if major(device) >= 8 { 1024 } else { 0 };
    let smem = (shared_bytes + reserved).div_ceil(128) * 128;
    if shared_bytes > device.shared_memory_per_block_optin.into() {
        return 0;
    }
    let by_shared = if shared_bytes == 0 { u64::MAX } else { u64::from(device.shared_memory_per_multiprocessor) / smem };
    by_warps.min(by_blocks).min(by_registers).min(by_shared)
}

fn major(device: &DeviceProfile) -> u32 {
    device.compute_capability.split('.').next().and_then(|m| m.parse().ok()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Figures from NVIDIA's occupancy calculator for an H100-class device (sm_90: 64 warps,
    /// 32 blocks, 65536 registers, 228 KiB shared memory per multiprocessor).
    #[test]
    fn matches_the_calculator_on_known_cases() {
        let h100 = DeviceProfile::load("h100").unwrap();
        assert_eq!(occupancy(&h100, 32, 0, 256), 1.0); // 8 blocks x 8 warps
        assert_eq!(active_blocks(&h100, 64, 0, 256), 4); // 64 regs: 16384 per block
        assert_eq!(occupancy(&h100, 64, 0, 256), 0.5);
        assert_eq!(active_blocks(&h100, 32, 48 * 1024, 256), 4); // (48 KiB + 1 KiB) x 4 <= 228 KiB
        assert_eq!(active_blocks(&h100, 32, 0, 32), 32); // the block limit
        assert_eq!(active_blocks(&h100, 255, 0, 1024), 0); // 255 x 1024 registers do not fit a block
        assert_eq!(active_blocks(&h100, 32, 0, 2048), 0);
    }
}
