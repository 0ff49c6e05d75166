//! The box's compute thread: it owns the stage (model, KV pool, scratch, threads) and the
//! state of every session of the current link, and takes its work from the connection
//! tasks through one channel. Step rows (fast lane) are computed as they come; between
//! them, prompt streams (bulk lane) advance one forward of at most `n_ubatch` rows at a
//! time, so a step waits for at most one such forward.

use std::collections::{HashMap, VecDeque};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::Instant;

use device::Row;
use engine::{ContextConfig, Enter, Executor, FrontSeq, Out};
use model::Model;
use tokio::sync::mpsc::UnboundedSender;

use crate::frame::{Frame, Header, Message, StepRow, VERSION};
use crate::{Error, Result};

/// What the connection tasks hand the compute thread.
pub(crate) enum Job {
    /// A head's fast lane opened link `link`; every session of an earlier link is dropped.
    Link {
        link: u64,
        flags: u8,
        replies: UnboundedSender<Frame>,
    },
    /// The bulk lane of `link` joined it.
    Bulk {
        link: u64,
        replies: UnboundedSender<Frame>,
    },
    /// `link`'s fast lane closed: its sessions are dropped.
    End { link: u64 },
    /// A frame of `link` (Forward, Commit, Release, Stream, Credit).
    Frame { link: u64, frame: Frame },
}

/// A prompt being computed ahead of the head's steps, chunk by chunk.
struct Stream {
    /// The sequence number of its `Stream` frame, which its chunks carry.
    id: u64,
    session: u64,
    /// Position of `tokens[0]`.
    pos: u32,
    tokens: VecDeque<u32>,
    chunk: usize,
    credits: u32,
    /// The chunk being computed (it was paid for with a credit when it started).
    started: Option<Chunk>,
}

impl Stream {
    /// Whether it has a forward to compute: a chunk started, or credit for the next.
    fn may_advance(&self) -> bool {
        self.started.is_some() || self.credits > 0
    }
}

/// A chunk of a stream so far: its first position, the states of its rows computed, and
/// the microseconds they took.
struct Chunk {
    pos: u32,
    states: Vec<f32>,
    compute_us: u64,
}

/// The stage and its sessions; see the module doc.
pub(crate) struct Compute {
    exec: Executor,
    cfg: ContextConfig,
    hash: u64,
    epoch: u64,
    link: u64,
    flags: u8,
    fast: Option<UnboundedSender<Frame>>,
    bulk: Option<UnboundedSender<Frame>>,
    sessions: HashMap<u64, FrontSeq>,
    /// Sessions the head may hold at once.
    max_sessions: usize,
    /// In the order they came; the oldest with credit advances first.
    streams: Vec<Stream>,
}

impl Compute {
    pub(crate) fn new(
        model: Model,
        cfg: ContextConfig,
        hash: u64,
        epoch: u64,
        max_sessions: usize,
    ) -> Result<Self> {
        let exec = Executor::new(model, cfg)?;
        Ok(Compute {
            exec,
            cfg,
            hash,
            epoch,
            link: 0,
            flags: 0,
            fast: None,
            bulk: None,
            sessions: HashMap::new(),
            max_sessions,
            streams: Vec::new(),
        })
    }

    /// Takes jobs until every sender is gone: each waiting job first, then one forward of
    /// a stream with credit; with neither, the threads rest and the thread waits.
    pub(crate) fn run(mut self, jobs: Receiver<Job>) {
        loop {
            let job = if self.streams.iter().any(Stream::may_advance) {
                match jobs.try_recv() {
                    Ok(job) => Some(job),
                    Err(TryRecvError::Empty) => None,
                    Err(TryRecvError::Disconnected) => return,
                }
            } else {
                // The head computes meanwhile: the cores are its.
                self.exec.rest();
                match jobs.recv() {
                    Ok(job) => Some(job),
                    Err(_) => return,
                }
            };
            match job {
                Some(job) => self.job(job),
                None => self.advance_stream(),
            }
        }
    }

    fn frame(&self, seq: u64, session: u64, pos: u32, message: Message) -> Frame {
        Frame {
            header: Header {
                version: VERSION,
                flags: self.flags,
                model_hash: self.hash,
                epoch: self.epoch,
                seq,
                session,
                pos,
            },
            message,
        }
    }

    fn drop_sessions(&mut self) {
        self.streams.clear();
        for (_, mut seq) in self.sessions.drain() {
            self.exec.release(&mut seq.kv);
        }
    }

    fn job(&mut self, job: Job) {
        match job {
            Job::Link {
                link,
                flags,
                replies,
            } => {
                // Sessions belong to their link: a head that connects again replays them.
                self.drop_sessions();
                (self.link, self.flags, self.fast, self.bulk) = (link, flags, Some(replies), None);
            }
            Job::Bulk { link, replies } if link == self.link => self.bulk = Some(replies),
            Job::End { link } if link == self.link => {
                self.drop_sessions();
                (self.fast, self.bulk) = (None, None);
            }
            Job::Frame { link, frame } if link == self.link => self.message(frame),
            Job::Bulk { .. } | Job::End { .. } | Job::Frame { .. } => {}
        }
    }

    fn message(&mut self, frame: Frame) {
        let (seq, session) = (frame.header.seq, frame.header.session);
        match frame.message {
            Message::Forward { rows, .. } if rows.len() > self.cfg.n_ctx => {
                let reason = format!(
                    "a forward of {} rows; this box holds {} positions",
                    rows.len(),
                    self.cfg.n_ctx
                );
                self.reply_fast(self.frame(seq, 0, 0, Message::Refused { reason }));
            }
            Message::Forward { rows, drafts_from } => {
                let t0 = Instant::now();
                let answer = match self.forward(&rows, &drafts_from) {
                    Ok(states) => Message::States {
                        states,
                        compute_us: t0.elapsed().as_micros() as u64,
                    },
                    Err(e) => Message::Refused {
                        reason: e.to_string(),
                    },
                };
                self.reply_fast(self.frame(seq, 0, 0, answer));
            }
            Message::Commit { lens } => {
                for (s, len) in lens {
                    let Some(seq) = self.sessions.get_mut(&s) else {
                        continue;
                    };
                    // A session that could not be computed again holds nothing: its next
                    // rows are refused, and the head replays it.
                    if seq.truncate(&mut self.exec, len as usize).is_err() {
                        self.sessions.remove(&s);
                    }
                }
            }
            Message::Release { sessions } => {
                for s in sessions {
                    self.streams.retain(|st| st.session != s);
                    if let Some(mut seq) = self.sessions.remove(&s) {
                        self.exec.release(&mut seq.kv);
                    }
                }
            }
            Message::Stream { tokens, .. }
                if tokens.is_empty()
                    || frame.header.pos as usize + tokens.len() > self.cfg.n_ctx =>
            {
                let reason = format!(
                    "a stream of {} tokens from position {}; this box holds {} positions",
                    tokens.len(),
                    frame.header.pos,
                    self.cfg.n_ctx
                );
                self.reply_fast(self.frame(seq, session, 0, Message::Refused { reason }));
            }
            Message::Stream { .. }
                if self.streams.len() >= self.max_sessions
                    && !self.streams.iter().any(|st| st.session == session) =>
            {
                let reason = format!(
                    "a stream for a session beyond the {} this box holds for a head (--max-sessions)",
                    self.max_sessions
                );
                self.reply_fast(self.frame(seq, session, 0, Message::Refused { reason }));
            }
            Message::Stream { chunk, tokens } => {
                self.streams.retain(|st| st.session != session);
                self.streams.push(Stream {
                    id: seq,
                    session,
                    pos: frame.header.pos,
                    tokens: tokens.into(),
                    chunk: (chunk as usize).max(1),
                    credits: 0,
                    started: None,
                });
            }
            Message::Credit { chunks } => {
                if let Some(st) = self.streams.iter_mut().find(|st| st.session == session) {
                    st.credits = st.credits.saturating_add(chunks);
                }
            }
            other => {
                let reason = format!("unexpected {other:?}");
                self.reply_fast(self.frame(seq, 0, 0, Message::Refused { reason }));
            }
        }
    }

    fn reply_fast(&self, frame: Frame) {
        if let Some(tx) = &self.fast {
            let _ = tx.send(frame);
        }
    }

    /// One forward of the oldest stream that may: its chunk is sent when complete, and the
    /// stream is done when its tokens are.
    fn advance_stream(&mut self) {
        let Some(i) = self.streams.iter().position(Stream::may_advance) else {
            return;
        };
        let (ub, e) = (self.cfg.n_ubatch, self.exec.model().hparams.hidden_width());
        let st = &mut self.streams[i];
        if st.started.is_none() {
            st.credits -= 1;
            st.started = Some(Chunk {
                pos: st.pos,
                states: Vec::new(),
                compute_us: 0,
            });
        }
        let (id, session) = (st.id, st.session);
        let first = st.started.as_ref().expect("started").pos;
        let n = ub
            .min(first as usize + st.chunk - st.pos as usize)
            .min(st.tokens.len());
        let rows: Vec<StepRow> = (0..n)
            .map(|k| StepRow {
                session,
                pos: st.pos + k as u32,
                token: st.tokens[k],
            })
            .collect();
        let t0 = Instant::now();
        let mut out = vec![0f32; n * e];
        let result = self.forward_chunk(&rows, &[], &mut out);
        let st = &mut self.streams[i];
        let message = match result {
            Err(e) => Message::Refused {
                reason: e.to_string(),
            },
            Ok(()) => {
                let c = st.started.as_mut().expect("started");
                c.states.extend_from_slice(&out);
                c.compute_us += t0.elapsed().as_micros() as u64;
                st.tokens.drain(..n);
                st.pos += n as u32;
                if (st.pos - first) < st.chunk as u32 && !st.tokens.is_empty() {
                    return;
                }
                let c = st.started.take().expect("started");
                Message::States {
                    states: c.states,
                    compute_us: c.compute_us,
                }
            }
        };
        if st.tokens.is_empty() || matches!(message, Message::Refused { .. }) {
            self.streams.remove(i);
        }
        let frame = self.frame(id, session, first, message);
        if let Some(tx) = &self.bulk {
            let _ = tx.send(frame);
        }
    }

    /// The boundary states of `rows` (`[rows, n_embd]`), computed `n_ubatch` rows at a time;
    /// each session's KV grows by its rows, its drafts starting at `drafts_from`.
    fn forward(&mut self, rows: &[StepRow], drafts_from: &[(u64, u32)]) -> Result<Vec<f32>> {
        let e = self.exec.model().hparams.hidden_width();
        let mut states = vec![0f32; rows.len() * e];
        for (chunk, out) in rows
            .chunks(self.cfg.n_ubatch)
            .zip(states.chunks_mut(self.cfg.n_ubatch * e))
        {
            self.forward_chunk(chunk, drafts_from, out)?;
        }
        Ok(states)
    }

    fn forward_chunk(
        &mut self,
        rows: &[StepRow],
        drafts_from: &[(u64, u32)],
        out: &mut [f32],
    ) -> Result<()> {
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
                if !self.sessions.contains_key(&r.session)
                    && self.sessions.len() >= self.max_sessions
                {
                    return Err(Error::Protocol(format!(
                        "session {} would be one more than the {} this box holds for a head (--max-sessions)",
                        r.session, self.max_sessions
                    )));
                }
                ids.push(r.session);
                lens.push(self.sessions.entry(r.session).or_default().kv.len());
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
        let tokens: Vec<u32> = rows.iter().map(|r| r.token).collect();
        // The chunk's sessions leave the map for the forward and come back after it.
        let mut fronts: Vec<FrontSeq> = ids
            .iter()
            .map(|&id| {
                let mut seq = self.sessions.remove(&id).expect("entered above");
                let own = rows.iter().filter(|r| r.session == id);
                let drafts = drafts_from.iter().find(|d| d.0 == id);
                seq.enter(
                    own.map(|r| (r.pos as usize, r.token)),
                    drafts.map(|d| d.1 as usize),
                );
                seq
            })
            .collect();
        let mut seqs: Vec<_> = fronts.iter_mut().map(|f| &mut f.kv).collect();
        let done = self.exec.forward(
            &mut seqs,
            &batch_rows,
            Enter::Tokens(&tokens),
            Out::States(out),
        );
        for (id, seq) in ids.iter().zip(fronts) {
            self.sessions.insert(*id, seq);
        }
        done?;
        Ok(())
    }
}
