//! The machine's own limit: how fast the CPU streams memory it reads, with the threads a
//! benchmark uses, and how many bytes of weights a decode step streams, so that decode
//! speed can be read as a share of what the memory allows.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use engine::DeviceKind;
use kernels::ThreadPool;
use model::Model;

/// Bytes the probe reads per pass: far past any cache.
const PROBE_BYTES: usize = 512 << 20;
/// Passes; the fastest counts.
const PASSES: usize = 5;

/// Streaming-read bandwidth in GB/s (10⁹ bytes) of `threads` threads summing a buffer of
/// [`PROBE_BYTES`] split among them, the fastest of [`PASSES`] passes.
pub fn read_bandwidth(threads: usize) -> f64 {
    read_bandwidth_of(threads, PROBE_BYTES)
}

fn read_bandwidth_of(threads: usize, bytes: usize) -> f64 {
    let words: Vec<u64> = (0..bytes / 8).map(|i| i as u64).collect();
    let pool = ThreadPool::new(threads);
    let sink = AtomicU64::new(0);
    let mut best = f64::INFINITY;
    for _ in 0..PASSES {
        let t = Instant::now();
        pool.for_ranges(words.len(), &|r| {
            let sum = words[r].iter().fold(0u64, |a, &w| a.wrapping_add(w));
            sink.fetch_add(sum, Ordering::Relaxed);
        });
        best = best.min(t.elapsed().as_secs_f64());
    }
    std::hint::black_box(sink.load(Ordering::Relaxed));
    (words.len() * 8) as f64 / best / 1e9
}

/// Bytes of weights one decode step of one row streams on a `device`: every matrix of the
/// stage once (of a mixture's experts, the `k` of `n_expert` a row picks), the output head
/// (the restricted one when there is one), and one row of the embedding table.
pub fn decode_weight_bytes(model: &Model, device: DeviceKind) -> u64 {
    model.decode_bytes(&|ty, r, c, role| device.matrix_bytes(ty, r, c, role))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_reads_at_a_positive_finite_rate() {
        let gb_s = read_bandwidth_of(2, 16 << 20);
        assert!(gb_s.is_finite() && gb_s > 0.1, "{gb_s}");
    }
}
