//! The names of jobs and shared locks. Each is the key of a lease row (a
//! lock's row is `replicron.lock.NAME`) and of the job's history, so the
//! rule is the columns' and every backend's: 1 to 64 characters (a lock,
//! fewer: its row's prefix counts) of `A-Z a-z 0-9 _ . : -`, and a job's
//! name does not take the prefix of replicron's own rows. The rule is
//! written here once; the job file's check, [`crate::Job::new`] and
//! `replicron exec` ask it.

use std::fmt;

use super::{LIMIT_ROW_PREFIX, LOCK_ROW_PREFIX, MAX_JOB_NAME_LEN, RESERVED_PREFIX};

/// The longest lock name: its row's name must fit the 64 characters of a
/// lease row's.
const MAX_LOCK_NAME_LEN: usize = MAX_JOB_NAME_LEN - LOCK_ROW_PREFIX.len();

/// Why a text names no job or lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NameError {
    /// Empty, longer than `max`, or a character outside the set.
    Form {
        /// The longest name allowed here.
        max: usize,
    },
    /// A job name that starts with [`RESERVED_PREFIX`].
    Reserved,
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameError::Form { max } => {
                write!(f, "use 1 to {max} characters from A-Z a-z 0-9 _ . : -")
            }
            NameError::Reserved => write!(
                f,
                "names starting with {RESERVED_PREFIX:?} are reserved for replicron's own leases"
            ),
        }
    }
}

/// A job's name, valid by construction.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct JobName(String);

/// As the name's text is: messages quote a name with `{:?}`.
impl fmt::Debug for JobName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl JobName {
    /// `name`, if it may name a job.
    pub(crate) fn parse(name: &str) -> Result<JobName, NameError> {
        check_form(name, MAX_JOB_NAME_LEN)?;
        if name.starts_with(RESERVED_PREFIX) {
            return Err(NameError::Reserved);
        }
        Ok(JobName(name.to_string()))
    }
}

impl std::ops::Deref for JobName {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl From<JobName> for String {
    fn from(name: JobName) -> String {
        name.0
    }
}

impl PartialEq<&str> for JobName {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl fmt::Display for JobName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether `name` may name a shared lock: a job name's form, within
/// [`MAX_LOCK_NAME_LEN`]. (Its row's prefix keeps it apart from
/// replicron's own rows whatever it starts with.)
pub(crate) fn check_lock(name: &str) -> Result<(), NameError> {
    check_form(name, MAX_LOCK_NAME_LEN)
}

/// The longest limit name: its slots' rows, `replicron.limit.NAME.1000`,
/// fit a job name's column.
const MAX_LIMIT_NAME_LEN: usize = MAX_JOB_NAME_LEN - LIMIT_ROW_PREFIX.len() - ".1000".len();

/// A limit's name: a job name's characters, short enough for its slots'
/// lease rows.
pub(crate) fn check_limit(name: &str) -> Result<(), NameError> {
    check_form(name, MAX_LIMIT_NAME_LEN)
}

/// Whether `name` has a job name's form, reserved or not: what a message
/// may quote as a job's label before the job is checked.
pub(crate) fn has_job_form(name: &str) -> bool {
    check_form(name, MAX_JOB_NAME_LEN).is_ok()
}

fn check_form(name: &str, max: usize) -> Result<(), NameError> {
    let formed = !name.is_empty()
        && name.len() <= max
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-'));
    if formed {
        Ok(())
    } else {
        Err(NameError::Form { max })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_name_is_checked_once_for_form_length_and_prefix() {
        for good in [
            "a",
            "billing.monthly",
            "host:rotate-logs_2",
            &"x".repeat(64),
        ] {
            assert_eq!(JobName::parse(good).map(String::from), Ok(good.to_string()));
            // Messages quote it as they quote its text.
            assert_eq!(
                format!("{:?}", JobName::parse(good).expect("valid")),
                format!("{good:?}")
            );
        }
        let form = Err(NameError::Form { max: 64 });
        for bad in ["", "has space", "slash/", "é", &"x".repeat(65)] {
            assert_eq!(JobName::parse(bad), form, "{bad:?}");
        }
        assert_eq!(
            JobName::parse("replicron.retention"),
            Err(NameError::Reserved)
        );
        assert!(has_job_form("replicron.retention"));
        assert_eq!(
            NameError::Form { max: 64 }.to_string(),
            "use 1 to 64 characters from A-Z a-z 0-9 _ . : -"
        );
    }

    #[test]
    fn a_lock_name_leaves_room_for_its_rows_prefix() {
        assert_eq!(MAX_LOCK_NAME_LEN, 64 - "replicron.lock.".len());
        assert_eq!(check_lock(&"x".repeat(MAX_LOCK_NAME_LEN)), Ok(()));
        assert_eq!(
            check_lock(&"x".repeat(MAX_LOCK_NAME_LEN + 1)),
            Err(NameError::Form {
                max: MAX_LOCK_NAME_LEN
            })
        );
        // The prefix keeps a lock's row apart from replicron's own.
        assert_eq!(check_lock("replicron.x"), Ok(()));
    }
}
