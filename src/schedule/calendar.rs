//! Calendars (`[[calendar]]`): named sets of dates a job skips
//! (`skip_on`) or keeps to (`only_on`), written as a list of dates or read
//! from an iCalendar file. An iCalendar file is parsed by the `icalendar`
//! crate and its recurring events (`RRULE`, `RDATE`, `EXDATE`) expanded by
//! the `rrule` crate, up to [`HORIZON`]: each event covers the dates from
//! its start to its end (an all-day event's `DTEND` is the day after its
//! last), in the wall time it is written in. A date is tested in the job's
//! own time zone.

use std::collections::BTreeSet;
use std::fmt;

use chrono::{NaiveDate, NaiveDateTime, NaiveTime, TimeDelta};

/// Recurring events are expanded up to this date (exclusive): far past
/// any run a config written today asks for, near enough that a daily rule
/// stays some ten thousand dates.
pub(crate) const HORIZON: NaiveDate = match NaiveDate::from_ymd_opt(2100, 1, 1) {
    Some(date) => date,
    None => NaiveDate::MIN,
};

/// The most dates one calendar may hold (a daily rule to [`HORIZON`] from
/// 2000 holds 36,525).
const MAX_DATES: usize = 200_000;

/// A named set of dates.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Calendar {
    name: String,
    dates: BTreeSet<NaiveDate>,
    /// Why its file could not be read, if it could not: it then holds no
    /// date, and the jobs that name it are held.
    unreadable: Option<String>,
}

/// Its name, how many dates, and a digest of them: what replicas compare.
impl fmt::Debug for Calendar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(why) = &self.unreadable {
            return write!(f, "{}(unreadable: {why})", self.name);
        }
        let all: String = self.dates.iter().map(|d| format!("{d} ")).collect();
        write!(
            f,
            "{}({} dates, {})",
            self.name,
            self.dates.len(),
            super::digest(&all)
        )
    }
}

/// A problem in an iCalendar file: the line (1-based, of the file as
/// written) and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct IcsError {
    pub(crate) line: usize,
    pub(crate) message: String,
}

impl fmt::Display for IcsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl Calendar {
    /// A calendar of `dates`.
    pub(crate) fn of_dates(name: &str, dates: impl IntoIterator<Item = NaiveDate>) -> Calendar {
        Calendar {
            name: name.to_string(),
            dates: dates.into_iter().collect(),
            unreadable: None,
        }
    }

    /// A calendar whose file could not be read, and why: the jobs that
    /// name it are held, rather than run without it.
    pub(crate) fn unreadable(name: &str, why: String) -> Calendar {
        Calendar {
            name: name.to_string(),
            dates: BTreeSet::new(),
            unreadable: Some(why),
        }
    }

    /// The calendar an iCalendar file's `VEVENT`s cover.
    pub(crate) fn from_ics(name: &str, text: &str) -> Result<Calendar, IcsError> {
        let unfolded = icalendar::parser::unfold(text);
        let parsed = icalendar::parser::read_calendar(&unfolded)
            .map_err(|e| what_is_broken(text, first_line_of_error(&e)))?;
        let events: Vec<_> = parsed
            .components
            .iter()
            .flat_map(|c| std::iter::once(c).chain(c.components.iter()))
            .filter(|c| c.name.as_str().eq_ignore_ascii_case("VEVENT"))
            .collect();
        let event_lines: Vec<usize> = text
            .lines()
            .enumerate()
            .filter(|(_, l)| l.trim().eq_ignore_ascii_case("BEGIN:VEVENT"))
            .map(|(n, _)| n + 1)
            .collect();
        if event_lines.is_empty() && !text.contains("BEGIN:VCALENDAR") {
            return Err(IcsError {
                line: 1,
                message: "not an iCalendar file: no BEGIN:VCALENDAR".to_string(),
            });
        }
        let mut dates = BTreeSet::new();
        for (index, event) in events.iter().enumerate() {
            let begin = event_lines.get(index).copied().unwrap_or(1);
            // The line of the event's property `key` (else of its BEGIN).
            let line_of = |key: &str| {
                text.lines()
                    .enumerate()
                    .skip(begin)
                    .take_while(|(_, l)| !l.trim().eq_ignore_ascii_case("END:VEVENT"))
                    .find(|(_, l)| {
                        l.get(..key.len())
                            .is_some_and(|head| head.eq_ignore_ascii_case(key))
                    })
                    .map_or(begin, |(n, _)| n + 1)
            };
            let at = |key: &str, message: String| IcsError {
                line: line_of(key),
                message,
            };
            let error = |message: String| IcsError {
                line: begin,
                message,
            };
            let value = |key: &str| event.find_prop(key).map(|p| p.val.as_str().to_string());
            let start_prop = event
                .find_prop("DTSTART")
                .ok_or_else(|| error("an event without DTSTART".to_string()))?;
            let start = parse_when(start_prop.val.as_str()).ok_or_else(|| {
                at(
                    "DTSTART",
                    format!("DTSTART {:?} is no date", start_prop.val.as_str()),
                )
            })?;
            let end = match (value("DTEND"), value("DURATION")) {
                (Some(end), _) => Some(
                    parse_when(&end)
                        .ok_or_else(|| at("DTEND", format!("DTEND {end:?} is no date")))?,
                ),
                (None, Some(duration)) => Some(
                    start
                        + parse_duration(&duration).ok_or_else(|| {
                            at(
                                "DURATION",
                                format!("DURATION {duration:?} is not understood"),
                            )
                        })?,
                ),
                (None, None) => None,
            };
            let days = covered_days(start, end);
            let rdates = dates_of(event, "RDATE").map_err(|e| at("RDATE", e))?;
            let starts = match value("RRULE") {
                None => std::iter::once(start).chain(rdates).collect(),
                Some(rule) => {
                    let mut starts = expand(start, &rule).map_err(|e| at("RRULE", e))?;
                    // As the rule's own occurrences, up to the horizon.
                    let horizon = HORIZON.and_time(NaiveTime::MIN);
                    starts.extend(rdates.into_iter().filter(|t| *t < horizon));
                    starts
                }
            };
            let excluded: BTreeSet<NaiveDate> = dates_of(event, "EXDATE")
                .map_err(|e| at("EXDATE", e))?
                .into_iter()
                .map(|t| t.date())
                .collect();
            for start in starts {
                if excluded.contains(&start.date()) {
                    continue;
                }
                for day in 0..days {
                    dates.insert(start.date() + TimeDelta::days(day));
                }
                if dates.len() > MAX_DATES {
                    return Err(error(format!(
                        "the calendar covers more than {MAX_DATES} dates before {HORIZON}"
                    )));
                }
            }
        }
        Ok(Calendar {
            name: name.to_string(),
            dates,
            unreadable: None,
        })
    }

    /// Why its file could not be read, if it could not.
    pub(crate) fn why_unreadable(&self) -> Option<&str> {
        self.unreadable.as_deref()
    }

    /// Its name, as jobs' `skip_on` and `only_on` write it.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Whether it holds `date`.
    pub(crate) fn contains(&self, date: NaiveDate) -> bool {
        self.dates.contains(&date)
    }

    /// How many dates it holds.
    pub(crate) fn len(&self) -> usize {
        self.dates.len()
    }

    /// Its dates from `from` on, in order.
    pub(crate) fn dates_from(&self, from: NaiveDate) -> impl Iterator<Item = NaiveDate> + '_ {
        self.dates.range(from..).copied()
    }
}

/// A `DTSTART`/`DTEND`/`RDATE`/`EXDATE` value: a date (`20261225`) or a
/// date and time (`20261225T090000`, with a `Z` or not), as the wall time
/// it is written in.
fn parse_when(value: &str) -> Option<NaiveDateTime> {
    let value = value.trim().trim_end_matches('Z');
    if value.len() == 8 {
        return NaiveDate::parse_from_str(value, "%Y%m%d")
            .ok()
            .map(|d| d.and_time(NaiveTime::MIN));
    }
    NaiveDateTime::parse_from_str(value, "%Y%m%dT%H%M%S").ok()
}

/// A `DURATION` of days, weeks, hours, minutes and seconds (`P1D`,
/// `PT12H`, `P1W`).
fn parse_duration(value: &str) -> Option<TimeDelta> {
    let rest = value.trim().strip_prefix('P')?;
    let (days, time) = rest.split_once('T').unwrap_or((rest, ""));
    let mut total = TimeDelta::zero();
    let mut number = String::new();
    for (part, is_time) in [(days, false), (time, true)] {
        for c in part.chars() {
            if c.is_ascii_digit() {
                number.push(c);
                continue;
            }
            let n: i64 = number.parse().ok()?;
            number.clear();
            total += match (c, is_time) {
                ('W', false) => TimeDelta::weeks(n),
                ('D', false) => TimeDelta::days(n),
                ('H', true) => TimeDelta::hours(n),
                ('M', true) => TimeDelta::minutes(n),
                ('S', true) => TimeDelta::seconds(n),
                _ => return None,
            };
        }
    }
    number.is_empty().then_some(total)
}

/// How many dates an event from `start` to `end` covers: those up to the
/// end, which is exclusive at midnight (an all-day event's `DTEND`); one
/// without an end covers its start's date.
fn covered_days(start: NaiveDateTime, end: Option<NaiveDateTime>) -> i64 {
    let Some(end) = end.filter(|end| *end > start) else {
        return 1;
    };
    let last = if end.time() == NaiveTime::MIN {
        end.date() - TimeDelta::days(1)
    } else {
        end.date()
    };
    ((last - start.date()).num_days() + 1).max(1)
}

/// Every value of an event's `key` properties (`RDATE`, `EXDATE`: each a
/// comma-separated list of dates or dates and times).
fn dates_of(
    event: &icalendar::parser::Component<'_>,
    key: &str,
) -> Result<Vec<NaiveDateTime>, String> {
    event
        .properties
        .iter()
        .filter(|p| p.name.as_str() == key)
        .flat_map(|p| p.val.as_str().split(','))
        .map(|one| parse_when(one).ok_or_else(|| format!("{key} {one:?} is no date")))
        .collect()
}

/// The starts of a recurring event: its `RRULE` from `start`, up to
/// [`HORIZON`] (its `RDATE`s and `EXDATE`s are applied by the caller). Wall
/// times are expanded as UTC, so that a zone's transitions move no date.
fn expand(start: NaiveDateTime, rule: &str) -> Result<Vec<NaiveDateTime>, String> {
    let text = format!("DTSTART:{}Z\nRRULE:{rule}", start.format("%Y%m%dT%H%M%S"));
    let set: rrule::RRuleSet = text
        .parse()
        .map_err(|e| format!("RRULE {rule:?} is not understood: {e}"))?;
    let horizon = HORIZON.and_time(NaiveTime::MIN);
    let mut starts = Vec::new();
    for occurrence in &set {
        let wall = occurrence.naive_utc();
        if wall >= horizon {
            break;
        }
        starts.push(wall);
        if starts.len() > MAX_DATES {
            return Err(format!(
                "RRULE {rule:?} recurs more than {MAX_DATES} times before {HORIZON}"
            ));
        }
    }
    Ok(starts)
}

/// What is wrong with `text`, which the parser refused, in words and at a
/// line of the file: a block left open (a file cut short), an `END` that
/// closes no block, a line that is no property; else the line the parser
/// named (`parser_line`, kept within the file) and its text.
fn what_is_broken(text: &str, parser_line: usize) -> IcsError {
    let lines: Vec<&str> = text.lines().collect();
    let last = lines.len().max(1);
    if !lines
        .iter()
        .any(|l| l.trim().eq_ignore_ascii_case("BEGIN:VCALENDAR"))
    {
        return IcsError {
            line: 1,
            message: "not an iCalendar file: no BEGIN:VCALENDAR".to_string(),
        };
    }
    let mut open: Vec<(String, usize)> = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        let number = n + 1;
        let line = line.trim_end_matches('\r');
        // A folded line goes on the one before; an empty line says nothing.
        if line.starts_with([' ', '\t']) || line.trim().is_empty() {
            continue;
        }
        let Some((name, value)) = line.split_once(':') else {
            return IcsError {
                line: number,
                message: format!(
                    "{line:?} is no property (NAME:VALUE){}",
                    if number == last {
                        ", and it is the last line: is the file cut short?"
                    } else {
                        ""
                    }
                ),
            };
        };
        let block = value.trim().to_ascii_uppercase();
        if name.eq_ignore_ascii_case("BEGIN") {
            open.push((block, number));
        } else if name.eq_ignore_ascii_case("END") {
            match open.pop() {
                Some((begun, _)) if begun == block => {}
                Some((begun, at)) => {
                    return IcsError {
                        line: number,
                        message: format!("END:{block} where BEGIN:{begun} of line {at} is open"),
                    };
                }
                None => {
                    return IcsError {
                        line: number,
                        message: format!("END:{block} closes no BEGIN:{block}"),
                    };
                }
            }
        }
    }
    if let Some((begun, at)) = open.pop() {
        return IcsError {
            line: last,
            message: format!(
                "the file ends without END:{begun} (BEGIN:{begun} is at line {at}): is it cut short?"
            ),
        };
    }
    let line = parser_line.clamp(1, last);
    IcsError {
        line,
        message: format!(
            "not an iCalendar file: line {line} ({:?}) cannot be read",
            lines.get(line - 1).copied().unwrap_or_default()
        ),
    }
}

/// The line a parse error of `icalendar` names (it numbers the unfolded
/// text, which is the file's for files without folded lines), else 1.
fn first_line_of_error(error: &str) -> usize {
    error
        .split("line ")
        .nth(1)
        .and_then(|rest| {
            rest.split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn date(text: &str) -> NaiveDate {
        NaiveDate::parse_from_str(text, "%Y-%m-%d").expect("a date")
    }

    const HOLIDAYS: &str = "BEGIN:VCALENDAR\r\n\
VERSION:2.0\r\n\
PRODID:-//test//holidays//EN\r\n\
BEGIN:VEVENT\r\n\
UID:xmas@test\r\n\
DTSTART;VALUE=DATE:20201225\r\n\
DTEND;VALUE=DATE:20201227\r\n\
RRULE:FREQ=YEARLY\r\n\
SUMMARY:Christmas\r\n\
END:VEVENT\r\n\
BEGIN:VEVENT\r\n\
UID:newyear@test\r\n\
DTSTART;VALUE=DATE:20270101\r\n\
SUMMARY:New Year\r\n\
END:VEVENT\r\n\
BEGIN:VEVENT\r\n\
UID:thanksgiving@test\r\n\
DTSTART;VALUE=DATE:20201126\r\n\
RRULE:FREQ=YEARLY;BYMONTH=11;BYDAY=4TH\r\n\
EXDATE;VALUE=DATE:20271125\r\n\
SUMMARY:Thanksgiving\r\n\
END:VEVENT\r\n\
END:VCALENDAR\r\n";

    #[test]
    fn all_day_and_recurring_events_cover_their_dates() {
        let calendar = Calendar::from_ics("holidays", HOLIDAYS).expect("parses");
        for covered in [
            "2026-12-25",
            "2026-12-26",
            "2031-12-25",
            "2027-01-01",
            "2026-11-26",
        ] {
            assert!(calendar.contains(date(covered)), "{covered}");
        }
        for free in [
            "2026-12-24",
            "2026-12-27",
            "2028-01-01",
            "2027-11-25",
            "2026-11-27",
        ] {
            assert!(!calendar.contains(date(free)), "{free}");
        }
        // The fourth Thursday of November, every year but the excluded one.
        assert!(calendar.contains(date("2028-11-23")));
        assert!(calendar.contains(date("2099-12-26")));
    }

    #[test]
    fn a_file_that_is_no_calendar_or_has_a_bad_rule_names_the_line() {
        let e = Calendar::from_ics("x", "hello\n").expect_err("no calendar");
        assert!(e.message.contains("not an iCalendar file"), "{e}");
        let bad = HOLIDAYS.replace("RRULE:FREQ=YEARLY\r\n", "RRULE:FREQ=SOMETIMES\r\n");
        let e = Calendar::from_ics("x", &bad).expect_err("bad rule");
        assert_eq!(e.line, 8, "{e}");
        assert!(e.message.contains("FREQ=SOMETIMES"), "{e}");
        let bad = HOLIDAYS.replace("DTSTART;VALUE=DATE:20270101", "DTSTART;VALUE=DATE:2027-1");
        let e = Calendar::from_ics("x", &bad).expect_err("bad date");
        assert_eq!(e.line, 13, "{e}");
    }

    #[test]
    fn a_file_cut_short_or_out_of_order_is_told_in_words_at_a_line_it_has() {
        // Cut in the middle of a line of the second event.
        let cut = &HOLIDAYS[..HOLIDAYS.find("SUMMARY:New").expect("there") + 4];
        let e = Calendar::from_ics("x", cut).expect_err("cut short");
        let lines = cut.lines().count();
        assert_eq!(e.line, lines, "{e}");
        assert_eq!(
            e.message,
            "\"SUMM\" is no property (NAME:VALUE), and it is the last line: is the file cut short?"
        );
        // Cut after a whole line.
        let cut = &HOLIDAYS[..HOLIDAYS.find("SUMMARY:New").expect("there")];
        let e = Calendar::from_ics("x", cut).expect_err("cut short");
        assert_eq!(e.line, cut.lines().count(), "{e}");
        assert_eq!(
            e.message,
            "the file ends without END:VEVENT (BEGIN:VEVENT is at line 11): is it cut short?"
        );
        let crossed = HOLIDAYS.replacen("END:VEVENT", "END:VCALENDAR", 1);
        let e = Calendar::from_ics("x", &crossed).expect_err("crossed");
        assert_eq!(e.line, 10, "{e}");
        assert_eq!(
            e.message,
            "END:VCALENDAR where BEGIN:VEVENT of line 4 is open"
        );
    }

    #[test]
    fn timed_events_and_durations() {
        let text = "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;TZID=Europe/Berlin:20261230T220000\n\
DURATION:PT4H\nEND:VEVENT\nBEGIN:VEVENT\nDTSTART:20260706T080000Z\nRRULE:FREQ=WEEKLY;COUNT=3\n\
END:VEVENT\nEND:VCALENDAR\n";
        let calendar = Calendar::from_ics("maintenance", text).expect("parses");
        let dates: Vec<String> = calendar
            .dates_from(date("2026-01-01"))
            .map(|d| d.to_string())
            .collect();
        assert_eq!(
            dates,
            [
                "2026-07-06",
                "2026-07-13",
                "2026-07-20",
                "2026-12-30",
                "2026-12-31"
            ]
        );
    }
}
