//! The head's side of the link: a blocking client for the engine thread, which owns the
//! token log of every session and drives the box step by step.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use model::Model;
use tokio::runtime::Runtime;

use crate::auth::NONCE_BYTES;
use crate::dial::{self, timed_out, Credentials};
use crate::frame::{Frame, Header, Message, StepRow, BULK_LANE, F16_STATES, FAST_LANE, VERSION};
use crate::{Conn, Error, Result};

/// How hidden states cross the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateType {
    /// Exact: the split's text is the whole model's.
    F32,
    /// Half the bytes, rounded.
    F16,
}

/// How long a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the box may take to answer a hello or a ping.
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);
/// The per-step deadline: this, plus [`DEADLINE_PER_ROW`] for each row of the step (or of
/// a stream's chunk). A box that does not answer in time (its compute stuck) is lost.
const STEP_DEADLINE: Duration = Duration::from_secs(10);
const DEADLINE_PER_ROW: Duration = Duration::from_millis(50);
/// While it waits, the head pings the box after this long without a frame; a box that
/// sends nothing for [`SILENCE`] after a ping (it answers pings while it computes) is
/// lost, however long its step may take.
const HEARTBEAT: Duration = Duration::from_secs(1);
const SILENCE: Duration = Duration::from_secs(2);
/// Chunks of a stream the box may compute ahead of the head (its credits).
const WINDOW: u32 = 2;
/// Rows per chunk of a prompt stream, unless told otherwise.
pub const DEFAULT_CHUNK: usize = 2048;

/// The rows of a stream's chunk asked for as `chunk`: at least 1, at most what fits a
/// frame of [`crate::MAX_FRAME`] bytes for a model `n_embd` wide.
pub fn chunk_rows(chunk: usize, n_embd: usize) -> usize {
    chunk.clamp(1, (crate::MAX_FRAME - 4096) / (4 * n_embd.max(1)))
}

/// What the head holds of streamed states at most: [`WINDOW`] chunks of `chunk` rows for
/// each of `sessions` streams (the memory plan counts it).
pub fn stream_bytes(chunk: usize, n_embd: usize, sessions: usize) -> u64 {
    (WINDOW as usize * chunk_rows(chunk, n_embd) * n_embd * 4 * sessions) as u64
}

/// A stream's states as they arrive: positions `next..end` are still to be taken.
struct Incoming {
    /// The sequence number of its `Stream` frame (chunks of an earlier stream of the
    /// session carry another).
    id: u64,
    next: u32,
    end: u32,
    /// The first position of the next chunk to arrive.
    arriving: u32,
    /// Chunks arrived and not yet wholly taken: first position, states.
    chunks: VecDeque<(u32, Vec<f32>)>,
}

/// A connection to a box that holds blocks `0..split` of the head's model: a fast lane for
/// steps and a bulk lane for prompt streams. It records a hash of every boundary state the
/// box returned, by session and position, so that a replay after a reconnect is checked
/// against the first computation.
pub struct BoxClient {
    rt: Runtime,
    addr: SocketAddr,
    credentials: Credentials,
    /// Names this head to the box across its reconnects.
    head: u64,
    fast: Conn,
    bulk: Conn,
    link: u64,
    hash: u64,
    flags: u8,
    epoch: u64,
    seq: u64,
    split: u32,
    n_embd: usize,
    grace: Duration,
    chunk: usize,
    pipelined: bool,
    /// Per session: the hash of the state at each position.
    states: HashMap<u64, Vec<u64>>,
    streams: HashMap<u64, Incoming>,
    /// Fast-lane replies that came while the head waited for something else, by request.
    replies: HashMap<u64, Frame>,
    /// Fast-lane requests sent ahead of their step ([`Self::submit`]): rows, request.
    submitted: VecDeque<(Vec<StepRow>, u64)>,
    /// The sequence number of the last pong.
    pong: u64,
    /// Per lane: when the head pinged a box that has sent nothing on it since.
    unanswered: [Option<Instant>; 2],
    /// Per lane: bytes of frames not yet whole when last looked (a long frame arriving is
    /// no silence).
    arriving: [usize; 2],
    /// A send failed or timed out: the connection may have lost a frame, so every call
    /// fails until [`Self::reconnect`].
    broken: bool,
    /// The box's compute intervals (on this side's clock) not yet taken by the engine.
    busy: Vec<(Instant, Instant)>,
    stats: engine::FrontStats,
}

/// FNV-1a over the bits of a state row.
fn state_hash(row: &[f32]) -> u64 {
    row.iter().fold(0xcbf2_9ce4_8422_2325, |h, v| {
        v.to_bits()
            .to_le_bytes()
            .iter()
            .fold(h, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
    })
}

impl BoxClient {
    /// Connects both lanes and says hello: the box must hold blocks
    /// `0..model.stage.layers.start` of the same file (same [`crate::model_hash`]) and
    /// take `credentials`, or it refuses and this is the error.
    pub fn connect(
        addr: SocketAddr,
        model: &Model,
        states: StateType,
        credentials: Credentials,
    ) -> Result<BoxClient> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let fast = Self::open(&rt, addr, &credentials)?;
        let bulk = Self::open(&rt, addr, &credentials)?;
        let mut head = [0u8; 8];
        getrandom::fill(&mut head).map_err(|e| Error::Key(format!("no randomness: {e}")))?;
        let mut client = BoxClient {
            rt,
            addr,
            credentials,
            head: u64::from_le_bytes(head),
            fast,
            bulk,
            link: 0,
            hash: crate::model_hash(&model.file),
            flags: if states == StateType::F16 {
                F16_STATES
            } else {
                0
            },
            epoch: 0,
            seq: 0,
            split: model.stage.layers.start as u32,
            n_embd: model.hparams.hidden_width(),
            grace: Duration::from_secs(10),
            chunk: DEFAULT_CHUNK,
            pipelined: false,
            states: HashMap::new(),
            streams: HashMap::new(),
            replies: HashMap::new(),
            submitted: VecDeque::new(),
            pong: 0,
            unanswered: [None; 2],
            arriving: [0; 2],
            broken: false,
            busy: Vec::new(),
            stats: engine::FrontStats::default(),
        };
        client.handshake()?;
        Ok(client)
    }

    /// How long the engine tries to reconnect to a lost box (default 10 s).
    pub fn with_grace(mut self, grace: Duration) -> BoxClient {
        self.grace = grace;
        self
    }

    /// Rows per chunk of a prompt stream (default [`DEFAULT_CHUNK`]; see [`chunk_rows`]).
    pub fn with_chunk(mut self, chunk: usize) -> BoxClient {
        self.chunk = chunk_rows(chunk, self.n_embd);
        self
    }

    /// Whether the engine pipelines two cohorts of requests through the two stages (see
    /// [`engine::Front::pipelined`]; default no).
    pub fn with_pipeline(mut self, pipelined: bool) -> BoxClient {
        self.pipelined = pipelined;
        self
    }

    /// The epoch of the box this client talks to.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    fn open(rt: &Runtime, addr: SocketAddr, credentials: &Credentials) -> Result<Conn> {
        rt.block_on(dial::open(addr, credentials.tls.as_ref(), CONNECT_TIMEOUT))
    }

    /// The fast lane's hello opens a link, the bulk lane's joins it.
    fn handshake(&mut self) -> Result<()> {
        let (link, epoch) = self.hello(FAST_LANE, 0)?;
        (self.link, self.epoch) = (link, epoch);
        match self.hello(BULK_LANE, link)? {
            (l, e) if l == link && e == epoch => Ok(()),
            (l, _) => Err(Error::Protocol(format!(
                "the bulk lane joined link {l}, not {link}"
            ))),
        }
    }

    fn hello(&mut self, lane: u8, link: u64) -> Result<(u64, u64)> {
        let frame = self.frame(
            0,
            0,
            Message::Hello {
                split: self.split,
                n_embd: self.n_embd as u32,
                lane,
                link,
                head: self.head,
                nonce: [0; NONCE_BYTES],
                proof: [0; NONCE_BYTES],
            },
        );
        let key = self.credentials.key.clone();
        let (rt, conn) = self.lane(lane);
        let welcome = rt.block_on(dial::hello(conn, frame, key.as_ref(), REPLY_TIMEOUT))?;
        match welcome.message {
            Message::Welcome { split, link, .. } if split == self.split => {
                self.unanswered = [None; 2];
                Ok((link, welcome.header.epoch))
            }
            other => Err(Error::Protocol(format!(
                "expected a welcome for block {}, got {other:?}",
                self.split
            ))),
        }
    }

    /// Connects again; the box then holds no session of this head (each must be replayed,
    /// and its stream, if it had one, started again).
    pub fn reconnect(&mut self) -> Result<()> {
        for conn in [&mut self.fast, &mut self.bulk] {
            self.stats.bytes_sent += std::mem::take(&mut conn.sent);
            self.stats.bytes_received += std::mem::take(&mut conn.received);
        }
        self.streams.clear();
        self.replies.clear();
        self.submitted.clear();
        self.broken = false;
        self.fast = Self::open(&self.rt, self.addr, &self.credentials)?;
        self.bulk = Self::open(&self.rt, self.addr, &self.credentials)?;
        self.handshake()
    }

    /// What crossed the link so far (all connections).
    pub fn stats(&self) -> engine::FrontStats {
        engine::FrontStats {
            bytes_sent: self.stats.bytes_sent + self.fast.sent + self.bulk.sent,
            bytes_received: self.stats.bytes_received + self.fast.received + self.bulk.received,
            ..self.stats
        }
    }

    fn frame(&mut self, session: u64, pos: u32, message: Message) -> Frame {
        self.seq += 1;
        Frame {
            header: Header {
                version: VERSION,
                flags: self.flags,
                model_hash: self.hash,
                epoch: self.epoch,
                seq: self.seq,
                session,
                pos,
            },
            message,
        }
    }

    /// The runtime, and the connection of `lane`.
    fn lane(&mut self, lane: u8) -> (&Runtime, &mut Conn) {
        match lane {
            FAST_LANE => (&self.rt, &mut self.fast),
            _ => (&self.rt, &mut self.bulk),
        }
    }

    /// Fails once a send failed, until the link is made again.
    fn unbroken(&self) -> Result<()> {
        match self.broken {
            false => Ok(()),
            true => Err(Error::Protocol(
                "an earlier frame to the box was not sent; the link must be made again".into(),
            )),
        }
    }

    fn send(&mut self, lane: u8, session: u64, pos: u32, message: Message) -> Result<u64> {
        self.unbroken()?;
        let frame = self.frame(session, pos, message);
        let (rt, conn) = self.lane(lane);
        // A box that reads nothing for this long (stopped, cut off) is lost.
        let sent =
            rt.block_on(async { tokio::time::timeout(STEP_DEADLINE, conn.send(&frame)).await });
        let sent = sent.map_err(|_| timed_out("the box took no frame for the step's deadline"));
        if !matches!(sent, Ok(Ok(()))) {
            self.broken = true;
        }
        sent??;
        Ok(frame.header.seq)
    }

    /// Sends `rows` to be computed on the fast lane, with the first draft of those of their
    /// sessions in `drafts_from`; the request's number.
    fn send_forward(&mut self, rows: &[StepRow], drafts_from: &[(u64, u32)]) -> Result<u64> {
        let drafts_from = drafts_from
            .iter()
            .filter(|d| rows.iter().any(|r| r.session == d.0))
            .copied()
            .collect();
        let rows = rows.to_vec();
        self.send(FAST_LANE, 0, 0, Message::Forward { rows, drafts_from })
    }

    /// Takes the next frame from either lane (by `deadline`): a fast-lane reply is kept
    /// for `await_reply`, a stream's chunk joins its stream. Pings the box on both lanes
    /// when it has been quiet for [`HEARTBEAT`]; a box that then says nothing on one of
    /// them for [`SILENCE`] is lost.
    fn pump(&mut self, deadline: Instant) -> Result<()> {
        let (fast, bulk) = (&mut self.fast, &mut self.bulk);
        let wait = HEARTBEAT.min(deadline.saturating_duration_since(Instant::now()));
        let got = self.rt.block_on(async {
            tokio::select! {
                f = fast.recv() => Some((FAST_LANE, f)),
                f = bulk.recv() => Some((BULK_LANE, f)),
                _ = tokio::time::sleep(wait) => None,
            }
        });
        let Some((lane, frame)) = got else {
            for (l, conn) in [(FAST_LANE, &self.fast), (BULK_LANE, &self.bulk)] {
                let (l, arriving) = (l as usize, conn.arriving());
                if arriving != std::mem::replace(&mut self.arriving[l], arriving) {
                    self.unanswered[l] = None;
                }
                if let Some(quiet) = self.unanswered[l].map(|t| t.elapsed()) {
                    if quiet >= SILENCE {
                        let which = ["fast", "bulk"][l];
                        return Err(timed_out(format!(
                            "the box has said nothing on its {which} lane for {quiet:.1?} since a heartbeat"
                        )));
                    }
                }
            }
            if Instant::now() >= deadline {
                return Err(timed_out("the box missed the step's deadline"));
            }
            for l in [FAST_LANE, BULK_LANE] {
                self.send(l, 0, 0, Message::Ping)?;
                self.unanswered[l as usize].get_or_insert_with(Instant::now);
            }
            return Ok(());
        };
        let frame =
            frame?.ok_or_else(|| Error::Protocol("the box closed the connection".into()))?;
        self.unanswered[lane as usize] = None;
        match frame.message {
            Message::Refused { reason } => Err(Error::Refused(reason)),
            Message::Pong => {
                if lane == FAST_LANE {
                    self.pong = frame.header.seq;
                }
                Ok(())
            }
            Message::States { .. } if lane == FAST_LANE => {
                self.replies.insert(frame.header.seq, frame);
                Ok(())
            }
            Message::States { states, compute_us } => {
                let h = frame.header;
                self.arrived(h.seq, h.session, h.pos, states, compute_us)
            }
            other => Err(Error::Protocol(format!("unexpected {other:?}"))),
        }
    }

    /// A box computed states for `compute_us` microseconds, just now.
    fn computed(&mut self, rows: usize, compute_us: u64) {
        let now = Instant::now();
        let from = now.checked_sub(Duration::from_micros(compute_us));
        self.busy.push((from.unwrap_or(now), now));
        self.stats.requests += 1;
        self.stats.rows += rows as u64;
        self.stats.compute_seconds += compute_us as f64 / 1e6;
    }

    fn arrived(
        &mut self,
        id: u64,
        session: u64,
        pos: u32,
        states: Vec<f32>,
        us: u64,
    ) -> Result<()> {
        let rows = states.len() / self.n_embd;
        self.computed(rows, us);
        // Chunks of a released session, or of a stream replaced since, may still come;
        // they are dropped.
        let Some(s) = self.streams.get_mut(&session).filter(|s| s.id == id) else {
            return Ok(());
        };
        if pos != s.arriving || states.len() != rows * self.n_embd || rows == 0 {
            return Err(Error::Protocol(format!(
                "a chunk of {rows} rows at position {pos} of session {session}'s stream, which expects position {}",
                s.arriving
            )));
        }
        s.arriving += rows as u32;
        s.chunks.push_back((pos, states));
        Ok(())
    }

    fn await_reply(&mut self, seq: u64, deadline: Instant) -> Result<Frame> {
        loop {
            if let Some(reply) = self.replies.remove(&seq) {
                return Ok(reply);
            }
            self.pump(deadline)?;
        }
    }

    /// Starts computing `tokens` as positions `from..` of `session` on the box ahead of the
    /// steps that need them; [`Self::forward_rows`] takes their states as they arrive.
    pub fn stream(&mut self, session: u64, from: u32, tokens: &[u32]) -> Result<()> {
        let end = from + tokens.len() as u32;
        // On the fast lane, in order with the session's releases and forwards.
        let (chunk, tokens) = (self.chunk as u32, tokens.to_vec());
        let id = self.send(FAST_LANE, session, from, Message::Stream { chunk, tokens })?;
        self.streams.insert(
            session,
            Incoming {
                id,
                next: from,
                end,
                arriving: from,
                chunks: VecDeque::new(),
            },
        );
        self.send(FAST_LANE, session, from, Message::Credit { chunks: WINDOW })
            .map(drop)
    }

    /// Whether `session` has a stream with rows still to take.
    pub fn streams(&self, session: u64) -> bool {
        self.streams.contains_key(&session)
    }

    /// Copies the state of `session` at `pos` (the next of its stream) into `dst`, waiting
    /// for its chunk; a chunk wholly taken gives its credit back.
    fn take_streamed(&mut self, session: u64, pos: u32, dst: &mut [f32]) -> Result<()> {
        let e = self.n_embd;
        let deadline = Instant::now() + STEP_DEADLINE + DEADLINE_PER_ROW * self.chunk as u32;
        loop {
            let s = self.streams.get_mut(&session).expect("streamed rows");
            if pos != s.next {
                return Err(Error::Protocol(format!(
                    "session {session} takes position {pos} of a stream at {}",
                    s.next
                )));
            }
            let Some((first, states)) = s.chunks.front() else {
                self.pump(deadline)?;
                continue;
            };
            let k = (pos - first) as usize;
            dst.copy_from_slice(&states[k * e..(k + 1) * e]);
            s.next += 1;
            let whole = (k + 1) * e == states.len();
            if whole {
                s.chunks.pop_front();
            }
            let (done, more) = (s.next == s.end, s.arriving < s.end);
            if done {
                self.streams.remove(&session);
            } else if whole && more {
                self.send(FAST_LANE, session, 0, Message::Credit { chunks: 1 })?;
            }
            return Ok(());
        }
    }

    /// Which of `rows` a session's stream holds, the others (computed on the fast lane),
    /// and whether those must wait until the streamed rows are taken (one of their
    /// sessions is still streaming: the box must have its stream's rows first).
    fn route(&self, rows: &[StepRow]) -> (Vec<bool>, Vec<StepRow>, bool) {
        let streamed: Vec<bool> = rows
            .iter()
            .map(|r| self.streams.get(&r.session).is_some_and(|s| r.pos < s.end))
            .collect();
        let fast: Vec<StepRow> = rows
            .iter()
            .zip(&streamed)
            .filter(|(_, &s)| !s)
            .map(|(r, _)| *r)
            .collect();
        let after = fast.iter().any(|r| self.streams.contains_key(&r.session));
        (streamed, fast, after)
    }

    /// Sends the fast-lane part of `rows` now, so that the box computes them while the head
    /// finishes an earlier step; the [`Self::forward_rows`] of the same rows, next, takes
    /// their states.
    pub fn submit(&mut self, rows: &[StepRow], drafts_from: &[(u64, u32)]) -> Result<()> {
        let (_, fast, after) = self.route(rows);
        if !fast.is_empty() && !after {
            let seq = self.send_forward(&fast, drafts_from)?;
            self.submitted.push_back((fast, seq));
        }
        Ok(())
    }

    /// Writes the boundary states of `rows` into `out` (`[rows, n_embd]`) and records them.
    /// Rows that a session's stream holds are taken from it; the others are computed on
    /// the fast lane (submitted before, or sent now: before the streamed rows are awaited
    /// unless they must wait for them). `drafts_from`: per session whose rows end in
    /// drafts, the first one's position (a [`Self::commit`] may cut them back).
    pub fn forward_rows(
        &mut self,
        rows: &[StepRow],
        drafts_from: &[(u64, u32)],
        out: &mut [f32],
    ) -> Result<()> {
        assert_eq!(out.len(), rows.len() * self.n_embd);
        self.unbroken()?;
        let t0 = Instant::now();
        let e = self.n_embd;
        let (streamed, fast, after) = self.route(rows);
        let deadline = STEP_DEADLINE + DEADLINE_PER_ROW * fast.len() as u32;
        let mut sent = match self.submitted.iter().position(|(r, _)| *r == fast) {
            Some(i) => self.submitted.remove(i).map(|(_, seq)| seq),
            None => None,
        };
        if sent.is_none() && !fast.is_empty() && !after {
            sent = Some(self.send_forward(&fast, drafts_from)?);
        }
        for (i, r) in rows.iter().enumerate().filter(|(i, _)| streamed[*i]) {
            self.take_streamed(r.session, r.pos, &mut out[i * e..(i + 1) * e])?;
        }
        if !fast.is_empty() {
            let seq = match sent {
                Some(seq) => seq,
                None => self.send_forward(&fast, drafts_from)?,
            };
            let states = self.await_states(seq, fast.len(), Instant::now() + deadline)?;
            let dst = (0..rows.len()).filter(|&i| !streamed[i]);
            for (i, state) in dst.zip(states.chunks_exact(e)) {
                out[i * e..(i + 1) * e].copy_from_slice(state);
            }
        }
        for (r, state) in rows.iter().zip(out.chunks_exact(e)) {
            let v = self.states.entry(r.session).or_default();
            v.resize(r.pos as usize, 0);
            v.push(state_hash(state));
        }
        self.stats.wait_seconds += t0.elapsed().as_secs_f64();
        Ok(())
    }

    /// Computes `rows` again (positions computed before) and checks every state against
    /// the one recorded the first time.
    pub fn replay(&mut self, rows: &[StepRow]) -> Result<()> {
        let deadline = STEP_DEADLINE + DEADLINE_PER_ROW * rows.len() as u32;
        let seq = self.send_forward(rows, &[])?;
        let states = self.await_states(seq, rows.len(), Instant::now() + deadline)?;
        for (r, state) in rows.iter().zip(states.chunks_exact(self.n_embd)) {
            let recorded = self
                .states
                .get(&r.session)
                .and_then(|v| v.get(r.pos as usize));
            if recorded != Some(&state_hash(state)) {
                return Err(Error::Protocol(format!(
                    "the replayed state of session {} at position {} is not the one first computed",
                    r.session, r.pos
                )));
            }
        }
        Ok(())
    }

    /// The states answering fast-lane request `seq` of `n` rows.
    fn await_states(&mut self, seq: u64, n: usize, deadline: Instant) -> Result<Vec<f32>> {
        match self.await_reply(seq, deadline)?.message {
            Message::States { states, compute_us } if states.len() == n * self.n_embd => {
                self.computed(n, compute_us);
                Ok(states)
            }
            other => Err(Error::Protocol(format!(
                "expected {} states, got {other:?}",
                n * self.n_embd
            ))),
        }
    }

    /// Each session keeps exactly positions `0..len` on the box (which computes again what its
    /// memory could not keep).
    pub fn commit(&mut self, lens: &[(u64, u32)]) -> Result<()> {
        for &(s, len) in lens {
            if let Some(v) = self.states.get_mut(&s) {
                v.truncate(len as usize);
            }
        }
        let lens = lens.to_vec();
        self.send(FAST_LANE, 0, 0, Message::Commit { lens })
            .map(drop)
    }

    /// The box frees these sessions.
    pub fn release(&mut self, sessions: &[u64]) -> Result<()> {
        for s in sessions {
            self.states.remove(s);
            self.streams.remove(s);
        }
        let sessions = sessions.to_vec();
        self.send(FAST_LANE, 0, 0, Message::Release { sessions })
            .map(drop)
    }

    /// Round trip to the box on the fast lane.
    pub fn ping(&mut self) -> Result<()> {
        let seq = self.send(FAST_LANE, 0, 0, Message::Ping)?;
        let deadline = Instant::now() + REPLY_TIMEOUT;
        while self.pong < seq {
            self.pump(deadline)?;
        }
        Ok(())
    }

    /// The box's compute intervals since the last call, on this side's clock (each ends
    /// when its states arrived).
    pub fn take_busy(&mut self) -> Vec<(Instant, Instant)> {
        std::mem::take(&mut self.busy)
    }
}

fn step_rows(rows: &[(u64, usize, u32)]) -> Vec<StepRow> {
    rows.iter()
        .map(|&(session, pos, token)| StepRow {
            session,
            pos: pos as u32,
            token,
        })
        .collect()
}

fn lens(drafts_from: &[(u64, usize)]) -> Vec<(u64, u32)> {
    drafts_from.iter().map(|&(s, p)| (s, p as u32)).collect()
}

impl engine::Front for BoxClient {
    fn forward(
        &mut self,
        rows: &[(u64, usize, u32)],
        drafts_from: &[(u64, usize)],
        images: &[engine::Placed<'_>],
        hidden: &mut [f32],
    ) -> std::result::Result<(), String> {
        if !images.is_empty() {
            return Err("a split's box reads no images yet".into());
        }
        self.forward_rows(&step_rows(rows), &lens(drafts_from), hidden)
            .map_err(|e| e.to_string())
    }

    fn truncate(&mut self, session: u64, len: usize) -> std::result::Result<(), String> {
        self.commit(&[(session, len as u32)])
            .map_err(|e| e.to_string())
    }

    fn release(&mut self, session: u64) -> std::result::Result<(), String> {
        BoxClient::release(self, &[session]).map_err(|e| e.to_string())
    }

    fn reconnect(&mut self) -> std::result::Result<(), String> {
        BoxClient::reconnect(self).map_err(|e| e.to_string())
    }

    fn replay(&mut self, rows: &[(u64, usize, u32)]) -> std::result::Result<(), String> {
        BoxClient::replay(self, &step_rows(rows)).map_err(|e| e.to_string())
    }

    fn grace(&self) -> Duration {
        self.grace
    }

    fn pipelined(&self) -> bool {
        self.pipelined
    }

    fn submit(
        &mut self,
        rows: &[(u64, usize, u32)],
        drafts_from: &[(u64, usize)],
    ) -> std::result::Result<(), String> {
        BoxClient::submit(self, &step_rows(rows), &lens(drafts_from)).map_err(|e| e.to_string())
    }

    fn stream(
        &mut self,
        session: u64,
        from: usize,
        tokens: &[u32],
    ) -> std::result::Result<(), String> {
        BoxClient::stream(self, session, from as u32, tokens).map_err(|e| e.to_string())
    }

    fn streams(&self, session: u64) -> bool {
        BoxClient::streams(self, session)
    }

    fn heartbeat(&mut self) -> std::result::Result<(), String> {
        self.ping().map_err(|e| e.to_string())
    }

    fn take_busy(&mut self) -> Vec<(Instant, Instant)> {
        BoxClient::take_busy(self)
    }

    fn stats(&self) -> engine::FrontStats {
        BoxClient::stats(self)
    }
}
