//! `cargo fuzz run gguf_parse`: the GGUF parser must return an error, never panic or
//! allocate beyond the input, on arbitrary bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(g) = gguf::Gguf::parse(data) {
        for t in &g.tensors {
            assert!(g.data_offset + t.offset + t.n_bytes <= data.len() as u64);
        }
    }
});
