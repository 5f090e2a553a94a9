//! Integer C expressions compiled over numbered slots, for fast repeated evaluation: the
//! program's facts in leaf selection, and the restrictions of tuning spaces.
//!
//! Contract: 64-bit signed arithmetic with C's truncating `/` and `%`; comparisons and `!` give
//! 0/1; `&&`, `||` and `?:` short-circuit; a cast to `int` must fit in 32 bits, one to `char`
//! in 8, a cast to `long` is the identity; `min`, `max` and `abs` as C's (`abs` must not
//! overflow). Overflow or division by zero (or `LLONG_MIN / -1`) in an evaluated
//! operand makes the value `None`, which every caller reads as "the condition does not hold".
//! The generated C++ (see `dispatch::facts`) implements the same rules.

use crate::frontend::ast::{BinOp, Expr, ExprKind, ScalarType, UnOp};

/// A compiled expression.
#[derive(Clone, Debug)]
pub enum Code {
    Const(i64),
    Slot(usize),
    Neg(Box<Code>),
    Not(Box<Code>),
    ToInt(Box<Code>),
    ToChar(Box<Code>),
    Min(Box<Code>, Box<Code>),
    Max(Box<Code>, Box<Code>),
    Abs(Box<Code>),
    Bin(BinOp, Box<Code>, Box<Code>),
    Cond(Box<Code>, Box<Code>, Box<Code>),
}

impl Code {
    /// Compile `e`; `slot` resolves a variable to a slot, or to an expression that stands for
    /// it (a derived scalar), or refuses it with a message.
    pub fn compile(e: &Expr, slot: &dyn Fn(&str) -> Result<Resolved, String>) -> Result<Code, String> {
        Code::compile_at(e, slot, 0)
    }

    fn compile_at(e: &Expr, slot: &dyn Fn(&str) -> Result<Resolved, String>, depth: usize) -> Result<Code, String> {
        if depth > 64 {
            return Err(format!("`{e}`: definitions nest too deeply"));
        }
        let sub = |x: &Expr| Code::compile_at(x, slot, depth).map(Box::new);
        Ok(match &e.kind {
            ExprKind::Int(v) => Code::Const(*v),
            ExprKind::Var(v) => match slot(v)? {
                Resolved::Slot(i) => Code::Slot(i),
                Resolved::Expr(d) => Code::compile_at(&d, slot, depth + 1)?,
            },
            ExprKind::Unary(UnOp::Neg, a) => Code::Neg(sub(a)?),
            ExprKind::Unary(UnOp::Not, a) => Code::Not(sub(a)?),
            ExprKind::Cast(ScalarType::Int, a) => Code::ToInt(sub(a)?),
            ExprKind::Cast(ScalarType::Char, a) => Code::ToChar(sub(a)?),
            ExprKind::Cast(t, a) if t.is_integer() => *sub(a)?,
            ExprKind::Binary(op, a, b) => Code::Bin(*op, sub(a)?, sub(b)?),
            ExprKind::Cond(c, a, b) => Code::Cond(sub(c)?, sub(a)?, sub(b)?),
            ExprKind::Call(f, args) => match (f.name.as_str(), args.as_slice()) {
                ("min", [a, b]) => Code::Min(sub(a)?, sub(b)?),
                ("max", [a, b]) => Code::Max(sub(a)?, sub(b)?),
                ("abs", [a]) => Code::Abs(sub(a)?),
                _ => return Err(format!("`{e}` is not integer arithmetic on parameters")),
            },
            _ => return Err(format!("`{e}` is not integer arithmetic on parameters")),
        })
    }

    /// The value at `slots`; `None` on overflow or division by zero.
    pub fn eval(&self, slots: &[i64]) -> Option<i64> {
        let truth = |b: bool| Some(b as i64);
        match self {
            Code::Const(v) => Some(*v),
            Code::Slot(i) => Some(slots[*i]),
            Code::Neg(a) => a.eval(slots)?.checked_neg(),
            Code::Not(a) => truth(a.eval(slots)? == 0),
            Code::ToInt(a) => i32::try_from(a.eval(slots)?).ok().map(i64::from),
            Code::ToChar(a) => i8::try_from(a.eval(slots)?).ok().map(i64::from),
            Code::Min(a, b) => Some(a.eval(slots)?.min(b.eval(slots)?)),
            Code::Max(a, b) => Some(a.eval(slots)?.max(b.eval(slots)?)),
            Code::Abs(a) => a.eval(slots)?.checked_abs(),
            Code::Bin(BinOp::And, a, b) => truth(a.eval(slots)? != 0 && b.eval(slots)? != 0),
            Code::Bin(BinOp::Or, a, b) => truth(a.eval(slots)? != 0 || b.eval(slots)? != 0),
            Code::Bin(op, a, b) => {
                let (x, y) = (a.eval(slots)?, b.eval(slots)?);
                match op {
                    BinOp::Mul => x.checked_mul(y),
                    BinOp::Div => x.checked_div(y),
                    BinOp::Rem => x.checked_rem(y),
                    BinOp::Add => x.checked_add(y),
                    BinOp::Sub => x.checked_sub(y),
                    BinOp::Lt => truth(x < y),
                    BinOp::Le => truth(x <= y),
                    BinOp::Gt => truth(x > y),
                    BinOp::Ge => truth(x >= y),
                    BinOp::Eq => truth(x == y),
                    BinOp::Ne => truth(x != y),
                    BinOp::And | BinOp::Or => unreachable!("matched above"),
                }
            }
            Code::Cond(c, a, b) => {
                if c.eval(slots)? != 0 {
                    a.eval(slots)
                } else {
                    b.eval(slots)
                }
            }
        }
    }

    /// Whether the condition holds: a non-zero value (an evaluation error is "no").
    pub fn holds(&self, slots: &[i64]) -> bool {
        matches!(self.eval(slots), Some(v) if v != 0)
    }

    /// The slots it reads.
    pub fn slots(&self, out: &mut Vec<usize>) {
        match self {
            Code::Const(_) => {}
            Code::Slot(i) => out.push(*i),
            Code::Neg(a) | Code::Not(a) | Code::ToInt(a) | Code::ToChar(a) | Code::Abs(a) => a.slots(out),
            Code::Bin(_, a, b) | Code::Min(a, b) | Code::Max(a, b) => {
                a.slots(out);
                b.slots(out);
            }
            Code::Cond(c, a, b) => {
                c.slots(out);
                a.slots(out);
                b.slots(out);
            }
        }
    }
}

/// What a variable name compiles to.
pub enum Resolved {
    Slot(usize),
    /// An expression standing for the variable (a derived scalar's definition).
    Expr(Expr),
}
