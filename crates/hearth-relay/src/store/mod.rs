//! The relay's embedded store: every database's documents, index entries, changelog,
//! write-idempotency records and metadata, in shards: redb files `hearth.redb`,
//! `hearth-1.redb`, ... (`store/shards` in the first one's `meta` says how many; a store
//! without it has one), each database wholly in the shard its name hashes to
//! ([`shard_of`]). Every shard has the same tables:
//!
//! ```text
//! table       key                                        value
//! documents   db · document_key(name)                    encoded document
//! index       db · index entry key                       (empty)
//! changelog   db · version(u64 BE)                       commit time µs(i64 BE) · names
//! batches     db · string(client_id) · batch_id(u64 BE)  version(u64 BE) · commit time µs
//!                                                        · digest (`crate::idempotency`)
//! meta        "version/<db>"                              last commit version (u64 BE) ·
//!                                                        its commit time µs (i64 BE)
//!             "indexes/<db>"                              index file JSON the entries follow
//!             "building/<db>"                             index file JSON of an index build
//!                                                        under way (`catalog.rs`)
//!             "dropping/<db>"                             index file JSON whose entries are
//!                                                        being removed
//!             "catalog/<db>"                              catalog generation (u64 BE)
//! ```
//! `db` is the database name written as an escaped, terminated key string, so one database's
//! rows are one contiguous key range in every table. Keys after `db` are the core's
//! (`core::index::keys`), which is why the same query engine runs here and in IndexedDB.
//!
//! Every commit version has one changelog record (its changed names, possibly none), and
//! pruning takes records from the oldest on (`crate::retention`): the changelog covers
//! every commit after the version before its first record. Records written before the
//! version record kept its commit time hold the version alone (8 bytes), and still load.
//!
//! Architecture invariant: documents and their index entries change only together, in one
//! write transaction, so a crash leaves them consistent (`hearth-relay check` verifies it).

mod catalog;
mod embedded;
mod history;
mod pg_conn;
mod pg_listen;
mod pg_write;
mod postgres;
pub mod txn;
mod view;

use std::path::Path;

use hearth_core::encoding::document::decode_document;
use hearth_core::encoding::key::{prefix_end, write_string, Direction, KeyReader};
use hearth_core::index::config::{parse_index_file, IndexFile};
use hearth_core::index::def::IndexCatalog;
use hearth_core::index::keys::{document_entries, document_key};
use hearth_core::path::DocumentName;

pub use catalog::{BuildLock, Catalogs, Pass};
pub use embedded::{shard_file_name, BATCHES, CHANGELOG, DOCUMENTS, INDEX, META};
pub use postgres::PgTls;
pub use txn::Tab;
use txn::{Backend, ReadTxn, WriteFn};
use view::PAGE;
pub use view::{DatabaseView, Snapshot};

/// A storage failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The data directory could not be created.
    #[error("cannot open the data directory {path}: {source}")]
    Open {
        /// The directory, as given.
        path: String,
        /// Why it could not be created.
        source: std::io::Error,
    },
    /// redb failed (I/O, a full disk, a corrupt file).
    #[error("storage error: {0}")]
    Redb(String),
    /// PostgreSQL failed, or could not be reached: the outcome of a write that failed
    /// this way is unknown until read back.
    #[error("PostgreSQL error: {0}")]
    Postgres(String),
    /// PostgreSQL could not serialize a transaction with concurrent ones (it is run again
    /// a number of times before this reaches a caller).
    #[error("PostgreSQL could not serialize the transaction: {0}")]
    Serialization(String),
    /// A stored record does not decode.
    #[error("corrupt data in database `{db}`: {what}")]
    Corrupt {
        /// The database the record belongs to.
        db: String,
        /// Which record, and what is wrong with it.
        what: String,
    },
}

/// The store's page cache unless configured (`--cache-mib`): redb's default, 1 GiB.
pub const DEFAULT_CACHE_BYTES: usize = 1 << 30;

/// The key prefix of database `db` in every table.
pub fn db_prefix(db: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(db.len() + 2);
    write_string(db, Direction::Ascending, &mut out);
    out
}

/// Whether `name` is an acceptable database name: 1 to 64 of `[A-Za-z0-9_-]`.
pub fn valid_database_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Shards of a store created without `--store-shards`.
pub const DEFAULT_STORE_SHARDS: usize = 8;

/// Most shards a store may have.
pub const MAX_STORE_SHARDS: usize = 64;

/// The shard database `db` lives in, of `n`: FNV-1a of its name, so it never changes
/// with the build or the platform.
pub fn shard_of(db: &str, n: usize) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in db.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % n.max(1) as u64) as usize
}

/// The open store: its databases spread over the backend's shards (redb: one file each;
/// PostgreSQL: one), each shard with its own writer.
pub struct Store {
    /// Where the state lives.
    backend: Box<dyn Backend>,
}

impl Store {
    /// Opens (or creates, with [`DEFAULT_STORE_SHARDS`] shards) the embedded store in
    /// directory `dir`, with redb's default page cache.
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        Store::open_with(dir, DEFAULT_CACHE_BYTES, DEFAULT_STORE_SHARDS)
    }

    /// Opens the embedded store in directory `dir`, or creates it with `shards` shards (an
    /// existing store keeps its own number), caching at most `cache_bytes` of its pages in
    /// memory (the bulk of the relay's resident memory under load), shared out between
    /// shards.
    pub fn open_with(dir: &Path, cache_bytes: usize, shards: usize) -> Result<Store, StoreError> {
        let backend = embedded::Embedded::open(dir, cache_bytes, shards, DEFAULT_STORE_SHARDS)?;
        Ok(Store {
            backend: Box::new(backend),
        })
    }

    /// The store over `backend`.
    pub fn with_backend(backend: Box<dyn Backend>) -> Store {
        Store { backend }
    }

    /// Connects to the PostgreSQL database at `url` with at most `pool_size` pooled
    /// connections (over TLS with `tls`' files, if it names an authority), creating or
    /// migrating its schema: a store other relays may share.
    pub fn postgres(url: &str, pool_size: usize, tls: &PgTls) -> Result<Store, StoreError> {
        Ok(Store {
            backend: Box::new(postgres::Postgres::connect(url, pool_size, tls)?),
        })
    }

    /// The store's own metrics, in the Prometheus text format (PostgreSQL: its pool).
    pub fn render_metrics(&self) -> String {
        self.backend.render_metrics()
    }

    /// Whether the store answers now.
    pub fn ping(&self) -> Result<(), StoreError> {
        self.backend.ping()
    }

    /// See [`Backend::watch`].
    pub fn watch(&self, watcher: txn::Watcher) -> bool {
        self.backend.watch(watcher)
    }

    /// See [`Backend::drop_idle_connections`].
    pub fn drop_idle_connections(&self) {
        self.backend.drop_idle_connections()
    }

    /// What the store is, for logs and `/healthz`.
    pub fn describe(&self) -> String {
        self.backend.describe()
    }

    /// How many shards the store has.
    pub fn shard_count(&self) -> usize {
        self.backend.shard_count()
    }

    /// The shard database `db` lives in.
    pub fn shard_index(&self, db: &str) -> usize {
        self.backend.shard_index(db)
    }

    /// Runs `work` in a write transaction of shard `shard` (see [`Backend::write`]).
    pub fn write(&self, shard: usize, durable: bool, work: WriteFn<'_>) -> Result<(), StoreError> {
        self.backend.write(shard, durable, work)
    }

    /// Runs `work` in a write transaction of the shard database `db` lives in, durable
    /// when it returns.
    pub(crate) fn write_db(&self, db: &str, work: WriteFn<'_>) -> Result<(), StoreError> {
        self.write(self.shard_index(db), true, work)
    }

    /// A consistent read of the shard database `db` lives in.
    pub(crate) fn read(&self, db: &str) -> Result<Box<dyn ReadTxn>, StoreError> {
        self.backend.read(self.shard_index(db))
    }

    /// Every database with its last commit version.
    pub fn databases(&self) -> Result<Vec<(String, u64)>, StoreError> {
        Ok((self.heads()?.into_iter())
            .map(|(db, h)| (db, h.version))
            .collect())
    }

    /// Every database with its head, by name.
    pub fn heads(&self) -> Result<Vec<(String, txn::Head)>, StoreError> {
        let mut out = Vec::new();
        for i in 0..self.shard_count() {
            out.extend(self.backend.heads(i)?);
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// Every database of shard `i` with its last commit version.
    pub fn shard_databases(&self, i: usize) -> Result<Vec<(String, u64)>, StoreError> {
        Ok((self.backend.heads(i)?.into_iter())
            .map(|(db, h)| (db, h.version))
            .collect())
    }

    /// The index file a database's entries were last built for, if any.
    pub fn stored_indexes(&self, db: &str) -> Result<Option<IndexFile>, StoreError> {
        self.index_file_record(db, "indexes", "stored index definitions")
    }

    /// The index file in `db`'s `meta` record `<kind>/<db>`, if any (`what` names it in
    /// the error when it does not parse).
    fn index_file_record(
        &self,
        db: &str,
        kind: &str,
        what: &str,
    ) -> Result<Option<IndexFile>, StoreError> {
        let Some(v) = self.read(db)?.meta(&format!("{kind}/{db}"))? else {
            return Ok(None);
        };
        let text = String::from_utf8_lossy(&v).into_owned();
        parse_index_file(&text)
            .map(Some)
            .map_err(|e| StoreError::Corrupt {
                db: db.to_owned(),
                what: format!("{what}: {e}"),
            })
    }

    /// A consistent read-only view of database `db` (and of the others in its shard).
    pub fn snapshot(&self, db: &str) -> Result<Snapshot, StoreError> {
        let shard = self.shard_index(db);
        Ok(Snapshot {
            shard,
            shards: self.shard_count(),
            txn: self.backend.read(shard)?,
        })
    }

    /// How many documents database `db` holds (a scan of its documents' keys).
    pub fn document_count(&self, db: &str) -> Result<u64, StoreError> {
        let mut n = 0u64;
        walk(self.read(db)?.as_ref(), Tab::Documents, db, |_, _| {
            n += 1;
            Ok(())
        })?;
        Ok(n)
    }

    /// Checks that `db`'s index table holds exactly the entries its documents produce under
    /// `catalog`, and that its versions are gap-free and agree (`history`). Returns the
    /// problems found (empty when consistent).
    pub fn check(&self, db: &str, catalog: &IndexCatalog) -> Result<Vec<String>, StoreError> {
        let prefix = db_prefix(db);
        let txn = self.read(db)?;
        // Each entry the documents produce, and the document producing it.
        let mut expected = std::collections::BTreeMap::new();
        let mut problems = Vec::new();
        let mut versions = Vec::new();
        if txn.meta(&format!("building/{db}"))?.is_some()
            || txn.meta(&format!("dropping/{db}"))?.is_some()
        {
            problems.push(
                "an index change is under way or was interrupted (a relay finishes it when it \
                 next starts)"
                    .to_owned(),
            );
        }
        walk(txn.as_ref(), Tab::Documents, db, |k, v| {
            match decode_document(v) {
                Ok(doc) => {
                    if document_key(&doc.name) != k[prefix.len()..] {
                        problems.push(format!("document `{}` stored under another key", doc.name));
                    }
                    for e in document_entries(catalog, &doc) {
                        expected.insert(e, doc.name.clone());
                    }
                    versions.push(history::Versions {
                        name: doc.name,
                        created: doc.create_version,
                        updated: doc.update_version,
                    });
                }
                Err(e) => problems.push(format!("undecodable document: {e}")),
            }
            Ok(())
        })?;
        let mut actual = std::collections::BTreeSet::new();
        walk(txn.as_ref(), Tab::Index, db, |k, _| {
            actual.insert(k[prefix.len()..].to_vec());
            Ok(())
        })?;
        let missing: Vec<&DocumentName> = (expected.iter())
            .filter(|(k, _)| !actual.contains(*k))
            .map(|(_, name)| name)
            .collect();
        let extra = actual.iter().filter(|k| !expected.contains_key(*k)).count();
        if !missing.is_empty() {
            let mut of: Vec<String> = missing.iter().map(|n| format!("`{n}`")).collect();
            of.dedup();
            let more = if of.len() > 5 { ", ..." } else { "" };
            of.truncate(5);
            problems.push(format!(
                "{} index entries missing (of {}{more})",
                missing.len(),
                of.join(", ")
            ));
        }
        if extra > 0 {
            problems.push(format!("{extra} index entries without a document"));
        }
        problems.extend(history::problems(txn.as_ref(), db, &versions)?);
        Ok(problems)
    }
}

/// Calls `each` with every row of database `db` in table `t`, in key order, reading a page
/// at a time.
pub(crate) fn walk(
    txn: &dyn ReadTxn,
    t: Tab,
    db: &str,
    mut each: impl FnMut(&[u8], &[u8]) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let mut from = db_prefix(db);
    let end = prefix_end(&from).expect("a database prefix has an end");
    loop {
        let rows = txn.range(t, &from, &end, false, PAGE)?;
        for (k, v) in &rows {
            each(k, v)?;
        }
        match rows.last() {
            Some((k, _)) if rows.len() == PAGE => {
                from = k.clone();
                from.push(0);
            }
            _ => return Ok(()),
        }
    }
}

/// What one [`Store::backfill_chunk`] did.
#[derive(Debug)]
pub struct BackfillStep {
    /// Documents whose entries it wrote.
    pub documents: usize,
    /// Where the next step starts; `None`: the backfill is complete.
    pub next: Option<Vec<u8>>,
}

pub(crate) fn read_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    let n = b.len().min(8);
    a[..n].copy_from_slice(&b[..n]);
    u64::from_be_bytes(a)
}

/// A changelog record's names: count(u32 BE) then each name as key segments.
pub fn encode_change_names(commit_micros: i64, names: &[DocumentName]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&commit_micros.to_be_bytes());
    out.extend_from_slice(&(names.len() as u32).to_be_bytes());
    for n in names {
        hearth_core::encoding::key::write_segments(n.segments(), &mut out);
    }
    out
}

fn decode_change_names(b: &[u8]) -> Result<Vec<DocumentName>, String> {
    if b.len() < 12 {
        return Err("changelog record too short".into());
    }
    let count = u32::from_be_bytes([b[8], b[9], b[10], b[11]]) as usize;
    let mut r = KeyReader::new(&b[12..]);
    let mut out = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        let segs = r.segments().map_err(|e| e.to_string())?;
        out.push(DocumentName::from_segments(segs).map_err(|e| e.to_string())?);
    }
    Ok(out)
}

/// Commit time of a changelog record, in microseconds since the epoch.
pub fn change_time(b: &[u8]) -> i64 {
    read_u64(b) as i64
}
