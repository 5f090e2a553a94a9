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
    pub fn render(&self, file: &SourceFile, color: bool) -> String {
        use ariadne::{Config, IndexType, Label, Report, ReportKind, Source};
        let name = file.name.as_str();
        let range = label_range(&file.text, self.span.start);
        let (line, col) = file.line_col(self.span.start);
        let mut report = Report::build(ReportKind::Error, (name, range.clone()))
            .with_config(Config::default().with_color(color).with_index_type(IndexType::Byte))
            .with_message(format!("{}:{}:{}: {}", name, line, col, self.message))
            .with_label(Label::new((name, range)).with_message(&self.label));
        for n in &self.notes {
            report = report.with_note(n);
        }
        let mut out = Vec::new();
        // Writing into a Vec cannot fail.
        let _ = report.finish().write((name, Source::from(file.text.as_str())), &mut out);
        String::from_utf8_lossy(&out).into_owned()
    }
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
