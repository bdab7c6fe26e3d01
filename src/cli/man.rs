//! The man page, `replicron man`: the prose of `man.roff`, with its COMMANDS
//! section rendered from the command line's own definition, its
//! CONFIGURATION section from [`crate::config::keys`], and its ENVIRONMENT
//! section from the variables the config reads. What the page says about
//! options, keys and variables cannot drift from what the code accepts.

use clap::Command;

use crate::config::{self, keys};

const PAGE: &str = include_str!("man.roff");

/// The whole page, in roff.
pub(super) fn render(cli: &Command) -> String {
    PAGE.replace("@VERSION@", env!("CARGO_PKG_VERSION"))
        .replace("@COMMANDS@", commands(cli).trim_end())
        .replace("@CONFIGURATION@", configuration().trim_end())
        .replace("@ENVIRONMENT@", environment().trim_end())
}

/// Text for roff: backslashes and hyphens escaped, and a line that would
/// start with a control character made safe.
fn escape(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    if escaped.starts_with(['.', '\'']) {
        format!("\\&{escaped}")
    } else {
        escaped
    }
}

fn commands(cli: &Command) -> String {
    let mut out = String::new();
    for global in cli
        .get_arguments()
        .filter(|a| a.get_long() == Some("log-format"))
    {
        out.push_str(&format!(
            "Every command takes\n.B \\-\\-log\\-format\n.IR text | json :\n{}\n",
            escape(&help(global))
        ));
    }
    for sub in cli.get_subcommands().filter(|s| !s.is_hide_set()) {
        out.push_str(&format!(".SS replicron {}\n", escape(sub.get_name())));
        out.push_str(&format!(".B replicron {}\n", escape(sub.get_name())));
        for arg in sub.get_arguments().filter(|a| !a.is_hide_set()) {
            if arg.get_id() == "help" {
                continue;
            }
            out.push_str(&synopsis(arg));
            out.push('\n');
        }
        out.push_str(".PP\n");
        let about = sub
            .get_long_about()
            .or(sub.get_about())
            .map(ToString::to_string)
            .unwrap_or_default();
        out.push_str(&escape(about.trim_end_matches('.')));
        out.push_str(".\n");
        for arg in sub.get_arguments().filter(|a| !a.is_hide_set()) {
            if arg.get_id() == "help" {
                continue;
            }
            out.push_str(".TP\n");
            out.push_str(&tag(arg));
            out.push('\n');
            out.push_str(&escape(&help(arg)));
            out.push('\n');
        }
    }
    out
}

/// How an argument is written: `.RB [ \-\-count` `.IR N ]`, `.I JOB`.
fn synopsis(arg: &clap::Arg) -> String {
    let value = arg
        .get_value_names()
        .and_then(|names| names.first())
        .map(ToString::to_string)
        .unwrap_or_else(|| arg.get_id().to_string().to_uppercase());
    match arg.get_long() {
        None => format!(".I {}", escape(&value)),
        Some(long) => {
            let takes_value = arg.get_action().takes_values();
            let optional = !arg.is_required_set();
            let flag = format!("\\-\\-{}", escape(long));
            match (takes_value, optional) {
                (true, true) => format!(".RB [ {flag}\n.IR {} ]", escape(&value)),
                (true, false) => format!(".B {flag}\n.I {}", escape(&value)),
                (false, _) => format!(".RB [ {flag} ]"),
            }
        }
    }
}

/// An argument as the tag of its paragraph, on one line.
fn tag(arg: &clap::Arg) -> String {
    let value = arg
        .get_value_names()
        .and_then(|names| names.first())
        .map(ToString::to_string)
        .unwrap_or_else(|| arg.get_id().to_string().to_uppercase());
    match arg.get_long() {
        None => format!("\\fI{}\\fR", escape(&value)),
        Some(long) if arg.get_action().takes_values() => {
            format!("\\fB\\-\\-{}\\fR \\fI{}\\fR", escape(long), escape(&value))
        }
        Some(long) => format!("\\fB\\-\\-{}\\fR", escape(long)),
    }
}

/// An argument's help, with its default and the variable it reads.
fn help(arg: &clap::Arg) -> String {
    let mut text = arg
        .get_long_help()
        .or(arg.get_help())
        .map(ToString::to_string)
        .unwrap_or_default();
    if !text.is_empty() && !text.ends_with('.') {
        text.push('.');
    }
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    if !defaults.is_empty() && arg.get_action().takes_values() {
        text.push_str(&format!(" Default: {}.", defaults.join(", ")));
    }
    let values: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| v.get_name().to_string())
        .collect();
    if !values.is_empty() && !text.contains(&values.join(", ")) {
        text.push_str(&format!(" One of: {}.", values.join(", ")));
    }
    if let Some(env) = arg.get_env() {
        text.push_str(&format!(
            " The environment variable {} sets it too.",
            env.to_string_lossy()
        ));
    }
    text
}

fn configuration() -> String {
    let mut out = String::new();
    let mut table = "-";
    let all = keys::all();
    let inherited: Vec<&str> = all
        .iter()
        .filter(|k| k.about == keys::AS_IN_DEFAULTS)
        .map(|k| k.name)
        .collect();
    for key in all.iter().filter(|k| k.about != keys::AS_IN_DEFAULTS) {
        if key.table != table {
            table = key.table;
            out.push_str(&format!(".SS {}\n", table_header(table)));
        }
        out.push_str(".TP\n");
        match key.default {
            Some(default) => out.push_str(&format!(
                ".BR {} \" = {}\"\n",
                escape(key.name),
                escape(default).replace('"', "\\(dq")
            )),
            None => out.push_str(&format!(".B {}\n", escape(key.name))),
        }
        out.push_str(&escape(key.about));
        out.push('\n');
    }
    if !inherited.is_empty() {
        out.push_str(&format!(
            ".TP\n.BR {}\nAs in [defaults], for this job.\n",
            inherited
                .iter()
                .map(|k| escape(k))
                .collect::<Vec<_>>()
                .join(" \", \" ")
        ));
    }
    out
}

/// The header of a key's table: `[daemon]`, `[[job]]`.
fn table_header(table: &str) -> String {
    if table.is_empty() {
        "Before any table".to_string()
    } else if matches!(table, "job" | "limit" | "calendar") {
        format!("[[{table}]]")
    } else {
        format!("[{table}]")
    }
}

/// The keys that [`configuration`] lists, as Markdown: the book's
/// reference of the job file (`replicron man --keys-markdown`), from the
/// same table, so that the page and the book never differ.
pub(super) fn keys_markdown() -> String {
    /// Text that Markdown shows as it is.
    fn plain(text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        for c in text.chars() {
            if matches!(
                c,
                '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '#' | '|'
            ) {
                out.push('\\');
            }
            out.push(c);
        }
        out
    }
    let mut out = String::from(
        "# Every key\n\n<!-- Generated by `replicron man --keys-markdown` from the table the man page's CONFIGURATION section is rendered from: do not edit. -->\n\nEvery key of the job file, table by table, with its default (none: required or unset). `man replicron` lists the same.\n",
    );
    let mut table = "";
    let all = keys::all();
    for key in all.iter().filter(|k| k.about != keys::AS_IN_DEFAULTS) {
        if key.table != table {
            table = key.table;
            out.push_str(&format!("\n## `{}`\n\n", table_header(table)));
        }
        match key.default {
            Some(default) => out.push_str(&format!("- `{} = {default}`: ", key.name)),
            None => out.push_str(&format!("- `{}`: ", key.name)),
        }
        out.push_str(&plain(key.about));
        out.push('\n');
    }
    let inherited: Vec<String> = all
        .iter()
        .filter(|k| k.about == keys::AS_IN_DEFAULTS)
        .map(|k| format!("`{}`", k.name))
        .collect();
    if !inherited.is_empty() {
        out.push_str(&format!(
            "- {}: {}\n",
            inherited.join(", "),
            plain(keys::AS_IN_DEFAULTS)
        ));
    }
    out
}

fn environment() -> String {
    let mut out = String::new();
    let mut item = |name: &str, about: &str| {
        out.push_str(&format!(".TP\n.B {}\n{}\n", escape(name), escape(about)));
    };
    item(
        config::CONFIG_ENV,
        &format!(
            "The job file, for every command's --config (default {}).",
            config::DEFAULT_CONFIG_PATH
        ),
    );
    for (var, key) in config::ENV_OVERRIDES {
        item(var, &format!("Overrides {key} of the job file."));
    }
    item(
        "RUST_LOG",
        "Which log lines are written (info for run, warn for the other commands), e.g. replicron=debug.",
    );
    item(
        "NO_COLOR",
        "When set, logs carry no colour even on a terminal (they never do elsewhere).",
    );
    item(
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "The OTLP/HTTP receiver of the runs' traces (over [telemetry] endpoint); OpenTelemetry's other variables apply too: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL (http/protobuf or http/json), OTEL_EXPORTER_OTLP_HEADERS, OTEL_EXPORTER_OTLP_TIMEOUT, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG, OTEL_SDK_DISABLED.",
    );
    item(
        crate::secrets::CREDENTIALS_DIRECTORY,
        "systemd's folder of the unit's credentials: each file named like a variable (LoadCredential=REPLICRON_DATABASE_URL:/etc/replicron/credentials/database-url) sets that variable, over the environment; an empty file sets nothing.",
    );
    out.push_str(".PP\n");
    out.push_str(&escape(
        "A run gets the daemon's environment, the job's env, and REPLICRON_JOB, REPLICRON_SCHEDULED_AT (RFC 3339, UTC, milliseconds), REPLICRON_RUN_ID, REPLICRON_FENCE, REPLICRON_INSTANCE, REPLICRON_ATTEMPT (the attempt's number in the instant's history) and REPLICRON_TRIGGER (what started the attempt: schedule, catch_up, manual, backfill, dependency, or retry after the first and for the rerun of an abandoned run), on an attempt after another REPLICRON_PREVIOUS_STATUS (how that one ended: failed, timed_out, or abandoned before a rerun, see on_abandon), REPLICRON_REASON (the reason a trigger or a backfill was given, if one), the job's secret_env variables (each read from its file at the run's start), and with traces on ([telemetry], OTEL_EXPORTER_OTLP_ENDPOINT) TRACEPARENT and TRACESTATE naming the run's span. replicron's own settings (REPLICRON_CONFIG and every variable above that overrides a key, the database URL and its password among them), the web token's and the notifications' variables, OTEL_EXPORTER_OTLP_HEADERS and OTEL_EXPORTER_OTLP_TRACES_HEADERS, and every variable read from a credential are removed from it: a job that needs one sets it in its env. At start replicron overwrites the environment block that /proc/PID/environ shows and makes itself non-dumpable, so that no job finds the secrets there either; root can still read its memory, and a job running as replicron's own user the files it reads.",
    ));
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::*;

    /// The book's reference of the keys, `docs/book/src/configure/keys.md`,
    /// is what `replicron man --keys-markdown` prints today.
    #[test]
    fn the_books_key_reference_is_the_man_pages_table() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/docs/book/src/configure/keys.md"
        );
        let book = std::fs::read_to_string(path).unwrap_or_default();
        let generated = keys_markdown();
        assert!(
            book == generated,
            "{path} differs from the keys' table: run `cargo run -- man --keys-markdown > docs/book/src/configure/keys.md`"
        );
        for key in keys::all() {
            assert!(
                generated.contains(&format!("`{}", key.name)),
                "{}",
                key.name
            );
        }
    }

    #[test]
    fn the_page_covers_every_command_option_key_and_variable() {
        let cli = crate::cli::Cli::command();
        let page = render(&cli);
        for sub in cli.get_subcommands().filter(|s| !s.is_hide_set()) {
            assert!(
                page.contains(&format!(".SS replicron {}", escape(sub.get_name()))),
                "{}",
                sub.get_name()
            );
            for arg in sub.get_arguments().filter(|a| !a.is_hide_set()) {
                if let Some(long) = arg.get_long() {
                    assert!(
                        page.contains(&format!("\\-\\-{}", escape(long))),
                        "--{long}"
                    );
                }
            }
        }
        for key in keys::all() {
            assert!(page.contains(&escape(key.name)), "{}", key.name);
        }
        for (var, _) in config::ENV_OVERRIDES {
            assert!(page.contains(&escape(var)), "{var}");
        }
        for section in [
            "NAME",
            "SYNOPSIS",
            "DESCRIPTION",
            "COMMANDS",
            "CONFIGURATION",
            "SCHEDULES",
            "ENVIRONMENT",
            "SIGNALS",
            "EXIT STATUS",
            "FILES",
            "EXAMPLES",
            "SEE ALSO",
        ] {
            assert!(page.contains(&format!(".SH {section}\n")), "{section}");
        }
        for placeholder in [
            "@VERSION@",
            "@COMMANDS@",
            "@CONFIGURATION@",
            "@ENVIRONMENT@",
        ] {
            assert!(!page.contains(placeholder), "{placeholder} is left");
        }
    }
}
