//! The store's boundary: what every backend (the embedded redb files, PostgreSQL) offers,
//! and all the rest of the relay uses. A backend holds four ordered byte-keyed tables,
//! a string-keyed `meta` table and a head per database ([`Head`]); it gives consistent read transactions and atomic write transactions.
//! Everything above (the commit logic, the planner's reads, backfills, pruning) is written
//! once against these traits.

use std::sync::Arc;

use super::StoreError;

/// An ordered byte-keyed table. Keys start with the database's prefix
/// ([`super::db_prefix`]), so one database's rows are one contiguous range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tab {
    /// Documents by database and name.
    Documents,
    /// Index entries (their values are empty).
    Index,
    /// One record per commit version: its time and changed names.
    Changelog,
    /// The write-idempotency records (`crate::idempotency`).
    Batches,
}

/// A database's head: where its commits and its index definitions stand.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Head {
    /// The last commit version.
    pub version: u64,
    /// That commit's time (µs since the epoch).
    pub micros: i64,
    /// The generation of the database's index definitions (its `indexes/`, `building/`
    /// and `dropping/` records): every change of them bumps it, under the head's lock, so
    /// a commit or a read that finds another generation than the one it knows reloads
    /// them from its own transaction (`crate::indexes`).
    pub catalog: u64,
}

/// Rows of a range read: (key, value).
pub type Rows = Vec<(Vec<u8>, Vec<u8>)>;

/// A consistent read of the store: every read sees the same committed state.
pub trait ReadTxn: Send + Sync {
    /// The value under `key` in `t`, if any.
    fn get(&self, t: Tab, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;
    /// The rows of `t` with `start <= key < end`, ascending (descending when `reverse`),
    /// at most `limit`.
    fn range(
        &self,
        t: Tab,
        start: &[u8],
        end: &[u8],
        reverse: bool,
        limit: usize,
    ) -> Result<Rows, StoreError>;
    /// The `meta` record `key`, if any.
    fn meta(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError>;
    /// Database `db`'s head, or `None` when the database was never registered.
    fn head(&self, db: &str) -> Result<Option<Head>, StoreError>;
    /// A hint: the heads of `dbs` and the rows `keys` will be read next, so a backend that
    /// pays a round trip per read fetches them together now (nothing by default).
    fn read_ahead(&self, dbs: &[&str], keys: &[(Tab, Vec<u8>)]) -> Result<(), StoreError> {
        let _ = (dbs, keys);
        Ok(())
    }
}

/// A write transaction: reads see its own writes; nothing is visible to others until the
/// backend commits it, and then all of it is.
pub trait WriteTxn: ReadTxn {
    /// Sets `key` to `value` in `t`.
    fn put(&mut self, t: Tab, key: &[u8], value: &[u8]) -> Result<(), StoreError>;
    /// Removes `key` from `t` (nothing if absent).
    fn delete(&mut self, t: Tab, key: &[u8]) -> Result<(), StoreError>;
    /// Removes the rows of `t` in `start..end` for which `keep(key, value)` is false.
    fn retain(
        &mut self,
        t: Tab,
        start: &[u8],
        end: &[u8],
        keep: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StoreError>;
    /// Sets the `meta` record `key`.
    fn put_meta(&mut self, key: &str, value: &[u8]) -> Result<(), StoreError>;
    /// Removes the `meta` record `key`.
    fn delete_meta(&mut self, key: &str) -> Result<(), StoreError>;
    /// Database `db`'s head for this transaction. Commits to one database are serialized
    /// from here on (PostgreSQL: the head row's lock, held to the end of the transaction,
    /// so every check that follows sees every earlier commit, from whichever relay).
    fn lock_head(&mut self, db: &str) -> Result<Option<Head>, StoreError>;
    /// Locks the heads of `dbs` (sorted, without repeats) as [`WriteTxn::lock_head`] does,
    /// and reads `reads` ahead: the transaction's reads of them may be served from what was
    /// read here, since no other writer changes a locked database's rows. Returns the
    /// heads, in the order of `dbs`.
    fn begin_commit(
        &mut self,
        dbs: &[&str],
        reads: &[(Tab, Vec<u8>)],
    ) -> Result<Vec<Option<Head>>, StoreError> {
        let _ = reads;
        dbs.iter().map(|db| self.lock_head(db)).collect()
    }
    /// Sets database `db`'s head (registering it when new); its catalog generation stays.
    fn set_head(&mut self, db: &str, version: u64, micros: i64) -> Result<(), StoreError>;
    /// Sets database `db`'s catalog generation ([`Head::catalog`]); its head must be
    /// locked in this transaction.
    fn set_catalog_generation(&mut self, db: &str, generation: u64) -> Result<(), StoreError>;
    /// The longest key the backend stores (`None`: no limit of its own). The committer
    /// refuses a batch that would write a longer one, before anything is written.
    fn max_key_bytes(&self) -> Option<usize> {
        None
    }
}

/// The work of one write transaction. It may be run more than once (PostgreSQL retries a
/// transaction that failed to serialize): it must start from what the transaction reads,
/// not from what an earlier run left.
pub type WriteFn<'a> = &'a mut dyn FnMut(&mut dyn WriteTxn) -> Result<(), StoreError>;

/// A storage engine behind the store.
pub trait Backend: Send + Sync {
    /// How many shards (independent writers) it has.
    fn shard_count(&self) -> usize;
    /// The shard database `db` lives in.
    fn shard_index(&self, db: &str) -> usize;
    /// A consistent read of shard `shard`.
    fn read(&self, shard: usize) -> Result<Box<dyn ReadTxn>, StoreError>;
    /// Runs `work` in a write transaction of shard `shard` and commits what it wrote
    /// unless it fails; with `durable`, the commit is on disk before this returns.
    fn write(&self, shard: usize, durable: bool, work: WriteFn<'_>) -> Result<(), StoreError>;
    /// Every database of shard `shard` with its head.
    fn heads(&self, shard: usize) -> Result<Vec<(String, Head)>, StoreError>;
    /// What the backend is, for logs and `/healthz` (never a password).
    fn describe(&self) -> String;
    /// The backend's own metrics, in the Prometheus text format (none by default).
    fn render_metrics(&self) -> String {
        String::new()
    }
    /// Whether the backend answers now (`/healthz`).
    fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
    /// Closes the backend's idle connections to a server it could not reach (they may be
    /// dead: the next calls open new ones). Nothing for an embedded store.
    fn drop_idle_connections(&self) {}
    /// Waits for, and takes, database `db`'s index build lock, held until the returned
    /// value is dropped (`super::Store::lock_builds`). An embedded store has one relay,
    /// whose own lock per database serializes its builds: nothing to take.
    fn lock_builds(&self, _db: &str) -> Result<Box<dyn Send>, StoreError> {
        Ok(Box::new(()))
    }
    /// For a backend other relays write to as well: calls `watcher` with what it hears of
    /// their commits, from now on, and returns true. An embedded store has no other
    /// writer: false.
    fn watch(&self, _watcher: Watcher) -> bool {
        false
    }
}

/// What a shared backend hears of commits (its own and other relays').
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Watched {
    /// Database `db`'s head moved to `version` (notifications can be lost or late: this
    /// only says to read it sooner).
    Head {
        /// The database.
        db: String,
        /// Its new head.
        version: u64,
    },
    /// The notification connection was (re)established: anything may have been missed
    /// before, so every head is to be read again.
    Reconnected,
    /// The notification connection was lost, or could not be opened again (it is tried
    /// again with a backoff): until [`Watched::Reconnected`], nothing is heard.
    Lost {
        /// Why.
        reason: String,
    },
}

/// Called with what a shared backend hears, from its own thread.
pub type Watcher = Arc<dyn Fn(Watched) + Send + Sync>;
