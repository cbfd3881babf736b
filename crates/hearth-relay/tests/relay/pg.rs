//! PostgreSQL for the relay's tests: one server per test process (`scripts/pg-server`,
//! stopped when the process is gone), a database per data directory.
//!
//! With `HEARTH_TEST_STORE=postgres`, every relay the harness starts keeps its state in the
//! server's database for its data directory (`--postgres`), so the whole suite runs
//! against the PostgreSQL store; the multi-relay tests use it always.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use crate::harness::run_ok;

/// Whether the suite runs against the PostgreSQL store.
pub fn enabled() -> bool {
    std::env::var("HEARTH_TEST_STORE").is_ok_and(|s| s == "postgres")
}

/// The test process's PostgreSQL server.
pub struct Server {
    dir: PathBuf,
    port: u16,
    /// Databases created so far.
    created: Mutex<HashSet<String>>,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/pg-server")
}

/// A port nobody listens on now.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("binding a free port");
    l.local_addr().unwrap().port()
}

/// The server, started on first use.
pub fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| Server::start("shared", None, false))
}

/// A server of the test's own (one it may crash), stopped when dropped.
pub struct Own(pub Server);

impl Own {
    pub fn start(tag: &str) -> Own {
        Own(Server::start(tag, None, false))
    }

    /// A server that also serves TLS with `certs`' `server.crt` and `server.key`.
    pub fn start_with_tls(tag: &str, certs: &Path) -> Own {
        Own(Server::start(tag, Some(certs), false))
    }

    /// A server whose TLS connections must present a client certificate signed by
    /// `certs`' `ca.crt` naming their user (connections without TLS are trusted).
    pub fn start_with_client_certs(tag: &str, certs: &Path) -> Own {
        Own(Server::start(tag, Some(certs), true))
    }
}

impl Drop for Own {
    fn drop(&mut self) {
        let _ = Command::new(script()).arg("stop").arg(&self.0.dir).output();
        let _ = std::fs::remove_dir_all(&self.0.dir);
    }
}

impl Server {
    /// Starts a server (stopped at the latest when the test process is gone), serving TLS
    /// too with the certificate and key in `tls` (asking TLS clients for a certificate
    /// with `clients`).
    fn start(tag: &str, tls: Option<&Path>, clients: bool) -> Server {
        let dir = std::env::temp_dir().join(format!("hearth-pg-{tag}-{}", std::process::id()));
        let port = free_port();
        run_ok(
            Command::new(script())
                .arg("start")
                .arg(&dir)
                .arg(port.to_string())
                .arg(std::process::id().to_string())
                .envs(tls.map(|d| ("PG_SERVER_SSL", d)))
                .envs(clients.then_some(("PG_SERVER_SSL_CLIENTS", "1"))),
        );
        Server {
            dir,
            port,
            created: Mutex::new(HashSet::new()),
        }
    }

    /// The URL of database `db` (created if it does not exist yet).
    pub fn url(&self, db: &str) -> String {
        let mut created = self.created.lock().unwrap();
        if created.insert(db.to_owned()) {
            self.sql("postgres", &format!("CREATE DATABASE {db}"));
        }
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// Runs `sql` in database `db` with `psql`: its output, unaligned, tuples only.
    pub fn sql(&self, db: &str, sql: &str) -> String {
        let psql = std::fs::read_dir("/usr/lib/postgresql")
            .ok()
            .and_then(|d| d.flatten().map(|e| e.path().join("bin/psql")).max())
            .unwrap_or_else(|| PathBuf::from("psql"));
        let out = run_ok(
            Command::new(psql)
                .env("PGSSLMODE", "disable")
                .args([
                    "-h",
                    "127.0.0.1",
                    "-U",
                    "postgres",
                    "-v",
                    "ON_ERROR_STOP=1",
                    "-tA",
                ])
                .args(["-p", &self.port.to_string(), "-d", db, "-c", sql]),
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Stops the server at once (`-m immediate`).
    pub fn stop(&self) {
        self.script(&["stop"]);
    }

    /// Starts the stopped server again, on its port.
    pub fn start_again(&self) {
        let port = self.port.to_string();
        let pid = std::process::id().to_string();
        self.script(&["start", &port, &pid]);
    }

    /// Runs `scripts/pg-server COMMAND DIR ARGS...`.
    fn script(&self, args: &[&str]) {
        run_ok(
            Command::new(script())
                .arg(args[0])
                .arg(&self.dir)
                .args(&args[1..]),
        );
    }

    /// `pg_ctl restart -m immediate`: a crash of the server, then its recovery.
    pub fn crash_restart(&self) {
        self.script(&["restart"]);
    }
}

/// The database standing for data directory `data`: its name is a hash of the path.
pub fn database_for(data: &Path) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in data.as_os_str().as_encoded_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("h_{h:016x}")
}

/// The URL of the database standing for data directory `data`.
pub fn url_for(data: &Path) -> String {
    server().url(&database_for(data))
}
