//! What the server says of its replication, for the warning at start: a
//! failover to a standby that did not have every commit can lose claims,
//! and with `catch_up` above zero an instant whose claim was lost may then
//! run a second time.

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text};

use super::DbConnection;

/// The standbys the server streams to, and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Standbys {
    /// Standbys that may lag (asynchronous, or potential).
    pub asynchronous: i64,
    /// Standbys a commit waits for.
    pub synchronous: i64,
    /// The server's `synchronous_commit`.
    pub commit: String,
}

impl Standbys {
    /// Whether a commit that returned can be missing on a promoted standby:
    /// one it did not wait for, or one it waited for only as far as its
    /// disk, not as far as a reader (`remote_apply`).
    pub(crate) fn may_lose_commits(&self) -> bool {
        self.asynchronous > 0 || (self.synchronous > 0 && self.commit != "remote_apply")
    }
}

#[derive(QueryableByName)]
struct Row {
    #[diesel(sql_type = BigInt)]
    asynchronous: i64,
    #[diesel(sql_type = BigInt)]
    synchronous: i64,
    #[diesel(sql_type = Text)]
    commit: String,
}

/// The standbys of a PostgreSQL primary (`None` on another backend, or on
/// a server with no standby this session can see).
pub(crate) fn standbys(conn: &mut DbConnection) -> QueryResult<Option<Standbys>> {
    if conn.backend() != crate::db::Backend::Postgres {
        return Ok(None);
    }
    let row: Row = diesel::sql_query(
        "SELECT count(*) FILTER (WHERE coalesce(sync_state, 'async') NOT IN ('sync', 'quorum')) AS asynchronous, \
                count(*) FILTER (WHERE sync_state IN ('sync', 'quorum')) AS synchronous, \
                current_setting('synchronous_commit') AS commit \
         FROM pg_stat_replication",
    )
    .get_result(conn)?;
    Ok(
        (row.asynchronous + row.synchronous > 0).then_some(Standbys {
            asynchronous: row.asynchronous,
            synchronous: row.synchronous,
            commit: row.commit,
        }),
    )
}
