//! Addresses that take no register of their own: a constant offset from another address that
//! only memory instructions read. NVPTX's addressing mode is a register plus an immediate
//! (`ld.global.f32 %f1, [%rd4+12]`), and ptxas keeps it (`LDG.E R5, desc[UR4][R2.64+0xc]`):
//! the nine loads of a 3x3 matrix from `A + 9*m` read one register pair, where the IR had nine
//! `getelementptr`s, each a pair the register model held from its definition to its load.
//! LLVM's NVPTX back end splits such offsets off before instruction selection
//! (`separate-const-offset-from-gep`, in [`crate::pipeline::PIPELINE`]); this module says which
//! `getelementptr`s then fold, so that the register model ([`crate::registers`]) reads their
//! base in their place.
//!
//! Contract: [`Folded::of`] reads the function and changes nothing. A `getelementptr` folds when
//! its one index is a constant whose byte offset fits the immediate (kept well inside PTX's
//! 32-bit and SASS's 24-bit signed fields: [`IMMEDIATE_LIMIT`]) and every user reads it as the
//! address of a load, store or atomic, or is itself a folding `getelementptr`. Folding is
//! transitive: [`Folded::through`] walks to the first base that does not fold.

use crate::uniform::{key, Key};
use inkwell::llvm_sys::core::{
    LLVMConstIntGetSExtValue, LLVMGetFirstUse, LLVMGetInstructionOpcode, LLVMGetNextUse, LLVMGetNumOperands, LLVMGetOperand,
    LLVMGetUser, LLVMIsAConstantInt, LLVMIsAInstruction,
};
use inkwell::llvm_sys::prelude::LLVMValueRef;
use inkwell::llvm_sys::LLVMOpcode;
use inkwell::values::{AsValueRef, FunctionValue, InstructionOpcode, InstructionValue, Operand};
use rustc_hash::FxHashMap as HashMap;

/// The largest byte offset, either sign, counted as an immediate: a folded chain adds its
/// offsets, so each link stays far below SASS's 24-bit signed field (2^23).
pub const IMMEDIATE_LIMIT: i64 = 1 << 16;

/// The folding `getelementptr`s of one function, each with its base.
#[derive(Default)]
pub struct Folded {
    base: HashMap<Key, LLVMValueRef>,
}

impl Folded {
    /// The folding addresses of `function` (see the module doc).
    pub fn of(function: FunctionValue<'_>) -> Folded {
        let mut candidates: HashMap<Key, LLVMValueRef> = HashMap::default();
        let mut values: Vec<LLVMValueRef> = Vec::new();
        for bb in function.get_basic_block_iter() {
            for i in bb.get_instructions() {
                if let Some(base) = constant_offset_base(&i) {
                    candidates.insert(key(i.as_value_ref()), base);
                    values.push(i.as_value_ref());
                }
            }
        }
        // Drop, until none is left to drop, each candidate read by anything but an address
        // operand or another candidate.
        loop {
            let dropped: Vec<LLVMValueRef> = values.iter().copied().filter(|&v| !only_addressed(v, &candidates)).collect();
            if dropped.is_empty() {
                break;
            }
            for v in dropped {
                candidates.remove(&key(v));
            }
            values.retain(|&v| candidates.contains_key(&key(v)));
        }
        Folded { base: candidates }
    }

    /// Whether `i` is a folding address: it holds no register.
    pub fn is_folded(&self, i: &InstructionValue<'_>) -> bool {
        self.base.contains_key(&key(i.as_value_ref()))
    }

    /// The value `v` stands for: itself, or the first base of its folded chain.
    pub fn through(&self, mut v: LLVMValueRef) -> LLVMValueRef {
        while let Some(&b) = self.base.get(&key(v)) {
            v = b;
        }
        v
    }

    /// `i`'s value operands, a folded address read as its base.
    pub fn operands(&self, i: &InstructionValue<'_>) -> Vec<LLVMValueRef> {
        (0..i.get_num_operands())
            .filter_map(|n| match i.get_operand(n) {
                Some(Operand::Value(v)) => Some(self.through(v.as_value_ref())),
                _ => None,
            })
            .collect()
    }

    /// `i`'s operand `n` as a value, a folded address read as its base.
    pub fn operand(&self, i: &InstructionValue<'_>, n: u32) -> Option<LLVMValueRef> {
        match i.get_operand(n) {
            Some(Operand::Value(v)) => Some(self.through(v.as_value_ref())),
            _ => None,
        }
    }
}

/// The base of `i` when `i` is a `getelementptr` with one constant index whose byte offset is
/// within [`IMMEDIATE_LIMIT`].
fn constant_offset_base(i: &InstructionValue<'_>) -> Option<LLVMValueRef> {
    if i.get_opcode() != InstructionOpcode::GetElementPtr || i.get_num_operands() != 2 {
        return None;
    }
    let size = crate::uniform::element_size(i)? as i64;
    // SAFETY: `i` is a live instruction; its operands are read, never kept past the function.
    unsafe {
        let index = LLVMGetOperand(i.as_value_ref(), 1);
        if LLVMIsAConstantInt(index).is_null() {
            return None;
        }
        let offset = LLVMConstIntGetSExtValue(index).checked_mul(size)?;
        (offset.abs() < IMMEDIATE_LIMIT).then(|| LLVMGetOperand(i.as_value_ref(), 0))
    }
}

/// Whether every user of `v` reads it as the address of a memory instruction (and in no other
/// operand), or is a candidate.
fn only_addressed(v: LLVMValueRef, candidates: &HashMap<Key, LLVMValueRef>) -> bool {
    // SAFETY: `v` is a live instruction of the function; its uses and their users are read only.
    unsafe {
        let mut u = LLVMGetFirstUse(v);
        let mut used = false;
        while !u.is_null() {
            used = true;
            let user = LLVMGetUser(u);
            if LLVMIsAInstruction(user).is_null() {
                return false;
            }
            let address = match LLVMGetInstructionOpcode(user) {
                LLVMOpcode::LLVMLoad | LLVMOpcode::LLVMAtomicRMW | LLVMOpcode::LLVMAtomicCmpXchg => Some(0),
                LLVMOpcode::LLVMStore => Some(1),
                LLVMOpcode::LLVMGetElementPtr if candidates.contains_key(&key(user)) => None,
                _ => return false,
            };
            if let Some(a) = address {
                let n = LLVMGetNumOperands(user);
                if (0..n).any(|k| k != a && LLVMGetOperand(user, k as u32) == v) {
                    return false;
                }
            } else if LLVMGetOperand(user, 1) == v {
                return false;
            }
            u = LLVMGetNextUse(u);
        }
        used
    }
}
