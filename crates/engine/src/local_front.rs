//! The first stage of a model split between two devices of one process (`-ngl N`: the
//! embeddings and the first blocks on the CPU, the last `N` blocks and the output head on
//! the GPU): a [`Front`] whose stage is an [`Executor`] here, computing each step's rows
//! when the engine asks for them.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use device::Row;
use model::Model;

use crate::front::{Front, FrontSeq, FrontStats};
use crate::{ContextConfig, Enter, Executor, Out, Placed};

/// See the module doc. Sessions are the engine's task ids, each with its KV here (kept,
/// empty, across a reconnect: a session with images' rows cannot be replayed from tokens).
pub struct LocalFront {
    exec: Executor,
    sessions: HashMap<u64, FrontSeq>,
    busy: Vec<(Instant, Instant)>,
    stats: FrontStats,
}

impl LocalFront {
    /// `model` is the first stage ([`model::Part::First`]); `config` sizes its KV pool
    /// like the engine's (the same positions for the same sessions) on its own device.
    pub fn new(model: Model, config: ContextConfig) -> crate::Result<Self> {
        Ok(LocalFront {
            exec: Executor::new(model, config)?,
            sessions: HashMap::new(),
            busy: Vec::new(),
            stats: FrontStats::default(),
        })
    }
}

impl Front for LocalFront {
    fn forward(
        &mut self,
        rows: &[(u64, usize, u32)],
        drafts_from: &[(u64, usize)],
        images: &[Placed<'_>],
        hidden: &mut [f32],
    ) -> Result<(), String> {
        let mut ids: Vec<u64> = Vec::new();
        let mut batch_rows = Vec::with_capacity(rows.len());
        for &(session, pos, _) in rows {
            if ids.last() != Some(&session) {
                ids.push(session);
            }
            batch_rows.push(Row {
                pos,
                seq: ids.len() - 1,
            });
        }
        let tokens: Vec<u32> = rows.iter().map(|r| r.2).collect();
        let mut fronts: Vec<FrontSeq> = ids
            .iter()
            .map(|&id| {
                let mut seq = self.sessions.remove(&id).unwrap_or_default();
                let own = rows.iter().filter(|r| r.0 == id).map(|r| (r.1, r.2));
                let drafts = drafts_from.iter().find(|d| d.0 == id).map(|d| d.1);
                seq.enter(own, drafts);
                seq.pictured |= images.iter().any(|p| rows[p.rows.start].0 == id);
                seq
            })
            .collect();
        let mut seqs: Vec<_> = fronts.iter_mut().map(|f| &mut f.kv).collect();
        let enter = match images {
            [] => Enter::Tokens(&tokens),
            _ => Enter::Pictured {
                tokens: &tokens,
                images,
            },
        };
        let t0 = Instant::now();
        let done = self
            .exec
            .forward(&mut seqs, &batch_rows, enter, Out::States(hidden));
        let t1 = Instant::now();
        self.busy.push((t0, t1));
        for (id, seq) in ids.iter().zip(fronts) {
            self.sessions.insert(*id, seq);
        }
        done.map_err(|e| e.to_string())?;
        self.stats.requests += 1;
        self.stats.rows += rows.len() as u64;
        self.stats.compute_seconds += (t1 - t0).as_secs_f64();
        self.stats.wait_seconds += (t1 - t0).as_secs_f64();
        Ok(())
    }

    fn submit(&mut self, _: &[(u64, usize, u32)], _: &[(u64, usize)]) -> Result<(), String> {
        Ok(())
    }

    fn truncate(&mut self, session: u64, len: usize) -> Result<(), String> {
        match self.sessions.get_mut(&session) {
            Some(seq) => match seq.truncate(&mut self.exec, len) {
                Ok(_) => Ok(()),
                Err(e) => Err(e.to_string()),
            },
            None => Ok(()),
        }
    }

    fn release(&mut self, session: u64) -> Result<(), String> {
        if let Some(mut seq) = self.sessions.remove(&session) {
            self.exec.release(&mut seq.kv);
        }
        Ok(())
    }

    fn reconnect(&mut self) -> Result<(), String> {
        for seq in self.sessions.values_mut() {
            self.exec.release(&mut seq.kv);
        }
        Ok(())
    }

    fn replay(&mut self, rows: &[(u64, usize, u32)]) -> Result<(), String> {
        let pictured = |s: &u64| self.sessions.get(s).is_some_and(|q| q.pictured);
        if rows.iter().any(|r| pictured(&r.0)) {
            return Err("a request with images cannot be recomputed from its tokens".into());
        }
        let e = self.exec.model().hparams.hidden_width();
        let mut states = vec![0f32; rows.len() * e];
        self.forward(rows, &[], &[], &mut states)
    }

    fn grace(&self) -> Duration {
        Duration::ZERO
    }

    fn pipelined(&self) -> bool {
        false
    }

    fn stream(&mut self, _: u64, _: usize, _: &[u32]) -> Result<(), String> {
        Ok(())
    }

    fn streams(&self, _: u64) -> bool {
        false
    }

    fn heartbeat(&mut self) -> Result<(), String> {
        Ok(())
    }

    fn take_busy(&mut self) -> Vec<(Instant, Instant)> {
        std::mem::take(&mut self.busy)
    }

    fn stats(&self) -> FrontStats {
        self.stats
    }
}
