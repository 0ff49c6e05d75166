//! The box: the embeddings and blocks `0..L` of a model, a KV pool of those blocks for
//! every session of the head, and a TCP listener. It computes the rows the head sends
//! and returns their hidden states at the boundary, and computes prompts the head streams
//! ahead of its steps.
//!
//! One head at a time: a head's link is its fast lane and its bulk lane; a new fast lane
//! starts a new link, which drops the sessions of the one before (the head replays them).
//! The connection tasks answer pings themselves, so a box busy with a long forward still
//! answers heartbeats; the compute thread ([`crate::compute`]) does the rest.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};

use engine::ContextConfig;
use model::Model;
use tokio::net::TcpListener;

use crate::compute::{Compute, Job};
use crate::frame::{Frame, Header, Message, BULK_LANE, F16_STATES, FAST_LANE, VERSION};
use crate::{Conn, Error, Result};

/// A box: the first stage of a model and the state of every session.
pub struct BoxWorker {
    compute: Compute,
    id: Identity,
}

/// What the box says in every frame, and which link is current.
struct Identity {
    hash: u64,
    epoch: u64,
    /// The box's blocks end here.
    split: u32,
    n_embd: u32,
    /// The current link (0 before the first head).
    link: AtomicU64,
}

impl Identity {
    fn frame(&self, seq: u64, message: Message) -> Frame {
        Frame {
            header: Header {
                version: VERSION,
                model_hash: self.hash,
                epoch: self.epoch,
                seq,
                ..Header::default()
            },
            message,
        }
    }
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
        let epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            ^ (std::process::id() as u64) << 32;
        let id = Identity {
            hash: crate::model_hash(&model.file),
            epoch,
            split: stage.layers.end as u32,
            n_embd: model.hparams.n_embd as u32,
            link: AtomicU64::new(0),
        };
        Ok(BoxWorker {
            compute: Compute::new(model, cfg, id.hash, epoch)?,
            id,
        })
    }

    /// This start's epoch (a new one every time a box starts).
    pub fn epoch(&self) -> u64 {
        self.id.epoch
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

    /// Serves heads until the listener fails: the compute thread starts, and every
    /// connection gets a task.
    pub async fn serve(self, listener: TcpListener) -> Result<()> {
        let (jobs, rx) = mpsc::channel();
        let compute = self.compute;
        std::thread::Builder::new()
            .name("tandem-box".into())
            .spawn(move || compute.run(rx))?;
        let id = Arc::new(self.id);
        loop {
            let (stream, _) = listener.accept().await?;
            let mut conn = Conn::new(stream)?;
            let (id, jobs) = (id.clone(), jobs.clone());
            tokio::spawn(async move {
                if let Err(e) = lane(&mut conn, &id, &jobs).await {
                    let reason = e.to_string();
                    let _ = conn.send(&id.frame(0, Message::Refused { reason })).await;
                }
            });
        }
    }
}

/// One connection of a head: a hello naming its lane, then frames until it closes.
async fn lane(conn: &mut Conn, id: &Identity, jobs: &mpsc::Sender<Job>) -> Result<()> {
    let Some(hello) = conn.recv().await? else {
        return Ok(());
    };
    let (lane, asked) = match hello.message {
        Message::Hello { .. } if hello.header.model_hash != id.hash => {
            return Err(Error::Refused(format!(
                "the head's model (hash {:016x}) is not the box's ({:016x})",
                hello.header.model_hash, id.hash
            )));
        }
        Message::Hello {
            split: s,
            n_embd: e,
            ..
        } if s != id.split || e != id.n_embd => {
            return Err(Error::Refused(format!(
                "the head starts at block {s} (width {e}); this box ends at block {} (width {})",
                id.split, id.n_embd
            )));
        }
        Message::Hello { lane, link, .. } => (lane, link),
        other => {
            return Err(Error::Protocol(format!("expected a hello, got {other:?}")));
        }
    };
    let gone = || Error::Protocol("the box's compute thread ended".into());
    let (tx, mut replies) = tokio::sync::mpsc::unbounded_channel();
    let link = match lane {
        FAST_LANE => {
            let link = id.link.fetch_add(1, Ordering::AcqRel) + 1;
            let flags = hello.header.flags & F16_STATES;
            jobs.send(Job::Link {
                link,
                flags,
                replies: tx,
            })
            .map_err(|_| gone())?;
            link
        }
        BULK_LANE if asked == id.link.load(Ordering::Acquire) => {
            jobs.send(Job::Bulk {
                link: asked,
                replies: tx,
            })
            .map_err(|_| gone())?;
            asked
        }
        BULK_LANE => {
            return Err(Error::Refused(format!(
                "the bulk lane names link {asked}, which is not the box's current link"
            )));
        }
        other => return Err(Error::Protocol(format!("unknown lane {other}"))),
    };
    let welcome = Message::Welcome {
        split: id.split,
        link,
    };
    conn.send(&id.frame(hello.header.seq, welcome)).await?;
    let ended: Result<()> = async {
        loop {
            tokio::select! {
                frame = conn.recv() => {
                    let Some(frame) = frame? else { return Ok(()) };
                    if id.link.load(Ordering::Acquire) != link {
                        return Err(Error::Refused("a newer link of a head replaced this one".into()));
                    }
                    match frame.message {
                        Message::Ping => conn.send(&id.frame(frame.header.seq, Message::Pong)).await?,
                        _ => jobs.send(Job::Frame { link, frame }).map_err(|_| gone())?,
                    }
                }
                reply = replies.recv() => match reply {
                    Some(frame) => conn.send(&frame).await?,
                    None => return Ok(()),
                },
            }
        }
    }
    .await;
    if lane == FAST_LANE {
        let _ = jobs.send(Job::End { link });
    }
    ended
}
