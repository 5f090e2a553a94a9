//! Reading `cuobjdump -sass` output: per kernel, its instructions, its loops (a backward `BRA`
//! and its target), and the hot loop's mix (issue 27's `make bench-sass`).
//!
//! Contract: [`parse`] keeps every line holding `/*ADDR*/ INSTRUCTION ;` under the last
//! `Function : NAME` header. [`hot_loop`] is the innermost loop (the instructions from a
//! backward branch's target to the branch, holding no other loop) with the most floating-point
//! arithmetic, the smaller one on a tie, or the smallest innermost loop when none computes; a
//! branch to itself is not a loop. [`Mix`] counts its instructions: FMA (`FFMA`, `DFMA`,
//! `HFMA2`), all floating arithmetic, shared loads (`LDS*`), global loads (`LDG*`) and 64-bit
//! integer operations (an integer opcode with a `.WIDE` or `.X` part: `IMAD.WIDE`, `IADD3.X`,
//! `LEA.HI.X`).

use std::collections::BTreeMap;

/// One instruction: its address and its text without the predicate (`FFMA R4, R5, R6, R4`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instruction {
    pub address: u64,
    pub text: String,
}

impl Instruction {
    /// The opcode with its modifiers (`IMAD.WIDE.U32`).
    pub fn opcode(&self) -> &str {
        self.text.split_whitespace().next().unwrap_or("")
    }

    /// A backward branch's target. A branch to itself is not a loop: ptxas ends every kernel
    /// with `EXIT` followed by a `BRA` to its own address that never runs.
    fn backward_target(&self) -> Option<u64> {
        let op = self.opcode();
        if op != "BRA" && !op.starts_with("BRA.") {
            return None;
        }
        let target = self.text.split_whitespace().find_map(|w| w.strip_prefix("0x"))?;
        let target = u64::from_str_radix(target.trim_end_matches([',', ';']), 16).ok()?;
        (target < self.address).then_some(target)
    }
}

/// Every kernel's instructions, by name.
pub fn parse(sass: &str) -> BTreeMap<String, Vec<Instruction>> {
    let mut out: BTreeMap<String, Vec<Instruction>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in sass.lines() {
        if let Some(name) = line.trim().strip_prefix("Function : ") {
            current = Some(name.trim().to_string());
            out.entry(name.trim().to_string()).or_default();
            continue;
        }
        let Some(name) = &current else { continue };
        let Some(rest) = line.trim().strip_prefix("/*") else { continue };
        let Some((address, rest)) = rest.split_once("*/") else { continue };
        let Ok(address) = u64::from_str_radix(address, 16) else { continue };
        let Some((text, _)) = rest.split_once(';') else { continue };
        let text = text.trim();
        let text = if text.starts_with('@') { text.split_once(' ').map_or("", |(_, t)| t.trim()) } else { text };
        if !text.is_empty() {
            out.get_mut(name).expect("entered above").push(Instruction { address, text: text.to_string() });
        }
    }
    out
}

/// What a stretch of instructions does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mix {
    pub instructions: usize,
    pub fma: usize,
    pub float_ops: usize,
    pub shared_loads: usize,
    pub global_loads: usize,
    pub wide_integer_ops: usize,
}

fn is_float_op(op: &str) -> bool {
    let base = op.split('.').next().unwrap_or("");
    matches!(base, "FFMA" | "FADD" | "FMUL" | "DFMA" | "DADD" | "DMUL" | "HFMA2" | "HADD2" | "HMUL2" | "FMNMX" | "DMNMX" | "MUFU")
}

fn is_fma(op: &str) -> bool {
    matches!(op.split('.').next().unwrap_or(""), "FFMA" | "DFMA" | "HFMA2")
}

fn is_wide_integer(op: &str) -> bool {
    let mut parts = op.split('.');
    let base = parts.next().unwrap_or("");
    let integer = base.starts_with('I') || base == "LEA" || base == "SHF";
    integer && parts.any(|p| p == "WIDE" || p == "X")
}

/// The mix of `code`.
pub fn mix(code: &[Instruction]) -> Mix {
    let mut m = Mix { instructions: code.len(), ..Mix::default() };
    for i in code {
        let op = i.opcode();
        m.fma += usize::from(is_fma(op));
        m.float_ops += usize::from(is_float_op(op));
        m.shared_loads += usize::from(op.starts_with("LDS"));
        m.global_loads += usize::from(op.starts_with("LDG"));
        m.wide_integer_ops += usize::from(is_wide_integer(op));
    }
    m
}

/// The hot loop of `code` (see the module's contract), or `None` when it has no loop.
pub fn hot_loop(code: &[Instruction]) -> Option<&[Instruction]> {
    let loops: Vec<(usize, usize)> = code
        .iter()
        .enumerate()
        .filter_map(|(end, branch)| {
            let target = branch.backward_target()?;
            code.iter().position(|i| i.address == target).map(|start| (start, end))
        })
        .collect();
    let mut best: Option<(&[Instruction], usize)> = None;
    for &(start, end) in &loops {
        // Innermost loops only: an outer loop holds its inner loops' instructions too.
        if loops.iter().any(|&(s, e)| (s, e) != (start, end) && s >= start && e <= end) {
            continue;
        }
        let body = &code[start..=end];
        let float = body.iter().filter(|i| is_float_op(i.opcode())).count();
        let better = match best {
            None => true,
            Some((b, f)) => float > f || (float == f && body.len() < b.len()),
        };
        if better {
            best = Some((body, float));
        }
    }
    best.map(|(b, _)| b)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SASS: &str = "\
\t\tFunction : k
        /*0000*/                   LDC R1, c[0x0][0x28] ;     /* 0x00000a00ff017b82 */
        /*0010*/                   IMAD.WIDE R2, R0, 0x4, R2 ;
        /*0020*/                   LDS R4, [R2] ;
        /*0030*/                   FFMA R5, R4, R4, R5 ;
        /*0040*/                   LDG.E R6, desc[UR4][R2.64] ;
        /*0050*/               @P0 BRA 0x20 ;
        /*0060*/                   IADD3.X R7, R7, RZ, RZ, P1, !PT ;
        /*0070*/              @!P1 BRA 0x60 ;
        /*0080*/                   FADD R9, R9, R9 ;
        /*0090*/              @!P2 BRA 0x10 ;
        /*00a0*/                   EXIT ;
        /*00b0*/                   BRA 0xb0 ;
\t\tFunction : other
        /*0000*/                   EXIT ;
        /*0010*/                   BRA 0x10 ;
";

    #[test]
    fn finds_the_loop_that_computes_and_counts_its_mix() {
        let kernels = parse(SASS);
        assert_eq!(kernels.len(), 2);
        let k = &kernels["k"];
        assert_eq!(k.len(), 12);
        assert_eq!(k[5].text, "BRA 0x20", "the predicate is dropped");
        let hot = hot_loop(k).unwrap();
        assert_eq!((hot[0].address, hot.last().unwrap().address), (0x20, 0x50), "the FFMA loop, not the smaller integer one nor the outer loop holding both");
        assert_eq!(mix(hot), Mix { instructions: 4, fma: 1, float_ops: 1, shared_loads: 1, global_loads: 1, wide_integer_ops: 0 });
        assert_eq!(mix(k).wide_integer_ops, 2, "IMAD.WIDE and IADD3.X");
        assert!(hot_loop(&kernels["other"]).is_none(), "the trailing branch to itself is not a loop");
    }
}
