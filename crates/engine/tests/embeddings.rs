//! Embedding requests on SmolLM2-135M: the pooled final states (after the output norm) are
//! the bits of one forward of the prompt alone, whether the request runs alone or among
//! generating requests; the poolings agree with each other.

#[allow(dead_code)]
mod common;

use common::{model_path, MODELS};
use device::Row;
use engine::{ContextConfig, EngineConfig, Event, Executor, GenRequest, Out, Pooling, RowOut};
use gguf::GgmlType;
use model::Model;
use text::Tokenizer;

const TEXTS: [&str; 3] = [
    "The cat sat on the mat.",
    "A kitten was sitting on the rug, purring softly in the afternoon sun.",
    "Quarterly revenue grew by eight percent.",
];

fn load() -> (Model, Tokenizer) {
    let (_, file, name) = MODELS[0];
    let model = Model::load(model_path(file, name)).unwrap();
    let tok = Tokenizer::from_gguf(&model.file.header.metadata).unwrap();
    (model, tok)
}

fn request(prompt: Vec<u32>, embed: Option<Pooling>) -> GenRequest {
    common::request(prompt, 24, embed)
}

/// The vectors an embedding request answers, after which it is done.
fn vectors(mut events: engine::EventStream) -> Vec<Vec<f32>> {
    let mut got = None;
    loop {
        match events.blocking_recv().expect("engine answers") {
            Event::Embedding(v) => got = Some(v),
            Event::Done(s) => {
                assert_eq!(s.predicted_n, 0);
                return got.expect("the embedding came before Done");
            }
            Event::Delta { .. } => panic!("an embedding request generated text"),
            Event::Progress(_) => {}
            Event::Rejected(m) | Event::Failed(m) | Event::Unavailable(m) => panic!("{m}"),
        }
    }
}

/// Every prompt row's normed state through one executor, the prompt alone.
fn states_alone(model: &Model, prompt: &[u32]) -> Vec<Vec<f32>> {
    let cfg = ContextConfig {
        n_ctx: 512,
        n_ubatch: 64,
        n_threads: 2,
        kv_type: GgmlType::F16,
        ..ContextConfig::default()
    };
    let mut exec = Executor::new(Model::load(&model.file.path).unwrap(), cfg).unwrap();
    let mut seq = kv::SeqKv::default();
    let rows: Vec<Row> = (0..prompt.len()).map(|pos| Row { pos, seq: 0 }).collect();
    let all: Vec<usize> = (0..prompt.len()).collect();
    let mut out = vec![Vec::new(); prompt.len()];
    let mut on_row = |r: usize, o: RowOut<'_>| {
        if let RowOut::State(s) = o {
            out[r] = s.to_vec()
        }
    };
    let o = Out::Rows {
        logits: &[],
        states: &all,
        taps: Default::default(),
        on_row: &mut on_row,
    };
    exec.forward(&mut [&mut seq], &rows, engine::Enter::Tokens(prompt), o)
        .unwrap();
    out
}

#[test]
fn embeddings_are_the_prompts_own_states_alone_or_among_generations() {
    let (model, tok) = load();
    let prompts: Vec<Vec<u32>> = TEXTS
        .iter()
        .map(|t| tok.encode(t, true, true).unwrap())
        .collect();
    let alone = states_alone(&model, &prompts[1]);
    let n = alone.len() as f32;
    let mut mean = vec![0f32; alone[0].len()];
    for s in &alone {
        mean.iter_mut().zip(s).for_each(|(m, v)| *m += v);
    }
    mean.iter_mut().for_each(|m| *m /= n);

    let cfg = EngineConfig {
        n_ctx: 2048,
        n_parallel: 6,
        kv_unified: true,
        n_batch: 64,
        n_ubatch: 16,
        n_threads: 2,
        kv_type: GgmlType::F16,
        queue_limit: 64,
        device: engine::DeviceKind::Cpu,
        step_budget: engine::StepBudget::AUTO,
        swa_full: false,
        ctx_checkpoints: 8,
        cache_ram_mib: 0,
        cache_dir: None,
    };
    let handle = engine::start(model, std::sync::Arc::new(tok), cfg, None, None).unwrap();
    let submit = |p: &Vec<u32>, e| handle.submit(request(p.clone(), e)).unwrap().1;
    // Generations running, and the embedding requests among them in the same steps.
    let busy: Vec<_> = prompts.iter().map(|p| submit(p, None)).collect();
    let asked = [Pooling::Mean, Pooling::None, Pooling::Cls, Pooling::Last];
    let streams: Vec<_> = asked
        .iter()
        .map(|&k| submit(&prompts[1], Some(k)))
        .collect();
    let got: Vec<Vec<Vec<f32>>> = streams.into_iter().map(vectors).collect();
    for b in busy {
        drop(b);
    }
    assert_eq!(got[0], vec![mean.clone()]);
    assert_eq!(got[1], alone);
    assert_eq!(got[2], vec![alone[0].clone()]);
    assert_eq!(got[3], vec![alone[alone.len() - 1].clone()]);
    let again = vectors(submit(&prompts[1], Some(Pooling::Mean)));
    assert_eq!(again, vec![mean]);
}
