//! The request fuzz target's body (`fuzz/`: `cargo +nightly fuzz run request`), shared with
//! the stable smoke test. Arbitrary bytes become a request body: one time in eight the bytes
//! themselves, otherwise JSON built from the request's own field names and values of every
//! type, nested. Validation for every route returns a request or a 4xx naming what is
//! wrong: never a panic, never a 5xx.

use serde_json::{Map, Number, Value};

use crate::{check_request, Ready, Route, ServerConfig};

/// Field names the generator draws keys from: the request's own and some it does not know.
const KEYS: &[&str] = &[
    "messages",
    "prompt",
    "model",
    "max_tokens",
    "max_completion_tokens",
    "n_predict",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "stop",
    "stream",
    "stream_options",
    "include_usage",
    "logprobs",
    "top_logprobs",
    "n_probs",
    "n",
    "ignore_eos",
    "presence_penalty",
    "frequency_penalty",
    "echo",
    "cache_salt",
    "typical_p",
    "repeat_penalty",
    "repeat_last_n",
    "logit_bias",
    "samplers",
    "dry_multiplier",
    "dry_sequence_breakers",
    "response_format",
    "json_schema",
    "schema",
    "grammar",
    "guided_regex",
    "guided_choice",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "function",
    "name",
    "parameters",
    "chat_template_kwargs",
    "enable_thinking",
    "speculative",
    "speculative.n_max",
    "n_max",
    "n_min",
    "role",
    "content",
    "type",
    "text",
    "image_url",
    "reasoning_content",
    "unknown",
];
const WORDS: &[&str] = &[
    "user",
    "system",
    "assistant",
    "tool",
    "wizard",
    "text",
    "image_url",
    "",
    "Hello",
    "<|im_start|>",
    "<|endoftext|>",
    "{{ raise_exception('x') }}",
    "json_schema",
    "json_object",
    "root ::= \"a\"",
    "(a|b",
    "required",
    "\u{0}\u{FFFD}é😀",
];

/// Reads the fuzzer's bytes one at a time; zeros once they run out.
struct Source<'a> {
    data: &'a [u8],
    at: usize,
}

impl Source<'_> {
    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.byte()).collect()
    }

    fn pick<'s>(&mut self, from: &[&'s str]) -> &'s str {
        from[self.byte() as usize % from.len()]
    }
}

fn value(s: &mut Source, depth: u32) -> Value {
    let kinds = if depth >= 4 { 6 } else { 10 };
    match s.byte() % kinds {
        0 => Value::Null,
        1 => Value::Bool(s.byte() & 1 == 1),
        2 => Value::from(s.byte() as i8 as i64),
        3 => Value::from(i64::from_le_bytes(s.bytes(8).try_into().expect("8 bytes"))),
        4 => Number::from_f64(f64::from_le_bytes(s.bytes(8).try_into().expect("8 bytes")))
            .map_or(Value::from(0.5), Value::Number),
        5 => match s.byte() % 3 {
            0 => Value::from(s.pick(KEYS)),
            1 => Value::from(s.pick(WORDS)),
            _ => {
                let n = s.byte() as usize % 24;
                Value::from(String::from_utf8_lossy(&s.bytes(n)).into_owned())
            }
        },
        6 | 7 => Value::Array((0..s.byte() % 4).map(|_| value(s, depth + 1)).collect()),
        8 => object(s, depth + 1),
        _ => Value::Array(
            (0..1 + s.byte() % 3)
                .map(|_| {
                    let mut m = Map::new();
                    m.insert("role".into(), Value::from(s.pick(WORDS)));
                    m.insert("content".into(), value(s, depth + 2));
                    Value::Object(m)
                })
                .collect(),
        ),
    }
}

fn object(s: &mut Source, depth: u32) -> Value {
    let mut m = Map::new();
    for _ in 0..s.byte() % 7 {
        let k = s.pick(KEYS);
        m.insert(k.into(), value(s, depth));
    }
    Value::Object(m)
}

/// The request body `data` stands for.
pub fn body(data: &[u8]) -> Vec<u8> {
    let mut s = Source { data, at: 0 };
    if s.byte().is_multiple_of(8) {
        return data[1.min(data.len())..].to_vec();
    }
    object(&mut s, 0).to_string().into_bytes()
}

/// `model` loaded as the targets validate against: one slot of 512 positions, one thread.
pub fn ready(model: std::path::PathBuf) -> Result<Ready, crate::Error> {
    let engine = engine::EngineConfig {
        n_ctx: 512,
        n_parallel: 1,
        kv_unified: false,
        n_batch: 64,
        n_ubatch: 64,
        n_threads: 1,
        kv_type: gguf::GgmlType::F16,
        queue_limit: 1,
        device: engine::DeviceKind::Cpu,
        step_budget: engine::StepBudget::AUTO,
        swa_full: false,
        ctx_checkpoints: 8,
        cache_ram_mib: 0,
        cache_dir: None,
    };
    crate::load(&ServerConfig::new(model, engine))
}

/// Validates `body(data)` for every route; panics on a 5xx.
pub fn request(ready: &Ready, data: &[u8]) {
    let body = body(data);
    for route in [Route::Chat, Route::Completions, Route::Native] {
        if let Err(e) = check_request(ready, route, &body) {
            assert!(
                e.status.is_client_error(),
                "{route:?}: {} {} for {}",
                e.status,
                e.message,
                String::from_utf8_lossy(&body)
            );
        }
    }
}
