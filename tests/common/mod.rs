//! Helpers shared by integration tests: the example programs, their trees, a seeded generator.
#![allow(dead_code)] // each test crate uses its own subset

use constraints::solver::Backend;
use metafork::frontend::check_source;
use metafork::frontend::model::KernelFunction;
use metafork::kernel::Kernel;
use metafork::tree::{build, Tree};

/// Every `examples/*.mf` as (path, text), sorted by path.
pub fn examples() -> Vec<(String, String)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples");
    let mut v: Vec<(String, String)> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "mf")).map(|p| (p.display().to_string(), std::fs::read_to_string(&p).unwrap())).collect();
    v.sort();
    v
}

/// The decision tree of every schedule of a program, with its function.
pub fn trees_of(path: &str, text: &str, backend: &Backend) -> Vec<(KernelFunction, Tree)> {
    let p = check_source(path, text).unwrap();
    let mut out = Vec::new();
    for k in p.kernels {
        for s in &k.schedules {
            let t = build(&k, Kernel::from_schedule(&k, s).unwrap(), backend).unwrap();
            out.push((k.clone(), t));
        }
    }
    out
}

/// A small deterministic generator (xorshift), so tests need no extra dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % ((hi - lo + 1) as u64)) as i64
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}
