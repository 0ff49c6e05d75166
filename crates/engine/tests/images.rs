//! Images' rows in the engine, apart from any tower: given llama-mtmd-cli's own embeddings
//! of an image (`golden/vision-*.emb`, dumped with its answers by
//! `scripts/gen_vision_golden.sh`), the engine answers as llama-mtmd-cli did, token for
//! token: Gemma 3 270M, whose image rows see one another and enter unscaled, and
//! SmolLM2-135M with a LLaVA tower's rows, attended causally. Whatever a tower's numbers
//! (tandem's are within 6e-4 of llama.cpp's, `model/tests/vision.rs`), the language model's
//! side of an image is exact.

#[allow(dead_code)]
mod common;

use std::sync::Arc;

use common::{
    collect, engine_config, image_rows as rows, log_softmax, model_path, pictured, request, MODELS,
};
use engine::{ContextConfig, DeviceKind, EngineConfig, Enter, Executor, Out, Placed, PromptImage};
use model::Model;
use text::Tokenizer;

fn golden(path: &str) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The answer of model `which` (an index of [`MODELS`]) to `before`, the image's rows of
/// `emb` (attending one another where `bidirectional`), then `after`: `max_tokens` greedy
/// tokens, or fewer to an end token; its prompt read in forwards of `n_ubatch` rows. With
/// the image's first row.
fn answer(
    which: usize,
    text: [&str; 2],
    (emb, bidirectional): (&str, bool),
    max_tokens: usize,
    n_ubatch: usize,
) -> (String, usize) {
    let (_, file, name) = MODELS[which];
    let model = Model::load(model_path(file, name)).unwrap();
    let tok = Arc::new(Tokenizer::from_gguf(&model.file.header.metadata).unwrap());
    let (n, values) = rows(emb);
    assert_eq!(values.len(), n * model.hparams.n_embd);
    let (prompt, at) = pictured(&tok, text, n);
    let mut req = request(prompt, max_tokens, None);
    req.ignore_eos = false;
    req.images = vec![PromptImage {
        at,
        n,
        embeddings: Arc::from(values),
        bidirectional,
    }];
    let cfg = EngineConfig {
        n_batch: 512,
        n_ubatch,
        ..engine_config(2048, 1, false)
    };
    let handle = engine::start(model, tok.clone(), cfg, None, None).unwrap();
    let (tokens, _) = collect(handle.submit(req).unwrap().1);
    (tok.decode(&tokens), at)
}

#[test]
fn gemma3_given_llamas_image_rows_answers_as_llama() {
    let g = golden("../../tests/server/golden/vision-gemma3.json");
    // llama-mtmd-cli's `--chat-template gemma` rendering, split at the image, which mtmd
    // places between Gemma 3's markers.
    let before = format!(
        "<start_of_turn>user\n{}<start_of_image>",
        g["text_before_image"].as_str().unwrap()
    );
    let after = "<end_of_image><end_of_turn>\n<start_of_turn>model\n";
    let n = g["max_tokens"].as_u64().unwrap() as usize;
    let want = g["answer"].as_str().unwrap();
    let (got, at) = answer(3, [&before, after], ("vision-gemma3.emb", true), n, 512);
    assert_eq!(got, want);
    // Forwards of 20 rows: the image's 16 rows straddle the first cut, which moves back to
    // the image's start.
    assert!(
        at < 20 && at + 16 > 20,
        "the image at {at} is not cut at 20"
    );
    let (got, _) = answer(3, [&before, after], ("vision-gemma3.emb", true), n, 20);
    assert_eq!(got, want);
}

#[test]
fn smollm2_given_llamas_llava_rows_answers_as_llama() {
    let g = golden("tests/golden/vision-llava-112.json");
    // SmolLM2's template as Jinja renders it (`--jinja`), split at the image.
    let before = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by \
                  Hugging Face<|im_end|>\n<|im_start|>user\n";
    let after = format!(
        "{}<|im_end|>\n<|im_start|>assistant\n",
        g["text_after_image"].as_str().unwrap()
    );
    let n = g["max_tokens"].as_u64().unwrap() as usize;
    let (got, _) = answer(0, [before, &after], ("vision-llava-112.emb", false), n, 512);
    assert_eq!(got, g["answer"].as_str().unwrap());
}

/// The last row's log-probabilities of model `which` over `text[0]`, the image rows of `emb`
/// (seeing one another where `bidirectional`), then `text[1]`, in two forwards (the image
/// ends the first) on `device` with f32 activations and cache.
fn last_logprobs(
    which: usize,
    text: [&str; 2],
    (emb, bidirectional): (&str, bool),
    device: DeviceKind,
) -> Vec<f64> {
    let (_, file, name) = MODELS[which];
    let model = Model::load(model_path(file, name)).unwrap();
    let tok = Tokenizer::from_gguf(&model.file.header.metadata).unwrap();
    let (n, values) = rows(emb);
    let (prompt, at) = pictured(&tok, text, n);
    let cfg = ContextConfig {
        n_ctx: 512,
        n_ubatch: 512,
        kv_type: gguf::GgmlType::F32,
        precision: device::Precision::F32,
        device,
        ..Default::default()
    };
    let mut exec = Executor::new(model, cfg).unwrap();
    let mut seq = kv::SeqKv::default();
    let row = |pos| device::Row { pos, seq: 0 };
    // The image ends its forward (rows that see one another are their sequence's last).
    let (image, after) = prompt.split_at(at + n);
    let rows: Vec<device::Row> = (0..image.len()).map(row).collect();
    let images = [Placed {
        rows: at..at + n,
        embeddings: &values,
        bidirectional,
    }];
    let enter = Enter::Pictured {
        tokens: image,
        images: &images,
    };
    exec.forward(&mut [&mut seq], &rows, enter, Out::Nothing)
        .unwrap();
    let rows: Vec<device::Row> = (image.len()..prompt.len()).map(row).collect();
    let mut last = Vec::new();
    let out = Out::Rows {
        logits: &[after.len() - 1],
        states: &[],
        taps: Default::default(),
        on_row: &mut |_, o| {
            if let engine::RowOut::Logits(l) = o {
                last = log_softmax(l);
            }
        },
    };
    exec.forward(&mut [&mut seq], &rows, Enter::Tokens(after), out)
        .unwrap();
    last
}

/// On the GPU an image's rows are read as on the reference backend (f32 on both): Gemma 3's
/// seeing one another, a LLaVA tower's on SmolLM2 causally, after prompts of over 30 rows
/// (which lavapipe's loop budget once cut short).
#[test]
fn the_gpu_reads_an_image_as_the_reference_does() {
    if !gpu::adapter_for_tests() {
        return;
    }
    let cases: [(usize, [&str; 2], (&str, bool)); 2] = [
        (
            3,
            [
                "<start_of_turn>user\nHello! Tell me a story about a cat. <start_of_image>",
                "<end_of_image><end_of_turn>\n<start_of_turn>model\n",
            ],
            ("vision-gemma3.emb", true),
        ),
        (
            0,
            [
                "<|im_start|>user\n",
                "What is in the picture?<|im_end|>\n<|im_start|>assistant\n",
            ],
            ("vision-llava-112.emb", false),
        ),
    ];
    for (which, text, emb) in cases {
        let gpu = last_logprobs(which, text, emb, DeviceKind::Gpu);
        let reference = last_logprobs(which, text, emb, DeviceKind::Reference);
        let worst = gpu
            .iter()
            .zip(&reference)
            .filter(|(_, r)| **r > -10.0)
            .map(|(g, r)| (g - r).abs())
            .fold(0f64, f64::max);
        assert!(worst < 1e-3, "{}: {worst}", emb.0);
    }
}
