//! Local listeners: a query's `View` or a watched document, raised with latency
//! compensation after every local change, and the `fromCache` / `hasPendingWrites` metadata
//! the relay's targets and the write queue decide. Callbacks are queued in the outbox and run
//! by `flush` only once no engine state is borrowed.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::rc::Rc;
use std::sync::Arc;

use super::Engine;
use crate::client::error::ClientError;
use hearth_core::document::Document;
use hearth_core::path::DocumentName;
use hearth_core::query::model::Query;
use hearth_core::query::validate::validate;
use hearth_core::query::view::{ChangeType, DocChange, ResultSnapshot, View};
use hearth_core::value::Map;

/// What a listener receives.
#[derive(Clone, Debug)]
pub enum ListenEvent {
    /// A query listener's snapshot.
    Query {
        /// The result, in query order.
        docs: ResultSnapshot,
        /// The names with a pending write (a document of `docs` has `hasPendingWrites` if
        /// its name is here).
        pending: Pending,
        /// The changes since the previous snapshot (`docChanges()`).
        changes: Vec<DocChange>,
        /// Whether the relay has not yet confirmed the result (`fromCache`).
        from_cache: bool,
        /// Whether any of `docs` has a pending write.
        has_pending_writes: bool,
    },
    /// A document listener's snapshot.
    Document {
        /// The watched document.
        name: DocumentName,
        /// Its local view (`None`: it does not exist).
        doc: Option<Document>,
        /// Whether the relay has not yet confirmed it (`fromCache`).
        from_cache: bool,
        /// Whether a pending write touches it.
        has_pending_writes: bool,
    },
    /// The listener failed and was removed.
    Error(ClientError),
}

/// The names with a pending write in this context's queue, shared by every snapshot raised
/// in one round (a snapshot's documents look their `hasPendingWrites` up in it).
pub type Pending = Rc<HashSet<DocumentName>>;

/// What one batch did to a query listener's view whose result was, before the batch, what
/// the listener showed last (`Listener::synced`).
pub(super) struct Delta {
    /// The view's changes ([`View::apply_batch`]).
    changes: Vec<DocChange>,
    /// The fields each changed document of the view had before the batch.
    was: HashMap<DocumentName, Arc<Map>>,
}

impl Delta {
    /// The changes that are data changes: a modification that kept the fields (a pending
    /// write acknowledged, say) is metadata.
    fn data_changes(self) -> Vec<DocChange> {
        let was = self.was;
        self.changes
            .into_iter()
            .filter(|c| {
                c.kind != ChangeType::Modified
                    || was
                        .get(&c.doc.name)
                        .is_none_or(|f| !Arc::ptr_eq(f, &c.doc.fields) && **f != *c.doc.fields)
            })
            .collect()
    }
}

/// The data changes that turn result `shown` into `view`'s (O(n): after a refill or a reset).
fn diff_data_changes(view: &View, shown: &ResultSnapshot) -> Vec<DocChange> {
    data_changes_between(view, &shown.to_vec(), &view.to_vec())
}

/// The data changes from result `before` to `after` of `view`'s query: its diff, less the
/// modifications that kept the fields (metadata). O(n).
pub fn data_changes_between(
    view: &View,
    before: &[Document],
    after: &[Document],
) -> Vec<DocChange> {
    let changes = view.diff(before, after);
    // A modification is a data change only if the fields differ (a document cannot move
    // without a field changing, so dropping one leaves the others' indexes right).
    let was: HashMap<&DocumentName, &Document> =
        if changes.iter().any(|c| c.kind == ChangeType::Modified) {
            before.iter().map(|d| (&d.name, d)).collect()
        } else {
            HashMap::new()
        };
    changes
        .into_iter()
        .filter(|c| {
            c.kind != ChangeType::Modified
                || was
                    .get(&c.doc.name)
                    .is_none_or(|d| d.fields != c.doc.fields)
        })
        .collect()
}

/// The metadata-only changes of a snapshot: a `modified` change (old index = new index: it
/// comes after the data `changes`, when the list is already the new result) for each
/// document of the result, there before and not among `changes`, whose `hasPendingWrites`
/// changed, in result order. O(p log n) for p documents with pending writes, plus, without a
/// delta (`from_delta`), the O(n) look at the result shown before.
fn metadata_changes(
    view: &View,
    shown: &ResultSnapshot,
    from_delta: bool,
    changes: &[DocChange],
    (last_pending, now_pending): (&HashSet<DocumentName>, &HashSet<DocumentName>),
) -> Vec<DocChange> {
    let in_changes: HashSet<&DocumentName> = changes.iter().map(|c| &c.doc.name).collect();
    // After a delta, a document of the result that no change names was in it before.
    let before: Option<HashSet<&DocumentName>> =
        (!from_delta).then(|| shown.iter().map(|d| &d.name).collect());
    let mut found: Vec<(usize, DocChange)> = last_pending
        .symmetric_difference(now_pending)
        .filter(|n| !in_changes.contains(n) && before.as_ref().is_none_or(|b| b.contains(n)))
        .filter_map(|n| {
            let i = view.index_of(n)?;
            let doc = view.get(n)?.clone();
            let change = DocChange {
                kind: ChangeType::Modified,
                doc,
                old_index: Some(i),
                new_index: Some(i),
            };
            Some((i, change))
        })
        .collect();
    found.sort_by_key(|(i, _)| *i);
    found.into_iter().map(|(_, c)| c).collect()
}

/// Most reads a refill makes while changes keep reaching its view; the last one is taken.
const REFILL_ATTEMPTS: u32 = 8;

/// A listener's callback, as the API wrapped the JS one.
pub(super) type Callback = Rc<dyn Fn(ListenEvent)>;

/// What a listener watches.
enum Watched {
    /// A query's result, kept current one document change at a time.
    Query(View),
    /// One document and its last raised state.
    Document(DocumentName, Option<Document>),
}

/// One local listener.
pub(super) struct Listener {
    /// The query or document it watches.
    watched: Watched,
    /// The JS callback (wrapped), run from the outbox.
    callback: Callback,
    /// Whether metadata-only changes are raised (`includeMetadataChanges`).
    include_metadata: bool,
    /// Relay target serving this listener, if any.
    target: Option<u32>,
    /// Whether the target's query had a result stored from an earlier session (a resume
    /// version): an empty first snapshot from the cache is then worth raising.
    had_results: bool,
    /// The last computed metadata (`fromCache`, `hasPendingWrites`), to raise
    /// metadata-only changes when asked; `None` until the first snapshot.
    last_meta: Option<(bool, bool)>,
    /// The documents of a query's result that had a pending write at the last snapshot: a
    /// change of this set is a metadata-only `modified` change.
    last_pending: HashSet<DocumentName>,
    /// A query listener's result as of its last snapshot (what the app holds): each
    /// snapshot's changes turn it into the view's result, whatever updates of the view
    /// (batches, refills, interleaved by awaits) came in between.
    shown: ResultSnapshot,
    /// Whether the view's result is `shown`, so that the next batch's own changes are the
    /// snapshot's (no diff of whole results).
    synced: bool,
    /// Counts the changes the view took: a refill read made before one of them may miss it
    /// (its read began before that change's write), so it is read again.
    generation: u64,
}

impl Engine {
    /// Starts a query listener; the first snapshot comes from the local view at once.
    pub async fn listen_query(
        self: &Rc<Self>,
        q: Query,
        include_metadata: bool,
        callback: Callback,
    ) -> Result<u64, ClientError> {
        let q = validate(&q)?;
        // A change raised while the result is read (another context's write the origin's
        // engine serves, a snapshot) reaches only the listeners already there: the read is
        // made again until none came in between.
        let mut attempt = 0;
        let docs = loop {
            let seen = self.changes_seen.get();
            let docs = self.query(&q).await?;
            attempt += 1;
            if self.changes_seen.get() == seen || attempt >= REFILL_ATTEMPTS {
                break docs;
            }
        };
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
                had_results: false,
                last_meta: None,
                last_pending: HashSet::new(),
                shown: ResultSnapshot::empty(),
                synced: true,
                generation: 0,
            },
        );
        // The relay target first, so the first snapshot knows whether to wait for it.
        if let Some(l) = self.on_listen.borrow().as_ref() {
            l(id, &q);
        }
        self.reset_query_listener(id, docs);
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
        let mut attempt = 0;
        let doc = loop {
            let seen = self.changes_seen.get();
            let doc = self.local_doc(&name).await?;
            attempt += 1;
            if self.changes_seen.get() == seen || attempt >= REFILL_ATTEMPTS {
                break doc;
            }
        };
        let id = self.next_listener.get();
        self.next_listener.set(id + 1);
        self.listeners.borrow_mut().insert(
            id,
            Listener {
                watched: Watched::Document(name.clone(), doc.clone()),
                callback: callback.clone(),
                include_metadata,
                target: None,
                had_results: false,
                last_meta: None,
                last_pending: HashSet::new(),
                shown: ResultSnapshot::empty(),
                synced: true,
                generation: 0,
            },
        );
        if let Some(l) = self.on_listen.borrow().as_ref() {
            let q = Query::document(&name);
            l(id, &q);
        }
        let pending = self.has_pending(&name);
        let from_cache = true;
        let held = doc.is_none()
            && self
                .listeners
                .borrow()
                .get(&id)
                .is_some_and(|l| self.holds_first(l.target, l.had_results));
        if !held {
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
        }
        self.flush();
        Ok(id)
    }

    /// Stops listener `id` (and its relay target).
    pub fn unlisten(&self, id: u64) {
        if self.listeners.borrow_mut().remove(&id).is_some() {
            if let Some(u) = self.on_unlisten.borrow().as_ref() {
                u(id);
            }
        }
    }

    /// The sync layer bound listener `id` to relay target `target` (or unbound it).
    pub fn bind_target(&self, id: u64, target: Option<u32>, had_results: bool) {
        if let Some(l) = self.listeners.borrow_mut().get_mut(&id) {
            l.target = target;
            l.had_results = had_results;
        }
    }

    /// Whether listener `l`'s first snapshot, if empty and from the cache, is held back until
    /// the relay answers: as in Firestore (`shouldRaiseInitialEvent`), an empty first result
    /// is raised only when the query had results stored or the client is known offline, so
    /// that an app online does not flash an empty list before the real one.
    fn holds_first(&self, target: Option<u32>, had_results: bool) -> bool {
        target.is_some() && !had_results && !self.offline.get()
    }

    /// Whether a document listener's first snapshot, not raised yet, is held back
    /// ([`Engine::holds_first`]): its document does not `exist` in the cache, which is all
    /// it has.
    fn holds_first_document(
        &self,
        (last_meta, target, had_results): (Option<(bool, bool)>, Option<u32>, bool),
        exists: bool,
        from_cache: bool,
    ) -> bool {
        last_meta.is_none() && !exists && from_cache && self.holds_first(target, had_results)
    }

    /// Replaces a query listener's result with `docs` (its first result, or a refill) and
    /// queues the snapshot.
    fn reset_query_listener(&self, id: u64, docs: Vec<Document>) {
        let pending_names = Rc::new(self.pending_names());
        let mut ls = self.listeners.borrow_mut();
        let Some(l) = ls.get_mut(&id) else { return };
        let Watched::Query(view) = &mut l.watched else {
            return;
        };
        view.reset(docs);
        l.synced = false;
        self.view_changes.borrow_mut().0 = true;
        self.raise_query(l, &pending_names, None);
    }

    /// Queues a document listener's snapshot.
    fn raise_document(
        &self,
        callback: &Callback,
        name: &DocumentName,
        doc: &Option<Document>,
        from_cache: bool,
        has_pending_writes: bool,
    ) {
        self.outbox.borrow_mut().push((
            callback.clone(),
            ListenEvent::Document {
                name: name.clone(),
                doc: doc.clone(),
                from_cache,
                has_pending_writes,
            },
        ));
    }

    /// Queues a query listener's snapshot of its view, with the changes since its last
    /// snapshot (`shown`): `delta`'s when the view changed only by the batch that gave them
    /// since (O(k log n) for k changes, whatever the size of the result), else the diff of
    /// the two results (O(n), after a refill or a reset).
    ///
    /// As in Firestore, a change is a data change when a document entered, left, moved or
    /// changed its fields; anything else (a pending write acknowledged, `fromCache`) is
    /// metadata. Listeners raise a snapshot for data changes; only those that asked for
    /// `includeMetadataChanges` raise metadata-only snapshots, with a `modified` change for
    /// each document whose `hasPendingWrites` changed.
    fn raise_query(&self, l: &mut Listener, pending_names: &Pending, delta: Option<Delta>) {
        let Watched::Query(view) = &l.watched else {
            return;
        };
        let delta = delta.filter(|_| l.synced);
        let from_delta = delta.is_some();
        let mut changes = match delta {
            Some(d) => d.data_changes(),
            None => diff_data_changes(view, &l.shown),
        };
        let now_pending: HashSet<DocumentName> = pending_names
            .iter()
            .filter(|n| view.contains(n))
            .cloned()
            .collect();
        let has_pending_writes = !now_pending.is_empty();
        let from_cache = !l
            .target
            .is_some_and(|t| self.current_targets.borrow().contains(&t) && self.online.get());
        let meta = (from_cache, has_pending_writes);
        let first = l.last_meta.is_none();
        if first && from_cache && view.is_empty() && self.holds_first(l.target, l.had_results) {
            l.shown = view.snapshot();
            l.synced = true;
            return;
        }
        let mut metadata_changed = l.last_meta != Some(meta);
        if l.include_metadata && !first {
            let pending = (&l.last_pending, &now_pending);
            let found = metadata_changes(view, &l.shown, from_delta, &changes, pending);
            metadata_changed |= !found.is_empty();
            changes.extend(found);
        }
        l.last_meta = Some(meta);
        l.last_pending = now_pending;
        l.shown = view.snapshot();
        l.synced = true;
        if first || !changes.is_empty() || (l.include_metadata && metadata_changed) {
            self.outbox.borrow_mut().push((
                l.callback.clone(),
                ListenEvent::Query {
                    docs: l.shown.clone(),
                    pending: pending_names.clone(),
                    changes,
                    from_cache,
                    has_pending_writes,
                },
            ));
        }
    }

    /// Re-evaluates every listener after documents changed locally; queues callbacks.
    pub(super) async fn local_changed(
        self: &Rc<Self>,
        changed: &[(DocumentName, Option<Document>)],
    ) {
        let refill = self.apply_changed(changed);
        self.finish_changed(changed, refill).await;
    }

    /// The synchronous part of [`Engine::local_changed`]: every listener's view takes the
    /// changes and raises its snapshot (callbacks run), except limited views that lost a
    /// document and must read the local view again to refill: their ids are returned for
    /// [`Engine::finish_changed`].
    pub(super) fn apply_changed(&self, changed: &[(DocumentName, Option<Document>)]) -> Vec<u64> {
        if changed.is_empty() {
            return Vec::new();
        }
        (self.view_changes.borrow_mut().1).extend(changed.iter().map(|(n, _)| n.clone()));
        self.changes_seen.set(self.changes_seen.get() + 1);
        if self.debug {
            let list: Vec<String> = changed
                .iter()
                .map(|(n, d)| match d {
                    Some(d) => format!("{n}@{}", d.update_version),
                    None => format!("x{n}"),
                })
                .collect();
            web_sys::console::debug_1(
                &format!("hearth-engine local view: {}", list.join(" ")).into(),
            );
        }
        let mut refill = Vec::new();
        // Without listeners (a bulk load) there is no metadata to compute.
        if !self.listeners.borrow().is_empty() {
            let pending_names = Rc::new(self.pending_names());
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
                        l.generation += 1;
                        let was = relevant
                            .iter()
                            .filter_map(|(n, _)| Some((n.clone(), view.get(n)?.fields.clone())))
                            .collect();
                        let update =
                            view.apply_batch(relevant.iter().map(|(n, d)| (n, d.as_ref())));
                        if update.needs_refill {
                            l.synced = false;
                            refill.push(*id);
                            continue;
                        }
                        let delta = Delta {
                            changes: update.changes,
                            was,
                        };
                        self.raise_query(l, &pending_names, Some(delta));
                    }
                    Watched::Document(name, current) => {
                        if let Some((_, doc)) = changed.iter().find(|(n, _)| n == name) {
                            let pending = pending_names.contains(name);
                            let from_cache = !l.target.is_some_and(|t| {
                                self.current_targets.borrow().contains(&t) && self.online.get()
                            });
                            let meta = (from_cache, pending);
                            // Only a change of data (or existence) is raised to a plain
                            // listener; a new version of the same fields is metadata.
                            let data_changed = current.as_ref().map(|d| &d.fields)
                                != doc.as_ref().map(|d| &d.fields);
                            let meta_changed = l.last_meta != Some(meta);
                            let held = l.last_meta.is_none();
                            if self.holds_first_document(
                                (l.last_meta, l.target, l.had_results),
                                doc.is_some(),
                                from_cache,
                            ) {
                                continue;
                            }
                            *current = doc.clone();
                            l.last_meta = Some(meta);
                            if held || data_changed || (l.include_metadata && meta_changed) {
                                self.raise_document(&l.callback, name, doc, from_cache, pending);
                            }
                        }
                    }
                }
            }
        }
        self.flush();
        refill
    }

    /// The rest of [`Engine::local_changed`]: the views `refill` names read the local view
    /// again (call it once the changes are written, or their transaction is made: its reads
    /// are ordered after it), and other tabs hear of the changes.
    pub(super) async fn finish_changed(
        self: &Rc<Self>,
        changed: &[(DocumentName, Option<Document>)],
        refill: Vec<u64>,
    ) {
        if changed.is_empty() {
            return;
        }
        for id in refill {
            // A change that reaches the view while the refill reads was written after the
            // read began, so the read may lack it: read again until none came in between.
            for attempt in 1.. {
                let (q, generation) = match self.listeners.borrow().get(&id) {
                    Some(Listener {
                        watched: Watched::Query(v),
                        generation,
                        ..
                    }) => (v.query().clone(), *generation),
                    _ => break,
                };
                let read = self.query(&q).await;
                let now = self.listeners.borrow().get(&id).map(|l| l.generation);
                if now.is_some_and(|g| g != generation) && attempt < REFILL_ATTEMPTS {
                    continue;
                }
                match read {
                    Ok(docs) => self.reset_query_listener(id, docs),
                    Err(e) => self.fail_listener(id, e),
                }
                break;
            }
        }
        if let Some(hook) = self.on_local_change.borrow().as_ref() {
            let names: Vec<DocumentName> = changed.iter().map(|(n, _)| n.clone()).collect();
            hook(&names);
        }
        self.flush();
    }

    /// Removes listener `id` and queues its error.
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
        self.mark_current(targets);
        self.refresh_metadata();
    }

    /// Documents listener `id` shows that are not in `synced` (its target's result at the
    /// relay) and have no pending write (`pending`): stale copies in limbo.
    pub fn unsynced(
        &self,
        id: u64,
        synced: &BTreeSet<DocumentName>,
        pending: &HashSet<DocumentName>,
    ) -> Vec<DocumentName> {
        let listeners = self.listeners.borrow();
        let Some(l) = listeners.get(&id) else {
            return Vec::new();
        };
        let stale = |n: &DocumentName| !synced.contains(n) && !pending.contains(n);
        match &l.watched {
            Watched::Query(view) => view
                .documents()
                .filter(|d| stale(&d.name))
                .map(|d| d.name.clone())
                .collect(),
            Watched::Document(name, Some(_)) if stale(name) => vec![name.clone()],
            Watched::Document(..) => Vec::new(),
        }
    }

    /// The documents of listener `id`'s result among `candidates` that are `stale`
    /// ([`Engine::unsynced`]'s test), each once. O(c log n) for c candidates.
    pub fn unsynced_among<'a>(
        &self,
        id: u64,
        candidates: impl Iterator<Item = &'a DocumentName>,
        synced: &BTreeSet<DocumentName>,
        pending: &HashSet<DocumentName>,
    ) -> BTreeSet<DocumentName> {
        let listeners = self.listeners.borrow();
        let Some(l) = listeners.get(&id) else {
            return BTreeSet::new();
        };
        let shown = |n: &DocumentName| match &l.watched {
            Watched::Query(view) => view.contains(n),
            Watched::Document(name, doc) => name == n && doc.is_some(),
        };
        candidates
            .filter(|n| shown(n) && !synced.contains(*n) && !pending.contains(*n))
            .cloned()
            .collect()
    }

    /// What changed listeners' views since the last call: whether a view was replaced
    /// whole, and the names of the documents that changed locally (the local view, or the
    /// pending writes over it).
    pub fn take_view_changes(&self) -> (bool, HashSet<DocumentName>) {
        std::mem::take(&mut *self.view_changes.borrow_mut())
    }

    /// Marks relay targets consistent without raising anything yet: the snapshot that brings
    /// their documents then says `fromCache: false` itself, as Firestore's does (a change of
    /// `fromCache` alone is raised only with `includeMetadataChanges`).
    pub fn mark_current(&self, targets: &[u32]) {
        if self.online.get() {
            self.current_targets
                .borrow_mut()
                .extend(targets.iter().copied());
        }
    }

    /// The connection went up or down: `fromCache` changes for every listener.
    pub fn set_online(&self, online: bool) {
        self.online.set(online);
        self.offline.set(!online);
        if !online {
            self.current_targets.borrow_mut().clear();
        }
        self.refresh_metadata();
    }

    /// Metadata changed (`fromCache`): listeners that asked for metadata changes raise it.
    fn refresh_metadata(&self) {
        {
            let pending_names = Rc::new(self.pending_names());
            let mut ls = self.listeners.borrow_mut();
            for l in ls.values_mut() {
                let from_cache = !l.target.is_some_and(|t| {
                    self.current_targets.borrow().contains(&t) && self.online.get()
                });
                match &l.watched {
                    Watched::Query(_) => {
                        // Nothing changed the view: its delta is empty.
                        let delta = Delta {
                            changes: Vec::new(),
                            was: HashMap::new(),
                        };
                        self.raise_query(l, &pending_names, Some(delta));
                    }
                    Watched::Document(name, doc) => {
                        let pending = pending_names.contains(name);
                        let meta = (from_cache, pending);
                        let held = l.last_meta.is_none();
                        if self.holds_first_document(
                            (l.last_meta, l.target, l.had_results),
                            doc.is_some(),
                            from_cache,
                        ) {
                            continue;
                        }
                        if l.last_meta != Some(meta) {
                            l.last_meta = Some(meta);
                            if held || l.include_metadata {
                                self.raise_document(&l.callback, name, doc, from_cache, pending);
                            }
                        }
                    }
                }
            }
        }
        self.flush();
    }

    /// Whether some listener shows or watches document `name` now. O(listeners).
    pub fn shows(&self, name: &DocumentName) -> bool {
        self.listeners.borrow().values().any(|l| match &l.watched {
            Watched::Query(view) => view.contains(name),
            Watched::Document(watched, _) => watched == name,
        })
    }

    /// Documents that may not be evicted now: in a listener's result or watched, with a
    /// pending write in this tab's queue, or recently read.
    pub(super) fn held_names(&self) -> HashSet<DocumentName> {
        let mut held = self.pending_names();
        for l in self.listeners.borrow().values() {
            match &l.watched {
                Watched::Query(view) => {
                    held.extend(view.documents().map(|d| d.name.clone()));
                }
                Watched::Document(name, _) => {
                    held.insert(name.clone());
                }
            }
        }
        held.extend(self.cache.recent());
        held
    }

    /// The queries of listeners with an offset, without it and with the offset added to
    /// their limit: the documents they skip are held too (their window moves onto them, and
    /// their relay target, the same query, counts them in its result).
    pub(super) fn skipping_queries(&self) -> Vec<Query> {
        (self.listeners.borrow().values())
            .filter_map(|l| match &l.watched {
                Watched::Query(view) if view.query().offset > 0 => Some(view.query().clone()),
                _ => None,
            })
            .map(|mut q| {
                let offset = i64::try_from(q.offset).unwrap_or(i64::MAX);
                q.limit = q.limit.map(|n| n.saturating_add(offset));
                q.offset = 0;
                q
            })
            .collect()
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
}
