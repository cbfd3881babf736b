//! Consistent reads: a [`Snapshot`] of one shard, and a [`DatabaseView`] of one database
//! in it, which the core's query executor reads through [`KvRead`].

use std::cell::Cell;

use hearth_core::encoding::key::prefix_end;
use hearth_core::index::def::IndexCatalog;
use hearth_core::index::keys::document_key;
use hearth_core::kv::{KeyRange, KvError, KvRead, Row, Table};
use hearth_core::path::DocumentName;

use super::txn::{Head, ReadTxn, Tab};
use super::{db_prefix, decode_change_names, shard_of, Catalogs, StoreError};

/// A read transaction over all tables of one shard.
pub struct Snapshot {
    /// The shard it reads.
    pub(super) shard: usize,
    /// How many shards the store has.
    pub(super) shards: usize,
    /// The backend's read transaction.
    pub(super) txn: Box<dyn ReadTxn>,
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
            txn: self.txn.as_ref(),
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
    txn: &'a dyn ReadTxn,
    /// The database's key prefix (`db_prefix`), put before every key the core asks for.
    prefix: Vec<u8>,
    /// The database's name, for its head and for errors.
    name: String,
    /// How many more rows (documents and index entries) the view's reads may return.
    rows_left: Cell<u64>,
    /// Set when a read was refused for passing the budget.
    exhausted: Cell<bool>,
}

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

    /// Reads ahead the database's head and the documents `names` (one round trip for a
    /// backend that pays one per read): what a document read needs next.
    pub fn read_ahead(&self, names: &[DocumentName]) -> Result<(), StoreError> {
        let keys: Vec<(Tab, Vec<u8>)> = names
            .iter()
            .map(|n| {
                let key = [self.prefix.as_slice(), &document_key(n)].concat();
                (Tab::Documents, key)
            })
            .collect();
        self.txn.read_ahead(&[self.name.as_str()], &keys)
    }

    /// The database's commit version in this snapshot.
    pub fn version(&self) -> Result<u64, StoreError> {
        Ok(self.txn.head(&self.name)?.map_or(0, |h| h.version))
    }

    /// The database's head in this snapshot (all zero when it was never registered).
    pub fn head(&self) -> Result<Head, StoreError> {
        Ok(self.txn.head(&self.name)?.unwrap_or_default())
    }

    /// The index definitions queries are planned with in this snapshot, at catalog
    /// generation `generation` (this snapshot's).
    pub fn planned_catalog(&self, generation: u64) -> Result<IndexCatalog, StoreError> {
        Ok(Catalogs::load(self.txn, &self.name, generation)?.indexes)
    }

    /// The commit time (µs since the epoch) of the database's last commit in this
    /// snapshot (0: unknown).
    pub fn head_micros(&self) -> Result<i64, StoreError> {
        Ok(self.txn.head(&self.name)?.map_or(0, |h| h.micros))
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
        let mut expected = after.saturating_add(1);
        let end = key(through.saturating_add(1));
        let end = if through == u64::MAX {
            prefix_end(&self.prefix).expect("a database prefix has an end")
        } else {
            end
        };
        let mut out = Vec::new();
        loop {
            let rows = self
                .txn
                .range(Tab::Changelog, &key(expected), &end, false, PAGE)?;
            let last_page = rows.len() < PAGE;
            for (k, v) in rows {
                let version = super::read_u64(&k[self.prefix.len()..]);
                if version != expected {
                    return Ok(None);
                }
                expected = expected.saturating_add(1);
                out.extend(decode_change_names(&v).map_err(|what| StoreError::Corrupt {
                    db: self.name.clone(),
                    what,
                })?);
            }
            if last_page || expected > through {
                break;
            }
        }
        Ok((expected == through.saturating_add(1)).then_some(out))
    }

    fn table(table: Table) -> Tab {
        match table {
            Table::Documents => Tab::Documents,
            Table::Index => Tab::Index,
        }
    }
}

/// Rows read at a time where a whole range is walked (changelog, backfill, check).
pub(super) const PAGE: usize = 1024;

impl KvRead for DatabaseView<'_> {
    async fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        self.spend(1)?;
        let full = [self.prefix.as_slice(), key].concat();
        self.txn.get(Self::table(table), &full).map_err(kv_err)
    }

    /// The keys read ahead together (one round trip to PostgreSQL for a batch of a query's
    /// documents, not one per document), then each from what was read.
    async fn get_many(
        &self,
        table: Table,
        keys: &[Vec<u8>],
    ) -> Result<Vec<Option<Vec<u8>>>, KvError> {
        self.spend(keys.len())?;
        let tab = Self::table(table);
        let full: Vec<(Tab, Vec<u8>)> = keys
            .iter()
            .map(|k| (tab, [self.prefix.as_slice(), k].concat()))
            .collect();
        if full.len() > 1 {
            self.txn.read_ahead(&[], &full).map_err(kv_err)?;
        }
        full.iter()
            .map(|(t, k)| self.txn.get(*t, k).map_err(kv_err))
            .collect()
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
        // One row past the budget tells a scan that passes it from one that ends there.
        let take = (limit as u64).min(self.rows_left.get().saturating_add(1)) as usize;
        let p = self.prefix.len();
        let rows: Vec<Row> = self
            .txn
            .range(Self::table(table), &start, &end, reverse, take)
            .map_err(kv_err)?
            .into_iter()
            .map(|(mut k, v)| {
                k.drain(..p);
                (k, v)
            })
            .collect();
        self.spend(rows.len())?;
        Ok(rows)
    }
}
