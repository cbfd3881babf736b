//! The embedded backend: redb files in the data directory, one per shard (`hearth.redb`,
//! `hearth-1.redb`, ...), each database wholly in the shard its name hashes to
//! ([`super::shard_of`]), each shard with its own writer. A database's head is its `meta`
//! record `version/<db>`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use redb::{ReadableDatabase, ReadableTable, TableDefinition};

use super::txn::{Backend, Head, ReadTxn, Rows, Tab, WriteFn, WriteTxn};
use super::{read_u64, shard_of, StoreError, MAX_STORE_SHARDS};

/// The redb table of [`Tab::Documents`].
pub const DOCUMENTS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("documents");
/// The redb table of [`Tab::Index`].
pub const INDEX: TableDefinition<&[u8], &[u8]> = TableDefinition::new("index");
/// The redb table of [`Tab::Changelog`].
pub const CHANGELOG: TableDefinition<&[u8], &[u8]> = TableDefinition::new("changelog");
/// The redb table of [`Tab::Batches`].
pub const BATCHES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("batches");
/// The redb `meta` table (heads are its `version/<db>` records).
pub const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

fn def(t: Tab) -> TableDefinition<'static, &'static [u8], &'static [u8]> {
    match t {
        Tab::Documents => DOCUMENTS,
        Tab::Index => INDEX,
        Tab::Changelog => CHANGELOG,
        Tab::Batches => BATCHES,
    }
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

/// Every table of a redb read or write transaction, as [`Tables`] (`?` on failure).
macro_rules! open_tables {
    ($txn:expr) => {
        Tables {
            tables: [
                $txn.open_table(DOCUMENTS)?,
                $txn.open_table(INDEX)?,
                $txn.open_table(CHANGELOG)?,
                $txn.open_table(BATCHES)?,
            ],
            meta: $txn.open_table(META)?,
        }
    };
}

/// The `meta` record of shard 0 that says how many shards the store has (absent: one, the
/// layout of stores made before shards).
const SHARDS_RECORD: &str = "store/shards";

/// The `meta` key of database `db`'s head.
fn head_key(db: &str) -> String {
    format!("version/{db}")
}

/// The `meta` key of database `db`'s catalog generation (absent: 0).
fn catalog_key(db: &str) -> String {
    format!("catalog/{db}")
}

/// A head record: the last commit version and that commit's time. Records written before
/// commit times were kept hold the version alone (8 bytes), and still load.
fn decode_head(v: &[u8]) -> (u64, i64) {
    (read_u64(v), v.get(8..).map_or(0, |t| read_u64(t) as i64))
}

/// The file name of shard `i` in the store's directory.
pub fn shard_file_name(i: usize) -> String {
    match i {
        0 => "hearth.redb".to_owned(),
        i => format!("hearth-{i}.redb"),
    }
}

/// The redb files of a store directory.
pub(super) struct Embedded {
    shards: Vec<Shard>,
    dir: String,
}

/// One redb file. After a failed I/O redb refuses every later operation ("previous I/O
/// error") until the file is opened again: the shard then drops its handle, and the next
/// operation opens the file again (redb recovers it from its last commit), so a full disk
/// freed or a transient device error ends without a restart.
struct Shard {
    /// The file.
    path: PathBuf,
    /// Its page cache.
    cache: usize,
    /// The open file; `None` after an I/O failure, until it opens again.
    db: RwLock<Option<Arc<redb::Database>>>,
}

impl Shard {
    fn new(path: PathBuf, cache: usize, db: redb::Database) -> Shard {
        Shard {
            path,
            cache,
            db: RwLock::new(Some(Arc::new(db))),
        }
    }

    /// The open file, opened again first if an I/O failure closed it.
    fn handle(&self) -> Result<Arc<redb::Database>, StoreError> {
        if let Some(db) = self.db.read().ok().and_then(|d| d.clone()) {
            return Ok(db);
        }
        let mut slot = self
            .db
            .write()
            .map_err(|_| StoreError::Redb("a shard's lock is poisoned".into()))?;
        if let Some(db) = slot.as_ref() {
            return Ok(db.clone());
        }
        // Fails while reads begun before the failure still hold the file: the next
        // operation tries again.
        let db = redb::Database::builder()
            .set_cache_size(self.cache)
            .create(&self.path)?;
        tracing::warn!(file = %self.path.display(), "store file opened again after an I/O failure");
        let db = Arc::new(db);
        *slot = Some(db.clone());
        Ok(db)
    }

    /// After an operation on `db` failed: if redb now refuses everything for a previous
    /// I/O failure, the handle is dropped so that the next operation opens the file again.
    fn after_error(&self, db: &Arc<redb::Database>) {
        let latched = matches!(
            db.try_begin_write(),
            Err(redb::TransactionError::Storage(
                redb::StorageError::PreviousIo
            ))
        );
        if !latched {
            return;
        }
        if let Ok(mut slot) = self.db.write() {
            if slot.as_ref().is_some_and(|d| Arc::ptr_eq(d, db)) {
                tracing::error!(file = %self.path.display(), "store file failed an I/O: it is opened again at its next use");
                *slot = None;
            }
        }
    }

    /// Runs `f` on the open file; an error that latched redb closes it for reopening.
    fn run<T>(
        &self,
        f: impl FnOnce(&Arc<redb::Database>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let db = self.handle()?;
        let out = f(&db);
        if out.is_err() {
            self.after_error(&db);
        }
        out
    }
}

impl Embedded {
    /// Opens (or creates, with `shards` shards: an existing store keeps its own number)
    /// the store in `dir`, caching at most `cache_bytes` of its pages, shared out between
    /// shards.
    pub(super) fn open(
        dir: &Path,
        cache_bytes: usize,
        shards: usize,
        default_shards: usize,
    ) -> Result<Embedded, StoreError> {
        std::fs::create_dir_all(dir).map_err(|source| StoreError::Open {
            path: dir.display().to_string(),
            source,
        })?;
        let first = dir.join(shard_file_name(0));
        let wanted = shards.clamp(1, MAX_STORE_SHARDS);
        let existing = first.exists();
        let open = |path: PathBuf, cache: usize| -> Result<Shard, StoreError> {
            let db = redb::Database::builder()
                .set_cache_size(cache)
                .create(&path)?;
            let txn = db.begin_write()?;
            {
                for t in [Tab::Documents, Tab::Index, Tab::Changelog, Tab::Batches] {
                    txn.open_table(def(t))?;
                }
                txn.open_table(META)?;
            }
            txn.commit()?;
            Ok(Shard::new(path, cache, db))
        };
        let zero = open(first, cache_bytes / wanted)?;
        let n = if existing {
            let txn = zero.handle()?.begin_read()?;
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
        if existing && n != wanted && shards != default_shards {
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
            let txn = all[0].handle()?.begin_write()?;
            txn.open_table(META)?
                .insert(SHARDS_RECORD, (n as u64).to_be_bytes().as_slice())?;
            txn.commit()?;
        }
        Ok(Embedded {
            shards: all,
            dir: dir.display().to_string(),
        })
    }
}

impl Backend for Embedded {
    fn shard_count(&self) -> usize {
        self.shards.len()
    }

    fn shard_index(&self, db: &str) -> usize {
        shard_of(db, self.shards.len())
    }

    fn read(&self, shard: usize) -> Result<Box<dyn ReadTxn>, StoreError> {
        self.shards[shard].run(|db| {
            let txn = db.begin_read()?;
            let snapshot: RedbRead = open_tables!(txn);
            Ok(Box::new(snapshot) as Box<dyn ReadTxn>)
        })
    }

    fn write(&self, shard: usize, durable: bool, work: WriteFn<'_>) -> Result<(), StoreError> {
        self.shards[shard].run(|db| {
            let mut txn = db.begin_write()?;
            // Without `durable` no fsync of its own: the next durable commit makes it
            // durable with everything before it.
            txn.set_durability(if durable {
                redb::Durability::Immediate
            } else {
                redb::Durability::None
            })?;
            {
                let mut w: RedbWrite<'_> = open_tables!(txn);
                work(&mut w)?;
            }
            txn.commit()?;
            Ok(())
        })
    }

    /// Whether every shard file takes writes: one that failed an I/O is opened again here
    /// (and is unavailable while it cannot be). A writer busy on it counts as working.
    fn ping(&self) -> Result<(), StoreError> {
        for shard in &self.shards {
            shard.run(|db| match db.try_begin_write() {
                Err(redb::TransactionError::Storage(e)) => Err(e.into()),
                _ => Ok(()),
            })?;
        }
        Ok(())
    }

    fn heads(&self, shard: usize) -> Result<Vec<(String, Head)>, StoreError> {
        self.shards[shard].run(heads_of)
    }

    fn describe(&self) -> String {
        format!("redb ({} shards in {})", self.shards.len(), self.dir)
    }
}

/// A row of a redb table as its iterator gives it.
type RowGuards<'a> = (
    redb::AccessGuard<'a, &'static [u8]>,
    redb::AccessGuard<'a, &'static [u8]>,
);

/// Every database's head in shard file `db`.
fn heads_of(db: &Arc<redb::Database>) -> Result<Vec<(String, Head)>, StoreError> {
    let txn = db.begin_read()?;
    let meta = txn.open_table(META)?;
    let mut out = Vec::new();
    for row in meta.range("version/".."version0")? {
        let (k, v) = row?;
        let name = k.value()["version/".len()..].to_owned();
        let (version, micros) = decode_head(v.value());
        let catalog = meta
            .get(catalog_key(&name).as_str())?
            .and_then(|g| <[u8; 8]>::try_from(g.value()).ok())
            .map_or(0, u64::from_be_bytes);
        out.push((
            name,
            Head {
                version,
                micros,
                catalog,
            },
        ));
    }
    Ok(out)
}

/// Reads `start..end` of a redb table, in either direction, at most `limit` rows.
fn range_of<T: ReadableTable<&'static [u8], &'static [u8]>>(
    table: &T,
    start: &[u8],
    end: &[u8],
    reverse: bool,
    limit: usize,
) -> Result<Rows, StoreError> {
    if start >= end {
        return Ok(Vec::new());
    }
    let iter = table.range(start..end)?;
    let map = |row: Result<RowGuards<'_>, redb::StorageError>| {
        row.map(|(k, v)| (k.value().to_vec(), v.value().to_vec()))
            .map_err(StoreError::from)
    };
    if reverse {
        iter.rev().take(limit).map(map).collect()
    } else {
        iter.take(limit).map(map).collect()
    }
}

/// A transaction's tables: `T` and `M` are redb's read-only tables (a snapshot) or its
/// writable ones (a write transaction).
struct Tables<T, M> {
    /// Indexed by [`Tab`].
    tables: [T; 4],
    meta: M,
}

/// A redb read transaction's tables.
type RedbRead = Tables<
    redb::ReadOnlyTable<&'static [u8], &'static [u8]>,
    redb::ReadOnlyTable<&'static str, &'static [u8]>,
>;

/// A redb write transaction's open tables.
type RedbWrite<'t> = Tables<
    redb::Table<'t, &'static [u8], &'static [u8]>,
    redb::Table<'t, &'static str, &'static [u8]>,
>;

impl<T, M> ReadTxn for Tables<T, M>
where
    T: ReadableTable<&'static [u8], &'static [u8]> + Send + Sync,
    M: ReadableTable<&'static str, &'static [u8]> + Send + Sync,
{
    fn get(&self, t: Tab, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.tables[t as usize]
            .get(key)?
            .map(|v| v.value().to_vec()))
    }

    fn range(
        &self,
        t: Tab,
        start: &[u8],
        end: &[u8],
        reverse: bool,
        limit: usize,
    ) -> Result<Rows, StoreError> {
        range_of(&self.tables[t as usize], start, end, reverse, limit)
    }

    fn meta(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.meta.get(key)?.map(|v| v.value().to_vec()))
    }

    fn head(&self, db: &str) -> Result<Option<Head>, StoreError> {
        let Some(v) = self.meta(&head_key(db))? else {
            return Ok(None);
        };
        let (version, micros) = decode_head(&v);
        let catalog = self
            .meta(&catalog_key(db))?
            .and_then(|g| <[u8; 8]>::try_from(g.as_slice()).ok())
            .map_or(0, u64::from_be_bytes);
        Ok(Some(Head {
            version,
            micros,
            catalog,
        }))
    }
}

impl WriteTxn for RedbWrite<'_> {
    fn put(&mut self, t: Tab, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.tables[t as usize].insert(key, value)?;
        Ok(())
    }

    fn delete(&mut self, t: Tab, key: &[u8]) -> Result<(), StoreError> {
        self.tables[t as usize].remove(key)?;
        Ok(())
    }

    fn retain(
        &mut self,
        t: Tab,
        start: &[u8],
        end: &[u8],
        keep: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StoreError> {
        if start < end {
            self.tables[t as usize].retain_in(start..end, |k, v| keep(k, v))?;
        }
        Ok(())
    }

    fn put_meta(&mut self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        self.meta.insert(key, value)?;
        Ok(())
    }

    fn delete_meta(&mut self, key: &str) -> Result<(), StoreError> {
        self.meta.remove(key)?;
        Ok(())
    }

    fn lock_head(&mut self, db: &str) -> Result<Option<Head>, StoreError> {
        // The shard's one writer is the lock.
        self.head(db)
    }

    fn set_head(&mut self, db: &str, version: u64, micros: i64) -> Result<(), StoreError> {
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&version.to_be_bytes());
        out[8..].copy_from_slice(&micros.to_be_bytes());
        self.put_meta(&head_key(db), &out)
    }

    fn set_catalog_generation(&mut self, db: &str, generation: u64) -> Result<(), StoreError> {
        self.put_meta(&catalog_key(db), &generation.to_be_bytes())
    }
}
