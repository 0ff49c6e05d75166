//! The head's way in: a connection to the box (TCP, TLS when the head has it), and the
//! hello that answers the box's challenge and checks the box's proof in its welcome.

use std::net::SocketAddr;
use std::time::Duration;

use crate::auth::{self, Key, Prover, NONCE_BYTES};
use crate::frame::{Frame, Message};
use crate::tls::{Stream, TlsClient};
use crate::{Conn, Error, Result, MAX_FRAME};

/// What the head needs to be let in, and to know it reached its box.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    /// The box's key (`--box-key`); a keyed box refuses a head without it, and a head
    /// with one refuses a box that cannot prove it.
    pub key: Option<Key>,
    /// TLS, checking the box's certificate.
    pub tls: Option<TlsClient>,
}

pub(crate) fn timed_out(what: impl std::fmt::Display) -> Error {
    Error::Io(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        what.to_string(),
    ))
}

/// A connection to `addr` within `within`.
pub(crate) async fn open(
    addr: SocketAddr,
    tls: Option<&TlsClient>,
    within: Duration,
) -> Result<Conn> {
    let open = async {
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let stream: Stream = match tls {
            Some(tls) => tls.connect(addr, tcp).await?,
            None => Box::new(tcp),
        };
        Ok(Conn::new(stream))
    };
    tokio::time::timeout(within, open)
        .await
        .unwrap_or_else(|_| Err(timed_out(format!("no answer from {addr} in {within:?}"))))
}

/// The next frame within `within`; the box closing is an error.
async fn reply(conn: &mut Conn, within: Duration, what: &str) -> Result<Frame> {
    tokio::time::timeout(within, conn.recv())
        .await
        .map_err(|_| timed_out(format!("no {what} within {within:?}")))??
        .ok_or_else(|| Error::Protocol(format!("the box closed the connection before its {what}")))
}

/// Answers the box's challenge with `hello` (a [`Message::Hello`] whose nonce and proof
/// are filled in here) and returns the welcome, its proof checked; from then on the
/// connection takes frames of any size the link allows.
pub(crate) async fn hello(
    conn: &mut Conn,
    mut hello: Frame,
    key: Option<&Key>,
    within: Duration,
) -> Result<Frame> {
    let challenge = match reply(conn, within, "challenge").await?.message {
        Message::Challenge { keyed: true, .. } if key.is_none() => {
            return Err(Error::Key(
                "the box asks for a key: give the head the box's --box-key".into(),
            ));
        }
        Message::Challenge { keyed: false, .. } if key.is_some() => {
            return Err(Error::Key(
                "the box holds no key, so it cannot prove it is the box: give it the head's --box-key"
                    .into(),
            ));
        }
        Message::Challenge { nonce, .. } => nonce,
        Message::Refused { reason } => return Err(Error::Refused(reason)),
        other => {
            return Err(Error::Protocol(format!(
                "expected a challenge, got {other:?}"
            )))
        }
    };
    let mine = auth::nonce()?;
    if let Message::Hello { nonce, .. } = &mut hello.message {
        *nonce = mine;
    }
    let proved = key.map_or([0; NONCE_BYTES], |k| {
        k.prove(&auth::covered(
            Prover::Head,
            &challenge,
            &mine,
            &hello.unproved(),
        ))
    });
    if let Message::Hello { proof, .. } = &mut hello.message {
        *proof = proved;
    }
    conn.send(&hello).await?;
    let welcome = reply(conn, within, "welcome").await?;
    match (&welcome.message, key) {
        (Message::Welcome { proof, .. }, Some(key)) => {
            let fields = welcome.unproved();
            if !key.verify(
                &auth::covered(Prover::Box, &challenge, &mine, &fields),
                proof,
            ) {
                return Err(Error::Key(
                    "the box did not prove the key: it is not the box the head's --box-key names"
                        .into(),
                ));
            }
        }
        (Message::Welcome { .. }, None) => {}
        (Message::Refused { reason }, _) => return Err(Error::Refused(reason.clone())),
        (other, _) => {
            return Err(Error::Protocol(format!(
                "expected a welcome, got {other:?}"
            )))
        }
    }
    conn.limit(MAX_FRAME);
    Ok(welcome)
}
