//! The validated notification settings: `[notify]`, with a job's own
//! `notify` keys over it. Sending them is `crate::notify`'s.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::Command;
use crate::run::Event;

/// A string with `${VAR}` references, filled from replicron's environment
/// when a notification is sent, so that a token or a secret URL lives in
/// the environment (the systemd unit's environment file), not in the job
/// file. Its `Debug` shows the references, never their values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Template(String);

impl Template {
    /// Parses `text`; a `${` without its `}` or with an invalid name is an
    /// error.
    pub(crate) fn parse(text: &str) -> Result<Template, String> {
        let template = Template(text.to_string());
        template.pieces()?;
        Ok(template)
    }

    /// The variables it names.
    pub(crate) fn vars(&self) -> Vec<String> {
        self.pieces()
            .unwrap_or_default()
            .into_iter()
            .filter_map(|piece| match piece {
                Piece::Var(name) => Some(name.to_string()),
                Piece::Text(_) => None,
            })
            .collect()
    }

    /// The text with each `${VAR}` replaced by its value in `env`.
    pub(crate) fn render(&self, env: impl Fn(&str) -> Option<String>) -> Result<String, String> {
        let mut out = String::new();
        for piece in self.pieces()? {
            match piece {
                Piece::Text(text) => out.push_str(text),
                Piece::Var(name) => match env(name) {
                    Some(value) => out.push_str(&value),
                    None => {
                        return Err(format!("${{{name}}} is not set in replicron's environment"));
                    }
                },
            }
        }
        Ok(out)
    }

    fn pieces(&self) -> Result<Vec<Piece<'_>>, String> {
        let mut pieces = Vec::new();
        let mut rest = self.0.as_str();
        while let Some(start) = rest.find("${") {
            if start > 0 {
                pieces.push(Piece::Text(&rest[..start]));
            }
            let after = &rest[start + 2..];
            let end = after
                .find('}')
                .ok_or_else(|| format!("{:?}: a ${{ without its }}", self.0))?;
            let name = &after[..end];
            if name.is_empty()
                || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                || name.starts_with(|c: char| c.is_ascii_digit())
            {
                return Err(format!("{:?}: invalid variable name {name:?}", self.0));
            }
            pieces.push(Piece::Var(name));
            rest = &after[end + 1..];
        }
        if !rest.is_empty() {
            pieces.push(Piece::Text(rest));
        }
        Ok(pieces)
    }
}

enum Piece<'t> {
    Text(&'t str),
    Var(&'t str),
}

/// Where and when a job's notifications go: `[notify]`, with a job's own
/// `notify` keys over it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Notify {
    /// Which events are sent.
    pub(crate) on: BTreeSet<Event>,
    /// POSTed a JSON document per event.
    pub(crate) webhook: Option<Template>,
    /// Headers of the webhook's request (an authorization token, …).
    pub(crate) webhook_headers: BTreeMap<String, Template>,
    /// Run per event, with the output's tail on stdin.
    pub(crate) command: Option<Command>,
    /// Pinged at every run's start and end (healthchecks.io convention).
    pub(crate) ping_url: Option<Template>,
    /// How long one delivery may take.
    pub(crate) timeout: Duration,
    /// How often a failed delivery is tried again.
    pub(crate) retries: u32,
    /// Variables removed from the command's environment (`[web]
    /// token_env`'s).
    pub(crate) hidden_env: Vec<String>,
}

/// `timeout` unless set.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// `retries` unless set.
pub(crate) const DEFAULT_RETRIES: u32 = 3;
/// The most retries a notification may ask for.
pub(crate) const MAX_RETRIES: u32 = 10;

impl Default for Notify {
    fn default() -> Self {
        Notify {
            on: Event::defaults(),
            webhook: None,
            webhook_headers: BTreeMap::new(),
            command: None,
            ping_url: None,
            timeout: DEFAULT_TIMEOUT,
            retries: DEFAULT_RETRIES,
            hidden_env: Vec::new(),
        }
    }
}

impl Notify {
    /// Whether anything is configured to receive events or pings.
    pub(crate) fn is_set(&self) -> bool {
        self.webhook.is_some() || self.command.is_some() || self.ping_url.is_some()
    }

    /// Every environment variable the templates name: they are removed from
    /// the environment of jobs, as replicron's own settings are.
    pub(crate) fn secret_vars(&self) -> Vec<String> {
        self.webhook
            .iter()
            .chain(self.webhook_headers.values())
            .chain(self.ping_url.iter())
            .flat_map(Template::vars)
            .collect()
    }
}
