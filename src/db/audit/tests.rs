//! The audit log's statements, and the operations layer's rows, on every
//! backend.

use std::time::Duration;

use super::{Action, Actor, AuditFilter, AuditRecord, Entry, Outcome, REDACTED, Via};
use crate::db::Store;
use crate::ops::actions::{self, Refused, Unlocked};
use crate::testing::{TestDb, backend_test};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn alice() -> Actor {
    Actor {
        via: Via::Cli,
        who: "root".to_string(),
        sudo_user: Some("alice".to_string()),
        host: "ops-host".to_string(),
        address: None,
    }
}

fn ci() -> Actor {
    Actor::web(Via::Api, "ci", "r1", "192.0.2.7".to_string())
}

async fn rows(store: &Store, filter: AuditFilter) -> Vec<AuditRecord> {
    store
        .list_audit(AuditFilter {
            limit: if filter.limit == 0 { 100 } else { filter.limit },
            ..filter
        })
        .await
        .expect("read the audit log")
        .into_iter()
        .map(AuditRecord::from)
        .collect()
}

backend_test! {
    fn every_action_of_the_operations_layer_writes_one_row(db: &TestDb) {
        let store = Store::new(db.pool(2));
        runtime().block_on(async {
            store.ensure_rows(vec!["backup".to_string()]).await.expect("rows");

            let until = actions::pause(&store, &alice(), "backup", Some("2h"), Some("disk swap".into()))
                .await
                .expect("paused");
            assert!(until.is_some());
            let refused = actions::pause(&store, &ci(), "backup", Some("yesterday"), None).await;
            assert!(matches!(refused, Err(Refused::Invalid(_))), "{refused:?}");
            assert!(actions::resume(&store, &ci(), "backup", None).await.expect("resumed"));

            // Unlock: no row, not held, held by a running run (refused,
            // then forced).
            assert!(matches!(
                actions::unlock(&store, &alice(), "nothing", false, None).await,
                Err(Refused::NoRow(_))
            ));
            assert_eq!(
                actions::unlock(&store, &alice(), "backup", false, None).await.expect("not held"),
                Unlocked::NotHeld
            );
            let crate::lease::Claim::Won(held) = store
                .claim_now("backup", "r2", Duration::from_secs(600))
                .await
                .expect("claim")
            else {
                panic!("the lease is free");
            };
            store
                .record_run_started(crate::history::NewRun {
                    job: "backup".to_string(),
                    scheduled_at: held.instant,
                    attempt: 1,
                    instance: "r2".to_string(),
                    fence: held.fence,
                    once_key: None,
                    scope: String::new(),
                    lease_row: Some("backup".to_string()),
                    trigger: Default::default(),
                    params: None,
                })
                .await
                .expect("a running run");
            assert!(matches!(
                actions::unlock(&store, &ci(), "backup", false, None).await,
                Err(Refused::Running { .. })
            ));
            assert!(matches!(
                actions::unlock(&store, &ci(), "backup", true, None).await,
                Ok(Unlocked::Ended { .. })
            ));

            let all = rows(&store, AuditFilter::default()).await;
            let seen: Vec<(&str, &str, &str, &str)> = all
                .iter()
                .rev()
                .map(|r| (r.action.as_str(), r.who.as_str(), r.via.as_str(), r.result.as_str()))
                .collect();
            assert_eq!(
                seen,
                [
                    ("pause", "root", "cli", "done"),
                    ("pause", "ci", "api", "refused"),
                    ("resume", "ci", "api", "done"),
                    ("unlock", "root", "cli", "refused"),
                    ("unlock", "root", "cli", "done"),
                    ("unlock", "ci", "api", "refused"),
                    ("unlock", "ci", "api", "done"),
                ]
            );
            let pause = all.last().expect("the pause");
            assert_eq!(pause.sudo_user.as_deref(), Some("alice"));
            assert_eq!(pause.host, "ops-host");
            assert_eq!(pause.job.as_deref(), Some("backup"));
            assert_eq!(pause.args["until"], "2h");
            assert_eq!(pause.args["reason"], "disk swap");
            assert!(pause.detail.as_deref().is_some_and(|d| d.starts_with("paused until ")), "{pause:?}");
            let refused = &all[all.len() - 2];
            assert!(refused.detail.as_deref().is_some_and(|d| d.contains("\"yesterday\"")), "{refused:?}");
            assert_eq!(refused.address.as_deref(), Some("192.0.2.7"));
            assert_eq!(refused.host, "r1");
            let forced = &all[0];
            assert_eq!(forced.args["force"], true);
            assert!(forced.detail.as_deref().is_some_and(|d| d.contains("lease of r2")), "{forced:?}");
            assert!(all[1].detail.as_deref().is_some_and(|d| d.contains("still recorded running")));
            // The pause names its actor: the Unix user, where, and the
            // SUDO_USER its environment claimed.
            let row = store.find_lock("backup").await.expect("read").expect("row");
            assert_eq!(
                row.paused_by.as_deref(),
                Some("root@ops-host (sudo by alice, claimed)")
            );
        });
    }
}

backend_test! {
    fn the_log_is_filtered_and_pruned(db: &TestDb) {
        let store = Store::new(db.pool(2));
        runtime().block_on(async {
            let done = || Outcome::Done(String::new());
            store.audit(&alice(), Entry::new(Action::Trigger, "a"), done()).await;
            store.audit(&ci(), Entry::new(Action::Trigger, "b"), done()).await;
            store
                .audit(&ci(), Entry::new(Action::Backfill, "a"), Outcome::Refused("no".into()))
                .await;
            let count = |filter: AuditFilter| {
                let store = store.clone();
                async move { rows(&store, filter).await.len() }
            };
            assert_eq!(count(AuditFilter::default()).await, 3);
            assert_eq!(count(AuditFilter { job: Some("a".into()), ..Default::default() }).await, 2);
            // A token limited to some jobs reads only the rows about them.
            assert_eq!(count(AuditFilter { jobs: Some(vec!["b".into(), "c".into()]), ..Default::default() }).await, 1);
            assert_eq!(count(AuditFilter { jobs: Some(Vec::new()), ..Default::default() }).await, 0);
            assert_eq!(count(AuditFilter { action: Some(Action::Trigger), ..Default::default() }).await, 2);
            // Who: the user, or whoever ran the command through sudo.
            for who in ["root", "alice"] {
                assert_eq!(count(AuditFilter { who: Some(who.into()), ..Default::default() }).await, 1, "{who}");
            }
            assert_eq!(count(AuditFilter { who: Some("ci".into()), ..Default::default() }).await, 2);
            let now = store.database_now().await.expect("now").naive_utc();
            let later = now + chrono::TimeDelta::seconds(60);
            let earlier = now - chrono::TimeDelta::seconds(3600);
            assert_eq!(count(AuditFilter { since: Some(later), ..Default::default() }).await, 0);
            assert_eq!(count(AuditFilter { since: Some(earlier), ..Default::default() }).await, 3);
            assert_eq!(count(AuditFilter { until: Some(earlier), ..Default::default() }).await, 0);
            assert_eq!(count(AuditFilter { until: Some(later), limit: 2, ..Default::default() }).await, 2);
            let refused = rows(&store, AuditFilter { action: Some(Action::Backfill), ..Default::default() }).await;
            assert_eq!((refused[0].result.as_str(), refused[0].detail.as_deref()), ("refused", Some("no")));

            // Retention: rows older than it go; newer ones stay.
            let prune = |older_than: Duration| {
                let store = store.clone();
                async move {
                    store
                        .call("pruning", move |conn| crate::db::audit::prune(conn, older_than, 500))
                        .await
                        .expect("prune")
                }
            };
            assert_eq!(prune(Duration::from_secs(3600)).await, 0);
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert_eq!(prune(Duration::ZERO).await, 3);
            assert_eq!(count(AuditFilter::default()).await, 0);
        });
    }
}

#[test]
fn a_sudo_user_is_shown_as_claimed() {
    // SUDO_USER is the command's environment's word: any process sets it.
    assert_eq!(alice().label(), "root@ops-host (sudo by alice, claimed)");
    let plain = Actor {
        sudo_user: None,
        ..alice()
    };
    assert_eq!(plain.label(), "root@ops-host");
    assert_eq!(ci().label(), "token ci@r1");
}

#[test]
fn secret_parameters_are_redacted() {
    let config = crate::config::Config::parse(
        std::path::Path::new("jobs.toml"),
        "[database]\nurl = \"sqlite:///tmp/x.db\"\n[[job]]\nname = \"load\"\nschedule = \"@manual\"\n\
         command = \"true\"\nparams = [\"TENANT\", \"PASSWORD\"]\nsecret_params = [\"PASSWORD\"]\n",
        &crate::config::Environment::default(),
    )
    .expect("valid");
    let given = [
        ("TENANT".to_string(), "acme".to_string()),
        ("PASSWORD".to_string(), "hunter2-hunter2".to_string()),
    ];
    let entry = crate::ops::actions::trigger_entry(
        &config.jobs[0],
        false,
        given.iter().map(|(n, v)| (n, v)),
    );
    let args = serde_json::Value::Object(entry.args).to_string();
    assert_eq!(
        args,
        format!(r#"{{"params":{{"PASSWORD":"{REDACTED}","TENANT":"acme"}}}}"#)
    );
    // Only a declared, non-secret parameter's acceptable value is written:
    // a secret under a misspelt name, an undeclared name, a value with a
    // NUL are not.
    let given = [
        ("TENANT".to_string(), "acme".to_string()),
        ("password".to_string(), "hunter2-hunter2".to_string()),
        ("HOST".to_string(), "db1".to_string()),
    ];
    let entry = crate::ops::actions::trigger_entry(
        &config.jobs[0],
        false,
        given.iter().map(|(n, v)| (n, v)),
    );
    let args = serde_json::Value::Object(entry.args).to_string();
    assert_eq!(
        args,
        format!(r#"{{"params":{{"HOST":"{REDACTED}","TENANT":"acme","password":"{REDACTED}"}}}}"#)
    );
    let nul = [("TENANT".to_string(), "a\0b".to_string())];
    let entry =
        crate::ops::actions::trigger_entry(&config.jobs[0], false, nul.iter().map(|(n, v)| (n, v)));
    assert_eq!(entry.args["params"]["TENANT"], REDACTED);
    assert_eq!(Action::parse("refuse_replica"), Ok(Action::RefuseReplica));
    assert!(Action::parse("stop").is_err_and(|e| e.contains("pause, resume")));
}
