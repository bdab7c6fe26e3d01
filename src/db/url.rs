//! The database URL: which backend it names, whether that backend was
//! compiled in, and how to print it without its password.

use std::fmt;
use std::path::{Path, PathBuf};

/// A database backend replicron can speak to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backend {
    /// SQLite, one file shared by the replicas of one host.
    Sqlite,
    /// MariaDB or MySQL.
    Mysql,
    /// PostgreSQL.
    Postgres,
}

impl Backend {
    /// The cargo feature that compiles this backend in.
    pub(crate) fn feature(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Mysql => "mysql",
            Backend::Postgres => "postgres",
        }
    }

    /// Whether this binary was built with the backend's feature.
    fn is_compiled_in(self) -> bool {
        match self {
            Backend::Sqlite => cfg!(feature = "sqlite"),
            Backend::Mysql => cfg!(feature = "mysql"),
            Backend::Postgres => cfg!(feature = "postgres"),
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Sqlite => "SQLite",
            Backend::Mysql => "MariaDB/MySQL",
            Backend::Postgres => "PostgreSQL",
        })
    }
}

/// A validated database URL. Its `Display` is redacted; the secret form is
/// only reachable through [`DatabaseUrl::connection_string`].
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct DatabaseUrl {
    backend: Backend,
    connection_string: String,
    /// MariaDB/MySQL with several hosts (`mysql://u@h1:3306,h2:3306/db`):
    /// one single-host URL per host, in order (a Galera cluster's nodes, or
    /// a primary and the servers that may be promoted in its place).
    /// Empty otherwise.
    hosts: Vec<String>,
}

impl DatabaseUrl {
    /// Parses `url`. A relative SQLite path is taken relative to `base_dir`
    /// (the config file's folder, or the working directory for a URL that
    /// came from the environment).
    pub(crate) fn parse(url: &str, base_dir: &Path) -> Result<Self, String> {
        let url = url.trim();
        let (scheme, rest) = url.split_once("://").ok_or_else(|| {
            format!(
                "database URL {} has no scheme: expected sqlite://, mysql:// or postgres://",
                redact(url)
            )
        })?;
        let backend = match scheme {
            "sqlite" => Backend::Sqlite,
            "mysql" | "mariadb" => Backend::Mysql,
            "postgres" | "postgresql" => Backend::Postgres,
            other => {
                return Err(format!(
                    "database URL {} has unknown scheme {other:?}: expected sqlite://, mysql:// or postgres://",
                    redact(url)
                ));
            }
        };
        if !backend.is_compiled_in() {
            return Err(format!(
                "database URL {} needs the {backend} backend, which this binary was built without: \
                 rebuild with `cargo build --release --features {}`",
                redact(url),
                backend.feature()
            ));
        }
        let connection_string = match backend {
            Backend::Sqlite => {
                let path = rest.split('?').next().unwrap_or_default();
                if path.is_empty() {
                    return Err("database URL sqlite:// names no file".to_string());
                }
                let path = PathBuf::from(path);
                let path = if path.is_absolute() {
                    path
                } else {
                    base_dir.join(path)
                };
                path.to_string_lossy().into_owned()
            }
            Backend::Mysql => format!("mysql://{rest}"),
            Backend::Postgres => format!("postgres://{rest}"),
        };
        let hosts = match backend {
            Backend::Mysql => mysql_hosts(&connection_string)
                .map_err(|e| format!("database URL {}: {e}", redact(url)))?,
            _ => Vec::new(),
        };
        Ok(DatabaseUrl {
            backend,
            connection_string,
            hosts,
        })
    }

    #[cfg_attr(
        not(any(feature = "mysql", test)),
        expect(dead_code, reason = "only MariaDB/MySQL URLs list several hosts")
    )]
    /// The URLs to try in turn, one host each: the URL itself, or for a
    /// MariaDB/MySQL URL that lists several hosts, one per host (the
    /// driver takes a single one). Never log them: they carry the
    /// password.
    pub(crate) fn alternatives(&self) -> Vec<&str> {
        if self.hosts.is_empty() {
            vec![self.connection_string.as_str()]
        } else {
            self.hosts.iter().map(String::as_str).collect()
        }
    }

    /// The backend this URL names.
    pub(crate) fn backend(&self) -> Backend {
        self.backend
    }

    /// What the driver needs to connect, password included: never log it.
    pub(crate) fn connection_string(&self) -> &str {
        &self.connection_string
    }
}

/// The single-host URLs of a MariaDB/MySQL URL whose host part lists
/// several hosts, separated by commas; none for a URL with one host. The
/// user information ends at the last `@` (a password may hold `@`, `/` or
/// `,`), and the host part at the next `/` or `?`.
fn mysql_hosts(url: &str) -> Result<Vec<String>, String> {
    let rest = url.strip_prefix("mysql://").unwrap_or(url);
    let (user, after) = match rest.rfind('@') {
        Some(at) => (&rest[..=at], &rest[at + 1..]),
        None => ("", rest),
    };
    let end = after.find(['/', '?']).unwrap_or(after.len());
    let (hosts, tail) = after.split_at(end);
    if !hosts.contains(',') {
        return Ok(Vec::new());
    }
    hosts
        .split(',')
        .map(|host| {
            if host.trim().is_empty() {
                Err("an empty host in its list of hosts".to_string())
            } else {
                Ok(format!("mysql://{user}{}{tail}", host.trim()))
            }
        })
        .collect()
}

impl fmt::Display for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.backend {
            Backend::Sqlite => write!(f, "sqlite://{}", self.connection_string),
            _ => f.write_str(&redact(&self.connection_string)),
        }
    }
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DatabaseUrl({self})")
    }
}

/// Replaces with `***` every password that `text` may hold: the one of
/// `user:password@host` wherever it appears (with a scheme or not, as in a
/// mistyped `mysql//admin:secret@db/jobs`), and the value of a `password=`
/// parameter. For URLs, and for messages that may quote one.
///
/// A password may hold any character a URL can carry, `/`, `#`, `?`, `@`
/// and `:` included, so a word is cut only at white space and quotes, and
/// everything from the first colon of its user information to its last `@`
/// is hidden: too much rather than too little.
pub(crate) fn redact(text: &str) -> String {
    const WORD_END: &[char] = &[' ', '\t', '\n', '\r', '"', '\'', '`'];
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        let end = rest.find(WORD_END).unwrap_or(rest.len());
        let (word, tail) = rest.split_at(end);
        redact_user_info(word, &mut out);
        let mut chars = tail.chars();
        if let Some(delimiter) = chars.next() {
            out.push(delimiter);
        }
        rest = chars.as_str();
    }
    redact_password_parameters(&out)
}

/// Writes `word` to `out` with the password of its `user:password@` hidden.
fn redact_user_info(word: &str, out: &mut String) {
    let start = word.find("://").map_or(0, |i| i + 3);
    let info = &word[start..];
    match (info.find(':'), info.rfind('@')) {
        (Some(colon), Some(at)) if colon < at => {
            out.push_str(&word[..start]);
            out.push_str(&info[..=colon]);
            out.push_str("***");
            out.push_str(&info[at..]);
        }
        _ => out.push_str(word),
    }
}

/// `password=secret` (in a query or a libpq keyword list) → `password=***`.
fn redact_password_parameters(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut search = 0;
    while let Some(found) = lower[search..].find("password=") {
        let value_start = search + found + "password=".len();
        let boundary =
            search + found == 0 || !lower.as_bytes()[search + found - 1].is_ascii_alphanumeric();
        let value_end = text[value_start..]
            .find(['&', ' ', '\n', '"', '\''])
            .map_or(text.len(), |i| value_start + i);
        if boundary && value_end > value_start {
            out.push_str(&text[copied..value_start]);
            out.push_str("***");
            copied = value_end;
        }
        search = value_end.max(value_start);
    }
    out.push_str(&text[copied..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords() {
        assert_eq!(
            redact("mysql://app:s3cr:et@db.example:3306/jobs"),
            "mysql://app:***@db.example:3306/jobs"
        );
        assert_eq!(redact("postgres://app@db/jobs"), "postgres://app@db/jobs");
        assert_eq!(
            redact("postgres://db/jobs?user=app&password=hunter2&sslmode=require"),
            "postgres://db/jobs?user=app&password=***&sslmode=require"
        );
    }

    #[test]
    fn redacts_passwords_outside_well_formed_urls() {
        assert_eq!(
            redact("database URL mysql//admin:Sup3rS3cret@127.0.0.1/nc has no scheme"),
            "database URL mysql//admin:***@127.0.0.1/nc has no scheme"
        );
        assert_eq!(
            redact("admin:Sup3rS3cret@db.internal"),
            "admin:***@db.internal"
        );
        assert_eq!(
            redact("mysql://u:p@ss:w@rd@h:3306/db"),
            "mysql://u:***@h:3306/db"
        );
        // Characters a URL's password may carry, and the delimiters around
        // a URL quoted in a message.
        for (text, shown) in [
            ("mysql://admin:p#ss@db/nc", "mysql://admin:***@db/nc"),
            ("mysql//admin:p/ss?w#rd@db/nc", "mysql//admin:***@db/nc"),
            ("admin:pa/ss@db", "admin:***@db"),
            (
                "cannot connect to (mysql://u:a;b,c(d)@h:3306/db): refused",
                "cannot connect to (mysql://u:***@h:3306/db): refused",
            ),
            (
                "url=\"postgres://u:x%20y@h/db\"",
                "url=\"postgres://u:***@h/db\"",
            ),
        ] {
            assert_eq!(redact(text), shown, "{text}");
        }
        assert_eq!(
            redact("host=db user=app password=hunter2 dbname=x"),
            "host=db user=app password=*** dbname=x"
        );
        assert_eq!(
            redact("postgres://db/jobs?sslmode=require&PASSWORD=hunter2"),
            "postgres://db/jobs?sslmode=require&PASSWORD=***"
        );
        // Nothing to hide: unchanged.
        for plain in [
            "postgres://app@db/jobs",
            "ops@example.com",
            "a: b@c",
            "no password here",
        ] {
            assert_eq!(redact(plain), plain);
        }
    }

    #[test]
    fn sqlite_paths_are_relative_to_the_base() {
        let url = DatabaseUrl::parse("sqlite://state/replicron.db", Path::new("/etc/replicron"));
        if cfg!(feature = "sqlite") {
            let url = url.expect("valid");
            assert_eq!(url.connection_string(), "/etc/replicron/state/replicron.db");
            assert_eq!(url.backend(), Backend::Sqlite);
        }
        let abs = DatabaseUrl::parse("sqlite:///var/lib/r.db", Path::new("/etc"));
        if let Ok(abs) = abs {
            assert_eq!(abs.connection_string(), "/var/lib/r.db");
        }
    }

    #[test]
    fn display_never_shows_the_password() {
        for url in ["mysql://u:topsecret@h/db", "postgres://u:topsecret@h/db"] {
            match DatabaseUrl::parse(url, Path::new(".")) {
                Ok(parsed) => {
                    assert!(!parsed.to_string().contains("topsecret"));
                    assert!(!format!("{parsed:?}").contains("topsecret"));
                }
                Err(e) => {
                    assert!(!e.contains("topsecret"));
                    assert!(e.contains("--features"));
                }
            }
        }
    }

    #[test]
    fn a_mysql_url_may_list_several_hosts() {
        let Ok(url) = DatabaseUrl::parse(
            "mysql://app:p@s,s/w@db1:3306, db2:3307,db3/jobs?ssl_mode=required",
            Path::new("."),
        ) else {
            return;
        };
        assert_eq!(
            url.alternatives(),
            [
                "mysql://app:p@s,s/w@db1:3306/jobs?ssl_mode=required",
                "mysql://app:p@s,s/w@db2:3307/jobs?ssl_mode=required",
                "mysql://app:p@s,s/w@db3/jobs?ssl_mode=required",
            ]
        );
        assert!(!url.to_string().contains("p@s,s"), "{url}");
        let one = DatabaseUrl::parse("mysql://app@db1/jobs", Path::new(".")).expect("valid");
        assert_eq!(one.alternatives(), ["mysql://app@db1/jobs"]);
        let err = DatabaseUrl::parse("mysql://app:pw@db1,,db2/jobs", Path::new("."))
            .expect_err("an empty host");
        assert!(err.contains("empty host") && !err.contains("pw"), "{err}");
    }

    #[test]
    fn unknown_schemes_are_named() {
        let err = DatabaseUrl::parse("redis://h", Path::new(".")).unwrap_err();
        assert!(err.contains("\"redis\""), "{err}");
        let err = DatabaseUrl::parse("replicron.db", Path::new(".")).unwrap_err();
        assert!(err.contains("no scheme"), "{err}");
    }
}
