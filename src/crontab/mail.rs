//! `MAILTO` and `MAILFROM` as replicron says them: a job's `notify`
//! command that mails the addresses through the host's mail program when a
//! run fails, the run's output tail as the body.
//!
//! cron mailed a job's output whenever there was any; replicron tells of
//! failures (its default `notify.on` events), so the note on the `MAILTO`
//! line says what changed.

use super::host::Mailer;

/// `MAILTO`'s value as the addresses to mail: Debian's cron takes several,
/// separated by commas. `Err` says why the value cannot be passed on.
pub(super) fn recipients(value: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for address in value.split(',').map(str::trim) {
        if address.is_empty() {
            continue;
        }
        if address.starts_with('-') {
            return Err(format!("{address:?} would be read as an option"));
        }
        if address.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!("{address:?} has blanks or control characters"));
        }
        out.push(address.to_string());
    }
    Ok(out)
}

/// The notifier command, a shell line, that mails `to` (from `from`, when
/// `MAILFROM` said) through `mailer`: the event's text is the subject,
/// the output's tail (the command's standard input) the body.
pub(super) fn command(mailer: &Mailer, to: &[String], from: Option<&str>) -> String {
    let quoted: Vec<String> = to.iter().map(|a| quote(a)).collect();
    match mailer {
        Mailer::Sendmail(path) => {
            let (from_header, from_option) = match from {
                Some(from) => (
                    format!("From: {}\\n", printf_text(from)),
                    format!(" -f {}", quote(from)),
                ),
                None => (String::new(), String::new()),
            };
            format!(
                "{{ printf '{from_header}To: %s\\nSubject: %s\\n\\n' {} \"$REPLICRON_TEXT\"; cat; }} | {}{from_option} -i -- {}",
                quote(&to.join(", ")),
                quote(path),
                quoted.join(" ")
            )
        }
        Mailer::Mail(path) => {
            let from_option = from
                .map(|from| format!(" -r {}", quote(from)))
                .unwrap_or_default();
            format!(
                "{} -s \"$REPLICRON_TEXT\"{from_option} -- {}",
                quote(path),
                quoted.join(" ")
            )
        }
    }
}

/// `text` for the shell: as it is when it has nothing the shell reads,
/// else in single quotes.
fn quote(text: &str) -> String {
    if !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "@%+=:,./_-".contains(c))
    {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

/// `text` inside a single-quoted printf format: its `%` and `\` doubled,
/// its `'` closed and reopened.
fn printf_text(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('%', "%%")
        .replace('\'', "'\\''")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mailto_is_a_list_of_addresses() {
        assert_eq!(
            recipients("root, ops@example.com,,"),
            Ok(vec!["root".to_string(), "ops@example.com".to_string()])
        );
        assert_eq!(recipients(""), Ok(vec![]));
        assert!(recipients("-oQ/tmp").is_err());
        assert!(recipients("a b").is_err());
    }

    #[test]
    fn the_command_quotes_what_it_passes_on() {
        let sendmail = Mailer::Sendmail("/usr/sbin/sendmail".to_string());
        let to = ["root".to_string(), "o'neil@example.com".to_string()];
        assert_eq!(
            command(&sendmail, &to[..1], None),
            "{ printf 'To: %s\\nSubject: %s\\n\\n' root \"$REPLICRON_TEXT\"; cat; } | /usr/sbin/sendmail -i -- root"
        );
        assert_eq!(
            command(&sendmail, &to, Some("cron@example.com")),
            "{ printf 'From: cron@example.com\\nTo: %s\\nSubject: %s\\n\\n' 'root, o'\\''neil@example.com' \"$REPLICRON_TEXT\"; cat; } \
             | /usr/sbin/sendmail -f cron@example.com -i -- root 'o'\\''neil@example.com'"
        );
        let mail = Mailer::Mail("/usr/bin/mail".to_string());
        assert_eq!(
            command(&mail, &to[..1], Some("100%")),
            "/usr/bin/mail -s \"$REPLICRON_TEXT\" -r 100% -- root"
        );
    }

    /// The sendmail line, run by sh with a stand-in sendmail, writes the
    /// message cron would have: headers, a blank line, the output.
    #[test]
    fn the_sendmail_line_writes_a_message() {
        let dir = tempfile::tempdir().expect("dir");
        let fake = dir.path().join("sendmail");
        let out = dir.path().join("message");
        std::fs::write(
            &fake,
            format!(
                "#!/bin/sh\nprintf '%s\\n' \"$*\" > '{0}'\ncat >> '{0}'\n",
                out.display()
            ),
        )
        .expect("write");
        let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
        std::fs::set_permissions(&fake, mode).expect("chmod");
        let line = command(
            &Mailer::Sendmail(fake.display().to_string()),
            &["root".to_string(), "a@b.example".to_string()],
            Some("50% 'cron'"),
        );
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", &line])
            .env("REPLICRON_TEXT", "job x failed: exit status 1")
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("sh");
        std::io::Write::write_all(&mut child.stdin.take().expect("stdin"), b"the tail\n")
            .expect("write");
        assert!(child.wait().expect("sh ends").success());
        assert_eq!(
            std::fs::read_to_string(&out).expect("message"),
            "-f 50% 'cron' -i -- root a@b.example\n\
             From: 50% 'cron'\nTo: root, a@b.example\nSubject: job x failed: exit status 1\n\nthe tail\n"
        );
    }
}
