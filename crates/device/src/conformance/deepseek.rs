//! DeepSeek-V4's ops besides its attention: the clamped SwiGLU and hyper-connections.

use super::{buf, read, rel};
use crate::hyper::HyperSpec;
use crate::testing::data;
use crate::Device;

/// How [`super::moe_case`]'s DeepSeek-V4 mixture picks its experts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dsv4Route {
    /// By score plus the choice's bias.
    Bias,
    /// Given per row (the hash-routed blocks').
    Given,
}

/// The clamped SwiGLU over 7 × 96 values (a third past the limit), then hyper-connections
/// of 4 streams of 96 over 5 rows (20 Sinkhorn iterations): the weights `hyper_pre` leaves,
/// the block input, the new streams; and a merge's input. Each op's values by name.
/// Asserted on `d` itself: a row mixed alone has the bits it has among the others.
pub fn deepseek_case(d: &mut dyn Device) -> Vec<(&'static str, Vec<f32>)> {
    let mut values = Vec::new();
    let n = 7 * 96;
    let gate: Vec<f32> = data(n, 21).iter().map(|v| v * 6.0).collect();
    let up: Vec<f32> = data(n, 22).iter().map(|v| v * 6.0).collect();
    let (g, u) = (buf(d, &gate), buf(d, &up));
    d.swiglu_limited(g, u, n, 3.0);
    values.push(("swiglu_limited", read(d, g, n)));

    let (rows, streams, width) = (5, 4, 96);
    let spec = HyperSpec {
        streams,
        width,
        sinkhorn_iters: 20,
        eps: 1e-6,
        scale: [1.3, 0.7, 1.1],
        merge: false,
    };
    let m = spec.mix_width();
    let mix_in: Vec<f32> = data(rows * m, 23).iter().map(|v| v * 2.0).collect();
    let base = buf(d, &data(m, 24));
    let x_in = data(rows * streams * width, 25);
    let (mix, x) = (buf(d, &mix_in), buf(d, &x_in));
    let (out, y) = (
        d.alloc(rows * width).unwrap(),
        buf(d, &data(rows * width, 26)),
    );
    d.hyper_pre(x, mix, base, out, rows, &spec);
    let input = read(d, out, rows * width);
    values.push(("hyper weights", read(d, mix, rows * m)));
    d.hyper_post(y, x, mix, rows, &spec);
    let streams_out = read(d, x, rows * streams * width);
    values.push(("hyper pre", input.clone()));
    values.push(("hyper post", streams_out.clone()));

    let r = 3;
    let (mix1, x1) = (
        buf(d, &mix_in[r * m..(r + 1) * m]),
        buf(d, &x_in[r * streams * width..(r + 1) * streams * width]),
    );
    let (out1, y1) = (
        d.alloc(width).unwrap(),
        buf(d, &data(rows * width, 26)[r * width..][..width]),
    );
    d.hyper_pre(x1, mix1, base, out1, 1, &spec);
    d.hyper_post(y1, x1, mix1, 1, &spec);
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    assert_eq!(
        bits(&read(d, out1, width)),
        bits(&input[r * width..(r + 1) * width]),
        "a block input mixed alone"
    );
    assert_eq!(
        bits(&read(d, x1, streams * width)),
        bits(&streams_out[r * streams * width..(r + 1) * streams * width]),
        "streams mixed alone"
    );

    let merge = HyperSpec {
        merge: true,
        ..spec
    };
    let mix = buf(d, &mix_in[..rows * streams]);
    let x = buf(d, &x_in);
    d.hyper_pre(x, mix, base, out, rows, &merge);
    values.push(("hyper merge", read(d, out, rows * width)));
    values
}

/// [`deepseek_case`] on the two devices: each op's values within `tol` of each other, the
/// largest difference over the op's largest value (at least 1).
pub fn deepseek_agree(a: &mut dyn Device, b: &mut dyn Device, tol: f32) {
    let (got, want) = (deepseek_case(a), deepseek_case(b));
    for ((op, g), (_, w)) in got.iter().zip(&want) {
        assert!(g.iter().chain(w).all(|v| v.is_finite()), "{op}: finite");
        let e = rel(g, w, 1.0);
        assert!(e < tol, "{op}: {e} (bound {tol})");
    }
}
