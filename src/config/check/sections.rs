//! The rules of `[database]` and `[daemon]`: each value from the
//! environment's override or the file, parsed and checked.

use super::*;

impl Checker<'_> {
    pub(super) fn database(
        &mut self,
        raw: RawDatabase,
        path: &Path,
        env: &Environment,
    ) -> Option<DatabaseConfig> {
        let scope = Scope::Table("database");
        let pool_text = raw
            .pool_size
            .as_ref()
            .map(|s| Spanned::new(s.span(), s.get_ref().to_string()));
        let pool_size = match Given::of(env, POOL_SIZE_ENV, pool_text.as_ref()) {
            None => DEFAULT_POOL_SIZE,
            Some(given) => match given.text().trim().parse::<u32>() {
                Ok(n) if (1..=1000).contains(&n) => n,
                _ => {
                    let message =
                        format!("pool_size must be between 1 and 1000, not {}", given.text());
                    self.report_given(&given, scope, "pool_size", message);
                    DEFAULT_POOL_SIZE
                }
            },
        };
        let url = match Given::of(env, DATABASE_URL_ENV, raw.url.as_ref()) {
            Some(given) => {
                // A relative SQLite path is taken from the file's folder, or
                // from the working directory for one from the environment.
                let base = match given {
                    Given::File(..) => path.parent().map(Path::to_path_buf).unwrap_or_default(),
                    Given::Env(..) => std::env::current_dir().unwrap_or_default(),
                };
                match DatabaseUrl::parse(given.text(), &base) {
                    Ok(url) => Some(url),
                    Err(message) => {
                        self.report_given(&given, scope, "url", message);
                        None
                    }
                }
            }
            None => {
                self.report(
                    None,
                    Some(scope),
                    Some("url"),
                    format!(
                        "no database URL: set [database] url or {DATABASE_URL_ENV} \
                         (there is no local default, so that a fleet never runs every job on every replica)"
                    ),
                );
                None
            }
        };
        Some(DatabaseConfig {
            url: url?,
            pool_size,
        })
    }

    pub(super) fn daemon(&mut self, raw: RawDaemon, env: &Environment) -> DaemonConfig {
        let scope = Scope::Table("daemon");
        let duration =
            |checker: &mut Self, var, file: Option<&Spanned<String>>, key: &str, default| {
                let Some(given) = Given::of(env, var, file) else {
                    return default;
                };
                match parse_duration(given.text(), Zero::Rejected) {
                    Ok(duration) => duration,
                    Err(message) => {
                        checker.report_given(&given, scope, key, message);
                        default
                    }
                }
            };
        let shutdown_grace = duration(
            self,
            SHUTDOWN_GRACE_ENV,
            raw.shutdown_grace.as_ref(),
            "shutdown_grace",
            DEFAULT_SHUTDOWN_GRACE,
        );
        let history_retention = duration(
            self,
            HISTORY_RETENTION_ENV,
            raw.history_retention.as_ref(),
            "history_retention",
            DEFAULT_HISTORY_RETENTION,
        );
        let metrics_listen = Given::of(env, METRICS_LISTEN_ENV, raw.metrics_listen.as_ref())
            .and_then(|given| match given.text().trim().parse::<SocketAddr>() {
                Ok(addr) => Some(addr),
                Err(_) => {
                    let message = format!(
                        "invalid listen address {:?}: expected IP:PORT such as \"127.0.0.1:9187\"",
                        given.text()
                    );
                    self.report_given(&given, scope, "metrics_listen", message);
                    None
                }
            });
        DaemonConfig {
            shutdown_grace,
            metrics_listen,
            history_retention,
        }
    }
}
