//! CORS as llama-server answers it (`--cors-origins`, `--cors-methods`, `--cors-headers`,
//! `--cors-credentials`), with a safer default when no API key is set.

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::state::Shared;

/// The origins browsers may call from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origins {
    /// Any origin (llama-server's `*`): the request's Origin is echoed.
    Any,
    /// Origins on this machine (`localhost`, `127.0.0.1`, `[::1]`, any scheme and port).
    Localhost,
    /// These origins exactly.
    List(Vec<String>),
}

impl Origins {
    /// `--cors-origins`: a comma-separated list, where `*` is any origin and `localhost` the
    /// machine's own; `None` (not given): any origin when an API key guards the routes (a
    /// page without the key gets nothing), else this machine's only.
    pub fn parse(value: Option<&str>, keyed: bool) -> Origins {
        let Some(value) = value else {
            return if keyed {
                Origins::Any
            } else {
                Origins::Localhost
            };
        };
        let items: Vec<String> = value
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        if items.iter().any(|s| s == "*") {
            Origins::Any
        } else if items.len() == 1 && items[0] == "localhost" {
            Origins::Localhost
        } else {
            Origins::List(items)
        }
    }

    fn allows(&self, origin: &str) -> bool {
        match self {
            Origins::Any => true,
            Origins::Localhost => is_localhost(origin),
            Origins::List(list) => list
                .iter()
                .any(|o| o == origin || (o == "localhost" && is_localhost(origin))),
        }
    }
}

/// Whether `origin` (`scheme://host[:port]`) names this machine.
fn is_localhost(origin: &str) -> bool {
    let Some((_, authority)) = origin.split_once("://") else {
        return false;
    };
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some(parts) => parts,
            None => return false,
        },
        None => authority.split_at(authority.find(':').unwrap_or(authority.len())),
    };
    let port_ok = port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    port_ok && matches!(host, "localhost" | "127.0.0.1" | "::1")
}

/// The CORS settings.
#[derive(Debug, Clone)]
pub struct Cors {
    pub origins: Origins,
    /// `Access-Control-Allow-Methods` of a preflight.
    pub methods: String,
    /// `Access-Control-Allow-Headers` of a preflight.
    pub headers: String,
    pub credentials: bool,
}

impl Cors {
    /// llama-server's methods, headers and credentials with `origins`.
    pub fn new(origins: Origins) -> Cors {
        Cors {
            origins,
            methods: "GET, POST, DELETE, OPTIONS".into(),
            headers: "*".into(),
            credentials: true,
        }
    }
}

/// Every `OPTIONS` request is a preflight answered 200 here, before authentication (browsers
/// send no key with it). A response to an allowed origin carries its
/// `Access-Control-Allow-Origin` (the origin itself); other origins get no CORS headers, so
/// browsers refuse them.
pub async fn layer(State(s): State<Shared>, req: Request, next: Next) -> Response {
    let cors = &s.config.cors;
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|o| o.to_str().ok())
        .filter(|o| cors.origins.allows(o))
        .map(str::to_string);
    let mut resp = if req.method() == Method::OPTIONS {
        let mut r = StatusCode::OK.into_response();
        let h = r.headers_mut();
        let value = |v: &str| HeaderValue::from_str(v).unwrap_or(HeaderValue::from_static(""));
        h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, value(&cors.methods));
        h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, value(&cors.headers));
        h.insert(
            header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
            HeaderValue::from_static(if cors.credentials { "true" } else { "false" }),
        );
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("600"),
        );
        r
    } else {
        next.run(req).await
    };
    if let Some(v) = origin.and_then(|o| HeaderValue::from_str(&o).ok()) {
        let h = resp.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
        h.insert(header::VARY, HeaderValue::from_static("origin"));
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn localhost_means_this_machine_at_any_port() {
        for o in [
            "http://localhost",
            "http://localhost:8080",
            "https://127.0.0.1:3000",
            "http://[::1]",
            "http://[::1]:3000",
        ] {
            assert!(is_localhost(o), "{o}");
        }
        for o in [
            "http://localhost.evil.com",
            "http://notlocalhost",
            "http://evil.com",
            "localhost",
            "http://[::1].evil.com",
            "http://localhost:80x",
        ] {
            assert!(!is_localhost(o), "{o}");
        }
    }

    #[test]
    fn the_default_is_any_origin_only_behind_a_key() {
        assert_eq!(Origins::parse(None, true), Origins::Any);
        assert_eq!(Origins::parse(None, false), Origins::Localhost);
        assert_eq!(Origins::parse(Some("a,*"), false), Origins::Any);
        let list = Origins::parse(Some("http://a.example, localhost"), false);
        assert!(list.allows("http://a.example") && list.allows("http://127.0.0.1:9"));
        assert!(!list.allows("http://b.example"));
    }
}
