//! The rules of `[defaults]` and each `[[job]]`: the settings a job
//! inherits and overrides, its name, schedule and command.

use super::*;
use crate::config::exit_codes::{self, ExitCodes};
use crate::config::name::{self, JobName};
use crate::config::params::{Param, SecretSource};
use crate::schedule::calendar::Calendar;

/// The least `output_max` may be: room for a run's first reads.
const MIN_OUTPUT_MAX: u64 = 64 * 1024;

/// The built-in defaults of `[defaults]` (see [`keys`]).
#[derive(Clone, Debug)]
pub(super) struct Settings {
    pub(super) timezone: Tz,
    pub(super) lock_at_most_for: Duration,
    pub(super) lock_at_least_for: Duration,
    pub(super) timeout: Duration,
    pub(super) kill_grace: Duration,
    pub(super) catch_up: Duration,
    pub(super) output_limit: u64,
    /// `output_store = "files"`.
    pub(super) output_files: bool,
    pub(super) output_retention: Duration,
    pub(super) output_max: u64,
    pub(super) shell: String,
    pub(super) retries: u32,
    pub(super) retry_backoff: Duration,
    pub(super) exit_codes: ExitCodes,
    pub(super) missed_after: Option<Duration>,
    pub(super) jitter: Duration,
    /// Where `jitter` was set (in `[defaults]` or the job), for errors.
    pub(super) jitter_at: Option<Range<usize>>,
    /// A run still going this long after its start is told of (unset or
    /// zero: never).
    pub(super) warn_after: Option<Duration>,
    /// A run whose action starts this long after it was due is told of
    /// (unset or zero: never).
    pub(super) late_after: Option<Duration>,
    pub(super) overlap: Overlap,
    pub(super) dst_gap: DstGap,
    pub(super) dst_repeat: DstRepeat,
    pub(super) resources: crate::config::resources::Resources,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            timezone: Tz::UTC,
            lock_at_most_for: DEFAULT_LOCK_AT_MOST_FOR,
            lock_at_least_for: DEFAULT_LOCK_AT_LEAST_FOR,
            timeout: DEFAULT_TIMEOUT,
            kill_grace: DEFAULT_KILL_GRACE,
            catch_up: DEFAULT_CATCH_UP,
            output_limit: DEFAULT_OUTPUT_LIMIT,
            output_files: false,
            output_retention: crate::config::DEFAULT_OUTPUT_RETENTION,
            output_max: crate::config::DEFAULT_OUTPUT_MAX,
            shell: DEFAULT_SHELL.to_string(),
            retries: DEFAULT_RETRIES,
            retry_backoff: DEFAULT_RETRY_BACKOFF,
            exit_codes: ExitCodes::default(),
            missed_after: None,
            jitter: Duration::ZERO,
            jitter_at: None,
            warn_after: None,
            late_after: None,
            overlap: Overlap::Skip,
            dst_gap: DstGap::Shift,
            dst_repeat: DstRepeat::First,
            resources: crate::config::resources::Resources::default(),
        }
    }
}

impl Checker<'_> {
    /// `output_store`, `output_retention` and `output_max`.
    fn output_store(&mut self, raw: &RawSettings, settings: &mut Settings, scope: Scope<'_>) {
        if let Some(store) = &raw.output_store {
            match store.get_ref().as_str() {
                "database" => settings.output_files = false,
                "files" => settings.output_files = true,
                other => self.report(
                    Some(store.span()),
                    Some(scope),
                    Some("output_store"),
                    format!(
                        "output_store {other:?}: expected \"database\" (the last output_limit bytes in the run's history row) or \"files\" (and its whole output in a file under [daemon] output_dir)"
                    ),
                ),
            }
        }
        if let Some(retention) = self.duration(
            raw.output_retention.as_ref(),
            scope,
            "output_retention",
            Zero::Rejected,
        ) {
            settings.output_retention = retention;
        }
        if let Some(max) = &raw.output_max {
            match parse_size(max.get_ref()) {
                Ok(bytes) if bytes >= MIN_OUTPUT_MAX => settings.output_max = bytes,
                Ok(_) => self.report(
                    Some(max.span()),
                    Some(scope),
                    Some("output_max"),
                    format!(
                        "output_max {:?} is below {} KiB: a run's file is cut at it",
                        max.get_ref(),
                        MIN_OUTPUT_MAX >> 10
                    ),
                ),
                Err(message) => {
                    self.report(Some(max.span()), Some(scope), Some("output_max"), message)
                }
            }
        }
    }

    /// `overlap` and `max_concurrent`: a policy by name, and a count with
    /// `"allow"` only (and always). A job's `max_concurrent` alone changes
    /// the count of an `"allow"` it has from `[defaults]`.
    fn overlap(&mut self, raw: &RawSettings, settings: &mut Settings, scope: Scope<'_>) {
        let max = raw.max_concurrent.as_ref();
        if raw.overlap.is_none() && max.is_none() {
            return;
        }
        let count = match max {
            None => None,
            Some(max) => match u32::try_from(*max.get_ref()) {
                Ok(n @ 1..=MAX_CONCURRENT) => Some(n),
                _ => {
                    self.report(
                        Some(max.span()),
                        Some(scope),
                        Some("max_concurrent"),
                        format!(
                            "max_concurrent {} is out of range 1–{MAX_CONCURRENT}",
                            max.get_ref()
                        ),
                    );
                    return;
                }
            },
        };
        let name = match &raw.overlap {
            Some(overlap) => overlap.get_ref().as_str(),
            None if matches!(settings.overlap, Overlap::Allow(_)) => "allow",
            None => "",
        };
        let at = raw.overlap.as_ref().map(Spanned::span);
        settings.overlap = match (name, count) {
            ("skip", None) => Overlap::Skip,
            ("queue", None) => Overlap::Queue,
            ("replace", None) => Overlap::Replace,
            ("allow", Some(n)) => Overlap::Allow(n),
            ("allow", None) => {
                self.report(
                    at,
                    Some(scope),
                    Some("overlap"),
                    "overlap = \"allow\" needs max_concurrent, how many runs of the job may run at once",
                );
                return;
            }
            ("skip" | "queue" | "replace" | "", Some(_)) => {
                self.report(
                    max.map(Spanned::span),
                    Some(scope),
                    Some("max_concurrent"),
                    "max_concurrent is for overlap = \"allow\": the other policies run one at a time",
                );
                return;
            }
            (other, _) => {
                self.report(
                    at,
                    Some(scope),
                    Some("overlap"),
                    format!(
                        "overlap {other:?}: expected \"skip\", \"queue\", \"replace\" or \"allow\" (with max_concurrent)"
                    ),
                );
                return;
            }
        };
    }
}

impl Checker<'_> {
    /// `success_exit_codes`, `skip_exit_codes` and `retry_on_exit_codes`:
    /// codes from 0 to 255, none in two lists (the lists a scope does not
    /// write are its base's). Checked where one is written, so that a
    /// mistake in `[defaults]` is reported once; on a mistake the base's
    /// rules are kept.
    fn exit_codes(&mut self, raw: &RawSettings, settings: &mut Settings, scope: Scope<'_>) {
        let written = [
            (&raw.success_exit_codes, "success_exit_codes"),
            (&raw.skip_exit_codes, "skip_exit_codes"),
            (&raw.retry_on_exit_codes, "retry_on_exit_codes"),
        ];
        let mut parsed: [Option<Vec<i32>>; 3] = Default::default();
        let mut valid = true;
        for (slot, (value, key)) in parsed.iter_mut().zip(written) {
            let Some(value) = value else {
                continue;
            };
            match exit_codes::parse(key, value.get_ref()) {
                Ok(codes) => *slot = Some(codes),
                Err(message) => {
                    self.report(Some(value.span()), Some(scope), Some(key), message);
                    valid = false;
                }
            }
        }
        if !valid || parsed.iter().all(Option::is_none) {
            return;
        }
        let mut rules = settings.exit_codes.clone();
        let [success, skip, retry_on] = parsed;
        if let Some(codes) = success {
            rules.success = codes;
        }
        if let Some(codes) = skip {
            rules.skip = codes;
        }
        if let Some(codes) = retry_on {
            rules.retry_on = Some(codes);
        }
        if let Some((code, first, second)) = rules.shared() {
            // Name a list this scope writes: the base's have no code in two.
            let (key, at) = written
                .iter()
                .rev()
                .find(|&&(value, key)| value.is_some() && (key == first || key == second))
                .map(|&(value, key)| (key, value.as_ref().map(Spanned::span)))
                .unwrap_or((second, None));
            // Where the other list comes from, if not from here.
            let other = if key == second { first } else { second };
            let from = if written
                .iter()
                .any(|&(value, key)| value.is_some() && key == other)
            {
                String::new()
            } else if other == "success_exit_codes" && rules.success == [0] {
                format!(" ({other} is [0] unless set)")
            } else {
                format!(" ({other} as [defaults] sets it)")
            };
            self.report(
                at,
                Some(scope),
                Some(key),
                format!(
                    "exit code {code} is in both {first} and {second}{from}: a code has one \
                     meaning, succeeded, skipped or retried"
                ),
            );
            return;
        }
        settings.exit_codes = rules;
    }
}

/// What the file gives every job: `[defaults]`, `[notify]`, the
/// `[[limit]]`s and the `[[calendar]]`s.
pub(super) struct FileWide<'a> {
    pub(super) defaults: &'a Settings,
    pub(super) notify: &'a crate::config::notify::Notify,
    pub(super) limits: &'a [crate::config::Limit],
    pub(super) calendars: &'a [std::sync::Arc<Calendar>],
}

impl Checker<'_> {
    /// Applies `raw` over `base`; invalid values are reported and the base
    /// value kept, so that one mistake is reported once.
    pub(super) fn settings(
        &mut self,
        raw: RawSettings,
        base: &Settings,
        scope: Scope<'_>,
    ) -> Settings {
        let mut settings = base.clone();
        if let Some(zone) = &raw.timezone {
            match zone.get_ref().parse::<Tz>() {
                Ok(tz) => settings.timezone = tz,
                Err(_) => self.report(
                    Some(zone.span()),
                    Some(scope),
                    Some("timezone"),
                    format!(
                        "unknown time zone {:?}: expected an IANA name such as \"UTC\" or \"Europe/Berlin\"",
                        zone.get_ref()
                    ),
                ),
            }
        }
        let durations = [
            (
                &raw.lock_at_most_for,
                "lock_at_most_for",
                Zero::Rejected,
                &mut settings.lock_at_most_for,
            ),
            (
                &raw.lock_at_least_for,
                "lock_at_least_for",
                Zero::Allowed,
                &mut settings.lock_at_least_for,
            ),
            (
                &raw.timeout,
                "timeout",
                Zero::Rejected,
                &mut settings.timeout,
            ),
            (
                &raw.kill_grace,
                "kill_grace",
                Zero::Rejected,
                &mut settings.kill_grace,
            ),
            (
                &raw.catch_up,
                "catch_up",
                Zero::Allowed,
                &mut settings.catch_up,
            ),
            (
                &raw.retry_backoff,
                "retry_backoff",
                Zero::Rejected,
                &mut settings.retry_backoff,
            ),
        ];
        for (value, key, zero, slot) in durations {
            if let Some(parsed) = self.duration(value.as_ref(), scope, key, zero) {
                *slot = parsed;
            }
        }
        if let Some(after) = self.duration(
            raw.missed_after.as_ref(),
            scope,
            "missed_after",
            Zero::Allowed,
        ) {
            settings.missed_after = Some(after);
        }
        if let Some(jitter) = self.duration(raw.jitter.as_ref(), scope, "jitter", Zero::Allowed) {
            settings.jitter = jitter;
            settings.jitter_at = raw.jitter.as_ref().map(Spanned::span);
        }
        for (value, key, slot) in [
            (&raw.warn_after, "warn_after", &mut settings.warn_after),
            (&raw.late_after, "late_after", &mut settings.late_after),
        ] {
            if let Some(after) = self.duration(value.as_ref(), scope, key, Zero::Allowed) {
                *slot = Some(after).filter(|after| !after.is_zero());
            }
        }
        self.warn_before_timeout(&raw, &settings, scope);
        self.overlap(&raw, &mut settings, scope);
        self.exit_codes(&raw, &mut settings, scope);
        if let Some(gap) = &raw.dst_gap {
            match DstGap::parse(gap.get_ref()) {
                Some(gap) => settings.dst_gap = gap,
                None => self.report(
                    Some(gap.span()),
                    Some(scope),
                    Some("dst_gap"),
                    format!(
                        "dst_gap {:?}: expected \"shift\" (a time in a spring-forward gap fires at its end) or \"skip\" (it does not fire that day)",
                        gap.get_ref()
                    ),
                ),
            }
        }
        if let Some(repeat) = &raw.dst_repeat {
            match DstRepeat::parse(repeat.get_ref()) {
                Some(repeat) => settings.dst_repeat = repeat,
                None => self.report(
                    Some(repeat.span()),
                    Some(scope),
                    Some("dst_repeat"),
                    format!(
                        "dst_repeat {:?}: expected \"first\", \"last\" or \"both\" (which occurrence of a time a fall-back shows twice fires)",
                        repeat.get_ref()
                    ),
                ),
            }
        }
        if let Some(limit) = &raw.output_limit {
            match parse_size(limit.get_ref()) {
                Ok(bytes) if bytes <= crate::config::MAX_OUTPUT_LIMIT => {
                    settings.output_limit = bytes;
                }
                Ok(_) => self.report(
                    Some(limit.span()),
                    Some(scope),
                    Some("output_limit"),
                    format!(
                        "at most {} MiB: a run's output is kept in memory while it runs and in one history row",
                        crate::config::MAX_OUTPUT_LIMIT >> 20
                    ),
                ),
                Err(message) => self.report(
                    Some(limit.span()),
                    Some(scope),
                    Some("output_limit"),
                    message,
                ),
            }
        }
        self.output_store(&raw, &mut settings, scope);
        self.resources(&raw, &mut settings.resources, scope);
        if let Some(retries) = &raw.retries {
            match u32::try_from(*retries.get_ref()) {
                Ok(n) if n <= MAX_RETRIES => settings.retries = n,
                _ => self.report(
                    Some(retries.span()),
                    Some(scope),
                    Some("retries"),
                    format!(
                        "retries must be between 0 and {MAX_RETRIES}, not {}",
                        retries.get_ref()
                    ),
                ),
            }
        }
        if let Some(shell) = &raw.shell {
            if shell.get_ref().trim().is_empty() {
                self.report(
                    Some(shell.span()),
                    Some(scope),
                    Some("shell"),
                    "shell must not be empty",
                );
            } else {
                settings.shell = shell.get_ref().clone();
            }
        }
        // Checked where either side is written, so that a mistake in
        // [defaults] is reported once and not again for every job.
        if (raw.lock_at_least_for.is_some() || raw.lock_at_most_for.is_some())
            && settings.lock_at_least_for > settings.lock_at_most_for
        {
            let (span, key) = match &raw.lock_at_least_for {
                Some(v) => (v.span(), "lock_at_least_for"),
                None => (
                    raw.lock_at_most_for
                        .as_ref()
                        .map(Spanned::span)
                        .unwrap_or_default(),
                    "lock_at_most_for",
                ),
            };
            self.report(
                Some(span),
                Some(scope),
                Some(key),
                format!(
                    "lock_at_least_for ({}) is longer than lock_at_most_for ({})",
                    humantime::format_duration(settings.lock_at_least_for),
                    humantime::format_duration(settings.lock_at_most_for)
                ),
            );
        }
        settings
    }

    /// `warn_after` must be shorter than `timeout`, or it never fires: the
    /// run is stopped first. Checked where either is written, so that a
    /// mistake in `[defaults]` is reported once.
    fn warn_before_timeout(&mut self, raw: &RawSettings, settings: &Settings, scope: Scope<'_>) {
        let Some(warn_after) = settings.warn_after else {
            return;
        };
        if warn_after < settings.timeout {
            return;
        }
        let (span, key) = match (&raw.warn_after, &raw.timeout) {
            (Some(value), _) => (value.span(), "warn_after"),
            (None, Some(value)) => (value.span(), "timeout"),
            (None, None) => return,
        };
        self.report(
            Some(span),
            Some(scope),
            Some(key),
            format!(
                "warn_after ({}) must be shorter than timeout ({}): it would never fire (the run is \
                 stopped first)",
                humantime::format_duration(warn_after),
                humantime::format_duration(settings.timeout)
            ),
        );
    }

    /// `at`: the one instant the job runs at, in its zone. An instant
    /// already past by more than the job's `catch_up` is refused unless the
    /// fleet had the job before it (its lease row is older) or ran or
    /// recorded it: that only the database tells, so it is kept in
    /// [`Config::past_instants`] for `check` and `run` to decide.
    fn one_instant(
        &mut self,
        at: &Spanned<String>,
        name: Option<&str>,
        settings: &Settings,
        scope: Scope<'_>,
    ) -> Option<Schedule> {
        let schedule = match Schedule::once(at.get_ref(), settings.timezone) {
            Ok(schedule) => schedule,
            Err(message) => {
                self.report(Some(at.span()), Some(scope), Some("at"), message);
                return None;
            }
        };
        let instant = schedule.once_at()?;
        let now = chrono::Utc::now();
        let catch_up =
            chrono::TimeDelta::from_std(settings.catch_up).unwrap_or(chrono::TimeDelta::MAX);
        if let Some(name) = name
            && instant
                .checked_add_signed(catch_up)
                .is_some_and(|covered| covered < now)
        {
            let message = format!(
                "at {:?} is past ({} ago) and catch_up ({}) does not cover it: the job would \
                 never run; write an instant to come, or a catch_up that reaches it",
                at.get_ref().trim(),
                humantime::format_duration(Duration::from_secs(
                    u64::try_from((now - instant).num_seconds()).unwrap_or_default()
                )),
                humantime::format_duration(settings.catch_up),
            );
            let problem = self.diagnostic(Some(at.span()), Some(scope), Some("at"), message);
            self.past.push(PastInstant {
                job: name.to_string(),
                instant,
                problem,
            });
        }
        if settings.jitter.is_zero() {
            return Some(schedule);
        }
        Some(schedule.with_jitter(name.unwrap_or_default(), settings.jitter))
    }

    /// `schedule` with the job's jitter, which must be shorter than its
    /// shortest interval (so that runs keep their instants' order and never
    /// start at or after the next instant).
    fn jittered(
        &mut self,
        schedule: Schedule,
        name: Option<&str>,
        settings: &Settings,
        expression: Range<usize>,
        scope: Scope<'_>,
    ) -> Option<Schedule> {
        if settings.jitter.is_zero() {
            return Some(schedule);
        }
        let shortest = schedule.shortest_interval(chrono::Utc::now());
        if let Some(shortest) = shortest.filter(|shortest| settings.jitter >= *shortest) {
            self.report(
                Some(settings.jitter_at.clone().unwrap_or(expression)),
                Some(scope),
                Some("jitter"),
                format!(
                    "jitter ({}) must be shorter than the job's shortest interval ({}, schedule {:?}): \
                     a run would start at or after its next instant",
                    humantime::format_duration(settings.jitter),
                    humantime::format_duration(shortest),
                    schedule.expression()
                ),
            );
            return None;
        }
        Some(schedule.with_jitter(name.unwrap_or_default(), settings.jitter))
    }

    /// `locks`: names as job names are written, short enough for their
    /// lease rows; sorted (the order every run takes them in) and without
    /// repeats.
    fn locks(&mut self, raw: Option<Spanned<Vec<String>>>, scope: Scope<'_>) -> Vec<String> {
        let Some(raw) = raw else {
            return Vec::new();
        };
        let span = raw.span();
        let mut locks = Vec::new();
        for name in raw.into_inner() {
            match name::check_lock(&name) {
                Ok(()) => locks.push(name),
                Err(e) => self.report(
                    Some(span.clone()),
                    Some(scope),
                    Some("locks"),
                    format!("invalid lock name {name:?}: {e}"),
                ),
            }
        }
        locks.sort();
        locks.dedup();
        locks
    }

    /// `user` and `group`: names or ids, not empty; a group needs a user.
    /// Whether they exist, and whether replicron may switch to them, is the
    /// host's to say ([`crate::config::host`]).
    fn run_as(
        &mut self,
        user: Option<Spanned<String>>,
        group: Option<Spanned<String>>,
        scope: Scope<'_>,
    ) -> Option<RunAs> {
        for (value, key) in [(&user, "user"), (&group, "group")] {
            if let Some(value) = value
                && (value.get_ref().trim().is_empty() || value.get_ref().contains(['\0', ':', ',']))
            {
                self.report(
                    Some(value.span()),
                    Some(scope),
                    Some(key),
                    format!(
                        "invalid {key} {:?}: expected a name or a numeric id",
                        value.get_ref()
                    ),
                );
                return None;
            }
        }
        match (user, group) {
            (Some(user), group) => Some(RunAs {
                line: Some(self.line(&user.span())),
                user: user.into_inner(),
                group: group.map(Spanned::into_inner),
            }),
            (None, Some(group)) => {
                self.report(
                    Some(group.span()),
                    Some(scope),
                    Some("group"),
                    "group needs user: the run switches to a user, then to this group",
                );
                None
            }
            (None, None) => None,
        }
    }

    pub(super) fn job(
        &mut self,
        index: usize,
        span: Range<usize>,
        mut raw: RawJob,
        file: &FileWide<'_>,
    ) -> Option<Job> {
        let (defaults, notify) = (file.defaults, file.notify);
        let bounds = calendars::RawBounds {
            not_before: raw.not_before.take(),
            not_after: raw.not_after.take(),
            skip_on: raw.skip_on.take(),
            only_on: raw.only_on.take(),
        };
        let position = format!("#{}", index + 1);
        let name = match &raw.name {
            None => {
                self.report(
                    Some(span.clone()),
                    Some(Scope::Job(&position)),
                    Some("name"),
                    "a job needs a name",
                );
                None
            }
            Some(name) => match JobName::parse(name.get_ref()) {
                Err(e) => {
                    self.report(
                        Some(name.span()),
                        Some(Scope::Job(&position)),
                        Some("name"),
                        format!("invalid job name {:?}: {e}", name.get_ref()),
                    );
                    None
                }
                Ok(valid) => match self.declare("job", name.get_ref(), &name.span()) {
                    Some(earlier) => {
                        let label = format!("{:?}", name.get_ref());
                        self.report(
                            Some(name.span()),
                            Some(Scope::Job(&label)),
                            Some("name"),
                            format!(
                                "duplicate job name: another [[job]] has the same name, at {earlier}"
                            ),
                        );
                        None
                    }
                    None => Some(valid),
                },
            },
        };
        let label = match &raw.name {
            Some(n) if name::has_job_form(n.get_ref()) => format!("{:?}", n.get_ref()),
            _ => position,
        };
        let scope = Scope::Job(&label);

        let raw_overlap_at = raw
            .overlap
            .as_ref()
            .map(Spanned::span)
            .or_else(|| raw.max_concurrent.as_ref().map(Spanned::span));
        let settings = self.settings(raw.take_settings(), defaults, scope);
        let run_on = match raw
            .run_on
            .as_ref()
            .map(|v| (v.get_ref().as_str(), v.span()))
        {
            None | Some(("one", _)) => RunOn::One,
            Some(("every", _)) => RunOn::Every,
            Some((other, span)) => {
                self.report(
                    Some(span),
                    Some(scope),
                    Some("run_on"),
                    format!("run_on {other:?}: expected \"one\" (once across the fleet) or \"every\" (on each replica)"),
                );
                RunOn::One
            }
        };
        let after_at = raw.after.as_ref().map(Spanned::span);
        let after = raw
            .after
            .take()
            .map(|after| self.after(after, name.as_deref(), scope));
        if let (Some(at), RunOn::Every) = (&after_at, run_on) {
            self.report(
                Some(at.clone()),
                Some(scope),
                Some("after"),
                "after is for jobs run once across the fleet: a run_on = \"every\" job's runs are each \
                 replica's, and its parents' instants are the fleet's",
            );
        }
        let at = raw.at.take();
        if let Some(at) = &at {
            let other = match (&raw.schedule, &after) {
                (Some(_), _) => Some("schedule"),
                (None, Some(_)) => Some("after"),
                (None, None) => None,
            };
            if let Some(other) = other {
                self.report(
                    Some(at.span()),
                    Some(scope),
                    Some("at"),
                    format!(
                        "at and {other} are exclusive: a job runs once at one instant (at), on a \
                         schedule, or after other jobs; write only one of them"
                    ),
                );
            } else if run_on == RunOn::Every {
                self.report(
                    Some(at.span()),
                    Some(scope),
                    Some("at"),
                    "at is for jobs run once across the fleet: a run_on = \"every\" job's runs are \
                     each replica's",
                );
            }
        }
        let schedule = match (&raw.schedule, &after) {
            _ if at.is_some() => at
                .as_ref()
                .filter(|_| raw.schedule.is_none() && after.is_none() && run_on == RunOn::One)
                .and_then(|at| self.one_instant(at, name.as_deref(), &settings, scope)),
            (Some(expression), Some(_)) => {
                self.report(
                    Some(expression.span()),
                    Some(scope),
                    Some("schedule"),
                    "a job with after runs when its parents' runs end, at their instants: it has no \
                     schedule of its own",
                );
                None
            }
            (None, Some(Some((parents, _, _)))) => {
                Some(Schedule::after(parents, settings.timezone))
            }
            (None, Some(None)) => None,
            // A schedule that could not be read was reported as such.
            (None, None) if self.reported(scope, "schedule") => None,
            (None, None) => {
                self.report(
                    Some(span.clone()),
                    Some(scope),
                    Some("schedule"),
                    "a job needs a schedule (or at, the one instant it runs at, or after, the jobs \
                     it runs after)",
                );
                None
            }
            (Some(expression), None) => match expression.get_ref().parse(settings.timezone) {
                Ok(schedule) if schedule.is_manual() && run_on == RunOn::Every => {
                    self.report(
                        Some(expression.span()),
                        Some(scope),
                        Some("schedule"),
                        "@manual is for jobs run once across the fleet: a trigger runs the job once, \
                         on the replica that takes it",
                    );
                    None
                }
                Ok(schedule) if schedule.is_at_start() && run_on == RunOn::One => {
                    self.report(
                        Some(expression.span()),
                        Some(scope),
                        Some("schedule"),
                        "@reboot runs once per replica start, which only a run_on = \"every\" job has: \
                         a job run once across the fleet has no start of its own",
                    );
                    None
                }
                Ok(schedule) => self.jittered(
                    schedule,
                    name.as_deref(),
                    &settings,
                    expression.span(),
                    scope,
                ),
                Err(mut message) => {
                    if message.ends_with("never fires") {
                        message
                            .push_str(": a job that runs only when asked is written \"@manual\"");
                    }
                    self.report(
                        Some(expression.span()),
                        Some(scope),
                        Some("schedule"),
                        message,
                    );
                    None
                }
            },
        };
        let only_on_at = bounds.only_on.as_ref().map(Spanned::span);
        let rules = self.rules(bounds, &settings, schedule.as_ref(), file.calendars, scope);
        let schedule = match (schedule, rules) {
            (Some(schedule), Some(rules)) => Some(schedule.with_rules(rules)),
            _ => None,
        };
        if let Some(schedule) = &schedule
            && raw.enabled.as_ref().is_none_or(|e| *e.get_ref())
        {
            self.only_on_ahead(schedule, only_on_at, scope);
        }
        let command = match (raw.command, raw.args) {
            (Some(command), None) if command.get_ref().trim().is_empty() => {
                self.report(
                    Some(command.span()),
                    Some(scope),
                    Some("command"),
                    "command must not be empty",
                );
                None
            }
            (Some(command), None) => Some(Command::Shell {
                shell: settings.shell.clone(),
                command: command.into_inner(),
            }),
            (None, Some(args)) if args.get_ref().first().is_none_or(|a| a.is_empty()) => {
                self.report(
                    Some(args.span()),
                    Some(scope),
                    Some("args"),
                    "args must start with the program to run",
                );
                None
            }
            (None, Some(args)) => Some(Command::Exec {
                args: args.into_inner(),
            }),
            (Some(command), Some(_)) => {
                self.report(
                    Some(command.span()),
                    Some(scope),
                    Some("command"),
                    "command and args are exclusive: use command for a shell line, args to run a program directly",
                );
                None
            }
            (None, None) => {
                self.report(
                    Some(span.clone()),
                    Some(scope),
                    Some("command"),
                    "a job needs either command (run by the shell) or args (run directly)",
                );
                None
            }
        };
        if let Some(env) = &raw.env {
            for key in env.get_ref().keys() {
                if key.is_empty() || key.contains('=') || key.contains('\0') {
                    self.report(
                        Some(env.span()),
                        Some(scope),
                        Some("env"),
                        format!("invalid environment variable name {key:?}"),
                    );
                }
            }
        }
        let notify = match raw.notify.take() {
            Some(own) => self.notify(own.into_inner(), notify, scope, "notify.", &settings.shell),
            None => notify.clone(),
        };
        let working_dir = raw.working_dir.map(|dir| PathBuf::from(dir.into_inner()));
        let run_as = self.run_as(raw.user, raw.group, scope);
        let locks_at = raw.locks.as_ref().map(Spanned::span);
        let mut locks = self.locks(raw.locks, scope);
        let mut params = self.params(raw.params, raw.env.as_ref(), schedule.as_ref(), scope);
        let secret_params = self.secret_params(raw.secret_params, params.as_deref_mut(), scope);
        // After secret_params: a param whose default is a secret's source
        // is read at each run's start, not given its source's text.
        let schedule = match (schedule, &params) {
            (Some(schedule), Some(declared)) if schedule.gives_params() => self.schedule_params(
                schedule,
                declared,
                &secret_params,
                name.as_deref().unwrap_or_default(),
                raw.schedule.as_ref().map(Spanned::span),
                scope,
            ),
            (schedule, _) => schedule,
        };
        let secret_env = self.secret_env(
            raw.secret_env.take(),
            raw.env.as_ref(),
            params.as_deref(),
            scope,
        );
        let priority = self.priority(raw.priority.as_ref(), scope);
        let on_abandon =
            self.on_abandon(raw.on_abandon.as_ref(), run_on, after_at.is_some(), scope);
        let limits_at = raw.limits.as_ref().map(Spanned::span);
        let mut limits = self.job_limits(raw.limits, file.limits, scope);
        if run_on == RunOn::Every {
            // A per-host run holds no fleet lease to keep a slot alive with.
            for (taken, at, key) in [
                (!locks.is_empty(), locks_at, "locks"),
                (!limits.is_empty(), limits_at, "limits"),
            ] {
                if taken {
                    self.report(
                        at,
                        Some(scope),
                        Some(key),
                        format!(
                            "{key} are for jobs run once across the fleet: a run_on = \"every\" job's \
                             runs hold no fleet lease to keep a slot alive with"
                        ),
                    );
                }
            }
            locks.clear();
            limits.clear();
        }
        if run_on == RunOn::Every && settings.overlap != Overlap::Skip {
            self.report(
                raw_overlap_at,
                Some(scope),
                Some("overlap"),
                "overlap is for jobs run once across the fleet: a run_on = \"every\" job never runs \
                 beside itself on a host, and skips an instant that comes while it runs",
            );
        }
        let name = name?;
        if let Some(Some(after)) = after {
            self.declared_after
                .push(self.declared(name.as_ref(), &label, after));
        }
        Some(Job {
            name,
            schedule: schedule?,
            command: command?,
            env: raw.env.map(Spanned::into_inner).unwrap_or_default(),
            secret_env,
            working_dir,
            enabled: raw.enabled.is_none_or(Spanned::into_inner),
            lock_at_most_for: settings.lock_at_most_for,
            lock_at_least_for: settings.lock_at_least_for,
            timeout: settings.timeout,
            kill_grace: settings.kill_grace,
            catch_up: settings.catch_up,
            output_limit: settings.output_limit,
            // The folder is `[daemon] output_dir`'s, filled in once read.
            output_files: settings.output_files.then(|| crate::config::OutputFiles {
                dir: std::path::PathBuf::new(),
                retention: settings.output_retention,
                max: settings.output_max,
            }),
            retries: settings.retries,
            retry_backoff: settings.retry_backoff,
            exit_codes: settings.exit_codes,
            missed_after: settings.missed_after,
            warn_after: settings.warn_after,
            late_after: settings.late_after,
            notify: notify.is_set().then(|| std::sync::Arc::new(notify)),
            hidden_env: Vec::new(),
            run_as,
            run_on,
            locks,
            params: params?,
            secret_params,
            limits,
            overlap: settings.overlap,
            priority,
            on_abandon,
            after: None,
            resources: settings.resources,
        })
    }

    /// `on_abandon`: `"record"` or `"rerun"`, the latter for a job run once
    /// across the fleet on a schedule of its own only: a per-host run holds
    /// no lease, so nobody marks it abandoned, and a dependent job's
    /// (`after`) instants are claimed in their parents' order, which a
    /// rerun, claimed at the database's now, would pass over.
    fn on_abandon(
        &mut self,
        raw: Option<&Spanned<String>>,
        run_on: RunOn,
        dependent: bool,
        scope: Scope<'_>,
    ) -> OnAbandon {
        let Some(raw) = raw else {
            return OnAbandon::Record;
        };
        match OnAbandon::parse(raw.get_ref()) {
            Some(OnAbandon::Rerun) if run_on == RunOn::Every => {
                self.report(
                    Some(raw.span()),
                    Some(scope),
                    Some("on_abandon"),
                    "on_abandon = \"rerun\" is for jobs run once across the fleet: a run_on = \"every\" \
                     job's runs hold no lease, and are never marked abandoned",
                );
                OnAbandon::Record
            }
            Some(OnAbandon::Rerun) if dependent => {
                self.report(
                    Some(raw.span()),
                    Some(scope),
                    Some("on_abandon"),
                    "on_abandon = \"rerun\" is for jobs with a schedule of their own: a job with after \
                     runs its parents' instants in their order, which a rerun would pass over",
                );
                OnAbandon::Record
            }
            Some(policy) => policy,
            None => {
                self.report(
                    Some(raw.span()),
                    Some(scope),
                    Some("on_abandon"),
                    format!(
                        "on_abandon {:?}: expected \"record\" (the instant stays abandoned, and is \
                         notified) or \"rerun\" (it runs again, up to max(retries, 1) times)",
                        raw.get_ref()
                    ),
                );
                OnAbandon::Record
            }
        }
    }

    /// `memory_max`, `cpu_max`, `tasks_max` and `nofile_max` over
    /// `resources`; a bad value is reported and the base kept.
    fn resources(
        &mut self,
        raw: &RawSettings,
        resources: &mut crate::config::resources::Resources,
        scope: Scope<'_>,
    ) {
        use crate::config::resources as r;
        if let Some(value) = &raw.memory_max {
            match r::parse_memory(value.get_ref()) {
                Ok(bytes) => resources.memory_max = Some(bytes),
                Err(e) => self.report(Some(value.span()), Some(scope), Some("memory_max"), e),
            }
        }
        if let Some(value) = &raw.cpu_max {
            match r::parse_cpu(value.get_ref()) {
                Ok(percent) => resources.cpu_max = Some(percent),
                Err(e) => self.report(Some(value.span()), Some(scope), Some("cpu_max"), e),
            }
        }
        for (value, key, range, slot) in [
            (
                &raw.tasks_max,
                "tasks_max",
                r::TASKS_MAX_RANGE,
                &mut resources.tasks_max,
            ),
            (
                &raw.nofile_max,
                "nofile_max",
                r::NOFILE_MAX_RANGE,
                &mut resources.nofile_max,
            ),
        ] {
            if let Some(value) = value {
                match r::parse_count(key, *value.get_ref(), &range) {
                    Ok(n) => *slot = Some(n),
                    Err(e) => self.report(Some(value.span()), Some(scope), Some(key), e),
                }
            }
        }
    }

    /// `priority`: an integer in [`crate::config::PRIORITY_RANGE`].
    fn priority(&mut self, raw: Option<&Spanned<i64>>, scope: Scope<'_>) -> i32 {
        let Some(raw) = raw else {
            return 0;
        };
        let range = crate::config::PRIORITY_RANGE;
        match i32::try_from(*raw.get_ref()) {
            Ok(priority) if range.contains(&priority) => priority,
            _ => {
                self.report(
                    Some(raw.span()),
                    Some(scope),
                    Some("priority"),
                    format!(
                        "priority {} is out of range {}–{} (higher goes first)",
                        raw.get_ref(),
                        range.start(),
                        range.end()
                    ),
                );
                0
            }
        }
    }

    /// `secret_params`: names of `params` (the audit log redacts their
    /// values). A secret's default may be `file:/PATH` or
    /// `credential:NAME`, read at each run's start: it must be readable
    /// now, and what it holds is never shown.
    fn secret_params(
        &mut self,
        raw: Option<Spanned<Vec<String>>>,
        params: Option<&mut [Param]>,
        scope: Scope<'_>,
    ) -> Vec<String> {
        let Some(raw) = raw else {
            return Vec::new();
        };
        let span = raw.span();
        let names = raw.into_inner();
        if let Some(params) = params {
            for name in &names {
                let Some(param) = params.iter_mut().find(|p| &p.name == name) else {
                    self.report(
                        Some(span.clone()),
                        Some(scope),
                        Some("secret_params"),
                        format!("{name:?} is not one of the job's params"),
                    );
                    continue;
                };
                let source = param
                    .default
                    .as_deref()
                    .and_then(crate::config::params::SecretSource::of)
                    .map(|source| {
                        source
                            .map_err(|e| format!("parameter {name}'s default {e}"))
                            .and_then(|s| s.read(name).map(|_| s))
                    });
                match source {
                    Some(Ok(source)) => param.source = Some(source),
                    Some(Err(e)) => {
                        self.report(Some(span.clone()), Some(scope), Some("secret_params"), e)
                    }
                    None => {}
                }
            }
        }
        names
    }

    /// `secret_env`: variables whose values are read from a file at each
    /// run's start, `file:/PATH` or `credential:NAME`. Each file must be
    /// readable now (what it holds is never shown, nor is a value that
    /// names no file: it may be the secret itself); one its group or others
    /// may read is warned of.
    fn secret_env(
        &mut self,
        raw: Option<Spanned<BTreeMap<String, String>>>,
        env: Option<&Spanned<BTreeMap<String, String>>>,
        params: Option<&[Param]>,
        scope: Scope<'_>,
    ) -> BTreeMap<String, SecretSource> {
        let mut sources = BTreeMap::new();
        let Some(raw) = raw else {
            return sources;
        };
        let span = raw.span();
        for (name, spec) in raw.into_inner() {
            let fail = |this: &mut Self, message: String| {
                this.report(Some(span.clone()), Some(scope), Some("secret_env"), message);
            };
            if !crate::secrets::is_variable_name(&name) {
                fail(
                    self,
                    format!(
                        "invalid environment variable name {name:?}: expected letters, digits and _ not starting with a digit"
                    ),
                );
                continue;
            }
            if name.to_ascii_uppercase().starts_with("REPLICRON_") {
                fail(
                    self,
                    format!("{name}: REPLICRON_* variables are replicron's own"),
                );
                continue;
            }
            if env.is_some_and(|env| env.get_ref().contains_key(&name)) {
                fail(
                    self,
                    format!("{name} is also set in env: one of the two would hide the other"),
                );
                continue;
            }
            if params.is_some_and(|params| params.iter().any(|p| p.name == name)) {
                fail(
                    self,
                    format!(
                        "{name} is also one of the job's params: a run's value would hide the secret, or the other way round"
                    ),
                );
                continue;
            }
            let source = match SecretSource::of(&spec) {
                Some(Ok(source)) => source,
                Some(Err(e)) => {
                    fail(self, format!("{name}: {e}"));
                    continue;
                }
                // Not echoed: a value that names no file may be the secret.
                None => {
                    fail(
                        self,
                        format!(
                            "{name}: expected file:/PATH or credential:NAME (where the secret is read from; \
                             the secret itself is not written in the job file, and its value is not shown here)"
                        ),
                    );
                    continue;
                }
            };
            if let Err(e) = source.read_env(&name) {
                fail(self, e);
                continue;
            }
            if let Some(exposed) = source.exposed() {
                self.warn(
                    Some(span.clone()),
                    Some(scope),
                    Some("secret_env"),
                    format!("{name}: {exposed}"),
                );
            }
            sources.insert(name, source);
        }
        sources
    }

    /// `params`: well-formed names, each once, none that the job's `env`
    /// also sets; a job on a schedule gives each a default (nobody gives
    /// its scheduled runs one).
    fn params(
        &mut self,
        raw: Option<Spanned<Vec<String>>>,
        env: Option<&Spanned<BTreeMap<String, String>>>,
        schedule: Option<&Schedule>,
        scope: Scope<'_>,
    ) -> Option<Vec<Param>> {
        let Some(raw) = raw else {
            return Some(Vec::new());
        };
        let span = raw.span();
        let mut params: Vec<Param> = Vec::new();
        let mut valid = true;
        let mut fail = |this: &mut Self, message: String| {
            valid = false;
            this.report(Some(span.clone()), Some(scope), Some("params"), message);
        };
        for spec in raw.into_inner() {
            match Param::parse(&spec) {
                Err(message) => fail(self, message),
                Ok(param) if params.iter().any(|p| p.name == param.name) => {
                    fail(self, format!("parameter {} is declared twice", param.name));
                }
                Ok(param) if env.is_some_and(|env| env.get_ref().contains_key(&param.name)) => {
                    fail(
                        self,
                        format!(
                            "parameter {} is also set in env: a run's value would hide the job's, or the other way round",
                            param.name
                        ),
                    );
                }
                Ok(param) => params.push(param),
            }
        }
        // A run of an expression that gives params of its own is given
        // them (checked by `schedule_params`).
        let scheduled = schedule
            .is_some_and(|s| !s.is_manual() && s.entry_params().iter().any(Option::is_none));
        let required: Vec<&str> = params
            .iter()
            .filter(|p| p.default.is_none())
            .map(|p| p.name.as_str())
            .collect();
        if scheduled && !required.is_empty() {
            fail(
                self,
                format!(
                    "{} {} no default, and nobody gives a scheduled run one: write {}=VALUE, or make the job \"@manual\"",
                    required.join(", "),
                    if required.len() == 1 { "has" } else { "have" },
                    required[0]
                ),
            );
        }
        valid.then_some(params)
    }

    /// `schedule` with each expression's params (`schedule = [{ cron,
    /// params }]`) resolved against the job's `declared` ones, its
    /// defaults filled in; each param refused names its expression. Warns
    /// when two expressions that give different params share an instant
    /// within a year: it runs once, with the first one's.
    fn schedule_params(
        &mut self,
        schedule: Schedule,
        declared: &[Param],
        secret: &[String],
        job: &str,
        span: Option<std::ops::Range<usize>>,
        scope: Scope<'_>,
    ) -> Option<Schedule> {
        let mut resolved = Vec::new();
        let mut valid = true;
        for (n, given) in schedule.entry_params().into_iter().enumerate() {
            let Some(given) = given else {
                resolved.push(None);
                continue;
            };
            // The schedule is shown (check, status, the dashboard, the
            // API): a secret's value has no place in it.
            if let Some(name) = given.keys().find(|name| secret.contains(name)) {
                valid = false;
                self.report(
                    span.clone(),
                    Some(scope),
                    Some("schedule"),
                    format!(
                        "schedule entry {}: {name} is one of secret_params, whose value the schedule \
                         would show: give it a default read from a file (file:PATH or credential:NAME) \
                         in params instead",
                        n + 1
                    ),
                );
                continue;
            }
            let pairs: Vec<(String, String)> =
                given.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            match crate::config::params::resolve(job, declared, &pairs) {
                Ok(params) => resolved.push(Some(params)),
                Err(e) => {
                    valid = false;
                    let why = match e {
                        crate::config::params::ParamError::Missing { name, .. } => format!(
                            "parameter {name} has no default and this entry gives it no value"
                        ),
                        other => other.to_string(),
                    };
                    self.report(
                        span.clone(),
                        Some(scope),
                        Some("schedule"),
                        format!("schedule entry {}: {why}", n + 1),
                    );
                }
            }
        }
        if !valid {
            return None;
        }
        let schedule = schedule.with_entry_params(resolved);
        if let Some((first, second, at)) =
            schedule.shared_instant(chrono::Utc::now(), chrono::TimeDelta::days(366))
        {
            self.warn(
                span,
                Some(scope),
                Some("schedule"),
                format!(
                    "schedule entries {first} and {second} give different params and both fall on {}: \
                     that instant runs once, with entry {first}'s params",
                    crate::schedule::fmt_instant(at)
                ),
            );
        }
        Some(schedule)
    }
}
