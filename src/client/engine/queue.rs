//! The queue of pending write batches: a local write (applied over the local view, stored
//! with its batch, listeners raised, then handed to the relay), the relay's acknowledgement
//! or refusal (a rollback), and the queue another context of the origin changed.

use hearth_core::error::ErrorCode;
use std::cell::Cell;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::rc::Rc;

use super::batch::Batch;
use super::keyed::{encode_answer, Keyed, ANSWERED_PREFIX};
use super::server::{decode_remote, encode_remote, remote_is_unknown, REMOTE_UNKNOWN};
use super::timestamps::previous_values;
use super::{now_micros, Engine, EngineEvent, Settle};
use crate::client::cache::stored_bytes;
use crate::client::error::ClientError;
use crate::client::idb_store::{Key, Store, WriteOp};
use hearth_core::document::Document;
use hearth_core::encoding::document::decode_document;
use hearth_core::index::keys::document_key;
use hearth_core::kv::Table;
use hearth_core::mutation::{ApplyContext, Mutation, MutationKind, UnknownBase};
use hearth_core::path::DocumentName;
use hearth_core::value::Timestamp;

/// Whether mutation `m`'s result is the same whatever the document was: a whole `set`
/// without transforms, or a delete (a precondition decides only whether it applies).
pub(super) fn writes_whole_document(m: &Mutation) -> bool {
    use hearth_core::mutation::SetMerge;
    m.transforms.is_empty()
        && matches!(
            m.kind,
            MutationKind::Set {
                merge: SetMerge::Overwrite,
                ..
            } | MutationKind::Delete
        )
}

/// One document a local write touches.
struct Touched {
    /// The document.
    name: DocumentName,
    /// Its local copy before the batch (the rollback point kept as `remote`).
    base: Option<Document>,
    /// Whether this client had never seen it before the batch (kept as `REMOTE_UNKNOWN`).
    base_unknown: bool,
    /// Its local copy after the batch's mutations so far.
    new: Option<Document>,
    /// Whether it is still unknown after them (only writes needing it so far).
    unknown: bool,
}

impl Engine {
    /// Pending batches, oldest first.
    pub fn pending_batches(&self) -> Vec<Batch> {
        self.writes.borrow().batches().to_vec()
    }

    /// The pending batches the relay may be sent, oldest first: those before the first one
    /// still being stored. A batch is sent only once it is durable here, and never before an
    /// older one (the relay commits them in the order it gets them, and the local view's
    /// rebuilds after acknowledgements rest on that order: a newer batch committed first
    /// made an older one's acknowledgement drop it from the local view).
    /// `skip` says which were sent already (they are not copied).
    pub fn sendable_batches(&self, skip: impl Fn(u64) -> bool) -> Vec<Batch> {
        self.writes.borrow().sendable(skip)
    }

    /// Whether a pending batch writes `name`.
    pub(super) fn has_pending(&self, name: &DocumentName) -> bool {
        self.writes.borrow().has_pending(name)
    }

    /// Names of every document with a pending write (made once per change of the queue).
    pub fn pending_names(&self) -> Rc<HashSet<DocumentName>> {
        self.writes.borrow().pending_names()
    }

    /// A new batch id, increasing. Tabs and workers of one origin share the client id, and the
    /// relay takes a batch id it has seen from that client as a retry: so ids are
    /// `ms << 11 | tag << 4 | n`, with this context's 7-bit `tag`, which no other live context
    /// of the origin holds (a Web Lock, see `tabs::claim_tag`; random where Web Locks are
    /// missing). More than 16 ids in one millisecond move on to the next millisecond rather
    /// than into another tag. Ids stay below 2^53 (exact as IndexedDB number keys) until
    /// 2109, and above schema-1 ids (`ms << 10`). Transactions' commits take their ids from
    /// this sequence too. The relay refuses an id reused for a different batch.
    pub fn next_batch_id(&self) -> u64 {
        self.writes.borrow_mut().next_batch_id()
    }

    /// Applies a batch locally: durable in IndexedDB, listeners raised, then handed to the
    /// relay. `settle` runs with the commit version on acknowledgement (or local durability
    /// without a relay), or with the refusal. The write counts as issued when this is
    /// called, before the future runs: a `waitForPendingWrites()` called after waits for it.
    pub fn write(
        self: &Rc<Self>,
        mutations: Vec<Mutation>,
        settle: Settle,
    ) -> impl std::future::Future<Output = ()> + 'static {
        self.write_keyed(mutations, None, settle)
    }

    /// [`Engine::write`] for another context of the origin: `key` names the write (a write
    /// asked again under a queued batch's key joins that batch), and `landed` runs with the
    /// batch id once it is queued, before the relay can answer it.
    pub fn write_keyed(
        self: &Rc<Self>,
        mutations: Vec<Mutation>,
        key: Option<Keyed>,
        settle: Settle,
    ) -> impl std::future::Future<Output = ()> + 'static {
        let ticket = self.issue_write();
        let engine = self.clone();
        async move { engine.write_issued(ticket, mutations, key, settle).await }
    }

    /// Takes answered batch `batch_id` out of the queue, keeping the answer of a keyed one
    /// (a write another context asked for: asked again, it gets that answer), in memory and
    /// in the returned op, which the caller stores with the batch's deletion: a leader that
    /// stored the deletion may go before its follower heard the answer (a closing page's
    /// messages are dropped while it still takes the relay's answers), and the next leader
    /// must answer the write asked again from that record, not queue it a second time.
    pub(super) fn dequeue(
        &self,
        batch_id: u64,
        answer: &Result<u64, ClientError>,
    ) -> Option<WriteOp> {
        let key = self.writes.borrow_mut().dequeue(batch_id, Some(answer))?;
        Some(WriteOp::Put {
            store: Store::Meta,
            key: Key::Text(format!("{ANSWERED_PREFIX}{key}")),
            value: encode_answer(answer),
        })
    }

    /// Settles `settle` with batch `id`'s answer: at once (`Ok(0)`) when it is no longer
    /// queued, which it leaves only answered (its refusal was told with the answer).
    pub fn await_batch(&self, id: u64, settle: Settle) {
        let not_queued = self.writes.borrow_mut().wait_on(id, settle);
        if let Some(settle) = not_queued {
            settle(Ok(0));
        }
    }

    async fn write_issued(
        self: &Rc<Self>,
        ticket: u64,
        mutations: Vec<Mutation>,
        key: Option<Keyed>,
        settle: Settle,
    ) {
        let (key, again, on_landed) = match key {
            Some(k) => (Some(k.key), k.again, Some(k.landed)),
            None => (None, false, None),
        };
        // The same write asked while it is being written: it waits for that one's outcome.
        let settle: Settle = match &key {
            Some(k) => {
                let started = self.writes.borrow_mut().start_keyed(k, settle);
                let Some(settle) = started else {
                    self.landed(ticket, None);
                    return;
                };
                let engine = self.clone();
                let k = k.clone();
                Box::new(move |r| {
                    let others = engine.writes.borrow_mut().finish_keyed(&k);
                    for other in others {
                        other(r.clone());
                    }
                    settle(r);
                })
            }
            None => settle,
        };
        let queued = key.as_ref().and_then(|k| self.writes.borrow().keyed(k));
        // A write asked again (after a leadership change) may have been answered: by this
        // engine, or by the one before, which stored the answer; or queued by the one before
        // after this engine read the queue (a closing page still runs a moment).
        let answered = match (&key, queued) {
            (Some(k), None) if again => self.stored_answer(k).await,
            _ => None,
        };
        let queued = match (&key, queued, &answered) {
            (Some(k), None, None) if again => self.adopt_stored(k).await,
            _ => queued,
        };
        if self.debug {
            if let Some(k) = &key {
                web_sys::console::debug_1(
                    &format!(
                        "hearth-engine keyed write {k} again {again}: queued {queued:?} answered {}",
                        answered.is_some()
                    )
                    .into(),
                );
            }
        }
        if let Some(answer) = answered {
            // Asked again after a leadership change, and answered since this engine opened
            // (it queued the batch then; the relay answered before the ask came again).
            self.landed(ticket, None);
            return settle(answer);
        }
        if let Some(id) = queued {
            // Asked again after a leadership change: the batch is queued already.
            self.landed(ticket, Some(id));
            if let Some(f) = on_landed {
                f(id);
            }
            self.await_batch(id, settle);
            return;
        }
        let written = self.write_local(mutations, key).await;
        self.landed(ticket, written.as_ref().ok().map(|b| b.id));
        if let (Ok(batch), Some(f)) = (&written, on_landed) {
            f(batch.id);
        }
        match written {
            Err(e) => settle(Err(e)),
            Ok(batch) => {
                if self.synced {
                    self.writes.borrow_mut().stored(batch.id, settle);
                    self.events.emit(&EngineEvent::BatchDurable);
                } else {
                    settle(Ok(0));
                }
            }
        }
    }

    async fn write_local(
        self: &Rc<Self>,
        mutations: Vec<Mutation>,
        key: Option<String>,
    ) -> Result<Batch, ClientError> {
        for m in &mutations {
            m.validate()?;
        }
        if self.synced {
            // A batch the relay cannot take in one frame would be sent, refused with the
            // connection, and sent again on every reconnection, forever, with every later
            // write queued behind it: it is refused here instead.
            let bytes = hearth_core::protocol::codec::encode_client(
                &hearth_core::protocol::ClientMessage::Write {
                    request_id: u64::MAX,
                    batch_id: u64::MAX,
                    mutations: mutations.clone(),
                    reads: Vec::new(),
                },
            )
            .len();
            if bytes > hearth_core::protocol::MAX_FRAME_BYTES {
                return Err(ClientError::new(
                    ErrorCode::InvalidArgument,
                    format!(
                        "the batch is {bytes} bytes encoded, over the relay's limit of {} bytes for one message: split it into smaller batches",
                        hearth_core::protocol::MAX_FRAME_BYTES
                    ),
                ));
            }
        }
        let guard = self.lock.lock().await;
        let mut batch = Batch {
            id: self.next_batch_id(),
            mutations,
            previous: Vec::new(),
            key,
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
        // Documents this client has never seen: not in the local view, and with no pending
        // write, or only blind ones (`REMOTE_UNKNOWN`). With a relay, an absent local copy
        // is not proof of absence (nothing records what was never read): a write that needs
        // the document is queued and left for the relay to decide, as Firestore does.
        let mut unknown: HashSet<DocumentName> = HashSet::new();
        if let Some(read) = &read {
            let keys: Vec<Vec<u8>> = distinct.iter().map(document_key).collect();
            let fetched = hearth_core::kv::KvRead::get_many(read, Table::Documents, &keys)
                .await
                .map_err(|e| ClientError::new(ErrorCode::Unavailable, e.to_string()))?;
            let pending = self.pending_names();
            let mut absent_pending: Vec<DocumentName> = Vec::new();
            for (name, bytes) in distinct.into_iter().zip(fetched) {
                let doc = bytes
                    .map(|b| {
                        decode_document(&b)
                            .map_err(|e| ClientError::new(ErrorCode::DataLoss, e.to_string()))
                    })
                    .transpose()?;
                if doc.is_none() && self.synced {
                    if pending.contains(&name) {
                        absent_pending.push(name.clone());
                    } else {
                        unknown.insert(name.clone());
                    }
                }
                bases.insert(name, doc);
            }
            if !absent_pending.is_empty() {
                let keys: Vec<Vec<u8>> = absent_pending.iter().map(document_key).collect();
                let kept = read.get_many_remote(&keys).await?;
                for (name, kept) in absent_pending.into_iter().zip(kept) {
                    if kept.as_deref().is_some_and(remote_is_unknown) {
                        unknown.insert(name);
                    }
                }
            }
        }
        let mut touched: Vec<Touched> = Vec::new();
        let mut position: HashMap<DocumentName, usize> = HashMap::new();
        let mut previous = Vec::new();
        for (at, m) in batch.mutations.iter().enumerate() {
            let pos = position.get(&m.name).copied();
            let (base, is_unknown) = match pos {
                Some(i) => (touched[i].new.clone(), touched[i].unknown),
                None => (bases.remove(&m.name).flatten(), unknown.contains(&m.name)),
            };
            previous.extend(
                previous_values(base.as_ref(), m)
                    .into_iter()
                    .map(|(path, value)| (at, path, value)),
            );
            let (new, still_unknown) = if is_unknown {
                match m.apply_to_unknown(&ctx)? {
                    UnknownBase::Stays => (None, true),
                    UnknownBase::Becomes(doc) => (doc, false),
                }
            } else {
                (m.apply(base.as_ref(), &ctx)?, false)
            };
            match pos {
                Some(i) => {
                    touched[i].new = new;
                    touched[i].unknown = still_unknown;
                }
                None => {
                    position.insert(m.name.clone(), touched.len());
                    touched.push(Touched {
                        name: m.name.clone(),
                        base_unknown: is_unknown,
                        base,
                        new,
                        unknown: still_unknown,
                    });
                }
            }
        }
        batch.previous = previous;
        let mut ops = Vec::with_capacity(touched.len() + 1);
        // The local document equals the server's when it has no pending write: it becomes the
        // base to rebuild from, unless one is already kept.
        let need_base: Vec<usize> = if self.synced {
            let pending = self.pending_names();
            (0..touched.len())
                .filter(|&i| !pending.contains(&touched[i].name))
                .collect()
        } else {
            Vec::new()
        };
        let base_keys: Vec<Vec<u8>> = need_base
            .iter()
            .map(|&i| document_key(&touched[i].name))
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
                    value: if touched[i].base_unknown {
                        REMOTE_UNKNOWN.to_vec()
                    } else {
                        encode_remote(touched[i].base.as_ref())?
                    },
                });
            }
        }
        drop(read);
        // The document records are encoded as their requests are made (see `write_iter`).
        let written = Cell::new(0u64);
        let docs = touched.iter().map(|t| {
            let op = self.doc_op(&t.name, t.new.as_ref());
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
            self.writes.borrow_mut().push(batch.clone());
        }
        // The next writer may go on: IndexedDB orders its reads after this transaction.
        drop(guard);
        // Latency compensation: listeners see the write while IndexedDB commits it. Reads
        // they make now are ordered after the write's transaction, so they see it too.
        let changed: Vec<(DocumentName, Option<Document>)> =
            touched.into_iter().map(|t| (t.name, t.new)).collect();
        self.local_changed(&changed).await;
        if let Err(e) = in_flight.done().await {
            // Nothing was stored: listeners go back to what is (reads made now are ordered
            // after any later write's transaction too).
            self.writes.borrow_mut().dequeue(batch.id, None);
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

    /// The documents batch `batch_id` writes, if it is in this context's queue.
    pub(super) fn queued_names(&self, batch_id: u64) -> Option<BTreeSet<DocumentName>> {
        self.writes.borrow().get(batch_id).map(Batch::names)
    }

    /// Settles the promises waiting on `batch_id` (acknowledged with its commit version, or
    /// refused), whichever context took the relay's answer.
    pub fn settle_waiters(&self, batch_id: u64, result: Result<u64, ClientError>) {
        let waiting = self.writes.borrow_mut().take_waiters(batch_id);
        for settle in waiting {
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
        let record = self.dequeue(batch_id, &Err(error.clone()));
        let mut ops = vec![WriteOp::Delete {
            store: Store::Mutations,
            key: Key::Number(batch_id as f64),
        }];
        ops.extend(record);
        let mut changed = Vec::new();
        let names: Vec<DocumentName> = names.into_iter().collect();
        let states = self.stored_states(&names).await?;
        for (n, (remote, local)) in names.into_iter().zip(states) {
            let key = document_key(&n);
            let base = match remote {
                Some(b) => decode_remote(&b)?,
                None => local,
            };
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
        self.events
            .emit(&EngineEvent::Settled(batch_id, &Err(error.clone())));
        self.settle_waiters(batch_id, Err(error));
        Ok(())
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
            // Another context's new batches go to the relay from here too, if this context
            // is online: that one may be offline, or closed right after writing (the relay
            // answers a batch it has already committed with that commit).
            let new = self.writes.borrow_mut().replace(queue);
            if new {
                self.events.emit(&EngineEvent::BatchDurable);
            }
        }
        drop(guard);
        self.other_context_changed(&changed).await;
    }
}
