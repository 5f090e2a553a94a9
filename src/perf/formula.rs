//! The symbolic counters: closed forms, split into cases, for one warp's access.
//!
//! Contract: each formula takes the access's strides, lane-0 offset, element size and block
//! shape (a [`Concrete`] once the parameters have values) and returns the counter with the case
//! that produced it, or `None` outside the cases it covers (the caller then falls back to the
//! lane evaluator, and says so). Wherever a case applies, its value equals what
//! [`Concrete::coalescing`] / [`Concrete::bank_ways`] count: `tests/perf.rs` checks this on at
//! least 500 points per counter and example. Cases follow the warp's shape (`Bx` at least the
//! warp, or `Bx` dividing 32 with the warp spanning `32 / Bx` rows) and the offset's alignment
//! within a sector (`o = offset*elem mod 32`). Negative strides are left to the evaluator.

use super::lanes::{Concrete, SECTOR, WARP, WORD};

/// A counter's value and the case of the formula that gave it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Piece {
    pub case: &'static str,
    pub value: f64,
}

/// Sectors and bytes used by `k` lanes at elements `start + stride*j` (stride >= 0), the first
/// at byte offset `o` within its sector: a broadcast; one sector per lane once the stride
/// reaches a sector; otherwise a gap-free run of sectors.
fn run(o: i64, k: i64, stride: i64, elem: i64) -> (i64, i64) {
    if stride == 0 {
        (1, elem)
    } else if stride * elem >= SECTOR {
        (k, k * elem)
    } else {
        ((o + (k - 1) * stride * elem) / SECTOR + 1, k * elem)
    }
}

/// How many sectors lie between the first and the last of `k` lanes (stride >= 0): rows or
/// columns further apart than this never share a sector.
fn span(o: i64, k: i64, stride: i64, elem: i64) -> i64 {
    (o + (k - 1) * stride * elem) / SECTOR + 1
}

/// The warp's lanes as rows: `Some((rows, lanes per row))` when the warp lies in one row
/// (`Bx >= lanes`) or spans whole rows of one `z` slice (`Bx` divides 32).
fn rows(p: &Concrete) -> Option<(i64, i64)> {
    let [bx, by, bz] = p.block;
    let n = WARP.min(bx * by * bz);
    if bx >= n {
        Some((1, n))
    } else if n == WARP && WARP % bx == 0 && by >= WARP / bx {
        Some((WARP / bx, bx))
    } else {
        None
    }
}

/// Global-memory efficiency, bytes used over bytes moved.
pub fn coalescing(p: &Concrete) -> Option<Piece> {
    let [ax, ay, _] = p.stride;
    let s = p.elem;
    if ax < 0 || ay < 0 || s <= 0 || SECTOR % s != 0 {
        return None;
    }
    let o = (p.offset * s).rem_euclid(SECTOR);
    let (r, k) = rows(p)?;
    let (case, sectors, used) = if r == 1 {
        let (sec, used) = run(o, k, ax, s);
        ("one row", sec, used)
    } else if ay == 0 {
        let (sec, used) = run(o, k, ax, s);
        ("rows alike (ay = 0)", sec, used)
    } else if (ay * s) % SECTOR == 0 && ay * s / SECTOR >= span(o, k, ax, s) {
        // Rows equally aligned and apart: each row its own sectors.
        let (sec, used) = run(o, k, ax, s);
        ("rows apart (ay*elem a multiple of 32)", r * sec, r * used)
    } else if (ax * s) % SECTOR == 0 && ax * s >= SECTOR && span(o, r, ay, s) <= ax * s / SECTOR {
        // Columns equally aligned and apart: each column (stride ay) its own sectors.
        let (sec, used) = run(o, r, ay, s);
        ("columns apart (ax*elem a multiple of 32)", k * sec, k * used)
    } else {
        return None;
    };
    Some(Piece { case, value: used as f64 / (sectors * SECTOR) as f64 })
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a.abs()
    } else {
        gcd(b, a % b)
    }
}

/// Shared-memory passes per warp access (1 is conflict-free), for 4-byte elements.
pub fn bank_ways(p: &Concrete) -> Option<Piece> {
    let [ax, ay, _] = p.stride;
    if p.elem != WORD || ax < 0 || ay < 0 {
        return None;
    }
    let (r, k) = rows(p)?;
    // In a row, lanes j < k hit banks ax*j mod 32: each bank ceil(k*g/32) times, g = gcd(ax, 32).
    let row_ways = if ax == 0 { 1 } else { (k * gcd(ax, WARP) + WARP - 1) / WARP };
    let (case, ways) = if r == 1 {
        ("one row", row_ways)
    } else if ay == 0 {
        ("rows alike (ay = 0)", row_ways)
    } else if ay % WARP == 0 && (ax == 0 || ay >= k * ax) {
        // Rows on the same banks, with distinct words.
        ("rows on the same banks (ay a multiple of 32)", r * row_ways)
    } else if ax == 1 && ay % WARP == 1 && ay >= k {
        // Padded by one: lane (j, i) on bank j + i, at most min(k, r) lanes per bank.
        ("rows shifted by one bank (ay = 1 mod 32)", k.min(r))
    } else {
        return None;
    };
    Some(Piece { case, value: ways as f64 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tile(stride: [i64; 3], block: [i64; 3]) -> Concrete {
        Concrete { stride, offset: 0, elem: 4, block }
    }

    #[test]
    fn formulas_agree_with_the_lanes_on_a_grid() {
        let mut checked = 0;
        for bx in [1, 2, 4, 8, 16, 32, 64, 3, 48] {
            for by in [1, 2, 4, 8, 16, 32] {
                for ax in [0, 1, 2, 3, 8, 32, 33, 64] {
                    for ay in [0, 1, 16, 17, 32, 33, 64, 96, 1024] {
                        for offset in [0, 1, 5] {
                            let p = Concrete { offset, ..tile([ax, ay, 0], [bx, by, 1]) };
                            if let Some(c) = coalescing(&p) {
                                assert!((c.value - p.coalescing()).abs() < 1e-12, "{p:?} {c:?} vs {}", p.coalescing());
                                checked += 1;
                            }
                            if let Some(w) = bank_ways(&p) {
                                assert_eq!(w.value, p.bank_ways() as f64, "{p:?} {w:?}");
                                checked += 1;
                            }
                        }
                    }
                }
            }
        }
        assert!(checked > 3000, "{checked}");
    }
}
