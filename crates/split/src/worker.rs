//! The box: the embeddings and blocks `0..L` of a model, a KV pool of those blocks for
//! every session of the head, and a TCP listener. It computes the rows the head sends
//! and returns their hidden states at the boundary.
//!
//! One head at a time; requests are answered in the order they come. Computing blocks the
//! connection meanwhile (heartbeats wait for the step): the pipelined prefill lane and
//! the heartbeat deadline are the next part of issue 7.

use std::collections::HashMap;

use engine::ContextConfig;
use kernels::ThreadPool;
use kv::{KvPool, SeqKv};
use model::{Batch, Model, Row, Scratch};
use tokio::net::TcpListener;

use crate::frame::{Frame, Header, Message, StepRow, F16_STATES, VERSION};
use crate::{Conn, Error, Result};

/// A box: the first stage of a model and the state of every session.
pub struct BoxWorker {
    model: Model,
    kv: KvPool,
    scratch: Scratch,
    pool: ThreadPool,
    /// Sizes: KV positions over all sessions, rows per forward, threads, KV type, precision.
    cfg: ContextConfig,
    /// `[n_ubatch, n_embd]`.
    hidden: Vec<f32>,
    sessions: HashMap<u64, SeqKv>,
    hash: u64,
    epoch: u64,
}

impl BoxWorker {
    /// A box over `model`, which must be a first stage (embeddings and blocks `0..L`).
    pub fn new(model: Model, cfg: ContextConfig) -> Result<BoxWorker> {
        let stage = &model.stage;
        if !stage.embed || stage.layers.start != 0 || stage.head {
            return Err(Error::Protocol(format!(
                "a box holds the embeddings and blocks 0..L, not {stage:?}"
            )));
        }
        let hp = &model.hparams;
        let kv = KvPool::new(cfg.kv_config(&model))?;
        let epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            ^ (std::process::id() as u64) << 32;
        Ok(BoxWorker {
            hash: crate::model_hash(&model.file),
            scratch: Scratch::new(hp, cfg.n_ubatch).with_precision(cfg.precision),
            hidden: vec![0.0; cfg.n_ubatch * hp.n_embd],
            pool: ThreadPool::new(cfg.n_threads),
            sessions: HashMap::new(),
            model,
            kv,
            cfg,
            epoch,
        })
    }

    /// This start's epoch (a new one every time a box starts).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Binds `addr` and serves heads there on a runtime of its own until the listener
    /// fails; `on_listening` is told the bound address first (for a port of 0).
    pub fn serve_blocking(
        self,
        addr: &str,
        on_listening: impl FnOnce(std::net::SocketAddr),
    ) -> Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async move {
            let listener = TcpListener::bind(addr).await?;
            on_listening(listener.local_addr()?);
            self.serve(listener).await
        })
    }

    /// Serves heads, one connection after another, until the listener fails.
    pub async fn serve(mut self, listener: TcpListener) -> Result<()> {
        loop {
            let (stream, _) = listener.accept().await?;
            let mut conn = Conn::new(stream)?;
            if let Err(e) = self.session(&mut conn).await {
                let _ = conn
                    .send(&self.reply(
                        0,
                        Message::Refused {
                            reason: e.to_string(),
                        },
                    ))
                    .await;
            }
            // Sessions belong to their connection: a head that connects again replays them.
            for (_, mut seq) in self.sessions.drain() {
                self.kv.release(&mut seq);
            }
        }
    }

    fn reply(&self, seq: u64, message: Message) -> Frame {
        self.reply_flags(seq, 0, message)
    }

    fn reply_flags(&self, seq: u64, flags: u8, message: Message) -> Frame {
        Frame {
            header: Header {
                version: VERSION,
                flags,
                model_hash: self.hash,
                epoch: self.epoch,
                seq,
                ..Header::default()
            },
            message,
        }
    }

    /// One head's connection: a hello, then requests until it closes.
    async fn session(&mut self, conn: &mut Conn) -> Result<()> {
        let Some(hello) = conn.recv().await? else {
            return Ok(());
        };
        let split = self.model.stage.layers.end as u32;
        let n_embd = self.model.hparams.n_embd as u32;
        match hello.message {
            Message::Hello { .. } if hello.header.model_hash != self.hash => {
                return Err(Error::Refused(format!(
                    "the head's model (hash {:016x}) is not the box's ({:016x})",
                    hello.header.model_hash, self.hash
                )));
            }
            Message::Hello {
                split: s,
                n_embd: e,
            } if s != split || e != n_embd => {
                return Err(Error::Refused(format!(
                    "the head starts at block {s} (width {e}); this box ends at block {split} (width {n_embd})"
                )));
            }
            Message::Hello { .. } => {}
            other => {
                return Err(Error::Protocol(format!("expected a hello, got {other:?}")));
            }
        }
        let flags = hello.header.flags & F16_STATES;
        conn.send(&self.reply(hello.header.seq, Message::Welcome { split }))
            .await?;
        loop {
            // The head computes its blocks meanwhile: the cores are its.
            self.pool.rest();
            let Some(frame) = conn.recv().await? else {
                break;
            };
            let seq = frame.header.seq;
            match frame.message {
                Message::Forward { rows } => {
                    let t0 = std::time::Instant::now();
                    let answer = match self.forward(&rows) {
                        Ok(states) => Message::States {
                            states,
                            compute_us: t0.elapsed().as_micros() as u64,
                        },
                        Err(e) => Message::Refused {
                            reason: e.to_string(),
                        },
                    };
                    conn.send(&self.reply_flags(seq, flags, answer)).await?;
                }
                Message::Commit { lens } => {
                    for (s, len) in lens {
                        if let Some(seq_kv) = self.sessions.get_mut(&s) {
                            self.kv.truncate(seq_kv, len as usize);
                        }
                    }
                }
                Message::Release { sessions } => {
                    for s in sessions {
                        if let Some(mut seq_kv) = self.sessions.remove(&s) {
                            self.kv.release(&mut seq_kv);
                        }
                    }
                }
                Message::Ping => conn.send(&self.reply(seq, Message::Pong)).await?,
                other => {
                    return Err(Error::Protocol(format!("unexpected {other:?}")));
                }
            }
        }
        Ok(())
    }

    /// The boundary states of `rows` (`[rows, n_embd]`), computed `n_ubatch` rows at a time;
    /// each session's KV grows by its rows.
    fn forward(&mut self, rows: &[StepRow]) -> Result<Vec<f32>> {
        let e = self.model.hparams.n_embd;
        let mut states = vec![0f32; rows.len() * e];
        for (chunk, out) in rows
            .chunks(self.cfg.n_ubatch)
            .zip(states.chunks_mut(self.cfg.n_ubatch * e))
        {
            self.forward_chunk(chunk, out)?;
        }
        Ok(states)
    }

    fn forward_chunk(&mut self, rows: &[StepRow], out: &mut [f32]) -> Result<()> {
        // The sessions of the chunk in order, and the length each has after it.
        let (mut ids, mut lens): (Vec<u64>, Vec<usize>) = (Vec::new(), Vec::new());
        let mut batch_rows = Vec::with_capacity(rows.len());
        for r in rows {
            if ids.last() != Some(&r.session) {
                if ids.contains(&r.session) {
                    return Err(Error::Protocol(format!(
                        "the rows of session {} are not together",
                        r.session
                    )));
                }
                ids.push(r.session);
                lens.push(self.sessions.entry(r.session).or_default().len());
            }
            let next = lens.last_mut().expect("pushed with its session");
            if r.pos as usize != *next {
                return Err(Error::Protocol(format!(
                    "session {} sent position {} where the box expects {next}",
                    r.session, r.pos
                )));
            }
            *next += 1;
            batch_rows.push(Row {
                pos: r.pos as usize,
                seq: ids.len() - 1,
            });
        }
        for (id, &len) in ids.iter().zip(&lens) {
            let seq = self.sessions.get_mut(id).expect("entered above");
            self.kv.reserve(seq, len)?;
        }
        let tokens: Vec<u32> = rows.iter().map(|r| r.token).collect();
        let e = self.model.hparams.n_embd;
        let hidden = &mut self.hidden[..rows.len() * e];
        self.model.embed(&tokens, hidden)?;
        let seqs: Vec<&SeqKv> = ids.iter().map(|id| &self.sessions[id]).collect();
        self.model.forward_layers(
            self.model.stage.layers.clone(),
            hidden,
            Batch {
                rows: &batch_rows,
                seqs: &seqs,
            },
            &mut self.kv,
            &mut self.scratch,
            &self.pool,
        );
        for (id, len) in ids.iter().zip(lens) {
            let seq = self.sessions.get_mut(id).expect("entered above");
            self.kv.commit(seq, len);
        }
        out.copy_from_slice(hidden);
        Ok(())
    }
}
