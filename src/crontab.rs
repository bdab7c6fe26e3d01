//! `replicron import-crontab`: a crontab turned into replicron TOML.
//!
//! Reads user crontabs and `/etc/crontab`-style files (with a user column):
//! comments, environment lines (`SHELL`, `CRON_TZ`/`TZ` become the shell and
//! time zone of the jobs below them, `MAILTO` and `MAILFROM` are reported,
//! anything else becomes the jobs' `env`), 5-field lines and `@` macros.
//! What cannot be carried over is reported, line by line: `@reboot`, a
//! command using crontab's `%` (stdin), a user other than the one replicron
//! runs as. Schedules are copied as written, so they mean the same.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;

/// A finding about one line that did not carry over as it was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// 1-based line.
    pub line: usize,
    /// What happened to it.
    pub message: String,
}

/// The result of an import.
#[derive(Clone, Debug, Default)]
pub struct Import {
    /// The TOML text.
    pub toml: String,
    /// What did not carry over, or changed meaning.
    pub notes: Vec<Note>,
    /// How many jobs were written.
    pub jobs: usize,
}

const MACROS: [&str; 7] = [
    "@yearly",
    "@annually",
    "@monthly",
    "@weekly",
    "@daily",
    "@midnight",
    "@hourly",
];

/// Converts crontab `text`. With `user_column`, each line names the user
/// to run as after the schedule (`/etc/crontab`, `/etc/cron.d/*`).
pub fn import(text: &str, source: &str, user_column: bool) -> Import {
    let mut out = Import::default();
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    let mut shell: Option<String> = None;
    let mut zone: Option<String> = None;
    let mut names = HashSet::new();
    let mut jobs = String::new();
    for (index, raw) in text.lines().enumerate() {
        let line_no = index + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let note = |out: &mut Import, message: String| {
            out.notes.push(Note {
                line: line_no,
                message,
            })
        };
        if let Some((key, value)) = env_assignment(line) {
            match key.as_str() {
                "SHELL" => shell = Some(value),
                "CRON_TZ" | "TZ" => zone = Some(value),
                "MAILTO" | "MAILFROM" => note(
                    &mut out,
                    format!(
                        "{key}={value:?}: replicron mails nothing; output goes to its log and history"
                    ),
                ),
                _ => {
                    env.insert(key, value);
                }
            }
            continue;
        }
        let (schedule, rest) = if line.starts_with('@') {
            let (word, rest) = split_word(line);
            if word == "@reboot" {
                note(
                    &mut out,
                    format!(
                        "@reboot is not carried over: run it from the host's start-up, not once per fleet: {rest}"
                    ),
                );
                continue;
            }
            if !MACROS.contains(&word) {
                note(&mut out, format!("unknown macro {word}: line skipped"));
                continue;
            }
            (word.to_string(), rest)
        } else {
            let mut rest = line;
            let mut fields = Vec::new();
            for _ in 0..5 {
                let (word, tail) = split_word(rest);
                fields.push(word);
                rest = tail;
            }
            if fields.iter().any(|f| f.is_empty()) || rest.is_empty() {
                note(
                    &mut out,
                    "not a crontab line (5 time fields and a command): skipped".to_string(),
                );
                continue;
            }
            (fields.join(" "), rest)
        };
        let (user, command) = if user_column {
            let (user, command) = split_word(rest);
            (Some(user), command)
        } else {
            (None, rest)
        };
        if command.is_empty() {
            note(&mut out, "no command: line skipped".to_string());
            continue;
        }
        let Some(command) = unescape_percent(command) else {
            note(
                &mut out,
                format!(
                    "the command uses crontab's % (input lines), which replicron does not feed: job written commented out: {command}"
                ),
            );
            let _ = writeln!(
                jobs,
                "# line {line_no} not imported (uses % for stdin): {raw}\n"
            );
            continue;
        };
        let name = job_name(&command, line_no, &mut names);
        let _ = writeln!(jobs, "# {source}:{line_no}: {}", raw.trim());
        if let Some(user) = user {
            let _ = writeln!(
                jobs,
                "# ran as user {user:?}; replicron runs jobs as its own user"
            );
            let me = std::env::var("USER").unwrap_or_default();
            if user != me {
                note(
                    &mut out,
                    format!("ran as {user}: under replicron it runs as replicron's user"),
                );
            }
        }
        let _ = writeln!(jobs, "[[job]]");
        let _ = writeln!(jobs, "name = {}", toml_string(&name));
        let _ = writeln!(jobs, "schedule = {}", toml_string(&schedule));
        let _ = writeln!(jobs, "command = {}", toml_string(&command));
        if let Some(zone) = &zone {
            let _ = writeln!(jobs, "timezone = {}", toml_string(zone));
        }
        if let Some(shell) = &shell {
            let _ = writeln!(jobs, "shell = {}", toml_string(shell));
        }
        if !env.is_empty() {
            let pairs: Vec<String> = env
                .iter()
                .map(|(k, v)| format!("{} = {}", toml_key(k), toml_string(v)))
                .collect();
            let _ = writeln!(jobs, "env = {{ {} }}", pairs.join(", "));
        }
        jobs.push('\n');
        out.jobs += 1;
    }
    out.toml = format!(
        "# Imported from {source} by `replicron import-crontab`.\n\
         # Set the shared database in [database] url, or in REPLICRON_DATABASE_URL:\n\
         # there is deliberately no default.\n\
         # [database]\n\
         # url = \"postgres://replicron:…@db.internal:5432/cron\"\n\n\
         [defaults]\n\
         # Cron's own zone is the host's; replicron's default is UTC. Set yours:\n\
         timezone = \"UTC\"\n\n{jobs}"
    );
    out
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

/// A unique job name from the command's program and the line number.
fn job_name(command: &str, line: usize, taken: &mut HashSet<String>) -> String {
    let program = command
        .split_whitespace()
        .find(|w| !w.contains('='))
        .unwrap_or("job")
        .rsplit('/')
        .next()
        .unwrap_or("job");
    let cleaned: String = program
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '-'
            }
        })
        .take(40)
        .collect();
    let cleaned = cleaned.trim_matches('-');
    let base = if cleaned.is_empty() || cleaned.starts_with("replicron.") {
        format!("line-{line}")
    } else {
        format!("{cleaned}-line-{line}")
    };
    let mut name = base.clone();
    let mut n = 2;
    while !taken.insert(name.clone()) {
        name = format!("{base}-{n}");
        n += 1;
    }
    name
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_crontab() {
        let text = "# m h dom mon dow command\nMAILTO=ops@example.com\nPATH=/usr/local/bin:/usr/bin:/bin\nCRON_TZ=Europe/Berlin\n\
                    */15 9-17 * * 1-5 /usr/local/bin/sync --quick\n@daily backup.sh > /tmp/backup.log 2>&1\n\
                    @reboot start-cache\n0 4 * * * echo \"50\\% done\"\n5 4 * * * mail -s hi ops%body\n";
        let import = import(text, "alice.crontab", false);
        assert_eq!(import.jobs, 3);
        assert!(
            import.toml.contains("name = \"sync-line-5\""),
            "{}",
            import.toml
        );
        assert!(import.toml.contains("schedule = \"*/15 9-17 * * 1-5\""));
        assert!(import.toml.contains("timezone = \"Europe/Berlin\""));
        assert!(
            import
                .toml
                .contains("PATH = \"/usr/local/bin:/usr/bin:/bin\"")
        );
        assert!(import.toml.contains("schedule = \"@daily\""));
        assert!(
            import.toml.contains("command = 'echo \"50% done\"'"),
            "{}",
            import.toml
        );
        let lines: Vec<usize> = import.notes.iter().map(|n| n.line).collect();
        assert_eq!(lines, [2, 7, 9], "{:?}", import.notes);
        assert!(import.notes[1].message.contains("@reboot"));
        assert!(import.notes[2].message.contains('%'));
    }

    #[test]
    fn an_etc_crontab_with_a_user_column() {
        let text = "SHELL=/bin/sh\nPATH=/usr/local/sbin:/usr/local/bin:/sbin:/bin:/usr/sbin:/usr/bin\n\
                    17 *\t* * *\troot\tcd / && run-parts --report /etc/cron.hourly\n\
                    25 6\t* * *\troot\ttest -x /usr/sbin/anacron || { cd / && run-parts --report /etc/cron.daily; }\n";
        let import = import(text, "/etc/crontab", true);
        assert_eq!(import.jobs, 2);
        assert!(import.toml.contains("schedule = \"17 * * * *\""));
        assert!(
            import
                .toml
                .contains("command = \"cd / && run-parts --report /etc/cron.hourly\""),
            "{}",
            import.toml
        );
        assert!(import.toml.contains("shell = \"/bin/sh\""));
        assert!(import.toml.contains("ran as user \"root\""));
        assert!(import.toml.contains("name = \"cd-line-3\""));
    }
}
