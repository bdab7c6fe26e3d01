//! Every key the job file takes, with its default and what it does: the
//! reference the man page's CONFIGURATION section is rendered from. Unit
//! tests keep it equal to the keys the parser accepts and its defaults
//! equal to the ones validation applies.

/// One key of the job file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Key {
    /// `database`, `daemon`, `defaults`, `notify`, `limit`, `calendar` or
    /// `job`; empty for a key outside every table (`include`).
    pub(crate) table: &'static str,
    /// The key.
    pub(crate) name: &'static str,
    /// Its default, as written in the file (`None`: required or unset).
    pub(crate) default: Option<&'static str>,
    /// What it does.
    pub(crate) about: &'static str,
}

const fn key(
    table: &'static str,
    name: &'static str,
    default: Option<&'static str>,
    about: &'static str,
) -> Key {
    Key {
        table,
        name,
        default,
        about,
    }
}

/// What a job's own copy of a `[defaults]` key does.
pub(crate) const AS_IN_DEFAULTS: &str = "As in [defaults], for this job.";

/// The keys a job takes from `[defaults]` or sets itself.
const SETTINGS: [(&str, Option<&str>, &str); 28] = [
    (
        "timezone",
        Some("\"UTC\""),
        "IANA time zone the schedule is evaluated in (\"Europe/Berlin\").",
    ),
    (
        "lock_at_most_for",
        Some("\"10m\""),
        "Lease length: how long another replica waits before it may take over a job whose holder died. Kept alive every third of it while the job runs.",
    ),
    (
        "lock_at_least_for",
        Some("\"0s\""),
        "The lease is kept at least this long after a run starts, even if the run ends sooner: instants that come meanwhile are not run.",
    ),
    (
        "timeout",
        Some("\"1h\""),
        "A run is stopped after this long (SIGTERM to its process group, SIGKILL after kill_grace) and recorded timed_out.",
    ),
    (
        "kill_grace",
        Some("\"10s\""),
        "Between SIGTERM and SIGKILL when a run is stopped.",
    ),
    (
        "catch_up",
        Some("\"0s\""),
        "At start and when the database is back, the latest instant nobody claimed is run once if it is at most this old and came after the job was added; 0s turns catch-up off.",
    ),
    (
        "jitter",
        Some("\"0s\""),
        "A run of instant T starts at T plus a delay in [0, jitter), the same on every replica (a hash of the job and T), to spread jobs that share an instant; the instant stays the run's identity. Must be shorter than the job's shortest interval.",
    ),
    (
        "output_limit",
        Some("\"64KiB\""),
        "How much of the end of a run's stdout and stderr is kept in history, at most 16MiB.",
    ),
    (
        "output_store",
        Some("\"database\""),
        "Where a run's output is kept: \"database\", the last output_limit bytes in its history row; \"files\", also all of it, stdout and stderr told apart, gzip-compressed, in [daemon] output_dir/JOB/RUN_ID.gz on the replica that ran it, written as it comes and flushed every second. replicron history --output RUN, the API (GET /api/v1/runs/{id}/output) and the run's page give it whole; another replica asks the one that holds the file (its [web] advertise_url), and a run whose replica is gone says where its file was.",
    ),
    (
        "output_retention",
        Some("\"14d\""),
        "With output_store = \"files\": each replica deletes a run's file once it is this old, and once the history retention has deleted the run's row.",
    ),
    (
        "output_max",
        Some("\"1G\""),
        "With output_store = \"files\": the most one run's file holds (the rest of its output is not kept, and its file and row say so), and the most the job's files hold together on a replica (the oldest are deleted first); at least 64KiB.",
    ),
    (
        "shell",
        Some("\"/bin/sh\""),
        "The shell that runs command (as shell -c command).",
    ),
    (
        "retries",
        Some("0"),
        "How often a failed or timed-out run is tried again, under the same lease (0 to 100).",
    ),
    (
        "retry_backoff",
        Some("\"10s\""),
        "The pause before each retry.",
    ),
    (
        "success_exit_codes",
        Some("[0]"),
        "The exit codes of the job's process recorded succeeded, 0 to 255: [0, 3] also counts 3 as a success. A list without 0 makes exit 0 a failure. The run's output ends with a line naming the rule where it decided other than plain exit 0 (replicron: exit 3: success by success_exit_codes).",
    ),
    (
        "skip_exit_codes",
        Some("[]"),
        "Exit codes recorded skipped, as [99]: the job ran and had nothing to do. Not retried, not notified (nor a recovery after it), pinged as a success; its dependents run after it only if their after's on lists skipped. The output's last line says so (replicron: exit 99: skipped by skip_exit_codes).",
    ),
    (
        "retry_on_exit_codes",
        None,
        "With retries, the exit codes of the failures tried again, as [75]: any other failure, a timeout or a kill by a signal is final, its output's last line saying so (replicron: exit 2: not retried (retry_on_exit_codes = [75])). Unset: every failed or timed-out run is retried. A code is in at most one of success_exit_codes, skip_exit_codes and retry_on_exit_codes.",
    ),
    (
        "missed_after",
        None,
        "An instant that no replica claimed this long after its time is recorded missed in the history (and notified), by one replica of the fleet. Unset: the larger of 1m and a tenth of the job's interval; 0s turns the check off.",
    ),
    (
        "warn_after",
        None,
        "A run still going this long after its attempt started is told of once as long_running (logged, counted in replicron_runs_long_running_total, notified if notify.on has it) by the replica that holds it, with its replica and run id; it is not stopped. Once per run: a retry of the same instant is not told of again. Must be shorter than timeout. Unset or 0s: never.",
    ),
    (
        "late_after",
        None,
        "A run whose action starts (its process is spawned) more than this after it was due, its instant plus the job's jitter delay (a dependent job's run: its parents' end), is told of as late_start (logged, counted in replicron_runs_late_start_total, notified if notify.on has it) by the replica that starts it. Only for runs its schedule or its parents started, at their first attempt. Unset or 0s: never.",
    ),
    (
        "overlap",
        Some("\"skip\""),
        "What an instant that comes while the job's run is going does, wherever that run is. \"skip\": it is an overrun, not run. \"queue\": it waits, on any replica, and starts when that run ends, however long that takes; at most one instant waits, later ones are overruns. \"replace\": the running run is asked to stop through the database (its holder learns at its next keep-alive, every third of lock_at_most_for), gets SIGTERM, then SIGKILL after kill_grace, and is recorded replaced; the new instant starts once the old run's lease is released or has ended. \"allow\": up to max_concurrent runs of the job at once across the fleet, each instant still once. Not for run_on = \"every\" jobs.",
    ),
    (
        "max_concurrent",
        None,
        "With overlap = \"allow\", and required there: how many runs of the job may run at once across the fleet, 1 to 1000. An instant that finds them all going waits for one to end up to 60s, then is recorded skipped.",
    ),
    (
        "dst_gap",
        Some("\"shift\""),
        "For a schedule of fixed times (no * in its seconds, minute or hour field): what a local time that a spring-forward transition skips does. \"shift\": it fires once, at the end of the gap (cron(8)). \"skip\": it does not fire that day. A schedule with a * there stays on the real timeline. check shows what it does at the zone's next transition.",
    ),
    (
        "dst_repeat",
        Some("\"first\""),
        "For a schedule of fixed times: what a local time that a fall-back transition shows twice does. \"first\": it fires at its first occurrence (cron(8)); \"last\": at its second; \"both\": at each.",
    ),
    (
        "memory_max",
        None,
        "The most memory a run may use, as \"512M\" (K, M, G, T: powers of 1024; at least 1M). Where the replica has a delegated cgroup v2 (the unit's Delegate=yes), the run's cgroup's memory.max, for the run as a whole: a run the kernel's OOM killer stops there is recorded failed, its output ending \"replicron: killed: over memory_max 512M\". Elsewhere RLIMIT_DATA of each of its processes: an allocation over it is refused, and the program fails in its own way; a failure that shows it (a \"memory exhausted\" message, SIGSEGV, SIGABRT) gets \"replicron: failed: likely over memory_max 512M\". Unset: no limit.",
    ),
    (
        "cpu_max",
        None,
        "The most of the host's CPU time a run may use, as \"50%\" of all its CPUs (1% to 100%): the run's cgroup's cpu.max. Not enforced where the replica sets rlimits (no delegated cgroup v2): it says so at its start, and check says so. Unset: no limit.",
    ),
    (
        "tasks_max",
        None,
        "The most processes and threads a run may have, 1 to 4194304: its cgroup's pids.max. Elsewhere RLIMIT_NPROC, which counts every process and thread of the run's user (the daemon's own, when the job has no user), and binds no process of root. Unset: no limit.",
    ),
    (
        "nofile_max",
        None,
        "The most files each process of a run may have open, 3 to 1048576: RLIMIT_NOFILE, soft and hard, with a cgroup or without. Unset: the daemon's.",
    ),
];

/// The keys of `[notify]`, which a job's own `notify` table overrides one
/// by one.
const NOTIFY: [(&str, Option<&str>, &str); 7] = [
    (
        "on",
        Some(
            "[\"failed\", \"timed_out\", \"lost_lock\", \"error\", \"abandoned\", \"missed\", \"skipped\", \"long_running\", \"late_start\"]",
        ),
        "Which events are sent: failed, timed_out, lost_lock, error (could not start), abandoned, missed, skipped (a shared lock stayed held; not a run skipped by skip_exit_codes, which is never notified), long_running (still going after warn_after; the run goes on), late_start (started more than late_after after it was due), recovered (the first success after a failed, timed_out, lost_lock, error, abandoned, missed or skipped run).",
    ),
    (
        "webhook",
        None,
        "An http(s) URL POSTed a JSON document per event: text, event, job, scheduled_at, status, exit_code, attempt, instance, duration_seconds (for long_running: how long it had run), late_seconds (for late_start: how late it started), output (its tail), history_id and trigger. ${VAR} is read from replicron's environment.",
    ),
    (
        "webhook_headers",
        None,
        "Headers of the webhook's request: { Authorization = \"Bearer ${HOOK_TOKEN}\" }. ${VAR} is read from replicron's environment, so the secret is not in the file; jobs do not see those variables.",
    ),
    (
        "command",
        None,
        "Run per event: a shell line, or a program and its arguments as an array. It gets REPLICRON_EVENT, REPLICRON_JOB, REPLICRON_SCHEDULED_AT, REPLICRON_STATUS, REPLICRON_EXIT_CODE, REPLICRON_ATTEMPT, REPLICRON_INSTANCE, REPLICRON_RUN_ID, REPLICRON_TRIGGER, REPLICRON_LATE_SECONDS (late_start) and REPLICRON_TEXT, and the output's tail on stdin.",
    ),
    (
        "ping_url",
        None,
        "Pinged on every run in the healthchecks.io convention: GET URL/start when it starts, URL when it succeeds (or is skipped by skip_exit_codes), URL/fail when it does not.",
    ),
    (
        "timeout",
        Some("\"10s\""),
        "How long one delivery (a request, a command) may take.",
    ),
    (
        "retries",
        Some("3"),
        "How often a failed delivery is tried again, with backoff (0 to 10); one that still fails is logged with its job and run.",
    ),
];

/// Every key, table by table, in the order the man page lists them.
pub(crate) fn all() -> Vec<Key> {
    let mut keys = vec![
        key(
            "",
            "include",
            None,
            "Other files whose [[job]], [[limit]] and [[calendar]] tables join this file's, as [\"jobs.d/*.toml\"]: patterns relative to this file's folder, with * and ? in the file name only (names starting with a dot are left out), each pattern's files read in name order. An included file holds only those tables. A name used in two files is an error naming both files and lines; a pattern without wildcards must name a file; a folder that does not exist includes nothing (a warning). A reload (SIGHUP) reads the files again: added, changed and removed files' jobs are applied as the job file's own are. Written before the first table.",
        ),
        key(
            "database",
            "url",
            None,
            "Where leases and history live: sqlite://PATH (one host), mysql://USER:PASS@HOST:PORT/DB or postgres://USER:PASS@HOST:PORT/DB. Required; REPLICRON_DATABASE_URL overrides it. A relative SQLite path is relative to the file's folder. A MariaDB/MySQL URL may list several hosts, HOST1:PORT,HOST2:PORT, tried in order (the nodes of a Galera cluster).",
        ),
        key(
            "database",
            "pool_size",
            Some("8"),
            "The most connections a replica opens (1 to 1000).",
        ),
        key(
            "daemon",
            "shutdown_grace",
            Some("\"30s\""),
            "On SIGTERM or SIGINT, how long running jobs may finish before they are stopped and recorded killed.",
        ),
        key(
            "daemon",
            "metrics_listen",
            None,
            "IP:PORT (or a bare PORT, on 127.0.0.1) to serve the dashboard (/), the JSON API (/api/v1/), /metrics (Prometheus) and /healthz on; unset, nothing is served. See docs/api.md.",
        ),
        key(
            "daemon",
            "history_retention",
            Some("\"30d\""),
            "History rows older than this are deleted, by one replica at a time.",
        ),
        key(
            "daemon",
            "max_backfill_instants",
            Some("10000"),
            "The most instants the backfills in progress across the fleet have left to run, together (1 to 100000000): a backfill that would go over it is refused, naming the limit and the backfills in progress. Each process that begins a backfill applies its own file's value.",
        ),
        key(
            "daemon",
            "max_starts_per_second",
            Some("50"),
            "The most catch-up, backfill and retry runs a replica (or a backfill command) starts per second (1 to 100000), so that a replica back from an outage or a deploy does not start them all at once. Scheduled instants on time are never held back. The starts held back are counted in replicron_throttled_starts_total.",
        ),
        key(
            "daemon",
            "output_dir",
            Some("\"/var/lib/replicron/output\""),
            "The folder under which the jobs with output_store = \"files\" keep each run's whole output, JOB/RUN_ID.gz; a relative one is taken from the job file's folder, as a relative SQLite path is. Made on first use, mode 0750, each file 0640.",
        ),
        key(
            "web",
            "token_env",
            None,
            "The environment variable holding the bearer token that allows actions (trigger, pause, resume, unlock) from the dashboard and the API. Unset, both are read-only and actions answer 403. The variable must be set when replicron starts; no job inherits it.",
        ),
        key(
            "web",
            "tokens",
            None,
            "Named bearer tokens, as { ops = \"REPLICRON_OPS_TOKEN\", ci = { env = \"REPLICRON_CI_TOKEN\", can = [\"trigger\", \"backfill\"], jobs = [\"deploy-*\"] } }: each name's environment variable holds a token, and the audit log records the name of the token that acted (token_env's is named default). A variable's name alone allows every action, like token_env's; a table's can lists its rights, from read, trigger, backfill (start and cancel), pause (and resume), unlock and admin (every one), and any right implies read; its jobs, patterns of job names with * and ?, limit it to those jobs, and what it is shown to them. An action beyond a token's rights answers 403 naming the right and the job, and is audited. Names are letters, digits, - and _; each variable must be set when replicron starts; no job inherits them.",
        ),
        key(
            "web",
            "public_url",
            None,
            "The origin browsers reach the dashboard at through a reverse proxy, https://HOST[:PORT] (no path): requests naming that host are answered on a loopback listener, sign-in and forms from that origin are accepted whether the proxy passes Host on or rewrites it, and with https the session cookie is Secure.",
        ),
        key(
            "web",
            "advertise_url",
            None,
            "Where the other replicas reach this replica's listener, http://HOST[:PORT]: a replica that shows a run another one runs reads the run's live output from there. Unset: http://127.0.0.1:PORT for a loopback metrics_listen, http://IP:PORT for another address, http://HOSTNAME:PORT for 0.0.0.0 or [::].",
        ),
        key(
            "web",
            "cookie_name",
            Some("\"replicron_session\""),
            "The session cookie's name. Browsers keep one cookie per host whatever its port: give replicas that share a host name different ones. A __Host- name needs cookie_secure and path /.",
        ),
        key(
            "web",
            "cookie_path",
            Some("\"/\""),
            "The session cookie's path.",
        ),
        key(
            "web",
            "cookie_secure",
            None,
            "Whether the session cookie is Secure (sent over https only). Unset: true when public_url is https.",
        ),
        key(
            "web",
            "trusted_proxies",
            Some("[]"),
            "IP addresses of the reverse proxies in front of the listener: from one of them, the client is the last address of X-Forwarded-For that is not a trusted proxy (sign-in is throttled and logged by it). From any other peer the header is ignored.",
        ),
        key(
            "telemetry",
            "endpoint",
            None,
            "The OTLP/HTTP receiver traces of runs are sent to, by its base URL (http://collector:4318; /v1/traces is appended). Unset, and with no OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, there are no traces. The variables win over the key.",
        ),
        key(
            "telemetry",
            "protocol",
            Some("\"http/protobuf\""),
            "http/protobuf or http/json. OTEL_EXPORTER_OTLP_PROTOCOL wins over it.",
        ),
        key(
            "telemetry",
            "service_name",
            Some("\"replicron\""),
            "The service.name of the traces. OTEL_SERVICE_NAME wins over it.",
        ),
        key(
            "telemetry",
            "sample_ratio",
            Some("1.0"),
            "The share of runs traced, 0 to 1, by trace id. OTEL_TRACES_SAMPLER wins over it.",
        ),
        key(
            "telemetry",
            "trace_url",
            None,
            "A trace viewer's URL of one trace, with {trace_id} (and optionally {span_id}, the run span's) in it, such as http://jaeger:16686/trace/{trace_id}: the dashboard links each run to its trace. Only runs the sample_ratio keeps have one, and only those get the link.",
        ),
    ];
    keys.extend(
        SETTINGS
            .iter()
            .map(|(name, default, about)| key("defaults", name, *default, about)),
    );
    keys.extend(
        NOTIFY
            .iter()
            .map(|(name, default, about)| key("notify", name, *default, about)),
    );
    keys.extend([
        key(
            "limit",
            "name",
            None,
            "A limit across jobs, taken by jobs' limits: 1 to 43 of A-Z a-z 0-9 _ . : -. Its slots are the lease rows replicron.limit.NAME.1 to .N. Required.",
        ),
        key(
            "limit",
            "max_running",
            None,
            "How many runs of the jobs that take it may run at once across the fleet, 1 to 1000. A run waits for a free slot up to 60s, then its instant is recorded skipped, naming the limit and the slots' holders. Required.",
        ),
        key(
            "calendar",
            "name",
            None,
            "A named set of dates, taken by jobs' skip_on and only_on: 1 to 43 of A-Z a-z 0-9 _ . : -. Required.",
        ),
        key(
            "calendar",
            "dates",
            None,
            "Its dates, as [\"2026-12-25\", \"2026-12-26\"]. Exactly one of dates and ics.",
        ),
        key(
            "calendar",
            "ics",
            None,
            "An iCalendar file (relative to the job file's folder) whose events' dates it holds: all-day and timed events, several days long, and recurring ones (RRULE, RDATE, EXDATE), expanded up to 2100. A file that cannot be read or parsed is an error naming the file and line; on reload, the running config is kept.",
        ),
        key(
            "job",
            "name",
            None,
            "Unique; 1 to 64 of A-Z a-z 0-9 _ . : - and not starting with replicron. It names the job's lease row and its history. Required.",
        ),
        key(
            "job",
            "schedule",
            None,
            "When it runs: 5 fields (minute hour day-of-month month day-of-week) as crontab(5), 6 with a leading seconds field, or a macro (@yearly @annually @monthly @weekly @daily @midnight @hourly). @manual: never on its own, only through trigger, the API or the dashboard. An array of expressions, [\"0 9 * * 1-5\", \"0 12 * * 6\"], fires at the union of their instants, an instant two share once. Each may be a table with its own time zone and the params its instants run with: [{ cron = \"0 9 * * 1-5\", timezone = \"America/New_York\", params = { region = \"us\" } }, { cron = \"0 9 * * 1-5\", timezone = \"Europe/Berlin\", params = { region = \"eu\" } }] (params the job declares in params, but for its secret_params, whose values the schedule would show; the job's defaults fill the rest, and an entry without params gives its instants the defaults; once one entry names its zone, every entry's is shown). An instant two entries share runs once, with the first entry's params; check warns when entries with different params share one within a year. See SCHEDULES. Exactly one of schedule, at and after.",
        ),
        key(
            "job",
            "at",
            None,
            "One instant the job runs at, once across the fleet, instead of a schedule: RFC 3339 with its offset, whole seconds (\"2027-01-15T03:00:00+01:00\"); a time without an offset is refused. Claimed, caught up (catch_up), recorded missed and notified as any scheduled instant; once it has run or been recorded, check and status say the job has ended. An instant already past by more than catch_up when the fleet first reads the job is refused by check and run. Not for run_on = \"every\" jobs.",
        ),
        key(
            "job",
            "after",
            None,
            "The jobs it runs after, instead of a schedule: after = [\"extract\"] runs it once for each instant at which extract's run succeeded, with that instant, on whichever replica, even if the one that ran extract died at its end; after = { jobs = [\"a\", \"b\"], on = [\"succeeded\", \"failed\"] } chooses the endings (any of succeeded, failed, timed_out, lost_lock, killed, abandoned, error, skipped, replaced), and with several parents (a fan-in) runs for each instant at which every one of them ended so. Each replica reads the parents' runs every 250 ms; an instant whose parents have not all ended is waited for, so the runs keep their order. Its runs are recorded dependency, linked to the parents' runs. Not for run_on = \"every\" jobs or parents; a cycle, an unknown parent and a fan-in whose parents share no instant in the next year are errors.",
        ),
        key(
            "job",
            "command",
            None,
            "A command line run as shell -c command. Exactly one of command and args.",
        ),
        key(
            "job",
            "args",
            None,
            "A program and its arguments, run without a shell: [\"/usr/local/bin/purge\", \"--days\", \"30\"].",
        ),
        key(
            "job",
            "env",
            None,
            "Environment variables for the run, on top of the daemon's own (less replicron's settings, see ENVIRONMENT).",
        ),
        key(
            "job",
            "secret_env",
            None,
            "Environment variables whose values are secrets kept out of the job file, as { API_TOKEN = \"file:/etc/replicron/secrets/api-token\", DB_PASS = \"credential:db-pass\" }: file:/PATH (absolute) or credential:NAME, the file NAME of $CREDENTIALS_DIRECTORY (systemd's LoadCredential=, a mounted Kubernetes Secret), read by replicron at each run's start, one trailing newline left out, at most 64 KiB. The run gets the value; its printed output has it masked, and history, the audit log, the API, the dashboard (which show the source, never the value), logs and notifications never hold it. check refuses a file it cannot read, naming the job, the key and the file, and warns of one its group or others may read; a run that cannot read it at its start is not started, recorded error with the file named, and notified. A name must not also be in env or params, nor be REPLICRON_*.",
        ),
        key(
            "job",
            "working_dir",
            None,
            "The run's working directory; the user's home if user is set and it exists, else the daemon's.",
        ),
        key(
            "job",
            "run_on",
            Some("\"one\""),
            "\"one\": each instant runs on one replica, through the job's lease. \"every\": each instant runs on every replica (per-host work such as log rotation), never beside itself on a host, recorded once per replica; @reboot is allowed and runs once per replica start. Pause applies; catch-up and the check for missed instants do not.",
        ),
        key(
            "job",
            "locks",
            None,
            "Shared locks a run holds beside its job's lease, as [\"db-maintenance\"]: jobs that share a lock never run at the same time anywhere in the fleet. Taken in sorted order (so two jobs cannot each hold one and wait for the other), on database time, kept alive with the job's lease; a lock held elsewhere is waited for up to 60s, then the instant is recorded skipped, naming the lock and its holder. Its waiters, on any replica, get it in turn: by priority, then the oldest instant first. Not for run_on = \"every\" jobs.",
        ),
        key(
            "job",
            "limits",
            None,
            "Limits across jobs a run takes a slot of, as [\"vendor-api\"], each declared by a [[limit]]: at most its max_running runs of the jobs that take it run at once, fleet-wide. Taken with the shared locks in one order, waited for and skipped as a lock is. Not for run_on = \"every\" jobs.",
        ),
        key(
            "job",
            "priority",
            Some("0"),
            "Among the runs waiting for a shared lock's or a limit's slot, fleet-wide, the higher priority goes first, then the older instant: an integer from -1000 to 1000. A backfill's instants wait behind every run that is not a backfill's, unless it is given --priority.",
        ),
        key(
            "job",
            "on_abandon",
            Some("\"record\""),
            "What becomes of an instant whose run's replica died (or lost its lease) mid-run, which the job's next claimant marks abandoned. \"record\": it stays abandoned and is notified: at most once. \"rerun\": the replica that marks it claims the job's lease anew, at a higher fence, once the dead holder's lease has ended, and runs the instant again as its next attempt (REPLICRON_ATTEMPT, REPLICRON_TRIGGER=retry, REPLICRON_PREVIOUS_STATUS=abandoned), up to max(retries, 1) times; after that it stays abandoned and is notified. The body then runs at least once, and may have done some of its work before it died: a job that writes elsewhere guards its writes with REPLICRON_FENCE. Not for run_on = \"every\" jobs, nor jobs with after.",
        ),
        key(
            "job",
            "params",
            None,
            "Parameters a run may be given, as [\"DAYS\", \"TENANT=all\"]: replicron trigger JOB --param DAYS=30 (and the API's and dashboard's trigger) passes each to the run as an environment variable, and history records them. A name alone must be given, and not empty; NAME=VALUE has a default, which scheduled runs get. An undeclared name, a missing one, an empty value for one without a default, a value with a NUL byte or over 4 KiB is refused by name and nothing runs. A job on a schedule gives each a default. LD_*, PATH, BASH_ENV, ENV, IFS and REPLICRON_* are not parameter names.",
        ),
        key(
            "job",
            "secret_params",
            None,
            "Which of params hold secrets, as [\"PASSWORD\"]: the run gets their values, while its history rows (history, the API, the dashboard) and the audit log write them as [redacted], and the API and dashboard never show their defaults. Each must be declared in params. A secret's default may be file:/PATH or credential:NAME (of $CREDENTIALS_DIRECTORY): read at each run's start, so the job file need not hold the secret; check refuses one it cannot read.",
        ),
        key(
            "job",
            "user",
            None,
            "Run as this user (name or id), with its supplementary groups, USER, LOGNAME and HOME, as /etc/crontab does. The daemon needs CAP_SETUID and CAP_SETGID (root, or the unit's users.conf drop-in); without them, or if the user does not exist, check and run refuse the file.",
        ),
        key(
            "job",
            "group",
            None,
            "With user: run under this group (name or id) instead of the user's primary group.",
        ),
        key(
            "job",
            "not_before",
            None,
            "An RFC 3339 instant (\"2026-12-01T00:00:00Z\"): the job has no instant before it. Nothing before it is missed or caught up.",
        ),
        key(
            "job",
            "not_after",
            None,
            "An RFC 3339 instant: the job has no instant after it; status then says it ended. Nothing after it is missed.",
        ),
        key(
            "job",
            "skip_on",
            None,
            "Calendars, as [\"de-holidays\"], each declared by a [[calendar]]: an instant on one of their dates (a date in the job's zone) is not run, not recorded missed and not notified. check lists it as excluded.",
        ),
        key(
            "job",
            "only_on",
            None,
            "Calendars, as [\"trading-days\"]: the job's instants are those on one of their dates (in the job's zone) alone; the others are excluded as by skip_on.",
        ),
        key(
            "job",
            "enabled",
            Some("true"),
            "A disabled job is validated but never scheduled.",
        ),
    ]);
    keys.extend(
        SETTINGS
            .iter()
            .map(|(name, _, _)| key("job", name, None, AS_IN_DEFAULTS)),
    );
    keys.push(key(
        "job",
        "notify",
        None,
        "A table of [notify]'s keys for this job, each overriding [notify]'s: notify = { ping_url = \"https://hc-ping.com/UUID\", on = [\"failed\", \"recovered\"] }; notify = { on = [] } sends nothing.",
    ));
    keys
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::{Config, Environment};

    /// The keys serde names as expected when it meets an unknown one.
    fn accepted(table_header: &str) -> Vec<String> {
        let text =
            format!("[database]\nurl = \"sqlite:///tmp/x.db\"\n{table_header}\nno_such_key = 1\n");
        let error = Config::parse(Path::new("jobs.toml"), &text, &Environment::default())
            .expect_err("an unknown key");
        let message = error.to_string();
        // serde: "expected `a` or `b`" or "expected one of `a`, `b`, `c`".
        let expected = message
            .split("expected ")
            .nth(1)
            .unwrap_or_else(|| panic!("no key list in {message}"));
        expected
            .trim_start_matches("one of ")
            .replace(" or ", ",")
            .split(',')
            .map(|k| k.trim().trim_matches('`').to_string())
            .filter(|k| !k.is_empty())
            .collect()
    }

    #[test]
    fn the_reference_lists_exactly_the_keys_the_parser_takes() {
        for (table, header) in [
            ("database", "[database]"),
            ("daemon", "[daemon]"),
            ("web", "[web]"),
            ("telemetry", "[telemetry]"),
            ("defaults", "[defaults]"),
            ("notify", "[notify]"),
            ("limit", "[[limit]]"),
            ("calendar", "[[calendar]]"),
            ("job", "[[job]]"),
        ] {
            let mut documented: Vec<String> = all()
                .iter()
                .filter(|k| k.table == table)
                .map(|k| k.name.to_string())
                .collect();
            let mut parsed = if table == "database" {
                // The unknown key lands in the [database] above.
                accepted("")
            } else {
                accepted(header)
            };
            documented.sort();
            parsed.sort();
            assert_eq!(documented, parsed, "[{table}]");
        }
    }

    #[test]
    fn the_documented_defaults_are_the_ones_applied() {
        // A job that sets every key to its documented default reads the
        // same as one that sets none.
        let mut explicit = String::from("[database]\nurl = \"sqlite:///tmp/x.db\"\n\n[defaults]\n");
        for key in all().iter().filter(|k| k.table == "defaults") {
            if let Some(default) = key.default {
                explicit.push_str(&format!("{} = {default}\n", key.name));
            }
        }
        explicit.push_str("\n[[job]]\nname = \"j\"\nschedule = \"@daily\"\ncommand = \"true\"\n");
        let implicit = "[database]\nurl = \"sqlite:///tmp/x.db\"\n\n[[job]]\nname = \"j\"\nschedule = \"@daily\"\ncommand = \"true\"\n";
        let parse = |text: &str| {
            Config::parse(Path::new("jobs.toml"), text, &Environment::default()).expect("valid")
        };
        if cfg!(feature = "sqlite") {
            let (a, b) = (parse(&explicit), parse(implicit));
            assert_eq!(a.jobs, b.jobs);
            assert_eq!(a.defaults, b.defaults);
            assert_eq!(a.database.pool_size, crate::config::DEFAULT_POOL_SIZE);
            assert_eq!(
                a.daemon.shutdown_grace,
                crate::config::DEFAULT_SHUTDOWN_GRACE
            );
            assert_eq!(
                a.daemon.history_retention,
                crate::config::DEFAULT_HISTORY_RETENTION
            );
        }
    }
}
