//! The library's error: what can go wrong building or running a
//! [`crate::Scheduler`], each variant saying what a person can act on. The
//! database's own errors carry the redacted URL, never a password.

/// What can go wrong building or running a scheduler.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An invalid job (name, schedule, time zone, settings) or database URL.
    #[error("{0}")]
    Config(String),
    /// The database could not be reached, or refused a statement.
    #[error(transparent)]
    Database(Box<dyn std::error::Error + Send + Sync>),
    /// A live replica already uses this instance id.
    #[error(transparent)]
    InstanceInUse(Box<dyn std::error::Error + Send + Sync>),
    /// The process guard (for jobs that are child processes) could not be
    /// started.
    #[error("cannot start the guard process: {0}")]
    Guard(#[source] std::io::Error),
    /// A task of the scheduler failed.
    #[error("{0}")]
    Internal(String),
}

impl From<crate::db::DbError> for Error {
    fn from(error: crate::db::DbError) -> Self {
        Error::Database(Box::new(error))
    }
}

impl From<crate::registry::RegisterError> for Error {
    fn from(error: crate::registry::RegisterError) -> Self {
        match error {
            crate::registry::RegisterError::Db(e) => Error::Database(Box::new(e)),
            in_use => Error::InstanceInUse(Box::new(in_use)),
        }
    }
}
