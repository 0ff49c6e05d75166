//! `cargo +nightly fuzz run tokenizer`: SmolLM2's tokenizer on arbitrary bytes
//! (`text::fuzz::tokenizer` states what must hold). The model comes from the tandem cache
//! (`tandem pull smollm2-135m`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tandem_fuzz::smollm2_tokenizer;

fuzz_target!(|data: &[u8]| {
    text::fuzz::tokenizer(smollm2_tokenizer(), data);
});
