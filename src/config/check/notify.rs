//! The rules of `[notify]` and of a job's own `notify` table: which events,
//! where they go (a webhook with its headers, a command, a ping URL), and
//! how hard to try. A job's keys override `[notify]`'s one by one.

use std::collections::BTreeSet;

use super::raw::{RawCommand, RawNotify};
use super::*;
use crate::config::notify::{MAX_RETRIES, Notify, Template};
use crate::run::Event;

impl Checker<'_> {
    /// Applies `raw` over `base`. `prefix` is how keys are named in
    /// messages (`notify.` inside a job).
    pub(super) fn notify(
        &mut self,
        raw: RawNotify,
        base: &Notify,
        scope: Scope<'_>,
        prefix: &str,
        shell: &str,
    ) -> Notify {
        let mut notify = base.clone();
        let key = |name: &str| format!("{prefix}{name}");
        if let Some(on) = &raw.on {
            let mut events = BTreeSet::new();
            for name in on.get_ref() {
                match name.parse::<Event>() {
                    Ok(event) => {
                        events.insert(event);
                    }
                    Err(message) => {
                        self.report(Some(on.span()), Some(scope), Some(&key("on")), message)
                    }
                }
            }
            notify.on = events;
        }
        if let Some(url) = &raw.webhook
            && let Some(template) = self.url(url, scope, &key("webhook"))
        {
            notify.webhook = Some(template);
        }
        if let Some(headers) = &raw.webhook_headers {
            notify.webhook_headers.clear();
            for (name, value) in headers.get_ref() {
                let valid_name = !name.is_empty()
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
                if !valid_name {
                    self.report(
                        Some(headers.span()),
                        Some(scope),
                        Some(&key("webhook_headers")),
                        format!("invalid header name {name:?}"),
                    );
                    continue;
                }
                match Template::parse(value) {
                    Ok(template) if !value.contains(['\r', '\n']) => {
                        notify.webhook_headers.insert(name.clone(), template);
                    }
                    Ok(_) => self.report(
                        Some(headers.span()),
                        Some(scope),
                        Some(&key("webhook_headers")),
                        format!("the value of header {name:?} has a line break"),
                    ),
                    Err(message) => self.report(
                        Some(headers.span()),
                        Some(scope),
                        Some(&key("webhook_headers")),
                        message,
                    ),
                }
            }
        }
        if let Some(command) = &raw.command {
            let parsed = match command.get_ref() {
                RawCommand::Line(line) if line.trim().is_empty() => {
                    Err("the notifier command must not be empty")
                }
                RawCommand::Line(line) => Ok(Command::Shell {
                    shell: shell.to_string(),
                    command: line.clone(),
                }),
                RawCommand::Args(args) if args.first().is_none_or(|a| a.is_empty()) => {
                    Err("the notifier command must start with the program to run")
                }
                RawCommand::Args(args) => Ok(Command::Exec { args: args.clone() }),
            };
            match parsed {
                Ok(parsed) => notify.command = Some(parsed),
                Err(message) => self.report(
                    Some(command.span()),
                    Some(scope),
                    Some(&key("command")),
                    message,
                ),
            }
        }
        if let Some(url) = &raw.ping_url
            && let Some(template) = self.url(url, scope, &key("ping_url"))
        {
            notify.ping_url = Some(template);
        }
        if let Some(timeout) =
            self.duration(raw.timeout.as_ref(), scope, &key("timeout"), Zero::Rejected)
        {
            notify.timeout = timeout;
        }
        if let Some(retries) = &raw.retries {
            match u32::try_from(*retries.get_ref()) {
                Ok(n) if n <= MAX_RETRIES => notify.retries = n,
                _ => self.report(
                    Some(retries.span()),
                    Some(scope),
                    Some(&key("retries")),
                    format!("retries must be between 0 and {MAX_RETRIES}"),
                ),
            }
        }
        notify
    }

    /// A webhook or ping URL: http(s), possibly with `${VAR}` references.
    fn url(&mut self, url: &Spanned<String>, scope: Scope<'_>, key: &str) -> Option<Template> {
        let text = url.get_ref();
        let template = match Template::parse(text) {
            Ok(template) => template,
            Err(message) => {
                self.report(Some(url.span()), Some(scope), Some(key), message);
                return None;
            }
        };
        if !(text.starts_with("http://") || text.starts_with("https://") || text.starts_with("${"))
        {
            // The URL may hold a token: name its scheme only.
            let scheme = text.split_once("://").map_or("none", |(s, _)| s);
            self.report(
                Some(url.span()),
                Some(scope),
                Some(key),
                format!("expected an http:// or https:// URL (or ${{VAR}}), not scheme {scheme:?}"),
            );
            return None;
        }
        Some(template)
    }
}
