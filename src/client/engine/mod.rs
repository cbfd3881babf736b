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
//! The parts, each owning its state: the store (`IdbStore`, IndexedDB) and the cache budget
//! (`Cache`); the write queue (`writes::WriteQueue`: batches, their waiters, write tickets);
//! the listener registry (`registry::Registry`: listeners, their metadata, the outbox of
//! snapshots); what is known of the server beyond the local view (`server::ServerNotes`).
//! The engine's methods combine them: this module (opening, reads of the local view, the
//! record of a document, the cache budget's trigger, closing); `queue` (local writes,
//! acknowledgements, refusals, other contexts' queue changes); `listeners` (starting
//! listeners, feeding them changes, refills, `fromCache`); `pending`
//! (`waitForPendingWrites()` behind the writes called before it); `server` (the server's
//! documents and index definitions entering the local view). The engine knows neither the
//! sync session nor the origin's other contexts: it tells them `EngineEvent`s (`events`),
//! and they call it. The eviction itself is the `cache` module's.
//!
//! Architecture invariants: JS callbacks (listeners' snapshots, write promises, events)
//! run only once no part is borrowed, so a callback may re-enter the engine; a part's
//! methods are synchronous and return what is to be settled instead of settling it.

use hearth_core::error::ErrorCode;
use std::cell::RefCell;
use std::collections::HashSet;
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

mod ack;
mod batch;
mod events;
mod keyed;
mod listeners;
mod pending;
mod queue;
mod registry;
mod server;
mod timestamps;
mod writes;

pub use self::batch::{batch_id_after, Batch};
pub use self::events::{EngineEvent, Events};
pub use self::keyed::Keyed;
use self::registry::Registry;
pub use self::registry::{data_changes_between, ListenEvent, Pending};
use self::server::ServerNotes;
pub use self::timestamps::{show_timestamps, PendingTimestamp, ServerTimestamps};
use self::writes::WriteQueue;

/// A promise's two ends, as Rust callbacks.
pub type Settle = Box<dyn FnOnce(Result<u64, ClientError>)>;

/// The engine of one open database.
pub struct Engine {
    /// The database's name: the IndexedDB database, the relay's database, the Web Lock.
    pub name: String,
    /// The local view, the write queue and the sync bookkeeping, in IndexedDB.
    pub store: IdbStore,
    /// The index definitions the local view is indexed by (replaced when the relay's differ;
    /// a read takes the current ones without copying them).
    pub catalog: RefCell<Rc<IndexCatalog>>,
    /// This browser profile's id towards the relay (stored, shared by its tabs and workers):
    /// the relay recognises retried batches by it.
    pub client_id: String,
    /// Whether writes resolve on the relay's acknowledgement (else on local durability).
    pub synced: bool,
    /// The write queue: pending batches, their waiters, write tickets.
    writes: RefCell<WriteQueue>,
    /// What the engine knows of the server's state beyond the local view (see
    /// `ServerNotes`).
    notes: RefCell<ServerNotes>,
    /// The local listeners, their metadata and their undelivered snapshots.
    listeners: RefCell<Registry>,
    /// `globalThis.__HEARTH_DEBUG__` was set at open: local view changes are logged.
    pub(crate) debug: bool,
    /// The write lock: serializes read-modify-write sequences on the local view.
    lock: AsyncLock,
    /// Serializes the handling of other contexts' change notices.
    external: AsyncLock,
    /// What the engine tells the sync session and the origin's other contexts.
    pub events: Events,
    /// The cache budget and its bookkeeping between collections.
    pub cache: Cache,
    /// Release the Web Locks this engine holds: its batch id tag's (see `next_batch_id`)
    /// and its shared "open" lock (see `cache`); and the promise that resolves once the
    /// latter is let go.
    locks: RefCell<(Vec<js_sys::Function>, Option<js_sys::Promise>)>,
}

/// The `meta` key of the stored client id.
const META_CLIENT_ID: &str = "client-id";
/// The `meta` key of the last index definitions received, used when opening offline.
const META_INDEXES: &str = "indexes";

/// How long after opening the stored answers of old keyed writes are pruned.
const PRUNE_AFTER_MS: f64 = 5_000.0;

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
        let (open_release, open_ended) = crate::client::cache::hold_open_lock(name).unzip();
        let engine = Rc::new(Engine {
            name: name.to_owned(),
            store,
            catalog: RefCell::new(Rc::new(catalog)),
            client_id,
            synced,
            writes: RefCell::new(WriteQueue::new(queue, batch_tag)),
            notes: RefCell::new(ServerNotes::default()),
            listeners: RefCell::new(Registry::new(!synced)),
            debug: js_sys::Reflect::get(&js_sys::global(), &"__HEARTH_DEBUG__".into())
                .is_ok_and(|v| v.is_truthy()),
            lock: AsyncLock::default(),
            external: AsyncLock::default(),
            events: Events::default(),
            cache: Cache::new(cache_budget.filter(|_| synced)),
            locks: RefCell::new((
                tag_lock.into_iter().chain(open_release).collect(),
                open_ended,
            )),
        });
        // Old answers go later, not while the app's first reads want the database.
        let pruning = Rc::downgrade(&engine);
        wasm_bindgen_futures::spawn_local(async move {
            let _ = wasm_bindgen_futures::JsFuture::from(crate::client::js::timer(PRUNE_AFTER_MS))
                .await;
            if let Some(engine) = pruning.upgrade() {
                engine.prune_answers().await;
            }
        });
        Ok(engine)
    }

    /// The local view of one document, without counting it as a recent read.
    async fn local_doc(&self, name: &DocumentName) -> Result<Option<Document>, ClientError> {
        let read = self.store.read().await?;
        fetch(&read, name).await.map_err(ClientError::from)
    }

    /// For each of `names`, its stored server base (`remote`, as stored) and its local view,
    /// all read in one transaction with the requests overlapped (one round trip, not two per
    /// document). The caller holds the engine's lock, so no write of this engine comes
    /// between.
    async fn stored_states(
        &self,
        names: &[DocumentName],
    ) -> Result<Vec<(Option<Vec<u8>>, Option<Document>)>, ClientError> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<Vec<u8>> = names.iter().map(document_key).collect();
        let read = self.store.read().await?;
        let remotes = read.get_many_remote(&keys).await?;
        let locals =
            hearth_core::kv::KvRead::get_many(&read, hearth_core::kv::Table::Documents, &keys)
                .await
                .map_err(|e| ClientError::new(ErrorCode::Unavailable, e.to_string()))?;
        remotes
            .into_iter()
            .zip(locals)
            .map(|(remote, local)| {
                let local = local
                    .map(|b| decode_document(&b))
                    .transpose()
                    .map_err(|e| ClientError::new(ErrorCode::DataLoss, e.to_string()))?;
                Ok((remote, local))
            })
            .collect()
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
            self.events.emit(&EngineEvent::Evicted);
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

    /// Rejects every waiting write promise and lets the Web Locks go (the database closed).
    /// Returns a promise that resolves once the "open" lock is let go.
    pub fn close(&self) -> Option<js_sys::Promise> {
        let closed = || {
            ClientError::new(ErrorCode::Unavailable, "the database was closed before the write was acknowledged; it stays queued and is sent when the database is opened again")
        };
        let waiting = self.writes.borrow_mut().take_all_waiting();
        for settle in waiting {
            settle(Err(closed()));
        }
        self.listeners.borrow_mut().clear();
        self.events.clear();
        let (releases, ended) = std::mem::take(&mut *self.locks.borrow_mut());
        for release in releases {
            let _ = release.call0(&wasm_bindgen::JsValue::UNDEFINED);
        }
        self.store.close();
        ended
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
