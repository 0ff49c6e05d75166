//! `--image-urls allow`: an image URL's bytes fetched over HTTP/1.1, http or https (the
//! system's root certificates; `SSL_CERT_FILE` and `SSL_CERT_DIR` are honoured), within
//! limits: [`TIMEOUT`] for the whole fetch, at most `max_bytes` of body, [`REDIRECTS`]
//! redirects. Called from a request's preparation (a blocking thread of the runtime).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HOST, LOCATION, USER_AGENT};
use hyper::{Request, Response, Uri};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// The whole fetch, redirects included.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// Redirects followed.
pub const REDIRECTS: usize = 3;

/// The body at `url`, or why not (a sentence to put after the field's name).
pub fn fetch(url: &str, max_bytes: u64) -> Result<Vec<u8>, String> {
    let runtime = tokio::runtime::Handle::try_current()
        .map_err(|_| "no runtime to fetch it on".to_string())?;
    runtime.block_on(async {
        tokio::time::timeout(TIMEOUT, get(url.to_string(), max_bytes))
            .await
            .map_err(|_| format!("{url} did not answer within {} s", TIMEOUT.as_secs()))?
    })
}

async fn get(mut url: String, max_bytes: u64) -> Result<Vec<u8>, String> {
    for _ in 0..=REDIRECTS {
        let uri: Uri = url
            .parse()
            .map_err(|e| format!("{url} is not a URL: {e}"))?;
        let resp = request(&uri)
            .await
            .map_err(|e| format!("fetching {url}: {e}"))?;
        let status = resp.status();
        if status.is_redirection() {
            let to = resp
                .headers()
                .get(LOCATION)
                .and_then(|l| l.to_str().ok())
                .ok_or_else(|| format!("{url} redirected ({status}) nowhere"))?;
            url = resolve(&uri, to);
            continue;
        }
        if !status.is_success() {
            return Err(format!("{url} answered {status}"));
        }
        return body(resp.into_body(), max_bytes)
            .await
            .map_err(|e| format!("reading {url}: {e}"));
    }
    Err(format!("more than {REDIRECTS} redirects from {url}"))
}

/// A GET of `uri` over a connection of its own.
async fn request(uri: &Uri) -> Result<Response<Incoming>, String> {
    let https = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        _ => return Err("only http and https URLs are fetched".into()),
    };
    let host = uri.host().ok_or("the URL names no host")?;
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let tcp = TcpStream::connect((bare, port))
        .await
        .map_err(|e| e.to_string())?;
    let authority = uri.authority().map_or(host, |a| a.as_str());
    let req = Request::get(uri.path_and_query().map_or("/", |p| p.as_str()))
        .header(HOST, authority)
        .header(USER_AGENT, concat!("tandem/", env!("CARGO_PKG_VERSION")))
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    match https {
        false => send(tcp, req).await,
        true => {
            let name = ServerName::try_from(bare.to_string()).map_err(|e| e.to_string())?;
            let tls = connector()?
                .connect(name, tcp)
                .await
                .map_err(|e| format!("TLS: {e}"))?;
            send(tls, req).await
        }
    }
}

async fn send<S>(stream: S, req: Request<Empty<Bytes>>) -> Result<Response<Incoming>, String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    sender.send_request(req).await.map_err(|e| e.to_string())
}

/// At most `max_bytes` of `body`.
async fn body(mut body: Incoming, max_bytes: u64) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.map_err(|e| e.to_string())?.into_data() {
            out.extend_from_slice(&data);
            if out.len() as u64 > max_bytes {
                return Err(format!("the image is over {} MiB", max_bytes >> 20));
            }
        }
    }
    Ok(out)
}

/// A redirect's `Location` against the URL that answered: absolute, or a path on its host.
fn resolve(from: &Uri, to: &str) -> String {
    if to.contains("://") {
        return to.to_string();
    }
    let origin = format!(
        "{}://{}",
        from.scheme_str().unwrap_or("http"),
        from.authority().map_or("", |a| a.as_str())
    );
    match to.starts_with('/') {
        true => format!("{origin}{to}"),
        false => {
            let dir = from.path().rsplit_once('/').map_or("", |(d, _)| d);
            format!("{origin}{dir}/{to}")
        }
    }
}

/// The TLS client: the system's root certificates (read once).
fn connector() -> Result<TlsConnector, String> {
    static CONNECTOR: OnceLock<Result<TlsConnector, String>> = OnceLock::new();
    CONNECTOR
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err("TLS: no root certificates found (set SSL_CERT_FILE)".into());
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?
                .with_root_certificates(roots)
                .with_no_client_auth();
            Ok(TlsConnector::from(Arc::new(config)))
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_resolve_against_the_answering_url() {
        let from: Uri = "http://127.0.0.1:8000/a/b.png?x=1".parse().unwrap();
        assert_eq!(resolve(&from, "https://h/c.png"), "https://h/c.png");
        assert_eq!(resolve(&from, "/c.png"), "http://127.0.0.1:8000/c.png");
        assert_eq!(resolve(&from, "c.png"), "http://127.0.0.1:8000/a/c.png");
    }
}
