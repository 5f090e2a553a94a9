//! What every subcommand shares: the exit codes, the failure a command returns, reading and
//! checking a source file, writing to standard output, text tables and the progress line.
//! `cli`, `tune::command` and `verify::command` use this module; none imports another.

use crate::frontend::{check_source, CheckedProgram};
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::Instant;

/// The exit codes, the same for every command (README, `metafork --help`).
pub mod exit {
    /// Success (`verify`: every leaf proved).
    pub const OK: i32 = 0;
    /// Rejected input: a diagnostic, an unreadable or unwritable file, a bad value.
    pub const INPUT: i32 = 1;
    /// A usage error: unknown option, missing argument (clap's code).
    pub const USAGE: i32 = 2;
    /// `verify` found a defect (a race, barrier divergence, out of bounds, a mismatch, or an
    /// output file that is not what the source generates).
    pub const DEFECT: i32 = 3;
    /// Something stays unverified (Z3 `unknown`, a construct the model cannot express) or a
    /// budget ran out before the work was done.
    pub const UNVERIFIED: i32 = 4;
    /// A bug in metafork.
    pub const INTERNAL: i32 = 101;
    /// Interrupted (Ctrl-C, SIGTERM): the work stopped and no output was replaced (128 + SIGINT,
    /// as a shell reports it).
    pub const INTERRUPTED: i32 = 130;
}

/// A failure the user must see: already formatted, with the exit code to return.
#[derive(Debug)]
pub struct Failure {
    pub message: String,
    pub code: i32,
}

impl Failure {
    /// Rejected input (exit 1); `message` should start with `error:`.
    pub fn input(message: impl Into<String>) -> Failure {
        Failure { message: message.into(), code: exit::INPUT }
    }

    /// A failure of the work itself: exit 4 when the time budget is what ended it (the message
    /// then says so), else rejected input.
    pub fn of_work(message: impl Into<String>) -> Failure {
        let message = message.into();
        if constraints::budget::expired() {
            let limit = "(see --time-limit; 0 lifts it)";
            Failure { message: format!("{message}\nerror: unfinished: {} {limit}", constraints::budget::REASON), code: exit::UNVERIFIED }
        } else {
            Failure::input(message)
        }
    }

    /// Exit with `code`, the message (if any) already printed.
    pub fn silent(code: i32) -> Failure {
        Failure { message: String::new(), code }
    }
}

/// A path as shown in messages: control characters and bidirectional overrides escaped, so a
/// file name cannot move the cursor, forge lines on a terminal or read backwards.
pub fn shown(path: &Path) -> String {
    let s = path.display().to_string();
    let hidden = crate::names::is_hidden_char;
    if s.chars().any(hidden) {
        s.chars().flat_map(|c| if hidden(c) { c.escape_default().collect::<Vec<_>>() } else { vec![c] }).collect()
    } else {
        s
    }
}

/// How generated files name the program they come from: its file name alone, so that the
/// output does not depend on how the path was spelt or where the command ran (and does not
/// carry the user's directories); the path as given where there is no file name.
pub fn generated_name(path: &Path) -> String {
    match path.file_name() {
        Some(n) => shown(Path::new(n)),
        None => shown(path),
    }
}

/// The largest source, wisdom or tuning-space file read (bytes): well beyond any kernel or
/// settings, far below memory.
pub const MAX_SOURCE_BYTES: u64 = 16 << 20;

/// Read a source file (a regular file, at most [`MAX_SOURCE_BYTES`]) as UTF-8.
pub fn read_source(path: &Path) -> Result<String, Failure> {
    read_input_text(path, "source", MAX_SOURCE_BYTES)
}

/// Read a text file the user named on the command line (`what` it is, for an error about its
/// encoding): only a regular file, never blocking on a FIFO, at most `limit` bytes, in UTF-8 (an
/// invalid byte is reported by line and column).
pub fn read_input_text(path: &Path, what: &str, limit: u64) -> Result<String, Failure> {
    let name = shown(path);
    let bytes = constraints::input::read_regular(path, limit, constraints::input::Links::Follow)
        .map_err(|e| Failure::input(format!("error: cannot read `{name}`: {e}")))?;
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let (line, column) = constraints::input::line_and_column(&e.as_bytes()[..at]);
        Failure::input(format!("error: {name}:{line}:{column}: the {what} is not valid UTF-8 (byte offset {at}); save it as UTF-8 text"))
    })
}

/// Check source `text` read from `name`, rendering diagnostics on failure.
pub fn check(name: &str, text: &str, color: bool) -> Result<CheckedProgram, Failure> {
    check_source(name, text).map_err(|d| Failure::input(d.render(color)))
}

/// A diagnostic about source `text` read from `name`, rendered.
pub fn render(name: &str, text: &str, d: crate::frontend::Diagnostic, color: bool) -> String {
    let file = crate::frontend::SourceFile::new(name, crate::frontend::normalize_line_ends(text).into_owned());
    crate::frontend::Diagnostics { file, items: vec![d] }.render(color)
}

/// Read and check a source file.
pub fn load(path: &Path, color: bool) -> Result<CheckedProgram, Failure> {
    let text = read_source(path)?;
    check(&shown(path), &text, color)
}

/// Write `text` to standard output. A closed pipe (`metafork parse f | head`) is not an error
/// of ours; any other failure (a full disk, `/dev/full`) is reported, never a panic. Once the
/// user has interrupted metafork nothing is printed: a result made while the work wound down
/// (every leaf "unverified: time budget spent") would read as a verdict.
pub fn print(text: &str) -> Result<(), Failure> {
    if constraints::budget::interrupted() {
        return Err(Failure::silent(exit::INTERRUPTED));
    }
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Failure::input(format!("error: cannot write to standard output: {e}"))),
    }
}

/// Rows of cells as left-aligned columns separated by two spaces.
pub fn text_table(table: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..table[0].len()).map(|c| table.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    table
        .iter()
        .map(|r| r.iter().zip(&widths).map(|(cell, w)| format!("{cell:<w$}")).collect::<Vec<_>>().join("  ").trim_end().to_string() + "\n")
        .collect()
}

/// A progress bar on standard error (indicatif), only when it is a terminal: quiet in pipes,
/// logs and tests. Call [`Progress::set`] with the fraction done; dropping it clears the line.
/// It appears only after 300 ms, so quick runs print nothing.
pub struct Progress {
    bar: indicatif::ProgressBar,
    start: Instant,
}

/// Steps of the bar (the fraction done is shown in thousandths).
const PROGRESS_STEPS: u64 = 1000;

impl Progress {
    pub fn new(label: impl Into<String>) -> Option<Progress> {
        if !std::io::stderr().is_terminal() {
            return None;
        }
        let bar = indicatif::ProgressBar::with_draw_target(Some(PROGRESS_STEPS), indicatif::ProgressDrawTarget::stderr());
        let style = indicatif::ProgressStyle::with_template("{prefix} [{bar:30}] {percent:>3}% {elapsed}, about {eta} left").map_or_else(|_| indicatif::ProgressStyle::default_bar(), |s| s.progress_chars("#>-"));
        bar.set_style(style);
        bar.set_prefix(label.into());
        Some(Progress { bar, start: Instant::now() })
    }

    pub fn set(&mut self, fraction: f64) {
        if self.start.elapsed().as_millis() >= 300 {
            self.bar.set_position((fraction.clamp(0.0, 1.0) * PROGRESS_STEPS as f64) as u64);
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}

/// `line` and a newline on standard error, where a closed or full stream is not an error:
/// `eprintln!` panics there (exit 101, with `2>&1 | head` or stderr closed), and what would
/// be lost is only this message; the exit status still says what happened.
pub fn warn(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(line.as_bytes()).and_then(|_| err.write_all(b"\n"));
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_file_name_cannot_reach_the_terminal_raw() {
        let name = std::path::Path::new("e\u{1b}[31mvil\u{202e}fdp.mf");
        assert_eq!(super::shown(name), "e\\u{1b}[31mvil\\u{202e}fdp.mf");
        assert_eq!(super::shown(std::path::Path::new("plain ñ.mf")), "plain ñ.mf");
    }
}
