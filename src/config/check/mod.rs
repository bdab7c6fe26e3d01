//! The checker: walks the TOML document with the position of every value,
//! and collects every problem as a [`Diagnostic`] naming the line, the job
//! and the key. This file holds what every section shares (where a value
//! is, how a problem is reported, the order of the sections); the sections'
//! own rules are in [`sections`] (`[database]`, `[daemon]`) and [`jobs`]
//! (`[defaults]` and each `[[job]]`).

mod after;
mod calendars;
mod include;

pub(crate) use self::after::upcoming as dependent_upcoming;
mod jobs;
mod limits;
mod notify;
mod sections;

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;
use toml::de::{DeTable, DeValue, ValueDeserializer};

use self::jobs::Settings;
use super::raw::{
    RawAfter, RawCalendar, RawDaemon, RawDatabase, RawJob, RawLimit, RawNotify, RawSettings,
    RawTelemetry, RawToken, RawWeb,
};
use super::*;
use crate::schedule::{DstGap, DstRepeat, Rules};

/// Checks `text` (read from `path`): the config, if it could be built, and
/// every problem found, in the order of their lines.
pub(super) fn check(
    path: &Path,
    text: &str,
    env: &Environment,
) -> (Option<Config>, Vec<Diagnostic>) {
    let includes = include::read(path, text);
    let mut sources = vec![(path.to_path_buf(), text)];
    sources.extend(
        includes
            .files
            .iter()
            .map(|file| (file.path.clone(), file.text.as_str())),
    );
    let mut checker = Checker {
        sources,
        current: 0,
        diagnostics: Vec::new(),
        warnings: Vec::new(),
        past: Vec::new(),
        declared_after: Vec::new(),
        declared_names: HashMap::new(),
    };
    for (span, problem) in includes.problems {
        checker.report(Some(span), None, Some("include"), problem);
    }
    for (span, problem) in includes.warnings {
        checker.warn(Some(span), None, Some("include"), problem);
    }
    let config = checker.config(path, env);
    checker.diagnostics.sort_by(Diagnostic::order);
    let config = config.map(|mut config| {
        checker.warnings.sort_by(Diagnostic::order);
        config.warnings = checker.warnings;
        config.past_instants = checker.past;
        config
    });
    (config, checker.diagnostics)
}

/// A `[database]` or `[daemon]` value and where it came from.
enum Given<'v> {
    File(Range<usize>, &'v str),
    Env(&'static str, &'v str),
}

impl<'v> Given<'v> {
    /// The environment's value of `var`, else the file's.
    fn of(
        env: &'v Environment,
        var: &'static str,
        file: Option<&'v Spanned<String>>,
    ) -> Option<Self> {
        match (env.get(var), file) {
            (Some(value), _) => Some(Given::Env(var, value)),
            (None, Some(file)) => Some(Given::File(file.span(), file.get_ref())),
            (None, None) => None,
        }
    }

    fn text(&self) -> &'v str {
        match self {
            Given::File(_, text) | Given::Env(_, text) => text,
        }
    }
}

/// How errors name a job before it is validated: by its name where it has
/// a plausible one, else by its position.
fn job_label(entry: &Spanned<DeValue<'_>>, index: usize) -> String {
    if let DeValue::Table(table) = entry.get_ref()
        && let Some(DeValue::String(name)) = table.get("name").map(Spanned::get_ref)
        && crate::config::name::has_job_form(name)
    {
        return format!("{name:?}");
    }
    format!("#{}", index + 1)
}

/// Where a diagnostic belongs: a job (by label) or a top-level table.
#[derive(Clone, Copy)]
enum Scope<'a> {
    Table(&'a str),
    Job(&'a str),
}

impl Scope<'_> {
    /// The table a top-level scope names.
    fn table(self) -> &'static str {
        match self {
            Scope::Table("database") => "database",
            Scope::Table("daemon") => "daemon",
            Scope::Table("notify") => "notify",
            Scope::Table("limit") => "limit",
            Scope::Table("calendar") => "calendar",
            Scope::Table(_) => "defaults",
            Scope::Job(_) => "job",
        }
    }

    fn job(self) -> Option<String> {
        match self {
            Scope::Job(label) => Some(label.to_string()),
            Scope::Table(_) => None,
        }
    }

    fn key(self, key: &str) -> String {
        match self {
            Scope::Table(table) => format!("{table}.{key}"),
            Scope::Job(_) => key.to_string(),
        }
    }
}

/// The `[[job]]`, `[[limit]]` and `[[calendar]]` tables read, each with
/// the source it is from and where it is in it.
#[derive(Default)]
struct Gathered {
    jobs: Vec<(usize, Range<usize>, RawJob)>,
    limits: Vec<(usize, Range<usize>, RawLimit)>,
    calendars: Vec<(usize, Range<usize>, RawCalendar)>,
}

pub(super) struct Checker<'t> {
    /// The files read, with their text: the job file first, then each
    /// file it includes.
    sources: Vec<(PathBuf, &'t str)>,
    /// Which of them the values being checked are from.
    current: usize,
    diagnostics: Vec<Diagnostic>,
    /// What is wrong but stops nothing ([`Config::warnings`]).
    warnings: Vec<Diagnostic>,
    /// The `at` instants already past ([`Config::past_instants`]).
    past: Vec<PastInstant>,
    /// The jobs' `after`, resolved once every job is read.
    declared_after: Vec<after::Declared>,
    /// Each name a job, limit or calendar was declared with (by its
    /// table), with its source and line: a name declared twice is told
    /// with both places.
    declared_names: HashMap<(&'static str, String), (usize, usize)>,
}

impl<'t> Checker<'t> {
    fn line(&self, span: &Range<usize>) -> usize {
        let text = self.sources[self.current].1;
        let end = span.start.min(text.len());
        text.as_bytes()[..end]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1
    }

    fn report(
        &mut self,
        span: Option<Range<usize>>,
        scope: Option<Scope<'_>>,
        key: Option<&str>,
        message: impl Into<String>,
    ) {
        let diagnostic = self.diagnostic(span, scope, key, message.into());
        self.diagnostics.push(diagnostic);
    }

    /// As [`Checker::report`], for what is wrong but stops nothing.
    fn warn(
        &mut self,
        span: Option<Range<usize>>,
        scope: Option<Scope<'_>>,
        key: Option<&str>,
        message: impl Into<String>,
    ) {
        let diagnostic = self.diagnostic(span, scope, key, message.into());
        self.warnings.push(diagnostic);
    }

    /// Whether an error about `key` in `scope` was reported already (a
    /// value that could not be read, say): a later check that misses the
    /// key says nothing more of it.
    fn reported(&self, scope: Scope<'_>, key: &str) -> bool {
        let here = self.diagnostic(None, Some(scope), Some(key), String::new());
        self.diagnostics
            .iter()
            .any(|d| d.file == here.file && d.job == here.job && d.key == here.key)
    }

    fn diagnostic(
        &self,
        span: Option<Range<usize>>,
        scope: Option<Scope<'_>>,
        key: Option<&str>,
        message: String,
    ) -> Diagnostic {
        Diagnostic {
            file: (self.current > 0).then(|| self.sources[self.current].0.clone()),
            line: span.map(|span| self.line(&span)),
            job: scope.and_then(Scope::job),
            key: match (scope, key) {
                (Some(scope), Some(key)) => Some(scope.key(key)),
                (None, Some(key)) => Some(key.to_string()),
                _ => None,
            },
            message,
        }
    }

    fn config(&mut self, path: &Path, env: &Environment) -> Option<Config> {
        let text = self.sources[0].1;
        let (root, errors) = DeTable::parse_recoverable(text);
        if !errors.is_empty() {
            for error in errors {
                let message = error.message().trim().to_string();
                self.report(error.span(), None, None, format!("invalid TOML: {message}"));
            }
            return None;
        }
        let root = root.into_inner();

        let mut database = RawDatabase::default();
        let mut daemon = RawDaemon::default();
        let mut web = RawWeb::default();
        let mut telemetry = RawTelemetry::default();
        let mut defaults = RawSettings::default();
        let mut notify = RawNotify::default();
        let mut gathered = Gathered::default();
        for (key, value) in root {
            let key_span = key.span();
            match key.get_ref().as_ref() {
                "database" => {
                    database = self
                        .table(value, Scope::Table("database"))
                        .unwrap_or_default()
                }
                "daemon" => {
                    daemon = self
                        .table(value, Scope::Table("daemon"))
                        .unwrap_or_default()
                }
                "web" => web = self.table(value, Scope::Table("web")).unwrap_or_default(),
                "telemetry" => {
                    telemetry = self
                        .table(value, Scope::Table("telemetry"))
                        .unwrap_or_default()
                }
                "defaults" => {
                    defaults = self
                        .table(value, Scope::Table("defaults"))
                        .unwrap_or_default()
                }
                "notify" => {
                    notify = self
                        .table(value, Scope::Table("notify"))
                        .unwrap_or_default()
                }
                "job" | "limit" | "calendar" => self.gather(key.get_ref(), value, &mut gathered),
                "include" => {
                    let span = value.span();
                    let listed = matches!(value.get_ref(), DeValue::Array(array)
                        if array.iter().all(|v| matches!(v.get_ref(), DeValue::String(_))));
                    if !listed {
                        self.report(
                            Some(span),
                            None,
                            Some("include"),
                            "include is a list of file patterns, relative to this file: include = [\"jobs.d/*.toml\"]",
                        );
                    }
                }
                other => self.report(
                    Some(key_span),
                    None,
                    Some(other),
                    "unknown top-level key: expected [database], [daemon], [web], [defaults], [notify], [[limit]], [[calendar]], [[job]] or include",
                ),
            }
        }

        for source in 1..self.sources.len() {
            self.current = source;
            self.gather_included(&mut gathered);
        }
        self.current = 0;

        let database = self.database(database, path, env);
        let daemon = self.daemon(daemon, env, path);
        let web = self.web(web);
        let telemetry = self.telemetry(telemetry);
        let defaults = self.settings(defaults, &Settings::default(), Scope::Table("defaults"));
        let notify = self.notify(
            notify,
            &crate::config::notify::Notify::default(),
            Scope::Table("notify"),
            "",
            &defaults.shell,
        );
        let mut limits: Vec<Limit> = Vec::new();
        for (source, span, raw) in gathered.limits {
            self.current = source;
            if let Some(limit) = self.limit(span, raw) {
                limits.push(limit);
            }
        }
        let mut calendars: Vec<std::sync::Arc<crate::schedule::calendar::Calendar>> = Vec::new();
        for (source, span, raw) in gathered.calendars {
            self.current = source;
            // A calendar's file is found beside the file that names it.
            let folder = self.sources[source].0.parent().unwrap_or(Path::new("."));
            let folder = folder.to_path_buf();
            if let Some(calendar) = self.calendar(span, raw, &folder) {
                calendars.push(std::sync::Arc::new(calendar));
            }
        }
        let file = jobs::FileWide {
            defaults: &defaults,
            notify: &notify,
            limits: &limits,
            calendars: &calendars,
        };
        let mut jobs: Vec<Job> = Vec::new();
        let mut job_files = BTreeMap::new();
        // A job is numbered by its place in its own file.
        let mut counted = vec![0; self.sources.len()];
        for (source, span, raw) in gathered.jobs {
            self.current = source;
            let index = counted[source];
            counted[source] += 1;
            if let Some(job) = self.job(index, span, raw, &file) {
                if source > 0 {
                    job_files.insert(job.name.to_string(), self.sources[source].0.clone());
                }
                jobs.push(job);
            }
        }
        self.current = 0;
        let declared = std::mem::take(&mut self.declared_after);
        let dependencies_hold = self.resolve_after(declared, &mut jobs);
        self.current = 0;
        // A token's pattern that reaches no job is likely misspelt.
        for token in &web.tokens {
            for pattern in token.grant.jobs.iter().flatten() {
                if !jobs.iter().any(|j| glob_matches(pattern, &j.name)) {
                    self.warnings.push(Diagnostic {
                        file: None,
                        line: token.line,
                        job: None,
                        key: Some(token.key.clone()),
                        message: format!(
                            "{}: the pattern {pattern:?} of its jobs matches no job of the file",
                            token.name
                        ),
                    });
                }
            }
        }
        // The variables notifications read secrets from are no job's.
        let mut hidden: Vec<String> = notify.secret_vars();
        hidden.extend(web.tokens.iter().map(|t| t.var.clone()));
        // Nor the headers the traces' receiver is sent, a key among them.
        hidden.extend(crate::telemetry::trace_config::SECRET_VARS.map(String::from));
        for job in &jobs {
            hidden.extend(job.notify.iter().flat_map(|n| n.secret_vars()));
        }
        hidden.sort();
        hidden.dedup();
        // Nor does a notifier command see the web token.
        let web_vars: Vec<String> = web
            .tokens
            .iter()
            .map(|t| t.var.clone())
            .chain(crate::telemetry::trace_config::SECRET_VARS.map(String::from))
            .collect();
        for job in &mut jobs {
            if let Some(files) = &mut job.output_files {
                files.dir = daemon.output_dir.clone();
            }
            job.hidden_env = hidden.clone();
            if let Some(notify) = &mut job.notify {
                std::sync::Arc::make_mut(notify).hidden_env = web_vars.clone();
            }
        }
        if !dependencies_hold {
            return None;
        }
        Some(Config {
            path: path.to_path_buf(),
            database: database?,
            daemon,
            web,
            telemetry,
            defaults: Defaults {
                lock_at_most_for: defaults.lock_at_most_for,
                lock_at_least_for: defaults.lock_at_least_for,
                kill_grace: defaults.kill_grace,
                output_limit: defaults.output_limit,
            },
            jobs,
            limits,
            calendars,
            warnings: Vec::new(),
            past_instants: Vec::new(),
            broken: false,
            included: self.sources[1..].iter().map(|(p, _)| p.clone()).collect(),
            job_files,
        })
    }

    /// Reads a `[[job]]`, `[[limit]]` or `[[calendar]]` array of the
    /// current source into `gathered`.
    fn gather(&mut self, key: &str, value: Spanned<DeValue<'_>>, gathered: &mut Gathered) {
        let source = self.current;
        match key {
            "job" => {
                let span = value.span();
                match value.into_inner() {
                    DeValue::Array(array) => {
                        for (index, entry) in array.into_iter().enumerate() {
                            let entry_span = entry.span();
                            let label = job_label(&entry, index);
                            if let Some(job) = self.table(entry, Scope::Job(&label)) {
                                gathered.jobs.push((source, entry_span, job));
                            }
                        }
                    }
                    _ => self.report(
                        Some(span),
                        None,
                        Some("job"),
                        "jobs are written as [[job]] tables",
                    ),
                }
            }
            "limit" => {
                let span = value.span();
                match value.into_inner() {
                    DeValue::Array(array) => {
                        for entry in array {
                            let entry_span = entry.span();
                            if let Some(limit) = self.table(entry, Scope::Table("limit")) {
                                gathered.limits.push((source, entry_span, limit));
                            }
                        }
                    }
                    _ => self.report(
                        Some(span),
                        None,
                        Some("limit"),
                        "limits are written as [[limit]] tables",
                    ),
                }
            }
            "calendar" => {
                let span = value.span();
                match value.into_inner() {
                    DeValue::Array(array) => {
                        for entry in array {
                            let entry_span = entry.span();
                            if let Some(calendar) = self.table(entry, Scope::Table("calendar")) {
                                gathered.calendars.push((source, entry_span, calendar));
                            }
                        }
                    }
                    _ => self.report(
                        Some(span),
                        None,
                        Some("calendar"),
                        "calendars are written as [[calendar]] tables",
                    ),
                }
            }
            _ => {}
        }
    }

    /// Reads the current source, an included file: its `[[job]]`,
    /// `[[limit]]` and `[[calendar]]` tables into `gathered`; anything
    /// else in it is an error.
    fn gather_included(&mut self, gathered: &mut Gathered) {
        let text = self.sources[self.current].1;
        let (root, errors) = DeTable::parse_recoverable(text);
        if !errors.is_empty() {
            for error in errors {
                let message = error.message().trim().to_string();
                self.report(error.span(), None, None, format!("invalid TOML: {message}"));
            }
            return;
        }
        for (key, value) in root.into_inner() {
            match key.get_ref().as_ref() {
                name @ ("job" | "limit" | "calendar") => self.gather(name, value, gathered),
                other => self.report(
                    Some(key.span()),
                    None,
                    Some(other),
                    "an included file holds only [[job]], [[limit]] and [[calendar]] tables: \
                     include and the settings ([database], [defaults], …) are the job file's",
                ),
            }
        }
    }

    /// Deserializes one table through the serde layer. A key that fails is
    /// reported and removed, and the rest is tried again, so that every bad
    /// key of a table is reported, not only the first.
    fn table<T: for<'de> Deserialize<'de>>(
        &mut self,
        value: Spanned<DeValue<'_>>,
        scope: Scope<'_>,
    ) -> Option<T> {
        let span = value.span();
        let mut table = match value.into_inner() {
            DeValue::Table(table) => table,
            _ => {
                let name = match scope {
                    Scope::Table(name) => name,
                    Scope::Job(_) => "job",
                };
                self.report(Some(span), None, Some(name), "expected a table");
                return None;
            }
        };
        loop {
            let attempt =
                ValueDeserializer::from(Spanned::new(span.clone(), DeValue::Table(table.clone())));
            match T::deserialize(attempt) {
                Ok(parsed) => return Some(parsed),
                Err(error) => {
                    let at = error.span().unwrap_or(span.clone());
                    let culprit = table
                        .iter()
                        .find(|(k, v)| {
                            let start = k.span().start;
                            let end = v.span().end.max(k.span().end);
                            (start..end.max(start + 1)).contains(&at.start)
                        })
                        .map(|(k, _)| k.clone());
                    let message = error.message().trim().to_string();
                    match culprit {
                        Some(key) => {
                            self.report(
                                Some(key.span()),
                                Some(scope),
                                Some(key.get_ref()),
                                message,
                            );
                            table.remove(&key);
                        }
                        None => {
                            self.report(Some(at), Some(scope), None, message);
                            return None;
                        }
                    }
                }
            }
        }
    }

    /// Reports a problem with a value, where it came from: a line of the
    /// file, or an environment variable.
    fn report_given(&mut self, given: &Given<'_>, scope: Scope<'_>, key: &str, message: String) {
        match given {
            Given::File(span, _) => {
                self.report(Some(span.clone()), Some(scope), Some(key), message)
            }
            Given::Env(var, _) => self.report(
                None,
                None,
                Some(var),
                format!(
                    "{message} (set in the environment, where it overrides [{}] {key})",
                    scope.table()
                ),
            ),
        }
    }

    /// The `name` of a `[[TABLE]]` (a lock's form, and not `taken` by one
    /// declared before), or `None`, reported: what `[[limit]]` and
    /// `[[calendar]]` ask of their names.
    fn table_name(
        &mut self,
        name: Option<Spanned<String>>,
        span: Range<usize>,
        table: &'static str,
    ) -> Option<String> {
        let scope = Scope::Table(table);
        let Some(name) = name else {
            self.report(
                Some(span),
                Some(scope),
                Some("name"),
                format!("a {table} needs a name"),
            );
            return None;
        };
        let problem = match crate::config::name::check_limit(name.get_ref()) {
            Err(e) => format!("invalid {table} name {:?}: {e}", name.get_ref()),
            Ok(()) => match self.declare(table, name.get_ref(), &name.span()) {
                Some(earlier) => format!(
                    "{table} {:?} is declared twice: also at {earlier}",
                    name.get_ref()
                ),
                None => return Some(name.into_inner()),
            },
        };
        self.report(Some(name.span()), Some(scope), Some("name"), problem);
        None
    }

    /// Records that a `table` is named `name` at `span` of the current
    /// source; if one was declared with that name before, where it was
    /// (`FILE:LINE`), and nothing is recorded.
    fn declare(&mut self, table: &'static str, name: &str, span: &Range<usize>) -> Option<String> {
        let key = (table, name.to_string());
        if let Some(&(source, line)) = self.declared_names.get(&key) {
            return Some(format!("{}:{line}", self.sources[source].0.display()));
        }
        let here = (self.current, self.line(span));
        self.declared_names.insert(key, here);
        None
    }

    /// Parses a duration key if present; `None` when absent or invalid (and
    /// then reported).
    fn duration(
        &mut self,
        value: Option<&Spanned<String>>,
        scope: Scope<'_>,
        key: &str,
        zero: Zero,
    ) -> Option<Duration> {
        let value = value?;
        match parse_duration(value.get_ref(), zero) {
            Ok(duration) => Some(duration),
            Err(message) => {
                self.report(Some(value.span()), Some(scope), Some(key), message);
                None
            }
        }
    }
}
