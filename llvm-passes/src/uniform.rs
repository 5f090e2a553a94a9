//! Which values ptxas holds in the *uniform* register file (sm_75 and later: one copy per
//! warp in `UR0`..`UR63`), outside the vector registers that `ptxas -v` counts and that limit
//! occupancy. The register estimate ([`crate::registers`]) does not hold these values.
//!
//! Model, from the SASS of the benchmark's 52 kernels (`bench/RESULTS.md`, "uniform
//! registers"): a value is uniform when the uniform datapath can compute it from uniform
//! operands. The seeds are the kernel arguments (in the constant bank) and the block-uniform
//! special registers `%ctaid`, `%nctaid`, `%ntid` (read with `S2UR`). The uniform datapath
//! has integer addition, multiplication (`UIMAD`, wide too), shifts, logic, comparisons into
//! uniform predicates, selection, extension and truncation, so address arithmetic on uniform
//! values is uniform. It has no division (ptxas expands it with `I2F`/`MUFU.RCP`, vector
//! instructions), no floating point and no loads, so their results are vector values, as is
//! everything computed from `%tid` or from another vector value. A phi is uniform when its
//! incoming values are and the branches deciding which one arrives are: a loop header's are
//! the loop's exit branches, a join's are the branches between its immediate dominator and
//! it. The analysis is the greatest fixpoint (a loop counter and its increment are uniform
//! together).
//!
//! Three kinds of operand ptxas takes in vector registers although they are uniform, the first
//! two seen in every benchmark kernel where they occur:
//! - the 64-bit base of a global address `base + (i64) idx` with a non-uniform 32-bit `idx`,
//!   inside a loop that does not compute the base: ptxas selects `IMAD.WIDE idx, size, base`,
//!   whose addend is a vector register pair, and hoists the base out of the loop (outside
//!   loops it uses `LEA` with the base in uniform registers). A base that is a kernel
//!   argument is loaded into its pair from the parameters on sm_90 and later (`LDC.64 R8,
//!   c[0x0][0x220]`), but before sm_90 it is the addend straight from the constant bank
//!   (`IMAD.WIDE R2, R4, R17, c[0x0][0x180]`), and the element size takes the multiplier's
//!   vector register, one per size for all such bases (SASS of `vecadd`'s rolled leaf:
//!   sm_75/80/86/89 one register, 12 in all; sm_90/100/120 three pairs, 20). Under
//!   [`Bases::ConstantBank`] the first such argument stands for that register, one word
//!   ([`Uniformity`]). Chosen on the parts of `make bench-counters` rules are fitted on (design
//!   to report-8), mean at sm_75 / 80 / 90: the pair at every architecture, as before, 15.1 /
//!   9.4 / 8.7%; the size's register at every architecture 14.7 / 9.2 / 8.7%, with other trees
//!   at sm_90; per architecture, as here, 14.7 / 9.2 / 8.7% with sm_90's trees unchanged
//!   (bench/RESULTS.md, forty-fourth session);
//! - a special register that is the dividend or divisor of an integer quotient: ptxas reads it
//!   with `S2R` into a vector register for the division's expansion, and whatever else it
//!   feeds is computed from that copy (a remainder alone leaves it uniform: two kernels);
//! - a 64-bit value (a widened index, a product of extents, an address) computed before a
//!   loop that holds another loop and read inside it: ptxas hoists a nest's invariants into
//!   vector registers (SASS of `dilated_conv1d`'s leaves at sm_90: the block index widened and
//!   its products with the extents in `R2:R3`, `R6:R7`, ... through both loops, 28 registers
//!   where the model without this said 13). Fitted as a choice among six variants (64-bit or
//!   all widths; any loop, innermost only, or nests only; integers or pointers) on every part
//!   of `make bench-counters` but report-9; this one lowered the mean error at sm_80 and sm_90
//!   on the held-out parts by about one point and left the design part's as it was
//!   (bench/RESULTS.md, forty-third session).
//!
//! Such an operand, and every value computed from it, is a vector value.

use crate::cfg::Cfg;
use inkwell::llvm_sys::core::{
    LLVMGetCalledValue, LLVMGetInstructionOpcode, LLVMGetValueName2, LLVMIsAArgument, LLVMIsACallInst,
    LLVMIsAInstruction,
};
use inkwell::llvm_sys::prelude::LLVMValueRef;
use inkwell::llvm_sys::LLVMOpcode;
use inkwell::values::{AsValueRef, FunctionValue, InstructionOpcode, InstructionValue, Operand, PhiValue};
// Keys are LLVM value pointers and block indices: Fx hashes them in a few instructions,
// where the default SipHash was 1-2% of a whole `gen`.
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

/// A value's identity (its address in LLVM).
pub type Key = usize;

pub fn key(v: LLVMValueRef) -> Key {
    v as usize
}

/// Values that occupy registers: instruction results and arguments (not constants, blocks).
pub fn is_tracked(v: LLVMValueRef) -> bool {
    // SAFETY: `v` is a live LLVM value; the checks only read its kind.
    unsafe { !LLVMIsAInstruction(v).is_null() || !LLVMIsAArgument(v).is_null() }
}

/// The values (arguments and instruction results) ptxas holds in uniform registers.
pub fn uniform_values(function: FunctionValue<'_>) -> HashSet<Key> {
    uniform_values_in(&Cfg::of(function), function)
}

/// [`uniform_values`] on the function's control-flow graph, already built (sm_90's
/// convention for argument bases, [`Bases::Pairs`]).
pub fn uniform_values_in(cfg: &Cfg<'_>, function: FunctionValue<'_>) -> HashSet<Key> {
    uniformity(cfg, function, Bases::Pairs).uniform
}

/// Where `IMAD.WIDE idx, size, base` takes a base that is a kernel argument (see the module
/// doc): the architectures differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bases {
    /// In a vector register pair loaded from the parameters (`LDC.64`): sm_90 and later.
    Pairs,
    /// From the constant bank, with the element size in a vector register: sm_75 to sm_89.
    ConstantBank,
}

impl Bases {
    /// The convention of `arch` (`sm_NN`); [`Bases::Pairs`] for one it cannot read.
    pub fn of(arch: &str) -> Bases {
        match arch.strip_prefix("sm_").and_then(|n| n.parse::<u32>().ok()) {
            Some(n) if n < 90 => Bases::ConstantBank,
            _ => Bases::Pairs,
        }
    }
}

/// What [`uniformity`] finds: the uniform values and, under [`Bases::ConstantBank`], the kernel
/// arguments that stand for the element-size register of `IMAD.WIDE idx, size, c[base]`, one
/// per element size; such an argument is not uniform, and it holds one word, not its two.
pub struct Uniformity {
    pub uniform: HashSet<Key>,
    pub scale_registers: HashSet<Key>,
}

/// The uniform values of the function and its element-size registers ([`Uniformity`]) under
/// an architecture's convention for argument bases.
pub fn uniformity(cfg: &Cfg<'_>, function: FunctionValue<'_>, bases: Bases) -> Uniformity {
    let both = uniformities(cfg, function);
    match (bases, both.constant_bank) {
        (Bases::ConstantBank, Some(bank)) => bank,
        _ => both.pairs,
    }
}

/// [`Uniformity`] under both conventions for argument bases, from one scan of the function.
pub struct Uniformities {
    /// Under [`Bases::Pairs`] (sm_90 on).
    pub pairs: Uniformity,
    /// Under [`Bases::ConstantBank`] (sm_75 to sm_89), when it differs: when some argument
    /// base is read from the constant bank. `None` means the same as `pairs`.
    pub constant_bank: Option<Uniformity>,
}

/// The uniformity under both conventions ([`Uniformities`]). The two differ only in what an
/// argument base that `IMAD.WIDE` reads forces into vector registers, so the function's
/// instructions are scanned once, and the second fixpoint runs only for a function with such
/// bases.
pub fn uniformities(cfg: &Cfg<'_>, function: FunctionValue<'_>) -> Uniformities {
    let instrs: Vec<InstructionValue> = cfg.blocks.iter().flat_map(|b| b.get_instructions()).collect();
    let block_of: Vec<usize> =
        cfg.blocks.iter().enumerate().flat_map(|(n, b)| b.get_instructions().map(move |_| n)).collect();
    let analysis = Analysis { cfg, instrs: &instrs, block_of: &block_of, function };
    let before_forcing = analysis.fixpoint(&HashSet::default());
    let loops = cfg.loops();
    let innermost_loop: Vec<Option<&HashSet<usize>>> = (0..cfg.blocks.len())
        .map(|b| loops.iter().map(|(_, body)| body).filter(|body| body.contains(&b)).min_by_key(|body| body.len()))
        .collect();
    let block_of_value: HashMap<Key, usize> =
        instrs.iter().zip(&block_of).map(|(i, b)| (key(i.as_value_ref()), *b)).collect();
    // Forced under either convention: the operands ptxas takes in vector registers, and the
    // values a loop nest holds.
    let mut forced: HashSet<Key> = HashSet::default();
    // The argument bases `IMAD.WIDE idx, size, c[base]` reads: under `Pairs` each is forced
    // into a pair; under `ConstantBank` the first (in instruction order) of each element size
    // stands for the size's register.
    let mut bases: Vec<(u64, Key)> = Vec::new();
    for (i, &b) in instrs.iter().zip(&block_of) {
        let held_across_loop =
            |v: LLVMValueRef| innermost_loop[b].is_some_and(|body| block_of_value.get(&key(v)).is_none_or(|d| !body.contains(d)));
        for operand in vector_operands(i, &|v| before_forcing.contains(&key(v)), &held_across_loop) {
            match operand {
                VectorOperand::Value(v) => {
                    forced.insert(key(v));
                }
                VectorOperand::ScaleOf { base, size } => bases.push((size, key(base))),
            }
        }
    }
    forced.extend(nest_invariants(&loops, &instrs, &block_of, &block_of_value, &before_forcing));
    let mut pairs_forced = forced.clone();
    pairs_forced.extend(bases.iter().map(|&(_, base)| base));
    let pairs = Uniformity { uniform: analysis.fixpoint(&pairs_forced), scale_registers: HashSet::default() };
    if bases.is_empty() {
        return Uniformities { pairs, constant_bank: None };
    }
    let mut scale_registers: HashSet<Key> = HashSet::default();
    let mut sizes_seen: Vec<u64> = Vec::new();
    for (size, base) in bases {
        if !sizes_seen.contains(&size) {
            sizes_seen.push(size);
            scale_registers.insert(base);
        }
    }
    forced.extend(scale_registers.iter().copied());
    Uniformities { pairs, constant_bank: Some(Uniformity { uniform: analysis.fixpoint(&forced), scale_registers }) }
}

/// The 64-bit uniform values computed outside a loop that holds another loop and read inside
/// it (the third kind of vector operand in the module doc).
fn nest_invariants(
    loops: &[(usize, HashSet<usize>)],
    instrs: &[InstructionValue<'_>],
    block_of: &[usize],
    block_of_value: &HashMap<Key, usize>,
    uniform: &HashSet<Key>,
) -> Vec<Key> {
    let holds_a_loop =
        |body: &HashSet<usize>| loops.iter().any(|(_, inner)| inner.len() < body.len() && inner.is_subset(body));
    let mut found = Vec::new();
    for (_, body) in loops.iter().filter(|(_, body)| holds_a_loop(body)) {
        for (i, b) in instrs.iter().zip(block_of) {
            if !body.contains(b) {
                continue;
            }
            // Instruction results only (`block_of_value`): an argument is read from the constant bank.
            found.extend(value_operands(i).into_iter().filter(|&v| {
                uniform.contains(&key(v))
                    && block_of_value.get(&key(v)).is_some_and(|d| !body.contains(d))
                    && crate::registers::width_of(v).0 >= 2
            }).map(key));
        }
    }
    found
}

/// A uniform operand that ptxas takes in vector registers.
enum VectorOperand {
    /// The value itself, in a vector register (pair).
    Value(LLVMValueRef),
    /// A kernel argument that is a base `IMAD.WIDE` reads from the constant bank: the vector
    /// register holds the element size, `size` bytes, instead.
    ScaleOf { base: LLVMValueRef, size: u64 },
}

/// The uniform operands of `i` that ptxas takes in vector registers (see the module doc).
fn vector_operands(
    i: &InstructionValue<'_>,
    uniform: &dyn Fn(LLVMValueRef) -> bool,
    held_across_loop: &dyn Fn(LLVMValueRef) -> bool,
) -> Vec<VectorOperand> {
    let ops = value_operands(i);
    match i.get_opcode() {
        InstructionOpcode::GetElementPtr if ops.len() == 2 => {
            let (base, index) = (ops[0], ops[1]);
            let global = crate::registers::width_of(i.as_value_ref()).0 >= 2;
            // SAFETY: `index` and `base` are live values; only their kinds and opcode are read.
            let (widened, argument) = unsafe {
                (
                    !LLVMIsAInstruction(index).is_null()
                        && matches!(LLVMGetInstructionOpcode(index), LLVMOpcode::LLVMSExt | LLVMOpcode::LLVMZExt),
                    !LLVMIsAArgument(base).is_null(),
                )
            };
            if !(global && widened && !uniform(index) && uniform(base) && held_across_loop(base)) {
                Vec::new()
            } else if argument {
                element_size(i).map(|size| VectorOperand::ScaleOf { base, size }).into_iter().collect()
            } else {
                vec![VectorOperand::Value(base)]
            }
        }
        InstructionOpcode::SDiv | InstructionOpcode::UDiv => {
            ops.into_iter().filter(|v| reads_special_register(*v)).map(VectorOperand::Value).collect()
        }
        _ => Vec::new(),
    }
}

/// The bytes of the element a one-index `getelementptr` steps over (`None` where the type has
/// no fixed size the module's data layout gives).
pub(crate) fn element_size(gep: &InstructionValue<'_>) -> Option<u64> {
    use inkwell::llvm_sys::core::{LLVMGetGEPSourceElementType, LLVMGetGlobalParent, LLVMGetInstructionParent, LLVMGetBasicBlockParent};
    use inkwell::llvm_sys::target::{LLVMABISizeOfType, LLVMGetModuleDataLayout};
    // SAFETY: `gep` is a live `getelementptr` in a function of a live module; the data layout
    // and the element type are read, never kept.
    unsafe {
        let function = LLVMGetBasicBlockParent(LLVMGetInstructionParent(gep.as_value_ref()));
        let module = LLVMGetGlobalParent(function);
        let layout = LLVMGetModuleDataLayout(module);
        let element = LLVMGetGEPSourceElementType(gep.as_value_ref());
        (!layout.is_null() && !element.is_null()).then(|| LLVMABISizeOfType(layout, element))
    }
}

struct Analysis<'a, 'ctx> {
    cfg: &'a Cfg<'ctx>,
    instrs: &'a [InstructionValue<'ctx>],
    block_of: &'a [usize],
    function: FunctionValue<'ctx>,
}

impl Analysis<'_, '_> {
    /// The greatest set of values, none of them in `forced`, that are uniform given one
    /// another: start from every candidate and remove what has a vector operand or a vector
    /// deciding branch until nothing changes.
    fn fixpoint(&self, forced: &HashSet<Key>) -> HashSet<Key> {
        let candidate = |i: &InstructionValue| match i.get_opcode() {
            InstructionOpcode::Call => reads_uniform_special_register(i),
            InstructionOpcode::Phi => true,
            op => uniform_op(op),
        };
        let mut uniform: HashSet<Key> = self.function.get_param_iter().map(|p| key(p.as_value_ref())).collect();
        uniform.extend(self.instrs.iter().filter(|i| candidate(i)).map(|i| key(i.as_value_ref())));
        uniform.retain(|k| !forced.contains(k));
        let operand_uniform = |v: LLVMValueRef, uniform: &HashSet<Key>| !is_tracked(v) || uniform.contains(&key(v));
        let mut deciding: HashMap<usize, Vec<LLVMValueRef>> = HashMap::default();
        let mut changed = true;
        while changed {
            changed = false;
            for (i, &block) in self.instrs.iter().zip(self.block_of) {
                let r = key(i.as_value_ref());
                if !uniform.contains(&r) {
                    continue;
                }
                let stays = match i.get_opcode() {
                    InstructionOpcode::Call => true,
                    InstructionOpcode::Phi => {
                        let conditions = deciding.entry(block).or_insert_with(|| deciding_conditions(self.cfg, block));
                        PhiValue::try_from(*i).is_ok_and(|phi| {
                            (0..phi.count_incoming()).all(|n| {
                                phi.get_incoming(n).is_some_and(|(v, _)| operand_uniform(v.as_value_ref(), &uniform))
                            })
                        }) && conditions.iter().all(|c| operand_uniform(*c, &uniform))
                    }
                    _ => value_operands(i).into_iter().all(|v| operand_uniform(v, &uniform)),
                };
                if !stays {
                    uniform.remove(&r);
                    changed = true;
                }
            }
        }
        uniform
    }
}

/// Operations the uniform datapath performs.
fn uniform_op(op: InstructionOpcode) -> bool {
    use InstructionOpcode::*;
    matches!(
        op,
        Add | Sub
            | Mul
            | Shl
            | LShr
            | AShr
            | And
            | Or
            | Xor
            | SExt
            | ZExt
            | Trunc
            | GetElementPtr
            | Freeze
            | ICmp
            | Select
            | PtrToInt
            | IntToPtr
            | AddrSpaceCast
            | BitCast
    )
}

/// The values an instruction reads (constants included; blocks and metadata not).
pub fn value_operands(i: &InstructionValue<'_>) -> Vec<LLVMValueRef> {
    (0..i.get_num_operands())
        .filter_map(|n| match i.get_operand(n) {
            Some(Operand::Value(v)) => Some(v.as_value_ref()),
            _ => None,
        })
        .collect()
}

/// The name of the function a call instruction calls directly.
fn callee_name(call: LLVMValueRef) -> Option<String> {
    // SAFETY: `call` is a live call instruction; the name is copied out at once.
    unsafe {
        let callee = LLVMGetCalledValue(call);
        if callee.is_null() {
            return None;
        }
        let mut len = 0usize;
        let p = LLVMGetValueName2(callee, &mut len);
        (!p.is_null()).then(|| String::from_utf8_lossy(std::slice::from_raw_parts(p as *const u8, len)).into_owned())
    }
}

const SPECIAL_REGISTER: &str = "llvm.nvvm.read.ptx.sreg.";

fn reads_special_register(v: LLVMValueRef) -> bool {
    // SAFETY: `v` is a live value; only its kind is read before asking for the callee.
    let call = unsafe { LLVMIsACallInst(v) };
    !call.is_null() && callee_name(call).is_some_and(|n| n.starts_with(SPECIAL_REGISTER))
}

/// A read of a block-uniform special register: the block index, the grid and block extents.
fn reads_uniform_special_register(i: &InstructionValue<'_>) -> bool {
    callee_name(i.as_value_ref()).is_some_and(|n| {
        n.strip_prefix(SPECIAL_REGISTER)
            .is_some_and(|r| ["ctaid.", "nctaid.", "ntid."].iter().any(|u| r.starts_with(u)))
    })
}

/// The conditions of the conditional branches that decide which incoming value a phi in
/// block `b` receives.
fn deciding_conditions(cfg: &Cfg<'_>, b: usize) -> Vec<LLVMValueRef> {
    let is_header = cfg.back_edges.iter().any(|(_, h)| *h == b);
    let deciders: Vec<usize> = if is_header {
        let body = cfg.loops().into_iter().find(|(h, _)| *h == b).map(|(_, body)| body).unwrap_or_default();
        body.iter().copied().filter(|x| cfg.succs[*x].iter().any(|s| !body.contains(s))).collect()
    } else {
        let Some(top) = cfg.idom(b) else { return Vec::new() };
        cfg.forward_ancestors(b).into_iter().filter(|x| cfg.dominators[*x].contains(&top)).collect()
    };
    deciders
        .into_iter()
        .filter_map(|x| cfg.blocks[x].get_terminator())
        .filter(|t| t.get_opcode() == InstructionOpcode::Br && t.get_num_operands() == 3)
        .filter_map(|t| match t.get_operand(0) {
            Some(Operand::Value(v)) => Some(v.as_value_ref()),
            _ => None,
        })
        .collect()
}

/// Values ptxas can compute again where they are used instead of holding them in a register
/// (rematerialisation): special-register reads (`%tid` included: `S2R` at the use) and
/// integer and address arithmetic ([`uniform_op`], comparisons and selects excepted, division
/// by a constant included) whose
/// operands are constants, uniform values or such values themselves. A kernel's addresses of
/// per-thread elements (`c + (p*n + q)*4`) are of this kind.
pub fn recomputable_values(function: FunctionValue<'_>, uniform: &HashSet<Key>) -> HashSet<Key> {
    let instrs: Vec<InstructionValue> = function.get_basic_block_iter().flat_map(|b| b.get_instructions()).collect();
    let mut out: HashSet<Key> = HashSet::default();
    loop {
        let before = out.len();
        for i in &instrs {
            let r = i.as_value_ref();
            if out.contains(&key(r)) {
                continue;
            }
            let op = i.get_opcode();
            // Division by a constant is a multiply and shifts: cheap to compute again.
            let by_constant = matches!(op, InstructionOpcode::SDiv | InstructionOpcode::UDiv | InstructionOpcode::SRem | InstructionOpcode::URem)
                && value_operands(i).get(1).is_some_and(|d| !is_tracked(*d));
            let arithmetic = by_constant || (uniform_op(op) && !matches!(op, InstructionOpcode::ICmp | InstructionOpcode::Select));
            let ok = reads_special_register(r)
                || (arithmetic && value_operands(i).into_iter().all(|v| !is_tracked(v) || uniform.contains(&key(v)) || out.contains(&key(v))));
            if ok {
                out.insert(key(r));
            }
        }
        if out.len() == before {
            return out;
        }
    }
}
