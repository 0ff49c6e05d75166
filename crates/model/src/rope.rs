//! RoPE scaling, as llama.cpp reads and applies it: the type (`none`, `linear`, `yarn`),
//! factor and original context from `{arch}.rope.scaling.*` keys, overridden by
//! llama.cpp's flags (`--rope-scaling`, `--rope-scale`, `--rope-freq-scale`,
//! `--rope-freq-base`, `--yarn-*`), and turned per block into the [`RopeScaling`] the
//! devices compute angles with. Windowed blocks keep their angles unscaled (llama.cpp's
//! `rope_freq_scale_train_swa`).

use device::RopeScaling;
use gguf::Metadata;

use crate::{Error, Result};

/// How positions past the training context are reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeKind {
    None,
    /// Angles divided by the factor.
    Linear,
    /// YaRN: interpolated on slow dimensions, kept on fast ones, magnitudes raised.
    Yarn,
}

impl RopeKind {
    pub fn parse(s: &str) -> Option<RopeKind> {
        match s {
            "none" => Some(RopeKind::None),
            "linear" => Some(RopeKind::Linear),
            "yarn" => Some(RopeKind::Yarn),
            _ => None,
        }
    }
}

/// A model's RoPE scaling as its file and flags give it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RopeParams {
    pub kind: RopeKind,
    /// `1 / factor`.
    pub freq_scale: f32,
    /// The context the model was trained at before scaling (YaRN's ramp).
    pub n_ctx_orig: usize,
    /// `None`: 1 with YaRN, else 0.
    pub ext_factor: Option<f32>,
    /// `rope.scaling.attn_factor` (1 unless the file says).
    pub attn_factor: f32,
    /// `--yarn-attn-factor`, which acts only where YaRN's extrapolation does not.
    pub yarn_attn_factor: Option<f32>,
    pub beta_fast: f32,
    pub beta_slow: f32,
}

/// The flags' overrides; `None` keeps what the file says.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RopeOverrides {
    pub kind: Option<RopeKind>,
    /// `--rope-freq-scale`, or `1 / --rope-scale`.
    pub freq_scale: Option<f32>,
    pub freq_base: Option<f32>,
    pub n_ctx_orig: Option<usize>,
    pub ext_factor: Option<f32>,
    pub attn_factor: Option<f32>,
    pub beta_fast: Option<f32>,
    pub beta_slow: Option<f32>,
}

impl RopeParams {
    /// The scaling `md` gives `arch` (whose training context is `n_ctx_train`).
    pub fn from_metadata(md: &Metadata, arch: &str, n_ctx_train: usize) -> Result<RopeParams> {
        let key = |k: &str| format!("{arch}.rope.scaling.{k}");
        let kind = match md.opt_str(&key("type"))? {
            None => RopeKind::None,
            Some(s) => RopeKind::parse(s).ok_or_else(|| Error::BadHParam {
                key: key("type"),
                problem: format!("'{s}' is not supported (none, linear or yarn)"),
            })?,
        };
        let factor = md.opt_f32(&key("factor"))?.unwrap_or(0.0);
        let n_ctx_orig = md
            .opt_u32(&key("original_context_length"))?
            .map_or(n_ctx_train, |v| v as usize);
        Ok(RopeParams {
            kind,
            freq_scale: if factor == 0.0 { 1.0 } else { 1.0 / factor },
            n_ctx_orig: if n_ctx_orig == 0 {
                n_ctx_train
            } else {
                n_ctx_orig
            },
            ext_factor: None,
            attn_factor: md.opt_f32(&key("attn_factor"))?.unwrap_or(1.0),
            yarn_attn_factor: None,
            beta_fast: 32.0,
            beta_slow: 1.0,
        })
    }

    /// These parameters with the flags' `o` over them.
    pub fn with(self, o: &RopeOverrides) -> RopeParams {
        RopeParams {
            kind: o.kind.unwrap_or(self.kind),
            freq_scale: o.freq_scale.unwrap_or(self.freq_scale),
            n_ctx_orig: o.n_ctx_orig.unwrap_or(self.n_ctx_orig),
            ext_factor: o.ext_factor.or(self.ext_factor),
            attn_factor: self.attn_factor,
            yarn_attn_factor: o.attn_factor.or(self.yarn_attn_factor),
            beta_fast: o.beta_fast.unwrap_or(self.beta_fast),
            beta_slow: o.beta_slow.unwrap_or(self.beta_slow),
        }
    }

    /// The scaling of a block turning with `freq_base`, unscaled when `windowed`, as
    /// llama.cpp's context sets it up: no scaling with type `none`; YaRN's magnitude
    /// `1 + 0.1 ln(factor)` applied once, times `rope.scaling.attn_factor`; an
    /// `--yarn-attn-factor` given applies only without YaRN's extrapolation, as there.
    pub fn scaling(&self, freq_base: f32, n_rot: usize, windowed: bool) -> RopeScaling {
        let freq_scale = match self.kind {
            RopeKind::None => 1.0,
            _ if windowed => 1.0,
            _ => self.freq_scale,
        };
        let ext_factor = self.ext_factor.unwrap_or(match self.kind {
            RopeKind::Yarn => 1.0,
            _ => 0.0,
        });
        let mut attn_factor = self.yarn_attn_factor.unwrap_or(1.0);
        if ext_factor != 0.0 {
            let factor = 1.0 / self.freq_scale;
            let mscale = if factor <= 1.0 {
                1.0
            } else {
                0.1 * factor.ln() + 1.0
            };
            attn_factor = mscale / (1.0 + 0.1 * factor.ln());
        }
        attn_factor *= self.attn_factor;
        RopeScaling {
            freq_scale,
            ext_factor,
            attn_factor,
            corr_dims: RopeScaling::corr_dims(
                n_rot,
                self.n_ctx_orig,
                freq_base,
                [self.beta_fast, self.beta_slow],
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yarn(factor: f32) -> RopeParams {
        RopeParams {
            kind: RopeKind::Yarn,
            freq_scale: 1.0 / factor,
            n_ctx_orig: 32768,
            ext_factor: None,
            attn_factor: 1.0,
            yarn_attn_factor: None,
            beta_fast: 32.0,
            beta_slow: 1.0,
        }
    }

    #[test]
    fn yarn_raises_magnitudes_once_and_ramps_between_its_dims() {
        let s = yarn(4.0).scaling(1_000_000.0, 64, false);
        assert_eq!((s.freq_scale, s.ext_factor), (0.25, 1.0));
        // The rope op multiplies by 1 + 0.1 ln 4 itself; the factor passed cancels it.
        assert!((s.attn_factor * (1.0 + 0.1 * 4f32.ln()) - (1.0 + 0.1 * 4f32.ln())).abs() < 1e-6);
        // Qwen2.5's 64 rotated dimensions at base 1e6 over 32K positions:
        // 64·ln(32768/(32·2π))/(2 ln 1e6) = 11.8 and 64·ln(32768/2π)/(2 ln 1e6) = 19.8.
        assert_eq!(s.corr_dims, [11.0, 20.0]);
        let windowed = yarn(4.0).scaling(10_000.0, 64, true);
        assert_eq!(windowed.freq_scale, 1.0);
        let none = RopeParams {
            kind: RopeKind::None,
            ..yarn(4.0)
        }
        .scaling(1e6, 64, false);
        assert_eq!(
            (none.freq_scale, none.ext_factor, none.attn_factor),
            (1.0, 0.0, 1.0)
        );
        let linear = RopeParams {
            kind: RopeKind::Linear,
            yarn_attn_factor: Some(2.0),
            ..yarn(8.0)
        }
        .scaling(1e6, 64, false);
        assert_eq!(
            (linear.freq_scale, linear.ext_factor, linear.attn_factor),
            (0.125, 0.0, 2.0)
        );
    }

    #[test]
    fn the_files_keys_give_the_scaling() {
        use gguf::{Gguf, GgufWriter, Value};
        let mut w = GgufWriter::new();
        w.metadata("qwen2.rope.scaling.type", Value::String("yarn".into()))
            .metadata("qwen2.rope.scaling.factor", Value::F32(4.0))
            .metadata(
                "qwen2.rope.scaling.original_context_length",
                Value::U32(32768),
            );
        let g = Gguf::parse(&w.to_bytes()).unwrap();
        let p = RopeParams::from_metadata(&g.metadata, "qwen2", 131072).unwrap();
        assert_eq!(
            (p.kind, p.freq_scale, p.n_ctx_orig),
            (RopeKind::Yarn, 0.25, 32768)
        );
        let mut w = GgufWriter::new();
        w.metadata("qwen2.rope.scaling.type", Value::String("longrope".into()));
        let g = Gguf::parse(&w.to_bytes()).unwrap();
        let e = RopeParams::from_metadata(&g.metadata, "qwen2", 4096).unwrap_err();
        assert!(e.to_string().contains("qwen2.rope.scaling.type"), "{e}");
        let none = RopeParams::from_metadata(&gguf::Metadata::default(), "qwen2", 4096).unwrap();
        assert_eq!(
            (none.kind, none.freq_scale, none.n_ctx_orig),
            (RopeKind::None, 1.0, 4096)
        );
    }

    #[test]
    fn flags_override_the_file() {
        let o = RopeOverrides {
            kind: Some(RopeKind::Linear),
            freq_scale: Some(0.5),
            n_ctx_orig: Some(4096),
            ..RopeOverrides::default()
        };
        let p = yarn(4.0).with(&o);
        assert_eq!(
            (p.kind, p.freq_scale, p.n_ctx_orig),
            (RopeKind::Linear, 0.5, 4096)
        );
    }
}
