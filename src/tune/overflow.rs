//! Whether a program's host arithmetic stays defined at a parameter point: its derived scalars
//! and array extents evaluated with C's integer types, for `tune`.
//!
//! Contract: [`first_overflow`] evaluates every derived scalar (in order, each in its declared
//! type) and every array extent at `point` as the generated host code does: an `int` operation
//! (both operands `int`) must fit 32 bits, one with a `long` operand 64, a cast to `int` must fit,
//! `/` and `%` truncate and must not divide by zero. It answers the first expression whose value
//! is undefined, described for a message, or `None`. An expression it cannot evaluate (a name
//! not at the point, a call other than `min`/`max`/`abs`, a floating value) is skipped: the check
//! reports only what it can show. Not [`crate::cexpr`]: that evaluates in 64 bits throughout, as
//! the dispatcher's facts do; this follows the C types the host code declares.

use crate::frontend::ast::{BinOp, Expr, ExprKind, ScalarType, UnOp};
use crate::frontend::model::KernelFunction;
use std::collections::{BTreeMap, HashMap};

/// A value with its C integer type (`long` where it is not `int`).
#[derive(Clone, Copy)]
struct Typed {
    value: i64,
    long: bool,
}

enum Failure {
    /// Not evaluated here (a name not bound, a floating value): say nothing.
    Unknown,
    /// Undefined in C: this sub-expression's value.
    Undefined(String),
}

/// The first derived scalar or array extent of `function` whose arithmetic is undefined at
/// `point` (see the module's contract), as `what`: `why`.
pub fn first_overflow(function: &KernelFunction, point: &BTreeMap<String, i64>) -> Option<String> {
    let mut env: HashMap<String, Typed> = HashMap::new();
    for p in &function.params {
        if let Some(v) = point.get(&p.name) {
            env.insert(p.name.clone(), Typed { value: *v, long: p.ty != ScalarType::Int });
        }
    }
    for d in &function.derived {
        match eval(&d.value, &env) {
            Ok(v) => match fit(v.value, d.ty == ScalarType::Int) {
                Some(value) => {
                    env.insert(d.name.clone(), Typed { value, long: d.ty != ScalarType::Int });
                }
                None => return Some(format!("`{}` = `{}` is {} there, which does not fit `int`", d.name, d.value, v.value)),
            },
            Err(Failure::Undefined(why)) => return Some(format!("`{}` = `{}`: {why}", d.name, d.value)),
            Err(Failure::Unknown) => {}
        }
    }
    for a in &function.arrays {
        for e in &a.extent_exprs {
            if let Err(Failure::Undefined(why)) = eval(e, &env) {
                return Some(format!("the extent `{e}` of `{}`: {why}", a.name));
            }
        }
    }
    None
}

fn fit(v: i64, int: bool) -> Option<i64> {
    (!int || i32::try_from(v).is_ok()).then_some(v)
}

fn eval(e: &Expr, env: &HashMap<String, Typed>) -> Result<Typed, Failure> {
    let undefined = |value: Option<i64>, long: bool| -> Result<Typed, Failure> {
        match value.and_then(|v| fit(v, !long)) {
            Some(value) => Ok(Typed { value, long }),
            None => Err(Failure::Undefined(format!("`{e}` overflows `{}`", if long { "long" } else { "int" }))),
        }
    };
    match &e.kind {
        ExprKind::Int(v) => Ok(Typed { value: *v, long: i32::try_from(*v).is_err() }),
        ExprKind::Var(n) => env.get(n).copied().ok_or(Failure::Unknown),
        ExprKind::Cast(t, a) if t.is_integer() => {
            let v = eval(a, env)?;
            match t {
                ScalarType::Int => undefined(Some(v.value), false),
                _ => Ok(Typed { value: v.value, long: true }),
            }
        }
        ExprKind::Unary(UnOp::Neg, a) => {
            let v = eval(a, env)?;
            undefined(v.value.checked_neg(), v.long)
        }
        ExprKind::Unary(UnOp::Not, a) => Ok(Typed { value: i64::from(eval(a, env)?.value == 0), long: false }),
        // `&&` and `||` stop at their left operand, as C's do (`B > 0 && n / B > 1`).
        ExprKind::Binary(op @ (BinOp::And | BinOp::Or), a, b) => {
            let x = eval(a, env)?.value != 0;
            let value = if *op == BinOp::And { x && eval(b, env)?.value != 0 } else { x || eval(b, env)?.value != 0 };
            Ok(Typed { value: i64::from(value), long: false })
        }
        ExprKind::Binary(op, a, b) => {
            let (x, y) = (eval(a, env)?, eval(b, env)?);
            let long = x.long || y.long;
            let truth = |t: bool| Ok(Typed { value: i64::from(t), long: false });
            match op {
                BinOp::Add => undefined(x.value.checked_add(y.value), long),
                BinOp::Sub => undefined(x.value.checked_sub(y.value), long),
                BinOp::Mul => undefined(x.value.checked_mul(y.value), long),
                BinOp::Div | BinOp::Rem if y.value == 0 => Err(Failure::Undefined(format!("`{e}` divides by zero"))),
                BinOp::Div => undefined(x.value.checked_div(y.value), long),
                BinOp::Rem => undefined(x.value.checked_rem(y.value), long),
                BinOp::Lt => truth(x.value < y.value),
                BinOp::Le => truth(x.value <= y.value),
                BinOp::Gt => truth(x.value > y.value),
                BinOp::Ge => truth(x.value >= y.value),
                BinOp::Eq => truth(x.value == y.value),
                BinOp::Ne => truth(x.value != y.value),
                BinOp::And | BinOp::Or => unreachable!("short-circuited above"),
            }
        }
        ExprKind::Cond(c, a, b) => {
            if eval(c, env)?.value != 0 {
                eval(a, env)
            } else {
                eval(b, env)
            }
        }
        ExprKind::Call(f, args) if (f.name == "min" || f.name == "max") && args.len() == 2 => {
            let (x, y) = (eval(&args[0], env)?, eval(&args[1], env)?);
            let value = if f.name == "min" { x.value.min(y.value) } else { x.value.max(y.value) };
            Ok(Typed { value, long: x.long || y.long })
        }
        ExprKind::Call(f, args) if f.name == "abs" && args.len() == 1 => {
            let x = eval(&args[0], env)?;
            undefined(x.value.checked_abs(), x.long)
        }
        _ => Err(Failure::Unknown),
    }
}
