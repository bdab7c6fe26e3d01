//! Who may act: the bearer token of `[web] token_env`, shown either in an
//! `Authorization: Bearer` header (scripts) or, in a browser, once to the
//! sign-in form, which opens a session ([`super::sessions`]): a random id
//! in a cookie, stored (hashed) in the database with the replica that
//! issued it, its own CSRF token and its expiry; sign-out deletes it. A
//! browser's POSTs carry the session's CSRF token and must come from the
//! dashboard's own origin. The messages a page shows after an action are
//! signed with an HMAC-SHA256 keyed by the token. Comparisons of secrets
//! run in constant time.

use axum::http::{HeaderMap, header};

use crate::config::PublicUrl;
use crate::text::{hex, unhex};
use hmac::{KeyInit, Mac};
use sha2::Sha256;

/// How long a session is good for.
pub(crate) const SESSION_LIFE: std::time::Duration = std::time::Duration::from_secs(12 * 3600);

/// Seconds since the Unix epoch, by this host's clock.
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// How long a signed message may be shown after its action.
pub(crate) const MESSAGE_LIFE: std::time::Duration = std::time::Duration::from_secs(60);

/// What a message's signature covers: every part, length-prefixed so that
/// no two different messages share a label.
fn message_label(job: &str, instance: &str, expires: u64, text: &str) -> String {
    format!(
        "message:{}:{job}:{}:{instance}:{expires}:{text}",
        job.len(),
        instance.len()
    )
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
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Caller {
    /// Actions are off: no token is configured.
    ReadOnly,
    /// No or a wrong credential.
    Anonymous,
    /// The right bearer token in `Authorization`.
    Bearer,
    /// A browser with a live session of this replica's.
    Session(super::sessions::Session),
}

impl Caller {
    /// Whether `given` is its session's CSRF token (constant time).
    pub(crate) fn is_csrf(&self, given: &str) -> bool {
        match self {
            Caller::Session(session) => {
                use subtle_eq::eq;
                eq(session.csrf.as_bytes(), given.trim().as_bytes())
            }
            _ => false,
        }
    }
}

/// Equality of secrets in time that does not depend on where they differ.
mod subtle_eq {
    pub(super) fn eq(a: &[u8], b: &[u8]) -> bool {
        a.len() == b.len() && a.iter().zip(b).fold(0_u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

/// What a request's headers show.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Credential<'h> {
    /// Who it is, already.
    Known(Caller),
    /// A session cookie's value, to look up.
    Cookie(&'h str),
}

/// An HMAC-SHA256 of `label` keyed by `key`.
fn keyed(key: &str, label: &str) -> Option<Hmac> {
    let mut mac = Hmac::new_from_slice(key.as_bytes()).ok()?;
    mac.update(label.as_bytes());
    Some(mac)
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

    /// `text`'s signature for the page of `job` on replica `instance`,
    /// good until `expires` (Unix seconds), so that a page shows only
    /// messages it wrote, about itself, and only for a short while.
    pub(crate) fn sign(
        &self,
        job: &str,
        instance: &str,
        expires: u64,
        text: &str,
    ) -> Option<String> {
        self.signed(&message_label(job, instance, expires, text))
    }

    /// Whether `signature` is [`Auth::sign`]'s of `text` for this page and
    /// replica, and not expired.
    pub(crate) fn is_signed(
        &self,
        job: &str,
        instance: &str,
        expires: u64,
        text: &str,
        signature: &str,
    ) -> bool {
        let now = unix_now();
        expires >= now
            && expires <= now + 2 * MESSAGE_LIFE.as_secs()
            && self.verify(&message_label(job, instance, expires, text), signature)
    }

    /// Who sent `headers`, as far as the headers alone tell: read-only, a
    /// bearer (right or wrong), or the value of the session cookie named
    /// `cookie`, which [`super::caller`] looks up.
    pub(crate) fn credential<'h>(&self, headers: &'h HeaderMap, cookie: &str) -> Credential<'h> {
        if !self.actions() {
            return Credential::Known(Caller::ReadOnly);
        }
        if let Some(bearer) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token)
        {
            return Credential::Known(if self.is_token(bearer) {
                Caller::Bearer
            } else {
                Caller::Anonymous
            });
        }
        let session = headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(name, _)| *name == cookie)
            .map(|(_, value)| value.trim())
            .filter(|value| !value.is_empty());
        match session {
            Some(value) => Credential::Cookie(value),
            None => Credential::Known(Caller::Anonymous),
        }
    }
}

/// Whether a browser's POST comes from the dashboard's own pages: a
/// cross-site `Sec-Fetch-Site`, or an `Origin` that is neither the
/// request's `Host` nor `public` (`[web] public_url`, which a proxy that
/// rewrites `Host` leaves as the only witness), is refused. (Browsers send
/// at least one of them on every POST; a script without either is judged
/// by its token alone.)
pub(crate) fn same_origin(headers: &HeaderMap, public: Option<&PublicUrl>) -> bool {
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
            if public.is_some_and(|public| origin.eq_ignore_ascii_case(&public.origin)) {
                return true;
            }
            let origin_host = origin.split_once("://").map_or(origin, |(_, h)| h);
            host.is_some_and(|host| host == origin_host)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DEFAULT_COOKIE as COOKIE;
    use axum::http::HeaderValue;

    #[test]
    fn tokens_messages_and_credentials() {
        let auth = Auth::new(Some("correct-horse-battery-staple".to_string()));
        assert!(auth.is_token("correct-horse-battery-staple"));
        assert!(!auth.is_token("correct-horse-battery-stapl"));
        // Messages a page shows are its own.
        let expires = unix_now() + 60;
        let signature = auth
            .sign("job", "r1", expires, "job: paused")
            .expect("signed");
        assert!(auth.is_signed("job", "r1", expires, "job: paused", &signature));
        assert!(!auth.is_signed(
            "job",
            "r1",
            expires,
            "re-enter your token at evil.example",
            &signature
        ));
        assert!(!auth.is_signed("other", "r1", expires, "job: paused", &signature));
        assert!(!auth.is_signed("job", "r2", expires, "job: paused", &signature));
        assert!(!auth.is_signed("job", "r1", expires + 1, "job: paused", &signature));
        let past = unix_now() - 1;
        let old = auth.sign("job", "r1", past, "job: paused").expect("signed");
        assert!(!auth.is_signed("job", "r1", past, "job: paused", &old));

        let mut headers = HeaderMap::new();
        assert_eq!(
            auth.credential(&headers, COOKIE),
            Credential::Known(Caller::Anonymous)
        );
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=b; replicron_session=abc; other=x"),
        );
        assert_eq!(auth.credential(&headers, COOKIE), Credential::Cookie("abc"));
        assert_eq!(
            auth.credential(&headers, "mine"),
            Credential::Known(Caller::Anonymous)
        );
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer wrong"),
        );
        assert_eq!(
            auth.credential(&headers, COOKIE),
            Credential::Known(Caller::Anonymous)
        );
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("bearer correct-horse-battery-staple"),
        );
        assert_eq!(
            auth.credential(&headers, COOKIE),
            Credential::Known(Caller::Bearer)
        );

        let off = Auth::new(None);
        assert_eq!(
            off.credential(&headers, COOKIE),
            Credential::Known(Caller::ReadOnly)
        );

        let session = Caller::Session(super::super::sessions::Session {
            id: "id".to_string(),
            csrf: "0123abcd".to_string(),
        });
        assert!(
            session.is_csrf("0123abcd") && !session.is_csrf("0123abce") && !session.is_csrf("")
        );
        assert!(!Caller::Bearer.is_csrf("0123abcd"));
    }

    #[test]
    fn only_the_dashboards_own_pages_may_post() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("127.0.0.1:9187"));
        assert!(same_origin(&headers, None));
        headers.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:9187"),
        );
        assert!(same_origin(&headers, None));
        headers.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        assert!(!same_origin(&headers, None));
        headers.remove(header::ORIGIN);
        headers.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(!same_origin(&headers, None));
        // Behind a proxy that rewrites Host, the public origin is the
        // dashboard's own.
        let public = PublicUrl::parse("https://cron.example.com").expect("origin");
        let mut proxied = HeaderMap::new();
        proxied.insert(header::HOST, "127.0.0.1:9187".parse().expect("header"));
        proxied.insert(
            header::ORIGIN,
            "https://cron.example.com".parse().expect("header"),
        );
        assert!(!same_origin(&proxied, None));
        assert!(same_origin(&proxied, Some(&public)));
        proxied.insert(
            header::ORIGIN,
            "https://evil.example".parse().expect("header"),
        );
        assert!(!same_origin(&proxied, Some(&public)));
    }
}
