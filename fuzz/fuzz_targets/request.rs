//! `cargo +nightly fuzz run request`: request validation on arbitrary JSON
//! (`server::fuzz::request` states what must hold), against a loaded SmolLM2.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tandem_fuzz::smollm2_ready;

fuzz_target!(|data: &[u8]| {
    server::fuzz::request(smollm2_ready(), data);
});
