//! libFuzzer target for the whole pipeline: any bytes, as source text, are refused with
//! diagnostics that render, or checked, built into trees and emitted as every file `gen`
//! writes, under a small time budget (a spent budget is an error, never a hang). A panic, an
//! abort, a hang or a stack overflow is a finding.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::time::Duration;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match metafork::frontend::check_source("fuzz.mf", text) {
        Err(d) => {
            let _ = d.render(false);
        }
        Ok(program) => {
            constraints::budget::set(Some(Duration::from_millis(300)));
            let _ = metafork::emit::command::files("fuzz.mf", text, &program, true, &Default::default());
            constraints::budget::set(None);
        }
    }
});
