//! `min` and `max` of two arithmetic types, printed so that CUDA C++ resolves them.
//!
//! Contract: MetaFork types `min(a, b)` and `max(a, b)` as C types arithmetic: both arguments
//! are converted to their common type (`sema`, `lower` and the verifier agree). CUDA declares
//! `min` and `max` for pairs of one type only, so `min(float, int)` or `max(long, int)` is
//! ambiguous there and nvcc refuses the file. [`resolve`] casts each argument of such a call
//! to the common type. A call whose arguments have one type after integer promotion is left as
//! written (`min(char, int)` resolves to `min(int, int)`), and so is one with an argument of
//! unknown type, which no code the tool makes has: names are declared once per function.
//!
//! Types are those of C: literals, the declared names ([`DeclaredTypes::declared`]), array
//! elements, casts, and the arithmetic and calls over them, as `sema` types them.

use super::casts::DeclaredTypes;
use crate::frontend::ast::*;
use std::collections::HashMap;

/// The floating type of the parameters of C's math function `name` (`sqrt`: `double`,
/// `sqrtf`: `float`), for those the language allows; `None` for the overloaded ones.
fn parameter_type(name: &str) -> Option<ScalarType> {
    match name {
        "sqrtf" | "expf" | "fabsf" | "fminf" | "fmaxf" | "logf" | "powf" => Some(ScalarType::Float),
        "sqrt" | "exp" | "fabs" | "fmin" | "fmax" | "log" | "pow" => Some(ScalarType::Double),
        _ => None,
    }
}

/// The arguments of a call to `name`, cast where CUDA would not resolve it as C does.
pub fn resolve(name: &str, args: Vec<Expr>, names: &DeclaredTypes, elems: &HashMap<&str, ScalarType>) -> Vec<Expr> {
    if let Some(param) = parameter_type(name) {
        return to_parameter_type(param, args, names, elems);
    }
    if !matches!(name, "min" | "max") || args.len() != 2 {
        return args;
    }
    let (Some(a), Some(b)) = (type_of(&args[0], names, elems), type_of(&args[1], names, elems)) else { return args };
    let (a, b) = (ScalarType::promote(a, a), ScalarType::promote(b, b));
    if a == b {
        return args;
    }
    let common = ScalarType::promote(a, b);
    args.into_iter().zip([a, b]).map(|(x, t)| if t == common { x } else { Expr::new(ExprKind::Cast(common, Box::new(x)), Default::default()) }).collect()
}

/// The arguments of a C math function with parameters of type `param`: each argument not of
/// type `param` cast to it, as C converts them. CUDA C++ takes `sqrt(int)`, `fmax(float, int)`
/// or `fmin(float, double)` to the standard library's templates for mixed arguments, which
/// are host functions, and refuses the kernel; and it takes `exp(float)` or `sqrt(float)` to
/// its `float` overloads, where C computes in `double` (`exp(x) - expf(x)` was 0 on the
/// device). Calls whose arguments all have the parameters' type are left as written.
fn to_parameter_type(param: ScalarType, args: Vec<Expr>, names: &DeclaredTypes, elems: &HashMap<&str, ScalarType>) -> Vec<Expr> {
    let types: Vec<Option<ScalarType>> = args.iter().map(|a| type_of(a, names, elems)).collect();
    if types.iter().all(|t| *t == Some(param)) || types.iter().any(Option::is_none) {
        return args;
    }
    args.into_iter().zip(types).map(|(x, t)| if t == Some(param) { x } else { Expr::new(ExprKind::Cast(param, Box::new(x)), Default::default()) }).collect()
}

/// The C type of `e`, where every name in it has a known type (`elems`: the arrays' element
/// types). [`crate::frontend::ranges`] types a kernel's operations with it too.
pub(crate) fn type_of<K: std::borrow::Borrow<str> + std::hash::Hash + Eq>(e: &Expr, names: &DeclaredTypes, elems: &HashMap<K, ScalarType>) -> Option<ScalarType> {
    let of = |x: &Expr| type_of(x, names, elems);
    Some(match &e.kind {
        ExprKind::Int(v) => {
            if i32::try_from(*v).is_ok() {
                ScalarType::Int
            } else {
                ScalarType::Long
            }
        }
        ExprKind::Float { single, .. } => {
            if *single {
                ScalarType::Float
            } else {
                ScalarType::Double
            }
        }
        ExprKind::Var(n) => names.declared(n)?,
        ExprKind::Index { array, .. } => *elems.get(array.name.as_str())?,
        ExprKind::Builtin(_) | ExprKind::Unary(UnOp::Not, _) => ScalarType::Int,
        ExprKind::Unary(UnOp::Neg, a) => {
            let t = of(a)?;
            ScalarType::promote(t, t)
        }
        ExprKind::Binary(op, _, _) if op.is_comparison() || op.is_logical() => ScalarType::Int,
        ExprKind::Binary(_, a, b) | ExprKind::Cond(_, a, b) => ScalarType::promote(of(a)?, of(b)?),
        ExprKind::Cast(t, _) => *t,
        ExprKind::Call(f, args) => match f.name.as_str() {
            "min" | "max" => args.iter().try_fold(ScalarType::Int, |t, a| Some(ScalarType::promote(t, of(a)?)))?,
            "abs" => {
                let t = of(args.first()?)?;
                ScalarType::promote(t, t)
            }
            "sqrtf" | "expf" | "fabsf" | "fminf" | "fmaxf" | "logf" | "powf" => ScalarType::Float,
            _ => ScalarType::Double,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::source::Span;

    fn e(kind: ExprKind) -> Expr {
        Expr::new(kind, Span::default())
    }

    fn call(name: &str, args: Vec<Expr>) -> Vec<Expr> {
        let elems: HashMap<&str, ScalarType> = [("data", ScalarType::Float), ("text", ScalarType::Char)].into_iter().collect();
        resolve(name, args, &DeclaredTypes::of_names(&[("big", ScalarType::Long), ("i", ScalarType::Int)]), &elems)
    }

    fn printed(args: &[Expr]) -> Vec<String> {
        args.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn arguments_of_two_types_are_cast_to_their_common_type() {
        let data = e(ExprKind::Index { array: Ident { name: "data".into(), span: Span::default() }, indices: vec![e(ExprKind::Int(0))] });
        assert_eq!(printed(&call("min", vec![data.clone(), e(ExprKind::Int(6))])), ["data[0]", "(float)6"]);
        assert_eq!(printed(&call("max", vec![e(ExprKind::Var("big".into())), e(ExprKind::Var("i".into()))])), ["big", "(long)i"]);
        assert_eq!(printed(&call("max", vec![data.clone(), e(ExprKind::Float { value: 0.5, single: false })])), ["(double)data[0]", "0.5"]);
    }

    #[test]
    fn integer_arguments_of_math_functions_are_converted_as_c_converts_them() {
        let data = e(ExprKind::Index { array: Ident { name: "data".into(), span: Span::default() }, indices: vec![e(ExprKind::Int(0))] });
        assert_eq!(printed(&call("sqrt", vec![e(ExprKind::Var("i".into()))])), ["(double)i"]);
        assert_eq!(printed(&call("fmax", vec![data.clone(), e(ExprKind::Int(3))])), ["(double)data[0]", "(double)3"]);
        assert_eq!(printed(&call("fminf", vec![data.clone(), e(ExprKind::Var("big".into()))])), ["data[0]", "(float)big"]);
        // Two floating types: nvcc has no `fmin(float, double)` for the device.
        assert_eq!(printed(&call("fmin", vec![data.clone(), e(ExprKind::Float { value: 0.5, single: false })])), ["(double)data[0]", "0.5"]);
        assert_eq!(printed(&call("fmaxf", vec![e(ExprKind::Float { value: 0.5, single: false }), data])), ["(float)0.5", "data[0]"]);
    }

    #[test]
    fn one_type_after_promotion_and_calls_of_the_parameters_type_stay_as_written() {
        let data = e(ExprKind::Index { array: Ident { name: "data".into(), span: Span::default() }, indices: vec![e(ExprKind::Int(0))] });
        let text = e(ExprKind::Index { array: Ident { name: "text".into(), span: Span::default() }, indices: vec![e(ExprKind::Int(0))] });
        assert_eq!(printed(&call("min", vec![text, e(ExprKind::Var("i".into()))])), ["text[0]", "i"]);
        assert_eq!(printed(&call("fminf", vec![data.clone(), e(ExprKind::Float { value: 1.0, single: true })])), ["data[0]", "1.0f"]);
        // C's `exp` takes a `double`: a `float` argument is converted (CUDA would call its
        // `float` overload); a `double` one is left as written.
        assert_eq!(printed(&call("exp", vec![data.clone()])), ["(double)data[0]"]);
        assert_eq!(printed(&call("exp", vec![e(ExprKind::Float { value: 0.5, single: false })])), ["0.5"]);
        assert_eq!(printed(&call("min", vec![e(ExprKind::Var("unknown".into())), e(ExprKind::Float { value: 1.0, single: true })])), ["unknown", "1.0f"]);
    }
}
