//! No input may crash the front end: mutated versions of the valid examples, and arbitrary
//! text, are either accepted or refused with diagnostics that render. A panic fails the test.

use metafork::frontend::check_source;
use proptest::prelude::*;

const EXAMPLES: [&str; 4] = [
    include_str!("../../examples/matadd.mf"),
    include_str!("../../examples/matmul.mf"),
    include_str!("../../examples/jacobi1d.mf"),
    include_str!("../../examples/transpose.mf"),
];

/// Fragments a mutation may insert: tokens of the language, refused C, and odd characters.
const FRAGMENTS: &[&str] = &[
    "meta_for", "meta_schedule", "for", "if", "else", "int", "float", "const", "assume(", "cache(a)",
    "(", ")", "[", "]", "{", "}", ";", ",", "=", "+=", "<", "<=", "?", ":", "%", "/", "*", "-", "!",
    "&&", "||", "0", "1", "2147483648", "9999999999999999999999", "1e308", ".5", "N", "B", "s", "a", "c",
    "x", "while", "goto", "*p", "&x", "<<", "\"str\"", "'c'", "/*", "*/", "//", "#", "\n", "\u{e9}", "\u{1F600}",
    "\0", "(((((((((((((((((((((((((((((((((", "min(", "sqrt(", "(float)", "meta_for (int z = 0; z < B; z++)",
];

#[derive(Debug, Clone)]
enum Mutation {
    Delete { at: usize, len: usize },
    Insert { at: usize, fragment: usize },
    Duplicate { at: usize, len: usize },
    Swap { a: usize, b: usize, len: usize },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1usize..40).prop_map(|(at, len)| Mutation::Delete { at, len }),
        (any::<usize>(), 0..FRAGMENTS.len()).prop_map(|(at, fragment)| Mutation::Insert { at, fragment }),
        (any::<usize>(), 1usize..80).prop_map(|(at, len)| Mutation::Duplicate { at, len }),
        (any::<usize>(), any::<usize>(), 1usize..30).prop_map(|(a, b, len)| Mutation::Swap { a, b, len }),
    ]
}

/// Apply a mutation on character boundaries, so the text stays valid UTF-8.
fn apply(text: &str, m: &Mutation) -> String {
    let chars: Vec<char> = text.chars().collect();
    let n = chars.len().max(1);
    let clamp = |at: usize, len: usize| {
        let s = at % n;
        (s, (s + len).min(chars.len()))
    };
    let s = |r: std::ops::Range<usize>| chars[r].iter().collect::<String>();
    match *m {
        Mutation::Delete { at, len } => {
            let (a, b) = clamp(at, len);
            s(0..a) + &s(b..chars.len())
        }
        Mutation::Insert { at, fragment } => {
            let (a, _) = clamp(at, 0);
            s(0..a) + FRAGMENTS[fragment] + &s(a..chars.len())
        }
        Mutation::Duplicate { at, len } => {
            let (a, b) = clamp(at, len);
            s(0..b) + &s(a..chars.len())
        }
        Mutation::Swap { a, b, len } => {
            let (a0, a1) = clamp(a, len);
            let (b0, b1) = clamp(b, len);
            if a1 <= b0 {
                s(0..a0) + &s(b0..b1) + &s(a1..b0) + &s(a0..a1) + &s(b1..chars.len())
            } else {
                text.to_string()
            }
        }
    }
}

fn never_panics(text: &str) {
    match check_source("mutant.mf", text) {
        Ok(program) => assert!(!program.kernels.is_empty()),
        Err(d) => {
            assert!(!d.items.is_empty());
            let rendered = d.render(false);
            assert!(rendered.contains("mutant.mf:"), "{rendered}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn mutated_examples_never_crash(which in 0usize..4, ms in proptest::collection::vec(mutation(), 1..6)) {
        let mut text = EXAMPLES[which].to_string();
        for m in &ms {
            text = apply(&text, m);
        }
        never_panics(&text);
    }

    #[test]
    fn arbitrary_text_never_crashes(text in "\\PC{0,400}") {
        never_panics(&text);
    }

    #[test]
    fn token_soup_never_crashes(ix in proptest::collection::vec(0..FRAGMENTS.len(), 0..200)) {
        let text: Vec<&str> = ix.iter().map(|i| FRAGMENTS[*i]).collect();
        never_panics(&text.join(" "));
    }
}

#[test]
fn the_unmutated_examples_are_accepted() {
    for e in EXAMPLES {
        assert!(check_source("example.mf", e).is_ok());
    }
}
