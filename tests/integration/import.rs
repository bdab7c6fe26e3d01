//! `replicron import-crontab` on what hosts have: a system crontab with a
//! user column, `cron.d` files, a user crontab, a folder of them, several
//! at once, and an anacrontab it must refuse. Some fixtures in
//! `tests/fixtures/crontab/` have Debian's shapes; those named after a
//! package are that package's `/etc/cron.d` file as Debian 12 ships it
//! (sa-exim 4.2.1-20, logcheck 1.4.2, munin 2.0.73, cacti 1.2.24, php-common
//! 93, mdadm 4.2-5, certbot 2.1.0-4, cron-apt 0.13.0.1, rsnapshot 1.4.5,
//! mailman3 3.3.8, tiger 3.2.4~rc1, amavisd-new 2.13.0); where the machine
//! can fetch them, Debian's own crontabs are imported too. Every output must
//! pass `replicron check` and fire at the instants cron would.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::{binary, text};

/// The zone the imports run in: the host's zone is read from `TZ` first,
/// so the tests do not depend on the machine's.
const HOST_ZONE: &str = "Europe/Berlin";

/// The instant every check lists from: a Monday, in winter time.
const FROM: &str = "2027-03-01T00:00:00Z";

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/crontab")
        .join(name)
}

/// What `import-crontab ARGS` exited with, printed and said.
struct Imported {
    code: i32,
    toml: String,
    notes: String,
}

fn import_with(args: &[&Path], stdin: Option<&str>, extra: &[&str]) -> Imported {
    let mut command = Command::new(binary());
    command
        .arg("import-crontab")
        .args(args)
        .args(extra)
        .env("TZ", HOST_ZONE)
        // Someone other than the crontabs' users imports them.
        .env("USER", "importer")
        .env_remove("REPLICRON_DATABASE_URL")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("replicron runs");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("stdin");
        pipe.write_all(input.as_bytes()).expect("write stdin");
    }
    let output = child.wait_with_output().expect("replicron ends");
    let (toml, notes) = text(&output);
    Imported {
        code: output.status.code().unwrap_or(-1),
        toml,
        notes,
    }
}

fn import(args: &[&Path]) -> Imported {
    import_with(args, None, &[])
}

/// Asserts the import succeeded and that the summary counts every note
/// printed above it; returns the notes.
fn succeeded(imported: &Imported) -> &str {
    assert_eq!(imported.code, 0, "{}", imported.notes);
    let lines: Vec<&str> = imported.notes.lines().collect();
    let summary = lines.last().expect("a summary");
    let counted = summary
        .split(", ")
        .nth(1)
        .and_then(|s| s.strip_suffix(" line(s) to look at"))
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or_else(|| panic!("no summary: {summary}"));
    assert_eq!(counted, lines.len() - 1, "{}", imported.notes);
    &imported.notes
}

/// `replicron check` on the TOML (written into `dir` as `name`), listing
/// one instant per job from [`FROM`]; returns its output.
fn check(dir: &Path, name: &str, toml: &str) -> String {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, toml).expect("write the toml");
    let output = Command::new(binary())
        .args(["check", "--config"])
        .arg(&path)
        .args(["--from", FROM, "--count", "1"])
        .env("REPLICRON_DATABASE_URL", "sqlite:///tmp/unused.db")
        .output()
        .expect("check runs");
    let (out, err) = text(&output);
    assert!(output.status.success(), "{toml}\n{out}{err}");
    out
}

/// Asserts `check`'s output has job `name` with `schedule` in `zone`, first
/// firing at `first` (UTC).
fn assert_job(out: &str, name: &str, schedule: &str, zone: &str, first: &str) {
    let block = out
        .split("\njob ")
        .find(|b| b.starts_with(&format!("{name:?}")))
        .unwrap_or_else(|| panic!("no job {name:?}:\n{out}"));
    assert!(
        block.contains(&format!("  schedule  {schedule}\n")),
        "{name}: {block}"
    );
    assert!(
        block.contains(&format!("  zone      {zone}\n")),
        "{name}: {block}"
    );
    assert!(
        block.contains(&format!("\n    {first}  ")),
        "{name}: {block}"
    );
}

/// [`check`] on a host that may lack some of the jobs' users: `check`
/// may refuse only for users this host does not have, and passes once
/// their `user` lines are gone. Returns its output and those users.
fn check_lacking_users(dir: &Path, name: &str, toml: &str) -> (String, Vec<String>) {
    let path = dir.join(format!("{name}-as-is.toml"));
    std::fs::write(&path, toml).expect("write the toml");
    let output = Command::new(binary())
        .args(["check", "--config"])
        .arg(&path)
        .args(["--count", "0"])
        .env("REPLICRON_DATABASE_URL", "sqlite:///tmp/unused.db")
        .output()
        .expect("check runs");
    let (_, err) = text(&output);
    let mut missing: Vec<String> = Vec::new();
    if !output.status.success() {
        for line in err.lines().skip(1) {
            let user = line
                .split_once("key \"user\": no user \"")
                .and_then(|(_, rest)| rest.strip_suffix("\" on this host"))
                .unwrap_or_else(|| panic!("check refused more than a missing user:\n{err}"));
            if !missing.iter().any(|m| m == user) {
                missing.push(user.to_string());
            }
        }
    }
    let kept: String = toml
        .lines()
        .filter(|l| !missing.iter().any(|u| *l == format!("user = {u:?}")))
        .map(|l| format!("{l}\n"))
        .collect();
    (check(dir, name, &kept), missing)
}

/// The mail program this machine has, as the importer looks for it.
fn mailer() -> Option<&'static str> {
    [
        "/usr/sbin/sendmail",
        "/usr/lib/sendmail",
        "/usr/bin/mail",
        "/usr/bin/mailx",
    ]
    .into_iter()
    .find(|p| Path::new(p).is_file())
}

/// The TOML of job `name`: from its `[[job]]` to the next blank line.
fn job_toml<'a>(toml: &'a str, name: &str) -> &'a str {
    let start = toml
        .find(&format!("[[job]]\nname = {name:?}\n"))
        .unwrap_or_else(|| panic!("no job {name}:\n{toml}"));
    let end = toml[start..].find("\n\n").map_or(toml.len(), |e| start + e);
    &toml[start..end]
}

fn job_names(out: &str) -> Vec<String> {
    out.lines()
        .filter_map(|l| l.strip_prefix("job \""))
        .filter_map(|l| l.split('"').next())
        .map(str::to_string)
        .collect()
}

#[test]
fn a_system_crontab_is_found_by_its_content_and_keeps_the_hosts_zone() {
    let dir = tempfile::tempdir().expect("dir");
    let path = fixture("system-crontab");
    let imported = import(&[&path]);
    let notes = succeeded(&imported);
    // The user column is recognised from the lines, not the path.
    assert!(!imported.toml.contains("root\\t"), "{}", imported.toml);
    assert!(
        imported
            .toml
            .contains("command = \"cd / && run-parts --report /etc/cron.hourly\""),
        "{}",
        imported.toml
    );
    assert!(
        imported
            .toml
            .contains(&format!("timezone = \"{HOST_ZONE}\""))
    );
    assert_eq!(
        imported.toml.matches("timezone =").count(),
        1,
        "{}",
        imported.toml
    );
    let out = check(dir.path(), "system", &imported.toml);
    // Berlin is UTC+1 in March: cron's 05:20 is 04:20 UTC.
    for (name, schedule, first) in [
        ("cron-hourly", "11 * * * *", "2027-03-01T00:11:00+00:00"),
        ("cron-daily", "20 5 * * *", "2027-03-01T04:20:00+00:00"),
        ("cron-weekly", "40 5 * * 0", "2027-03-07T04:40:00+00:00"),
        ("cron-monthly", "50 5 1 * *", "2027-03-01T04:50:00+00:00"),
        (
            "cache-warm",
            "*/30 8-18 * * 1-5",
            "2027-03-01T07:00:00+00:00",
        ),
    ] {
        assert_job(&out, name, schedule, HOST_ZONE, first);
    }
    let shown = path.display();
    for expected in [
        format!(
            "replicron: 5 job(s) set no CRON_TZ, so cron ran them in this host's time zone; \
             [defaults] timezone is set to {HOST_ZONE} (from the TZ environment variable)"
        ),
        format!("{shown}:8: runs as user root"),
        format!("{shown}:12: runs as user www-data"),
        format!("{shown}: 5 job(s) imported, 6 line(s) to look at"),
    ] {
        assert!(notes.contains(&expected), "{expected}:\n{notes}");
    }
    // From stdin, with no path to hint at it, the same.
    let content = std::fs::read_to_string(&path).expect("fixture");
    let piped = import_with(&[Path::new("-")], Some(&content), &[]);
    succeeded(&piped);
    assert_eq!(
        piped.toml.replace("stdin", "FILE"),
        imported.toml.replace(&shown.to_string(), "FILE")
    );
}

#[test]
fn a_user_crontab_keeps_its_zone_and_reports_what_does_not_carry_over() {
    let dir = tempfile::tempdir().expect("dir");
    let path = fixture("user-crontab");
    let imported = import(&[&path]);
    let notes = succeeded(&imported);
    assert!(!imported.toml.contains("user = "), "{}", imported.toml);
    let out = check(dir.path(), "user", &imported.toml);
    let zone = "America/New_York";
    // New York is UTC-5 in early March.
    assert_job(
        &out,
        "sync-orders",
        "*/15 9-17 * * mon-fri",
        zone,
        "2027-03-01T14:00:00+00:00",
    );
    assert_job(
        &out,
        "invoice",
        "30 2 1,15 * *",
        zone,
        "2027-03-01T07:30:00+00:00",
    );
    assert_job(&out, "tidy", "@hourly", zone, "2027-03-01T01:00:00+00:00");
    assert_eq!(job_names(&out), ["sync-orders", "invoice", "tidy"]);
    let shown = path.display();
    for expected in [
        // Mailed, or loudly not, as this machine has a mail program.
        format!(
            "{shown}:2: {}MAILTO=\"ops@example.com\"",
            if mailer().is_some() { "" } else { "warning: " }
        ),
        format!("{shown}:8: @reboot is not carried over"),
        format!("{shown}:9: the command uses crontab's %"),
        format!(
            "{shown}:10: invalid schedule \"0 25 * * *\": hour 25 is out of range 0–23: not imported"
        ),
        format!("{shown}: 3 job(s) imported, 4 line(s) to look at"),
    ] {
        assert!(notes.contains(&expected), "{expected}:\n{notes}");
    }
    // Every job has CRON_TZ: the host's zone is not relied on.
    assert!(!notes.contains("set no CRON_TZ"), "{notes}");
}

#[test]
fn a_folder_is_read_as_cron_reads_it_and_files_merge_into_one_config() {
    let dir = tempfile::tempdir().expect("dir");
    let cron_d = dir.path().join("cron.d");
    std::fs::create_dir(&cron_d).expect("cron.d");
    let copy = |from: &str, to: &str| {
        std::fs::copy(fixture(from), cron_d.join(to)).expect("copy");
    };
    copy("cron.d-stats", "stats");
    copy("cron.d-catchup", "catchup");
    // What cron skips: each would add a job if read.
    for skipped in [
        ".placeholder",
        "stats~",
        "stats.dpkg-old",
        "README",
        "cleanup.sh",
    ] {
        copy("cron.d-stats", skipped);
    }
    std::fs::create_dir(cron_d.join("sub")).expect("sub");

    let imported = import(&[&cron_d]);
    let notes = succeeded(&imported);
    let out = check(dir.path(), "cron-d", &imported.toml);
    assert_eq!(
        job_names(&out),
        ["catchup", "statcollect-sample", "statcollect-sample-2"]
    );
    assert_job(
        &out,
        "statcollect-sample",
        "3-53/10 * * * *",
        HOST_ZONE,
        "2027-03-01T00:03:00+00:00",
    );
    assert_job(
        &out,
        "statcollect-sample-2",
        "58 23 * * *",
        HOST_ZONE,
        "2027-03-01T22:58:00+00:00",
    );
    assert_job(
        &out,
        "catchup",
        "15 6-22 * * *",
        HOST_ZONE,
        "2027-03-01T05:15:00+00:00",
    );
    for skipped in [
        ".placeholder",
        "stats~",
        "stats.dpkg-old",
        "README",
        "cleanup.sh",
        "sub",
    ] {
        let expected = format!(
            "{}: skipped, as cron skips it",
            cron_d.join(skipped).display()
        );
        assert!(notes.contains(&expected), "{expected}:\n{notes}");
    }
    assert!(notes.contains("2 files: 3 job(s) imported"), "{notes}");

    // Several files and a folder: one [defaults], names unique across them.
    let system = fixture("system-crontab");
    let user = fixture("user-crontab");
    let merged = import(&[&system, &cron_d, &user]);
    let notes = succeeded(&merged);
    assert_eq!(
        merged.toml.matches("[defaults]").count(),
        1,
        "{}",
        merged.toml
    );
    let out = check(dir.path(), "merged", &merged.toml);
    let names = job_names(&out);
    assert_eq!(names.len(), 11, "{names:?}");
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "{names:?}");
    assert_job(
        &out,
        "cron-daily",
        "20 5 * * *",
        HOST_ZONE,
        "2027-03-01T04:20:00+00:00",
    );
    assert_job(
        &out,
        "tidy",
        "@hourly",
        "America/New_York",
        "2027-03-01T01:00:00+00:00",
    );
    assert!(notes.contains("4 files: 11 job(s) imported"), "{notes}");
    // Each note still names its own file.
    assert!(
        notes.contains(&format!("{}:10: invalid schedule", user.display())),
        "{notes}"
    );
}

#[test]
fn an_anacrontab_is_refused_with_nothing_printed() {
    let path = fixture("anacrontab");
    let content = std::fs::read_to_string(&path).expect("fixture");
    let system = fixture("system-crontab");
    for imported in [
        import(&[&path]),
        // By its content, whatever it is called.
        import_with(&[Path::new("-")], Some(&content), &[]),
        // Among crontabs: the whole import stops.
        import(&[&system, &path]),
    ] {
        assert_eq!(imported.code, 2, "{}", imported.notes);
        assert_eq!(imported.toml, "", "nothing on stdout");
        assert!(
            imported
                .notes
                .contains("this is an anacrontab, not a crontab"),
            "{}",
            imported.notes
        );
        assert!(
            imported
                .notes
                .contains("period delay job-identifier command"),
            "{}",
            imported.notes
        );
    }
}

/// A folder whose every file is no crontab (a binary, a file that is not
/// UTF-8): nothing is imported (exit 2, nothing on stdout), and each file
/// is named with why it was skipped before the verdict.
#[test]
fn a_folder_with_no_crontab_says_what_each_file_was() {
    let dir = tempfile::tempdir().expect("dir");
    let cron_d = dir.path().join("cron.d");
    std::fs::create_dir(&cron_d).expect("folder");
    std::fs::write(cron_d.join("blob"), b"\x7fELF\x02\x01\xff\xfe").expect("write");
    std::fs::write(cron_d.join("latin1"), b"0 1 * * * root caf\xe9\n").expect("write");
    let imported = import(&[&cron_d]);
    assert_eq!(imported.code, 2, "{}", imported.notes);
    assert_eq!(imported.toml, "", "nothing on stdout");
    for file in ["blob", "latin1"] {
        assert!(
            imported
                .notes
                .lines()
                .any(|l| l.contains(&format!("cron.d/{file}")) && l.contains("not UTF-8")),
            "{file}: {}",
            imported.notes
        );
    }
    assert!(
        imported.notes.contains("no crontab to import"),
        "{}",
        imported.notes
    );
}

/// Downloads and unpacks Debian's crontabs into `dir`: `etc/crontab` (from
/// `cron-daemon-common`, or `cron` on releases before it), `etc/cron.d/`
/// (anacron's and sysstat's) and `etc/anacrontab`. `Err` says why not.
fn debian_crontabs(dir: &Path) -> Result<PathBuf, String> {
    let runs = |program: &str, args: &[&str]| {
        Command::new(program)
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .output()
    };
    for tool in ["apt-get", "apt-cache", "dpkg-deb"] {
        if runs(tool, &["--version"]).is_err() {
            return Err(format!("{tool} is not installed"));
        }
    }
    let cron = match runs("apt-cache", &["show", "cron-daemon-common"]) {
        Ok(output) if output.status.success() => "cron-daemon-common",
        _ => "cron",
    };
    let download = runs(
        "apt-get",
        &[
            "download",
            "-q",
            "-o",
            "Acquire::Retries=0",
            "-o",
            "Acquire::http::Timeout=30",
            cron,
            "anacron",
            "sysstat",
        ],
    )
    .map_err(|e| format!("apt-get download: {e}"))?;
    if !download.status.success() {
        return Err(format!(
            "apt-get download {cron} anacron sysstat failed: {}",
            String::from_utf8_lossy(&download.stderr).trim()
        ));
    }
    let root = dir.join("root");
    let debs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| e.to_string())?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "deb"))
        .collect();
    if debs.len() != 3 {
        return Err(format!("apt-get download gave {debs:?}"));
    }
    for deb in debs {
        let unpacked = Command::new("dpkg-deb")
            .arg("-x")
            .arg(&deb)
            .arg(&root)
            .output()
            .map_err(|e| format!("dpkg-deb: {e}"))?;
        if !unpacked.status.success() {
            return Err(format!(
                "dpkg-deb -x {}: {}",
                deb.display(),
                String::from_utf8_lossy(&unpacked.stderr).trim()
            ));
        }
    }
    Ok(root)
}

#[test]
fn debians_own_crontabs_from_its_packages() {
    let dir = tempfile::tempdir().expect("dir");
    let root = match debian_crontabs(dir.path()) {
        Ok(root) => root,
        Err(why) => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "Debian's crontabs could not be fetched, which CI requires: {why}"
            );
            eprintln!("skipped the real Debian crontabs (the fixtures were tested): {why}");
            return;
        }
    };
    let etc = root.join("etc");

    // /etc/crontab from a path that is not /etc/crontab.
    let crontab = etc.join("crontab");
    let imported = import(&[&crontab]);
    succeeded(&imported);
    assert!(
        !imported.toml.contains("command = \"root"),
        "{}",
        imported.toml
    );
    let out = check(dir.path(), "debian-crontab", &imported.toml);
    assert_eq!(
        job_names(&out),
        ["cron-hourly", "cron-daily", "cron-weekly", "cron-monthly"]
    );
    assert_job(
        &out,
        "cron-hourly",
        "17 * * * *",
        HOST_ZONE,
        "2027-03-01T00:17:00+00:00",
    );
    assert_job(
        &out,
        "cron-daily",
        "25 6 * * *",
        HOST_ZONE,
        "2027-03-01T05:25:00+00:00",
    );

    // The cron.d folder, as a folder.
    let cron_d = etc.join("cron.d");
    let imported = import(&[&cron_d]);
    let notes = succeeded(&imported);
    assert!(
        !imported.toml.contains("command = \"root"),
        "{}",
        imported.toml
    );
    let out = check(dir.path(), "debian-cron-d", &imported.toml);
    let names = job_names(&out);
    for name in ["anacron", "debian-sa1", "debian-sa1-2"] {
        assert!(
            names.iter().any(|n| n == name),
            "{name}: {names:?}\n{notes}"
        );
    }
    assert!(notes.contains("line(s) to look at"), "{notes}");

    // Both at once: one config.
    let merged = import(&[&crontab, &cron_d]);
    succeeded(&merged);
    assert_eq!(
        merged.toml.matches("[defaults]").count(),
        1,
        "{}",
        merged.toml
    );
    check(dir.path(), "debian-merged", &merged.toml);

    // And its anacrontab is refused.
    let refused = import(&[&etc.join("anacrontab")]);
    assert_eq!(refused.code, 2, "{}", refused.notes);
    assert_eq!(refused.toml, "");
    assert!(
        refused.notes.contains("this is an anacrontab"),
        "{}",
        refused.notes
    );
}

/// Debian's packages' cron.d files (the fixtures named after them) in
/// one folder, as a host with those packages has them, with a file cron
/// would read that is no crontab.
#[test]
fn debian_packages_cron_d_files_as_one_folder() {
    let dir = tempfile::tempdir().expect("dir");
    let cron_d = dir.path().join("cron.d");
    std::fs::create_dir(&cron_d).expect("cron.d");
    for (fixture_name, name) in [
        ("sa-exim-greylistclean", "greylistclean"),
        ("logcheck", "logcheck"),
        ("munin", "munin"),
        ("cacti", "cacti"),
        ("php-common-php", "php"),
        ("mdadm", "mdadm"),
        ("certbot", "certbot"),
        ("cron-apt", "cron-apt"),
        ("rsnapshot", "rsnapshot"),
        ("mailman3", "mailman3"),
        ("tiger", "tiger"),
        ("amavisd-new", "amavisd-new"),
        // Not a crontab: skipped, the rest imported.
        ("anacrontab", "anacron-jobs"),
    ] {
        std::fs::copy(fixture(fixture_name), cron_d.join(name)).expect("copy");
    }
    let imported = import(&[&cron_d]);
    let notes = succeeded(&imported);
    let toml = &imported.toml;
    let (out, missing) = check_lacking_users(dir.path(), "debian-packages", toml);
    assert_eq!(
        job_names(&out),
        [
            "amavisd-new-cronjob",
            "amavisd-new-cronjob-2",
            "poller",
            "certbot",
            "cron-apt",
            "greylistclean",
            "logcheck",
            "mailman",
            "mailman-2",
            "checkarray",
            "munin-cron",
            "munin-limits",
            "find",
            "find-2",
            "sessionclean",
            "tigercron",
        ],
        "{notes}"
    );
    // Berlin is UTC+1 in March.
    for (name, schedule, first) in [
        ("greylistclean", "33 * * * *", "2027-03-01T00:33:00+00:00"),
        ("logcheck", "2 * * * *", "2027-03-01T00:02:00+00:00"),
        ("munin-limits", "14 10 * * *", "2027-03-01T09:14:00+00:00"),
        ("sessionclean", "09,39 * * * *", "2027-03-01T00:09:00+00:00"),
        ("checkarray", "57 0 * * 0", "2027-03-06T23:57:00+00:00"),
        ("certbot", "0 */12 * * *", "2027-03-01T11:00:00+00:00"),
        ("mailman-2", "0 12 * * *", "2027-03-01T11:00:00+00:00"),
    ] {
        assert_job(&out, name, schedule, HOST_ZONE, first);
    }
    // Each job keeps its user, whether this host has it or not.
    for (name, user) in [
        ("greylistclean", "Debian-exim"),
        ("logcheck", "logcheck"),
        ("munin-cron", "munin"),
        ("find-2", "www-data"),
        ("poller", "www-data"),
        ("mailman", "list"),
        ("amavisd-new-cronjob", "amavis"),
        ("tigercron", "root"),
    ] {
        assert!(
            job_toml(toml, name).contains(&format!("\nuser = {user:?}")),
            "{name}: {toml}"
        );
    }
    for user in &missing {
        assert!(
            [
                "Debian-exim",
                "logcheck",
                "munin",
                "amavis",
                "list",
                "www-data"
            ]
            .contains(&user.as_str()),
            "{user}"
        );
    }
    // MAILTO=root, of logcheck, munin and cacti: mailed where this
    // machine has a mail program, loudly lost where it has none.
    for name in ["logcheck", "munin-cron", "find-2", "poller"] {
        let block = job_toml(toml, name);
        match mailer() {
            Some(path) => assert!(
                block.contains("notify = { command = ") && block.contains(path),
                "{name}: {block}"
            ),
            None => assert!(!block.contains("notify"), "{name}: {block}"),
        }
    }
    assert!(!job_toml(toml, "certbot").contains("notify"));
    let shown = |name: &str| cron_d.join(name).display().to_string();
    for file in ["logcheck:4", "munin:5", "cacti:1"] {
        let expected = match mailer() {
            Some(path) => format!(
                "{}: MAILTO=\"root\": the jobs below it mail root through {path} when a run fails",
                shown(file)
            ),
            None => format!(
                "{}: warning: MAILTO=\"root\" is not carried over: this host has no mail program",
                shown(file)
            ),
        };
        assert!(notes.contains(&expected), "{expected}:\n{notes}");
    }
    // The comments, commented-out jobs among them, next to their jobs.
    for expected in [
        "# If you have configured spamd to run as a fixed user, change \"Debian-exim\" below.\n",
        "#30 2 * * sat www-data /usr/share/cacti/cli/refresh_csrf.php\n",
        "# 30 3  \t* * *\t\troot\t/usr/bin/rsnapshot beta\n",
        "# Look for and purge old sessions every 30 minutes\n",
    ] {
        assert!(toml.contains(expected), "{expected}:\n{toml}");
    }
    for expected in [
        format!(
            "{}: skipped, the folder's other files are imported: this is an anacrontab, not a crontab",
            shown("anacron-jobs")
        ),
        format!(
            "{}: no jobs in it: its 4 commented-out job line(s) are kept as comments",
            shown("rsnapshot")
        ),
        format!("{}:6: @reboot is not carried over", shown("logcheck")),
        format!("{}:3: runs as user Debian-exim", shown("greylistclean")),
        "13 files: 16 job(s) imported".to_string(),
    ] {
        assert!(notes.contains(&expected), "{expected}:\n{notes}");
    }
}

/// sa-exim's file under its package's name, not in a cron.d folder: its
/// lines alone say that `Debian-exim` is the user; and with
/// `--user-column=true` the name is taken too.
#[test]
fn sa_exims_debian_exim_is_the_user_wherever_the_file_lies() {
    let dir = tempfile::tempdir().expect("dir");
    let path = fixture("sa-exim-greylistclean");
    for extra in [&[][..], &["--user-column=true"][..]] {
        let imported = import_with(&[&path], None, extra);
        let notes = succeeded(&imported);
        assert!(
            imported.toml.contains(
                "command = \"[ -x /usr/share/sa-exim/greylistclean ] && /usr/share/sa-exim/greylistclean\"\n\
                 user = \"Debian-exim\"\n"
            ),
            "{extra:?}: {}",
            imported.toml
        );
        assert!(
            notes.contains(&format!("{}:3: runs as user Debian-exim", path.display())),
            "{notes}"
        );
        let (out, _) = check_lacking_users(dir.path(), "greylistclean", &imported.toml);
        assert_job(
            &out,
            "greylistclean",
            "33 * * * *",
            HOST_ZONE,
            "2027-03-01T00:33:00+00:00",
        );
    }
}

/// A system crontab others can write: cron refuses it, the import warns.
#[test]
fn a_crontab_others_can_write_draws_a_warning() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("crontab");
    std::fs::copy(fixture("system-crontab"), &path).expect("copy");
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o666);
    std::fs::set_permissions(&path, mode).expect("chmod");
    let imported = import(&[&path]);
    let notes = succeeded(&imported);
    let expected = format!(
        "{}: warning: mode 0666, writable by group and others: cron refuses a system crontab that others can write",
        path.display()
    );
    assert!(notes.contains(&expected), "{expected}:\n{notes}");
    check(dir.path(), "writable", &imported.toml);
}

/// `--out-dir`: one file of jobs per crontab, and on stdout the job file
/// that includes them, which `check` reads with each job's file; a second
/// import into the same folder writes nothing over.
#[test]
fn out_dir_writes_one_file_per_crontab_that_the_printed_job_file_includes() {
    let dir = tempfile::tempdir().expect("a folder");
    let alice = dir.path().join("alice");
    std::fs::write(&alice, "0 3 * * * /usr/bin/backup --all\n").expect("alice");
    let bob = dir.path().join("bob");
    std::fs::write(&bob, "*/5 * * * * echo hi\n").expect("bob");
    let out_dir = dir.path().join("jobs.d");
    let out_arg = out_dir.to_str().expect("utf-8");
    let extra = ["--user-column", "false", "--out-dir", out_arg];
    let imported = import_with(&[&alice, &bob], None, &extra);
    succeeded(&imported);
    let pattern = out_dir.join("*.toml").display().to_string();
    assert!(
        imported.toml.contains(&format!("include = [{pattern:?}]")),
        "{}",
        imported.toml
    );
    assert!(!imported.toml.contains("[[job]]"), "{}", imported.toml);
    let mut written: Vec<String> = std::fs::read_dir(&out_dir)
        .expect("jobs.d")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    assert_eq!(written, ["alice.toml", "bob.toml"]);
    let alice_jobs = std::fs::read_to_string(out_dir.join("alice.toml")).expect("alice.toml");
    assert!(alice_jobs.contains("/usr/bin/backup --all"), "{alice_jobs}");
    assert!(
        !alice_jobs.contains("bob") && !alice_jobs.contains("[defaults]"),
        "{alice_jobs}"
    );
    let out = check(dir.path(), "main", &imported.toml);
    for file in ["alice.toml", "bob.toml"] {
        assert!(
            out.contains(&format!("  file      {}\n", out_dir.join(file).display())),
            "{out}"
        );
    }
    let again = import_with(&[&alice, &bob], None, &extra);
    assert_ne!(again.code, 0, "{}", again.notes);
    assert!(again.notes.contains("exists"), "{}", again.notes);
}
