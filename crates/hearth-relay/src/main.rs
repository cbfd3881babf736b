//! `hearth-relay`: parses the command line, sets up logging, and runs the relay
//! (`serve`) or checks a data directory's index consistency (`check`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use hearth_core::index::config::{parse_index_file, IndexFile};
use hearth_core::index::def::IndexCatalog;
use hearth_relay::auth::Authenticator;
use hearth_relay::store::{valid_database_name, PgTls, Store};
use hearth_relay::{run, Config, Relay};

/// TLS to PostgreSQL, for `serve` and `check`.
#[derive(clap::Args)]
struct PgTlsArgs {
    /// PEM file of the certificate authorities that sign the PostgreSQL server's
    /// certificate: connections then use TLS, and the server's certificate must be signed by
    /// one of them and name the host in the URL (add `sslmode=require` to the URL to refuse
    /// a server without TLS). Without it, connections do not use TLS.
    #[arg(long, env = "HEARTH_POSTGRES_CA")]
    postgres_ca: Option<PathBuf>,
    /// PEM file of the relay's client certificate (its chain), presented to a PostgreSQL
    /// server that authenticates clients by certificate (`hostssl ... cert` in
    /// `pg_hba.conf`); needs --postgres-key and --postgres-ca.
    #[arg(long, env = "HEARTH_POSTGRES_CERT", requires = "postgres_key")]
    postgres_cert: Option<PathBuf>,
    /// PEM file of the client certificate's private key (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "HEARTH_POSTGRES_KEY", requires = "postgres_cert")]
    postgres_key: Option<PathBuf>,
}

impl PgTlsArgs {
    /// The files as the store takes them.
    fn tls(&self) -> PgTls {
        PgTls {
            ca: self.postgres_ca.clone(),
            client: self.postgres_cert.clone().zip(self.postgres_key.clone()),
        }
    }
}

#[derive(Parser)]
#[command(
    name = "hearth-relay",
    version,
    about = "Hearth's authoritative server: documents, indexes, writes and real-time queries over WebSocket"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve databases over WebSocket (`/v1/ws`), with `/healthz` and `/metrics`.
    Serve(Box<ServeArgs>),
    /// Verify that every database's index entries exactly match its documents.
    Check {
        /// Data directory to check (the relay must not be running on it).
        #[arg(long, env = "HEARTH_DATA", default_value = "./hearth-data")]
        data: PathBuf,
        /// Check the PostgreSQL store at this URL instead of a data directory (relays may
        /// be running on it; each database is checked in one consistent read).
        #[arg(long, env = "HEARTH_POSTGRES_URL")]
        postgres: Option<String>,
        #[command(flatten)]
        tls: PgTlsArgs,
        /// Index definitions to check against (default: the ones each database was built with).
        #[arg(long, env = "HEARTH_INDEXES")]
        indexes: Option<PathBuf>,
    },
    /// Security rules tools.
    #[command(subcommand)]
    Rules(RulesCommand),
}

#[derive(Subcommand)]
enum RulesCommand {
    /// Run test cases (caller, operation, path or query, data, existing documents, expected
    /// allow or deny) against a rules file without a server; prints each mismatch with what
    /// decided it and exits non-zero on any (format: docs/rules.md).
    Test {
        /// The rules file.
        #[arg(long)]
        rules: PathBuf,
        /// The case file (JSON).
        #[arg(long)]
        cases: PathBuf,
    },
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "HEARTH_ADDR", default_value = "127.0.0.1:8787")]
    addr: String,
    /// Directory of the embedded store (created if missing).
    #[arg(long, env = "HEARTH_DATA", default_value = "./hearth-data")]
    data: PathBuf,
    /// Most MiB of the store's pages cached in memory (the bulk of the relay's resident
    /// memory under load).
    #[arg(long, env = "HEARTH_CACHE_MIB", default_value_t = 1024)]
    cache_mib: usize,
    /// Shards of a store created now: databases are spread over this many files by a hash
    /// of their names, each with its own committer, so commits to databases in different
    /// shards never wait for each other. An existing store keeps the number it was created
    /// with.
    #[arg(long, env = "HEARTH_STORE_SHARDS", default_value_t = hearth_relay::store::DEFAULT_STORE_SHARDS as u64,
          value_parser = clap::value_parser!(u64).range(1..=hearth_relay::store::MAX_STORE_SHARDS as u64))]
    store_shards: u64,
    /// Index definitions in the firestore.indexes.json format (comments and trailing commas
    /// allowed). Changing them backfills existing databases at start.
    #[arg(long, env = "HEARTH_INDEXES")]
    indexes: Option<PathBuf>,
    /// Development: create a missing composite index on first use (backfilled) and log the
    /// entry to add to the index file, instead of refusing the query.
    #[arg(long, env = "HEARTH_AUTO_INDEX")]
    auto_index: bool,
    /// HS256 secret that signs client tokens (JWT). Without any key, tokens are not checked.
    #[arg(long, env = "HEARTH_AUTH_SECRET", hide_env_values = true)]
    auth_secret: Option<String>,
    /// HS256 secret that signs service tokens: trusted server code (the seeds' Admin SDK
    /// samples, back-office jobs), which the security rules do not apply to. Keep it out
    /// of browsers; it must differ from the client tokens' secret.
    #[arg(long, env = "HEARTH_SERVICE_SECRET", hide_env_values = true)]
    service_secret: Option<String>,
    /// Security rules (Firebase's rules syntax, `rules_version` 1 or 2) checked on every
    /// read, listen and write; reloaded on SIGHUP and when the file changes. Without them
    /// the relay is open: anyone who reaches it reads and writes everything, so it serves
    /// loopback only unless `--insecure-open`.
    #[arg(long, env = "HEARTH_RULES")]
    rules: Option<PathBuf>,
    /// Serve without security rules on an address other than loopback.
    #[arg(long, env = "HEARTH_INSECURE_OPEN")]
    insecure_open: bool,
    /// A denied operation's error names the rule that decided, and for a query refused
    /// because rules are not filters, the constraint that would make it provable. Off unless
    /// asked for (`--explain-denials`, or `--explain-denials true`): it tells callers about
    /// the rules, so keep it to development.
    #[arg(long, env = "HEARTH_EXPLAIN_DENIALS", num_args = 0..=1, default_missing_value = "true")]
    explain_denials: Option<bool>,
    /// Keep the state in this PostgreSQL database instead of `--data` (a `postgresql://`
    /// URL or `key=value` settings): several relays started with the same URL serve the
    /// same databases, each client's writes reaching every relay's listeners
    /// (docs/scale-out.md). The schema is created or migrated at start.
    #[arg(long, env = "HEARTH_POSTGRES_URL")]
    postgres: Option<String>,
    /// Most pooled PostgreSQL connections (reads, commits; the notification connection is
    /// apart).
    #[arg(long, env = "HEARTH_POSTGRES_POOL", default_value_t = 16)]
    postgres_pool: usize,
    #[command(flatten)]
    postgres_tls: PgTlsArgs,
    /// How often, in milliseconds, the PostgreSQL store's heads are polled for other
    /// relays' commits: the longest a lost notification delays a change.
    #[arg(long, env = "HEARTH_POSTGRES_POLL_MS", default_value_t = 50)]
    postgres_poll_ms: u64,
    /// Listen for other relays' commit notifications (`false`: polling alone, which only
    /// adds latency; for measuring it).
    #[arg(long, env = "HEARTH_POSTGRES_LISTEN", default_value_t = true, action = clap::ArgAction::Set)]
    postgres_listen: bool,
    /// PEM file of an RS256 public key that verifies client tokens.
    #[arg(long, env = "HEARTH_AUTH_RS256_KEY")]
    auth_rs256_key: Option<PathBuf>,
    /// PEM file of an ES256 public key that verifies client tokens.
    #[arg(long, env = "HEARTH_AUTH_ES256_KEY")]
    auth_es256_key: Option<PathBuf>,
    /// The audience client tokens must name in their `aud` claim (your identity provider's
    /// id for this application). Required with an RS256 or ES256 key: a provider signs
    /// tokens for every application it serves.
    #[arg(long, env = "HEARTH_AUTH_AUDIENCE")]
    auth_audience: Option<String>,
    /// The issuer client tokens must carry as their `iss` claim. Required with an RS256 or
    /// ES256 key.
    #[arg(long, env = "HEARTH_AUTH_ISSUER")]
    auth_issuer: Option<String>,
    /// Heartbeat interval on idle connections, in milliseconds.
    #[arg(long, env = "HEARTH_HEARTBEAT_MS", default_value_t = 5000)]
    heartbeat_ms: u64,
    /// How long committed changes are kept for listen resumption, in seconds.
    #[arg(long, env = "HEARTH_CHANGELOG_RETENTION_SECS", default_value_t = 3600)]
    changelog_retention_secs: u64,
    /// Most write batches queued per database; past it, writers wait (backpressure).
    #[arg(long, env = "HEARTH_MAX_INFLIGHT_WRITES", default_value_t = 10_000)]
    max_inflight_writes: usize,
    /// Most bytes of write batches queued per database; past it, writers wait.
    #[arg(long, env = "HEARTH_MAX_INFLIGHT_WRITE_BYTES", default_value_t = 256 << 20)]
    max_inflight_write_bytes: usize,
    /// Most bytes of one connection's unacknowledged writes: past it the relay reads
    /// nothing more from that connection until acknowledgements bring it under.
    #[arg(
        long,
        env = "HEARTH_MAX_INFLIGHT_WRITE_BYTES_PER_CONNECTION",
        default_value_t = 32 << 20
    )]
    max_inflight_write_bytes_per_connection: usize,
    /// Most bytes queued to one connection before it is dropped as a slow consumer.
    #[arg(long, env = "HEARTH_MAX_OUTBOUND_BYTES", default_value_t = 32 << 20)]
    max_outbound_bytes: usize,
    /// Most concurrent WebSocket connections.
    #[arg(long, env = "HEARTH_MAX_CONNECTIONS", default_value_t = 19_000)]
    max_connections: usize,
    /// Most concurrent WebSocket connections from one client IP address (further upgrades:
    /// HTTP 503).
    #[arg(
        long,
        env = "HEARTH_MAX_CONNECTIONS_PER_ADDRESS",
        default_value_t = 512
    )]
    max_connections_per_address: usize,
    /// Most concurrent connections to one database (further Hellos: resource-exhausted).
    #[arg(
        long,
        env = "HEARTH_MAX_CONNECTIONS_PER_DATABASE",
        default_value_t = 10_000
    )]
    max_connections_per_database: usize,
    /// Most concurrent connections whose tokens name the same subject (`sub`, or Firebase's
    /// `user_id`; further Hellos: resource-exhausted). Connections without one are not
    /// counted.
    #[arg(
        long,
        env = "HEARTH_MAX_CONNECTIONS_PER_SUBJECT",
        default_value_t = 256
    )]
    max_connections_per_subject: usize,
    /// Most accepted connections still speaking HTTP (not yet WebSocket); one past it is
    /// closed at once.
    #[arg(long, env = "HEARTH_MAX_PENDING_CONNECTIONS", default_value_t = 1024)]
    max_pending_connections: usize,
    /// How long, in milliseconds, an HTTP connection may take to send its request headers;
    /// one not upgraded by then is closed when idle, else after its response, and cut at
    /// twice this.
    #[arg(long, env = "HEARTH_HTTP_DEADLINE_MS", default_value_t = 10_000)]
    http_deadline_ms: u64,
    /// Most listens one connection may have at once (further ones: resource-exhausted).
    #[arg(
        long,
        env = "HEARTH_MAX_LISTENS_PER_CONNECTION",
        default_value_t = 5_000
    )]
    max_listens_per_connection: usize,
    /// The bearer token `/metrics` requires (`Authorization: Bearer ...`); without one,
    /// `/metrics` is served to loopback peers only.
    #[arg(long, env = "HEARTH_METRICS_TOKEN")]
    metrics_token: Option<String>,
    /// The databases this relay serves, comma-separated (created at start when missing); a
    /// client naming another is refused with `not-found`. Without it, a client's first
    /// connection to a new (valid) name creates that database.
    #[arg(long, env = "HEARTH_DATABASES", value_delimiter = ',')]
    databases: Option<Vec<String>>,
    /// Most databases created on first use (without `--databases`); a connection to a new
    /// one past it is refused with `resource-exhausted`.
    #[arg(long, env = "HEARTH_MAX_DATABASES", default_value_t = 1000)]
    max_databases: usize,
    /// Most rows (documents and index entries) one read request (query, aggregation,
    /// listen) may scan; a request past it is refused with resource-exhausted.
    #[arg(long, env = "HEARTH_MAX_SCAN_ROWS", default_value_t = 10_000_000)]
    max_scan_rows: u64,
    /// Serve this directory's files over HTTP at `/` (the demo app and the npm package).
    #[arg(long, env = "HEARTH_STATIC_DIR")]
    static_dir: Option<PathBuf>,
    /// Log format: `text` or `json`.
    #[arg(long, env = "HEARTH_LOG_FORMAT", default_value = "text")]
    log_format: String,
}

/// Whether every address `addr` resolves to is a loopback one.
fn loopback_only(addr: &str) -> anyhow::Result<bool> {
    use std::net::ToSocketAddrs;
    let resolved: Vec<_> = addr
        .to_socket_addrs()
        .with_context(|| format!("resolving {addr}"))?
        .collect();
    Ok(!resolved.is_empty() && resolved.iter().all(|a| a.ip().is_loopback()))
}

fn read_indexes(path: Option<&PathBuf>) -> anyhow::Result<IndexFile> {
    match path {
        None => Ok(IndexFile::default()),
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("reading index file {}", p.display()))?;
            parse_index_file(&text).with_context(|| format!("in index file {}", p.display()))
        }
    }
}

fn init_logs(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("HEARTH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing the SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    init_logs(&args.log_format);
    let read_key = |p: &Option<PathBuf>| -> anyhow::Result<Option<Vec<u8>>> {
        p.as_ref()
            .map(|p| std::fs::read(p).with_context(|| format!("reading key {}", p.display())))
            .transpose()
    };
    let rs = read_key(&args.auth_rs256_key)?;
    let es = read_key(&args.auth_es256_key)?;
    let auth = if args.auth_secret.is_none() && rs.is_none() && es.is_none() {
        tracing::warn!("no auth keys configured: client tokens are not verified");
        Authenticator::disabled()
    } else {
        if (rs.is_some() || es.is_some())
            && (args.auth_audience.is_none() || args.auth_issuer.is_none())
        {
            anyhow::bail!(
                "--auth-rs256-key and --auth-es256-key need --auth-audience and --auth-issuer: \
                 without them a token your identity provider signed for another application \
                 would be accepted"
            );
        }
        Authenticator::from_keys(
            args.auth_secret.as_deref().map(str::as_bytes),
            rs.as_deref(),
            es.as_deref(),
        )?
        .expecting(args.auth_audience.as_deref(), args.auth_issuer.as_deref())
    };
    let auth = match args.service_secret.as_deref() {
        Some(secret) => {
            if args.auth_secret.as_deref() == Some(secret) {
                anyhow::bail!("--service-secret must differ from --auth-secret: a client token would pass for a service token");
            }
            auth.with_service_secret(secret.as_bytes())?
        }
        None => auth,
    };
    // Where the relay listens decides whether it may run open, and the default of
    // `--explain-denials`.
    let loopback = loopback_only(&args.addr)?;
    match &args.rules {
        None if !loopback && !args.insecure_open => anyhow::bail!(
            "no security rules (--rules): an open relay serves loopback only; give it rules, \
             or --insecure-open to serve {} without any",
            args.addr
        ),
        None => tracing::warn!(
            "no security rules (--rules): the relay is open, anyone who reaches it reads and writes everything"
        ),
        Some(file) => tracing::info!(rules = %file.display(), "security rules in force"),
    }
    let mut config = Config::new(args.data.clone());
    config.cache_bytes = args.cache_mib.max(1).saturating_mul(1 << 20);
    config.store_shards = args.store_shards as usize;
    config.indexes = read_indexes(args.indexes.as_ref())?;
    config.auto_index = args.auto_index;
    config.heartbeat = Duration::from_millis(args.heartbeat_ms.max(10));
    config.changelog_retention = Duration::from_secs(args.changelog_retention_secs);
    config.max_inflight_writes = args.max_inflight_writes.max(1);
    config.max_inflight_write_bytes = args.max_inflight_write_bytes.max(1);
    config.max_inflight_write_bytes_per_connection =
        args.max_inflight_write_bytes_per_connection.max(1);
    config.max_outbound_bytes = args.max_outbound_bytes.max(64 << 10);
    config.max_connections = args.max_connections.max(1);
    config.max_listens_per_connection = args.max_listens_per_connection.max(1);
    config.max_connections_per_address = args.max_connections_per_address.max(1);
    config.max_connections_per_database = args.max_connections_per_database.max(1);
    config.max_connections_per_subject = args.max_connections_per_subject.max(1);
    config.max_pending_connections = args.max_pending_connections.max(1);
    config.http_deadline = Duration::from_millis(args.http_deadline_ms.max(100));
    config.metrics_token = args.metrics_token.clone().filter(|t| !t.is_empty());
    config.static_dir = args.static_dir.clone();
    if let Some(names) = &args.databases {
        let names: Vec<String> = names
            .iter()
            .map(|n| n.trim().to_owned())
            .filter(|n| !n.is_empty())
            .collect();
        if let Some(bad) = names.iter().find(|n| !valid_database_name(n)) {
            anyhow::bail!(
                "--databases: `{bad}` is not a valid database name (1 to 64 of [A-Za-z0-9_-])"
            );
        }
        config.databases = Some(names);
    }
    config.max_databases = args.max_databases;
    config.max_scan_rows = args.max_scan_rows.max(1);
    config.rules_file = args.rules.clone();
    config.explain_denials = args.explain_denials.unwrap_or(false);
    config.postgres_url = args.postgres.clone().filter(|u| !u.is_empty());
    config.postgres_pool = args.postgres_pool.max(2);
    config.postgres_tls = args.postgres_tls.tls();
    config.postgres_poll = Duration::from_millis(args.postgres_poll_ms.max(1));
    config.postgres_listen = args.postgres_listen;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let relay = Relay::start(config, auth)?;
        let listener = tokio::net::TcpListener::bind(&args.addr)
            .await
            .with_context(|| format!("binding {}", args.addr))?;
        // One machine-readable line on stdout, so scripts and tests started with port 0
        // learn the address.
        println!("hearth-relay listening on {}", listener.local_addr()?);
        run(relay, listener, shutdown_signal()).await?;
        Ok(())
    })
}

fn check(
    data: PathBuf,
    postgres: Option<String>,
    tls: PgTls,
    indexes: Option<PathBuf>,
) -> anyhow::Result<()> {
    let store = match postgres {
        Some(url) => Store::postgres(&url, 2, &tls)?,
        None => Store::open(&data)?,
    };
    let forced = indexes.map(|p| read_indexes(Some(&p))).transpose()?;
    let mut bad = 0;
    let dbs = store.databases()?;
    for (name, version) in &dbs {
        let file = match &forced {
            Some(f) => f.clone(),
            None => store.stored_indexes(name)?.unwrap_or_default(),
        };
        let problems = store.check(name, &IndexCatalog::from_file(&file))?;
        if problems.is_empty() {
            println!("{name}: ok (version {version})");
        } else {
            bad += 1;
            for p in problems {
                println!("{name}: {p}");
            }
        }
    }
    if bad > 0 {
        anyhow::bail!("{bad} of {} databases are inconsistent", dbs.len());
    }
    println!("{} databases consistent", dbs.len());
    Ok(())
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Serve(args) => serve(*args),
        Command::Check {
            data,
            postgres,
            tls,
            indexes,
        } => check(data, postgres, tls.tls(), indexes),
        Command::Rules(RulesCommand::Test { rules, cases }) => rules_test(&rules, &cases),
    }
}

/// `rules test`: runs the cases, printing each outcome; fails on a mismatch.
fn rules_test(rules: &std::path::Path, cases: &std::path::Path) -> anyhow::Result<()> {
    let read = |p: &std::path::Path| {
        std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
    };
    let source = read(rules)?;
    let ruleset = hearth_rules::Ruleset::parse(&rules.display().to_string(), &source)?;
    let file = hearth_rules::cases::parse(&read(cases)?)
        .map_err(|e| anyhow::anyhow!("{}: {e}", cases.display()))?;
    let outcomes = hearth_rules::cases::run(&ruleset, &file, hearth_relay::rules::now());
    let lines: Vec<&str> = source.lines().collect();
    let mut failed = 0;
    for o in &outcomes {
        let expected = if o.expect_allow { "allow" } else { "deny" };
        match &o.result {
            Ok(_) if o.passed() => println!("ok    {}: {expected}", o.name),
            Ok(d) => {
                failed += 1;
                let got = if d.allowed { "allow" } else { "deny" };
                println!(
                    "FAIL  {}: expected {expected}, got {got}: {}",
                    o.name, d.explanation
                );
                for l in d.rule_line.iter().chain(&d.considered) {
                    if let Some(text) = (*l as usize).checked_sub(1).and_then(|i| lines.get(i)) {
                        println!("      line {l}: {}", text.trim());
                    }
                }
                for e in &d.errors {
                    println!("      error: {e}");
                }
            }
            Err(e) => {
                failed += 1;
                println!("ERROR {}: {e}", o.name);
            }
        }
    }
    println!(
        "{} cases, {} passed, {failed} failed",
        outcomes.len(),
        outcomes.len() - failed
    );
    if failed > 0 {
        anyhow::bail!("{failed} of {} cases failed", outcomes.len());
    }
    Ok(())
}
