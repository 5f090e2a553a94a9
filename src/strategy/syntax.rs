//! Constructors for the kernel syntax the strategies build: expressions, statements and names
//! with no source position (the code is the tool's, not the user's).

use crate::frontend::ast::*;

pub(crate) fn e(kind: ExprKind) -> Expr {
    Expr::new(kind, Default::default())
}

pub(crate) fn stmt(kind: StmtKind) -> Stmt {
    Stmt { kind, span: Default::default() }
}

pub(crate) fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
    e(ExprKind::Binary(op, Box::new(a), Box::new(b)))
}

pub(crate) fn ident(name: &str) -> Ident {
    Ident { name: name.to_string(), span: Default::default() }
}
