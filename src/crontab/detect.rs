//! What a file is, from what it says rather than where it lies: a crontab
//! or not (an anacrontab, a script), whether its lines name a user between
//! the schedule and the command (`/etc/crontab`, `/etc/cron.d/*`), and
//! whether cron would have trusted it (its owner and mode).
//!
//! The user column is judged from the sixth field of every line: a user of
//! the host, or a name that could be one with a command after it, is
//! evidence for it, a path, an option or a shell word evidence against; the
//! same word on every line, or a path such as `…/cron.d/x`, decides when
//! the words say nothing. Every line where the judgement was a guess gets a
//! note that says so and how to force it; a word that could be a user is
//! never read as the command without one.

use std::collections::BTreeSet;
use std::path::Path;

use super::{Host, ImportError, Kind, Line, Stat, name, split_word};

/// anacrontab(5)'s variables that crontabs do not have.
const ANACRON_ONLY: &[&str] = &["START_HOURS_RANGE"];

/// Refuses a file that is not a crontab, saying what it is.
pub(super) fn refuse(file: &str, text: &str, lines: &[Line<'_>]) -> Result<(), ImportError> {
    let not_a_crontab = |what: String| ImportError::NotACrontab {
        file: file.to_string(),
        what,
    };
    let commands: Vec<&Line<'_>> = lines
        .iter()
        .filter(|l| !matches!(l.kind, Kind::Env { .. } | Kind::Comment { .. }))
        .collect();
    let anacron: Vec<&&Line<'_>> = commands.iter().filter(|l| anacron_line(l.raw)).collect();
    let anacron_variable = lines
        .iter()
        .find(|l| matches!(&l.kind, Kind::Env { key, .. } if ANACRON_ONLY.contains(&key.as_str())));
    if let Some(first) = anacron.first()
        && (anacron.len() * 2 >= commands.len() || anacron_variable.is_some())
    {
        let variable = anacron_variable
            .map(|l| format!("; {} is set on line {}", l.raw, l.number))
            .unwrap_or_default();
        return Err(not_a_crontab(format!(
            "this is an anacrontab, not a crontab: line {} `{}` is anacron's `period delay job-identifier command`{variable}. \
             anacron runs each job once per period whenever the host is up, which no schedule says; \
             write its jobs as [[job]] entries by hand (a period of 1 is @daily, 7 is @weekly, @monthly is @monthly), \
             with catch_up if a missed run must still happen",
            first.number,
            words(first.raw)
        )));
    }
    if let Some(first) = commands.first()
        && !commands.iter().any(|l| starts_with_schedule(l.raw))
    {
        let script = if text.starts_with("#!") {
            " (it starts with #!: a script?)"
        } else {
            ""
        };
        return Err(not_a_crontab(format!(
            "not a crontab: no line starts with a schedule (5 time fields or an @ word){script}; \
             line {} is `{}`",
            first.number,
            words(first.raw)
        )));
    }
    Ok(())
}

/// `1 5 cron.daily run-parts …`, `@monthly 15 id cmd`: a period, a delay in
/// minutes, an identifier that is no day of the month, and a command.
fn anacron_line(raw: &str) -> bool {
    let fields: Vec<&str> = raw.split_whitespace().take(4).collect();
    let [period, delay, identifier, _command] = fields.as_slice() else {
        return false;
    };
    let digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    (digits(period)
        || matches!(
            *period,
            "@daily" | "@weekly" | "@monthly" | "@yearly" | "@annually"
        ))
        && digits(delay)
        && !identifier.contains('/')
        && identifier
            .chars()
            .any(|c| !c.is_ascii_digit() && !"*,-?LW#".contains(c))
}

fn starts_with_schedule(raw: &str) -> bool {
    let (first, _) = split_word(raw);
    first.starts_with('@')
        || (!first.is_empty()
            && first
                .chars()
                .all(|c| c.is_ascii_digit() || "*,/-".contains(c)))
}

/// Whether a comment is a job line commented out: `#30 2 * * sat …`,
/// `# @daily …`.
pub(super) fn commented_job(comment: &str) -> bool {
    let line = comment.trim_start_matches('#').trim();
    let words: Vec<&str> = line.split_whitespace().take(6).collect();
    match words.first() {
        Some(first) if first.starts_with('@') => {
            first.len() > 1
                && first[1..].chars().all(|c| c.is_ascii_alphabetic())
                && words.len() >= 2
        }
        Some(_) => {
            words.len() == 6
                && words[..5].iter().all(|w| {
                    w.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "*,/-".contains(c))
                })
                && starts_with_schedule(line)
        }
        None => false,
    }
}

/// A line as one line of text, for messages.
fn words(raw: &str) -> String {
    raw.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether a file's lines have a user column, and what was unsure.
#[derive(Debug, Default)]
pub(super) struct UserColumn {
    /// The sixth field is the user.
    pub on: bool,
    /// By line: where the judgement was a guess, or a line that does not
    /// fit it.
    pub notes: Vec<(usize, String)>,
    /// Lines that have no user where the column says one is: reported in
    /// `notes`, not imported.
    pub skip: BTreeSet<usize>,
}

/// What a line's sixth field looks like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sixth {
    /// A user of this host.
    User,
    /// A user of this host that is also a program here (`mail`, `man`).
    UserAndProgram,
    /// Could be a user name, but no user or program here, and a command
    /// follows it (`Debian-exim [ -x … ]`, `munin if …`).
    Likely,
    /// Could be a user name, but no user or program here.
    Unknown,
    /// Not a user: a path, a shell word, a program with an option after
    /// it, or the last word of the line.
    Command,
}

/// `min hour dom mon dow USER command` or `min hour dom mon dow command`,
/// for the lines of `file`. `forced` is `--user-column`.
pub(super) fn user_column(
    file: &str,
    lines: &[Line<'_>],
    forced: Option<bool>,
    host: &Host,
) -> UserColumn {
    let rows: Vec<(usize, &str, &str)> = lines
        .iter()
        .filter_map(|l| match l.kind {
            Kind::Job { rest, .. } | Kind::Reboot { rest } => {
                let (word, after) = split_word(rest);
                Some((l.number, word, after))
            }
            _ => None,
        })
        .collect();
    let mut out = UserColumn::default();
    if let Some(on) = forced {
        out.on = on;
        if on {
            for &(line, word, after) in &rows {
                if !(user_like(word) || host.is_user(word)) || after.is_empty() {
                    out.skip.insert(line);
                    out.notes.push((
                        line,
                        format!(
                            "--user-column=true, but {word:?} is no user name followed by a command: not imported"
                        ),
                    ));
                }
            }
        }
        return out;
    }
    let classes: Vec<Sixth> = rows
        .iter()
        .map(|&(_, word, after)| classify(word, after, host))
        .collect();
    let count = |class: Sixth| classes.iter().filter(|c| **c == class).count();
    let (users, likely, both, commands) = (
        count(Sixth::User),
        count(Sixth::Likely),
        count(Sixth::UserAndProgram),
        count(Sixth::Command),
    );
    let hint = path_hint(file);
    let same_word =
        rows.len() >= 2 && rows.iter().all(|r| r.1 == rows[0].1) && user_like(rows[0].1);
    let (on, reason) = if users > 0 && users + likely + both >= commands {
        (true, "other lines name users of this host")
    } else if likely > 0 && likely + both >= commands {
        (true, "a command follows a user name there")
    } else if commands > 0 {
        (false, "most lines have a command there")
    } else if hint == Some(true) {
        (true, "the file's path is a system crontab's")
    } else if same_word && both == 0 {
        (true, "every line has the same word there")
    } else {
        (false, "no line names a user of this host")
    };
    out.on = on;
    for (&(line, word, after), class) in rows.iter().zip(&classes) {
        let message = match (on, class) {
            // A name with a command after it: the job's note says that it
            // is no user here, and how to read it as the command.
            (true, Sixth::User | Sixth::Likely) | (false, Sixth::Command) => continue,
            (true, Sixth::Command) if !user_like(word) || after.is_empty() => {
                out.skip.insert(line);
                format!(
                    "expected a user after the schedule ({reason}), found {word:?}: not imported; \
                     if the file has no user column, pass --user-column=false"
                )
            }
            (true, Sixth::Command) => format!(
                "{word:?} is taken as the user ({reason}), though it looks like a command; \
                 if the file has no user column, pass --user-column=false"
            ),
            (true, Sixth::UserAndProgram) if users > 0 => continue,
            (true, Sixth::UserAndProgram) => format!(
                "{word:?} is taken as the user ({reason}); it is also a program here: \
                 if it is the command, pass --user-column=false"
            ),
            (true, Sixth::Unknown) => format!(
                "{word:?} is taken as the user ({reason}), but is no user of this host; \
                 if it is the command, pass --user-column=false"
            ),
            (false, Sixth::User) => format!(
                "{word:?} is a user of this host, but is read as the command ({reason}); \
                 if it is the user, pass --user-column=true"
            ),
            (false, Sixth::Likely) => format!(
                "{word:?} could be a user, and a command follows it, but it is read as the command \
                 ({reason}); if it is the user, pass --user-column=true"
            ),
            (false, Sixth::UserAndProgram | Sixth::Unknown) if commands > 0 => continue,
            (false, Sixth::UserAndProgram | Sixth::Unknown) => format!(
                "{word:?} is read as the command ({reason}); if it is the user (a system \
                 crontab's user column), pass --user-column=true"
            ),
        };
        out.notes.push((line, message));
    }
    out
}

fn classify(word: &str, after: &str, host: &Host) -> Sixth {
    let is_user = host.is_user(word);
    if after.is_empty()
        || after.starts_with(['-', '>', '<', '|', '&', ';'])
        || !(is_user || user_like(word))
        || name::is_shell_word(word)
        || script(word)
    {
        Sixth::Command
    } else if is_user {
        if host.programs.contains(word) {
            Sixth::UserAndProgram
        } else {
            Sixth::User
        }
    } else if host.programs.contains(word) {
        Sixth::Command
    } else {
        let (next, _) = split_word(after);
        if name::is_shell_word(next) || host.programs.contains(next) {
            Sixth::Likely
        } else {
            Sixth::Unknown
        }
    }
}

/// `backup.sh`, `report.py`: a script, never a user.
fn script(word: &str) -> bool {
    [".sh", ".bash", ".py", ".pl", ".rb", ".php", ".js"]
        .iter()
        .any(|ext| word.ends_with(ext))
}

/// Could be a user name: every name Debian creates or lets an
/// administrator create (`useradd` takes letters of either case, digits,
/// `_`, `-` and `.`, as `Debian-exim` and `first.last`, with the `$` of
/// machine accounts), up to 32 characters, starting with a letter or `_`.
/// A name the host resolves counts whatever its shape.
pub(super) fn user_like(word: &str) -> bool {
    let name = word.strip_suffix('$').unwrap_or(word);
    (1..=32).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// What Debian's cron would say of a file's owner and mode before reading
/// it, each a warning: it refuses a system crontab (`system`: one with a
/// user column) that root does not own, that is reached through a link
/// root does not own, or that group or others may write; and a user's
/// crontab in its spool (`…/crontabs/NAME`) that NAME does not own or
/// whose mode is not 0600. Elsewhere a user's crontab is a copy, whose
/// owner says nothing: only a world-writable one is warned of.
pub(super) fn trust(file: &str, stat: &Stat, system: bool, host: &Host) -> Vec<String> {
    let mut warnings = Vec::new();
    let mode = stat.mode & 0o7777;
    let refused = "so if cron read this file, it ran none of its jobs; imported all the same: check what it says";
    if system {
        if let Some(link) = stat.link_uid.filter(|uid| *uid != 0) {
            warnings.push(format!(
                "warning: reached through a symbolic link owned by {}, not root: cron refuses it \
                 (WRONG SYMLINK OWNER), {refused}",
                host.describe_uid(link)
            ));
        }
        if stat.uid != 0 {
            warnings.push(format!(
                "warning: owned by {}, not root: cron refuses a system crontab that root does not own \
                 (WRONG FILE OWNER), {refused}",
                host.describe_uid(stat.uid)
            ));
        }
        if mode & 0o022 != 0 {
            warnings.push(format!(
                "warning: mode {mode:04o}, writable by {}: cron refuses a system crontab that others can write \
                 (INSECURE MODE), {refused}",
                writable_by(mode)
            ));
        }
        return warnings;
    }
    if path_hint(file) == Some(false) {
        let user = Path::new(file)
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if let Some(uid) = host.uid(user)
            && stat.uid != uid
        {
            warnings.push(format!(
                "warning: owned by {}, not by {user} whose crontab it is: cron refuses it (WRONG FILE OWNER), \
                 {refused}",
                host.describe_uid(stat.uid)
            ));
        }
        if mode != 0o600 {
            warnings.push(format!(
                "warning: mode {mode:04o}, where cron reads a crontab in its spool only at 0600 \
                 (INSECURE MODE), {refused}"
            ));
        }
    } else if mode & 0o002 != 0 {
        warnings.push(format!(
            "warning: mode {mode:04o}, writable by anyone: cron refuses a crontab that others can write, \
             and anyone could have changed this one: check what it says"
        ));
    }
    warnings
}

/// `group`, `others` or `group and others`.
fn writable_by(mode: u32) -> &'static str {
    match (mode & 0o020 != 0, mode & 0o002 != 0) {
        (true, true) => "group and others",
        (true, false) => "its group",
        _ => "others",
    }
}

/// What the path says: a file called `crontab` or in a `cron.d` folder is a
/// system crontab, one in a `crontabs` spool a user's.
fn path_hint(file: &str) -> Option<bool> {
    let path = Path::new(file);
    let folders: Vec<&str> = path
        .parent()
        .into_iter()
        .flat_map(Path::components)
        .filter_map(|c| c.as_os_str().to_str())
        .collect();
    if folders.contains(&"crontabs") {
        Some(false)
    } else if folders.contains(&"cron.d") || path.file_name().is_some_and(|n| n == "crontab") {
        Some(true)
    } else {
        None
    }
}
