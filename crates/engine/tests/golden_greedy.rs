//! Greedy continuations and top-5 log-probabilities against llama.cpp's (golden files
//! copied from shared/data/golden, made by llama-server at commit 0c1e57098).

use std::path::PathBuf;

use engine::{Context, ContextConfig, Outputs};
use model::Model;

fn model_path(file: &str, name: &str) -> PathBuf {
    let dir = std::env::var_os("TANDEM_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| dirs::cache_dir().unwrap().join("tandem").join("models"));
    let p = dir.join(file);
    assert!(
        p.is_file(),
        "{} missing: run `tandem pull {name}`",
        p.display()
    );
    p
}

fn log_softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = logits
        .iter()
        .map(|&v| (v as f64 - max).exp())
        .sum::<f64>()
        .ln()
        + max;
    logits.iter().map(|&v| v as f64 - lse).collect()
}

/// Generates greedily and checks, position by position until the first tie-broken
/// divergence, that our argmax is llama.cpp's and our log-probabilities of its top 5 are
/// within `tol`. Returns the number of positions that agreed.
fn check(golden: &str, file: &str, name: &str, tol: f64) -> usize {
    let g: serde_json::Value = serde_json::from_str(golden).unwrap();
    let model = Model::load(model_path(file, name)).unwrap();
    let mut ctx = Context::new(
        &model,
        ContextConfig {
            n_ctx: 512,
            ..Default::default()
        },
    )
    .unwrap();
    let mut agreed_total = 0;
    for case in g["greedy"].as_array().unwrap() {
        let prompt: Vec<u32> = case["prompt_tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let want: Vec<u32> = case["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let top5 = case["top5"].as_array().unwrap();
        let mut seq = kv::SeqKv::default();
        let mut lp = Vec::new();
        ctx.eval(&mut seq, &prompt, Outputs::Last, &mut |_, l| {
            lp = log_softmax(l)
        })
        .unwrap();
        for (i, &w) in want.iter().enumerate() {
            let ours = lp
                .iter()
                .enumerate()
                .fold(0, |b, (j, &v)| if v > lp[b] { j } else { b }) as u32;
            let alts = top5[i].as_array().unwrap();
            if std::env::var_os("GOLDEN_VERBOSE").is_some() {
                eprintln!(
                    "{i}: ours {:?}",
                    alts.iter()
                        .map(|a| (
                            a[0].as_u64().unwrap(),
                            lp[a[0].as_u64().unwrap() as usize],
                            a[1].as_f64().unwrap()
                        ))
                        .collect::<Vec<_>>()
                );
            }
            for alt in alts {
                let (id, glp) = (alt[0].as_u64().unwrap() as usize, alt[1].as_f64().unwrap());
                assert!(
                    (lp[id] - glp).abs() < tol,
                    "{name} case {:?} position {i}: token {id} logprob {} vs llama.cpp {glp}",
                    case["user"],
                    lp[id]
                );
            }
            if ours != w {
                let gap = alts[0][1].as_f64().unwrap() - alts[1][1].as_f64().unwrap();
                assert!(
                    gap < 2.0 * tol,
                    "{name} position {i}: we chose {ours}, llama.cpp {w} with a top-2 gap of {gap}"
                );
                eprintln!(
                    "{name}: near-tie at position {i} (gap {gap:.4}); stopping this case there"
                );
                break;
            }
            agreed_total += 1;
            ctx.eval(&mut seq, &[w], Outputs::Last, &mut |_, l| {
                lp = log_softmax(l)
            })
            .unwrap();
        }
        ctx.release(&mut seq);
    }
    agreed_total
}

#[test]
fn smollm2_matches_llama_cpp() {
    let agreed = check(
        include_str!("golden/smollm2-135m-instruct-q4_1.greedy.json"),
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "smollm2-135m",
        0.6,
    );
    eprintln!("smollm2: {agreed} of 192 positions agreed");
    assert!(
        agreed >= 96,
        "only {agreed} of 192 greedy positions agreed before a tie"
    );
}
