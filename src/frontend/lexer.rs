//! The lexer: source text to tokens with spans.
//!
//! Contract: every byte of input is either part of a token, whitespace, a comment, or a
//! preprocessor line (`#...`, skipped so that `.c` files with `#define meta_for for` lines are
//! accepted; a macro the program uses, or code inside a conditional, is refused: see
//! `Preprocessor`), or it yields a diagnostic. The lexer never panics and always terminates.

use super::diag::Diagnostic;
use super::source::Span;

#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    Ident(String),
    Int(i64),
    /// An integer literal with an `l`/`L`/`ll`/`LL` suffix whose value fits in `int`: C types
    /// it `long` (an unsuffixed one that does not fit is `long` already, as [`Tok::Int`]).
    Long(i64),
    /// A floating literal and whether it has the `f` suffix.
    Float(f64, bool),
    /// Keywords and punctuation, by their spelling (`for`, `meta_for`, `<=`, `(`).
    Sym(&'static str),
    Eof,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Token {
    pub tok: Tok,
    pub span: Span,
}

/// Words the lexer reserves. The parser refuses the C ones outside the subset with a message.
pub const KEYWORDS: &[&str] = &[
    "void", "int", "long", "float", "double", "const", "if", "else", "for", "meta_schedule",
    "meta_for", "cache", "assume", "assert", "while", "do", "goto", "switch", "case", "default",
    "return", "break", "continue", "struct", "union", "enum", "typedef", "sizeof", "char",
    "short", "unsigned", "signed", "static", "extern", "volatile", "register", "auto", "bool",
];

/// Punctuation, longest first so that maximal munch works by trying them in order.
const PUNCT: &[&str] = &[
    "<<=", ">>=", "...", "++", "--", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "==", "!=",
    "<=", ">=", "&&", "||", "<<", ">>", "->", "(", ")", "[", "]", "{", "}", ";", ",", "?", ":",
    "+", "-", "*", "/", "%", "=", "<", ">", "!", "&", "|", "^", "~", ".",
];

pub fn lex(text: &str) -> Result<Vec<Token>, Diagnostic> {
    let bytes = text.as_bytes();
    let mut tokens = Vec::new();
    // A byte-order mark, as editors on Windows write it, is not part of the program.
    let mut i = if text.starts_with('\u{feff}') { '\u{feff}'.len_utf8() } else { 0 };
    let mut at_line_start = true;
    let mut pre = Preprocessor::default();
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'\n' {
            at_line_start = true;
            i += 1;
            continue;
        }
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        // A line splice (backslash, newline) beside white space joins the lines: C removes it
        // before it reads tokens. One that could join two tokens into one (`ab\`, `cd` is
        // `abcd` in C) is refused below.
        if let Some(n) = splice(bytes, i) {
            let before = i.checked_sub(1).map_or(b' ', |k| bytes[k]);
            if before.is_ascii_whitespace() || bytes.get(i + n).is_none_or(u8::is_ascii_whitespace) {
                i += n;
                continue;
            }
        }
        if c == b'#' && at_line_start {
            // A preprocessor line, with backslash continuations: read, not run (see
            // `Preprocessor`).
            let start = i;
            while i < bytes.len() && bytes[i] != b'\n' {
                i += splice(bytes, i).unwrap_or(1);
            }
            pre.line(&text[start..i], Span::new(start, i))?;
            continue;
        }
        at_line_start = false;
        if bytes[i..].starts_with(b"//") {
            // To the end of the line; a splice continues the comment onto the next line, as in
            // C (`// note \` comments out the line after it).
            while i < bytes.len() && bytes[i] != b'\n' {
                i += splice(bytes, i).unwrap_or(1);
            }
            continue;
        }
        if bytes[i..].starts_with(b"/*") {
            let start = i;
            match text[i + 2..].find("*/") {
                Some(end) => {
                    i = i + 2 + end + 2;
                    continue;
                }
                None => {
                    return Err(Diagnostic::new(
                        Span::new(start, start + 2),
                        "unterminated comment",
                        "this `/*` has no closing `*/`",
                    ))
                }
            }
        }
        // A token (or a character that is none): code, which a conditional may not hold.
        pre.token()?;
        let start = i;
        if c.is_ascii_alphabetic() || c == b'_' {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            let word = &text[start..i];
            let tok = match KEYWORDS.iter().find(|k| **k == word) {
                Some(k) => Tok::Sym(k),
                None => Tok::Ident(word.to_string()),
            };
            tokens.push(Token { tok, span: Span::new(start, i) });
            continue;
        }
        if c.is_ascii_digit() || (c == b'.' && bytes.get(i + 1).is_some_and(u8::is_ascii_digit)) {
            let (tok, end) = number(text, start)?;
            tokens.push(Token { tok, span: Span::new(start, end) });
            i = end;
            continue;
        }
        if let Some(p) = PUNCT.iter().find(|p| bytes[i..].starts_with(p.as_bytes())) {
            i += p.len();
            tokens.push(Token { tok: Tok::Sym(p), span: Span::new(start, i) });
            continue;
        }
        let ch = text[i..].chars().next().unwrap_or('?');
        let what = match ch {
            // `1'000`: C23's digit separator, right after a number.
            '\'' if i > 0 && bytes[i - 1].is_ascii_alphanumeric() && bytes.get(i + 1).is_some_and(u8::is_ascii_alphanumeric) && tokens.last().is_some_and(|t| t.span.end == i && matches!(t.tok, Tok::Int(..) | Tok::Long(..) | Tok::Float(..))) => {
                "digit separators (`1'000`, C23) are not part of the MetaFork subset: write the number without them".to_string()
            }
            '"' | '\'' => "string and character literals are not part of the MetaFork subset".to_string(),
            '\\' => "unexpected `\\`: a line splice (backslash, newline) is read between tokens and in comments, not inside a token or alone".to_string(),
            _ => format!("unexpected character `{}`", ch.escape_default()),
        };
        return Err(Diagnostic::new(Span::new(i, i + ch.len_utf8()), what, "not recognised here"));
    }
    pre.used(&tokens)?;
    tokens.push(Token { tok: Tok::Eof, span: Span::new(text.len(), text.len()) });
    Ok(tokens)
}

/// What the lexer makes of preprocessor lines, which it does not run: a `.c` file's
/// `#include`s, `#pragma`s and the macros that let it compile as serial C (`#define meta_for
/// for`, guarded or not) are skipped; a macro the program then uses (`#define SCALE 2.0f` and
/// `SCALE * x[p]`), or code inside a conditional (`#if 0` ... `#endif`, which C would drop),
/// would make metafork read another program than C does, and is refused at the directive.
#[derive(Default)]
struct Preprocessor {
    /// Each `#define`d name, with its directive's span.
    macros: Vec<(String, Span)>,
    /// The open conditionals' directives.
    open: Vec<Span>,
}

impl Preprocessor {
    fn line(&mut self, line: &str, span: Span) -> Result<(), Diagnostic> {
        let body = line[1..].trim_start();
        let directive: String = body.chars().take_while(|c| c.is_ascii_alphabetic()).collect();
        let rest = body[directive.len()..].trim_start();
        match directive.as_str() {
            "if" | "ifdef" | "ifndef" => self.open.push(span),
            "endif" => {
                self.open.pop();
            }
            // Outside a conditional, C stops compiling at an `#error`: so does metafork, rather
            // than read on (inside one, it is a guard on macros metafork does not evaluate).
            "error" if self.open.is_empty() => {
                return Err(Diagnostic::new(span, format!("`#error {}`: C stops compiling the program here", rest.trim_end()), "C stops here")
                    .with_note("remove the directive, or put it inside the conditional it was meant to guard"));
            }
            // An `#undef` removes a macro: the name may be used after it (`#undef min`).
            "define" => {
                let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                self.macros.push((name, span));
            }
            _ => {}
        }
        Ok(())
    }

    /// A token's first byte: code inside a conditional is refused.
    fn token(&self) -> Result<(), Diagnostic> {
        match self.open.last() {
            Some(directive) => Err(Diagnostic::new(*directive, "code inside a preprocessor conditional: metafork does not run the preprocessor, so it would read this code whatever the condition", "this conditional holds code")
                .with_note("remove the conditional, or keep only `#define`s of the MetaFork words inside it")),
            None => Ok(()),
        }
    }

    /// A macro the program uses is refused: metafork does not expand it.
    fn used(&self, tokens: &[Token]) -> Result<(), Diagnostic> {
        for (name, span) in &self.macros {
            // The MetaFork words are what a serial build defines away (`#define meta_for for`).
            let metafork_word = ["meta_for", "meta_schedule", "cache", "assume", "assert"].contains(&name.as_str());
            if !metafork_word && tokens.iter().any(|t| matches!(&t.tok, Tok::Ident(n) if n == name) || matches!(&t.tok, Tok::Sym(k) if *k == name)) {
                return Err(Diagnostic::new(*span, format!("`{name}` is a macro, and the program uses it: metafork does not run the preprocessor, so it would not expand it"), "not expanded")
                    .with_note(format!("write `{name}`'s value in place, or make it a parameter or a scalar of the function")));
            }
        }
        Ok(())
    }
}

/// The length of a line splice at `i` (a backslash before `\n` or `\r\n`), if one is there.
fn splice(bytes: &[u8], i: usize) -> Option<usize> {
    if bytes.get(i) != Some(&b'\\') {
        return None;
    }
    match bytes.get(i + 1..i + 3) {
        Some([b'\r', b'\n']) => Some(3),
        _ => (bytes.get(i + 1) == Some(&b'\n')).then_some(2),
    }
}

/// A number starting at `start`: a decimal, octal (leading `0`) or hex integer with an
/// optional `l`/`L`/`ll`/`LL` suffix, typed as C types it, or a decimal floating literal (with
/// an optional exponent and `f`/`F` suffix). An unsigned literal (a `u` suffix, or an octal
/// or hex one that fits only C's `unsigned int`) is refused: the language has no unsigned
/// type, and reading it as signed would change its arithmetic.
fn number(text: &str, start: usize) -> Result<(Tok, usize), Diagnostic> {
    let bytes = text.as_bytes();
    let mut i = start;
    let too_large = |end: usize| {
        Diagnostic::new(Span::new(start, end), "integer literal too large", "does not fit in 64 bits")
    };
    if bytes[i] == b'0' && matches!(bytes.get(i + 1), Some(b'x') | Some(b'X')) {
        i += 2;
        let digits_start = i;
        while i < bytes.len() && bytes[i].is_ascii_hexdigit() {
            i += 1;
        }
        if i == digits_start {
            return Err(Diagnostic::new(Span::new(start, i), "malformed hexadecimal literal", "expected hex digits after `0x`"));
        }
        let v = i64::from_str_radix(&text[digits_start..i], 16).map_err(|_| too_large(i))?;
        return integer(text, start, i, v, true);
    }
    while i < bytes.len() && bytes[i].is_ascii_digit() {
        i += 1;
    }
    let mut is_float = false;
    if i < bytes.len() && bytes[i] == b'.' {
        is_float = true;
        i += 1;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
    }
    if i < bytes.len() && (bytes[i] == b'e' || bytes[i] == b'E') {
        let mut j = i + 1;
        if j < bytes.len() && (bytes[j] == b'+' || bytes[j] == b'-') {
            j += 1;
        }
        if j < bytes.len() && bytes[j].is_ascii_digit() {
            is_float = true;
            i = j;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
        }
    }
    let lexeme = &text[start..i];
    let end_of_number = |i: usize| -> Result<usize, Diagnostic> {
        if i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
            let mut j = i;
            while j < bytes.len() && (bytes[j].is_ascii_alphanumeric() || bytes[j] == b'_') {
                j += 1;
            }
            return Err(Diagnostic::new(
                Span::new(start, j),
                format!("malformed number `{}`", &text[start..j]),
                "not a valid literal",
            ));
        }
        Ok(i)
    };
    if is_float {
        let value: f64 = lexeme.parse().map_err(|_| {
            Diagnostic::new(Span::new(start, i), "malformed floating literal", "not a number")
        })?;
        let single = i < bytes.len() && (bytes[i] == b'f' || bytes[i] == b'F');
        let after = if single { i + 1 } else { i };
        // C would give such a literal an infinite value (with at most a warning); generated
        // code would then hold `inf`, which is not a C literal.
        if !value.is_finite() || (single && !(value as f32).is_finite()) {
            let ty = if single { "float" } else { "double" };
            return Err(Diagnostic::new(Span::new(start, after), format!("floating literal `{}` is out of the range of `{ty}`", &text[start..after]), "too large"));
        }
        return Ok((Tok::Float(value, single), end_of_number(after)?));
    }
    if lexeme.len() > 1 && lexeme.starts_with('0') {
        if let Some(bad) = lexeme.bytes().position(|b| b == b'8' || b == b'9') {
            return Err(Diagnostic::new(Span::new(start + bad, start + bad + 1), format!("invalid digit in the octal literal `{lexeme}`"), "a literal starting with `0` is octal in C"));
        }
        let v = i64::from_str_radix(&lexeme[1..], 8).map_err(|_| too_large(i))?;
        return integer(text, start, i, v, true);
    }
    let v: i64 = lexeme.parse().map_err(|_| too_large(i))?;
    integer(text, start, i, v, false)
}

/// The integer literal of value `v` whose digits end at `i`, with its suffix read: C's type
/// for it, or a located refusal.
fn integer(text: &str, start: usize, i: usize, v: i64, octal_or_hex: bool) -> Result<(Tok, usize), Diagnostic> {
    let bytes = text.as_bytes();
    let mut end = i;
    while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
        end += 1;
    }
    let suffix = &text[i..end];
    let long = match suffix {
        "" => false,
        "l" | "L" | "ll" | "LL" => true,
        _ if suffix.contains(['u', 'U']) && suffix.chars().all(|c| matches!(c, 'u' | 'U' | 'l' | 'L')) => {
            return Err(Diagnostic::new(Span::new(start, end), format!("unsigned literal `{}`", &text[start..end]), "the language has no unsigned types").with_note("MetaFork's integers are `int` and `long`, signed: drop the `u`, or write the value in a signed type"));
        }
        _ => return Err(Diagnostic::new(Span::new(start, end), format!("malformed number `{}`", &text[start..end]), "not a valid literal")),
    };
    // C gives an octal or hex literal that fits `unsigned int` but not `int` that type.
    if octal_or_hex && !long && v > i64::from(i32::MAX) && v <= i64::from(u32::MAX) {
        return Err(Diagnostic::new(Span::new(start, end), format!("`{}` is an `unsigned int` in C", &text[start..end]), "the language has no unsigned types").with_note("append `L` to make it a `long`, or write it in decimal"));
    }
    let tok = if long && i32::try_from(v).is_ok() { Tok::Long(v) } else { Tok::Int(v) };
    Ok((tok, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Tok> {
        lex(s).unwrap().into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn lexes_numbers_words_and_punctuation() {
        assert_eq!(
            toks("meta_for (int v=0; v<=N/2; v++) x += 1.5f;"),
            vec![
                Tok::Sym("meta_for"), Tok::Sym("("), Tok::Sym("int"), Tok::Ident("v".into()),
                Tok::Sym("="), Tok::Int(0), Tok::Sym(";"), Tok::Ident("v".into()), Tok::Sym("<="),
                Tok::Ident("N".into()), Tok::Sym("/"), Tok::Int(2), Tok::Sym(";"),
                Tok::Ident("v".into()), Tok::Sym("++"), Tok::Sym(")"), Tok::Ident("x".into()),
                Tok::Sym("+="), Tok::Float(1.5, true), Tok::Sym(";"), Tok::Eof
            ]
        );
        assert_eq!(toks("0x10 7L 1e3 .5"), vec![Tok::Int(16), Tok::Long(7), Tok::Float(1000.0, false), Tok::Float(0.5, false), Tok::Eof]);
        assert_eq!(toks("010 0 00 0x7fffffff 0xFFFFFFFFL 2147483648 8ll"), vec![Tok::Int(8), Tok::Int(0), Tok::Int(0), Tok::Int(i32::MAX as i64), Tok::Int(u32::MAX as i64), Tok::Int(1 << 31), Tok::Long(8), Tok::Eof]);
        for (bad, message) in [("08", "invalid digit in the octal literal"), ("1u", "unsigned literal"), ("1uL", "unsigned literal"), ("0xFFFFFFFF", "is an `unsigned int` in C"), ("017777777777 + 020000000000", "is an `unsigned int` in C"), ("1lll", "malformed number"), ("1lL", "malformed number"), ("1uu", "unsigned literal")] {
            let e = lex(bad).unwrap_err();
            assert!(e.message.contains(message), "{bad}: {}", e.message);
        }
    }

    #[test]
    fn skips_comments_and_preprocessor_lines() {
        assert_eq!(toks("#define meta_for for\n// c\n/* d\n */ x"), vec![Tok::Ident("x".into()), Tok::Eof]);
        assert_eq!(toks("\u{feff}x"), vec![Tok::Ident("x".into()), Tok::Eof], "a byte-order mark");
        // The serial-C idiom: guarded macros of the MetaFork words, includes, pragmas.
        assert_eq!(toks("#include <math.h>\n#ifndef META\n// serial C\n#define meta_for for /* a loop */\n#define meta_schedule\n#endif\n#pragma once\nx"), vec![Tok::Ident("x".into()), Tok::Eof]);
        // A macro the program uses, code in a conditional: refused at the directive.
        let e = lex("#define SCALE 2.0f\nx = SCALE * y;").unwrap_err();
        assert!(e.message.contains("`SCALE` is a macro") && e.span.start == 0, "{}", e.message);
        let e = lex("a;\n#if 0\nb;\n#endif\n").unwrap_err();
        assert!(e.message.contains("inside a preprocessor conditional") && e.span.start == 3, "{}", e.message);
        assert!(lex("#define meta_for for\n#define assume(x)\nmeta_for assume").is_ok());
        // An `#error` outside a conditional stops C, and metafork with it; inside one it is a
        // guard on macros (a helper's sweep: it was ignored).
        let e = lex("x;\n#error stop\ny;").unwrap_err();
        assert!(e.message.contains("`#error stop`: C stops compiling") && e.span.start == 3, "{e:?}");
        assert!(lex("#ifndef META\n#error needs META\n#endif\nx").is_ok());
        assert!(lex("#define float double\nfloat x;").unwrap_err().message.contains("`float` is a macro"));
        assert!(lex("#undef min\nx = min(a, b);").is_ok(), "a name `#undef`ined may be used");
    }

    #[test]
    fn reports_bad_input() {
        assert!(lex("/* open").unwrap_err().message.contains("unterminated comment"));
        assert!(lex("99999999999999999999").unwrap_err().message.contains("too large"));
        assert!(lex("12abc").unwrap_err().message.contains("malformed number"));
        assert!(lex("x @ y").unwrap_err().message.contains("unexpected character `@`"));
        // Line splices: a `//` comment ending in a backslash goes on to the next line (C
        // comments that line out), one between tokens joins the lines, one inside a token or a
        // lone backslash is refused.
        let idents = |t: &str| lex(t).unwrap().into_iter().filter_map(|k| if let Tok::Ident(n) = k.tok { Some(n) } else { None }).collect::<Vec<_>>();
        assert_eq!(idents("a // note \\\nb\nc"), ["a", "c"]);
        assert_eq!(idents("a // note \\\r\nb\nc"), ["a", "c"]);
        assert_eq!(idents("a // note \\ \nb"), ["a", "b"], "a space after the backslash: no splice");
        assert_eq!(idents("a \\\n b"), ["a", "b"]);
        assert!(lex("ab\\\ncd").unwrap_err().message.contains("line splice"));
        assert!(lex("a \\ b").unwrap_err().message.contains("line splice"));
        assert!(lex("1e400").unwrap_err().message.contains("out of the range of `double`"));
        assert!(lex("1e39f").unwrap_err().message.contains("out of the range of `float`"));
        assert!(lex("1e38f 1e308 1e-400").is_ok());
    }
}
