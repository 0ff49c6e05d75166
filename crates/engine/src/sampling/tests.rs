use super::*;

fn chain(temperature: f32, top_k: usize, top_p: f32, min_p: f32) -> SamplerConfig {
    SamplerConfig {
        temperature,
        top_k,
        top_p,
        min_p,
        seed: 1,
        ..Default::default()
    }
}

#[test]
fn greedy_first_index_wins_ties() {
    assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
    assert_eq!(argmax(&[f32::NAN, 0.5, 0.5]), 1);
    let mut s = Sampler::new(SamplerConfig::greedy());
    assert_eq!(s.sample(&[0.0, 2.0, 2.0], &[]), 1);
}

#[test]
fn seeded_sampling_is_reproducible_and_respects_top_k() {
    let logits: Vec<f32> = (0..100).map(|i| (i % 7) as f32).collect();
    let cfg = SamplerConfig {
        seed: 42,
        ..chain(1.0, 3, 1.0, 0.0)
    };
    let draw = |cfg| {
        let mut s = Sampler::new(cfg);
        (0..50).map(|_| s.sample(&logits, &[])).collect::<Vec<_>>()
    };
    let a = draw(cfg);
    assert_eq!(a, draw(cfg));
    assert!(a.iter().all(|&t| logits[t as usize] == 6.0));
    assert_ne!(a, draw(SamplerConfig { seed: 43, ..cfg }));
}

#[test]
fn top_p_and_min_p_cut_the_tail() {
    let logits = [10.0, 9.0, 0.0, -5.0];
    let mut s = Sampler::new(chain(1.0, 0, 0.5, 0.0));
    assert_eq!(s.distribution(&logits, &[]).len(), 1);
    s.config.top_p = 1.0;
    s.config.min_p = 0.2;
    let d = s.distribution(&logits, &[]).to_vec();
    assert_eq!(d.iter().map(|x| x.0).collect::<Vec<_>>(), vec![0, 1]);
    assert!((d.iter().map(|x| x.1).sum::<f32>() - 1.0).abs() < 1e-6);
}

#[test]
fn temperature_sharpens() {
    let mut s = Sampler::new(chain(0.5, 0, 1.0, 0.0));
    let p = s.distribution(&[1.0, 0.0], &[])[0].1;
    assert!((p - 1.0 / (1.0 + (-2.0f32).exp())).abs() < 1e-6);
}

/// The worked example of [`Penalties`], on logits.
#[test]
fn penalties_follow_llama_cpp_formula() {
    let p = Penalties {
        last_n: 3,
        repeat: 1.5,
        frequency: 0.5,
        presence: 1.0,
    };
    let mut logits = vec![3.0, -2.0, 1.0, 4.0];
    // Token 3 is outside the last 3 tokens; 0 twice, 1 once.
    p.apply(&mut logits, &[3, 0, 1, 0]);
    assert_eq!(logits, vec![0.0, -4.5, 1.0, 4.0]);
    let mut s = Sampler::new(SamplerConfig {
        penalties: p,
        ..SamplerConfig::greedy()
    });
    assert_eq!(s.sample(&[3.0, -2.0, 2.0], &[0]), 2);
    assert_eq!(s.sample(&[3.0, -2.0, 2.0], &[]), 0);
}

#[test]
fn penalties_are_skipped_when_the_order_leaves_them_out() {
    let mut s = Sampler::new(SamplerConfig {
        penalties: Penalties {
            presence: 10.0,
            ..Default::default()
        },
        order: Order::new([Stage::Temperature]),
        ..SamplerConfig::greedy()
    });
    assert_eq!(s.sample(&[3.0, 2.0], &[0]), 0);
}

#[test]
fn typical_keeps_the_tokens_nearest_the_entropy() {
    // One token far more likely than the rest: its surprise is far below the entropy, so
    // the typical set starts from the others.
    let logits = [5.0, 1.0, 1.0, 1.0, -3.0];
    let mut s = Sampler::new(SamplerConfig {
        typical_p: 0.2,
        ..chain(1.0, 0, 1.0, 0.0)
    });
    let d = s.distribution(&logits, &[]).to_vec();
    assert!(d.iter().all(|x| x.0 != 4), "{d:?}");
    assert!((d.iter().map(|x| x.1).sum::<f32>() - 1.0).abs() < 1e-6);
    s.config.typical_p = 1.0;
    assert_eq!(s.distribution(&logits, &[]).len(), 5);
}

#[test]
fn temperature_first_changes_what_top_p_keeps() {
    let logits = [2.0, 1.0, 0.0];
    let mut s = Sampler::new(chain(0.25, 0, 0.9, 0.0));
    assert_eq!(s.distribution(&logits, &[]).len(), 2);
    s.config.order = Order::new([Stage::Temperature, Stage::TopP]);
    assert_eq!(s.distribution(&logits, &[]).len(), 1);
}

#[test]
fn the_mask_bans_biases_and_ends() {
    let mut m = Mask {
        bias: vec![(0, f32::NEG_INFINITY), (2, 5.0)],
        ban_eog: true,
        ..Default::default()
    };
    let mut logits = vec![9.0, 1.0, 1.0, 8.0];
    m.apply(&mut logits, &[3]).unwrap();
    assert_eq!(logits, vec![f32::NEG_INFINITY, 1.0, 6.0, f32::NEG_INFINITY]);
    let mut s = Sampler::new(chain(1.0, 0, 1.0, 0.0));
    let d = s.distribution(&logits, &[]).to_vec();
    assert_eq!(d.iter().map(|x| x.0).collect::<Vec<_>>(), vec![2, 1]);
}

#[test]
fn stage_names_and_letters() {
    assert_eq!(
        Stage::from_name("typ_p"),
        Some(Named::Stage(Stage::Typical))
    );
    assert_eq!(Stage::from_name("dry"), Some(Named::Stage(Stage::Dry)));
    assert_eq!(Stage::from_name("xtc"), Some(Named::Inert));
    assert_eq!(Stage::from_name("bogus"), None);
    assert_eq!(Stage::from_char('k'), Some(Named::Stage(Stage::TopK)));
    let o = Order::new([Stage::MinP, Stage::TopK, Stage::MinP]);
    assert_eq!(o.stages(), &[Stage::MinP, Stage::TopK]);
}

/// The worked example of [`Dry`], on logits.
#[test]
fn dry_penalizes_what_would_extend_a_repetition() {
    let (a, b, c, x, nl) = (0u32, 1, 2, 3, 4);
    let dry = Dry {
        multiplier: 1.0,
        base: 2.0,
        allowed_length: 2,
        last_n: usize::MAX,
        breakers: vec![nl],
    };
    let mut logits = vec![0.0; 5];
    dry.apply(&mut logits, &[a, b, c, x, a, b]);
    assert_eq!(logits, vec![0.0, 0.0, -1.0, 0.0, 0.0]);
    let mut logits = vec![0.0; 5];
    dry.apply(&mut logits, &[a, b, c, x, a, b, c, x, a, b]);
    assert_eq!(logits, vec![0.0, 0.0, -16.0, 0.0, 0.0]);
    // A breaker inside the earlier copy cuts it: `nl b` is one token shorter than needed.
    let mut logits = vec![0.0; 5];
    dry.apply(&mut logits, &[nl, b, c, x, a, b]);
    assert_eq!(logits, vec![0.0; 5]);
    let mut s = Sampler::new(SamplerConfig::greedy()).with_dry(Some(dry));
    assert_eq!(s.sample(&[0.0, 0.0, 0.5, 0.0, 0.0], &[a, b, c, x, a, b]), 0);
    s.config.order = Order::new([Stage::Temperature]);
    assert_eq!(s.sample(&[0.0, 0.0, 0.5, 0.0, 0.0], &[a, b, c, x, a, b]), 2);
}
