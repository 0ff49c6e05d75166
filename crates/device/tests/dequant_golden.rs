//! Bit-exactness against `gguf.quants` (the gguf Python package) and, for what it does not
//! do, against ggml itself. The golden files are written by `scripts/gen_dequant_golden.py`
//! (see its header for the file format) and `scripts/gen_ggml_golden.py`.

use device::formats::{dequantize_row, quantize_row};
use gguf::GgmlType;
use std::path::PathBuf;

const DEQUANT_TYPES: &[&str] = &[
    "f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k",
    "q6_k", "iq4_nl", "iq4_xs", "tq1_0", "tq2_0", "mxfp4", "nvfp4", "q1_0", "q2_0", "iq2_xxs",
    "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "iq1_m",
];
const QUANT_TYPES: &[&str] = &[
    "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "tq1_0", "tq2_0", "mxfp4", "nvfp4",
    "q1_0", "q2_0",
];

struct Golden {
    ty: GgmlType,
    input: Vec<u8>,
    output: Vec<u8>,
}

fn load(kind: &str, name: &str, expected_kind: u32) -> Golden {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(kind)
        .join(format!("{name}.bin"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&bytes[0..4], b"TDQG", "{name}: bad magic");
    let word = |i: usize| u32::from_le_bytes(bytes[4 + 4 * i..8 + 4 * i].try_into().unwrap());
    assert_eq!(word(0), 1, "{name}: version");
    let ty = GgmlType::from_id(word(1)).expect("known type id");
    assert_eq!(ty.to_string().to_lowercase(), name);
    assert_eq!(word(2), expected_kind, "{name}: kind");
    let (n_in, n_out) = (word(3) as usize, word(4) as usize);
    let body = &bytes[24..];
    assert_eq!(body.len(), n_in + n_out, "{name}: truncated");
    Golden {
        ty,
        input: body[..n_in].to_vec(),
        output: body[n_in..].to_vec(),
    }
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn dequantize_matches_gguf_py_bit_for_bit() {
    for name in DEQUANT_TYPES {
        let g = load("dequant", name, 0);
        let want = f32s(&g.output);
        let mut got = vec![f32::NAN; want.len()];
        dequantize_row(g.ty, &g.input, &mut got).unwrap();
        let block = g.ty.block_size() as usize;
        for (i, (w, v)) in want.iter().zip(&got).enumerate() {
            // F16 NaN payloads may be quieted by F16C; NaN-ness must still agree.
            let same = w.to_bits() == v.to_bits() || (w.is_nan() && v.is_nan());
            assert!(
                same,
                "{name}: element {i} (block {}, index {}): want {w:e} ({:#010x}), got {v:e} ({:#010x})",
                i / block,
                i % block,
                w.to_bits(),
                v.to_bits()
            );
        }
    }
}

#[test]
fn dequantize_per_block_equals_whole_row() {
    for name in DEQUANT_TYPES {
        let g = load("dequant", name, 0);
        let (bs, ts) = (g.ty.block_size() as usize, g.ty.type_size() as usize);
        let n = g.output.len() / 4;
        let mut whole = vec![0f32; n];
        dequantize_row(g.ty, &g.input, &mut whole).unwrap();
        let mut one = vec![0f32; bs];
        for (b, src) in g.input.chunks_exact(ts).enumerate() {
            dequantize_row(g.ty, src, &mut one).unwrap();
            let want: Vec<u32> = whole[b * bs..(b + 1) * bs]
                .iter()
                .map(|x| x.to_bits())
                .collect();
            let got: Vec<u32> = one.iter().map(|x| x.to_bits()).collect();
            assert_eq!(want, got, "{name}: block {b}");
        }
    }
}

#[test]
fn quantize_matches_gguf_py_bit_for_bit() {
    for name in QUANT_TYPES {
        let g = load("quant", name, 1);
        let x = f32s(&g.input);
        let mut got = vec![0u8; g.output.len()];
        quantize_row(g.ty, &x, &mut got).unwrap();
        let ts = g.ty.type_size() as usize;
        for (b, (w, v)) in g
            .output
            .chunks_exact(ts)
            .zip(got.chunks_exact(ts))
            .enumerate()
        {
            assert_eq!(w, v, "{name}: block {b}");
        }
    }
}
