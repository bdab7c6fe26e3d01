//! The rules of a job's `after`: parents that exist, run once across the
//! fleet and form no cycle, endings by name, and, for a fan-in, parents
//! that share an instant.

use std::collections::HashMap;

use chrono::{DateTime, TimeDelta, Utc};

use super::*;
use crate::config::{After, Parent};
use crate::run::RunStatus;

/// A job's `after` as read, until every job is known.
pub(super) struct Declared {
    /// The job's name.
    job: String,
    /// How errors name it.
    label: String,
    /// The source `after` is written in, and where.
    source: usize,
    span: Range<usize>,
    /// Its parents, in the file's order.
    parents: Vec<String>,
    /// The endings that count.
    on: Vec<RunStatus>,
}

/// Whether `on` may name `status`: any ending but `running` (no ending)
/// and `missed` (no run).
fn is_ending(status: RunStatus) -> bool {
    !matches!(status, RunStatus::Running | RunStatus::Missed)
}

/// How far ahead a fan-in's parents must share an instant.
const SHARED_WITHIN: TimeDelta = TimeDelta::days(366);

/// The most instants of a fan-in's first parent looked at for one its
/// other parents share.
const SHARED_SCAN: usize = 100_000;

impl Checker<'_> {
    /// Reads a job's `after`: its parents' names (none twice, not the job
    /// itself) and the endings; `None` where it is wrong (and reported).
    pub(super) fn after(
        &mut self,
        after: Spanned<RawAfter>,
        name: Option<&str>,
        scope: Scope<'_>,
    ) -> Option<(Vec<String>, Vec<RunStatus>, Range<usize>)> {
        let span = after.span();
        let (parents, on) = match after.into_inner() {
            RawAfter::Jobs(jobs) => (jobs, None),
            RawAfter::Table(table) => (table.jobs, table.on),
        };
        let mut ok = true;
        if parents.is_empty() {
            self.report(
                Some(span.clone()),
                Some(scope),
                Some("after"),
                "after names no job: write after = [\"extract\"]",
            );
            ok = false;
        }
        for (i, parent) in parents.iter().enumerate() {
            if parents[..i].contains(parent) {
                self.report(
                    Some(span.clone()),
                    Some(scope),
                    Some("after"),
                    format!("after names {parent:?} twice"),
                );
                ok = false;
            }
            if Some(parent.as_str()) == name {
                self.report(
                    Some(span.clone()),
                    Some(scope),
                    Some("after"),
                    format!("a job cannot run after itself: after names {parent:?}"),
                );
                ok = false;
            }
        }
        let on = match on {
            None => vec![RunStatus::Succeeded],
            Some(names) if names.is_empty() => {
                self.report(
                    Some(span.clone()),
                    Some(scope),
                    Some("after"),
                    "after's on names no ending: the job would never run",
                );
                return None;
            }
            Some(names) => {
                let mut on = Vec::new();
                for word in &names {
                    match RunStatus::ALL
                        .iter()
                        .find(|s| is_ending(**s) && s.as_str() == word)
                    {
                        Some(status) if !on.contains(status) => on.push(*status),
                        Some(_) => {}
                        None => {
                            let known: Vec<&str> = RunStatus::ALL
                                .iter()
                                .filter(|s| is_ending(**s))
                                .map(|s| s.as_str())
                                .collect();
                            self.report(
                                Some(span.clone()),
                                Some(scope),
                                Some("after"),
                                format!(
                                    "after's on names {word:?}: expected endings of a run, of {}",
                                    known.join(", ")
                                ),
                            );
                            ok = false;
                        }
                    }
                }
                on
            }
        };
        ok.then_some((parents, on, span))
    }

    /// Records a job's `after` until every job is known.
    pub(super) fn declared(
        &self,
        job: &str,
        label: &str,
        (parents, on, span): (Vec<String>, Vec<RunStatus>, Range<usize>),
    ) -> Declared {
        Declared {
            job: job.to_string(),
            label: label.to_string(),
            source: self.current,
            span,
            parents,
            on,
        }
    }

    /// Resolves every job's `after` against the jobs of the file: parents
    /// that exist and run once across the fleet, no cycle, and a fan-in's
    /// parents sharing an instant within a year. Sets each dependent job's
    /// [`After`]; returns whether all held.
    pub(super) fn resolve_after(&mut self, declared: Vec<Declared>, jobs: &mut [Job]) -> bool {
        let mut ok = true;
        let index: HashMap<String, usize> = jobs
            .iter()
            .enumerate()
            .map(|(i, job)| (job.name.to_string(), i))
            .collect();
        let mut resolved: Vec<(usize, After)> = Vec::new();
        for declared in &declared {
            self.current = declared.source;
            let scope = Scope::Job(&declared.label);
            let mut parents = Vec::new();
            for name in &declared.parents {
                match index.get(name).map(|i| &jobs[*i]) {
                    None => {
                        self.report(
                            Some(declared.span.clone()),
                            Some(scope),
                            Some("after"),
                            format!("after names {name:?}, which is no job of this file or the files it includes"),
                        );
                        ok = false;
                    }
                    Some(parent) if parent.run_on == RunOn::Every => {
                        self.report(
                            Some(declared.span.clone()),
                            Some(scope),
                            Some("after"),
                            format!(
                                "after names {name:?}, a run_on = \"every\" job: its runs are each replica's, \
                                 and no one of them is the instant's"
                            ),
                        );
                        ok = false;
                    }
                    Some(parent) => parents.push(Parent {
                        name: name.clone(),
                        schedule: parent.schedule.clone(),
                        retries: parent.retries,
                        retry_backoff: parent.retry_backoff,
                        exit_codes: parent.exit_codes.clone(),
                    }),
                }
            }
            if let Some(&i) = index.get(&declared.job) {
                resolved.push((
                    i,
                    After {
                        parents,
                        on: declared.on.clone(),
                    },
                ));
            }
        }
        if !ok {
            return false;
        }
        // A parent that is disabled never ends, so its enabled child never
        // fires: said, not refused (disabling a job is how it is paused
        // in the file).
        for declared in &declared {
            self.current = declared.source;
            let enabled = |name: &str| index.get(name).is_some_and(|i| jobs[*i].enabled);
            if !enabled(&declared.job) {
                continue;
            }
            for name in declared.parents.iter().filter(|p| !enabled(p)) {
                self.warn(
                    Some(declared.span.clone()),
                    Some(Scope::Job(&declared.label)),
                    Some("after"),
                    format!(
                        "the job can never fire: after names {name:?}, which is disabled (enabled = false)"
                    ),
                );
            }
        }
        for (i, after) in resolved {
            jobs[i].after = Some(after);
        }
        // Cycles: each job's parents, followed until one comes back.
        let parents_of = |job: &str| -> Vec<String> {
            index
                .get(job)
                .and_then(|i| jobs[*i].after.as_ref())
                .map(After::names)
                .unwrap_or_default()
        };
        let mut reported: Vec<String> = Vec::new();
        for declared in &declared {
            self.current = declared.source;
            if let Some(cycle) = cycle_from(&declared.job, &parents_of)
                && !cycle.iter().any(|job| reported.contains(job))
            {
                reported.extend(cycle.iter().cloned());
                let mut shown = cycle.clone();
                shown.push(cycle[0].clone());
                self.report(
                    Some(declared.span.clone()),
                    Some(Scope::Job(&declared.label)),
                    Some("after"),
                    format!(
                        "the jobs run after each other in a cycle, so none would ever run: {}",
                        shown.join(" → ")
                    ),
                );
                ok = false;
            }
        }
        if !ok {
            return false;
        }
        // A fan-in: its parents must share an instant.
        let now = Utc::now();
        for declared in declared.iter().filter(|d| d.parents.len() > 1) {
            self.current = declared.source;
            let jobs_ref: &[Job] = jobs;
            let shared = first_shared(&declared.parents, jobs_ref, &index, now);
            if let Err(why) = shared {
                self.report(
                    Some(declared.span.clone()),
                    Some(Scope::Job(&declared.label)),
                    Some("after"),
                    why,
                );
                ok = false;
            }
        }
        ok
    }
}

/// A cycle through `job`, following `parents_of`, if there is one: the
/// jobs on it, starting at `job`.
fn cycle_from(job: &str, parents_of: &dyn Fn(&str) -> Vec<String>) -> Option<Vec<String>> {
    fn walk(
        at: &str,
        start: &str,
        path: &mut Vec<String>,
        seen: &mut Vec<String>,
        parents_of: &dyn Fn(&str) -> Vec<String>,
    ) -> bool {
        for parent in parents_of(at) {
            if parent == start {
                return true;
            }
            if seen.contains(&parent) {
                continue;
            }
            seen.push(parent.clone());
            path.push(parent.clone());
            if walk(&parent, start, path, seen, parents_of) {
                return true;
            }
            path.pop();
        }
        false
    }
    let mut path = vec![job.to_string()];
    let mut seen = Vec::new();
    walk(job, job, &mut path, &mut seen, parents_of).then_some(path)
}

/// The first instant within a year that every one of `parents` has, or
/// why there is none.
fn first_shared(
    parents: &[String],
    jobs: &[Job],
    index: &HashMap<String, usize>,
    now: DateTime<Utc>,
) -> Result<DateTime<Utc>, String> {
    let job = |name: &str| index.get(name).map(|i| &jobs[*i]);
    for name in parents {
        if job(name).is_some_and(|j| j.schedule.is_manual()) {
            return Err(format!(
                "after names {name:?} among several parents: a @manual job's instants are when it is \
                 triggered, which no other parent shares"
            ));
        }
    }
    let end = now + SHARED_WITHIN;
    let mut cursor = now;
    for _ in 0..SHARED_SCAN {
        let Some(next) = next_instant(&parents[0], jobs, index, cursor, 0) else {
            break;
        };
        if next > end {
            break;
        }
        if parents[1..]
            .iter()
            .all(|other| is_instant_of(other, jobs, index, next, 0))
        {
            return Ok(next);
        }
        cursor = next;
    }
    Err(format!(
        "its parents {} share no instant in the next year: a fan-in runs for an instant at which every \
         parent ran",
        parents
            .iter()
            .map(|p| format!("{p:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// The next `count` instants after `from` of `job` of `jobs` (a
/// dependent job's: those its parents share), as `check` lists them.
pub(crate) fn upcoming(
    jobs: &[Job],
    job: &str,
    from: DateTime<Utc>,
    count: usize,
) -> Vec<DateTime<Utc>> {
    let index: HashMap<String, usize> = jobs
        .iter()
        .enumerate()
        .map(|(i, job)| (job.name.to_string(), i))
        .collect();
    let mut instants = Vec::new();
    let mut cursor = from;
    while instants.len() < count {
        match next_instant(job, jobs, &index, cursor, 0) {
            Some(next) => {
                instants.push(next);
                cursor = next;
            }
            None => break,
        }
    }
    instants
}

/// How deep a chain of dependent jobs is followed.
const MAX_DEPTH: usize = 32;

/// The next instant of job `name` after `after`: its schedule's, or, for
/// a dependent job, the next its parents all have.
fn next_instant(
    name: &str,
    jobs: &[Job],
    index: &HashMap<String, usize>,
    after: DateTime<Utc>,
    depth: usize,
) -> Option<DateTime<Utc>> {
    let job = &jobs[*index.get(name)?];
    let Some(dependent) = job.after.as_ref().filter(|_| depth < MAX_DEPTH) else {
        return job.schedule.next_after(after);
    };
    let names = dependent.names();
    let mut cursor = after;
    for _ in 0..SHARED_SCAN {
        let next = next_instant(&names[0], jobs, index, cursor, depth + 1)?;
        if names[1..]
            .iter()
            .all(|other| is_instant_of(other, jobs, index, next, depth + 1))
            && job.schedule.excluded(next).is_none()
        {
            return Some(next);
        }
        cursor = next;
    }
    None
}

/// Whether `at` is an instant of job `name`.
fn is_instant_of(
    name: &str,
    jobs: &[Job],
    index: &HashMap<String, usize>,
    at: DateTime<Utc>,
    depth: usize,
) -> bool {
    next_instant(name, jobs, index, at - TimeDelta::milliseconds(1), depth) == Some(at)
}

#[cfg(test)]
mod tests {
    use super::cycle_from;

    fn graph(edges: &[(&str, &[&str])]) -> impl Fn(&str) -> Vec<String> {
        let edges: Vec<(String, Vec<String>)> = edges
            .iter()
            .map(|(job, parents)| {
                (
                    job.to_string(),
                    parents.iter().map(|p| p.to_string()).collect(),
                )
            })
            .collect();
        move |job| {
            edges
                .iter()
                .find(|(j, _)| j == job)
                .map(|(_, p)| p.clone())
                .unwrap_or_default()
        }
    }

    #[test]
    fn cycles_are_found_and_named_in_order() {
        let chain = graph(&[("b", &["a"]), ("c", &["b"])]);
        assert_eq!(cycle_from("c", &chain), None);
        let ring = graph(&[("a", &["c"]), ("b", &["a"]), ("c", &["b"])]);
        assert_eq!(
            cycle_from("a", &ring),
            Some(vec!["a".to_string(), "c".to_string(), "b".to_string()])
        );
        // A diamond is no cycle; one edge back makes one.
        let diamond = graph(&[("b", &["a"]), ("c", &["a"]), ("d", &["b", "c"])]);
        assert_eq!(cycle_from("d", &diamond), None);
        let back = graph(&[
            ("a", &["d"]),
            ("b", &["a"]),
            ("c", &["a"]),
            ("d", &["b", "c"]),
        ]);
        assert_eq!(
            cycle_from("d", &back),
            Some(vec!["d".to_string(), "b".to_string(), "a".to_string()])
        );
        // A cycle the job only leads into is not its own.
        let into = graph(&[("x", &["a"]), ("a", &["b"]), ("b", &["a"])]);
        assert_eq!(cycle_from("x", &into), None);
    }
}
