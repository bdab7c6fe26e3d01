//! The dashboard's sign-in sessions, stored in the database: a random id
//! in the cookie (the table keeps only the SHA-256 of it with the SHA-256
//! of the token that signed it in), the replica that issued it (no other
//! accepts it), a CSRF token of its own and an expiry. A session is looked
//! up through the tokens as they are now, so one whose token changed or
//! was removed is found by none: it ends with its token. Sign-out deletes
//! the row, so a copy of the cookie is worth nothing after it.

use std::time::Duration;

use diesel::prelude::*;
use sha2::{Digest, Sha256};

use crate::db::clock::{DbNow, DbNowPlus};
use crate::db::schema::replicron_web_sessions::dsl as sessions;
use crate::db::{DbConnection, DbError, Store};

/// A signed-in session, as a request presents it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Session {
    /// The SHA-256 of the cookie's value, the row's key.
    pub(crate) id: String,
    /// Its CSRF token.
    pub(crate) csrf: String,
    /// The name of the token it was signed in with (`None`: a session
    /// issued before tokens had names).
    pub(crate) token_name: Option<String>,
}

fn random_hex() -> String {
    let bytes: [u8; 32] = rand::random();
    crate::text::hex(&bytes)
}

/// The row key of the cookie value `cookie` for the token whose value's
/// SHA-256 is `token_hash`.
fn key_of(cookie: &str, token_hash: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(cookie.trim().as_bytes());
    hasher.update(b"\n");
    hasher.update(token_hash.as_bytes());
    crate::text::hex(&hasher.finalize())
}

/// Issues a session for `instance` for `life`, signed in with the token
/// named `token_name` whose value's SHA-256 is `token_hash`: the cookie's
/// value and the session. Rows that have expired go at the same time.
fn create(
    conn: &mut DbConnection,
    instance: &str,
    (token_name, token_hash): (&str, &str),
    life: Duration,
) -> QueryResult<(String, Session)> {
    diesel::delete(sessions::replicron_web_sessions)
        .filter(sessions::expires_at.lt(DbNow))
        .execute(conn)?;
    let cookie = random_hex();
    let session = Session {
        id: key_of(&cookie, token_hash),
        csrf: random_hex(),
        token_name: Some(token_name.to_string()),
    };
    diesel::insert_into(sessions::replicron_web_sessions)
        .values((
            sessions::id.eq(&session.id),
            sessions::instance.eq(instance),
            sessions::csrf.eq(&session.csrf),
            sessions::created_at.eq(DbNow),
            sessions::expires_at.eq(DbNowPlus::new(life)),
            sessions::token_name.eq(token_name),
        ))
        .execute(conn)?;
    Ok((cookie, session))
}

/// The live session of `instance` the cookie value `cookie` names, signed
/// in with one of `tokens` (name, SHA-256 of its value) as they are now.
fn find(
    conn: &mut DbConnection,
    instance: &str,
    cookie: &str,
    tokens: &[(String, String)],
) -> QueryResult<Option<Session>> {
    let keys: Vec<(String, &str)> = tokens
        .iter()
        .map(|(name, hash)| (key_of(cookie, hash), name.as_str()))
        .collect();
    let found = sessions::replicron_web_sessions
        .select((sessions::id, sessions::csrf, sessions::token_name))
        .filter(sessions::id.eq_any(keys.iter().map(|(key, _)| key.clone())))
        .filter(sessions::instance.eq(instance))
        .filter(sessions::expires_at.gt(DbNow))
        .load::<(String, String, Option<String>)>(conn)?;
    // The row's token must be the one whose binding found it.
    Ok(found.into_iter().find_map(|(id, csrf, token_name)| {
        keys.iter()
            .any(|(key, name)| *key == id && token_name.as_deref() == Some(*name))
            .then_some(Session {
                id,
                csrf,
                token_name,
            })
    }))
}

/// Ends the session with row key `id`.
fn revoke(conn: &mut DbConnection, id: &str) -> QueryResult<usize> {
    diesel::delete(sessions::replicron_web_sessions)
        .filter(sessions::id.eq(id))
        .execute(conn)
}

impl Store {
    /// [`create`].
    pub(crate) async fn create_session(
        &self,
        instance: &str,
        (token_name, token_hash): (&str, &str),
        life: Duration,
    ) -> Result<(String, Session), DbError> {
        let (instance, token_name, token_hash) = (
            instance.to_string(),
            token_name.to_string(),
            token_hash.to_string(),
        );
        self.call("creating a sign-in session", move |conn| {
            create(conn, &instance, (&token_name, &token_hash), life)
        })
        .await
    }

    /// [`find`].
    pub(crate) async fn find_session(
        &self,
        instance: &str,
        cookie: &str,
        tokens: Vec<(String, String)>,
    ) -> Result<Option<Session>, DbError> {
        let (instance, cookie) = (instance.to_string(), cookie.to_string());
        self.call("reading a sign-in session", move |conn| {
            find(conn, &instance, &cookie, &tokens)
        })
        .await
    }

    /// [`revoke`].
    pub(crate) async fn revoke_session(&self, id: &str) -> Result<(), DbError> {
        let id = id.to_string();
        self.call("ending a sign-in session", move |conn| revoke(conn, &id))
            .await
            .map(drop)
    }
}
