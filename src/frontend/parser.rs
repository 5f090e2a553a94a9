//! The parser: tokens to [`Program`], stopping at the first syntax error with a diagnostic that
//! says what was expected. Constructs outside the MetaFork subset (pointers, `while`, `switch`,
//! bitwise operators, ...) are recognised and refused by name rather than with a generic error.
//! Nesting deeper than [`MAX_DEPTH`] is refused, so no input can exhaust the stack.

use super::ast::*;
use super::diag::Diagnostic;
use super::lexer::{Tok, Token};
use super::source::Span;
use std::collections::HashSet;

/// The deepest nesting of statements and expressions accepted (each parenthesis level costs
/// two, each unary operator or cast one); real kernels nest < 20.
pub const MAX_DEPTH: usize = 128;
/// The deepest syntax tree accepted: nesting plus the operators of left-leaning chains
/// (`a + b + ... + z` is as deep as it has operators), which later passes recurse over. A flat
/// sum of 1000 terms is accepted. Measured: the passes need well under 64 MiB of stack (the
/// binary's worker thread, and tests through `.cargo/config.toml`'s `RUST_MIN_STACK`) here.
pub const MAX_TREE_DEPTH: usize = 2048;

pub fn parse(tokens: Vec<Token>) -> Result<Program, Diagnostic> {
    let mut p = Parser::new(tokens);
    let mut functions = Vec::new();
    while !p.at_eof() {
        functions.push(p.function()?);
    }
    if functions.is_empty() {
        return Err(Diagnostic::new(
            p.span(),
            "no kernel function in this file",
            "expected a function such as `void f(int N, float a[N]) { ... }`",
        ));
    }
    Ok(Program { functions })
}

/// One C expression and nothing after it (a tuning space's restriction, for instance).
pub fn parse_expression(tokens: Vec<Token>) -> Result<Expr, Diagnostic> {
    let mut p = Parser::new(tokens);
    let e = p.expr()?;
    if !p.at_eof() {
        return Err(Diagnostic::new(p.span(), "unexpected text after the expression", "expected the end of the expression"));
    }
    Ok(e)
}

type PResult<T> = Result<T, Diagnostic>;

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
    depth: usize,
    /// `depth` plus the chained operators above the current point.
    tree_depth: usize,
    /// Every identifier of the file, and the counters made up for loops counting down: a
    /// made-up counter takes a name outside this set ([`Parser::fresh_counter`]).
    names: HashSet<String>,
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Ident(s) => format!("identifier `{s}`"),
        Tok::Int(v) => format!("number `{v}`"),
        Tok::Long(v) => format!("number `{v}L`"),
        Tok::Float(v, _) => format!("number `{v:?}`"),
        Tok::Sym(s) => format!("`{s}`"),
        Tok::Eof => "end of file".into(),
    }
}

/// Refusals for C constructs outside the subset, by their first token.
fn refused_statement(word: &str) -> Option<&'static str> {
    Some(match word {
        "while" | "do" => "`while` and `do` loops are not supported; use a `for` loop with a constant step",
        "goto" => "`goto` is not supported",
        "switch" | "case" | "default" => "`switch` is not supported; use `if` / `else`",
        "return" => "`return` is not supported in a kernel function",
        "break" | "continue" => "`break` and `continue` are not supported: loops run their whole range",
        "struct" | "union" | "enum" | "typedef" => "user-defined types are not supported",
        "short" | "unsigned" | "signed" | "bool" => "only `char`, `int`, `long` (also written `long int` or `long long`), `float` and `double` are supported",
        "static" | "extern" | "volatile" | "register" | "auto" => "storage-class specifiers are not supported",
        "sizeof" => "`sizeof` is not supported",
        _ => return None,
    })
}

impl Parser {
    fn new(tokens: Vec<Token>) -> Parser {
        let names = tokens.iter().filter_map(|t| match &t.tok {
            Tok::Ident(n) => Some(n.clone()),
            _ => None,
        }).collect();
        Parser { tokens, pos: 0, depth: 0, tree_depth: 0, names }
    }

    fn peek(&self) -> &Tok {
        &self.tokens[self.pos].tok
    }

    fn peek_at(&self, k: usize) -> &Tok {
        let i = (self.pos + k).min(self.tokens.len() - 1);
        &self.tokens[i].tok
    }

    fn span(&self) -> Span {
        self.tokens[self.pos].span
    }

    fn prev_span(&self) -> Span {
        self.tokens[self.pos.saturating_sub(1)].span
    }

    fn at_eof(&self) -> bool {
        matches!(self.peek(), Tok::Eof)
    }

    fn bump(&mut self) -> Token {
        let t = self.tokens[self.pos].clone();
        if self.pos + 1 < self.tokens.len() {
            self.pos += 1;
        }
        t
    }

    fn is(&self, s: &str) -> bool {
        matches!(self.peek(), Tok::Sym(x) if *x == s)
    }

    fn eat(&mut self, s: &str) -> bool {
        if self.is(s) {
            self.bump();
            true
        } else {
            false
        }
    }

    fn error_here(&self, message: impl Into<String>, label: impl Into<String>) -> Diagnostic {
        Diagnostic::new(self.span(), message, label)
    }

    /// Consume `s`, or report what was found instead and what the construct needs.
    fn expect(&mut self, s: &str, context: &str) -> PResult<Span> {
        if self.is(s) {
            return Ok(self.bump().span);
        }
        let found = describe(self.peek());
        // A missing `;` is best reported right after the previous token.
        let span = if s == ";" && self.pos > 0 {
            let p = self.prev_span();
            Span::new(p.end, p.end)
        } else {
            self.span()
        };
        Err(Diagnostic::new(span, format!("expected `{s}` {context}, found {found}"), format!("expected `{s}`")))
    }

    fn ident(&mut self, what: &str) -> PResult<Ident> {
        match self.peek().clone() {
            Tok::Ident(name) => Ok(Ident { name, span: self.bump().span }),
            t => Err(self.error_here(format!("expected {what}, found {}", describe(&t)), format!("expected {what}"))),
        }
    }

    fn enter(&mut self) -> PResult<()> {
        self.depth += 1;
        self.tree_depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error_here(format!("nesting deeper than {MAX_DEPTH} levels"), "too deeply nested"));
        }
        if self.tree_depth > MAX_TREE_DEPTH {
            return Err(self.error_here(format!("expression of more than {MAX_TREE_DEPTH} chained operators or nested levels"), "too long an expression").with_note("each operator of a chain (`a + b + c + ...`) nests the expression one level deeper; split it into partial sums held in locals"));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
        self.tree_depth -= 1;
    }

    fn scalar_type(&mut self) -> Option<ScalarType> {
        self.spelled_scalar_type().map(|(t, _)| t)
    }

    /// A scalar type and its C spelling as a caller's C or C++ names it (`char`, `long long`):
    /// `char` and `signed char`, `long` and `long long` are one type here, but distinct types
    /// of C++, so the host-facing declarations keep the program's ([`Param::spelling`]).
    fn spelled_scalar_type(&mut self) -> Option<(ScalarType, &'static str)> {
        let t = match self.peek() {
            Tok::Sym("char") => ScalarType::Char,
            Tok::Sym("int") => ScalarType::Int,
            Tok::Sym("long") => ScalarType::Long,
            Tok::Sym("float") => ScalarType::Float,
            Tok::Sym("double") => ScalarType::Double,
            _ => return None,
        };
        self.bump();
        // `long int` and `long long` mean long.
        let mut spelling = t.c_name();
        match t {
            ScalarType::Char => spelling = "char",
            ScalarType::Long => {
                while self.is("long") || self.is("int") {
                    if self.is("long") {
                        spelling = "long long";
                    }
                    self.bump();
                }
            }
            _ => {}
        }
        Some((t, spelling))
    }

    fn refuse_if_unsupported_word(&self) -> PResult<()> {
        if let Tok::Sym(w) = self.peek() {
            if let Some(msg) = refused_statement(w) {
                return Err(self.error_here(msg, "not in the MetaFork subset"));
            }
        }
        Ok(())
    }

    fn function(&mut self) -> PResult<Function> {
        let start = self.span();
        if !self.is("void") {
            self.refuse_if_unsupported_word()?;
            if self.scalar_type().is_some() {
                return Err(Diagnostic::new(
                    start.to(self.prev_span()),
                    "kernel functions must return `void`",
                    "results are written to array parameters",
                ));
            }
            return Err(self.error_here(
                format!("expected a kernel function, found {}", describe(self.peek())),
                "expected `void`",
            ));
        }
        self.bump();
        let name = self.ident("the function's name")?;
        self.expect("(", "after the function's name")?;
        let mut params = Vec::new();
        if !self.is(")") {
            if self.is("void") && matches!(self.peek_at(1), Tok::Sym(")")) {
                self.bump();
            } else {
                loop {
                    params.push(self.param()?);
                    if !self.eat(",") {
                        break;
                    }
                }
            }
        }
        self.expect(")", "to close the parameter list")?;
        if !self.is("{") {
            return Err(self.error_here(
                format!("expected `{{` to begin the function body, found {}", describe(self.peek())),
                "expected `{`",
            ));
        }
        let body_start = self.span();
        let body = match self.block()?.kind {
            StmtKind::Block(b) => b,
            _ => unreachable!("block() returns a block"),
        };
        let _ = body_start;
        Ok(Function { name, params, body, span: start.to(self.prev_span()) })
    }

    fn param(&mut self) -> PResult<Param> {
        let start = self.span();
        let mut is_const = self.eat("const");
        let Some((ty, spelling)) = self.spelled_scalar_type() else {
            self.refuse_if_unsupported_word()?;
            return Err(self.error_here(
                format!("expected a parameter type (`char`, `int`, `long`, `float`, `double`), found {}", describe(self.peek())),
                "expected a type",
            ));
        };
        is_const |= self.eat("const");
        if self.is("*") || self.is("&") {
            return Err(self.error_here(
                "pointers are not supported; declare an array with its extents, e.g. `float a[N][N]`",
                "pointer here",
            ));
        }
        let name = self.ident("a parameter name")?;
        let mut dims = Vec::new();
        while self.eat("[") {
            if self.is("]") {
                return Err(self.error_here(
                    "array parameters need every extent, e.g. `float a[N][N]`",
                    "expected an extent",
                ));
            }
            dims.push(self.expr()?);
            self.expect("]", "to close the array extent")?;
        }
        Ok(Param { name, ty, spelling, is_const, dims, span: start.to(self.prev_span()) })
    }

    fn block(&mut self) -> PResult<Stmt> {
        let start = self.expect("{", "to begin a block")?;
        self.enter()?;
        let mut stmts = Vec::new();
        while !self.is("}") {
            if self.at_eof() {
                return Err(Diagnostic::new(start, "unclosed block: expected `}`", "this `{` is never closed"));
            }
            stmts.push(self.stmt()?);
        }
        self.bump();
        self.leave();
        Ok(Stmt { kind: StmtKind::Block(stmts), span: start.to(self.prev_span()) })
    }

    fn stmt(&mut self) -> PResult<Stmt> {
        self.enter()?;
        let s = self.stmt_inner();
        self.leave();
        s
    }

    fn stmt_inner(&mut self) -> PResult<Stmt> {
        let start = self.span();
        let finish = |p: &Parser, kind| Stmt { kind, span: start.to(p.prev_span()) };
        match self.peek().clone() {
            Tok::Sym("{") => self.block(),
            Tok::Sym(";") => {
                self.bump();
                Ok(finish(self, StmtKind::Empty))
            }
            Tok::Sym("if") => {
                self.bump();
                self.expect("(", "after `if`")?;
                let cond = self.expr()?;
                self.expect(")", "to close the `if` condition")?;
                let then_branch = Box::new(self.stmt()?);
                let else_branch = if self.eat("else") { Some(Box::new(self.stmt()?)) } else { None };
                Ok(finish(self, StmtKind::If { cond, then_branch, else_branch }))
            }
            Tok::Sym("for") => {
                self.bump();
                let l = self.for_header(false)?;
                Ok(finish(self, StmtKind::For(l)))
            }
            Tok::Sym("meta_for") => {
                self.bump();
                let l = self.for_header(true)?;
                Ok(finish(self, StmtKind::MetaFor(l)))
            }
            Tok::Sym("meta_schedule") => {
                self.bump();
                let mut cache = Vec::new();
                if self.eat("cache") {
                    self.expect("(", "after `cache`")?;
                    loop {
                        cache.push(self.ident("an array name in `cache(...)`")?);
                        if !self.eat(",") {
                            break;
                        }
                    }
                    self.expect(")", "to close `cache(...)`")?;
                }
                if !self.is("{") && !self.is("meta_for") {
                    return Err(self.error_here(
                        format!("expected `{{` or `meta_for` after `meta_schedule`, found {}", describe(self.peek())),
                        "expected the schedule's body",
                    ));
                }
                let body = Box::new(self.stmt()?);
                Ok(finish(self, StmtKind::MetaSchedule { cache, body }))
            }
            Tok::Sym(w @ ("assume" | "assert")) => {
                self.bump();
                self.expect("(", &format!("after `{w}`"))?;
                let e = self.expr()?;
                self.expect(")", &format!("to close `{w}(...)`"))?;
                self.expect(";", &format!("after `{w}(...)`"))?;
                Ok(finish(self, if w == "assume" { StmtKind::Assume(e) } else { StmtKind::Assert(e) }))
            }
            Tok::Sym("const" | "char" | "int" | "long" | "float" | "double") => {
                self.eat("const");
                let Some(ty) = self.scalar_type() else {
                    return Err(self.error_here("expected a type after `const`", "expected a type"));
                };
                if matches!(self.peek(), Tok::Ident(_)) && self.peek_at(1) == &Tok::Sym("[") {
                    let (name, dims, init) = self.local_array()?;
                    return Ok(finish(self, StmtKind::LocalArray { ty, name, dims, init }));
                }
                let vars = self.declarators()?;
                Ok(finish(self, StmtKind::Decl { ty, vars }))
            }
            Tok::Sym("else") => Err(self.error_here("`else` without a matching `if`", "unexpected `else`")),
            Tok::Sym(w) if refused_statement(w).is_some() => {
                Err(self.error_here(refused_statement(w).unwrap_or_default(), "not in the MetaFork subset"))
            }
            Tok::Sym("++" | "--") => {
                let op_tok = self.bump();
                let target = self.unary()?;
                let op = if op_tok.tok == Tok::Sym("++") { AssignOp::Add } else { AssignOp::Sub };
                self.expect(";", "after the statement")?;
                let one = Expr::new(ExprKind::Int(1), op_tok.span);
                Ok(finish(self, StmtKind::Assign { target, op, value: one }))
            }
            _ => self.assignment(),
        }
    }

    fn declarators(&mut self) -> PResult<Vec<Declarator>> {
        let mut vars = Vec::new();
        loop {
            if self.is("*") {
                return Err(self.error_here("pointers are not supported", "pointer here"));
            }
            let name = self.ident("a variable name")?;
            if self.is("[") {
                return Err(self.error_here(
                    "declare a per-thread array on its own (`float acc[4];`), not in a list with other names",
                    "array declarator here",
                ));
            }
            if !self.is("=") {
                return Err(self.error_here(
                    format!("expected `=` after `{}`: declarations must have an initializer", name.name),
                    "expected `=`",
                ));
            }
            self.bump();
            let init = self.expr()?;
            vars.push(Declarator { name, init });
            if !self.eat(",") {
                break;
            }
        }
        self.expect(";", "after the declaration")?;
        Ok(vars)
    }

    /// `name[d0][d1]... [= init];` after the element type: a per-thread array (its extents
    /// and subscripts are checked by `local_arrays`, which makes it scalars).
    fn local_array(&mut self) -> PResult<(Ident, Vec<Expr>, Option<Init>)> {
        let name = self.ident("an array name")?;
        let mut dims = Vec::new();
        while self.eat("[") {
            if self.is("]") {
                return Err(self.error_here(format!("per-thread array `{}` needs its extent between `[` and `]`", name.name), "expected a constant extent"));
            }
            dims.push(self.expr()?);
            self.expect("]", "to close the array's extent")?;
        }
        let init = match self.eat("=") {
            true => Some(self.initializer()?),
            false => None,
        };
        if self.is(",") {
            return Err(self.error_here("declare a per-thread array on its own (`float acc[4];`), not in a list with other names", "another declarator here"));
        }
        self.expect(";", "after the declaration")?;
        Ok((name, dims, init))
    }

    /// An initializer: an expression, or `{ init, ... }` (a trailing comma allowed).
    fn initializer(&mut self) -> PResult<Init> {
        if !self.is("{") {
            return Ok(Init::Value(self.expr()?));
        }
        self.enter()?;
        let start = self.span();
        self.bump();
        let mut items = Vec::new();
        while !self.is("}") {
            items.push(self.initializer()?);
            if !self.eat(",") {
                break;
            }
        }
        self.expect("}", "to close the initializer")?;
        self.leave();
        Ok(Init::List(items, start.to(self.prev_span())))
    }

    fn assignment(&mut self) -> PResult<Stmt> {
        let start = self.span();
        let target = self.expr()?;
        let op = match self.peek() {
            Tok::Sym("=") => AssignOp::Set,
            Tok::Sym("+=") => AssignOp::Add,
            Tok::Sym("-=") => AssignOp::Sub,
            Tok::Sym("*=") => AssignOp::Mul,
            Tok::Sym("/=") => AssignOp::Div,
            Tok::Sym(op @ ("%=" | "&=" | "|=" | "^=" | "<<=" | ">>=")) => {
                let op = *op;
                return Err(self.error_here(format!("compound assignment `{op}` is not supported"), "use `x = x ... y`"));
            }
            Tok::Sym(op @ ("++" | "--")) => {
                let op = if *op == "++" { AssignOp::Add } else { AssignOp::Sub };
                let sp = self.bump().span;
                self.expect(";", "after the statement")?;
                let one = Expr::new(ExprKind::Int(1), sp);
                return Ok(Stmt { kind: StmtKind::Assign { target, op, value: one }, span: start.to(self.prev_span()) });
            }
            t => {
                let found = describe(t);
                if matches!(target.kind, ExprKind::Call(..)) {
                    return Err(Diagnostic::new(
                        target.span,
                        "a call cannot stand alone as a statement",
                        "expected an assignment",
                    ));
                }
                return Err(self.error_here(
                    format!("expected an assignment operator (`=`, `+=`, `-=`, `*=`, `/=`) after the expression, found {found}"),
                    "expected `=`",
                ));
            }
        };
        self.bump();
        let value = self.expr()?;
        if self.is("=") || self.is("+=") || self.is("-=") {
            return Err(self.error_here("chained assignments are not supported", "one assignment per statement"));
        }
        self.expect(";", "after the assignment")?;
        Ok(Stmt { kind: StmtKind::Assign { target, op, value }, span: start.to(self.prev_span()) })
    }

    /// `(int v = lo; v < hi; v++)` and the body. `meta_for` requires a unit step.
    fn for_header(&mut self, meta: bool) -> PResult<ForLoop> {
        let kw = if meta { "meta_for" } else { "for" };
        self.expect("(", &format!("after `{kw}`"))?;
        let Some(ty) = self.scalar_type() else {
            return Err(self.error_here(
                format!("expected the loop counter's declaration (`int {} = ...`), found {}", "i", describe(self.peek())),
                "expected `int`",
            ));
        };
        if !ty.is_integer() {
            return Err(Diagnostic::new(self.prev_span(), "loop counters must be `int` or `long`", "floating counter"));
        }
        let var = self.ident("the loop counter's name")?;
        self.expect("=", "after the loop counter")?;
        let lo = self.expr()?;
        self.expect(";", "after the loop's initial value")?;
        let cond_var = self.ident(&format!("the loop counter `{}` in the condition", var.name))?;
        if cond_var.name != var.name {
            return Err(Diagnostic::new(
                cond_var.span,
                format!("the loop condition must test the counter `{}`", var.name),
                format!("expected `{}`", var.name),
            ));
        }
        let inclusive = match self.peek() {
            Tok::Sym("<") => false,
            Tok::Sym("<=") => true,
            Tok::Sym(op @ (">=" | ">")) => {
                let inclusive = *op == ">=";
                return self.downward(meta, ty, var, lo, inclusive);
            }
            t => {
                let what = if meta { "`<`" } else { "`<` or `<=` (counting up), or `>=` or `>` (counting down)," };
                return Err(self.error_here(
                    format!("expected {what} in the loop condition, found {}", describe(t)),
                    "unsupported loop condition",
                ))
            }
        };
        self.bump();
        let hi = self.expr()?;
        // `k < a && k <= b` parses as a bound that names the counter: say what to write.
        let mut names = Vec::new();
        hi.names(&mut names);
        if names.contains(&var.name) {
            let op = if inclusive { "<=" } else { "<" };
            return Err(Diagnostic::new(
                hi.span,
                format!("the loop's bound cannot use its own counter `{v}`: the condition is `{v} {op} bound` with one bound (for two, write `{v} < min(a, b)`, or test one of them in an `if` around the body)", v = var.name),
                "the bound names the counter",
            )
            .with_note("a `meta_for` bound that reads an enclosing `meta_for` counter (`w <= v`) cannot be inside `min`: keep that one in the loop's condition and test the other in the `if`"));
        }
        self.expect(";", "after the loop condition")?;
        let step = self.for_step(&var, meta)?;
        self.expect(")", &format!("to close the `{kw}` header"))?;
        let body = Box::new(self.stmt()?);
        // A `meta_for` runs `lo <= v < hi`: `v <= b` is `v < b + 1` (a grid or block has an
        // extent, not a last index).
        if meta && inclusive {
            let span = hi.span;
            let hi = Expr::new(ExprKind::Binary(BinOp::Add, Box::new(hi), Box::new(Expr::new(ExprKind::Int(1), span))), span);
            return Ok(ForLoop { var, ty, lo, hi, inclusive: false, step, body });
        }
        Ok(ForLoop { var, ty, lo, hi, inclusive, step, body })
    }

    fn for_step(&mut self, var: &Ident, meta: bool) -> PResult<i64> {
        let bad = |p: &Parser| {
            let what = if meta { "`v++`, `++v` or `v += 1`" } else { "`k++`, `++k` or `k += c` with a positive constant `c` (a loop counting down tests `k >= lo` or `k > lo`)" };
            p.error_here(format!("expected the loop step: {what}"), "unsupported loop step")
        };
        let check_var = |p: &mut Parser| -> PResult<()> {
            let v = p.ident("the loop counter")?;
            if v.name != var.name {
                return Err(Diagnostic::new(v.span, format!("the loop step must update the counter `{}`", var.name), format!("expected `{}`", var.name)));
            }
            Ok(())
        };
        if self.eat("++") {
            check_var(self)?;
            return Ok(1);
        }
        if !matches!(self.peek(), Tok::Ident(_)) {
            return Err(bad(self));
        }
        check_var(self)?;
        if self.eat("++") {
            return Ok(1);
        }
        if self.eat("+=") {
            let sp = self.span();
            return match self.peek().clone() {
                Tok::Int(c) if c > 0 && (!meta || c == 1) => {
                    self.bump();
                    Ok(c)
                }
                _ => Err(Diagnostic::new(
                    sp,
                    if meta { "`meta_for` loops must step by 1" } else { "the loop step must be a positive integer constant" },
                    "unsupported step",
                )),
            };
        }
        Err(bad(self))
    }

    /// The rest of a header whose condition counts down, from its `>=` or `>`:
    /// `for (T v = HI; v >= LO; v -= c) BODY` (`v > LO`; `v--`, `--v`: `c` = 1; `c` a positive
    /// constant). Only serial loops count down: a `meta_for`'s iterations run in parallel, so it
    /// is refused with the same iterations written upward.
    ///
    /// The loop becomes an upward loop over a fresh counter `k` ([`Parser::fresh_counter`]) with
    /// `v` declared at the top of its body:
    ///
    /// ```text
    /// for (T k = 0; k <= HI - LO; k += c) { T v = HI - k; BODY }   // v >= LO
    /// for (T k = 0; k <  HI - LO; k += c) { T v = HI - k; BODY }   // v >  LO
    /// ```
    ///
    /// (`HI - LO` is `HI` when LO is the literal 0.)
    ///
    /// `v` takes C's values HI, HI - c, ... while `v >= LO` (`HI - k >= LO` is `k <= HI - LO`),
    /// in C's order; no division, so steps that do not divide `HI - LO` are exact, and the loop
    /// runs no iteration when HI < LO (or HI <= LO). C reads HI once and LO at every test; here
    /// LO still is, and HI is read at every test and in `v`'s definition, the same value as long
    /// as the body writes nothing HI reads, which is checked. `v` stays read-only: the body may
    /// not assign it, as with any loop counter. The synthesized nodes carry the spans of the
    /// source they come from (the counter `v`'s, HI's, LO's).
    fn downward(&mut self, meta: bool, ty: ScalarType, var: Ident, start: Expr, inclusive: bool) -> PResult<ForLoop> {
        let op = if inclusive { ">=" } else { ">" };
        let op_span = self.bump().span;
        let bound = self.expr()?;
        let mut names = Vec::new();
        bound.names(&mut names);
        if names.contains(&var.name) {
            return Err(Diagnostic::new(
                bound.span,
                format!("the loop's bound cannot use its own counter `{v}`: the condition is `{v} {op} bound` with one bound (for two, write `{v} {op} max(a, b)`)", v = var.name),
                "the bound names the counter",
            ));
        }
        self.expect(";", "after the loop condition")?;
        if meta {
            return Err(self.meta_for_down(ty, &var, &start, &bound, inclusive, op_span));
        }
        let step = self.for_step_down(&var, op, op_span)?;
        self.expect(")", "to close the `for` header")?;
        let body = self.stmt()?;
        check_downward_body(&var, &start, &body)?;
        let counter = Ident { name: self.fresh_counter(&var.name), span: var.span };
        let counter_var = Expr::new(ExprKind::Var(counter.name.clone()), var.span);
        let zero = Expr::new(ExprKind::Int(0), start.span);
        let trips = if bound.kind == ExprKind::Int(0) {
            start.clone()
        } else {
            let span = start.span.to(bound.span);
            Expr::new(ExprKind::Binary(BinOp::Sub, Box::new(start.clone()), Box::new(bound)), span)
        };
        let value = Expr::new(ExprKind::Binary(BinOp::Sub, Box::new(start.clone()), Box::new(counter_var)), start.span);
        let decl_span = var.span.to(start.span);
        let decl = Stmt { kind: StmtKind::Decl { ty, vars: vec![Declarator { name: var, init: value }] }, span: decl_span };
        let body_span = body.span;
        let stmts = match body.kind {
            StmtKind::Block(mut items) => {
                items.insert(0, decl);
                items
            }
            _ => vec![decl, body],
        };
        let body = Box::new(Stmt { kind: StmtKind::Block(stmts), span: body_span });
        Ok(ForLoop { var: counter, ty, lo: zero, hi: trips, inclusive, step, body })
    }

    /// `v--`, `--v` or `v -= c` (a positive integer constant `c`): the step of a loop counting
    /// down. A step counting up is reported at the condition's `op` (at `op_span`).
    fn for_step_down(&mut self, var: &Ident, op: &str, op_span: Span) -> PResult<i64> {
        let up = |step: &str| {
            Diagnostic::new(
                op_span,
                format!("expected `<` or `<=` in the loop condition: the step `{step}` counts up (a loop counting down tests `{v} {op} lo` and steps with `{v}--`, `--{v}` or `{v} -= c`)", v = var.name),
                "the step counts up",
            )
        };
        let check_var = |p: &mut Parser| -> PResult<()> {
            let v = p.ident("the loop counter")?;
            if v.name != var.name {
                return Err(Diagnostic::new(v.span, format!("the loop step must update the counter `{}`", var.name), format!("expected `{}`", var.name)));
            }
            Ok(())
        };
        if self.is("++") {
            return Err(up(&format!("++{}", var.name)));
        }
        if self.eat("--") {
            check_var(self)?;
            return Ok(1);
        }
        if matches!(self.peek(), Tok::Ident(_)) {
            check_var(self)?;
            if self.eat("--") {
                return Ok(1);
            }
            if self.is("++") {
                return Err(up(&format!("{}++", var.name)));
            }
            if self.is("+=") {
                return Err(up(&format!("{} += ...", var.name)));
            }
            if self.eat("-=") {
                let sp = self.span();
                return match self.peek().clone() {
                    Tok::Int(c) if c > 0 => {
                        self.bump();
                        Ok(c)
                    }
                    _ => Err(Diagnostic::new(sp, "the loop step must be a positive integer constant", "unsupported step")),
                };
            }
        }
        Err(self.error_here(
            format!("expected the step of a loop counting down: `{v}--`, `--{v}` or `{v} -= c` with a positive constant `c`", v = var.name),
            "unsupported loop step",
        ))
    }

    /// The error for a `meta_for` counting down (at its condition's operator): what to write
    /// instead, the same iterations counting up, when its step (not yet read) is one.
    fn meta_for_down(&self, ty: ScalarType, var: &Ident, start: &Expr, bound: &Expr, inclusive: bool, op_span: Span) -> Diagnostic {
        let v = &var.name;
        let is_var = |t: &Tok| matches!(t, Tok::Ident(n) if n == v);
        let unit = (self.peek() == &Tok::Sym("--") && is_var(self.peek_at(1)))
            || (is_var(self.peek()) && self.peek_at(1) == &Tok::Sym("--"))
            || (is_var(self.peek()) && self.peek_at(1) == &Tok::Sym("-=") && self.peek_at(2) == &Tok::Int(1));
        let message = if unit {
            let first = if inclusive { bound.clone() } else { plus_one(bound) };
            format!(
                "`meta_for` loops must count up by 1: their iterations run in parallel, in no order, so write the same iterations counting up: `meta_for ({ty} {v} = {first}; {v} < {}; {v}++)`",
                plus_one(start)
            )
        } else {
            format!("`meta_for` loops must count up by 1 (`meta_for ({ty} {v} = lo; {v} < hi; {v}++)`): their iterations run in parallel, in no order")
        };
        Diagnostic::new(op_span, message, "counts down")
    }

    /// A name for the counter of a loop counting down over `var`: `<var>_down`, or
    /// `<var>_down2`, `<var>_down3`, ..., the first that no identifier of the file is and no
    /// other made-up counter has. It is an ordinary name of the program from here on (spelled
    /// by `names::c_ident` like any other), so it never meets a name the user wrote; it is not
    /// an internal `$` name, which later passes take for the tool's own bounded temporaries
    /// (`strategy::narrow` would narrow a `long` one to `int`).
    fn fresh_counter(&mut self, var: &str) -> String {
        fresh_name(&mut self.names, &format!("{var}_down"))
    }

    // ---- expressions, by C precedence ----

    pub fn expr(&mut self) -> PResult<Expr> {
        self.enter()?;
        let e = self.conditional();
        self.leave();
        e
    }

    fn conditional(&mut self) -> PResult<Expr> {
        let c = self.binary(0)?;
        if self.eat("?") {
            let a = self.expr()?;
            self.expect(":", "in the conditional expression")?;
            let b = self.expr()?;
            let span = c.span.to(b.span);
            return Ok(Expr::new(ExprKind::Cond(Box::new(c), Box::new(a), Box::new(b)), span));
        }
        Ok(c)
    }

    fn binop_here(&self) -> PResult<Option<BinOp>> {
        Ok(Some(match self.peek() {
            Tok::Sym("*") => BinOp::Mul,
            Tok::Sym("/") => BinOp::Div,
            Tok::Sym("%") => BinOp::Rem,
            Tok::Sym("+") => BinOp::Add,
            Tok::Sym("-") => BinOp::Sub,
            Tok::Sym("<") => BinOp::Lt,
            Tok::Sym("<=") => BinOp::Le,
            Tok::Sym(">") => BinOp::Gt,
            Tok::Sym(">=") => BinOp::Ge,
            Tok::Sym("==") => BinOp::Eq,
            Tok::Sym("!=") => BinOp::Ne,
            Tok::Sym("&&") => BinOp::And,
            Tok::Sym("||") => BinOp::Or,
            Tok::Sym(op @ ("&" | "|" | "^" | "<<" | ">>")) => {
                return Err(self.error_here(
                    format!("bitwise operator `{op}` is not part of the MetaFork subset"),
                    "unsupported operator",
                ))
            }
            _ => return Ok(None),
        }))
    }

    /// Precedence climbing over left-associative binary operators.
    /// Each operator of a chain deepens the (left-leaning) tree by one, so it counts towards
    /// the tree's depth ([`MAX_TREE_DEPTH`]), not towards nesting: later passes recurse over it.
    fn binary(&mut self, min_prec: u8) -> PResult<Expr> {
        let mut lhs = self.unary()?;
        let mut chained = 0;
        let result = loop {
            let op = match self.binop_here() {
                Ok(Some(op)) if op.precedence() >= min_prec => op,
                Ok(_) => break Ok(lhs),
                Err(e) => break Err(e),
            };
            self.bump();
            chained += 1;
            self.tree_depth += 1;
            if self.tree_depth > MAX_TREE_DEPTH {
                break Err(self.error_here(format!("expression of more than {MAX_TREE_DEPTH} chained operators or nested levels"), "too long an expression").with_note("each operator of a chain (`a + b + c + ...`) nests the expression one level deeper; split it into partial sums held in locals"));
            }
            let rhs = match self.binary(op.precedence() + 1) {
                Ok(r) => r,
                Err(e) => break Err(e),
            };
            let span = lhs.span.to(rhs.span);
            lhs = Expr::new(ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)), span);
        };
        self.tree_depth -= chained;
        result
    }

    fn unary(&mut self) -> PResult<Expr> {
        self.enter()?;
        let e = self.unary_inner();
        self.leave();
        e
    }

    fn unary_inner(&mut self) -> PResult<Expr> {
        let start = self.span();
        match self.peek() {
            Tok::Sym("-") => {
                self.bump();
                let e = self.unary()?;
                let span = start.to(e.span);
                Ok(Expr::new(ExprKind::Unary(UnOp::Neg, Box::new(e)), span))
            }
            Tok::Sym("+") => {
                self.bump();
                self.unary()
            }
            Tok::Sym("!") => {
                self.bump();
                let e = self.unary()?;
                let span = start.to(e.span);
                Ok(Expr::new(ExprKind::Unary(UnOp::Not, Box::new(e)), span))
            }
            Tok::Sym("*") => Err(self.error_here("pointer dereference is not supported", "pointers are not in the MetaFork subset")),
            Tok::Sym("&") => Err(self.error_here("taking an address is not supported", "pointers are not in the MetaFork subset")),
            Tok::Sym("~") => Err(self.error_here("bitwise operator `~` is not part of the MetaFork subset", "unsupported operator")),
            Tok::Sym("++" | "--") => Err(self.error_here(
                "increment and decrement are only supported as statements (`x++;`) and loop steps",
                "not inside an expression",
            )),
            Tok::Sym("(") if matches!(self.peek_at(1), Tok::Sym("char" | "int" | "long" | "float" | "double" | "const")) => {
                self.bump();
                self.eat("const");
                let ty = self.scalar_type().ok_or_else(|| self.error_here("expected a type in the cast", "expected a type"))?;
                if self.is("*") {
                    return Err(self.error_here("pointer casts are not supported", "pointer here"));
                }
                self.expect(")", "to close the cast")?;
                let e = self.unary()?;
                let span = start.to(e.span);
                Ok(Expr::new(ExprKind::Cast(ty, Box::new(e)), span))
            }
            _ => self.postfix(),
        }
    }

    fn postfix(&mut self) -> PResult<Expr> {
        let start = self.span();
        match self.peek().clone() {
            Tok::Int(v) => {
                self.bump();
                Ok(Expr::new(ExprKind::Int(v), start))
            }
            // C's `7L`: a `long` whose value fits in `int`.
            Tok::Long(v) => {
                self.bump();
                Ok(Expr::new(ExprKind::Cast(ScalarType::Long, Box::new(Expr::new(ExprKind::Int(v), start))), start))
            }
            Tok::Float(value, single) => {
                self.bump();
                Ok(Expr::new(ExprKind::Float { value, single }, start))
            }
            Tok::Sym("(") => {
                self.bump();
                let e = self.expr()?;
                self.expect(")", "to close the parenthesis")?;
                let mut e = e;
                e.span = start.to(self.prev_span());
                self.no_postfix_after_paren()?;
                Ok(e)
            }
            Tok::Ident(name) => {
                let id = Ident { name: name.clone(), span: self.bump().span };
                if self.eat("(") {
                    let mut args = Vec::new();
                    if !self.is(")") {
                        loop {
                            args.push(self.expr()?);
                            if !self.eat(",") {
                                break;
                            }
                        }
                    }
                    self.expect(")", "to close the call's arguments")?;
                    let span = start.to(self.prev_span());
                    return Ok(Expr::new(ExprKind::Call(id, args), span));
                }
                if self.is("[") {
                    let mut indices = Vec::new();
                    while self.eat("[") {
                        indices.push(self.expr()?);
                        self.expect("]", "to close the subscript")?;
                    }
                    let span = start.to(self.prev_span());
                    return Ok(Expr::new(ExprKind::Index { array: id, indices }, span));
                }
                if self.is(".") || self.is("->") {
                    return Err(self.error_here("member access is not supported", "structures are not in the MetaFork subset"));
                }
                Ok(Expr::new(ExprKind::Var(name), start))
            }
            Tok::Sym(w) if refused_statement(w).is_some() => {
                Err(self.error_here(refused_statement(w).unwrap_or_default(), "not in the MetaFork subset"))
            }
            t => Err(self.error_here(format!("expected an expression, found {}", describe(&t)), "expected an expression")),
        }
    }

    fn no_postfix_after_paren(&self) -> PResult<()> {
        if self.is("[") || self.is("(") {
            return Err(self.error_here("only named arrays and functions can be indexed or called", "unexpected here"));
        }
        Ok(())
    }
}

/// `e + 1`, folded where that reads better (`n - 1` + 1 is `n`, `3` + 1 is `4`).
fn plus_one(e: &Expr) -> Expr {
    match &e.kind {
        ExprKind::Int(v) if *v < i64::MAX => Expr::new(ExprKind::Int(v + 1), e.span),
        ExprKind::Binary(BinOp::Sub, a, b) if b.kind == ExprKind::Int(1) => (**a).clone(),
        _ => Expr::new(ExprKind::Binary(BinOp::Add, Box::new(e.clone()), Box::new(Expr::new(ExprKind::Int(1), e.span))), e.span),
    }
}

/// What the desugaring of a loop counting down ([`Parser::downward`]) needs of its body: it
/// assigns no counter `var` (the counter is read-only, as every loop counter: `sema` refuses
/// such an assignment in an upward loop, but here `var` is a declared local), and writes
/// nothing the start `start` reads (C reads the start once, the desugared loop at every
/// iteration); and the loop is not one between a schedule's `meta_for` groups, which must
/// count up (the inner group would no longer be the loop's only statement).
fn check_downward_body(var: &Ident, start: &Expr, body: &Stmt) -> PResult<()> {
    let mut written: Vec<(String, Span)> = Vec::new();
    let mut first_stmt = body;
    while let StmtKind::Block(items) = &first_stmt.kind {
        let live: Vec<&Stmt> = items.iter().filter(|x| x.kind != StmtKind::Empty).collect();
        if live.len() != 1 {
            break;
        }
        first_stmt = live[0];
    }
    if let StmtKind::MetaFor(_) = &first_stmt.kind {
        return Err(Diagnostic::new(
            var.span,
            format!("a serial loop between a schedule's `meta_for` groups must count up: write `for (... {v} = lo; {v} < hi; {v}++)` around the block group's `meta_for`", v = var.name),
            "counts down around a `meta_for`",
        ));
    }
    crate::strategy::walk::walk_stmts(std::slice::from_ref(body), &mut |s| {
        if let StmtKind::Assign { target, .. } = &s.kind {
            match &target.kind {
                ExprKind::Var(n) => written.push((n.clone(), target.span)),
                ExprKind::Index { array, .. } => written.push((array.name.clone(), array.span)),
                _ => {}
            }
        }
    });
    if let Some((_, span)) = written.iter().find(|(n, _)| *n == var.name) {
        return Err(Diagnostic::new(*span, format!("cannot assign to loop counter `{}`", var.name), "loop counter written here"));
    }
    let mut read = Vec::new();
    start.names(&mut read);
    if let Some((n, _)) = written.iter().find(|(n, _)| read.contains(n)) {
        return Err(Diagnostic::new(
            start.span,
            format!("the start of a loop counting down cannot read `{n}`, which the loop's body writes: C reads the start once; define it before the loop (`int top = {start};`) and start from that"),
            "reads what the body writes",
        ));
    }
    Ok(())
}
