//! One loaded model of a router: a `tandem serve` child on 127.0.0.1 with a port of its own
//! and a key only the router knows, its log lines forwarded with its name in front. It is
//! ready when it answers `/health`; it is unloaded by SIGTERM (and killed with the router).

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::watch;

use super::catalog::Entry;

/// Where an instance is.
#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    Loading,
    Loaded(SocketAddr),
    /// Its load failed: the reason, with the last lines it logged.
    Failed(String),
}

/// A loaded (or loading) model.
pub struct Instance {
    pub name: String,
    pub status: watch::Sender<Status>,
    child: Mutex<Option<Child>>,
    /// Requests it is serving now.
    pub in_flight: AtomicUsize,
    pub last_used: Mutex<Instant>,
}

/// Lines of a child's log kept for the error of a failed load.
const TAIL: usize = 12;
/// How long a child may take to load before its load counts as failed.
const LOAD_LIMIT: Duration = Duration::from_secs(1800);

impl Instance {
    pub fn new(name: &str) -> Instance {
        Instance {
            name: name.to_string(),
            status: watch::channel(Status::Loading).0,
            child: Mutex::new(None),
            in_flight: AtomicUsize::new(0),
            last_used: Mutex::new(Instant::now()),
        }
    }

    pub fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    pub fn idle_since(&self) -> Option<Instant> {
        let loaded = matches!(*self.status.borrow(), Status::Loaded(_));
        (loaded && self.in_flight.load(Ordering::Acquire) == 0)
            .then(|| *self.last_used.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Starts `exe serve` on `entry` with `args` and waits until it answers; a server that
    /// failed is stopped.
    pub async fn load(
        &self,
        exe: &Path,
        entry: &Entry,
        args: &[String],
    ) -> Result<SocketAddr, String> {
        let started = self.start(exe, entry, args).await;
        if started.is_err() {
            self.unload().await;
        }
        self.touch();
        started
    }

    async fn start(
        &self,
        exe: &Path,
        entry: &Entry,
        args: &[String],
    ) -> Result<SocketAddr, String> {
        let mut cmd = Command::new(exe);
        cmd.arg("serve")
            .arg("-m")
            .arg(&entry.path)
            .args(args)
            .args(&entry.args)
            .args(["--host", "127.0.0.1", "--port", "0", "--no-webui"])
            .args(["--alias", &entry.name])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // The router's own flags came from these already; a child reading them again would
        // be a router too.
        for (k, _) in std::env::vars_os() {
            if k.to_str().is_some_and(|k| k.starts_with("LLAMA_ARG_")) {
                cmd.env_remove(k);
            }
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
        let stderr = child.stderr.take().expect("piped");
        *self.child.lock().unwrap_or_else(|e| e.into_inner()) = Some(child);
        let (addr_tx, mut addr_rx) = watch::channel(None::<SocketAddr>);
        let (tail_tx, tail_rx) = watch::channel(Vec::<String>::new());
        let name = entry.name.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("[{name}] {line}");
                if let Some(a) = listening(&line) {
                    let _ = addr_tx.send(Some(a));
                }
                tail_tx.send_modify(|t| {
                    t.push(line);
                    if t.len() > TAIL {
                        t.remove(0);
                    }
                });
            }
            drop(addr_tx);
        });
        let failed = |why: &str| format!("{why}: {}", tail_rx.borrow().join(" | "));
        let started = Instant::now();
        let addr = loop {
            if let Some(a) = *addr_rx.borrow() {
                break a;
            }
            if addr_rx.changed().await.is_err() {
                return Err(failed("the model's server stopped before listening"));
            }
        };
        while started.elapsed() < LOAD_LIMIT {
            if let Ok(r) = send(addr, get("/health")).await {
                if r.status().is_success() {
                    return Ok(addr);
                }
            }
            if self.exited() {
                return Err(failed("the model's server stopped while loading"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(failed("the model did not load in time"))
    }

    /// Whether its server is not running (never started, or exited).
    pub fn exited(&self) -> bool {
        let mut c = self.child.lock().unwrap_or_else(|e| e.into_inner());
        c.as_mut().is_none_or(|c| !matches!(c.try_wait(), Ok(None)))
    }

    /// Stops its server (SIGTERM, then a kill after 10 s).
    pub async fn unload(&self) {
        let child = self.child.lock().unwrap_or_else(|e| e.into_inner()).take();
        let Some(mut child) = child else { return };
        if let Some(pid) = child.id() {
            // SAFETY: `pid` is this router's own child, not yet reaped.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGTERM);
            }
        }
        if tokio::time::timeout(Duration::from_secs(10), child.wait())
            .await
            .is_err()
        {
            let _ = child.kill().await;
        }
    }
}

/// The address of a `tandem serve: listening on http://ADDR (...)` line.
fn listening(line: &str) -> Option<SocketAddr> {
    let rest = line.split("listening on http://").nth(1)?;
    rest.split([' ', ',']).next()?.parse().ok()
}

fn get(path: &str) -> Request<Full<Bytes>> {
    Request::get(path)
        .header(hyper::header::HOST, "127.0.0.1")
        .body(Full::new(Bytes::new()))
        .expect("a valid request")
}

/// Sends `req` to the server at `addr` over a connection of its own.
pub async fn send(
    addr: SocketAddr,
    req: Request<Full<Bytes>>,
) -> Result<hyper::Response<Incoming>, String> {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    sender
        .send_request(req)
        .await
        .map_err(|e| format!("the model's server did not answer: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listening_line_gives_the_address() {
        let l = "tandem serve: listening on http://127.0.0.1:40123 (loading /m/a.gguf)";
        assert_eq!(listening(l), Some("127.0.0.1:40123".parse().unwrap()));
        assert_eq!(listening("something else"), None);
    }
}
