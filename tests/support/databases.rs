//! A fresh database for each test on each backend, dropped afterwards, and
//! the attributes that report a test as ignored, with the reason, when its
//! backend is missing on this machine (never in CI: there it fails).
//!
//! Shared by the crate's own tests and the integration tests, so it uses
//! diesel alone.

use std::path::Path;

use diesel::Connection;
use diesel::connection::SimpleConnection;

/// The backends a test can run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// SQLite, in a temporary folder.
    Sqlite,
    /// MariaDB or MySQL, at `REPLICRON_TEST_MYSQL_URL`.
    Mysql,
    /// PostgreSQL, at `REPLICRON_TEST_POSTGRES_URL`.
    Postgres,
}

/// A connection for the tests' own SQL, on any backend.
#[derive(diesel::MultiConnection)]
pub(crate) enum RawConnection {
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

/// A connection to `url` (`sqlite://path`, `mysql://…`, `postgres://…`),
/// in a UTC session as replicron's own are.
pub(super) fn raw_connect(url: &str) -> RawConnection {
    raw_try_connect(url).unwrap_or_else(|e| panic!("connect to a test database: {e}"))
}

/// [`raw_connect`], or the error.
pub(super) fn raw_try_connect(url: &str) -> diesel::ConnectionResult<RawConnection> {
    let (scheme, _rest) = url.split_once("://").unwrap_or(("sqlite", url));
    match scheme {
        #[cfg(feature = "sqlite")]
        "sqlite" => diesel::SqliteConnection::establish(_rest).map(RawConnection::Sqlite),
        #[cfg(feature = "mysql")]
        "mysql" | "mariadb" => {
            let mut conn = diesel::MysqlConnection::establish(url)?;
            let _ = conn.batch_execute("SET time_zone = '+00:00'");
            Ok(RawConnection::Mysql(conn))
        }
        #[cfg(feature = "postgres")]
        "postgres" | "postgresql" => {
            diesel::PgConnection::establish(url).map(RawConnection::Postgres)
        }
        other => panic!("no backend for {other}:// in this build"),
    }
}

/// A database of its own for one test, dropped afterwards.
pub(crate) struct TestDb {
    /// Its backend.
    pub kind: Kind,
    /// The URL replicron is given.
    pub url: String,
    dir: tempfile::TempDir,
    drop_sql: Option<(String, String)>,
}

impl TestDb {
    /// A fresh database on `kind`. A test on a server backend runs only
    /// where the server's URL is set (see [`backend_test!`]): without it
    /// this panics, naming the variable.
    pub(crate) fn new(kind: Kind) -> TestDb {
        let dir = tempfile::tempdir().expect("temp dir");
        let var = match kind {
            Kind::Sqlite => {
                return TestDb {
                    kind,
                    url: format!("sqlite://{}", dir.path().join("replicron.db").display()),
                    dir,
                    drop_sql: None,
                };
            }
            Kind::Mysql => "REPLICRON_TEST_MYSQL_URL",
            Kind::Postgres => "REPLICRON_TEST_POSTGRES_URL",
        };
        let admin_url = std::env::var(var).unwrap_or_else(|_| {
            panic!("{var} is not set: {kind:?} tests need a server (scripts/test provides one)")
        });
        let name = format!(
            "replicron_t_{}_{}",
            std::process::id(),
            rand::random::<u32>()
        );
        raw_connect(&admin_url)
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .expect("create the test database");
        let base = admin_url
            .rsplit_once('/')
            .map_or(admin_url.as_str(), |(b, _)| b);
        let drop = match kind {
            Kind::Mysql => format!("DROP DATABASE IF EXISTS {name}"),
            _ => format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        };
        TestDb {
            kind,
            url: format!("{base}/{name}"),
            dir,
            drop_sql: Some((admin_url, drop)),
        }
    }

    /// A fresh SQLite database.
    #[cfg(feature = "sqlite")]
    pub(crate) fn sqlite() -> TestDb {
        TestDb::new(Kind::Sqlite)
    }

    /// A fresh MariaDB/MySQL database.
    #[cfg(feature = "mysql")]
    pub(crate) fn mysql() -> TestDb {
        TestDb::new(Kind::Mysql)
    }

    /// A fresh PostgreSQL database.
    #[cfg(feature = "postgres")]
    pub(crate) fn postgres() -> TestDb {
        TestDb::new(Kind::Postgres)
    }

    /// A temporary folder that lives as long as this database.
    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A connection for the test's own SQL.
    pub(crate) fn raw(&self) -> RawConnection {
        raw_connect(&self.url)
    }

    /// The database server's address (MariaDB and PostgreSQL).
    pub(crate) fn server(&self) -> std::net::SocketAddr {
        let authority = self.url.split_once("://").map_or("", |(_, rest)| rest);
        let host_port = authority.split('/').next().unwrap_or("");
        let host_port = host_port.rsplit('@').next().unwrap_or(host_port);
        host_port.parse().expect("an IP:port database address")
    }

    /// This database's URL, but reached through `port` on 127.0.0.1.
    pub(crate) fn url_via(&self, port: u16) -> String {
        self.url
            .replace(&self.server().to_string(), &format!("127.0.0.1:{port}"))
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Some((admin_url, sql)) = &self.drop_sql {
            match raw_try_connect(admin_url) {
                Ok(mut admin) => {
                    if let Err(e) = admin.batch_execute(sql) {
                        eprintln!("could not drop a test database: {e}");
                    }
                }
                Err(e) => eprintln!("could not drop a test database: {e}"),
            }
        }
    }
}

/// Defines a test once per backend of this build: `fn name(db: &TestDb)`
/// becomes a module `name` with the tests `sqlite`, `mysql` and
/// `postgres`, each on a fresh database. A server backend whose URL is not
/// set is reported as ignored with the variable's name (outside CI).
macro_rules! backend_test {
    ($(#[$meta:meta])* fn $name:ident($db:ident: &TestDb) $body:block) => {
        $(#[$meta])*
        mod $name {
            use super::*;

            fn check($db: &TestDb) $body

            #[cfg(feature = "sqlite")]
            #[test]
            fn sqlite() {
                check(&TestDb::sqlite());
            }

            #[cfg(feature = "mysql")]
            #[test]
            #[cfg_attr(replicron_no_mysql_server, ignore = "REPLICRON_TEST_MYSQL_URL is not set")]
            fn mysql() {
                check(&TestDb::mysql());
            }

            #[cfg(feature = "postgres")]
            #[test]
            #[cfg_attr(replicron_no_postgres_server, ignore = "REPLICRON_TEST_POSTGRES_URL is not set")]
            fn postgres() {
                check(&TestDb::postgres());
            }
        }
    };
}
pub(crate) use backend_test;
