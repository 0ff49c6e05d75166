//! Round trips, error bounds and error cases of `device::formats`.

use device::formats::{
    dequantize_row, is_quantize_supported, is_supported, quantize_row, quantize_row_with,
    takes_importance,
};
use device::Error;
use gguf::GgmlType;

/// Deterministic test values: normal-ish noise with a per-block magnitude spread
/// over five decades, plus one large outlier every 97 elements.
fn test_values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 40) as f32 / (1u64 << 24) as f32
    };
    (0..n)
        .map(|i| {
            let mag = 10f32.powf(-2.0 + 5.0 * ((i / 256) % 7) as f32 / 6.0);
            let v = (next() + next() + next() - 1.5) * 2.0 * mag;
            if i % 97 == 13 {
                v * 8.0
            } else {
                v
            }
        })
        .collect()
}

fn round_trip(ty: GgmlType, x: &[f32]) -> Vec<f32> {
    let bytes = ty.row_bytes(x.len() as u64).unwrap() as usize;
    let mut q = vec![0u8; bytes];
    quantize_row(ty, x, &mut q).unwrap();
    let mut y = vec![0f32; x.len()];
    dequantize_row(ty, &q, &mut y).unwrap();
    y
}

/// Largest |error| in a block divided by the block's largest |value|, over all blocks
/// (blocks of `group` elements; K-quants are judged per super-block).
fn worst_relative_error(x: &[f32], y: &[f32], group: usize) -> f32 {
    x.chunks(group)
        .zip(y.chunks(group))
        .map(|(a, b)| {
            let amax = a.iter().fold(0f32, |m, v| m.max(v.abs()));
            let err = a.iter().zip(b).fold(0f32, |m, (p, q)| m.max((p - q).abs()));
            if amax == 0.0 {
                assert_eq!(err, 0.0);
                0.0
            } else {
                err / amax
            }
        })
        .fold(0f32, f32::max)
}

#[test]
fn quantize_round_trip_error_bounds() {
    use GgmlType::*;
    // Bounds: half a quantization step of the block's range (plus f16 rounding of the
    // scales), and a full step where the reference quantizer clamps the extreme level.
    // IQ4_NL, IQ4_XS: half the widest gap between levels (24 of 127, the scale mapping
    // the largest element to near a table end), plus the 6-bit scales' rounding for XS.
    let cases: [(GgmlType, f32); 9] = [
        (IQ4_NL, 12.5 / 113.0),
        (IQ4_XS, 12.5 / 113.0 + 1.0 / 32.0),
        (Q8_0, 0.5 / 127.0 + 1e-3),
        (Q4_0, 1.0 / 8.0 + 1e-3),
        (Q4_1, 1.0 / 15.0 + 1e-3),
        (Q5_0, 1.0 / 16.0 + 1e-3),
        (Q5_1, 1.0 / 31.0 + 1e-3),
        (Q4_K, 0.1),
        (Q6_K, 1.0 / 32.0 + 1e-3),
    ];
    let x = test_values(256 * 40, 7);
    for (ty, bound) in cases {
        assert!(is_quantize_supported(ty));
        let y = round_trip(ty, &x);
        let worst = worst_relative_error(&x, &y, ty.block_size() as usize);
        assert!(
            worst <= bound,
            "{ty}: worst relative error {worst} > {bound}"
        );
    }
}

#[test]
fn quantize_special_blocks() {
    use GgmlType::*;
    for ty in [
        Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, IQ3_XXS,
        IQ2_XXS, IQ3_S, IQ2_XS, IQ2_S, IQ1_S,
    ] {
        let n = ty.block_size() as usize * 2;
        let zeros = vec![0f32; n];
        assert_eq!(round_trip(ty, &zeros), zeros, "{ty}: zeros");
        if matches!(ty, IQ3_XXS | IQ2_XXS | IQ3_S | IQ2_XS | IQ2_S | IQ1_S) {
            // Their codebooks hold few constant entries: ggml's quantizers, which these
            // match, turn a block of -0.75 into values from -0.96 to -0.66 (IQ3_XXS)
            // and -1.21 to -0.23 (IQ2_XXS).
            continue;
        }
        let constant = vec![-0.75f32; n];
        let y = round_trip(ty, &constant);
        for v in y {
            assert!(
                (v + 0.75).abs() <= 0.75 / 64.0,
                "{ty}: constant block gave {v}"
            );
        }
    }
}

/// Normal rows of 256 values (Box-Muller), row `r` at scale `10^(r % 5 - 2)`.
fn gaussian_rows(n_rows: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut uniform = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        ((s >> 40) as f64 + 0.5) / (1u64 << 24) as f64
    };
    (0..256 * n_rows)
        .map(|i| {
            let scale = 10f64.powi((i / 256 % 5) as i32 - 2);
            let (u, v) = (uniform(), uniform());
            ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos() * scale) as f32
        })
        .collect()
}

/// The RMS of `x - y` over the RMS of `x`.
fn relative_rms(x: &[f32], y: &[f32]) -> f64 {
    let sq = |it: &mut dyn Iterator<Item = f64>| it.map(|v| v * v).sum::<f64>();
    let err = sq(&mut x.iter().zip(y).map(|(a, b)| (a - b) as f64));
    (err / sq(&mut x.iter().map(|&a| a as f64))).sqrt()
}

#[test]
fn search_quantizers_round_trip_rms_bounds() {
    use GgmlType::*;
    // Bounds about 10% above what ggml's quantizers give on these rows (Q2_K 0.296,
    // Q3_K 0.152, Q4_K 0.072, Q5_K 0.036, Q6_K 0.018, IQ3_XXS 0.210, IQ2_XXS 0.345,
    // IQ3_S 0.164, IQ2_XS 0.299, IQ2_S 0.264, IQ1_S 0.489; measured with tandem's,
    // which match ggml's bytes): a quantizer that loses a level, a scale bit or its
    // search fails them.
    let cases = [
        (Q2_K, 0.33),
        (Q3_K, 0.17),
        (Q4_K, 0.08),
        (Q5_K, 0.04),
        (Q6_K, 0.02),
        (IQ3_XXS, 0.23),
        (IQ2_XXS, 0.38),
        (IQ3_S, 0.18),
        (IQ2_XS, 0.33),
        (IQ2_S, 0.29),
        (IQ1_S, 0.54),
    ];
    let x = gaussian_rows(64, 3);
    for (ty, bound) in cases {
        let rms = relative_rms(&x, &round_trip(ty, &x));
        eprintln!("{ty}: relative RMS error {rms:.4}");
        assert!(rms <= bound, "{ty}: relative RMS error {rms} > {bound}");
    }
}

/// `sum(importance * (x - y)²)` over rows of `importance.len()` values.
fn weighted_error(x: &[f32], y: &[f32], importance: &[f32]) -> f64 {
    x.iter()
        .zip(y)
        .enumerate()
        .map(|(i, (a, b))| importance[i % importance.len()] as f64 * ((a - b) as f64).powi(2))
        .sum()
}

#[test]
fn an_importance_matrix_lowers_the_error_it_weighs() {
    use GgmlType::*;
    // Columns of importance spread over four decades, as an imatrix's mean x² is: the
    // error that matters is the importance-weighted one, which x² weights do not see.
    let k = 512;
    let importance: Vec<f32> = test_values(k, 11)
        .iter()
        .map(|v| 10f32.powf(4.0 * (v.abs() * 37.0).fract()))
        .collect();
    let x: Vec<f32> = test_values(k * 64, 5);
    for ty in [
        IQ4_NL, IQ4_XS, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ3_XXS, IQ2_XXS,
    ] {
        assert!(takes_importance(ty));
        let rb = ty.row_bytes(k as u64).unwrap() as usize;
        let (mut plain, mut weighted) = (vec![0u8; rb], vec![0u8; rb]);
        let (mut yp, mut yw) = (vec![0f32; x.len()], vec![0f32; x.len()]);
        for (r, row) in x.chunks_exact(k).enumerate() {
            quantize_row(ty, row, &mut plain).unwrap();
            quantize_row_with(ty, row, Some(&importance), &mut weighted).unwrap();
            dequantize_row(ty, &plain, &mut yp[r * k..(r + 1) * k]).unwrap();
            dequantize_row(ty, &weighted, &mut yw[r * k..(r + 1) * k]).unwrap();
        }
        let (ep, ew) = (
            weighted_error(&x, &yp, &importance),
            weighted_error(&x, &yw, &importance),
        );
        assert!(
            ew < 0.85 * ep,
            "{ty}: weighted error {ew} with the importances, {ep} without"
        );
        if matches!(ty, IQ3_XXS | IQ2_XXS | IQ3_S | IQ2_XS | IQ2_S | IQ1_S) {
            // Their plain quantizers weigh by x² (IQ3_XXS, IQ3_S), sigma2 / 4 + x² (IQ2_S)
            // or importances of 1 (IQ2_XXS, IQ2_XS, IQ1_S), and snapping to the grid need not
            // favour one measure.
            continue;
        }
        let ones = vec![1f32; k];
        let plain_sq = weighted_error(&x, &yp, &ones);
        assert!(
            plain_sq < weighted_error(&x, &yw, &ones),
            "{ty}: x² weights fit x best"
        );
    }
    let mut q = vec![0u8; 18];
    let r = quantize_row_with(IQ4_NL, &x[..32], Some(&importance[..31]), &mut q);
    assert!(matches!(r, Err(Error::LengthMismatch { what, .. }) if what.contains("importance")));
    assert!(!takes_importance(Q4_0));
    quantize_row_with(Q4_0, &x[..32], Some(&importance[..32]), &mut q).unwrap();
}

#[test]
fn f16_and_bf16_round_trip() {
    let exact_f16 = [
        0.0f32,
        -0.0,
        1.0,
        -2.5,
        65504.0,
        6.1035156e-5,
        5.9604645e-8,
        1023.5,
    ];
    assert_eq!(round_trip(GgmlType::F16, &exact_f16), exact_f16);
    let exact_bf16 = [
        0.0f32,
        -0.0,
        1.0,
        -2.5,
        3.3895314e38,
        1.1754944e-38,
        256.0,
        -0.0078125,
    ];
    assert_eq!(round_trip(GgmlType::BF16, &exact_bf16), exact_bf16);
    let x = test_values(4096, 3);
    for (ty, rel) in [(GgmlType::F16, 1.0 / 2048.0), (GgmlType::BF16, 1.0 / 256.0)] {
        for (a, b) in x.iter().zip(round_trip(ty, &x)) {
            let tol = a.abs() * rel + if ty == GgmlType::F16 { 3e-8 } else { 0.0 };
            assert!((a - b).abs() <= tol, "{ty}: {a} -> {b}");
        }
    }
    assert_eq!(
        round_trip(GgmlType::F16, &[1e6, -1e6]),
        [f32::INFINITY, f32::NEG_INFINITY]
    );
    assert!(round_trip(GgmlType::BF16, &[f32::NAN])[0].is_nan());
    let f32_bits = [f32::NAN, f32::INFINITY, -0.0, 1e-45, 3.0];
    let back = round_trip(GgmlType::F32, &f32_bits);
    for (a, b) in f32_bits.iter().zip(back) {
        assert_eq!(a.to_bits(), b.to_bits());
    }
}

#[test]
fn unsupported_types_are_errors() {
    use GgmlType::*;
    assert_eq!(
        is_supported(Q8_1),
        cfg!(feature = "test-types"),
        "Q8_1 is the test-only type, registered with the feature test-types alone"
    );
    for ty in [Q8_K, I8, I32, F64] {
        assert!(!is_supported(ty));
        let bytes = vec![0u8; ty.type_size() as usize];
        let mut out = vec![0f32; ty.block_size() as usize];
        assert!(
            matches!(dequantize_row(ty, &bytes, &mut out), Err(Error::UnsupportedType(t)) if t == ty)
        );
        let mut bytes = bytes;
        assert!(
            matches!(quantize_row(ty, &out, &mut bytes), Err(Error::UnsupportedType(t)) if t == ty)
        );
    }
    // The one type tandem reads but does not write.
    let mut bytes = vec![0u8; IQ1_M.type_size() as usize];
    let x = vec![0f32; IQ1_M.block_size() as usize];
    assert!(matches!(
        quantize_row(IQ1_M, &x, &mut bytes),
        Err(Error::UnsupportedType(_))
    ));
}

#[test]
fn length_errors_are_errors() {
    use GgmlType::*;
    for ty in [
        F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS,
        IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M,
    ] {
        let (bs, ts) = (ty.block_size() as usize, ty.type_size() as usize);
        let mut out = vec![0f32; 2 * bs];
        for bad in [0, ts, 2 * ts - 1, 2 * ts + 1, 3 * ts] {
            let src = vec![0u8; bad];
            let r = dequantize_row(ty, &src, &mut out);
            assert!(
                matches!(r, Err(Error::LengthMismatch { .. })),
                "{ty}: {bad} bytes"
            );
        }
        if bs > 1 {
            let src = vec![0u8; 2 * ts];
            let mut odd = vec![0f32; 2 * bs - 1];
            let r = dequantize_row(ty, &src, &mut odd);
            assert!(
                matches!(r, Err(Error::LengthMismatch { .. })),
                "{ty}: odd values"
            );
            if is_quantize_supported(ty) {
                let mut dst = vec![0u8; 2 * ts];
                let r = quantize_row(ty, &odd, &mut dst);
                assert!(
                    matches!(r, Err(Error::LengthMismatch { .. })),
                    "{ty}: odd quantize"
                );
            }
        }
        if is_quantize_supported(ty) {
            let x = vec![0f32; 2 * bs];
            let mut dst = vec![0u8; 2 * ts + 1];
            let r = quantize_row(ty, &x, &mut dst);
            assert!(
                matches!(r, Err(Error::LengthMismatch { .. })),
                "{ty}: quantize bytes"
            );
        }
        let mut empty: [f32; 0] = [];
        dequantize_row(ty, &[], &mut empty).unwrap();
    }
}
