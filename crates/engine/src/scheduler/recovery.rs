//! The engine's side of a split model's box: rows entering from it, prompts streamed to
//! it, heartbeats, and getting it back after a failure (reconnect, replay, grace window).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::Engine;
use crate::front::FrontState;
use crate::Placed;

/// How often a lost box is tried again within its grace window.
const RECONNECT_EVERY: Duration = Duration::from_millis(200);

impl Engine {
    pub(super) fn state(&self) -> FrontState {
        FrontState::from_u8(self.front_state.load(Ordering::Acquire))
    }

    pub(super) fn set_state(&self, state: FrontState) {
        self.front_state.store(state as u8, Ordering::Release);
    }

    /// Has the box compute `slot`'s known tokens from `from` ahead of the steps (its prompt,
    /// or all it had when it was preempted), unless it already does. The box computes ahead
    /// only into positions this stage has reserved (so that its KV pool, sized alike, never
    /// runs short): all of them when the pool has room, else this step's `planned`.
    pub(super) fn stream(&mut self, slot: usize, from: usize, planned: usize) {
        let (Some(f), Some(a)) = (&mut self.front, &mut self.slots[slot]) else {
            return;
        };
        let tokens = &a.seq.tokens;
        if tokens.len() < from + 2 || f.streams(a.seq.task) {
            return;
        }
        let end = match self.exec.kv_mut().reserve(&mut a.seq.kv, tokens.len()) {
            Ok(()) => tokens.len(),
            Err(_) => from + planned,
        };
        if end >= from + 2 {
            // A failed send is the next forward's failure, and recovered there.
            let _ = f.stream(a.seq.task, from, &tokens[from..end]);
        }
    }

    /// With a front, the hidden states entering this stage for `rows` (into
    /// `self.entered`; without one, the executor embeds the rows' tokens). When the front
    /// fails, it is reconnected and every live session replayed, again and again within
    /// its grace window (at once, without waiting, when it was already down).
    pub(super) fn enter(
        &mut self,
        rows: &[(u64, usize, u32)],
        drafts_from: &[(u64, usize)],
        images: &[Placed<'_>],
    ) -> Result<(), String> {
        let Some(f) = &mut self.front else {
            return Ok(());
        };
        let n = rows.len() * self.exec.model().hparams.hidden_width();
        self.exec.rest();
        let result = match f.forward(rows, drafts_from, images, &mut self.entered[..n]) {
            Err(_) => self.regain(&mut |e| {
                let f = e.front.as_mut().expect("a split model");
                f.forward(rows, drafts_from, images, &mut e.entered[..n])
            }),
            ok => ok,
        };
        if let Some(f) = &mut self.front {
            for (a, b) in f.take_busy() {
                self.overlap.front(a, b);
            }
        }
        result
    }

    /// While idle: a box that is down is tried again; one that does not answer a
    /// heartbeat is lost, and got back within its grace.
    pub(super) fn heartbeat(&mut self) {
        let down = self.state() == FrontState::Down;
        let Some(f) = &mut self.front else { return };
        if down {
            if self.recover().is_ok() {
                self.set_state(FrontState::Up);
            }
        } else if f.heartbeat().is_err() {
            let _ = self.regain(&mut |_| Ok(()));
        }
    }

    /// After the front failed: reconnects, replays and tries `retry` again until it works
    /// or the grace window ends (once, at once, when the front was already down); the
    /// error is the last attempt's.
    fn regain(
        &mut self,
        retry: &mut dyn FnMut(&mut Engine) -> Result<(), String>,
    ) -> Result<(), String> {
        let grace = self.front.as_ref().expect("a split model").grace();
        let deadline = match self.state() {
            FrontState::Down => Instant::now(),
            _ => Instant::now() + grace,
        };
        if self.state() == FrontState::Up {
            self.set_state(FrontState::Recovering);
        }
        loop {
            let why = match self.recover().and_then(|()| retry(self)) {
                Ok(()) => {
                    self.set_state(FrontState::Up);
                    return Ok(());
                }
                Err(why) => why,
            };
            if Instant::now() >= deadline {
                self.set_state(FrontState::Down);
                return Err(why);
            }
            std::thread::sleep(RECONNECT_EVERY);
        }
    }

    /// Reconnects the front and replays the computed positions of every live session.
    pub(super) fn recover(&mut self) -> Result<(), String> {
        let front = self.front.as_mut().expect("a split model");
        front.reconnect()?;
        self.counters.split.box_reconnects_total += 1;
        for a in self.slots.iter().flatten() {
            let rows: Vec<(u64, usize, u32)> = (0..a.seq.kv.len())
                .map(|pos| (a.seq.task, pos, a.seq.row_token(pos)))
                .collect();
            for chunk in rows.chunks(self.cfg.n_ubatch) {
                front.replay(chunk)?;
                self.counters.split.box_replayed_rows_total += chunk.len() as u64;
            }
        }
        Ok(())
    }

    /// Ends every live request: the box is down past its grace window.
    pub(super) fn give_up(&mut self, why: &str) {
        self.cohorts.drop_inflight();
        for slot in 0..self.slots.len() {
            let Some(mut a) = self.slots[slot].take() else {
                continue;
            };
            a.seq.unavailable(format!(
                "the box of this split model is down ({why}); retry later"
            ));
            self.counters.requests.requests_failed += 1;
            super::give_kv(
                &mut self.exec,
                &mut self.cache,
                (&mut self.host, &self.disk),
                &mut self.front,
                &mut a.seq,
            );
            if let Some(spec) = &mut self.spec {
                spec.release(slot);
            }
        }
    }
}
