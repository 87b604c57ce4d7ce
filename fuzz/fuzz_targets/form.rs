//! The token request parsers never panic, whatever the body.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = shared::grant::parse_token_request(data);
    let _ = shared::grant::parse_token_param(data);
});
