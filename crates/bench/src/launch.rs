//! Servers the benchmarks start themselves: one at a time, ready when `/health` answers
//! 200, peak RSS read from /proc before they are stopped.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `http://127.0.0.1:{port}{path}`.
pub fn local_url(port: u16, path: &str) -> String {
    format!("http://127.0.0.1:{port}{path}")
}

/// A server process started by a benchmark; stopped (by its PID) when dropped.
pub struct Launched {
    child: Child,
}

impl Launched {
    /// Starts `program args..`, its stdout discarded and its stderr written to `log`.
    pub fn spawn(program: &str, args: &[String], log: &Path) -> Result<Launched, String> {
        let log_file = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .map_err(|e| format!("cannot start {program}: {e}"))?;
        Ok(Launched { child })
    }

    /// Starts a shell command line, `exec`ed so that the PID is the server's own.
    pub fn spawn_shell(command: &str, log: &Path) -> Result<Launched, String> {
        Launched::spawn("sh", &["-c".into(), format!("exec {command}")], log)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process has not exited yet.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits until `base_url/health` answers 200, failing early if the process exits.
    pub fn wait_ready(&mut self, base_url: &str, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("the server exited ({status}) before it was ready"));
            }
            if health_ok(base_url) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        Err(format!(
            "the server was not ready within {} s",
            timeout.as_secs()
        ))
    }

    /// The most resident memory the process has had (VmHWM), in MiB; 0 when unknown.
    pub fn peak_rss_mib(&self) -> f64 {
        status_mib(self.pid(), "VmHWM")
    }

    /// The process's resident memory now (VmRSS), in MiB; 0 when unknown.
    pub fn rss_mib(&self) -> f64 {
        status_mib(self.pid(), "VmRSS")
    }
}

/// A `kB` field of /proc/PID/status, in MiB; 0 when unknown.
fn status_mib(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.split(':').next() == Some(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

impl Drop for Launched {
    /// SIGTERM, up to 10 s to exit, then SIGKILL.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `base_url/health` answers 200 within 2 s.
pub fn health_ok(base_url: &str) -> bool {
    minreq::get(format!("{base_url}/health"))
        .with_timeout(2)
        .send()
        .is_ok_and(|r| r.status_code == 200)
}

/// One chat request (`/v1/chat/completions`, one user message) at temperature 0 with at
/// most `max_tokens` tokens; returns the response body.
pub fn chat(port: u16, message: &str, max_tokens: usize) -> Result<serde_json::Value, String> {
    let body = serde_json::json!({
        "messages": [{"role": "user", "content": message}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "seed": 0,
    });
    let r = minreq::post(local_url(port, "/v1/chat/completions"))
        .with_json(&body)
        .map_err(|e| e.to_string())?
        .with_timeout(7200)
        .send()
        .map_err(|e| e.to_string())?;
    if r.status_code != 200 {
        return Err(format!(
            "HTTP {}: {}",
            r.status_code,
            r.as_str().unwrap_or("")
        ));
    }
    r.json().map_err(|e| e.to_string())
}
