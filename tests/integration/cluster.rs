//! Private MariaDB servers for the tests that need one of their own: a
//! server with settings of its own (a session time zone), and a 3-node
//! Galera cluster, which can be crashed whole and bootstrapped again from
//! its most advanced node. Each gets its own data directory and ports under a
//! temporary folder, starts with `--no-defaults`, and is stopped by PID.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use diesel::RunQueryDsl;
use diesel::connection::SimpleConnection;

use crate::databases::{RawConnection, raw_try_connect};

const MARIADBD: &str = "/usr/sbin/mariadbd";
const INSTALL_DB: &str = "/usr/bin/mariadb-install-db";
const GALERA: &str = "/usr/lib/galera/libgalera_smm.so";

/// Whether this machine can start private servers; in CI it must.
fn available(galera: bool) -> bool {
    let mut needed = vec![MARIADBD, INSTALL_DB, "/usr/bin/rsync"];
    if galera {
        needed.push(GALERA);
    }
    let missing: Vec<&str> = needed
        .into_iter()
        .filter(|p| !Path::new(p).exists())
        .collect();
    if missing.is_empty() {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "missing {missing:?}: install Debian's mariadb-server, galera-4 and rsync"
    );
    eprintln!("skipped: {missing:?} not installed");
    false
}

/// One private `mariadbd`.
pub(crate) struct Node {
    pub port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    child: Option<Child>,
    /// The other nodes' error logs, for a Galera node.
    peers: Vec<PathBuf>,
}

/// The last 30 lines of a server's error log.
fn tail_of(log: &Path) -> String {
    let log = std::fs::read_to_string(log).unwrap_or_default();
    let tail: Vec<&str> = log.lines().rev().take(30).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
}

impl Node {
    fn start(dir: &Path, port: u16, extra: &[String]) -> Node {
        let mut node = Node {
            port,
            dir: dir.to_path_buf(),
            extra: extra.to_vec(),
            child: None,
            peers: Vec::new(),
        };
        node.spawn();
        node
    }

    /// Starts `mariadbd` on the node's data directory and port.
    fn spawn(&mut self) {
        let child = self.command().spawn().expect("start mariadbd");
        self.child = Some(child);
    }

    /// `mariadbd` on the node's data directory and port, with its options.
    fn command(&self) -> Command {
        let dir = &self.dir;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.with_extension("out"))
            .expect("node log");
        // The server dies with the test, even one killed before its Drop.
        let mut command = if Path::new("/usr/bin/setpriv").exists() {
            let mut c = Command::new("/usr/bin/setpriv");
            c.args(["--pdeathsig", "KILL", "--", MARIADBD]);
            c
        } else {
            Command::new(MARIADBD)
        };
        command
            .arg("--no-defaults")
            .arg(format!("--datadir={}", dir.display()))
            .arg(format!("--socket={}", dir.with_extension("sock").display()))
            .arg(format!("--tmpdir={}", private_tmp(dir).display()))
            .arg(format!(
                "--pid-file={}",
                dir.with_extension("pid").display()
            ))
            .arg(format!(
                "--log-error={}",
                dir.with_extension("err").display()
            ))
            .arg(format!("--port={}", self.port))
            .args(["--bind-address=127.0.0.1", "--user=root"])
            .args([
                "--innodb-buffer-pool-size=32M",
                "--innodb-log-file-size=16M",
            ])
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log);
        command
    }

    /// The last transaction (Galera's seqno) this stopped node's data
    /// holds: `grastate.dat`'s, or, where a crash left it unknown (-1),
    /// what `mariadbd --wsrep-recover` reads from InnoDB.
    pub(crate) fn recovered_seqno(&self) -> i64 {
        let state = std::fs::read_to_string(self.dir.join("grastate.dat")).unwrap_or_default();
        let saved = state
            .lines()
            .find_map(|l| l.strip_prefix("seqno:"))
            .and_then(|v| v.trim().parse::<i64>().ok())
            .unwrap_or(-1);
        if saved >= 0 {
            return saved;
        }
        let log = self.dir.with_extension("recover.err");
        let status = self
            .command()
            .arg("--wsrep-recover")
            .arg(format!("--log-error={}", log.display()))
            .status()
            .expect("mariadbd --wsrep-recover");
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.lines()
            .filter_map(|l| l.split_once("Recovered position:"))
            .filter_map(|(_, position)| position.trim().rsplit_once(':'))
            .filter_map(|(_, seqno)| seqno.trim().parse::<i64>().ok())
            .next_back()
            .unwrap_or_else(|| panic!("mariadbd --wsrep-recover exited {status}:\n{text}"))
    }

    /// Starts this stopped node as a new cluster of its own (`--wsrep-new-
    /// cluster`, its `grastate.dat` marked safe to bootstrap), for the
    /// others to join; waits until it is ready.
    pub(crate) fn bootstrap(&mut self, timeout: Duration) {
        self.kill();
        let state_file = self.dir.join("grastate.dat");
        let state = std::fs::read_to_string(&state_file).unwrap_or_default();
        std::fs::write(
            &state_file,
            state.replace("safe_to_bootstrap: 0", "safe_to_bootstrap: 1"),
        )
        .expect("mark grastate.dat safe to bootstrap");
        if !self.extra.iter().any(|o| o == "--wsrep-new-cluster") {
            self.extra.push("--wsrep-new-cluster".to_string());
        }
        self.spawn();
        self.wait_for_status("wsrep_ready", "ON", timeout);
    }

    /// Starts the node again after [`Node::kill`], on the same data and
    /// port (it recovers as after a crash), and waits until it answers.
    pub(crate) fn restart(&mut self, timeout: Duration) {
        self.kill();
        self.spawn();
        let deadline = Instant::now() + timeout;
        while self.connect().is_none() {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                panic!("mariadbd exited {status}:\n{}", self.error_log());
            }
            assert!(
                Instant::now() < deadline,
                "the restarted server does not answer after {timeout:?}:\n{}",
                self.error_log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The server's address.
    pub(crate) fn address(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Starts a killed node of a Galera cluster again: it rejoins the
    /// cluster (never bootstraps a new one) and catches up by state
    /// transfer; waits until it is ready.
    pub(crate) fn rejoin(&mut self, timeout: Duration) {
        self.extra.retain(|option| option != "--wsrep-new-cluster");
        self.kill();
        // The state transfer's rsync daemon writes as nobody, and the
        // server (as root) left files of root's: hand the folder over.
        let _ = Command::new("chown")
            .arg("-R")
            .arg("nobody")
            .arg(&self.dir)
            .status();
        self.spawn();
        self.wait_for_status("wsrep_ready", "ON", timeout);
    }

    /// A URL for database `name` on this node.
    pub(crate) fn url(&self, name: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{name}", self.port)
    }

    /// A connection to the server itself.
    pub(crate) fn connect(&self) -> Option<RawConnection> {
        raw_try_connect(&self.url("mysql")).ok()
    }

    /// Runs `sql` on the server.
    pub(crate) fn execute(&self, sql: &str) {
        let mut conn = self.connect().expect("connect to the private server");
        conn.batch_execute(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// The value of status variable `name`, if the server answers.
    pub(crate) fn status(&self, name: &str) -> Option<String> {
        #[derive(diesel::QueryableByName)]
        struct Variable {
            #[diesel(sql_type = diesel::sql_types::Text)]
            #[diesel(column_name = Value)]
            value: String,
        }
        let mut conn = self.connect()?;
        diesel::sql_query(format!("SHOW STATUS LIKE '{name}'"))
            .get_result::<Variable>(&mut conn)
            .ok()
            .map(|v| v.value)
    }

    /// Waits until status `name` reads `value`.
    fn wait_for_status(&mut self, name: &str, value: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.status(name).as_deref() != Some(value) {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                panic!("mariadbd exited {status}:\n{}", self.error_log());
            }
            assert!(
                Instant::now() < deadline,
                "{name} is not {value} after {timeout:?}:\n{}",
                self.error_log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn error_log(&self) -> String {
        let mut text = tail_of(&self.dir.with_extension("err"));
        // A Galera node that cannot rejoin: its donor says why.
        for peer in &self.peers {
            text.push_str(&format!("\n--- {} ---\n{}", peer.display(), tail_of(peer)));
        }
        text
    }

    /// SIGKILL: the node is gone at once, as in a crash.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(10);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A server's own temporary folder beside its data: two servers
/// bootstrapping at once in the shared /tmp collided on a temporary
/// table's file there.
fn private_tmp(dir: &Path) -> std::path::PathBuf {
    let tmp = dir.with_extension("tmp");
    std::fs::create_dir_all(&tmp).expect("temporary folder");
    tmp
}

fn install(dir: &Path) {
    std::fs::create_dir_all(dir).expect("data dir");
    let output = Command::new(INSTALL_DB)
        .arg("--no-defaults")
        .arg(format!("--datadir={}", dir.display()))
        .arg(format!("--tmpdir={}", private_tmp(dir).display()))
        .args([
            "--user=root",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
        ])
        .output()
        .expect("mariadb-install-db");
    assert!(
        output.status.success(),
        "mariadb-install-db: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// One private server, for settings the shared one must not get.
pub(crate) struct Server {
    pub node: Node,
    _dir: tempfile::TempDir,
}

impl Server {
    /// Starts a private server with `extra` options, or `None` (skipped)
    /// where this machine has no MariaDB server.
    pub(crate) fn start(extra: &[&str]) -> Option<Server> {
        if !available(false) {
            return None;
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let data = dir.path().join("data");
        install(&data);
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let [port] = crate::web::free_ports();
        let node = Node::start(&data, port, &extra);
        let deadline = Instant::now() + Duration::from_secs(30);
        while node.connect().is_none() {
            assert!(
                Instant::now() < deadline,
                "the private server did not start:\n{}",
                node.error_log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Some(Server { node, _dir: dir })
    }

    /// Loads the time zone tables (for named zones such as Europe/Berlin).
    pub(crate) fn load_time_zones(&self) {
        let sql = Command::new("mariadb-tzinfo-to-sql")
            .arg("/usr/share/zoneinfo")
            .stderr(Stdio::null())
            .output()
            .expect("mariadb-tzinfo-to-sql");
        let mut conn = self.node.connect().expect("connect");
        conn.batch_execute("USE mysql").expect("use mysql");
        conn.batch_execute(&String::from_utf8_lossy(&sql.stdout))
            .expect("load the time zone tables");
    }
}

/// A 3-node Galera cluster on this host.
pub(crate) struct Galera {
    pub nodes: Vec<Node>,
    _dir: tempfile::TempDir,
}

impl Galera {
    /// Bootstraps node 1, then joins nodes 2 and 3 by state transfer, each
    /// once the one before is ready. `None` (skipped) where this machine
    /// has no MariaDB server or Galera.
    pub(crate) fn start() -> Option<Galera> {
        if !available(true) {
            return None;
        }
        let started = Instant::now();
        let dir = tempfile::tempdir().expect("temp dir");
        let all: [u16; 12] = crate::web::free_ports();
        let ports: Vec<[u16; 4]> = all.chunks(4).map(|c| [c[0], c[1], c[2], c[3]]).collect();
        let members: Vec<String> = ports
            .iter()
            .map(|p| format!("127.0.0.1:{}", p[1]))
            .collect();
        let address = format!("--wsrep-cluster-address=gcomm://{}", members.join(","));
        let mut nodes = Vec::new();
        for (i, [sql, group, ist, sst]) in ports.iter().enumerate() {
            let data = dir.path().join(format!("node{}", i + 1));
            if i == 0 {
                install(&data);
            } else {
                // Joiners get their data by rsync, whose daemon drops to
                // nobody: their folder starts empty and nobody's.
                std::fs::create_dir_all(&data).expect("joiner dir");
                let _ = Command::new("chown").arg("nobody").arg(&data).status();
            }
            let mut extra: Vec<String> = [
                "--binlog-format=ROW",
                "--default-storage-engine=InnoDB",
                "--innodb-autoinc-lock-mode=2",
                "--wsrep-on=ON",
                "--wsrep-sst-method=rsync",
                "--wsrep-cluster-name=replicron_test",
                "--wsrep-node-address=127.0.0.1",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            extra.push(format!("--wsrep-provider={GALERA}"));
            extra.push(address.clone());
            extra.push(format!("--wsrep-node-name=node{}", i + 1));
            extra.push(format!(
                "--wsrep-provider-options=gmcast.listen_addr=tcp://127.0.0.1:{group};ist.recv_addr=127.0.0.1:{ist}"
            ));
            extra.push(format!("--wsrep-sst-receive-address=127.0.0.1:{sst}"));
            if i == 0 {
                extra.push("--wsrep-new-cluster".to_string());
            }
            let mut node = Node::start(&data, *sql, &extra);
            node.wait_for_status("wsrep_ready", "ON", Duration::from_secs(90));
            nodes.push(node);
        }
        nodes[2].wait_for_status("wsrep_cluster_size", "3", Duration::from_secs(30));
        let logs: Vec<PathBuf> = nodes.iter().map(|n| n.dir.with_extension("err")).collect();
        for node in &mut nodes {
            node.peers = logs
                .iter()
                .filter(|l| **l != node.dir.with_extension("err"))
                .cloned()
                .collect();
        }
        eprintln!(
            "a 3-node Galera cluster is up after {:?}",
            started.elapsed()
        );
        Some(Galera { nodes, _dir: dir })
    }

    /// SIGKILLs every node, one right after the other (within a second).
    pub(crate) fn crash_all(&mut self) {
        for node in &mut self.nodes {
            node.kill();
        }
    }

    /// Brings a cluster whose nodes all crashed back as an operator does:
    /// bootstraps it from the most advanced node (by its recovered
    /// seqno), then the others rejoin by state transfer, each waited for.
    /// Returns the bootstrapped node's index and each node's seqno.
    pub(crate) fn recover_all(&mut self, timeout: Duration) -> (usize, Vec<i64>) {
        let seqnos: Vec<i64> = self.nodes.iter().map(Node::recovered_seqno).collect();
        let first = (0..self.nodes.len())
            .max_by_key(|i| (seqnos[*i], std::cmp::Reverse(*i)))
            .expect("a node");
        // The saved views would have each node wait for the others to
        // form the old primary component: this is a new one.
        for node in &self.nodes {
            let _ = std::fs::remove_file(node.dir.join("gvwstate.dat"));
        }
        self.nodes[first].bootstrap(timeout);
        for (i, node) in self.nodes.iter_mut().enumerate() {
            if i != first {
                node.rejoin(timeout);
            }
        }
        (first, seqnos)
    }
}

/// PostgreSQL's server programs, the newest installed.
fn postgres_bin() -> Option<PathBuf> {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| Some(entry.ok()?.path().join("bin")))
        .filter(|bin| bin.join("postgres").exists() && bin.join("initdb").exists())
        .collect();
    versions.sort();
    versions.pop()
}

/// A command run as the `postgres` user, which the server requires, and
/// killed with the test.
fn as_postgres(program: &Path) -> Command {
    let mut command = Command::new("/usr/bin/setpriv");
    command
        .args([
            "--reuid=postgres",
            "--regid=postgres",
            "--init-groups",
            "--pdeathsig",
            "KILL",
            "--",
        ])
        .arg(program);
    command
}

/// One private PostgreSQL server, for tests that crash or stall it.
pub(crate) struct PgServer {
    port: u16,
    bin: PathBuf,
    data: PathBuf,
    child: Option<Child>,
    _dir: tempfile::TempDir,
}

impl PgServer {
    /// Initialises and starts a server of its own, or `None` (skipped)
    /// where this machine has no PostgreSQL server programs; in CI they
    /// must be there.
    pub(crate) fn start() -> Option<PgServer> {
        let Some(bin) = postgres_bin().filter(|_| Path::new("/usr/bin/setpriv").exists()) else {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "no PostgreSQL server programs: install Debian's postgresql"
            );
            eprintln!("skipped: no PostgreSQL server programs");
            return None;
        };
        let dir = tempfile::tempdir().expect("temp dir");
        let data = dir.path().join("data");
        // The server runs as postgres, which must reach its folder.
        let _ = Command::new("chmod").arg("755").arg(dir.path()).status();
        std::fs::create_dir_all(&data).expect("data dir");
        let _ = Command::new("chown")
            .arg("postgres:postgres")
            .arg(&data)
            .status();
        let output = as_postgres(&bin.join("initdb"))
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "--auth=trust", "--no-sync"])
            .output()
            .expect("initdb");
        assert!(
            output.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let [port] = crate::web::free_ports();
        let mut server = PgServer {
            port,
            bin,
            data,
            child: None,
            _dir: dir,
        };
        server.restart(Duration::from_secs(60));
        Some(server)
    }

    /// The server's address.
    pub(crate) fn address(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    fn connect(&self) -> Option<RawConnection> {
        raw_try_connect(&format!(
            "postgres://postgres@127.0.0.1:{}/postgres",
            self.port
        ))
        .ok()
    }

    /// SIGKILL to the server and every backend: a crash.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let group = nix::unistd::Pid::from_raw(-(child.id() as i32));
            let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
            let _ = child.wait();
        }
    }

    /// Starts the server (again, after a crash: it recovers) and waits
    /// until it answers.
    pub(crate) fn restart(&mut self, timeout: Duration) {
        self.kill();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.data.with_extension("log"))
            .expect("server log");
        let child = as_postgres(&self.bin.join("postgres"))
            .arg("-D")
            .arg(&self.data)
            .arg("-p")
            .arg(self.port.to_string())
            .args(["-c", "listen_addresses=127.0.0.1"])
            .arg("-c")
            // Its own data folder: the only one the server's user owns.
            .arg(format!("unix_socket_directories={}", self.data.display()))
            .args(["-c", "max_connections=200", "-c", "shared_buffers=32MB"])
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start postgres");
        self.child = Some(child);
        let deadline = Instant::now() + timeout;
        while self.connect().is_none() {
            assert!(
                Instant::now() < deadline,
                "the private PostgreSQL does not answer after {timeout:?}: {}",
                std::fs::read_to_string(self.data.with_extension("log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl PgServer {
    /// A streaming standby of `primary` (`pg_basebackup -R`, asynchronous
    /// unless the primary names it synchronous), started and answering.
    pub(crate) fn standby_of(primary: &PgServer) -> PgServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let _ = Command::new("chmod").arg("755").arg(dir.path()).status();
        let [port] = crate::web::free_ports();
        let mut server = PgServer {
            port,
            bin: primary.bin.clone(),
            data: dir.path().join("data"),
            child: None,
            _dir: dir,
        };
        server.follow(primary);
        server
    }

    /// Makes this server (its own one dead) a fresh standby of `primary`,
    /// on the same port: its data is copied anew, as an operator rebuilds
    /// a failed primary.
    pub(crate) fn follow(&mut self, primary: &PgServer) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.data);
        std::fs::create_dir_all(&self.data).expect("data dir");
        let _ = Command::new("chown")
            .arg("postgres:postgres")
            .arg(&self.data)
            .status();
        let _ = Command::new("chmod").arg("700").arg(&self.data).status();
        let output = as_postgres(&self.bin.join("pg_basebackup"))
            .args(["-h", "127.0.0.1", "-U", "postgres", "-R", "-X", "stream"])
            .args(["--checkpoint=fast", "--no-sync", "-p"])
            .arg(primary.port.to_string())
            .arg("-D")
            .arg(&self.data)
            .output()
            .expect("pg_basebackup");
        assert!(
            output.status.success(),
            "pg_basebackup: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        self.restart(Duration::from_secs(60));
    }

    /// Promotes this standby and waits until it takes writes.
    pub(crate) fn promote(&self) {
        let output = as_postgres(&self.bin.join("pg_ctl"))
            .args(["promote", "-w", "-t", "30", "-D"])
            .arg(&self.data)
            .output()
            .expect("pg_ctl promote");
        assert!(
            output.status.success(),
            "pg_ctl promote: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// The port it listens on.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// Runs `sql` on its `postgres` database.
    pub(crate) fn execute(&self, sql: &str) {
        let mut conn = self.connect().expect("connect to the private PostgreSQL");
        conn.batch_execute(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.kill();
    }
}
