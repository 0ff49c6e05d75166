//! The box: the embeddings and blocks `0..L` of a model, a KV pool of those blocks for
//! every session of the head, and a TCP listener. It computes the rows the head sends
//! and returns their hidden states at the boundary, and computes prompts the head streams
//! ahead of its steps.
//!
//! One head at a time: a head's link is its fast lane and its bulk lane. A hello is
//! answered only after the head proved the key ([`crate::auth`]); a fast lane's hello
//! from the head of the current link (it reconnects) starts a new link, which drops the
//! sessions of the one before (the head replays them) and closes its lanes, while one
//! from another head is refused as long as the current head's fast lane is open and was
//! heard from within [`LINK_SILENCE`]. The connection tasks answer pings themselves, so a
//! box busy with a long forward still answers heartbeats; the compute thread
//! ([`crate::compute`]) does the rest.

use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use engine::ContextConfig;
use model::Model;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

use crate::auth::{self, Key, Prover};
use crate::compute::{Compute, Job};
use crate::frame::{
    Frame, Header, Message, BULK_LANE, F16_STATES, FAST_LANE, HEADER_BYTES, VERSION,
};
use crate::tls::{Stream, TlsServer};
use crate::{Conn, Error, Result};

/// How long a connection may take to be welcomed (TLS handshake, challenge and hello).
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// A head whose fast lane has been silent this long (an idle head pings every second)
/// no longer keeps another head out.
pub const LINK_SILENCE: Duration = Duration::from_secs(30);

/// Who may use a box, and how much.
#[derive(Clone)]
pub struct Access {
    /// The key a head must prove (`None`: any head that reaches the port).
    pub key: Option<Key>,
    /// TLS on every connection.
    pub tls: Option<TlsServer>,
    /// Connections in their handshake at once (each has [`HELLO_TIMEOUT`]); beyond them a
    /// connection is closed at once. A welcomed head's two lanes do not count.
    pub max_handshakes: usize,
    /// Sessions the head may hold at once; a forward that would open one more is refused.
    pub max_sessions: usize,
}

impl Default for Access {
    fn default() -> Access {
        Access {
            key: None,
            tls: None,
            max_handshakes: 8,
            max_sessions: 256,
        }
    }
}

/// A box: the first stage of a model and the state of every session.
pub struct BoxWorker {
    compute: Compute,
    id: Identity,
    tls: Option<TlsServer>,
    handshakes: usize,
}

/// The head holding the box.
struct Current {
    link: u64,
    head: u64,
    /// Its fast lane is open.
    open: bool,
    /// When its fast lane last sent a frame.
    heard: Instant,
}

/// What the box says in every frame, who holds it, and what a head may send.
struct Identity {
    hash: u64,
    epoch: u64,
    /// The box's blocks end here.
    split: u32,
    n_embd: u32,
    key: Option<Key>,
    /// The largest frame a fast lane may send: a forward (16 bytes a row, 12 a session's
    /// first draft) or a stream of the whole context, or a commit or release of every
    /// session.
    fast_frame: usize,
    current: Mutex<Current>,
    /// The current link's number, watched by the lanes of earlier ones so they close.
    links: watch::Sender<u64>,
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

    /// A frame that says nothing about the model or the box's start (before a welcome).
    fn anonymous(message: Message) -> Frame {
        Frame {
            header: Header {
                version: VERSION,
                ..Header::default()
            },
            message,
        }
    }

    fn current(&self) -> std::sync::MutexGuard<'_, Current> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl BoxWorker {
    /// A box over `model`, which must be a first stage (embeddings and blocks `0..L`),
    /// open to the heads `access` lets in.
    pub fn new(model: Model, cfg: ContextConfig, access: Access) -> Result<BoxWorker> {
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
        let max_sessions = access.max_sessions.max(1);
        let id = Identity {
            hash: crate::model_hash(&model.file),
            epoch,
            split: stage.layers.end as u32,
            n_embd: model.hparams.hidden_width() as u32,
            key: access.key,
            fast_frame: HEADER_BYTES + 8 + 28 * cfg.n_ctx.max(max_sessions),
            current: Mutex::new(Current {
                link: 0,
                head: 0,
                open: false,
                heard: Instant::now(),
            }),
            links: watch::Sender::new(0),
        };
        Ok(BoxWorker {
            compute: Compute::new(model, cfg, id.hash, epoch, max_sessions)?,
            id,
            tls: access.tls,
            handshakes: access.max_handshakes.max(2),
        })
    }

    /// This start's epoch (a new one every time a box starts).
    pub fn epoch(&self) -> u64 {
        self.id.epoch
    }

    /// [`crate::model_hash`] of the box's model, which a head's hello must carry.
    pub fn model_hash(&self) -> u64 {
        self.id.hash
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
    /// task while there is room for its handshake.
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
        let room = Arc::new(Semaphore::new(self.handshakes));
        loop {
            let tcp = tokio::select! {
                accepted = listener.accept() => accepted?.0,
                _ = &mut ended => {
                    return Err(Error::Protocol("the box's compute thread ended".into()));
                }
            };
            let Ok(place) = room.clone().try_acquire_owned() else {
                continue;
            };
            let (id, jobs, tls) = (id.clone(), jobs.clone(), self.tls.clone());
            tokio::spawn(async move {
                let welcomed = tokio::time::timeout(HELLO_TIMEOUT, async {
                    let mut conn = Conn::new(open(tcp, tls.as_ref()).await?);
                    let welcomed = hello(&mut conn, &id, &jobs).await;
                    if let Err(e) = &welcomed {
                        let reason = e.to_string();
                        let _ = conn
                            .send(&Identity::anonymous(Message::Refused { reason }))
                            .await;
                    }
                    welcomed.map(|w| w.map(|w| (conn, w)))
                })
                .await;
                drop(place);
                if let Ok(Ok(Some((conn, (lane, link, replies))))) = welcomed {
                    serve_lane(conn, &id, &jobs, lane, link, replies).await
                }
            });
        }
    }
}

/// The connection's stream: TCP, with TLS when the box has it.
async fn open(tcp: TcpStream, tls: Option<&TlsServer>) -> Result<Stream> {
    tcp.set_nodelay(true)?;
    match tls {
        Some(tls) => tls.accept(tcp).await,
        None => Ok(Box::new(tcp)),
    }
}

type Replies = (
    tokio::sync::mpsc::UnboundedSender<Frame>,
    tokio::sync::mpsc::UnboundedReceiver<Frame>,
);

/// The challenge, then a hello answered with a welcome: the lane, its link and the
/// channel its replies come through; `None` when the head closed first. After the welcome
/// the fast lane takes frames up to the plan's size (the bulk lane only pings).
async fn hello(
    conn: &mut Conn,
    id: &Identity,
    jobs: &mpsc::Sender<Job>,
) -> Result<Option<(u8, u64, Replies)>> {
    let challenge = auth::nonce()?;
    let keyed = id.key.is_some();
    let ask = Message::Challenge {
        nonce: challenge,
        keyed,
    };
    conn.send(&Identity::anonymous(ask)).await?;
    let Some(hello) = conn.recv().await? else {
        return Ok(None);
    };
    let Message::Hello {
        split,
        n_embd,
        lane,
        link: asked,
        head,
        nonce,
        proof,
    } = hello.message
    else {
        return Err(Error::Protocol(format!(
            "expected a hello, got {:?}",
            hello.message
        )));
    };
    if let Some(key) = &id.key {
        if !key.verify(
            &auth::covered(Prover::Head, &challenge, &nonce, &hello.unproved()),
            &proof,
        ) {
            return Err(Error::Refused(
                "the head did not prove the box's key (--box-key)".into(),
            ));
        }
    }
    if hello.header.model_hash != id.hash {
        return Err(Error::Refused(format!(
            "the head's model (hash {:016x}) is not the box's ({:016x})",
            hello.header.model_hash, id.hash
        )));
    }
    if split != id.split || n_embd != id.n_embd {
        return Err(Error::Refused(format!(
            "the head starts at block {split} (width {n_embd}); this box ends at block {} (width {})",
            id.split, id.n_embd
        )));
    }
    let gone = || Error::Protocol("the box's compute thread ended".into());
    let (tx, replies) = tokio::sync::mpsc::unbounded_channel();
    let held = {
        let current = id.current();
        (current.link, current.head)
    };
    let link = match lane {
        FAST_LANE => {
            let mut current = id.current();
            let quiet = current.heard.elapsed();
            if current.open && current.head != head && quiet < LINK_SILENCE {
                return Err(Error::Refused(format!(
                    "another head holds this box (heard from {quiet:.1?} ago); one head at a time"
                )));
            }
            let link = current.link + 1;
            *current = Current {
                link,
                head,
                open: true,
                heard: Instant::now(),
            };
            let flags = hello.header.flags & F16_STATES;
            jobs.send(Job::Link {
                link,
                flags,
                replies: tx.clone(),
            })
            .map_err(|_| gone())?;
            id.links.send_replace(link);
            link
        }
        BULK_LANE if (asked, head) == held => {
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
    let mut welcome = id.frame(
        hello.header.seq,
        Message::Welcome {
            split: id.split,
            link,
            proof: [0; auth::NONCE_BYTES],
        },
    );
    if let Some(key) = &id.key {
        let proved = key.prove(&auth::covered(
            Prover::Box,
            &challenge,
            &nonce,
            &welcome.unproved(),
        ));
        if let Message::Welcome { proof, .. } = &mut welcome.message {
            *proof = proved;
        }
    }
    conn.send(&welcome).await?;
    if lane == FAST_LANE {
        conn.limit(id.fast_frame);
    }
    Ok(Some((lane, link, (tx, replies))))
}

/// A lane after its hello: frames go to the compute thread (pings are answered here) while
/// a writer task sends what comes back, so that reading never waits behind a long write.
/// The lane closes when a newer link replaces its own.
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
    let mut links = id.links.subscribe();
    loop {
        let got = tokio::select! {
            got = reader.recv() => got,
            _ = links.wait_for(|&l| l != link) => {
                let reason = "a newer link of the head replaced this one".into();
                let _ = tx.send(id.frame(0, Message::Refused { reason }));
                break;
            }
        };
        let frame = match got {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(e) => {
                let reason = e.to_string();
                let _ = tx.send(id.frame(0, Message::Refused { reason }));
                break;
            }
        };
        if lane == FAST_LANE {
            let mut current = id.current();
            if current.link == link {
                current.heard = Instant::now();
            }
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
        let mut current = id.current();
        if current.link == link {
            current.open = false;
        }
        drop(current);
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
