//! Device profiles: the numeric limits of one device, as YAML.
//!
//! Contract: a profile is a flat mapping of the fields of [`DeviceProfile`], every one required,
//! no others allowed; [`DeviceProfile::load`] takes a built-in name (the files in
//! `constraints/devices/`, compiled in) or a path to a `.yaml` file, and every error names the
//! file and the field at fault. Values are checked for sense (positive, opt-in shared memory at
//! least the default, per-block limits within per-multiprocessor ones) so that a typo is caught
//! here rather than producing a wrong tree or launch.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// The built-in profiles, by name, from `constraints/devices/`.
pub const BUILT_IN: [(&str, &str); 6] = [
    ("m2050", include_str!("../devices/m2050.yaml")),
    ("v100", include_str!("../devices/v100.yaml")),
    ("a100", include_str!("../devices/a100.yaml")),
    ("l4", include_str!("../devices/l4.yaml")),
    ("h100", include_str!("../devices/h100.yaml")),
    ("h200", include_str!("../devices/h200.yaml")),
];

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceProfile {
    /// Lower-case name (`h200`).
    pub name: String,
    /// `"major.minor"`, quoted in YAML.
    pub compute_capability: String,
    pub multiprocessors: u32,
    pub warp_size: u32,
    /// 32-bit registers one thread may use.
    pub registers_per_thread: u32,
    /// 32-bit registers one block may use.
    pub registers_per_block: u32,
    pub registers_per_multiprocessor: u32,
    /// Bytes of shared memory a block gets without opting in.
    pub shared_memory_per_block: u32,
    /// Bytes of shared memory a block can opt into (at least the default).
    pub shared_memory_per_block_optin: u32,
    pub shared_memory_per_multiprocessor: u32,
    pub threads_per_block: u32,
    pub warps_per_multiprocessor: u32,
    pub blocks_per_multiprocessor: u32,
    /// DRAM bandwidth in GB/s (10^9 bytes per second), for `tune`'s data-movement model;
    /// optional: without it (or the clock) `tune` ranks without time estimates.
    #[serde(default)]
    pub memory_bandwidth_gb_s: Option<u32>,
    /// The multiprocessors' boost clock in MHz (the clock of the published peak FLOP rate).
    #[serde(default)]
    pub boost_clock_mhz: Option<u32>,
    /// The most blocks a grid may have along x, y and z (`cudaDeviceProp::maxGridSize`);
    /// optional: without it, what every device of the compute capability allows
    /// ([`DeviceProfile::grid_limits`]).
    #[serde(default)]
    pub max_grid_size: Option<[u32; 3]>,
}

/// Why a profile could not be used; `Display` names the source and the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileError(pub String);

impl std::fmt::Display for ProfileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ProfileError {}

/// The largest profile file read (bytes): a profile is a few dozen lines.
pub const MAX_PROFILE_BYTES: u64 = 1 << 20;

impl DeviceProfile {
    /// A built-in profile by name, or a profile file by path (anything with a `/` or ending in
    /// `.yaml`/`.yml` is a path).
    /// The file `load` reads for `name_or_path`: a path (it has a `/`, or ends in `.yaml` or
    /// `.yml`), or `None` for a built-in profile's name.
    pub fn file_of(name_or_path: &str) -> Option<&Path> {
        (name_or_path.contains('/') || name_or_path.ends_with(".yaml") || name_or_path.ends_with(".yml")).then(|| Path::new(name_or_path))
    }

    pub fn load(name_or_path: &str) -> Result<DeviceProfile, ProfileError> {
        if DeviceProfile::file_of(name_or_path).is_some() {
            let text = crate::input::read_text(Path::new(name_or_path), MAX_PROFILE_BYTES, crate::input::Links::Follow)
                .map_err(|e| ProfileError(format!("cannot read device profile `{}`: {e}", name_or_path.escape_debug())))?;
            return DeviceProfile::parse(name_or_path, &text);
        }
        match BUILT_IN.iter().find(|(n, _)| *n == name_or_path) {
            Some((n, text)) => DeviceProfile::parse(&format!("built-in profile `{n}`"), text),
            None => Err(ProfileError(format!(
                "unknown device `{name_or_path}`; built-in profiles: {} (or give a path to a .yaml profile)",
                BUILT_IN.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
            ))),
        }
    }

    /// Every built-in profile, in the order of [`BUILT_IN`].
    pub fn built_in() -> Vec<DeviceProfile> {
        BUILT_IN.iter().map(|(n, t)| DeviceProfile::parse(n, t).expect("built-in profiles are valid (tested)")).collect()
    }

    /// Parse and check a profile; `source` names it in errors.
    pub fn parse(source: &str, text: &str) -> Result<DeviceProfile, ProfileError> {
        let text = crate::input::without_bom(text);
        crate::input::check_yaml_nesting(text).map_err(|(line, e)| ProfileError(format!("{source}:{line}: {e}")))?;
        let profile: DeviceProfile = serde_yaml::from_str(text).map_err(|e| {
            ProfileError(match crate::input::yaml_error(&e, text, 1) {
                (Some((line, column)), message) => format!("{source}:{line}:{column}: {message}"),
                (None, message) => format!("{source}: {message}"),
            })
        })?;
        profile.check().map_err(|(field, e)| {
            // The line at fault: the first that sets the field.
            let line = text.lines().position(|l| l.trim_start().strip_prefix(field).is_some_and(|r| r.trim_start().starts_with(':')));
            ProfileError(match line {
                Some(i) => format!("{source}:{}: {e}", i + 1),
                None => format!("{source}: {e}"),
            })
        })?;
        Ok(profile)
    }

    /// The most blocks a grid may have along x, y and z: the profile's `max_grid_size`, else
    /// the CUDA C++ Programming Guide's limit for the compute capability (2^31 - 1 along x from
    /// compute capability 3.0 on, 65535 before; 65535 along y and z).
    pub fn grid_limits(&self) -> [i64; 3] {
        match self.max_grid_size {
            Some(g) => g.map(i64::from),
            None => self.cuda_grid_limits(),
        }
    }

    /// The CUDA C++ Programming Guide's grid limits for the compute capability, which the
    /// generated launch functions check.
    fn cuda_grid_limits(&self) -> [i64; 3] {
        [if self.major() >= 3 { (1 << 31) - 1 } else { 65535 }, 65535, 65535]
    }

    /// The registers one thread may use on every device of the compute capability (CUDA C++
    /// Programming Guide; no device attribute reports it, so the generated `metafork_query_device`
    /// sets it from the compute capability alike).
    fn cuda_registers_per_thread(&self) -> u32 {
        if self.major() >= 3 {
            255
        } else {
            63
        }
    }

    fn major(&self) -> u32 {
        self.compute_capability.split('.').next().and_then(|m| m.parse().ok()).unwrap_or(0)
    }

    /// The field at fault and why.
    fn check(&self) -> Result<(), (&'static str, String)> {
        // Every CUDA device has 32 lanes per warp; the occupancy, coalescing and bank models
        // count in warps of 32.
        if self.warp_size != 32 {
            return Err(("warp_size", format!("field `warp_size` must be 32 (every CUDA device's), not {}", self.warp_size)));
        }
        // Far above any device, low enough that products of limits fit in 64 bits.
        let at_most = [
            ("multiprocessors", self.multiprocessors, 1 << 16),
            ("registers_per_thread", self.registers_per_thread, 255),
            ("registers_per_block", self.registers_per_block, 1 << 24),
            ("registers_per_multiprocessor", self.registers_per_multiprocessor, 1 << 24),
            ("shared_memory_per_block", self.shared_memory_per_block, 1 << 30),
            ("shared_memory_per_block_optin", self.shared_memory_per_block_optin, 1 << 30),
            ("shared_memory_per_multiprocessor", self.shared_memory_per_multiprocessor, 1 << 30),
            ("threads_per_block", self.threads_per_block, 1 << 16),
            ("warps_per_multiprocessor", self.warps_per_multiprocessor, 1 << 12),
            ("blocks_per_multiprocessor", self.blocks_per_multiprocessor, 1 << 12),
        ];
        let throughput = [("memory_bandwidth_gb_s", self.memory_bandwidth_gb_s), ("boost_clock_mhz", self.boost_clock_mhz)];
        if let Some((field, value)) = throughput.iter().find_map(|(f, v)| v.filter(|v| *v == 0 || *v > 1_000_000).map(|v| (*f, v))) {
            return Err((field, format!("field `{field}` ({value}) must be between 1 and 1000000")));
        }
        if let Some(g) = self.max_grid_size.filter(|g| g.iter().any(|v| *v == 0 || *v > i32::MAX as u32)) {
            return Err(("max_grid_size", format!("field `max_grid_size` ({g:?}) must hold three extents between 1 and 2147483647 (x, y, z)")));
        }
        if let Some((field, value, most)) = at_most.iter().find(|(_, v, most)| v > most) {
            return Err((field, format!("field `{field}` ({value}) must be at most {most}")));
        }
        if self.threads_per_block % self.warp_size != 0 {
            return Err(("threads_per_block", format!("field `threads_per_block` ({}) must be a multiple of `warp_size`", self.threads_per_block)));
        }
        let positive = [
            ("multiprocessors", self.multiprocessors),
            ("warp_size", self.warp_size),
            ("registers_per_thread", self.registers_per_thread),
            ("registers_per_block", self.registers_per_block),
            ("registers_per_multiprocessor", self.registers_per_multiprocessor),
            ("shared_memory_per_block", self.shared_memory_per_block),
            ("shared_memory_per_block_optin", self.shared_memory_per_block_optin),
            ("shared_memory_per_multiprocessor", self.shared_memory_per_multiprocessor),
            ("threads_per_block", self.threads_per_block),
            ("warps_per_multiprocessor", self.warps_per_multiprocessor),
            ("blocks_per_multiprocessor", self.blocks_per_multiprocessor),
        ];
        if let Some((field, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err((field, format!("field `{field}` must be positive")));
        }
        if self.name.is_empty() || self.name.len() > 64 || self.name.chars().any(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')) {
            return Err(("name", format!("field `name` must be 1 to 64 lower-case letters, digits, `_` or `-`, not `{}`", self.name.escape_debug())));
        }
        let cc_ok = self.compute_capability.split_once('.').is_some_and(|(a, b)| !a.is_empty() && !b.is_empty() && a.chars().chain(b.chars()).all(|c| c.is_ascii_digit()));
        if !cc_ok || self.compute_capability.len() > 8 {
            return Err(("compute_capability", format!("field `compute_capability` must be \"major.minor\", not `{}`", self.compute_capability.escape_debug())));
        }
        // CUDA's first devices were 1.0; a later major than any known is a device not seen
        // yet, which the tool is for (nvcc then says whether it compiles for it).
        if self.major() == 0 {
            return Err(("compute_capability", format!("field `compute_capability` ({}) has major version 0: CUDA devices start at 1.0", self.compute_capability)));
        }
        // What the generated code takes from CUDA's tables rather than from the device: a
        // profile that differs would be ranked by `tune` as no dispatcher on a device decides.
        if self.registers_per_thread != self.cuda_registers_per_thread() {
            return Err(("registers_per_thread", format!("field `registers_per_thread` ({}) must be {} at compute capability {}: CUDA fixes it per compute capability and reports it by no device attribute, so the generated dispatcher takes it from the compute capability", self.registers_per_thread, self.cuda_registers_per_thread(), self.compute_capability)));
        }
        let most = self.cuda_grid_limits();
        if let Some(g) = self.max_grid_size.filter(|g| g.iter().zip(most).any(|(v, m)| i64::from(*v) > m)) {
            return Err(("max_grid_size", format!("field `max_grid_size` ({g:?}) must not exceed CUDA's limits at compute capability {} ({most:?}), which the generated launch functions check", self.compute_capability)));
        }
        let ordered = [
            ("shared_memory_per_block_optin", self.shared_memory_per_block_optin, "at least `shared_memory_per_block`", self.shared_memory_per_block <= self.shared_memory_per_block_optin),
            ("shared_memory_per_block_optin", self.shared_memory_per_block_optin, "at most `shared_memory_per_multiprocessor`", self.shared_memory_per_block_optin <= self.shared_memory_per_multiprocessor),
            ("registers_per_block", self.registers_per_block, "at most `registers_per_multiprocessor`", self.registers_per_block <= self.registers_per_multiprocessor),
            ("registers_per_thread", self.registers_per_thread, "at most `registers_per_block`", self.registers_per_thread <= self.registers_per_block),
            ("threads_per_block", self.threads_per_block, "at most `warps_per_multiprocessor * warp_size`", self.threads_per_block <= self.warps_per_multiprocessor.saturating_mul(self.warp_size)),
        ];
        if let Some((field, value, rule, _)) = ordered.iter().find(|(_, _, _, ok)| !ok) {
            return Err((field, format!("field `{field}` ({value}) must be {rule}")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_no_device_has_with_the_line_at_fault() {
        let h100 = BUILT_IN.iter().find(|(n, _)| *n == "h100").unwrap().1;
        for (field, bad) in [("warp_size", "31"), ("registers_per_thread", "300"), ("threads_per_block", "1000"), ("multiprocessors", "0"), ("name", "\"a b\"")] {
            let text: String = h100.lines().map(|l| if l.starts_with(&format!("{field}:")) { format!("{field}: {bad}\n") } else { format!("{l}\n") }).collect();
            let line = text.lines().position(|l| l.starts_with(&format!("{field}:"))).unwrap() + 1;
            let e = DeviceProfile::parse("p.yaml", &text).unwrap_err().0;
            assert!(e.starts_with(&format!("p.yaml:{line}: field `{field}`")), "{e}");
        }
    }

    #[test]
    fn a_yaml_error_names_its_line_and_column() {
        let h100 = BUILT_IN.iter().find(|(n, _)| *n == "h100").unwrap().1;
        let bad: String = h100.lines().map(|l| if l.starts_with("multiprocessors:") { "multiprocessors: many\n".to_string() } else { format!("{l}\n") }).collect();
        let line = bad.lines().position(|l| l.starts_with("multiprocessors:")).unwrap() + 1;
        let e = DeviceProfile::parse("p.yaml", &bad).unwrap_err().0;
        assert!(e.starts_with(&format!("p.yaml:{line}:18: multiprocessors: invalid type")) && !e.contains("at line"), "{e}");
        // A byte-order mark in front (as Windows editors write) is not part of the first key.
        assert_eq!(DeviceProfile::parse("p.yaml", &format!("\u{feff}{h100}")).unwrap().name, "h100");
        let twice = format!("{h100}warp_size: 32\n");
        let e = DeviceProfile::parse("p.yaml", &twice).unwrap_err().0;
        assert!(e.starts_with(&format!("p.yaml:{}:1: duplicate field `warp_size`", twice.lines().count())), "{e}");
    }

    #[test]
    fn every_built_in_profile_loads_under_its_own_name() {
        for (name, _) in BUILT_IN {
            let p = DeviceProfile::load(name).unwrap();
            assert_eq!(p.name, name);
        }
        assert_eq!(DeviceProfile::built_in().len(), BUILT_IN.len());
    }

    /// What the generated code takes from CUDA's tables, not from the device (registers per
    /// thread; the grid limits its launch functions check), a profile must not contradict:
    /// `tune` would rank for a device no dispatcher sees (sweep H: 24 registers per thread at
    /// compute capability 9.0, a grid of 10^6 blocks along y).
    #[test]
    fn limits_cuda_fixes_per_compute_capability_are_not_overridden() {
        let h100 = BUILT_IN.iter().find(|(n, _)| *n == "h100").unwrap().1;
        let set = |field: &str, value: &str| -> String { h100.lines().filter(|l| !l.starts_with(&format!("{field}:"))).map(|l| format!("{l}\n")).chain([format!("{field}: {value}\n")]).collect() };
        for (field, value, wanted) in [("registers_per_thread", "24", "must be 255 at compute capability 9.0"), ("registers_per_thread", "63", "must be 255"), ("max_grid_size", "[2147483647, 1000000, 65535]", "must not exceed CUDA's limits at compute capability 9.0 ([2147483647, 65535, 65535])"), ("max_grid_size", "[1, 1, 65536]", "must not exceed")] {
            let e = DeviceProfile::parse("p.yaml", &set(field, value)).unwrap_err().0;
            assert!(e.contains(&format!("field `{field}`")) && e.contains(wanted), "{field}: {value}: {e}");
        }
        for cc in ["\"0.0\"", "\"0.9\"", "\"00.5\""] {
            let e = DeviceProfile::parse("p.yaml", &set("compute_capability", cc)).unwrap_err().0;
            assert!(e.contains("field `compute_capability`") && e.contains("major version 0"), "{cc}: {e}");
        }
        let fermi = set("compute_capability", "\"2.0\"");
        let e = DeviceProfile::parse("p.yaml", &fermi).unwrap_err().0;
        assert!(e.contains("field `registers_per_thread` (255) must be 63 at compute capability 2.0"), "{e}");
        let fermi = fermi.replace("registers_per_thread: 255", "registers_per_thread: 63");
        let with_grid: String = fermi.lines().filter(|l| !l.starts_with("max_grid_size:")).map(|l| format!("{l}\n")).chain(["max_grid_size: [2147483647, 65535, 65535]\n".to_string()]).collect();
        assert!(DeviceProfile::parse("p.yaml", &with_grid).unwrap_err().0.contains("([65535, 65535, 65535])"));
        // Smaller grids than CUDA's are a device's own (checked by the selection).
        assert_eq!(DeviceProfile::parse("p.yaml", &set("max_grid_size", "[100, 20, 3]")).unwrap().grid_limits(), [100, 20, 3]);
    }

    #[test]
    fn grid_limits_come_from_the_profile_or_the_compute_capability() {
        let h100 = BUILT_IN.iter().find(|(n, _)| *n == "h100").unwrap().1;
        let without: String = h100.lines().filter(|l| !l.starts_with("max_grid_size:")).map(|l| format!("{l}\n")).collect();
        assert_eq!(DeviceProfile::parse("p.yaml", &without).unwrap().grid_limits(), [2147483647, 65535, 65535]);
        let fermi = without.replace("compute_capability: \"9.0\"", "compute_capability: \"2.0\"").replace("registers_per_thread: 255", "registers_per_thread: 63");
        assert_eq!(DeviceProfile::parse("p.yaml", &fermi).unwrap().grid_limits(), [65535, 65535, 65535]);
        let small = format!("{without}max_grid_size: [100, 20, 3]\n");
        assert_eq!(DeviceProfile::parse("p.yaml", &small).unwrap().grid_limits(), [100, 20, 3]);
        for bad in ["[0, 1, 1]", "[2147483648, 1, 1]", "[1, 2]"] {
            let text = format!("{without}max_grid_size: {bad}\n");
            let e = DeviceProfile::parse("p.yaml", &text).unwrap_err().0;
            assert!(e.contains("max_grid_size") || e.contains("invalid length"), "{bad}: {e}");
        }
    }
}
