//! Source files and byte spans, with 1-based line and column lookup.

/// A half-open byte range `[start, end)` in one source file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Span {
        Span { start, end }
    }

    /// The smallest span covering both.
    pub fn to(self, other: Span) -> Span {
        Span { start: self.start.min(other.start), end: self.end.max(other.end) }
    }
}

/// A named source text with its line starts.
#[derive(Clone, Debug)]
pub struct SourceFile {
    pub name: String,
    pub text: String,
    line_starts: Vec<usize>,
}

impl SourceFile {
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> SourceFile {
        let text = text.into();
        // A byte-order mark is no column of the first line (the lexer skips it too).
        let mut line_starts = vec![if text.starts_with('\u{feff}') { '\u{feff}'.len_utf8() } else { 0 }];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        SourceFile { name: name.into(), text, line_starts }
    }

    /// 1-based line and column (in characters) of a byte offset.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let line = self.line_starts.partition_point(|&s| s <= offset).saturating_sub(1);
        let start = self.line_starts[line];
        let col = self.text.get(start.min(offset)..offset).map_or(offset.saturating_sub(start), |s| s.chars().count());
        (line + 1, col + 1)
    }

    /// The text of a 1-based line, without its newline.
    pub fn line_text(&self, line: usize) -> &str {
        let start = self.line_starts.get(line.wrapping_sub(1)).copied().unwrap_or(0);
        let end = self.text[start..].find('\n').map_or(self.text.len(), |i| start + i);
        &self.text[start..end]
    }

    pub fn snippet(&self, span: Span) -> &str {
        self.text.get(span.start..span.end.min(self.text.len())).unwrap_or("")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_columns_are_one_based() {
        let f = SourceFile::new("x.mf", "ab\ncd\n\nef");
        assert_eq!(f.line_col(0), (1, 1));
        assert_eq!(f.line_col(1), (1, 2));
        assert_eq!(f.line_col(3), (2, 1));
        assert_eq!(f.line_col(7), (4, 1));
        assert_eq!(f.line_text(2), "cd");
        assert_eq!(f.line_col(100), (4, 3));
    }

    #[test]
    fn a_byte_order_mark_is_no_column() {
        let f = SourceFile::new("x.mf", "\u{feff}ab\ncd");
        assert_eq!(f.line_col(3), (1, 1));
        assert_eq!(f.line_col(4), (1, 2));
        assert_eq!(f.line_col(0), (1, 1));
        assert_eq!(f.line_text(1), "ab");
        assert_eq!(f.line_col(6), (2, 1));
    }
}
