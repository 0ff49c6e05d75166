//! The web UI: a chat page and a live engine view at `/`, plain modules in `webui/` built
//! into the binary (no CDN, nothing fetched from elsewhere). The page and its files need no
//! API key (the page asks for it and sends it with its API calls); a Content-Security-Policy
//! lets them load and call this server only and run no inline script, so that nothing in
//! a model's answer can run even if it reached the DOM as markup (it does not: answers
//! become text nodes, `webui/render.js`). `--no-webui` turns it off (404).

use axum::extract::{Path, State};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::state::Shared;

const JS: &str = "text/javascript; charset=utf-8";

/// The UI's files: name, content type, body.
#[rustfmt::skip]
const FILES: &[(&str, &str, &str)] = &[
    ("index.html", "text/html; charset=utf-8", include_str!("../webui/index.html")),
    ("style.css", "text/css; charset=utf-8", include_str!("../webui/style.css")),
    ("app.js", JS, include_str!("../webui/app.js")),
    ("engine.js", JS, include_str!("../webui/engine.js")),
    ("render.js", JS, include_str!("../webui/render.js")),
    ("sse.js", JS, include_str!("../webui/sse.js")),
];

const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    img-src 'self' data: blob:; connect-src 'self'; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";

/// Whether `path` is one of the UI's files (reachable without the key).
pub fn is_ui_path(path: &str) -> bool {
    path == "/"
        || path
            .strip_prefix("/webui/")
            .is_some_and(|name| FILES.iter().any(|f| f.0 == name))
}

fn file(s: &Shared, name: &str) -> Result<Response, ApiError> {
    let found = FILES
        .iter()
        .find(|f| f.0 == name)
        .filter(|_| s.config.webui);
    let Some((_, ctype, body)) = found else {
        return Err(ApiError::not_found("File Not Found"));
    };
    let mut r = (*body).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(ctype));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(r)
}

pub async fn index(State(s): State<Shared>) -> Result<Response, ApiError> {
    file(&s, "index.html")
}

pub async fn asset(
    State(s): State<Shared>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    file(&s, &name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_of_the_ui_is_served() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("webui");
        let mut on_disk: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        on_disk.sort();
        let mut served: Vec<String> = FILES.iter().map(|f| f.0.to_string()).collect();
        served.sort();
        assert_eq!(served, on_disk);
    }
}
