//! Who may act: a bearer token of `[web] token_env` or `[web] tokens`,
//! each known by its name (the audit log's who), shown either in an
//! `Authorization: Bearer` header (scripts) or, in a browser, once to the
//! sign-in form, which opens a session ([`super::sessions`]): a random id
//! in a cookie, stored (hashed with the SHA-256 of the token that signed
//! it in, so that it ends when that token changes or goes) in the database
//! with the replica that issued it, its own CSRF token and its expiry;
//! sign-out deletes it. A
//! browser's POSTs carry the session's CSRF token and must come from the
//! dashboard's own origin; a session carries the name of the token that
//! signed it in. Each token has a grant ([`crate::config::Grant`]): the
//! rights it has and the jobs it reaches, which every action is checked
//! against ([`Auth::denied`]) and what a token is shown is narrowed to
//! ([`Auth::shows`]). The messages a page shows after an action are signed with
//! an HMAC-SHA256 keyed by the tokens. Comparisons of secrets run in
//! constant time.

use axum::http::{HeaderMap, header};

use crate::config::{Grant, PublicUrl, Right, Token};
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

/// The tokens by name, each with its grant; actions are on if there is
/// one.
#[derive(Clone)]
pub(crate) struct Auth {
    tokens: Vec<Token>,
    /// What messages are signed with: every token, length-prefixed.
    key: Option<String>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field(
                "tokens",
                &self.tokens.iter().map(|t| &t.name).collect::<Vec<_>>(),
            )
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
    /// A right bearer token in `Authorization`: its name.
    Bearer(String),
    /// A browser with a live session of this replica's.
    Session(super::sessions::Session),
}

impl Caller {
    /// The name of the token it acts with, if it may act.
    pub(crate) fn token_name(&self) -> Option<&str> {
        match self {
            Caller::Bearer(name) => Some(name),
            Caller::Session(session) => Some(session.token_name.as_deref().unwrap_or("?")),
            Caller::ReadOnly | Caller::Anonymous => None,
        }
    }

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

/// Why a caller with a token may not do what it asked: the right it
/// lacks (or whose job its grant does not reach) and the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Denied {
    /// A sentence for people, naming the token (never its value).
    pub(crate) why: String,
    /// The right asked for.
    pub(crate) right: Right,
    /// The job.
    pub(crate) job: String,
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
    /// Actions allowed with each of `tokens`, as far as its grant says;
    /// none without.
    pub(crate) fn new(tokens: Vec<Token>) -> Self {
        let key = (!tokens.is_empty()).then(|| {
            tokens
                .iter()
                .map(|t| {
                    let (name, token) = (&t.name, &t.value);
                    format!("{}:{name}:{}:{token}", name.len(), token.len())
                })
                .collect::<String>()
        });
        Auth { tokens, key }
    }

    /// The grant of `caller`'s token: `None` for a caller without one
    /// (who may read everything and do nothing), or a session whose token
    /// is no longer known.
    pub(crate) fn grant(&self, caller: &Caller) -> Option<&Grant> {
        let name = match caller {
            Caller::Bearer(name) => name.as_str(),
            Caller::Session(session) => session.token_name.as_deref()?,
            Caller::ReadOnly | Caller::Anonymous => return None,
        };
        self.tokens
            .iter()
            .find(|t| t.name == name)
            .map(|t| &t.grant)
    }

    /// Whether `caller` is shown the job (or lease row) `name`: a caller
    /// without a token sees every job, as reading is open; a token, the
    /// jobs its grant reaches.
    pub(crate) fn shows(&self, caller: &Caller, name: &str) -> bool {
        match caller {
            Caller::Bearer(_) | Caller::Session(_) => {
                self.grant(caller).is_none_or(|grant| grant.reaches(name))
            }
            Caller::ReadOnly | Caller::Anonymous => true,
        }
    }

    /// Whether some token is limited to some jobs.
    pub(crate) fn any_scoped(&self) -> bool {
        self.tokens.iter().any(|t| t.grant.jobs.is_some())
    }

    /// Whether `caller` is limited to some jobs (and lists must be
    /// filtered by [`Auth::shows`]).
    pub(crate) fn scoped(&self, caller: &Caller) -> bool {
        self.grant(caller).is_some_and(|grant| grant.jobs.is_some())
    }

    /// Whether `caller` may do `right` to the job `name`.
    pub(crate) fn may(&self, caller: &Caller, right: Right, name: &str) -> bool {
        self.denied(caller, right, name).is_none()
    }

    /// Why `caller`, who has a token, may not do `right` to the job
    /// `name`, if it may not (never the token's value).
    pub(crate) fn denied(&self, caller: &Caller, right: Right, name: &str) -> Option<Denied> {
        let token = caller.token_name().unwrap_or("?").to_string();
        let Some(grant) = self.grant(caller) else {
            return Some(Denied {
                why: format!(
                    "the token {token:?} of this session is no longer configured: sign in again"
                ),
                right,
                job: name.to_string(),
            });
        };
        let why = if !grant.allows(right) {
            let can: Vec<&str> = grant.can.iter().map(|r| r.as_str()).collect();
            format!(
                "the token {token:?} may not {right} {name}: it lacks the right {right} (it has {})",
                can.join(", ")
            )
        } else if !grant.reaches(name) {
            let jobs: Vec<&str> = grant.jobs.iter().flatten().map(String::as_str).collect();
            format!(
                "the token {token:?} may not {right} {name}: its jobs are {}",
                jobs.join(", ")
            )
        } else {
            return None;
        };
        Some(Denied {
            why,
            right,
            job: name.to_string(),
        })
    }

    /// What binds a session to each token as it is now: its name and the
    /// SHA-256 of its value. A session is found only through its token's
    /// binding ([`super::sessions`]), so it ends when the token changes
    /// or is removed.
    pub(crate) fn bindings(&self) -> Vec<(String, String)> {
        use sha2::Digest;
        self.tokens
            .iter()
            .map(|t| (t.name.clone(), hex(&Sha256::digest(t.value.as_bytes()))))
            .collect()
    }

    /// Whether actions are on.
    pub(crate) fn actions(&self) -> bool {
        self.key.is_some()
    }

    fn mac(&self, label: &str) -> Option<Hmac> {
        keyed(self.key.as_ref()?, label)
    }

    /// `text` with every token in it written as
    /// [`crate::db::audit::REDACTED`].
    pub(crate) fn redact(&self, text: &str) -> String {
        self.tokens.iter().fold(text.to_string(), |text, t| {
            text.replace(t.value.as_str(), crate::db::audit::REDACTED)
        })
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

    /// `entry` with every token in its arguments' text redacted.
    pub(crate) fn redact_entry(
        &self,
        mut entry: crate::db::audit::Entry,
    ) -> crate::db::audit::Entry {
        fn walk(auth: &Auth, value: &mut serde_json::Value) {
            match value {
                serde_json::Value::String(text) => *text = auth.redact(text),
                serde_json::Value::Object(map) => map.values_mut().for_each(|v| walk(auth, v)),
                serde_json::Value::Array(items) => items.iter_mut().for_each(|v| walk(auth, v)),
                _ => {}
            }
        }
        entry.args.values_mut().for_each(|v| walk(self, v));
        entry
    }

    /// The name of the token `given` is, if it is one (constant time:
    /// both are MACed, and every token is compared).
    pub(crate) fn token_name(&self, given: &str) -> Option<&str> {
        let theirs = keyed(given.trim(), "token")?.finalize().into_bytes();
        let mut found = None;
        for t in &self.tokens {
            if keyed(&t.value, "token").is_some_and(|mine| mine.verify_slice(&theirs).is_ok()) {
                found = Some(t.name.as_str());
            }
        }
        found
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
            return Credential::Known(match self.token_name(bearer) {
                Some(name) => Caller::Bearer(name.to_string()),
                None => Caller::Anonymous,
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

    fn token(name: &str, value: &str, grant: Grant) -> Token {
        Token {
            name: name.to_string(),
            value: value.to_string(),
            grant,
        }
    }

    #[test]
    fn tokens_messages_and_credentials() {
        let auth = Auth::new(vec![
            token("ci", "a-token-for-the-ci-runs", Grant::full()),
            token("default", "correct-horse-battery-staple", Grant::full()),
        ]);
        assert_eq!(
            auth.token_name("correct-horse-battery-staple"),
            Some("default")
        );
        assert_eq!(auth.token_name("a-token-for-the-ci-runs"), Some("ci"));
        assert_eq!(auth.token_name("correct-horse-battery-stapl"), None);
        assert_eq!(
            auth.redact("reason: correct-horse-battery-staple"),
            "reason: [redacted]"
        );
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
            Credential::Known(Caller::Bearer("default".to_string()))
        );

        let off = Auth::new(Vec::new());
        assert_eq!(
            off.credential(&headers, COOKIE),
            Credential::Known(Caller::ReadOnly)
        );

        let session = Caller::Session(super::super::sessions::Session {
            id: "id".to_string(),
            csrf: "0123abcd".to_string(),
            token_name: Some("ci".to_string()),
        });
        assert_eq!(session.token_name(), Some("ci"));
        assert!(
            session.is_csrf("0123abcd") && !session.is_csrf("0123abce") && !session.is_csrf("")
        );
        assert!(!Caller::Bearer("ci".to_string()).is_csrf("0123abcd"));
    }

    #[test]
    fn a_tokens_grant_bounds_what_it_does_and_sees() {
        let grant = |can: &[Right], jobs: Option<&[&str]>| Grant {
            can: can.to_vec(),
            jobs: jobs.map(|jobs| jobs.iter().map(|j| j.to_string()).collect()),
        };
        let auth = Auth::new(vec![
            token("ro", "a-read-only-token-0000", grant(&[Right::Read], None)),
            token(
                "ci",
                "a-token-for-the-ci-runs",
                grant(&[Right::Trigger, Right::Backfill], Some(&["deploy-*"])),
            ),
            token("ops", "a-token-for-operators", Grant::full()),
        ]);
        let [ro, ci, ops] = ["ro", "ci", "ops"].map(|n| Caller::Bearer(n.to_string()));
        // Read is every token's; the rest only as granted.
        assert!(auth.may(&ro, Right::Read, "fine"));
        let denied = auth.denied(&ro, Right::Trigger, "fine").expect("refused");
        assert_eq!(
            (denied.right, denied.job.as_str()),
            (Right::Trigger, "fine")
        );
        assert!(
            denied.why.contains("lacks the right trigger"),
            "{}",
            denied.why
        );
        assert!(!denied.why.contains("a-read-only-token"), "{}", denied.why);
        assert!(auth.may(&ci, Right::Trigger, "deploy-x"));
        assert!(auth.may(&ci, Right::Read, "deploy-x"));
        assert!(auth.may(&ci, Right::Backfill, "deploy-x"));
        assert!(!auth.may(&ci, Right::Pause, "deploy-x"));
        let denied = auth
            .denied(&ci, Right::Trigger, "other-job")
            .expect("refused");
        assert!(
            denied.why.contains("its jobs are deploy-*"),
            "{}",
            denied.why
        );
        for right in Right::ALL {
            assert!(auth.may(&ops, right, "anything"), "{right}");
        }
        // What each is shown.
        assert!(auth.shows(&ci, "deploy-x") && !auth.shows(&ci, "other-job"));
        assert!(auth.shows(&ro, "other-job") && !auth.scoped(&ro) && auth.scoped(&ci));
        assert!(auth.shows(&Caller::Anonymous, "other-job"));
        // A session of a token no longer configured acts as nothing.
        let gone = Caller::Session(super::super::sessions::Session {
            id: "id".to_string(),
            csrf: "0123abcd".to_string(),
            token_name: Some("gone".to_string()),
        });
        assert!(!auth.may(&gone, Right::Read, "fine"));
        assert_eq!(auth.grant(&Caller::Anonymous), None);
    }

    #[test]
    fn globs_match_names_whole() {
        use crate::config::glob_matches as matches;
        for (pattern, name, expected) in [
            ("deploy-*", "deploy-x", true),
            ("deploy-*", "deploy-", true),
            ("deploy-*", "x-deploy-x", false),
            ("*-nightly", "db-nightly", true),
            ("db-?", "db-1", true),
            ("db-?", "db-12", false),
            ("a*b*c", "aXbYbZc", true),
            ("a*b*c", "aXbYc-", false),
            ("*", "anything", true),
            ("exact", "exact", true),
            ("exact", "exactly", false),
        ] {
            assert_eq!(matches(pattern, name), expected, "{pattern} {name}");
        }
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
