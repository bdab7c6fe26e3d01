//! What the crate's own tests share: a fresh database per test on each
//! backend (the integration tests' module), opened as replicron opens it.

#[path = "../tests/support/databases.rs"]
#[expect(dead_code, reason = "the integration tests use the rest of it")]
mod databases;

use std::path::Path;

pub(crate) use self::databases::{TestDb, backend_test};
use crate::db::DatabaseUrl;
use crate::db::{DbConnection, Pool};

impl TestDb {
    /// The parsed URL.
    pub(crate) fn database_url(&self) -> DatabaseUrl {
        DatabaseUrl::parse(&self.url, Path::new(".")).expect("valid test URL")
    }

    /// A migrated pool of `size` connections.
    pub(crate) fn pool(&self, size: u32) -> Pool {
        let pool = Pool::open(&self.url, size).expect("open the test database");
        pool.migrate().expect("migrate the test database");
        pool
    }

    /// One connection as replicron opens it, outside any pool.
    pub(crate) fn connect(&self) -> DbConnection {
        crate::db::establish(&self.database_url()).expect("connect")
    }
}

/// Every run of `job` in `db`'s history, oldest first.
pub(crate) fn runs_of(db: &TestDb, job: &str) -> Vec<crate::history::RunRow> {
    let mut rows = crate::history::list_runs(
        &mut db.connect(),
        &crate::history::RunFilter {
            job: Some(job.to_string()),
            limit: 100_000,
            ..Default::default()
        },
    )
    .expect("history");
    rows.reverse();
    rows
}

/// The start record of attempt `attempt` of `job`'s `instant` by
/// `instance` under `fence`, for a run once across the fleet started by
/// its schedule, without params.
pub(crate) fn new_run(
    job: &str,
    instant: chrono::DateTime<chrono::Utc>,
    attempt: i32,
    instance: &str,
    fence: i64,
) -> crate::history::NewRun {
    crate::history::NewRun {
        job: job.into(),
        scheduled_at: instant,
        attempt,
        instance: instance.into(),
        fence,
        once_key: None,
        scope: String::new(),
        lease_row: None,
        trigger: Default::default(),
        params: None,
    }
}
