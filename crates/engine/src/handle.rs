//! The multi-user engine's configuration and the handle through which everything else
//! talks to the engine thread.

use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use gguf::GgmlType;
use kv::BLOCK_SIZE;
use tokio::sync::{mpsc as tmpsc, oneshot};

use crate::front::FrontState;
use crate::request::{Event, GenRequest};
use crate::scheduler::persist::{SlotDone, SlotOp};
use crate::{ContextConfig, DeviceKind, Error, Result};

/// How the engine is sized; everything is allocated once from this at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineConfig {
    /// KV positions over all slots (-c).
    pub n_ctx: usize,
    /// Slots: sequences generated at once (-np).
    pub n_parallel: usize,
    /// All slots share the whole pool (--kv-unified); otherwise each slot gets an even share.
    pub kv_unified: bool,
    /// Tokens computed per engine step over all slots (-b).
    pub n_batch: usize,
    /// Rows per forward pass (-ub).
    pub n_ubatch: usize,
    pub n_threads: usize,
    pub kv_type: GgmlType,
    /// Requests waiting for a slot beyond which new ones are refused.
    pub queue_limit: usize,
    /// The backend the model computes on (`--device`).
    pub device: DeviceKind,
    /// How long a step may take while a sequence is decoding (`--step-budget`).
    pub step_budget: StepBudget,
    /// Sliding-window layers keep every position (`--swa-full`).
    pub swa_full: bool,
    /// Snapshots of recurrent states per slot (`--ctx-checkpoints`).
    pub ctx_checkpoints: usize,
    /// MiB of computed prefixes kept in host memory past the pool (`--cache-ram`; 0: none).
    pub cache_ram_mib: usize,
    /// Where computed prefixes are kept on disk across restarts (`--cache-dir`).
    pub cache_dir: Option<&'static DiskTier>,
}

/// The prefix cache's disk tier: a folder shared by every model and pool shape that uses it.
#[derive(Debug, PartialEq, Eq)]
pub struct DiskTier {
    pub dir: std::path::PathBuf,
    /// Bytes the folder's block files may take, every model's together (`--cache-dir-max`);
    /// past it the least recently used blocks that no kept block continues are removed.
    /// `None`: no limit.
    pub max_bytes: Option<u64>,
}

/// How long an engine step may take while any sequence is decoding, so that a prompt
/// being read never freezes the streams already writing (`--step-budget`): prompts are
/// then read in chunks across steps. With nobody decoding, prompts take the whole batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepBudget {
    /// No cap: a step reads up to `-b` prompt tokens whoever waits.
    Off,
    /// This many hundredths of the predicted time of the step's decoding rows alone.
    Times(u32),
    /// This many milliseconds (never less than the decoding rows alone need).
    Millis(u32),
}

impl StepBudget {
    /// The default: 2.5× the decoding rows' step.
    pub const AUTO: StepBudget = StepBudget::Times(250);

    /// `auto`, `off`, `F x` (a factor of the decoding step, e.g. `2.5x`) or milliseconds
    /// (`400` or `400ms`).
    pub fn parse(s: &str) -> std::result::Result<StepBudget, String> {
        let s = s.trim();
        let bad = || {
            format!("{s:?}: expected auto, off, a factor of the decode step such as 2.5x, or milliseconds such as 400ms")
        };
        match s {
            "auto" => return Ok(StepBudget::AUTO),
            "off" => return Ok(StepBudget::Off),
            _ => {}
        }
        if let Some(f) = s.strip_suffix('x') {
            let f: f64 = f.trim().parse().map_err(|_| bad())?;
            if !(1.0..=100.0).contains(&f) {
                return Err(format!("{s:?}: the factor must be from 1x to 100x"));
            }
            return Ok(StepBudget::Times((f * 100.0).round() as u32));
        }
        let ms: u32 = s.trim_end_matches("ms").trim().parse().map_err(|_| bad())?;
        if ms == 0 {
            return Err(format!("{s:?}: a step needs more than 0 ms (or say off)"));
        }
        Ok(StepBudget::Millis(ms))
    }

    /// Seconds a step may take when its decoding rows alone are predicted to take
    /// `decoding` seconds; `None` for no cap.
    pub fn target(self, decoding: f64) -> Option<f64> {
        match self {
            StepBudget::Off => None,
            StepBudget::Times(h) => Some(decoding * h as f64 / 100.0),
            StepBudget::Millis(ms) => Some((ms as f64 / 1e3).max(decoding)),
        }
    }
}

impl std::fmt::Display for StepBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StepBudget::Off => write!(f, "off"),
            StepBudget::Times(h) => write!(f, "{}x the decode step", *h as f64 / 100.0),
            StepBudget::Millis(ms) => write!(f, "{ms} ms"),
        }
    }
}

impl EngineConfig {
    /// Positions one slot may use: the whole pool when unified, else an even share rounded
    /// down to whole KV blocks.
    pub fn slot_ctx(&self) -> usize {
        if self.kv_unified {
            self.n_ctx
        } else {
            self.n_ctx / self.n_parallel.max(1) / BLOCK_SIZE * BLOCK_SIZE
        }
    }

    /// Positions the KV pool holds.
    pub fn pool_positions(&self) -> usize {
        if self.kv_unified {
            self.n_ctx
        } else {
            self.slot_ctx() * self.n_parallel
        }
    }

    /// The evaluation sizes the memory plan is computed from.
    pub fn context_config(&self) -> ContextConfig {
        ContextConfig {
            n_ctx: self.pool_positions(),
            n_ubatch: self.n_ubatch,
            n_threads: self.n_threads,
            kv_type: self.kv_type,
            device: self.device,
            n_seq: self.n_parallel,
            swa_full: self.swa_full,
            ctx_checkpoints: self.ctx_checkpoints,
            ..ContextConfig::default()
        }
    }

    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Config(m));
        if self.n_parallel == 0 || self.n_batch == 0 || self.n_ubatch == 0 {
            return bad("--parallel, --batch-size and --ubatch-size must be positive".into());
        }
        if self.slot_ctx() < BLOCK_SIZE {
            return bad(format!(
                "-c {} over {} slots leaves {} positions per slot; give each at least {BLOCK_SIZE} (raise -c or use --kv-unified)",
                self.n_ctx,
                self.n_parallel,
                self.n_ctx / self.n_parallel
            ));
        }
        if self.n_batch < self.n_parallel {
            return bad(format!(
                "--batch-size {} is below --parallel {}: every slot needs a row per step",
                self.n_batch, self.n_parallel
            ));
        }
        Ok(())
    }
}

/// One slot as the engine last saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotState {
    pub id: usize,
    /// The request in the slot; `None` when idle.
    pub task: Option<u64>,
    pub n_prompt: usize,
    pub n_cached: usize,
    pub n_decoded: usize,
    /// Positions whose KV is computed.
    pub n_past: usize,
    /// Draft tokens verified for the request so far, those accepted, and the draft tokens
    /// of its latest step (its current depth).
    pub draft_n: usize,
    pub draft_n_accepted: usize,
    pub draft_depth: usize,
}

/// Counters since start (llama.cpp's `/metrics`), grouped by concern.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counters {
    pub tokens: TokenCounters,
    pub requests: RequestCounters,
    pub spec: SpecCounters,
    pub split: SplitCounters,
    pub steps: StepCounters,
}

/// Where the engine's time goes: drafting, and the forwards' time shared among the kinds
/// of rows they computed (prompt rows, generated-token rows, draft rows being verified) in
/// proportion to their count; of the forwards' time, what choosing tokens from logits took
/// (sampling and checking drafts).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepCounters {
    pub prefill_seconds_total: f64,
    pub decode_seconds_total: f64,
    pub verify_seconds_total: f64,
    pub draft_seconds_total: f64,
    pub sample_seconds_total: f64,
}

impl StepCounters {
    /// `(part, seconds)` for every part, as `/metrics` names them.
    pub fn parts(&self) -> [(&'static str, f64); 5] {
        [
            ("prefill", self.prefill_seconds_total),
            ("decode", self.decode_seconds_total),
            ("verify", self.verify_seconds_total),
            ("draft", self.draft_seconds_total),
            ("sample", self.sample_seconds_total),
        ]
    }
}

/// Tokens computed and the time they took.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TokenCounters {
    pub prompt_tokens_total: u64,
    pub prompt_seconds_total: f64,
    pub tokens_predicted_total: u64,
    pub predicted_seconds_total: f64,
    pub cached_tokens_total: u64,
    /// Forward passes, and the rows they computed (prompt tokens, sampled tokens and
    /// draft tokens being verified).
    pub n_decode_total: u64,
    pub rows_total: u64,
    /// Busy slots summed over forward passes.
    pub n_busy_slots_total: u64,
    /// The most positions a sequence has had computed (llama-server's `n_tokens_max`).
    pub n_tokens_max: u64,
}

/// How requests ended.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestCounters {
    pub requests_done: u64,
    pub requests_cancelled: u64,
    /// Requests stopped by the server: the model's numbers became NaN or infinite, or a
    /// split model's box stayed down past its grace window.
    pub requests_failed: u64,
    /// Requests whose KV was taken back to make room for older ones.
    pub preemptions_total: u64,
    /// Times a generating sequence filled its slot and dropped tokens to go on.
    pub context_shifts_total: u64,
}

/// Speculation: what was drafted, accepted, and chosen.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpecCounters {
    /// Drafts verified (vLLM's `num_drafts`).
    pub spec_drafts_total: u64,
    pub spec_draft_tokens_total: u64,
    pub spec_accepted_tokens_total: u64,
    /// Draft rows the target computed and dropped: each rejected draft token and the draft
    /// tokens after it.
    pub spec_rejected_rows_total: u64,
    /// Per draft position: drafts accepted at that position.
    pub spec_accepted_per_pos: Vec<u64>,
    /// Per depth: how often the policy chose it for a slot.
    pub spec_depth_chosen: Vec<u64>,
    /// Slots whose drafter is paused now (depth 0, behind the sequence), and slot-steps
    /// so far at depth 0 with the drafter paused.
    pub spec_paused_slots: u64,
    pub spec_paused_slot_steps_total: u64,
    /// Tokens drafters computed for tokens they had missed (beyond the one each drafting
    /// slot drafts from), and seconds of the draft forwards that computed them.
    pub spec_catch_up_tokens_total: u64,
    pub spec_catch_up_seconds_total: f64,
    /// Predicted and measured seconds of the steps the policy chose depths for.
    pub spec_step_predicted_seconds_total: f64,
    pub spec_step_measured_seconds_total: f64,
}

/// A split model's link to its box.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SplitCounters {
    /// Connections to the box made again after it was lost.
    pub box_reconnects_total: u64,
    /// Rows computed again on the box to rebuild its sessions, each checked.
    pub box_replayed_rows_total: u64,
    /// Seconds of this stage's own work in steps (blocks L..n, head, sampling).
    pub head_compute_seconds_total: f64,
    /// Seconds during which the box and this stage computed at once (the box's compute
    /// ending when its states arrived).
    pub both_busy_seconds_total: f64,
}

/// The engine's state between two steps.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub slots: Vec<SlotState>,
    pub n_queued: usize,
    /// The engine released its executor while idle (see [`EngineHandle::sleep_after`]).
    pub sleeping: bool,
    /// Awake: the idle time left before it sleeps (the whole `sleep_after` while a request
    /// runs); `None` when it never sleeps or sleeps already.
    pub sleeps_in: Option<Duration>,
    pub kv_blocks_total: usize,
    pub kv_blocks_free: usize,
    /// Blocks held by the prefix cache (reusable, evictable).
    pub kv_blocks_cached: usize,
    pub counters: Counters,
    /// The costs the speculation policy currently works with; `None` without a drafter.
    pub spec_costs: Option<crate::speculative::SpecCosts>,
    /// What crossed the link to a split model's box; `None` for a whole model.
    pub front: Option<crate::FrontStats>,
}

pub(crate) enum Command {
    Submit {
        task: u64,
        req: Box<GenRequest>,
        out: tmpsc::UnboundedSender<Event>,
    },
    Snapshot(oneshot::Sender<Snapshot>),
    Slot {
        slot: usize,
        ns: u64,
        op: SlotOp,
        reply: oneshot::Sender<std::result::Result<SlotDone, String>>,
    },
    SleepAfter(Option<Duration>),
    Wake,
}

/// The events of one request. Dropping it cancels the request: the engine frees its slot
/// within one step.
pub type EventStream = tmpsc::UnboundedReceiver<Event>;

/// A cheap, clonable way to reach the engine thread. The engine stops when every handle
/// is dropped.
#[derive(Clone)]
pub struct EngineHandle {
    pub(crate) tx: mpsc::Sender<Command>,
    pub(crate) queued: Arc<AtomicUsize>,
    pub(crate) next_task: Arc<AtomicU64>,
    pub(crate) config: EngineConfig,
    /// A [`FrontState`], kept by the engine thread.
    pub(crate) front: Arc<AtomicU8>,
}

impl EngineHandle {
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Wakes a sleeping engine (and counts as activity for the idle time); what follows on
    /// this handle is answered once it is awake.
    pub fn wake(&self) -> Result<()> {
        self.tx.send(Command::Wake).map_err(|_| Error::Stopped)
    }

    /// After `idle` with no request, the engine releases its executor (the weights on the
    /// device, the KV storage, its buffers and the prefix cache) until the next request or
    /// slot operation rebuilds it; `None`: never. Not with a split model's front.
    pub fn sleep_after(&self, idle: Option<Duration>) -> Result<()> {
        self.tx
            .send(Command::SleepAfter(idle))
            .map_err(|_| Error::Stopped)
    }

    /// Queues `req` and returns its task id and event stream; `Error::QueueFull` when
    /// `queue_limit` requests already wait for a slot.
    pub fn submit(&self, req: GenRequest) -> Result<(u64, EventStream)> {
        if self.front_state() == FrontState::Down {
            return Err(Error::Unavailable(
                "the box of this split model is down; retry later".into(),
            ));
        }
        let limit = self.config.queue_limit;
        if self.queued.fetch_add(1, Ordering::AcqRel) >= limit {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            return Err(Error::QueueFull { limit });
        }
        let task = self.next_task.fetch_add(1, Ordering::Relaxed);
        let (out, events) = tmpsc::unbounded_channel();
        self.tx
            .send(Command::Submit {
                task,
                req: Box::new(req),
                out,
            })
            .map_err(|_| {
                self.queued.fetch_sub(1, Ordering::AcqRel);
                Error::Stopped
            })?;
        Ok((task, events))
    }

    /// The engine's slots, queue and counters, as of the end of its current step.
    pub async fn snapshot(&self) -> Result<Snapshot> {
        self.ask_snapshot()?.await.map_err(|_| Error::Stopped)
    }

    /// [`EngineHandle::snapshot`] for a caller outside an async runtime (it blocks).
    pub fn snapshot_blocking(&self) -> Result<Snapshot> {
        self.ask_snapshot()?
            .blocking_recv()
            .map_err(|_| Error::Stopped)
    }

    fn ask_snapshot(&self) -> Result<oneshot::Receiver<Snapshot>> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Command::Snapshot(tx))
            .map_err(|_| Error::Stopped)?;
        Ok(rx)
    }

    /// Saves, restores or erases slot `slot`'s cached prefix in namespace `ns`
    /// ([`crate::scheduler::persist`]); the inner error says why it could not be done.
    pub async fn slot(
        &self,
        slot: usize,
        ns: u64,
        op: SlotOp,
    ) -> Result<std::result::Result<SlotDone, String>> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Command::Slot {
                slot,
                ns,
                op,
                reply,
            })
            .map_err(|_| Error::Stopped)?;
        rx.await.map_err(|_| Error::Stopped)
    }

    /// Where the box of a split model stands (`Up` for a whole model).
    pub fn front_state(&self) -> FrontState {
        FrontState::from_u8(self.front.load(Ordering::Acquire))
    }

    /// Requests waiting for a slot.
    pub fn n_queued(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }
}
