//! The head's side of the link: a blocking client for the engine thread, which owns the
//! token log of every session and drives the box step by step.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use model::Model;
use tokio::runtime::Runtime;

use crate::frame::{Frame, Header, Message, StepRow, F16_STATES, VERSION};
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
/// The per-step deadline: this, plus [`DEADLINE_PER_ROW`] for each row of the step. A box
/// that does not answer in time (hung, stopped, cut off) is treated as lost.
const STEP_DEADLINE: Duration = Duration::from_secs(10);
const DEADLINE_PER_ROW: Duration = Duration::from_millis(50);

/// A connection to a box that holds blocks `0..split` of the head's model. It records a
/// hash of every boundary state the box returned, by session and position, so that a
/// replay after a reconnect is checked against the first computation.
pub struct BoxClient {
    rt: Runtime,
    addr: SocketAddr,
    conn: Conn,
    hash: u64,
    flags: u8,
    epoch: u64,
    seq: u64,
    split: u32,
    n_embd: usize,
    grace: Duration,
    /// Per session: the hash of the state at each position.
    states: HashMap<u64, Vec<u64>>,
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
    /// Connects and says hello: the box must hold blocks `0..model.stage.layers.start` of
    /// the same file (same [`crate::model_hash`]), or it refuses and this is the error.
    pub fn connect(addr: SocketAddr, model: &Model, states: StateType) -> Result<BoxClient> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let conn = Self::open(&rt, addr)?;
        let mut client = BoxClient {
            rt,
            addr,
            conn,
            hash: crate::model_hash(&model.file),
            flags: if states == StateType::F16 {
                F16_STATES
            } else {
                0
            },
            epoch: 0,
            seq: 0,
            split: model.stage.layers.start as u32,
            n_embd: model.hparams.n_embd,
            grace: Duration::from_secs(10),
            states: HashMap::new(),
            stats: engine::FrontStats::default(),
        };
        client.hello()?;
        Ok(client)
    }

    /// How long the engine tries to reconnect to a lost box (default 10 s).
    pub fn with_grace(mut self, grace: Duration) -> BoxClient {
        self.grace = grace;
        self
    }

    /// The epoch of the box this client talks to.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    fn open(rt: &Runtime, addr: SocketAddr) -> Result<Conn> {
        let connect = async {
            tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(addr)).await
        };
        match rt.block_on(connect) {
            Ok(stream) => Conn::new(stream?),
            Err(_) => Err(Error::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer from {addr} in {CONNECT_TIMEOUT:?}"),
            ))),
        }
    }

    fn hello(&mut self) -> Result<()> {
        let split = self.split;
        let welcome = self.request(
            Message::Hello {
                split,
                n_embd: self.n_embd as u32,
            },
            REPLY_TIMEOUT,
        )?;
        match welcome.message {
            Message::Welcome { split: s } if s == split => {
                self.epoch = welcome.header.epoch;
                Ok(())
            }
            other => Err(Error::Protocol(format!(
                "expected a welcome, got {other:?}"
            ))),
        }
    }

    /// Connects again; the box then holds no session of this head (each must be replayed).
    pub fn reconnect(&mut self) -> Result<()> {
        let (sent, received) = (self.conn.sent, self.conn.received);
        self.conn = Self::open(&self.rt, self.addr)?;
        self.stats.bytes_sent += sent;
        self.stats.bytes_received += received;
        self.hello()
    }

    /// What crossed the link so far (all connections).
    pub fn stats(&self) -> engine::FrontStats {
        engine::FrontStats {
            bytes_sent: self.stats.bytes_sent + self.conn.sent,
            bytes_received: self.stats.bytes_received + self.conn.received,
            ..self.stats
        }
    }

    fn frame(&mut self, message: Message) -> Frame {
        self.seq += 1;
        Frame {
            header: Header {
                version: VERSION,
                flags: self.flags,
                model_hash: self.hash,
                epoch: self.epoch,
                seq: self.seq,
                ..Header::default()
            },
            message,
        }
    }

    fn send(&mut self, message: Message) -> Result<u64> {
        let frame = self.frame(message);
        self.rt.block_on(self.conn.send(&frame))?;
        Ok(frame.header.seq)
    }

    /// Sends `message` and waits for the reply to it, at most `within`.
    fn request(&mut self, message: Message, within: Duration) -> Result<Frame> {
        let seq = self.send(message)?;
        let conn = &mut self.conn;
        let reply = self
            .rt
            .block_on(async { tokio::time::timeout(within, conn.recv()).await })
            .map_err(|_| {
                Error::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no reply from the box within {within:?}"),
                ))
            })??
            .ok_or_else(|| Error::Protocol("the box closed the connection".into()))?;
        if let Message::Refused { reason } = reply.message {
            return Err(Error::Refused(reason));
        }
        if reply.header.seq != seq {
            return Err(Error::Protocol(format!(
                "reply {} to request {seq}",
                reply.header.seq
            )));
        }
        Ok(reply)
    }

    /// Writes the boundary states of `rows` into `out` (`[rows, n_embd]`) and records them.
    pub fn forward_rows(&mut self, rows: &[StepRow], out: &mut [f32]) -> Result<()> {
        self.compute(rows, out)?;
        for (r, state) in rows.iter().zip(out.chunks_exact(self.n_embd)) {
            let v = self.states.entry(r.session).or_default();
            v.resize(r.pos as usize, 0);
            v.push(state_hash(state));
        }
        Ok(())
    }

    /// Computes `rows` again (positions computed before) and checks every state against
    /// the one recorded the first time.
    pub fn replay(&mut self, rows: &[StepRow]) -> Result<()> {
        let mut out = vec![0f32; rows.len() * self.n_embd];
        self.compute(rows, &mut out)?;
        for (r, state) in rows.iter().zip(out.chunks_exact(self.n_embd)) {
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

    fn compute(&mut self, rows: &[StepRow], out: &mut [f32]) -> Result<()> {
        assert_eq!(out.len(), rows.len() * self.n_embd);
        let deadline = STEP_DEADLINE + DEADLINE_PER_ROW * rows.len() as u32;
        let t0 = std::time::Instant::now();
        let reply = self.request(
            Message::Forward {
                rows: rows.to_vec(),
            },
            deadline,
        )?;
        match reply.message {
            Message::States { states, compute_us } if states.len() == out.len() => {
                out.copy_from_slice(&states);
                self.stats.requests += 1;
                self.stats.rows += rows.len() as u64;
                self.stats.wait_seconds += t0.elapsed().as_secs_f64();
                self.stats.compute_seconds += compute_us as f64 / 1e6;
                Ok(())
            }
            other => Err(Error::Protocol(format!(
                "expected {} states, got {other:?}",
                out.len()
            ))),
        }
    }

    /// Each session keeps positions `0..len` on the box.
    pub fn commit(&mut self, lens: &[(u64, u32)]) -> Result<()> {
        for &(s, len) in lens {
            if let Some(v) = self.states.get_mut(&s) {
                v.truncate(len as usize);
            }
        }
        self.send(Message::Commit {
            lens: lens.to_vec(),
        })
        .map(drop)
    }

    /// The box frees these sessions.
    pub fn release(&mut self, sessions: &[u64]) -> Result<()> {
        for s in sessions {
            self.states.remove(s);
        }
        self.send(Message::Release {
            sessions: sessions.to_vec(),
        })
        .map(drop)
    }

    /// Round trip to the box.
    pub fn ping(&mut self) -> Result<()> {
        match self.request(Message::Ping, REPLY_TIMEOUT)?.message {
            Message::Pong => Ok(()),
            other => Err(Error::Protocol(format!("expected a pong, got {other:?}"))),
        }
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

impl engine::Front for BoxClient {
    fn forward(
        &mut self,
        rows: &[(u64, usize, u32)],
        hidden: &mut [f32],
    ) -> std::result::Result<(), String> {
        self.forward_rows(&step_rows(rows), hidden)
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

    fn stats(&self) -> engine::FrontStats {
        BoxClient::stats(self)
    }
}
