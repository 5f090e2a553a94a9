//! Scalar values with C's (and CUDA's) semantics for the execution engine: `int` and `long`
//! wrap on overflow (two's complement, as the hardware does), integer `/` and `%` truncate
//! toward zero, `float` arithmetic is done in single precision with no contraction (no FMA),
//! conversions follow C (floating to integer truncates). These are the semantics the LLVM
//! lowering and the CUDA emitter state (`lower.rs`): both runs the verifier compares use them.

use crate::frontend::ast::{BinOp, ScalarType};

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    Int(i32),
    Long(i64),
    Float(f32),
    Double(f64),
}

impl Value {
    /// The value's type and bit pattern: equal exactly when the values are identical.
    pub fn bits(self) -> (u8, u64) {
        match self {
            Value::Int(v) => (0, v as u32 as u64),
            Value::Long(v) => (1, v as u64),
            Value::Float(v) => (2, v.to_bits() as u64),
            Value::Double(v) => (3, v.to_bits()),
        }
    }

    pub fn ty(self) -> ScalarType {
        match self {
            Value::Int(_) => ScalarType::Int,
            Value::Long(_) => ScalarType::Long,
            Value::Float(_) => ScalarType::Float,
            Value::Double(_) => ScalarType::Double,
        }
    }

    /// The zero of a type.
    pub fn zero(ty: ScalarType) -> Value {
        Value::Long(0).to(ty)
    }

    /// C's conversion to `ty` (floating to integer truncates; out of range saturates, where C
    /// leaves it undefined).
    #[inline]
    pub fn to(self, ty: ScalarType) -> Value {
        match ty {
            // A `char` is held as the `int` it is promoted to, wrapped to 8 bits.
            ScalarType::Char => Value::Int(self.to(ScalarType::Int).as_i64() as i8 as i32),
            ScalarType::Int => Value::Int(match self {
                Value::Int(x) => x,
                Value::Long(x) => x as i32,
                Value::Float(x) => x as i32,
                Value::Double(x) => x as i32,
            }),
            ScalarType::Long => Value::Long(self.as_i64()),
            ScalarType::Float => Value::Float(match self {
                Value::Int(x) => x as f32,
                Value::Long(x) => x as f32,
                Value::Float(x) => x,
                Value::Double(x) => x as f32,
            }),
            ScalarType::Double => Value::Double(self.as_f64()),
        }
    }

    pub fn as_i64(self) -> i64 {
        match self {
            Value::Int(x) => x as i64,
            Value::Long(x) => x,
            Value::Float(x) => x as i64,
            Value::Double(x) => x as i64,
        }
    }

    pub fn as_f64(self) -> f64 {
        match self {
            Value::Int(x) => x as f64,
            Value::Long(x) => x as f64,
            Value::Float(x) => x as f64,
            Value::Double(x) => x,
        }
    }

    /// C truth: not zero.
    pub fn truthy(self) -> bool {
        match self {
            Value::Int(x) => x != 0,
            Value::Long(x) => x != 0,
            Value::Float(x) => x != 0.0,
            Value::Double(x) => x != 0.0,
        }
    }

    pub fn from_bool(b: bool) -> Value {
        Value::Int(b as i32)
    }

    /// The same bits: integers equal, floats equal as bit patterns (so NaNs compare by payload
    /// and `-0.0` differs from `0.0`).
    pub fn identical(self, other: Value) -> bool {
        match (self, other) {
            (Value::Float(a), Value::Float(b)) => a.to_bits() == b.to_bits(),
            (Value::Double(a), Value::Double(b)) => a.to_bits() == b.to_bits(),
            (a, b) => a == b,
        }
    }

    pub fn neg(self) -> Value {
        match self {
            Value::Int(x) => Value::Int(x.wrapping_neg()),
            Value::Long(x) => Value::Long(x.wrapping_neg()),
            Value::Float(x) => Value::Float(-x),
            Value::Double(x) => Value::Double(-x),
        }
    }
}

/// The type of a binary arithmetic operation on `a` and `b` (the usual conversions).
pub fn common(a: ScalarType, b: ScalarType) -> ScalarType {
    ScalarType::promote(a, b)
}

/// An arithmetic or comparison operator applied with C's conversions. `Err` for integer
/// division or remainder by zero.
#[inline]
pub fn binary(op: BinOp, a: Value, b: Value) -> Result<Value, &'static str> {
    let ty = common(a.ty(), b.ty());
    let (a, b) = (a.to(ty), b.to(ty));
    if op.is_comparison() {
        let ord = match (a, b) {
            (Value::Int(x), Value::Int(y)) => x.partial_cmp(&y),
            (Value::Long(x), Value::Long(y)) => x.partial_cmp(&y),
            (Value::Float(x), Value::Float(y)) => x.partial_cmp(&y),
            (Value::Double(x), Value::Double(y)) => x.partial_cmp(&y),
            _ => unreachable!("operands converted to one type"),
        };
        use std::cmp::Ordering::*;
        let r = match op {
            BinOp::Lt => ord == Some(Less),
            BinOp::Le => matches!(ord, Some(Less | Equal)),
            BinOp::Gt => ord == Some(Greater),
            BinOp::Ge => matches!(ord, Some(Greater | Equal)),
            BinOp::Eq => ord == Some(Equal),
            _ => ord != Some(Equal),
        };
        return Ok(Value::from_bool(r));
    }
    macro_rules! int_op {
        ($x:expr, $y:expr, $ctor:path) => {
            match op {
                BinOp::Add => $ctor($x.wrapping_add($y)),
                BinOp::Sub => $ctor($x.wrapping_sub($y)),
                BinOp::Mul => $ctor($x.wrapping_mul($y)),
                BinOp::Div if $y == 0 => return Err("integer division by zero"),
                BinOp::Rem if $y == 0 => return Err("integer remainder by zero"),
                BinOp::Div => $ctor($x.wrapping_div($y)),
                BinOp::Rem => $ctor($x.wrapping_rem($y)),
                _ => unreachable!("logical operators are evaluated by the caller"),
            }
        };
    }
    macro_rules! float_op {
        ($x:expr, $y:expr, $ctor:path) => {
            match op {
                BinOp::Add => $ctor($x + $y),
                BinOp::Sub => $ctor($x - $y),
                BinOp::Mul => $ctor($x * $y),
                BinOp::Div => $ctor($x / $y),
                BinOp::Rem => $ctor($x % $y),
                _ => unreachable!("logical operators are evaluated by the caller"),
            }
        };
    }
    Ok(match (a, b) {
        (Value::Int(x), Value::Int(y)) => int_op!(x, y, Value::Int),
        (Value::Long(x), Value::Long(y)) => int_op!(x, y, Value::Long),
        (Value::Float(x), Value::Float(y)) => float_op!(x, y, Value::Float),
        (Value::Double(x), Value::Double(y)) => float_op!(x, y, Value::Double),
        _ => unreachable!("operands converted to one type"),
    })
}

/// The language's math calls, with the argument types `lower.rs` gives them.
pub fn call(name: &str, args: &[Value]) -> Result<Value, String> {
    let float_of = |ty: ScalarType, x: Value| x.to(ty);
    Ok(match (name, args) {
        ("min" | "max", [x, y]) => {
            let ty = common(common(x.ty(), y.ty()), ScalarType::Int);
            let (a, b) = (x.to(ty), y.to(ty));
            let b_wins = if name == "min" { binary(BinOp::Lt, b, a) } else { binary(BinOp::Lt, a, b) };
            // For floating operands, minnum/maxnum: a NaN operand yields the other.
            if a.as_f64().is_nan() || (!b.as_f64().is_nan() && b_wins.map_err(String::from)?.truthy()) { b } else { a }
        }
        ("fmin" | "fmax" | "fminf" | "fmaxf", [x, y]) => {
            let ty = if name.ends_with('f') { ScalarType::Float } else { ScalarType::Double };
            let (a, b) = (float_of(ty, *x), float_of(ty, *y));
            let (fa, fb) = (a.as_f64(), b.as_f64());
            let pick_a = if name.starts_with("fmin") { fa < fb } else { fa > fb };
            if fa.is_nan() { b } else if fb.is_nan() || pick_a { a } else { b }
        }
        ("abs", [Value::Int(x)]) => Value::Int(x.wrapping_abs()),
        ("abs", [Value::Long(x)]) => Value::Long(x.wrapping_abs()),
        ("abs", [Value::Float(x)]) => Value::Float(x.abs()),
        ("abs", [Value::Double(x)]) => Value::Double(x.abs()),
        ("fabs", [x]) => Value::Double(x.as_f64().abs()),
        ("fabsf", [x]) => Value::Float(float_of(ScalarType::Float, *x).as_f64().abs() as f32),
        ("sqrt", [x]) => Value::Double(x.as_f64().sqrt()),
        ("sqrtf", [x]) => match float_of(ScalarType::Float, *x) {
            Value::Float(f) => Value::Float(f.sqrt()),
            _ => unreachable!(),
        },
        // The device computes exp as 2^(x log2 e) with an approximate ex2; the reference and
        // the kernel both use this one definition, so they agree with each other.
        ("exp", [x]) => Value::Double((x.as_f64() * std::f64::consts::LOG2_E).exp2()),
        ("expf", [x]) => match float_of(ScalarType::Float, *x) {
            Value::Float(f) => Value::Float((f * std::f32::consts::LOG2_E).exp2()),
            _ => unreachable!(),
        },
        // C's `log` and `pow` (a negative base with an integral exponent included), as the
        // serial program computes them; the kernel on the engine uses the same definition.
        ("log", [x]) => Value::Double(x.as_f64().ln()),
        ("logf", [x]) => match float_of(ScalarType::Float, *x) {
            Value::Float(f) => Value::Float(f.ln()),
            _ => unreachable!(),
        },
        ("pow", [x, y]) => Value::Double(x.as_f64().powf(y.as_f64())),
        ("powf", [x, y]) => match (float_of(ScalarType::Float, *x), float_of(ScalarType::Float, *y)) {
            (Value::Float(a), Value::Float(b)) => Value::Float(a.powf(b)),
            _ => unreachable!(),
        },
        _ => return Err(format!("unsupported call `{name}` with {} arguments", args.len())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logarithms_and_powers_follow_c() {
        assert_eq!(call("powf", &[Value::Float(-2.0), Value::Int(3)]).unwrap(), Value::Float(-8.0));
        assert_eq!(call("pow", &[Value::Int(2), Value::Double(0.5)]).unwrap(), Value::Double(2f64.sqrt()));
        assert_eq!(call("logf", &[Value::Float(1.0)]).unwrap(), Value::Float(0.0));
        assert!(call("log", &[Value::Double(-1.0)]).unwrap().as_f64().is_nan());
    }

    #[test]
    fn c_arithmetic() {
        assert_eq!(binary(BinOp::Div, Value::Int(-7), Value::Int(2)).unwrap(), Value::Int(-3));
        assert_eq!(binary(BinOp::Rem, Value::Int(-7), Value::Int(2)).unwrap(), Value::Int(-1));
        assert_eq!(binary(BinOp::Add, Value::Int(i32::MAX), Value::Int(1)).unwrap(), Value::Int(i32::MIN));
        assert_eq!(binary(BinOp::Mul, Value::Int(3), Value::Long(4)).unwrap(), Value::Long(12));
        assert_eq!(binary(BinOp::Add, Value::Int(1), Value::Float(0.5)).unwrap(), Value::Float(1.5));
        assert!(binary(BinOp::Div, Value::Int(1), Value::Int(0)).is_err());
        assert_eq!(binary(BinOp::Lt, Value::Double(1.0), Value::Int(2)).unwrap(), Value::Int(1));
        assert_eq!(Value::Double(-2.7).to(ScalarType::Int), Value::Int(-2));
        assert_eq!(call("min", &[Value::Int(3), Value::Long(-1)]).unwrap(), Value::Long(-1));
        assert_eq!(call("max", &[Value::Int(3), Value::Int(5)]).unwrap(), Value::Int(5));
        assert_eq!(call("fmaxf", &[Value::Float(f32::NAN), Value::Float(2.0)]).unwrap(), Value::Float(2.0));
        assert!(!Value::Float(0.0).identical(Value::Float(-0.0)));
    }
}
