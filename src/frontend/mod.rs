//! The front end: MetaFork source text to a checked program, or diagnostics.
//!
//! Pipeline: [`lexer`] (tokens with spans) → [`parser`] (syntax tree, first syntax error) →
//! [`sema`] (scopes, types, placement, schedule structure, parameter classification) →
//! [`model::CheckedProgram`]. No input makes any stage panic or loop forever.

pub mod ast;
pub mod diag;
pub mod lexer;
pub mod model;
pub mod parser;
pub mod polyexpr;
pub mod sema;
pub mod source;

pub use diag::{Diagnostic, Diagnostics};
pub use model::CheckedProgram;
pub use source::{SourceFile, Span};

/// Parse and check one file.
pub fn check_source(name: &str, text: &str) -> Result<CheckedProgram, Diagnostics> {
    let file = SourceFile::new(name, text);
    let fail = |items: Vec<Diagnostic>, file: SourceFile| Diagnostics { file, items };
    let tokens = match lexer::lex(text) {
        Ok(t) => t,
        Err(d) => return Err(fail(vec![d], file)),
    };
    let program = match parser::parse(tokens) {
        Ok(p) => p,
        Err(d) => return Err(fail(vec![d], file)),
    };
    sema::check(&program).map_err(|items| fail(items, file))
}
