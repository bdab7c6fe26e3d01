//! Job names from commands: what a crontab line really runs, so that
//! `cd / && run-parts --report /etc/cron.hourly` is `cron-hourly` and
//! `command -v debian-sa1 > /dev/null && debian-sa1 1 1` is `debian-sa1`.
//!
//! The command is split the way a shell would split it, closely enough for
//! naming (quotes, operators, redirections, `$(…)`), and the simple commands
//! are read in order: guards (`cd`, `test`, `[ … ]`, `command -v`) are
//! passed over, wrappers (`nice`, `ionice`, `flock`, `timeout`, `env`, …)
//! are looked through, interpreters give their script, `run-parts` its
//! folder and `service`/`invoke-rc.d`/`systemctl` the service. The first
//! program left names the job. Names are then made valid and unique.

use std::collections::HashSet;

use crate::config::{MAX_JOB_NAME_LEN, RESERVED_PREFIX};

/// The names given so far, across every file of an import.
#[derive(Debug, Default)]
pub(super) struct Names {
    taken: HashSet<String>,
}

impl Names {
    /// `base`, or `base-2`, `base-3`, … if it is taken; never longer than a
    /// job name may be.
    pub(super) fn unique(&mut self, base: &str) -> String {
        if self.taken.insert(base.to_string()) {
            return base.to_string();
        }
        let mut n = 2;
        loop {
            let suffix = format!("-{n}");
            let room = MAX_JOB_NAME_LEN - suffix.len();
            let stem = base.get(..room).unwrap_or(base).trim_end_matches('-');
            let name = format!("{stem}{suffix}");
            if self.taken.insert(name.clone()) {
                return name;
            }
            n += 1;
        }
    }
}

/// A valid job name (not yet unique) for what `command` runs.
pub(super) fn from_command(command: &str) -> String {
    let found = match program(command) {
        Found::Program(name) | Found::Fallback(name) => name,
        Found::Nothing => String::new(),
    };
    clean(&found)
}

/// Characters a job name may not have become `-`; the result is never
/// empty, fits [`MAX_JOB_NAME_LEN`] and does not take replicron's prefix.
fn clean(raw: &str) -> String {
    let mut name = String::with_capacity(raw.len());
    for c in raw.chars() {
        let c = if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-') {
            c
        } else {
            '-'
        };
        if c == '-' && name.ends_with('-') {
            continue;
        }
        name.push(c);
    }
    let trimmed = |s: &str| s.trim_matches(|c| matches!(c, '-' | '.' | ':')).to_string();
    let mut name = trimmed(&name);
    if name.len() > MAX_JOB_NAME_LEN {
        name = trimmed(&name[..MAX_JOB_NAME_LEN]);
    }
    if name.is_empty() {
        return "job".to_string();
    }
    if let Some(rest) = name.strip_prefix(RESERVED_PREFIX) {
        // `replicron.x` names replicron's own leases.
        name = format!("replicron-{rest}");
        name.truncate(MAX_JOB_NAME_LEN);
    }
    name
}

/// What a command, or one simple command of it, runs.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    /// The program that does the work.
    Program(String),
    /// A command that does little (`echo`, `sleep`): the name if nothing
    /// better comes.
    Fallback(String),
    /// A guard or a shell keyword only.
    Nothing,
}

/// The first program of `command` that does the work.
fn program(command: &str) -> Found {
    let mut fallback = None;
    for words in simple_commands(&lex(command)) {
        match simple(&words) {
            Found::Program(name) => return Found::Program(name),
            Found::Fallback(name) => {
                fallback.get_or_insert(name);
            }
            Found::Nothing => {}
        }
    }
    fallback.map_or(Found::Nothing, Found::Fallback)
}

/// A shell token.
#[derive(Debug, PartialEq, Eq)]
enum Token {
    Word(String),
    /// `;`, `&&`, `||`, `|`, `&`, `(`, `)`: the end of a simple command.
    Separator,
    /// `>`, `2>>`, `<`, …; `target` when the next word is its file (not
    /// with `2>&1`).
    Redirect {
        target: bool,
    },
}

/// Splits `command` as sh would, closely enough to find its programs.
fn lex(command: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut word = String::new();
    let mut started = false;
    let mut chars = command.chars().peekable();
    let flush = |tokens: &mut Vec<Token>, word: &mut String, started: &mut bool| {
        if *started {
            tokens.push(Token::Word(std::mem::take(word)));
            *started = false;
        }
    };
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => flush(&mut tokens, &mut word, &mut started),
            '\'' => {
                started = true;
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    word.push(c);
                }
            }
            '"' => {
                started = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => word.extend(chars.next()),
                        c => word.push(c),
                    }
                }
            }
            '\\' => {
                started = true;
                word.extend(chars.next());
            }
            '`' => {
                started = true;
                word.push(c);
                for c in chars.by_ref() {
                    word.push(c);
                    if c == '`' {
                        break;
                    }
                }
            }
            '$' if chars.peek() == Some(&'(') => {
                started = true;
                word.push(c);
                let mut depth = 0;
                for c in chars.by_ref() {
                    word.push(c);
                    match c {
                        '(' => depth += 1,
                        ')' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                }
            }
            '#' if !started => break,
            '&' if chars.peek() == Some(&'>') => {
                flush(&mut tokens, &mut word, &mut started);
                chars.next();
                if chars.peek() == Some(&'>') {
                    chars.next();
                }
                tokens.push(Token::Redirect { target: true });
            }
            ';' | '|' | '&' | '(' | ')' => {
                flush(&mut tokens, &mut word, &mut started);
                if matches!(c, ';' | '|' | '&')
                    && chars.peek().is_some_and(|n| *n == c || *n == '&')
                {
                    chars.next();
                }
                tokens.push(Token::Separator);
            }
            '>' | '<' => {
                // `2>`: the number is the redirection's, not a word.
                if started && !word.is_empty() && word.chars().all(|c| c.is_ascii_digit()) {
                    word.clear();
                    started = false;
                } else {
                    flush(&mut tokens, &mut word, &mut started);
                }
                if chars.peek().is_some_and(|n| matches!(n, '>' | '<' | '|')) {
                    chars.next();
                }
                let mut target = true;
                if chars.peek() == Some(&'&') {
                    chars.next();
                    while chars
                        .peek()
                        .is_some_and(|n| n.is_ascii_digit() || *n == '-')
                    {
                        chars.next();
                        target = false;
                    }
                }
                tokens.push(Token::Redirect { target });
            }
            c => {
                started = true;
                word.push(c);
            }
        }
    }
    flush(&mut tokens, &mut word, &mut started);
    tokens
}

/// The words of each simple command, without redirections.
fn simple_commands(tokens: &[Token]) -> Vec<Vec<String>> {
    let mut commands = vec![Vec::new()];
    let mut tokens = tokens.iter();
    while let Some(token) = tokens.next() {
        match token {
            Token::Word(word) => {
                if let Some(current) = commands.last_mut() {
                    current.push(word.clone());
                }
            }
            Token::Separator => commands.push(Vec::new()),
            Token::Redirect { target } => {
                if *target {
                    tokens.next();
                }
            }
        }
    }
    commands.retain(|c| !c.is_empty());
    commands
}

/// A wrapper that runs the command after its options and its own
/// arguments: the options that take a value, and how many arguments.
struct Wrapper {
    name: &'static str,
    valued: &'static [&'static str],
    arguments: usize,
}

const WRAPPERS: &[Wrapper] = &[
    Wrapper {
        name: "nice",
        valued: &["-n", "--adjustment"],
        arguments: 0,
    },
    Wrapper {
        name: "ionice",
        valued: &[
            "-c",
            "--class",
            "-n",
            "--classdata",
            "-p",
            "--pid",
            "-P",
            "--pgid",
            "-u",
            "--uid",
        ],
        arguments: 0,
    },
    Wrapper {
        name: "flock",
        valued: &["-w", "--wait", "--timeout", "-E", "--conflict-exit-code"],
        arguments: 1,
    },
    Wrapper {
        name: "timeout",
        valued: &["-s", "--signal", "-k", "--kill-after"],
        arguments: 1,
    },
    Wrapper {
        name: "env",
        valued: &["-u", "--unset", "-C", "--chdir"],
        arguments: 0,
    },
    Wrapper {
        name: "sudo",
        valued: &[
            "-u", "--user", "-g", "--group", "-C", "-D", "--chdir", "-h", "--host", "-p",
            "--prompt", "-r", "--role", "-t", "--type", "-U",
        ],
        arguments: 0,
    },
    Wrapper {
        name: "stdbuf",
        valued: &["-i", "-o", "-e"],
        arguments: 0,
    },
    Wrapper {
        name: "chrt",
        valued: &[],
        arguments: 1,
    },
    Wrapper {
        name: "taskset",
        valued: &[],
        arguments: 1,
    },
    Wrapper {
        name: "chronic",
        valued: &[],
        arguments: 0,
    },
    Wrapper {
        name: "cronic",
        valued: &[],
        arguments: 0,
    },
    Wrapper {
        name: "nohup",
        valued: &[],
        arguments: 0,
    },
    Wrapper {
        name: "setsid",
        valued: &[],
        arguments: 0,
    },
    Wrapper {
        name: "run-one",
        valued: &[],
        arguments: 0,
    },
    Wrapper {
        name: "unbuffer",
        valued: &[],
        arguments: 0,
    },
];

/// Shell words that start or end a construct, before the command proper.
const KEYWORDS: &[&str] = &[
    "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "esac", "!", "{", "}",
    "time", "exec", "builtin",
];

/// Commands that check or prepare rather than do the work.
const GUARDS: &[&str] = &[
    "cd", "test", "[", "[[", "true", "false", ":", "exit", "return", "export", "set", "unset",
    "umask", "ulimit", "source", ".", "shift", "local", "trap", "wait", "read", "type", "which",
    "hash", "for", "case", "select", "function", "mkdir", "pwd",
];

/// Commands that do little: a name only if nothing else is there.
const MINOR: &[&str] = &["echo", "printf", "sleep", "logger", "date", "touch", "rm"];

const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh", "mksh", "ash"];

const INTERPRETERS: &[&str] = &[
    "python", "perl", "ruby", "php", "node", "nodejs", "Rscript", "lua", "tclsh",
];

/// A word that is the shell's or a known command's, so never a user.
pub(super) fn is_shell_word(word: &str) -> bool {
    KEYWORDS.contains(&word)
        || GUARDS.contains(&word)
        || MINOR.contains(&word)
        || SHELLS.contains(&word)
        || interpreter(word).is_some()
        || WRAPPERS.iter().any(|w| w.name == word)
        || matches!(
            word,
            "command" | "run-parts" | "service" | "invoke-rc.d" | "systemctl"
        )
}

/// What one simple command runs.
fn simple(words: &[String]) -> Found {
    let mut i = 0;
    loop {
        while words.get(i).is_some_and(|w| is_assignment(w)) {
            i += 1;
        }
        let Some(word) = words.get(i) else {
            return Found::Nothing;
        };
        let name = basename(word);
        let rest = &words[i + 1..];
        if KEYWORDS.contains(&name) {
            i += 1;
        } else if GUARDS.contains(&name) {
            return Found::Nothing;
        } else if MINOR.contains(&name) {
            return Found::Fallback(name.to_string());
        } else if name == "command" {
            match rest.first().map(String::as_str) {
                Some("-v" | "-V") => return Found::Nothing,
                Some("-p") => i += 2,
                _ => i += 1,
            }
        } else if let Some(wrapper) = WRAPPERS.iter().find(|w| w.name == name) {
            match skip_options(rest, wrapper.valued, name == "flock") {
                Skipped::Command(text) => return program(&text),
                Skipped::At(after) => i += 1 + after + wrapper.arguments,
            }
        } else if name == "run-parts" {
            return run_parts(rest);
        } else if matches!(name, "service" | "invoke-rc.d") {
            return positional(rest, 0).map_or(Found::Program(name.to_string()), |service| {
                Found::Program(service.to_string())
            });
        } else if name == "systemctl" {
            // `systemctl start backup.service`: the unit.
            return positional(rest, 1).map_or(Found::Program(name.to_string()), |unit| {
                let unit = [".service", ".timer", ".target"]
                    .iter()
                    .find_map(|s| unit.strip_suffix(s))
                    .unwrap_or(unit);
                Found::Program(unit.to_string())
            });
        } else if SHELLS.contains(&name) {
            return match skip_options(rest, &["-o", "+o"], true) {
                Skipped::Command(text) => program(&text),
                Skipped::At(after) => rest
                    .get(after)
                    .map_or(Found::Program(name.to_string()), |s| {
                        Found::Program(script(s).to_string())
                    }),
            };
        } else if let Some(interpreter) = interpreter(name) {
            return interpreted(interpreter, rest);
        } else {
            return Found::Program(script(word).to_string());
        }
    }
}

/// Where the command after a wrapper's or a shell's options starts, or the
/// command string of its `-c`.
enum Skipped {
    At(usize),
    Command(String),
}

fn skip_options(words: &[String], valued: &[&str], dash_c: bool) -> Skipped {
    let mut i = 0;
    while let Some(word) = words.get(i) {
        if word == "--" {
            return Skipped::At(i + 1);
        }
        let option = (word.starts_with('-') || word.starts_with('+')) && word.len() > 1;
        if !option {
            break;
        }
        // `-c 'cmd'`, and shells' bundled `-lc 'cmd'`.
        let is_c = word == "-c"
            || word == "--command"
            || (!word.starts_with("--") && word.starts_with('-') && word.contains('c') && dash_c);
        if dash_c && is_c {
            return match words.get(i + 1) {
                Some(text) => Skipped::Command(text.clone()),
                None => Skipped::At(i + 1),
            };
        }
        i += if valued.contains(&word.as_str()) {
            2
        } else {
            1
        };
    }
    Skipped::At(i)
}

/// The `n`th word that is not an option.
fn positional(words: &[String], n: usize) -> Option<&str> {
    words
        .iter()
        .filter(|w| !w.starts_with('-'))
        .nth(n)
        .map(String::as_str)
}

/// `run-parts [options] DIR`: the folder names the job (`cron.daily` is
/// `cron-daily`).
fn run_parts(words: &[String]) -> Found {
    match skip_options(words, &["-u", "--umask", "-a", "--arg"], false) {
        Skipped::At(at) => match words.get(at) {
            Some(dir) => Found::Program(basename(dir.trim_end_matches('/')).replace('.', "-")),
            None => Found::Program("run-parts".to_string()),
        },
        Skipped::Command(_) => Found::Program("run-parts".to_string()),
    }
}

/// The interpreter `name` is, with its version (`python3.11`) set aside.
fn interpreter(name: &str) -> Option<&'static str> {
    let bare = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    INTERPRETERS.iter().copied().find(|i| *i == bare)
}

/// `python3 -m app.cleanup`, `perl /opt/report.pl`: the module or script.
fn interpreted(interpreter: &str, words: &[String]) -> Found {
    let mut i = 0;
    while let Some(word) = words.get(i) {
        match word.as_str() {
            "-m" if interpreter == "python" => {
                return words
                    .get(i + 1)
                    .map_or(Found::Program(interpreter.to_string()), |m| {
                        Found::Program(m.clone())
                    });
            }
            // Code on the command line (`perl -e 'sleep …'`): the
            // interpreter, if no program after it names the job better.
            "-c" if interpreter != "php" => return Found::Fallback(interpreter.to_string()),
            "-e" | "-r" => return Found::Fallback(interpreter.to_string()),
            "-f" if interpreter == "php" => {
                return words
                    .get(i + 1)
                    .map_or(Found::Program(interpreter.to_string()), |s| {
                        Found::Program(script(s).to_string())
                    });
            }
            "-W" | "-X" | "-I" | "-d" | "-c" => i += 2,
            w if w.starts_with('-') => i += 1,
            w => return Found::Program(script(w).to_string()),
        }
    }
    Found::Program(interpreter.to_string())
}

/// A script's name without its folder and its language's extension.
fn script(path: &str) -> &str {
    let name = basename(path);
    [".sh", ".bash", ".py", ".pl", ".rb", ".php", ".js"]
        .iter()
        .find_map(|ext| name.strip_suffix(ext))
        .filter(|stem| !stem.is_empty())
        .unwrap_or(name)
}

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// `NAME=value` before a command.
fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(key, _)| {
        !key.is_empty()
            && !key.starts_with(|c: char| c.is_ascii_digit())
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_what_the_command_runs() {
        for (command, name) in [
            ("cd / && run-parts --report /etc/cron.hourly", "cron-hourly"),
            (
                "test -x /usr/sbin/anacron || { cd / && run-parts --report /etc/cron.daily; }",
                "cron-daily",
            ),
            (
                "test -x /usr/lib/sysstat/debian-sa1 && /usr/lib/sysstat/debian-sa1 1 1",
                "debian-sa1",
            ),
            (
                "command -v debian-sa1 > /dev/null && debian-sa1 60 2",
                "debian-sa1",
            ),
            ("[ -x /usr/sbin/anacron ] && anacron -s", "anacron"),
            (
                "[ -x /etc/init.d/anacron ] && if [ ! -d /run/systemd/system ]; then /usr/sbin/invoke-rc.d anacron start >/dev/null; fi",
                "anacron",
            ),
            ("/usr/local/bin/sync-orders --since 15m", "sync-orders"),
            ("/usr/bin/flock -n /tmp/x.lock /usr/local/bin/tidy", "tidy"),
            ("nice -n 10 ionice -c3 /opt/bin/reindex --all", "reindex"),
            (
                "ionice -c 2 -n 7 nice backup.sh > /var/log/b.log 2>&1",
                "backup",
            ),
            (
                "PGHOST=db LANG=C pg_dump -Fc app > /srv/app.dump",
                "pg_dump",
            ),
            (
                "timeout 5m env -u X /usr/bin/python3 /opt/jobs/report.py --daily",
                "report",
            ),
            (
                "cd /srv/app && python3 -m app.tasks.cleanup",
                "app.tasks.cleanup",
            ),
            ("bash -lc 'cd /srv && ./deploy.sh'", "deploy"),
            (
                "sudo -u www-data php /var/www/artisan schedule:run",
                "artisan",
            ),
            ("systemctl start certbot-renew.service", "certbot-renew"),
            ("echo \"friday or the 13th\"", "echo"),
            (
                "sleep 30; /usr/bin/curl -fsS https://example.com/ping",
                "curl",
            ),
            ("/opt/replicron.sh", "replicron"),
            ("/opt/replicron.job", "replicron-job"),
            ("cd / # nothing", "job"),
            // certbot's: the random sleep in Perl is not the work.
            (
                "test -x /usr/bin/certbot -a \\! -d /run/systemd/system && perl -e 'sleep int(rand(43200))' && certbot -q renew --no-random-sleep-on-renew",
                "certbot",
            ),
            ("python3 -c 'import app; app.run()'", "python"),
        ] {
            assert_eq!(from_command(command), name, "{command}");
        }
    }

    #[test]
    fn names_stay_valid_and_unique() {
        let long = format!("/bin/{}", "x".repeat(100));
        let name = from_command(&long);
        assert_eq!(name.len(), MAX_JOB_NAME_LEN);
        let mut names = Names::default();
        assert_eq!(names.unique(&name), name);
        let second = names.unique(&name);
        assert!(
            second.ends_with("-2") && second.len() <= MAX_JOB_NAME_LEN,
            "{second}"
        );
        assert_eq!(names.unique("tidy"), "tidy");
        assert_eq!(names.unique("tidy-2"), "tidy-2");
        assert_eq!(names.unique("tidy"), "tidy-3");
        for command in ["$(which foo) --x", "'ä ö'", "`date`", "!!!"] {
            let name = from_command(command);
            assert!(
                crate::config::name::JobName::parse(&name).is_ok(),
                "{command}: {name}"
            );
        }
    }
}
