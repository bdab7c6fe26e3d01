//! Runs as a job's `user` and `group`: the names resolved on this host, the
//! switch made in the child before it execs, and the capabilities the
//! switch needs, checked before a daemon that lacks them starts.

use nix::unistd::{Gid, Group, Uid, User};

use crate::config::{Config, ConfigError, Diagnostic, RunAs};

/// A job's user, resolved on this host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Switch {
    /// The user's name (for `USER`, `LOGNAME` and its groups).
    pub(crate) name: String,
    /// Its id.
    pub(crate) uid: Uid,
    /// The group to run as: `group`, else the user's primary group.
    pub(crate) gid: Gid,
    /// The user's supplementary groups (as `initgroups` would set them).
    pub(crate) groups: Vec<Gid>,
    /// Its home, for `HOME` and the working directory.
    pub(crate) home: std::path::PathBuf,
}

/// The capability bits of `CAP_SETGID` and `CAP_SETUID`.
const CAP_SETGID: u32 = 6;
const CAP_SETUID: u32 = 7;

/// Why a job's user could not be resolved on this host (each message
/// holds its cause's).
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unresolved {
    /// No such user or group (`kind`) here.
    #[error("no {kind} {name:?} on this host")]
    Missing { kind: &'static str, name: String },
    /// The lookup itself failed.
    #[error("cannot look up {kind} {name:?}: {error}")]
    Lookup {
        kind: &'static str,
        name: String,
        error: nix::Error,
    },
    /// The user's name cannot be passed to the C library.
    #[error("user name {0:?} holds a NUL")]
    Nul(String),
    /// The user's supplementary groups could not be listed.
    #[error("cannot list the groups of {name:?}: {error}")]
    Groups { name: String, error: nix::Error },
}

/// `name` of `kind` ("user" or "group"), as `found` by name or id.
fn found<T>(
    kind: &'static str,
    name: &str,
    found: nix::Result<Option<T>>,
) -> Result<T, Unresolved> {
    let name = name.to_string();
    match found {
        Ok(Some(found)) => Ok(found),
        Ok(None) => Err(Unresolved::Missing { kind, name }),
        Err(error) => Err(Unresolved::Lookup { kind, name, error }),
    }
}

/// A user (name or id) of this host.
fn find_user(user: &str) -> Result<User, Unresolved> {
    let looked_up = match user.parse::<u32>() {
        Ok(id) => User::from_uid(Uid::from_raw(id)),
        Err(_) => User::from_name(user),
    };
    found("user", user, looked_up)
}

/// A group (name or id) of this host.
fn find_group(group: &str) -> Result<Group, Unresolved> {
    let looked_up = match group.parse::<u32>() {
        Ok(id) => Group::from_gid(Gid::from_raw(id)),
        Err(_) => Group::from_name(group),
    };
    found("group", group, looked_up)
}

/// Resolves `run_as` on this host.
pub(crate) fn resolve(run_as: &RunAs) -> Result<Switch, Unresolved> {
    let user = find_user(&run_as.user)?;
    let gid = match &run_as.group {
        Some(group) => find_group(group)?.gid,
        None => user.gid,
    };
    let name = std::ffi::CString::new(user.name.as_bytes())
        .map_err(|_| Unresolved::Nul(user.name.clone()))?;
    let groups =
        nix::unistd::getgrouplist(&name, user.gid).map_err(|error| Unresolved::Groups {
            name: user.name.clone(),
            error,
        })?;
    Ok(Switch {
        name: user.name,
        uid: user.uid,
        gid,
        groups,
        home: user.dir,
    })
}

/// Why this process cannot switch users, if it cannot: it needs both
/// `CAP_SETUID` and `CAP_SETGID` in its effective set (root has them unless
/// a unit or container took them away).
fn cannot_switch() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let effective = status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok());
    let has = |cap: u32| effective.is_some_and(|bits| bits & (1 << cap) != 0);
    let missing: Vec<&str> = [(CAP_SETUID, "CAP_SETUID"), (CAP_SETGID, "CAP_SETGID")]
        .into_iter()
        .filter(|(cap, _)| !has(*cap))
        .map(|(_, name)| name)
        .collect();
    (!missing.is_empty()).then(|| {
        let who = if Uid::effective().is_root() {
            "replicron runs as root, but its unit or container took".to_string()
        } else {
            format!("replicron runs as uid {}, which lacks", Uid::effective())
        };
        format!(
            "{who} {}: install systemd/replicron.service.d/users.conf, the unit drop-in that keeps them",
            missing.join(" and ")
        )
    })
}

/// What only this host can tell of `config`, for a process that runs the jobs
/// (`run`, `check`, `trigger`): each `user` and `group` exists here, and
/// this process may switch to them (`CAP_SETUID` and `CAP_SETGID`).
pub(crate) fn check_host(config: &Config) -> Result<(), ConfigError> {
    let cannot_switch = cannot_switch();
    let mut diagnostics = Vec::new();
    for job in &config.jobs {
        let Some(run_as) = &job.run_as else {
            continue;
        };
        let problem = match resolve(run_as) {
            Err(e) => Some(e.to_string()),
            Ok(_) => cannot_switch.as_ref().map(|why| {
                format!(
                    "its runs are to switch to user {:?}, but {why}",
                    run_as.user
                )
            }),
        };
        if let Some(message) = problem {
            diagnostics.push(Diagnostic {
                file: config.job_files.get(&*job.name).cloned(),
                line: run_as.line,
                job: Some(format!("{:?}", job.name)),
                key: Some("user".to_string()),
                message,
            });
        }
    }
    if diagnostics.is_empty() {
        Ok(())
    } else {
        Err(ConfigError {
            path: config.path.clone(),
            diagnostics,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_as(user: &str, group: Option<&str>) -> RunAs {
        RunAs {
            user: user.to_string(),
            group: group.map(str::to_string),
            line: None,
        }
    }

    #[test]
    fn users_and_groups_resolve_by_name_or_id() {
        let root = resolve(&run_as("root", None)).expect("root");
        assert_eq!((root.uid.as_raw(), root.gid.as_raw()), (0, 0));
        assert_eq!(root.home, std::path::PathBuf::from("/root"));
        let by_id = resolve(&run_as("0", Some("0"))).expect("uid 0");
        assert_eq!(by_id.name, "root");
        let nobody = resolve(&run_as("nobody", Some("root"))).expect("nobody");
        assert_eq!(nobody.gid.as_raw(), 0);
        assert!(nobody.groups.iter().all(|g| g.as_raw() != 0), "{nobody:?}");
        let says = |run_as: RunAs| resolve(&run_as).map_err(|e| e.to_string());
        assert_eq!(
            says(run_as("no-such-user", None)),
            Err("no user \"no-such-user\" on this host".to_string())
        );
        assert_eq!(
            says(run_as("root", Some("no-such-group"))),
            Err("no group \"no-such-group\" on this host".to_string())
        );
    }

    #[test]
    fn root_may_switch_users() {
        if Uid::effective().is_root() {
            assert_eq!(cannot_switch(), None);
        } else {
            let why = cannot_switch().expect("a user without capabilities cannot switch");
            assert!(
                why.contains("CAP_SETUID") && why.contains("CAP_SETGID"),
                "{why}"
            );
        }
    }
}
