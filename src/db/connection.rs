//! The connection enum over every compiled backend, and how one connection
//! is opened and its session prepared. diesel's derive generates the
//! backend, row and query-builder types that let one set of queries run on
//! any of them.

/// A connection to whichever backend the URL named.
#[derive(diesel::MultiConnection)]
pub(crate) enum DbConnection {
    /// SQLite.
    #[cfg(feature = "sqlite")]
    Sqlite(diesel::SqliteConnection),
    /// MariaDB or MySQL.
    #[cfg(feature = "mysql")]
    Mysql(diesel::MysqlConnection),
    /// PostgreSQL.
    #[cfg(feature = "postgres")]
    Postgres(diesel::PgConnection),
}

impl DbConnection {
    /// The backend this connection talks to.
    pub(crate) fn backend(&self) -> crate::db::Backend {
        match self {
            #[cfg(feature = "sqlite")]
            DbConnection::Sqlite(_) => crate::db::Backend::Sqlite,
            #[cfg(feature = "mysql")]
            DbConnection::Mysql(_) => crate::db::Backend::Mysql,
            #[cfg(feature = "postgres")]
            DbConnection::Postgres(_) => crate::db::Backend::Postgres,
        }
    }
}
