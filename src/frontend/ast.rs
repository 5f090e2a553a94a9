//! The syntax tree of a MetaFork file, with a span on every node, and a C printer for
//! expressions (minimal parentheses, C precedence) that the reports and emitters share.

use super::source::Span;
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScalarType {
    /// `char`: 8-bit, signed (as on x86-64 and in CUDA); promoted to `int` in arithmetic.
    Char,
    Int,
    Long,
    Float,
    Double,
}

impl ScalarType {
    pub fn is_integer(self) -> bool {
        matches!(self, ScalarType::Char | ScalarType::Int | ScalarType::Long)
    }

    /// The least and greatest values of an integer type (LP64); `None` for a floating one.
    pub fn integer_range(self) -> Option<(i64, i64)> {
        match self {
            ScalarType::Char => Some((i8::MIN.into(), i8::MAX.into())),
            ScalarType::Int => Some((i32::MIN.into(), i32::MAX.into())),
            ScalarType::Long => Some((i64::MIN, i64::MAX)),
            ScalarType::Float | ScalarType::Double => None,
        }
    }

    pub fn c_name(self) -> &'static str {
        match self {
            // Spelled signed: C leaves plain `char`'s sign to the platform (unsigned on
            // AArch64 hosts), and the verifier's engine wraps it as signed.
            ScalarType::Char => "signed char",
            ScalarType::Int => "int",
            ScalarType::Long => "long",
            ScalarType::Float => "float",
            ScalarType::Double => "double",
        }
    }

    /// Size in bytes on the CUDA targets (LP64).
    pub fn size_bytes(self) -> u32 {
        match self {
            ScalarType::Char => 1,
            ScalarType::Int | ScalarType::Float => 4,
            ScalarType::Long | ScalarType::Double => 8,
        }
    }

    /// C's usual arithmetic conversions for two operands.
    /// (`char` is promoted to `int` first.)
    pub fn promote(a: ScalarType, b: ScalarType) -> ScalarType {
        a.max(b).max(ScalarType::Int)
    }
}

impl fmt::Display for ScalarType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.c_name())
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Ident {
    pub name: String,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    pub functions: Vec<Function>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Function {
    pub name: Ident,
    pub params: Vec<Param>,
    pub body: Vec<Stmt>,
    pub span: Span,
}

/// A parameter: a scalar when `dims` is empty, else an array with those extents.
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    pub name: Ident,
    pub ty: ScalarType,
    /// The type as the program spells it, for host-facing C++ (`char`, `long long`), where
    /// `ty`'s own spelling (`signed char`, `long`) is a distinct type.
    pub spelling: &'static str,
    pub is_const: bool,
    pub dims: Vec<Expr>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Stmt {
    pub kind: StmtKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Declarator {
    pub name: Ident,
    pub init: Expr,
}

/// A local array's initializer: an element's value, or a braced list (C's rules: a flat list
/// fills the elements in row-major order, one brace per sub-array fills that sub-array; the
/// elements not named are zero).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Init {
    Value(Expr),
    List(Vec<Init>, Span),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AssignOp {
    Set,
    Add,
    Sub,
    Mul,
    Div,
    /// A reduction: `+=` on an element that several iterations of a `meta_for` update
    /// ([`crate::frontend::reduction`]). Serial code adds as `+=` does; a kernel adds
    /// atomically, in the element's type (`atomicAdd`), in whatever order the threads run.
    AtomicAdd,
}

impl AssignOp {
    pub fn c_symbol(self) -> &'static str {
        match self {
            AssignOp::Set => "=",
            AssignOp::Add | AssignOp::AtomicAdd => "+=",
            AssignOp::Sub => "-=",
            AssignOp::Mul => "*=",
            AssignOp::Div => "/=",
        }
    }
}

/// `for (T var = lo; var < hi; var += step)`, or `<=` when `inclusive`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ForLoop {
    pub var: Ident,
    pub ty: ScalarType,
    pub lo: Expr,
    pub hi: Expr,
    pub inclusive: bool,
    pub step: i64,
    pub body: Box<Stmt>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum StmtKind {
    Decl { ty: ScalarType, vars: Vec<Declarator> },
    /// A per-thread array of constant size, `float acc[4];` or `float acc[2][2] = {...};`.
    /// Only in the parsed program: [`crate::frontend::local_arrays::scalarize`] replaces each
    /// by one scalar per element before the semantic check, so no later stage meets one.
    LocalArray { ty: ScalarType, name: Ident, dims: Vec<Expr>, init: Option<Init> },
    Assign { target: Expr, op: AssignOp, value: Expr },
    If { cond: Expr, then_branch: Box<Stmt>, else_branch: Option<Box<Stmt>> },
    Block(Vec<Stmt>),
    For(ForLoop),
    MetaFor(ForLoop),
    MetaSchedule { cache: Vec<Ident>, body: Box<Stmt> },
    Assume(Expr),
    Assert(Expr),
    Empty,
    /// `__syncthreads()`: only in kernel forms built by the tool, never parsed.
    Barrier,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnOp {
    Neg,
    Not,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    Mul,
    Div,
    Rem,
    Add,
    Sub,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    And,
    Or,
}

impl BinOp {
    pub fn c_symbol(self) -> &'static str {
        match self {
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::And => "&&",
            BinOp::Or => "||",
        }
    }

    /// C precedence (higher binds tighter).
    pub fn precedence(self) -> u8 {
        match self {
            BinOp::Mul | BinOp::Div | BinOp::Rem => 10,
            BinOp::Add | BinOp::Sub => 9,
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => 7,
            BinOp::Eq | BinOp::Ne => 6,
            BinOp::And => 3,
            BinOp::Or => 2,
        }
    }

    pub fn is_comparison(self) -> bool {
        matches!(self, BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Eq | BinOp::Ne)
    }

    pub fn is_logical(self) -> bool {
        matches!(self, BinOp::And | BinOp::Or)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    Int(i64),
    /// A floating literal: `single` for the `f`/`F` suffix (type `float`), else `double`.
    Float { value: f64, single: bool },
    Var(String),
    Index { array: Ident, indices: Vec<Expr> },
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    Cond(Box<Expr>, Box<Expr>, Box<Expr>),
    Cast(ScalarType, Box<Expr>),
    Call(Ident, Vec<Expr>),
    /// A CUDA index (`threadIdx.x`, `blockIdx.y`, ...): only in kernel forms, never parsed.
    Builtin(Builtin),
}

/// Codes are memoised by their syntax (`tree::build`'s maps key on [`crate::kernel::Kernel`]):
/// equality is the derived one. A float literal is hashed by its bits with the two zeros made
/// one, so that equal literals hash alike; no literal is NaN (the lexer reads digits only),
/// and were one made, it would only miss the memo, never hit a wrong entry.
impl Eq for ExprKind {}

impl std::hash::Hash for ExprKind {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        std::mem::discriminant(self).hash(h);
        match self {
            ExprKind::Int(v) => v.hash(h),
            ExprKind::Float { value, single } => {
                (if *value == 0.0 { 0 } else { value.to_bits() }).hash(h);
                single.hash(h);
            }
            ExprKind::Var(name) => name.hash(h),
            ExprKind::Index { array, indices } => {
                array.hash(h);
                indices.hash(h);
            }
            ExprKind::Unary(op, e) => {
                op.hash(h);
                e.hash(h);
            }
            ExprKind::Binary(op, a, b) => {
                op.hash(h);
                a.hash(h);
                b.hash(h);
            }
            ExprKind::Cond(c, a, b) => {
                c.hash(h);
                a.hash(h);
                b.hash(h);
            }
            ExprKind::Cast(ty, e) => {
                ty.hash(h);
                e.hash(h);
            }
            ExprKind::Call(f, args) => {
                f.hash(h);
                args.hash(h);
            }
            ExprKind::Builtin(b) => b.hash(h),
        }
    }
}

/// Which CUDA index register, and along which dimension (0 = x, 1 = y, 2 = z).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Builtin {
    ThreadIdx(u8),
    BlockIdx(u8),
    BlockDim(u8),
    GridDim(u8),
}

impl Builtin {
    pub fn dim(self) -> u8 {
        match self {
            Builtin::ThreadIdx(d) | Builtin::BlockIdx(d) | Builtin::BlockDim(d) | Builtin::GridDim(d) => d,
        }
    }

    pub fn c_name(self) -> String {
        let base = match self {
            Builtin::ThreadIdx(_) => "threadIdx",
            Builtin::BlockIdx(_) => "blockIdx",
            Builtin::BlockDim(_) => "blockDim",
            Builtin::GridDim(_) => "gridDim",
        };
        format!("{base}.{}", ["x", "y", "z"][self.dim() as usize % 3])
    }
}

impl Expr {
    pub fn new(kind: ExprKind, span: Span) -> Expr {
        Expr { kind, span }
    }

    fn precedence(&self) -> u8 {
        match &self.kind {
            ExprKind::Binary(op, ..) => op.precedence(),
            ExprKind::Cond(..) => 1,
            ExprKind::Unary(..) | ExprKind::Cast(..) => 12,
            _ => 13,
        }
    }

    /// Split a condition on its top-level `&&`s.
    pub fn conjuncts(&self) -> Vec<&Expr> {
        match &self.kind {
            ExprKind::Binary(BinOp::And, l, r) => {
                let mut v = l.conjuncts();
                v.extend(r.conjuncts());
                v
            }
            _ => vec![self],
        }
    }

    /// Every variable name the expression reads (array names included), in order of appearance.
    pub fn names(&self, out: &mut Vec<String>) {
        match &self.kind {
            ExprKind::Int(_) | ExprKind::Float { .. } | ExprKind::Builtin(_) => {}
            ExprKind::Var(v) => out.push(v.clone()),
            ExprKind::Index { array, indices } => {
                out.push(array.name.clone());
                indices.iter().for_each(|e| e.names(out));
            }
            ExprKind::Unary(_, e) | ExprKind::Cast(_, e) => e.names(out),
            ExprKind::Binary(_, a, b) => {
                a.names(out);
                b.names(out);
            }
            ExprKind::Cond(c, a, b) => {
                c.names(out);
                a.names(out);
                b.names(out);
            }
            ExprKind::Call(_, args) => args.iter().for_each(|e| e.names(out)),
        }
    }
}

fn fmt_operand(f: &mut fmt::Formatter<'_>, e: &Expr, min_prec: u8) -> fmt::Result {
    if e.precedence() < min_prec {
        write!(f, "({e})")
    } else {
        write!(f, "{e}")
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ExprKind::Int(v) => write!(f, "{v}"),
            ExprKind::Float { value, single } => write!(f, "{value:?}{}", if *single { "f" } else { "" }),
            ExprKind::Var(v) => f.write_str(v),
            ExprKind::Builtin(b) => f.write_str(&b.c_name()),
            ExprKind::Index { array, indices } => {
                f.write_str(&array.name)?;
                for i in indices {
                    write!(f, "[{i}]")?;
                }
                Ok(())
            }
            ExprKind::Unary(op, e) => {
                f.write_str(match op {
                    UnOp::Neg => "-",
                    UnOp::Not => "!",
                })?;
                // `- -x` must not print as `--x`.
                if matches!((op, &e.kind), (UnOp::Neg, ExprKind::Unary(UnOp::Neg, _)))
                    || matches!((op, &e.kind), (UnOp::Neg, ExprKind::Int(v)) if *v < 0)
                {
                    return write!(f, "({e})");
                }
                fmt_operand(f, e, 12)
            }
            ExprKind::Binary(op, a, b) => {
                let p = op.precedence();
                // Left-associative: the right operand needs strictly higher precedence.
                fmt_operand(f, a, p)?;
                write!(f, " {} ", op.c_symbol())?;
                fmt_operand(f, b, p + 1)
            }
            ExprKind::Cond(c, a, b) => {
                fmt_operand(f, c, 2)?;
                f.write_str(" ? ")?;
                fmt_operand(f, a, 1)?;
                f.write_str(" : ")?;
                fmt_operand(f, b, 1)
            }
            ExprKind::Cast(t, e) => {
                write!(f, "({t})")?;
                fmt_operand(f, e, 12)
            }
            ExprKind::Call(name, args) => {
                write!(f, "{}(", name.name)?;
                for (i, a) in args.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{a}")?;
                }
                f.write_str(")")
            }
        }
    }
}

/// Call `f` on `x` and every sub-expression, parents before children.
pub fn walk_expr(x: &Expr, f: &mut dyn FnMut(&Expr)) {
    f(x);
    match &x.kind {
        ExprKind::Index { indices, .. } => indices.iter().for_each(|i| walk_expr(i, f)),
        ExprKind::Unary(_, a) | ExprKind::Cast(_, a) => walk_expr(a, f),
        ExprKind::Binary(_, a, b) => {
            walk_expr(a, f);
            walk_expr(b, f);
        }
        ExprKind::Cond(c, a, b) => {
            walk_expr(c, f);
            walk_expr(a, f);
            walk_expr(b, f);
        }
        ExprKind::Call(_, args) => args.iter().for_each(|a| walk_expr(a, f)),
        _ => {}
    }
}

/// Every identifier of `program`: its functions, parameters, and every name their bodies
/// declare, read or call (what a made-up name must avoid).
pub fn program_identifiers(program: &Program) -> std::collections::HashSet<String> {
    let mut taken = std::collections::HashSet::new();
    for f in &program.functions {
        taken.insert(f.name.name.clone());
        taken.extend(f.params.iter().map(|p| p.name.name.clone()));
        f.body.iter().for_each(|s| identifiers(s, &mut taken));
    }
    taken
}

/// `base`, or `base2`, `base3`, ...: the first that `taken` does not hold, added to it.
pub fn fresh_name(taken: &mut std::collections::HashSet<String>, base: &str) -> String {
    let mut name = base.to_string();
    let mut n = 2;
    while taken.contains(&name) {
        name = format!("{base}{n}");
        n += 1;
    }
    taken.insert(name.clone());
    name
}

/// The values of an initializer, in order.
pub fn init_values(init: &Init, out: &mut Vec<Expr>) {
    match init {
        Init::Value(e) => out.push(e.clone()),
        Init::List(items, _) => items.iter().for_each(|i| init_values(i, out)),
    }
}

/// Every identifier `s` names (declared, read, called or a loop's counter).
pub fn identifiers(s: &Stmt, out: &mut std::collections::HashSet<String>) {
    let declared = std::cell::RefCell::new(Vec::new());
    walk_stmt(
        s,
        &mut |s| match &s.kind {
            StmtKind::Decl { vars, .. } => vars.iter().for_each(|v| declared.borrow_mut().push(v.name.name.clone())),
            StmtKind::LocalArray { name, .. } => declared.borrow_mut().push(name.name.clone()),
            StmtKind::For(l) | StmtKind::MetaFor(l) => declared.borrow_mut().push(l.var.name.clone()),
            StmtKind::MetaSchedule { cache, .. } => cache.iter().for_each(|c| declared.borrow_mut().push(c.name.clone())),
            _ => {}
        },
        &mut |e| {
            walk_expr(e, &mut |x| match &x.kind {
                ExprKind::Var(v) => declared.borrow_mut().push(v.clone()),
                ExprKind::Index { array, .. } => declared.borrow_mut().push(array.name.clone()),
                ExprKind::Call(f, _) => declared.borrow_mut().push(f.name.clone()),
                _ => {}
            })
        },
    );
    out.extend(declared.into_inner());
}

/// Every statement of `s` (pre-order) to `on_stmt`, and every top-level expression to `on_expr`.
pub fn walk_stmt(s: &Stmt, on_stmt: &mut dyn FnMut(&Stmt), on_expr: &mut dyn FnMut(&Expr)) {
    on_stmt(s);
    match &s.kind {
        StmtKind::Decl { vars, .. } => vars.iter().for_each(|v| on_expr(&v.init)),
        StmtKind::LocalArray { dims, init, .. } => {
            dims.iter().for_each(|d| on_expr(d));
            let mut values = Vec::new();
            init.iter().for_each(|i| init_values(i, &mut values));
            values.iter().for_each(|v| on_expr(v));
        }
        StmtKind::Assign { target, value, .. } => {
            on_expr(target);
            on_expr(value);
        }
        StmtKind::If { cond, then_branch, else_branch } => {
            on_expr(cond);
            walk_stmt(then_branch, on_stmt, on_expr);
            else_branch.iter().for_each(|e| walk_stmt(e, on_stmt, on_expr));
        }
        StmtKind::Block(v) => v.iter().for_each(|s| walk_stmt(s, on_stmt, on_expr)),
        StmtKind::For(l) | StmtKind::MetaFor(l) => {
            on_expr(&l.lo);
            on_expr(&l.hi);
            walk_stmt(&l.body, on_stmt, on_expr);
        }
        StmtKind::MetaSchedule { body, .. } => walk_stmt(body, on_stmt, on_expr),
        StmtKind::Assume(e) | StmtKind::Assert(e) => on_expr(e),
        StmtKind::Empty | StmtKind::Barrier => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    fn float(value: f64) -> Expr {
        Expr::new(ExprKind::Binary(BinOp::Mul, Box::new(Expr::new(ExprKind::Float { value, single: false }, Span::default())), Box::new(Expr::new(ExprKind::Var("x".into()), Span::default()))), Span::default())
    }

    #[test]
    fn equal_expressions_hash_alike_and_a_changed_literal_is_another_key() {
        let state = std::collections::hash_map::RandomState::new();
        let key = |e: &Expr| state.hash_one(e);
        assert_eq!(float(0.5), float(0.5));
        assert_eq!(key(&float(0.5)), key(&float(0.5)));
        assert_ne!(float(0.5), float(0.25));
        // The two zeros are equal literals, so they must hash alike.
        assert_eq!(float(0.0), float(-0.0));
        assert_eq!(key(&float(0.0)), key(&float(-0.0)));
        // A code keyed by its syntax finds itself in a map, and only itself.
        let mut memo = std::collections::HashMap::new();
        memo.insert(float(0.5), 1);
        assert_eq!(memo.get(&float(0.5)), Some(&1));
        assert_eq!(memo.get(&float(0.25)), None);
    }
}
