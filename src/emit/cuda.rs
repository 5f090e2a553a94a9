//! A [`Kernel`] as CUDA C++: the `__global__` kernel and a host launch wrapper.
//!
//! Contract: the emitted code computes what the kernel form computes, with the same C
//! semantics the LLVM lowering uses: multi-dimensional subscripts are linearised row-major in
//! 64-bit (`long`) arithmetic, CUDA's unsigned indices are read as `int`, literals keep their
//! precision, and shared arrays sit in the dynamic shared-memory block widest elements first,
//! packed without padding (so the launch asks for exactly the shared-memory counter). The
//! launch wrapper takes the function's parameters and the host loop counters, computes the
//! derived scalars, the grid, the block and the dynamic shared memory, launches nothing when the
//! grid or the block is empty (as the serial loops would run no iteration), and returns `cudaErrorInvalidConfiguration` for a grid the device cannot take.
//! Two host helpers follow, for the dispatch code: the compiled kernel's attributes and
//! opting into large dynamic shared memory.

use crate::frontend::ast::*;
use crate::frontend::model::KernelFunction;
use crate::kernel::{Kernel, KernelParam, KernelParamKind};
use crate::names::c_ident;
use constraints::Poly;
use std::fmt::Write;

/// The emitted text of one kernel. `header` lines are written as a leading comment block.
pub fn emit_kernel(function: &KernelFunction, kernel: &Kernel, header: &[String]) -> Result<String, String> {
    let mut out = String::new();
    for line in header {
        let _ = writeln!(out, "// {}", crate::names::c_comment(line));
    }
    let _ = writeln!(out, "#include <cuda_runtime.h>\n");
    if !restrict_pairs(kernel).is_empty() {
        // Guarded: several leaves' files may be compiled as one (`compiled::compile_leaves`).
        let _ = writeln!(out, "#ifndef METAFORK_OVERLAP_DEFINED\n#define METAFORK_OVERLAP_DEFINED");
        let _ = writeln!(out, "// Whether two byte ranges overlap (the kernel's arrays are `__restrict__`).");
        let _ = writeln!(out, "static inline bool metafork_overlap(const void *metafork_p, long metafork_p_bytes, const void *metafork_q, long metafork_q_bytes) {{");
        let _ = writeln!(out, "  unsigned long metafork_a = (unsigned long)metafork_p, metafork_b = (unsigned long)metafork_q;");
        let _ = writeln!(out, "  return metafork_p_bytes > 0 && metafork_q_bytes > 0 && metafork_a < metafork_b + (unsigned long)metafork_q_bytes && metafork_b < metafork_a + (unsigned long)metafork_p_bytes;");
        let _ = writeln!(out, "}}\n#endif\n");
    }
    emit_global(&mut out, kernel)?;
    out.push('\n');
    emit_launch(&mut out, function, kernel)?;
    out.push('\n');
    emit_runtime_helpers(&mut out, kernel);
    Ok(out)
}

/// The names of a kernel's runtime helpers: its attributes (for dispatch) and opting into
/// large dynamic shared memory.
pub fn attributes_name(kernel_name: &str) -> String {
    format!("metafork_attributes_{kernel_name}")
}

pub fn allow_shared_name(kernel_name: &str) -> String {
    format!("metafork_allow_shared_{kernel_name}")
}

/// Host helpers the dispatch code calls, so that it needs only this file's host symbols.
fn emit_runtime_helpers(out: &mut String, kernel: &Kernel) {
    let k = &kernel.name;
    let _ = writeln!(out, "// The compiled kernel's attributes (registers, maximum threads per block), for dispatch.");
    let _ = writeln!(out, "extern \"C\" cudaError_t {}(cudaFuncAttributes *metafork_attributes) {{", attributes_name(k));
    let _ = writeln!(out, "  return cudaFuncGetAttributes(metafork_attributes, (const void *){k});");
    let _ = writeln!(out, "}}\n");
    let _ = writeln!(out, "// Allow `bytes` of dynamic shared memory (needed above the device's default per block).");
    let _ = writeln!(out, "extern \"C\" cudaError_t {}(size_t metafork_bytes) {{", allow_shared_name(k));
    let _ = writeln!(out, "  return cudaFuncSetAttribute((const void *){k}, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)metafork_bytes);");
    let _ = writeln!(out, "}}");
}

fn expr(kind: ExprKind) -> Expr {
    Expr::new(kind, Default::default())
}

/// `e` with every variable and array named as generated code spells it ([`c_ident`]); called
/// once on each expression as it is printed, never on one already spelled.
pub fn spelled(e: &Expr) -> Expr {
    spelled_as(e, &|n| c_ident(n).into_owned())
}

fn spelled_as(e: &Expr, name: &dyn Fn(&str) -> String) -> Expr {
    let sub = |x: &Expr| spelled_as(x, name);
    let kind = match &e.kind {
        ExprKind::Var(v) => ExprKind::Var(name(v)),
        ExprKind::Index { array, indices } => ExprKind::Index { array: Ident { name: name(&array.name), span: array.span }, indices: indices.iter().map(sub).collect() },
        ExprKind::Unary(op, a) => ExprKind::Unary(*op, Box::new(sub(a))),
        ExprKind::Binary(op, a, b) => ExprKind::Binary(*op, Box::new(sub(a)), Box::new(sub(b))),
        ExprKind::Cond(c, a, b) => ExprKind::Cond(Box::new(sub(c)), Box::new(sub(a)), Box::new(sub(b))),
        ExprKind::Cast(t, a) => ExprKind::Cast(*t, Box::new(sub(a))),
        // A call names one of the language's math functions, never a user's name.
        ExprKind::Call(f, args) => ExprKind::Call(f.clone(), args.iter().map(sub).collect()),
        ExprKind::Int(_) | ExprKind::Float { .. } | ExprKind::Builtin(_) => e.kind.clone(),
    };
    Expr::new(kind, e.span)
}

/// Every name a kernel holds: parameters, shared arrays, declared and used names.
fn kernel_names(kernel: &Kernel) -> Vec<String> {
    let mut names: Vec<String> = kernel.params.iter().map(|p| p.name.clone()).chain(kernel.shared.iter().map(|s| s.name.clone())).collect();
    crate::strategy::walk::walk_stmts(&kernel.body, &mut |s| match &s.kind {
        StmtKind::Decl { vars, .. } => names.extend(vars.iter().map(|d| d.name.name.clone())),
        StmtKind::For(l) => names.push(l.var.name.clone()),
        _ => {}
    });
    for s in &kernel.body {
        crate::strategy::walk::walk_exprs(s, &mut |x| x.names(&mut names));
    }
    names
}

/// How a kernel's CUDA spells the names the tool made up (`$p_b0` is `metafork_p_b0` there,
/// `$:c_tile0` is `c_tile0`), for texts about its code: a message then names what the user
/// finds in the leaf's `.cu` file. Built once per kernel (it reads all the kernel's names).
pub struct KernelSpelling(crate::names::Spelling);

impl KernelSpelling {
    pub fn of(kernel: &Kernel) -> KernelSpelling {
        KernelSpelling(crate::names::Spelling::new(kernel_names(kernel).iter().map(String::as_str)))
    }

    /// `text` with each made-up name spelled; a `$` inside a name (a model's copy `i$2`) is
    /// left alone.
    pub fn text(&self, text: &str) -> String {
        let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(at) = rest.find(crate::names::INTERNAL) {
            let (before, from) = rest.split_at(at);
            out.push_str(before);
            let inside_a_name = out.chars().next_back().is_some_and(is_ident);
            let stem_start = 1 + usize::from(from[1..].starts_with(':'));
            let stem_len = from[stem_start..].find(|c: char| !is_ident(c)).unwrap_or(from.len() - stem_start);
            if inside_a_name || stem_len == 0 {
                out.push(crate::names::INTERNAL);
                rest = &from[1..];
                continue;
            }
            let name = &from[..stem_start + stem_len];
            out.push_str(&self.0.ident(name));
            rest = &from[name.len()..];
        }
        out.push_str(rest);
        out
    }
}

/// One text about `kernel`'s code with its made-up names spelled ([`KernelSpelling`]).
pub fn spell_internal_names(kernel: &Kernel, text: &str) -> String {
    if !text.contains(crate::names::INTERNAL) {
        return text.to_string();
    }
    KernelSpelling::of(kernel).text(text)
}

fn var(name: &str) -> Expr {
    expr(ExprKind::Var(name.into()))
}

/// A polynomial with integer coefficients as a `long` C expression.
pub fn poly_expr(p: &Poly) -> Result<Expr, String> {
    poly_expr_as(p, ScalarType::Long)
}

/// A polynomial as a C expression of type `ty` (`int` or `long`). Rational coefficients (a
/// coarsened block's extent `B0/8`, say): the integer terms as they are, plus the other terms
/// as an integer polynomial over their common denominator, `(...) / L`; exact wherever the code
/// runs, because a kernel with such an extent carries the divisibility that makes it an integer
/// among its constraints.
pub(crate) fn poly_expr_as(p: &Poly, ty: ScalarType) -> Result<Expr, String> {
    let denominator = p.common_denominator();
    if denominator != num_bigint::BigInt::from(1) {
        // The integer terms as they are, the others over their denominator: a tile position
        // `ty*B0 + 1/8*B0^2 + z` prints as `ty*B0 + z + B0*B0/8`, whose quotient is uniform
        // (computed once), not a division of every position.
        let l: i64 = (&denominator).try_into().map_err(|_| format!("denominator too large in `{p}`"))?;
        let (mut whole, mut fraction) = (Poly::zero(), Poly::zero());
        for (m, c) in p.terms() {
            let t = Poly::term(c.clone(), m.clone());
            if c.is_integer() {
                whole = whole + t;
            } else {
                fraction = fraction + t;
            }
        }
        let quotient = expr(ExprKind::Binary(BinOp::Div, Box::new(poly_expr_as(&(&fraction * &Poly::int(l)), ty)?), Box::new(expr(ExprKind::Int(l)))));
        if whole.is_zero() {
            return Ok(quotient);
        }
        return Ok(expr(ExprKind::Binary(BinOp::Add, Box::new(poly_expr_as(&whole, ty)?), Box::new(quotient))));
    }
    let mut sum: Option<Expr> = None;
    for (m, c) in p.terms() {
        let k: i64 = c.numer().try_into().map_err(|_| format!("coefficient too large in `{p}`"))?;
        // A cast on the first factor gives the whole product its type; a unit coefficient is left out.
        let mut factors: Vec<Expr> = Vec::new();
        if k.abs() != 1 || m.is_one() {
            factors.push(expr(ExprKind::Int(k.abs())));
        }
        for (v, e) in m.factors() {
            for _ in 0..*e {
                factors.push(var(v.name()));
            }
        }
        let first = expr(ExprKind::Cast(ty, Box::new(factors.remove(0))));
        let term = factors.into_iter().fold(first, |acc, f| expr(ExprKind::Binary(BinOp::Mul, Box::new(acc), Box::new(f))));
        sum = Some(match sum {
            None if k < 0 => expr(ExprKind::Unary(UnOp::Neg, Box::new(term))),
            None => term,
            Some(s) => expr(ExprKind::Binary(if k < 0 { BinOp::Sub } else { BinOp::Add }, Box::new(s), Box::new(term))),
        });
    }
    Ok(sum.unwrap_or_else(|| expr(ExprKind::Int(0))))
}

/// Rewrite an expression into what CUDA C prints directly.
struct Cify<'k> {
    spelling: crate::names::Spelling,
    extents: std::collections::HashMap<&'k str, &'k [Poly]>,
    /// The element type of every array, for the atomic adds of reductions.
    elems: std::collections::HashMap<&'k str, ScalarType>,
    /// Emit `#pragma unroll 1` before every loop (register pressure, level 1).
    no_unroll: bool,
    /// Shared tiles whose subscripts are linearised in `int` (`strategy::narrow`);
    /// every other array's are linearised in `long`.
    narrow: std::collections::HashSet<&'k str>,
    /// The declared types of the code's names: for `min`/`max` of two types
    /// (`emit::overloads`) and, where `tidy` is set, to print without needless casts
    /// (`emit::casts`).
    types: super::casts::DeclaredTypes,
    /// Drop the casts `emit::casts` finds needless (kernels); host code prints every cast.
    tidy: bool,
}

impl Cify<'_> {
    fn expr(&self, e: &Expr) -> Result<Expr, String> {
        let k = match &e.kind {
            ExprKind::Builtin(_) => ExprKind::Cast(ScalarType::Int, Box::new(e.clone())),
            ExprKind::Index { array, indices } => {
                let ext = self.extents.get(array.name.as_str()).ok_or_else(|| format!("unknown array `{}`", array.name))?;
                let index_ty = if self.narrow.contains(array.name.as_str()) { ScalarType::Int } else { ScalarType::Long };
                let mut lin: Option<Expr> = None;
                for (d, i) in indices.iter().enumerate() {
                    let i = expr(ExprKind::Cast(index_ty, Box::new(self.expr(i)?)));
                    lin = Some(match lin {
                        None => i,
                        Some(acc) => {
                            let scaled = expr(ExprKind::Binary(BinOp::Mul, Box::new(acc), Box::new(poly_expr_as(&ext[d], index_ty)?)));
                            expr(ExprKind::Binary(BinOp::Add, Box::new(scaled), Box::new(i)))
                        }
                    });
                }
                ExprKind::Index { array: array.clone(), indices: lin.into_iter().collect() }
            }
            ExprKind::Unary(op, a) => ExprKind::Unary(*op, Box::new(self.expr(a)?)),
            ExprKind::Binary(op, a, b) => ExprKind::Binary(*op, Box::new(self.expr(a)?), Box::new(self.expr(b)?)),
            ExprKind::Cond(c, a, b) => ExprKind::Cond(Box::new(self.expr(c)?), Box::new(self.expr(a)?), Box::new(self.expr(b)?)),
            ExprKind::Cast(t, a) => ExprKind::Cast(*t, Box::new(self.expr(a)?)),
            ExprKind::Call(f, args) => {
                let args = args.iter().map(|a| self.expr(a)).collect::<Result<_, _>>()?;
                ExprKind::Call(f.clone(), super::overloads::resolve(&f.name, args, &self.types, &self.elems))
            }
            _ => e.kind.clone(),
        };
        Ok(Expr::new(k, e.span))
    }

    /// An expression as printed: rewritten, then spelled.
    fn out(&self, e: &Expr) -> Result<Expr, String> {
        let x = self.expr(e)?;
        let x = if self.tidy { self.types.tidy(&x) } else { x };
        Ok(spelled_as(&x, &|n| self.spelling.ident(n).into_owned()))
    }

    fn name<'n>(&self, name: &'n str) -> std::borrow::Cow<'n, str> {
        self.spelling.ident(name)
    }

    fn stmt(&self, s: &Stmt, depth: usize, out: &mut String) -> Result<(), String> {
        let pad = "  ".repeat(depth);
        match &s.kind {
            StmtKind::Empty => {}
            StmtKind::LocalArray { name, .. } => return Err(format!("per-thread array `{}` was not made scalars", name.name)),
            StmtKind::Block(items) => {
                let _ = writeln!(out, "{pad}{{");
                for x in items {
                    self.stmt(x, depth + 1, out)?;
                }
                let _ = writeln!(out, "{pad}}}");
            }
            StmtKind::Decl { ty, vars } => {
                for d in vars {
                    let _ = writeln!(out, "{pad}{ty} {} = {};", self.name(&d.name.name), self.out(&d.init)?);
                }
            }
            StmtKind::Assign { target, op: AssignOp::AtomicAdd, value } => {
                // A reduction: the term in the element's type, added atomically. A 64-bit
                // integer adds as `unsigned long long` (two's complement: the same bits).
                let ExprKind::Index { array, .. } = &target.kind else { return Err("a reduction whose target is not an array element".into()) };
                let elem = *self.elems.get(array.name.as_str()).ok_or_else(|| format!("unknown array `{}`", array.name))?;
                let (place, term) = (self.out(target)?, self.out(value)?);
                let _ = match elem {
                    ScalarType::Long => writeln!(out, "{pad}atomicAdd((unsigned long long *)&{place}, (unsigned long long)({term}));"),
                    _ => writeln!(out, "{pad}atomicAdd(&{place}, ({elem})({term}));"),
                };
            }
            StmtKind::Assign { target, op, value } => {
                let _ = writeln!(out, "{pad}{} {} {};", self.out(target)?, op.c_symbol(), self.out(value)?);
            }
            StmtKind::If { cond, then_branch, else_branch } => {
                let _ = writeln!(out, "{pad}if ({}) {{", self.out(cond)?);
                self.body(then_branch, depth + 1, out)?;
                match else_branch {
                    Some(e) => {
                        let _ = writeln!(out, "{pad}}} else {{");
                        self.body(e, depth + 1, out)?;
                        let _ = writeln!(out, "{pad}}}");
                    }
                    None => {
                        let _ = writeln!(out, "{pad}}}");
                    }
                }
            }
            StmtKind::For(l) => {
                let v = self.name(&l.var.name);
                let step = if l.step == 1 { format!("{v}++") } else { format!("{v} += {}", l.step) };
                if self.no_unroll {
                    let _ = writeln!(out, "{pad}#pragma unroll 1");
                }
                let _ = writeln!(out, "{pad}for ({} {v} = {}; {v} {} {}; {step}) {{", l.ty, self.out(&l.lo)?, if l.inclusive { "<=" } else { "<" }, self.out(&l.hi)?);
                self.body(&l.body, depth + 1, out)?;
                let _ = writeln!(out, "{pad}}}");
            }
            StmtKind::Barrier => {
                let _ = writeln!(out, "{pad}__syncthreads();");
            }
            StmtKind::MetaFor(_) | StmtKind::MetaSchedule { .. } | StmtKind::Assume(_) | StmtKind::Assert(_) => {
                return Err("a kernel body holds no `meta_for`, `meta_schedule`, `assume` or `assert`".into())
            }
        }
        Ok(())
    }

    /// The statements of a branch or loop body, without an extra brace level.
    fn body(&self, s: &Stmt, depth: usize, out: &mut String) -> Result<(), String> {
        match &s.kind {
            StmtKind::Block(items) => items.iter().try_for_each(|x| self.stmt(x, depth, out)),
            _ => self.stmt(s, depth, out),
        }
    }
}

/// Expressions of a function's own statements (its host code) as generated C++ prints them:
/// subscripts linearised row-major in `long` over the function's arrays, names spelled by
/// [`c_ident`] as the launch wrappers spell them. For gpu-check's serial programs.
pub struct HostExprs<'f>(Cify<'f>);

impl<'f> HostExprs<'f> {
    pub fn new(function: &'f KernelFunction) -> HostExprs<'f> {
        let extents = function.arrays.iter().map(|a| (a.name.as_str(), a.extents.as_slice())).collect();
        let elems = function.arrays.iter().map(|a| (a.name.as_str(), a.elem)).collect();
        HostExprs(Cify { spelling: crate::names::Spelling::new(std::iter::empty()), extents, elems, no_unroll: false, narrow: Default::default(), types: super::casts::DeclaredTypes::of_function(function), tidy: false })
    }

    pub fn expr(&self, e: &Expr) -> Result<Expr, String> {
        self.0.out(e)
    }

    pub fn name<'n>(&self, name: &'n str) -> std::borrow::Cow<'n, str> {
        self.0.name(name)
    }
}

fn params_list(kernel: &Kernel) -> String {
    kernel
        .params
        .iter()
        .map(|p| match &p.kind {
            KernelParamKind::Scalar(t) => format!("{t} {}", c_ident(&p.name)),
            // The language's arrays are distinct objects; the launch wrapper refuses overlapping
            // ranges where one is written, so `__restrict__` holds.
            KernelParamKind::Array { elem, is_const, .. } => format!("{}{elem} *__restrict__ {}", if *is_const { "const " } else { "" }, c_ident(&p.name)),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The code's assumptions that an integer parameter is a multiple of `m` (a coarsened block's
/// `B0 % 8 == 0`, [`Kernel::assumptions`]), as (parameter, m). The code is only the program
/// where they hold: the launch checks them, and the kernel states them to nvcc
/// (`__builtin_assume`), which then knows addresses such as `z*B0 + 8*ty` in a transposed tile
/// 16-byte aligned and reads a thread's four neighbours with one load (bench/RESULTS.md,
/// "Contiguous micro-tiles"). Only single parameters: a product could overflow `int` in the test.
pub fn assumed_multiples(kernel: &Kernel) -> Vec<(String, u32)> {
    let mut out: Vec<(String, u32)> = Vec::new();
    for c in &kernel.assumptions {
        let (constraints::Rel::Dvd(m), Some(v)) = (c.rel(), c.poly().as_var()) else { continue };
        let integer_param = kernel.params.iter().any(|p| p.name == v.name() && matches!(&p.kind, KernelParamKind::Scalar(t) if t.is_integer()));
        if integer_param && !out.iter().any(|(n, k)| n == v.name() && *k == m) {
            out.push((v.name().to_string(), m));
        }
    }
    out
}

/// `name` of the shared-memory layout variable holding the byte offset after array `i`.
fn emit_shared_layout(out: &mut String, kernel: &Kernel, c: &Cify, pad: &str) -> Result<(), String> {
    if kernel.shared.is_empty() {
        return Ok(());
    }
    let _ = writeln!(out, "{pad}extern __shared__ __align__(16) unsigned char metafork_shared[];");
    let _ = writeln!(out, "{pad}long metafork_offset = 0;");
    for s in kernel.shared_layout() {
        let bytes = c.out(&poly_expr(&(s.elements() * Poly::int(s.elem.size_bytes() as i64)))?)?;
        let _ = writeln!(out, "{pad}{} *{} = ({} *)(metafork_shared + metafork_offset);", s.elem, c.name(&s.name), s.elem);
        let _ = writeln!(out, "{pad}metafork_offset += {bytes};");
    }
    let _ = writeln!(out, "{pad}(void)metafork_offset;");
    Ok(())
}

fn emit_global(out: &mut String, kernel: &Kernel) -> Result<(), String> {
    let mut extents: std::collections::HashMap<&str, &[Poly]> = std::collections::HashMap::new();
    let mut elems = std::collections::HashMap::new();
    for p in &kernel.params {
        if let KernelParamKind::Array { extents: e, elem, .. } = &p.kind {
            extents.insert(&p.name, e);
            elems.insert(p.name.as_str(), *elem);
        }
    }
    for s in &kernel.shared {
        extents.insert(&s.name, &s.extents);
        elems.insert(s.name.as_str(), s.elem);
    }
    let narrow = if kernel.narrow_index { kernel.shared.iter().map(|s| s.name.as_str()).collect() } else { Default::default() };
    let names = kernel_names(kernel);
    let c = Cify { spelling: crate::names::Spelling::new(names.iter().map(String::as_str)), extents, elems, no_unroll: kernel.no_unroll, narrow, types: super::casts::DeclaredTypes::of_kernel(kernel), tidy: true };
    // Register pressure, level 3: the same cap LLVM's `.maxnreg` gives ptxas.
    let cap = kernel.max_registers.map_or(String::new(), |n| format!("__maxnreg__({n}) "));
    let _ = writeln!(out, "extern \"C\" __global__ void {cap}{}({}) {{", kernel.name, params_list(kernel));
    for (name, m) in assumed_multiples(kernel) {
        let _ = writeln!(out, "  __builtin_assume({} % {m} == 0);  // the launch checks it", c_ident(&name));
    }
    emit_shared_layout(out, kernel, &c, "  ")?;
    for s in &without_unused_locals(&kernel.body) {
        c.stmt(s, 1, out)?;
    }
    let _ = writeln!(out, "}}");
    Ok(())
}

/// The body without declarations of locals nothing reads, removed until none is left (a
/// strategy can leave them: caching turns `a[p1]` into a tile access and leaves `int p1 = p +
/// 1;`), so nvcc has no unused variable to warn about. A declaration's scope is the rest of its
/// block up to a redeclaration of its name; a read of a nested declaration of the same name (a
/// write-back's block re-declaring the body's locals) does not keep it. Initialisers have no
/// side effects (the language has none in expressions), so the code that runs is the same; the
/// kernel form itself (what the verifier runs) is left as it is.
fn without_unused_locals(body: &[Stmt]) -> Vec<Stmt> {
    fn expr_reads(e: &Expr, name: &str) -> bool {
        let mut found = false;
        walk_expr(e, &mut |x| found |= matches!(&x.kind, ExprKind::Var(v) if v == name));
        found
    }
    /// Whether the statements of one block read this declaration of `name` (the scan stops
    /// where the block declares the name again).
    fn reads(stmts: &[Stmt], name: &str) -> bool {
        for s in stmts {
            if let StmtKind::Decl { vars, .. } = &s.kind {
                for d in vars {
                    if expr_reads(&d.init, name) {
                        return true;
                    }
                    if d.name.name == name {
                        return false;
                    }
                }
            } else if stmt_reads(s, name) {
                return true;
            }
        }
        false
    }
    fn stmt_reads(s: &Stmt, name: &str) -> bool {
        match &s.kind {
            StmtKind::Block(items) => reads(items, name),
            StmtKind::Decl { .. } => reads(std::slice::from_ref(s), name),
            StmtKind::If { cond, then_branch, else_branch } => expr_reads(cond, name) || stmt_reads(then_branch, name) || else_branch.as_ref().is_some_and(|e| stmt_reads(e, name)),
            // The loop's counter is declared by the loop: it hides `name` in the bound and body.
            StmtKind::For(l) | StmtKind::MetaFor(l) => expr_reads(&l.lo, name) || (l.var.name != name && (expr_reads(&l.hi, name) || stmt_reads(&l.body, name))),
            StmtKind::Assign { target, value, .. } => expr_reads(target, name) || expr_reads(value, name),
            StmtKind::Assume(e) | StmtKind::Assert(e) => expr_reads(e, name),
            StmtKind::Empty | StmtKind::Barrier => false,
            // Not in kernel forms; taken as reading every name, to be safe.
            StmtKind::LocalArray { .. } | StmtKind::MetaSchedule { .. } => true,
        }
    }
    fn prune_block(items: &mut Vec<Stmt>, removed: &mut bool) {
        items.iter_mut().for_each(|x| prune_inside(x, removed));
        for i in 0..items.len() {
            let (head, rest) = items.split_at_mut(i + 1);
            if let StmtKind::Decl { vars, .. } = &mut head[i].kind {
                let inits: Vec<Expr> = vars.iter().map(|d| d.init.clone()).collect();
                let before = vars.len();
                let mut k = 0;
                vars.retain(|d| {
                    k += 1;
                    let later = inits[k..].iter().any(|x| {
                        let mut f = false;
                        walk_expr(x, &mut |e| f |= matches!(&e.kind, ExprKind::Var(v) if *v == d.name.name));
                        f
                    });
                    later || reads(rest, &d.name.name)
                });
                *removed |= vars.len() != before;
            }
        }
        items.retain(|s| !matches!(&s.kind, StmtKind::Decl { vars, .. } if vars.is_empty()));
    }
    /// A statement's own blocks; a declaration standing alone as a branch or loop body has an
    /// empty scope.
    fn prune_inside(s: &mut Stmt, removed: &mut bool) {
        let alone = |b: &mut Stmt, removed: &mut bool| {
            if matches!(b.kind, StmtKind::Decl { .. }) {
                b.kind = StmtKind::Empty;
                *removed = true;
            } else {
                prune_inside(b, removed);
            }
        };
        match &mut s.kind {
            StmtKind::Block(items) => prune_block(items, removed),
            StmtKind::If { then_branch, else_branch, .. } => {
                alone(then_branch, removed);
                if let Some(e) = else_branch {
                    alone(e, removed);
                }
            }
            StmtKind::For(l) => alone(&mut l.body, removed),
            _ => {}
        }
    }
    let mut body = body.to_vec();
    loop {
        let mut removed = false;
        prune_block(&mut body, &mut removed);
        if !removed {
            return body;
        }
    }
}

/// The bytes of dynamic shared memory the kernel needs, as a C expression.
pub fn shared_bytes_expr(kernel: &Kernel) -> Result<String, String> {
    if kernel.shared.is_empty() {
        return Ok("0".into());
    }
    // Packed, widest first, exactly as the kernel lays the arrays out.
    let bytes: Vec<String> = kernel
        .shared_layout()
        .iter()
        .map(|s| poly_expr(&(s.elements() * Poly::int(s.elem.size_bytes() as i64))).map(|e| format!("({})", spelled(&e))))
        .collect::<Result<_, _>>()?;
    Ok(bytes.join(" + "))
}

/// The divisors of every `/` and `%` in `e`, innermost first.
/// Whether `e` is an integer expression of `function`'s host scalars: no floating literal, and
/// every name an integer parameter or integer derived scalar.
fn is_integer_valued(function: &KernelFunction, e: &Expr) -> bool {
    let mut integer = true;
    walk_expr(e, &mut |x| match &x.kind {
        ExprKind::Float { .. } => integer = false,
        ExprKind::Cast(t, _) if !t.is_integer() => integer = false,
        ExprKind::Var(n) => {
            let ty = function.params.iter().find(|p| p.name == *n).map(|p| p.ty).or_else(|| function.derived.iter().find(|d| d.name == *n).map(|d| d.ty));
            integer &= ty.is_some_and(|t| t.is_integer());
        }
        _ => {}
    });
    integer
}

pub fn divisors(e: &Expr) -> Vec<&Expr> {
    let mut out = Vec::new();
    fn walk<'e>(e: &'e Expr, out: &mut Vec<&'e Expr>) {
        match &e.kind {
            ExprKind::Binary(op, a, b) => {
                walk(a, out);
                walk(b, out);
                if matches!(op, BinOp::Div | BinOp::Rem) && !matches!(b.kind, ExprKind::Int(v) if v != 0) {
                    out.push(b);
                }
            }
            ExprKind::Unary(_, a) | ExprKind::Cast(_, a) => walk(a, out),
            ExprKind::Cond(c, a, b) => [c, a, b].into_iter().for_each(|x| walk(x, out)),
            ExprKind::Index { indices, .. } => indices.iter().for_each(|x| walk(x, out)),
            ExprKind::Call(_, args) => args.iter().for_each(|x| walk(x, out)),
            ExprKind::Int(_) | ExprKind::Float { .. } | ExprKind::Var(_) | ExprKind::Builtin(_) => {}
        }
    }
    walk(e, &mut out);
    out
}

/// The launch wrapper's name for a kernel.
pub fn launch_name(kernel: &Kernel) -> String {
    launch_name_of(&kernel.name)
}

pub fn launch_name_of(kernel_name: &str) -> String {
    format!("metafork_launch_{kernel_name}")
}

/// The launch wrapper's parameters, as (declaration, name): the kernel's, less the derived
/// scalars (the wrapper computes them). Every leaf of a schedule has the same list.
pub fn launch_params(function: &KernelFunction, kernel: &Kernel) -> Vec<(String, String)> {
    let derived: Vec<&str> = function.derived.iter().map(|d| d.name.as_str()).collect();
    kernel
        .params
        .iter()
        .filter(|p| !derived.contains(&p.name.as_str()))
        .map(|p| {
            let name = c_ident(&p.name).into_owned();
            // An array as the program spells its type: a caller's `char *` is no `signed char *`
            // in C++, nor a `long long *` a `long *`. A scalar converts implicitly, and keeps the
            // kernel's spelling (a `signed char` value says what the kernel computes with).
            let decl = match &p.kind {
                KernelParamKind::Scalar(t) => format!("{t} {name}"),
                KernelParamKind::Array { elem, is_const, .. } => format!("{}{} *{name}", if *is_const { "const " } else { "" }, function.spelling_of(&p.name).unwrap_or(elem.c_name())),
            };
            (decl, name)
        })
        .collect()
}

/// The pairs of array parameters `__restrict__` needs distinct: every pair of which one is
/// written (two arrays only read may overlap).
fn restrict_pairs(kernel: &Kernel) -> Vec<(&KernelParam, &KernelParam)> {
    let arrays: Vec<&KernelParam> = kernel.params.iter().filter(|p| matches!(p.kind, KernelParamKind::Array { .. })).collect();
    let written = |p: &KernelParam| matches!(p.kind, KernelParamKind::Array { is_const: false, .. });
    let mut pairs = Vec::new();
    for (i, a) in arrays.iter().enumerate() {
        for b in &arrays[i + 1..] {
            if written(a) || written(b) {
                pairs.push((*a, *b));
            }
        }
    }
    pairs
}

/// An array parameter's size in bytes, as a `long` C expression.
fn array_bytes(p: &KernelParam) -> Result<String, String> {
    let KernelParamKind::Array { elem, extents, .. } = &p.kind else { return Err(format!("`{}` is not an array", p.name)) };
    let elements = extents.iter().fold(Poly::int(elem.size_bytes() as i64), |acc, e| acc * e.clone());
    Ok(spelled(&poly_expr_as(&elements, ScalarType::Long)?).to_string())
}

fn emit_launch(out: &mut String, function: &KernelFunction, kernel: &Kernel) -> Result<(), String> {
    let own: Vec<String> = launch_params(function, kernel).into_iter().map(|(decl, _)| decl).collect();
    let _ = writeln!(out, "// Launch `{}`: grid, block and dynamic shared memory from the parameters.", kernel.name);
    let _ = writeln!(out, "extern \"C\" cudaError_t {}({}{}cudaStream_t metafork_stream) {{", launch_name(kernel), own.join(", "), if own.is_empty() { "" } else { ", " });
    // Host expressions as the serial program's C computes them (`min(float, int)` cast).
    let host = HostExprs::new(function);
    // Each divisor is tested once, before its first division (`N / B` in two grid extents).
    let mut tested: Vec<String> = Vec::new();
    let mut test_divisor = |out: &mut String, divisor: &Expr| {
        let text = spelled(divisor).to_string();
        if !tested.contains(&text) {
            let _ = writeln!(out, "  if (({text}) == 0) return cudaErrorInvalidValue;");
            tested.push(text);
        }
    };
    for d in function.derived.iter().filter(|d| kernel.params.iter().any(|p| p.name == d.name)) {
        // C leaves an integer division by zero undefined: such a point has no launch. (A
        // floating division by zero is defined, and the serial program goes on with it.)
        for divisor in divisors(&d.value).into_iter().filter(|x| is_integer_valued(function, x)) {
            test_divisor(out, divisor);
        }
        let _ = writeln!(out, "  {} {} = {};", d.ty, c_ident(&d.name), host.expr(&d.value)?);
    }
    for (name, m) in assumed_multiples(kernel) {
        let _ = writeln!(out, "  if ({} % {m} != 0) return cudaErrorInvalidValue;  // the code assumes it", c_ident(&name));
    }
    let dims = ["x", "y", "z"];
    let grid: Vec<String> = (0..3).map(|i| kernel.grid.get(i).map_or(Ok("1".into()), |e| host.expr(e).map(|e| format!("(long)({e})")))).collect::<Result<_, String>>()?;
    let block: Vec<String> = (0..3).map(|i| kernel.block.get(i).map_or(Ok("1".into()), |p| poly_expr(p).map(|e| spelled(&e).to_string()))).collect::<Result<_, _>>()?;
    for divisor in kernel.grid.iter().flat_map(divisors) {
        test_divisor(out, divisor);
    }
    for (i, d) in dims.iter().enumerate() {
        let _ = writeln!(out, "  long metafork_grid_{d} = {}, metafork_block_{d} = {};", grid[i], block[i]);
    }
    // An empty grid or block (a block loop from 1 to `B` at `B == 1`) is a nest the serial
    // loops run no iteration of.
    let _ = writeln!(out, "  if (metafork_grid_x <= 0 || metafork_grid_y <= 0 || metafork_grid_z <= 0 || metafork_block_x <= 0 || metafork_block_y <= 0 || metafork_block_z <= 0) return cudaSuccess;  // no iteration to run");
    let _ = writeln!(out, "  if (metafork_grid_x > 2147483647L || metafork_grid_y > 65535 || metafork_grid_z > 65535)");
    let _ = writeln!(out, "    return cudaErrorInvalidConfiguration;");
    for (a, b) in restrict_pairs(kernel) {
        let (na, nb) = (c_ident(&a.name), c_ident(&b.name));
        let _ = writeln!(out, "  if (metafork_overlap({na}, {}, {nb}, {})) return cudaErrorInvalidValue;  // `{na}` and `{nb}` overlap", array_bytes(a)?, array_bytes(b)?);
    }
    let _ = writeln!(out, "  size_t metafork_shared_bytes = (size_t){};", shared_bytes_expr(kernel)?);
    // An array the program spells otherwise than the kernel (`char` for `signed char`, `long
    // long` for `long`: the same bytes) is passed as the kernel's type.
    let args: Vec<String> = kernel
        .params
        .iter()
        .map(|p| {
            let name = c_ident(&p.name).into_owned();
            match &p.kind {
                KernelParamKind::Array { elem, is_const, .. } if function.spelling_of(&p.name).is_some_and(|s| s != elem.c_name()) => format!("({}{} *){name}", if *is_const { "const " } else { "" }, elem.c_name()),
                _ => name,
            }
        })
        .collect();
    let _ = writeln!(out, "  {}<<<dim3(metafork_grid_x, metafork_grid_y, metafork_grid_z), dim3(metafork_block_x, metafork_block_y, metafork_block_z), metafork_shared_bytes, metafork_stream>>>({});", kernel.name, args.join(", "));
    let _ = writeln!(out, "  return cudaGetLastError();");
    let _ = writeln!(out, "}}");
    Ok(())
}
