//! The relay's configuration: what `hearth-relay serve` reads from its command line, with
//! the defaults that tests and the benchmark start from.

use std::path::PathBuf;
use std::time::Duration;

use hearth_core::index::config::IndexFile;

use crate::store::PgTls;

/// Everything the relay is configured with. The fields are public settings: the binary
/// fills them from its flags, and the relay reads them, unchanged, for its whole life.
#[derive(Clone, Debug)]
pub struct Config {
    /// Directory of the embedded store.
    pub data_dir: PathBuf,
    /// Most bytes of the store's pages cached in memory.
    pub cache_bytes: usize,
    /// Shards of a store created now (one file and one committer each; an existing store
    /// keeps its own number).
    pub store_shards: usize,
    /// Index definitions every database uses.
    pub indexes: IndexFile,
    /// Create a missing composite index on first use instead of refusing the query.
    pub auto_index: bool,
    /// Idle connections get a heartbeat this often.
    pub heartbeat: Duration,
    /// How long committed changes stay in the changelog (the resume window).
    pub changelog_retention: Duration,
    /// Most write batches queued per database; past it, the writing connection waits.
    pub max_inflight_writes: usize,
    /// Most bytes of write batches queued per database; past it, the writing connection
    /// waits.
    pub max_inflight_write_bytes: usize,
    /// Most bytes of one connection's unacknowledged write batches: past it, the relay
    /// reads nothing more from the connection until acknowledgements bring it under.
    pub max_inflight_write_bytes_per_connection: usize,
    /// Most bytes queued to one connection before it is dropped as a slow consumer.
    pub max_outbound_bytes: usize,
    /// Most concurrent connections.
    pub max_connections: usize,
    /// Most concurrent WebSocket connections from one client IP address; more are refused
    /// at the upgrade with HTTP 503.
    pub max_connections_per_address: usize,
    /// Most concurrent connections to one database; a `Hello` past it is refused with
    /// `resource-exhausted`.
    pub max_connections_per_database: usize,
    /// Most concurrent connections whose verified tokens name the same subject (`sub`, or
    /// Firebase's `user_id`: the `uid`); connections without one are not counted.
    pub max_connections_per_subject: usize,
    /// Most accepted TCP connections still speaking HTTP (not yet upgraded); a connection
    /// past it is closed at once.
    pub max_pending_connections: usize,
    /// How long an HTTP connection may take to send a request's headers; an HTTP connection
    /// is asked to close this long after it was accepted, and cut at twice it (upgraded ones
    /// are not).
    pub http_deadline: Duration,
    /// Most listens (targets) one connection may have at once; more are refused with
    /// `resource-exhausted`.
    pub max_listens_per_connection: usize,
    /// The bearer token `/metrics` requires; `None`: it is served to loopback peers only.
    pub metrics_token: Option<String>,
    /// A directory served over plain HTTP at `/` (the demo app and the built package).
    pub static_dir: Option<PathBuf>,
    /// The only databases served (created at start when missing); `None`: any valid name,
    /// created on its first connection, up to `max_databases`.
    pub databases: Option<Vec<String>>,
    /// Most databases this relay holds when they are created on first use.
    pub max_databases: usize,
    /// Most rows (documents and index entries) one read request may scan; past it the
    /// request is refused with `resource-exhausted`.
    pub max_scan_rows: u64,
    /// The security rules file (`--rules`); `None`: the relay is open.
    pub rules_file: Option<PathBuf>,
    /// Whether a denial's message names the rule that decided (`--explain-denials`).
    pub explain_denials: bool,
    /// The PostgreSQL database other relays share (`--postgres`); `None`: the embedded
    /// store in `data_dir`.
    pub postgres_url: Option<String>,
    /// Most pooled PostgreSQL connections.
    pub postgres_pool: usize,
    /// TLS to PostgreSQL (`--postgres-ca`, and the client certificate of `--postgres-cert`
    /// and `--postgres-key`): with an authority, connections use TLS; without, they do not.
    pub postgres_tls: PgTls,
    /// How often the heads of a shared store are polled for other relays' commits (the
    /// longest a lost notification delays a change).
    pub postgres_poll: Duration,
    /// Whether a shared store's notifications are listened to (off: polling alone, for
    /// measuring it).
    pub postgres_listen: bool,
}

impl Config {
    /// Defaults for `data_dir` (tests and the benchmark start from these).
    pub fn new(data_dir: PathBuf) -> Config {
        Config {
            data_dir,
            cache_bytes: crate::store::DEFAULT_CACHE_BYTES,
            store_shards: crate::store::DEFAULT_STORE_SHARDS,
            indexes: IndexFile::default(),
            auto_index: false,
            heartbeat: Duration::from_secs(5),
            changelog_retention: Duration::from_secs(3600),
            max_inflight_writes: 10_000,
            max_inflight_write_bytes: 256 << 20,
            max_inflight_write_bytes_per_connection: 32 << 20,
            max_outbound_bytes: 32 << 20,
            max_connections: 19_000,
            max_connections_per_address: 512,
            max_connections_per_database: 10_000,
            max_connections_per_subject: 256,
            max_pending_connections: 1024,
            http_deadline: Duration::from_secs(10),
            max_listens_per_connection: 5_000,
            metrics_token: None,
            static_dir: None,
            databases: None,
            max_databases: 1000,
            max_scan_rows: 10_000_000,
            rules_file: None,
            explain_denials: false,
            postgres_url: None,
            postgres_pool: 16,
            postgres_tls: PgTls::default(),
            postgres_poll: Duration::from_millis(50),
            postgres_listen: true,
        }
    }
}
