//! The engine thread: slots, a queue, and one step loop with continuous batching.
//!
//! Each step builds one batch under the token budget `n_batch`: every slot computes the
//! tokens it has not computed yet, oldest request first; a slot past its prompt has one
//! (the token sampled last), a slot in its prompt has a chunk of it. Chunks are cut so that
//! every slot later in the order still gets its row. The batch runs in forwards of at most
//! `n_ubatch` rows; a slot whose last token was computed samples its next one.
//!
//! KV blocks are taken as they are needed. When the pool runs short, the prefix cache is
//! evicted first; then the youngest request not yet in this step's batch is preempted: its
//! blocks go to the prefix cache and it resumes later from what is still cached, or by
//! recomputing (which gives the same KV, since the forward is batch-invariant).
//!
//! With speculation, each step first asks the policy how deep every decoding slot drafts
//! and the proposer for those drafts, all slots in one call (`drafting.rs`); the draft
//! tokens are more rows of the slot in the same forward, verified row by row, and the KV
//! of rows after the first rejection is rolled back.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use kv::{KvPool, PrefixCache, BLOCK_SIZE};
use model::Model;
use text::Tokenizer;
use tokio::sync::mpsc::UnboundedSender;

use crate::backend::Threads;
use crate::cost::{Shape, StepCost};
use crate::executor::Executor;
use crate::front::{Front, FrontState, Overlap};
use crate::handle::{Command, Counters, EngineConfig, EngineHandle, SlotState, Snapshot};
use crate::request::{Event, GenRequest};
use crate::slot::Sequence;
use crate::speculative::policy::Base;
use crate::speculative::Speculation;
use crate::Result;

mod calibrate;
mod cohorts;
mod disk_tier;
mod dormant;
mod drafting;
mod host_tier;
pub mod persist;
mod planner;
mod recovery;
mod step;

/// How often an idle engine checks on its box: a heartbeat, or a reconnect when it is down.
const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);

use cohorts::{Cohorts, InFlight};
use drafting::Spec;
use planner::{Holder, Limits, Planned, Slots};

struct Queued {
    task: u64,
    req: GenRequest,
    out: UnboundedSender<Event>,
}

/// A sequence admitted to a slot, with its admission order (smaller is older).
struct Active {
    order: u64,
    /// Preempted at least once: its prompt is looked up in the cache whatever it asked.
    resumed: bool,
    seq: Sequence,
}

/// The state the engine thread owns: the model's executor and every sequence.
pub struct Engine {
    exec: dormant::Exec,
    /// What forwards cost here: measured at start, refreshed by every forward.
    cost: StepCost,
    tok: Arc<Tokenizer>,
    cfg: EngineConfig,
    cache: PrefixCache,
    /// The prefix cache's host-memory tier (`--cache-ram`, or a disk tier's index).
    host: Option<kv::HostCache>,
    /// Its disk tier (`--cache-dir`).
    disk: Option<disk_tier::DiskCache>,
    spec: Option<Spec>,
    /// The box of a split model (then `model` is the last stage).
    front: Option<Box<dyn Front>>,
    /// A [`FrontState`], shared with the handle.
    front_state: Arc<AtomicU8>,
    /// `[n_ubatch, hidden_width]`: the states entering from the front.
    entered: Vec<f32>,
    slots: Vec<Option<Active>>,
    queue: VecDeque<Queued>,
    rx: mpsc::Receiver<Command>,
    queued: Arc<AtomicUsize>,
    next_order: u64,
    counters: Counters,
    /// With a front: how long it and this stage computed at once.
    overlap: Overlap,
    /// The cohorts that take turns through a pipelining front (one without).
    cohorts: Cohorts,
    /// Per slot: the tokens and namespace of the last request it served (whose prefix the
    /// cache may hold).
    last: Vec<Option<(Vec<u32>, u64)>>,
}

/// Allocates everything `cfg` asks for (and the drafter `spec` makes), measures what
/// forwards (and, with speculation, draft steps) cost on this machine, and starts the
/// engine thread. With a `front` (a split model's
/// box), `model` is the last stage: each step's rows enter it from the front, and the
/// prefix cache is off (the front keeps no cached prefixes).
pub fn start(
    model: Model,
    tok: Arc<Tokenizer>,
    cfg: EngineConfig,
    spec: Option<Speculation>,
    front: Option<Box<dyn Front>>,
) -> Result<EngineHandle> {
    start_with(model, tok, cfg, spec, front, &|_, _| {})
}

/// [`start`], telling `progress` how far the upload of the model's weights is.
pub fn start_with(
    model: Model,
    tok: Arc<Tokenizer>,
    cfg: EngineConfig,
    spec: Option<Speculation>,
    front: Option<Box<dyn Front>>,
    progress: &device::Progress<'_>,
) -> Result<EngineHandle> {
    if front.is_none() && !model.stage.embed {
        return Err(crate::Error::Config(
            "a model stage without the embeddings needs the box that holds them".into(),
        ));
    }
    cfg.validate()?;
    let e = model.hparams.hidden_width();
    let (tx, rx) = mpsc::channel();
    let queued = Arc::new(AtomicUsize::new(0));
    let front_state = Arc::new(AtomicU8::new(FrontState::Up as u8));
    let pool = Threads::new(cfg.n_threads);
    let context = cfg
        .context_config()
        .with_drafts(spec.as_ref().map_or(0, |s| s.config.n_max));
    let dev = cfg.device.open(pool.clone(), context.precision)?;
    let exec = Executor::on(model, context, dev, progress)?;
    eprintln!("device: {}", exec.device().describe());
    let (host, disk) = tiers(&exec, &cfg, front.is_some())?;
    let stage = exec.model().stage.layers.clone();
    let spec = spec
        .map(|s| Spec::new(s, &cfg, pool.clone(), stage))
        .transpose()?;
    let mut engine = Engine {
        cost: StepCost::unmeasured(cfg.n_ubatch),
        exec: dormant::Exec::new(exec, pool),
        spec,
        front,
        front_state: front_state.clone(),
        entered: vec![0.0; cfg.n_ubatch * e],
        tok,
        cfg,
        cache: PrefixCache::new(),
        host,
        disk,
        slots: (0..cfg.n_parallel).map(|_| None).collect(),
        last: (0..cfg.n_parallel).map(|_| None).collect(),
        queue: VecDeque::new(),
        rx,
        queued: queued.clone(),
        next_order: 0,
        counters: Counters::default(),
        overlap: Overlap::default(),
        cohorts: Cohorts::default(),
    };
    if engine.front.as_ref().is_some_and(|f| f.pipelined()) {
        engine.cohorts = Cohorts::new(true);
    }
    engine.calibrate();
    std::thread::Builder::new()
        .name("tandem-engine".into())
        .spawn(move || engine.run())
        .map_err(|e| crate::Error::Config(format!("cannot start the engine thread: {e}")))?;
    Ok(EngineHandle {
        tx,
        queued,
        next_task: Arc::new(AtomicU64::new(0)),
        config: cfg,
        front: front_state,
    })
}

impl Engine {
    fn run(mut self) {
        loop {
            if self.is_idle() && self.front.is_some() {
                match self.rx.recv_timeout(HEARTBEAT_EVERY) {
                    Ok(c) => self.command(c),
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        self.heartbeat();
                        continue;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => return,
                }
            } else if self.is_idle() {
                let asleep = self.exec.asleep();
                let left = self
                    .exec
                    .sleep_after
                    .filter(|_| !asleep)
                    .map(|after| after.saturating_sub(self.exec.busy.elapsed()));
                match left {
                    Some(Duration::ZERO) => {
                        self.sleep();
                        continue;
                    }
                    Some(left) => match self.rx.recv_timeout(left) {
                        Ok(c) => self.command(c),
                        Err(mpsc::RecvTimeoutError::Timeout) => {
                            self.sleep();
                            continue;
                        }
                        Err(mpsc::RecvTimeoutError::Disconnected) => return,
                    },
                    None => match self.rx.recv() {
                        Ok(c) => self.command(c),
                        Err(_) => return,
                    },
                }
            }
            while let Ok(c) = self.rx.try_recv() {
                self.command(c);
            }
            if self.exec.asleep() {
                continue;
            }
            if !self.is_idle() {
                self.exec.busy = Instant::now();
            }
            self.drop_cancelled();
            self.admit();
            // A cohort with nothing to do gives its turn to the other at once.
            let (mut plan, mut drafting) = (Vec::new(), Duration::ZERO);
            for _ in 0..self.cohorts.turns() {
                let t0 = Instant::now();
                self.draft_all();
                drafting = t0.elapsed();
                self.counters.steps.draft_seconds_total += drafting.as_secs_f64();
                plan = self.plan();
                if !plan.is_empty() || self.cohorts.busy() {
                    break;
                }
                self.cohorts.next_turn();
            }
            if plan.is_empty() && !self.cohorts.busy() {
                if let Ok(c) = self.rx.recv_timeout(Duration::from_millis(10)) {
                    self.command(c);
                }
                continue;
            }
            let (plan, drafting) = match self.cohorts.pipelined() {
                false => (plan, drafting),
                true => {
                    self.submit(&plan);
                    let this = (!plan.is_empty()).then_some(InFlight { plan, drafting });
                    match self.cohorts.pass(this) {
                        Some(prev) => (prev.plan, prev.drafting),
                        None => continue,
                    }
                }
            };
            let t1 = Instant::now();
            self.step(&plan);
            if let Some(spec) = &mut self.spec {
                spec.policy.account(t1.elapsed() + drafting, drafting);
                let (t, c) = (spec.policy.tally, &mut self.counters.spec);
                c.spec_step_predicted_seconds_total = t.predicted_secs;
                c.spec_step_measured_seconds_total = t.measured_secs;
            }
        }
    }

    /// `(slot, position, token)` per row of `plan`, in plan order: a slot's rows are
    /// contiguous and ascending; positions past the sequence are its draft tokens.
    fn rows(&self, plan: &[Planned]) -> Vec<(usize, usize, u32)> {
        plan.iter()
            .flat_map(|p| (p.from..p.from + p.n).map(move |pos| (p.slot, pos)))
            .map(|(slot, pos)| (slot, pos, self.active(slot).seq.row_token(pos)))
            .collect()
    }

    /// Hands `plan`'s rows to the front in the forwards `step` will ask for (a failed send
    /// is that forward's failure, recovered there).
    fn submit(&mut self, plan: &[Planned]) {
        let rows = self.rows(plan);
        for chunk in rows.chunks(self.cfg.n_ubatch) {
            let (entering, drafts_from) = (self.entering(chunk), self.drafts_from(chunk));
            if let Some(f) = &mut self.front {
                let _ = f.submit(&entering, &drafts_from);
            }
        }
    }

    /// `rows` as the front names them: `(session, position, token)`.
    fn entering(&self, rows: &[(usize, usize, u32)]) -> Vec<(u64, usize, u32)> {
        rows.iter()
            .map(|&(slot, pos, t)| (self.active(slot).seq.task, pos, t))
            .collect()
    }

    /// Per slot of `rows` whose rows end in drafts, its session and first draft position
    /// (what [`crate::Front`] is told).
    fn drafts_from(&self, rows: &[(usize, usize, u32)]) -> Vec<(u64, usize)> {
        let mut drafts: Vec<(u64, usize)> = Vec::new();
        for &(slot, pos, _) in rows {
            let seq = &self.active(slot).seq;
            if pos >= seq.tokens.len() && drafts.last().is_none_or(|d| d.0 != seq.task) {
                drafts.push((seq.task, seq.tokens.len()));
            }
        }
        drafts
    }

    fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.slots.iter().all(Option::is_none)
    }

    fn command(&mut self, c: Command) {
        match c {
            Command::Submit { task, req, out } => match self.wake() {
                Ok(()) => self.queue.push_back(Queued {
                    task,
                    req: *req,
                    out,
                }),
                Err(e) => {
                    let _ = out.send(Event::Failed(format!("the engine could not wake: {e}")));
                }
            },
            Command::Snapshot(reply) => {
                let _ = reply.send(self.snapshot());
            }
            Command::Slot {
                slot,
                ns,
                op,
                reply,
            } => {
                let done = match self.wake() {
                    Ok(()) => self.slot_op(slot, ns, op),
                    Err(e) => Err(format!("the engine could not wake: {e}")),
                };
                let _ = reply.send(done);
                self.exec.busy = Instant::now();
            }
            Command::SleepAfter(after) => self.exec.sleep_after = after,
            Command::Wake => {
                if let Err(e) = self.wake() {
                    eprintln!("engine: could not wake: {e}");
                }
                self.exec.busy = Instant::now();
            }
        }
    }

    fn snapshot(&self) -> Snapshot {
        let slots = self
            .slots
            .iter()
            .enumerate()
            .map(|(id, a)| match a {
                Some(Active { seq, .. }) => SlotState {
                    id,
                    task: Some(seq.task),
                    n_prompt: seq.n_prompt,
                    n_cached: seq.n_cached,
                    n_decoded: seq.n_generated,
                    n_past: seq.kv.len(),
                    draft_n: seq.draft_n,
                    draft_n_accepted: seq.draft_n_accepted,
                    draft_depth: seq.draft_depth,
                },
                None => SlotState {
                    id,
                    task: None,
                    n_prompt: 0,
                    n_cached: 0,
                    n_decoded: 0,
                    n_past: 0,
                    draft_n: 0,
                    draft_n_accepted: 0,
                    draft_depth: 0,
                },
            })
            .collect();
        let (kv_blocks_total, kv_blocks_free) = match self.exec.asleep() {
            true => (self.exec.n_blocks, self.exec.n_blocks),
            false => (
                self.exec.kv().config().n_blocks(),
                self.exec.kv().free_blocks(),
            ),
        };
        Snapshot {
            slots,
            n_queued: self.queue.len(),
            sleeping: self.exec.asleep(),
            sleeps_in: self.sleeps_in(),
            kv_blocks_total,
            kv_blocks_free,
            kv_blocks_cached: self.cache.n_blocks(),
            counters: self.counters.clone(),
            spec_costs: self
                .spec
                .as_ref()
                .map(|s| s.costs(&self.cost, self.cfg.n_parallel)),
            front: self.front.as_ref().map(|f| f.stats()),
        }
    }

    /// Frees the slots and queue entries of clients that went away.
    fn drop_cancelled(&mut self) {
        for i in 0..self.slots.len() {
            let cancelled = self.slots[i].as_ref().is_some_and(|a| a.seq.is_cancelled());
            if cancelled && !self.cohorts.in_flight(i) {
                self.counters.requests.requests_cancelled += 1;
                self.free_slot(i);
            }
        }
        let before = self.queue.len();
        self.queue.retain(|q| !q.out.is_closed());
        let dropped = before - self.queue.len();
        self.counters.requests.requests_cancelled += dropped as u64;
        self.queued.fetch_sub(dropped, Ordering::AcqRel);
    }

    /// Moves queued requests into free slots, in arrival order; one whose prompt leaves a
    /// slot no room for a generated token, or whose tokens are outside the vocabulary, is
    /// rejected. (An answer that reaches the slot's end stops there.)
    fn admit(&mut self) {
        let slot_ctx = self.cfg.slot_ctx();
        let n_vocab = self.exec.model().hparams.n_vocab;
        let before = self.queue.len();
        let check = |q: &Queued| {
            if q.req.prompt.is_empty() || q.req.prompt.len() >= slot_ctx {
                return Err(format!(
                    "the prompt ({} tokens) leaves no room for an answer in a slot of {slot_ctx}",
                    q.req.prompt.len()
                ));
            }
            match q.req.prompt.iter().find(|&&t| t as usize >= n_vocab) {
                Some(bad) => Err(format!(
                    "token id {bad} is outside the vocabulary of {n_vocab}"
                )),
                None => Ok(()),
            }
        };
        let next_order = &mut self.next_order;
        let adapters: Vec<f32> = self.exec.model().adapters.iter().map(|a| a.scale).collect();
        planner::admit(
            &mut self.slots,
            &mut self.queue,
            |q| q.req.slot,
            check,
            |q, why| {
                let _ = q.out.send(Event::Rejected(why));
            },
            |q, slot| {
                let order = *next_order;
                *next_order += 1;
                let mut req = q.req;
                req.resolve_adapters(&adapters);
                Active {
                    order,
                    resumed: false,
                    seq: Sequence::new(q.task, slot, req, q.out, slot_ctx),
                }
            },
        );
        self.queued
            .fetch_sub(before - self.queue.len(), Ordering::AcqRel);
    }

    /// Returns the slot's blocks to the prefix cache (split: frees them, here and on the
    /// box) and empties it.
    fn free_slot(&mut self, slot: usize) {
        let Some(a) = &self.slots[slot] else {
            return;
        };
        self.last[slot] = Some((a.seq.tokens.clone(), a.seq.cache_namespace));
        self.give_up_kv(slot);
        self.slots[slot] = None;
        if let Some(spec) = &mut self.spec {
            spec.release(slot);
        }
    }

    /// Gives the KV of the sequence in `slot` up ([`give_kv`]); it resumes from what the
    /// prefix cache keeps.
    fn give_up_kv(&mut self, slot: usize) {
        let a = self.slots[slot].as_mut().expect("slot is active");
        give_kv(
            &mut self.exec,
            &mut self.cache,
            (&mut self.host, &self.disk),
            &mut self.front,
            &mut a.seq,
        );
    }

    /// This step's batch: which positions of which slots, within the row and time
    /// budgets, with KV room reserved for all of them ([`planner::plan`]).
    fn plan(&mut self) -> Vec<Planned> {
        let cost = self.cost.clone();
        let ub = self.cfg.n_ubatch;
        let predict = |s: &Shape| cost.predict_step(s, ub);
        planner::plan(&self.limits(&predict), self)
    }

    fn limits<'a>(&self, predict: &'a dyn Fn(&Shape) -> f64) -> Limits<'a> {
        Limits {
            n_batch: self.cfg.n_batch,
            budget: self.cfg.step_budget,
            predict,
            align: match self.exec.kv().snapshots() {
                true => BLOCK_SIZE,
                false => 1,
            },
        }
    }

    /// The step drafts would join, as the planner would give it: the `decoding` rows, the
    /// rows the budget leaves the `waiting` prompts (`(computed, pending)`, oldest first),
    /// and the budget's target.
    fn base_step(&self, decoding: Shape, waiting: &[(usize, usize)]) -> Base {
        let ub = self.cfg.n_ubatch;
        let predict = |s: &Shape| self.cost.predict_step(s, ub);
        let limits = self.limits(&predict);
        let cap = planner::step_target(&limits, &decoding);
        let rows_left = self.cfg.n_batch.saturating_sub(decoding.rows);
        let shares = planner::prompt_shares(&limits, cap, decoding, rows_left, waiting);
        Base {
            shape: planner::with_prompts(decoding, &shares, waiting),
            cap,
            reading: shares.iter().any(|&n| n > 0),
        }
    }

    fn active(&self, slot: usize) -> &Active {
        self.slots[slot].as_ref().expect("slot is active")
    }

    /// A sequence with no KV takes the cached blocks of its longest cached prefix.
    fn lookup_prefix(&mut self, slot: usize) {
        let a = self.slots[slot].as_mut().expect("slot is active");
        let cached = a.seq.cache_prompt || a.resumed;
        if !a.seq.kv.is_empty() || !cached || self.front.is_some() {
            return;
        }
        let max = a.seq.tokens.len() - 1;
        let cached = self
            .cache
            .peek(self.exec.kv(), &a.seq.tokens, max, a.seq.cache_namespace);
        match self.live_prefix(slot) {
            Some(blocks) if blocks.len() * BLOCK_SIZE > cached => {
                let a = self.slots[slot].as_mut().expect("slot is active");
                self.exec.kv_mut().share(&blocks, &mut a.seq.kv);
            }
            _ => {
                let a = self.slots[slot].as_mut().expect("slot is active");
                let ns = a.seq.cache_namespace;
                self.cache
                    .take(self.exec.kv_mut(), &mut a.seq.kv, &a.seq.tokens, max, ns);
            }
        }
        let n = self.read_back(slot);
        let a = self.slots[slot].as_mut().expect("slot is active");
        if !a.resumed {
            a.seq.n_cached = n;
            self.counters.tokens.cached_tokens_total += n as u64;
        }
    }

    /// The full computed blocks of the live sequence that shares the longest prompt prefix
    /// with `slot`'s (in its namespace, short of its last token, as far as its sliding
    /// window kept them: [`kv::KvPool::usable`]), for `slot` to hold too: requests with a
    /// common prefix running at once compute it once.
    fn live_prefix(&self, slot: usize) -> Option<Vec<u32>> {
        let a = &self.active(slot).seq;
        let max = a.tokens.len() - 1;
        self.slots
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != slot)
            .filter_map(|(_, s)| s.as_ref().map(|s| &s.seq))
            .filter(|s| s.cache_namespace == a.cache_namespace)
            .map(|s| {
                let n = s.tokens[..s.kv.len().min(s.tokens.len())]
                    .iter()
                    .zip(&a.tokens[..max])
                    .take_while(|(x, y)| x == y)
                    .count();
                let blocks = &s.kv.blocks()[..n / BLOCK_SIZE];
                &blocks[..self.exec.kv().usable(blocks)]
            })
            .max_by_key(|b| b.len())
            .filter(|b| !b.is_empty())
            .map(<[u32]>::to_vec)
    }

    /// Reserves KV for `positions` positions of `slot`, evicting the prefix cache and then
    /// preempting younger requests outside `plan`. False when there is no room.
    fn make_room(&mut self, slot: usize, positions: usize, plan: &[Planned]) -> bool {
        loop {
            let a = self.slots[slot].as_mut().expect("slot is active");
            if self.exec.kv_mut().reserve(&mut a.seq.kv, positions).is_ok() {
                return true;
            }
            let needed = positions.div_ceil(BLOCK_SIZE) - a.seq.kv.capacity() / BLOCK_SIZE;
            let order = a.order;
            if self.cache.evict(self.exec.kv_mut(), needed) {
                continue;
            }
            let holders: Vec<Holder> = self
                .slots
                .iter()
                .enumerate()
                .filter_map(|(i, v)| {
                    v.as_ref().map(|v| Holder {
                        order: v.order,
                        slot: i,
                        capacity: v.seq.kv.capacity(),
                        pinned: plan.iter().any(|p| p.slot == i) || self.cohorts.in_flight(i),
                    })
                })
                .collect();
            let Some(victim) = planner::victim(&holders, order) else {
                return false;
            };
            let v = self.slots[victim].as_mut().expect("victim is active");
            v.resumed = true;
            v.seq.draft.clear();
            self.counters.requests.preemptions_total += 1;
            self.give_up_kv(victim);
        }
    }
}

impl Slots for Engine {
    fn candidates(&self) -> Vec<(u64, usize)> {
        self.slots
            .iter()
            .enumerate()
            .filter(|&(i, _)| self.cohorts.in_turn(i))
            .filter_map(|(i, a)| a.as_ref().map(|a| (a.order, i)))
            .collect()
    }

    fn prepare(&mut self, slot: usize) {
        self.lookup_prefix(slot);
        let a = self.slots[slot].as_mut().expect("slot is active");
        if !a.resumed {
            a.seq.report_start();
        }
    }

    fn pending(&self, slot: usize) -> usize {
        self.active(slot).seq.pending()
    }

    fn decoding(&self, slot: usize) -> bool {
        self.active(slot).seq.is_decoding()
    }

    fn cut_draft(&mut self, slot: usize, keep: usize) -> usize {
        let draft = &mut self.slots[slot].as_mut().expect("slot is active").seq.draft;
        draft.truncate(keep);
        draft.len()
    }

    fn computed(&self, slot: usize) -> usize {
        self.active(slot).seq.kv.len()
    }

    fn fit_images(&self, slot: usize, from: usize, n: usize, room: usize) -> usize {
        self.active(slot).seq.fit_images(from, n, room)
    }

    /// [`Engine::make_room`]; a split model's box then streams the slot's known tokens
    /// ahead.
    fn make_room(&mut self, slot: usize, positions: usize, plan: &[Planned]) -> bool {
        let from = self.computed(slot);
        let fits = Engine::make_room(self, slot, positions, plan);
        if fits {
            self.stream(slot, from, positions - from);
        }
        fits
    }
}

/// Gives a sequence's KV up: to the prefix cache (and its host tier), or (split) back to
/// the pool, the box freeing the session's too (a failing box is noticed at the next
/// forward).
fn give_kv(
    exec: &mut Executor,
    cache: &mut PrefixCache,
    (host, disk): (&mut Option<kv::HostCache>, &Option<disk_tier::DiskCache>),
    front: &mut Option<Box<dyn Front>>,
    seq: &mut Sequence,
) {
    if let Some(host) = host {
        host_tier::spill(exec, host, disk.as_ref(), seq);
    }
    let kv = exec.kv_mut();
    match front {
        None => cache.give(kv, &mut seq.kv, &seq.tokens, seq.cache_namespace),
        Some(_) => release_kv(kv, front, seq),
    }
}

/// The prefix cache's host and disk tiers `cfg` asks for; asking for them where the pool
/// cannot use them is an error.
fn tiers(
    exec: &Executor,
    cfg: &EngineConfig,
    split: bool,
) -> Result<(Option<kv::HostCache>, Option<disk_tier::DiskCache>)> {
    let asked = cfg.cache_ram_mib > 0 || cfg.cache_dir.is_some();
    if !asked {
        return Ok((None, None));
    }
    let kv = exec.kv().config();
    if !host_tier::tiers_fit(kv, split) {
        return Err(crate::Error::Config(
            "--cache-ram and --cache-dir keep prompts of models not split whose recurrent \
             states have snapshots (--ctx-checkpoints above 0) and keep no sliding window \
             beside them: leave them out for this one"
                .into(),
        ));
    }
    let disk = cfg
        .cache_dir
        .map(|tier| disk_tier::DiskCache::open(tier, exec.model(), exec.kv().config()))
        .transpose()
        .map_err(|e| crate::Error::Config(format!("--cache-dir: {e}")))?;
    Ok((Some(kv::HostCache::new(cfg.cache_ram_mib << 20)), disk))
}

/// Frees a sequence's KV, here and (split) on the box, without caching it.
fn release_kv(kv: &mut KvPool, front: &mut Option<Box<dyn Front>>, seq: &mut Sequence) {
    kv.release(&mut seq.kv);
    if let Some(f) = front {
        let _ = f.release(seq.task);
    }
}
