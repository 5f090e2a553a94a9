//! Link options for the `metafork` binary only (the library, tests and benchmarks are linked
//! as Cargo does by default).
//!
//! `-z keep-text-section-prefix`: the linker keeps code in `.text.startup` (C++ static
//! constructors: LLVM's 378 are in the binary) together instead of spread through 26 MB of
//! code by symbol. Each run calls them all before `main`; gathered in 0.3 MB they take 70
//! fewer page faults, and `metafork --version` 3.95 -> 3.40 ms (bench/RESULTS.md, thirtieth
//! session). The linker rustc uses on Linux (LLD), GNU ld and gold all take the option.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,keep-text-section-prefix");
    }
}
