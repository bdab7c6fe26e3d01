//! The dashboard's static files, built into the binary and served at
//! `/static/NAME`: its scripts and its icon. Nothing else is served
//! from here; an unknown name is a 404.

use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// Each file: its name under `/static/`, its type and its bytes.
const FILES: &[(&str, &str, &str)] = &[
    (
        "replicron.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/replicron.js"),
    ),
    (
        "live.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/live.js"),
    ),
    (
        "favicon.svg",
        "image/svg+xml",
        include_str!("assets/favicon.svg"),
    ),
];

/// The path the pages name a file by; the file's version is part of it, so
/// a browser may keep it until the binary changes.
pub(super) fn path(name: &str) -> String {
    format!("/static/{name}?v={}", env!("CARGO_PKG_VERSION"))
}

/// `GET /static/{name}`.
pub(super) async fn file(Path(name): Path<String>) -> Response {
    serve(&name)
}

/// `GET /favicon.ico`, which browsers ask for on their own: the icon.
pub(super) async fn favicon() -> Response {
    serve("favicon.svg")
}

fn serve(name: &str) -> Response {
    match FILES.iter().find(|(file, _, _)| *file == name) {
        Some((_, kind, body)) => {
            let mut response = (*body).into_response();
            let headers = response.headers_mut();
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
            // The files are the binary's, not any run's: they may be kept.
            headers.insert(
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=86400"),
            );
            response
        }
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_is_served_with_its_type_and_others_are_not_found() {
        for (name, kind, _) in FILES {
            let response = serve(name);
            assert_eq!(response.status(), StatusCode::OK, "{name}");
            assert_eq!(response.headers()[header::CONTENT_TYPE], *kind);
        }
        assert_eq!(serve("../mod.rs").status(), StatusCode::NOT_FOUND);
        assert_eq!(serve("").status(), StatusCode::NOT_FOUND);
    }

    /// Output appended live shows a bidirectional control as the
    /// server-rendered part of the page does: `live.js`'s `bidiVisible`,
    /// run by node, against `text::bidi_visible`.
    #[test]
    fn live_output_shows_bidi_controls_as_the_page_does() {
        let inputs: Vec<String> = ['\u{061C}', '\u{200E}', '\u{200F}', '\u{2066}', '\u{2069}']
            .into_iter()
            .chain('\u{202A}'..='\u{202E}')
            .map(|c| format!("r1{c}lave \u{e9}t\u{e9}"))
            .chain(["plain text, \u{202F}narrow".to_string()])
            .collect();
        let script = format!(
            "var document = {{ getElementById: function () {{ return null; }} }};\n{}\n\
             console.log(JSON.stringify({}.map(bidiVisible)));",
            include_str!("assets/live.js"),
            serde_json::to_string(&inputs).expect("JSON"),
        );
        let output = match std::process::Command::new("node")
            .args(["-e", &script])
            .output()
        {
            Ok(output) => output,
            Err(e) => {
                eprintln!("skipped: node is not installed ({e})");
                return;
            }
        };
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let shown: Vec<String> = serde_json::from_slice(&output.stdout).expect("JSON");
        let expected: Vec<String> = inputs
            .iter()
            .map(|text| crate::text::bidi_visible(text).into_owned())
            .collect();
        assert_eq!(shown, expected);
        assert!(shown[0].contains("\u{27E8}U+061C\u{27E9}"), "{shown:?}");
    }
}
