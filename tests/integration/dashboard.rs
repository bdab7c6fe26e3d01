//! The dashboard in a real browser (Debian's Chromium, driven through
//! chromedriver by fantoccini), on every backend: the jobs and their
//! statuses appear, a job's HTML output is shown as text, a click leads to
//! a run's output, and with the token a job is paused and resumed from the
//! page (checked in the database through `replicron status`). Screenshots
//! are saved under `target/screenshots/`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

use crate::support::{TestDb, run, wait_until};
use crate::web::{TOKEN, free_port, free_ports, get_json, http, start_web, web_config};

/// A chromedriver process, killed on drop.
struct Driver {
    child: Child,
    port: u16,
}

impl Driver {
    fn start() -> Driver {
        let port = free_port();
        let child = Command::new("/usr/bin/chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        wait_until("chromedriver", Duration::from_secs(20), || {
            crate::web::request(port, "GET", "/status", &[], "").0 == 200
        });
        Driver { child, port }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn screenshots() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/screenshots");
    std::fs::create_dir_all(&dir).expect("target/screenshots");
    dir
}

async fn browser(driver: &Driver, profile: &std::path::Path) -> Client {
    themed_browser(driver, profile, false).await
}

/// A browser whose system theme is dark, or light.
async fn themed_browser(driver: &Driver, profile: &std::path::Path, dark: bool) -> Client {
    let scheme = if dark { "0" } else { "1" };
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".to_string(),
        json!({
            "binary": "/usr/bin/chromium",
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-quic", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--window-size=1400,1000",
                format!("--blink-settings=preferredColorScheme={scheme}"),
                format!("--user-data-dir={}", profile.display()),
            ],
        }),
    );
    // Plain HTTP to chromedriver on this host: no TLS stack needed.
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(capabilities)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .expect("a browser session")
}

async fn save(client: &Client, name: &str) -> PathBuf {
    let png = client.screenshot().await.expect("screenshot");
    let path = screenshots().join(format!("{name}.png"));
    std::fs::write(&path, png).expect("write the screenshot");
    path
}

/// Finds the element at `locator` and clicks it. The dashboard's pages
/// refresh themselves: an element found just before a refresh is stale by
/// the click, so the pair is tried again on the new page.
async fn click(client: &Client, locator: Locator<'_>, what: &str) {
    for _ in 0..5 {
        let element = client
            .find(locator)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        match element.click().await {
            Ok(()) => return,
            Err(fantoccini::error::CmdError::Standard(e))
                if e.error == fantoccini::error::ErrorStatus::StaleElementReference => {}
            Err(e) => panic!("click {what}: {e}"),
        }
    }
    panic!("click {what}: stale five times");
}

/// The `on-demand` job's pause in `replicron status --format json`.
fn paused_in_database(config: &std::path::Path) -> Value {
    let (_, out, err) = run(config, &["status", "--format", "json"]);
    let status: Value = serde_json::from_str(&out).unwrap_or_else(|_| panic!("status: {err}"));
    status["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .find(|j| j["job"] == "on-demand")
        .expect("on-demand")["paused"]
        .clone()
}

mod the_dashboard_in_a_browser {
    use super::*;

    #[cfg(feature = "sqlite")]
    #[test]
    #[cfg_attr(
        replicron_no_chromium,
        ignore = "needs Debian's chromium and chromium-driver"
    )]
    fn sqlite() {
        check(&TestDb::sqlite());
    }

    #[cfg(feature = "mysql")]
    #[test]
    #[cfg_attr(
        replicron_no_chromium,
        ignore = "needs Debian's chromium and chromium-driver"
    )]
    #[cfg_attr(
        all(replicron_no_mysql_server, not(replicron_no_chromium)),
        ignore = "REPLICRON_TEST_MYSQL_URL is not set"
    )]
    fn mysql() {
        check(&TestDb::mysql());
    }

    #[cfg(feature = "postgres")]
    #[test]
    #[cfg_attr(
        replicron_no_chromium,
        ignore = "needs Debian's chromium and chromium-driver"
    )]
    #[cfg_attr(
        all(replicron_no_postgres_server, not(replicron_no_chromium)),
        ignore = "REPLICRON_TEST_POSTGRES_URL is not set"
    )]
    fn postgres() {
        check(&TestDb::postgres());
    }

    fn check(db: &TestDb) {
        let kind = format!("{:?}", db.kind).to_lowercase();
        let [port, read_only_port] = free_ports();
        let config = web_config(db, port, true);
        let replica = start_web(&config, "web-browser", port, true);
        let read_only_config = web_config(db, read_only_port, false);
        let read_only =
            crate::support::Replica::start(&read_only_config, "web-read-only", None, &[]);
        read_only.wait_for_log("replicron started", Duration::from_secs(30));
        let began = std::time::Instant::now();
        let step = |what: &str| eprintln!("{:>6.1} s  {what}", began.elapsed().as_secs_f64());
        step("replicas up");
        let driver = Driver::start();
        step("chromedriver up");
        let profile = tempfile::tempdir().expect("a browser profile");
        let base = format!("http://127.0.0.1:{port}");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let client = browser(&driver, profile.path()).await;
            step("browser up");

            // The overview: every job, each with its status. A per-second
            // job is now and then caught running: load again until the
            // jobs show how their last runs ended.
            let mut states: Vec<(String, String)> = Vec::new();
            for _ in 0..20 {
                client.goto(&format!("{base}/")).await.expect("load /");
                let rows = client
                    .find_all(Locator::Css("#jobs tr.job"))
                    .await
                    .expect("job rows");
                states.clear();
                for row in &rows {
                    states.push((
                        row.attr("data-job")
                            .await
                            .expect("data-job")
                            .unwrap_or_default(),
                        row.attr("data-state")
                            .await
                            .expect("data-state")
                            .unwrap_or_default(),
                    ));
                }
                if !states.iter().any(|(_, s)| s == "running") {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let state = |job: &str| {
                states
                    .iter()
                    .find(|(j, _)| j == job)
                    .map(|(_, s)| s.clone())
            };
            assert_eq!(states.len(), 4, "{states:?}");
            assert_eq!(state("fine").as_deref(), Some("succeeded"), "{states:?}");
            assert_eq!(state("broken").as_deref(), Some("failed"), "{states:?}");
            assert_eq!(state("html").as_deref(), Some("succeeded"), "{states:?}");
            assert_eq!(state("on-demand").as_deref(), Some("never"), "{states:?}");
            let problems = client
                .find(Locator::Css("#jobs"))
                .await
                .expect("jobs")
                .text()
                .await
                .expect("text");
            assert!(problems.contains("FAILED: last run"), "{problems}");
            // Each job's chart: one path per status among its last runs.
            let failed_bars = client
                .find_all(Locator::Css(
                    "#jobs tr[data-job=broken] svg.chart path.s-failed",
                ))
                .await
                .expect("chart");
            assert_eq!(
                failed_bars.len(),
                1,
                "the broken job's chart shows its failures"
            );
            let fine_bars = client
                .find_all(Locator::Css(
                    "#jobs tr[data-job=fine] svg.chart path.s-succeeded",
                ))
                .await
                .expect("chart");
            assert_eq!(
                fine_bars.len(),
                1,
                "the fine job's chart shows its successes"
            );
            assert!(
                client
                    .find(Locator::Css("#replicas"))
                    .await
                    .expect("replicas")
                    .text()
                    .await
                    .expect("text")
                    .contains("web-browser")
            );
            let overview = save(&client, &format!("{kind}-overview")).await;
            step("overview checked");

            // Through the job's page to a run's output: text, not markup.
            click(&client, Locator::LinkText("html"), "the html job's link").await;
            let bars = client
                .find_all(Locator::Css("svg.chart a rect.s-succeeded"))
                .await
                .expect("chart bars");
            assert!(
                bars.len() >= 3,
                "a bar per run, each a link: {}",
                bars.len()
            );
            click(
                &client,
                Locator::Css("#runs tr.run[data-status=succeeded] a"),
                "a run's link",
            )
            .await;
            let output = client
                .find(Locator::Id("output"))
                .await
                .expect("the output")
                .text()
                .await
                .expect("text");
            assert_eq!(output.trim(), "<script>alert(1)</script><b>bold</b>");
            assert!(
                client
                    .find_all(Locator::Css("#output b, #output script"))
                    .await
                    .expect("query")
                    .is_empty(),
                "the output became markup"
            );
            assert!(client.get_alert_text().await.is_err(), "a script ran");
            let run_page = save(&client, &format!("{kind}-run-output")).await;
            step("a run's output checked");

            // Signed in with the token: pause and resume from the page.
            client
                .goto(&format!("{base}/login?next=/jobs/on-demand"))
                .await
                .expect("load /login");
            client
                .find(Locator::Id("token"))
                .await
                .expect("token field")
                .send_keys(TOKEN)
                .await
                .expect("type");
            client
                .find(Locator::Id("sign-in"))
                .await
                .expect("sign in")
                .click()
                .await
                .expect("click");
            let mut path = String::new();
            for _ in 0..100 {
                path = client.current_url().await.expect("url").path().to_string();
                if path == "/jobs/on-demand" {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let source = client.source().await.unwrap_or_default();
            assert_eq!(path, "/jobs/on-demand", "signed in and sent on: {source}");
            client
                .find(Locator::Css("form[action$=\"/pause\"] input[name=reason]"))
                .await
                .expect("reason")
                .send_keys("from the page")
                .await
                .expect("type");
            client
                .find(Locator::Id("pause"))
                .await
                .expect("the pause button")
                .click()
                .await
                .expect("click");
            let flash = client
                .wait()
                .for_element(Locator::Css(".flash"))
                .await
                .expect("a message")
                .text()
                .await
                .expect("text");
            assert!(flash.contains("paused on every replica"), "{flash}");
            let paused = paused_in_database(&config);
            assert_eq!(paused["reason"], "from the page", "{paused}");
            assert_eq!(paused["by"], "token default@web-browser", "{paused}");
            let paused_page = save(&client, &format!("{kind}-job-paused")).await;
            step("paused from the page");
            client
                .find(Locator::Id("resume"))
                .await
                .expect("the resume button")
                .click()
                .await
                .expect("click");
            // The page with the pause's message is replaced by the one with
            // the resume's.
            let mut flash = String::new();
            for _ in 0..50 {
                if let Ok(shown) = client.find(Locator::Css(".flash")).await
                    && let Ok(text) = shown.text().await
                {
                    flash = text;
                    if flash.contains("resumed") {
                        break;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert!(flash.contains("resumed"), "{flash}");
            assert!(paused_in_database(&config).is_null());
            // A form posted without the page's CSRF token is refused.
            let cookie = format!(
                "replicron_session={}",
                client
                    .get_named_cookie("replicron_session")
                    .await
                    .expect("the session cookie")
                    .value()
            );
            let (code, _, _) = http(
                port,
                "POST",
                "/jobs/on-demand/pause",
                &[
                    ("Cookie", &cookie),
                    ("Content-Type", "application/x-www-form-urlencoded"),
                ],
                "reason=csrf",
            );
            assert_eq!(code, 403);
            assert!(paused_in_database(&config).is_null());

            // Without a token the page offers no action, and actions answer 403.
            client
                .goto(&format!("http://127.0.0.1:{read_only_port}/jobs/on-demand"))
                .await
                .expect("load");
            assert!(
                client
                    .find_all(Locator::Css(".actions form"))
                    .await
                    .expect("query")
                    .is_empty()
            );
            let text = client
                .find(Locator::Css(".actions"))
                .await
                .expect("actions")
                .text()
                .await
                .expect("text");
            assert!(text.contains("Read-only"), "{text}");
            for action in ["trigger", "pause", "resume", "unlock"] {
                let (code, body) = crate::web::post_json(
                    read_only_port,
                    &format!("/api/v1/jobs/on-demand/{action}"),
                    &[("Authorization", &format!("Bearer {TOKEN}"))],
                    "",
                );
                assert_eq!(code, 403, "{action}: {body}");
            }
            step("read-only checked");
            client.close().await.expect("close the browser");
            step("browser closed");
            eprintln!(
                "screenshots: {}, {}, {}",
                overview.display(),
                run_page.display(),
                paused_page.display()
            );
        });
        let (code, jobs) = get_json(port, "/api/v1/jobs");
        assert_eq!(code, 200, "{jobs}");
        drop(read_only);
        drop(replica);
    }
}

/// axe-core's script, installed by `scripts/test` (`npm ci` of
/// `tests/browser/`) into `target/axe`, or where `REPLICRON_AXE` says.
#[cfg(feature = "sqlite")]
fn axe_source() -> String {
    let path = std::env::var_os("REPLICRON_AXE").map_or_else(
        || {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("target/axe/node_modules/axe-core/axe.min.js")
        },
        PathBuf::from,
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "axe-core at {}: {e}; scripts/test installs it (or: mkdir -p target/axe && \
             cp tests/browser/package*.json target/axe/ && npm ci --prefix target/axe)",
            path.display()
        )
    })
}

/// The critical and serious violations axe-core finds on the loaded page,
/// one line each with the elements it names.
#[cfg(feature = "sqlite")]
async fn audit(client: &Client, axe: &str) -> Vec<String> {
    let loaded = client
        .execute(
            &format!("{axe}\n;return typeof axe === 'object';"),
            Vec::new(),
        )
        .await
        .expect("load axe-core");
    assert_eq!(loaded, Value::Bool(true), "axe-core loaded");
    let found = client
        .execute_async(
            "const done = arguments[arguments.length - 1];
             axe.run(document).then(
               r => done(r.violations
                 .filter(v => v.impact === 'critical' || v.impact === 'serious')
                 .map(v => v.impact + ' ' + v.id + ': ' + v.help + ' at '
                   + v.nodes.slice(0, 5).map(n => n.target.join(' ')).join(', '))),
               e => done(['axe failed: ' + e]));",
            Vec::new(),
        )
        .await
        .expect("run axe-core");
    found
        .as_array()
        .expect("a list")
        .iter()
        .map(|v| v.as_str().unwrap_or_default().to_string())
        .collect()
}

/// Runs `script` in the page and returns what it returned.
#[cfg(feature = "sqlite")]
async fn eval(client: &Client, script: &str) -> Value {
    client
        .execute(script, Vec::new())
        .await
        .unwrap_or_else(|e| panic!("{script}: {e}"))
}

/// Signs `client` in with the token; the pages then show their forms.
#[cfg(feature = "sqlite")]
async fn sign_in(client: &Client, base: &str) {
    client
        .goto(&format!("{base}/login?next=/"))
        .await
        .expect("load /login");
    client
        .find(Locator::Id("token"))
        .await
        .expect("token field")
        .send_keys(TOKEN)
        .await
        .expect("type");
    client
        .find(Locator::Id("sign-in"))
        .await
        .expect("sign in")
        .click()
        .await
        .expect("click");
    for _ in 0..100 {
        if client.current_url().await.expect("url").path() == "/" {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("not signed in");
}

/// Every page of the dashboard, signed out and signed in, at 1400 px and at
/// 390 px, in the light and the dark theme: axe-core finds no critical or
/// serious violation, nothing is wider than the window, the first Tab
/// reaches the skip link, and the page asks for an icon that exists. The
/// overview updates itself in place, without a refresh of the page. The
/// screenshots are saved under `target/screenshots/` (and into
/// `REPLICRON_SCREENSHOTS`, when set, for the documentation).
#[cfg(feature = "sqlite")]
#[test]
#[cfg_attr(
    replicron_no_chromium,
    ignore = "needs Debian's chromium and chromium-driver"
)]
fn every_page_passes_the_accessibility_audit_at_both_widths_in_both_themes() {
    let _heavy = crate::support::heavy();
    let axe = axe_source();
    let db = TestDb::sqlite();
    let [port] = free_ports();
    let config = web_config(&db, port, true);
    let replica = start_web(&config, "web-audit", port, true);
    let base = format!("http://127.0.0.1:{port}");
    // A pause, so that the pages show one, and a run of each kind.
    let (code, body) = crate::web::post_json(
        port,
        "/api/v1/jobs/on-demand/pause",
        &[("Authorization", &format!("Bearer {TOKEN}"))],
        "{\"reason\":\"for the audit\"}",
    );
    assert_eq!(code, 200, "{body}");
    let run_of = |job: &str| {
        let (_, page) = get_json(port, &format!("/api/v1/runs?job={job}&limit=5"));
        page["runs"]
            .as_array()
            .and_then(|runs| runs.iter().find(|r| r["status"] != "running"))
            .and_then(|r| r["id"].as_i64())
            .unwrap_or_else(|| panic!("a finished run of {job}: {page}"))
    };
    let pages = [
        ("overview", "/".to_string()),
        ("job", "/jobs/fine".to_string()),
        ("job-failing", "/jobs/broken".to_string()),
        ("job-paused", "/jobs/on-demand".to_string()),
        ("run", format!("/runs/{}", run_of("html"))),
        ("run-failed", format!("/runs/{}", run_of("broken"))),
        ("audit", "/audit".to_string()),
        ("timeline", "/timeline".to_string()),
        ("runs", "/runs".to_string()),
        (
            "runs-filtered",
            "/runs?job=broken&status=failed&limit=2".to_string(),
        ),
        ("runs-bad", "/runs?sort=nope".to_string()),
        ("job-figures", "/jobs/broken?window=1h".to_string()),
        ("login", "/login".to_string()),
        ("not-found", "/no/such/page".to_string()),
    ];
    let docs = std::env::var_os("REPLICRON_SCREENSHOTS").map(PathBuf::from);
    // The binary's own files, not any run's, may be kept by a browser.
    for path in [
        "/favicon.ico",
        "/static/favicon.svg",
        "/static/replicron.js",
    ] {
        let (code, headers, body) = crate::web::request(port, "GET", path, &[], "");
        assert_eq!(code, 200, "{path}");
        assert!(!body.is_empty(), "{path}");
        assert!(
            headers
                .iter()
                .any(|(n, v)| n == "cache-control" && v.starts_with("public")),
            "{path}: {headers:?}"
        );
    }
    let driver = Driver::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let mut problems = Vec::new();
        for theme in ["light", "dark"] {
            let profile = tempfile::tempdir().expect("a browser profile");
            let client = themed_browser(&driver, profile.path(), theme == "dark").await;
            client.goto(&format!("{base}/")).await.expect("load /");
            let dark = eval(
                &client,
                "return matchMedia('(prefers-color-scheme: dark)').matches;",
            )
            .await;
            assert_eq!(dark, Value::Bool(theme == "dark"), "the system theme");
            for signed_in in [false, true] {
                if signed_in {
                    sign_in(&client, &base).await;
                }
                for (width, height) in [(1400, 1000), (390, 844)] {
                    client
                        .set_window_size(width, height)
                        .await
                        .expect("window size");
                    for (name, path) in &pages {
                        if signed_in && *name == "login" {
                            continue;
                        }
                        client
                            .goto(&format!("{base}{path}"))
                            .await
                            .unwrap_or_else(|e| panic!("load {path}: {e}"));
                        let at = format!(
                            "{path} at {width} px, {theme}, {}",
                            if signed_in { "signed in" } else { "signed out" }
                        );
                        for violation in audit(&client, &axe).await {
                            problems.push(format!("{at}: {violation}"));
                        }
                        let overflow = eval(
                            &client,
                            "return [document.documentElement.scrollWidth, window.innerWidth];",
                        )
                        .await;
                        let (scroll, inner) = (overflow[0].as_i64(), overflow[1].as_i64());
                        if scroll > inner {
                            problems
                                .push(format!("{at}: {scroll:?} px wide in a {inner:?} px window"));
                        }
                        let file = format!(
                            "{name}-{width}-{theme}{}",
                            if signed_in { "" } else { "-signed-out" }
                        );
                        let shot = save(&client, &file).await;
                        if let Some(docs) = &docs
                            && signed_in
                            && (theme == "light" || *name == "overview")
                        {
                            std::fs::create_dir_all(docs).expect("the screenshots' folder");
                            std::fs::copy(&shot, docs.join(format!("{name}-{width}-{theme}.png")))
                                .expect("copy the screenshot");
                        }
                        client
                            .find(Locator::Css("body"))
                            .await
                            .expect("body")
                            .send_keys("\u{E004}")
                            .await
                            .expect("Tab");
                        let first = eval(&client, "return document.activeElement.className;").await;
                        if first != "skip" {
                            problems.push(format!("{at}: the first Tab reached {first}"));
                        }
                    }
                }
            }
            if theme == "light" {
                // The overview updates in place: no meta refresh, the same
                // document after two updates, and the update said so.
                client.set_window_size(1400, 1000).await.expect("size");
                client.goto(&format!("{base}/")).await.expect("load /");
                assert!(
                    client
                        .find_all(Locator::Css("meta[http-equiv=refresh]"))
                        .await
                        .expect("query")
                        .is_empty(),
                    "a meta refresh"
                );
                eval(&client, "window.replicronMark = 1; return null;").await;
                let mut said = String::new();
                for _ in 0..120 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    said = client
                        .find(Locator::Id("updates"))
                        .await
                        .expect("the update line")
                        .text()
                        .await
                        .expect("text");
                    if said.starts_with("Updated") {
                        break;
                    }
                }
                assert!(said.starts_with("Updated"), "{said}");
                assert_eq!(
                    eval(&client, "return window.replicronMark || null;").await,
                    json!(1),
                    "the page was reloaded"
                );
            }
            client.close().await.expect("close the browser");
        }
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    });
    drop(replica);
}

/// Writes `count` finished runs of 200 jobs (`bulk-0` … `bulk-199`), one
/// a minute from 2026-01-01, in one statement: every tenth of a job's runs failed, on
/// three replicas, lasting 0 to 89 s.
fn bulk_runs(db: &TestDb, count: u32) {
    use diesel::connection::SimpleConnection;
    let columns = "(job, scheduled_at, attempt, instance, fence, started_at, finished_at, status, exit_code, output, triggered_by)";
    let sql = match db.kind {
        crate::support::Kind::Sqlite => format!(
            "INSERT INTO replicron_runs {columns} \
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {count}) \
             SELECT 'bulk-' || (i % 200), strftime('%Y-%m-%d %H:%M:%f', '2026-01-01', '+' || i || ' minutes'), 1, 'r' || (i % 3), i, \
             strftime('%Y-%m-%d %H:%M:%f', '2026-01-01', '+' || i || ' minutes', '+1 seconds'), \
             strftime('%Y-%m-%d %H:%M:%f', '2026-01-01', '+' || i || ' minutes', '+' || (1 + i % 90) || ' seconds'), \
             CASE WHEN (i / 200) % 10 = 0 THEN 'failed' ELSE 'succeeded' END, CASE WHEN (i / 200) % 10 = 0 THEN 1 ELSE 0 END, '', 'schedule' FROM n"
        ),
        crate::support::Kind::Mysql => format!(
            "SET SESSION max_recursive_iterations = {count}; \
             INSERT INTO replicron_runs {columns} \
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {count}) \
             SELECT CONCAT('bulk-', i % 200), TIMESTAMP('2026-01-01') + INTERVAL i MINUTE, 1, CONCAT('r', i % 3), i, \
             TIMESTAMP('2026-01-01') + INTERVAL i MINUTE + INTERVAL 1 SECOND, \
             TIMESTAMP('2026-01-01') + INTERVAL i MINUTE + INTERVAL (1 + i % 90) SECOND, \
             CASE WHEN (i DIV 200) % 10 = 0 THEN 'failed' ELSE 'succeeded' END, CASE WHEN (i DIV 200) % 10 = 0 THEN 1 ELSE 0 END, '', 'schedule' FROM n"
        ),
        crate::support::Kind::Postgres => format!(
            "INSERT INTO replicron_runs {columns} \
             SELECT 'bulk-' || (i % 200), TIMESTAMP '2026-01-01' + i * INTERVAL '1 minute', 1, 'r' || (i % 3), i, \
             TIMESTAMP '2026-01-01' + i * INTERVAL '1 minute' + INTERVAL '1 second', \
             TIMESTAMP '2026-01-01' + i * INTERVAL '1 minute' + (1 + i % 90) * INTERVAL '1 second', \
             CASE WHEN (i / 200) % 10 = 0 THEN 'failed' ELSE 'succeeded' END, CASE WHEN (i / 200) % 10 = 0 THEN 1 ELSE 0 END, '', 'schedule' \
             FROM generate_series(1, {count}) AS i; ANALYZE replicron_runs"
        ),
    };
    db.raw().batch_execute(&sql).expect("write the runs");
}

/// The median of five timed fetches of `path`, in milliseconds, after one
/// to warm up: from the request to the last byte of the answer.
fn median_ms(port: u16, path: &str) -> f64 {
    let (code, _, _) = crate::web::http(port, "GET", path, &[], "");
    assert_eq!(code, 200, "{path}");
    let mut times: Vec<f64> = (0..5)
        .map(|_| {
            let began = std::time::Instant::now();
            let (code, _, body) = crate::web::http(port, "GET", path, &[], "");
            let ms = began.elapsed().as_secs_f64() * 1000.0;
            assert_eq!(code, 200, "{path}: {body}");
            ms
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[2]
}

mod the_runs_view_over_100000_runs {
    use super::*;

    #[cfg(feature = "sqlite")]
    #[test]
    #[cfg_attr(
        replicron_no_chromium,
        ignore = "needs Debian's chromium and chromium-driver"
    )]
    fn sqlite() {
        check(&TestDb::sqlite());
    }

    #[cfg(feature = "mysql")]
    #[test]
    #[cfg_attr(
        replicron_no_chromium,
        ignore = "needs Debian's chromium and chromium-driver"
    )]
    #[cfg_attr(
        all(replicron_no_mysql_server, not(replicron_no_chromium)),
        ignore = "REPLICRON_TEST_MYSQL_URL is not set"
    )]
    fn mysql() {
        check(&TestDb::mysql());
    }

    #[cfg(feature = "postgres")]
    #[test]
    #[cfg_attr(
        replicron_no_chromium,
        ignore = "needs Debian's chromium and chromium-driver"
    )]
    #[cfg_attr(
        all(replicron_no_postgres_server, not(replicron_no_chromium)),
        ignore = "REPLICRON_TEST_POSTGRES_URL is not set"
    )]
    fn postgres() {
        check(&TestDb::postgres());
    }

    /// 100,000 runs: the filtered runs view answers in under 200 ms (the
    /// median of five), and in the browser its form filters and its next
    /// page follows on.
    fn check(db: &TestDb) {
        let kind = format!("{:?}", db.kind).to_lowercase();
        db.migrate();
        let began = std::time::Instant::now();
        bulk_runs(db, 100_000);
        eprintln!(
            "100,000 runs written in {:.1} s",
            began.elapsed().as_secs_f64()
        );
        let port = crate::web::free_port();
        let config = db.config(&format!(
            "[daemon]\nmetrics_listen = \"127.0.0.1:{port}\"\n\n\
             [[job]]\nname = \"bulk-7\"\nschedule = \"@yearly\"\ncommand = 'true'\n"
        ));
        let replica = crate::support::Replica::start(&config, "runs-bulk", None, &[]);
        replica.wait_for_log("replicron started", Duration::from_secs(30));
        wait_until("the listener", Duration::from_secs(30), || {
            get_json(port, "/healthz").0 == 200
        });
        let filtered =
            "/runs?job=bulk-7&job=bulk-8&status=failed&replica=r1&from=2026-01-05T00:00:00Z";
        let mut timed = Vec::new();
        for path in [
            filtered,
            "/runs?status=failed",
            "/runs",
            "/runs?sort=-duration&job=bulk-9",
            "/",
            "/jobs/bulk-7",
        ] {
            let ms = median_ms(port, path);
            eprintln!("{kind}: {path}: {ms:.1} ms (median of 5)");
            timed.push((path, ms));
        }
        for (path, ms) in &timed {
            assert!(*ms < 200.0, "{path} took {ms:.1} ms over 100,000 runs");
        }

        let driver = Driver::start();
        let profile = tempfile::tempdir().expect("a browser profile");
        let base = format!("http://127.0.0.1:{port}");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let client = browser(&driver, profile.path()).await;
            client.goto(&format!("{base}/")).await.expect("load /");
            click(&client, Locator::Id("nav-runs"), "the runs link").await;
            // Filter with the form: one job, its failures.
            client
                .find(Locator::Css("#f-job option[value=bulk-7]"))
                .await
                .expect("the job's option")
                .click()
                .await
                .expect("choose the job");
            client
                .find(Locator::Css("#f-status option[value=failed]"))
                .await
                .expect("the status's option")
                .click()
                .await
                .expect("choose the status");
            click(&client, Locator::Id("filter"), "the filter button").await;
            let query = url_when(&client, "job=bulk-7").await;
            assert!(
                query.contains("job=bulk-7") && query.contains("status=failed"),
                "{query}"
            );
            let rows = client
                .find_all(Locator::Css("#runs tr.run"))
                .await
                .expect("rows");
            assert_eq!(rows.len(), 50, "bulk-7 has 50 failures");
            for row in &rows {
                assert_eq!(
                    row.attr("data-status").await.expect("status").as_deref(),
                    Some("failed")
                );
            }
            // Pages of 25: the next page is a plain link with the cursor.
            client
                .goto(&format!("{base}/runs?job=bulk-7&status=failed&limit=25"))
                .await
                .expect("load a page of 25");
            let first: Vec<String> = texts(&client, "#runs tr.run td:first-child").await;
            click(&client, Locator::Id("next-page"), "the next page").await;
            let query = url_when(&client, "cursor=").await;
            assert!(query.contains("cursor="), "{query}");
            let second: Vec<String> = texts(&client, "#runs tr.run td:first-child").await;
            assert_eq!((first.len(), second.len()), (25, 25));
            assert!(
                first.iter().all(|id| !second.contains(id)),
                "{first:?} {second:?}"
            );
            assert!(
                client.find(Locator::Id("next-page")).await.is_err(),
                "two pages of 25"
            );
            save(&client, &format!("{kind}-runs-view")).await;
            client.close().await.expect("close the browser");
        });
        drop(replica);
    }

    /// The page's query once it holds `part` (a click's navigation
    /// may not have ended when the click returns), or after 10 s.
    async fn url_when(client: &Client, part: &str) -> String {
        let query = || async {
            let url = client.current_url().await.expect("url");
            url.query().unwrap_or_default().to_string()
        };
        for _ in 0..100 {
            let query = query().await;
            if query.contains(part) {
                return query;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        query().await
    }

    async fn texts(client: &Client, css: &str) -> Vec<String> {
        let mut texts = Vec::new();
        for cell in client.find_all(Locator::Css(css)).await.expect("cells") {
            texts.push(cell.text().await.expect("text"));
        }
        texts
    }
}

/// The timeline in Chromium, reached from the header's link: a lane per
/// job, runs coloured by status with a title naming their replica, the
/// pause over a lane, an excluded instant, a dependency link, upcoming
/// instants and now; its table below; a lane's label leads to its job.
#[cfg(feature = "sqlite")]
#[test]
#[cfg_attr(
    replicron_no_chromium,
    ignore = "needs Debian's chromium and chromium-driver"
)]
fn the_timeline_in_a_browser() {
    let db = TestDb::sqlite();
    let (port, _config, replicas) = crate::timeline::timeline_fleet(&db);
    let driver = Driver::start();
    let profile = tempfile::tempdir().expect("a browser profile");
    let base = format!("http://127.0.0.1:{port}");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let client = browser(&driver, profile.path()).await;
        client.goto(&format!("{base}/")).await.expect("load /");
        click(
            &client,
            Locator::Id("nav-timeline"),
            "the header's timeline link",
        )
        .await;
        let path = client.current_url().await.expect("url").path().to_string();
        assert_eq!(path, "/timeline");
        let count = |css: &'static str| {
            let client = client.clone();
            async move {
                client
                    .find_all(Locator::Css(css))
                    .await
                    .unwrap_or_else(|e| panic!("{css}: {e}"))
                    .len()
            }
        };
        assert_eq!(count("svg#timeline g.tl-lane").await, 4);
        assert!(
            count("svg#timeline g.tl-lane[data-job=parent] rect.tl-run.s-succeeded").await >= 1
        );
        assert!(count("svg#timeline g.tl-lane[data-job=child] rect.tl-run.s-failed").await >= 1);
        assert_eq!(
            count("svg#timeline g.tl-lane[data-job=held] rect.tl-pause").await,
            1
        );
        assert!(count("svg#timeline g.tl-lane[data-job=held] circle.tl-next-paused").await >= 1);
        assert!(count("svg#timeline g.tl-lane[data-job=holiday] g.tl-excluded").await >= 1);
        assert!(count("svg#timeline g.tl-lane[data-job=parent] circle.tl-next").await >= 1);
        assert!(count("svg#timeline g.tl-dep path").await >= 1);
        assert_eq!(count("svg#timeline line.tl-now").await, 1);
        assert!(count("#timeline-legend li").await >= 10);
        // A run's title names its job, status and replica.
        let title = client
            .find(Locator::Css("svg#timeline rect.tl-run.s-failed title"))
            .await
            .expect("a failed run's title")
            .html(true)
            .await
            .expect("its text");
        assert!(title.starts_with("child: run "), "{title}");
        assert!(title.contains("failed, on tl-"), "{title}");
        // The marks are drawn where they are: inside the drawing's box.
        let drawing = client
            .find(Locator::Id("timeline"))
            .await
            .expect("the drawing");
        let (_, _, width, height) = drawing.rectangle().await.expect("its box");
        assert!(width >= 700.0 && height >= 100.0, "{width}x{height}");
        let screenshot = save(&client, "sqlite-timeline").await;
        // The same as a table.
        click(
            &client,
            Locator::Css("#timeline-text summary"),
            "the table's summary",
        )
        .await;
        let table = client
            .find(Locator::Id("timeline-table"))
            .await
            .expect("the table")
            .text()
            .await
            .expect("text");
        for needle in ["excluded", "paused from", "started run", "failed"] {
            assert!(table.contains(needle), "no {needle} in the table: {table}");
        }
        // A lane's label is its job's link.
        click(
            &client,
            Locator::Css("svg#timeline a[href='/jobs/child']"),
            "child's label",
        )
        .await;
        let path = client.current_url().await.expect("url").path().to_string();
        assert_eq!(path, "/jobs/child");
        client.close().await.expect("close the browser");
        eprintln!("screenshot: {}", screenshot.display());
    });
    drop(replicas);
}

/// A job that prints to both streams, in colour, then more after a while.
#[cfg(feature = "sqlite")]
const TALKER: &str = "printf 'first line\\n'; printf '\\033[32mgreen\\033[0m plain\\n'; \
     printf 'to stderr\\n' >&2; sleep 4; printf 'after the load\\n'; sleep 8; printf 'last line\\n'";

/// A job that prints more lines than its 1 KiB `output_limit` keeps, and
/// more than its page's output box shows at once, then waits.
#[cfg(feature = "sqlite")]
const FLOOD: &str = "seq 1 2000; printf 'flood end\\n'; sleep 8";

/// The text of the element at `css`.
#[cfg(feature = "sqlite")]
async fn text_at(client: &Client, css: &str) -> String {
    client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .text()
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
}

/// A running run's page in a browser: a line the job prints after the page
/// loaded appears in it while the run still runs, without the page being
/// reloaded; stderr is marked apart from stdout; ANSI colours are classes,
/// not boxes; output past `output_limit` is marked as cut; the page passes
/// the accessibility audit while it follows the run; and when the run
/// ends the page shows how it ended.
#[cfg(feature = "sqlite")]
#[test]
#[cfg_attr(
    replicron_no_chromium,
    ignore = "needs Debian's chromium and chromium-driver"
)]
fn a_running_runs_output_appears_in_its_page_as_it_is_written() {
    let axe = axe_source();
    let db = TestDb::sqlite();
    let [port] = free_ports();
    let config = db.config_named(
        "live-browser.toml",
        &db.url,
        &format!(
            "[daemon]\nmetrics_listen = \"127.0.0.1:{port}\"\n\n\
             [web]\ntoken_env = \"REPLICRON_TEST_WEB_TOKEN\"\n\n\
             [[job]]\nname = \"talker\"\nschedule = \"@yearly\"\ncommand = {TALKER:?}\n\n\
             [[job]]\nname = \"flood\"\nschedule = \"@yearly\"\noutput_limit = \"1KiB\"\ncommand = {FLOOD:?}\n"
        ),
    );
    let replica = crate::support::Replica::start(
        &config,
        "live-browser",
        None,
        &[("REPLICRON_TEST_WEB_TOKEN", TOKEN)],
    );
    replica.wait_for_log("replicron started", Duration::from_secs(30));
    let base = format!("http://127.0.0.1:{port}");
    let bearer = format!("Bearer {TOKEN}");
    let trigger = |job: &str| {
        let (code, body) = crate::web::post_json(
            port,
            &format!("/api/v1/jobs/{job}/trigger"),
            &[("Authorization", &bearer)],
            "",
        );
        assert_eq!(code, 202, "{body}");
        let mut id = None;
        wait_until("the run's row", Duration::from_secs(10), || {
            let (_, page) = get_json(port, &format!("/api/v1/runs?job={job}&limit=1"));
            id = page["runs"][0]["id"].as_i64();
            id.is_some()
        });
        id.expect("the run's id")
    };
    let status_of = |id: i64| get_json(port, &format!("/api/v1/runs/{id}")).1["status"].clone();
    let driver = Driver::start();
    let profile = tempfile::tempdir().expect("a browser profile");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let client = browser(&driver, profile.path()).await;
        let id = trigger("talker");
        client
            .goto(&format!("{base}/runs/{id}"))
            .await
            .expect("load the run's page");
        let loaded = text_at(&client, "#output").await;
        assert!(loaded.contains("first line"), "{loaded}");
        assert!(
            !loaded.contains("after the load"),
            "printed before the page loaded: {loaded}"
        );
        assert_eq!(status_of(id), "running");
        eval(&client, "window.replicronMark = 1; return null;").await;
        // stderr apart from stdout; colours as classes, no escape shown.
        assert_eq!(text_at(&client, "#output .stderr").await, "to stderr");
        assert_eq!(text_at(&client, "#output .a-green").await, "green");
        assert!(
            !loaded.contains('\u{1b}') && !loaded.contains("[32m"),
            "{loaded:?}"
        );
        assert!(
            text_at(&client, "#timing").await.starts_with("running for "),
            "the elapsed time"
        );
        let problems = audit(&client, &axe).await;
        assert!(problems.is_empty(), "{}", problems.join("\n"));

        // The line printed after the load appears while the run runs,
        // appended by the page's script: the page is the same document.
        let mut appeared = false;
        for _ in 0..100 {
            if text_at(&client, "#output").await.contains("after the load") {
                appeared = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(appeared, "the line printed after the load never appeared");
        assert_eq!(status_of(id), "running", "it appeared only once the run ended");
        assert_eq!(
            eval(&client, "return window.replicronMark || null;").await,
            json!(1),
            "the page was reloaded to show it"
        );
        assert_eq!(
            client
                .find_all(Locator::Css("#output .stderr"))
                .await
                .expect("query")
                .len(),
            1,
            "stdout marked as stderr"
        );
        save(&client, "run-live").await;

        // When the run ends, the page shows how it ended.
        let mut ended = String::new();
        for _ in 0..150 {
            ended = client
                .find(Locator::Css("h1"))
                .await
                .expect("h1")
                .text()
                .await
                .unwrap_or_default();
            if ended.contains("succeeded") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(ended.contains("succeeded"), "{ended}");
        assert!(text_at(&client, "#output").await.contains("last line"));
        // The history keeps the streams merged, and the page says nothing
        // of a marking it cannot show.
        assert!(!text_at(&client, "#output-legend").await.contains("stderr"));

        // Output past output_limit: marked as cut, with how much there was.
        let id = trigger("flood");
        for _ in 0..50 {
            client
                .goto(&format!("{base}/runs/{id}"))
                .await
                .expect("load the flood's page");
            if text_at(&client, "#output").await.ends_with("flood end") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(text_at(&client, "#output").await.ends_with("flood end"));
        // A page loaded while the flood was printing follows the rest as it
        // comes and keeps whole pieces, at least the limit's worth (more, by
        // up to a piece): the exact tail is a page loaded once it is all out.
        client
            .goto(&format!("{base}/runs/{id}"))
            .await
            .expect("load the flood's page");
        assert!(text_at(&client, "#output").await.ends_with("flood end"));
        let total: usize = (1..=2000).map(|n: u32| n.to_string().len() + 1).sum::<usize>() + 10;
        assert_eq!(
            text_at(&client, "#truncated").await.trim(),
            format!("Showing the last 1024 of {total} bytes.")
        );
        // The box opens at its end: it overflows, and its last line is in
        // view, not its first.
        let view = eval(
            &client,
            "const box = document.querySelector('.outbox').getBoundingClientRect(); \
             const end = document.getElementById('end').getBoundingClientRect(); \
             const out = document.getElementById('output').getBoundingClientRect(); \
             return [out.height > box.height, end.top <= box.bottom && end.top >= box.top, out.top < box.top];",
        )
        .await;
        assert_eq!(view, json!([true, true, true]), "the output opens at its end");
        save(&client, "run-live-truncated").await;
        // Where running runs are listed, how long this one has run.
        client
            .goto(&format!("{base}/jobs/flood"))
            .await
            .expect("load the flood's job page");
        let row = text_at(&client, "#runs tr.run[data-status=running]").await;
        assert!(row.contains("running for "), "{row}");
        client.goto(&format!("{base}/")).await.expect("load /");
        let last = text_at(&client, "#jobs tr[data-job=flood] td.last").await;
        assert!(last.contains("running for "), "{last}");
        client.close().await.expect("close the browser");
    });
    drop(replica);
}
