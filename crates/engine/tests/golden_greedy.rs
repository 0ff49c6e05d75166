//! Greedy continuations and top-5 log-probabilities against llama.cpp's (golden files
//! copied from shared/data/golden, made by llama-server at commit 0c1e57098, CPU, 2 threads).
//!
//! llama.cpp quantizes activations to 8 bits before every quantized matmul and keeps
//! attention in f16, so its log-probabilities carry noise that ours (exact against a
//! float64 reference, see reference.rs) do not: emulating only its activation rounding
//! in numpy moves SmolLM2's top-5 log-probabilities by up to ~0.2. The tolerances below
//! are sized to that noise; greedy texts may part at a near-tie, where comparison stops.

#[allow(dead_code)]
mod common;

use common::{ids, log_softmax, model_path, MODELS};
use engine::sampling::argmax;
use engine::{ContextConfig, Executor, Outputs};
use model::Model;

/// Largest difference allowed in the log-probability of llama.cpp's top token.
const TOP1_TOLERANCE: f64 = 0.25;
/// Largest difference allowed for its other top-5 tokens (lower probability, noisier).
const TOP5_TOLERANCE: f64 = 0.75;
/// Other top-5 tokens are compared when llama.cpp gives them at least this
/// log-probability (1%): further down the tail, 8-bit rounding on both sides dominates
/// (SmolLM2 moves a token at -7.06 to -7.82 between the two engines).
const TAIL_FLOOR: f64 = -4.6;
/// A divergence between two tokens that either engine rates within this of each other is
/// a tie, not a bug (SmolLM2 has positions where we see a 0.01 gap and llama.cpp 1.07).
const TIE_GAP: f64 = 0.5;

struct Agreement {
    positions: usize,
    agreed: usize,
    /// The fewest positions a case agreed on before parting.
    shortest: usize,
    worst_top1: f64,
}

/// `logprobs`: whether to assert the log-probability tolerances (not for SmolLM2, whose
/// 4-bit 135M weights make both engines' 8-bit rounding move its top token by up to ~0.3;
/// its exactness is checked against the float64 reference in reference.rs instead).
fn check(index: usize, logprobs: bool) -> Agreement {
    let (stem, file, name) = MODELS[index];
    let path = format!(
        "{}/tests/golden/{stem}.greedy.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let g: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let model = Model::load(model_path(file, name)).unwrap();
    let mut ctx = Executor::new(
        model,
        ContextConfig {
            n_ctx: 512,
            ..Default::default()
        },
    )
    .unwrap();
    let mut a = Agreement {
        positions: 0,
        agreed: 0,
        shortest: usize::MAX,
        worst_top1: 0.0,
    };
    for case in g["greedy"].as_array().unwrap() {
        let (prompt, want) = (ids(&case["prompt_tokens"]), ids(&case["tokens"]));
        let top5 = case["top5"].as_array().unwrap();
        let mut seq = kv::SeqKv::default();
        let mut lp = Vec::new();
        ctx.eval(&mut seq, &prompt, Outputs::Last, &mut |_, l| {
            lp = log_softmax(l)
        })
        .unwrap();
        a.positions += want.len();
        let agreed_before = a.agreed;
        for (i, &w) in want.iter().enumerate() {
            let alts: Vec<(usize, f64)> = top5[i]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| (x[0].as_u64().unwrap() as usize, x[1].as_f64().unwrap()))
                .collect();
            // At a near-tie the top token is ambiguous: it gets the top-5 tolerance.
            let tie = alts[0].1 - alts[1].1 < TIE_GAP;
            for (rank, &(id, glp)) in alts.iter().enumerate() {
                if rank > 0 && glp < TAIL_FLOOR {
                    continue;
                }
                let diff = (lp[id] - glp).abs();
                let tol = if rank == 0 && !tie {
                    TOP1_TOLERANCE
                } else {
                    TOP5_TOLERANCE
                };
                assert!(
                    diff < tol || !logprobs,
                    "{name} {:?} position {i}: token {id} logprob {} vs llama.cpp {glp}",
                    case["user"],
                    lp[id]
                );
                if rank == 0 && !tie {
                    a.worst_top1 = a.worst_top1.max(diff);
                }
            }
            let ours = argmax(&lp.iter().map(|&v| v as f32).collect::<Vec<_>>());
            if ours != w {
                let gap = alts[0].1 - alts[1].1;
                // A near-tie in either engine: llama.cpp rates our token within TIE_GAP of
                // its own (ties of two or more), or we rate its token within TIE_GAP of ours.
                let rated = alts.iter().find(|(id, _)| *id == ours as usize);
                let theirs_tied = rated.is_some_and(|(_, glp)| alts[0].1 - glp < TIE_GAP);
                let ours_tied = lp[ours as usize] - lp[w as usize] < TIE_GAP;
                assert!(
                    theirs_tied || ours_tied,
                    "{name} position {i}: we chose {ours} ({:.3}), llama.cpp {w} ({:.3} here; its top-5 {alts:?})",
                    lp[ours as usize],
                    lp[w as usize]
                );
                eprintln!("{name}: near-tie at position {i} (llama.cpp top-2 gap {gap:.4}); texts part here");
                break;
            }
            a.agreed += 1;
            ctx.eval(&mut seq, &[w], Outputs::Last, &mut |_, l| {
                lp = log_softmax(l)
            })
            .unwrap();
        }
        ctx.release(&mut seq);
        a.shortest = a.shortest.min(a.agreed - agreed_before);
    }
    eprintln!(
        "{name}: {} of {} greedy positions agreed; largest top-1 log-probability difference off near-ties {:.3}",
        a.agreed, a.positions, a.worst_top1
    );
    a
}

#[test]
fn smollm2_parts_from_llama_cpp_only_at_near_ties() {
    let a = check(0, false);
    assert!(a.agreed > 0);
}

#[test]
fn qwen2_0_5b_matches_llama_cpp() {
    let a = check(1, true);
    assert!(
        a.agreed >= a.positions / 2,
        "only {} of {} positions agreed",
        a.agreed,
        a.positions
    );
}

/// Slow tier: qwen2 is checked on the 0.5B (`qwen2_0_5b_matches_llama_cpp`).
#[test]
#[ignore = "slow tier: scripts/test --slow"]
fn qwen2_1_5b_matches_llama_cpp() {
    let a = check(2, true);
    assert!(
        a.agreed >= a.positions / 2,
        "only {} of {} positions agreed",
        a.agreed,
        a.positions
    );
}

/// Gemma 3 270M is a base model whose distributions are often flat: cases reach near-ties
/// within 9–16 positions (llama.cpp's top-2 gaps 0.02–0.16), and which near-tie a case parts
/// at moves with the last bit of an activation constant. Its log-probabilities are not held to llama.cpp's: where the two
/// engines part most (a flat position of the second case: llama.cpp −2.795, ours −3.403),
/// the float64 reference gives −3.009, both 8-bit arithmetics being off it; the forward's
/// exactness is checked against that reference in reference.rs.
#[test]
fn gemma3_270m_parts_from_llama_cpp_only_at_near_ties() {
    let a = check(3, false);
    assert!(
        a.shortest >= 8,
        "a case parted after {} positions",
        a.shortest
    );
}
