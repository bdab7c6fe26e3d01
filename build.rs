//! Tells the tests which database servers and tools they can use, so that a
//! test whose backend is missing is reported as ignored, with the reason,
//! rather than as passed. In CI (`CI=true`) nothing is ignored: a missing
//! backend fails its tests.

use std::path::Path;

fn main() {
    let ci = std::env::var("CI").as_deref() == Ok("true");
    // Installing a server later needs a `cargo clean -p replicron` (or a
    // change to this file) to be noticed; `scripts/test` installs first.
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=CI");
    for (var, cfg) in [
        ("REPLICRON_TEST_MYSQL_URL", "replicron_no_mysql_server"),
        (
            "REPLICRON_TEST_POSTGRES_URL",
            "replicron_no_postgres_server",
        ),
    ] {
        println!("cargo::rerun-if-env-changed={var}");
        println!("cargo::rustc-check-cfg=cfg({cfg})");
        if std::env::var_os(var).is_none() && !ci {
            println!("cargo::rustc-cfg={cfg}");
        }
    }
    // Private MariaDB servers and Galera clusters, promtool, Chromium and
    // its driver, and skewed clocks.
    for (files, cfg) in [
        (
            &[
                "/usr/sbin/mariadbd",
                "/usr/bin/mariadb-install-db",
                "/usr/bin/rsync",
            ][..],
            "replicron_no_private_mariadb",
        ),
        (
            &[
                "/usr/sbin/mariadbd",
                "/usr/bin/mariadb-install-db",
                "/usr/bin/rsync",
                "/usr/lib/galera/libgalera_smm.so",
            ][..],
            "replicron_no_galera",
        ),
        (&["/usr/bin/promtool"][..], "replicron_no_promtool"),
        (
            &["/usr/bin/chromium", "/usr/bin/chromedriver"][..],
            "replicron_no_chromium",
        ),
    ] {
        println!("cargo::rustc-check-cfg=cfg({cfg})");
        if !ci && files.iter().any(|f| !Path::new(f).exists()) {
            println!("cargo::rustc-cfg={cfg}");
        }
    }
    println!("cargo::rustc-check-cfg=cfg(replicron_no_faketime)");
    let faketime = [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib",
    ]
    .iter()
    .any(|dir| Path::new(dir).join("faketime/libfaketimeMT.so.1").exists());
    if !ci && !faketime {
        println!("cargo::rustc-cfg=replicron_no_faketime");
    }
}
