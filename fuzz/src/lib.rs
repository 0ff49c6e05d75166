//! What the fuzz targets share: SmolLM2's tokenizer and a loaded server state, made once
//! per process.

use std::path::PathBuf;
use std::sync::OnceLock;

use server::Ready;

fn smollm2() -> PathBuf {
    let dir = std::env::var_os("TANDEM_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            dirs::cache_dir()
                .expect("a cache dir")
                .join("tandem")
                .join("models")
        });
    dir.join("SmolLM2-135M-Instruct.Q4_1.gguf")
}

pub fn smollm2_tokenizer() -> &'static text::Tokenizer {
    static TOK: OnceLock<text::Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let file = gguf::GgufFile::open(smollm2()).expect("tandem pull smollm2-135m");
        text::Tokenizer::from_gguf(&file.header.metadata).expect("SmolLM2's tokenizer")
    })
}

pub fn smollm2_ready() -> &'static Ready {
    static READY: OnceLock<Ready> = OnceLock::new();
    READY.get_or_init(|| {
        server::fuzz::ready(smollm2()).expect("SmolLM2 loads (tandem pull smollm2-135m)")
    })
}
