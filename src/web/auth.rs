//! Who may act: the bearer token of `[web] token_env`, shown either in an
//! `Authorization: Bearer` header (scripts) or, in a browser, as a session
//! cookie set by the login form. A browser's POSTs also carry a CSRF token
//! and must come from the dashboard's own origin.
//!
//! Neither the cookie nor the CSRF token is the bearer token itself: each is
//! an HMAC-SHA256 of a fixed label keyed by it, so a leaked page or cookie
//! does not reveal the token, and changing the token (a restart) ends every
//! session. Comparisons run in constant time (`Mac::verify_slice`).

use axum::http::{HeaderMap, header};
use hmac::{KeyInit, Mac};
use sha2::Sha256;

/// The session cookie's name.
pub(crate) const COOKIE: &str = "replicron_session";

/// The header a script may send the CSRF token in, with a session cookie.
pub(crate) const CSRF_HEADER: &str = "x-csrf-token";

type Hmac = hmac::Hmac<Sha256>;

/// The token, if actions are on.
#[derive(Clone)]
pub(crate) struct Auth {
    token: Option<String>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("actions", &self.token.is_some())
            .finish()
    }
}

/// Who a request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Caller {
    /// Actions are off: no token is configured.
    ReadOnly,
    /// No or a wrong credential.
    Anonymous,
    /// The right bearer token in `Authorization`.
    Bearer,
    /// A browser with a valid session cookie.
    Session,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

impl Auth {
    /// Actions allowed with `token`; none without.
    pub(crate) fn new(token: Option<String>) -> Self {
        Auth { token }
    }

    /// Whether actions are on.
    pub(crate) fn actions(&self) -> bool {
        self.token.is_some()
    }

    fn mac(&self, label: &str) -> Option<Hmac> {
        let token = self.token.as_ref()?;
        let mut mac = Hmac::new_from_slice(token.as_bytes()).ok()?;
        mac.update(label.as_bytes());
        Some(mac)
    }

    fn signed(&self, label: &str) -> Option<String> {
        Some(hex(&self.mac(label)?.finalize().into_bytes()))
    }

    fn verify(&self, label: &str, given: &str) -> bool {
        match (self.mac(label), unhex(given.trim())) {
            (Some(mac), Some(given)) => mac.verify_slice(&given).is_ok(),
            _ => false,
        }
    }

    /// Whether `given` is the token (constant time: both are MACed).
    pub(crate) fn is_token(&self, given: &str) -> bool {
        let Some(mac) = self.mac("token") else {
            return false;
        };
        let Some(theirs) = (Auth {
            token: Some(given.trim().to_string()),
        })
        .mac("token") else {
            return false;
        };
        mac.verify_slice(&theirs.finalize().into_bytes()).is_ok()
    }

    /// The session cookie's value.
    pub(crate) fn session(&self) -> Option<String> {
        self.signed("session")
    }

    /// The CSRF token the dashboard puts in its forms.
    pub(crate) fn csrf(&self) -> Option<String> {
        self.signed("csrf")
    }

    /// Whether `given` is the CSRF token.
    pub(crate) fn is_csrf(&self, given: &str) -> bool {
        self.verify("csrf", given)
    }

    /// Who sent `headers`.
    pub(crate) fn caller(&self, headers: &HeaderMap) -> Caller {
        if !self.actions() {
            return Caller::ReadOnly;
        }
        if let Some(bearer) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
        {
            return if self.is_token(bearer) {
                Caller::Bearer
            } else {
                Caller::Anonymous
            };
        }
        let session = headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(name, _)| *name == COOKIE)
            .map(|(_, value)| value);
        match session {
            Some(value) if self.verify("session", value) => Caller::Session,
            _ => Caller::Anonymous,
        }
    }
}

/// Whether a browser's POST comes from the dashboard's own pages: a
/// cross-site `Sec-Fetch-Site`, or an `Origin` whose host is not the
/// request's `Host`, is refused. (Browsers send at least one of them on
/// every POST; a script without either is judged by its token alone.)
pub(crate) fn same_origin(headers: &HeaderMap) -> bool {
    let site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
    if let Some(site) = site
        && !matches!(site, "same-origin" | "none")
    {
        return false;
    }
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    match headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) {
        None => true,
        Some(origin) => {
            let origin_host = origin.split_once("://").map_or(origin, |(_, h)| h);
            host.is_some_and(|host| host == origin_host)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn tokens_cookies_and_csrf_tokens() {
        let auth = Auth::new(Some("correct-horse-battery-staple".to_string()));
        assert!(auth.is_token("correct-horse-battery-staple"));
        assert!(!auth.is_token("correct-horse-battery-stapl"));
        let session = auth.session().expect("a session");
        let csrf = auth.csrf().expect("a csrf token");
        assert_ne!(session, csrf);
        assert!(!session.contains("horse") && auth.is_csrf(&csrf) && !auth.is_csrf(&session));
        assert!(!auth.is_csrf("zz") && !auth.is_csrf(""));

        let mut headers = HeaderMap::new();
        assert_eq!(auth.caller(&headers), Caller::Anonymous);
        headers.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("a=b; {COOKIE}={session}")).expect("header"),
        );
        assert_eq!(auth.caller(&headers), Caller::Session);
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer wrong"),
        );
        assert_eq!(auth.caller(&headers), Caller::Anonymous);
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer correct-horse-battery-staple"),
        );
        assert_eq!(auth.caller(&headers), Caller::Bearer);

        let off = Auth::new(None);
        assert_eq!(off.caller(&headers), Caller::ReadOnly);
        assert!(!off.is_token("") && off.csrf().is_none());
    }

    #[test]
    fn only_the_dashboards_own_pages_may_post() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("127.0.0.1:9187"));
        assert!(same_origin(&headers));
        headers.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:9187"),
        );
        assert!(same_origin(&headers));
        headers.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        assert!(!same_origin(&headers));
        headers.remove(header::ORIGIN);
        headers.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(!same_origin(&headers));
    }
}
