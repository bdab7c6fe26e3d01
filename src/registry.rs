//! The replicas running now: `replicron_instances`, one row per instance
//! id, kept fresh by a heartbeat on database time (statements here, and
//! their async calls through the [`Store`]). A process refuses to
//! start under an id that a live replica already uses: `locked_by` and the
//! history would no longer say which process held a lease. `status` reads
//! the same rows to tell a holder that is alive from one that vanished.

use std::time::Duration;

use chrono::NaiveDateTime;
use diesel::prelude::*;

use crate::db::clock::{DbNow, DbNowPlus};
use crate::db::schema::replicron_instances::dsl as instances;
use crate::db::{DbConnection, DbError, Store};

/// How often a replica says it is alive.
pub(crate) const HEARTBEAT_EVERY: Duration = Duration::from_secs(10);

/// A replica not heard from for this long is taken for gone: three missed
/// heartbeats.
const STALE_AFTER: Duration = Duration::from_secs(30);

/// A row of `replicron_instances`.
#[derive(Clone, Debug, PartialEq, Eq, Queryable, Selectable)]
#[diesel(table_name = crate::db::schema::replicron_instances)]
pub(crate) struct InstanceRow {
    /// Instance id.
    pub id: String,
    /// Host name.
    pub host: String,
    /// Process id on that host.
    pub pid: i64,
    /// replicron's version.
    pub version: String,
    /// Database time it started.
    pub started_at: NaiveDateTime,
    /// Database time of its last heartbeat.
    pub last_seen: NaiveDateTime,
    /// One `job=digest` line per job it loaded (none before its first
    /// heartbeat).
    pub job_digests: Option<String>,
    /// How far its host's clock is ahead of the database's, in µs.
    pub clock_offset_us: Option<i64>,
    /// Where the other replicas reach its dashboard, if it serves one.
    pub web_url: Option<String>,
    /// How it holds its runs to their resource limits (`cgroup v2` or
    /// `rlimits`), if it says.
    pub resource_limits: Option<String>,
}

/// This host's name, as its replicas register.
pub(crate) fn this_host() -> String {
    hostname::get()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown-host".to_string())
}

/// This process, as it registers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Me {
    /// Instance id.
    pub id: String,
    /// Host name.
    pub host: String,
    /// Process id.
    pub pid: i64,
    /// replicron's version.
    pub version: String,
}

impl Me {
    /// This process under instance id `id`.
    pub(crate) fn new(id: &str) -> Self {
        Me {
            id: id.to_string(),
            host: this_host(),
            pid: i64::from(std::process::id()),
            version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }
}

/// Why a process may not use its instance id.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RegisterError {
    /// A live replica uses it.
    #[error(
        "instance id {id:?} is in use by a live replica ({host}, pid {pid}, last seen {ago}s ago): \
         two processes with one id would make leases and history ambiguous; give each replica its \
         own --instance-id"
    )]
    InUse {
        /// The id.
        id: String,
        /// The other replica's host.
        host: String,
        /// Its process id.
        pid: i64,
        /// Seconds since its last heartbeat.
        ago: i64,
    },
    /// The database refused a statement.
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<diesel::result::Error> for RegisterError {
    fn from(error: diesel::result::Error) -> Self {
        RegisterError::Db(DbError::query("registering the instance", error))
    }
}

/// Registers `me`. A row of its id whose replica was last heard from more
/// than [`STALE_AFTER`] ago, or that names a process of this host that no
/// longer exists (a restart), is taken over; a live one is refused.
/// Returns the row taken over, if any.
pub(crate) fn register(
    conn: &mut DbConnection,
    me: &Me,
) -> Result<Option<InstanceRow>, RegisterError> {
    let inserted = diesel::insert_into(instances::replicron_instances)
        .values((
            instances::id.eq(&me.id),
            instances::host.eq(&me.host),
            instances::pid.eq(me.pid),
            instances::version.eq(&me.version),
            instances::started_at.eq(DbNow),
            instances::last_seen.eq(DbNow),
        ))
        .execute(conn);
    match inserted {
        Ok(_) => return Ok(None),
        Err(e) if crate::db::is_contention(&e) => {}
        Err(e) => return Err(e.into()),
    }
    let (row, stale): (InstanceRow, bool) = instances::replicron_instances
        .filter(instances::id.eq(&me.id))
        .select((
            InstanceRow::as_select(),
            instances::last_seen.lt(DbNowPlus::minus(STALE_AFTER)),
        ))
        .first(conn)?;
    let gone_from_this_host = row.host == me.host && !process_exists(row.pid);
    if !stale && !gone_from_this_host {
        let now = crate::db::clock::database_now(conn)?;
        return Err(RegisterError::InUse {
            id: me.id.clone(),
            host: row.host,
            pid: row.pid,
            ago: (now - row.last_seen.and_utc()).num_seconds(),
        });
    }
    // Conditional on the row as read: two processes taking over one stale
    // id at once cannot both succeed.
    let taken = diesel::update(
        instances::replicron_instances
            .filter(instances::id.eq(&me.id))
            .filter(instances::pid.eq(row.pid))
            .filter(instances::last_seen.eq(row.last_seen)),
    )
    .set((
        instances::host.eq(&me.host),
        instances::pid.eq(me.pid),
        instances::version.eq(&me.version),
        instances::started_at.eq(DbNow),
        instances::last_seen.eq(DbNow),
    ))
    .execute(conn)?;
    if taken == 1 {
        Ok(Some(row))
    } else {
        Err(RegisterError::InUse {
            id: me.id.clone(),
            host: "another process".to_string(),
            pid: 0,
            ago: 0,
        })
    }
}

/// Whether process `pid` exists on this host.
fn process_exists(pid: i64) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    !matches!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
        Err(nix::errno::Errno::ESRCH)
    )
}

/// What a heartbeat says besides "alive".
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Beat {
    /// One `job=digest` line per loaded job, by name.
    pub(crate) job_digests: String,
    /// How far this host's clock is ahead of the database's (µs), once
    /// estimated.
    pub(crate) clock_offset_us: Option<i64>,
    /// How it holds its runs to their resource limits, if it says.
    pub(crate) resource_limits: Option<&'static str>,
}

/// Says `me` is alive, what it runs and how its clock stands. `false`
/// means its row is no longer this process's (another process took the id
/// over, or it was pruned).
pub(crate) fn heartbeat(conn: &mut DbConnection, me: &Me, beat: &Beat) -> QueryResult<bool> {
    let changed = diesel::update(
        instances::replicron_instances
            .filter(instances::id.eq(&me.id))
            .filter(instances::host.eq(&me.host))
            .filter(instances::pid.eq(me.pid)),
    )
    .set((
        instances::last_seen.eq(DbNow),
        instances::job_digests.eq(&beat.job_digests),
        instances::clock_offset_us.eq(beat.clock_offset_us),
        instances::resource_limits.eq(beat.resource_limits),
    ))
    .execute(conn)?;
    Ok(changed == 1)
}

/// Says where `me`'s dashboard is reached (`[web] advertise_url`), once
/// its listener is bound.
pub(crate) fn set_web_url(conn: &mut DbConnection, me: &Me, url: &str) -> QueryResult<usize> {
    diesel::update(
        instances::replicron_instances
            .filter(instances::id.eq(&me.id))
            .filter(instances::host.eq(&me.host))
            .filter(instances::pid.eq(me.pid)),
    )
    .set(instances::web_url.eq(url))
    .execute(conn)
}

/// Where replica `id`'s dashboard is reached, and its host, if it is
/// alive and serves one.
pub(crate) fn web_url_of(
    conn: &mut DbConnection,
    id: &str,
) -> QueryResult<Option<(String, String)>> {
    Ok(instances::replicron_instances
        .filter(instances::id.eq(id))
        .filter(instances::last_seen.ge(DbNowPlus::minus(STALE_AFTER)))
        .select((instances::web_url, instances::host))
        .first::<(Option<String>, String)>(conn)
        .optional()?
        .and_then(|(url, host)| Some((url?, host))))
}

/// A replica not heard from for this long is forgotten: its row is
/// deleted (a stale one stays listed until then).
const PRUNE_AFTER: Duration = Duration::from_secs(3600);

/// Deletes the rows of replicas not heard from for [`PRUNE_AFTER`].
pub(crate) fn prune(conn: &mut DbConnection) -> QueryResult<usize> {
    diesel::delete(
        instances::replicron_instances
            .filter(instances::last_seen.lt(DbNowPlus::minus(PRUNE_AFTER))),
    )
    .execute(conn)
}

/// Removes `me` at a clean exit.
pub(crate) fn deregister(conn: &mut DbConnection, me: &Me) -> QueryResult<usize> {
    diesel::delete(
        instances::replicron_instances
            .filter(instances::id.eq(&me.id))
            .filter(instances::host.eq(&me.host))
            .filter(instances::pid.eq(me.pid)),
    )
    .execute(conn)
}

/// A registered replica and whether it is alive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Instance {
    /// Its row.
    pub row: InstanceRow,
    /// Heard from within [`STALE_AFTER`].
    pub alive: bool,
}

/// Every registered replica, by id, with its liveness by database time.
pub(crate) fn list_instances(conn: &mut DbConnection) -> QueryResult<Vec<Instance>> {
    let rows: Vec<(InstanceRow, bool)> = instances::replicron_instances
        .order(instances::id)
        .select((
            InstanceRow::as_select(),
            instances::last_seen.ge(DbNowPlus::minus(STALE_AFTER)),
        ))
        .load(conn)?;
    Ok(rows
        .into_iter()
        .map(|(row, alive)| Instance { row, alive })
        .collect())
}

impl Store {
    /// [`register`]: the row taken over, if any. A refusal (the id is in
    /// use) is recorded in the audit log.
    pub(crate) async fn register(&self, me: Me) -> Result<Option<InstanceRow>, RegisterError> {
        let registering = me.clone();
        let registered = self
            .run(move |conn| Ok(register(conn, &registering)))
            .await
            .map_err(RegisterError::Db)?;
        if let Err(refused @ RegisterError::InUse { .. }) = &registered {
            use crate::db::audit;
            let actor = audit::Actor {
                host: me.host.clone(),
                ..audit::Actor::daemon()
            };
            let entry = audit::Entry::new(audit::Action::RefuseReplica, &me.id)
                .arg("pid", me.pid)
                .arg("version", me.version.clone());
            self.audit(&actor, entry, audit::Outcome::Refused(refused.to_string()))
                .await;
        }
        registered
    }

    /// [`heartbeat`], then [`prune`], then [`list_instances`].
    pub(crate) async fn heartbeat(
        &self,
        me: Me,
        beat: Beat,
    ) -> Result<(bool, Vec<Instance>), DbError> {
        self.call("heartbeat", move |conn| {
            let mine = heartbeat(conn, &me, &beat)?;
            prune(conn)?;
            Ok((mine, list_instances(conn)?))
        })
        .await
    }

    /// [`set_web_url`] for this process, as `me`.
    pub(crate) async fn set_web_url(&self, me: Me, url: String) -> Result<usize, DbError> {
        self.call("publishing the dashboard's address", move |conn| {
            set_web_url(conn, &me, &url)
        })
        .await
    }

    /// [`web_url_of`].
    pub(crate) async fn web_url_of(&self, id: String) -> Result<Option<(String, String)>, DbError> {
        self.call("reading a replica's dashboard address", move |conn| {
            web_url_of(conn, &id)
        })
        .await
    }

    /// [`list_instances`].
    pub(crate) async fn list_instances(&self) -> Result<Vec<Instance>, DbError> {
        self.call("reading the replicas", list_instances).await
    }

    /// [`deregister`].
    pub(crate) async fn deregister(&self, me: Me) -> Result<usize, DbError> {
        self.call("leaving the registry", move |conn| deregister(conn, &me))
            .await
    }
}
