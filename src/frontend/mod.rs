//! The front end: MetaFork source text to a checked program, or diagnostics.
//!
//! Pipeline: [`lexer`] (tokens with spans) → [`parser`] (syntax tree, first syntax error) → [`local_arrays`] (per-thread arrays as scalars) → [`host_statements`] (statements on arrays outside schedules as one-thread schedules) → [`reduction`] (atomic updates) →
//! [`sema`] (scopes, types, placement, schedule structure, parameter classification; [`ranges`]: the facts that keep the kernels' integer arithmetic within its types) →
//! [`model::CheckedProgram`]. No input makes any stage panic or loop forever.

pub mod ast;
pub mod boxed;
pub mod diag;
pub mod host_names;
pub mod host_statements;
pub mod lexer;
pub mod local_arrays;
pub mod model;
pub mod parser;
pub mod polyexpr;
pub mod ranges;
pub mod reduction;
pub mod sema;
pub mod source;

pub use diag::{Diagnostic, Diagnostics};
pub use model::CheckedProgram;
pub use source::{SourceFile, Span};

/// Parse and check one file. Line ends may be `\n`, `\r\n` or a lone `\r`: the text is read
/// with each made `\n`, so lines and columns count as an editor shows them.
pub fn check_source(name: &str, text: &str) -> Result<CheckedProgram, Diagnostics> {
    let normalized = normalize_line_ends(text);
    let text: &str = &normalized;
    let file = SourceFile::new(name, text);
    let fail = |items: Vec<Diagnostic>, file: SourceFile| Diagnostics { file, items };
    let tokens = match lexer::lex(text) {
        Ok(t) => t,
        Err(d) => return Err(fail(vec![d], file)),
    };
    let mut program = match parser::parse(tokens) {
        Ok(p) => p,
        Err(d) => return Err(fail(vec![d], file)),
    };
    host_names::distinct(&mut program);
    let not_scalars = local_arrays::scalarize(&mut program);
    if !not_scalars.is_empty() {
        return Err(fail(not_scalars, file));
    }
    host_statements::wrap(&mut program);
    let not_reductions = reduction::mark(&mut program);
    if !not_reductions.is_empty() {
        return Err(fail(not_reductions, file));
    }
    sema::check(&program).map_err(|items| fail(items, file))
}

/// `\r\n` and a lone `\r` as `\n`.
pub fn normalize_line_ends(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains('\r') {
        return std::borrow::Cow::Borrowed(text);
    }
    std::borrow::Cow::Owned(text.replace("\r\n", "\n").replace('\r', "\n"))
}
