//! What bounds a schedule's instants beside its expressions: the
//! daylight-saving policy of its fixed times (`dst_gap`, `dst_repeat`),
//! its window (`not_before`, `not_after`) and its calendars (`skip_on`,
//! `only_on`).

use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, NaiveDate, Utc};

use super::calendar::Calendar;

/// What a fixed local time in a spring-forward gap does (`dst_gap`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum DstGap {
    /// It fires once, at the gap's end (cron(8)).
    #[default]
    Shift,
    /// It does not fire that day.
    Skip,
}

/// What a fixed local time that a fall-back shows twice does
/// (`dst_repeat`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum DstRepeat {
    /// It fires at its first occurrence (cron(8)).
    #[default]
    First,
    /// It fires at its second occurrence.
    Last,
    /// It fires at both.
    Both,
}

impl DstGap {
    /// The word the config writes.
    pub(crate) fn word(self) -> &'static str {
        match self {
            DstGap::Shift => "shift",
            DstGap::Skip => "skip",
        }
    }

    /// Its value of the config's word.
    pub(crate) fn parse(word: &str) -> Option<DstGap> {
        match word {
            "shift" => Some(DstGap::Shift),
            "skip" => Some(DstGap::Skip),
            _ => None,
        }
    }
}

impl DstRepeat {
    /// The word the config writes.
    pub(crate) fn word(self) -> &'static str {
        match self {
            DstRepeat::First => "first",
            DstRepeat::Last => "last",
            DstRepeat::Both => "both",
        }
    }

    /// Its value of the config's word.
    pub(crate) fn parse(word: &str) -> Option<DstRepeat> {
        match word {
            "first" => Some(DstRepeat::First),
            "last" => Some(DstRepeat::Last),
            "both" => Some(DstRepeat::Both),
            _ => None,
        }
    }
}

/// A schedule's bounds beside its expressions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Rules {
    pub(crate) dst_gap: DstGap,
    pub(crate) dst_repeat: DstRepeat,
    /// No instant before it.
    pub(crate) not_before: Option<DateTime<Utc>>,
    /// No instant after it.
    pub(crate) not_after: Option<DateTime<Utc>>,
    /// No instant on a date one of them holds.
    pub(crate) skip_on: Vec<Arc<Calendar>>,
    /// No instant on a date none of them holds (none: every date).
    pub(crate) only_on: Vec<Arc<Calendar>>,
}

/// Why an instant of the expressions is no instant of the schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Excluded {
    /// Before `not_before`.
    BeforeWindow,
    /// After `not_after`: and every instant after it.
    AfterWindow,
    /// On a date of this `skip_on` calendar.
    SkipOn(String),
    /// On a date of none of the `only_on` calendars.
    NotOn(Vec<String>),
}

impl fmt::Display for Excluded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Excluded::BeforeWindow => write!(f, "before not_before"),
            Excluded::AfterWindow => write!(f, "after not_after"),
            Excluded::SkipOn(name) => write!(f, "skip_on calendar {name:?}"),
            Excluded::NotOn(names) => {
                let names: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
                write!(f, "not in only_on calendar {}", names.join(" or "))
            }
        }
    }
}

impl Rules {
    /// Whether the rules take any instant away.
    pub(crate) fn excludes_any(&self) -> bool {
        self.not_before.is_some()
            || self.not_after.is_some()
            || !self.skip_on.is_empty()
            || !self.only_on.is_empty()
    }

    /// Why `instant`, whose local date is `date`, is excluded, if it is.
    pub(crate) fn excluded(&self, instant: DateTime<Utc>, date: NaiveDate) -> Option<Excluded> {
        if self.not_before.is_some_and(|from| instant < from) {
            return Some(Excluded::BeforeWindow);
        }
        if self.not_after.is_some_and(|to| instant > to) {
            return Some(Excluded::AfterWindow);
        }
        if let Some(calendar) = self.skip_on.iter().find(|c| c.contains(date)) {
            return Some(Excluded::SkipOn(calendar.name().to_string()));
        }
        if !self.only_on.is_empty() && !self.only_on.iter().any(|c| c.contains(date)) {
            return Some(Excluded::NotOn(
                self.only_on.iter().map(|c| c.name().to_string()).collect(),
            ));
        }
        None
    }
}
