//! The importer on crontabs of every shape, on a host the tests make up:
//! its zone, users and programs are given, never read.

use std::path::Path;

use chrono_tz::Tz;

use super::host::host_zone;
use super::*;
use crate::config::{Config, Environment};

/// A host in `zone` with root, alice and the system users, where `php`
/// and `mail` are programs and alice imports.
fn host_in(zone: &str) -> Host {
    let mut host = Host::new(host_zone(Some(zone), None, None));
    host.users.insert("alice".to_string());
    host.programs
        .extend(["php".to_string(), "mail".to_string()]);
    host.me = Some("alice".to_string());
    host
}

fn host() -> Host {
    host_in("UTC")
}

fn one(name: &str, text: &str) -> Vec<Source> {
    vec![Source::new(name, text)]
}

fn run(name: &str, text: &str, user_column: Option<bool>) -> Import {
    import(&one(name, text), user_column, false, &host()).expect("a crontab")
}

/// The output as `replicron check` loads it, once given a database.
fn load(toml: &str) -> Config {
    let text = format!("[database]\nurl = \"sqlite:///tmp/unused.db\"\n\n{toml}");
    Config::parse(Path::new("imported.toml"), &text, &Environment::default())
        .unwrap_or_else(|e| panic!("{e}\n{toml}"))
}

fn lines_of(import: &Import) -> Vec<Option<usize>> {
    import.notes.iter().map(|n| n.line).collect()
}

/// The notes about files, without the one about the host's zone.
fn file_notes(import: &Import) -> Vec<&Note> {
    import.notes.iter().filter(|n| n.file.is_some()).collect()
}

fn messages(import: &Import) -> String {
    import
        .notes
        .iter()
        .map(|n| format!("{n}\n"))
        .collect::<String>()
}

const DEBIAN_LIKE: &str = "\
SHELL=/bin/sh
PATH=/usr/local/sbin:/usr/local/bin:/sbin:/bin:/usr/sbin:/usr/bin
17 *\t* * *\troot\tcd / && run-parts --report /etc/cron.hourly
25 6\t* * *\troot\ttest -x /usr/sbin/anacron || { cd / && run-parts --report /etc/cron.daily; }
";

#[test]
fn a_user_crontab() {
    let text = "# m h dom mon dow command\nMAILTO=ops@example.com\nPATH=/usr/local/bin:/usr/bin:/bin\nCRON_TZ=Europe/Berlin\n\
                */15 9-17 * * 1-5 /usr/local/bin/sync --quick\n@daily backup.sh > /tmp/backup.log 2>&1\n\
                @reboot start-cache\n0 4 * * * echo \"50\\% done\"\n5 4 * * * mail -s hi ops%body\n";
    let import = run("alice.crontab", text, None);
    assert_eq!(import.jobs, 3);
    assert!(import.toml.contains("name = \"sync\""), "{}", import.toml);
    assert!(import.toml.contains("name = \"backup\""), "{}", import.toml);
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
    // Every job has its own zone: the host's is not relied on, not noted.
    assert_eq!(
        lines_of(&import),
        [Some(2), Some(7), Some(9)],
        "{:?}",
        import.notes
    );
    assert!(import.notes[1].message.contains("@reboot"));
    assert!(import.notes[2].message.contains('%'));
    load(&import.toml);
}

#[test]
fn a_system_crontab_read_from_anywhere_has_its_user_column_found_by_content() {
    // Where the old importer only believed the path /etc/crontab: from an
    // unpacked package, from stdin, under any name.
    for name in ["/tmp/x/etc/crontab", "stdin", "system-jobs"] {
        let import = run(name, DEBIAN_LIKE, None);
        assert_eq!(import.jobs, 2, "{name}");
        assert!(
            import
                .toml
                .contains("command = \"cd / && run-parts --report /etc/cron.hourly\""),
            "{name}: {}",
            import.toml
        );
        assert!(
            import.toml.contains("name = \"cron-hourly\""),
            "{}",
            import.toml
        );
        assert!(
            import.toml.contains("name = \"cron-daily\""),
            "{}",
            import.toml
        );
        assert!(import.toml.contains("user = \"root\""));
        assert!(import.toml.contains("shell = \"/bin/sh\""));
        // Sure of it: the only notes are the host's zone and the two jobs'
        // user, by line.
        assert_eq!(
            lines_of(&import),
            [None, Some(3), Some(4)],
            "{name}: {:?}",
            import.notes
        );
        assert!(
            file_notes(&import)
                .iter()
                .all(|n| n.message.contains("runs as user root")),
            "{}",
            messages(&import)
        );
        load(&import.toml);
    }
}

#[test]
fn the_same_word_on_every_line_is_taken_as_the_user_with_a_note() {
    // `deploy` is no user here (the crontab comes from another host).
    let text =
        "0 * * * * deploy /srv/app/bin/sync\n30 2 * * * deploy /srv/app/bin/report --daily\n";
    let import = run("jobs", text, None);
    assert_eq!(import.jobs, 2);
    assert!(
        import.toml.contains("command = \"/srv/app/bin/sync\""),
        "{}",
        import.toml
    );
    let unsure: Vec<&Note> = import
        .notes
        .iter()
        .filter(|n| n.message.contains("taken as the user"))
        .collect();
    assert_eq!(unsure.len(), 2, "{}", messages(&import));
    assert!(
        unsure[0]
            .message
            .contains("every line has the same word there")
    );
    assert!(unsure[0].message.contains("--user-column=false"));
    // In a cron.d folder, the path decides, and still says it guessed.
    let import = run(
        "/srv/backup/cron.d/app",
        "0 * * * * deploy /srv/app/bin/sync\n",
        None,
    );
    assert!(import.toml.contains("command = \"/srv/app/bin/sync\""));
    assert!(messages(&import).contains("the file's path is a system crontab's"));
}

#[test]
fn a_user_crontab_whose_sixth_field_is_a_command_has_no_user_column() {
    let text = "\
0 * * * * backup-db --full
*/5 * * * * /usr/local/bin/poll
0 3 * * * php /srv/artisan schedule:run
0 4 * * * php /srv/artisan cache:prune
";
    let import = run("alice", text, None);
    assert_eq!(import.jobs, 4);
    assert!(
        import.toml.contains("command = \"backup-db --full\""),
        "{}",
        import.toml
    );
    assert!(
        import
            .toml
            .contains("command = \"php /srv/artisan schedule:run\"")
    );
    assert!(!import.toml.contains("user = "));
    assert!(file_notes(&import).is_empty(), "{}", messages(&import));
    // Two lines with the same program: `php` is a program here, not a user.
    let text = "0 3 * * * php /srv/artisan schedule:run\n0 4 * * * php /srv/artisan cache:prune\n";
    let import = run("alice", text, None);
    assert!(
        import
            .toml
            .contains("command = \"php /srv/artisan cache:prune\"")
    );
    assert!(file_notes(&import).is_empty(), "{}", messages(&import));
    // A lone unknown word: read as the command, and said to be a guess.
    let import = run("alice", "0 3 * * * rotate-logs nightly\n", None);
    assert!(import.toml.contains("command = \"rotate-logs nightly\""));
    assert!(
        messages(&import).contains("--user-column=true"),
        "{}",
        messages(&import)
    );
}

#[test]
fn the_user_column_can_be_forced_either_way() {
    let import = run("x", "0 * * * * rotate-logs nightly\n", Some(true));
    assert!(
        import.toml.contains("command = \"nightly\""),
        "{}",
        import.toml
    );
    let import = run("x", DEBIAN_LIKE, Some(false));
    assert!(
        import.toml.contains("command = \"root\\tcd / && run-parts"),
        "{}",
        import.toml
    );
    // Forced on a line whose sixth field is a path: not imported, said why.
    let import = run("x", "0 * * * * /usr/bin/true\n", Some(true));
    assert_eq!(import.jobs, 0);
    assert!(messages(&import).contains("x:1: --user-column=true, but \"/usr/bin/true\""));
}

#[test]
fn a_line_that_does_not_fit_the_user_column_is_reported() {
    let text = "0 * * * * root /usr/bin/a\n5 * * * * root /usr/bin/b\n10 * * * * /usr/bin/c\n";
    let import = run("x", text, None);
    assert_eq!(import.jobs, 2);
    assert!(
        messages(&import).contains("x:3: expected a user after the schedule"),
        "{}",
        messages(&import)
    );
    assert!(
        import.toml.contains("# x:3 not imported"),
        "{}",
        import.toml
    );
}

#[test]
fn invalid_schedules_are_reported_by_line_and_not_emitted_but_a_never_firing_one_is_kept_disabled()
{
    let text = "\
61 * * * * /usr/bin/minute
0 0 30 2 * /usr/bin/never
@fortnightly /usr/bin/macro
5 4 * * * /usr/bin/fine
CRON_TZ=Mars/Olympus
0 1 * * * /usr/bin/martian
";
    let import = run("alice", text, None);
    assert_eq!(import.jobs, 2, "{}", import.toml);
    assert!(import.toml.contains("name = \"fine\""));
    assert!(
        import.toml.contains(
            "# alice:2: 0 0 30 2 * /usr/bin/never\n\
             # Its schedule \"0 0 30 2 *\" never fires, so cron never ran it: kept disabled, as @manual;\n\
             # give it a schedule that fires and remove `enabled = false` to run it.\n\
             [[job]]\nname = \"never\"\nschedule = \"@manual\"\nenabled = false\ncommand = \"/usr/bin/never\"\n"
        ),
        "{}",
        import.toml
    );
    for job in ["minute\"", "macro\"", "martian\""] {
        assert!(
            !import.toml.contains(&format!("name = \"{job}")),
            "{}",
            import.toml
        );
    }
    let text = messages(&import);
    for expected in [
        "alice:1: invalid schedule \"61 * * * *\": minute 61 is out of range",
        "alice:2: schedule \"0 0 30 2 *\" never fires (cron never ran it): written as a disabled job",
        "alice:3: unknown macro \"@fortnightly\"",
        "alice:5: CRON_TZ=\"Mars/Olympus\" is not a time zone",
        "alice:6: not imported: the CRON_TZ above it",
    ] {
        assert!(text.contains(expected), "{expected}:\n{text}");
    }
    let config = load(&import.toml);
    assert!(config.job("never").is_some_and(|j| !j.enabled));
}

/// The shape of Debian's /etc/anacrontab.
const ANACRONTAB: &str = "\
SHELL=/bin/sh
HOME=/root
START_HOURS_RANGE=3-22
RANDOM_DELAY=30
1\t5\tcron.daily\trun-parts --report /etc/cron.daily
7\t10\tcron.weekly\trun-parts --report /etc/cron.weekly
@monthly\t15\tcron.monthly\trun-parts --report /etc/cron.monthly
";

#[test]
fn an_anacrontab_is_refused_saying_what_it_is() {
    for text in [
        ANACRONTAB.to_string(),
        // Without the giveaway variable, by its lines alone.
        ANACRONTAB.replace("START_HOURS_RANGE=3-22\n", ""),
        // Only `@period delay id command` lines, which a crontab could read.
        "START_HOURS_RANGE=3-22\n@monthly 15 cron.monthly run-parts /etc/cron.monthly\n"
            .to_string(),
    ] {
        let error = import(&one("stdin", &text), None, false, &host()).expect_err("refused");
        let message = error.to_string();
        assert!(
            message.starts_with("stdin: this is an anacrontab"),
            "{message}"
        );
        assert!(
            message.contains("period delay job-identifier command"),
            "{message}"
        );
        assert!(matches!(error, ImportError::NotACrontab { .. }));
    }
    // One anacrontab among crontabs stops the whole import.
    let mut sources = one("etc/crontab", DEBIAN_LIKE);
    sources.extend(one("etc/anacrontab", ANACRONTAB));
    let error = import(&sources, None, false, &host()).expect_err("refused");
    assert!(error.to_string().starts_with("etc/anacrontab: "), "{error}");
}

#[test]
fn a_script_is_no_crontab() {
    let error = import(
        &one("cron.d/helper", "#!/bin/sh\nset -e\ncd /srv\nexec ./run\n"),
        None,
        false,
        &host(),
    )
    .expect_err("refused");
    let message = error.to_string();
    assert!(
        message.contains("cron.d/helper: not a crontab"),
        "{message}"
    );
    assert!(message.contains("#!"), "{message}");
}

#[test]
fn job_names_come_from_the_script_and_stay_unique() {
    let sysstat = "\
PATH=/usr/lib/sysstat:/usr/sbin:/usr/sbin:/usr/bin:/sbin:/bin
5-55/10 * * * * root command -v debian-sa1 > /dev/null && debian-sa1 1 1
59 23 * * * root command -v debian-sa1 > /dev/null && debian-sa1 60 2
";
    let import = run("cron.d/sysstat", sysstat, None);
    let config = load(&import.toml);
    let names: Vec<&str> = config.jobs.iter().map(|j| &*j.name).collect();
    assert_eq!(names, ["debian-sa1", "debian-sa1-2"]);
    let anacron = "30 7-23 * * * root [ -x /usr/sbin/anacron ] && if [ ! -d /run/systemd/system ]; then /usr/sbin/anacron -s; fi\n";
    let import = run("cron.d/anacron", anacron, None);
    assert_eq!(load(&import.toml).jobs[0].name, "anacron");
}

#[test]
fn several_files_make_one_config_with_one_defaults_table() {
    let sources = vec![
        Source::new("etc/crontab", DEBIAN_LIKE),
        Source::new(
            "etc/cron.d/extra",
            "MAILTO=root\n17 * * * * root run-parts /etc/cron.hourly\n",
        ),
        Source::new(
            "alice",
            "CRON_TZ=Asia/Tokyo\n0 9 * * * /home/alice/bin/cron-daily\n",
        ),
    ];
    let import = import(&sources, None, false, &host_in("Europe/Berlin")).expect("crontabs");
    assert_eq!(import.jobs, 4);
    assert_eq!(
        import.toml.matches("[defaults]").count(),
        1,
        "{}",
        import.toml
    );
    assert!(import.toml.contains("etc/crontab, etc/cron.d/extra, alice"));
    let config = load(&import.toml);
    let jobs: Vec<(&str, Tz)> = config
        .jobs
        .iter()
        .map(|j| (&*j.name, j.schedule.zone()))
        .collect();
    assert_eq!(
        jobs,
        [
            ("cron-hourly", Tz::Europe__Berlin),
            ("cron-daily", Tz::Europe__Berlin),
            ("cron-hourly-2", Tz::Europe__Berlin),
            ("cron-daily-2", Tz::Asia__Tokyo),
        ]
    );
    // A file's SHELL is its own.
    let extra = import
        .toml
        .split("[[job]]")
        .find(|b| b.contains("cron-hourly-2"))
        .expect("the job");
    assert!(!extra.contains("shell"), "{extra}");
    // Notes name their file; the zone note is about the whole import.
    let text = messages(&import);
    // This host has no mail program.
    assert!(
        text.contains("etc/cron.d/extra:1: warning: MAILTO=\"root\" is not carried over"),
        "{text}"
    );
    assert!(
        text.starts_with("replicron: 3 job(s) set no CRON_TZ"),
        "{text}"
    );
}

#[test]
fn the_host_zone_comes_from_tz_then_etc_timezone_then_the_localtime_link() {
    let link = Path::new("/usr/share/zoneinfo/Asia/Tokyo");
    let zone = host_zone(
        Some("America/New_York"),
        Some("Europe/Berlin\n"),
        Some(link),
    );
    assert_eq!(zone.zone, Tz::America__New_York);
    assert_eq!(zone.origin, "from the TZ environment variable");
    let zone = host_zone(None, Some("Europe/Berlin\n"), Some(link));
    assert_eq!(
        (zone.zone, zone.origin.as_str()),
        (Tz::Europe__Berlin, "from /etc/timezone")
    );
    let zone = host_zone(Some(""), None, Some(link));
    assert_eq!(zone.zone, Tz::Asia__Tokyo);
    assert_eq!(zone.origin, "from the /etc/localtime link");
    // A POSIX rule is no IANA name: passed over, and said so.
    let zone = host_zone(
        Some("CET-1CEST,M3.5.0,M10.5.0/3"),
        None,
        Some(Path::new("../usr/share/zoneinfo/posix/Europe/Paris")),
    );
    assert_eq!(zone.zone, Tz::Europe__Paris);
    assert_eq!(zone.rejected.len(), 1, "{:?}", zone.rejected);
    assert!(zone.rejected[0].contains("CET-1CEST"));
    assert_eq!(
        host_zone(Some(":Europe/Rome"), None, None).zone,
        Tz::Europe__Rome
    );
    let zone = host_zone(None, None, None);
    assert_eq!(zone.zone, Tz::UTC);
    assert!(zone.origin.starts_with("by default"), "{}", zone.origin);
}

#[test]
fn jobs_without_cron_tz_keep_the_host_zone() {
    let host = Host::new(host_zone(None, Some("America/Chicago"), None));
    let import = import(&one("etc/crontab", DEBIAN_LIKE), None, false, &host).expect("a crontab");
    assert!(
        import
            .toml
            .contains("# this is the host's zone (from /etc/timezone).\n# Jobs under a CRON_TZ line carry their own timezone.\ntimezone = \"America/Chicago\"\n"),
        "{}",
        import.toml
    );
    let config = load(&import.toml);
    assert!(
        config
            .jobs
            .iter()
            .all(|j| j.schedule.zone() == Tz::America__Chicago)
    );
    assert_eq!(import.notes[0].file, None);
    assert!(
        import.notes[0]
            .message
            .contains("[defaults] timezone is set to America/Chicago (from /etc/timezone)"),
        "{}",
        messages(&import)
    );
    // root imports: no note about the user.
    let mut host = host;
    host.me = Some("root".to_string());
    let import =
        super::import(&one("etc/crontab", DEBIAN_LIKE), None, false, &host).expect("a crontab");
    assert_eq!(import.notes.len(), 1, "{}", messages(&import));
}

#[test]
fn folders_skip_what_cron_skips() {
    for name in [
        ".placeholder",
        "sysstat~",
        "anacron.dpkg-old",
        "README",
        "job.sh",
        "a b",
    ] {
        assert!(files::skipped_by_cron(name).is_some(), "{name}");
    }
    for name in ["sysstat", "e2scrub_all", "php-sessions", "0hourly"] {
        assert_eq!(files::skipped_by_cron(name), None, "{name}");
    }
}

#[test]
fn passwd_names_its_users() {
    let users: Vec<String> = host::passwd_users(
        "root:x:0:0:root:/root:/bin/bash\n# c\n+nis\nalice:x:1000:1000::/home/alice:/bin/sh\n",
    )
    .collect();
    assert_eq!(users, ["root", "alice"]);
}

#[test]
fn with_run_on_every_a_system_crontab_runs_on_every_replica_and_keeps_reboot() {
    let text = format!("{DEBIAN_LIKE}@reboot\troot\t/usr/local/bin/warm-cache\n");
    let import = super::import(&one("etc/crontab", &text), None, true, &host()).expect("a crontab");
    assert_eq!(import.jobs, 3, "{}", import.toml);
    assert_eq!(
        import.toml.matches("run_on = \"every\"").count(),
        3,
        "{}",
        import.toml
    );
    assert!(
        import.toml.contains("schedule = \"@reboot\""),
        "{}",
        import.toml
    );
    assert!(
        messages(&import)
            .contains("3 job(s) run on every replica (run_on = \"every\", from --run-on every)"),
        "{}",
        messages(&import)
    );
    let config = load(&import.toml);
    assert!(
        config
            .jobs
            .iter()
            .all(|j| j.run_on == crate::config::RunOn::Every)
    );
    // Without it, @reboot is left out and says how to keep it.
    let import =
        super::import(&one("etc/crontab", &text), None, false, &host()).expect("a crontab");
    assert_eq!(import.jobs, 2);
    assert!(!import.toml.contains("run_on"), "{}", import.toml);
    assert!(
        messages(&import).contains("--run-on every"),
        "{}",
        messages(&import)
    );
    // A user's crontab is the fleet's work: it stays run_on = "one".
    let user = super::import(
        &one("alice.crontab", "0 4 * * * backup.sh\n"),
        None,
        true,
        &host(),
    )
    .expect("a crontab");
    assert!(!user.toml.contains("run_on"), "{}", user.toml);
}

/// A job as the output reads back through the config loader.
#[derive(Debug, PartialEq, Eq)]
struct Job {
    name: String,
    schedule: String,
    zone: Tz,
    user: Option<String>,
    env: Vec<(String, String)>,
    /// The notify command, a shell line.
    notify: Option<String>,
}

fn jobs_of(toml: &str) -> Vec<Job> {
    load(toml)
        .jobs
        .iter()
        .map(|job| Job {
            name: job.name.to_string(),
            schedule: job.schedule.expression().to_string(),
            zone: job.schedule.zone(),
            user: job.run_as.as_ref().map(|r| r.user.clone()),
            env: job
                .env
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            notify: job
                .notify
                .as_ref()
                .and_then(|n| n.command.as_ref())
                .map(|c| match c {
                    crate::config::Command::Shell { command, .. } => command.clone(),
                    crate::config::Command::Exec { args } => args.join(" "),
                }),
        })
        .collect()
}

/// The TOML between job `name`'s `[[job]]` and the job (or `[defaults]`)
/// above it: the comments carried over for it.
fn above(toml: &str, name: &str) -> String {
    let at = toml
        .find(&format!("[[job]]\nname = {name:?}\n"))
        .unwrap_or_else(|| panic!("no job {name}:\n{toml}"));
    let before = &toml[..at];
    let start = before
        .rfind("[[job]]")
        .or_else(|| before.find("[defaults]"))
        .expect("a table above");
    let start = start + before[start..].find("\n\n").expect("its end") + 2;
    before[start..].to_string()
}

fn sendmail_host() -> Host {
    let mut host = host_in("Europe/Berlin");
    host.mailer = Some(host::Mailer::Sendmail("/usr/sbin/sendmail".to_string()));
    host
}

/// What `MAILTO=root` makes on [`sendmail_host`].
const MAIL_ROOT: &str = "{ printf 'To: %s\\nSubject: %s\\n\\n' root \"$REPLICRON_TEXT\"; cat; } | /usr/sbin/sendmail -i -- root";

fn job(name: &str, schedule: &str, user: Option<&str>) -> Job {
    Job {
        name: name.to_string(),
        schedule: schedule.to_string(),
        zone: Tz::Europe__Berlin,
        user: user.map(str::to_string),
        env: Vec::new(),
        notify: None,
    }
}

fn with_env(mut job: Job, env: &[(&str, &str)]) -> Job {
    job.env = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    job
}

fn mailing(mut job: Job, command: &str) -> Job {
    job.notify = Some(command.to_string());
    job
}

const DEBIAN_PATH: &str = "/usr/local/sbin:/usr/local/bin:/sbin:/bin:/usr/sbin:/usr/bin";

/// Asserts that `import`'s notes are, in order, at `expected`'s lines
/// (`None`: the whole file or import) and hold its text.
fn assert_notes(import: &Import, expected: &[(Option<usize>, &str)]) {
    let text = messages(import);
    assert_eq!(import.notes.len(), expected.len(), "{text}\n{expected:#?}");
    for (note, (line, part)) in import.notes.iter().zip(expected) {
        assert_eq!(note.line, *line, "{text}");
        assert!(note.message.contains(part), "{part}:\n{text}");
    }
}

/// The host-zone note every import of jobs without CRON_TZ has first.
const ZONE: (Option<usize>, &str) = (None, "set no CRON_TZ");

fn debian(path: &str, text: &str) -> Import {
    import(&one(path, text), None, false, &sendmail_host()).expect("a crontab")
}

#[test]
fn sa_exim_greylistclean_runs_as_debian_exim() {
    const FILE: &str = include_str!("../../tests/fixtures/crontab/sa-exim-greylistclean");
    for path in [
        "/etc/cron.d/greylistclean",
        "sa-exim-greylistclean",
        "stdin",
    ] {
        let import = debian(path, FILE);
        assert_eq!(
            jobs_of(&import.toml),
            [job("greylistclean", "33 * * * *", Some("Debian-exim"))],
            "{path}: {}",
            import.toml
        );
        assert!(
            import.toml.contains(
                "command = \"[ -x /usr/share/sa-exim/greylistclean ] && /usr/share/sa-exim/greylistclean\""
            ),
            "{}",
            import.toml
        );
        assert_eq!(
            above(&import.toml, "greylistclean"),
            format!(
                "# If you have configured spamd to run as a fixed user, change \"Debian-exim\" below.\n\
                 # Be smart and don't run this as root, it doesn't need those perms\n\
                 # {path}:3: 33 * * * * Debian-exim [ -x /usr/share/sa-exim/greylistclean ] && /usr/share/sa-exim/greylistclean\n"
            )
        );
        assert_notes(
            &import,
            &[
                ZONE,
                (
                    Some(3),
                    "runs as user Debian-exim, which this host does not have: `check` refuses the job until it exists; \
                     if \"Debian-exim\" is the command, not a user, pass --user-column=false",
                ),
            ],
        );
    }
    // Forced, the name is taken as it is.
    let forced = import(
        &one("greylistclean", FILE),
        Some(true),
        false,
        &sendmail_host(),
    )
    .expect("a crontab");
    assert_eq!(
        jobs_of(&forced.toml)[0].user.as_deref(),
        Some("Debian-exim")
    );
    // On a host with exim, where the system resolves the name.
    let mut host = sendmail_host();
    host.resolve = Some(|name| (name == "Debian-exim").then_some(101));
    let import = import(&one("greylistclean", FILE), None, false, &host).expect("a crontab");
    assert_notes(
        &import,
        &[
            ZONE,
            (
                Some(3),
                "runs as user Debian-exim: replicron needs CAP_SETUID",
            ),
        ],
    );
}

#[test]
fn logcheck_mails_root_and_leaves_its_reboot_line_out() {
    const FILE: &str = include_str!("../../tests/fixtures/crontab/logcheck");
    let import = debian("/etc/cron.d/logcheck", FILE);
    assert_eq!(
        jobs_of(&import.toml),
        [mailing(
            with_env(
                job("logcheck", "2 * * * *", Some("logcheck")),
                &[("PATH", DEBIAN_PATH)]
            ),
            MAIL_ROOT
        )],
        "{}",
        import.toml
    );
    assert_eq!(
        above(&import.toml, "logcheck"),
        "# /etc/cron.d/logcheck: crontab entries for the logcheck package\n\
         # /etc/cron.d/logcheck:6 not imported (@reboot): @reboot         logcheck    if [ -x /usr/sbin/logcheck ]; then nice -n10 /usr/sbin/logcheck -R; fi\n\n\
         # /etc/cron.d/logcheck:7: 2 * * * *       logcheck    if [ -x /usr/sbin/logcheck ]; then nice -n10 /usr/sbin/logcheck; fi\n"
    );
    assert!(
        import
            .toml
            .ends_with("\n# /etc/cron.d/logcheck, from line 9:\n# EOF\n\n"),
        "{}",
        import.toml
    );
    assert_notes(
        &import,
        &[
            ZONE,
            (
                Some(4),
                "MAILTO=\"root\": the jobs below it mail root through /usr/sbin/sendmail when a run fails",
            ),
            (Some(6), "@reboot is not carried over"),
            (
                Some(7),
                "runs as user logcheck, which this host does not have",
            ),
        ],
    );
    // Each host's own, its @reboot line too, and mailing root as well.
    let every = super::import(
        &one("/etc/cron.d/logcheck", FILE),
        None,
        true,
        &sendmail_host(),
    )
    .expect("a crontab");
    let jobs = jobs_of(&every.toml);
    assert_eq!(
        jobs.iter()
            .map(|j| (j.name.as_str(), j.schedule.as_str(), j.notify.as_deref()))
            .collect::<Vec<_>>(),
        [
            ("logcheck", "@reboot", Some(MAIL_ROOT)),
            ("logcheck-2", "2 * * * *", Some(MAIL_ROOT))
        ]
    );
}

#[test]
fn munin_mails_root_for_its_four_jobs() {
    const FILE: &str = include_str!("../../tests/fixtures/crontab/munin");
    let import = debian("/etc/cron.d/munin", FILE);
    let munin = |name, schedule| mailing(job(name, schedule, Some("munin")), MAIL_ROOT);
    assert_eq!(
        jobs_of(&import.toml),
        [
            munin("munin-cron", "*/5 * * * *"),
            munin("munin-limits", "14 10 * * *"),
            munin("find", "27 03 * * *"),
            mailing(job("find-2", "32 03 * * *", Some("www-data")), MAIL_ROOT),
        ],
        "{}",
        import.toml
    );
    assert!(
        above(&import.toml, "munin-cron")
            .starts_with("#\n# cron-jobs for munin\n#\n# /etc/cron.d/munin:7: "),
        "{}",
        import.toml
    );
    assert!(above(&import.toml, "munin-limits").starts_with("# /etc/cron.d/munin:8: "));
    assert!(
        above(&import.toml, "find").starts_with(
            "# remove stale generated html and graph files (e.g. disabled plugins or fields with volatile names)\n\
             # /etc/cron.d/munin:11: "
        ),
        "{}",
        import.toml
    );
    assert_notes(
        &import,
        &[
            ZONE,
            (Some(5), "MAILTO=\"root\": the jobs below it mail root"),
            (Some(7), "runs as user munin, which this host does not have"),
            (Some(8), "runs as user munin, which this host does not have"),
            // No command after the name there: the other lines decided.
            (
                Some(11),
                "\"munin\" is taken as the user (other lines name users of this host)",
            ),
            (
                Some(11),
                "runs as user munin, which this host does not have",
            ),
            (
                Some(12),
                "runs as user www-data: replicron needs CAP_SETUID",
            ),
        ],
    );
}

#[test]
fn cacti_keeps_its_commented_out_job_below_the_poller() {
    const FILE: &str = include_str!("../../tests/fixtures/crontab/cacti");
    let import = debian("/etc/cron.d/cacti", FILE);
    assert_eq!(
        jobs_of(&import.toml),
        [mailing(
            job("poller", "*/5 * * * *", Some("www-data")),
            MAIL_ROOT
        )],
        "{}",
        import.toml
    );
    assert!(
        import.toml.ends_with(
            "\n# /etc/cron.d/cacti, from line 4:\n\
             # it is recommended to regularly refresh the csrf key; however, as\n\
             # that potentially impacts user experience, it should be done during\n\
             # non-production hours. As the cacti package doesn't know when that is\n\
             # on this system, this cron entry serves as an example that should be\n\
             # adjusted to a proper time and enabled.\n\
             #30 2 * * sat www-data /usr/share/cacti/cli/refresh_csrf.php\n\n"
        ),
        "{}",
        import.toml
    );
    assert_notes(
        &import,
        &[
            ZONE,
            (Some(1), "MAILTO=\"root\": the jobs below it mail root"),
            (Some(2), "runs as user www-data"),
        ],
    );
    // Where no mail program is, loudly.
    let bare =
        super::import(&one("/etc/cron.d/cacti", FILE), None, false, &host()).expect("a crontab");
    assert_eq!(jobs_of(&bare.toml)[0].notify, None);
    assert!(
        messages(&bare).contains(
            "/etc/cron.d/cacti:1: warning: MAILTO=\"root\" is not carried over: this host has no mail program"
        ),
        "{}",
        messages(&bare)
    );
}

#[test]
fn php_common_keeps_its_comment_block() {
    const FILE: &str = include_str!("../../tests/fixtures/crontab/php-common-php");
    let import = debian("/etc/cron.d/php", FILE);
    assert_eq!(
        jobs_of(&import.toml),
        [job("sessionclean", "09,39 * * * *", Some("root"))],
        "{}",
        import.toml
    );
    let comments = above(&import.toml, "sessionclean");
    assert!(
        comments.starts_with("# /etc/cron.d/php@PHP_VERSION@: crontab fragment for PHP\n"),
        "{comments}"
    );
    // The blank line between the two blocks stays.
    assert!(
        comments.contains(
            "#  sessions yourself.\n\n# Look for and purge old sessions every 30 minutes\n# /etc/cron.d/php:14: "
        ),
        "{comments}"
    );
    assert_eq!(comments.lines().filter(|l| l.starts_with('#')).count(), 13);
    assert_notes(&import, &[ZONE, (Some(14), "runs as user root")]);
}

#[test]
fn mdadm_keeps_its_escaped_percent_and_its_copyright() {
    const FILE: &str = include_str!("../../tests/fixtures/crontab/mdadm");
    let import = debian("/etc/cron.d/mdadm", FILE);
    assert_eq!(
        jobs_of(&import.toml),
        [job("checkarray", "57 0 * * 0", Some("root"))],
        "{}",
        import.toml
    );
    assert!(
        import
            .toml
            .contains("[ $(date +%d) -le 7 ]; then /usr/share/mdadm/checkarray --cron"),
        "{}",
        import.toml
    );
    let comments = above(&import.toml, "checkarray");
    assert!(
        comments.contains("# Copyright © martin f. krafft <madduck@madduck.net>\n"),
        "{comments}"
    );
    assert!(
        comments.contains("#\n\n# By default, run at 00:57 on every Sunday"),
        "{comments}"
    );
    assert_notes(&import, &[ZONE, (Some(12), "runs as user root")]);
}

#[test]
fn certbot_is_named_after_certbot_not_its_random_sleep() {
    const FILE: &str = include_str!("../../tests/fixtures/crontab/certbot");
    let import = debian("/etc/cron.d/certbot", FILE);
    assert_eq!(
        jobs_of(&import.toml),
        [with_env(
            job("certbot", "0 */12 * * *", Some("root")),
            &[("PATH", DEBIAN_PATH)]
        )],
        "{}",
        import.toml
    );
    assert!(import.toml.contains("shell = \"/bin/sh\""));
    let comments = above(&import.toml, "certbot");
    assert_eq!(comments.lines().count(), 14, "{comments}");
    assert!(
        comments.contains("# Important Note!  This cronjob will NOT be executed if you are\n"),
        "{comments}"
    );
    assert_notes(&import, &[ZONE, (Some(17), "runs as user root")]);
}

#[test]
fn cron_apt_keeps_its_two_commented_out_jobs_in_file_order() {
    const FILE: &str = include_str!("../../tests/fixtures/crontab/cron-apt");
    let import = debian("/etc/cron.d/cron-apt", FILE);
    assert_eq!(
        jobs_of(&import.toml),
        [job("cron-apt", "0 4 * * *", Some("root"))],
        "{}",
        import.toml
    );
    assert_eq!(
        above(&import.toml, "cron-apt"),
        "#\n# Regular cron jobs for the cron-apt package\n#\n# Every night at 4 o'clock.\n\
         # /etc/cron.d/cron-apt:5: 0 4\t* * *\troot\ttest -x /usr/sbin/cron-apt && /usr/sbin/cron-apt\n"
    );
    assert!(
        import.toml.ends_with(
            "# /etc/cron.d/cron-apt, from line 6:\n# Every hour.\n\
             # 0 *\t* * *\troot\ttest -x /usr/sbin/cron-apt && /usr/sbin/cron-apt /etc/cron-apt/config2\n\
             # Every five minutes.\n\
             # */5 *\t* * *\troot\ttest -x /usr/sbin/cron-apt && /usr/sbin/cron-apt /etc/cron-apt/config2\n\n"
        ),
        "{}",
        import.toml
    );
    assert_notes(&import, &[ZONE, (Some(5), "runs as user root")]);
}

#[test]
fn rsnapshot_has_only_commented_out_jobs_and_keeps_them() {
    const FILE: &str = include_str!("../../tests/fixtures/crontab/rsnapshot");
    let import = debian("/etc/cron.d/rsnapshot", FILE);
    assert_eq!(import.jobs, 0);
    assert!(jobs_of(&import.toml).is_empty());
    let expected: String = FILE
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    let kept: String = import
        .toml
        .split("# /etc/cron.d/rsnapshot, from line 1:\n")
        .nth(1)
        .expect("the comments")
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(kept, expected);
    assert_notes(
        &import,
        &[(
            None,
            "no jobs in it: its 4 commented-out job line(s) are kept as comments",
        )],
    );
}

#[test]
fn mailman3_runs_as_list() {
    const FILE: &str = include_str!("../../tests/fixtures/crontab/mailman3");
    let import = debian("/etc/cron.d/mailman3", FILE);
    let list =
        |name, schedule| with_env(job(name, schedule, Some("list")), &[("PATH", DEBIAN_PATH)]);
    assert_eq!(
        jobs_of(&import.toml),
        [
            list("mailman", "0 8 * * *"),
            list("mailman-2", "0 12 * * *")
        ],
        "{}",
        import.toml
    );
    assert!(
        above(&import.toml, "mailman").starts_with(
            "# /etc/cron.d/mailman3: crontab entries for the mailman3 package\n\n\
             # At 8AM, send out notifices of pending requests to list moderators\n"
        ),
        "{}",
        import.toml
    );
    assert!(above(&import.toml, "mailman-2").starts_with(
        "# At 12AM, send mail digests for lists that do periodic as well as threshold delivery\n"
    ));
    assert_notes(
        &import,
        &[
            ZONE,
            (Some(7), "runs as user list"),
            (Some(10), "runs as user list"),
        ],
    );
}

#[test]
fn tiger_keeps_its_variables_and_the_comments_between_them() {
    const FILE: &str = include_str!("../../tests/fixtures/crontab/tiger");
    let import = debian("/etc/cron.d/tiger", FILE);
    assert_eq!(
        jobs_of(&import.toml),
        [with_env(
            job("tigercron", "0 * * * *", Some("root")),
            &[("DEFAULT", "/etc/default/tiger"), ("NICETIGER", "10")]
        )],
        "{}",
        import.toml
    );
    assert_eq!(
        above(&import.toml, "tigercron"),
        "#\n# Regular cron jobs for the tiger package\n#\n# Configuration file\n\
         #  default setting, overriden in the above file\n#\n\
         # /etc/cron.d/tiger:9: 0 * * * *      root    test -x /usr/sbin/tigercron && { [ -r \"$DEFAULT\" ] && . \"$DEFAULT\" ; nice -n$NICETIGER /usr/sbin/tigercron -q ; }\n"
    );
    assert_notes(&import, &[ZONE, (Some(9), "runs as user root")]);
}

#[test]
fn amavisd_new_runs_as_amavis_a_user_this_host_lacks() {
    const FILE: &str = include_str!("../../tests/fixtures/crontab/amavisd-new");
    // Named so that only the lines can tell the user column.
    let import = debian("amavisd-new", FILE);
    assert_eq!(
        jobs_of(&import.toml),
        [
            job("amavisd-new-cronjob", "18 */3 * * *", Some("amavis")),
            job("amavisd-new-cronjob-2", "24 1 * * *", Some("amavis")),
        ],
        "{}",
        import.toml
    );
    assert!(above(&import.toml, "amavisd-new-cronjob").starts_with(
        "#\n#  SpamAssassin maintenance for amavisd-new\n#\n# m h dom mon dow user  command\n"
    ));
    assert_notes(
        &import,
        &[
            ZONE,
            (
                Some(5),
                "runs as user amavis, which this host does not have",
            ),
            (
                Some(6),
                "runs as user amavis, which this host does not have",
            ),
        ],
    );
}

#[test]
fn user_names_are_what_debian_creates_and_what_the_host_resolves() {
    for name in [
        "Debian-exim",
        "Debian-snmp",
        "first.last",
        "_apt",
        "svc$",
        "list",
    ] {
        assert!(detect::user_like(name), "{name}");
    }
    for name in ["/usr/bin/x", "-x", "2fa", "a b", "", &"x".repeat(33)] {
        assert!(!detect::user_like(name), "{name}");
    }
    // Forced: any of them is the user, and one the host resolves too,
    // whatever its shape.
    let mut host = host();
    host.resolve = Some(|name| (name == "1backup").then_some(1001));
    let text = "0 1 * * * first.last /opt/a\n0 2 * * * Svc /opt/b\n0 3 * * * 1backup /opt/c\n";
    let import = import(&one("x", text), Some(true), false, &host).expect("a crontab");
    let users: Vec<Option<String>> = jobs_of(&import.toml).into_iter().map(|j| j.user).collect();
    assert_eq!(
        users,
        [
            Some("first.last".to_string()),
            Some("Svc".to_string()),
            Some("1backup".to_string())
        ],
        "{}",
        import.toml
    );
    assert!(
        messages(&import).contains("x:3: runs as user 1backup: replicron needs"),
        "{}",
        messages(&import)
    );
}

#[test]
fn a_user_name_is_never_read_as_the_command_without_a_note() {
    // One line: a name and a command after it.
    let import = run(
        "jobs",
        "33 * * * * Backup-Svc test -x /opt/b && /opt/b\n",
        None,
    );
    assert!(
        import
            .toml
            .contains("command = \"test -x /opt/b && /opt/b\""),
        "{}",
        import.toml
    );
    assert!(import.toml.contains("user = \"Backup-Svc\""));
    // Where the other lines have commands there, the name is read as the
    // command, and said so.
    let text = "0 1 * * * /usr/bin/a\n0 2 * * * /usr/bin/b\n0 3 * * * /usr/bin/c\n0 4 * * * Debian-exim if true; then x; fi\n";
    let import = run("jobs", text, None);
    assert!(!import.toml.contains("user = "), "{}", import.toml);
    assert!(
        messages(&import).contains(
            "jobs:4: \"Debian-exim\" could be a user, and a command follows it, but it is read as the command"
        ),
        "{}",
        messages(&import)
    );
    assert!(messages(&import).contains("--user-column=true"));
    // Scripts and redirections are commands, not users.
    let import = run(
        "jobs",
        "0 1 * * * backup.sh test\n0 2 * * * tidy > /dev/null\n",
        None,
    );
    assert!(
        import.toml.contains("command = \"backup.sh test\""),
        "{}",
        import.toml
    );
    assert!(file_notes(&import).is_empty(), "{}", messages(&import));
}

#[test]
fn mailto_becomes_a_notify_command_that_mails_on_failure() {
    let text = "\
0 1 * * * /usr/bin/before
MAILTO=ops@example.com, root
0 2 * * * /usr/bin/to-ops
MAILFROM=cron@example.com
0 3 * * * /usr/bin/from-cron
MAILTO=\"\"
0 4 * * * /usr/bin/quiet
MAILTO=-oQ/tmp
0 5 * * * /usr/bin/odd
";
    let import = import(&one("alice", text), None, false, &sendmail_host()).expect("a crontab");
    let notify: Vec<(String, Option<String>)> = jobs_of(&import.toml)
        .into_iter()
        .map(|j| (j.name, j.notify))
        .collect();
    let to = "'ops@example.com, root'";
    assert_eq!(
        notify,
        [
            ("before".to_string(), None),
            (
                "to-ops".to_string(),
                Some(format!(
                    "{{ printf 'To: %s\\nSubject: %s\\n\\n' {to} \"$REPLICRON_TEXT\"; cat; }} | /usr/sbin/sendmail -i -- ops@example.com root"
                ))
            ),
            (
                "from-cron".to_string(),
                Some(format!(
                    "{{ printf 'From: cron@example.com\\nTo: %s\\nSubject: %s\\n\\n' {to} \"$REPLICRON_TEXT\"; cat; }} \
                     | /usr/sbin/sendmail -f cron@example.com -i -- ops@example.com root"
                ))
            ),
            ("quiet".to_string(), None),
            ("odd".to_string(), None),
        ],
        "{}",
        import.toml
    );
    assert_notes(
        &import,
        &[
            ZONE,
            (
                Some(2),
                "MAILTO=\"ops@example.com, root\": the jobs below it mail ops@example.com, root through \
                 /usr/sbin/sendmail when a run fails, times out or is missed (notify.command); cron mailed any \
                 output they printed, even a successful run's",
            ),
            (
                Some(8),
                "warning: MAILTO=\"-oQ/tmp\" is not carried over: \"-oQ/tmp\" would be read as an option",
            ),
        ],
    );
    // Through mail(1), where that is the host's mail program.
    let mut host = host();
    host.mailer = Some(host::Mailer::Mail("/usr/bin/mail".to_string()));
    let import = super::import(
        &one("alice", "MAILTO=root\n@daily /usr/bin/x\n"),
        None,
        false,
        &host,
    )
    .expect("a crontab");
    assert_eq!(
        jobs_of(&import.toml)[0].notify.as_deref(),
        Some("/usr/bin/mail -s \"$REPLICRON_TEXT\" -- root")
    );
    // None: a loud note, and no notify.
    let import = run(
        "alice",
        "MAILTO=root\nMAILFROM=me\n@daily /usr/bin/x\n",
        None,
    );
    assert_eq!(jobs_of(&import.toml)[0].notify, None);
    assert_notes(
        &import,
        &[
            ZONE,
            (
                Some(1),
                "warning: MAILTO=\"root\" is not carried over: this host has no mail program \
                 (/usr/sbin/sendmail, /usr/lib/sendmail, /usr/bin/mail, /usr/bin/mailx)",
            ),
            (Some(2), "MAILFROM=\"me\": no mail program on this host"),
        ],
    );
}

#[test]
fn the_mail_program_is_the_first_the_host_has() {
    use host::{Mailer, find_mailer};
    assert_eq!(
        find_mailer(|p| p == "/usr/bin/mail" || p == "/usr/sbin/sendmail"),
        Some(Mailer::Sendmail("/usr/sbin/sendmail".to_string()))
    );
    assert_eq!(
        find_mailer(|p| p == "/usr/bin/mailx"),
        Some(Mailer::Mail("/usr/bin/mailx".to_string()))
    );
    assert_eq!(find_mailer(|_| false), None);
}

#[test]
fn comments_go_above_the_job_below_them_in_file_order() {
    let text = "\
# header
#

# about PATH
PATH=/bin
# the job
0 1 * * * /usr/bin/one
#0 2 * * * /usr/bin/two
# then three
0 3 * * * /usr/bin/three
# bell:\u{7} and tab:\t.
@Daily /usr/bin/four
# the end
";
    let import = run("alice", text, None);
    assert_eq!(
        above(&import.toml, "one"),
        "# header\n#\n\n# about PATH\n# the job\n# alice:7: 0 1 * * * /usr/bin/one\n"
    );
    assert_eq!(
        above(&import.toml, "three"),
        "#0 2 * * * /usr/bin/two\n# then three\n# alice:10: 0 3 * * * /usr/bin/three\n"
    );
    // A control character TOML comments cannot hold is shown, not written.
    assert!(
        import.toml.ends_with(
            "# bell:\u{fffd} and tab:\t.\n\
             # alice:12 not imported (macro not in lower case): @Daily /usr/bin/four\n\n\
             # alice, from line 13:\n# the end\n\n"
        ),
        "{}",
        import.toml
    );
    load(&import.toml);
}

#[test]
fn macros_are_lower_case_as_cron_spells_them() {
    let text = "@daily /usr/bin/a\n@Daily /usr/bin/b\n@REBOOT /usr/bin/c\n@Fortnightly /usr/bin/d\n@hourly /usr/bin/e\n";
    for every in [false, true] {
        let import = import(&one("alice", text), None, every, &host()).expect("a crontab");
        let names: Vec<String> = jobs_of(&import.toml).into_iter().map(|j| j.name).collect();
        assert_eq!(names, ["a", "e"], "{}", import.toml);
        let text = messages(&import);
        for expected in [
            "alice:2: @Daily is no macro cron knows: it spells them in lower case only, and refuses the line \
             as a syntax error (Debian's cron then ignores the whole file): not imported (write @daily if that is meant)",
            "alice:3: @REBOOT is no macro cron knows",
            "(write @reboot if that is meant)",
            "alice:4: @Fortnightly is no macro cron knows: it spells them in lower case only, and refuses the line \
             as a syntax error (Debian's cron then ignores the whole file): not imported\n",
        ] {
            assert!(text.contains(expected), "{expected}:\n{text}");
        }
        assert!(
            import
                .toml
                .contains("# alice:3 not imported (macro not in lower case): @REBOOT /usr/bin/c")
        );
    }
    // In a system crontab too: the macro is refused, not the user.
    let import = run(
        "/etc/cron.d/x",
        "@Weekly root /usr/bin/a\n@weekly root /usr/bin/b\n",
        None,
    );
    assert_eq!(jobs_of(&import.toml).len(), 1);
    assert!(messages(&import).contains("/etc/cron.d/x:1: @Weekly is no macro"));
}

#[test]
fn tz_is_the_jobs_environment_and_cron_tz_their_zone() {
    let text = "\
TZ=Asia/Tokyo
0 9 * * * /usr/bin/a
CRON_TZ=America/New_York
0 9 * * * /usr/bin/b
CRON_TZ=
0 9 * * * /usr/bin/c
";
    let import =
        import(&one("alice", text), None, false, &host_in("Europe/Berlin")).expect("a crontab");
    let tokyo = [("TZ", "Asia/Tokyo")];
    let mut b = with_env(job("b", "0 9 * * *", None), &tokyo);
    b.zone = Tz::America__New_York;
    assert_eq!(
        jobs_of(&import.toml),
        [
            with_env(job("a", "0 9 * * *", None), &tokyo),
            b,
            with_env(job("c", "0 9 * * *", None), &tokyo),
        ],
        "{}",
        import.toml
    );
    assert_eq!(
        import.toml.matches("timezone = ").count(),
        2,
        "{}",
        import.toml
    );
    assert_notes(&import, &[(None, "2 job(s) set no CRON_TZ")]);
}

#[test]
fn cron_refuses_files_others_can_write_or_root_does_not_own() {
    let host = {
        let mut host = host();
        host.uids.insert("alice".to_string(), 1000);
        host
    };
    let stat = |uid, mode, link_uid| Stat {
        uid,
        mode,
        link_uid,
    };
    let trust = |file, stat: Stat, system| detect::trust(file, &stat, system, &host);
    assert!(trust("/etc/cron.d/x", stat(0, 0o644, None), true).is_empty());
    assert!(trust("/etc/cron.d/x", stat(0, 0o600, Some(0)), true).is_empty());
    let warnings = trust("/etc/cron.d/x", stat(1000, 0o666, Some(1001)), true);
    assert_eq!(warnings.len(), 3, "{warnings:#?}");
    assert!(
        warnings[0].starts_with(
            "warning: reached through a symbolic link owned by uid 1001, not root: cron refuses it (WRONG SYMLINK OWNER)"
        ),
        "{warnings:#?}"
    );
    assert!(
        warnings[1].starts_with(
            "warning: owned by uid 1000 (alice), not root: cron refuses a system crontab that root does not own (WRONG FILE OWNER), \
             so if cron read this file, it ran none of its jobs; imported all the same"
        ),
        "{warnings:#?}"
    );
    assert!(
        warnings[2].starts_with("warning: mode 0666, writable by group and others: cron refuses a system crontab that others can write (INSECURE MODE)"),
        "{warnings:#?}"
    );
    assert!(trust("/etc/crontab", stat(0, 0o664, None), true)[0].contains("writable by its group"));
    // A user's crontab in cron's spool: the user's own, mode 0600.
    let spool = "/var/spool/cron/crontabs/alice";
    assert!(trust(spool, stat(1000, 0o600, None), false).is_empty());
    let warnings = trust(spool, stat(0, 0o644, None), false);
    assert_eq!(warnings.len(), 2, "{warnings:#?}");
    assert!(
        warnings[0].starts_with("warning: owned by uid 0 (root), not by alice whose crontab it is")
    );
    assert!(
        warnings[1].starts_with(
            "warning: mode 0644, where cron reads a crontab in its spool only at 0600"
        )
    );
    // A copy elsewhere: only anyone's writing counts.
    assert!(trust("alice.crontab", stat(1000, 0o664, None), false).is_empty());
    assert!(
        trust("alice.crontab", stat(1000, 0o666, None), false)[0]
            .starts_with("warning: mode 0666, writable by anyone")
    );
    // In an import, the warnings come first, about the whole file.
    let mut source = Source::new("/etc/cron.d/x", "0 1 * * * root /usr/bin/a\n");
    source.stat = Some(stat(0, 0o646, None));
    let import = super::import(&[source], None, false, &host).expect("a crontab");
    assert_eq!(import.jobs, 1);
    assert_notes(
        &import,
        &[
            ZONE,
            (None, "warning: mode 0646, writable by others"),
            (Some(1), "runs as user root"),
        ],
    );
}

#[test]
fn a_folder_imports_around_a_file_that_is_no_crontab() {
    let dir = tempfile::tempdir().expect("dir");
    let cron_d = dir.path().join("cron.d");
    std::fs::create_dir(&cron_d).expect("cron.d");
    std::fs::write(cron_d.join("anacron"), ANACRONTAB).expect("write");
    std::fs::write(cron_d.join("binary"), b"0 1 * * * root x\n\xff\xfe\n").expect("write");
    std::fs::write(cron_d.join("helper"), "#!/bin/sh\nexec true\n").expect("write");
    std::fs::write(cron_d.join("good"), "0 1 * * * root /usr/bin/good\n").expect("write");
    std::os::unix::fs::symlink(dir.path().join("nowhere"), cron_d.join("dangling")).expect("link");
    let writable = cron_d.join("writable");
    std::fs::write(&writable, "0 2 * * * root /usr/bin/writable\n").expect("write");
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o666);
    std::fs::set_permissions(&writable, mode).expect("chmod");

    let collected = files::collect(&[&cron_d]).expect("the folder");
    let shown = |name: &str| cron_d.join(name).display().to_string();
    let collected_notes: Vec<String> = collected.notes.iter().map(ToString::to_string).collect();
    assert_eq!(
        collected_notes,
        [
            format!(
                "{}:2: skipped, the folder's other files are imported: not UTF-8 text, so not a crontab",
                shown("binary")
            ),
            format!(
                "{}: skipped, the folder's other files are imported: cannot read it: No such file or directory (os error 2)",
                shown("dangling")
            ),
        ]
    );
    assert!(collected.sources.iter().all(|s| s.in_folder));
    let import = import(&collected.sources, None, false, &host()).expect("the rest");
    let names: Vec<String> = jobs_of(&import.toml).into_iter().map(|j| j.name).collect();
    assert_eq!(names, ["good", "writable"], "{}", import.toml);
    let text = messages(&import);
    for expected in [
        format!(
            "{}: skipped, the folder's other files are imported: this is an anacrontab, not a crontab",
            shown("anacron")
        ),
        format!(
            "{}: skipped, the folder's other files are imported: not a crontab: no line starts with a schedule",
            shown("helper")
        ),
        format!("{}: warning: mode 0666", shown("writable")),
    ] {
        assert!(text.contains(&expected), "{expected}:\n{text}");
    }
    assert!(!import.toml.contains("anacron"), "{}", import.toml);
    // Named on its own, a file that is no crontab still stops the import.
    let named = files::collect(&[cron_d.join("helper")]).expect("a file");
    assert!(!named.sources[0].in_folder);
    assert!(import_is_refused(&named.sources));
    assert!(matches!(
        files::collect(&[cron_d.join("binary")]),
        Err(ImportError::NotACrontab { .. })
    ));
}

fn import_is_refused(sources: &[Source]) -> bool {
    matches!(
        import(sources, None, false, &host()),
        Err(ImportError::NotACrontab { .. })
    )
}
