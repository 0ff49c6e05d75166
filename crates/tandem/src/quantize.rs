//! `tandem quantize IN OUT --type T`: a GGUF model with its weight matrices re-encoded,
//! as llama.cpp's `llama-quantize` makes it. The metadata (with `general.file_type` set
//! to llama.cpp's file type of `T`), the tokenizer and every tensor that is not a weight
//! matrix are copied; each matrix gets the type `model::quant::plan` chooses, quantized
//! with the importance matrix's values for it where `--imatrix` gives one and its type's
//! quantizer takes them. The file is written tensor by tensor, each in slabs of rows
//! shared among the threads, so memory stays near one slab whatever the model's size.

use std::path::{Path, PathBuf};

use clap::Args;
use device::formats::takes_importance;
use gguf::{GgmlType, GgufFile, GgufStreamWriter, TensorInfo, Value};
use model::quant::{
    convert_rows, file_type, importance_for, parse_type, plan, Choice, Imatrix, ImatrixFormat,
    QuantSpec, TensorTypeOverride,
};

use crate::CliError;

#[derive(Args)]
pub struct QuantizeArgs {
    /// The GGUF model to read.
    pub input: PathBuf,
    /// Where to write the quantized model.
    pub output: PathBuf,
    /// The type of the weight matrices: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
    /// Q4_K (llama.cpp's Q4_K_M mixture), Q6_K, IQ4_NL, IQ4_XS, TQ1_0, TQ2_0, MXFP4
    /// (MXFP4_MOE: experts in MXFP4, other matrices Q8_0), NVFP4, Q1_0, Q2_0.
    #[arg(long = "type")]
    pub ty: String,
    /// An importance matrix written by llama-imatrix (GGUF, or the legacy .dat format).
    #[arg(long)]
    pub imatrix: Option<PathBuf>,
    /// PATTERN=TYPE: matrices whose names match the regex PATTERN (anywhere in the name,
    /// any case) get TYPE; the first matching pattern wins. Repeatable.
    #[arg(long = "tensor-type")]
    pub tensor_type: Vec<String>,
    /// Every matrix in --type or a --tensor-type: none of llama.cpp's per-tensor mixture.
    #[arg(long)]
    pub pure: bool,
    /// Quantize tensors that are already quantized (llama.cpp's --allow-requantize).
    #[arg(long = "allow-requantize")]
    pub allow_requantize: bool,
    /// Threads (default: all cores).
    #[arg(short = 't', long = "threads")]
    pub threads: Option<usize>,
}

/// Values dequantized at once per slab of a tensor (64 MiB of f32).
const SLAB_VALUES: usize = 16 << 20;

pub fn execute(a: QuantizeArgs) -> Result<(), CliError> {
    let target = parse_type(&a.ty)?;
    let overrides = a
        .tensor_type
        .iter()
        .map(|s| TensorTypeOverride::parse(s))
        .collect::<Result<Vec<_>, _>>()?;
    if same_file(&a.input, &a.output) {
        return Err(CliError::Usage(format!(
            "quantize: the output {} is the input",
            a.output.display()
        )));
    }
    let file = GgufFile::open(&a.input)?;
    let imatrix = a.imatrix.as_deref().map(Imatrix::load).transpose()?;
    let spec = QuantSpec {
        target,
        overrides,
        pure: a.pure,
        has_imatrix: imatrix.is_some(),
        allow_requantize: a.allow_requantize,
    };
    let header = &file.header;
    let choices = plan(&spec, &header.metadata, &header.tensors)?;
    let importances = header
        .tensors
        .iter()
        .zip(&choices)
        .map(|(t, c)| match &imatrix {
            Some(m) if c.convert => importance_for(m, t),
            _ => Ok(None),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if let (Some(m), Some(path)) = (&imatrix, &a.imatrix) {
        eprintln!("{}", describe(m, path));
    }
    let ftype = file_type(target)
        .ok_or_else(|| CliError::Usage(format!("quantize: {target} has no llama.cpp file type")))?;
    let metadata = metadata(&file, ftype, imatrix.as_ref().zip(a.imatrix.as_deref()));
    let threads = a
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let job = Job {
        file: &file,
        choices: &choices,
        importances: &importances,
        has_imatrix: imatrix.is_some(),
        threads,
    };
    if let Err(e) = job.write(&a.output, &metadata) {
        let _ = std::fs::remove_file(&a.output);
        return Err(e);
    }
    summary(
        &file,
        &choices,
        &importances,
        &spec,
        imatrix.is_some(),
        &a.output,
    );
    Ok(())
}

/// One line on an importance matrix: its entries, file, format and calibration.
fn describe(m: &Imatrix, path: &Path) -> String {
    format!(
        "importance matrix: {} entries from {} ({}), {} chunks of {}",
        m.entries.len(),
        path.display(),
        match m.format {
            ImatrixFormat::Gguf => "GGUF",
            ImatrixFormat::Legacy => "legacy .dat",
        },
        m.chunk_count,
        if m.datasets.is_empty() {
            "an unnamed dataset".to_string()
        } else {
            m.datasets.join(", ")
        }
    )
}

/// Whether `a` and `b` name the same existing file.
fn same_file(a: &Path, b: &Path) -> bool {
    matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
}

/// The input's metadata with `general.file_type` and `general.quantization_version` set
/// as llama.cpp sets them, a split model's keys dropped (the output is one file), and
/// the importance matrix named as llama-quantize names it.
fn metadata(
    file: &GgufFile,
    file_type: u32,
    imatrix: Option<(&Imatrix, &Path)>,
) -> Vec<(String, Value)> {
    let mut set: Vec<(String, Value)> = vec![
        ("general.quantization_version".into(), Value::U32(2)),
        ("general.file_type".into(), Value::U32(file_type)),
    ];
    if let Some((m, path)) = imatrix {
        set.push((
            "quantize.imatrix.file".into(),
            Value::String(path.display().to_string()),
        ));
        if let Some(d) = m.datasets.first() {
            set.push(("quantize.imatrix.dataset".into(), Value::String(d.clone())));
        }
        set.push((
            "quantize.imatrix.entries_count".into(),
            Value::U32(m.entries.len() as u32),
        ));
        if m.chunk_count > 0 {
            set.push((
                "quantize.imatrix.chunks_count".into(),
                Value::U32(m.chunk_count),
            ));
        }
    }
    let dropped = ["split.no", "split.count", "split.tensors.count"];
    let mut out: Vec<(String, Value)> = file
        .header
        .metadata
        .iter()
        .filter(|(k, _)| !dropped.contains(k))
        .map(|(k, v)| {
            let v = set.iter().find(|s| s.0 == k).map_or(v, |s| &s.1);
            (k.to_string(), v.clone())
        })
        .collect();
    for (k, v) in set {
        if !out.iter().any(|o| o.0 == k) {
            out.push((k, v));
        }
    }
    out
}

/// A model to write: its input, each tensor's type and importances.
struct Job<'a> {
    file: &'a GgufFile,
    choices: &'a [Choice],
    importances: &'a [Option<&'a [f32]>],
    has_imatrix: bool,
    threads: usize,
}

impl Job<'_> {
    /// Writes the model to `out` with `metadata`, logging a line per tensor.
    fn write(&self, out: &Path, metadata: &[(String, Value)]) -> Result<(), CliError> {
        let io = |e| CliError::io(out, e);
        let header = &self.file.header;
        let tensors: Vec<(String, Vec<u64>, GgmlType)> = header
            .tensors
            .iter()
            .zip(self.choices)
            .map(|(t, c)| (t.name.clone(), t.dims.clone(), c.ty))
            .collect();
        let mut w = GgufStreamWriter::create(out, metadata, &tensors).map_err(io)?;
        let n = header.tensors.len();
        for (i, ((t, c), imp)) in header
            .tensors
            .iter()
            .zip(self.choices)
            .zip(self.importances)
            .enumerate()
        {
            eprintln!("{}", log_line(i, n, t, c, *imp, self.has_imatrix));
            let bytes = self.file.tensor_bytes(t);
            if !c.convert {
                w.data(bytes).map_err(io)?;
                continue;
            }
            write_converted(&mut w, t, bytes, c.ty, *imp, self.threads).map_err(|e| match e {
                Converted::Io(e) => io(e),
                Converted::Model(e) => e.into(),
            })?;
        }
        w.finish().map_err(io)?;
        Ok(())
    }
}

/// What can stop a tensor's conversion.
enum Converted {
    Io(std::io::Error),
    Model(model::Error),
}

/// Writes tensor `t` (its bytes `src`) re-encoded as `ty`, in slabs of rows of about
/// [`SLAB_VALUES`] values, each slab's rows split into `threads` contiguous parts.
fn write_converted<W: std::io::Write>(
    w: &mut GgufStreamWriter<W>,
    t: &TensorInfo,
    src: &[u8],
    ty: GgmlType,
    importance: Option<&[f32]>,
    threads: usize,
) -> Result<(), Converted> {
    let k = t.dims[0] as usize;
    let n_rows: usize = t.dims[1..].iter().product::<u64>() as usize;
    let (sb, db) = (
        t.ggml_type.row_bytes(k as u64).unwrap_or(0) as usize,
        ty.row_bytes(k as u64).unwrap_or(0) as usize,
    );
    let slab = (SLAB_VALUES / k.max(1)).max(1);
    let mut out = Vec::new();
    for first in (0..n_rows).step_by(slab) {
        let rows = slab.min(n_rows - first);
        out.resize(rows * db, 0);
        let per = rows.div_ceil(threads);
        let results: Vec<model::Result<()>> = std::thread::scope(|s| {
            let parts: Vec<_> = out
                .chunks_mut(per * db)
                .enumerate()
                .map(|(p, dst)| {
                    let r0 = first + p * per;
                    let src = &src[r0 * sb..(r0 + dst.len() / db) * sb];
                    s.spawn(move || convert_rows(t, src, r0, ty, importance, dst))
                })
                .collect();
            parts
                .into_iter()
                .map(|h| h.join().expect("a quantizing thread panicked"))
                .collect()
        });
        results
            .into_iter()
            .collect::<model::Result<()>>()
            .map_err(Converted::Model)?;
        w.data(&out).map_err(Converted::Io)?;
    }
    Ok(())
}

/// llama-quantize's line for one tensor: its place, name, shape, type and what becomes
/// of it.
fn log_line(
    i: usize,
    n: usize,
    t: &TensorInfo,
    c: &Choice,
    importance: Option<&[f32]>,
    has_imatrix: bool,
) -> String {
    let mut line = format!(
        "[{:>4}/{n}] {:<36} {:<20} {:>7}",
        i + 1,
        t.name,
        format!("{:?}", t.dims),
        t.ggml_type.to_string()
    );
    if c.convert {
        line += &format!(" -> {}", c.ty);
    } else if !c.why.is_empty() {
        line += " kept";
    }
    if !c.why.is_empty() {
        line += &format!(" ({})", c.why.join("; "));
    }
    if c.convert && has_imatrix && takes_importance(c.ty) && importance.is_none() {
        line += " (no importance matrix entry: quantized without one)";
    }
    line
}

/// The sizes before and after, and what the log lines said that a reader should not
/// miss: fallbacks, and an importance matrix that some types did not use.
fn summary(
    file: &GgufFile,
    choices: &[Choice],
    importances: &[Option<&[f32]>],
    spec: &QuantSpec,
    has_imatrix: bool,
    out: &Path,
) {
    let tensors = &file.header.tensors;
    let n_elements: u64 = tensors.iter().map(|t| t.n_elements()).sum();
    let before: u64 = tensors.iter().map(|t| t.n_bytes).sum();
    let after: u64 = tensors
        .iter()
        .zip(choices)
        .map(|(t, c)| match c.convert {
            true => c.ty.row_bytes(t.dims[0]).unwrap_or(0) * t.dims[1..].iter().product::<u64>(),
            false => t.n_bytes,
        })
        .sum();
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let bpw = |b: u64| b as f64 * 8.0 / n_elements.max(1) as f64;
    eprintln!(
        "model size {:.2} MiB ({:.2} bits per weight) -> {:.2} MiB ({:.2} bits per weight), {} as {}",
        mib(before),
        bpw(before),
        mib(after),
        bpw(after),
        out.display(),
        spec.target
    );
    let fell_back = choices.iter().filter(|c| c.fell_back).count();
    if fell_back > 0 {
        eprintln!(
            "warning: {fell_back} of {} tensors fell back to another type: their rows are not whole blocks of the type chosen",
            tensors.len()
        );
    }
    if has_imatrix {
        let mut unused: Vec<String> = choices
            .iter()
            .filter(|c| c.convert && !takes_importance(c.ty))
            .map(|c| c.ty.to_string())
            .collect();
        unused.sort();
        unused.dedup();
        if !unused.is_empty() {
            eprintln!(
                "note: the importance matrix is not used for {}: tandem's quantizers of these types take no importances",
                unused.join(", ")
            );
        }
        let weighted = choices
            .iter()
            .zip(importances)
            .filter(|(c, imp)| c.convert && imp.is_some() && takes_importance(c.ty))
            .count();
        eprintln!("{weighted} tensors quantized with importances");
    }
}
