//! Whether the server keeps what it acknowledged: the settings under which
//! a commit that returned can be lost in a crash, read at start (a warning
//! each) and by `status`. A claim lost so leaves its instant claimable
//! again, and it may then run a second time; a run's start or end lost so
//! leaves the history wrong. replicron cannot change these settings (they
//! are the server's, and most are global), so it names each one, its
//! value, and what it risks.

use std::collections::BTreeMap;

use diesel::prelude::*;
use diesel::sql_types::Text;
use tracing::{debug, warn};

use super::{Backend, DbConnection, Store};

/// One server setting under which an acknowledged commit can be lost.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Risk {
    /// The setting, as the server names it (`wsrep_provider_options`'
    /// own options as `wsrep_provider_options: pc.recovery`).
    pub setting: String,
    /// Its value on the server.
    pub value: String,
    /// What it risks, and the value that closes it.
    pub risk: String,
}

impl std::fmt::Display for Risk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} = {}: {}", self.setting, self.value, self.risk)
    }
}

#[derive(QueryableByName)]
struct MysqlVariable {
    #[diesel(sql_type = Text)]
    #[diesel(column_name = Variable_name)]
    name: String,
    #[diesel(sql_type = Text)]
    #[diesel(column_name = Value)]
    value: String,
}

#[derive(QueryableByName)]
struct PgSetting {
    #[diesel(sql_type = Text)]
    name: String,
    #[diesel(sql_type = Text)]
    setting: String,
}

/// The server's settings that decide whether a commit that returned
/// survives a crash, as this connection's session sees them (PostgreSQL's
/// `synchronous_commit` may be set per database or per user).
fn settings(conn: &mut DbConnection) -> QueryResult<BTreeMap<String, String>> {
    Ok(match conn.backend() {
        Backend::Sqlite => BTreeMap::new(),
        Backend::Mysql => diesel::sql_query(
            "SHOW GLOBAL VARIABLES WHERE Variable_name IN \
             ('innodb_flush_log_at_trx_commit', 'sync_binlog', 'log_bin', \
              'wsrep_on', 'wsrep_provider_options')",
        )
        .load::<MysqlVariable>(conn)?
        .into_iter()
        .map(|v| (v.name.to_ascii_lowercase(), v.value))
        .collect(),
        Backend::Postgres => diesel::sql_query(
            "SELECT name, setting FROM pg_settings \
             WHERE name IN ('synchronous_commit', 'fsync', 'full_page_writes')",
        )
        .load::<PgSetting>(conn)?
        .into_iter()
        .map(|s| (s.name, s.setting))
        .collect(),
    })
}

/// The settings of the server behind `conn` under which a commit that
/// returned, a claim among them, can be lost.
pub(crate) fn risks(conn: &mut DbConnection) -> QueryResult<Vec<Risk>> {
    let backend = conn.backend();
    Ok(judge(backend, &settings(conn)?))
}

/// One of `wsrep_provider_options`' own options (`gcache.recover = no;
/// pc.recovery = true; …`).
fn provider_option<'a>(options: &'a str, name: &str) -> Option<&'a str> {
    options.split(';').find_map(|option| {
        let (key, value) = option.split_once('=')?;
        (key.trim() == name).then(|| value.trim())
    })
}

fn on(value: Option<&String>) -> bool {
    value.is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "on" | "1" | "true" | "yes"))
}

/// The risks in `settings`, as [`settings`] reads them from a server of
/// `backend`.
fn judge(backend: Backend, settings: &BTreeMap<String, String>) -> Vec<Risk> {
    let mut found = Vec::new();
    let mut risk = |setting: &str, value: &str, risk: String| {
        found.push(Risk {
            setting: setting.to_string(),
            value: value.to_string(),
            risk,
        });
    };
    match backend {
        Backend::Sqlite => {}
        Backend::Mysql => {
            let galera = on(settings.get("wsrep_on"));
            if let Some(flush) = settings.get("innodb_flush_log_at_trx_commit")
                && flush != "1"
            {
                let lost = if flush == "0" {
                    "a crash of the server (its process alone) loses the last second of commits"
                } else {
                    "a crash of the host (power, kernel) loses the last second of commits"
                };
                let text = if galera {
                    format!(
                        "Galera acknowledges a commit once the cluster has certified it, before any node has flushed it to disk: when every node crashes within about a second, commits the cluster acknowledged are lost (Jepsen, MariaDB Galera Cluster 12.1.2, 2026); {lost} on each node; a claim lost so lets its instant run a second time; set it to 1 on every node"
                    )
                } else {
                    format!(
                        "the redo log is flushed about once a second, not at each commit: {lost}; a claim lost so lets its instant run a second time; set it to 1"
                    )
                };
                risk("innodb_flush_log_at_trx_commit", flush, text);
            }
            if let Some(sync) = settings.get("sync_binlog")
                && sync == "0"
                && on(settings.get("log_bin"))
            {
                risk(
                    "sync_binlog",
                    sync,
                    "with binary logging on, the binary log is left to the operating system to flush: after a crash of the host, recovery rolls back the commits the binary log lacks, claims among them, and a replica of this server may lack them too; set it to 1".to_string(),
                );
            }
            if galera && let Some(options) = settings.get("wsrep_provider_options") {
                if let Some(value) = provider_option(options, "pc.recovery")
                    && !on(Some(&value.to_string()))
                {
                    risk(
                        "wsrep_provider_options: pc.recovery",
                        value,
                        "after every node has crashed the cluster does not form again by itself: it waits for someone to bootstrap it, and bootstrapped from any node but the most advanced (by grastate.dat's seqno, or mariadbd --wsrep-recover) it loses the commits only that node had, claims among them; set it to true".to_string(),
                    );
                }
                if let Some(value) = provider_option(options, "gcache.recover")
                    && !on(Some(&value.to_string()))
                {
                    risk(
                        "wsrep_provider_options: gcache.recover",
                        value,
                        "after a crash a node's write-set cache is dropped, so nodes that come back after every node has crashed rejoin by full state transfer, not the cache: the cluster takes longer to take claims again; set it to yes".to_string(),
                    );
                }
            }
        }
        Backend::Postgres => {
            if let Some(fsync) = settings.get("fsync")
                && !on(Some(fsync))
            {
                risk(
                    "fsync",
                    fsync,
                    "nothing is flushed to disk: a crash of the host loses commits, claims among them, and can corrupt the database; set it to on".to_string(),
                );
            }
            if let Some(commit) = settings.get("synchronous_commit")
                && commit == "off"
            {
                risk(
                    "synchronous_commit",
                    commit,
                    "a commit returns before its WAL is flushed: a crash of the server loses the last commits (up to three times wal_writer_delay), claims among them, and a claim lost so lets its instant run a second time; set it to on (or remote_apply with a synchronous standby)".to_string(),
                );
            }
            if let Some(pages) = settings.get("full_page_writes")
                && !on(Some(pages))
            {
                risk(
                    "full_page_writes",
                    pages,
                    "a page half written when the host crashes cannot be repaired from the WAL: the database may come back corrupt; set it to on".to_string(),
                );
            }
        }
    }
    found
}

/// Warns, once per setting, of each risk the server's settings carry
/// (at a daemon's start). A server that cannot be asked is let be: the
/// daemon says so at debug.
pub(crate) async fn warn_of_risks(store: &Store) {
    match store
        .call("reading the server's durability settings", risks)
        .await
    {
        Ok(risks) => {
            for risk in risks {
                warn!(
                    setting = %risk.setting,
                    value = %risk.value,
                    "the database may lose a commit it acknowledged, a claim among them: {}",
                    risk.risk
                );
            }
        }
        Err(e) => debug!("the server's durability settings could not be read: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn named(risks: &[Risk]) -> Vec<String> {
        risks
            .iter()
            .map(|r| format!("{}={}", r.setting, r.value))
            .collect()
    }

    #[test]
    fn a_durable_server_carries_no_risk() {
        let mysql = settings(&[
            ("innodb_flush_log_at_trx_commit", "1"),
            ("sync_binlog", "0"),
            ("log_bin", "OFF"),
            ("wsrep_on", "OFF"),
        ]);
        assert_eq!(judge(Backend::Mysql, &mysql), vec![]);
        let postgres = settings(&[
            ("fsync", "on"),
            ("synchronous_commit", "local"),
            ("full_page_writes", "on"),
        ]);
        assert_eq!(judge(Backend::Postgres, &postgres), vec![]);
        assert_eq!(judge(Backend::Sqlite, &BTreeMap::new()), vec![]);
    }

    #[test]
    fn each_lossy_mariadb_setting_is_named_with_what_it_risks() {
        let risks = judge(
            Backend::Mysql,
            &settings(&[
                ("innodb_flush_log_at_trx_commit", "2"),
                ("sync_binlog", "0"),
                ("log_bin", "ON"),
                ("wsrep_on", "OFF"),
            ]),
        );
        assert_eq!(
            named(&risks),
            ["innodb_flush_log_at_trx_commit=2", "sync_binlog=0"]
        );
        assert!(risks[0].risk.contains("crash of the host"), "{}", risks[0]);
        assert!(risks[0].risk.contains("set it to 1"), "{}", risks[0]);
        assert!(risks[1].risk.contains("binary log"), "{}", risks[1]);
        // A process crash alone loses commits at 0.
        let risks = judge(
            Backend::Mysql,
            &settings(&[("innodb_flush_log_at_trx_commit", "0")]),
        );
        assert!(risks[0].risk.contains("its process alone"), "{}", risks[0]);
        // sync_binlog = 0 risks nothing without a binary log.
        assert_eq!(
            judge(
                Backend::Mysql,
                &settings(&[("sync_binlog", "0"), ("log_bin", "OFF")])
            ),
            vec![]
        );
    }

    #[test]
    fn galera_names_its_acknowledgement_before_the_flush_and_its_recovery() {
        let risks = judge(
            Backend::Mysql,
            &settings(&[
                ("innodb_flush_log_at_trx_commit", "2"),
                ("wsrep_on", "ON"),
                (
                    "wsrep_provider_options",
                    "base_dir = /var/lib/mysql/; gcache.recover = no; gcache.size = 128M; pc.recovery = false; pc.wait_prim = true",
                ),
            ]),
        );
        assert_eq!(
            named(&risks),
            [
                "innodb_flush_log_at_trx_commit=2",
                "wsrep_provider_options: pc.recovery=false",
                "wsrep_provider_options: gcache.recover=no",
            ]
        );
        assert!(
            risks[0].risk.contains("Galera acknowledges"),
            "{}",
            risks[0]
        );
        assert!(risks[1].risk.contains("most advanced"), "{}", risks[1]);
        // The options a cluster should have carry none.
        let risks = judge(
            Backend::Mysql,
            &settings(&[
                ("innodb_flush_log_at_trx_commit", "1"),
                ("wsrep_on", "ON"),
                (
                    "wsrep_provider_options",
                    "gcache.recover = yes; pc.recovery = true",
                ),
            ]),
        );
        assert_eq!(risks, vec![]);
    }

    #[test]
    fn each_lossy_postgres_setting_is_named_with_what_it_risks() {
        let risks = judge(
            Backend::Postgres,
            &settings(&[
                ("fsync", "off"),
                ("synchronous_commit", "off"),
                ("full_page_writes", "off"),
            ]),
        );
        assert_eq!(
            named(&risks),
            [
                "fsync=off",
                "synchronous_commit=off",
                "full_page_writes=off"
            ]
        );
        assert!(
            risks[1].risk.contains("before its WAL is flushed"),
            "{}",
            risks[1]
        );
    }
}
