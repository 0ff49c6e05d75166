//! The frames of the stage protocol: a fixed header, then the body of one message, all
//! little-endian. Frames travel length-delimited (tokio-util's `LengthDelimitedCodec`).
//!
//! Header (44 bytes): magic `TDSP`, protocol version (u16), message kind (u8), flags (u8;
//! bit 0: hidden states as f16), model hash (u64), session id (u64), box epoch (u64),
//! sequence number (u64), position (u32).
//!
//! A head opens two connections to its box, a link: the fast lane (hello, step rows,
//! commits, releases, pings, prompt streams and their credits) and the bulk lane (the
//! states of the streams' chunks). On each, the box speaks first: a challenge, which the
//! hello answers ([`crate::auth`]).

use bytes::{Buf, BufMut, BytesMut};

use crate::auth::{Nonce, Proof, NONCE_BYTES};
use crate::{Error, Result};

pub const MAGIC: [u8; 4] = *b"TDSP";
/// Bumped whenever a frame's layout or meaning changes; peers of other versions are refused.
pub const VERSION: u16 = 6;
pub const HEADER_BYTES: usize = 44;
/// Flag: the hidden states of the frame are f16 (else f32).
pub const F16_STATES: u8 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header {
    pub version: u16,
    pub flags: u8,
    /// [`crate::model_hash`] of the file both stages were loaded from.
    pub model_hash: u64,
    /// The session a frame is about, where it is about one (0 otherwise).
    pub session: u64,
    /// The box's epoch: drawn anew every time a box starts, so that the head sees a restart.
    pub epoch: u64,
    /// Numbers the requests of one connection; a reply carries its request's number.
    pub seq: u64,
    /// The first position of a frame about one session (0 otherwise).
    pub pos: u32,
}

/// One row of a step: the token at `pos` of `session`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepRow {
    pub session: u64,
    pub pos: u32,
    pub token: u32,
}

/// What a frame says.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// Box → head, first on every connection, with no model hash or epoch in its header:
    /// the nonce the hello's proof must cover, and whether the box holds a key.
    Challenge {
        nonce: Nonce,
        keyed: bool,
    },
    /// Head → box, in answer to the challenge: the head runs blocks `split..` of a model of
    /// width `n_embd`. `lane` is [`FAST_LANE`] (a new link; `link` 0) or [`BULK_LANE`]
    /// (joining the link the fast lane's welcome named). `head` names the head across its
    /// reconnects; `proof` covers the challenge, `nonce` and the rest of the frame (zero
    /// without a key).
    Hello {
        split: u32,
        n_embd: u32,
        lane: u8,
        link: u64,
        head: u64,
        nonce: Nonce,
        proof: Proof,
    },
    /// Box → head: the box holds blocks `0..split` of the same model (epoch in the header);
    /// the connection belongs to `link`. `proof` covers the hello's nonce, the challenge
    /// and the rest of the frame (zero without a key).
    Welcome {
        split: u32,
        link: u64,
        proof: Proof,
    },
    /// Box → head: the connection is refused (model, split or version differ) or a
    /// request failed; the text says why.
    Refused {
        reason: String,
    },
    /// Head → box: compute these rows through blocks `0..split`, rows of one session in
    /// ascending positions following what the box holds for it. `drafts_from`: per session
    /// whose rows end in drafts, the position of the first (a `Commit` may cut them back:
    /// a recurrent state keeps its checkpoint there).
    Forward {
        rows: Vec<StepRow>,
        drafts_from: Vec<(u64, u32)>,
    },
    /// Box → head: the boundary states of a `Forward`'s rows, or (bulk lane) of one chunk
    /// of a stream: from position `pos` of `session` in the header, whose sequence number
    /// is the `Stream` frame's; `[rows, n_embd]`, and the microseconds the box computed
    /// them for.
    States {
        states: Vec<f32>,
        compute_us: u64,
    },
    /// Head → box: each session keeps positions `0..len` (drafts past them were rejected).
    Commit {
        lens: Vec<(u64, u32)>,
    },
    /// Head → box: these sessions are over; their KV is freed.
    Release {
        sessions: Vec<u64>,
    },
    Ping,
    Pong,
    /// Head → box: compute `tokens` as positions `pos..` of `session` (header) ahead of
    /// the steps that need them, and send their states on the bulk lane in chunks of
    /// `chunk` rows, one chunk per credit. It replaces the session's earlier stream.
    Stream {
        chunk: u32,
        tokens: Vec<u32>,
    },
    /// Head → box: `session`'s stream may send `chunks` more chunks (the head has room
    /// for them).
    Credit {
        chunks: u32,
    },
}

/// [`Message::Hello`]'s lanes.
pub const FAST_LANE: u8 = 0;
pub const BULK_LANE: u8 = 1;

impl Message {
    fn kind(&self) -> u8 {
        match self {
            Message::Hello { .. } => 1,
            Message::Welcome { .. } => 2,
            Message::Refused { .. } => 3,
            Message::Forward { .. } => 4,
            Message::States { .. } => 5,
            Message::Commit { .. } => 6,
            Message::Release { .. } => 7,
            Message::Ping => 8,
            Message::Pong => 9,
            Message::Stream { .. } => 10,
            Message::Credit { .. } => 11,
            Message::Challenge { .. } => 12,
        }
    }
}

/// A header and its message.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub header: Header,
    pub message: Message,
}

impl Frame {
    /// Appends the frame's bytes (without the length prefix) to `out`.
    pub fn encode(&self, out: &mut BytesMut) {
        let h = &self.header;
        out.put_slice(&MAGIC);
        out.put_u16_le(h.version);
        out.put_u8(self.message.kind());
        out.put_u8(h.flags);
        out.put_u64_le(h.model_hash);
        out.put_u64_le(h.session);
        out.put_u64_le(h.epoch);
        out.put_u64_le(h.seq);
        out.put_u32_le(h.pos);
        match &self.message {
            Message::Challenge { nonce, keyed } => {
                out.put_slice(nonce);
                out.put_u8(*keyed as u8);
            }
            Message::Hello {
                split,
                n_embd,
                lane,
                link,
                head,
                nonce,
                proof,
            } => {
                out.put_u32_le(*split);
                out.put_u32_le(*n_embd);
                out.put_u8(*lane);
                out.put_u64_le(*link);
                out.put_u64_le(*head);
                out.put_slice(nonce);
                out.put_slice(proof);
            }
            Message::Welcome { split, link, proof } => {
                out.put_u32_le(*split);
                out.put_u64_le(*link);
                out.put_slice(proof);
            }
            Message::Refused { reason } => out.put_slice(reason.as_bytes()),
            Message::Forward { rows, drafts_from } => {
                out.put_u32_le(rows.len() as u32);
                for r in rows {
                    out.put_u64_le(r.session);
                    out.put_u32_le(r.pos);
                    out.put_u32_le(r.token);
                }
                put_lens(out, drafts_from);
            }
            Message::States { states, compute_us } => {
                out.put_u64_le(*compute_us);
                out.put_u32_le(states.len() as u32);
                if h.flags & F16_STATES != 0 {
                    states
                        .iter()
                        .for_each(|&v| out.put_u16_le(half::f16::from_f32(v).to_bits()));
                } else {
                    states.iter().for_each(|&v| out.put_f32_le(v));
                }
            }
            Message::Commit { lens } => put_lens(out, lens),
            Message::Release { sessions } => {
                out.put_u32_le(sessions.len() as u32);
                sessions.iter().for_each(|&s| out.put_u64_le(s));
            }
            Message::Ping | Message::Pong => {}
            Message::Stream { chunk, tokens } => {
                out.put_u32_le(*chunk);
                out.put_u32_le(tokens.len() as u32);
                tokens.iter().for_each(|&t| out.put_u32_le(t));
            }
            Message::Credit { chunks } => out.put_u32_le(*chunks),
        }
    }

    /// What a hello's or a welcome's proof covers: the frame's bytes without the proof,
    /// which comes last.
    pub(crate) fn unproved(&self) -> Vec<u8> {
        let mut b = BytesMut::new();
        self.encode(&mut b);
        if let Message::Hello { .. } | Message::Welcome { .. } = self.message {
            b.truncate(b.len() - NONCE_BYTES);
        }
        b.to_vec()
    }

    /// Parses one frame (without its length prefix), checking magic and version.
    pub fn decode(mut b: &[u8]) -> Result<Frame> {
        if b.len() < HEADER_BYTES {
            return Err(Error::Protocol(format!(
                "a frame of {} bytes is shorter than its header",
                b.len()
            )));
        }
        if b[..4] != MAGIC {
            return Err(Error::Protocol("not a tandem stage frame".into()));
        }
        b.advance(4);
        let version = b.get_u16_le();
        if version != VERSION {
            return Err(Error::Protocol(format!(
                "protocol version {version}, this side speaks {VERSION}"
            )));
        }
        let kind = b.get_u8();
        let header = Header {
            version,
            flags: b.get_u8(),
            model_hash: b.get_u64_le(),
            session: b.get_u64_le(),
            epoch: b.get_u64_le(),
            seq: b.get_u64_le(),
            pos: b.get_u32_le(),
        };
        let message = Body(b).message(kind, header.flags)?;
        Ok(Frame { header, message })
    }
}

/// `(session, position)` pairs: their count (u32), then each (u64, u32).
fn put_lens(out: &mut BytesMut, lens: &[(u64, u32)]) {
    out.put_u32_le(lens.len() as u32);
    for &(s, len) in lens {
        out.put_u64_le(s);
        out.put_u32_le(len);
    }
}

/// A body being read, every read checked against what is left.
struct Body<'a>(&'a [u8]);

impl Body<'_> {
    fn need(&self, n: usize) -> Result<()> {
        if self.0.len() < n {
            return Err(Error::Protocol(format!(
                "a frame body ends {} bytes early",
                n - self.0.len()
            )));
        }
        Ok(())
    }

    fn u8(&mut self) -> Result<u8> {
        self.need(1)?;
        Ok(self.0.get_u8())
    }

    fn u32(&mut self) -> Result<u32> {
        self.need(4)?;
        Ok(self.0.get_u32_le())
    }

    fn u64(&mut self) -> Result<u64> {
        self.need(8)?;
        Ok(self.0.get_u64_le())
    }

    fn nonce(&mut self) -> Result<Nonce> {
        self.need(NONCE_BYTES)?;
        let mut n = [0u8; NONCE_BYTES];
        self.0.copy_to_slice(&mut n);
        Ok(n)
    }

    /// A count of items of `each` bytes, checked against the bytes left.
    fn count(&mut self, each: usize) -> Result<usize> {
        let n = self.u32()? as usize;
        self.need(n * each)?;
        Ok(n)
    }

    /// `(session, position)` pairs after their count ([`put_lens`]).
    fn lens(&mut self) -> Result<Vec<(u64, u32)>> {
        let n = self.count(12)?;
        (0..n).map(|_| Ok((self.u64()?, self.u32()?))).collect()
    }

    fn message(mut self, kind: u8, flags: u8) -> Result<Message> {
        let m = match kind {
            1 => Message::Hello {
                split: self.u32()?,
                n_embd: self.u32()?,
                lane: self.u8()?,
                link: self.u64()?,
                head: self.u64()?,
                nonce: self.nonce()?,
                proof: self.nonce()?,
            },
            2 => Message::Welcome {
                split: self.u32()?,
                link: self.u64()?,
                proof: self.nonce()?,
            },
            3 => Message::Refused {
                reason: String::from_utf8_lossy(std::mem::take(&mut self.0)).into_owned(),
            },
            4 => {
                let n = self.count(16)?;
                let rows = (0..n)
                    .map(|_| {
                        Ok(StepRow {
                            session: self.u64()?,
                            pos: self.u32()?,
                            token: self.u32()?,
                        })
                    })
                    .collect::<Result<_>>()?;
                let drafts_from = self.lens()?;
                Message::Forward { rows, drafts_from }
            }
            5 => {
                let compute_us = self.u64()?;
                let f16 = flags & F16_STATES != 0;
                let n = self.count(if f16 { 2 } else { 4 })?;
                let states = (0..n)
                    .map(|_| match f16 {
                        true => half::f16::from_bits(self.0.get_u16_le()).to_f32(),
                        false => self.0.get_f32_le(),
                    })
                    .collect();
                Message::States { states, compute_us }
            }
            6 => Message::Commit { lens: self.lens()? },
            7 => {
                let n = self.count(8)?;
                let sessions = (0..n).map(|_| self.u64()).collect::<Result<_>>()?;
                Message::Release { sessions }
            }
            8 => Message::Ping,
            9 => Message::Pong,
            10 => {
                let chunk = self.u32()?;
                let n = self.count(4)?;
                let tokens = (0..n).map(|_| self.u32()).collect::<Result<_>>()?;
                Message::Stream { chunk, tokens }
            }
            11 => Message::Credit {
                chunks: self.u32()?,
            },
            12 => Message::Challenge {
                nonce: self.nonce()?,
                keyed: self.u8()? != 0,
            },
            other => return Err(Error::Protocol(format!("unknown message kind {other}"))),
        };
        if !self.0.is_empty() {
            return Err(Error::Protocol(format!(
                "{} bytes after the end of a message of kind {kind}",
                self.0.len()
            )));
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(flags: u8) -> Header {
        Header {
            version: VERSION,
            flags,
            model_hash: 0xDEAD_BEEF,
            session: 7,
            epoch: 42,
            seq: 9,
            pos: 128,
        }
    }

    #[test]
    fn every_message_survives_a_round_trip() {
        let messages = [
            Message::Challenge {
                nonce: [7; NONCE_BYTES],
                keyed: true,
            },
            Message::Hello {
                split: 14,
                n_embd: 1536,
                lane: BULK_LANE,
                link: 3,
                head: 11,
                nonce: [1; NONCE_BYTES],
                proof: [2; NONCE_BYTES],
            },
            Message::Welcome {
                split: 14,
                link: 3,
                proof: [3; NONCE_BYTES],
            },
            Message::Refused {
                reason: "model hash differs".into(),
            },
            Message::Forward {
                rows: vec![
                    StepRow {
                        session: 1,
                        pos: 5,
                        token: 99,
                    },
                    StepRow {
                        session: 2,
                        pos: 0,
                        token: 3,
                    },
                ],
                drafts_from: vec![(1, 6)],
            },
            Message::States {
                states: vec![0.5, -1.25, 3.0],
                compute_us: 1234,
            },
            Message::Commit {
                lens: vec![(1, 6), (2, 1)],
            },
            Message::Release {
                sessions: vec![1, 2, 3],
            },
            Message::Ping,
            Message::Pong,
            Message::Stream {
                chunk: 2048,
                tokens: vec![1, 2, 3],
            },
            Message::Credit { chunks: 2 },
        ];
        for flags in [0, F16_STATES] {
            for m in &messages {
                let f = Frame {
                    header: header(flags),
                    message: m.clone(),
                };
                let mut b = BytesMut::new();
                f.encode(&mut b);
                assert_eq!(Frame::decode(&b).unwrap(), f);
            }
        }
    }

    #[test]
    fn bad_frames_are_errors_not_panics() {
        let f = Frame {
            header: header(0),
            message: Message::Forward {
                rows: vec![StepRow {
                    session: 1,
                    pos: 0,
                    token: 1,
                }],
                drafts_from: vec![(1, 1)],
            },
        };
        let mut b = BytesMut::new();
        f.encode(&mut b);
        for cut in 0..b.len() {
            assert!(Frame::decode(&b[..cut]).is_err(), "cut at {cut}");
        }
        let mut other = b.clone();
        other[4] = VERSION as u8 + 1;
        let err = Frame::decode(&other).unwrap_err().to_string();
        assert!(
            err.contains(&format!("protocol version {}", VERSION + 1)),
            "{err}"
        );
        let mut long = b.clone();
        long.put_u8(0);
        assert!(Frame::decode(&long).is_err());
        let mut huge = b.clone();
        huge[HEADER_BYTES..HEADER_BYTES + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Frame::decode(&huge).is_err());
    }
}
