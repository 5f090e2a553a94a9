//! The exact, lane-enumerating evaluator: what one warp's access does, for concrete numbers.
//!
//! Contract: the warp is the block's first (lanes 0..32 of the linear thread index
//! `tx + Bx*(ty + By*tz)`, fewer when the block has fewer threads); lane `l` touches element
//! `ax*tx + ay*ty + az*tz + c` of an array of `elem`-byte elements. Global memory moves
//! 32-byte sectors; shared memory has 32 banks of 4-byte words, lanes reading the same word are
//! served at once (broadcast), and the access takes as many passes ("ways") as the most
//! distinct words any one bank holds. Everything is counted, nothing estimated: this is the
//! reference the symbolic formulas ([`super::formula`]) are tested against.

/// One warp access with concrete numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Concrete {
    /// Element-index strides per thread coordinate.
    pub stride: [i64; 3],
    /// The element index of lane 0 (uniform over the warp).
    pub offset: i64,
    /// Bytes per element.
    pub elem: i64,
    /// The block's extents `[Bx, By, Bz]`.
    pub block: [i64; 3],
}

pub const WARP: i64 = 32;
pub const SECTOR: i64 = 32;
pub const BANKS: i64 = 32;
pub const WORD: i64 = 4;

impl Concrete {
    /// The element index each lane touches.
    pub fn lanes(&self) -> Vec<i64> {
        let [bx, by, bz] = self.block;
        let n = WARP.min(bx * by * bz).max(0);
        (0..n)
            .map(|l| {
                let (tx, ty, tz) = (l % bx, (l / bx) % by, l / (bx * by));
                self.stride[0] * tx + self.stride[1] * ty + self.stride[2] * tz + self.offset
            })
            .collect()
    }

    /// The warp these lanes make.
    pub fn warp(&self) -> Warp {
        Warp { elements: self.lanes(), elem: self.elem }
    }

    pub fn sectors(&self) -> i64 {
        self.warp().sectors()
    }
    pub fn used_bytes(&self) -> i64 {
        self.warp().used_bytes()
    }
    pub fn coalescing(&self) -> f64 {
        self.warp().coalescing()
    }
    pub fn bank_ways(&self) -> i64 {
        self.warp().bank_ways()
    }
}

/// One warp access: the element each lane touches, and the element's size in bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warp {
    pub elements: Vec<i64>,
    pub elem: i64,
}

impl Warp {
    /// Distinct 32-byte sectors the warp touches.
    pub fn sectors(&self) -> i64 {
        let mut s: Vec<i64> = self.elements.iter().map(|i| (i * self.elem).div_euclid(SECTOR)).collect();
        s.sort_unstable();
        s.dedup();
        s.len() as i64
    }

    /// Bytes the warp asks for: distinct elements times their size.
    pub fn used_bytes(&self) -> i64 {
        let mut e = self.elements.clone();
        e.sort_unstable();
        e.dedup();
        e.len() as i64 * self.elem
    }

    /// Global-memory efficiency: bytes used over bytes moved (sectors of 32 bytes), in (0, 1].
    pub fn coalescing(&self) -> f64 {
        match self.sectors() {
            0 => 1.0,
            n => self.used_bytes() as f64 / (n * SECTOR) as f64,
        }
    }

    /// Shared-memory passes: the most distinct 4-byte words in one bank (1 is conflict-free).
    pub fn bank_ways(&self) -> i64 {
        let mut words: Vec<i64> = self
            .elements
            .iter()
            .flat_map(|i| {
                let first = (i * self.elem).div_euclid(WORD);
                first..first + (self.elem / WORD).max(1)
            })
            .collect();
        words.sort_unstable();
        words.dedup();
        let mut per_bank = [0i64; BANKS as usize];
        for w in words {
            per_bank[w.rem_euclid(BANKS) as usize] += 1;
        }
        per_bank.into_iter().max().unwrap_or(0).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(stride: i64, offset: i64, bx: i64) -> Concrete {
        Concrete { stride: [stride, 0, 0], offset, elem: 4, block: [bx, 1, 1] }
    }

    #[test]
    fn unit_stride_floats_fill_four_sectors() {
        assert_eq!(row(1, 0, 64).sectors(), 4);
        assert_eq!(row(1, 0, 64).coalescing(), 1.0);
        // One element off alignment: a fifth sector.
        assert_eq!(row(1, 1, 64).sectors(), 5);
    }

    #[test]
    fn large_strides_waste_sectors_and_conflict_in_banks() {
        let column = row(1024, 0, 32);
        assert_eq!(column.sectors(), 32);
        assert_eq!(column.coalescing(), 4.0 / 32.0);
        assert_eq!(column.bank_ways(), 32);
        // Padding to 33 words per row: every lane in its own bank.
        assert_eq!(row(33, 0, 32).bank_ways(), 1);
        // Same word for every lane: a broadcast.
        assert_eq!(row(0, 7, 32).bank_ways(), 1);
    }
}
