//! The command line's definition is consistent (clap's own checks), and a
//! process that used the database from runtime threads ends cleanly.
//!
//! libpq's TLS and Kerberos libraries keep per-thread state torn down as each
//! thread ends, and clean their globals up in `exit`; a thread still ending
//! while the main thread exits made the process die of SIGSEGV after its work
//! was done, which turned a clean shutdown into a crash. Every command ends
//! through `cli::exit`; this runs that ending many times right
//! after runtime threads used connections, and counts the crashes.

use std::process::Command;

use super::{ExitCode, exit};
use crate::db::{DbError, Pool};
use crate::testing::{TestDb, backend_test};

/// Every command, argument and flag is consistent: no two share a name
/// or a short flag, defaults are valid values, and so on.
#[test]
fn verify_cli() {
    use clap::CommandFactory as _;
    super::Cli::command().debug_assert();
}

/// Set in a child process: the database URL to use before exiting.
const CHILD_URL: &str = "REPLICRON_TEST_EXIT_CHILD_URL";
const CHILDREN: usize = 40;

backend_test! {
    fn exiting_after_database_work_never_crashes(db: &TestDb) {
    let me = std::env::current_exe().expect("the test binary");
    {
        let mut crashed = Vec::new();
        for _ in 0..CHILDREN {
            let output = Command::new(&me)
                .args([
                    "--exact",
                    "cli::tests::child_process",
                    "--ignored",
                    "--test-threads=1",
                ])
                .env(CHILD_URL, &db.url)
                .output()
                .expect("run the test binary");
            if !output.status.success() {
                crashed.push(format!(
                    "{:?}: {}",
                    output.status,
                    String::from_utf8_lossy(&output.stderr)
                ));
            }
        }
        assert!(
            crashed.is_empty(),
            "{} of {CHILDREN} exits failed:\n{}",
            crashed.len(),
            crashed.join("\n")
        );
    }
    }
}

/// The child the test above starts (hence ignored on its own): queries the
/// database from eight blocking threads at once, shuts the runtime down and
/// ends the process the way the binary does.
#[test]
#[ignore = "a child process of exiting_after_database_work_never_crashes, which runs it"]
fn child_process() {
    let url = std::env::var(CHILD_URL).unwrap_or_else(|_| {
        panic!("{CHILD_URL} is set by exiting_after_database_work_never_crashes")
    });
    let pool = Pool::open(&url, 8).expect("open the pool");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let calls: Vec<_> = (0..8)
            .map(|_| {
                let pool = pool.clone();
                tokio::spawn(async move {
                    pool.run_blocking(|conn| {
                        use diesel::RunQueryDsl as _;
                        diesel::sql_query("SELECT 1")
                            .execute(conn)
                            .map_err(|e| DbError::query("SELECT 1", e))
                    })
                    .await
                })
            })
            .collect();
        for call in calls {
            call.await.expect("joined").expect("query");
        }
    });
    drop(runtime);
    drop(pool);
    exit(ExitCode::SUCCESS);
}
