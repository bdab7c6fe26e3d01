//! The rules of each `[[calendar]]`, and of a job's window, calendars
//! and daylight-saving policy: what bounds a schedule's instants beside
//! its expressions.

use std::sync::Arc;

use chrono::{DateTime, NaiveDate, Utc};

use super::*;
use crate::schedule::calendar::Calendar;

/// What a job writes that bounds its instants.
pub(super) struct RawBounds {
    pub(super) not_before: Option<Spanned<String>>,
    pub(super) not_after: Option<Spanned<String>>,
    pub(super) skip_on: Option<Spanned<Vec<String>>>,
    pub(super) only_on: Option<Spanned<Vec<String>>>,
}

impl RawBounds {
    /// Where the first of them is written, if any is.
    fn first_span(&self) -> Option<(Range<usize>, &'static str)> {
        [
            self.not_before.as_ref().map(|v| (v.span(), "not_before")),
            self.not_after.as_ref().map(|v| (v.span(), "not_after")),
            self.skip_on.as_ref().map(|v| (v.span(), "skip_on")),
            self.only_on.as_ref().map(|v| (v.span(), "only_on")),
        ]
        .into_iter()
        .flatten()
        .next()
    }
}

impl Checker<'_> {
    /// One `[[calendar]]`: a name of a lock's form, not declared before, and
    /// either `dates` or an `ics` file (relative to the job file's folder).
    pub(super) fn calendar(
        &mut self,
        span: Range<usize>,
        raw: RawCalendar,
        folder: &Path,
    ) -> Option<Calendar> {
        let scope = Scope::Table("calendar");
        let name = self.table_name(raw.name, span.clone(), "calendar")?;
        match (raw.dates, raw.ics) {
            (Some(dates), None) => {
                let mut parsed = Vec::new();
                for date in dates.get_ref() {
                    match NaiveDate::parse_from_str(date, "%Y-%m-%d") {
                        Ok(d) => parsed.push(d),
                        Err(_) => self.report(
                            Some(dates.span()),
                            Some(scope),
                            Some("dates"),
                            format!("calendar {name:?}: {date:?} is no date: write YYYY-MM-DD"),
                        ),
                    }
                }
                (parsed.len() == dates.get_ref().len()).then(|| Calendar::of_dates(&name, parsed))
            }
            (None, Some(ics)) => {
                let file = folder.join(ics.get_ref());
                // A file that cannot be read holds the jobs that name it
                // (the others run): a warning, not an error.
                let why = match std::fs::read_to_string(&file) {
                    Err(e) => format!("cannot read {}: {e}", file.display()),
                    Ok(text) => match Calendar::from_ics(&name, &text) {
                        Ok(calendar) => return Some(calendar),
                        Err(e) => format!("{}:{}: {}", file.display(), e.line, e.message),
                    },
                };
                let jobs = "the jobs that name it are held (never run) until it is fixed";
                self.warn(
                    Some(ics.span()),
                    Some(scope),
                    Some("ics"),
                    format!("calendar {name:?}: {why}; {jobs}"),
                );
                Some(Calendar::unreadable(&name, why))
            }
            (Some(dates), Some(_)) => {
                self.report(
                    Some(dates.span()),
                    Some(scope),
                    Some("dates"),
                    format!("calendar {name:?}: dates and ics are exclusive: one calendar is one list or one file"),
                );
                None
            }
            (None, None) => {
                self.report(
                    Some(span),
                    Some(scope),
                    Some("dates"),
                    format!(
                        "calendar {name:?} needs dates = [\"YYYY-MM-DD\", ...] or ics = \"FILE.ics\""
                    ),
                );
                None
            }
        }
    }

    /// A job's rules: its daylight-saving policy, its window, and the
    /// calendars it names (each declared by a `[[calendar]]`). `None` where
    /// one of them is wrong (and reported).
    pub(super) fn rules(
        &mut self,
        raw: RawBounds,
        settings: &jobs::Settings,
        schedule: Option<&Schedule>,
        calendars: &[Arc<Calendar>],
        scope: Scope<'_>,
    ) -> Option<Rules> {
        if let (Some(schedule), Some((span, key))) = (schedule, raw.first_span())
            && (schedule.is_manual() || schedule.is_at_start())
        {
            self.report(
                Some(span),
                Some(scope),
                Some(key),
                format!(
                    "{key} bounds the instants of a schedule: a {} job has none",
                    schedule.expression()
                ),
            );
            return None;
        }
        let mut ok = true;
        let mut instant = |checker: &mut Self, value: Option<Spanned<String>>, key: &str| {
            let value = value?;
            match DateTime::parse_from_rfc3339(value.get_ref().trim()) {
                Ok(t) => Some(t.with_timezone(&Utc)),
                Err(e) => {
                    checker.report(
                        Some(value.span()),
                        Some(scope),
                        Some(key),
                        format!(
                            "{key} {:?} is no RFC 3339 instant ({e}): write it as 2026-12-01T00:00:00Z or 2026-12-01T00:00:00+01:00",
                            value.get_ref()
                        ),
                    );
                    ok = false;
                    None
                }
            }
        };
        let not_after_at = raw.not_after.as_ref().map(Spanned::span);
        let not_before = instant(self, raw.not_before, "not_before");
        let not_after = instant(self, raw.not_after, "not_after");
        if let (Some(from), Some(to)) = (not_before, not_after)
            && to < from
        {
            self.report(
                not_after_at,
                Some(scope),
                Some("not_after"),
                "not_after comes before not_before: the job would never fire",
            );
            ok = false;
        }
        let mut named = |checker: &mut Self, value: Option<Spanned<Vec<String>>>, key: &str| {
            let Some(value) = value else {
                return Vec::new();
            };
            let mut found = Vec::new();
            for name in value.get_ref() {
                match calendars.iter().find(|c| c.name() == name) {
                    Some(calendar) => found.push(calendar.clone()),
                    None => {
                        checker.report(
                            Some(value.span()),
                            Some(scope),
                            Some(key),
                            format!(
                                "{key} names calendar {name:?}, which no [[calendar]] declares"
                            ),
                        );
                        ok = false;
                    }
                }
            }
            found
        };
        let skip_on = named(self, raw.skip_on, "skip_on");
        let only_on = named(self, raw.only_on, "only_on");
        ok.then_some(Rules {
            dst_gap: settings.dst_gap,
            dst_repeat: settings.dst_repeat,
            not_before,
            not_after,
            skip_on,
            only_on,
        })
    }

    /// Warns of an enabled job that can never fire because its `only_on`
    /// calendars hold no date from today on (a list of past dates, a
    /// file of last year's holidays).
    pub(super) fn only_on_ahead(
        &mut self,
        schedule: &Schedule,
        at: Option<Range<usize>>,
        scope: Scope<'_>,
    ) {
        let only_on = &schedule.rules().only_on;
        if only_on.is_empty() || only_on.iter().any(|c| c.why_unreadable().is_some()) {
            return;
        }
        // Yesterday: today somewhere on earth.
        let from = Utc::now().date_naive() - chrono::TimeDelta::days(1);
        if only_on.iter().all(|c| c.dates_from(from).next().is_none()) {
            let names: Vec<String> = only_on.iter().map(|c| format!("{:?}", c.name())).collect();
            self.warn(
                at,
                Some(scope),
                Some("only_on"),
                format!(
                    "the job can never fire: its only_on calendar{} {} hold{} no date from {from} on",
                    if names.len() == 1 { "" } else { "s" },
                    names.join(", "),
                    if names.len() == 1 { "s" } else { "" }
                ),
            );
        }
    }
}
