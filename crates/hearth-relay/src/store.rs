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
//!                                                        under way (`crate::indexes`)
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

use std::cell::Cell;
use std::path::Path;

use redb::{ReadableDatabase, ReadableTable, TableDefinition};

use hearth_core::encoding::document::decode_document;
use hearth_core::encoding::key::{prefix_end, write_string, Direction, KeyReader};
use hearth_core::index::config::{parse_index_file, IndexFile};
use hearth_core::index::def::IndexCatalog;
use hearth_core::index::keys::{document_entries, document_key};
use hearth_core::kv::{KeyRange, KvError, KvRead, Row, Table};
use hearth_core::path::DocumentName;

pub const DOCUMENTS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("documents");
pub const INDEX: TableDefinition<&[u8], &[u8]> = TableDefinition::new("index");
pub const CHANGELOG: TableDefinition<&[u8], &[u8]> = TableDefinition::new("changelog");
pub const BATCHES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("batches");
pub const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

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
    /// A stored record does not decode.
    #[error("corrupt data in database `{db}`: {what}")]
    Corrupt {
        /// The database the record belongs to.
        db: String,
        /// Which record, and what is wrong with it.
        what: String,
    },
}

macro_rules! redb_err {
    ($($t:ty),*) => {$(
        impl From<$t> for StoreError {
            fn from(e: $t) -> StoreError {
                StoreError::Redb(e.to_string())
            }
        }
    )*};
}
redb_err!(
    redb::Error,
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError,
    redb::SetDurabilityError
);

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

/// The `meta` record of shard 0 that says how many shards the store has (absent: one, the
/// layout of stores made before shards).
const SHARDS_RECORD: &str = "store/shards";

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

/// The file name of shard `i` in the store's directory.
pub fn shard_file_name(i: usize) -> String {
    match i {
        0 => "hearth.redb".to_owned(),
        i => format!("hearth-{i}.redb"),
    }
}

/// The open store: its databases spread over shards, one redb file each (`hearth.redb`,
/// then `hearth-1.redb`, ...), by a hash of the database name. Each shard has its own
/// writer, so commits to databases in different shards run at once and never wait for
/// each other.
pub struct Store {
    /// The shards' redb files; a shard's committer opens its write transactions directly.
    shards: Vec<redb::Database>,
}

impl Store {
    /// Opens (or creates, with [`DEFAULT_STORE_SHARDS`] shards) the store in directory
    /// `dir`, with redb's default page cache.
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        Store::open_with(dir, DEFAULT_CACHE_BYTES, DEFAULT_STORE_SHARDS)
    }

    /// Opens the store in directory `dir`, or creates it with `shards` shards (an existing
    /// store keeps its own number), caching at most `cache_bytes` of its pages in memory
    /// (the bulk of the relay's resident memory under load), shared out between shards.
    pub fn open_with(dir: &Path, cache_bytes: usize, shards: usize) -> Result<Store, StoreError> {
        std::fs::create_dir_all(dir).map_err(|source| StoreError::Open {
            path: dir.display().to_string(),
            source,
        })?;
        let first = dir.join(shard_file_name(0));
        let wanted = shards.clamp(1, MAX_STORE_SHARDS);
        let existing = first.exists();
        let open = |path: std::path::PathBuf, cache: usize| -> Result<redb::Database, StoreError> {
            let db = redb::Database::builder()
                .set_cache_size(cache)
                .create(path)?;
            let txn = db.begin_write()?;
            {
                txn.open_table(DOCUMENTS)?;
                txn.open_table(INDEX)?;
                txn.open_table(CHANGELOG)?;
                txn.open_table(BATCHES)?;
                txn.open_table(META)?;
            }
            txn.commit()?;
            Ok(db)
        };
        let zero = open(first, cache_bytes / wanted)?;
        let n = if existing {
            let txn = zero.begin_read()?;
            let meta = txn.open_table(META)?;
            let stored = meta.get(SHARDS_RECORD)?.map(|v| read_u64(v.value()));
            match stored {
                None => 1,
                Some(n) if (1..=MAX_STORE_SHARDS as u64).contains(&n) => n as usize,
                Some(n) => {
                    return Err(StoreError::Corrupt {
                        db: String::new(),
                        what: format!("the store says it has {n} shards"),
                    })
                }
            }
        } else {
            wanted
        };
        if existing && n != wanted && shards != DEFAULT_STORE_SHARDS {
            tracing::warn!(
                shards = n,
                asked = shards,
                "the store keeps the number of shards it was created with"
            );
        }
        let mut all = vec![zero];
        for i in 1..n {
            let path = dir.join(shard_file_name(i));
            if existing && !path.exists() {
                return Err(StoreError::Corrupt {
                    db: String::new(),
                    what: format!("shard file {} is missing", path.display()),
                });
            }
            all.push(open(path, cache_bytes / n)?);
        }
        if !existing {
            // Written last: a store whose creation was cut short has no record, and is
            // read as the one-shard layout it then is (its other files are empty).
            let txn = all[0].begin_write()?;
            txn.open_table(META)?
                .insert(SHARDS_RECORD, (n as u64).to_be_bytes().as_slice())?;
            txn.commit()?;
        }
        Ok(Store { shards: all })
    }

    /// How many shards the store has.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The shard database `db` lives in.
    pub fn shard_index(&self, db: &str) -> usize {
        shard_of(db, self.shards.len())
    }

    /// Shard `i`'s redb file.
    pub(crate) fn shard(&self, i: usize) -> &redb::Database {
        &self.shards[i]
    }

    /// The redb file database `db` lives in.
    pub(crate) fn file(&self, db: &str) -> &redb::Database {
        self.shard(self.shard_index(db))
    }

    /// Every database with its last commit version.
    pub fn databases(&self) -> Result<Vec<(String, u64)>, StoreError> {
        let mut out = Vec::new();
        for i in 0..self.shards.len() {
            out.extend(self.shard_databases(i)?);
        }
        out.sort();
        Ok(out)
    }

    /// Every database of shard `i` with its last commit version.
    pub fn shard_databases(&self, i: usize) -> Result<Vec<(String, u64)>, StoreError> {
        let txn = self.shard(i).begin_read()?;
        let meta = txn.open_table(META)?;
        let mut out = Vec::new();
        for row in meta.range("version/".."version0")? {
            let (k, v) = row?;
            let name = k.value()["version/".len()..].to_owned();
            out.push((name, read_u64(v.value())));
        }
        Ok(out)
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
        let txn = self.file(db).begin_read()?;
        let meta = txn.open_table(META)?;
        let Some(v) = meta.get(format!("{kind}/{db}").as_str())? else {
            return Ok(None);
        };
        let text = String::from_utf8_lossy(v.value()).into_owned();
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
        let txn = self.shard(shard).begin_read()?;
        Ok(Snapshot {
            shard,
            shards: self.shards.len(),
            documents: txn.open_table(DOCUMENTS)?,
            index: txn.open_table(INDEX)?,
            changelog: txn.open_table(CHANGELOG)?,
            meta: txn.open_table(META)?,
        })
    }

    /// Rebuilds `db`'s index entries for `new` definitions where they differ from `old`,
    /// document by document, in transactions of `chunk` documents. `progress(done, total)`
    /// is called after each chunk. The stored definitions are updated at the end.
    ///
    /// Rerunning it after a crash midway is harmless: entries are derived from the
    /// documents, inserting one that exists or removing one that does not changes nothing.
    pub fn backfill(
        &self,
        db: &str,
        old: &IndexCatalog,
        new: &IndexCatalog,
        chunk: usize,
        mut progress: impl FnMut(u64, u64),
    ) -> Result<(), StoreError> {
        let total = self.document_count(db)?;
        let mut done = 0u64;
        let mut from = None;
        loop {
            let step = self.backfill_chunk(db, old, new, from.as_deref(), chunk)?;
            done += step.documents as u64;
            progress(done, total);
            match step.next {
                Some(next) => from = Some(next),
                None => break,
            }
        }
        let txn = self.file(db).begin_write()?;
        {
            let mut meta = txn.open_table(META)?;
            meta.insert(
                format!("indexes/{db}").as_str(),
                new.file().to_json().as_bytes(),
            )?;
        }
        txn.commit()?;
        Ok(())
    }

    /// How many documents database `db` holds (a scan of its documents' keys).
    pub fn document_count(&self, db: &str) -> Result<u64, StoreError> {
        let prefix = db_prefix(db);
        let end = prefix_end(&prefix).expect("a database prefix has an end");
        let txn = self.file(db).begin_read()?;
        let docs = txn.open_table(DOCUMENTS)?;
        Ok(docs.range(prefix.as_slice()..end.as_slice())?.count() as u64)
    }

    /// One step of a backfill from `old` to `new` definitions: the index entries of at
    /// most `chunk` of `db`'s documents, from document key `from` (`None`: the first), in
    /// one write transaction. Commits may run between steps as long as they maintain `new`'s
    /// indexes: each step derives the entries from the documents as they are then.
    pub fn backfill_chunk(
        &self,
        db: &str,
        old: &IndexCatalog,
        new: &IndexCatalog,
        from: Option<&[u8]>,
        chunk: usize,
    ) -> Result<BackfillStep, StoreError> {
        let prefix = db_prefix(db);
        let end = prefix_end(&prefix).expect("a database prefix has an end");
        let from = from.unwrap_or(&prefix);
        let mut txn = self.file(db).begin_write()?;
        // No fsync of its own: the next durable commit (the next round, or the build's end)
        // makes it durable with everything before it, and a crash before that leaves a
        // build that is rolled back from the documents anyway.
        txn.set_durability(redb::Durability::None)?;
        let mut last = None;
        let mut n = 0;
        {
            let docs = txn.open_table(DOCUMENTS)?;
            let mut index = txn.open_table(INDEX)?;
            for row in docs.range(from..end.as_slice())? {
                let (k, v) = row?;
                let doc = decode_document(v.value()).map_err(|e| StoreError::Corrupt {
                    db: db.to_owned(),
                    what: e.to_string(),
                })?;
                let before = document_entries(old, &doc);
                let after = document_entries(new, &doc);
                for key in before.difference(&after) {
                    index.remove([prefix.as_slice(), key].concat().as_slice())?;
                }
                for key in after.difference(&before) {
                    index.insert([prefix.as_slice(), key].concat().as_slice(), [].as_slice())?;
                }
                last = Some(k.value().to_vec());
                n += 1;
                if n == chunk {
                    break;
                }
            }
        }
        txn.commit()?;
        Ok(BackfillStep {
            documents: n,
            // The smallest key after the last one done.
            next: last.filter(|_| n == chunk).map(|mut k| {
                k.push(0);
                k
            }),
        })
    }

    /// The index definitions of a build of `db`'s indexes that started and has not
    /// finished (see [`Store::begin_build`]), if any.
    pub fn interrupted_build(&self, db: &str) -> Result<Option<IndexFile>, StoreError> {
        self.index_file_record(db, "building", "definitions of an index build")
    }

    /// Records that `db`'s index entries are being built for `target` (a superset of the
    /// stored definitions), before the first entry is written: after a crash, the next
    /// start finds the record and removes what the build wrote ([`Store::roll_back_build`]).
    pub fn begin_build(&self, db: &str, target: &IndexCatalog) -> Result<(), StoreError> {
        let txn = self.file(db).begin_write()?;
        {
            let mut meta = txn.open_table(META)?;
            meta.insert(
                format!("building/{db}").as_str(),
                target.file().to_json().as_bytes(),
            )?;
        }
        txn.commit()?;
        Ok(())
    }

    /// Ends a build: `db`'s entries now follow `built`, which becomes its stored index
    /// definitions, and the build record is removed, in one transaction.
    pub fn end_build(&self, db: &str, built: &IndexCatalog) -> Result<(), StoreError> {
        let txn = self.file(db).begin_write()?;
        {
            let mut meta = txn.open_table(META)?;
            meta.insert(
                format!("indexes/{db}").as_str(),
                built.file().to_json().as_bytes(),
            )?;
            meta.remove(format!("building/{db}").as_str())?;
        }
        txn.commit()?;
        Ok(())
    }

    /// Removes the entries an interrupted build of `db`'s indexes wrote (every entry of its
    /// target's indexes that the stored definitions lack, derived from the documents), and
    /// its record. Nothing to do without one.
    pub fn roll_back_build(&self, db: &str, chunk: usize) -> Result<(), StoreError> {
        let Some(target) = self.interrupted_build(db)? else {
            return Ok(());
        };
        let stored = self.stored_indexes(db)?.unwrap_or_default();
        tracing::warn!(database = %db, "an index build was interrupted: removing its entries");
        let target = IndexCatalog::from_file(&target);
        let stored = IndexCatalog::from_file(&stored);
        self.backfill(db, &target, &stored, chunk, |_, _| {})?;
        self.end_build(db, &stored)
    }

    /// Checks that `db`'s index table holds exactly the entries its documents produce under
    /// `catalog`. Returns the problems found (empty when consistent).
    pub fn check(&self, db: &str, catalog: &IndexCatalog) -> Result<Vec<String>, StoreError> {
        let prefix = db_prefix(db);
        let end = prefix_end(&prefix).expect("a database prefix has an end");
        let txn = self.file(db).begin_read()?;
        let docs = txn.open_table(DOCUMENTS)?;
        let index = txn.open_table(INDEX)?;
        let mut expected = std::collections::BTreeSet::new();
        let mut problems = Vec::new();
        if meta_has(&txn, &format!("building/{db}"))? {
            problems.push(
                "an index build was interrupted (the relay removes its entries when it next starts)"
                    .to_owned(),
            );
        }
        for row in docs.range(prefix.as_slice()..end.as_slice())? {
            let (k, v) = row?;
            match decode_document(v.value()) {
                Ok(doc) => {
                    if document_key(&doc.name) != k.value()[prefix.len()..] {
                        problems.push(format!("document `{}` stored under another key", doc.name));
                    }
                    expected.extend(document_entries(catalog, &doc));
                }
                Err(e) => problems.push(format!("undecodable document: {e}")),
            }
        }
        let mut actual = std::collections::BTreeSet::new();
        for row in index.range(prefix.as_slice()..end.as_slice())? {
            let (k, _) = row?;
            actual.insert(k.value()[prefix.len()..].to_vec());
        }
        let missing = expected.difference(&actual).count();
        let extra = actual.difference(&expected).count();
        if missing > 0 {
            problems.push(format!("{missing} index entries missing"));
        }
        if extra > 0 {
            problems.push(format!("{extra} index entries without a document"));
        }
        Ok(problems)
    }
}

/// Whether the `meta` table has `key`.
fn meta_has(txn: &redb::ReadTransaction, key: &str) -> Result<bool, StoreError> {
    Ok(txn.open_table(META)?.get(key)?.is_some())
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

/// A read transaction over all tables of one shard.
pub struct Snapshot {
    /// The shard it reads.
    shard: usize,
    /// How many shards the store has.
    shards: usize,
    /// Documents by database and name.
    documents: redb::ReadOnlyTable<&'static [u8], &'static [u8]>,
    /// Index entries, read by the query executor's scans.
    index: redb::ReadOnlyTable<&'static [u8], &'static [u8]>,
    /// Names changed per version, for listen resumption.
    changelog: redb::ReadOnlyTable<&'static [u8], &'static [u8]>,
    /// Each database's version and index definitions.
    meta: redb::ReadOnlyTable<&'static str, &'static [u8]>,
}

impl Snapshot {
    /// One database's view of the snapshot.
    pub fn database<'a>(&'a self, db: &str) -> DatabaseView<'a> {
        debug_assert_eq!(
            shard_of(db, self.shards),
            self.shard,
            "`{db}` is in another shard"
        );
        DatabaseView {
            snap: self,
            prefix: db_prefix(db),
            name: db.to_owned(),
            rows_left: Cell::new(u64::MAX),
            exhausted: Cell::new(false),
        }
    }
}

/// One database inside a snapshot; implements the core's [`KvRead`].
pub struct DatabaseView<'a> {
    /// The read transaction the view reads from.
    snap: &'a Snapshot,
    /// The database's key prefix (`db_prefix`), put before every key the core asks for.
    prefix: Vec<u8>,
    /// The database's name, for its `meta` records and for errors.
    name: String,
    /// How many more rows (documents and index entries) the view's reads may return.
    rows_left: Cell<u64>,
    /// Set when a read was refused for passing the budget.
    exhausted: Cell<bool>,
}

type RowGuards<'a> = (
    redb::AccessGuard<'a, &'static [u8]>,
    redb::AccessGuard<'a, &'static [u8]>,
);

fn kv_err(e: impl std::fmt::Display) -> KvError {
    KvError(e.to_string())
}

impl DatabaseView<'_> {
    /// Bounds the rows (documents and index entries) this view's reads may return, in all:
    /// a read past it fails, and [`DatabaseView::exhausted`] says why.
    pub fn with_budget(self, rows: u64) -> Self {
        self.rows_left.set(rows);
        self
    }

    /// Whether a read failed for passing the budget set with [`DatabaseView::with_budget`].
    pub fn exhausted(&self) -> bool {
        self.exhausted.get()
    }

    /// Takes `n` rows from the budget, or fails (for good) when fewer are left.
    fn spend(&self, n: usize) -> Result<(), KvError> {
        let left = self.rows_left.get();
        if n as u64 > left {
            self.exhausted.set(true);
            self.rows_left.set(0);
            return Err(KvError("the request read more rows than its budget".into()));
        }
        self.rows_left.set(left - n as u64);
        Ok(())
    }

    /// The database's commit version in this snapshot.
    pub fn version(&self) -> Result<u64, StoreError> {
        Ok(self
            .snap
            .meta
            .get(format!("version/{}", self.name).as_str())?
            .map_or(0, |v| read_u64(v.value())))
    }

    /// Names changed by the commits in `(after, through]`, or `None` when the changelog
    /// does not hold every one of them (pruned, or never had them): then the changes since
    /// `after` cannot be known from it.
    pub fn changes_between(
        &self,
        after: u64,
        through: u64,
    ) -> Result<Option<Vec<DocumentName>>, StoreError> {
        if through <= after {
            return Ok(Some(Vec::new()));
        }
        let key = |version: u64| [self.prefix.as_slice(), &version.to_be_bytes()].concat();
        let (from, to) = (key(after.saturating_add(1)), key(through));
        let mut expected = after.saturating_add(1);
        let mut out = Vec::new();
        for row in self.snap.changelog.range(from.as_slice()..=to.as_slice())? {
            let (k, v) = row?;
            let version = read_u64(&k.value()[self.prefix.len()..]);
            if version != expected {
                return Ok(None);
            }
            expected = expected.saturating_add(1);
            out.extend(
                decode_change_names(v.value()).map_err(|what| StoreError::Corrupt {
                    db: self.name.clone(),
                    what,
                })?,
            );
        }
        Ok((expected == through.saturating_add(1)).then_some(out))
    }

    fn table(&self, table: Table) -> &redb::ReadOnlyTable<&'static [u8], &'static [u8]> {
        match table {
            Table::Documents => &self.snap.documents,
            Table::Index => &self.snap.index,
        }
    }
}

impl KvRead for DatabaseView<'_> {
    async fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        self.spend(1)?;
        let full = [self.prefix.as_slice(), key].concat();
        Ok(self
            .table(table)
            .get(full.as_slice())
            .map_err(kv_err)?
            .map(|v| v.value().to_vec()))
    }

    async fn scan(
        &self,
        table: Table,
        range: &KeyRange,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<Row>, KvError> {
        if range.is_empty() {
            return Ok(Vec::new());
        }
        let start = [self.prefix.as_slice(), &range.start].concat();
        let end = match &range.end {
            Some(e) => [self.prefix.as_slice(), e].concat(),
            None => prefix_end(&self.prefix).expect("prefix end"),
        };
        let iter = self
            .table(table)
            .range(start.as_slice()..end.as_slice())
            .map_err(kv_err)?;
        let p = self.prefix.len();
        let map = |row: Result<RowGuards, redb::StorageError>| {
            row.map(|(k, v)| (k.value()[p..].to_vec(), v.value().to_vec()))
                .map_err(kv_err)
        };
        // One row past the budget tells a scan that passes it from one that ends there.
        let take = (limit as u64).min(self.rows_left.get().saturating_add(1)) as usize;
        let rows: Vec<Row> = if reverse {
            iter.rev().take(take).map(map).collect::<Result<_, _>>()?
        } else {
            iter.take(take).map(map).collect::<Result<_, _>>()?
        };
        self.spend(rows.len())?;
        Ok(rows)
    }
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
