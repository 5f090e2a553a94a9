//! Lowering a [`Kernel`] to LLVM IR for `nvptx64-nvidia-cuda`, through inkwell.
//!
//! Contract: the function has the kernel's parameters in order (`int` → i32, `long` → i64,
//! `float` → f32, `double` → f64, arrays → pointers in the global address space), is marked as
//! a kernel, and passes the LLVM verifier. Semantics are C's: the usual arithmetic conversions,
//! truncating integer division, short-circuit `&&`/`||`, and a condition is "not zero".
//! Arrays are row-major; addresses are computed in 64 bits from the extents' polynomials.
//! Local scalars live in `alloca`s (the optimisation pipeline promotes them to registers).
//! Thread and block indices come from the NVVM special-register intrinsics, `__syncthreads`
//! is `llvm.nvvm.barrier0`, and shared arrays are laid out, in order, in the dynamic shared
//! memory block (`extern __shared__`), widest elements first and packed without padding.

use crate::frontend::ast::*;
use crate::kernel::{Kernel, KernelParamKind};
use constraints::Poly;
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::intrinsics::Intrinsic;
use inkwell::module::{Linkage, Module};
use inkwell::types::{BasicMetadataTypeEnum, BasicTypeEnum};
use inkwell::values::{BasicValueEnum, FunctionValue, IntValue, PointerValue, ValueKind};
use inkwell::llvm_sys::core::LLVMBuildAtomicRMW;
use inkwell::llvm_sys::{LLVMAtomicOrdering, LLVMAtomicRMWBinOp};
use inkwell::values::AsValueRef;
use inkwell::{AddressSpace, FloatPredicate, IntPredicate};
use llvm_passes::target::{self, address_space};
use std::collections::HashMap;

/// The name of the dynamic shared-memory block in the module.
pub const SHARED_BLOCK: &str = "metafork_shared";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LowerError(pub String);

impl std::fmt::Display for LowerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot lower to LLVM IR: {}", self.0)
    }
}

impl std::error::Error for LowerError {}

type LResult<T> = Result<T, LowerError>;

fn err<T>(msg: impl Into<String>) -> LResult<T> {
    Err(LowerError(msg.into()))
}

/// Builder calls only fail when the builder has no insertion point, which this lowering never
/// leaves it without; the error is still reported rather than unwrapped.
fn b<T, E: std::fmt::Display>(r: Result<T, E>) -> LResult<T> {
    r.map_err(|e| LowerError(format!("LLVM builder: {e}")))
}

/// A lowered value with its C type.
#[derive(Clone, Copy)]
struct TV<'ctx> {
    v: BasicValueEnum<'ctx>,
    ty: ScalarType,
}

#[derive(Clone, Copy)]
enum Slot<'ctx> {
    /// A variable in memory (locals, loop counters).
    Mem(PointerValue<'ctx>, ScalarType),
    /// A read-only value (scalar parameters).
    Value(TV<'ctx>),
}

struct ArraySlot<'ctx> {
    base: PointerValue<'ctx>,
    elem: ScalarType,
    extents: Vec<Poly>,
}

/// Lower one kernel into a fresh module of its own.
pub fn lower_kernel<'ctx>(context: &'ctx Context, kernel: &Kernel) -> LResult<Module<'ctx>> {
    let module = target::new_module(context, &kernel.name).map_err(LowerError)?;
    lower_into(context, &module, kernel)?;
    target::verify(&module).map_err(|e| LowerError(format!("the LLVM verifier rejected `{}`: {e}", kernel.name)))?;
    Ok(module)
}

fn llvm_type<'ctx>(context: &'ctx Context, t: ScalarType) -> BasicTypeEnum<'ctx> {
    match t {
        ScalarType::Char => context.i8_type().into(),
        ScalarType::Int => context.i32_type().into(),
        ScalarType::Long => context.i64_type().into(),
        ScalarType::Float => context.f32_type().into(),
        ScalarType::Double => context.f64_type().into(),
    }
}

fn lower_into<'ctx>(context: &'ctx Context, module: &Module<'ctx>, kernel: &Kernel) -> LResult<FunctionValue<'ctx>> {
    let gptr = context.ptr_type(AddressSpace::from(address_space::GLOBAL));
    let arg_types: Vec<BasicMetadataTypeEnum> = kernel
        .params
        .iter()
        .map(|p| match &p.kind {
            KernelParamKind::Scalar(t) => llvm_type(context, *t).into(),
            KernelParamKind::Array { .. } => gptr.into(),
        })
        .collect();
    let function = module.add_function(&kernel.name, context.void_type().fn_type(&arg_types, false), None);
    target::mark_kernel(function);
    if let Some(n) = kernel.max_registers {
        llvm_passes::pressure::cap_registers(context, module, function, n).map_err(LowerError)?;
    }
    let entry = context.append_basic_block(function, "entry");
    let body = context.append_basic_block(function, "body");
    let builder = context.create_builder();
    let mut l = Lowerer {
        context,
        module,
        builder,
        function,
        entry,
        scopes: vec![HashMap::new()],
        arrays: HashMap::new(),
        param_ints: HashMap::new(),
        no_unroll: kernel.no_unroll,
        narrow_index: kernel.narrow_index,
        shared_arrays: kernel.shared.iter().map(|s| s.name.clone()).collect(),
    };
    l.builder.position_at_end(body);
    for (i, p) in kernel.params.iter().enumerate() {
        let v = function.get_nth_param(i as u32).ok_or_else(|| LowerError("parameter count".into()))?;
        v.set_name(&p.name);
        match &p.kind {
            KernelParamKind::Scalar(t) => {
                l.scopes[0].insert(p.name.clone(), Slot::Value(TV { v, ty: *t }));
                if t.is_integer() {
                    l.param_ints.insert(p.name.clone(), TV { v, ty: *t });
                }
            }
            KernelParamKind::Array { elem, extents, .. } => {
                l.arrays.insert(p.name.clone(), ArraySlot { base: v.into_pointer_value(), elem: *elem, extents: extents.clone() });
            }
        }
    }
    l.declare_shared(kernel)?;
    for s in &kernel.body {
        l.stmt(s)?;
    }
    b(l.builder.build_return(None))?;
    // Allocas were placed in `entry`; it falls through to the code.
    l.builder.position_at_end(entry);
    b(l.builder.build_unconditional_branch(body))?;
    Ok(function)
}

struct Lowerer<'a, 'ctx> {
    context: &'ctx Context,
    module: &'a Module<'ctx>,
    builder: Builder<'ctx>,
    function: FunctionValue<'ctx>,
    entry: inkwell::basic_block::BasicBlock<'ctx>,
    scopes: Vec<HashMap<String, Slot<'ctx>>>,
    arrays: HashMap<String, ArraySlot<'ctx>>,
    /// Integer scalar parameters, for evaluating extent polynomials.
    param_ints: HashMap<String, TV<'ctx>>,
    /// Mark every loop `llvm.loop.unroll.disable` (register pressure, level 1).
    no_unroll: bool,
    /// Linearise shared tiles' subscripts in 32-bit arithmetic (`strategy::narrow`).
    narrow_index: bool,
    shared_arrays: std::collections::HashSet<String>,
}

impl<'a, 'ctx> Lowerer<'a, 'ctx> {
    fn i64(&self) -> inkwell::types::IntType<'ctx> {
        self.context.i64_type()
    }

    fn intrinsic(&self, name: &str, types: &[BasicTypeEnum<'ctx>]) -> LResult<FunctionValue<'ctx>> {
        Intrinsic::find(name)
            .and_then(|i| i.get_declaration(self.module, types))
            .ok_or_else(|| LowerError(format!("LLVM has no intrinsic `{name}`")))
    }

    /// The hardware's approximate `ex2` or `lg2` of a float or double: PTX has them for
    /// 32-bit operands only, so a double goes through float (libdevice's double routines are
    /// longer; this is the register estimate's shape of the call, not its value).
    fn approx(&mut self, op: &str, x: TV<'ctx>) -> LResult<BasicValueEnum<'ctx>> {
        let f = self.intrinsic(&format!("llvm.nvvm.{op}.approx.f"), &[])?;
        if x.ty == ScalarType::Float {
            return self.call(f, &[x.v], op);
        }
        let narrow = self.convert(x, ScalarType::Float)?;
        let r = self.call(f, &[narrow], op)?;
        self.convert(TV { v: r, ty: ScalarType::Float }, x.ty)
    }

    fn call(&self, f: FunctionValue<'ctx>, args: &[BasicValueEnum<'ctx>], name: &str) -> LResult<BasicValueEnum<'ctx>> {
        let args: Vec<_> = args.iter().map(|a| (*a).into()).collect();
        match b(self.builder.build_call(f, &args, name))?.try_as_basic_value() {
            ValueKind::Basic(v) => Ok(v),
            ValueKind::Instruction(_) => err(format!("intrinsic `{name}` returned no value")),
        }
    }

    /// An `alloca` in the entry block, so that mem2reg can promote it.
    fn alloca(&self, ty: ScalarType, name: &str) -> LResult<PointerValue<'ctx>> {
        let here = self.builder.get_insert_block();
        let tmp = self.context.create_builder();
        match self.entry.get_first_instruction() {
            Some(i) => tmp.position_before(&i),
            None => tmp.position_at_end(self.entry),
        }
        let p = b(tmp.build_alloca(llvm_type(self.context, ty), name))?;
        if let Some(h) = here {
            self.builder.position_at_end(h);
        }
        Ok(p)
    }

    fn declare_shared(&mut self, kernel: &Kernel) -> LResult<()> {
        if kernel.shared.is_empty() {
            return Ok(());
        }
        let block = self.module.add_global(
            self.context.i8_type().array_type(0),
            Some(AddressSpace::from(address_space::SHARED)),
            SHARED_BLOCK,
        );
        block.set_linkage(Linkage::External);
        block.set_alignment(16);
        let base = block.as_pointer_value();
        let mut offset = self.i64().const_zero();
        for s in kernel.shared_layout() {
            let ptr = unsafe { b(self.builder.build_gep(self.context.i8_type(), base, &[offset], &s.name))? };
            self.arrays.insert(s.name.clone(), ArraySlot { base: ptr, elem: s.elem, extents: s.extents.clone() });
            let bytes = self.poly(&(s.elements() * Poly::int(s.elem.size_bytes() as i64)))?;
            // Widest elements first: the next array is aligned without padding.
            offset = b(self.builder.build_int_add(offset, bytes, "shared_end"))?;
        }
        Ok(())
    }

    /// A polynomial in the integer parameters, as an i64. Rational coefficients (a coarsened
    /// block's extent) as the integer polynomial over their common denominator, divided: the
    /// same value as `emit::cuda::poly_expr_as` prints, exact under the kernel's constraints.
    fn poly(&self, p: &Poly) -> LResult<IntValue<'ctx>> {
        let denominator = p.common_denominator();
        if denominator != num_bigint::BigInt::from(1) {
            let l: i64 = (&denominator).try_into().map_err(|_| LowerError(format!("denominator too large in `{p}`")))?;
            let whole = self.poly(&(p * &Poly::int(l)))?;
            return Ok(b(self.builder.build_int_signed_div(whole, self.i64().const_int(l as u64, true), "ext"))?);
        }
        let i64t = self.i64();
        let mut sum = i64t.const_zero();
        for (m, c) in p.terms() {
            let coeff: i64 = c.numer().try_into().map_err(|_| LowerError(format!("coefficient too large in `{p}`")))?;
            let mut t = i64t.const_int(coeff as u64, true);
            for (v, e) in m.factors() {
                let x = self.param_ints.get(v.name()).ok_or_else(|| LowerError(format!("`{v}` in an extent is not an integer parameter")))?;
                let x = self.convert(*x, ScalarType::Long)?.into_int_value();
                for _ in 0..*e {
                    t = b(self.builder.build_int_mul(t, x, "ext"))?;
                }
            }
            sum = b(self.builder.build_int_add(sum, t, "ext"))?;
        }
        Ok(sum)
    }

    fn lookup(&self, name: &str) -> LResult<Slot<'ctx>> {
        self.scopes.iter().rev().find_map(|s| s.get(name).copied()).ok_or_else(|| LowerError(format!("unknown variable `{name}`")))
    }

    fn convert(&self, x: TV<'ctx>, to: ScalarType) -> LResult<BasicValueEnum<'ctx>> {
        let bl = &self.builder;
        let target = llvm_type(self.context, to);
        Ok(match (x.ty.is_integer(), to.is_integer()) {
            _ if x.ty == to => x.v,
            (true, true) => {
                let (v, t) = (x.v.into_int_value(), target.into_int_type());
                if x.ty.size_bytes() < to.size_bytes() { b(bl.build_int_s_extend(v, t, "sext"))?.into() } else { b(bl.build_int_truncate(v, t, "trunc"))?.into() }
            }
            (true, false) => b(bl.build_signed_int_to_float(x.v.into_int_value(), target.into_float_type(), "sitofp"))?.into(),
            (false, true) => b(bl.build_float_to_signed_int(x.v.into_float_value(), target.into_int_type(), "fptosi"))?.into(),
            (false, false) => {
                let (v, t) = (x.v.into_float_value(), target.into_float_type());
                if x.ty == ScalarType::Float { b(bl.build_float_ext(v, t, "fpext"))?.into() } else { b(bl.build_float_trunc(v, t, "fptrunc"))?.into() }
            }
        })
    }

    fn address(&mut self, array: &str, indices: &[Expr]) -> LResult<(PointerValue<'ctx>, ScalarType)> {
        let (base, elem, extents) = {
            let a = self.arrays.get(array).ok_or_else(|| LowerError(format!("unknown array `{array}`")))?;
            (a.base, a.elem, a.extents.clone())
        };
        if extents.len() != indices.len() {
            return err(format!("`{array}` indexed with {} subscripts", indices.len()));
        }
        // C's row-major linearisation, in 64 bits; a shared tile's in 32 bits (no signed wrap:
        // see `strategy::narrow`) in narrowed code (`strategy::narrow`), extended once for the address.
        let narrow = self.narrow_index && self.shared_arrays.contains(array);
        let index_ty = if narrow { ScalarType::Int } else { ScalarType::Long };
        let mut linear: Option<IntValue<'ctx>> = None;
        for (k, e) in indices.iter().enumerate() {
            let i = self.expr(e)?;
            let i = self.convert(i, index_ty)?.into_int_value();
            linear = Some(match linear {
                None => i,
                Some(acc) => {
                    let ext = self.poly(&extents[k])?;
                    if narrow {
                        let ext = b(self.builder.build_int_truncate(ext, self.context.i32_type(), "ext32"))?;
                        let scaled = b(self.builder.build_int_nsw_mul(acc, ext, "row"))?;
                        b(self.builder.build_int_nsw_add(scaled, i, "idx"))?
                    } else {
                        let scaled = b(self.builder.build_int_mul(acc, ext, "row"))?;
                        b(self.builder.build_int_add(scaled, i, "idx"))?
                    }
                }
            });
        }
        let linear = match linear {
            Some(l) if narrow => b(self.builder.build_int_s_extend(l, self.i64(), "idx64"))?,
            Some(l) => l,
            None => self.i64().const_zero(),
        };
        let ty = llvm_type(self.context, elem);
        let ptr = unsafe { b(self.builder.build_gep(ty, base, &[linear], &format!("{array}_at")))? };
        Ok((ptr, elem))
    }

    // ---- expressions ----

    fn expr(&mut self, e: &Expr) -> LResult<TV<'ctx>> {
        let ctx = self.context;
        match &e.kind {
            ExprKind::Int(v) => Ok(match i32::try_from(*v) {
                Ok(x) => TV { v: ctx.i32_type().const_int(x as i64 as u64, true).into(), ty: ScalarType::Int },
                Err(_) => TV { v: ctx.i64_type().const_int(*v as u64, true).into(), ty: ScalarType::Long },
            }),
            ExprKind::Float { value, single: true } => Ok(TV { v: ctx.f32_type().const_float(*value as f32 as f64).into(), ty: ScalarType::Float }),
            ExprKind::Float { value, single: false } => Ok(TV { v: ctx.f64_type().const_float(*value).into(), ty: ScalarType::Double }),
            ExprKind::Var(n) => match self.lookup(n)? {
                Slot::Value(tv) => Ok(tv),
                Slot::Mem(p, ty) => Ok(TV { v: b(self.builder.build_load(llvm_type(ctx, ty), p, n))?, ty }),
            },
            ExprKind::Builtin(bi) => {
                let reg = match bi {
                    Builtin::ThreadIdx(_) => "tid",
                    Builtin::BlockIdx(_) => "ctaid",
                    Builtin::BlockDim(_) => "ntid",
                    Builtin::GridDim(_) => "nctaid",
                };
                let name = format!("llvm.nvvm.read.ptx.sreg.{reg}.{}", ["x", "y", "z"][bi.dim() as usize % 3]);
                let f = self.intrinsic(&name, &[])?;
                Ok(TV { v: self.call(f, &[], reg)?, ty: ScalarType::Int })
            }
            ExprKind::Index { array, indices } => {
                let (p, elem) = self.address(&array.name, indices)?;
                Ok(TV { v: b(self.builder.build_load(llvm_type(ctx, elem), p, &array.name))?, ty: elem })
            }
            ExprKind::Unary(UnOp::Neg, a) => {
                let x = self.expr(a)?;
                let v = if x.ty.is_integer() {
                    b(self.builder.build_int_neg(x.v.into_int_value(), "neg"))?.into()
                } else {
                    b(self.builder.build_float_neg(x.v.into_float_value(), "fneg"))?.into()
                };
                Ok(TV { v, ty: x.ty })
            }
            ExprKind::Unary(UnOp::Not, _) => self.cond_as_int(e),
            ExprKind::Binary(op, _, _) if op.is_comparison() || op.is_logical() => self.cond_as_int(e),
            ExprKind::Binary(op, a, bb) => {
                let (x, y) = (self.expr(a)?, self.expr(bb)?);
                self.arith(*op, x, y)
            }
            ExprKind::Cond(c, a, bb) => self.conditional(c, a, bb),
            ExprKind::Cast(t, a) => {
                let x = self.expr(a)?;
                Ok(TV { v: self.convert(x, *t)?, ty: *t })
            }
            ExprKind::Call(f, args) => self.math_call(&f.name, args),
        }
    }

    fn arith(&mut self, op: BinOp, x: TV<'ctx>, y: TV<'ctx>) -> LResult<TV<'ctx>> {
        let ty = ScalarType::promote(ScalarType::promote(x.ty, y.ty), ScalarType::Int);
        let (a, c) = (self.convert(x, ty)?, self.convert(y, ty)?);
        let bl = &self.builder;
        let v: BasicValueEnum = if ty.is_integer() {
            let (a, c) = (a.into_int_value(), c.into_int_value());
            match op {
                BinOp::Add => b(bl.build_int_add(a, c, "add"))?.into(),
                BinOp::Sub => b(bl.build_int_sub(a, c, "sub"))?.into(),
                BinOp::Mul => b(bl.build_int_mul(a, c, "mul"))?.into(),
                BinOp::Div => b(bl.build_int_signed_div(a, c, "div"))?.into(),
                BinOp::Rem => b(bl.build_int_signed_rem(a, c, "rem"))?.into(),
                _ => return err(format!("`{}` is not arithmetic", op.c_symbol())),
            }
        } else {
            let (a, c) = (a.into_float_value(), c.into_float_value());
            match op {
                BinOp::Add => b(bl.build_float_add(a, c, "fadd"))?.into(),
                BinOp::Sub => b(bl.build_float_sub(a, c, "fsub"))?.into(),
                BinOp::Mul => b(bl.build_float_mul(a, c, "fmul"))?.into(),
                BinOp::Div => b(bl.build_float_div(a, c, "fdiv"))?.into(),
                BinOp::Rem => b(bl.build_float_rem(a, c, "frem"))?.into(),
                _ => return err(format!("`{}` is not arithmetic", op.c_symbol())),
            }
        };
        Ok(TV { v, ty })
    }

    fn cond_as_int(&mut self, e: &Expr) -> LResult<TV<'ctx>> {
        let c = self.cond(e)?;
        let v = b(self.builder.build_int_z_extend(c, self.context.i32_type(), "bool"))?;
        Ok(TV { v: v.into(), ty: ScalarType::Int })
    }

    /// A condition as an i1, with C's short-circuit evaluation of `&&` and `||`.
    fn cond(&mut self, e: &Expr) -> LResult<IntValue<'ctx>> {
        match &e.kind {
            ExprKind::Binary(op @ (BinOp::And | BinOp::Or), a, bb) => {
                let lhs = self.cond(a)?;
                let lhs_end = self.builder.get_insert_block().ok_or_else(|| LowerError("no block".into()))?;
                let rhs_block = self.context.append_basic_block(self.function, "rhs");
                let merge = self.context.append_basic_block(self.function, "logic");
                if *op == BinOp::And {
                    b(self.builder.build_conditional_branch(lhs, rhs_block, merge))?;
                } else {
                    b(self.builder.build_conditional_branch(lhs, merge, rhs_block))?;
                }
                self.builder.position_at_end(rhs_block);
                let rhs = self.cond(bb)?;
                let rhs_end = self.builder.get_insert_block().ok_or_else(|| LowerError("no block".into()))?;
                b(self.builder.build_unconditional_branch(merge))?;
                self.builder.position_at_end(merge);
                let phi = b(self.builder.build_phi(self.context.bool_type(), "sc"))?;
                let short = self.context.bool_type().const_int((*op == BinOp::Or) as u64, false);
                phi.add_incoming(&[(&short, lhs_end), (&rhs, rhs_end)]);
                Ok(phi.as_basic_value().into_int_value())
            }
            ExprKind::Unary(UnOp::Not, a) => {
                let c = self.cond(a)?;
                b(self.builder.build_not(c, "not"))
            }
            ExprKind::Binary(op, a, bb) if op.is_comparison() => {
                let (x, y) = (self.expr(a)?, self.expr(bb)?);
                let ty = ScalarType::promote(ScalarType::promote(x.ty, y.ty), ScalarType::Int);
                let (l, r) = (self.convert(x, ty)?, self.convert(y, ty)?);
                if ty.is_integer() {
                    let p = match op {
                        BinOp::Lt => IntPredicate::SLT,
                        BinOp::Le => IntPredicate::SLE,
                        BinOp::Gt => IntPredicate::SGT,
                        BinOp::Ge => IntPredicate::SGE,
                        BinOp::Eq => IntPredicate::EQ,
                        _ => IntPredicate::NE,
                    };
                    b(self.builder.build_int_compare(p, l.into_int_value(), r.into_int_value(), "cmp"))
                } else {
                    let p = match op {
                        BinOp::Lt => FloatPredicate::OLT,
                        BinOp::Le => FloatPredicate::OLE,
                        BinOp::Gt => FloatPredicate::OGT,
                        BinOp::Ge => FloatPredicate::OGE,
                        BinOp::Eq => FloatPredicate::OEQ,
                        _ => FloatPredicate::UNE,
                    };
                    b(self.builder.build_float_compare(p, l.into_float_value(), r.into_float_value(), "fcmp"))
                }
            }
            _ => {
                let x = self.expr(e)?;
                if x.ty.is_integer() {
                    let v = x.v.into_int_value();
                    b(self.builder.build_int_compare(IntPredicate::NE, v, v.get_type().const_zero(), "nz"))
                } else {
                    let v = x.v.into_float_value();
                    b(self.builder.build_float_compare(FloatPredicate::UNE, v, v.get_type().const_zero(), "nz"))
                }
            }
        }
    }

    fn conditional(&mut self, c: &Expr, a: &Expr, bb: &Expr) -> LResult<TV<'ctx>> {
        let cv = self.cond(c)?;
        let then_b = self.context.append_basic_block(self.function, "then");
        let else_b = self.context.append_basic_block(self.function, "else");
        let merge = self.context.append_basic_block(self.function, "sel");
        b(self.builder.build_conditional_branch(cv, then_b, else_b))?;
        // Both arms convert to the common type; it is known only after typing both, so lower
        // each arm, remember its end block, and convert at the arm's end.
        self.builder.position_at_end(then_b);
        let x = self.expr(a)?;
        let x_end = self.builder.get_insert_block().ok_or_else(|| LowerError("no block".into()))?;
        self.builder.position_at_end(else_b);
        let y = self.expr(bb)?;
        let y_end = self.builder.get_insert_block().ok_or_else(|| LowerError("no block".into()))?;
        let ty = ScalarType::promote(x.ty, y.ty);
        self.builder.position_at_end(x_end);
        let xv = self.convert(x, ty)?;
        b(self.builder.build_unconditional_branch(merge))?;
        self.builder.position_at_end(y_end);
        let yv = self.convert(y, ty)?;
        b(self.builder.build_unconditional_branch(merge))?;
        self.builder.position_at_end(merge);
        let phi = b(self.builder.build_phi(llvm_type(self.context, ty), "cond"))?;
        phi.add_incoming(&[(&xv, x_end), (&yv, y_end)]);
        Ok(TV { v: phi.as_basic_value(), ty })
    }

    fn math_call(&mut self, name: &str, args: &[Expr]) -> LResult<TV<'ctx>> {
        let vals: Vec<TV<'ctx>> = args.iter().map(|a| self.expr(a)).collect::<LResult<_>>()?;
        match (name, vals.as_slice()) {
            ("min" | "max", [x, y]) => {
                let ty = ScalarType::promote(ScalarType::promote(x.ty, y.ty), ScalarType::Int);
                let (a, c) = (self.convert(*x, ty)?, self.convert(*y, ty)?);
                let intr = match (ty.is_integer(), name) {
                    (true, "min") => "llvm.smin",
                    (true, _) => "llvm.smax",
                    (false, "min") => "llvm.minnum",
                    (false, _) => "llvm.maxnum",
                };
                let f = self.intrinsic(intr, &[llvm_type(self.context, ty)])?;
                Ok(TV { v: self.call(f, &[a, c], name)?, ty })
            }
            ("fmin" | "fmax" | "fminf" | "fmaxf", [x, y]) => {
                let ty = if name.ends_with('f') { ScalarType::Float } else { ScalarType::Double };
                let (a, c) = (self.convert(*x, ty)?, self.convert(*y, ty)?);
                let f = self.intrinsic(if name.starts_with("fmin") { "llvm.minnum" } else { "llvm.maxnum" }, &[llvm_type(self.context, ty)])?;
                Ok(TV { v: self.call(f, &[a, c], name)?, ty })
            }
            ("abs", [x]) if x.ty.is_integer() => {
                // A `char` is promoted first: `abs((char)-128)` is 128.
                let ty = ScalarType::promote(x.ty, x.ty);
                let a = self.convert(*x, ty)?;
                let f = self.intrinsic("llvm.abs", &[llvm_type(self.context, ty)])?;
                let no_poison = self.context.bool_type().const_zero().into();
                Ok(TV { v: self.call(f, &[a, no_poison], "abs")?, ty })
            }
            // CUDA overloads `abs` for floating arguments; the others have C's fixed types.
            ("abs" | "fabs" | "fabsf" | "sqrt" | "sqrtf", [x]) => {
                let ty = match name {
                    "abs" => x.ty,
                    "fabsf" | "sqrtf" => ScalarType::Float,
                    _ => ScalarType::Double,
                };
                let a = self.convert(*x, ty)?;
                let intr = if name.starts_with("sqrt") { "llvm.sqrt" } else { "llvm.fabs" };
                let f = self.intrinsic(intr, &[llvm_type(self.context, ty)])?;
                Ok(TV { v: self.call(f, &[a], name)?, ty })
            }
            ("exp" | "expf", [x]) => {
                // exp(x) = 2^(x * log2 e), with the hardware's ex2 (NVPTX has no exp lowering).
                let ty = if name == "expf" { ScalarType::Float } else { ScalarType::Double };
                let a = self.convert(*x, ty)?;
                let log2e = TV { v: self.context.f64_type().const_float(std::f64::consts::LOG2_E).into(), ty: ScalarType::Double };
                let k = self.convert(log2e, ty)?;
                let scaled = b(self.builder.build_float_mul(a.into_float_value(), k.into_float_value(), "x_log2e"))?;
                let v = self.approx("ex2", TV { v: scaled.into(), ty })?;
                Ok(TV { v, ty })
            }
            // For the register estimate, the shape of libdevice's code: log(x) = lg2(x) * ln 2
            // and pow(x, y) = 2^(y * lg2(x)) with the hardware's lg2 and ex2 (NVPTX lowers
            // neither `llvm.log` nor `llvm.pow`); the emitted CUDA calls the real functions.
            ("log" | "logf" | "pow" | "powf", [x, rest @ ..]) => {
                let ty = if name.ends_with('f') { ScalarType::Float } else { ScalarType::Double };
                let a = self.convert(*x, ty)?;
                let l = self.approx("lg2", TV { v: a, ty })?.into_float_value();
                if let [y] = rest {
                    let e = self.convert(*y, ty)?;
                    let scaled = b(self.builder.build_float_mul(e.into_float_value(), l, "y_lg2x"))?;
                    return Ok(TV { v: self.approx("ex2", TV { v: scaled.into(), ty })?, ty });
                }
                let ln2 = TV { v: self.context.f64_type().const_float(std::f64::consts::LN_2).into(), ty: ScalarType::Double };
                let k = self.convert(ln2, ty)?;
                Ok(TV { v: b(self.builder.build_float_mul(l, k.into_float_value(), name))?.into(), ty })
            }
            _ => err(format!("unsupported call `{name}` with {} arguments", args.len())),
        }
    }

    // ---- statements ----

    fn stmt(&mut self, s: &Stmt) -> LResult<()> {
        match &s.kind {
            StmtKind::Empty => Ok(()),
            StmtKind::LocalArray { name, .. } => err(format!("per-thread array `{}` was not made scalars", name.name)),
            StmtKind::Block(items) => {
                self.scopes.push(HashMap::new());
                let r = items.iter().try_for_each(|x| self.stmt(x));
                self.scopes.pop();
                r
            }
            StmtKind::Decl { ty, vars } => {
                for d in vars {
                    let init = self.expr(&d.init)?;
                    let v = self.convert(init, *ty)?;
                    let p = self.alloca(*ty, &d.name.name)?;
                    b(self.builder.build_store(p, v))?;
                    self.scopes.last_mut().expect("scope").insert(d.name.name.clone(), Slot::Mem(p, *ty));
                }
                Ok(())
            }
            StmtKind::Assign { target, op, value } => self.assign(target, *op, value),
            StmtKind::If { cond, then_branch, else_branch } => {
                let c = self.cond(cond)?;
                let then_b = self.context.append_basic_block(self.function, "if_then");
                let else_b = self.context.append_basic_block(self.function, "if_else");
                let merge = self.context.append_basic_block(self.function, "if_end");
                b(self.builder.build_conditional_branch(c, then_b, else_b))?;
                self.builder.position_at_end(then_b);
                self.scoped(then_branch)?;
                b(self.builder.build_unconditional_branch(merge))?;
                self.builder.position_at_end(else_b);
                if let Some(e) = else_branch {
                    self.scoped(e)?;
                }
                b(self.builder.build_unconditional_branch(merge))?;
                self.builder.position_at_end(merge);
                Ok(())
            }
            StmtKind::For(l) => self.serial_loop(l),
            StmtKind::Barrier => {
                let f = self.intrinsic("llvm.nvvm.barrier0", &[])?;
                b(self.builder.build_call(f, &[], ""))?;
                Ok(())
            }
            StmtKind::MetaFor(_) | StmtKind::MetaSchedule { .. } | StmtKind::Assume(_) | StmtKind::Assert(_) => {
                err("a kernel body holds no `meta_for`, `meta_schedule`, `assume` or `assert`")
            }
        }
    }

    fn scoped(&mut self, s: &Stmt) -> LResult<()> {
        self.scopes.push(HashMap::new());
        let r = self.stmt(s);
        self.scopes.pop();
        r
    }

    fn assign(&mut self, target: &Expr, op: AssignOp, value: &Expr) -> LResult<()> {
        let (ptr, ty) = match &target.kind {
            ExprKind::Var(n) => match self.lookup(n)? {
                Slot::Mem(p, ty) => (p, ty),
                Slot::Value(_) => return err(format!("`{n}` is read-only")),
            },
            ExprKind::Index { array, indices } => self.address(&array.name, indices)?,
            _ => return err("assignment to something that is not a variable or element"),
        };
        let rhs = self.expr(value)?;
        if op == AssignOp::AtomicAdd {
            // A reduction: `atomicrmw add`/`fadd` of the term in the element's type, as
            // `atomicAdd` does (monotonic: the kernel orders nothing by it).
            // inkwell's `build_atomicrmw` takes integers only; `fadd` goes through the C API.
            let term = self.convert(rhs, ty)?;
            let bin = if ty.is_integer() { LLVMAtomicRMWBinOp::LLVMAtomicRMWBinOpAdd } else { LLVMAtomicRMWBinOp::LLVMAtomicRMWBinOpFAdd };
            // SAFETY: the builder is positioned in this function, `ptr` points to an element of
            // `term`'s type, and both values belong to the builder's context.
            let rmw = unsafe { LLVMBuildAtomicRMW(self.builder.as_mut_ptr(), bin, ptr.as_value_ref(), term.as_value_ref(), LLVMAtomicOrdering::LLVMAtomicOrderingMonotonic, 0) };
            if rmw.is_null() {
                return err("LLVM could not build the atomic add of a reduction");
            }
            return Ok(());
        }
        let result = match op {
            AssignOp::Set => rhs,
            _ => {
                let old = TV { v: b(self.builder.build_load(llvm_type(self.context, ty), ptr, "old"))?, ty };
                let bop = match op {
                    AssignOp::Add => BinOp::Add,
                    AssignOp::Sub => BinOp::Sub,
                    AssignOp::Mul => BinOp::Mul,
                    AssignOp::Div => BinOp::Div,
                    AssignOp::Set | AssignOp::AtomicAdd => unreachable!("handled above"),
                };
                self.arith(bop, old, rhs)?
            }
        };
        let v = self.convert(result, ty)?;
        b(self.builder.build_store(ptr, v))?;
        Ok(())
    }

    fn serial_loop(&mut self, l: &ForLoop) -> LResult<()> {
        let init = self.expr(&l.lo)?;
        let v = self.convert(init, l.ty)?;
        let counter = self.alloca(l.ty, &l.var.name)?;
        b(self.builder.build_store(counter, v))?;
        let header = self.context.append_basic_block(self.function, "for_cond");
        let body = self.context.append_basic_block(self.function, "for_body");
        let exit = self.context.append_basic_block(self.function, "for_end");
        b(self.builder.build_unconditional_branch(header))?;
        self.builder.position_at_end(header);
        self.scopes.push(HashMap::new());
        self.scopes.last_mut().expect("scope").insert(l.var.name.clone(), Slot::Mem(counter, l.ty));
        let op = if l.inclusive { BinOp::Le } else { BinOp::Lt };
        let test = Expr::new(ExprKind::Binary(op, Box::new(Expr::new(ExprKind::Var(l.var.name.clone()), l.var.span)), Box::new(l.hi.clone())), l.var.span);
        let c = self.cond(&test)?;
        b(self.builder.build_conditional_branch(c, body, exit))?;
        self.builder.position_at_end(body);
        let r = self.scoped(&l.body);
        if r.is_ok() {
            let ty = llvm_type(self.context, l.ty).into_int_type();
            let cur = b(self.builder.build_load(ty, counter, "i"))?.into_int_value();
            let next = b(self.builder.build_int_add(cur, ty.const_int(l.step as u64, true), "next"))?;
            b(self.builder.build_store(counter, next))?;
            let latch = b(self.builder.build_unconditional_branch(header))?;
            if self.no_unroll {
                llvm_passes::pressure::disable_unrolling(self.context, latch);
            }
        }
        self.scopes.pop();
        r?;
        self.builder.position_at_end(exit);
        Ok(())
    }
}

/// Lower, check, and print the IR of a kernel (for tests and `--emit-llvm`).
pub fn kernel_ir(kernel: &Kernel) -> LResult<String> {
    let context = Context::create();
    let module = lower_kernel(&context, kernel)?;
    Ok(module.print_to_string().to_string())
}
