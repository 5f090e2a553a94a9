//! The infix syntax of polynomials and constraints, read back exactly as [`Poly`] prints it.
//!
//! Grammar (usual precedence; `^` takes a non-negative integer exponent; `/` only divides by a
//! non-zero constant, so every parsed expression is a polynomial):
//!   constraints := sum (rel sum)+          rel := < | <= | > | >= | == | = | !=
//!   sum := product (('+' | '-') product)*
//!   product := unary (('*' | '/') unary)*
//!   unary := ('-' | '+') unary | power
//!   power := atom ('^' integer)?
//!   atom := integer | decimal | identifier | '(' sum ')'
//! A chain `a <= b < c` is the conjunction `a <= b`, `b < c`.

use crate::constraint::Constraint;
use crate::poly::Poly;
use crate::Rational;
use num_bigint::BigInt;
use num_traits::{One, Zero};
use std::fmt;

/// Where and why a polynomial or constraint could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// Byte offset into the input.
    pub offset: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at offset {}: {}", self.offset, self.message)
    }
}

impl std::error::Error for ParseError {}

pub fn parse_poly(text: &str) -> Result<Poly, ParseError> {
    let mut p = Parser { src: text.as_bytes(), pos: 0 };
    let poly = p.sum()?;
    p.expect_end()?;
    Ok(poly)
}

/// Parse a comparison or a chain of them (`a <= b < c`) into constraints.
pub fn parse_constraints(text: &str) -> Result<Vec<Constraint>, ParseError> {
    let mut p = Parser { src: text.as_bytes(), pos: 0 };
    let mut lhs = p.sum()?;
    let mut out = Vec::new();
    while let Some(rel) = p.relation() {
        let rhs = p.sum()?;
        out.push(match rel {
            "<" => Constraint::lt(&lhs, &rhs),
            "<=" => Constraint::le(&lhs, &rhs),
            ">" => Constraint::lt(&rhs, &lhs),
            ">=" => Constraint::le(&rhs, &lhs),
            "==" | "=" => Constraint::eq(&lhs, &rhs),
            _ => Constraint::ne(&lhs, &rhs),
        });
        lhs = rhs;
    }
    if out.is_empty() {
        return Err(p.error("expected a comparison (`<`, `<=`, `>`, `>=`, `==`, `!=`)"));
    }
    p.expect_end()?;
    Ok(out)
}

/// Parse exactly one constraint.
pub fn parse_constraint(text: &str) -> Result<Constraint, ParseError> {
    let mut cs = parse_constraints(text)?;
    if cs.len() != 1 {
        return Err(ParseError { offset: 0, message: "expected a single comparison".into() });
    }
    Ok(cs.remove(0))
}

struct Parser<'a> {
    src: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn error(&self, message: &str) -> ParseError {
        ParseError { offset: self.pos, message: message.to_string() }
    }

    fn skip_ws(&mut self) {
        while self.pos < self.src.len() && self.src[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.src.get(self.pos).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect_end(&mut self) -> Result<(), ParseError> {
        match self.peek() {
            None => Ok(()),
            Some(_) => Err(self.error("unexpected text after the expression")),
        }
    }

    fn relation(&mut self) -> Option<&'static str> {
        self.skip_ws();
        let rest = &self.src[self.pos..];
        for rel in ["<=", ">=", "==", "!=", "<", ">", "="] {
            if rest.starts_with(rel.as_bytes()) {
                self.pos += rel.len();
                return Some(rel);
            }
        }
        None
    }

    fn sum(&mut self) -> Result<Poly, ParseError> {
        let mut acc = self.product()?;
        loop {
            if self.eat(b'+') {
                acc = acc + self.product()?;
            } else if self.eat(b'-') {
                acc = acc - self.product()?;
            } else {
                return Ok(acc);
            }
        }
    }

    fn product(&mut self) -> Result<Poly, ParseError> {
        let mut acc = self.unary()?;
        loop {
            if self.eat(b'*') {
                acc = acc * self.unary()?;
            } else if self.peek() == Some(b'/') {
                let at = self.pos;
                self.pos += 1;
                let divisor = self.unary()?;
                match divisor.as_constant() {
                    Some(c) if !c.is_zero() => acc = acc.scale(&(Rational::one() / c)),
                    Some(_) => return Err(ParseError { offset: at, message: "division by zero".into() }),
                    None => {
                        return Err(ParseError {
                            offset: at,
                            message: "a polynomial can only be divided by a constant".into(),
                        })
                    }
                }
            } else {
                return Ok(acc);
            }
        }
    }

    fn unary(&mut self) -> Result<Poly, ParseError> {
        if self.eat(b'-') {
            return Ok(-self.unary()?);
        }
        if self.eat(b'+') {
            return self.unary();
        }
        self.power()
    }

    fn power(&mut self) -> Result<Poly, ParseError> {
        let base = self.atom()?;
        if self.eat(b'^') {
            self.skip_ws();
            let start = self.pos;
            while self.pos < self.src.len() && self.src[self.pos].is_ascii_digit() {
                self.pos += 1;
            }
            let digits = std::str::from_utf8(&self.src[start..self.pos]).unwrap_or("");
            let e: u32 = digits.parse().map_err(|_| ParseError {
                offset: start,
                message: "expected a small non-negative integer exponent after `^`".into(),
            })?;
            if e > 64 {
                return Err(ParseError { offset: start, message: "exponent larger than 64".into() });
            }
            return Ok(base.pow(e));
        }
        Ok(base)
    }

    fn atom(&mut self) -> Result<Poly, ParseError> {
        match self.peek() {
            Some(b'(') => {
                self.pos += 1;
                let inner = self.sum()?;
                if !self.eat(b')') {
                    return Err(self.error("expected `)`"));
                }
                Ok(inner)
            }
            Some(c) if c.is_ascii_digit() => self.number(),
            Some(c) if c.is_ascii_alphabetic() || c == b'_' => {
                let start = self.pos;
                while self.pos < self.src.len()
                    && (self.src[self.pos].is_ascii_alphanumeric() || self.src[self.pos] == b'_')
                {
                    self.pos += 1;
                }
                let name = std::str::from_utf8(&self.src[start..self.pos]).unwrap_or("");
                Ok(Poly::var(name))
            }
            Some(_) => Err(self.error("expected a number, a variable or `(`")),
            None => Err(self.error("unexpected end of input")),
        }
    }

    fn number(&mut self) -> Result<Poly, ParseError> {
        let start = self.pos;
        while self.pos < self.src.len() && self.src[self.pos].is_ascii_digit() {
            self.pos += 1;
        }
        let int_part = std::str::from_utf8(&self.src[start..self.pos]).unwrap_or("0");
        let mut value = Rational::from_integer(int_part.parse::<BigInt>().unwrap_or_default());
        if self.src.get(self.pos) == Some(&b'.') {
            self.pos += 1;
            let frac_start = self.pos;
            while self.pos < self.src.len() && self.src[self.pos].is_ascii_digit() {
                self.pos += 1;
            }
            let frac = std::str::from_utf8(&self.src[frac_start..self.pos]).unwrap_or("");
            if !frac.is_empty() {
                let num: BigInt = frac.parse().unwrap_or_default();
                let den = num_traits::pow(BigInt::from(10), frac.len());
                value += Rational::new(num, den);
            }
        }
        Ok(Poly::constant(value))
    }
}
