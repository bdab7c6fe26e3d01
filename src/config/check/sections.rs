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

    pub(super) fn telemetry(&mut self, raw: RawTelemetry) -> TelemetryConfig {
        let scope = Some(Scope::Table("telemetry"));
        let endpoint = raw.endpoint.and_then(|given| {
            let url = given.get_ref().trim();
            let scheme = url.split_once("://").map(|(scheme, _)| scheme);
            let host = url.split_once("://").map(|(_, rest)| rest).unwrap_or("");
            if matches!(scheme, Some("http" | "https")) && !host.is_empty() && !url.contains(char::is_whitespace) {
                Some(url.to_string())
            } else {
                self.report(
                    Some(given.span()),
                    scope,
                    Some("endpoint"),
                    format!("{url:?} is not an http:// or https:// URL (the OTLP receiver's, such as http://collector:4318)"),
                );
                None
            }
        });
        let protocol = raw.protocol.and_then(|given| {
            match crate::telemetry::trace_config::protocol_of(given.get_ref()) {
                Ok(_) => Some(given.get_ref().trim().to_string()),
                Err(problem) => {
                    self.report(Some(given.span()), scope, Some("protocol"), problem);
                    None
                }
            }
        });
        let service_name = raw.service_name.and_then(|given| {
            let name = given.get_ref().trim();
            if name.is_empty() {
                self.report(
                    Some(given.span()),
                    scope,
                    Some("service_name"),
                    "the service's name is empty",
                );
                None
            } else {
                Some(name.to_string())
            }
        });
        let sample_ratio = raw.sample_ratio.and_then(|given| {
            let ratio = *given.get_ref();
            if (0.0..=1.0).contains(&ratio) {
                Some(ratio)
            } else {
                self.report(
                    Some(given.span()),
                    scope,
                    Some("sample_ratio"),
                    format!("{ratio} is not a share of runs: between 0 and 1 (0.1 traces one run in ten)"),
                );
                None
            }
        });
        let trace_url = raw.trace_url.and_then(|given| {
            match crate::telemetry::trace_config::check_trace_url(given.get_ref()) {
                Ok(url) => Some(url),
                Err(problem) => {
                    self.report(Some(given.span()), scope, Some("trace_url"), problem);
                    None
                }
            }
        });
        TelemetryConfig {
            endpoint,
            protocol,
            service_name,
            sample_ratio,
            trace_url,
        }
    }

    pub(super) fn web(&mut self, raw: RawWeb) -> WebConfig {
        let mut tokens: Vec<TokenEnv> = Vec::new();
        let is_var = |var: &str| {
            !var.is_empty()
                && !var.starts_with(|c: char| c.is_ascii_digit())
                && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        if let Some(given) = raw.token_env {
            let var = given.get_ref().trim();
            if is_var(var) {
                tokens.push(TokenEnv {
                    name: crate::config::DEFAULT_TOKEN_NAME.to_string(),
                    key: "web.token_env".to_string(),
                    var: var.to_string(),
                    line: Some(self.line(&given.span())),
                    grant: crate::config::Grant::full(),
                });
            } else {
                self.report(
                    Some(given.span()),
                    Some(Scope::Table("web")),
                    Some("token_env"),
                    format!(
                        "{:?} is not an environment variable's name (letters, digits and _)",
                        given.get_ref()
                    ),
                );
            }
        }
        if let Some(given) = raw.tokens {
            for (name, entry) in given.into_inner() {
                let entry_span = entry.span();
                let line = self.line(&entry_span);
                let report = |checker: &mut Self, problem: String| {
                    checker.report(
                        Some(entry_span.clone()),
                        Some(Scope::Table("web")),
                        Some("tokens"),
                        problem,
                    );
                };
                if !crate::config::is_token_name(&name) {
                    report(
                        self,
                        format!(
                            "{name:?} is not a token name (letters, digits, - and _, at most 64)"
                        ),
                    );
                    continue;
                }
                if name == crate::config::DEFAULT_TOKEN_NAME {
                    report(
                        self,
                        format!(
                            "{name:?} is the name of the token of token_env: name this one otherwise"
                        ),
                    );
                    continue;
                }
                let (var, grant) = match entry.into_inner() {
                    RawToken::Var(var) => (var, Ok(crate::config::Grant::full())),
                    RawToken::Scoped(scoped) => {
                        (scoped.env, grant_of(&name, scoped.can, scoped.jobs))
                    }
                };
                let grant = match grant {
                    Ok(grant) => grant,
                    Err(problem) => {
                        report(self, problem);
                        continue;
                    }
                };
                if !is_var(var.trim()) {
                    report(
                        self,
                        format!(
                            "{name}: {var:?} is not an environment variable's name (letters, digits and _)"
                        ),
                    );
                    continue;
                }
                tokens.push(TokenEnv {
                    key: format!("web.tokens.{name}"),
                    name,
                    var: var.trim().to_string(),
                    line: Some(line),
                    grant,
                });
            }
        }
        tokens.sort_by(|a, b| a.name.cmp(&b.name));
        let public_url = raw.public_url.and_then(|given| {
            match crate::config::PublicUrl::parse(given.get_ref()) {
                Ok(url) => Some(url),
                Err(problem) => {
                    self.report(
                        Some(given.span()),
                        Some(Scope::Table("web")),
                        Some("public_url"),
                        problem,
                    );
                    None
                }
            }
        });
        let advertise_url = raw.advertise_url.and_then(|given| {
            let parsed = crate::config::PublicUrl::parse(given.get_ref()).and_then(|url| {
                if url.secure {
                    Err(format!(
                        "{:?}: replicas reach each other's listener over plain HTTP: write http://HOST[:PORT]",
                        given.get_ref()
                    ))
                } else {
                    Ok(url.origin)
                }
            });
            match parsed {
                Ok(url) => Some(url),
                Err(problem) => {
                    self.report(
                        Some(given.span()),
                        Some(Scope::Table("web")),
                        Some("advertise_url"),
                        problem,
                    );
                    None
                }
            }
        });
        let cookie_name = match raw.cookie_name {
            Some(given) => {
                let name = given.get_ref().trim();
                // A cookie name is an RFC 6265 token; these are enough.
                if !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
                {
                    name.to_string()
                } else {
                    self.report(
                        Some(given.span()),
                        Some(Scope::Table("web")),
                        Some("cookie_name"),
                        format!(
                            "{:?} is not a cookie name (letters, digits, -, _ and .)",
                            given.get_ref()
                        ),
                    );
                    crate::config::DEFAULT_COOKIE.to_string()
                }
            }
            None => crate::config::DEFAULT_COOKIE.to_string(),
        };
        let cookie_path = match raw.cookie_path {
            Some(given) => {
                let path = given.get_ref().trim();
                if path.starts_with('/')
                    && !path.contains(|c: char| {
                        c == ';' || c == ',' || c.is_whitespace() || c.is_control()
                    })
                {
                    path.to_string()
                } else {
                    self.report(
                        Some(given.span()),
                        Some(Scope::Table("web")),
                        Some("cookie_path"),
                        format!(
                            "{:?} is not a cookie path: it starts with / and holds no ;, comma or space",
                            given.get_ref()
                        ),
                    );
                    "/".to_string()
                }
            }
            None => "/".to_string(),
        };
        // Behind https, the cookie never crosses plain HTTP unless the
        // operator says otherwise.
        let cookie_secure = raw.cookie_secure.map_or_else(
            || public_url.as_ref().is_some_and(|url| url.secure),
            |given| *given.get_ref(),
        );
        if cookie_name.starts_with("__Host-") && (!cookie_secure || cookie_path != "/") {
            self.report(
                None,
                Some(Scope::Table("web")),
                Some("cookie_name"),
                "a __Host- cookie must be Secure with path /: set cookie_secure = true (or an https public_url) and leave cookie_path at /".to_string(),
            );
        }
        let mut trusted_proxies = Vec::new();
        if let Some(given) = raw.trusted_proxies {
            for address in given.get_ref() {
                match address.trim().parse::<std::net::IpAddr>() {
                    Ok(ip) => trusted_proxies.push(ip),
                    Err(_) => self.report(
                        Some(given.span()),
                        Some(Scope::Table("web")),
                        Some("trusted_proxies"),
                        format!("{address:?} is not an IP address"),
                    ),
                }
            }
        }
        WebConfig {
            tokens,
            public_url,
            advertise_url,
            cookie_name,
            cookie_path,
            cookie_secure,
            trusted_proxies,
        }
    }

    pub(super) fn daemon(
        &mut self,
        raw: RawDaemon,
        env: &Environment,
        path: &Path,
    ) -> DaemonConfig {
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
            .and_then(|given| match parse_listen(given.text()) {
                Some(addr) => Some(addr),
                None => {
                    let message = format!(
                        "invalid listen address {:?}: expected IP:PORT such as \"127.0.0.1:9187\", or a PORT (on 127.0.0.1)",
                        given.text()
                    );
                    self.report_given(&given, scope, "metrics_listen", message);
                    None
                }
            });
        let mut count = |given: Option<&Spanned<i64>>, key: &str, max: i64, default: i64| {
            let Some(given) = given else {
                return default;
            };
            let n = *given.get_ref();
            if (1..=max).contains(&n) {
                return n;
            }
            self.report(
                Some(given.span()),
                Some(scope),
                Some(key),
                format!("{key} must be between 1 and {max}, not {n}"),
            );
            default
        };
        let max_backfill_instants = count(
            raw.max_backfill_instants.as_ref(),
            "max_backfill_instants",
            100_000_000,
            crate::config::DEFAULT_MAX_BACKFILL_INSTANTS as i64,
        ) as u64;
        let max_starts_per_second = count(
            raw.max_starts_per_second.as_ref(),
            "max_starts_per_second",
            100_000,
            i64::from(crate::config::DEFAULT_STARTS_PER_SECOND),
        ) as u32;
        let output_dir = match &raw.output_dir {
            Some(dir) if dir.get_ref().trim().is_empty() => {
                self.report(
                    Some(dir.span()),
                    Some(scope),
                    Some("output_dir"),
                    "output_dir is empty: name a folder (\"/var/lib/replicron/output\")",
                );
                std::path::PathBuf::from(crate::config::DEFAULT_OUTPUT_DIR)
            }
            Some(dir) => std::path::PathBuf::from(dir.get_ref()),
            None => std::path::PathBuf::from(crate::config::DEFAULT_OUTPUT_DIR),
        };
        // A relative one is taken from the file's folder, as a relative
        // SQLite path is: the daemon and the command line find the same.
        let output_dir = if output_dir.is_absolute() {
            output_dir
        } else {
            let folder = path.parent().map(Path::to_path_buf).unwrap_or_default();
            let joined = folder.join(&output_dir);
            if joined.is_absolute() {
                joined
            } else {
                std::env::current_dir()
                    .map(|cwd| cwd.join(&joined))
                    .unwrap_or(joined)
            }
        };
        DaemonConfig {
            shutdown_grace,
            metrics_listen,
            history_retention,
            max_backfill_instants,
            max_starts_per_second,
            output_dir,
        }
    }
}

/// `[daemon] metrics_listen`: IP:PORT, or a bare PORT (`9187` or `:9187`)
/// on 127.0.0.1.
fn parse_listen(text: &str) -> Option<SocketAddr> {
    let text = text.trim();
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Some(addr);
    }
    let port = text.strip_prefix(':').unwrap_or(text).parse::<u16>().ok()?;
    Some(SocketAddr::from(([127, 0, 0, 1], port)))
}

/// The grant of the token `name` of `[web] tokens` that says `can` and
/// `jobs`, or what is wrong with them (never the token's value, which is
/// not read here).
fn grant_of(
    name: &str,
    can: Option<Vec<String>>,
    jobs: Option<Vec<String>>,
) -> Result<crate::config::Grant, String> {
    use crate::config::Right;
    let rights = Right::ALL.map(Right::as_str).join(", ");
    let Some(can) = can else {
        return Err(format!(
            "{name}: can is missing: say what the token may do, from {rights} (can = [\"admin\"] for everything)"
        ));
    };
    if can.is_empty() {
        return Err(format!(
            "{name}: can is empty: a token may do at least one of {rights}"
        ));
    }
    let mut rights_given = Vec::new();
    for text in &can {
        match Right::parse(text) {
            Some(right) => rights_given.push(right),
            None => {
                return Err(format!(
                    "{name}: {text:?} is not a right: can lists {rights}"
                ));
            }
        }
    }
    rights_given.sort();
    rights_given.dedup();
    let jobs = match jobs {
        None => None,
        Some(patterns) if patterns.is_empty() => {
            return Err(format!(
                "{name}: jobs is empty: list the jobs it reaches (\"deploy-*\"), or leave jobs out for every job"
            ));
        }
        Some(patterns) => {
            if let Some(bad) = patterns
                .iter()
                .find(|p| !crate::config::is_job_glob(p.trim()))
            {
                return Err(format!(
                    "{name}: {bad:?} is not a pattern of job names: 1 to 64 characters of A-Z a-z 0-9 _ . : -, with * for any run of them and ? for one"
                ));
            }
            Some(patterns.iter().map(|p| p.trim().to_string()).collect())
        }
    };
    Ok(crate::config::Grant {
        can: rights_given,
        jobs,
    })
}
