//! One model split across two machines at a layer boundary. The box holds the embeddings
//! and blocks `0..L` ([`worker::BoxWorker`], `tandem box`); the head holds blocks `L..n`
//! and the output head and drives the box ([`head::BoxClient`]): every step it sends the
//! rows to compute (token, session, position), gets their hidden states at the boundary
//! back, and finishes them. Because every kernel is batch-invariant, a split model's rows
//! have the bits of the whole model's.
//!
//! Wire: tokio TCP (TCP_NODELAY), length-delimited frames ([`frame`]) that carry the
//! protocol version, a hash of the model file, the box's epoch, a sequence number, and
//! session and position where a frame is about one session. A head's link is two
//! connections: the fast lane (steps, control, heartbeats, prompt streams and their
//! credits) and the bulk lane (the states of the streams' chunks, which the box computes
//! ahead of the steps, one per credit).
//!
//! Access: a shared key proved both ways by challenge-response ([`auth`]), one head at a
//! time, frames no longer than the plan allows, and optional TLS ([`tls`]).

pub mod auth;
mod compute;
mod dial;
pub mod frame;
pub mod head;
pub mod tls;
pub mod worker;

use bytes::{Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use gguf::GgufFile;
use sha2::{Digest, Sha256};
use tokio_util::codec::{Decoder, Encoder, Framed, LengthDelimitedCodec};

use frame::Frame;
use tls::Stream;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("stage protocol: {0}")]
    Protocol(String),
    #[error("the box refused: {0}")]
    Refused(String),
    #[error("connection to the box: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Model(#[from] model::Error),
    #[error(transparent)]
    Engine(#[from] engine::Error),
    #[error(transparent)]
    Kv(#[from] kv::Error),
    #[error("{0}")]
    Key(String),
    #[error("TLS: {0}")]
    Tls(String),
}

pub type Result<T> = std::result::Result<T, Error>;

pub use dial::Credentials;

/// The largest frame either side accepts (a prefill chunk of 8K rows of f32 states of a
/// model 8K wide is 256 MiB).
pub const MAX_FRAME: usize = 256 << 20;
/// The largest frame before the hello is answered (a challenge, a hello, a refusal).
pub const HELLO_FRAME: usize = 1024;

/// A hash of what makes two files the same model: its architecture, its hyper-parameter
/// keys and the name, shape, type and place of every tensor. Both stages must agree.
pub fn model_hash(file: &GgufFile) -> u64 {
    let mut h = Sha256::new();
    for (k, v) in file.header.metadata.iter() {
        if !k.starts_with("tokenizer.") {
            h.update(format!("{k}={v:?};").as_bytes());
        }
    }
    for t in &file.header.tensors {
        h.update(
            format!(
                "{}:{:?}:{}:{}:{};",
                t.name, t.dims, t.ggml_type, t.offset, t.n_bytes
            )
            .as_bytes(),
        );
    }
    u64::from_le_bytes(h.finalize()[..8].try_into().expect("32 bytes"))
}

/// Length-delimited frames (u32 little-endian lengths) with a limit of their own on what
/// is read: a frame announcing more is an error once its length is read.
pub(crate) struct Codec {
    read: LengthDelimitedCodec,
    write: LengthDelimitedCodec,
}

impl Codec {
    fn limited(bytes: usize) -> LengthDelimitedCodec {
        LengthDelimitedCodec::builder()
            .little_endian()
            .max_frame_length(bytes)
            .new_codec()
    }
}

impl Decoder for Codec {
    type Item = BytesMut;
    type Error = std::io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> std::io::Result<Option<BytesMut>> {
        self.read.decode(src)
    }
}

impl Encoder<Bytes> for Codec {
    type Error = std::io::Error;

    fn encode(&mut self, frame: Bytes, dst: &mut BytesMut) -> std::io::Result<()> {
        self.write.encode(frame, dst)
    }
}

/// A connection carrying frames, counting the bytes each way (length prefixes included).
pub(crate) struct Conn {
    framed: Framed<Stream, Codec>,
    pub(crate) sent: u64,
    pub(crate) received: u64,
}

type Sink = futures_util::stream::SplitSink<Framed<Stream, Codec>, Bytes>;
type Source = futures_util::stream::SplitStream<Framed<Stream, Codec>>;

fn encoded(frame: &Frame) -> Bytes {
    let mut b = BytesMut::new();
    frame.encode(&mut b);
    b.freeze()
}

impl Conn {
    /// A connection that takes frames of at most [`HELLO_FRAME`] bytes until
    /// [`Self::limit`] allows more.
    pub(crate) fn new(stream: Stream) -> Conn {
        let codec = Codec {
            read: Codec::limited(HELLO_FRAME),
            write: Codec::limited(MAX_FRAME),
        };
        Conn {
            framed: Framed::new(stream, codec),
            sent: 0,
            received: 0,
        }
    }

    /// From now on, a frame announcing more than `bytes` is an error as soon as its length
    /// is read, before any of it is buffered.
    pub(crate) fn limit(&mut self, bytes: usize) {
        self.framed.codec_mut().read.set_max_frame_length(bytes);
    }

    pub(crate) async fn send(&mut self, frame: &Frame) -> Result<()> {
        let b = encoded(frame);
        self.sent += b.len() as u64 + 4;
        self.framed.send(b).await?;
        Ok(())
    }

    /// The next frame, or `None` when the peer closed the connection.
    pub(crate) async fn recv(&mut self) -> Result<Option<Frame>> {
        match self.framed.next().await {
            None => Ok(None),
            Some(bytes) => {
                let bytes = bytes?;
                self.received += bytes.len() as u64 + 4;
                Frame::decode(&bytes).map(Some)
            }
        }
    }

    /// Bytes read of frames not yet whole (a long frame on its way).
    pub(crate) fn arriving(&self) -> usize {
        self.framed.read_buffer().len()
    }

    /// A writer and a reader that work at once, so that a side busy writing a long frame
    /// still reads (without byte counts).
    pub(crate) fn split(self) -> (Writer, Reader) {
        let (sink, source) = self.framed.split();
        (Writer(sink), Reader(source))
    }
}

pub(crate) struct Writer(Sink);

impl Writer {
    pub(crate) async fn send(&mut self, frame: &Frame) -> Result<()> {
        self.0.send(encoded(frame)).await?;
        Ok(())
    }
}

pub(crate) struct Reader(Source);

impl Reader {
    /// The next frame, or `None` when the peer closed the connection.
    pub(crate) async fn recv(&mut self) -> Result<Option<Frame>> {
        match self.0.next().await {
            None => Ok(None),
            Some(bytes) => Frame::decode(&bytes?).map(Some),
        }
    }
}
