//! The client engine: the local view in IndexedDB (server state with pending writes applied,
//! indexed like the relay's), the persistent queue of pending write batches, local listeners
//! with latency compensation, and the bookkeeping the sync layer feeds.
//!
//! Data flow:
//! - a local write applies its mutations over the local view, stores the new documents, their
//!   index entries, the untouched server version of each document (`remote`), and the batch,
//!   in one IndexedDB transaction; then listeners fire (`hasPendingWrites: true`); then the
//!   batch goes to the relay;
//! - a server document (listen delta or read) replaces the `remote` base of a document with
//!   pending writes and the pending batches are re-applied over it, or replaces the local
//!   document directly;
//! - an acknowledged batch leaves the queue; a refused one too, and its documents are rebuilt
//!   from the server base and the remaining batches (a rollback), and listeners fire again.
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
use hearth_core::kv::Table;
use hearth_core::mutation::{ApplyContext, Mutation};
use hearth_core::path::DocumentName;
use hearth_core::protocol::codec::{decode_mutation, encode_mutation};
use hearth_core::query::execute::{fetch, run_aggregation, run_query};
use hearth_core::query::model::{Aggregation, Query};
use hearth_core::query::validate::validate;
use hearth_core::query::view::{diff, DocChange, View};
use hearth_core::value::{Timestamp, Value};

/// One pending write batch.
#[derive(Clone, Debug)]
pub struct Batch {
    pub id: u64,
    pub mutations: Vec<Mutation>,
}

impl Batch {
    fn names(&self) -> BTreeSet<DocumentName> {
        self.mutations.iter().map(|m| m.name.clone()).collect()
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = (self.mutations.len() as u32).to_be_bytes().to_vec();
        for m in &self.mutations {
            let mut b = Vec::new();
            encode_mutation(m, &mut b);
            out.extend_from_slice(&(b.len() as u32).to_be_bytes());
            out.extend_from_slice(&b);
        }
        out
    }

    fn decode(id: u64, bytes: &[u8]) -> Result<Batch, ClientError> {
        let corrupt = || {
            ClientError::new(
                ErrorCode::DataLoss,
                format!("stored write batch {id} is corrupt"),
            )
        };
        let take = |b: &[u8], at: usize| -> Option<u32> {
            Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
        };
        let n = take(bytes, 0).ok_or_else(corrupt)? as usize;
        let mut at = 4;
        let mut mutations = Vec::with_capacity(n.min(1024));
        for _ in 0..n {
            let len = take(bytes, at).ok_or_else(corrupt)? as usize;
            at += 4;
            let b = bytes.get(at..at + len).ok_or_else(corrupt)?;
            mutations.push(decode_mutation(b).map_err(|_| corrupt())?);
            at += len;
        }
        Ok(Batch { id, mutations })
    }
}

/// What a listener receives.
#[derive(Clone, Debug)]
pub enum ListenEvent {
    Query {
        docs: Vec<Document>,
        pending: Vec<bool>,
        changes: Vec<DocChange>,
        from_cache: bool,
        has_pending_writes: bool,
    },
    Document {
        name: DocumentName,
        doc: Option<Document>,
        from_cache: bool,
        has_pending_writes: bool,
    },
    Error(ClientError),
}

type Callback = Rc<dyn Fn(ListenEvent)>;

enum Watched {
    Query(View),
    Document(DocumentName, Option<Document>),
}

struct Listener {
    watched: Watched,
    callback: Callback,
    include_metadata: bool,
    /// Relay target serving this listener, if any.
    target: Option<u32>,
    /// The last raised metadata, to raise metadata-only changes when asked.
    last_meta: Option<(bool, bool)>,
}

/// A callback slot the sync layer fills.
pub type Hook<F> = RefCell<Option<Box<F>>>;

/// A promise's two ends, as Rust callbacks.
pub type Settle = Box<dyn FnOnce(Result<u64, ClientError>)>;

/// The engine of one open database.
pub struct Engine {
    pub name: String,
    pub store: IdbStore,
    pub catalog: RefCell<IndexCatalog>,
    pub client_id: String,
    /// Whether writes resolve on the relay's acknowledgement (else on local durability).
    pub synced: bool,
    batch_seq: Cell<u64>,
    /// This context's tag in its batch ids (see `next_batch_id`).
    batch_tag: u8,
    queue: RefCell<Vec<Batch>>,
    waiters: RefCell<HashMap<u64, Vec<Settle>>>,
    listeners: RefCell<BTreeMap<u64, Listener>>,
    next_listener: Cell<u64>,
    /// Relay targets that are current (a Snapshot arrived since they were listened).
    current_targets: RefCell<BTreeSet<u32>>,
    online: Cell<bool>,
    lock: AsyncLock,
    /// Serializes the handling of other contexts' change notices.
    external: AsyncLock,
    outbox: RefCell<Vec<(Callback, ListenEvent)>>,
    /// Hooks the sync layer installs.
    pub on_batch: Hook<dyn Fn(&Batch)>,
    pub on_listen: Hook<dyn Fn(u64, &Query)>,
    pub on_unlisten: Hook<dyn Fn(u64)>,
    pub on_local_change: Hook<dyn Fn(&[DocumentName])>,
    /// Called when this context took the relay's answer to a batch (tabs pass it on).
    pub on_settled: Hook<dyn Fn(u64, &Result<u64, ClientError>)>,
    /// Called after an eviction deleted documents (the sync layer drops resume points).
    pub on_evicted: Hook<dyn Fn()>,
    pub cache: Cache,
    /// Releases this context's shared "open" Web Lock (see `cache`).
    open_lock: RefCell<Option<js_sys::Function>>,
}

const META_CLIENT_ID: &str = "client-id";
const META_INDEXES: &str = "indexes";

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
        let client_id = match store.get_meta(META_CLIENT_ID).await? {
            Some(b) => String::from_utf8_lossy(&b).into_owned(),
            None => {
                let id = crate::auto_id();
                store
                    .write(vec![WriteOp::Put {
                        store: Store::Meta,
                        key: Key::Text(META_CLIENT_ID.into()),
                        value: id.as_bytes().to_vec(),
                    }])
                    .await?;
                id
            }
        };
        let file = match indexes {
            Some(f) => f,
            None => match store.get_meta(META_INDEXES).await? {
                Some(b) => {
                    hearth_core::index::config::parse_index_file(&String::from_utf8_lossy(&b))
                        .unwrap_or_default()
                }
                None => IndexFile::default(),
            },
        };
        let mut queue = Vec::new();
        for (k, v) in store.all(Store::Mutations).await? {
            let id =
                u64::from_be_bytes(k.get(..8).and_then(|s| s.try_into().ok()).unwrap_or([0; 8]));
            queue.push(Batch::decode(id, &v)?);
        }
        queue.sort_by_key(|b| b.id);
        let seq = queue.last().map_or(0, |b| b.id);
        let catalog = IndexCatalog::from_file(&file);
        // Records whose index keys follow other definitions (or schema 1's, which kept none
        // in the record) are rewritten before anything reads them.
        let indexed = store.get_meta(META_INDEXED).await?;
        if indexed.as_deref() != Some(file.to_json().as_bytes()) {
            reindex(&store, &catalog).await?;
        }
        Ok(Rc::new(Engine {
            name: name.to_owned(),
            store,
            catalog: RefCell::new(catalog),
            client_id,
            synced,
            batch_seq: Cell::new(seq),
            batch_tag: (js_sys::Math::random() * 128.0) as u8 & 0x7f,
            queue: RefCell::new(queue),
            waiters: RefCell::new(HashMap::new()),
            listeners: RefCell::new(BTreeMap::new()),
            next_listener: Cell::new(1),
            current_targets: RefCell::new(BTreeSet::new()),
            online: Cell::new(false),
            lock: AsyncLock::default(),
            external: AsyncLock::default(),
            outbox: RefCell::new(Vec::new()),
            on_batch: RefCell::new(None),
            on_listen: RefCell::new(None),
            on_unlisten: RefCell::new(None),
            on_local_change: RefCell::new(None),
            on_evicted: RefCell::new(None),
            on_settled: RefCell::new(None),
            cache: Cache::new(cache_budget.filter(|_| synced)),
            open_lock: RefCell::new(crate::client::cache::hold_open_lock(name)),
        }))
    }

    /// Pending batches, oldest first.
    pub fn pending_batches(&self) -> Vec<Batch> {
        self.queue.borrow().clone()
    }

    fn has_pending(&self, name: &DocumentName) -> bool {
        self.queue
            .borrow()
            .iter()
            .any(|b| b.mutations.iter().any(|m| m.name == *name))
    }

    /// Names of every document with a pending write (one pass over the queue).
    fn pending_names(&self) -> HashSet<DocumentName> {
        self.queue
            .borrow()
            .iter()
            .flat_map(|b| b.mutations.iter().map(|m| m.name.clone()))
            .collect()
    }

    /// A new batch id, increasing. Tabs and workers of one origin share the client id, and the
    /// relay takes a batch id it has seen from that client as a retry: so ids are
    /// `ms << 11 | tag << 4 | n`, with this context's random 7-bit `tag`. Two contexts collide
    /// only when both write in the same millisecond with the same tag (1 in 128). Ids stay
    /// below 2^53 (exact as IndexedDB number keys) until 2109, and above schema-1 ids
    /// (`ms << 10`).
    fn next_batch_id(&self) -> u64 {
        let time_based = ((js_sys::Date::now() as u64) << 11) | (u64::from(self.batch_tag) << 4);
        let id = time_based.max(self.batch_seq.get() + 1);
        self.batch_seq.set(id);
        id
    }

    /// Replaces the index definitions (from the relay's Welcome), rebuilding local entries.
    pub async fn set_indexes(self: &Rc<Self>, file: IndexFile) -> Result<(), ClientError> {
        if *self.catalog.borrow().file() == file {
            return Ok(());
        }
        let _g = self.lock.lock().await;
        let catalog = IndexCatalog::from_file(&file);
        reindex(&self.store, &catalog).await?;
        *self.catalog.borrow_mut() = catalog;
        Ok(())
    }

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

    /// Applies a batch locally: durable in IndexedDB, listeners raised, then handed to the
    /// relay. `settle` runs with the commit version on acknowledgement (or local durability
    /// without a relay), or with the refusal.
    pub async fn write(self: &Rc<Self>, mutations: Vec<Mutation>, settle: Settle) {
        match self.write_local(mutations).await {
            Err(e) => settle(Err(e)),
            Ok(batch) => {
                if self.synced {
                    self.waiters
                        .borrow_mut()
                        .entry(batch.id)
                        .or_default()
                        .push(settle);
                    if let Some(send) = self.on_batch.borrow().as_ref() {
                        send(&batch);
                    }
                } else {
                    settle(Ok(0));
                }
            }
        }
    }

    async fn write_local(self: &Rc<Self>, mutations: Vec<Mutation>) -> Result<Batch, ClientError> {
        for m in &mutations {
            m.validate()?;
        }
        let guard = self.lock.lock().await;
        let batch = Batch {
            id: self.next_batch_id(),
            mutations,
        };
        let ctx = ApplyContext {
            commit_version: 0,
            commit_time: Timestamp::from_micros(now_micros())
                .unwrap_or_else(|_| Timestamp::new(0, 0).expect("epoch")),
        };
        // Every base document is requested at once (IndexedDB overlaps the reads), in one
        // read transaction. Without a relay, a plain overwrite or delete needs no base: the
        // local copy is the database and no server base is kept. With one, the base is the
        // rollback point.
        let mut distinct: Vec<DocumentName> = Vec::new();
        let mut seen: HashSet<&DocumentName> = HashSet::new();
        for m in &batch.mutations {
            if (self.synced || m.reads_base()) && seen.insert(&m.name) {
                distinct.push(m.name.clone());
            }
        }
        drop(seen);
        let read = if distinct.is_empty() {
            None
        } else {
            Some(self.store.read().await?)
        };
        let mut bases: HashMap<DocumentName, Option<Document>> = HashMap::new();
        if let Some(read) = &read {
            let keys: Vec<Vec<u8>> = distinct.iter().map(document_key).collect();
            let fetched = hearth_core::kv::KvRead::get_many(read, Table::Documents, &keys)
                .await
                .map_err(|e| ClientError::new(ErrorCode::Unavailable, e.to_string()))?;
            for (name, bytes) in distinct.into_iter().zip(fetched) {
                let doc = bytes
                    .map(|b| {
                        decode_document(&b)
                            .map_err(|e| ClientError::new(ErrorCode::DataLoss, e.to_string()))
                    })
                    .transpose()?;
                bases.insert(name, doc);
            }
        }
        let mut touched: Vec<(DocumentName, Option<Document>, Option<Document>)> = Vec::new();
        let mut position: HashMap<DocumentName, usize> = HashMap::new();
        for m in &batch.mutations {
            let pos = position.get(&m.name).copied();
            let base = match pos {
                Some(i) => touched[i].2.clone(),
                None => bases.remove(&m.name).flatten(),
            };
            let new = m.apply(base.as_ref(), &ctx)?;
            match pos {
                Some(i) => touched[i].2 = new,
                None => {
                    position.insert(m.name.clone(), touched.len());
                    touched.push((m.name.clone(), base, new));
                }
            }
        }
        let mut ops = Vec::with_capacity(touched.len() + 1);
        // The local document equals the server's when it has no pending write: it becomes the
        // base to rebuild from, unless one is already kept.
        let need_base: Vec<usize> = if self.synced {
            let pending = self.pending_names();
            (0..touched.len())
                .filter(|&i| !pending.contains(&touched[i].0))
                .collect()
        } else {
            Vec::new()
        };
        let base_keys: Vec<Vec<u8>> = need_base
            .iter()
            .map(|&i| document_key(&touched[i].0))
            .collect();
        let kept = match &read {
            Some(read) if !base_keys.is_empty() => read.get_many_remote(&base_keys).await?,
            _ => Vec::new(),
        };
        for ((&i, key), kept) in need_base.iter().zip(base_keys).zip(kept) {
            if kept.is_none() {
                ops.push(WriteOp::Put {
                    store: Store::Remote,
                    key: Key::Bytes(key),
                    value: encode_remote(touched[i].1.as_ref())?,
                });
            }
        }
        drop(read);
        // The document records are encoded as their requests are made (see `write_iter`).
        let written = Cell::new(0u64);
        let docs = touched.iter().map(|(name, _, new)| {
            let op = self.doc_op(name, new.as_ref());
            if let Ok(op) = &op {
                written.set(written.get() + stored_bytes(op));
            }
            op
        });
        let mut scope = vec![Store::Documents];
        let mut queued = None;
        if self.synced {
            // Queued until the relay acknowledges it. (Without a relay the local copy is the
            // database: nothing is queued.)
            scope.extend([Store::Remote, Store::Mutations]);
            queued = Some(WriteOp::Put {
                store: Store::Mutations,
                key: Key::Number(batch.id as f64),
                value: batch.encode(),
            });
        }
        let in_flight = self
            .store
            .begin_write(
                &scope,
                ops.into_iter()
                    .map(Ok)
                    .chain(docs)
                    .chain(queued.into_iter().map(Ok)),
            )
            .await?;
        if self.synced {
            self.queue.borrow_mut().push(batch.clone());
        }
        // The next writer may go on: IndexedDB orders its reads after this transaction.
        drop(guard);
        // Latency compensation: listeners see the write while IndexedDB commits it. Reads
        // they make now are ordered after the write's transaction, so they see it too.
        let changed: Vec<(DocumentName, Option<Document>)> =
            touched.into_iter().map(|(n, _, new)| (n, new)).collect();
        self.local_changed(&changed).await;
        if let Err(e) = in_flight.done().await {
            // Nothing was stored: listeners go back to what is (reads made now are ordered
            // after any later write's transaction too).
            self.queue.borrow_mut().retain(|b| b.id != batch.id);
            let mut restored = Vec::with_capacity(changed.len());
            for (name, _) in changed {
                if let Ok(doc) = self.local_doc(&name).await {
                    restored.push((name, doc));
                }
            }
            self.local_changed(&restored).await;
            return Err(e);
        }
        self.wrote(written.get());
        Ok(batch)
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

    /// Documents that may not be evicted now: in a listener's result or watched, with a
    /// pending write in this tab's queue, or recently read.
    fn held_names(&self) -> HashSet<DocumentName> {
        let mut held = self.pending_names();
        for l in self.listeners.borrow().values() {
            match &l.watched {
                Watched::Query(view) => {
                    held.extend(view.documents().iter().map(|d| d.name.clone()));
                }
                Watched::Document(name, _) => {
                    held.insert(name.clone());
                }
            }
        }
        held.extend(self.cache.recent());
        held
    }

    /// Enforces the cache budget (see `cache`): returns how many documents were evicted.
    pub async fn collect_garbage(self: &Rc<Self>) -> Result<usize, ClientError> {
        let Some(budget) = self.cache.budget() else {
            return Ok(0);
        };
        if !self.cache.begin() {
            return Ok(0);
        }
        if !crate::client::cache::alone(&self.name).await {
            self.cache.end(None);
            return Ok(0);
        }
        let result = self.collect_locked(budget).await;
        self.cache.end(result.as_ref().ok().map(|r| r.1));
        let evicted = result?.0;
        if evicted > 0 {
            if let Some(hook) = self.on_evicted.borrow().as_ref() {
                hook();
            }
        }
        Ok(evicted)
    }

    /// The walk and the deletions, under the write lock: (documents evicted, bytes after).
    async fn collect_locked(&self, budget: u64) -> Result<(usize, u64), ClientError> {
        let _guard = self.lock.lock().await;
        let usage = self.store.usage().await?;
        let total: u64 = usage.iter().map(|u| u.1).sum();
        if (total as f64) <= budget as f64 * crate::client::cache::START {
            return Ok((0, total));
        }
        let mut held: HashSet<Vec<u8>> = self.held_names().iter().map(document_key).collect();
        // Pending writes of every tab.
        for (k, v) in self.store.all(Store::Mutations).await? {
            let id =
                u64::from_be_bytes(k.get(..8).and_then(|s| s.try_into().ok()).unwrap_or([0; 8]));
            if let Ok(b) = Batch::decode(id, &v) {
                held.extend(b.names().iter().map(document_key));
            }
        }
        let target = (budget as f64 * crate::client::cache::TARGET) as u64;
        let (victims, after) = crate::client::cache::victims(usage, &held, target);
        let count = victims.len();
        self.store
            .write(
                victims
                    .into_iter()
                    .map(|key| WriteOp::Delete {
                        store: Store::Documents,
                        key: Key::Bytes(key),
                    })
                    .collect(),
            )
            .await?;
        Ok((count, after))
    }

    /// The relay acknowledged `batch_id` at `version`.
    pub async fn acknowledge(
        self: &Rc<Self>,
        batch_id: u64,
        version: u64,
    ) -> Result<(), ClientError> {
        let found = self.queued_names(batch_id);
        let Some(names) = found else {
            // Another context (sharing the queue) already took this acknowledgement; the
            // stored batch goes too, should this context's queue have missed it.
            self.store
                .write(vec![WriteOp::Delete {
                    store: Store::Mutations,
                    key: Key::Number(batch_id as f64),
                }])
                .await?;
            self.settle_waiters(batch_id, Ok(version));
            return Ok(());
        };
        let guard = self.lock.lock().await;
        self.queue.borrow_mut().retain(|b| b.id != batch_id);
        let mut ops = vec![WriteOp::Delete {
            store: Store::Mutations,
            key: Key::Number(batch_id as f64),
        }];
        for n in &names {
            if !self.has_pending(n) {
                // No batch is pending on it: the local view is now the server's (until the
                // relay sends the committed document, which replaces it).
                ops.push(WriteOp::Delete {
                    store: Store::Remote,
                    key: Key::Bytes(document_key(n)),
                });
            }
        }
        self.store.write(ops).await?;
        drop(guard);
        let mut changed = Vec::new();
        for n in names {
            changed.push((n.clone(), self.local_doc(&n).await?));
        }
        self.local_changed(&changed).await;
        self.settle_waiters(batch_id, Ok(version));
        if let Some(hook) = self.on_settled.borrow().as_ref() {
            hook(batch_id, &Ok(version));
        }
        Ok(())
    }

    /// The documents batch `batch_id` writes, if it is in this context's queue.
    fn queued_names(&self, batch_id: u64) -> Option<BTreeSet<DocumentName>> {
        self.queue
            .borrow()
            .iter()
            .find(|b| b.id == batch_id)
            .map(Batch::names)
    }

    /// Settles the promises waiting on `batch_id` (acknowledged with its commit version, or
    /// refused), whichever context took the relay's answer.
    pub fn settle_waiters(&self, batch_id: u64, result: Result<u64, ClientError>) {
        let waiting = self.waiters.borrow_mut().remove(&batch_id);
        for settle in waiting.into_iter().flatten() {
            settle(result.clone());
        }
    }

    /// The relay refused `batch_id`: roll it back and rebuild its documents.
    pub async fn reject(
        self: &Rc<Self>,
        batch_id: u64,
        error: ClientError,
    ) -> Result<(), ClientError> {
        let found = self.queued_names(batch_id);
        let Some(names) = found else {
            self.settle_waiters(batch_id, Err(error));
            return Ok(());
        };
        let guard = self.lock.lock().await;
        self.queue.borrow_mut().retain(|b| b.id != batch_id);
        let mut ops = vec![WriteOp::Delete {
            store: Store::Mutations,
            key: Key::Number(batch_id as f64),
        }];
        let mut changed = Vec::new();
        for n in names {
            let key = document_key(&n);
            let read = self.store.read().await?;
            let base = match read.get_remote(&key).await? {
                Some(b) => decode_remote(&b)?,
                None => fetch(&read, &n).await?,
            };
            drop(read);
            let rebuilt = self.rebuild(&n, base)?;
            ops.push(self.doc_op(&n, rebuilt.as_ref())?);
            if !self.has_pending(&n) {
                ops.push(WriteOp::Delete {
                    store: Store::Remote,
                    key: Key::Bytes(key),
                });
            }
            changed.push((n, rebuilt));
        }
        self.store.write(ops).await?;
        drop(guard);
        self.local_changed(&changed).await;
        if let Some(hook) = self.on_settled.borrow().as_ref() {
            hook(batch_id, &Err(error.clone()));
        }
        self.settle_waiters(batch_id, Err(error));
        Ok(())
    }

    /// Re-applies the pending batches touching `name` over the server `base`.
    fn rebuild(
        &self,
        name: &DocumentName,
        base: Option<Document>,
    ) -> Result<Option<Document>, ClientError> {
        let ctx = ApplyContext {
            commit_version: 0,
            commit_time: Timestamp::from_micros(now_micros())
                .unwrap_or_else(|_| Timestamp::new(0, 0).expect("epoch")),
        };
        let mut doc = base;
        for b in self.queue.borrow().iter() {
            for m in b.mutations.iter().filter(|m| m.name == *name) {
                // A pending mutation that no longer applies (e.g. its precondition) is left to
                // the relay to refuse; locally the document keeps its prior state.
                if let Ok(d) = m.apply(doc.as_ref(), &ctx) {
                    doc = d;
                }
            }
        }
        Ok(doc)
    }

    /// Server states of documents (from a listen or a read) enter the local view.
    pub async fn server_documents(
        self: &Rc<Self>,
        docs: Vec<(DocumentName, Option<Document>)>,
    ) -> Result<(), ClientError> {
        if docs.is_empty() {
            return Ok(());
        }
        let guard = self.lock.lock().await;
        let mut ops = Vec::new();
        let mut changed = Vec::new();
        {
            let read = self.store.read().await?;
            let keys: Vec<Vec<u8>> = docs.iter().map(|(n, _)| document_key(n)).collect();
            let olds = hearth_core::kv::KvRead::get_many(&read, Table::Documents, &keys)
                .await
                .map_err(|e| ClientError::new(ErrorCode::Unavailable, e.to_string()))?;
            let pending = self.pending_names();
            for ((name, server), old) in docs.into_iter().zip(olds) {
                let old = old
                    .map(|b| {
                        decode_document(&b)
                            .map_err(|e| ClientError::new(ErrorCode::DataLoss, e.to_string()))
                    })
                    .transpose()?;
                let local = if pending.contains(&name) {
                    ops.push(WriteOp::Put {
                        store: Store::Remote,
                        key: Key::Bytes(document_key(&name)),
                        value: encode_remote(server.as_ref())?,
                    });
                    self.rebuild(&name, server)?
                } else {
                    server
                };
                if old != local {
                    ops.push(self.doc_op(&name, local.as_ref())?);
                    changed.push((name, local));
                }
            }
        }
        let written = ops.iter().map(stored_bytes).sum();
        self.store.write(ops).await?;
        drop(guard);
        self.local_changed(&changed).await;
        self.wrote(written);
        Ok(())
    }

    /// Runs a query over the local view.
    pub async fn query(&self, q: &Query) -> Result<Vec<Document>, ClientError> {
        let read = self.store.read().await?;
        let catalog = self.catalog.borrow().clone();
        let docs = run_query(&read, &catalog, q).await?;
        self.cache.read(docs.iter().map(|d| &d.name));
        Ok(docs)
    }

    pub async fn aggregate(
        &self,
        q: &Query,
        aggs: &[Aggregation],
    ) -> Result<Vec<Value>, ClientError> {
        let read = self.store.read().await?;
        let catalog = self.catalog.borrow().clone();
        Ok(run_aggregation(&read, &catalog, q, aggs).await?)
    }

    pub async fn get_document(&self, name: &DocumentName) -> Result<Option<Document>, ClientError> {
        let doc = self.local_doc(name).await?;
        self.cache.read([name]);
        Ok(doc)
    }

    pub fn is_pending(&self, name: &DocumentName) -> bool {
        self.has_pending(name)
    }

    /// Starts a query listener; the first snapshot comes from the local view at once.
    pub async fn listen_query(
        self: &Rc<Self>,
        q: Query,
        include_metadata: bool,
        callback: Callback,
    ) -> Result<u64, ClientError> {
        let q = validate(&q)?;
        let docs = self.query(&q).await?;
        let id = self.next_listener.get();
        self.next_listener.set(id + 1);
        let view = View::new(q.clone(), Vec::new());
        self.listeners.borrow_mut().insert(
            id,
            Listener {
                watched: Watched::Query(view),
                callback,
                include_metadata,
                target: None,
                last_meta: None,
            },
        );
        self.reset_query_listener(id, docs);
        if let Some(l) = self.on_listen.borrow().as_ref() {
            l(id, &q);
        }
        self.flush();
        Ok(id)
    }

    /// Starts a document listener.
    pub async fn listen_document(
        self: &Rc<Self>,
        name: DocumentName,
        include_metadata: bool,
        callback: Callback,
    ) -> Result<u64, ClientError> {
        let doc = self.local_doc(&name).await?;
        let id = self.next_listener.get();
        self.next_listener.set(id + 1);
        self.listeners.borrow_mut().insert(
            id,
            Listener {
                watched: Watched::Document(name.clone(), doc.clone()),
                callback: callback.clone(),
                include_metadata,
                target: None,
                last_meta: None,
            },
        );
        let pending = self.has_pending(&name);
        let from_cache = true;
        self.listeners
            .borrow_mut()
            .get_mut(&id)
            .expect("inserted")
            .last_meta = Some((from_cache, pending));
        self.outbox.borrow_mut().push((
            callback,
            ListenEvent::Document {
                name: name.clone(),
                doc,
                from_cache,
                has_pending_writes: pending,
            },
        ));
        if let Some(l) = self.on_listen.borrow().as_ref() {
            let q = Query::collection(name.parent()).where_(
                "__name__",
                hearth_core::query::model::Operator::Equal,
                Value::Reference(name.clone()),
            );
            l(id, &q);
        }
        self.flush();
        Ok(id)
    }

    pub fn unlisten(&self, id: u64) {
        if self.listeners.borrow_mut().remove(&id).is_some() {
            if let Some(u) = self.on_unlisten.borrow().as_ref() {
                u(id);
            }
        }
    }

    /// The sync layer bound listener `id` to relay target `target` (or unbound it).
    pub fn bind_target(&self, id: u64, target: Option<u32>) {
        if let Some(l) = self.listeners.borrow_mut().get_mut(&id) {
            l.target = target;
        }
    }

    fn reset_query_listener(&self, id: u64, docs: Vec<Document>) {
        let mut ls = self.listeners.borrow_mut();
        let Some(l) = ls.get_mut(&id) else { return };
        let Watched::Query(view) = &mut l.watched else {
            return;
        };
        let changes = view.reset(docs);
        let snapshot_docs = view.documents().to_vec();
        let first = l.last_meta.is_none();
        let from_cache = !l
            .target
            .is_some_and(|t| self.current_targets.borrow().contains(&t) && self.online.get());
        let pending: Vec<bool> = snapshot_docs
            .iter()
            .map(|d| self.has_pending(&d.name))
            .collect();
        let has_pending_writes = pending.iter().any(|p| *p);
        let meta = (from_cache, has_pending_writes);
        if first || !changes.is_empty() || (l.include_metadata && l.last_meta != Some(meta)) {
            l.last_meta = Some(meta);
            self.outbox.borrow_mut().push((
                l.callback.clone(),
                ListenEvent::Query {
                    docs: snapshot_docs,
                    pending,
                    changes,
                    from_cache,
                    has_pending_writes,
                },
            ));
        }
    }

    /// Re-evaluates every listener after documents changed locally; queues callbacks.
    async fn local_changed(self: &Rc<Self>, changed: &[(DocumentName, Option<Document>)]) {
        if changed.is_empty() {
            return;
        }
        let mut refill = Vec::new();
        // Without listeners (a bulk load) there is no metadata to compute.
        if !self.listeners.borrow().is_empty() {
            let pending_names = self.pending_names();
            let mut ls = self.listeners.borrow_mut();
            for (id, l) in ls.iter_mut() {
                match &mut l.watched {
                    Watched::Query(view) => {
                        let relevant: Vec<&(DocumentName, Option<Document>)> = changed
                            .iter()
                            .filter(|(n, d)| view.affected_by(n, d.as_ref()))
                            .collect();
                        if relevant.is_empty() && !l.include_metadata {
                            continue;
                        }
                        // One change: its own delta. Several: the delta of the whole.
                        let before = (relevant.len() > 1).then(|| view.documents().to_vec());
                        let mut needs = false;
                        let mut changes = Vec::new();
                        for (name, doc) in relevant {
                            let update = view.apply(name, doc.as_ref());
                            needs |= update.needs_refill;
                            changes = update.changes;
                        }
                        if needs {
                            refill.push(*id);
                            continue;
                        }
                        if let Some(before) = before {
                            changes = diff(&before, view.documents());
                        }
                        let docs = view.documents().to_vec();
                        let pending: Vec<bool> = docs
                            .iter()
                            .map(|d| pending_names.contains(&d.name))
                            .collect();
                        let has_pending_writes = pending.iter().any(|p| *p);
                        let from_cache = !l.target.is_some_and(|t| {
                            self.current_targets.borrow().contains(&t) && self.online.get()
                        });
                        let meta = (from_cache, has_pending_writes);
                        let touched = changed
                            .iter()
                            .any(|(n, _)| docs.iter().any(|d| d.name == *n));
                        if !changes.is_empty()
                            || (touched && l.last_meta != Some(meta))
                            || (l.include_metadata && l.last_meta != Some(meta))
                        {
                            l.last_meta = Some(meta);
                            self.outbox.borrow_mut().push((
                                l.callback.clone(),
                                ListenEvent::Query {
                                    docs,
                                    pending,
                                    changes,
                                    from_cache,
                                    has_pending_writes,
                                },
                            ));
                        }
                    }
                    Watched::Document(name, current) => {
                        if let Some((_, doc)) = changed.iter().find(|(n, _)| n == name) {
                            let pending = pending_names.contains(name);
                            let from_cache = !l.target.is_some_and(|t| {
                                self.current_targets.borrow().contains(&t) && self.online.get()
                            });
                            let meta = (from_cache, pending);
                            if *current != *doc || l.last_meta != Some(meta) {
                                *current = doc.clone();
                                l.last_meta = Some(meta);
                                self.outbox.borrow_mut().push((
                                    l.callback.clone(),
                                    ListenEvent::Document {
                                        name: name.clone(),
                                        doc: doc.clone(),
                                        from_cache,
                                        has_pending_writes: pending,
                                    },
                                ));
                            }
                        }
                    }
                }
            }
        }
        for id in refill {
            let q = match self.listeners.borrow().get(&id) {
                Some(Listener {
                    watched: Watched::Query(v),
                    ..
                }) => v.query().clone(),
                _ => continue,
            };
            match self.query(&q).await {
                Ok(docs) => self.reset_query_listener(id, docs),
                Err(e) => self.fail_listener(id, e),
            }
        }
        if let Some(hook) = self.on_local_change.borrow().as_ref() {
            let names: Vec<DocumentName> = changed.iter().map(|(n, _)| n.clone()).collect();
            hook(&names);
        }
        self.flush();
    }

    fn fail_listener(&self, id: u64, e: ClientError) {
        if let Some(l) = self.listeners.borrow_mut().remove(&id) {
            self.outbox
                .borrow_mut()
                .push((l.callback, ListenEvent::Error(e)));
        }
    }

    /// A relay target failed (e.g. a missing index on the relay, or permission).
    pub fn target_failed(&self, target: u32, e: ClientError) {
        let ids: Vec<u64> = self
            .listeners
            .borrow()
            .iter()
            .filter(|(_, l)| l.target == Some(target))
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.fail_listener(id, e.clone());
        }
        self.flush();
    }

    /// Relay targets became consistent (a Snapshot): listeners raise `fromCache: false`.
    pub fn targets_current(&self, targets: &[u32]) {
        self.current_targets
            .borrow_mut()
            .extend(targets.iter().copied());
        self.refresh_metadata();
    }

    /// The connection went up or down: `fromCache` changes for every listener.
    pub fn set_online(&self, online: bool) {
        self.online.set(online);
        if !online {
            self.current_targets.borrow_mut().clear();
        }
        self.refresh_metadata();
    }

    fn refresh_metadata(&self) {
        {
            let pending_names = self.pending_names();
            let mut ls = self.listeners.borrow_mut();
            for l in ls.values_mut() {
                let from_cache = !l.target.is_some_and(|t| {
                    self.current_targets.borrow().contains(&t) && self.online.get()
                });
                match &l.watched {
                    Watched::Query(view) => {
                        let docs = view.documents().to_vec();
                        let pending: Vec<bool> = docs
                            .iter()
                            .map(|d| pending_names.contains(&d.name))
                            .collect();
                        let has_pending_writes = pending.iter().any(|p| *p);
                        let meta = (from_cache, has_pending_writes);
                        if l.last_meta != Some(meta) {
                            l.last_meta = Some(meta);
                            self.outbox.borrow_mut().push((
                                l.callback.clone(),
                                ListenEvent::Query {
                                    docs,
                                    pending,
                                    changes: Vec::new(),
                                    from_cache,
                                    has_pending_writes,
                                },
                            ));
                        }
                    }
                    Watched::Document(name, doc) => {
                        let pending = self.has_pending(name);
                        let meta = (from_cache, pending);
                        if l.last_meta != Some(meta) {
                            l.last_meta = Some(meta);
                            self.outbox.borrow_mut().push((
                                l.callback.clone(),
                                ListenEvent::Document {
                                    name: name.clone(),
                                    doc: doc.clone(),
                                    from_cache,
                                    has_pending_writes: pending,
                                },
                            ));
                        }
                    }
                }
            }
        }
        self.flush();
    }

    /// Another tab changed these documents: re-read them and raise listeners.
    pub async fn external_change(self: &Rc<Self>, names: Vec<DocumentName>) {
        // One at a time, in arrival order: a later notice's reads must not be overtaken by an
        // earlier one's (its queue would then be stale, e.g. still holding an acknowledged
        // batch).
        let _turn = self.external.lock().await;
        // And not while this context writes: a queue read begun before one of its own
        // batches reached IndexedDB would drop that batch from memory.
        let guard = self.lock.lock().await;
        let mut changed = Vec::new();
        for n in names {
            if let Ok(d) = self.local_doc(&n).await {
                changed.push((n, d));
            }
        }
        // The other tab's queue may have changed too.
        if let Ok(rows) = self.store.all(Store::Mutations).await {
            let mut queue = Vec::new();
            for (k, v) in rows {
                let id = u64::from_be_bytes(
                    k.get(..8).and_then(|s| s.try_into().ok()).unwrap_or([0; 8]),
                );
                if let Ok(b) = Batch::decode(id, &v) {
                    queue.push(b);
                }
            }
            queue.sort_by_key(|b| b.id);
            *self.queue.borrow_mut() = queue;
        }
        drop(guard);
        self.local_changed_without_broadcast(changed).await;
    }

    async fn local_changed_without_broadcast(
        self: &Rc<Self>,
        changed: Vec<(DocumentName, Option<Document>)>,
    ) {
        let hook = self.on_local_change.borrow_mut().take();
        self.local_changed(&changed).await;
        *self.on_local_change.borrow_mut() = hook;
    }

    /// Runs queued callbacks. Called only when no engine borrow is held.
    pub fn flush(&self) {
        loop {
            let batch: Vec<(Callback, ListenEvent)> =
                std::mem::take(&mut *self.outbox.borrow_mut());
            if batch.is_empty() {
                return;
            }
            for (cb, ev) in batch {
                cb(ev);
            }
        }
    }

    /// Resolves when every batch written before the call is acknowledged.
    pub fn wait_for_pending(&self, settle: Settle) {
        let last = self.queue.borrow().last().map(|b| b.id);
        match last {
            None => settle(Ok(0)),
            Some(id) => self
                .waiters
                .borrow_mut()
                .entry(id)
                .or_default()
                .push(settle),
        }
    }

    /// Rejects every waiting write promise (the database closed).
    pub fn close(&self) {
        for (_, ws) in self.waiters.borrow_mut().drain() {
            for settle in ws {
                settle(Err(ClientError::new(ErrorCode::Unavailable, "the database was closed before the write was acknowledged; it stays queued and is sent when the database is opened again")));
            }
        }
        self.listeners.borrow_mut().clear();
        if let Some(release) = self.open_lock.borrow_mut().take() {
            let _ = release.call0(&wasm_bindgen::JsValue::UNDEFINED);
        }
        self.store.close();
    }
}

/// The bytes a write op stores towards the cache budget (document records only).
fn stored_bytes(op: &WriteOp) -> u64 {
    match op {
        WriteOp::PutDocument {
            key,
            value,
            index_keys,
            ..
        } => (key.len() + value.len() + index_keys.iter().map(Vec::len).sum::<usize>()) as u64,
        _ => 0,
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

/// A server base document: present (encoded) or absent (one zero byte).
fn encode_remote(doc: Option<&Document>) -> Result<Vec<u8>, ClientError> {
    match doc {
        Some(d) => {
            let mut v = vec![1u8];
            v.extend(encode_document(d).map_err(|e| ClientError::invalid(e.to_string()))?);
            Ok(v)
        }
        None => Ok(vec![0u8]),
    }
}

fn decode_remote(b: &[u8]) -> Result<Option<Document>, ClientError> {
    match b.split_first() {
        Some((1, rest)) => decode_document(rest)
            .map(Some)
            .map_err(|e| ClientError::new(ErrorCode::DataLoss, e.to_string())),
        _ => Ok(None),
    }
}
