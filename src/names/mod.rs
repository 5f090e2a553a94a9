//! Identifier hygiene: how a name of the user's program, or one the tool makes up, is spelled
//! in the generated C++/CUDA, and how untrusted text is placed in comments and string literals.
//!
//! Contract:
//! - A user's identifier is any C identifier the front end accepted. Names the tool makes up
//!   inside kernel forms (loop counters, temporaries, tiles) are *internal*: they begin with
//!   [`INTERNAL`] (`$`), which no C identifier holds, so the two never meet in the pipeline.
//!   Model variables that must not meet a user's name either (a second thread's copy, a
//!   quotient) contain `$` too.
//! - [`c_ident`] spells a name in generated code, and is injective: an internal `$x` becomes
//!   `metafork_x`; a user's name is kept unless it is reserved ([`is_reserved`]: a C/C++ or CUDA
//!   keyword or built-in, a macro of the headers generated code includes, a name the generated
//!   code itself uses, a name beginning `_`, `metafork` in any case, `cuda`/`CUDA` or
//!   `mfu_`, or a kernel's name shape `..._leafN`), and then becomes `mfu_` + name. Spelled
//!   names never begin with `metafork` unless internal, and begin `mfu_` only when escaped, so
//!   no two names meet, and no user name meets one the emitters write themselves (those all
//!   begin `metafork_`/`METAFORK_`).
//! - [`c_comment`] and [`c_string`] turn any text (a file name, a wisdom field) into comment
//!   text or a string literal that cannot end the comment or the literal, splice a line or
//!   start a directive.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::OnceLock;

/// Whether `c` must not reach a terminal as it is: a control character, or a bidirectional
/// override or isolate (which make a line read differently from what it holds).
pub fn is_hidden_char(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// The first character of a name the tool makes up.
pub const INTERNAL: char = '$';

/// An internal name with this stem (`$e`, spelled `metafork_e`). `stem` is made of identifier
/// characters.
pub fn internal(stem: &str) -> String {
    debug_assert!(stem.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
    format!("{INTERNAL}{stem}")
}

/// An internal name that reads like the user's own (a tile `a_tile0` of array `a`, a
/// register copy `c_reg`): spelled as `stem` where that is free in its kernel
/// ([`Spelling`]), else `metafork_<stem>`. Its stems never equal a stem of [`internal`]'s.
pub fn readable(stem: &str) -> String {
    debug_assert!(stem.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
    format!("{INTERNAL}:{stem}")
}

/// Whether the tool made the name up (it holds `$`).
pub fn is_internal(name: &str) -> bool {
    name.contains(INTERNAL)
}

/// The name of a second thread's (or a second iteration's) copy of a model variable.
pub fn copy_of(name: &str, tag: &str) -> String {
    format!("{name}{INTERNAL}{tag}")
}

/// What follows `metafork_<schedule>_` in the symbols a schedule's dispatch code and launchers
/// define (`metafork_matmul_launch`, ...). A test checks the emitters against it.
pub const SCHEDULE_SYMBOLS: &[&str] = &[
    "allow_shared", "attributes", "compiled", "constraints", "factors", "launch", "launch_fn", "launchers", "leaf_names", "params", "query", "rules", "select",
    "shared_bytes", "terms", "tuned", "wisdom", "wisdom_entries", "wisdom_entry",
];

/// The prefix of an escaped user name.
pub const ESCAPE: &str = "mfu_";

/// C and C++ keywords (C23, C++23, alternative tokens), CUDA's built-in variables and types,
/// and the names generated code uses that are not its own (`metafork_*`).
const WORDS: &[&str] = &[
    // C++ keywords and alternative tokens
    "alignas", "alignof", "and", "and_eq", "asm", "auto", "bitand", "bitor", "bool", "break", "case", "catch", "char",
    "char8_t", "char16_t", "char32_t", "class", "compl", "concept", "const", "consteval", "constexpr", "constinit",
    "const_cast", "continue", "co_await", "co_return", "co_yield", "decltype", "default", "delete", "do", "double",
    "dynamic_cast", "else", "enum", "explicit", "export", "extern", "false", "float", "for", "friend", "goto", "if",
    "inline", "int", "long", "mutable", "namespace", "new", "noexcept", "not", "not_eq", "nullptr", "operator", "or",
    "or_eq", "private", "protected", "public", "register", "reinterpret_cast", "requires", "return", "short",
    "signed", "sizeof", "static", "static_assert", "static_cast", "struct", "switch", "template", "this",
    "thread_local", "throw", "true", "try", "typedef", "typeid", "typename", "union", "unsigned", "using", "virtual",
    "void", "volatile", "wchar_t", "while", "xor", "xor_eq", "final", "override", "import", "module",
    // C keywords that C++ lacks
    "restrict", "typeof", "typeof_unqual", "fortran",
    // CUDA built-in variables, vector and special types
    "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize", "dim3", "half", "half2", "nv_bfloat16", "nv_bfloat162",
    // fixed-width and standard types, and the standard library's namespace
    "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t", "intptr_t", "uintptr_t",
    "intmax_t", "uintmax_t", "size_t", "ssize_t", "ptrdiff_t", "nullptr_t", "max_align_t", "wint_t", "std", "FILE",
    // what generated code calls: math, memory, I/O, timing (the harness), threads (dispatch)
    "min", "max", "abs", "sqrt", "sqrtf", "exp", "expf", "fabs", "fabsf", "fmin", "fmax", "fminf", "fmaxf", "pow",
    "powf", "floor", "ceil", "log", "logf", "sin", "cos", "tan", "isnan", "isinf", "isfinite", "printf", "fprintf",
    "snprintf", "sprintf", "puts", "fopen", "fclose", "fputs", "fflush", "malloc", "calloc", "realloc", "free", "exit",
    "atoi", "atol", "strtol", "strtod", "strcmp", "strncmp", "strlen", "memcpy", "memset", "memcmp", "rand", "srand",
    "vector", "sort", "nth_element", "mutex", "lock_guard", "main", "argc", "argv", "atomicAdd",
];

/// Non-underscore macros that the headers generated code includes define (GCC 12 and CUDA 13
/// on Debian 12: `nvcc -E -Xcompiler -dM`, and `linux`/`unix` that GNU modes predefine);
/// `tests/names.rs` checks the list against the installed toolchain.
const MACROS: &str = include_str!("macros.txt");

fn reserved_words() -> &'static HashSet<&'static str> {
    static SET: OnceLock<HashSet<&'static str>> = OnceLock::new();
    SET.get_or_init(|| WORDS.iter().copied().chain(MACROS.lines().map(str::trim).filter(|l| !l.is_empty())).collect())
}

/// Whether a user's name must be escaped in generated code.
pub fn is_reserved(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    reserved_words().contains(name)
        || name.starts_with('_')
        || lower.starts_with("metafork")
        || name.starts_with(ESCAPE)
        || name.starts_with("cuda")
        || name.starts_with("CUDA")
        || is_kernel_name_shape(name)
}

/// `..._leafN`: the shape of a kernel's name (`<schedule>_leaf<node>`).
fn is_kernel_name_shape(name: &str) -> bool {
    name.rfind("_leaf").is_some_and(|i| {
        let digits = &name[i + "_leaf".len()..];
        !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
    })
}

/// How a name is spelled in generated C++/CUDA (see the module's contract); a [`readable`]
/// name as `metafork_<stem>` (in a kernel, [`Spelling`] may keep its stem).
pub fn c_ident(name: &str) -> Cow<'_, str> {
    if let Some(stem) = name.strip_prefix(INTERNAL) {
        let stem = stem.strip_prefix(':').unwrap_or(stem);
        debug_assert!(!stem.contains(INTERNAL), "a model variable `{name}` reached generated code");
        return Cow::Owned(format!("metafork_{}", stem.replace(INTERNAL, "_")));
    }
    if is_reserved(name) {
        Cow::Owned(format!("{ESCAPE}{name}"))
    } else {
        Cow::Borrowed(name)
    }
}

/// Text holding internal names (an access `$:a_tile0[...]` as the model printed it) as a user
/// reads it: a [`readable`] name as its stem, another internal one as [`c_ident`] spells it.
pub fn in_messages(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(INTERNAL) {
        out.push_str(&rest[..at]);
        rest = &rest[at + INTERNAL.len_utf8()..];
        match rest.strip_prefix(':') {
            Some(r) => rest = r,
            None => out.push_str("metafork_"),
        }
    }
    out.push_str(rest);
    out
}

/// The spelling of names within one kernel: as [`c_ident`], except that a [`readable`] name
/// keeps its stem where the stem is not reserved and no user name of the kernel is the stem.
/// Still injective: such a stem is neither a user's spelled name (not among the raw names, and
/// not reserved, so not `mfu_...`), nor `metafork_...` (reserved).
pub struct Spelling {
    user: HashSet<String>,
}

impl Spelling {
    /// For a kernel whose names (user and internal, any order) are `names`.
    pub fn new<'a>(names: impl IntoIterator<Item = &'a str>) -> Spelling {
        Spelling { user: names.into_iter().filter(|n| !is_internal(n)).map(str::to_string).collect() }
    }

    pub fn ident<'a>(&self, name: &'a str) -> Cow<'a, str> {
        match name.strip_prefix(INTERNAL).and_then(|s| s.strip_prefix(':')) {
            Some(stem) if !is_reserved(stem) && !self.user.contains(stem) => Cow::Borrowed(stem),
            _ => c_ident(name),
        }
    }
}

/// `text` as the body of a comment (`//` or `/* */`): printable ASCII kept, except that a
/// backslash, a `*/`, a `/*`, a `??` and every other character are written as `\xNN` /
/// `\u{...}` escapes, so the text can neither end the comment, open one inside it (a
/// `-Wcomment` warning), splice the next line, nor hold a newline.
pub fn c_comment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut prev = '\0';
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\x5c"),
            '/' if prev == '*' => out.push_str("\\x2f"),
            '*' if prev == '/' => out.push_str("\\x2a"),
            '?' if prev == '?' => out.push_str("\\x3f"),
            ' '..='~' => out.push(c),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x100 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
        prev = c;
    }
    out
}

/// `text` as a C/C++ string literal: quotes, backslashes and `?` escaped, every byte outside
/// printable ASCII as a three-digit octal escape (which, unlike `\x`, cannot swallow the next
/// character).
pub fn c_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for b in text.bytes() {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'?' => out.push_str("\\?"),
            b' '..=b'~' => out.push(b as char),
            _ => out.push_str(&format!("\\{b:03o}")),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `metafork_{s}_<what>` the dispatch emitter writes is in [`SCHEDULE_SYMBOLS`], so
    /// that the front end's check of schedule names against host drivers stays complete.
    #[test]
    fn the_schedule_symbols_are_those_the_emitters_write() {
        for source in [include_str!("../emit/dispatch.rs"), include_str!("../emit/host.rs"), include_str!("../emit/cuda.rs")] {
            for (i, _) in source.match_indices("metafork_{s}_") {
                let what: String = source[i + "metafork_{s}_".len()..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                assert!(SCHEDULE_SYMBOLS.contains(&what.as_str()), "`metafork_{{s}}_{what}` is not in SCHEDULE_SYMBOLS");
            }
        }
    }

    #[test]
    fn messages_show_readable_names_by_their_stems() {
        assert_eq!(in_messages("$:a_tile0[(int)k * B + $e]"), "a_tile0[(int)k * B + metafork_e]");
        assert_eq!(in_messages("x[i]"), "x[i]");
        assert_eq!(in_messages("$"), "metafork_");
    }

    #[test]
    fn spelling_is_injective_and_escapes_what_collides() {
        let names = ["N", "class", "mfu_class", "mfu_mfu_class", "threadIdx", "_x", "__global__", "metafork_e", "METAFORK_OVERFLOW", "a_leaf3", "a_leaf", "errno", "linux", "p", "int8_t", "cudaMalloc", "x_reg"];
        let mut spelled: Vec<String> = names.iter().map(|n| c_ident(n).into_owned()).collect();
        spelled.push(c_ident(&internal("e")).into_owned());
        spelled.push(c_ident(&internal("a_tile0")).into_owned());
        let unique: HashSet<&String> = spelled.iter().collect();
        assert_eq!(unique.len(), spelled.len(), "{spelled:?}");
        assert_eq!(c_ident("N"), "N");
        assert_eq!(c_ident("p"), "p");
        assert_eq!(c_ident("a_leaf"), "a_leaf");
        assert_eq!(c_ident("class"), "mfu_class");
        assert_eq!(c_ident("metafork_e"), "mfu_metafork_e");
        assert_eq!(c_ident(&internal("e")), "metafork_e");
        assert_eq!(c_ident("a_leaf12"), "mfu_a_leaf12");
        for s in &spelled {
            let internal_spelling = s.starts_with("metafork_");
            assert!(internal_spelling == (s == "metafork_e" || s == "metafork_a_tile0"), "{s}");
        }
    }

    #[test]
    fn comments_and_strings_cannot_be_escaped_from() {
        for hostile in ["nl\n#error injected\n.mf", "a */ #error x /*", "/*/ //* **//", "trail\\", "??/", "q\"uote", "caf\u{e9}", "\r\u{2028}x", "\0"] {
            let c = c_comment(hostile);
            assert!(!c.contains('\n') && !c.contains('\r') && !c.contains("*/") && !c.contains("/*") && !c.ends_with('\\') && !c.contains("??"), "{c}");
            assert!(c.is_ascii());
            let s = c_string(hostile);
            let inner = &s[1..s.len() - 1];
            assert!(s.is_ascii() && !inner.contains('\n'));
            // Every quote inside is escaped: an unescaped one would end the literal.
            let mut escaped = false;
            for ch in inner.chars() {
                assert!(escaped || ch != '"', "{s}");
                escaped = !escaped && ch == '\\';
            }
        }
        assert_eq!(c_string("\u{e9}1"), "\"\\303\\2511\"");
    }
}
