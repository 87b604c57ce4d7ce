//! The Basic credentials parser never panics, and what it accepts has an id without controls.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(c) = shared::basic::parse_basic(data) {
        assert!(!c.id.is_empty() && !c.id.chars().any(char::is_control));
    }
});
