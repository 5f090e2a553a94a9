//! libFuzzer target: any bytes, as source text, must be accepted or refused with diagnostics
//! that render; a panic, a hang or a stack overflow is a finding.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Err(d) = metafork::frontend::check_source("fuzz.mf", text) {
            let _ = d.render(false);
        }
    }
});
