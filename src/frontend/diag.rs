//! Diagnostics: a message, the span it points at, a label saying what was expected there, and
//! notes. Rendered with `ariadne` (file, line and column, the source line, a caret label).

use super::source::{SourceFile, Span};
use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    pub message: String,
    pub span: Span,
    /// Shown under the caret: what was expected, or why this place is wrong.
    pub label: String,
    pub notes: Vec<String>,
}

impl Diagnostic {
    pub fn new(span: Span, message: impl Into<String>, label: impl Into<String>) -> Diagnostic {
        Diagnostic { message: message.into(), span, label: label.into(), notes: Vec::new() }
    }

    pub fn with_note(mut self, note: impl Into<String>) -> Diagnostic {
        self.notes.push(note.into());
        self
    }

    /// Render for a terminal (`color`) or a log, with `file:line:col` and the source line.
    /// A name of thousands of characters (legal C) is abbreviated in the message, label and
    /// notes, and a long source line is shown as a window around the caret, so that an error
    /// stays a few lines long whatever the input.
    pub fn render(&self, file: &SourceFile, color: bool) -> String {
        use ariadne::{Config, IndexType, Label, Report, ReportKind, Source};
        let name = file.name.as_str();
        let (line, col) = file.line_col(self.span.start);
        let (text, at) = windowed(&file.text, self.span.start);
        // A byte-order mark is not shown (it has no width, so the caret would sit one column off).
        let bom = if text.starts_with('\u{feff}') { '\u{feff}'.len_utf8() } else { 0 };
        let (text, at) = (&text[bom..], at.saturating_sub(bom));
        let text = visible(text);
        let range = label_range(&text, at);
        let mut report = Report::build(ReportKind::Error, (name, range.clone()))
            .with_config(Config::default().with_color(color).with_index_type(IndexType::Byte))
            .with_message(format!("{}:{}:{}: {}", name, line, col, abbreviated(&self.message)))
            .with_label(Label::new((name, range)).with_message(abbreviated(&self.label)));
        for n in &self.notes {
            report = report.with_note(abbreviated(n));
        }
        let mut out = Vec::new();
        // Writing into a Vec cannot fail.
        let _ = report.finish().write((name, Source::from(text.as_ref())), &mut out);
        let rendered = String::from_utf8_lossy(&out).into_owned();
        // The box's header counts columns in the window: it names the source's column instead.
        let windowed_col = text[..at.min(text.len())].rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        if windowed_col != col {
            return rendered.replacen(&format!("{name}:{line}:{windowed_col} "), &format!("{name}:{line}:{col} "), 1);
        }
        rendered
    }
}

/// Words (runs of letters, digits and `_`) longer than this are abbreviated in messages.
const LONGEST_WORD: usize = 64;
/// Source lines longer than this are shown as a window of about this width around the caret.
const LONGEST_LINE: usize = 240;

/// `text` with each word longer than [`LONGEST_WORD`] characters written as its start, `…`,
/// its end and its length.
fn abbreviated(text: &str) -> std::borrow::Cow<'_, str> {
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = String::new();
    let mut word = String::new();
    let mut changed = false;
    let flush = |word: &mut String, out: &mut String, changed: &mut bool| {
        let n = word.chars().count();
        if n > LONGEST_WORD {
            let head: String = word.chars().take(24).collect();
            let tail: String = word.chars().skip(n - 8).collect();
            out.push_str(&format!("{head}…{tail} ({n} characters)"));
            *changed = true;
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    for c in text.chars() {
        if is_word(c) {
            word.push(c);
        } else {
            flush(&mut word, &mut out, &mut changed);
            out.push(c);
        }
    }
    flush(&mut word, &mut out, &mut changed);
    if changed {
        out.into()
    } else {
        text.into()
    }
}

/// The source to render and the caret's byte offset in it: `text` itself, or, when the line
/// holding `start` is longer than [`LONGEST_LINE`], `text` with that line cut to a window
/// around `start` (`…` marking each cut). Only that line changes, so line numbers hold.
fn windowed(text: &str, start: usize) -> (std::borrow::Cow<'_, str>, usize) {
    let start = start.min(text.len());
    let line_start = text[..floor(text, start)].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[floor(text, start)..].find('\n').map_or(text.len(), |i| floor(text, start) + i);
    if line_end - line_start <= LONGEST_LINE {
        return (text.into(), start);
    }
    let half = LONGEST_LINE / 2;
    let from = floor(text, start.saturating_sub(half).max(line_start));
    let to = floor(text, (start + half).min(line_end));
    let (lead, trail) = (if from > line_start { "…" } else { "" }, if to < line_end { "…" } else { "" });
    let cut = format!("{}{lead}{}{trail}{}", &text[..line_start], &text[from..to], &text[line_end..]);
    (cut.into(), line_start + lead.len() + (start - from))
}

/// `text` with each control character (but tab and line ends) and each bidirectional override
/// replaced by a visible one of the same length in bytes, so that offsets hold: a NUL, an
/// escape sequence or a right-to-left override in a source line cannot reach the terminal, or
/// make the line shown read differently from what was compiled.
fn visible(text: &str) -> std::borrow::Cow<'_, str> {
    let hidden = |c: char| crate::names::is_hidden_char(c) && !matches!(c, '\t' | '\n' | '\r');
    if !text.chars().any(hidden) {
        return text.into();
    }
    text.chars()
        .map(|c| match c {
            c if !hidden(c) => c,
            c if c.len_utf8() == 1 => '?',
            c if c.len_utf8() == 2 => '\u{BF}',
            _ => '\u{FFFD}',
        })
        .collect::<String>()
        .into()
}

/// The largest char boundary of `text` at or before `i`.
fn floor(text: &str, i: usize) -> usize {
    let mut i = i.min(text.len());
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The label covers the one character at `start`, or nothing when `start` is at a line end
/// or the end of the text: ariadne requires a label's last byte to lie inside a line's text
/// (it panics on an empty file or a span ending on a newline), and this always satisfies it.
fn label_range(text: &str, start: usize) -> std::ops::Range<usize> {
    let mut start = start.min(text.len());
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    match text[start..].chars().next() {
        Some(c) if c != '\n' && c != '\r' => start..start + c.len_utf8(),
        _ => start..start,
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// All diagnostics of one file, with the file to render them against.
#[derive(Debug)]
pub struct Diagnostics {
    pub file: SourceFile,
    pub items: Vec<Diagnostic>,
}

impl Diagnostics {
    pub fn render(&self, color: bool) -> String {
        self.items.iter().map(|d| d.render(&self.file, color)).collect::<Vec<_>>().join("\n")
    }

    /// (line, column, message) of each diagnostic, for tests and tools.
    pub fn positions(&self) -> Vec<(usize, usize, String)> {
        self.items
            .iter()
            .map(|d| {
                let (l, c) = self.file.line_col(d.span.start);
                (l, c, d.message.clone())
            })
            .collect()
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(false))
    }
}

impl std::error::Error for Diagnostics {}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered(text: &str, at: usize, message: &str) -> String {
        let file = SourceFile::new("t.mf", text.to_string());
        Diagnostic::new(Span { start: at, end: at + 1 }, message, "here").render(&file, false)
    }

    /// A name of a million characters (legal C) once made a 2 MB error: the message and the
    /// source line are both cut, and the place is still exact.
    #[test]
    fn control_characters_of_a_source_line_are_not_echoed() {
        let text = "int x = 1;\nint y = a\u{0}\u{1b}[2J\u{85}\u{202e}b;\n";
        let at = text.find('\u{0}').unwrap();
        let out = rendered(text, at, "unexpected character");
        assert!(!out.chars().any(|c| c.is_control() && c != '\n' || c == '\u{202e}'), "{out:?}");
        assert!(out.contains("int y = a??[2J\u{BF}\u{FFFD}b;"), "{out}");
        assert!(out.contains("t.mf:2:10:"), "{out}");
    }

    #[test]
    fn long_names_and_lines_are_cut_to_a_readable_error() {
        let name = "k".repeat(1_000_000);
        let text = format!("int x;\n  a[i] = {name} + é;\nint y;\n");
        let at = text.find('k').unwrap();
        let out = rendered(&text, at, &format!("unknown identifier `{name}`"));
        assert!(out.len() < 2_000, "{} bytes", out.len());
        assert!(out.contains("t.mf:2:10: unknown identifier `kkkkkkkkkkkkkkkkkkkkkkkk…kkkkkkkk (1000000 characters)`"), "{out}");
        assert!(out.contains(" 2 │   a[i] = kkk") && out.contains("k…"), "{out}");
        // The caret is under the name's first character.
        let lines: Vec<&str> = out.lines().collect();
        let source = lines.iter().position(|l| l.contains("a[i] = k")).unwrap();
        let caret = lines[source + 1].find('┬').unwrap();
        assert_eq!(&lines[source][caret..caret + 1], "k", "{out}");
        // A caret far into a long line of multi-byte characters: a window around it.
        let text = format!("{}X{}\n", "é".repeat(5000), "é".repeat(5000));
        let out = rendered(&text, text.find('X').unwrap(), "here");
        assert!(out.len() < 2_000 && out.contains("t.mf:1:5001: here") && out.contains("…é") && out.contains("éXé"), "{out}");
        // The box's header names the same place as the message.
        let text = format!("{}zz\n", " ".repeat(300));
        let out = rendered(&text, 300, "unknown identifier `zz`");
        assert!(out.contains("t.mf:1:301: unknown identifier") && out.contains("[ t.mf:1:301 ]"), "{out}");
        // Short names and lines are as written.
        let out = rendered("a = b;\n", 4, "unknown identifier `b`");
        assert!(out.contains("t.mf:1:5: unknown identifier `b`") && out.contains("a = b;"), "{out}");
    }
}
