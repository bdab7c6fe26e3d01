//! The audit log: one row of `replicron_audit` for every operator action,
//! from the command line, the API or the dashboard (pause, resume, trigger,
//! unlock, backfill, exec) and for what the daemon is told to do (a reload
//! that changed jobs) or refuses (a replica whose instance id is in use).
//! Each says who, from where, when (database time), what (the action, its
//! job and its arguments) and the result: done, or refused and why. A value
//! that is a secret (a parameter declared in `secret_params`, a token) is
//! written as [`REDACTED`] by whoever builds the [`Entry`]. Rows go with
//! the history's retention. The operations layer (`ops::actions`) records
//! pause, resume and unlock here for the command line and the web alike.

use std::time::Duration;

use chrono::NaiveDateTime;
use diesel::prelude::*;
use serde::Serialize;
use serde_json::{Map, Value};

use super::clock::{DbNow, DbNowPlus};
use super::schema::replicron_audit::dsl as audit;
use super::{DbConnection, DbError, Store};

pub(crate) use crate::text::REDACTED;

/// How the action came.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Via {
    /// A `replicron` command.
    Cli,
    /// `POST /api/v1/jobs/{name}/{action}`.
    Api,
    /// A form of the dashboard.
    Dashboard,
    /// The daemon itself (a reload, a refused replica).
    Daemon,
}

impl Via {
    /// Its name in the table.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Via::Cli => "cli",
            Via::Api => "api",
            Via::Dashboard => "dashboard",
            Via::Daemon => "daemon",
        }
    }
}

/// What was done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "daemon", derive(clap::ValueEnum))]
#[cfg_attr(feature = "daemon", value(rename_all = "snake_case"))]
pub(crate) enum Action {
    /// `pause`.
    Pause,
    /// `resume`.
    Resume,
    /// `trigger`.
    Trigger,
    /// `unlock` (with `force` in its arguments for `--force`).
    Unlock,
    /// `backfill`.
    Backfill,
    /// `exec --lock` (with `once` in its arguments for `--once`).
    Exec,
    /// A reload (SIGHUP) that changed jobs.
    Reload,
    /// A replica refused at its start: its instance id is in use.
    RefuseReplica,
}

impl Action {
    /// Every action, as the table names them.
    pub(crate) const ALL: [Action; 8] = [
        Action::Pause,
        Action::Resume,
        Action::Trigger,
        Action::Unlock,
        Action::Backfill,
        Action::Exec,
        Action::Reload,
        Action::RefuseReplica,
    ];

    /// Its name in the table.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Action::Pause => "pause",
            Action::Resume => "resume",
            Action::Trigger => "trigger",
            Action::Unlock => "unlock",
            Action::Backfill => "backfill",
            Action::Exec => "exec",
            Action::Reload => "reload",
            Action::RefuseReplica => "refuse_replica",
        }
    }

    /// The action named `text`, or what is wrong with it.
    pub(crate) fn parse(text: &str) -> Result<Action, String> {
        Action::ALL
            .into_iter()
            .find(|a| a.as_str() == text)
            .ok_or_else(|| {
                format!(
                    "action={text:?}: expected one of {}",
                    Action::ALL.map(Action::as_str).join(", ")
                )
            })
    }
}

/// Who acted, and from where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Actor {
    /// How.
    pub(crate) via: Via,
    /// The Unix user, the token's name, or the daemon's Unix user.
    pub(crate) who: String,
    /// `SUDO_USER`, for a command run through sudo: what the command's
    /// environment claims, which any process can set.
    pub(crate) sudo_user: Option<String>,
    /// The command's host, or the replica that served the request.
    pub(crate) host: String,
    /// The client's address, for the API and the dashboard.
    pub(crate) address: Option<String>,
}

/// This process's Unix user's name (its uid if it has none).
fn unix_user() -> String {
    let uid = nix::unistd::getuid();
    nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map_or_else(|| uid.to_string(), |user| user.name)
}

/// This host's name.
pub(crate) fn host_name() -> String {
    hostname::get()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown-host".to_string())
}

impl Actor {
    /// A command of this process: its Unix user, `SUDO_USER`, this host.
    pub(crate) fn cli() -> Actor {
        Actor {
            via: Via::Cli,
            who: unix_user(),
            sudo_user: std::env::var("SUDO_USER").ok().filter(|u| !u.is_empty()),
            host: host_name(),
            address: None,
        }
    }

    /// The daemon itself: its Unix user, on this host.
    pub(crate) fn daemon() -> Actor {
        Actor {
            via: Via::Daemon,
            who: unix_user(),
            sudo_user: None,
            host: host_name(),
            address: None,
        }
    }

    /// A request to replica `instance` from `address`, signed with the
    /// token named `token`.
    pub(crate) fn web(via: Via, token: &str, instance: &str, address: String) -> Actor {
        Actor {
            via,
            who: token.to_string(),
            sudo_user: None,
            host: instance.to_string(),
            address: Some(address),
        }
    }

    /// Who, as a pause records it: `alice@host`, `root@host (sudo by bob,
    /// claimed)` for a command whose environment says `SUDO_USER=bob`
    /// (which any process can set: it is told, not proven), `token
    /// ops@replica` for a web request.
    pub(crate) fn label(&self) -> String {
        match (self.via, &self.sudo_user) {
            (Via::Api | Via::Dashboard, _) => format!("token {}@{}", self.who, self.host),
            (Via::Cli | Via::Daemon, Some(sudo)) => {
                format!("{}@{} ({})", self.who, self.host, sudo_claim(sudo))
            }
            (Via::Cli | Via::Daemon, None) => format!("{}@{}", self.who, self.host),
        }
    }
}

/// How a `SUDO_USER` is shown: as what the command's environment claimed.
pub(crate) fn sudo_claim(sudo_user: &str) -> String {
    format!("sudo by {sudo_user}, claimed")
}

/// An action and what it was given.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Entry {
    /// The action.
    pub(crate) action: Action,
    /// The job, `exec` lock or instance id it is about.
    pub(crate) job: Option<String>,
    /// Its arguments.
    pub(crate) args: Map<String, Value>,
}

impl Entry {
    /// `action` on `job`, with no arguments yet.
    pub(crate) fn new(action: Action, job: &str) -> Entry {
        Entry {
            action,
            job: Some(job.to_string()),
            args: Map::new(),
        }
    }

    /// `action` on no job in particular (a reload).
    pub(crate) fn fleet(action: Action) -> Entry {
        Entry {
            action,
            job: None,
            args: Map::new(),
        }
    }

    /// The same, with argument `name` set to `value` (left out when it is
    /// null, an empty string or `false`).
    pub(crate) fn arg(mut self, name: &str, value: impl Into<Value>) -> Entry {
        let value = value.into();
        if !matches!(&value, Value::Null | Value::Bool(false))
            && value.as_str().is_none_or(|s| !s.is_empty())
        {
            self.args.insert(name.to_string(), value);
        }
        self
    }
}

/// How it ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Done; what was done.
    Done(String),
    /// Refused; why.
    Refused(String),
}

/// The result of a row written before its action was carried out, until
/// its outcome is written: it stays so only if the action's replica or
/// command stopped, or the database failed, in between.
pub(crate) const STARTED: &str = "started";

/// Writes `entry`'s row for `actor`, [`STARTED`], before its action is
/// carried out; returns its id.
fn record_ahead(conn: &mut DbConnection, actor: &Actor, entry: &Entry) -> QueryResult<i64> {
    use diesel::connection::Connection as _;
    conn.transaction(|conn| {
        record(
            conn,
            actor,
            entry,
            &Outcome::Refused(String::new()),
            STARTED,
        )?;
        // The id this connection's insert was given.
        let last = match conn.backend() {
            super::Backend::Sqlite => "last_insert_rowid()",
            super::Backend::Mysql => "CAST(LAST_INSERT_ID() AS SIGNED)",
            super::Backend::Postgres => "lastval()",
        };
        diesel::select(diesel::dsl::sql::<diesel::sql_types::BigInt>(last)).get_result(conn)
    })
}

/// Writes the outcome of row `id`, written [`STARTED`].
fn settle(conn: &mut DbConnection, id: i64, outcome: &Outcome) -> QueryResult<usize> {
    let (result, detail) = outcome.parts();
    diesel::update(audit::replicron_audit.filter(audit::id.eq(id)))
        .set((
            audit::result.eq(result),
            audit::detail.eq((!detail.is_empty()).then_some(detail)),
        ))
        .execute(conn)
}

impl Outcome {
    /// Its result and detail, as the table has them.
    fn parts(&self) -> (&'static str, &str) {
        match self {
            Outcome::Done(detail) => ("done", detail),
            Outcome::Refused(why) => ("refused", why),
        }
    }
}

/// Writes `entry`'s row for `actor`, at the database's now.
pub(crate) fn record(
    conn: &mut DbConnection,
    actor: &Actor,
    entry: &Entry,
    outcome: &Outcome,
    result: &str,
) -> QueryResult<usize> {
    let (_, detail) = outcome.parts();
    let args = (!entry.args.is_empty()).then(|| Value::Object(entry.args.clone()).to_string());
    diesel::insert_into(audit::replicron_audit)
        .values((
            audit::acted_at.eq(DbNow),
            audit::via.eq(actor.via.as_str()),
            audit::who.eq(&actor.who),
            audit::sudo_user.eq(&actor.sudo_user),
            audit::host.eq(&actor.host),
            audit::address.eq(&actor.address),
            audit::action.eq(entry.action.as_str()),
            audit::job.eq(&entry.job),
            audit::args.eq(args),
            audit::result.eq(result),
            audit::detail.eq((!detail.is_empty()).then_some(detail)),
        ))
        .execute(conn)
}

/// A row of `replicron_audit`.
#[derive(Clone, Debug, PartialEq, Eq, Queryable, Selectable)]
#[diesel(table_name = crate::db::schema::replicron_audit)]
pub(crate) struct AuditRow {
    /// Auto-increment key.
    pub id: i64,
    /// Database time of the action (UTC).
    pub acted_at: NaiveDateTime,
    /// `cli`, `api`, `dashboard` or `daemon`.
    pub via: String,
    /// Who.
    pub who: String,
    /// `SUDO_USER`.
    pub sudo_user: Option<String>,
    /// From which host.
    pub host: String,
    /// From which address.
    pub address: Option<String>,
    /// The action.
    pub action: String,
    /// Its job.
    pub job: Option<String>,
    /// Its arguments (JSON).
    pub args: Option<String>,
    /// `done` or `refused`.
    pub result: String,
    /// What was done, or why it was refused.
    pub detail: Option<String>,
}

/// A row as `audit --format json`, the API and the dashboard show it: the
/// table's columns, the time in RFC 3339 UTC, the arguments as an object.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct AuditRecord {
    /// Auto-increment key.
    pub id: i64,
    /// When.
    pub acted_at: String,
    /// How.
    pub via: String,
    /// Who.
    pub who: String,
    /// `SUDO_USER`.
    pub sudo_user: Option<String>,
    /// From which host.
    pub host: String,
    /// From which address.
    pub address: Option<String>,
    /// The action.
    pub action: String,
    /// Its job.
    pub job: Option<String>,
    /// Its arguments.
    pub args: Map<String, Value>,
    /// `done` or `refused`.
    pub result: String,
    /// What was done, or why it was refused.
    pub detail: Option<String>,
}

impl From<AuditRow> for AuditRecord {
    fn from(row: AuditRow) -> Self {
        let args = match row.args.as_deref().map(serde_json::from_str::<Value>) {
            Some(Ok(Value::Object(args))) => args,
            _ => Map::new(),
        };
        AuditRecord {
            id: row.id,
            acted_at: row
                .acted_at
                .and_utc()
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            via: row.via,
            who: row.who,
            sudo_user: row.sudo_user,
            host: row.host,
            address: row.address,
            action: row.action,
            job: row.job,
            args,
            result: row.result,
            detail: row.detail,
        }
    }
}

impl AuditRecord {
    /// Its arguments as `name=value` words.
    pub(crate) fn args_text(&self) -> String {
        self.args
            .iter()
            .map(|(name, value)| match value {
                Value::String(s) => format!("{name}={s}"),
                other => format!("{name}={other}"),
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Which rows to read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct AuditFilter {
    /// Only about this job.
    pub job: Option<String>,
    /// Only this action.
    pub action: Option<Action>,
    /// Only by this user or token (a command run through sudo is its
    /// `SUDO_USER`'s too).
    pub who: Option<String>,
    /// Only at or after this database time (UTC).
    pub since: Option<NaiveDateTime>,
    /// Only before this database time (UTC).
    pub until: Option<NaiveDateTime>,
    /// Only rows older than this one (by id): the next page.
    pub before_id: Option<i64>,
    /// At most this many, newest first.
    pub limit: i64,
    /// Only about one of these jobs (none: no row); unset, about any job
    /// or none.
    pub jobs: Option<Vec<String>>,
}

/// The rows `filter` asks for, newest first.
pub(crate) fn list(conn: &mut DbConnection, filter: &AuditFilter) -> QueryResult<Vec<AuditRow>> {
    if filter.jobs.as_ref().is_some_and(Vec::is_empty) {
        return Ok(Vec::new());
    }
    let mut query = audit::replicron_audit
        .select(AuditRow::as_select())
        .order(audit::id.desc())
        .limit(filter.limit.max(0))
        .into_boxed();
    if let Some(job) = &filter.job {
        query = query.filter(audit::job.eq(job.clone()));
    }
    if let Some(jobs) = &filter.jobs {
        query = query.filter(audit::job.eq_any(jobs.clone()));
    }
    if let Some(action) = filter.action {
        query = query.filter(audit::action.eq(action.as_str()));
    }
    if let Some(who) = &filter.who {
        query = query.filter(
            audit::who
                .eq(who.clone())
                .or(audit::sudo_user.eq(who.clone()).assume_not_null()),
        );
    }
    if let Some(since) = filter.since {
        query = query.filter(audit::acted_at.ge(since));
    }
    if let Some(until) = filter.until {
        query = query.filter(audit::acted_at.lt(until));
    }
    if let Some(before) = filter.before_id {
        query = query.filter(audit::id.lt(before));
    }
    query.load(conn)
}

/// Deletes at most `batch` rows older than `older_than` (database time);
/// call again until it returns less than `batch`.
pub(crate) fn prune(
    conn: &mut DbConnection,
    older_than: Duration,
    batch: i64,
) -> QueryResult<usize> {
    // Two statements: MariaDB/MySQL take no LIMIT in a subquery under IN.
    let ids: Vec<i64> = audit::replicron_audit
        .select(audit::id)
        .filter(audit::acted_at.lt(DbNowPlus::minus(older_than)))
        .order(audit::id)
        .limit(batch)
        .load(conn)?;
    if ids.is_empty() {
        return Ok(0);
    }
    diesel::delete(audit::replicron_audit.filter(audit::id.eq_any(&ids))).execute(conn)
}

impl Store {
    /// [`record`]; a row that cannot be written is logged, and the action
    /// it tells of stands.
    pub(crate) async fn audit(&self, actor: &Actor, entry: Entry, outcome: Outcome) {
        let actor = actor.clone();
        let (action, job) = (entry.action, entry.job.clone());
        if let Err(e) = self
            .call("recording an action in the audit log", move |conn| {
                record(conn, &actor, &entry, &outcome, outcome.parts().0)
            })
            .await
        {
            tracing::error!(
                action = action.as_str(),
                job = job.as_deref().unwrap_or(""),
                "not recorded in the audit log: {e}"
            );
        }
    }

    /// Writes `entry`'s row for `actor` before its action is carried out
    /// ([`STARTED`]), so that an action whose row cannot be written is
    /// not carried out; [`Store::audit_settle`] then writes its outcome.
    pub(crate) async fn audit_ahead(&self, actor: &Actor, entry: &Entry) -> Result<i64, DbError> {
        let (actor, entry) = (actor.clone(), entry.clone());
        self.call("recording an action in the audit log", move |conn| {
            record_ahead(conn, &actor, &entry)
        })
        .await
    }

    /// Writes the outcome of row `id`, written by [`Store::audit_ahead`];
    /// one that cannot be written is logged (the row stays [`STARTED`]:
    /// the action may have been carried out).
    pub(crate) async fn audit_settle(&self, id: i64, outcome: Outcome) {
        if let Err(e) = self
            .call(
                "recording an action's outcome in the audit log",
                move |conn| settle(conn, id, &outcome),
            )
            .await
        {
            tracing::error!(
                id,
                "the outcome of an action is not recorded in the audit log (its row says it started): {e}"
            );
        }
    }

    /// [`list`].
    pub(crate) async fn list_audit(&self, filter: AuditFilter) -> Result<Vec<AuditRow>, DbError> {
        self.call("reading the audit log", move |conn| list(conn, &filter))
            .await
    }
}

#[cfg(test)]
mod tests;
