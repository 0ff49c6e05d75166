//! The HTTP connections: accepted up to a cap, each served by hyper with a deadline for
//! every request's head (which also ends a kept-alive connection left idle that long), and
//! every request's body read whole within its own deadline before any route sees it. A slow
//! or silent client therefore holds a connection for a bounded time, and the connections it
//! can hold at once are bounded too.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

use crate::error::ApiError;
use crate::state::Shared;

/// How long clients may take, and how many connections they may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// To send a request's head; also how long a kept-alive connection may stay idle.
    pub header_timeout: Duration,
    /// To send a request's body once its head has come.
    pub body_timeout: Duration,
    /// Connections open at once; one more is closed as soon as it is accepted.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_timeout: Duration::from_secs(15),
            body_timeout: Duration::from_secs(60),
            max_connections: 1024,
        }
    }
}

/// Raises the soft limit on open files to the hard one, so that the connection cap, not
/// the descriptor limit, is what refuses clients. Returns the soft limit in force.
#[cfg(unix)]
pub fn raise_file_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 0;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim = raised;
            }
        }
    }
    #[allow(clippy::unnecessary_cast)] // rlim_t is not u64 on every unix
    let soft = lim.rlim_cur as u64;
    soft
}

#[cfg(not(unix))]
pub fn raise_file_limit() -> u64 {
    0
}

/// Serves `router` on `listener` until `shutdown` resolves, then lets the open
/// connections finish their requests (at most `limits.header_timeout` more).
pub async fn serve(
    listeners: Vec<TcpListener>,
    router: Router,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let open = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        // Header names as llama-server writes them (`Access-Control-Allow-Origin`): HTTP
        // ignores their case, but clients written against it look them up case by case.
        .title_case_headers(true)
        .keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = accept_any(&listeners) => match accepted {
                Ok(a) => a,
                Err(_) => {
                    // Out of descriptors or a connection reset before accept: wait a
                    // little instead of spinning.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let conn = builder.serve_connection(
            TokioIo::new(stream),
            TowerToHyperService::new(router.clone()),
        );
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            let _ = conn.await;
            drop(permit);
        });
    }
    let _ = tokio::time::timeout(limits.header_timeout, graceful.shutdown()).await;
    Ok(())
}

/// The next connection on any of `listeners`.
async fn accept_any(
    listeners: &[TcpListener],
) -> std::io::Result<(tokio::net::TcpStream, std::net::SocketAddr)> {
    let accepts = listeners.iter().map(|l| Box::pin(l.accept()));
    futures_util::future::select_all(accepts).await.0
}

/// Reads a request's body whole within the body deadline and the body limit: a body that
/// stops short of its Content-Length gets 408, one over the limit 413.
pub async fn read_body(
    State(s): State<Shared>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let (parts, body) = req.into_parts();
    let limit = s.config.body_limit;
    let read = axum::body::to_bytes(body, limit);
    let bytes = match tokio::time::timeout(s.config.limits.body_timeout, read).await {
        Err(_) => return Err(ApiError::body_timeout(s.config.limits.body_timeout)),
        Ok(Err(e)) if is_too_large(&e) => return Err(ApiError::too_large(limit)),
        Ok(Err(e)) => return Err(ApiError::bad_request(format!("reading the body: {e}"))),
        Ok(Ok(b)) => b,
    };
    Ok(next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await)
}

fn is_too_large(e: &axum::Error) -> bool {
    let mut source: Option<&dyn std::error::Error> = Some(e);
    while let Some(err) = source {
        if err.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = err.source();
    }
    false
}
