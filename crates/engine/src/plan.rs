use std::fmt;

use device::ScratchShape;
use model::{Model, Scratch};

use crate::executor::{ContextConfig, LOGIT_ROWS};

/// Memory planned before anything is allocated: weights (mapped), KV pool (and recurrent
/// states), scratch (the forward's buffers and the device's own working memory).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryPlan {
    pub weights: u64,
    pub kv: u64,
    pub scratch: u64,
    /// Tables read from the file as needed (`--lazy-mode`): not held, not in the total.
    pub on_disk: u64,
}

impl MemoryPlan {
    pub fn new(model: &Model, cfg: &ContextConfig) -> MemoryPlan {
        let hp = &model.hparams;
        let rows = cfg.n_ubatch;
        let experts = hp
            .moe
            .as_ref()
            .map_or(0, |m| m.n_ff_exp.max(m.shared.map_or(0, |s| s.n_ff)));
        let own = ScratchShape {
            n_threads: cfg.n_threads,
            widest: hp.n_embd.max(hp.n_ff).max(hp.q_dim()).max(experts),
            n_ctx: cfg.n_ctx,
            n_group: hp.n_head / hp.n_head_kv,
            head_dim: hp.head_dim,
        };
        let scratch = Scratch::bytes(hp, &model.scratch_widths(), rows)
            + (rows * hp.hidden_width() * 4) as u64
            + (LOGIT_ROWS * (2 * model.n_logits() + hp.hidden_width()) * 4) as u64
            + cfg.device.scratch_bytes(&own);
        let bytes = |ty, r, c, role| cfg.device.matrix_bytes(ty, r, c, role);
        MemoryPlan {
            weights: model.weight_bytes(&bytes),
            kv: cfg.kv_config(model).total_bytes(),
            scratch,
            on_disk: model.lazy_bytes(&bytes),
        }
    }

    /// This plan and `other` (a draft model's) together.
    pub fn with(self, other: &MemoryPlan) -> MemoryPlan {
        MemoryPlan {
            weights: self.weights + other.weights,
            kv: self.kv + other.kv,
            scratch: self.scratch + other.scratch,
            on_disk: self.on_disk + other.on_disk,
        }
    }

    pub fn total(&self) -> u64 {
        self.weights + self.kv + self.scratch
    }
}

/// The memory this machine has available now (`MemAvailable` of /proc/meminfo), where it
/// says.
pub fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

impl fmt::Display for MemoryPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "weights {:.1} MiB + KV {:.1} MiB + scratch {:.1} MiB = total {:.1} MiB",
            mib(self.weights),
            mib(self.kv),
            mib(self.scratch),
            mib(self.total())
        )?;
        if self.on_disk > 0 {
            write!(
                f,
                " (+ {:.1} MiB of tables read from the file)",
                mib(self.on_disk)
            )?;
        }
        Ok(())
    }
}
