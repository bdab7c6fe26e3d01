//! Who may act: the bearer token of `[web] token_env`, shown either in an
//! `Authorization: Bearer` header (scripts) or, in a browser, as a session
//! cookie set by the login form. A browser's POSTs also carry a CSRF token
//! and must come from the dashboard's own origin.
//!
//! Neither the cookie nor the CSRF token is the bearer token itself: each is
//! an HMAC-SHA256 keyed by it (the cookie's over its issue time, which
//! bounds its life to [`SESSION_LIFE`]), so a leaked page or cookie does
//! not reveal the token, and changing the token (a restart) ends every
//! session. Comparisons run in constant time (`Mac::verify_slice`).

use axum::http::{HeaderMap, header};
use hmac::{KeyInit, Mac};
use sha2::Sha256;

/// The session cookie's name.
pub(crate) const COOKIE: &str = "replicron_session";

/// How long a session cookie is good for.
pub(crate) const SESSION_LIFE: std::time::Duration = std::time::Duration::from_secs(12 * 3600);

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

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

/// An HMAC-SHA256 of `label` keyed by `key`.
fn keyed(key: &str, label: &str) -> Option<Hmac> {
    let mut mac = Hmac::new_from_slice(key.as_bytes()).ok()?;
    mac.update(label.as_bytes());
    Some(mac)
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
        keyed(self.token.as_ref()?, label)
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
        match (self.mac("token"), keyed(given.trim(), "token")) {
            (Some(mine), Some(theirs)) => {
                mine.verify_slice(&theirs.finalize().into_bytes()).is_ok()
            }
            _ => false,
        }
    }

    /// A new session cookie's value: its issue time and its HMAC.
    pub(crate) fn session(&self) -> Option<String> {
        let issued = unix_now();
        Some(format!(
            "{issued}.{}",
            self.signed(&format!("session:{issued}"))?
        ))
    }

    fn is_session(&self, value: &str) -> bool {
        let Some((issued, mac)) = value.split_once('.') else {
            return false;
        };
        let Ok(at) = issued.parse::<u64>() else {
            return false;
        };
        let now = unix_now();
        at <= now + 60
            && now.saturating_sub(at) < SESSION_LIFE.as_secs()
            && self.verify(&format!("session:{at}"), mac)
    }

    /// `text`'s signature, so that a page shows only messages it wrote.
    pub(crate) fn sign(&self, text: &str) -> Option<String> {
        self.signed(&format!("message:{text}"))
    }

    /// Whether `signature` is [`Auth::sign`]'s of `text`.
    pub(crate) fn is_signed(&self, text: &str, signature: &str) -> bool {
        self.verify(&format!("message:{text}"), signature)
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
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token)
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
            Some(value) if self.is_session(value) => Caller::Session,
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
        assert!(auth.is_session(&session));
        // An old session, or one signed for another time, is no session.
        let old = unix_now() - SESSION_LIFE.as_secs() - 1;
        let expired = format!(
            "{old}.{}",
            auth.signed(&format!("session:{old}")).expect("mac")
        );
        assert!(!auth.is_session(&expired));
        let (_, mac) = session.split_once('.').expect("issued.mac");
        assert!(!auth.is_session(&format!("{old}.{mac}")));
        // Messages a page shows are its own.
        let signature = auth.sign("job: paused").expect("signed");
        assert!(auth.is_signed("job: paused", &signature));
        assert!(!auth.is_signed("re-enter your token at evil.example", &signature));
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
            HeaderValue::from_static("bearer correct-horse-battery-staple"),
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
