//! Config drift: each replica publishes a digest of every job it loaded
//! (in its registry row, at each heartbeat) and compares the live
//! replicas' digests of each of its jobs. A job whose live digests differ
//! has drifted (a rolling deploy, a file edited on one host); a replica
//! whose own definition of it is shared by strictly fewer live replicas
//! than another definition is in the minority, and does not claim that
//! job's instants until it no longer is (two replicas, or a tie, claim as
//! before: the drift is only reported).

use std::collections::BTreeMap;
use std::sync::Mutex;

use tracing::{info, warn};

use super::job::Job;
use crate::registry::Instance;

/// One line per job of the job file: `name=digest`, by name (job names
/// hold no `=`). Jobs built in code have no digest and take no part.
pub(crate) fn digests_of<'a>(jobs: impl IntoIterator<Item = &'a Job>) -> String {
    let mut lines: Vec<String> = jobs
        .into_iter()
        .filter_map(|job| Some(format!("{}={}", job.name, job.digest.as_deref()?)))
        .collect();
    lines.sort();
    lines.join("\n")
}

fn parse(text: &str) -> BTreeMap<&str, &str> {
    text.lines()
        .filter_map(|line| line.split_once('='))
        .collect()
}

/// How the live replicas that have a job disagree on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Drift {
    /// Each definition's digest and the replicas that have it, the most
    /// shared first.
    pub(crate) groups: Vec<(String, Vec<String>)>,
    /// This replica's definition is shared by strictly fewer live replicas
    /// than another: it does not claim the job.
    pub(crate) minority: bool,
}

impl Drift {
    /// "r1, r2 have 1a2b…; r3 has 9f8e…".
    pub(crate) fn describe(&self) -> String {
        self.groups
            .iter()
            .map(|(digest, ids)| {
                let verb = if ids.len() == 1 { "has" } else { "have" };
                format!("{} {verb} {digest}", ids.join(", "))
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// For each job, which of `members` (an id and its `name=digest` lines)
/// have which digest, the most shared first: the jobs with more than one.
fn disagreements(members: &[(&str, &str)]) -> BTreeMap<String, Vec<(String, Vec<String>)>> {
    let mut by_job: BTreeMap<&str, BTreeMap<&str, Vec<String>>> = BTreeMap::new();
    for (id, digests) in members {
        for (job, digest) in parse(digests) {
            by_job
                .entry(job)
                .or_default()
                .entry(digest)
                .or_default()
                .push((*id).to_string());
        }
    }
    by_job
        .into_iter()
        .filter(|(_, groups)| groups.len() > 1)
        .map(|(job, groups)| {
            let mut groups: Vec<(String, Vec<String>)> = groups
                .into_iter()
                .map(|(digest, mut ids)| {
                    ids.sort();
                    (digest.to_string(), ids)
                })
                .collect();
            groups.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.0.cmp(&b.0)));
            (job.to_string(), groups)
        })
        .collect()
}

/// The jobs on which the live replicas among `instances` disagree (for
/// `status`, which is no replica).
pub(crate) fn among(instances: &[Instance]) -> BTreeMap<String, Drift> {
    let live: Vec<(&str, &str)> = instances
        .iter()
        .filter(|i| i.alive)
        .map(|i| {
            (
                i.row.id.as_str(),
                i.row.job_digests.as_deref().unwrap_or(""),
            )
        })
        .collect();
    disagreements(&live)
        .into_iter()
        .map(|(job, groups)| {
            (
                job,
                Drift {
                    groups,
                    minority: false,
                },
            )
        })
        .collect()
}

/// The jobs of `mine` (this replica's `name=digest` lines) on which the
/// live replicas among `instances` disagree. `me` counts as live with
/// `mine` whatever its row says.
pub(crate) fn assess(me: &str, mine: &str, instances: &[Instance]) -> BTreeMap<String, Drift> {
    let mut members: Vec<(&str, &str)> = vec![(me, mine)];
    members.extend(
        instances
            .iter()
            .filter(|i| i.alive && i.row.id != me)
            .map(|i| {
                (
                    i.row.id.as_str(),
                    i.row.job_digests.as_deref().unwrap_or(""),
                )
            }),
    );
    let own = parse(mine);
    disagreements(&members)
        .into_iter()
        .filter_map(|(job, groups)| {
            let digest = own.get(job.as_str())?;
            let shared = groups
                .iter()
                .find(|(d, _)| d == digest)
                .map_or(0, |(_, ids)| ids.len());
            let minority = groups.iter().any(|(_, ids)| ids.len() > shared);
            Some((job, Drift { groups, minority }))
        })
        .collect()
}

/// What this replica knows of drift, for the tick loops and the metrics.
#[derive(Debug, Default)]
pub(crate) struct DriftState {
    jobs: Mutex<BTreeMap<String, Drift>>,
}

impl DriftState {
    /// Whether this replica is in the minority for any job.
    pub(crate) fn any_minority(&self) -> bool {
        self.jobs
            .lock()
            .map(|jobs| jobs.values().any(|d| d.minority))
            .unwrap_or(false)
    }

    /// Whether this replica is in the minority for `job`.
    pub(crate) fn is_minority(&self, job: &str) -> bool {
        self.jobs
            .lock()
            .map(|jobs| jobs.get(job).is_some_and(|d| d.minority))
            .unwrap_or(false)
    }

    /// Replaces what is known with `now` for `jobs` (this replica's): logs
    /// each change once and sets each job's drift gauge.
    pub(crate) fn update(&self, jobs: &[String], now: BTreeMap<String, Drift>) {
        let Ok(mut known) = self.jobs.lock() else {
            return;
        };
        for job in jobs {
            let (before, after) = (known.get(job), now.get(job));
            if before == after {
                continue;
            }
            crate::telemetry::config_drift(job, after.is_some());
            match after {
                Some(drift) if drift.minority => warn!(
                    job = %job,
                    replicas = %drift.describe(),
                    "config drift: live replicas define this job differently, and this replica's \
                     definition is in the minority: it does not claim the job's instants until that changes"
                ),
                Some(drift) => warn!(
                    job = %job,
                    replicas = %drift.describe(),
                    "config drift: live replicas define this job differently (this replica's \
                     definition is not in the minority: it still claims the job)"
                ),
                None => {
                    info!(job = %job, "config drift over: the live replicas define this job alike")
                }
            }
        }
        *known = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::InstanceRow;

    fn live(id: &str, digests: &str) -> Instance {
        let t = chrono::DateTime::<chrono::Utc>::UNIX_EPOCH.naive_utc();
        Instance {
            row: InstanceRow {
                id: id.to_string(),
                host: "h".to_string(),
                pid: 1,
                version: "0".to_string(),
                started_at: t,
                last_seen: t,
                job_digests: Some(digests.to_string()),
                clock_offset_us: None,
                web_url: None,
                resource_limits: None,
            },
            alive: true,
        }
    }

    #[test]
    fn the_odd_one_out_is_in_the_minority_and_a_tie_is_only_reported() {
        let fleet = [
            live("r1", "a=1\nb=1"),
            live("r2", "a=1\nb=1"),
            live("r3", "a=2\nb=1"),
        ];
        // r3 is the odd one: drift on a, minority; b agrees.
        let r3 = assess("r3", "a=2\nb=1", &fleet);
        assert_eq!(r3.keys().collect::<Vec<_>>(), ["a"]);
        assert!(r3["a"].minority);
        assert_eq!(r3["a"].describe(), "r1, r2 have 1; r3 has 2");
        // r1 sees the same drift and keeps claiming.
        let r1 = assess("r1", "a=1\nb=1", &fleet);
        assert!(!r1["a"].minority);
        // Two replicas, or a tie: reported, nobody stops.
        let pair = assess("r3", "a=2", &fleet[1..]);
        assert!(!pair["a"].minority, "{pair:?}");
        // A stale replica, and one without the job, do not count.
        let mut stale = live("r4", "a=1");
        stale.alive = false;
        let fleet = [live("r2", "a=1"), stale, live("r5", "c=9")];
        assert!(!assess("r3", "a=2", &fleet)["a"].minority);
        assert!(assess("r3", "a=2", &[live("r5", "c=9")]).is_empty());
    }

    #[test]
    fn each_change_is_told_once() {
        let state = DriftState::default();
        let fleet = [live("r1", "a=1"), live("r2", "a=1")];
        let jobs = vec!["a".to_string()];
        state.update(&jobs, assess("r3", "a=2", &fleet));
        assert!(state.is_minority("a"));
        state.update(&jobs, assess("r3", "a=1", &fleet));
        assert!(!state.is_minority("a"));
    }
}
