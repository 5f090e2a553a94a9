//! Casts no reader would write, removed from the CUDA the emitter prints (issue 27.3).
//!
//! Contract: [`DeclaredTypes::tidy`] returns an expression that computes the same value, in the
//! same C types, as its input; it only drops
//! - a cast of an integer expression to the type it already has (`(int)B0` with `int B0`,
//!   `(int)(int)threadIdx.x`), and
//! - a widening `(long)x` of an `int` operand of a comparison whose other side is `int` (or is
//!   itself such a widening): comparing two `int` values in `long` or in `int` gives the same
//!   answer, and no arithmetic moves into the narrower type.
//!
//! Types are known for the kernel's scalar parameters, its declared locals and loop counters
//! (a name declared with two different types anywhere in the kernel counts as unknown), and
//! integer literals; everything else (array elements, `threadIdx`, calls) is unknown, and a
//! cast whose operand's type is unknown stays.

use crate::frontend::ast::*;
use crate::kernel::{Kernel, KernelParamKind};
use std::collections::HashMap;

/// The declared type of every name of a kernel (or of a function's host code) whose type is
/// unambiguous; [`Self::tidy`] reads the integer ones.
pub struct DeclaredTypes(HashMap<String, Option<ScalarType>>);

impl DeclaredTypes {
    /// A function's scalar parameters and derived scalars, and the locals and loop counters
    /// of its body (serial and `meta_for` loops): the names its host code and serial
    /// schedules print.
    pub fn of_function(function: &crate::frontend::model::KernelFunction) -> DeclaredTypes {
        let mut types = DeclaredTypes(HashMap::new());
        for p in &function.params {
            types.declare(&p.name, p.ty);
        }
        for d in &function.derived {
            types.declare(&d.name, d.ty);
        }
        for s in &function.body {
            types.declare_in(s);
        }
        types
    }

    /// Names declared with the given types, as a code's declarations would declare them.
    #[cfg(test)]
    pub(super) fn of_names(names: &[(&str, ScalarType)]) -> DeclaredTypes {
        let mut types = DeclaredTypes(HashMap::new());
        names.iter().for_each(|(n, t)| types.declare(n, *t));
        types
    }

    /// The type `name` is declared with, where it has one.
    pub fn declared(&self, name: &str) -> Option<ScalarType> {
        self.0.get(name).copied().flatten()
    }

    pub fn of_kernel(kernel: &Kernel) -> DeclaredTypes {
        let mut types = DeclaredTypes(HashMap::new());
        for p in &kernel.params {
            if let KernelParamKind::Scalar(t) = p.kind {
                types.declare(&p.name, t);
            }
        }
        for s in &kernel.body {
            types.declare_in(s);
        }
        types
    }

    fn declare(&mut self, name: &str, ty: ScalarType) {
        self.0.entry(name.to_string()).and_modify(|t| if *t != Some(ty) { *t = None }).or_insert(Some(ty));
    }

    fn declare_in(&mut self, s: &Stmt) {
        match &s.kind {
            StmtKind::Decl { ty, vars } => vars.iter().for_each(|d| self.declare(&d.name.name, *ty)),
            StmtKind::For(l) | StmtKind::MetaFor(l) => {
                self.declare(&l.var.name, l.ty);
                self.declare_in(&l.body);
            }
            StmtKind::MetaSchedule { body, .. } => self.declare_in(body),
            StmtKind::Block(items) => items.iter().for_each(|x| self.declare_in(x)),
            StmtKind::If { then_branch, else_branch, .. } => {
                self.declare_in(then_branch);
                if let Some(e) = else_branch {
                    self.declare_in(e);
                }
            }
            _ => {}
        }
    }

    /// The integer type of `e` when it is known.
    fn integer_type(&self, e: &Expr) -> Option<ScalarType> {
        let t = match &e.kind {
            ExprKind::Int(v) => Some(if i32::try_from(*v).is_ok() { ScalarType::Int } else { ScalarType::Long }),
            ExprKind::Var(n) => self.0.get(n.as_str()).copied().flatten(),
            ExprKind::Cast(t, _) => Some(*t),
            ExprKind::Unary(UnOp::Neg, a) => self.integer_type(a),
            ExprKind::Unary(UnOp::Not, _) => Some(ScalarType::Int),
            ExprKind::Binary(op, _, _) if op.is_comparison() || op.is_logical() => Some(ScalarType::Int),
            ExprKind::Binary(_, a, b) => match (self.integer_type(a)?, self.integer_type(b)?) {
                (ScalarType::Int, ScalarType::Int) => Some(ScalarType::Int),
                _ => Some(ScalarType::Long),
            },
            ExprKind::Cond(_, a, b) => Some(self.integer_type(a)?).filter(|t| self.integer_type(b) == Some(*t)),
            _ => None,
        };
        t.filter(|t| t.is_integer())
    }

    /// `e` without the casts of the module's contract.
    pub fn tidy(&self, e: &Expr) -> Expr {
        let kind = match &e.kind {
            ExprKind::Cast(t, a) => {
                let a = self.tidy(a);
                if t.is_integer() && self.integer_type(&a) == Some(*t) {
                    return a;
                }
                ExprKind::Cast(*t, Box::new(a))
            }
            ExprKind::Binary(op, a, b) => {
                let (mut a, mut b) = (self.tidy(a), self.tidy(b));
                if op.is_comparison() {
                    let narrow = |x: &Expr| match &x.kind {
                        ExprKind::Cast(ScalarType::Long, inner) if self.integer_type(inner) == Some(ScalarType::Int) => Some((**inner).clone()),
                        _ if self.integer_type(x) == Some(ScalarType::Int) => Some(x.clone()),
                        _ => None,
                    };
                    if let (Some(na), Some(nb)) = (narrow(&a), narrow(&b)) {
                        (a, b) = (na, nb);
                    }
                }
                ExprKind::Binary(*op, Box::new(a), Box::new(b))
            }
            ExprKind::Unary(op, a) => ExprKind::Unary(*op, Box::new(self.tidy(a))),
            ExprKind::Cond(c, a, b) => ExprKind::Cond(Box::new(self.tidy(c)), Box::new(self.tidy(a)), Box::new(self.tidy(b))),
            ExprKind::Index { array, indices } => ExprKind::Index { array: array.clone(), indices: indices.iter().map(|i| self.tidy(i)).collect() },
            ExprKind::Call(f, args) => ExprKind::Call(f.clone(), args.iter().map(|a| self.tidy(a)).collect()),
            _ => e.kind.clone(),
        };
        Expr::new(kind, e.span)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::source::Span;

    fn e(kind: ExprKind) -> Expr {
        Expr::new(kind, Span::default())
    }
    fn var(n: &str) -> Expr {
        e(ExprKind::Var(n.into()))
    }
    fn cast(t: ScalarType, x: Expr) -> Expr {
        e(ExprKind::Cast(t, Box::new(x)))
    }
    fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
        e(ExprKind::Binary(op, Box::new(a), Box::new(b)))
    }

    fn types() -> DeclaredTypes {
        let mut t = DeclaredTypes(HashMap::new());
        t.declare("i", ScalarType::Int);
        t.declare("n", ScalarType::Int);
        t.declare("big", ScalarType::Long);
        t.declare("twice", ScalarType::Int);
        t.declare("twice", ScalarType::Long);
        t
    }

    #[test]
    fn drops_only_casts_that_change_nothing() {
        let t = types();
        assert_eq!(t.tidy(&cast(ScalarType::Int, var("i"))), var("i"));
        assert_eq!(t.tidy(&cast(ScalarType::Int, cast(ScalarType::Int, var("i")))), var("i"));
        let widening = cast(ScalarType::Long, var("i"));
        assert_eq!(t.tidy(&widening), widening, "a widening outside a comparison stays");
        let product = bin(BinOp::Mul, cast(ScalarType::Long, var("i")), var("n"));
        assert_eq!(t.tidy(&product), product, "64-bit arithmetic stays 64-bit");
        assert_eq!(t.tidy(&bin(BinOp::Lt, var("i"), cast(ScalarType::Long, var("n")))), bin(BinOp::Lt, var("i"), var("n")));
        let wide_side = bin(BinOp::Lt, var("i"), cast(ScalarType::Long, bin(BinOp::Mul, var("n"), var("n"))));
        assert_eq!(t.tidy(&wide_side), bin(BinOp::Lt, var("i"), bin(BinOp::Mul, var("n"), var("n"))), "comparing two int values in int");
        let arith = bin(BinOp::Lt, var("i"), bin(BinOp::Mul, cast(ScalarType::Long, var("n")), var("n")));
        assert_eq!(t.tidy(&arith), arith, "a product computed in long is not narrowed");
        let long_side = bin(BinOp::Lt, var("i"), cast(ScalarType::Long, var("big")));
        assert_eq!(t.tidy(&long_side), bin(BinOp::Lt, var("i"), var("big")), "(long) of a long is dropped; the comparison stays long");
        let ambiguous = cast(ScalarType::Int, var("twice"));
        assert_eq!(t.tidy(&ambiguous), ambiguous, "a name with two types is unknown");
        let builtin = cast(ScalarType::Int, e(ExprKind::Builtin(Builtin::ThreadIdx(0))));
        assert_eq!(t.tidy(&builtin), builtin, "threadIdx is unsigned: its cast stays");
        let huge = cast(ScalarType::Int, e(ExprKind::Int(1 << 40)));
        assert_eq!(t.tidy(&huge), huge, "a literal beyond int is long");
    }
}
