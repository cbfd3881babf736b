//! The client's persistence: one IndexedDB database per Hearth database, holding the local
//! view of documents and its index entries, the server base of documents with pending
//! writes, the mutation queue, the listen targets and client metadata.
//!
//! # Schema (version 2, [`SCHEMA_VERSION`])
//!
//! The IndexedDB database of the Hearth database `<name>` is named `hearth:<name>`. Every
//! object store has out-of-line keys and no key generator, and holds keys of one type only:
//!
//! ```text
//! store      key (type)                        value
//! documents  document key (binary)             {d: encoded document (core::encoding::document),
//!                                               k: [index entry keys (binary)],
//!                                               t: last write (ms since the epoch)}
//!   index "entries": multi-entry on k           the local index: one entry per index key
//! remote     document key (binary)             the server's version of a document with
//!                                              pending writes (engine's encoding; its
//!                                              "absent on the server" marker included)
//! mutations  batch id (number)                 encoded mutation batch (engine's format)
//! targets    encoded query (binary)            resume version (8 bytes, big-endian)
//! meta       name (string)                     bytes: client id, index definitions JSON,
//!                                              the definitions the records' keys follow,
//!                                              cache size
//! ```
//!
//! - Index entries live inside their document's record: IndexedDB maintains the `entries`
//!   index itself, so writing a document is one request however many fields it indexes
//!   (schema 1 kept one record per entry, and a write cost one request per entry).
//!   Index keys are unique (each ends with its document's name), so a range of `entries`
//!   in index-key order is exactly the core's `Table::Index` range.
//! - Binary keys are written as `Uint8Array`s, which IndexedDB compares byte by byte: the
//!   order of `documents` and of `entries` is exactly the core's `memcmp` order (`core::kv`).
//!   Keys read back arrive as `ArrayBuffer`s.
//! - Schema 1 documented `targets` with numeric keys, but the sync layer wrote binary ones,
//!   which the key check refused: no schema-1 database holds a target, and none migrates.
//! - Numeric keys are ids: integers in `[0, 2^53]`. [`IdbStore::all`] returns them as the
//!   8 big-endian bytes of the integer, so byte order is numeric order.
//! - Other values are `Uint8Array`s with their own buffer; an empty value is stored as the
//!   number `0` and reads back as empty bytes.
//!
//! # Upgrades
//!
//! `upgrade` runs inside `upgradeneeded` and applies every step from the stored version to
//! [`SCHEMA_VERSION`], one `if old < n` block per version; a new version adds a block and
//! never edits an old one. Schema 1 → 2 drops the `index` store and adds the `entries` index;
//! the engine then rewrites every schema-1 record with its index keys (its `META_INDEXED`
//! check), as it does whenever index definitions change. An open connection closes itself on `versionchange`, so another
//! tab running a newer version can upgrade; an open that other connections still block
//! [`BLOCKED_GRACE_MS`] after the `blocked` event fails with `failed-precondition` instead
//! of waiting. A database written by a newer version (`VersionError`) fails with
//! `failed-precondition` too.
//!
//! # Transactions
//!
//! [`IdbStore::write`] applies a batch of [`WriteOp`]s in one readwrite transaction with
//! `durability: "strict"` and returns once it completes: the batch is then on disk, all of
//! it or (on any failure, quota included) none of it. [`IdbStore::read`] gives an [`IdbRead`]
//! over one readonly transaction; see there for what its snapshot guarantees.
//!
//! # Why web-sys rather than the `idb` crate's futures
//!
//! idb 0.6.5's futures leak or drop their event closures in ways that bite here: open and
//! delete futures `forget()` theirs on drop, a request future dropped before its event
//! leaves a freed closure as the handler, and its transaction future resolves on the first
//! `error` event, before `abort`, then frees the `abort` handler that is about to run. It
//! also has no `durability` option and no `getAllRecords`. The watchers in `events` own
//! their closures and unhook them on drop; only the web-sys types (whose `Idb*` features the
//! `idb` dependency enables) are used.

mod events;
mod fifo;
mod js;
mod memo;
mod ops;
mod read;
mod scans;

use hearth_core::error::ErrorCode;
use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};

use js_sys::{Array, Reflect};
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::{Event, IdbDatabase, IdbTransaction};

use self::events::{OpenEvents, OpenOutcome, RequestEvents, TxEvents};
use self::memo::{Memo, Touched};
use crate::client::error::ClientError;
use hearth_core::kv::KeyRange;

pub use self::ops::{Key, Store, WriteOp};
pub use self::read::{IdbRead, ScanMethod};

/// The schema version this build writes; see the module doc.
pub const SCHEMA_VERSION: u32 = 2;

/// The IndexedDB database name of the Hearth database `name`.
pub fn database_name(name: &str) -> String {
    format!("hearth:{name}")
}

/// The connection and what every handle shares.
struct Inner {
    /// The open connection; closed on `close`, drop, or another context's `versionchange`.
    db: IdbDatabase,
    /// The Hearth database name, for messages.
    name: String,
    /// Set when the connection was closed, so later calls report why instead of IndexedDB's
    /// bare `InvalidStateError`. Shared with the `versionchange` handler.
    closed: Rc<Cell<Closed>>,
    /// Closes the connection when another context upgrades the database.
    _on_version_change: Closure<dyn FnMut(Event)>,
    /// Called once the connection was closed for another context's upgrade (the API ends
    /// the database's listeners and requests with it).
    on_closed: ClosedHook,
    /// Whether `IDBObjectStore.getAllRecords` exists (IndexedDB 3.0).
    has_get_all_records: bool,
    /// How [`IdbRead`] scans (a benchmark knob; [`ScanMethod::Auto`] otherwise).
    scan_method: Cell<ScanMethod>,
    /// The read transaction of the reads begun since the last write transaction was made:
    /// they share it (a page that starts two thousand listeners at once makes one
    /// transaction, not two thousand). It is made by the first request one of them makes,
    /// so reads the memo answers make none (making one costs about 0.3 ms in Chromium).
    /// Forgotten when the task that made it ends ([`IdbStore::share_until_task_end`]) or a
    /// write transaction is made, so a read begun after a write sees it; a read that finds
    /// it gone inactive takes a fresh one ([`IdbRead`]).
    shared_read: RefCell<Option<(TxCell, u64)>>,
    /// The read transactions of reads begun before now that no request has made yet. A
    /// write transaction makes them first ([`IdbStore::make_promised_reads`]), so each is
    /// ordered before the write, as it would have been had it been made when its reads
    /// began.
    unmade: RefCell<Vec<Weak<RefCell<Option<IdbTransaction>>>>>,
    /// The documents read or written last (`memo`), while this connection is the database's
    /// one writer.
    memo: RefCell<Memo>,
}

/// A read transaction shared by reads, made by the first request one of them makes.
pub(super) type TxCell = Rc<RefCell<Option<IdbTransaction>>>;

/// What runs when another context's upgrade closed the connection.
type ClosedHook = Rc<RefCell<Option<Box<dyn FnOnce()>>>>;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Closed {
    Open,
    ByCaller,
    ByVersionChange,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.db.set_onversionchange(None);
        self.db.close();
    }
}

/// The client's IndexedDB database. Clones share one connection.
#[derive(Clone)]
pub struct IdbStore {
    /// The connection and its state, shared by clones.
    inner: Rc<Inner>,
}

impl std::fmt::Debug for IdbStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdbStore")
            .field("name", &self.inner.name)
            .finish_non_exhaustive()
    }
}

/// Creates and migrates the schema inside `upgradeneeded`: every step from `old` (0 for a new
/// database) up to `new`.
fn upgrade(db: &IdbDatabase, tx: &IdbTransaction, old: u32, new: u32) -> Result<(), JsValue> {
    if old < 1 && new >= 1 {
        for store in SCHEMA_1_STORES {
            db.create_object_store(store)?;
        }
    }
    if old < 2 && new >= 2 {
        // Index entries move from a store of their own (one record, and one request, per
        // entry) into a multi-entry index over each document record's keys. (Eviction
        // reads `t` in a walk of the store; an index on it would cost every write an entry.) The engine
        // rewrites schema-1 records (bare bytes, which neither index sees) at open, since
        // computing their keys needs the index definitions: see `META_INDEXED`.
        db.delete_object_store("index")?;
        let documents = tx.object_store(Store::Documents.name())?;
        let multi = web_sys::IdbIndexParameters::new();
        multi.set_multi_entry(true);
        documents.create_index_with_str_and_optional_parameters(
            js::INDEX_ENTRIES,
            js::RECORD_KEYS,
            &multi,
        )?;
    }
    Ok(())
}

/// The object stores schema 1 created.
const SCHEMA_1_STORES: [&str; 6] = [
    "documents",
    "index",
    "remote",
    "mutations",
    "targets",
    "meta",
];

/// The `meta` key of the index definitions (JSON) that the `documents` records' index keys
/// were computed with; a record written by schema 1 has none.
pub const META_INDEXED: &str = "indexed-with";

impl IdbStore {
    /// Opens (creating or upgrading) the database of the Hearth database `name`.
    pub async fn open(name: &str) -> Result<IdbStore, ClientError> {
        IdbStore::open_with_version(name, SCHEMA_VERSION).await
    }

    /// Opens at a given schema version. For tests of the upgrade path only: versions above
    /// [`SCHEMA_VERSION`] run no migration steps.
    #[doc(hidden)]
    pub async fn open_with_version(name: &str, version: u32) -> Result<IdbStore, ClientError> {
        let what = format!("opening the local database {name:?}");
        let request = js::factory()?
            .open_with_u32(&database_name(name), version)
            .map_err(|e| js::idb_error(&what, &e))?;
        let events = OpenEvents::new(request, Some(upgrade));
        let db: IdbDatabase = match events.outcome(BLOCKED_GRACE_MS).await {
            OpenOutcome::Success(db) => db.unchecked_into(),
            OpenOutcome::Error(e) => return Err(js::idb_error(&what, &e)),
            OpenOutcome::Blocked => {
                return Err(ClientError::new(
                    ErrorCode::FailedPrecondition,
                    format!(
                        "{what}: another tab or window holds the database open with an older \
                         version of the app and does not release it; close the other tabs of \
                         this app and reload"
                    ),
                ))
            }
        };
        drop(events);
        let names = db.object_store_names();
        if let Some(missing) = Store::ALL.iter().find(|s| !names.contains(s.name())) {
            db.close();
            return Err(ClientError::new(
                ErrorCode::DataLoss,
                format!(
                    "{what}: object store `{}` is missing; the database was not created by \
                     Hearth",
                    missing.name()
                ),
            ));
        }
        let closed = Rc::new(Cell::new(Closed::Open));
        let on_closed = ClosedHook::default();
        let on_version_change = {
            let (db, closed, hook) = (db.clone(), closed.clone(), on_closed.clone());
            Closure::<dyn FnMut(Event)>::new(move |e: Event| {
                // A deletion (`newVersion` null) is refused while this context is open: it
                // may hold writes no relay has yet (`clearPersistence` checks first where
                // Web Locks tell it, so this is the fallback).
                let new_version = Reflect::get(&e, &"newVersion".into()).unwrap_or(JsValue::NULL);
                if new_version.is_null() {
                    return;
                }
                db.close();
                closed.set(Closed::ByVersionChange);
                if let Some(f) = hook.borrow_mut().take() {
                    f();
                }
            })
        };
        db.set_onversionchange(Some(on_version_change.as_ref().unchecked_ref()));
        Ok(IdbStore {
            inner: Rc::new(Inner {
                db,
                name: name.to_owned(),
                closed,
                _on_version_change: on_version_change,
                on_closed,
                has_get_all_records: js::has_get_all_records(),
                scan_method: Cell::new(ScanMethod::Auto),
                shared_read: RefCell::new(None),
                unmade: RefCell::default(),
                memo: RefCell::default(),
            }),
        })
    }

    /// Deletes the database of the Hearth database `name` (`clearPersistence`). An open
    /// connection does not close itself for a deletion (it may hold writes no relay has
    /// yet): while one is open the call fails with `failed-precondition`, and the deletion
    /// happens once it closes.
    pub async fn delete(name: &str) -> Result<(), ClientError> {
        let what = format!("deleting the local database {name:?}");
        let request = js::factory()?
            .delete_database(&database_name(name))
            .map_err(|e| js::idb_error(&what, &e))?;
        let events = OpenEvents::new(request, None);
        match events.outcome(BLOCKED_GRACE_MS).await {
            OpenOutcome::Success(_) => Ok(()),
            OpenOutcome::Error(e) => Err(js::idb_error(&what, &e)),
            OpenOutcome::Blocked => Err(ClientError::new(
                ErrorCode::FailedPrecondition,
                format!(
                    "{what}: another tab or window holds the database open; it will be deleted \
                     once the other tabs of this app are closed"
                ),
            )),
        }
    }

    /// Calls `f` once if another context's upgrade closes the connection.
    pub fn on_closed_by_upgrade(&self, f: impl FnOnce() + 'static) {
        *self.inner.on_closed.borrow_mut() = Some(Box::new(f));
    }

    /// Closes the connection (for every clone) once running transactions finish; later calls
    /// fail with `failed-precondition`.
    pub fn close(&self) {
        self.inner.closed.set(Closed::ByCaller);
        self.inner.db.close();
        self.inner.memo.borrow_mut().turn_off();
    }

    /// Keeps the documents read or written last in memory, so that reading one again makes
    /// no request (see `memo`). Only for the database's one writer: every write of
    /// `documents` must go through this connection (the holder of the origin's leader lock).
    pub fn keep_in_memory(&self) {
        self.inner.memo.borrow_mut().turn_on();
    }

    /// Stops [`IdbStore::keep_in_memory`] for good: another context writes the database.
    pub fn forget_memory(&self) {
        self.inner.memo.borrow_mut().turn_off();
    }

    /// The Hearth database name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// A read view over `documents` (and its indexes), `remote` and `meta`.
    pub async fn read(&self) -> Result<IdbRead, ClientError> {
        self.check_open().map_err(|e| self.error("reading", &e))?;
        let shared = self.inner.shared_read.borrow().clone();
        let (tx, generation) = match shared {
            Some(shared) => shared,
            None => {
                let tx = TxCell::default();
                let generation = self.inner.memo.borrow().generation();
                *self.inner.shared_read.borrow_mut() = Some((tx.clone(), generation));
                let mut unmade = self.inner.unmade.borrow_mut();
                unmade.retain(|w| w.upgrade().is_some_and(|c| c.borrow().is_none()));
                unmade.push(Rc::downgrade(&tx));
                (tx, generation)
            }
        };
        Ok(IdbRead::new(self.clone(), tx, generation))
    }

    /// Applies `ops` in order in one readwrite transaction, and returns once it has completed
    /// (durably). On any failure nothing is applied: `invalid-argument` for a key of the wrong
    /// type (checked first) or a key IndexedDB refuses, `resource-exhausted` when the quota is
    /// exceeded.
    pub async fn write(&self, ops: Vec<WriteOp>) -> Result<(), ClientError> {
        for (i, op) in ops.iter().enumerate() {
            op.check()
                .map_err(|m| ClientError::invalid(format!("{WRITING}: operation {i}: {m}")))?;
        }
        if ops.is_empty() {
            return Ok(());
        }
        let mut scope: Vec<Store> = ops.iter().map(WriteOp::store).collect();
        hearth_core::sort::sort(&mut scope);
        scope.dedup();
        self.write_iter(&scope, ops.into_iter().map(Ok)).await
    }

    /// Like [`IdbStore::write`], over the stores of `scope`, but each op is produced (and
    /// checked) just before its request is made, so IndexedDB works on the first ones while
    /// the rest are computed. An op that is `Err`, or fails its check, aborts the batch:
    /// nothing is applied and that error is returned.
    pub async fn write_iter(
        &self,
        scope: &[Store],
        ops: impl IntoIterator<Item = Result<WriteOp, ClientError>>,
    ) -> Result<(), ClientError> {
        self.begin_write(scope, ops).await?.done().await
    }

    /// Makes every request of a [`IdbStore::write_iter`] batch and returns without waiting
    /// for the transaction to complete: [`WriteInFlight::done`] waits. Readonly transactions
    /// begun after this call see the batch (IndexedDB orders transactions whose scopes
    /// overlap), or wait for it. Errors of the requests' making come back here, after the
    /// batch has been aborted.
    pub async fn begin_write(
        &self,
        scope: &[Store],
        ops: impl IntoIterator<Item = Result<WriteOp, ClientError>>,
    ) -> Result<WriteInFlight, ClientError> {
        self.begin_write_with(scope, ops, Durability::Strict).await
    }

    /// Like [`IdbStore::write`], with `relaxed` durability: for what the relay can send
    /// again (its documents, a target's resume version, an acknowledgement: a batch whose
    /// removal is lost is sent again and answered with its first commit), never for what
    /// only the write queue holds (a queued batch, a refusal's rollback). The
    /// transaction completes once IndexedDB has it, without waiting for the disk; a crash
    /// can lose the last such writes, in order (a resume version is written after the
    /// documents it covers, so it is never kept without them), and the relay resends them.
    pub async fn write_relaxed(&self, ops: Vec<WriteOp>) -> Result<(), ClientError> {
        match self.begin_write_relaxed(ops).await? {
            Some(in_flight) => in_flight.done().await,
            None => Ok(()),
        }
    }

    /// [`IdbStore::write_relaxed`]'s requests made, without waiting for the transaction to
    /// complete (see [`IdbStore::begin_write`]); `None` when there is nothing to write.
    pub async fn begin_write_relaxed(
        &self,
        ops: Vec<WriteOp>,
    ) -> Result<Option<WriteInFlight>, ClientError> {
        for (i, op) in ops.iter().enumerate() {
            op.check()
                .map_err(|m| ClientError::invalid(format!("{WRITING}: operation {i}: {m}")))?;
        }
        if ops.is_empty() {
            return Ok(None);
        }
        let scope: Vec<Store> = ops.iter().map(WriteOp::store).collect();
        self.begin_write_with(&scope, ops.into_iter().map(Ok), Durability::Relaxed)
            .await
            .map(Some)
    }

    async fn begin_write_with(
        &self,
        scope: &[Store],
        ops: impl IntoIterator<Item = Result<WriteOp, ClientError>>,
        durability: Durability,
    ) -> Result<WriteInFlight, ClientError> {
        let mut scope = scope.to_vec();
        hearth_core::sort::sort(&mut scope);
        scope.dedup();
        let generation = self.inner.memo.borrow_mut().begin_write();
        let tx = self.write_tx(&scope, durability, WRITING)?;
        let events = TxEvents::new(&tx);
        let mut touched = Touched::new();
        let memo = &self.inner.memo;
        let applied = ops::apply(&tx, &scope, ops, &mut |op| {
            memo.borrow_mut().touch(generation, op, &mut touched);
        });
        if let Err(stopped) = applied {
            // An op that could not even be requested: undo the ones made before it.
            let _ = tx.abort();
            memo.borrow_mut().finish_write(generation, touched, false);
            let _ = events.done().await;
            return Err(match stopped {
                ops::Stopped::Request(i, e) => self.error(&format!("{WRITING}: operation {i}"), &e),
                ops::Stopped::Refused(i, e) => {
                    ClientError::new(e.code(), format!("{WRITING}: operation {i}: {}", e.message))
                }
            });
        }
        Ok(WriteInFlight {
            store: self.clone(),
            events: Some(events),
            generation,
            touched,
        })
    }

    /// A value of `meta`.
    pub async fn get_meta(&self, key: &str) -> Result<Option<Vec<u8>>, ClientError> {
        self.read().await?.get_meta(key).await
    }

    /// The value of `meta` record `key`, first set to `value` if there is none. Atomic
    /// across contexts: the record is added (which fails once it exists) in a transaction
    /// of its own, so two contexts that find none at once end up with the same value.
    pub async fn meta_or_put(&self, key: &str, value: &[u8]) -> Result<Vec<u8>, ClientError> {
        const WHAT: &str = "setting a `meta` record";
        let tx = self.write_tx(&[Store::Meta], Durability::Strict, WHAT)?;
        let events = TxEvents::new(&tx);
        let added = tx
            .object_store(Store::Meta.name())
            .and_then(|s| s.add_with_key(&js::value(value), &JsValue::from_str(key)));
        // Refused (the record exists): the transaction aborts, and the stored value wins.
        let _ = (added, events.done().await);
        self.get_meta(key).await?.ok_or_else(|| {
            ClientError::new(
                ErrorCode::Unavailable,
                format!("{WHAT}: `{key}` is missing after it was set"),
            )
        })
    }

    /// Every row of `store` in key order, keys as bytes (numeric keys as 8 big-endian bytes,
    /// text keys as UTF-8), and of `documents` the encoded documents. Meant for the small
    /// stores read at start (mutations, targets) and for rewriting every document.
    pub async fn all(&self, store: Store) -> Result<Vec<(Vec<u8>, Vec<u8>)>, ClientError> {
        let what = format!("reading `{}`", store.name());
        let err = |e: JsValue| self.error(&what, &e);
        let os = self
            .check_open()
            .and_then(|()| {
                self.inner
                    .db
                    .transaction_with_str(store.name())
                    .and_then(|tx| tx.object_store(store.name()))
            })
            .map_err(err)?;
        // Both requests in one transaction see the same rows, in the same order.
        let keys = RequestEvents::new(os.get_all_keys().map_err(err)?);
        let values = RequestEvents::new(os.get_all().map_err(err)?);
        let keys: Array = keys.next().await.map_err(err)?.unchecked_into();
        let values: Array = values.next().await.map_err(err)?.unchecked_into();
        let mut rows = Vec::with_capacity(keys.length() as usize);
        for i in 0..keys.length() {
            let key = js::key_bytes(&keys.get(i))
                .map_err(|m| ClientError::new(ErrorCode::DataLoss, format!("{what}: {m}")))?;
            let value = values.get(i);
            rows.push((
                key,
                if store == Store::Documents {
                    js::record_document(&value)
                } else {
                    js::to_bytes(&value)
                },
            ));
        }
        Ok(rows)
    }

    /// The bytes the cache takes: every `documents` record's key, document and index keys.
    pub async fn estimate_bytes(&self) -> Result<u64, ClientError> {
        Ok(self.usage().await?.iter().map(|u| u.1).sum())
    }

    /// Every `documents` record as (key, bytes it takes, last write in ms), for eviction.
    /// Reads the store in pages of [`ESTIMATE_PAGE`] records.
    pub async fn usage(&self) -> Result<Vec<(Vec<u8>, u64, f64)>, ClientError> {
        let read = self.read().await?;
        let mut out = Vec::new();
        let mut range = KeyRange::default();
        loop {
            let records = read
                .records(&range, ESTIMATE_PAGE)
                .await
                .map_err(|e| self.error("measuring `documents`", &e))?;
            let full = records.len() == ESTIMATE_PAGE;
            let last = records.last().map(|(k, _)| k.clone());
            for (k, r) in records {
                let size = k.len() as u64 + js::record_size(&r);
                out.push((k, size, js::record_used(&r)));
            }
            match last {
                Some(last) if full => {
                    range.start = last;
                    range.start.push(0);
                }
                _ => break,
            }
        }
        Ok(out)
    }

    /// Sets how [`IdbRead`] scans; for benchmarks.
    #[doc(hidden)]
    pub fn set_scan_method(&self, method: ScanMethod) {
        self.inner.scan_method.set(method);
    }

    /// Whether this browser has `IDBObjectStore.getAllRecords`.
    #[doc(hidden)]
    pub fn has_get_all_records(&self) -> bool {
        self.inner.has_get_all_records
    }

    /// A readwrite transaction over `scope` (sorted, without repeats) with `durability`;
    /// a failure to make it is told as one of `what`. Reads begun from now on do not
    /// share the read transaction made before it (see `shared_read`).
    fn write_tx(
        &self,
        scope: &[Store],
        durability: Durability,
        what: &str,
    ) -> Result<IdbTransaction, ClientError> {
        self.inner.shared_read.borrow_mut().take();
        self.make_promised_reads();
        let names: Array = scope.iter().map(|s| JsValue::from_str(s.name())).collect();
        // "strict": `complete` means flushed to disk (Chromium's default is "relaxed").
        let durability = match durability {
            Durability::Strict => "strict",
            Durability::Relaxed => "relaxed",
        };
        let options = js::object(&[("durability", &JsValue::from_str(durability))]);
        self.check_open()
            .and_then(|()| {
                js::transaction_with_options(&self.inner.db, &names, "readwrite", &options)
            })
            .map_err(|e| self.error(what, &e))
    }

    /// Reads begun after the current task stop sharing `made`, a read transaction just made
    /// (it ends with the task that made it, when no request is pending). Until one is made,
    /// reads of later tasks share the same unmade one: nothing was written meanwhile (a
    /// write transaction forgets it), so the transaction its first request makes suits them
    /// all. No timer is set for reads the memo answers.
    pub(super) fn share_until_task_end(&self, made: &TxCell) {
        let inner = Rc::downgrade(&self.inner);
        let made = Rc::downgrade(made);
        wasm_bindgen_futures::spawn_local(async move {
            // A timer's callback runs in a later task.
            crate::client::js::sleep(0.0).await;
            let (Some(inner), Some(made)) = (inner.upgrade(), made.upgrade()) else {
                return;
            };
            let mut shared = inner.shared_read.borrow_mut();
            if shared
                .as_ref()
                .is_some_and(|(cell, _)| Rc::ptr_eq(cell, &made))
            {
                shared.take();
            }
        });
    }

    /// Makes the read transactions that reads begun before now still wait for (`unmade`):
    /// called just before a write transaction is made.
    fn make_promised_reads(&self) {
        let unmade = std::mem::take(&mut *self.inner.unmade.borrow_mut());
        for cell in unmade.iter().filter_map(Weak::upgrade) {
            if cell.borrow().is_none() {
                // A store that cannot make it is closed: the read's request says so.
                *cell.borrow_mut() = self.read_tx().ok();
            }
        }
    }

    /// A readonly transaction over the stores [`IdbRead`] reads.
    fn read_tx(&self) -> Result<IdbTransaction, JsValue> {
        self.check_open()?;
        let names: Array = [Store::Documents, Store::Remote, Store::Meta]
            .iter()
            .map(|s| JsValue::from_str(s.name()))
            .collect();
        self.inner.db.transaction_with_str_sequence(&names)
    }

    fn check_open(&self) -> Result<(), JsValue> {
        match self.inner.closed.get() {
            Closed::Open => Ok(()),
            _ => Err(JsValue::from_str(CLOSED)),
        }
    }

    /// The client error for a failure of `what`, explaining a closed connection.
    fn error(&self, what: &str, e: &JsValue) -> ClientError {
        match self.inner.closed.get() {
            Closed::Open => js::idb_error(what, e),
            Closed::ByCaller => ClientError::new(
                ErrorCode::FailedPrecondition,
                format!("{what}: the local database {:?} is closed", self.inner.name),
            ),
            Closed::ByVersionChange => ClientError::new(
                ErrorCode::FailedPrecondition,
                format!(
                    "{what}: the local database {:?} was closed so that it could be upgraded \
                     (by another tab running a newer version) or deleted; reload the page",
                    self.inner.name
                ),
            ),
        }
    }
}

/// How long an open or delete may stay blocked before it fails with `failed-precondition`.
/// IndexedDB fires `blocked` as soon as another connection is still open after
/// `versionchange`, including one that is closing but finishing a transaction; a tab that
/// ignores `versionchange` (an old version of the app) never closes.
pub const BLOCKED_GRACE_MS: i32 = 1000;

/// How a write transaction completes (IndexedDB's `durability` option).
#[derive(Clone, Copy)]
enum Durability {
    /// Once the data is flushed to disk.
    Strict,
    /// Once IndexedDB has it; the disk catches up.
    Relaxed,
}

/// A write batch whose requests are made; see [`IdbStore::begin_write`].
pub struct WriteInFlight {
    /// The store, for its error messages; it also keeps the connection open until the write
    /// is done.
    store: IdbStore,
    /// The transaction's `complete` or `abort` (taken by `done`).
    events: Option<TxEvents>,
    /// The memo's generation of the transaction.
    generation: u64,
    /// The documents it writes, back to the memo once it committed.
    touched: Touched,
}

impl WriteInFlight {
    /// Waits until the batch is on disk (all of it), or fails with nothing applied.
    pub async fn done(mut self) -> Result<(), ClientError> {
        let Some(events) = self.events.take() else {
            return Ok(());
        };
        let done = events.done().await;
        let touched = std::mem::take(&mut self.touched);
        self.store
            .inner
            .memo
            .borrow_mut()
            .finish_write(self.generation, touched, done.is_ok());
        done.map_err(|e| self.store.error(WRITING, &e))
    }
}

impl Drop for WriteInFlight {
    /// Not waited for: its documents are read from IndexedDB until written again.
    fn drop(&mut self) {
        let touched = std::mem::take(&mut self.touched);
        if let Ok(mut memo) = self.store.inner.memo.try_borrow_mut() {
            memo.finish_write(self.generation, touched, false);
        }
    }
}

/// What a failed write says it was doing.
const WRITING: &str = "writing to the local database";

/// Rows per request when [`IdbStore::estimate_bytes`] walks a store.
const ESTIMATE_PAGE: usize = 1000;

/// Marker error of a call on a closed connection (replaced by [`IdbStore::error`]).
const CLOSED: &str = "closed";
