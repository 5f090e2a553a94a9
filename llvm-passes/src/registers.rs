//! Registers per thread, estimated from optimised IR (the paper's "estimate from IR").
//!
//! Model: registers = max over program points of the 32-bit words held by simultaneously live
//! SSA values + [`FIXED_COST`]. Liveness is the classic backward dataflow over basic blocks
//! (phi operands live at the end of their incoming block, phi results defined at the top of
//! theirs). Widths: `i1` is a predicate, counted apart (predicate registers are a separate
//! file); integers up to 32 bits, `float` and shared-space (addrspace 3) pointers take one
//! word; `i64`, `double` and other pointers take two. Constants take none (immediates).
//! Refinements model what ptxas does with the PTX (each measured, see `bench/RESULTS.md`,
//! "register model"):
//! - *Uniform registers*: values ptxas holds in the uniform register file
//!   ([`crate::uniform`]: kernel arguments, block indices and extents, integer and address
//!   arithmetic on them, loop counters of uniform loops) are not held in vector registers;
//!   they count one word only at each instruction that reads them.
//! - *Scheduling*: within a block, pure arithmetic is placed next to its first use
//!   ([`schedule`]), as ptxas's pressure-aware scheduler does, not where LLVM left it.
//! - *Rematerialisation*: where the count exceeds [`REMATERIALISE_ABOVE`], a value the
//!   compilers can compute again where it is read (a special register, or integer and address
//!   arithmetic on uniform values and such values: [`crate::uniform::recomputable_values`])
//!   that is live through a loop not reading it counts only at the instructions that read it:
//!   a register-blocked kernel's 64 output addresses, computed before its loop and used after,
//!   are not held (nvcc: 107 registers where holding them would take about 210).
//! - *Immediate offsets*: an address at a constant offset from another that only loads, stores
//!   and atomics read is the machine's register-plus-immediate operand and holds no register:
//!   its readers read its base ([`crate::addressing`]; the pipeline's back-end passes split such
//!   offsets off, as nvcc's do). Over the corpus's three groups of parts, on the same saved IR
//!   (`make bench-replay`), mean error at sm_75 / 80 / 90 went from 14.3 / 9.1 / 8.8% to
//!   14.6 / 9.1 / 8.7% on the parts rules are chosen on, 17.3 / 11.0 / 10.5% to
//!   17.0 / 10.7 / 10.2% and 16.2 / 9.8 / 10.4% to 16.1 / 8.7 / 9.5% on the others
//!   (bench/RESULTS.md, fifty-fifth session).
//! - *Expansions*: instructions ptxas expands into sequences (32-bit integer division and
//!   remainder, `sqrt.rn.f32`) hold temporaries at their point ([`expansion_temporaries`],
//!   measured with values live across them). A division or remainder by a constant is not
//!   one: the compilers multiply by a magic number and shift, so at 32 bits it holds what a
//!   multiplication does, and at 64 bits [`CONSTANT_DIVISION_64_TEMPORARIES`] more unless
//!   the divisor is a power of two (nvcc on micro-kernels; before, such a division counted
//!   as the reciprocal expansion or, at 64 bits, as a subroutine call: 15-16 registers).
//!   Those whose slow path calls a subroutine of its own (precise `div.rn.f32` and
//!   `div.rn.f64`, `rcp.rn` for a division of 1 or -1, 64-bit division and remainder by a
//!   value, `sqrt.rn.f64`) hold that subroutine's registers less their
//!   operands' words: ptxas allocates the subroutine's registers apart from the values live
//!   across the call (SASS of `gramschmidt`'s division kernel: the subroutine's 20 registers
//!   above the caller's 9).
//! - *Early loads beyond the budget*: LLVM often loads a read-only array's values long before
//!   they are used (all of a stencil's neighbours, then the arithmetic). ptxas keeps that order
//!   while it costs no occupancy, up to the occupancy-free budget (below), and beyond it issues
//!   those loads where they are used: a kernel that would hold more in LLVM's order counts at
//!   the budget, or at what it holds with those loads at their first use, whichever is more
//!   ([`within_budget`]; a tiled matrix-vector leaf: 70 in LLVM's order, ptxas 32 at sm_80 and
//!   sm_90, 63 at sm_75).
//! - *Uniform addresses at sm_75*: a global load, store or atomic whose address is uniform
//!   counts that address's two words at the instruction (it is copied into a vector register
//!   pair there) except at sm_75, whose memory instructions read it from uniform registers
//!   ([`uniform_global_addresses`]); there the uniform instructions computing such addresses
//!   (`%bins + 4`) also read their uniform operands from uniform registers, where elsewhere
//!   those operands count where read (ptxas on a histogram cleared by one thread: 4 registers
//!   at sm_75, 6 at sm_90; design part sm_75 14.3 -> 14.0%, bench/RESULTS.md).
//! - *Store addresses copied early (sm_80 on)*: the uniform address of a store or atomic on
//!   global memory that follows a global load in its block is copied into its vector register
//!   pair while that load is in flight, and held from the block's first global load to the
//!   store ([`uniform_store_address`]; SASS of `durbin`'s first kernel at sm_80 and sm_90:
//!   three `STG` addresses copied right after the `LDG`: 16 registers, where counting one
//!   address at a time gave 9; bench/RESULTS.md, thirty-first session). sm_75 reads them
//!   from uniform registers, and its count is unchanged.
//! [`FIXED_COST`] accounts for what every kernel holds beyond its own values; it is a single
//! constant for all kernels, measured against `ptxas`, never fitted per kernel.
//!
//! Unrolling by `ptxas`: when the optimised IR still has an innermost loop whose body is
//! straight-line code or guarded code only (every conditional branch inside is loop control or
//! a *guard*, `if (c) { ... }` without `else`, however deep such guards nest: [`guarded_only`];
//! ptxas turns them into predication), `ptxas` unrolls it by [`UNROLL_COPIES`] (seen in the
//! SASS of `vecadd` and the staged transposition) and overlaps the copies: the words one
//! iteration defines are live once per copy, next to the loop's invariants; what an
//! instruction holds only while it runs (the uniform operands it reads, an expansion's
//! temporaries) is held once, not per copy. ptxas spends registers on this only up to what costs no occupancy,
//! the register file per multiprocessor over its resident threads: 65536 / 2048 = 32 on sm_80
//! and sm_90 ([`OCCUPANCY_FREE_REGISTERS_SM90`]). So for such a loop the estimate is at least
//! `min(32, invariants + 4 x one iteration's words + FIXED_COST)`. The budget depends on the
//! architecture's resident threads: sm_75 keeps at most 1024 per multiprocessor, so there it is
//! 64 ([`RegisterEstimate::for_architecture`]; measured: ptxas gives 54–64 registers at sm_75
//! to most kernels estimated at 32 for sm_90). A body that calls one of ptxas's slow-path
//! subroutines (precise division, 64-bit division, double square root) is unrolled too, but
//! each copy branches to its call: fewer copies overlap ([`CALLING_COPIES`]).
//! A loop whose latch carries
//! `llvm.loop.unroll.disable` is exempt: the NVPTX back end emits `.pragma "nounroll"` for
//! it, and ptxas honours it.
//!
//! Early loads in a loop kept rolled: ptxas does not unroll such a loop, but it still issues
//! the loads of its body early to cover their latency, ahead of the stores and arithmetic
//! between them, where it may (loads of kernel arguments the function never writes: the
//! `const T *__restrict__` arrays), again only up to the occupancy-free budget. A strategy's
//! unrolled copies (four copies, each a load then a store) are such a body: ptxas holds the
//! four loads' values at once (SASS of `vecadd`'s unrolled leaf: 32 registers at sm_90, where
//! one copy at a time would need 17). The body's blocks are taken in order as one sequence
//! ([`Region::hoisted_peak`]); the same budget bounds it ([`RegisterEstimate::for_architecture`]).
//! A phi reads one incoming value per path, so uniform values merged by a phi count as the
//! widest of them at the phi, not their sum.

use crate::addressing::Folded;
use crate::cfg::{innermost_loops, Cfg};
use crate::uniform::{is_tracked, key, recomputable_values, uniformities, Bases, Key, Uniformity};
use inkwell::llvm_sys::core::{LLVMGetIntTypeWidth, LLVMGetPointerAddressSpace, LLVMGetTypeKind, LLVMTypeOf};
use inkwell::llvm_sys::prelude::LLVMValueRef;
use inkwell::llvm_sys::LLVMTypeKind;
use inkwell::values::{AsValueRef, FunctionValue, InstructionOpcode, InstructionValue, Operand};
// Keys are LLVM value pointers and block indices: Fx hashes them in a few instructions,
// where the default SipHash was 1-2% of a whole `gen`.
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

/// Registers a kernel holds beyond its live values (the stack pointer, the special-register
/// copies ptxas keeps): one constant for every kernel, the value minimising the mean error of
/// the whole model over the benchmark's kernels (see `bench/RESULTS.md`).
pub const FIXED_COST: u32 = 5;

/// Registers per thread that cost no occupancy on sm_80/sm_90: 65536 / 2048.
pub const OCCUPANCY_FREE_REGISTERS_SM90: u32 = 65536 / 2048;

/// The most threads resident on one multiprocessor of an architecture (NVIDIA's table of
/// compute capabilities): 1024 on sm_75, 1536 on sm_86/sm_89, 2048 on sm_80, sm_90 and sm_100.
pub fn resident_threads(arch: &str) -> Option<u32> {
    match arch {
        "sm_75" => Some(1024),
        "sm_86" | "sm_89" => Some(1536),
        "sm_80" | "sm_90" | "sm_100" => Some(2048),
        _ => None,
    }
}

/// Registers per thread that cost no occupancy on `arch`: its 64K register file over its
/// resident threads (`None` for an architecture not in [`resident_threads`]).
pub fn occupancy_free_registers(arch: &str) -> Option<u32> {
    resident_threads(arch).map(|t| 65536 / t)
}

/// The factor by which ptxas unrolls an innermost loop it unrolls: the SASS of the benchmark's
/// unrolled kernels holds four copies of each such loop's body.
pub const UNROLL_COPIES: u32 = 4;

/// The copies that overlap in a loop ptxas unrolls whose body calls one of its slow-path
/// subroutines: each copy branches to its call, so fewer of them run at once. Chosen on the
/// design part and report to report-12 (1,714 kernels) among 1 to 4: 1 and 2 have the lowest
/// mean there (sm_75 15.4, 15.5% against 16.3% for 4) but put the paper's jacobi1d kernel
/// past the design part's 25% bound at sm_90 (19 and 21 registers against nvcc's 29); 3
/// (15.8%) is the least overlap that keeps it. Read on report-13, which no rule saw: sm_75
/// 17.8 -> 16.1% (bench/RESULTS.md, fiftieth session).
pub const CALLING_COPIES: u32 = 3;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegisterEstimate {
    /// The estimate: `max_live_words + FIXED_COST` (at most the occupancy-free budget where
    /// `least_live_words` is less), raised towards that budget by the copies of a loop ptxas
    /// unrolls when `unrolled_loop` holds.
    pub registers: u32,
    pub max_live_words: u32,
    /// The most words live when the loads of read-only arrays are issued where their values are
    /// first used (the order that needs fewest registers); at most `max_live_words`.
    pub least_live_words: u32,
    /// `max_live_words` where a global access whose address is uniform reads that address from
    /// uniform registers, as sm_75's loads and stores do ([`uniform_global_addresses`]).
    pub max_live_words_uniform_addresses: u32,
    pub max_live_predicates: u32,
    /// An innermost loop ptxas unrolls remains after the pipeline.
    pub unrolled_loop: bool,
    /// An innermost loop that a `#pragma unroll 1` (`llvm.loop.unroll.disable`) keeps rolled
    /// remains after the pipeline.
    pub rolled_loop: bool,
    /// What ptxas's latency hiding would hold (plus [`FIXED_COST`]) before the occupancy-free
    /// budget bounds it: the overlapped copies of a loop it unrolls, or the loads it issues
    /// early in a loop it keeps rolled ([`Region::hoisted_peak`]); 0 without such a loop.
    pub unrolled_demand: u32,
    /// The kernel's `maxnreg` cap when it has one (register pressure, level 3): `registers`
    /// is then at most the cap, and `uncapped` is what the model estimates without it.
    pub cap: Option<u32>,
    pub uncapped: u32,
    /// The same model where the architecture reads argument bases from the constant bank
    /// ([`Bases::ConstantBank`]: sm_75 to sm_89), when the kernel has such bases; the fields
    /// above are sm_90's ([`Bases::Pairs`]).
    pub constant_bank_bases: Option<Box<RegisterEstimate>>,
}

impl RegisterEstimate {
    /// The estimate for `arch`: the same liveness (with argument bases as `arch` takes them,
    /// [`Bases::of`]), with the unrolled loop's copies bounded by that architecture's
    /// occupancy-free budget ([`occupancy_free_registers`]; sm_90's for an architecture it does
    /// not know), and the cap. For sm_90 it is `registers`.
    pub fn for_architecture(&self, arch: &str) -> u32 {
        if let (Bases::ConstantBank, Some(bank)) = (Bases::of(arch), &self.constant_bank_bases) {
            return bank.for_architecture(arch);
        }
        let budget = occupancy_free_registers(arch).unwrap_or(OCCUPANCY_FREE_REGISTERS_SM90);
        let words = if uniform_global_addresses(arch) { self.max_live_words_uniform_addresses } else { self.max_live_words };
        let mut r = within_budget(self.least_live_words.min(words), words, budget);
        if self.unrolled_demand > 0 {
            r = r.max(self.unrolled_demand.min(budget));
        }
        self.cap.map_or(r, |c| r.min(c))
    }

    /// The estimate under a `maxnreg` cap: ptxas allocates no more, spilling the rest.
    pub fn capped(self, cap: Option<u32>) -> RegisterEstimate {
        match cap {
            Some(n) => RegisterEstimate {
                registers: self.uncapped.min(n),
                cap: Some(n),
                constant_bank_bases: self.constant_bank_bases.map(|bank| Box::new(bank.capped(cap))),
                ..self
            },
            None => self,
        }
    }
}

/// (32-bit words, predicates) a value of this LLVM type occupies.
pub fn width_of(v: LLVMValueRef) -> (u32, u32) {
    unsafe {
        let t = LLVMTypeOf(v);
        match LLVMGetTypeKind(t) {
            LLVMTypeKind::LLVMIntegerTypeKind => match LLVMGetIntTypeWidth(t) {
                1 => (0, 1),
                w if w <= 32 => (1, 0),
                w => (w.div_ceil(32), 0),
            },
            LLVMTypeKind::LLVMHalfTypeKind
            | LLVMTypeKind::LLVMBFloatTypeKind
            | LLVMTypeKind::LLVMFloatTypeKind => (1, 0),
            LLVMTypeKind::LLVMDoubleTypeKind => (2, 0),
            LLVMTypeKind::LLVMPointerTypeKind => {
                if LLVMGetPointerAddressSpace(t) == 3 {
                    (1, 0)
                } else {
                    (2, 0)
                }
            }
            _ => (0, 0),
        }
    }
}

struct BlockInfo<'ctx> {
    instrs: Vec<InstructionValue<'ctx>>,
    /// Used before any definition in the block (phi operands excluded).
    upward: HashSet<Key>,
    defs: HashSet<Key>,
}

/// The model's estimate for `function` (see the module doc): sm_90's, with the variant of the
/// architectures that read argument bases from the constant bank where it differs.
pub fn estimate(function: FunctionValue<'_>) -> RegisterEstimate {
    let cfg = Cfg::of(function);
    let both = uniformities(&cfg, function);
    // Constant offsets from an address that only memory instructions read take no register:
    // such a `getelementptr` is left out, and its readers read its base (both conventions).
    let folded = Folded::of(function);
    let pairs = estimate_under(function, &cfg, both.pairs, &folded);
    match both.constant_bank {
        Some(bank) => RegisterEstimate { constant_bank_bases: Some(Box::new(estimate_under(function, &cfg, bank, &folded))), ..pairs },
        None => pairs,
    }
}

/// The estimate given which values are uniform and which arguments stand for element-size
/// registers.
fn estimate_under(function: FunctionValue<'_>, cfg: &Cfg<'_>, uniformity: Uniformity, folded: &Folded) -> RegisterEstimate {
    let blocks = &cfg.blocks;
    // Values in uniform registers: not held, read where used.
    let Uniformity { uniform, scale_registers } = uniformity;
    let is_tracked = |v: LLVMValueRef| is_tracked(v) && !uniform.contains(&key(v));
    let mut width: HashMap<Key, (u32, u32)> = HashMap::default();
    let mut info: Vec<BlockInfo> = Vec::new();
    // phi_in[b] = values flowing from block b into phis of its successors.
    let mut phi_in: Vec<HashSet<Key>> = vec![HashSet::default(); blocks.len()];
    for p in function.get_param_iter() {
        let r = p.as_value_ref();
        if is_tracked(r) {
            // An argument standing for an element-size register holds that one word.
            width.insert(key(r), if scale_registers.contains(&key(r)) { (1, 0) } else { width_of(r) });
        }
    }
    let uniform_operand_words = |i: &InstructionValue| -> u32 { words_read(i, folded, &|k| uniform.contains(k)) };
    for bb in blocks {
        let instrs: Vec<InstructionValue> = bb.get_instructions().filter(|i| !folded.is_folded(i)).collect();
        let mut upward = HashSet::default();
        let mut defs = HashSet::default();
        for i in &instrs {
            let r = i.as_value_ref();
            let is_phi = i.get_opcode() == InstructionOpcode::Phi;
            for vr in folded.operands(i) {
                if !is_tracked(vr) {
                    continue;
                }
                width.entry(key(vr)).or_insert_with(|| width_of(vr));
                if is_phi {
                    continue; // attributed to the incoming block below
                }
                if !defs.contains(&key(vr)) {
                    upward.insert(key(vr));
                }
            }
            if is_phi {
                if let Ok(phi) = inkwell::values::PhiValue::try_from(*i) {
                    for n in 0..phi.count_incoming() {
                        if let Some((v, from)) = phi.get_incoming(n) {
                            let vr = v.as_value_ref();
                            if is_tracked(vr) {
                                width.entry(key(vr)).or_insert_with(|| width_of(vr));
                                if let Some(fb) = cfg.block_index(from) {
                                    phi_in[fb].insert(key(vr));
                                }
                            }
                        }
                    }
                }
            }
            let w = width_of(r);
            if w != (0, 0) && !uniform.contains(&key(r)) {
                width.insert(key(r), w);
                defs.insert(key(r));
            }
        }
        info.push(BlockInfo { instrs, upward, defs });
    }
    // Backward dataflow to a fixed point; `kill[b]`: values not live into block `b`.
    let n = info.len();
    let dataflow = |kill: &[HashSet<Key>]| {
        let mut live_in: Vec<HashSet<Key>> = vec![HashSet::default(); n];
        let mut live_out: Vec<HashSet<Key>> = vec![HashSet::default(); n];
        let mut changed = true;
        while changed {
            changed = false;
            for b in (0..n).rev() {
                let mut out: HashSet<Key> = phi_in[b].clone();
                for &s in &cfg.succs[b] {
                    out.extend(live_in[s].iter().copied());
                }
                let mut inn: HashSet<Key> = info[b].upward.clone();
                inn.extend(out.iter().filter(|k| !info[b].defs.contains(k)).copied());
                inn.retain(|k| !kill[b].contains(k));
                if inn != live_in[b] || out != live_out[b] {
                    live_in[b] = inn;
                    live_out[b] = out;
                    changed = true;
                }
            }
        }
        (live_in, live_out)
    };
    let (live_in, held_live_out) = dataflow(&vec![HashSet::default(); n]);
    // Rematerialisation: a value ptxas can compute again where it is read
    // (`recomputable_values`) that is live through a loop without being read in it need not
    // be held: computed again at each instruction that reads it, where it counts (as a uniform
    // operand does), dead from the loop's entry (a kill at the header). The compilers do it to
    // relieve pressure, not otherwise: it is applied where the count without it exceeds
    // [`REMATERIALISE_ABOVE`].
    let recomputable = recomputable_values(function, &uniform);
    let mut kill: Vec<HashSet<Key>> = vec![HashSet::default(); n];
    let mut through_loops: HashSet<Key> = HashSet::default();
    for (header, body) in cfg.loops() {
        let read_inside: HashSet<Key> = body.iter().flat_map(|&b| info[b].instrs.iter().flat_map(|i| folded.operands(i))).map(key).collect();
        let through: Vec<Key> = live_in[header].iter().filter(|k| recomputable.contains(k) && !read_inside.contains(k)).copied().collect();
        kill[header].extend(through.iter().copied());
        through_loops.extend(through);
    }
    let succs = &cfg.succs;
    // Innermost loops of straight-line or guarded code: ptxas unrolls them, or, where a latch
    // says `#pragma unroll 1`, keeps them rolled (their loads are issued early, below). Each
    // loop's guards are decided once.
    let (kept_rolled, unrolled): (Vec<HashSet<usize>>, Vec<HashSet<usize>>) = innermost_loops(succs)
        .into_iter()
        .filter(|body| guarded_only(body, succs))
        .partition(|body| body.iter().any(|&b| blocks[b].get_terminator().is_some_and(unroll_disabled)));
    // The values each loop ptxas unrolls defines: one iteration's words, copied per unrolled
    // copy; the rest of what is live there is invariant across the copies.
    let defined_in: Vec<HashSet<Key>> =
        unrolled.iter().map(|body| body.iter().flat_map(|&b| info[b].defs.iter().copied()).collect()).collect();
    // A body that calls one of ptxas's slow-path subroutines is unrolled as well, but each copy
    // branches to its call (coulomb_grid's leaf at sm_75 and sm_80: four copies of `MUFU.RSQ`,
    // `@!P0 BRA`, `CALL.REL.NOINC`), so fewer copies overlap: [`CALLING_COPIES`].
    let copies_of: Vec<u32> = unrolled
        .iter()
        .map(|body| if body.iter().flat_map(|&b| info[b].instrs.iter()).any(calls_subroutine) { CALLING_COPIES } else { UNROLL_COPIES })
        .collect();
    // The peak words (and predicates) and the unrolled loops' peak, given the values
    // rematerialised and the liveness that goes with it.
    let peak = |rematerialised: &HashSet<Key>, live_out: &[HashSet<Key>], sunk: &dyn Fn(&InstructionValue) -> bool| -> Peak {
        let rematerialised_words = |i: &InstructionValue| -> u32 { words_read(i, folded, &|k| rematerialised.contains(k)) };
        let sum_in = |set: &HashSet<Key>| {
            set.iter().filter(|k| !rematerialised.contains(k)).fold((0u32, 0u32), |(w, p), k| {
                let (a, b) = width.get(k).copied().unwrap_or((0, 0));
                (w + a, p + b)
            })
        };
        let mut unrolled_peak = 0u32;
        let (mut max_w, mut max_p) = (0u32, 0u32);
        let mut max_w_uniform_addresses = 0u32;
        for b in 0..n {
            let mut live = live_out[b].clone();
            let (w, p) = sum_in(&live);
            max_w = max_w.max(w);
            max_w_uniform_addresses = max_w_uniform_addresses.max(w);
            max_p = max_p.max(p);
            let ordered = schedule(&info[b].instrs, folded, sunk);
            // Where global accesses take vector register pairs (sm_80 on), the uniform addresses
            // of the block's stores and atomics after its first global load are copied into
            // their pairs while that load is in flight: held from there to their use.
            let first_load = ordered.iter().position(is_global_load);
            let mut addresses_after: HashMap<Key, u32> = HashMap::default();
            for (at, i) in ordered.iter().enumerate().rev() {
                let r = key(i.as_value_ref());
                // At the instruction: its result and everything live after it.
                let tracked_result = !uniform.contains(&r);
                if tracked_result {
                    live.insert(r);
                }
                let (w, p) = sum_in(&live);
                let uniform_read = uniform_operand_words(i);
                let at_instruction = uniform_read + rematerialised_words(i) + expansion_temporaries(i);
                max_w = max_w.max(w + at_instruction + copied_early(first_load.is_some_and(|f| at >= f), &addresses_after, Some(i), folded));
                if let Some((address, words)) = uniform_store_address(i, &uniform, folded) {
                    addresses_after.insert(address, words);
                }
                // Where addresses are uniform registers (sm_75), a uniform instruction reads its
                // uniform operands there too: address arithmetic on the uniform datapath.
                let at_instruction_uniform_addresses = if tracked_result { at_instruction.saturating_sub(uniform_address_words(i, &uniform, folded)) } else { at_instruction - uniform_read };
                max_w_uniform_addresses = max_w_uniform_addresses.max(w + at_instruction_uniform_addresses);
                max_p = max_p.max(p);
                for ((body, defined), overlapped) in unrolled.iter().zip(&defined_in).zip(&copies_of) {
                    if body.contains(&b) {
                        let one_iteration: u32 = live.iter().filter(|k| defined.contains(k)).map(|k| width.get(k).map_or(0, |w| w.0)).sum();
                        // The copies' values overlap; what the instruction holds while it runs
                        // (operands read, an expansion's temporaries) is held by one copy at a
                        // time (design part: sm_75 mean 15.6 -> 14.6%, bench/RESULTS.md).
                        let copies = overlapped * one_iteration + at_instruction;
                        unrolled_peak = unrolled_peak.max(w - one_iteration + copies);
                    }
                }
                live.remove(&r);
                if i.get_opcode() != InstructionOpcode::Phi {
                    for vr in folded.operands(i) {
                        if is_tracked(vr) {
                            live.insert(key(vr));
                        }
                    }
                }
                let (w, p) = sum_in(&live);
                max_w = max_w.max(w + copied_early(first_load.is_some_and(|f| at > f), &addresses_after, None, folded));
                max_w_uniform_addresses = max_w_uniform_addresses.max(w);
                max_p = max_p.max(p);
            }
        }
        Peak { words: max_w, predicates: max_p, unrolled: unrolled_peak, words_uniform_addresses: max_w_uniform_addresses }
    };
    let in_order = |_: &InstructionValue| false;
    let mut counted = peak(&HashSet::default(), &held_live_out, &in_order);
    let mut rematerialised_live_out = None;
    if counted.words + FIXED_COST > REMATERIALISE_ABOVE && !through_loops.is_empty() {
        let (_, live_out) = dataflow(&kill);
        counted = peak(&through_loops, &live_out, &in_order);
        rematerialised_live_out = Some(live_out);
    }
    let Peak { words: max_w, predicates: max_p, unrolled: mut unrolled_peak, words_uniform_addresses } = counted;
    let read_only = read_only_objects(function);
    let read_only_load = |i: &InstructionValue| i.get_opcode() == InstructionOpcode::Load && read_only.contains(&key(underlying_object(i)));
    // Beyond what costs no occupancy, ptxas issues read-only loads later, where they are used,
    // rather than hold what LLVM loaded early ([`within_budget`]). Below every architecture's
    // budget the order cannot matter, and is not worked out.
    let least_words = if max_w + FIXED_COST > LEAST_BUDGET && !read_only.is_empty() {
        let sunk = match &rematerialised_live_out {
            Some(live_out) => peak(&through_loops, live_out, &read_only_load),
            None => peak(&HashSet::default(), &held_live_out, &read_only_load),
        };
        sunk.words.min(max_w)
    } else {
        max_w
    };
    // Loops ptxas may not unroll (`#pragma unroll 1`) whose body is straight-line or guarded
    // code (the copies a strategy unrolled, or a merged block's iterations): ptxas still issues
    // the body's loads early, ahead of the arithmetic and stores between them, up to what
    // costs no occupancy ([`Region::hoisted_peak`]).
    if !kept_rolled.is_empty() {
        for body in &kept_rolled {
            let region = Region { body, cfg: &cfg, info: &info, live_out: &held_live_out, folded: folded };
            let hoisted = region.hoisted_peak(&read_only_load, &|k| !uniform.contains(k), &|k| width.get(k).copied().unwrap_or((0, 0)).0, &|i| uniform_operand_words(i) + expansion_temporaries(i));
            unrolled_peak = unrolled_peak.max(hoisted);
        }
    }
    let unrolled_loop = !unrolled.is_empty();
    let latency_hiding = unrolled_loop || !kept_rolled.is_empty();
    let mut registers = within_budget(least_words, max_w, OCCUPANCY_FREE_REGISTERS_SM90);
    if latency_hiding {
        registers = registers.max((unrolled_peak + FIXED_COST).min(OCCUPANCY_FREE_REGISTERS_SM90));
    }
    RegisterEstimate {
        registers,
        max_live_words: max_w,
        least_live_words: least_words,
        max_live_words_uniform_addresses: words_uniform_addresses,
        max_live_predicates: max_p,
        unrolled_loop,
        rolled_loop: !kept_rolled.is_empty(),
        unrolled_demand: if latency_hiding { unrolled_peak + FIXED_COST } else { 0 },
        cap: None,
        uncapped: registers,
        constant_bank_bases: None,
    }
}

/// The words of the distinct operands of `i` that `counted` selects, read at `i`. A phi reads
/// one incoming value on each path (a copy at the end of that predecessor), so it holds the
/// widest of them, not their sum.
fn words_read(i: &InstructionValue<'_>, folded: &Folded, counted: &dyn Fn(&Key) -> bool) -> u32 {
    let mut seen = HashSet::default();
    let words = folded.operands(i).into_iter().filter(|vr| counted(&key(*vr)) && seen.insert(key(*vr))).map(|vr| width_of(vr).0);
    if i.get_opcode() == InstructionOpcode::Phi {
        words.max().unwrap_or(0)
    } else {
        words.sum()
    }
}

/// A loop body of the function (its blocks, liveness as [`estimate`] computed it).
struct Region<'a, 'ctx> {
    body: &'a HashSet<usize>,
    cfg: &'a Cfg<'ctx>,
    info: &'a [BlockInfo<'ctx>],
    live_out: &'a [HashSet<Key>],
    folded: &'a Folded,
}

impl<'ctx> Region<'_, 'ctx> {
    /// The most words live in one iteration of the body when its blocks run in order as one
    /// sequence (ptxas predicates guarded code) and the loads `hoistable` marks are issued
    /// first ([`schedule_with`]). What is live at the end is what the latches hold for the next
    /// iteration (invariants, carried values). `tracked` says which values take vector
    /// registers, `words` their width, `at` what an instruction reads beyond them.
    fn hoisted_peak(
        &self,
        hoistable: &dyn Fn(&InstructionValue<'ctx>) -> bool,
        tracked: &dyn Fn(&Key) -> bool,
        words: &dyn Fn(&Key) -> u32,
        at: &dyn Fn(&InstructionValue<'ctx>) -> u32,
    ) -> u32 {
        let mut order: Vec<usize> = self.body.iter().copied().collect();
        order.sort_unstable(); // LLVM's block order: structured code's order of execution
        let header = self.cfg.back_edges.iter().find(|(latch, h)| self.body.contains(latch) && self.body.contains(h)).map(|&(_, h)| h);
        let mut live: HashSet<Key> = HashSet::default();
        for &(latch, h) in &self.cfg.back_edges {
            if Some(h) == header && self.body.contains(&latch) {
                live.extend(self.live_out[latch].iter().filter(|k| tracked(k)).copied());
            }
        }
        let sequence: Vec<InstructionValue<'ctx>> = order.iter().flat_map(|&b| self.info[b].instrs.iter().copied()).collect();
        let header_phis: HashSet<Key> = header
            .map(|h| self.info[h].instrs.iter().filter(|i| i.get_opcode() == InstructionOpcode::Phi).map(|i| key(i.as_value_ref())).collect())
            .unwrap_or_default();
        let is_header_phi = |i: &InstructionValue<'ctx>| header_phis.contains(&key(i.as_value_ref()));
        let ordered = schedule_with(&sequence, self.folded, &is_header_phi, hoistable, &|_| false);
        let sum = |set: &HashSet<Key>| -> u32 { set.iter().map(|k| words(k)).sum() };
        let mut peak = sum(&live);
        for i in ordered.iter().rev() {
            let r = key(i.as_value_ref());
            if tracked(&r) && words(&r) > 0 {
                live.insert(r);
            }
            peak = peak.max(sum(&live) + at(i));
            live.remove(&r);
            if !is_header_phi(i) {
                for v in self.folded.operands(i) {
                    let k = key(v);
                    if is_tracked(v) && tracked(&k) {
                        live.insert(k);
                    }
                }
            }
            peak = peak.max(sum(&live));
        }
        peak
    }
}

/// The object a load's or store's address points into: its pointer operand with address
/// arithmetic and casts (`getelementptr`, `bitcast`, `addrspacecast`) looked through.
fn underlying_object(i: &InstructionValue<'_>) -> LLVMValueRef {
    use inkwell::llvm_sys::core::{LLVMGetOperand, LLVMIsAAddrSpaceCastInst, LLVMIsABitCastInst, LLVMIsAGetElementPtrInst};
    let pointer = match i.get_opcode() {
        InstructionOpcode::Store => 1,
        _ => 0,
    };
    // SAFETY: `i` is a live load or store; operands are read, never kept past the function.
    unsafe {
        let mut v = LLVMGetOperand(i.as_value_ref(), pointer);
        while !v.is_null() && (!LLVMIsAGetElementPtrInst(v).is_null() || !LLVMIsABitCastInst(v).is_null() || !LLVMIsAAddrSpaceCastInst(v).is_null()) {
            v = LLVMGetOperand(v, 0);
        }
        v
    }
}

/// The kernel arguments the function loads from and never stores to or updates atomically:
/// the read-only arrays (`const T *__restrict__` in the emitted CUDA), whose loads nvcc and
/// ptxas may move ahead of any store.
fn read_only_objects(function: FunctionValue<'_>) -> HashSet<Key> {
    let mut loaded = HashSet::default();
    let mut written = HashSet::default();
    for bb in function.get_basic_block_iter() {
        for i in bb.get_instructions() {
            match i.get_opcode() {
                InstructionOpcode::Load => {
                    loaded.insert(key(underlying_object(&i)));
                }
                InstructionOpcode::Store | InstructionOpcode::AtomicRMW | InstructionOpcode::AtomicCmpXchg => {
                    written.insert(key(underlying_object(&i)));
                }
                // Intrinsics read special registers, compute, or synchronise; any other call
                // (or a memory intrinsic) may write anything.
                InstructionOpcode::Call if callee_name(&i).is_none_or(|n| !n.starts_with("llvm.") || n.starts_with("llvm.mem")) => return HashSet::default(),
                _ => {}
            }
        }
    }
    let arguments: HashSet<Key> = function.get_param_iter().map(|p| key(p.as_value_ref())).collect();
    loaded.into_iter().filter(|k| arguments.contains(k) && !written.contains(k)).collect()
}

/// The register count above which the compilers rematerialise (see [`estimate`]): chosen on
/// the design part of `make bench-counters`' corpus among 32, 64, 96, 128 and 160 (lowest mean
/// and max error at every architecture; bench/RESULTS.md), one value for every kernel.
pub const REMATERIALISE_ABOVE: u32 = 64;

/// Registers ptxas's expansion of one PTX instruction holds at its point beyond its operands
/// and result: the difference from its cheap counterpart (`mul`) in kernels that hold 0 to 20
/// values across it, median, at sm_90 (`make bench-expansions`, figures in bench/RESULTS.md).
/// Precise `div.rn.f32` and 64-bit
/// division call ptxas's subroutines, whose registers come on top of what the caller holds.
fn expansion_temporaries(i: &InstructionValue<'_>) -> u32 {
    use InstructionOpcode::*;
    let wide = width_of(i.as_value_ref()).0 >= 2;
    let subroutine = |ptx: &str| beyond_operands(subroutine_registers(ptx), i);
    match i.get_opcode() {
        // nvcc's front end turns `1.0 / x` and `-1.0 / x` into `rcp.rn`, one operand.
        FDiv if is_reciprocal(i) => subroutine(if wide { "rcp.rn.f64" } else { "rcp.rn.f32" }),
        FDiv if wide => subroutine("div.rn.f64"),
        FDiv => subroutine("div.rn.f32"),
        // A constant divisor is a multiply-high and shifts (nvcc's front end and LLVM's back
        // end both emit them; ptxas never sees the division): at 32 bits no more than a
        // multiplication holds, at 64 bits the emulated 128-bit product holds 5 more unless
        // the divisor is a power of two (a shift). `make bench-expansions`, third table.
        SDiv | UDiv | SRem | URem if constant_divisor(i).is_some() => {
            let d = constant_divisor(i).unwrap_or(1);
            // Unsigned, the divisor is the constant's bits: `-2` is 2^64 - 2.
            let shift = if matches!(i.get_opcode(), UDiv | URem) { (d as u64).is_power_of_two() } else { d.unsigned_abs().is_power_of_two() };
            if wide && !shift { CONSTANT_DIVISION_64_TEMPORARIES } else { 0 }
        }
        SDiv if wide => subroutine("div.s64"),
        UDiv if wide => subroutine("div.u64"),
        SRem if wide => subroutine("rem.s64"),
        URem if wide => subroutine("rem.u64"),
        SDiv | UDiv => 6,
        SRem | URem => 4,
        // `llvm.sqrt` becomes `sqrt.rn.f64` (a subroutine) or `sqrt.rn.f32` (an expansion).
        Call if is_sqrt_call(i) => {
            if wide {
                subroutine("sqrt.rn.f64")
            } else {
                3
            }
        }
        _ => 0,
    }
}

/// Registers of the subroutines ptxas calls for an instruction's slow path, by the PTX
/// instruction: the distinct registers each one's SASS names, operands and result included,
/// the median of sm_75, sm_80 and sm_90 (`make bench-expansions`, second table; a test checks
/// them against ptxas). ptxas allocates them apart from the values live across the call.
pub const SUBROUTINE_REGISTERS: [(&str, u32); 9] = [
    ("div.rn.f32", 11),
    ("div.rn.f64", 20),
    ("rcp.rn.f32", 10),
    ("rcp.rn.f64", 8),
    ("div.s64", 16),
    ("rem.s64", 15),
    ("div.u64", 13),
    ("rem.u64", 13),
    ("sqrt.rn.f64", 13),
];

/// Whether ptxas expands `i` with a call to one of its slow-path subroutines (the instructions
/// of [`SUBROUTINE_REGISTERS`], as [`expansion_temporaries`] names them).
fn calls_subroutine(i: &InstructionValue<'_>) -> bool {
    use InstructionOpcode::*;
    let wide = width_of(i.as_value_ref()).0 >= 2;
    match i.get_opcode() {
        FDiv => true,
        SDiv | UDiv | SRem | URem => wide && constant_divisor(i).is_none(),
        Call => wide && is_sqrt_call(i),
        _ => false,
    }
}

/// Registers a 64-bit division or remainder by a constant that is not a power of two holds
/// beyond its operands: the median, over five divisors, sm_75, sm_80 and sm_90 and 8 to 16
/// floats held across it, of nvcc's count less that of a multiplication by the same constant
/// (`make bench-expansions`, third table: 2-6, median 5; 4 at sm_90).
pub const CONSTANT_DIVISION_64_TEMPORARIES: u32 = 5;

/// The divisor of an integer division or remainder when it is a constant (sign-extended).
fn constant_divisor(i: &InstructionValue<'_>) -> Option<i64> {
    use inkwell::llvm_sys::core::{LLVMConstIntGetSExtValue, LLVMIsAConstantInt};
    let Some(Operand::Value(divisor)) = i.get_operand(1) else {
        return None;
    };
    // SAFETY: `divisor` is a live value; an integer constant's value is read, nothing kept.
    unsafe {
        let v = divisor.as_value_ref();
        (!LLVMIsAConstantInt(v).is_null()).then(|| LLVMConstIntGetSExtValue(v))
    }
}

fn subroutine_registers(ptx: &str) -> u32 {
    SUBROUTINE_REGISTERS.iter().find(|(name, _)| *name == ptx).map_or(0, |&(_, registers)| registers)
}

/// What a subroutine of `registers` holds beyond the words of `i`'s operands, which arrive in
/// its registers and which the model counts where they are live, constants included (they
/// are moved into the subroutine's argument registers) but for a reciprocal's 1, which
/// `rcp.rn` does not take.
fn beyond_operands(registers: u32, i: &InstructionValue<'_>) -> u32 {
    let operand_words: u32 = (0..i.get_num_operands())
        .filter_map(|n| match i.get_operand(n) {
            Some(Operand::Value(v)) if !is_function(v.as_value_ref()) && !(n == 0 && is_reciprocal(i)) => Some(width_of(v.as_value_ref()).0),
            _ => None,
        })
        .sum();
    registers.saturating_sub(operand_words)
}

/// Whether `i` is a division whose dividend is the constant 1 or -1 (a reciprocal).
fn is_reciprocal(i: &InstructionValue<'_>) -> bool {
    use inkwell::llvm_sys::core::{LLVMConstRealGetDouble, LLVMIsAConstantFP};
    let Some(Operand::Value(dividend)) = i.get_operand(0) else {
        return false;
    };
    // SAFETY: `dividend` is a live value; a floating constant's value is read, nothing kept.
    unsafe {
        let v = dividend.as_value_ref();
        if LLVMIsAConstantFP(v).is_null() {
            return false;
        }
        let mut lost = 0;
        LLVMConstRealGetDouble(v, &mut lost).abs() == 1.0
    }
}

/// Whether `v` is a function (a call's callee operand), not a value passed to it.
fn is_function(v: LLVMValueRef) -> bool {
    // SAFETY: `v` is a live LLVM value; only its kind is read.
    unsafe { !inkwell::llvm_sys::core::LLVMIsAFunction(v).is_null() }
}

/// Whether `i` calls the `llvm.sqrt` intrinsic (any width).
fn is_sqrt_call(i: &InstructionValue<'_>) -> bool {
    callee_name(i).is_some_and(|n| n.starts_with("llvm.sqrt."))
}

/// The name of the function a call instruction calls (`None` for an indirect call).
fn callee_name(i: &InstructionValue<'_>) -> Option<String> {
    use inkwell::llvm_sys::core::{LLVMGetCalledValue, LLVMGetValueName2};
    // SAFETY: `i` is a live call instruction; the callee's name is copied, never kept.
    unsafe {
        let callee = LLVMGetCalledValue(i.as_value_ref());
        if callee.is_null() {
            return None;
        }
        let mut len = 0usize;
        let name = LLVMGetValueName2(callee, &mut len);
        (!name.is_null()).then(|| String::from_utf8_lossy(std::slice::from_raw_parts(name as *const u8, len)).into_owned())
    }
}

/// The order the model gives a block's instructions, standing for ptxas's pressure-aware
/// scheduler: phis first; then each instruction with an effect or a memory access (loads,
/// stores, calls) in source order, each preceded by the pure arithmetic it needs that is not
/// yet placed (so arithmetic sinks next to its first use instead of staying where LLVM put
/// it); then the remaining pure values (used by later blocks only), then the terminator.
/// Only pure values move, and only later, so the order is a legal schedule. The loads `sunk`
/// marks move as pure values do, to their first use: only loads of read-only arrays, which no
/// store of the kernel can change, so that order is legal too.
fn schedule<'ctx>(instrs: &[InstructionValue<'ctx>], folded: &Folded, sunk: &dyn Fn(&InstructionValue<'ctx>) -> bool) -> Vec<InstructionValue<'ctx>> {
    schedule_with(instrs, folded, &|i| i.get_opcode() == InstructionOpcode::Phi, &|_| false, sunk)
}

/// Registers for a kernel whose values take `least` words at most in the order that holds
/// fewest ([`schedule`] with read-only loads sunk) and `in_order` in LLVM's order (loads where
/// LLVM left them, often early): ptxas keeps the early loads while they cost no occupancy, up
/// to `budget` ([`occupancy_free_registers`]), and beyond it reorders to need no more than the
/// budget or `least`, whichever is more.
fn within_budget(least: u32, in_order: u32, budget: u32) -> u32 {
    (least + FIXED_COST).max((in_order + FIXED_COST).min(budget))
}

/// The peak [`estimate`] finds for one order of the instructions.
struct Peak {
    words: u32,
    predicates: u32,
    /// What an unrolled loop's overlapped copies hold.
    unrolled: u32,
    /// `words` where uniform addresses of global accesses take no vector registers.
    words_uniform_addresses: u32,
}

/// Whether `arch`'s global loads, stores and atomics take a uniform address from uniform
/// registers (`LDG.E [UR4]` in the SASS of sm_75, Turing). From sm_80 on they take a vector
/// register pair (`LDG.E [R2.64]`), and a uniform address is first copied there: the same kernel
/// storing a scalar to three arguments uses 5 registers at sm_75 and 16 at sm_80 and sm_90.
pub fn uniform_global_addresses(arch: &str) -> bool {
    arch == "sm_75"
}

/// The words of `i`'s address that [`uniform_global_addresses`] frees: `i` a load, store or
/// atomic on global memory whose address is uniform (and not also an operand of another kind).
fn uniform_address_words(i: &InstructionValue<'_>, uniform: &HashSet<Key>, folded: &Folded) -> u32 {
    let Some(pointer) = pointer_operand(i) else { return 0 };
    let Some(address) = folded.operand(i, pointer) else { return 0 };
    // SAFETY: `address` is a live operand of `i`; only its type is read.
    let global = unsafe { LLVMGetTypeKind(LLVMTypeOf(address)) == LLVMTypeKind::LLVMPointerTypeKind && LLVMGetPointerAddressSpace(LLVMTypeOf(address)) == 1 };
    let also_a_value = (0..i.get_num_operands()).any(|n| n != pointer && folded.operand(i, n) == Some(address));
    if global && uniform.contains(&key(address)) && !also_a_value {
        width_of(address).0
    } else {
        0
    }
}

/// `i`'s address and its words when `i` is a store or an atomic whose global address is
/// uniform ([`uniform_address_words`]): what ptxas copies into a vector register pair early.
fn uniform_store_address(i: &InstructionValue<'_>, uniform: &HashSet<Key>, folded: &Folded) -> Option<(Key, u32)> {
    if i.get_opcode() == InstructionOpcode::Load {
        return None;
    }
    let words = uniform_address_words(i, uniform, folded);
    match folded.operand(i, pointer_operand(i)?) {
        Some(address) if words > 0 => Some((key(address), words)),
        _ => None,
    }
}

/// The operand holding the address of `i`, a load, store or atomic (`None` for any other).
fn pointer_operand(i: &InstructionValue<'_>) -> Option<u32> {
    match i.get_opcode() {
        InstructionOpcode::Load | InstructionOpcode::AtomicRMW | InstructionOpcode::AtomicCmpXchg => Some(0),
        InstructionOpcode::Store => Some(1),
        _ => None,
    }
}

/// The words of the store addresses `addresses` (those of the block's later stores and
/// atomics), held where the block's first global load has issued, `after_first_load`
/// ([`uniform_store_address`]); at an instruction `at`, less those it reads itself (counted
/// there as its uniform operands).
fn copied_early(after_first_load: bool, addresses: &HashMap<Key, u32>, at: Option<&InstructionValue<'_>>, folded: &Folded) -> u32 {
    if !after_first_load || addresses.is_empty() {
        return 0;
    }
    let read = at.map(|i| folded.operands(i)).unwrap_or_default();
    addresses.iter().filter(|(k, _)| !read.iter().any(|&v| key(v) == **k)).map(|(_, w)| w).sum()
}

/// Whether `i` loads from global memory (address space 1).
fn is_global_load(i: &InstructionValue<'_>) -> bool {
    // SAFETY: the operand is a live value of `i`; only its type is read.
    i.get_opcode() == InstructionOpcode::Load && matches!(i.get_operand(0), Some(Operand::Value(a)) if unsafe { LLVMGetPointerAddressSpace(LLVMTypeOf(a.as_value_ref())) == 1 })
}

/// The smallest occupancy-free budget of the architectures [`resident_threads`] knows: a kernel
/// estimated at no more holds LLVM's order everywhere.
const LEAST_BUDGET: u32 = OCCUPANCY_FREE_REGISTERS_SM90;

/// [`schedule`] over a sequence of instructions `first` marks the top of (the phis of a block,
/// or of a loop header when the sequence is a loop body's blocks in order; other phis are
/// placed after their operands, as selects), with the loads `hoisted` marks placed right after
/// those, each preceded by the arithmetic its address needs: the order ptxas's scheduler gives
/// independent loads when it issues them early to cover their latency. The loads `sunk` marks
/// are placed at their first use.
fn schedule_with<'ctx>(
    instrs: &[InstructionValue<'ctx>],
    folded: &Folded,
    first: &dyn Fn(&InstructionValue<'ctx>) -> bool,
    hoisted: &dyn Fn(&InstructionValue<'ctx>) -> bool,
    sunk: &dyn Fn(&InstructionValue<'ctx>) -> bool,
) -> Vec<InstructionValue<'ctx>> {
    struct Placer<'a, 'ctx> {
        instrs: &'a [InstructionValue<'ctx>],
        folded: &'a Folded,
        position: HashMap<Key, usize>,
        placed: Vec<bool>,
        is_first: Vec<bool>,
        order: Vec<InstructionValue<'ctx>>,
    }
    impl<'ctx> Placer<'_, 'ctx> {
        fn place(&mut self, n: usize) {
            if self.placed[n] {
                return;
            }
            self.placed[n] = true;
            let i = self.instrs[n];
            if !self.is_first[n] {
                for v in self.folded.operands(&i) {
                    if let Some(&m) = self.position.get(&key(v)) {
                        if m < n {
                            self.place(m);
                        }
                    }
                }
            }
            self.order.push(i);
        }
    }
    use InstructionOpcode::*;
    let position = instrs
        .iter()
        .enumerate()
        .map(|(n, i)| (key(i.as_value_ref()), n))
        .collect();
    let mut placer = Placer {
        instrs,
        folded,
        position,
        placed: vec![false; instrs.len()],
        is_first: instrs.iter().map(first).collect(),
        order: Vec::with_capacity(instrs.len()),
    };
    let last = instrs.len().saturating_sub(1);
    let stages: [&dyn Fn(&InstructionValue<'ctx>) -> bool; 3] = [first, hoisted, &|i| {
        matches!(i.get_opcode(), Load | Store | Call | Fence | AtomicRMW | AtomicCmpXchg) && !sunk(i)
    }];
    for stage in stages {
        for n in 0..last {
            if stage(&instrs[n]) {
                placer.place(n);
            }
        }
    }
    for n in 0..instrs.len() {
        placer.place(n);
    }
    placer.order
}

/// Whether a branch carries `!llvm.loop` metadata with `llvm.loop.unroll.disable`.
fn unroll_disabled(branch: InstructionValue<'_>) -> bool {
    use inkwell::llvm_sys::core::{
        LLVMGetMDKindIDInContext, LLVMGetMDNodeNumOperands, LLVMGetMDNodeOperands, LLVMGetMDString,
        LLVMGetMetadata, LLVMGetTypeContext, LLVMIsAMDNode,
    };
    let kind = "llvm.loop";
    // SAFETY: the branch is a live instruction; metadata operands are read, never kept.
    unsafe {
        let v = branch.as_value_ref();
        let ctx = LLVMGetTypeContext(LLVMTypeOf(v));
        let id = LLVMGetMDKindIDInContext(ctx, kind.as_ptr() as *const _, kind.len() as u32);
        let md = LLVMGetMetadata(v, id);
        if md.is_null() {
            return false;
        }
        let operands = |node: LLVMValueRef| {
            let n = LLVMGetMDNodeNumOperands(node) as usize;
            let mut ops = vec![std::ptr::null_mut(); n];
            LLVMGetMDNodeOperands(node, ops.as_mut_ptr());
            ops
        };
        operands(md)
            .into_iter()
            .filter(|op| !op.is_null() && !LLVMIsAMDNode(*op).is_null() && *op != md)
            .any(|hint| {
                operands(hint).into_iter().any(|s| {
                    let mut len = 0u32;
                    let p = if s.is_null() {
                        std::ptr::null()
                    } else {
                        LLVMGetMDString(s, &mut len)
                    };
                    !p.is_null()
                        && std::slice::from_raw_parts(p as *const u8, len as usize)
                            == b"llvm.loop.unroll.disable"
                })
            })
    }
}

/// Whether every two-way branch inside the loop `body` is loop control (an arm leaves the
/// loop) or a guard: one arm reaches the other on every path inside the body, so the branch
/// skips code and rejoins, `if (c) { ... }` without `else`, however the skipped code nests
/// further guards (a tile load's `if (e < n) { if (g >= 0 && g < m) ... }`, whose `&&` is a
/// branch of its own). ptxas predicates such code and unrolls the loop as straight-line code.
/// A diamond (`if ... else`) is not a guard: neither arm reaches the other.
pub fn guarded_only(body: &HashSet<usize>, succs: &[Vec<usize>]) -> bool {
    let within = PostDominators::of_body(body, succs);
    body.iter().all(|&b| match succs[b].as_slice() {
        [x, y] if body.contains(x) && body.contains(y) => {
            // An arm that falls straight into the other is a guard even where the other is the
            // header (a second back edge, which the tree below cuts).
            let falls_into = |from: &usize, to: &usize| succs[*from].as_slice() == [*to];
            falls_into(x, y) || falls_into(y, x) || within.post_dominates(*y, *x) || within.post_dominates(*x, *y)
        }
        _ => true,
    })
}

/// The post-dominator tree of a loop body with its back edges cut: every path from a block
/// ends at one virtual exit, reached by leaving the body, by the back edge to the header, or
/// by a block without successors. `a` post-dominates `b` when every path from `b` inside the
/// body passes through `a`, which is "`b` reaches `a` on every path". Built with Cooper,
/// Harvey and Kennedy's iterative algorithm on the reversed graph and numbered by a
/// depth-first walk of the tree, so each question is two comparisons: a body of thousands of
/// guards is decided in linear time, without recursion.
struct PostDominators {
    /// Each block's (entry, exit) number in a depth-first walk of the tree; none for a block
    /// from which the exit is not reached (only a malformed body has one).
    span: HashMap<usize, (usize, usize)>,
}

impl PostDominators {
    fn of_body(body: &HashSet<usize>, succs: &[Vec<usize>]) -> PostDominators {
        // The header: the block entered from outside the body (the smallest index if there
        // were several, or none, so that the answer is deterministic).
        let entered = succs.iter().enumerate().filter(|(p, _)| !body.contains(p)).flat_map(|(_, ss)| ss.iter().copied()).filter(|s| body.contains(s));
        let header = entered.min().or_else(|| body.iter().copied().min());
        // Node n < blocks.len() is blocks[n]; the exit is node `exit`.
        let mut blocks: Vec<usize> = body.iter().copied().collect();
        blocks.sort_unstable();
        let index: HashMap<usize, usize> = blocks.iter().enumerate().map(|(n, b)| (*b, n)).collect();
        let exit = blocks.len();
        // Forward edges (a block to its successors inside, or to the exit) and their reverse.
        let mut next: Vec<Vec<usize>> = vec![Vec::new(); exit + 1];
        let mut prev: Vec<Vec<usize>> = vec![Vec::new(); exit + 1];
        for (n, &b) in blocks.iter().enumerate() {
            let mut to_exit = succs[b].is_empty();
            for s in &succs[b] {
                match index.get(s) {
                    Some(&m) if Some(*s) != header => next[n].push(m),
                    _ => to_exit = true,
                }
            }
            if to_exit {
                next[n].push(exit);
            }
            for &m in &next[n] {
                prev[m].push(n);
            }
        }
        // Reverse postorder of the reversed graph from the exit (iterative depth-first walk).
        let mut postorder = Vec::with_capacity(exit + 1);
        let mut visited = vec![false; exit + 1];
        let mut stack = vec![(exit, 0usize)];
        visited[exit] = true;
        while let Some((n, i)) = stack.last_mut() {
            if let Some(&m) = prev[*n].get(*i) {
                *i += 1;
                if !visited[m] {
                    visited[m] = true;
                    stack.push((m, 0));
                }
            } else {
                postorder.push(*n);
                stack.pop();
            }
        }
        let mut rank = vec![usize::MAX; exit + 1];
        for (r, &n) in postorder.iter().enumerate() {
            rank[n] = r;
        }
        const NONE: usize = usize::MAX;
        let mut ipdom = vec![NONE; exit + 1];
        ipdom[exit] = exit;
        let mut changed = true;
        while changed {
            changed = false;
            for &n in postorder.iter().rev().filter(|&&n| n != exit) {
                let mut new = NONE;
                for &m in next[n].iter().filter(|&&m| ipdom[m] != NONE) {
                    new = if new == NONE {
                        m
                    } else {
                        let (mut a, mut b) = (new, m);
                        while a != b {
                            while rank[a] < rank[b] {
                                a = ipdom[a];
                            }
                            while rank[b] < rank[a] {
                                b = ipdom[b];
                            }
                        }
                        a
                    };
                }
                if new != NONE && ipdom[n] != new {
                    ipdom[n] = new;
                    changed = true;
                }
            }
        }
        // Number the tree depth-first from the exit.
        let mut children: Vec<Vec<usize>> = vec![Vec::new(); exit + 1];
        for n in 0..exit {
            if ipdom[n] != NONE {
                children[ipdom[n]].push(n);
            }
        }
        let mut span = HashMap::default();
        let mut clock = 0;
        let mut entry = vec![0usize; exit + 1];
        let mut stack = vec![(exit, 0usize)];
        entry[exit] = clock;
        while let Some((n, i)) = stack.last_mut() {
            if let Some(&c) = children[*n].get(*i) {
                *i += 1;
                clock += 1;
                entry[c] = clock;
                stack.push((c, 0));
            } else {
                clock += 1;
                if *n != exit {
                    span.insert(blocks[*n], (entry[*n], clock));
                }
                stack.pop();
            }
        }
        PostDominators { span }
    }

    /// Whether every path from block `b` inside the body passes through block `a`.
    fn post_dominates(&self, a: usize, b: usize) -> bool {
        match (self.span.get(&a), self.span.get(&b)) {
            (Some(&(a_in, a_out)), Some(&(b_in, b_out))) => a_in <= b_in && b_out <= a_out,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triangles_are_guards_and_diamonds_are_not() {
        // Loop 1 -> {2, 3}; 2 -> 3 (a triangle: `if (c) { 2 }`), 3 -> 1 or exit 4.
        let triangle = vec![vec![1], vec![2, 3], vec![3], vec![1, 4], vec![]];
        let l = &innermost_loops(&triangle)[0];
        assert!(guarded_only(l, &triangle));
        // Loop 1 -> {2, 3} -> 4 -> 1 or exit 5: `if (c) { 2 } else { 3 }`, a diamond.
        let diamond = vec![vec![1], vec![2, 3], vec![4], vec![4], vec![1, 5], vec![]];
        let l = &innermost_loops(&diamond)[0];
        assert!(!guarded_only(l, &diamond));
    }

    #[test]
    fn nested_guards_are_guards_and_a_diamond_inside_one_is_not() {
        // Loop 1 -> {2, 5}; 2 -> {3, 5}; 3 -> {4, 5}; 4 -> 5; 5 -> 1 or exit 6:
        // `if (e < n) { if (g >= 0 && g < m) { 4 } }`, the `&&` a branch of its own.
        let nested = vec![vec![1], vec![2, 5], vec![3, 5], vec![4, 5], vec![5], vec![1, 6], vec![]];
        let l = &innermost_loops(&nested)[0];
        assert_eq!(l.len(), 5);
        assert!(guarded_only(l, &nested));
        // The same with a diamond inside the guard: 2 -> {3, 4}; 3 -> 7; 4 -> 7; 7 -> 5.
        let inner_diamond = vec![vec![1], vec![2, 5], vec![3, 4], vec![7], vec![7], vec![1, 6], vec![], vec![5]];
        let l = &innermost_loops(&inner_diamond)[0];
        assert!(!guarded_only(l, &inner_diamond), "the inner if/else is not a guard");
        // A guard whose skipped code leaves the loop (`break`) on one path is not a guard.
        let breaking = vec![vec![1], vec![2, 4], vec![3, 6], vec![4], vec![1, 6], vec![], vec![]];
        let l = &innermost_loops(&breaking)[0];
        assert!(!guarded_only(l, &breaking));
        // A guard whose arm falls into the header (two back edges: 2 -> 1 and 3 -> 1).
        let two_latches = vec![vec![1], vec![2, 4], vec![3, 1], vec![1], vec![]];
        let l = &innermost_loops(&two_latches)[0];
        assert_eq!(l.len(), 3);
        assert!(guarded_only(l, &two_latches));
    }

    #[test]
    fn a_long_chain_of_guards_is_decided_without_recursion() {
        // Loop header 1, then 20000 guards in sequence: g -> {g + 1, g + 2} (the guarded
        // block g + 1 falls into g + 2), the last join back to the header or out.
        let guards = 20_000;
        let join = 2 + 2 * guards;
        let mut succs: Vec<Vec<usize>> = vec![vec![1], vec![2]];
        for g in 0..guards {
            let at = 2 + 2 * g;
            succs.push(vec![at + 1, at + 2]);
            succs.push(vec![at + 2]);
        }
        succs.push(vec![1, join + 1]);
        succs.push(vec![]);
        let l = &innermost_loops(&succs)[0];
        assert_eq!(l.len(), join);
        assert!(guarded_only(l, &succs));
    }
}
