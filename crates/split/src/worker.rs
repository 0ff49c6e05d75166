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

    /// Serves heads until the listener fails or the compute thread ends (it panicked: the
    /// box should be restarted): the compute thread starts, and every connection gets a
    /// task.
    pub async fn serve(self, listener: TcpListener) -> Result<()> {
        let (jobs, rx) = mpsc::channel();
        let compute = self.compute;
        let (alive, mut ended) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("tandem-box".into())
            .spawn(move || {
                let _alive = alive;
                compute.run(rx)
            })?;
        let id = Arc::new(self.id);
        loop {
            let stream = tokio::select! {
                accepted = listener.accept() => accepted?.0,
                _ = &mut ended => {
                    return Err(Error::Protocol("the box's compute thread ended".into()));
                }
            };
            let conn = Conn::new(stream)?;
            let (id, jobs) = (id.clone(), jobs.clone());
            tokio::spawn(async move { lane(conn, &id, &jobs).await });
        }
    }
}

type Replies = (
    tokio::sync::mpsc::UnboundedSender<Frame>,
    tokio::sync::mpsc::UnboundedReceiver<Frame>,
);

/// One connection of a head: a hello naming its lane (refused with the reason when it is
/// not one this box serves), then frames until it closes.
async fn lane(mut conn: Conn, id: &Identity, jobs: &mpsc::Sender<Job>) {
    match hello(&mut conn, id, jobs).await {
        Err(e) => {
            let reason = e.to_string();
            let _ = conn.send(&id.frame(0, Message::Refused { reason })).await;
        }
        Ok(None) => {}
        Ok(Some((lane, link, replies))) => serve_lane(conn, id, jobs, lane, link, replies).await,
    }
}

/// Answers a hello with a welcome: the lane, its link and the channel its replies come
/// through; `None` when the head closed first.
async fn hello(
    conn: &mut Conn,
    id: &Identity,
    jobs: &mpsc::Sender<Job>,
) -> Result<Option<(u8, u64, Replies)>> {
    let Some(hello) = conn.recv().await? else {
        return Ok(None);
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
    let (tx, replies) = tokio::sync::mpsc::unbounded_channel();
    let link = match lane {
        FAST_LANE => {
            let link = id.link.fetch_add(1, Ordering::AcqRel) + 1;
            let flags = hello.header.flags & F16_STATES;
            jobs.send(Job::Link {
                link,
                flags,
                replies: tx.clone(),
            })
            .map_err(|_| gone())?;
            link
        }
        BULK_LANE if asked == id.link.load(Ordering::Acquire) => {
            jobs.send(Job::Bulk {
                link: asked,
                replies: tx.clone(),
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
    Ok(Some((lane, link, (tx, replies))))
}

/// A lane after its hello: frames go to the compute thread (pings are answered here) while
/// a writer task sends what comes back, so that reading never waits behind a long write.
async fn serve_lane(
    conn: Conn,
    id: &Identity,
    jobs: &mpsc::Sender<Job>,
    lane: u8,
    link: u64,
    (tx, mut replies): Replies,
) {
    let (mut writer, mut reader) = conn.split();
    let mut writing = tokio::spawn(async move {
        while let Some(frame) = replies.recv().await {
            if writer.send(&frame).await.is_err() {
                break;
            }
        }
    });
    loop {
        let frame = match reader.recv().await {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(e) => {
                let reason = e.to_string();
                let _ = tx.send(id.frame(0, Message::Refused { reason }));
                break;
            }
        };
        if id.link.load(Ordering::Acquire) != link {
            let reason = "a newer link of a head replaced this one".into();
            let _ = tx.send(id.frame(0, Message::Refused { reason }));
            break;
        }
        let sent = match frame.message {
            Message::Ping => tx.send(id.frame(frame.header.seq, Message::Pong)).is_ok(),
            _ => jobs.send(Job::Frame { link, frame }).is_ok(),
        };
        if !sent {
            break;
        }
    }
    if lane == FAST_LANE {
        // The link is over: its sessions are freed, and the compute thread lets go of
        // this lane's replies.
        let _ = jobs.send(Job::End { link });
    }
    drop(tx);
    // What is queued goes out (a refusal, say); then the writer ends with the reader.
    let flushed = tokio::time::timeout(std::time::Duration::from_secs(1), &mut writing).await;
    if flushed.is_err() {
        writing.abort();
    }
}
