//! The adaptive policy's decisions on hand-made cost curves and acceptance.

use super::*;
use std::time::Duration;

fn ms(p: &[(usize, f64)]) -> Vec<(usize, f64)> {
    p.iter().map(|&(r, t)| (r, t / 1e3)).collect()
}

/// The target's forwards as one curve (no separate head, no attention term), and the
/// drafter's steps.
fn costs() -> (StepCost, CostCurve) {
    let mut target = StepCost::unmeasured(64);
    target.rows = CostCurve::from_points(
        &ms(&[(1, 41.0), (2, 46.4), (4, 56.2), (8, 80.9), (16, 133.4)]),
        64,
    );
    (
        target,
        CostCurve::from_points(&ms(&[(1, 16.0), (8, 40.0)]), 8),
    )
}

fn cand(slot: usize, n_max: usize, behind: usize) -> Candidate {
    Candidate {
        slot,
        n_max,
        n_min: 0,
        behind,
        remaining: 256,
        position: 100,
    }
}

fn one(n_max: usize) -> Vec<Candidate> {
    vec![cand(0, n_max, 1)]
}

fn rows(n: usize) -> Base {
    let shape = Shape {
        rows: n,
        logits: 1,
        attended: 0,
    };
    Base {
        shape,
        cap: None,
        reading: false,
    }
}

#[test]
fn drafts_deep_when_drafts_are_accepted_and_not_at_all_when_rejected() {
    let (t, d) = costs();
    let mut p = Policy::new(PolicyKind::Adaptive, 8, 1, d);
    for _ in 0..50 {
        p.observe(0, 8, 8);
    }
    let deep = p.choose(&t, &rows(1), &one(8))[0];
    assert!(deep >= 4, "depth {deep} with everything accepted");
    for _ in 0..50 {
        p.observe(0, 4, 0);
    }
    assert_eq!(p.choose(&t, &rows(1), &one(8))[0], 0);
}

#[test]
fn probes_after_idle_steps_and_fixed_always_drafts_n_max() {
    let (t, d) = costs();
    let free = CostCurve::from_points(&[], 8);
    let mut p = Policy::new(PolicyKind::Adaptive, 8, 1, free);
    for _ in 0..50 {
        p.observe(0, 4, 0);
    }
    let step = |p: &mut Policy, drafting_ms: u64| {
        let d = p.choose(&t, &rows(1), &one(8))[0];
        p.account(
            Duration::from_millis(41 + drafting_ms * d as u64),
            Duration::from_millis(drafting_ms * d as u64),
        );
        d
    };
    assert_eq!(
        step(&mut p, 1),
        FIRST_PROBE_DEPTH,
        "a request's first probe"
    );
    let depths: Vec<usize> = (0..PROBE_AFTER).map(|_| step(&mut p, 1)).collect();
    assert_eq!(depths.iter().filter(|&&d| d > 0).count(), 1);
    let costly: usize = (0..4 * PROBE_AFTER).map(|_| step(&mut p, 5000)).sum();
    assert_eq!(
        costly, 1,
        "one probe that took 5 s stops probing for a while"
    );
    let mut f = Policy::new(PolicyKind::Fixed, 8, 1, d);
    assert_eq!(f.choose(&t, &rows(1), &one(5)), vec![5]);
}

/// (The policy takes draft steps as free, so that a probe could pay at 8 slots; the
/// steps it measures cost 16 ms a draft step.)
#[test]
fn probes_take_their_share_of_recent_time_only() {
    let (t, _) = costs();
    let free = CostCurve::from_points(&[], 8);
    let mut p = Policy::new(PolicyKind::Adaptive, 8, 8, free);
    p.catch_up = 2e-3;
    for _ in 0..10_000 {
        p.account(Duration::from_millis(40), Duration::ZERO);
    }
    for s in 0..8 {
        for _ in 0..50 {
            p.observe(s, 4, 0);
        }
    }
    let cands: Vec<Candidate> = (0..8).map(|s| cand(s, 8, 20)).collect();
    let (mut probing, mut total) = (0.0, 0.0);
    for _ in 0..256 {
        let depths = p.choose(&t, &rows(8), &cands);
        let n = depths.iter().filter(|&&d| d > 0).count() as f64;
        let drafting = n * (0.016 + 20.0 * 2e-3);
        probing += drafting;
        total += 0.081 + drafting;
        p.account(
            Duration::from_secs_f64(0.081 + drafting),
            Duration::from_secs_f64(drafting),
        );
    }
    assert!(probing > 0.0);
    assert!(
        probing / total < 2.0 * PROBE_SHARE,
        "{probing:.2} s of {total:.2} s probing after 400 s without probes"
    );
}

/// Earlier requests drafted fully or not at all, half each: alone, that no longer pays
/// one slot here. A new request probes at its start, though earlier probes spent the
/// probes' share of the time, learns from that one verification that its drafts hold,
/// and drafts.
#[test]
fn a_new_request_probes_first_and_learns_fast() {
    let (t, d) = costs();
    let mut p = Policy::new(PolicyKind::Adaptive, 8, 1, d);
    p.catch_up = 1e-3;
    for i in 0..50 {
        p.observe(0, 4, 4 * (i % 2));
    }
    p.release(0);
    for _ in 0..256 {
        p.account(Duration::from_millis(41), Duration::ZERO);
    }
    p.probing = PROBE_SHARE * p.busy;
    let fresh = [cand(0, 8, 40)];
    assert_eq!(p.choose(&t, &rows(1), &fresh)[0], FIRST_PROBE_DEPTH);
    p.account(Duration::from_millis(180), Duration::from_millis(140));
    p.observe(0, FIRST_PROBE_DEPTH, FIRST_PROBE_DEPTH);
    assert!(
        p.choose(&t, &rows(1), &one(8))[0] > 0,
        "drafts after one good probe"
    );
}

#[test]
fn a_slot_drafting_shallow_learns_to_draft_deeper() {
    let (t, d) = costs();
    let mut p = Policy::new(PolicyKind::Adaptive, 8, 1, d);
    for _ in 0..50 {
        p.observe(0, 1, 1);
    }
    assert!(
        p.choose(&t, &rows(1), &one(8))[0] >= 4,
        "positions 2..8 taken as position 1"
    );
}

#[test]
fn a_large_batch_makes_drafts_cheap_and_a_long_context_dear() {
    let (mut t, d) = costs();
    let mut p = Policy::new(PolicyKind::Adaptive, 8, 1, d);
    for _ in 0..50 {
        p.observe(0, 2, 1);
    }
    let alone = p.choose(&t, &rows(1), &one(8))[0];
    let with_prompt = p.choose(&t, &rows(40), &one(8))[0];
    assert!(with_prompt >= alone, "{with_prompt} < {alone}");
    assert!(alone > 0, "the first draft position is always accepted");
    t.attend = 1e-3;
    let far = p.choose(&t, &rows(1), &one(8))[0];
    assert_eq!(far, 0, "a draft row attending 100 positions costs 0.1 s");
}

/// Eight slots drafting 1 each: the module doc's example. Any one slot leaving alone
/// gains little (the draft step stays), all leaving together gain.
#[test]
fn the_batch_stops_drafting_together_when_no_slot_alone_would() {
    let (t, _) = costs();
    let d = CostCurve::from_points(&ms(&[(1, 16.0), (8, 40.0)]), 8);
    let mut p = Policy::new(PolicyKind::Adaptive, 8, 8, d);
    let cands: Vec<Candidate> = (0..8).map(|s| cand(s, 8, 1)).collect();
    for s in 0..8 {
        for _ in 0..50 {
            p.observe(s, 1, 1);
        }
        p.slot(s).depth = 1;
    }
    let all = vec![1; 8];
    let mut one_less = all.clone();
    one_less[0] = 0;
    let r = |dd: &[usize]| p.rate(&cands, dd, &p.forecast(&t, &rows(8), &cands, dd));
    assert!(r(&one_less) < r(&all), "no single slot gains by leaving");
    assert_eq!(p.choose(&t, &rows(8), &cands), vec![0; 8]);
}

#[test]
fn a_paused_slot_resumes_only_when_its_catching_up_pays() {
    let (t, d) = costs();
    let mut p = Policy::new(PolicyKind::Adaptive, 8, 1, d);
    p.catch_up = 2e-3;
    for _ in 0..50 {
        p.observe(0, 8, 8);
    }
    let mut short = cand(0, 8, 400);
    short.remaining = 4;
    assert_eq!(
        p.choose(&t, &rows(1), &[short])[0],
        0,
        "0.8 s of catching up for 4 tokens"
    );
    assert!(short.paused());
    let long = cand(0, 8, 400);
    let reading = Base {
        reading: true,
        ..rows(1)
    };
    assert_eq!(
        p.choose(&t, &reading, &[long])[0],
        0,
        "not while a prompt is read"
    );
    assert!(
        p.choose(&t, &rows(1), &[long])[0] > 0,
        "spread over the spells drafted"
    );
}

/// Four slots whose drafts were rejected: at this batch one slot's drafts do not pay at
/// any depth even if all were accepted (at best depth 1: 4 + 1 tokens in 78 ms against 4
/// in 56), so none probes; one slot alone does.
#[test]
fn no_probe_where_even_accepted_drafts_would_not_pay() {
    let (t, d) = costs();
    let mut p = Policy::new(PolicyKind::Adaptive, 8, 4, d);
    for _ in 0..10_000 {
        p.account(Duration::from_millis(56), Duration::ZERO);
    }
    for s in 0..4 {
        for _ in 0..50 {
            p.observe(s, 4, 0);
        }
    }
    let four: Vec<Candidate> = (0..4).map(|s| cand(s, 8, 1)).collect();
    for _ in 0..4 * PROBE_AFTER {
        assert_eq!(p.choose(&t, &rows(4), &four), vec![0; 4]);
        p.account(Duration::from_millis(56), Duration::ZERO);
    }
    p.release(1);
    let probes: usize = (0..4 * PROBE_AFTER)
        .map(|_| p.choose(&t, &rows(1), &[cand(1, 8, 1)])[0])
        .filter(|&d| d > 0)
        .count();
    assert!(probes > 0, "one slot alone probes");
}

/// Four paused slots whose drafts would gain a little over plain steps of 80 ms. After
/// a long run of 56 ms plain steps, five slow ones (the cost curve's point and the
/// correction raised with them) do not resume them; a lasting slowdown does. (They
/// offer no drafts while the plain steps run, and drafted before: no probes.)
#[test]
fn a_few_slow_plain_steps_do_not_resume_a_paused_batch() {
    let (t, d) = costs();
    let offering = |n_max| -> Vec<Candidate> { (0..4).map(|s| cand(s, n_max, 60)).collect() };
    let run = |steps: &[f64]| {
        let mut p = Policy::new(PolicyKind::Adaptive, 4, 4, d.clone());
        p.catch_up = 1e-3;
        let mut t = t.clone();
        let plain = rows(4);
        for &ms in steps {
            assert_eq!(p.choose(&t, &plain, &offering(0)), vec![0; 4]);
            let took = Duration::from_secs_f64(ms / 1e3);
            t.observe(&plain.shape, took);
            p.account(took, Duration::ZERO);
        }
        for s in 0..4 {
            for _ in 0..50 {
                p.observe(s, 4, 2);
            }
            p.slot(s).tried = true;
        }
        p.choose(&t, &plain, &offering(4))
    };
    let mut spike = vec![56.2; 200];
    spike.extend([80.0; 5]);
    assert_eq!(run(&spike), vec![0; 4], "five slow steps after 200");
    assert_ne!(run(&[80.0; 205]), vec![0; 4], "205 slow steps");
}

/// Steps that read prompts without drafts, slower than predicted, teach the plain
/// correction only: a slot whose drafts are accepted still drafts afterwards.
#[test]
fn prompt_steps_without_drafts_leave_the_per_draft_correction_alone() {
    let (t, d) = costs();
    let mut p = Policy::new(PolicyKind::Adaptive, 8, 1, d);
    for _ in 0..50 {
        p.observe(0, 8, 8);
    }
    let reading = Base {
        reading: true,
        ..rows(40)
    };
    for _ in 0..20 {
        assert_eq!(p.choose(&t, &reading, &[cand(0, 0, 1)]), vec![0]);
        p.account(Duration::from_millis(400), Duration::ZERO);
    }
    assert_eq!(p.per_draft, 0.0);
    assert!(p.choose(&t, &rows(1), &one(8))[0] >= 4);
}

#[test]
fn drafts_never_take_the_step_budget_from_prompt_rows() {
    let (t, d) = costs();
    let mut p = Policy::new(PolicyKind::Adaptive, 8, 1, d);
    for _ in 0..50 {
        p.observe(0, 8, 8);
    }
    let cap = Some(t.predict(&Shape::run(101, 3, 3)));
    let alone = Base { cap, ..rows(1) };
    let depth = p.choose(&t, &alone, &one(8))[0];
    assert!(
        (1..=2).contains(&depth),
        "1 + {depth} rows within 3 rows' time"
    );
    let with_prompt = Base { cap, ..rows(3) };
    assert_eq!(
        p.choose(&t, &with_prompt, &one(8))[0],
        0,
        "two prompt rows fill the budget"
    );
}

#[test]
fn steps_slower_than_predicted_stop_drafting() {
    let (t, d) = costs();
    let mut p = Policy::new(PolicyKind::Adaptive, 8, 1, d);
    for _ in 0..50 {
        p.observe(0, 4, 2);
    }
    assert!(p.choose(&t, &rows(1), &one(4))[0] > 0);
    let mut drafted = Vec::new();
    for _ in 0..40 {
        let depth = p.choose(&t, &rows(1), &one(4))[0];
        drafted.push(depth > 0);
        let took = match depth {
            0 => 0.041,
            d => 0.041 + 0.05 * d as f64,
        };
        p.account(Duration::from_secs_f64(took), Duration::ZERO);
        if depth > 0 {
            p.observe(0, depth, 2.min(depth));
        }
    }
    let late = drafted[20..].iter().filter(|&&d| d).count();
    assert!(
        late <= 1,
        "50 ms a draft token measured: {late} of the last 20 steps drafted (a probe at most)"
    );
    assert!(p.tally.measured_secs > 0.0 && p.tally.predicted_secs > 0.0);
}

/// One step 0.3 s slower than predicted (the machine stalled) among drafting steps measured
/// as predicted: one user drafting at an acceptance of 0.75, where drafts pay ~15%, keeps
/// drafting. Taken whole into the per-draft correction, that step made drafts 15 ms dearer
/// a token, the slot paused, and no drafting step came to correct it.
#[test]
fn one_stalled_step_does_not_stop_drafting() {
    let (t, d) = costs();
    let mut p = Policy::new(PolicyKind::Adaptive, 8, 1, d);
    p.global = Acceptance::new(8, 0.75);
    let mut behind = 1;
    let mut drafted = Vec::new();
    for step in 0..60 {
        let depth = p.choose(&t, &rows(1), &[cand(0, 8, behind)])[0];
        let predicted = p.last.expect("a forecast").secs;
        let stall = if step == 20 { 0.3 } else { 0.0 };
        p.account(Duration::from_secs_f64(predicted + stall), Duration::ZERO);
        behind = if depth > 0 { 1 } else { behind + 1 };
        if step > 20 {
            drafted.push(depth > 0);
        }
    }
    let n = drafted.iter().filter(|&&d| d).count();
    assert!(n >= 35, "{n} of the 39 steps after the stall drafted");
}

#[test]
fn a_dip_in_the_target_s_curve_does_not_make_rejected_drafts_pay() {
    let (mut t, d) = costs();
    for _ in 0..30 {
        for r in 9..=16 {
            t.rows.observe(r, Duration::from_millis(30));
        }
    }
    let mut p = Policy::new(PolicyKind::Adaptive, 4, 8, d);
    for s in 0..8 {
        for _ in 0..200 {
            p.observe(s, 1, 0);
        }
    }
    let cands: Vec<Candidate> = (0..8).map(|s| cand(s, 4, 1)).collect();
    let depths = p.choose(&t, &rows(8), &cands);
    assert_eq!(depths, vec![0; 8], "nothing is ever accepted");
}

/// A block drafter's draft of any depth costs one draft step: with the same acceptance
/// (the first draft always accepted, the rest half the time) and a draft step of 30 ms,
/// a drafter paying a step per token stops at depth 1, a block drafter drafts deep; its
/// forecast charges one step.
#[test]
fn a_block_drafter_pays_one_step_whatever_the_depth() {
    let (t, _) = costs();
    let d = CostCurve::from_points(&ms(&[(1, 30.0), (8, 60.0)]), 8);
    let mut chained = Policy::new(PolicyKind::Adaptive, 8, 1, d.clone());
    let mut block = Policy::new(PolicyKind::Adaptive, 8, 1, d.clone());
    block.block = true;
    for p in [&mut chained, &mut block] {
        for _ in 0..50 {
            p.observe(0, 8, 8);
            p.observe(0, 8, 1);
        }
    }
    let (c, b) = (
        chained.choose(&t, &rows(1), &one(8))[0],
        block.choose(&t, &rows(1), &one(8))[0],
    );
    assert!(c <= 1 && b >= 4, "block drafter depth {b}, chained {c}");
    let f = block.forecast(&t, &rows(1), &one(8), &[4]);
    let four = t.predict(&rows(1).shape.plus(Shape::run(101, 4, 4)));
    assert!(
        (f.secs - four - d.at(1)).abs() < 1e-9,
        "{} vs {}",
        f.secs,
        four + d.at(1)
    );
}

/// A confidence head's probabilities cut a block's draft where the rest would not pay:
/// kept whole when it expects every position, cut after the first where the second is
/// unlikely, dropped where even the first is; the drafting already done counts in every
/// option. Two slots are cut each by its own probabilities. The fixed policy keeps all.
#[test]
fn a_confidence_head_cuts_a_draft_where_the_rest_would_not_pay() {
    let (t, d) = costs();
    let mut p = Policy::new(PolicyKind::Adaptive, 8, 2, d.clone());
    p.block = true;
    let cut = |p: &mut Policy, conf: &[&[f32]]| {
        let cands: Vec<Candidate> = (0..conf.len()).map(|s| cand(s, 4, 1)).collect();
        let conf: Vec<Vec<f32>> = conf.iter().map(|c| c.to_vec()).collect();
        p.trim(&t, &rows(conf.len()), &cands, &conf)
    };
    assert_eq!(cut(&mut p, &[&[0.95, 0.9, 0.9, 0.9]]), [4]);
    assert_eq!(cut(&mut p, &[&[0.9, 0.05, 0.5, 0.5]]), [1]);
    assert_eq!(cut(&mut p, &[&[0.02, 0.9, 0.9, 0.9]]), [0]);
    assert_eq!(
        cut(&mut p, &[&[0.95, 0.9, 0.9, 0.9], &[0.9, 0.05, 0.5, 0.5]]),
        [4, 1]
    );
    let mut fixed = Policy::new(PolicyKind::Fixed, 8, 1, d);
    assert_eq!(cut(&mut fixed, &[&[0.02, 0.9, 0.9, 0.9]]), [4]);
}
