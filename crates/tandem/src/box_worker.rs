//! `tandem box`: the first stage of a split model (the embeddings and blocks `0..L`),
//! serving a `tandem serve --split-at L --box ADDR` head over TCP.

use std::path::PathBuf;

use clap::Args;
use model::Part;
use split::auth::Key;
use split::tls::TlsServer;
use split::worker::{Access, BoxWorker};

use crate::cli::ModelArgs;
use crate::CliError;

#[derive(Args)]
pub struct BoxArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The blocks this box holds: `0:L` (the head runs `L..`).
    #[arg(long, value_parser = parse_layers)]
    pub layers: usize,
    /// Address to listen on (port 0 picks a free one, printed at start).
    #[arg(long, default_value = "127.0.0.1:9090")]
    pub listen: String,
    #[command(flatten)]
    pub key: LinkKeyArgs,
    /// TLS on the link: the box's certificate chain (PEM, its own certificate first);
    /// the head checks it with --box-tls-ca.
    #[arg(long = "tls-cert", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long = "tls-key", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Connections in their handshake at once (TLS, challenge and hello, 5 s at most
    /// each); more are closed at once. The head's two lanes do not count.
    #[arg(long = "max-handshakes", default_value_t = Access::default().max_handshakes)]
    pub max_handshakes: usize,
    /// Sessions the head may hold on the box at once (a sliding-window model's KV keeps
    /// one window for each).
    #[arg(long = "max-sessions", default_value_t = Access::default().max_sessions)]
    pub max_sessions: usize,
}

/// The split link's shared key, given to the head and the box alike.
#[derive(Args)]
pub struct LinkKeyArgs {
    /// The split link's shared key: the head and the box each prove they hold it
    /// (challenge-response; the key itself never crosses the link).
    #[arg(long = "box-key", conflicts_with = "box_key_file")]
    pub box_key: Option<String>,
    /// A file whose first line that is not blank is the --box-key (kept out of the
    /// process list).
    #[arg(long = "box-key-file")]
    pub box_key_file: Option<PathBuf>,
}

impl LinkKeyArgs {
    /// The key, if one was given; a blank one, or one with whitespace around it, is an
    /// error (starting without the authentication asked for is never silent).
    pub fn key(&self) -> Result<Option<Key>, CliError> {
        let key = match (&self.box_key, &self.box_key_file) {
            (Some(text), _) => Some(Key::new(text, "--box-key")?),
            (None, Some(path)) => Some(Key::from_file(path)?),
            (None, None) => None,
        };
        Ok(key)
    }
}

fn parse_layers(s: &str) -> Result<usize, String> {
    let bad = || format!("'{s}' is not 0:L (the box holds blocks 0 to L, the head the rest)");
    let (a, b) = s.split_once(':').ok_or_else(bad)?;
    match (a.trim().parse::<usize>(), b.trim().parse::<usize>()) {
        (Ok(0), Ok(l)) if l > 0 => Ok(l),
        _ => Err(bad()),
    }
}

pub fn execute(a: BoxArgs) -> Result<(), CliError> {
    let path = a.model.path()?;
    // Before loading: the plan counts the weights, which loading takes from what is free.
    let available = engine::available_memory();
    let model = a.model.load(&path, Part::First(a.layers))?;
    let n_layer = model.hparams.n_layer;
    let cfg = engine::ContextConfig {
        n_seq: a.max_sessions,
        ..a.model.context_config()
    };
    let plan = engine::MemoryPlan::new(&model, &cfg);
    let own = cfg.device.own_memory();
    eprintln!(
        "tandem box: blocks 0..{} of {n_layer} of {}, memory plan: {plan} ({}; context {})",
        a.layers,
        path.display(),
        server::memory::placement(cfg.device, own.as_ref()),
        cfg.n_ctx
    );
    let host_limit = server::memory::HostLimit::of(None, available);
    server::memory::check(plan, Default::default(), own.as_ref(), host_limit)?;
    let access = Access {
        key: a.key.key()?,
        tls: match (&a.tls_cert, &a.tls_key) {
            (Some(cert), Some(key)) => Some(TlsServer::from_pem(cert, key)?),
            _ => None,
        },
        max_handshakes: a.max_handshakes,
        max_sessions: a.max_sessions,
    };
    let (keyed, tls) = (access.key.is_some(), access.tls.is_some());
    let worker = BoxWorker::new(model, cfg, access)?;
    let (epoch, hash) = (worker.epoch(), worker.model_hash());
    worker.serve_blocking(&a.listen, |addr| {
        if !keyed && !addr.ip().is_loopback() {
            eprintln!(
                "tandem box: warning: listening on {addr} without --box-key: any machine that reaches this port can use the box"
            );
        }
        let tls = if tls { ", TLS" } else { "" };
        eprintln!("tandem box: listening on {addr} (epoch {epoch:016x}, model {hash:016x}{tls})")
    })?;
    Ok(())
}
