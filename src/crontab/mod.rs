//! `replicron import-crontab`: crontabs turned into one replicron TOML file.
//!
//! Reads user crontabs and system crontabs (`/etc/crontab`, `/etc/cron.d/*`,
//! with a user column between the schedule and the command), one file or
//! many, merged into one config with one `[defaults]` and job names unique
//! across the files. Per file, as cron reads it: comments, environment
//! lines (`SHELL` and `CRON_TZ` become the shell and time zone of the jobs
//! below them, `MAILTO` (with `MAILFROM`) a `notify` command that mails it,
//! anything else, `TZ` included, the jobs' `env`), 5-field lines and `@`
//! macros, in lower case as cron spells them. Every schedule is parsed as
//! `replicron check` parses it, in the zone it runs in, so the output passes
//! `check` and fires at the instants cron fired. Jobs without a zone of
//! their own ran in the host's zone, which `[defaults]` keeps. The file's
//! comments, commented-out jobs among them, are carried over as TOML
//! comments above the job below them.
//!
//! What cannot be carried over is reported, line by line, as a [`Note`]:
//! `@reboot`, a command using crontab's `%` (stdin), an invalid schedule, a
//! macro cron would not read, a user other than the one importing, a
//! `MAILTO` with no mail program to send it, a file cron would refuse for
//! its owner or mode, and every guess the importer was not sure of. A file
//! that is not a crontab at all (an anacrontab, a script) is refused as a
//! whole, so that nothing half-right is printed; one found in a folder is
//! skipped with a note, and the folder's other files are imported.
//!
//! The work is split: [`files`] finds the files as cron would (a folder's
//! entries, skipping what cron skips), [`host`] reads what the host says
//! (its zone, its users, its mail program), `detect` recognises what a file
//! is, whether it has a user column and whether cron would trust it, `name`
//! turns commands into job names and `mail` makes `MAILTO`'s command.
//! Everything past [`files`] and [`host`] is pure, so that tests decide what
//! the host looks like.

pub(crate) mod files;
pub(crate) mod host;

mod detect;
mod mail;
mod name;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

use chrono_tz::Tz;

pub(crate) use self::host::Host;
use crate::schedule::Schedule;

/// A finding that did not carry over as it was, or that the importer was
/// not sure of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Note {
    /// The file it is about, as it was named; `None` for the whole import.
    pub file: Option<String>,
    /// 1-based line; `None` for the whole file.
    pub line: Option<usize>,
    /// What happened.
    pub message: String,
}

impl Note {
    fn at(file: &str, line: usize, message: impl Into<String>) -> Note {
        Note {
            file: Some(file.to_string()),
            line: Some(line),
            message: message.into(),
        }
    }

    fn file(file: &str, message: impl Into<String>) -> Note {
        Note {
            file: Some(file.to_string()),
            line: None,
            message: message.into(),
        }
    }
}

/// `file:line: message`, as compilers write them.
impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.file, self.line) {
            (Some(file), Some(line)) => write!(f, "{file}:{line}: {}", self.message),
            (Some(file), None) => write!(f, "{file}: {}", self.message),
            (None, _) => write!(f, "replicron: {}", self.message),
        }
    }
}

/// One crontab to import.
#[derive(Clone, Debug)]
pub(crate) struct Source {
    /// How notes and comments name it: the path as given, or `stdin`.
    pub name: String,
    /// Its text.
    pub text: String,
    /// Its owner and mode, if it was read from a file.
    pub stat: Option<Stat>,
    /// Found in a folder rather than named: if it is not a crontab, it is
    /// skipped with a note instead of refusing the whole import.
    pub in_folder: bool,
}

impl Source {
    /// A crontab named on its own, with no file behind it (standard input).
    pub(crate) fn new(name: &str, text: &str) -> Source {
        Source {
            name: name.to_string(),
            text: text.to_string(),
            stat: None,
            in_folder: false,
        }
    }
}

/// What cron checks of a crontab's file before it reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stat {
    /// The owner's id.
    pub uid: u32,
    /// The permission bits (`0o644`).
    pub mode: u32,
    /// The owner of the symbolic link it was reached through, if it was.
    pub link_uid: Option<u32>,
}

/// The result of an import.
#[derive(Clone, Debug, Default)]
pub(crate) struct Import {
    /// The TOML text.
    pub toml: String,
    /// The part of it before its jobs (comments) and their `[defaults]`.
    pub head: String,
    pub defaults: String,
    /// Each imported crontab's name and its jobs' `[[job]]` tables, as a
    /// file `include` reads.
    pub files: Vec<(String, String)>,
    /// What did not carry over, changed meaning, or was guessed.
    pub notes: Vec<Note>,
    /// How many jobs were written.
    pub jobs: usize,
}

/// Why nothing was imported.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ImportError {
    /// A file that is not a crontab; `what` says what it is.
    #[error("{file}: {what}")]
    NotACrontab {
        /// The file, as named.
        file: String,
        /// What it is instead, and what to do.
        what: String,
    },
    /// Nothing to import: only folders without crontabs were named.
    #[error("{named}: no crontab to import: no file there that cron would read")]
    Nothing {
        /// The files and folders, as named.
        named: String,
        /// What was found in them instead (files skipped, and why).
        notes: Vec<Note>,
    },
    /// A file or folder that could not be read.
    #[error("reading {path}: {error}")]
    Read {
        /// The path, as named.
        path: String,
        /// Why.
        error: std::io::Error,
    },
}

/// Converts `sources` into one config. `user_column` forces (or rules out)
/// the user column in every file; `None` decides per file from its content
/// and path. With `system_on_every`, the jobs of system crontabs (the files
/// with a user column: `/etc/crontab`, `/etc/cron.d`) run on every replica,
/// their `@reboot` lines included. `host` says what cron's host looked like:
/// its zone and users.
pub(crate) fn import(
    sources: &[Source],
    user_column: Option<bool>,
    system_on_every: bool,
    host: &Host,
) -> Result<Import, ImportError> {
    let parsed: Vec<Vec<Line<'_>>> = sources.iter().map(|s| parse(&s.text)).collect();
    let mut out = Import::default();
    // Refused before anything is written: one anacrontab among the files
    // named stops the whole import rather than leaving its jobs out
    // quietly. One found in a folder is only skipped, and said so: a
    // folder's other files are what cron ran.
    let mut refused = Vec::with_capacity(sources.len());
    for (source, lines) in sources.iter().zip(&parsed) {
        match detect::refuse(&source.name, &source.text, lines) {
            Ok(()) => refused.push(false),
            Err(ImportError::NotACrontab { what, .. }) if source.in_folder => {
                out.notes.push(Note::file(
                    &source.name,
                    format!("skipped, the folder's other files are imported: {what}"),
                ));
                refused.push(true);
            }
            Err(error) => return Err(error),
        }
    }
    let mut names = name::Names::default();
    let mut jobs = String::new();
    let mut in_host_zone = 0;
    for ((source, lines), _) in sources
        .iter()
        .zip(&parsed)
        .zip(&refused)
        .filter(|(_, refused)| !**refused)
    {
        let column = detect::user_column(&source.name, lines, user_column, host);
        let mut notes: Vec<Note> = column
            .notes
            .iter()
            .map(|(line, message)| Note::at(&source.name, *line, message.clone()))
            .collect();
        if let Some(stat) = &source.stat {
            for warning in detect::trust(&source.name, stat, column.on, host) {
                notes.push(Note::file(&source.name, warning));
            }
        }
        let mut file = FileImport {
            source,
            host,
            user_column: column.on,
            forced: user_column.is_some(),
            every: system_on_every && column.on,
            skip: &column.skip,
            env: BTreeMap::new(),
            shell: None,
            zone: None,
            mail_to: None,
            mail_from: None,
            comments: Vec::new(),
            notes: &mut notes,
            jobs: &mut jobs,
            names: &mut names,
            written: 0,
            in_host_zone: 0,
        };
        let start = file.jobs.len();
        for line in lines {
            file.line(line);
        }
        file.end();
        out.files
            .push((source.name.clone(), file.jobs[start..].to_string()));
        let (written, host_zoned, every) = (file.written, file.in_host_zone, file.every);
        if every && written > 0 {
            notes.push(Note::file(
                &source.name,
                format!(
                    "{written} job(s) run on every replica (run_on = \"every\", from --run-on every): \
                     a system crontab's jobs are each host's own"
                ),
            ));
        }
        if written == 0 && !lines.iter().any(|l| matches!(l.kind, Kind::Job { .. })) {
            let commented = lines
                .iter()
                .filter(
                    |l| matches!(l.kind, Kind::Comment { text, .. } if detect::commented_job(text)),
                )
                .count();
            notes.push(Note::file(
                &source.name,
                if commented > 0 {
                    format!(
                        "no jobs in it: its {commented} commented-out job line(s) are kept as comments"
                    )
                } else {
                    "no jobs in it".to_string()
                },
            ));
        }
        out.jobs += written;
        in_host_zone += host_zoned;
        // Line order, so that a reader can go down the file with the notes.
        notes.sort_by_key(|n| n.line);
        out.notes.extend(notes);
    }
    let zone = &host.zone;
    if in_host_zone > 0 {
        let mut message = format!(
            "{in_host_zone} job(s) set no CRON_TZ, so cron ran them in this host's time zone; \
             [defaults] timezone is set to {} ({}): every replica fires them in that zone, whatever its own",
            zone.zone.name(),
            zone.origin
        );
        for rejected in &zone.rejected {
            let _ = write!(message, "; {rejected}");
        }
        out.notes.insert(
            0,
            Note {
                file: None,
                line: None,
                message,
            },
        );
    }
    let names: Vec<&str> = sources
        .iter()
        .zip(&refused)
        .filter(|(_, refused)| !**refused)
        .map(|(s, _)| s.name.as_str())
        .collect();
    out.head = format!(
        "{}\n\
         # Set the shared database in [database] url, or in REPLICRON_DATABASE_URL:\n\
         # there is deliberately no default.\n\
         # [database]\n\
         # url = \"postgres://replicron:…@db.internal:5432/cron\"\n\n",
        comment(&format!(
            "# Imported from {} by `replicron import-crontab`.",
            names.join(", ")
        )),
    );
    out.defaults = format!(
        "[defaults]\n\
         # cron runs jobs in its host's time zone, replicron in UTC unless told:\n\
         # this is the host's zone ({}).\n\
         # Jobs under a CRON_TZ line carry their own timezone.\n\
         timezone = {}\n",
        zone.origin,
        toml_string(zone.zone.name())
    );
    out.toml = format!("{}{}\n{jobs}", out.head, out.defaults);
    Ok(out)
}

/// One non-blank, non-comment line of a crontab.
#[derive(Clone, Debug)]
struct Line<'a> {
    /// 1-based.
    number: usize,
    /// As written, trimmed.
    raw: &'a str,
    kind: Kind<'a>,
}

#[derive(Clone, Debug)]
enum Kind<'a> {
    /// `# …`, as written; `after_blank` if a blank line is above it.
    Comment { text: &'a str, after_blank: bool },
    /// `NAME=value`.
    Env { key: String, value: String },
    /// A schedule (5 fields or an `@` word) and the rest of the line: the
    /// user, if the file has a user column, and the command.
    Job { schedule: String, rest: &'a str },
    /// `@reboot` and the rest of the line.
    Reboot { rest: &'a str },
    /// An `@` word with a capital letter: cron knows its macros in lower
    /// case only.
    MacroCase { word: &'a str },
    /// Neither: too few fields.
    Malformed,
}

fn parse(text: &str) -> Vec<Line<'_>> {
    let mut lines = Vec::new();
    let mut after_blank = false;
    for (index, raw) in text.lines().enumerate() {
        let raw = raw.trim();
        if raw.is_empty() {
            after_blank = true;
            continue;
        }
        let kind = if raw.starts_with('#') {
            Kind::Comment {
                text: raw,
                after_blank,
            }
        } else if let Some((key, value)) = env_assignment(raw) {
            Kind::Env { key, value }
        } else if raw.starts_with('@') {
            let (word, rest) = split_word(raw);
            if word.chars().any(|c| c.is_ascii_uppercase()) {
                Kind::MacroCase { word }
            } else if word == "@reboot" {
                Kind::Reboot { rest }
            } else if rest.is_empty() {
                Kind::Malformed
            } else {
                Kind::Job {
                    schedule: word.to_string(),
                    rest,
                }
            }
        } else {
            let mut rest = raw;
            let mut fields = Vec::with_capacity(5);
            for _ in 0..5 {
                let (word, tail) = split_word(rest);
                fields.push(word);
                rest = tail;
            }
            if fields.iter().any(|f| f.is_empty()) || rest.is_empty() {
                Kind::Malformed
            } else {
                Kind::Job {
                    schedule: fields.join(" "),
                    rest,
                }
            }
        };
        after_blank = false;
        lines.push(Line {
            number: index + 1,
            raw,
            kind,
        });
    }
    lines
}

/// The macros cron knows, as it spells them.
const CRON_MACROS: &[&str] = &[
    "@reboot",
    "@yearly",
    "@annually",
    "@monthly",
    "@weekly",
    "@daily",
    "@midnight",
    "@hourly",
];

/// The state of one file as its lines are read: cron's environment lines
/// apply to the lines below them, in that file only.
struct FileImport<'a> {
    source: &'a Source,
    host: &'a Host,
    user_column: bool,
    /// `--user-column` decided the column, not the file's lines.
    forced: bool,
    /// Its jobs run on every replica (`--run-on every`, a system crontab).
    every: bool,
    /// Lines the user-column check already reported and left out.
    skip: &'a std::collections::BTreeSet<usize>,
    env: BTreeMap<String, String>,
    shell: Option<String>,
    /// The last `CRON_TZ`: its zone, or why it is not one.
    zone: Option<Result<Tz, String>>,
    /// The addresses of the last `MAILTO`, where they can be mailed.
    mail_to: Option<Vec<String>>,
    /// The last `MAILFROM`.
    mail_from: Option<String>,
    /// Comments read and not yet written: (line, text, a blank line above).
    comments: Vec<(usize, String, bool)>,
    notes: &'a mut Vec<Note>,
    jobs: &'a mut String,
    names: &'a mut name::Names,
    written: usize,
    in_host_zone: usize,
}

impl FileImport<'_> {
    fn note(&mut self, line: usize, message: impl Into<String>) {
        self.notes.push(Note::at(&self.source.name, line, message));
    }

    /// A commented-out copy of a line that is not imported, so that the
    /// TOML still shows every job the crontab had.
    fn left_out(&mut self, line: &Line<'_>, why: &str) {
        self.write_comments();
        let text = comment(&format!(
            "# {}:{} not imported ({why}): {}",
            self.source.name, line.number, line.raw
        ));
        let _ = writeln!(self.jobs, "{text}\n");
    }

    /// The comments read since the last job, above the next one, in file
    /// order; a blank line stays where the file had one between them.
    fn write_comments(&mut self) {
        for (index, (_, text, after_blank)) in self.comments.drain(..).enumerate() {
            if after_blank && index > 0 {
                self.jobs.push('\n');
            }
            let _ = writeln!(self.jobs, "{}", comment(&text));
        }
    }

    /// The comments below the file's last job, under a line that says
    /// where they come from.
    fn end(&mut self) {
        if let Some((first, ..)) = self.comments.first() {
            let from = comment(&format!("# {}, from line {first}:", self.source.name));
            let _ = writeln!(self.jobs, "{from}");
            self.write_comments();
            self.jobs.push('\n');
        }
    }

    fn line(&mut self, line: &Line<'_>) {
        let number = line.number;
        match &line.kind {
            Kind::Comment { text, after_blank } => {
                self.comments
                    .push((number, (*text).to_string(), *after_blank));
            }
            Kind::Env { key, value } => match key.as_str() {
                "SHELL" => self.shell = Some(value.clone()),
                // An empty one gives the jobs below it back to the host's
                // zone. TZ is no zone here: cron hands it to the job and
                // schedules in the system's zone, so it is the jobs' env.
                "CRON_TZ" if value.is_empty() => self.zone = None,
                "CRON_TZ" => {
                    let zone = value.parse::<Tz>().map_err(|_| {
                        format!(
                            "{key}={value:?} is not a time zone replicron knows (expected an IANA name such as \
                             \"Europe/Berlin\"): the jobs below it are not imported"
                        )
                    });
                    if let Err(message) = &zone {
                        self.note(number, message.clone());
                    }
                    self.zone = Some(zone);
                }
                "MAILTO" => self.mail_to(number, value),
                "MAILFROM" => {
                    self.mail_from = (!value.is_empty()).then(|| value.clone());
                    if self.host.mailer.is_none() {
                        self.note(
                            number,
                            format!(
                                "{key}={value:?}: no mail program on this host ({}), so no mail is sent from it",
                                host::MAILERS.join(", ")
                            ),
                        );
                    }
                }
                // cronie's: start each job up to that many minutes late.
                "RANDOM_DELAY" => self.note(
                    number,
                    format!(
                        "{key}={value:?}: replicron fires on the schedule itself, with no random delay"
                    ),
                ),
                _ => {
                    self.env.insert(key.clone(), value.clone());
                }
            },
            Kind::Reboot { rest } if self.every => self.job(line, "@reboot", rest),
            Kind::Reboot { rest } => {
                self.note(
                    number,
                    format!(
                        "@reboot is not carried over: it runs once per host start, which only a \
                         run_on = \"every\" job has (import system crontabs with --run-on every): {rest}"
                    ),
                );
                self.left_out(line, "@reboot");
            }
            Kind::MacroCase { word } => {
                let lower = word.to_ascii_lowercase();
                let meant = if CRON_MACROS.contains(&lower.as_str()) {
                    format!(" (write {lower} if that is meant)")
                } else {
                    String::new()
                };
                self.note(
                    number,
                    format!(
                        "{word} is no macro cron knows: it spells them in lower case only, and refuses \
                         the line as a syntax error (Debian's cron then ignores the whole file): \
                         not imported{meant}"
                    ),
                );
                self.left_out(line, "macro not in lower case");
            }
            Kind::Malformed => self.note(
                number,
                "not a crontab line (5 time fields and a command): skipped",
            ),
            Kind::Job { schedule, rest } => self.job(line, schedule, rest),
        }
    }

    fn job(&mut self, line: &Line<'_>, schedule: &str, rest: &str) {
        let number = line.number;
        if self.skip.contains(&number) {
            self.left_out(line, "no user where the user column should be");
            return;
        }
        let zone = match &self.zone {
            None => self.host.zone.zone,
            Some(Ok(zone)) => *zone,
            Some(Err(_)) => {
                self.note(
                    number,
                    "not imported: the CRON_TZ above it is not a known time zone",
                );
                self.left_out(line, "unknown time zone");
                return;
            }
        };
        // The same validation as `replicron check`, in the zone the job
        // runs in, so that the output is a config that loads. A pattern
        // that never matches (`0 0 30 2 *`) is a job cron never ran: it is
        // kept, disabled, so that the line is not lost.
        let never_fires = match Schedule::parse(schedule, zone) {
            Ok(_) => false,
            Err(error) if error.ends_with("never fires") => {
                self.note(
                    number,
                    format!("{error} (cron never ran it): written as a disabled job"),
                );
                true
            }
            Err(error) => {
                self.note(number, format!("{error}: not imported"));
                self.left_out(line, "invalid schedule");
                return;
            }
        };
        let (user, command) = if self.user_column {
            let (user, command) = split_word(rest);
            (Some(user), command)
        } else {
            (None, rest)
        };
        if command.is_empty() {
            self.note(number, "no command: not imported");
            self.left_out(line, "no command");
            return;
        }
        let Some(command) = unescape_percent(command) else {
            self.note(
                number,
                format!(
                    "the command uses crontab's % (input lines), which replicron does not feed: job written commented out: {command}"
                ),
            );
            self.left_out(line, "uses % for stdin");
            return;
        };
        let name = self.names.unique(&name::from_command(&command));
        self.write_comments();
        let _ = writeln!(
            self.jobs,
            "{}",
            comment(&format!("# {}:{}: {}", self.source.name, number, line.raw))
        );
        if let Some(user) = user
            && self.host.me.as_deref() != Some(user)
        {
            let note = if self.host.is_user(user) {
                format!(
                    "runs as user {user}: replicron needs CAP_SETUID and CAP_SETGID for that \
                     (root, or the unit's users.conf drop-in)"
                )
            } else if self.forced {
                format!(
                    "runs as user {user}, which this host does not have: `check` refuses the job until it exists"
                )
            } else {
                format!(
                    "runs as user {user}, which this host does not have: `check` refuses the job until it exists; \
                     if {user:?} is the command, not a user, pass --user-column=false"
                )
            };
            self.note(number, note);
        }
        let jobs = &mut *self.jobs;
        if never_fires {
            let _ = writeln!(
                jobs,
                "# Its schedule {} never fires, so cron never ran it: kept disabled, as @manual;\n\
                 # give it a schedule that fires and remove `enabled = false` to run it.",
                toml_string(schedule)
            );
        }
        let _ = writeln!(jobs, "[[job]]");
        let _ = writeln!(jobs, "name = {}", toml_string(&name));
        if never_fires {
            let _ = writeln!(jobs, "schedule = \"@manual\"");
            let _ = writeln!(jobs, "enabled = false");
        } else {
            let _ = writeln!(jobs, "schedule = {}", toml_string(schedule));
        }
        let _ = writeln!(jobs, "command = {}", toml_string(&command));
        if self.every {
            let _ = writeln!(jobs, "run_on = \"every\"");
        }
        if let Some(user) = user {
            // As cron ran it: replicron switches to the user (root, or the
            // unit's users.conf drop-in, gives it the capabilities).
            let _ = writeln!(jobs, "user = {}", toml_string(user));
        }
        if self.zone.is_some() {
            let _ = writeln!(jobs, "timezone = {}", toml_string(zone.name()));
        } else {
            self.in_host_zone += 1;
        }
        if let Some(shell) = &self.shell {
            let _ = writeln!(jobs, "shell = {}", toml_string(shell));
        }
        if let (Some(to), Some(mailer)) = (&self.mail_to, &self.host.mailer) {
            // cron mailed its output to MAILTO (from MAILFROM, as set
            // above the line): the same address hears of the run's
            // failure, the output's tail in the body.
            let command = mail::command(mailer, to, self.mail_from.as_deref());
            let _ = writeln!(jobs, "notify = {{ command = {} }}", toml_string(&command));
        }
        if !self.env.is_empty() {
            let pairs: Vec<String> = self
                .env
                .iter()
                .map(|(k, v)| format!("{} = {}", toml_key(k), toml_string(v)))
                .collect();
            let _ = writeln!(jobs, "env = {{ {} }}", pairs.join(", "));
        }
        jobs.push('\n');
        self.written += 1;
    }
}

impl FileImport<'_> {
    /// `MAILTO=value`: the jobs below it mail `value` when a run fails,
    /// through the host's mail program; `MAILTO=""` mails nothing, as in
    /// cron. Without a mail program, said loudly.
    fn mail_to(&mut self, number: usize, value: &str) {
        self.mail_to = None;
        let to = match mail::recipients(value) {
            Ok(to) if to.is_empty() => return,
            Ok(to) => to,
            Err(why) => {
                self.note(
                    number,
                    format!(
                        "warning: MAILTO={value:?} is not carried over: {why}; the jobs below it notify nobody"
                    ),
                );
                return;
            }
        };
        let Some(mailer) = &self.host.mailer else {
            self.note(
                number,
                format!(
                    "warning: MAILTO={value:?} is not carried over: this host has no mail program ({}), \
                     so the jobs below it notify nobody of a failure; install one (an MTA's sendmail, or mail) \
                     and import again, or set [notify] by hand",
                    host::MAILERS.join(", ")
                ),
            );
            return;
        };
        self.note(
            number,
            format!(
                "MAILTO={value:?}: the jobs below it mail {} through {} when a run fails, times out or is missed \
                 (notify.command); cron mailed any output they printed, even a successful run's",
                to.join(", "),
                mailer.path()
            ),
        );
        self.mail_to = Some(to);
    }
}

/// `text` as a TOML comment line: the control characters TOML forbids in
/// comments (all but tab) shown as `\u{fffd}`.
fn comment(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c != '\t' && c.is_control() {
                '\u{fffd}'
            } else {
                c
            }
        })
        .collect()
}

/// `NAME=value` (value optionally quoted), as crontab(5) allows.
fn env_assignment(line: &str) -> Option<(String, String)> {
    let (key, value) = line.split_once('=')?;
    let key = key.trim();
    if key.is_empty()
        || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        || key.starts_with(|c: char| c.is_ascii_digit())
    {
        return None;
    }
    let value = value.trim();
    let value = value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
        .unwrap_or(value);
    Some((key.to_string(), value.to_string()))
}

/// The first whitespace-separated word and what follows it, trimmed.
fn split_word(text: &str) -> (&str, &str) {
    let text = text.trim_start();
    match text.find(char::is_whitespace) {
        Some(end) => (&text[..end], text[end..].trim_start()),
        None => (text, ""),
    }
}

/// `\%` becomes `%`; an unescaped `%` (crontab's stdin) is `None`.
fn unescape_percent(command: &str) -> Option<String> {
    let mut out = String::with_capacity(command.len());
    let mut chars = command.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'%') => {
                out.push('%');
                chars.next();
            }
            '%' => return None,
            c => out.push(c),
        }
    }
    Some(out)
}

fn toml_string(value: &str) -> String {
    toml::Value::String(value.to_string()).to_string()
}

fn toml_key(key: &str) -> String {
    if key
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        key.to_string()
    } else {
        toml_string(key)
    }
}
