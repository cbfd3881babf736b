//! The ordered key-value store the query executor reads and index maintenance writes.
//!
//! Two tables, both keyed by byte strings compared with `memcmp`:
//! - `Documents`: [`crate::index::keys::document_key`] → encoded document.
//! - `Index`: index entry keys ([`crate::index::keys`]) → empty values, or, where the store
//!   has it at hand, the documents-table key of the entry's document (IndexedDB's index rows
//!   carry their record's key; [`MemStore`] stores it); the executor then need not decode
//!   the entry to find its document.
//!
//! The read trait is async so that IndexedDB (whose requests complete on the event loop) can
//! implement it; a synchronous store (the relay's redb, [`MemStore`]) returns ready futures,
//! and [`block_on_ready`] runs the executor over it without any runtime.
//!
//! Architecture invariant: a scan never returns more than `limit` rows, so the executor
//! controls how much it reads.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::future::Future;
use std::ops::Bound;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use crate::document::{Document, DocumentError};
use crate::encoding::document::{decode_document, DecodeError};

/// The tables of the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
    Documents,
    Index,
}

/// A half-open byte range `[start, end)`; `end == None` runs to the end of the table.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct KeyRange {
    /// The first key in the range (inclusive).
    pub start: Vec<u8>,
    /// The first key past the range (exclusive); `None` runs to the end of the table. An end
    /// at or before `start` makes the range empty rather than invalid.
    pub end: Option<Vec<u8>>,
}

impl KeyRange {
    /// Every key that starts with `prefix`.
    pub fn prefix(prefix: &[u8]) -> KeyRange {
        KeyRange {
            start: prefix.to_vec(),
            end: crate::encoding::key::prefix_end(prefix),
        }
    }

    pub fn is_empty(&self) -> bool {
        matches!(&self.end, Some(e) if *e <= self.start)
    }

    pub fn contains(&self, key: &[u8]) -> bool {
        key >= self.start.as_slice() && self.end.as_deref().is_none_or(|e| key < e)
    }
}

/// An error from the underlying store, passed through to the caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("storage error: {0}")]
pub struct KvError(pub String);

/// One row of a scan.
pub type Row = (Vec<u8>, Vec<u8>);

/// What [`KvRead::get_documents`] found at one key.
pub type StoredDocument = Option<Result<Document, DecodeError>>;

/// Reads from an ordered store.
#[allow(async_fn_in_trait)]
pub trait KvRead {
    async fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, KvError>;

    /// The values of several keys, in order (`None` where absent). Stores that can overlap
    /// requests (IndexedDB) override this; the default reads one by one.
    async fn get_many(
        &self,
        table: Table,
        keys: &[Vec<u8>],
    ) -> Result<Vec<Option<Vec<u8>>>, KvError> {
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            out.push(self.get(table, k).await?);
        }
        Ok(out)
    }

    /// The documents stored at several documents-table keys, decoded, in order (`None` where
    /// absent, an error where the stored bytes do not decode). The default reads the bytes
    /// with [`KvRead::get_many`]; a store that keeps documents decoded in memory (the
    /// client's) hands those out instead.
    async fn get_documents(&self, keys: &[Vec<u8>]) -> Result<Vec<StoredDocument>, KvError> {
        let values = self.get_many(Table::Documents, keys).await?;
        Ok(values
            .into_iter()
            .map(|v| v.map(|bytes| decode_document(&bytes)))
            .collect())
    }

    /// At most `limit` rows of `range`, in ascending key order, or descending if `reverse`.
    async fn scan(
        &self,
        table: Table,
        range: &KeyRange,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<Row>, KvError>;
}

/// Runs a future that never waits (one over a synchronous store) to completion.
///
/// Panics if the future returns `Pending`: that would mean a synchronous store was used with
/// an asynchronous one, a programming error rather than an input error.
pub fn block_on_ready<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    match f.as_mut().poll(&mut cx) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("block_on_ready: the store returned a pending future"),
    }
}

/// An in-memory store: the reference implementation for tests and benchmarks.
#[derive(Clone, Debug, Default)]
pub struct MemStore {
    /// The documents table: document key → encoded document. [`MemStore::write_document`]
    /// keeps it consistent with `index`; public, like [`MemStore::table_mut`], so that tests
    /// can set up any state, corrupt records included.
    pub documents: BTreeMap<Vec<u8>, Vec<u8>>,
    /// The index table: entry key → the key of its document (or an empty value: both are
    /// what a store may answer, see the module doc), exactly the entries of the stored
    /// documents when every write goes through `write_document`, which stores the key.
    pub index: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl MemStore {
    pub fn new() -> MemStore {
        MemStore::default()
    }

    pub fn table(&self, table: Table) -> &BTreeMap<Vec<u8>, Vec<u8>> {
        match table {
            Table::Documents => &self.documents,
            Table::Index => &self.index,
        }
    }

    pub fn table_mut(&mut self, table: Table) -> &mut BTreeMap<Vec<u8>, Vec<u8>> {
        match table {
            Table::Documents => &mut self.documents,
            Table::Index => &mut self.index,
        }
    }
}

impl KvRead for MemStore {
    async fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        Ok(self.table(table).get(key).cloned())
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
        let end = match &range.end {
            Some(e) => Bound::Excluded(e.as_slice()),
            None => Bound::Unbounded,
        };
        let iter = self
            .table(table)
            .range::<[u8], _>((Bound::Included(range.start.as_slice()), end));
        let rows = if reverse {
            iter.rev()
                .take(limit)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        } else {
            iter.take(limit)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        Ok(rows)
    }
}

impl MemStore {
    /// Replaces the document `name` with `new` (or deletes it), keeping the index table exactly
    /// consistent. Returns the index entries removed and added.
    ///
    /// Refuses, changing nothing, a `new` document the encoding refuses, and a stored
    /// document that does not decode ([`DocumentError::Corrupt`], `data-loss`): its index
    /// entries cannot be known, so they cannot be removed.
    pub fn write_document(
        &mut self,
        catalog: &crate::index::def::IndexCatalog,
        name: &crate::path::DocumentName,
        new: Option<&Document>,
    ) -> Result<crate::index::keys::IndexDiff, DocumentError> {
        use crate::encoding::document::encode_document;
        use crate::index::keys::{document_key, index_diff};
        let key = document_key(name);
        let encoded = new.map(encode_document).transpose()?;
        let old = self
            .documents
            .get(&key)
            .map(|b| decode_document(b))
            .transpose()
            .map_err(|e| DocumentError::Corrupt {
                source: Box::new(e),
            })?;
        let diff = index_diff(catalog, old.as_ref(), new);
        for k in &diff.deletes {
            self.index.remove(k);
        }
        for k in &diff.inserts {
            self.index.insert(k.clone(), key.clone());
        }
        match encoded {
            Some(bytes) => self.documents.insert(key, bytes),
            None => self.documents.remove(&key),
        };
        Ok(diff)
    }
}

/// A [`KvRead`] over another that counts the requests and rows read through it, and, with a
/// budget, fails every request once the rows read (a get counting as one) or the requests
/// made pass it: how tests, benchmarks and fuzzing see what a plan costs.
pub struct Metered<'a, K> {
    /// The store read through.
    inner: &'a K,
    /// Gets made.
    gets: Cell<u64>,
    /// Scans made.
    scans: Cell<u64>,
    /// Rows returned by scans.
    rows: Cell<u64>,
    /// The most rows and requests allowed, if bounded.
    budget: Option<u64>,
}

impl<'a, K: KvRead> Metered<'a, K> {
    /// Counts what is read from `inner`, without a budget.
    pub fn new(inner: &'a K) -> Metered<'a, K> {
        Metered {
            inner,
            gets: Cell::new(0),
            scans: Cell::new(0),
            rows: Cell::new(0),
            budget: None,
        }
    }

    /// Fails requests once the rows read or the requests made pass `budget`.
    pub fn with_budget(mut self, budget: u64) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Gets made so far.
    pub fn gets(&self) -> u64 {
        self.gets.get()
    }

    /// Scans made so far.
    pub fn scans(&self) -> u64 {
        self.scans.get()
    }

    /// Rows the scans returned so far.
    pub fn rows(&self) -> u64 {
        self.rows.get()
    }

    /// Whether the reads passed the budget (never without one).
    pub fn over_budget(&self) -> bool {
        self.budget.is_some_and(|b| {
            self.rows.get() + self.gets.get() > b || self.gets.get() + self.scans.get() > b
        })
    }

    fn checked(&self) -> Result<(), KvError> {
        if self.over_budget() {
            return Err(KvError("read budget exhausted".into()));
        }
        Ok(())
    }
}

impl<K: KvRead> KvRead for Metered<'_, K> {
    async fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        self.gets.set(self.gets.get() + 1);
        self.checked()?;
        self.inner.get(table, key).await
    }

    async fn scan(
        &self,
        table: Table,
        range: &KeyRange,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<Row>, KvError> {
        let rows = self.inner.scan(table, range, reverse, limit).await?;
        self.scans.set(self.scans.get() + 1);
        self.rows.set(self.rows.get() + rows.len() as u64);
        self.checked()?;
        Ok(rows)
    }
}
