//! The database: one connection type over every compiled backend
//! ([`connection`]), how a session is opened and prepared ([`session`]), the
//! pool ([`pool`]), the typed async [`Store`] every other module reaches the
//! database through, the SQL that differs by backend ([`clock`]), whether the
//! database answers ([`health`]) and keeps what it acknowledged
//! ([`durability`]), and the embedded migrations ([`migrate`]).
//! The tables are described in `docs/design.md#the-tables`.
//!
//! The backend is chosen from the URL scheme by [`DatabaseUrl`].

pub(crate) mod audit;
pub(crate) mod batch;
pub(crate) mod cached;
pub(crate) mod clock;
mod connection;
pub(crate) mod durability;
pub(crate) mod health;
pub(crate) mod migrate;
mod pool;
pub(crate) mod replication;
pub(crate) mod schema;
mod session;
mod store;
mod url;

pub(crate) use self::connection::DbConnection;
pub(crate) use self::connection::MultiBackend;
pub use self::pool::Pool;
pub(crate) use self::session::{establish, establish_with};
pub(crate) use self::store::Store;
pub(crate) use self::url::{Backend, DatabaseUrl, redact};

use std::time::Duration;

use diesel::result::{DatabaseErrorKind, Error as DieselError};
use thiserror::Error;

/// How long opening a connection, or waiting for a pooled one, may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the async side waits for one database call (connection
/// included). A statement stuck on a dead network may go on in its blocking
/// thread, but nobody waits for it longer than this.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// What can go wrong reaching the database. Messages carry the redacted URL,
/// and their cause's own message: none has a `source()`, so that a chain of
/// causes printed (`{:#}`) says each thing once.
#[derive(Debug, Error)]
pub enum DbError {
    /// No connection could be opened or taken from the pool.
    #[error("cannot connect to {url}: {message}")]
    Connect {
        /// Redacted URL.
        url: String,
        /// The driver's or the pool's reason.
        message: String,
    },
    /// Applying the migrations failed.
    #[error("cannot apply migrations to {url}: {error}")]
    Migrate {
        /// Redacted URL.
        url: String,
        /// What failed.
        error: migrate::MigrateError,
    },
    /// A statement failed.
    #[error("{context}: {error}")]
    Query {
        /// What was being done.
        context: String,
        /// The database's error.
        error: diesel::result::Error,
    },
    /// The blocking task was cancelled or panicked.
    #[error("database task failed: {0}")]
    Task(String),
    /// One error reported to several callers (a batch that failed).
    #[error("{message}")]
    Shared {
        /// The original error, as text.
        message: String,
        /// Whether the original said the database is unreachable.
        unreachable: bool,
    },
    /// The call took longer than [`CALL_TIMEOUT`].
    #[error("{context}: no answer from the database within {}s", CALL_TIMEOUT.as_secs())]
    Timeout {
        /// What was being done.
        context: String,
    },
}

impl DbError {
    /// Wraps a query error with what was being done.
    pub fn query(context: impl Into<String>, error: diesel::result::Error) -> Self {
        DbError::Query {
            context: context.into(),
            error,
        }
    }

    /// The same error again, for another caller.
    pub fn shared(error: &DbError) -> Self {
        DbError::Shared {
            message: error.to_string(),
            unreachable: error.is_unreachable(),
        }
    }

    /// Whether this error says the database cannot be reached (as opposed
    /// to a statement it refused). A migration that lost its connection
    /// (the server crashed or restarted under it) is one.
    pub fn is_unreachable(&self) -> bool {
        match self {
            DbError::Connect { .. } | DbError::Timeout { .. } | DbError::Task(_) => true,
            DbError::Migrate { error, .. } => error.is_unreachable(),
            DbError::Shared { unreachable, .. } => *unreachable,
            DbError::Query { error, .. } => diesel_unreachable(error),
        }
    }
}

/// Whether diesel's `error` says the database could not be reached.
fn diesel_unreachable(error: &DieselError) -> bool {
    match error {
        DieselError::DatabaseError(
            DatabaseErrorKind::UnableToSendCommand | DatabaseErrorKind::ClosedConnection,
            _,
        )
        | DieselError::BrokenTransactionManager => true,
        DieselError::DatabaseError(_, info) => says_connection_lost(info.message()),
        _ => false,
    }
}

impl DbError {
    /// Whether the same statement may well succeed if sent again: the
    /// database cannot be reached, or it gave up waiting for a lock (a
    /// deadlock, a lock wait timeout, a serialization failure, SQLite's
    /// busy database). Not a refusal of the statement itself.
    pub(crate) fn is_transient(&self) -> bool {
        if self.is_unreachable() {
            return true;
        }
        match self {
            DbError::Query {
                error: DieselError::DatabaseError(kind, info),
                ..
            } => {
                matches!(kind, DatabaseErrorKind::SerializationFailure)
                    || says_lock_given_up(info.message())
            }
            DbError::Shared { message, .. } => says_lock_given_up(message),
            _ => false,
        }
    }
}

/// Whether a database's message says it gave up waiting for a lock.
fn says_lock_given_up(message: &str) -> bool {
    mentions_any(
        message,
        &[
            "deadlock",
            "lock wait timeout",
            "database is locked",
            "database table is locked",
            "could not serialize",
        ],
    )
}

/// Whether a driver's message says the connection was lost or could not be
/// used, rather than that a statement was refused.
fn says_connection_lost(message: &str) -> bool {
    mentions_any(
        message,
        &[
            "gone away",
            "lost connection",
            "connection",
            "server closed",
            "terminating",
            "could not receive",
            "could not send",
            "broken pipe",
            "shutdown",
        ],
    )
}

/// Whether `message` contains any of `needles` (lower case), whatever its
/// own case.
fn mentions_any(message: &str, needles: &[&str]) -> bool {
    let message = message.to_ascii_lowercase();
    needles.iter().any(|needle| message.contains(needle))
}

/// Whether an error means another replica got there first (a duplicate
/// key, a deadlock or a serialization failure): "not won", not a fault.
pub(crate) fn is_contention(error: &DieselError) -> bool {
    match error {
        DieselError::DatabaseError(kind, info) => {
            matches!(
                kind,
                DatabaseErrorKind::UniqueViolation | DatabaseErrorKind::SerializationFailure
            ) || info.message().to_ascii_lowercase().contains("deadlock")
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests;
