//! What the importer needs to know about the host cron ran on: its time
//! zone, its users, its programs, the mail command its `MAILTO` lines can
//! go through, and who is importing.
//!
//! The decisions are pure functions of values ([`host_zone`] takes the `TZ`
//! variable, `/etc/timezone` and the `/etc/localtime` link as arguments), so
//! that tests choose the host; [`Host::from_system`] is the thin layer that
//! reads this host.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use chrono_tz::Tz;

/// Users a Debian or Red Hat system has whether or not `/etc/passwd` here
/// lists them: a crontab from another host names them in its user column.
const SYSTEM_USERS: &[&str] = &[
    "root", "daemon", "bin", "sys", "sync", "games", "man", "lp", "mail", "news", "uucp", "proxy",
    "www-data", "backup", "list", "irc", "gnats", "nobody", "adm", "operator", "ftp", "apache",
    "nginx", "postgres", "mysql", "redis", "postfix", "smmsp", "_apt",
];

/// The zone cron ran jobs in, and where that was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HostZone {
    /// The zone.
    pub zone: Tz,
    /// Where it came from, for the comment and the note (`from
    /// /etc/timezone`, …).
    pub origin: String,
    /// Sources that were set but named no zone replicron knows, each
    /// with why it was passed over.
    pub rejected: Vec<String>,
}

/// The host's zone as cron sees it: the `TZ` variable, else
/// `/etc/timezone`, else the zone the `/etc/localtime` link points to under
/// `zoneinfo/`, else UTC. Each argument is that source's content, or `None`
/// when it is absent.
pub(crate) fn host_zone(
    tz_variable: Option<&str>,
    etc_timezone: Option<&str>,
    localtime_target: Option<&Path>,
) -> HostZone {
    let mut rejected = Vec::new();
    let link = localtime_target.map(|p| p.to_string_lossy().into_owned());
    let candidates = [
        (tz_variable, "the TZ environment variable"),
        (etc_timezone, "/etc/timezone"),
        (link.as_deref(), "the /etc/localtime link"),
    ];
    for (value, origin) in candidates {
        let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) else {
            continue;
        };
        match zone_name(value).and_then(|name| name.parse::<Tz>().ok()) {
            Some(zone) => {
                return HostZone {
                    zone,
                    origin: format!("from {origin}"),
                    rejected,
                };
            }
            None => rejected.push(format!(
                "{origin} says {value:?}, which is no IANA zone name: passed over"
            )),
        }
    }
    HostZone {
        zone: Tz::UTC,
        origin: "by default: neither TZ, /etc/timezone nor /etc/localtime names one".to_string(),
        rejected,
    }
}

/// The IANA name in a `TZ` value, an `/etc/timezone` line or a path into
/// the zone database (`:Europe/Berlin`, `/usr/share/zoneinfo/posix/UTC`).
fn zone_name(value: &str) -> Option<&str> {
    let value = value.strip_prefix(':').unwrap_or(value);
    let name = match value.rsplit_once("zoneinfo/") {
        Some((_, name)) => name,
        None if value.starts_with('/') || value.starts_with('.') => return None,
        None => value,
    };
    let name = name
        .strip_prefix("posix/")
        .or_else(|| name.strip_prefix("right/"))
        .unwrap_or(name);
    (!name.is_empty()).then_some(name)
}

/// A program that sends mail, as `MAILTO` needs one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Mailer {
    /// sendmail(8), which every MTA provides and cron itself uses: the
    /// message, headers included, on its standard input.
    Sendmail(String),
    /// mail(1) or mailx(1): a subject option, the body on standard input.
    Mail(String),
}

impl Mailer {
    /// Its path.
    pub(crate) fn path(&self) -> &str {
        match self {
            Mailer::Sendmail(path) | Mailer::Mail(path) => path,
        }
    }
}

/// Where mail programs are looked for, in order: cron's own sendmail
/// first.
pub(crate) const MAILERS: &[&str] = &[
    "/usr/sbin/sendmail",
    "/usr/lib/sendmail",
    "/usr/bin/mail",
    "/usr/bin/mailx",
];

/// The first of [`MAILERS`] that `exists`.
pub(crate) fn find_mailer(exists: impl Fn(&str) -> bool) -> Option<Mailer> {
    let path = MAILERS.iter().find(|p| exists(p))?.to_string();
    Some(if path.ends_with("/sendmail") {
        Mailer::Sendmail(path)
    } else {
        Mailer::Mail(path)
    })
}

/// What cron's host looked like, as far as an import cares.
#[derive(Clone, Debug)]
pub(crate) struct Host {
    /// The zone jobs without `CRON_TZ` ran in.
    pub zone: HostZone,
    /// Users known here ([`SYSTEM_USERS`] and `/etc/passwd`).
    pub users: BTreeSet<String>,
    /// The ids of the users `/etc/passwd` lists.
    pub uids: BTreeMap<String, u32>,
    /// Asks the system for a user's id (NSS: LDAP, systemd's dynamic
    /// users, …) where the lists above do not have it.
    pub resolve: Option<fn(&str) -> Option<u32>>,
    /// Program names found in the usual `bin` folders.
    pub programs: BTreeSet<String>,
    /// The program `MAILTO` mails through, if the host has one.
    pub mailer: Option<Mailer>,
    /// The user importing, whom a line's own user is compared with.
    pub me: Option<String>,
}

impl Host {
    /// A host in `zone` that knows only [`SYSTEM_USERS`], no programs and
    /// no mail command, and resolves nothing.
    pub(crate) fn new(zone: HostZone) -> Host {
        Host {
            zone,
            users: SYSTEM_USERS.iter().map(|u| u.to_string()).collect(),
            uids: BTreeMap::from([("root".to_string(), 0)]),
            resolve: None,
            programs: BTreeSet::new(),
            mailer: None,
            me: None,
        }
    }

    /// Whether `name` is a user here: listed, or resolved by the system.
    pub(crate) fn is_user(&self, name: &str) -> bool {
        self.users.contains(name) || self.uid(name).is_some()
    }

    /// The id of user `name`, if this host knows it.
    pub(crate) fn uid(&self, name: &str) -> Option<u32> {
        self.uids
            .get(name)
            .copied()
            .or_else(|| self.resolve.and_then(|resolve| resolve(name)))
    }

    /// `uid 1000 (alice)`, or `uid 1000` for an id no listed user has.
    pub(crate) fn describe_uid(&self, uid: u32) -> String {
        match self.uids.iter().find(|(_, id)| **id == uid) {
            Some((name, _)) => format!("uid {uid} ({name})"),
            None => format!("uid {uid}"),
        }
    }

    /// This host: its zone, `/etc/passwd`, `$PATH`'s usual folders and
    /// `$USER`. What cannot be read is left out, never an error: the import
    /// then says it was unsure.
    pub(crate) fn from_system() -> Host {
        let tz = std::env::var("TZ").ok();
        let etc_timezone = std::fs::read_to_string("/etc/timezone").ok();
        let localtime = std::fs::read_link("/etc/localtime").ok();
        let mut host = Host::new(host_zone(
            tz.as_deref(),
            etc_timezone.as_deref(),
            localtime.as_deref(),
        ));
        if let Ok(passwd) = std::fs::read_to_string("/etc/passwd") {
            host.users.extend(passwd_users(&passwd));
            host.uids.extend(passwd_uids(&passwd));
        }
        host.resolve = Some(resolve_user);
        host.mailer = find_mailer(|path| Path::new(path).is_file());
        for dir in [
            "/usr/local/sbin",
            "/usr/local/bin",
            "/usr/sbin",
            "/usr/bin",
            "/sbin",
            "/bin",
        ] {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            host.programs.extend(
                entries
                    .flatten()
                    .filter_map(|e| e.file_name().to_str().map(str::to_string)),
            );
        }
        host.me = std::env::var("USER").ok().filter(|u| !u.is_empty());
        host
    }
}

/// The id of user `name`, as the system's name service says.
fn resolve_user(name: &str) -> Option<u32> {
    nix::unistd::User::from_name(name)
        .ok()
        .flatten()
        .map(|user| user.uid.as_raw())
}

/// The user names of an `/etc/passwd` text, with their ids.
pub(crate) fn passwd_uids(passwd: &str) -> impl Iterator<Item = (String, u32)> + '_ {
    passwd
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut fields = l.split(':');
            let name = fields.next()?;
            let uid = fields.nth(1)?.parse().ok()?;
            (!name.is_empty() && !name.starts_with(['+', '-'])).then(|| (name.to_string(), uid))
        })
}

/// The user names of an `/etc/passwd` text.
pub(crate) fn passwd_users(passwd: &str) -> impl Iterator<Item = String> + '_ {
    passwd
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(':').next())
        .filter(|name| !name.is_empty() && !name.starts_with('+') && !name.starts_with('-'))
        .map(str::to_string)
}
