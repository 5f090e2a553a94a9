//! Occupancy as a piecewise rational function of the parameters, for one device and one
//! register count per thread.
//!
//! Contract: [`Occupancy::of`] writes the standard calculation (`tune::occupancy`, which it
//! must equal at every point: `tests/perf.rs` checks at least 500 points per example) with the
//! threads per block `T` and the shared bytes per block `Z` as polynomials in the parameters.
//! The calculation's roundings become integer auxiliaries, each defined by a [`Floor`]
//! (`q = floor(a / b)`, equivalently the polynomial constraints `b*q <= a < b*(q + 1)`):
//! warps per block `w = floor((T + 31) / 32)`, and the blocks each resource admits. On the
//! region where the block fits at all ([`Occupancy::fits`]), a [`Piece`] per limiting resource
//! gives the value `blocks * w / W` (W: the device's warps per multiprocessor) under the guard
//! that its resource admits no more blocks than any other; outside that region occupancy is 0.

use constraints::device::DeviceProfile;
use constraints::{Constraint, Poly, Rational, Var};
use std::collections::BTreeMap;

/// An integer auxiliary `name = floor(numerator / denominator)`, the denominator positive
/// wherever it is used.
#[derive(Clone, Debug)]
pub struct Floor {
    pub name: String,
    pub numerator: Poly,
    pub denominator: Poly,
}

impl Floor {
    /// The definition as constraints: `d*q <= n` and `n < d*(q + 1)`.
    pub fn constraints(&self) -> [Constraint; 2] {
        let q = Poly::var(&self.name);
        [Constraint::le(&(&self.denominator * &q), &self.numerator), Constraint::lt(&self.numerator, &(&self.denominator * &(&q + &Poly::one())))]
    }
}

/// The occupancy where one resource limits the resident blocks.
#[derive(Clone, Debug)]
pub struct Piece {
    /// `warps`, `blocks`, `registers` or `shared memory`.
    pub limiter: &'static str,
    pub guard: Vec<Constraint>,
    /// The value: `numerator / denominator` (a constant denominator, the device's warps).
    pub numerator: Poly,
    pub denominator: Poly,
}

#[derive(Clone, Debug)]
pub struct Occupancy {
    /// In dependency order.
    pub floors: Vec<Floor>,
    /// Where the block can run at all (otherwise occupancy is 0).
    pub fits: Vec<Constraint>,
    /// Ordered; where guards overlap (ties) the values agree.
    pub pieces: Vec<Piece>,
}

fn int(v: u64) -> Poly {
    Poly::int(v as i64)
}

impl Occupancy {
    /// `registers` per thread, `threads` and `shared_bytes` per block as polynomials.
    pub fn of(device: &DeviceProfile, registers: u64, threads: &Poly, shared_bytes: &Poly) -> Occupancy {
        let warp = u64::from(device.warp_size);
        let warps_max = u64::from(device.warps_per_multiprocessor);
        let floor = |name: &str, n: Poly, d: Poly| Floor { name: name.to_string(), numerator: n, denominator: d };
        let w = Poly::var("occ_warps");
        // Registers are allocated per warp in units of 256.
        let per_warp = (registers.max(1) * warp).div_ceil(256) * 256;
        let reserved: u64 = if device.compute_capability.split('.').next().and_then(|m| m.parse::<u32>().ok()).unwrap_or(0) >= 8 { 1024 } else { 0 };
        let floors = vec![
            floor("occ_warps", threads + &int(warp - 1), int(warp)),
            floor("occ_by_warps", int(warps_max), w.clone()),
            floor("occ_by_registers", int(device.registers_per_multiprocessor.into()), &int(per_warp) * &w),
            // Shared memory in units of 128 bytes, after the runtime's reservation.
            floor("occ_shared_units", shared_bytes + &int(reserved + 127), int(128)),
            floor("occ_by_shared", int(device.shared_memory_per_multiprocessor.into()), &int(128) * &Poly::var("occ_shared_units")),
        ];
        let fits = vec![
            Constraint::le(&Poly::one(), threads),
            Constraint::le(threads, &int(device.threads_per_block.into())),
            Constraint::le(&int(registers), &int(device.registers_per_thread.into())),
            Constraint::le(&(&int(per_warp) * &w), &int(device.registers_per_block.into())),
            Constraint::le(shared_bytes, &int(device.shared_memory_per_block_optin.into())),
        ];
        let terms: [(&'static str, Poly); 4] = [
            ("warps", Poly::var("occ_by_warps")),
            ("blocks", int(device.blocks_per_multiprocessor.into())),
            ("registers", Poly::var("occ_by_registers")),
            ("shared memory", Poly::var("occ_by_shared")),
        ];
        let mut pieces = Vec::new();
        // Without shared memory it limits nothing; with some, it is one more term.
        for uses_shared in [false, true] {
            let usage = if uses_shared { Constraint::le(&Poly::one(), shared_bytes) } else { Constraint::le(shared_bytes, &Poly::zero()) };
            let active = if uses_shared { &terms[..] } else { &terms[..3] };
            for (limiter, blocks) in active {
                let mut guard = vec![usage.clone()];
                guard.extend(active.iter().filter(|(other, _)| other != limiter).map(|(_, b)| Constraint::le(blocks, b)));
                pieces.push(Piece { limiter, guard, numerator: blocks * &w, denominator: int(warps_max) });
            }
        }
        Occupancy { floors, fits, pieces }
    }

    /// `piece` as one system of polynomial constraints over the parameters and the
    /// auxiliaries it reads: the definitions of those floors (a floor nothing reads, such as
    /// the shared-memory one without shared memory, may have a zero denominator and is left
    /// out), where the block fits, and the piece's guard.
    pub fn system(&self, piece: &Piece) -> constraints::System {
        let mut sys = constraints::System::new();
        let mut needed: std::collections::BTreeSet<Var> = piece.guard.iter().chain(&self.fits).flat_map(|c| c.vars()).chain(piece.numerator.vars()).collect();
        for f in self.floors.iter().rev() {
            if needed.contains(&Var::new(&f.name)) {
                needed.extend(f.numerator.vars().into_iter().chain(f.denominator.vars()));
                sys.set_domain(Var::new(&f.name), constraints::Domain::integer());
                f.constraints().into_iter().for_each(|c| sys.add(c));
            }
        }
        self.fits.iter().chain(&piece.guard).for_each(|c| sys.add(c.clone()));
        sys
    }

    /// The value at `point` (every variable of `T` and `Z`), with the piece that gave it
    /// (`None`: the block does not fit, occupancy 0); `None` overall when a value is missing.
    pub fn at(&self, point: &BTreeMap<String, i64>) -> Option<(f64, Option<&'static str>)> {
        let mut values = constraints::exact_point(point);
        for f in &self.floors {
            let (n, d) = (f.numerator.eval(&values).ok()?, f.denominator.eval(&values).ok()?);
            let q = if d > Rational::from_integer(0.into()) { (n / d).floor() } else { Rational::from_integer(0.into()) };
            values.insert(Var::new(&f.name), q);
        }
        if !self.fits.iter().all(|c| c.holds_at(&values).unwrap_or(false)) {
            return Some((0.0, None));
        }
        let piece = self.pieces.iter().find(|p| p.guard.iter().all(|c| c.holds_at(&values).unwrap_or(false)))?;
        let v = piece.numerator.eval(&values).ok()? / piece.denominator.eval(&values).ok()?;
        Some((num_traits::ToPrimitive::to_f64(&v)?, Some(piece.limiter)))
    }
}
