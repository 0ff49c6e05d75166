//! A short stable run of the request fuzz target (`fuzz/`; the long runs are
//! `scripts/fuzz`): 3,000 bodies from random bytes and from mutated valid requests,
//! validated for every route (tools, schemas and grammars among them) against a loaded SmolLM2; only 4xx may come back.

use std::path::PathBuf;

use server::fuzz::request;
use text::fuzz::mutants;

#[test]
fn request_smoke() {
    let dir = std::env::var_os("TANDEM_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| dirs::cache_dir().unwrap().join("tandem").join("models"));
    let path = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        path.is_file(),
        "{} missing: run `tandem pull smollm2-135m`",
        path.display()
    );
    let ready = server::fuzz::ready(path).unwrap();
    // A leading byte ≡ 0 (mod 8) passes the rest through as the body itself.
    let mut seeds: Vec<Vec<u8>> = [
        r#"{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4}"#,
        r#"{"prompt":"Hi","max_tokens":4,"stop":["\n"],"logprobs":2,"stream":true}"#,
        r#"{"messages":[{"role":"user","content":[{"type":"text","text":"Hi"}]}],"speculative":{"n_max":2}}"#,
        r#"{"messages":[{"role":"user","content":"Hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"string"}}}}}],"tool_choice":"required"}"#,
        r#"{"prompt":"Hi","response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"n":{"enum":[1,2]}}}}},"logit_bias":{"1":-2},"samplers":["top_k","temperature"],"dry_multiplier":0.5}"#,
        r#"{"prompt":"Hi","grammar":"root ::= [a-c]{2,4} ("x" | "y")*","presence_penalty":1.5}"#,
    ]
    .iter()
    .map(|s| [b"\x08".as_slice(), s.as_bytes()].concat())
    .collect();
    let mut s = 7u64;
    seeds.extend((0..16).map(|_| {
        (0..64)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s as u8
            })
            .collect::<Vec<u8>>()
    }));
    for input in mutants(&seeds, 3000) {
        request(&ready, &input);
    }
}
