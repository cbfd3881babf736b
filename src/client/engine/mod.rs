//! The client engine: the local view in IndexedDB (server state with pending writes applied,
//! indexed like the relay's), the persistent queue of pending write batches, local listeners
//! with latency compensation, and the bookkeeping the sync layer feeds.
//!
//! Data flow:
//! - a local write applies its mutations over the local view, stores the new documents, their
//!   index entries, the untouched server version of each document (`remote`), and the batch,
//!   in one IndexedDB transaction; then listeners fire (`hasPendingWrites: true`); then the
//!   batch goes to the relay;
//! - with a relay, a document absent from the local view is unknown (nothing records what
//!   was never read), not known to be absent: a write that needs it (`update`, a
//!   precondition) is queued without a local document, its base kept as unknown in `remote`,
//!   and the relay decides (Firestore's blind writes); its refusal is a rollback like any;
//! - a server document (listen delta or read) replaces the `remote` base of a document with
//!   pending writes and the pending batches are re-applied over it, or replaces the local
//!   document directly;
//! - an acknowledged batch leaves the queue; a refused one too, and its documents are rebuilt
//!   from the server base and the remaining batches (a rollback), and listeners fire again.
//!
//! The parts: this module holds the [`Engine`] (opening, reads of the local view, the
//! record of a document, the cache budget's trigger, closing); `queue` the write batches
//! (local writes, acknowledgements, refusals, other contexts' queue changes); `listeners`
//! the local listeners and their metadata; `pending` `waitForPendingWrites()` behind the
//! writes called before it; `server` the server's documents and index definitions entering
//! the local view. The eviction itself is the `cache` module's.
//!
//! Architecture invariant: JS callbacks are queued while the engine updates and run only
//! after, so a callback never re-enters the engine mid-update.

use hearth_core::error::ErrorCode;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::rc::Rc;

use super::cache::Cache;
use super::error::ClientError;
use super::idb_store::{IdbStore, Key, Store, WriteOp, META_INDEXED};
use super::lock::AsyncLock;
use hearth_core::document::Document;
use hearth_core::encoding::document::{decode_document, encode_document};
use hearth_core::index::config::IndexFile;
use hearth_core::index::def::IndexCatalog;
use hearth_core::index::keys::{document_entries, document_key};
use hearth_core::path::DocumentName;
use hearth_core::query::execute::{fetch, run_aggregation, run_query};
use hearth_core::query::model::{Aggregation, Query};
use hearth_core::value::Value;

mod batch;
mod keyed;
mod listeners;
mod pending;
mod queue;
mod server;
mod timestamps;

pub use self::batch::{batch_id_after, Batch};
pub use self::keyed::Keyed;
pub use self::listeners::{data_changes_between, ListenEvent, Pending};
use self::listeners::{Callback, Listener};
pub use self::timestamps::{show_timestamps, PendingTimestamp, ServerTimestamps};

/// A callback slot the sync layer fills.
pub type Hook<F> = RefCell<Option<Box<F>>>;

/// A promise's two ends, as Rust callbacks.
pub type Settle = Box<dyn FnOnce(Result<u64, ClientError>)>;

/// The engine of one open database.
pub struct Engine {
    /// The database's name: the IndexedDB database, the relay's database, the Web Lock.
    pub name: String,
    /// The local view, the write queue and the sync bookkeeping, in IndexedDB.
    pub store: IdbStore,
    /// The index definitions the local view is indexed by (replaced when the relay's differ).
    pub catalog: RefCell<IndexCatalog>,
    /// This browser profile's id towards the relay (stored, shared by its tabs and workers):
    /// the relay recognises retried batches by it.
    pub client_id: String,
    /// Whether writes resolve on the relay's acknowledgement (else on local durability).
    pub synced: bool,
    /// The last batch id handed out, so ids keep increasing (see `next_batch_id`).
    batch_seq: Cell<u64>,
    /// This context's tag in its batch ids (see `next_batch_id`): claimed with a Web Lock
    /// so that no other live context of the origin has it.
    batch_tag: u8,
    /// Releases the Web Lock on `batch_tag`.
    tag_lock: RefCell<Option<js_sys::Function>>,
    /// Pending batches, oldest first: this context's copy of the stored `mutations` store.
    queue: RefCell<Vec<Batch>>,
    /// Documents with pending writes whose server state arrived while they were pending:
    /// when their batch is acknowledged, the order of that state and the commit is unknown
    /// (see `acknowledge`).
    received_while_pending: RefCell<HashSet<DocumentName>>,
    /// Documents the server state holds as absent, with the version they are known absent
    /// at (a deletion's acknowledgement, a listen's `Delete`, a read): an older state of one
    /// arriving later (a snapshot the fan-out publishes after the acknowledgement, a read
    /// answered before the commit) is ignored, as it would bring a deleted document back.
    /// Kept in memory until a snapshot at or after that version is applied (`forget_absent`).
    absent_at: RefCell<HashMap<DocumentName, u64>>,
    /// Keyed writes being written, with the requests of the same write that came meanwhile
    /// (they take its outcome).
    writing_keys: RefCell<HashMap<String, Vec<Settle>>>,
    /// The answers of the last keyed batches that left the queue (see `queue`).
    answered_keys: RefCell<std::collections::VecDeque<(String, Result<u64, ClientError>)>>,
    /// Promises waiting on a batch's answer, by batch id.
    waiters: RefCell<HashMap<u64, Vec<Settle>>>,
    /// The last write ticket handed out (see `pending`).
    tickets_issued: Cell<u64>,
    /// Tickets of writes called but not yet queued (or failed), see `pending`.
    landing: RefCell<BTreeSet<u64>>,
    /// `waitForPendingWrites()` calls waiting for such writes to land.
    barriers: RefCell<Vec<pending::Barrier>>,
    /// Reads waiting for the writes called before them to land: (last such ticket, the
    /// resolve of the promise they await).
    read_barriers: RefCell<Vec<(u64, js_sys::Function)>>,
    /// Local listeners by id.
    listeners: RefCell<BTreeMap<u64, Listener>>,
    /// Counts the rounds of changes raised to listeners: a listener whose first read
    /// overlapped one reads again.
    changes_seen: Cell<u64>,
    /// The id of the next listener.
    next_listener: Cell<u64>,
    /// Relay targets that are current (a Snapshot arrived since they were listened).
    current_targets: RefCell<BTreeSet<u32>>,
    /// Whether the relay connection is up (`fromCache` is false only while it is).
    online: Cell<bool>,
    /// Whether the client is known to be offline: no relay, the network disabled, or a
    /// connection lost or failed (until one is welcomed). Not at start with a relay: the
    /// first connection's outcome is unknown then.
    offline: Cell<bool>,
    /// `globalThis.__HEARTH_DEBUG__` was set at open: local view changes are logged.
    pub(crate) debug: bool,
    /// The write lock: serializes read-modify-write sequences on the local view.
    lock: AsyncLock,
    /// Serializes the handling of other contexts' change notices.
    external: AsyncLock,
    /// Callbacks queued during an update, run by `flush` once no engine state is borrowed.
    outbox: RefCell<Vec<(Callback, ListenEvent)>>,
    /// What changed listeners' views since the sync layer last asked
    /// (`take_view_changes`): the names of every local change, and whether a view was
    /// replaced whole (a first result, a refill).
    view_changes: RefCell<(bool, HashSet<DocumentName>)>,
    /// The ids of queued batches that are stored (durable): only those go to the relay.
    durable: RefCell<HashSet<u64>>,
    /// Hooks the sync layer installs. Called when a batch became durable (the sync layer
    /// sends what `sendable_batches` gives).
    pub on_batch: Hook<dyn Fn()>,
    /// Called when a listener starts (the sync layer listens to the relay).
    pub on_listen: Hook<dyn Fn(u64, &Query)>,
    /// Called when a listener stops (the sync layer unlistens).
    pub on_unlisten: Hook<dyn Fn(u64)>,
    /// Called with the documents this context changed (tabs pass their names on).
    pub on_local_change: Hook<dyn Fn(&[DocumentName])>,
    /// Called when this context took the relay's answer to a batch (tabs pass it on).
    pub on_settled: Hook<dyn Fn(u64, &Result<u64, ClientError>)>,
    /// Called after an eviction deleted documents (the sync layer drops resume points).
    pub on_evicted: Hook<dyn Fn()>,
    /// The cache budget and its bookkeeping between collections.
    pub cache: Cache,
    /// Releases this context's shared "open" Web Lock (see `cache`).
    open_lock: RefCell<Option<js_sys::Function>>,
}

/// The `meta` key of the stored client id.
const META_CLIENT_ID: &str = "client-id";
/// The `meta` key of the last index definitions received, used when opening offline.
const META_INDEXES: &str = "indexes";

/// The local clock in microseconds: the commit time of a write until the relay's arrives.
fn now_micros() -> i64 {
    (js_sys::Date::now() * 1000.0) as i64
}

impl Engine {
    /// Opens the engine over `name`'s IndexedDB database. `indexes`: definitions given at
    /// open; else the ones last received from the relay; else automatic indexes only.
    pub async fn open(
        name: &str,
        indexes: Option<IndexFile>,
        synced: bool,
        cache_budget: Option<u64>,
    ) -> Result<Rc<Engine>, ClientError> {
        let store = IdbStore::open(name).await?;
        // What opening reads, asked at once (the reads overlap, and the batch tag's Web
        // Lock with them): the client id, the index definitions stored and those the
        // records follow, the write queue.
        let random_tag = (js_sys::Math::random() * 128.0) as u8 & 0x7f;
        use crate::client::js::join;
        let ((stored_id, stored_indexes), (indexed, (rows, tag))) = join(
            join(store.get_meta(META_CLIENT_ID), store.get_meta(META_INDEXES)),
            join(
                store.get_meta(META_INDEXED),
                join(
                    store.all(Store::Mutations),
                    crate::client::tabs::claim_tag(name, random_tag),
                ),
            ),
        )
        .await;
        // One id for every context of the origin, even two opening a fresh database at
        // once: the write queue they share is the relay's idempotency key with it.
        let client_id = match stored_id? {
            Some(b) => b,
            None => {
                let id = crate::auto_id();
                store.meta_or_put(META_CLIENT_ID, id.as_bytes()).await?
            }
        };
        let client_id = String::from_utf8_lossy(&client_id).into_owned();
        let file = match indexes {
            Some(f) => f,
            None => match stored_indexes? {
                Some(b) => {
                    hearth_core::index::config::parse_index_file(&String::from_utf8_lossy(&b))
                        .unwrap_or_default()
                }
                None => IndexFile::default(),
            },
        };
        let mut queue = Vec::new();
        for (k, v) in rows? {
            let id =
                u64::from_be_bytes(k.get(..8).and_then(|s| s.try_into().ok()).unwrap_or([0; 8]));
            queue.push(Batch::decode(id, &v)?);
        }
        queue.sort_by_key(|b| b.id);
        let seq = queue.last().map_or(0, |b| b.id);
        let catalog = IndexCatalog::from_file(&file);
        let (batch_tag, tag_lock) = match tag {
            Some((tag, release)) => (tag, Some(release)),
            None => (random_tag, None),
        };
        // Records whose index keys follow other definitions (or schema 1's, which kept none
        // in the record) are rewritten before anything reads them.
        let indexed = indexed?;
        if indexed.as_deref() != Some(file.to_json().as_bytes()) {
            reindex(&store, &catalog).await?;
        }
        let engine = Rc::new(Engine {
            name: name.to_owned(),
            store,
            catalog: RefCell::new(catalog),
            client_id,
            synced,
            batch_seq: Cell::new(seq),
            batch_tag,
            tag_lock: RefCell::new(tag_lock),
            durable: RefCell::new(queue.iter().map(|b: &Batch| b.id).collect()),
            queue: RefCell::new(queue),
            received_while_pending: RefCell::new(HashSet::new()),
            absent_at: RefCell::new(HashMap::new()),
            waiters: RefCell::new(HashMap::new()),
            tickets_issued: Cell::new(0),
            landing: RefCell::new(BTreeSet::new()),
            barriers: RefCell::new(Vec::new()),
            read_barriers: RefCell::new(Vec::new()),
            writing_keys: RefCell::new(HashMap::new()),
            answered_keys: RefCell::new(std::collections::VecDeque::new()),
            listeners: RefCell::new(BTreeMap::new()),
            changes_seen: Cell::new(0),
            next_listener: Cell::new(1),
            current_targets: RefCell::new(BTreeSet::new()),
            online: Cell::new(false),
            offline: Cell::new(!synced),
            debug: js_sys::Reflect::get(&js_sys::global(), &"__HEARTH_DEBUG__".into())
                .is_ok_and(|v| v.is_truthy()),
            lock: AsyncLock::default(),
            external: AsyncLock::default(),
            outbox: RefCell::new(Vec::new()),
            view_changes: RefCell::new((false, HashSet::new())),
            on_batch: RefCell::new(None),
            on_listen: RefCell::new(None),
            on_unlisten: RefCell::new(None),
            on_local_change: RefCell::new(None),
            on_evicted: RefCell::new(None),
            on_settled: RefCell::new(None),
            cache: Cache::new(cache_budget.filter(|_| synced)),
            open_lock: RefCell::new(crate::client::cache::hold_open_lock(name)),
        });
        let pruning = engine.clone();
        wasm_bindgen_futures::spawn_local(async move { pruning.prune_answers().await });
        Ok(engine)
    }

    /// The local view of one document, without counting it as a recent read.
    async fn local_doc(&self, name: &DocumentName) -> Result<Option<Document>, ClientError> {
        let read = self.store.read().await?;
        fetch(&read, name).await.map_err(ClientError::from)
    }

    /// The write op that makes `new` the local view of `name` (its record carries its index
    /// keys; IndexedDB replaces the old record's).
    fn doc_op(&self, name: &DocumentName, new: Option<&Document>) -> Result<WriteOp, ClientError> {
        let key = document_key(name);
        Ok(match new {
            Some(d) => WriteOp::PutDocument {
                key,
                value: encode_document(d).map_err(|e| ClientError::invalid(e.to_string()))?,
                index_keys: document_entries(&self.catalog.borrow(), d)
                    .into_iter()
                    .collect(),
                used: js_sys::Date::now(),
            },
            None => WriteOp::Delete {
                store: Store::Documents,
                key: Key::Bytes(key),
            },
        })
    }

    /// Runs a query over the local view.
    pub async fn query(&self, q: &Query) -> Result<Vec<Document>, ClientError> {
        let read = self.store.read().await?;
        let catalog = self.catalog.borrow().clone();
        let docs = run_query(&read, &catalog, q).await?;
        self.cache.read(docs.iter().map(|d| &d.name));
        Ok(docs)
    }

    /// Runs aggregations over a query's result in the local view.
    pub async fn aggregate(
        &self,
        q: &Query,
        aggs: &[Aggregation],
    ) -> Result<Vec<Value>, ClientError> {
        let read = self.store.read().await?;
        let catalog = self.catalog.borrow().clone();
        Ok(run_aggregation(&read, &catalog, q, aggs).await?)
    }

    /// The local view of one document.
    pub async fn get_document(&self, name: &DocumentName) -> Result<Option<Document>, ClientError> {
        let doc = self.local_doc(name).await?;
        self.cache.read([name]);
        Ok(doc)
    }

    /// Whether a pending batch writes `name` (`hasPendingWrites`).
    pub fn is_pending(&self, name: &DocumentName) -> bool {
        self.has_pending(name)
    }

    /// Counts bytes stored towards the cache budget, and starts a collection when due.
    fn wrote(self: &Rc<Self>, bytes: u64) {
        if self.cache.wrote(bytes) {
            let engine = self.clone();
            wasm_bindgen_futures::spawn_local(async move {
                let _ = engine.collect_garbage().await;
            });
        }
    }

    /// Enforces the cache budget (see `cache`): returns how many documents were evicted.
    pub async fn collect_garbage(self: &Rc<Self>) -> Result<usize, ClientError> {
        let evicted = self
            .cache
            .collect(&self.name, &self.store, &self.lock, self.held_keys())
            .await?;
        if evicted > 0 {
            if let Some(hook) = self.on_evicted.borrow().as_ref() {
                hook();
            }
        }
        Ok(evicted)
    }

    /// The document keys a collection may not evict (see `held_names`), with the pending
    /// writes of every tab (from the `mutations` store).
    async fn held_keys(&self) -> Result<HashSet<Vec<u8>>, ClientError> {
        let mut held: HashSet<Vec<u8>> = self.held_names().iter().map(document_key).collect();
        // What offset listeners skip.
        let skipping = self.skipping_queries();
        if !skipping.is_empty() {
            let read = self.store.read().await?;
            let catalog = self.catalog.borrow().clone();
            for q in &skipping {
                let docs = run_query(&read, &catalog, q).await?;
                held.extend(docs.iter().map(|d| document_key(&d.name)));
            }
        }
        // Pending writes of every tab.
        for (k, v) in self.store.all(Store::Mutations).await? {
            let id =
                u64::from_be_bytes(k.get(..8).and_then(|s| s.try_into().ok()).unwrap_or([0; 8]));
            if let Ok(b) = Batch::decode(id, &v) {
                held.extend(b.names().iter().map(document_key));
            }
        }
        Ok(held)
    }

    /// Rejects every waiting write promise (the database closed).
    pub fn close(&self) {
        let closed = || {
            ClientError::new(ErrorCode::Unavailable, "the database was closed before the write was acknowledged; it stays queued and is sent when the database is opened again")
        };
        let waiting: Vec<Settle> = self
            .waiters
            .borrow_mut()
            .drain()
            .flat_map(|(_, ws)| ws)
            .chain(self.barriers.borrow_mut().drain(..).map(|b| b.settle))
            .collect();
        for settle in waiting {
            settle(Err(closed()));
        }
        self.listeners.borrow_mut().clear();
        for lock in [&self.open_lock, &self.tag_lock] {
            if let Some(release) = lock.borrow_mut().take() {
                let _ = release.call0(&wasm_bindgen::JsValue::UNDEFINED);
            }
        }
        self.store.close();
    }
}

/// Rewrites every document record with its index keys under `catalog`, in one transaction,
/// and records the definitions they follow (`META_INDEXED`) and the catalog's definitions
/// (`META_INDEXES`, for offline use).
async fn reindex(store: &IdbStore, catalog: &IndexCatalog) -> Result<(), ClientError> {
    let now = js_sys::Date::now();
    let mut ops = Vec::new();
    for (key, v) in store.all(Store::Documents).await? {
        let doc = decode_document(&v)
            .map_err(|e| ClientError::new(ErrorCode::DataLoss, e.to_string()))?;
        ops.push(WriteOp::PutDocument {
            key,
            index_keys: document_entries(catalog, &doc).into_iter().collect(),
            value: v,
            used: now,
        });
    }
    let json = catalog.file().to_json().into_bytes();
    for meta in [META_INDEXES, META_INDEXED] {
        ops.push(WriteOp::Put {
            store: Store::Meta,
            key: Key::Text(meta.into()),
            value: json.clone(),
        });
    }
    store.write(ops).await
}
