//! Reading a file a user names: a device profile here; sources, wisdom, tuning spaces and
//! output manifests in `metafork`. Contract: only a regular file is read, opening never blocks
//! (a FIFO is opened non-blocking, then refused), and at most `limit` bytes are read, so a named
//! pipe, `/dev/zero` or a huge file is refused at once instead of hanging or filling memory.
//! The check is made on the opened file (`fstat`), so the name cannot be swapped for a FIFO
//! between the check and the read. [`check_yaml_nesting`] guards the YAML parser from the
//! deeply nested flow collections it parses in quadratic time; [`yaml_error`] places a YAML
//! error on its file's line, and [`unique_keys`] refuses a mapping that repeats a key (the YAML
//! parser keeps the last value).

use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// What a file that is not regular is, for a refusal.
pub fn kind_of(t: fs::FileType) -> &'static str {
    if t.is_symlink() {
        "a symbolic link"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else if t.is_file() {
        "a regular file"
    } else {
        "not a regular file"
    }
}

/// Whether to follow a symbolic link at the last component of the path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Links {
    /// A file the user names on the command line: a link to a regular file is fine.
    Follow,
    /// A file found inside a directory metafork wrote: a link there was planted, so refused.
    Refuse,
}

/// The contents of the regular file `path`, at most `limit` bytes. Errors say why in words
/// (`it is a FIFO, not a regular file`, `it is larger than 4 MiB`); the caller names the file.
pub fn read_regular(path: &Path, limit: u64, links: Links) -> io::Result<Vec<u8>> {
    let mut flags = libc::O_NONBLOCK;
    if links == Links::Refuse {
        flags |= libc::O_NOFOLLOW;
    }
    let file = fs::OpenOptions::new().read(true).custom_flags(flags).open(path).map_err(|e| {
        if links == Links::Refuse && e.raw_os_error() == Some(libc::ELOOP) {
            io::Error::new(io::ErrorKind::InvalidInput, "it is a symbolic link, which metafork does not follow")
        } else {
            e
        }
    })?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("it is {}, not a regular file", kind_of(meta.file_type()))));
    }
    let too_large = || io::Error::new(io::ErrorKind::InvalidData, format!("it is larger than {}", size_in_words(limit)));
    if meta.len() > limit {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    // The file may grow after `fstat`: read one byte past the limit to notice.
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(too_large());
    }
    Ok(bytes)
}

/// [`read_regular`], as UTF-8 text; an invalid byte is reported by its line and column.
pub fn read_text(path: &Path, limit: u64, links: Links) -> io::Result<String> {
    String::from_utf8(read_regular(path, limit, links)?).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let (line, column) = line_and_column(&e.as_bytes()[..at]);
        io::Error::new(io::ErrorKind::InvalidData, format!("line {line}, column {column}: not valid UTF-8 (byte offset {at}); save it as UTF-8 text"))
    })
}

/// The line and column (both from 1, the column in characters) just after `valid`, a prefix
/// that is valid UTF-8.
pub fn line_and_column(valid: &[u8]) -> (usize, usize) {
    let text = std::str::from_utf8(valid).unwrap_or_default();
    let line_start = text.rfind('\n').map_or(0, |i| i + 1);
    (text.matches('\n').count() + 1, text[line_start..].chars().count() + 1)
}

/// A byte count as a person would write a limit: `16 MiB`, `4 KiB`, `100 bytes`.
pub fn size_in_words(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

/// The deepest nesting of flow collections (`[`, `{`) a YAML file may have: far beyond any
/// profile, wisdom or space, and the deserializer's own recursion limit (128).
pub const MAX_YAML_NESTING: usize = 128;

/// The most `[` and `{` a YAML file may hold, quoted or not: a bound on its nesting that no
/// quoting can hide (a wisdom file holds about two per leaf measured).
pub const MAX_YAML_BRACKETS: usize = 20_000;

/// Refuse YAML `text` whose flow collections nest deeper than [`MAX_YAML_NESTING`], or that
/// holds more than [`MAX_YAML_BRACKETS`] opening brackets: the line (from 1) where it does,
/// and why. libyaml parses deep nesting in quadratic time (100,000 levels, 200 KB, took 17 s),
/// so this runs before it. The depth skips brackets inside quoted scalars and comments as
/// well as a scan without a full YAML tokenizer can; the count of brackets, which counts them
/// all, bounds the depth (and so the parse's time) whatever the scan gets wrong.
pub fn check_yaml_nesting(text: &str) -> Result<(), (usize, String)> {
    let (mut depth, mut line, mut brackets) = (0usize, 1usize, 0usize);
    let mut quote: Option<char> = None;
    let mut comment = false;
    let mut previous = '\n';
    let mut escaped = false;
    for c in text.chars() {
        if c == '[' || c == '{' {
            brackets += 1;
            if brackets > MAX_YAML_BRACKETS {
                return Err((line, format!("more than {MAX_YAML_BRACKETS} `[` and `{{`: too many collections for a settings file")));
            }
        }
        match (quote, c) {
            (_, '\n') => {
                line += 1;
                comment = false;
            }
            _ if comment => {}
            (Some('"'), '\\') => escaped = !escaped,
            (Some(q), c) if c == q && !escaped => quote = None,
            (Some(_), _) => escaped = false,
            (None, '"' | '\'') => quote = Some(c),
            (None, '#') if previous.is_whitespace() => comment = true,
            (None, '[' | '{') => {
                depth += 1;
                if depth > MAX_YAML_NESTING {
                    return Err((line, format!("collections nested deeper than {MAX_YAML_NESTING} levels")));
                }
            }
            (None, ']' | '}') => depth = depth.saturating_sub(1),
            _ => {}
        }
        if c != '\\' {
            escaped = false;
        }
        previous = c;
    }
    Ok(())
}

/// The line (from 0) of the key at `path` in a YAML document's `text`: each key is looked for as
/// a mapping key (`key:`, quoted or not, perhaps after `- `) among the lines below the one
/// before it and indented deeper than it. When a key is not found so (a flow mapping, `best:
/// {leaf: a, parameters: {B: 8}}`, holds it on its parent's line), the deepest key found is
/// named; none found, the document's first line. Only for messages: the values were parsed
/// already.
pub fn yaml_key_line(text: &str, path: &[&str]) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let content = |l: &str| !l.trim().is_empty() && !l.trim_start().starts_with('#');
    let (mut line, mut parent): (usize, Option<usize>) = (0, None);
    for key in path {
        let start = parent.map_or(0, |p| p + 1);
        let within = lines[start..].iter().enumerate().take_while(|(_, l)| parent.is_none_or(|p| !content(l) || indent(l) > indent(lines[p])));
        let Some((i, _)) = within.filter(|(_, l)| content(l)).find(|(_, l)| is_key_line(l, key)) else { break };
        line = start + i;
        parent = Some(line);
    }
    line
}

/// `text` without a leading UTF-8 byte-order mark, which editors on Windows write and the YAML
/// parser would read as part of the first key (`\u{feff}name`, then "missing field `name`").
pub fn without_bom(text: &str) -> &str {
    text.strip_prefix('\u{feff}').unwrap_or(text)
}

/// Whether line `l` starts with the mapping key `key` (`key:`, quoted or not, perhaps after
/// `- `).
fn is_key_line(l: &str, key: &str) -> bool {
    let t = l.trim_start();
    let t = t.strip_prefix("- ").unwrap_or(t).trim_start();
    [key.to_string(), format!("\"{key}\""), format!("'{key}'")].iter().any(|k| t.strip_prefix(k.as_str()).is_some_and(|r| r.trim_start().starts_with(':')))
}

/// A YAML error in a document whose first line is line `first_line` (from 1) of its file: the
/// error's line and column in the file, when it has a place, and its message, with the place
/// removed from its end and every other `line N` of it counted in the file too.
///
/// The parser places a repeated key at the start of its mapping; the place given is then the
/// line of the key's second occurrence in `text` (the document), when it is on a line of its own.
pub fn yaml_error(e: &serde_yaml::Error, text: &str, first_line: usize) -> (Option<(usize, usize)>, String) {
    let offset = first_line.saturating_sub(1);
    let mut message = e.to_string();
    let mut place = e.location().map(|l| (l.line() + offset, l.column()));
    if let Some(l) = e.location() {
        if let Some(rest) = message.strip_suffix(&format!(" at line {} column {}", l.line(), l.column())) {
            message = rest.to_string();
        }
        let key = repeated_key(&message);
        let (line0, column0) = (l.line().saturating_sub(1), l.column().saturating_sub(1));
        let opens_flow = text.lines().nth(line0).and_then(|t| t.chars().nth(column0)) == Some('{');
        let second = key.and_then(|key| if opens_flow { second_in_flow(text, line0, column0, &key) } else { second_occurrence(text, line0, &key) });
        if let Some((line, column)) = second {
            place = Some((line + 1 + offset, column + 1));
        }
    }
    // A scanner error (a control character) is placed by its offset in characters only.
    if let Some((head, index)) = message.rsplit_once(" at position ").and_then(|(h, n)| Some((h.to_string(), n.parse::<usize>().ok()?))) {
        let before: String = text.chars().take(index).collect();
        let line = before.matches('\n').count();
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count());
        place = Some((line + 1 + offset, column + 1));
        message = head;
    }
    (place, shift_lines(&message, offset))
}

/// The line and column (from 0) of the second `key:` in the flow mapping that opens at
/// (`line`, `column`) of `text`, keys matched as whole words; nested mappings are not told
/// apart (only for a message's place).
fn second_in_flow(text: &str, line: usize, column: usize, key: &str) -> Option<(usize, usize)> {
    let is_word = |c: char| c.is_alphanumeric() || c == '_' || c == '-';
    let mut seen = 0;
    for (i, l) in text.lines().enumerate().skip(line) {
        let chars: Vec<char> = l.chars().collect();
        let from = if i == line { column } else { 0 };
        for at in from..chars.len() {
            let rest: String = chars[at..].iter().collect();
            let unquoted = rest.strip_prefix(key).or_else(|| rest.strip_prefix(&format!("\"{key}\""))).or_else(|| rest.strip_prefix(&format!("'{key}'")));
            let starts_word = at == 0 || !is_word(chars[at - 1]);
            if starts_word && unquoted.is_some_and(|r| r.trim_start().starts_with(':')) {
                seen += 1;
                if seen == 2 {
                    return Some((i, at));
                }
            }
        }
    }
    None
}

/// The key a duplicate-key message names (serde's `duplicate field `k``, the YAML value's
/// `duplicate entry with key "k"`, [`unique_entries`]'s `duplicate key `k``).
fn repeated_key(message: &str) -> Option<String> {
    for (open, close) in [("duplicate field `", '`'), ("duplicate key `", '`'), ("duplicate entry with key \"", '"')] {
        if let Some(rest) = message.split(open).nth(1) {
            return rest.split(close).next().map(str::to_string);
        }
    }
    None
}

/// The line and column (from 0) of the second line from line `from` on that starts with the
/// mapping key `key` at the indentation of the first such line.
fn second_occurrence(text: &str, from: usize, key: &str) -> Option<(usize, usize)> {
    let mut hits = text.lines().enumerate().skip(from).filter(|(_, l)| is_key_line(l, key)).map(|(i, l)| (i, l.len() - l.trim_start().len()));
    let (_, indent) = hits.next()?;
    hits.find(|(_, at)| *at == indent)
}

/// `text` with each `line N column` made `line N+offset column`.
fn shift_lines(text: &str, offset: usize) -> String {
    if offset == 0 {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("line ") {
        out.push_str(&rest[..at + 5]);
        rest = &rest[at + 5..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        match rest[..digits].parse::<usize>() {
            Ok(n) if rest[digits..].starts_with(" column") => {
                out.push_str(&(n + offset).to_string());
                rest = &rest[digits..];
            }
            _ => {}
        }
    }
    out.push_str(rest);
    out
}

/// For `#[serde(deserialize_with = "...")]` on a map field: the mapping as a `BTreeMap`, refused
/// when it repeats a key (YAML says keys are unique; the parser would keep the last value, so
/// `sizes: {n: 64, n: 128}` would silently mean 128).
pub fn unique_keys<'de, D, K, V>(deserializer: D) -> Result<std::collections::BTreeMap<K, V>, D::Error>
where
    D: serde::Deserializer<'de>,
    K: serde::Deserialize<'de> + Ord + Clone + std::fmt::Display,
    V: serde::Deserialize<'de>,
{
    unique_entries(deserializer).map(|entries| entries.into_iter().collect())
}

/// As [`unique_keys`], the entries kept in the file's order.
pub fn unique_entries<'de, D, K, V>(deserializer: D) -> Result<Vec<(K, V)>, D::Error>
where
    D: serde::Deserializer<'de>,
    K: serde::Deserialize<'de> + Ord + Clone + std::fmt::Display,
    V: serde::Deserialize<'de>,
{
    struct Unique<K, V>(std::marker::PhantomData<(K, V)>);
    impl<'de, K, V> serde::de::Visitor<'de> for Unique<K, V>
    where
        K: serde::Deserialize<'de> + Ord + Clone + std::fmt::Display,
        V: serde::Deserialize<'de>,
    {
        type Value = Vec<(K, V)>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a mapping")
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let (mut out, mut seen) = (Vec::new(), std::collections::BTreeSet::new());
            while let Some(key) = map.next_key::<K>()? {
                if !seen.insert(key.clone()) {
                    return Err(serde::de::Error::custom(format!("duplicate key `{key}`")));
                }
                let value = map.next_value::<V>()?;
                out.push((key, value));
            }
            Ok(out)
        }
    }
    deserializer.deserialize_map(Unique(std::marker::PhantomData))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fifo(dir: &Path) -> std::path::PathBuf {
        let p = dir.join("fifo");
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        p
    }

    #[test]
    fn yaml_errors_are_placed_in_the_file_and_repeated_keys_refused() {
        #[derive(serde::Deserialize, Debug)]
        struct Doc {
            #[serde(deserialize_with = "unique_keys")]
            sizes: std::collections::BTreeMap<String, i64>,
        }
        let e = serde_yaml::from_str::<Doc>("sizes: {n: 64, n: 128}\n").unwrap_err();
        let (place, message) = yaml_error(&e, "sizes: {n: 64, n: 128}\n", 5);
        assert_eq!(place.map(|p| p.0), Some(5), "{message}");
        assert!(message.contains("duplicate key `n`") && !message.contains("at line"), "{message}");
        let block = "\nsizes:\n  n: 64\n  n: 128\n";
        let e = serde_yaml::from_str::<Doc>(block).unwrap_err();
        let (place, message) = yaml_error(&e, block, 1);
        assert!(message.contains("duplicate key `n`"), "{message}");
        assert_eq!(place, Some((4, 3)), "the second `n`");
        assert_eq!(serde_yaml::from_str::<Doc>("sizes: {n: 64, m: 1}").unwrap().sizes.len(), 2);
        let e = serde_yaml::from_str::<Doc>("sizes: {n: abc}\n").unwrap_err();
        let (place, message) = yaml_error(&e, "sizes: {n: abc}\n", 10);
        assert_eq!(place, Some((10, 12)), "{message}");
        // In a flow mapping over lines, the second key; a control character, by its offset.
        let flow = "a: 1\nb: {range: [1, 8],\n   range: [2, 3]}\n";
        let e = serde_yaml::from_str::<serde_yaml::Value>(flow).unwrap_err();
        assert_eq!(yaml_error(&e, flow, 1).0, Some((3, 4)), "{e}");
        let control = "a: 1\nb: x\u{1b}y\n";
        let e = serde_yaml::from_str::<serde_yaml::Value>(control).unwrap_err();
        let (place, message) = yaml_error(&e, control, 3);
        assert_eq!(place, Some((4, 5)), "{message}");
        assert!(!message.contains("position"), "{message}");
        assert_eq!(shift_lines("x at line 2 column 3, while parsing at line 1 column 1; line 7 y", 9), "x at line 11 column 3, while parsing at line 10 column 1; line 7 y");
    }

    #[test]
    fn reads_regular_files_within_the_limit_only() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        fs::write(&real, b"ok").unwrap();
        assert_eq!(read_regular(&real, 2, Links::Follow).unwrap(), b"ok");
        let e = read_regular(&real, 1, Links::Follow).unwrap_err();
        assert_eq!(e.to_string(), "it is larger than 1 bytes");
        let e = read_regular(dir.path(), 10, Links::Follow).unwrap_err();
        assert_eq!(e.to_string(), "it is a directory, not a regular file");
    }

    #[test]
    fn refuses_a_fifo_without_blocking_and_a_device_without_reading_it() {
        let dir = tempfile::tempdir().unwrap();
        let e = read_regular(&fifo(dir.path()), 1 << 20, Links::Follow).unwrap_err();
        assert_eq!(e.to_string(), "it is a FIFO, not a regular file");
        let e = read_regular(Path::new("/dev/zero"), 1 << 20, Links::Follow).unwrap_err();
        assert_eq!(e.to_string(), "it is a device, not a regular file");
    }

    #[test]
    fn follows_links_only_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("real"), b"ok").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink("real", &link).unwrap();
        assert_eq!(read_regular(&link, 10, Links::Follow).unwrap(), b"ok");
        let e = read_regular(&link, 10, Links::Refuse).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        // A link to a FIFO is refused even when links are followed: the target is checked.
        let to_fifo = dir.path().join("to_fifo");
        std::os::unix::fs::symlink(fifo(dir.path()), &to_fifo).unwrap();
        assert!(read_regular(&to_fifo, 10, Links::Follow).is_err());
    }

    #[test]
    fn deep_yaml_nesting_is_refused_before_parsing() {
        let deep = |n: usize| format!("a: 1\nb: {}{}\n", "[".repeat(n), "]".repeat(n));
        assert!(check_yaml_nesting(&deep(MAX_YAML_NESTING)).is_ok());
        assert_eq!(check_yaml_nesting(&deep(100_000)).unwrap_err(), (2, "collections nested deeper than 128 levels".to_string()));
        // Brackets in quotes and comments are text.
        let quoted = format!("a: \"{}\\\" {}\"\nb: '{}' # {}\n", "[".repeat(500), "{".repeat(500), "[".repeat(500), "[".repeat(500));
        assert!(check_yaml_nesting(&quoted).is_ok(), "{quoted}");
        assert!(check_yaml_nesting("best: {leaf: a, parameters: {B: 8}}\n").is_ok());
        // However quotes fall, the brackets are bounded: a quote the scan misreads cannot
        // hide deep nesting.
        let many = format!("a: it's\nb: {}\n", "['x]]]]' ".repeat(MAX_YAML_BRACKETS + 1));
        assert_eq!(check_yaml_nesting(&many).unwrap_err().0, 2);
        assert!(check_yaml_nesting(&"[1] ".repeat(MAX_YAML_BRACKETS)).is_ok());
    }

    #[test]
    fn text_errors_name_the_line_and_column_of_a_bad_byte() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t");
        fs::write(&p, b"ab\ncd\xffe").unwrap();
        let e = read_text(&p, 100, Links::Follow).unwrap_err();
        assert!(e.to_string().starts_with("line 2, column 3: not valid UTF-8 (byte offset 5)"), "{e}");
        assert_eq!(size_in_words(16 << 20), "16 MiB");
        assert_eq!(size_in_words(4096), "4 KiB");
        assert_eq!(size_in_words(1000), "1000 bytes");
    }
}
