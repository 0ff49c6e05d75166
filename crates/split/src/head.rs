//! The head's side of the link: a blocking client for the engine thread, which owns the
//! token log of every session and drives the box step by step.

use std::net::SocketAddr;

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

/// A connection to a box that holds blocks `0..split` of the head's model.
pub struct BoxClient {
    rt: Runtime,
    conn: Conn,
    hash: u64,
    flags: u8,
    epoch: u64,
    seq: u64,
    n_embd: usize,
}

impl BoxClient {
    /// Connects and says hello: the box must hold blocks `0..model.stage.layers.start` of
    /// the same file (same [`crate::model_hash`]), or it refuses and this is the error.
    pub fn connect(addr: SocketAddr, model: &Model, states: StateType) -> Result<BoxClient> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let conn = Conn::new(rt.block_on(tokio::net::TcpStream::connect(addr))?)?;
        let mut client = BoxClient {
            rt,
            conn,
            hash: crate::model_hash(&model.file),
            flags: if states == StateType::F16 {
                F16_STATES
            } else {
                0
            },
            epoch: 0,
            seq: 0,
            n_embd: model.hparams.n_embd,
        };
        let split = model.stage.layers.start as u32;
        let hello = Message::Hello {
            split,
            n_embd: client.n_embd as u32,
        };
        let welcome = client.request(hello)?;
        match welcome.message {
            Message::Welcome { split: s } if s == split => {
                client.epoch = welcome.header.epoch;
                Ok(client)
            }
            other => Err(Error::Protocol(format!(
                "expected a welcome, got {other:?}"
            ))),
        }
    }

    /// The epoch of the box this client talks to.
    pub fn epoch(&self) -> u64 {
        self.epoch
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

    /// Sends `message` and waits for the reply to it.
    fn request(&mut self, message: Message) -> Result<Frame> {
        let seq = self.send(message)?;
        let reply = self
            .rt
            .block_on(self.conn.recv())?
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

    /// Writes the boundary states of `rows` into `out` (`[rows, n_embd]`).
    pub fn forward_rows(&mut self, rows: &[StepRow], out: &mut [f32]) -> Result<()> {
        assert_eq!(out.len(), rows.len() * self.n_embd);
        let reply = self.request(Message::Forward {
            rows: rows.to_vec(),
        })?;
        match reply.message {
            Message::States { states } if states.len() == out.len() => {
                out.copy_from_slice(&states);
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
        self.send(Message::Commit {
            lens: lens.to_vec(),
        })
        .map(drop)
    }

    /// The box frees these sessions.
    pub fn release(&mut self, sessions: &[u64]) -> Result<()> {
        self.send(Message::Release {
            sessions: sessions.to_vec(),
        })
        .map(drop)
    }

    /// Round trip to the box.
    pub fn ping(&mut self) -> Result<()> {
        match self.request(Message::Ping)?.message {
            Message::Pong => Ok(()),
            other => Err(Error::Protocol(format!("expected a pong, got {other:?}"))),
        }
    }
}

impl engine::Front for BoxClient {
    fn forward(
        &mut self,
        rows: &[(u64, usize, u32)],
        hidden: &mut [f32],
    ) -> std::result::Result<(), String> {
        let rows: Vec<StepRow> = rows
            .iter()
            .map(|&(session, pos, token)| StepRow {
                session,
                pos: pos as u32,
                token,
            })
            .collect();
        self.forward_rows(&rows, hidden).map_err(|e| e.to_string())
    }

    fn truncate(&mut self, session: u64, len: usize) -> std::result::Result<(), String> {
        self.commit(&[(session, len as u32)])
            .map_err(|e| e.to_string())
    }

    fn release(&mut self, session: u64) -> std::result::Result<(), String> {
        BoxClient::release(self, &[session]).map_err(|e| e.to_string())
    }
}
