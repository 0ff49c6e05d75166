//! llama-perplexity's `--kl-divergence-base` file, read and written, and its KL-divergence
//! statistics: how far one model's next-token distributions are from a base model's over
//! the same tokens (a quantization's loss, or another engine's reading of the same file).
//!
//! The file: `_logits_`, then `n_ctx`, `n_vocab`, `n_chunk` (i32 each), the `n_chunk ·
//! n_ctx` tokens (i32), then per chunk, for each scored position (the second half of the
//! chunk but its last token), a record of `nv = 2·⌈n_vocab/2⌉ + 4` u16: two f32 (`scale`,
//! `min_log_prob`), then each token's log-probability as `min_log_prob + scale · u16`
//! over the 16 nats below the largest (0 below that).

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::CliError;

const MAGIC: &[u8; 8] = b"_logits_";

/// u16 of one position's record.
fn record_len(n_vocab: usize) -> usize {
    2 * n_vocab.div_ceil(2) + 4
}

/// A base file being read: its header, then one chunk's records at a time.
pub struct BaseReader {
    pub n_ctx: usize,
    pub n_vocab: usize,
    pub tokens: Vec<u32>,
    path: PathBuf,
    r: BufReader<File>,
}

impl BaseReader {
    pub fn open(path: &Path) -> Result<BaseReader, CliError> {
        let io = |e| CliError::io(path, e);
        let mut r = BufReader::new(File::open(path).map_err(io)?);
        let mut magic = [0u8; 8];
        r.read_exact(&mut magic).map_err(io)?;
        if &magic != MAGIC {
            return Err(CliError::Usage(format!(
                "{}: not a llama-perplexity --kl-divergence-base file",
                path.display()
            )));
        }
        let mut ints = [0i32; 3];
        for v in &mut ints {
            let mut b = [0u8; 4];
            r.read_exact(&mut b).map_err(io)?;
            *v = i32::from_le_bytes(b);
        }
        let [n_ctx, n_vocab, n_chunk] = ints;
        if n_ctx < 4 || n_vocab < 1 || n_chunk < 1 {
            return Err(CliError::Usage(format!(
                "{}: header n_ctx {n_ctx}, n_vocab {n_vocab}, n_chunk {n_chunk}",
                path.display()
            )));
        }
        let (n_ctx, n_vocab, n_chunk) = (n_ctx as usize, n_vocab as usize, n_chunk as usize);
        let mut bytes = vec![0u8; 4 * n_ctx * n_chunk];
        r.read_exact(&mut bytes).map_err(io)?;
        let tokens = bytes
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
            .collect();
        Ok(BaseReader {
            n_ctx,
            n_vocab,
            tokens,
            path: path.to_path_buf(),
            r,
        })
    }

    /// The next chunk's records (`[n_ctx - 1 - n_ctx/2, nv]`).
    pub fn chunk(&mut self) -> Result<Vec<u16>, CliError> {
        let n = (self.n_ctx - 1 - self.n_ctx / 2) * record_len(self.n_vocab);
        let mut bytes = vec![0u8; 2 * n];
        self.r
            .read_exact(&mut bytes)
            .map_err(|e| CliError::io(&self.path, e))?;
        Ok(bytes
            .chunks_exact(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .collect())
    }

    /// Position `i`'s record among a chunk's records.
    pub fn record(&self, records: &[u16], i: usize) -> std::ops::Range<usize> {
        let nv = record_len(self.n_vocab);
        assert!((i + 1) * nv <= records.len(), "position {i} of the chunk");
        i * nv..(i + 1) * nv
    }
}

/// A base file being written, as llama-perplexity writes it.
pub struct BaseWriter {
    path: PathBuf,
    w: BufWriter<File>,
    record: Vec<u16>,
}

impl BaseWriter {
    pub fn create(
        path: &Path,
        n_ctx: usize,
        n_vocab: usize,
        n_chunk: usize,
        tokens: &[u32],
    ) -> Result<BaseWriter, CliError> {
        let io = |e| CliError::io(path, e);
        let mut w = BufWriter::new(File::create(path).map_err(io)?);
        w.write_all(MAGIC).map_err(io)?;
        for v in [n_ctx, n_vocab, n_chunk] {
            w.write_all(&(v as i32).to_le_bytes()).map_err(io)?;
        }
        for &t in &tokens[..n_ctx * n_chunk] {
            w.write_all(&(t as i32).to_le_bytes()).map_err(io)?;
        }
        Ok(BaseWriter {
            path: path.to_path_buf(),
            w,
            record: vec![0; record_len(n_vocab)],
        })
    }

    /// Appends one scored position's record.
    pub fn position(&mut self, logits: &[f32]) -> Result<(), CliError> {
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let min = logits
            .iter()
            .copied()
            .fold(f32::INFINITY, f32::min)
            .max(max - 16.0);
        let sum: f64 = logits.iter().map(|&l| (l - max).exp() as f64).sum();
        let log_sum = sum.ln() as f32;
        let scale = (max - min) / 65535.0;
        let min_log_prob = min - max - log_sum;
        let r = &mut self.record;
        let [s0, s1] = split(scale);
        let [m0, m1] = split(min_log_prob);
        r[..4].copy_from_slice(&[s0, s1, m0, m1]);
        for (q, &l) in r[4..].iter_mut().zip(logits) {
            *q = match scale > 0.0 && l > min {
                true => ((l - min) / scale).round() as u16,
                false => 0,
            };
        }
        let bytes: Vec<u8> = r.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.w
            .write_all(&bytes)
            .map_err(|e| CliError::io(&self.path, e))
    }

    pub fn finish(mut self) -> Result<(), CliError> {
        self.w.flush().map_err(|e| CliError::io(&self.path, e))
    }
}

/// An f32's bits as two u16, low half first (its bytes in the record).
fn split(v: f32) -> [u16; 2] {
    let b = v.to_bits();
    [b as u16, (b >> 16) as u16]
}

/// Sums over the scored positions, as llama-perplexity keeps them.
#[derive(Default)]
pub struct Kld {
    nll: f64,
    nll_base: f64,
    values: Vec<f64>,
    same_top: usize,
}

/// The statistics of [`Kld`], as `tandem perplexity --json` prints them.
#[derive(Serialize)]
pub struct KldSummary {
    pub positions: usize,
    pub ppl: f64,
    pub ppl_base: f64,
    pub kld_mean: f64,
    /// Standard error of the mean.
    pub kld_stderr: f64,
    pub kld_99: f64,
    pub kld_max: f64,
    /// Share of positions whose most probable token is the base's.
    pub same_top: f64,
}

impl Kld {
    /// One position: this model's `logits`, the base's record, the next token `target`.
    pub fn add(&mut self, logits: &[f32], record: &[u16], target: u32) {
        let (imax, max) =
            logits
                .iter()
                .enumerate()
                .fold(
                    (0, f32::NEG_INFINITY),
                    |(i, m), (j, &v)| if v > m { (j, v) } else { (i, m) },
                );
        let sum: f64 = logits.iter().map(|&l| (l - max).exp() as f64).sum();
        let log_norm = max as f64 + sum.ln();
        let scale = f32::from_bits(record[0] as u32 | (record[1] as u32) << 16) as f64;
        let min_log_prob = f32::from_bits(record[2] as u32 | (record[3] as u32) << 16) as f64;
        let base = &record[4..4 + logits.len()];
        let base_log = |q: u16| scale * q as f64 + min_log_prob;
        self.nll += log_norm - logits[target as usize] as f64;
        self.nll_base -= base_log(base[target as usize]);
        let (mut kld, mut best, mut best_log) = (0.0, 0, f64::NEG_INFINITY);
        for (i, (&q, &l)) in base.iter().zip(logits).enumerate() {
            let lb = base_log(q);
            if lb > best_log {
                (best, best_log) = (i, lb);
            }
            if lb > -16.0 {
                kld += lb.exp() * (lb - (l as f64 - log_norm));
            }
        }
        self.values.push(kld);
        self.same_top += usize::from(best == imax);
    }

    pub fn summary(&self) -> KldSummary {
        let n = self.values.len().max(1) as f64;
        let mean = self.values.iter().sum::<f64>() / n;
        let var = self.values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
        let mut sorted = self.values.clone();
        sorted.sort_by(f64::total_cmp);
        let at = |f: f64| sorted.get(((sorted.len() as f64 - 1.0) * f).round() as usize);
        KldSummary {
            positions: self.values.len(),
            ppl: (self.nll / n).exp(),
            ppl_base: (self.nll_base / n).exp(),
            kld_mean: mean,
            kld_stderr: (var / n).sqrt(),
            kld_99: at(0.99).copied().unwrap_or(0.0),
            kld_max: sorted.last().copied().unwrap_or(0.0),
            same_top: self.same_top as f64 / n,
        }
    }
}
