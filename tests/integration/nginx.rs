//! The dashboard behind a real reverse proxy (Debian's nginx): with
//! `[web] public_url`, a browser signs in and acts through a proxy that
//! passes `Host` on and through one that rewrites it; with `[web]
//! trusted_proxies`, sign-in is throttled per client as the proxy names it.

#![cfg(feature = "sqlite")]

use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use crate::databases::TestDb;
use crate::support::{Replica, wait_until};
use crate::web::{TOKEN, free_ports, get_json, http};

/// nginx on a configuration of its own, stopped by PID on drop.
struct Nginx(Child);

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn nginx_binary() -> Option<&'static str> {
    ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|p| Path::new(p).exists())
}

/// Two servers in front of the replica on `upstream`: `passing` passes
/// `Host` on, `rewriting` sends the upstream's own (nginx's default).
fn start_nginx(dir: &Path, passing: u16, rewriting: u16, upstream: u16) -> Option<Nginx> {
    let binary = nginx_binary()?;
    let d = dir.display();
    let user = if nix::unistd::Uid::effective().is_root() {
        "user root;\n"
    } else {
        ""
    };
    let conf = format!(
        "{user}worker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
         events {{ worker_connections 64; }}\n\
         http {{\n  access_log off;\n\
           client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
           fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
           server {{ listen 127.0.0.1:{passing}; location / {{ proxy_pass http://127.0.0.1:{upstream}; proxy_set_header Host $http_host; proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for; }} }}\n\
           server {{ listen 127.0.0.1:{rewriting}; location / {{ proxy_pass http://127.0.0.1:{upstream}; }} }}\n\
         }}\n"
    );
    let path = dir.join("nginx.conf");
    std::fs::write(&path, conf).expect("nginx.conf");
    let child = Command::new(binary)
        .args(["-p"])
        .arg(dir)
        .arg("-c")
        .arg(&path)
        .args(["-g", "daemon off; master_process off;"])
        .spawn()
        .expect("start nginx");
    Some(Nginx(child))
}

fn header(headers: &[(String, String)], name: &str) -> String {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.clone())
        .unwrap_or_default()
}

/// Signs in, pauses and resumes `fine` from its page, as a browser on
/// `public` would, through nginx on `port`.
fn act_through(port: u16, public: &str) {
    let host = public.trim_start_matches("http://");
    let browser = [("Host", host), ("Origin", public)];
    let form = ("Content-Type", "application/x-www-form-urlencoded");
    let (code, headers, body) = http(
        port,
        "POST",
        "/login",
        &[browser[0], browser[1], form],
        &format!("token={TOKEN}&next=%2Fjobs%2Ffine"),
    );
    assert_eq!(code, 303, "sign-in through :{port}: {body}");
    let cookie = header(&headers, "set-cookie");
    let session = cookie.split(';').next().unwrap_or_default().to_string();
    assert!(session.starts_with("replicron_session="), "{cookie}");
    let with_session = [browser[0], ("Cookie", session.as_str())];
    let (code, _, page) = http(port, "GET", "/jobs/fine", &with_session, "");
    assert_eq!(code, 200, "{page}");
    let csrf = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the page's CSRF token")
        .to_string();
    for action in ["pause", "resume"] {
        let (code, headers, body) = http(
            port,
            "POST",
            &format!("/jobs/fine/{action}"),
            &[browser[0], browser[1], form, ("Cookie", session.as_str())],
            &format!("csrf={csrf}&reason=through+nginx"),
        );
        assert_eq!(code, 303, "{action} through :{port}: {body}");
        let location = header(&headers, "location");
        assert!(!location.contains("bad=1"), "{action}: {location}");
        let (_, job) = get_json(port, "/api/v1/jobs/fine");
        assert_eq!(
            job["paused"].is_null(),
            action == "resume",
            "{action}: {job}"
        );
    }
    // Another origin is still refused.
    let (code, _, _) = http(
        port,
        "POST",
        "/login",
        &[browser[0], ("Origin", "http://evil.example"), form],
        &format!("token={TOKEN}"),
    );
    assert_eq!(code, 403);
}

#[test]
fn signing_in_and_acting_through_nginx() {
    if nginx_binary().is_none() {
        assert!(
            std::env::var("CI").is_err(),
            "CI must test the proxy: install nginx"
        );
        eprintln!("skipped: nginx is not installed");
        return;
    }
    let db = TestDb::sqlite();
    let [upstream, passing, rewriting] = free_ports::<3>();
    let public = format!("http://cron.test:{passing}");
    let config = db.config_named(
        "proxied.toml",
        &db.url,
        &format!(
            "[daemon]\nmetrics_listen = \"127.0.0.1:{upstream}\"\n\n\
             [web]\ntoken_env = \"REPLICRON_TEST_WEB_TOKEN\"\npublic_url = \"{public}\"\ntrusted_proxies = [\"127.0.0.1\"]\n\n\
             [[job]]\nname = \"fine\"\nschedule = \"@hourly\"\ncommand = 'true'\n"
        ),
    );
    let replica = Replica::start(
        &config,
        "proxied",
        None,
        &[("REPLICRON_TEST_WEB_TOKEN", TOKEN)],
    );
    replica.wait_for_log("replicron started", Duration::from_secs(30));
    let dir = tempfile::tempdir().expect("dir");
    let _nginx = start_nginx(dir.path(), passing, rewriting, upstream).expect("nginx");
    wait_until("nginx answers", Duration::from_secs(10), || {
        get_json(rewriting, "/healthz").0 == 200 && get_json(passing, "/healthz").0 == 200
    });
    act_through(passing, &public);
    act_through(rewriting, &public);

    // Wrong tokens are throttled per client, as the proxy names it in
    // X-Forwarded-For (here the clients are told apart by what the test
    // sends, which nginx extends with the address it heard from).
    let host = public.trim_start_matches("http://");
    let form = ("Content-Type", "application/x-www-form-urlencoded");
    let guess = |client: &str| {
        http(
            passing,
            "POST",
            "/login",
            &[
                ("Host", host),
                ("Origin", &public),
                form,
                ("X-Forwarded-For", client),
            ],
            "token=not-the-token",
        )
        .0
    };
    let codes: Vec<u16> = (0..20).map(|_| guess("203.0.113.5")).collect();
    assert_eq!((codes[0], codes[19]), (401, 429), "{codes:?}");
    assert_eq!(guess("203.0.113.6"), 401, "another client is not throttled");
    assert!(
        replica.log_text().contains("203.0.113.5"),
        "the refused sign-ins name their client"
    );
    drop(replica);
}
