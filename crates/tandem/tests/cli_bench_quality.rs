//! `tandem bench quality` on the real SmolLM2 model (pulled if missing): its NLL is what
//! `tandem perplexity` scores, its needles reach the model (SmolLM2 recalls them at these
//! short lengths), and the split server answers them byte-identically to one process.

mod common;
use common::json as tandem;

/// Slow tier: a benchmark's command; the split's byte-identical answers are checked by the
/// `split` crate's and the server's tests, the NLL's arithmetic by `tandem perplexity`'s.
#[test]
#[ignore = "slow tier: scripts/test --slow"]
fn needles_are_recalled_alike_split_and_single_and_the_nll_is_perplexitys() {
    let logs = std::env::temp_dir().join(format!("tandem-bq-test-{}", std::process::id()));
    let logs = logs.to_str().unwrap();
    let r = tandem(&[
        "bench",
        "quality",
        "-m",
        "smollm2-135m",
        "--kv-types",
        "f16,q8_0",
        "--nll-ctx",
        "256",
        "--nll-chunks",
        "2",
        "--lengths",
        "384",
        "--depths",
        "0,60,100",
        "--needles",
        "2",
        "--split-at",
        "15",
        "--port",
        "8471",
        "--log-dir",
        logs,
        "--json",
    ]);
    let nll = r["nll"].as_array().unwrap();
    assert_eq!(nll.len(), 2, "{r}");
    let file = format!("{logs}/held-out-code.txt");
    for p in nll {
        let kv = p["kv"].as_str().unwrap();
        let alone = tandem(&[
            "perplexity",
            "-m",
            "smollm2-135m",
            "-f",
            &file,
            "-c",
            "256",
            "--chunks",
            "2",
            "-ctk",
            kv,
            "--json",
        ]);
        assert_eq!(p["ppl"], alone["ppl"], "{kv}");
        assert!((p["nll"].as_f64().unwrap() - alone["ppl"].as_f64().unwrap().ln()).abs() < 1e-12);
    }

    let answers = r["needles"].as_array().unwrap();
    assert_eq!(answers.len(), 2 * 2 * 3 * 2, "{r}");
    for a in answers {
        let (answer, secret) = (a["answer"].as_str().unwrap(), a["secret"].as_str().unwrap());
        assert_eq!(
            a["recalled"].as_bool().unwrap(),
            answer.contains(secret),
            "{a}"
        );
        let tokens = a["tokens"].as_u64().unwrap();
        assert!((376..400).contains(&tokens), "{a}");
        assert!(a["prompt_tokens"].as_u64().unwrap() > tokens, "{a}");
    }
    for kv in ["f16", "q8_0"] {
        let of = |arm: &str| -> Vec<&serde_json::Value> {
            answers
                .iter()
                .filter(|a| a["arm"] == arm && a["kv"] == kv)
                .collect()
        };
        let (single, split) = (of("tandem"), of("tandem split"));
        assert_eq!(single.len(), 6);
        for (a, b) in single.iter().zip(&split) {
            assert_eq!(
                (&a["secret"], &a["answer"]),
                (&b["secret"], &b["answer"]),
                "{kv}"
            );
        }
        let hits = single.iter().filter(|a| a["recalled"] == true).count();
        assert!(hits >= 5, "{kv}: {hits} of 6 needles recalled: {single:?}");
    }
    std::fs::remove_dir_all(logs).unwrap();
}
