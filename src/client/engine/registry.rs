//! The listener registry: every local listener (a query's `View` or a watched document)
//! with what decides its metadata (which relay targets are current, whether the client is
//! online), and the outbox of snapshots raised but not yet delivered. It owns that state and
//! raises snapshots into the outbox; the engine (`listeners`) feeds it changes and runs the
//! outbox (`Engine::flush`) once nothing is borrowed.
//!
//! As in Firestore, a change is a data change when a document entered, left, moved or
//! changed its fields; anything else (a pending write acknowledged, `fromCache`) is
//! metadata. Listeners raise a snapshot for data changes; only those that asked for
//! `includeMetadataChanges` raise metadata-only snapshots, with a `modified` change for each
//! document whose `hasPendingWrites` changed.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::rc::Rc;
use std::sync::Arc;

use crate::client::error::ClientError;
use hearth_core::document::Document;
use hearth_core::path::DocumentName;
use hearth_core::query::model::Query;
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
    hearth_core::sort::sort_by_key(&mut found, |(i, _)| *i);
    found.into_iter().map(|(_, c)| c).collect()
}

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

impl Listener {
    /// A new listener of `watched`, before its first snapshot.
    fn new(watched: Watched, callback: Callback, include_metadata: bool) -> Listener {
        Listener {
            watched,
            callback,
            include_metadata,
            target: None,
            had_results: false,
            last_meta: None,
            last_pending: HashSet::new(),
            shown: ResultSnapshot::empty(),
            synced: true,
            generation: 0,
        }
    }
}

/// What decides `fromCache`: the connection and the relay targets that are current.
#[derive(Default)]
struct Net {
    /// Relay targets that are current (a Snapshot arrived since they were listened).
    current_targets: BTreeSet<u32>,
    /// Whether the relay connection is up (`fromCache` is false only while it is).
    online: bool,
    /// Whether the client is known to be offline: no relay, the network disabled, or a
    /// connection lost or failed (until one is welcomed). Not at start with a relay: the
    /// first connection's outcome is unknown then.
    offline: bool,
}

impl Net {
    /// Whether a listener served by `target` shows `fromCache`.
    fn shows_from_cache(&self, target: Option<u32>) -> bool {
        !target.is_some_and(|t| self.online && self.current_targets.contains(&t))
    }

    /// Whether a listener's first snapshot, if empty and from the cache, is held back until
    /// the relay answers: as in Firestore (`shouldRaiseInitialEvent`), an empty first result
    /// is raised only when the query had results stored or the client is known offline, so
    /// that an app online does not flash an empty list before the real one.
    fn holds_first(&self, target: Option<u32>, had_results: bool) -> bool {
        target.is_some() && !had_results && !self.offline
    }

    /// Whether document listener `l`'s first snapshot, not raised yet, is held back
    /// ([`Net::holds_first`]): its document does not `exist` in the cache, which is all it
    /// has.
    fn holds_first_document(&self, l: &Listener, exists: bool, from_cache: bool) -> bool {
        l.last_meta.is_none() && !exists && from_cache && self.holds_first(l.target, l.had_results)
    }
}

/// Snapshots raised and not yet delivered.
type Outbox = Vec<(Callback, ListenEvent)>;

/// Every local listener of one engine (see the module's text).
pub(super) struct Registry {
    /// Listeners by id.
    by_id: BTreeMap<u64, Listener>,
    /// The id of the next listener.
    next_id: u64,
    /// Counts the rounds of changes raised: a listener whose first read overlapped one
    /// reads again.
    changes_seen: u64,
    /// What decides `fromCache`.
    net: Net,
    /// Snapshots raised and not yet delivered (`Engine::flush` runs them).
    outbox: Outbox,
    /// What changed views since the sync layer last asked (`take_view_changes`): whether
    /// a view was replaced whole (a first result, a refill), and the names of every local
    /// change.
    view_changes: (bool, HashSet<DocumentName>),
}

impl Registry {
    /// No listener; `offline`: whether the client is known offline from the start.
    pub(super) fn new(offline: bool) -> Registry {
        Registry {
            by_id: BTreeMap::new(),
            next_id: 1,
            changes_seen: 0,
            net: Net {
                offline,
                ..Net::default()
            },
            outbox: Vec::new(),
            view_changes: (false, HashSet::new()),
        }
    }

    /// How many rounds of changes were raised so far.
    pub(super) fn changes_seen(&self) -> u64 {
        self.changes_seen
    }

    /// Adds a query listener of `view` (its first result comes with `reset_query`).
    pub(super) fn add_query(&mut self, view: View, callback: Callback, include: bool) -> u64 {
        self.add(Listener::new(Watched::Query(view), callback, include))
    }

    /// Adds a document listener of `name`, whose cached state is `doc`.
    pub(super) fn add_document(
        &mut self,
        name: DocumentName,
        doc: Option<Document>,
        callback: Callback,
        include: bool,
    ) -> u64 {
        self.add(Listener::new(
            Watched::Document(name, doc),
            callback,
            include,
        ))
    }

    fn add(&mut self, l: Listener) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.by_id.insert(id, l);
        id
    }

    /// Removes listener `id`; whether it was there.
    pub(super) fn remove(&mut self, id: u64) -> bool {
        self.by_id.remove(&id).is_some()
    }

    /// Removes every listener (the database closed).
    pub(super) fn clear(&mut self) {
        self.by_id.clear();
    }

    /// Binds listener `id` to relay target `target` (or unbinds it).
    pub(super) fn bind_target(&mut self, id: u64, target: Option<u32>, had_results: bool) {
        if let Some(l) = self.by_id.get_mut(&id) {
            l.target = target;
            l.had_results = had_results;
        }
    }

    /// Raises document listener `id`'s first snapshot (`pending`: whether a pending write
    /// touches it), unless it is held back until the relay answers.
    pub(super) fn first_document(&mut self, id: u64, pending: bool) {
        let Some(l) = self.by_id.get_mut(&id) else {
            return;
        };
        let Watched::Document(name, doc) = &l.watched else {
            return;
        };
        let from_cache = true;
        if doc.is_none() && self.net.holds_first(l.target, l.had_results) {
            return;
        }
        l.last_meta = Some((from_cache, pending));
        let event = document_event(name, doc, from_cache, pending);
        self.outbox.push((l.callback.clone(), event));
    }

    /// Replaces query listener `id`'s result with `docs` (its first result, or a refill) and
    /// raises its snapshot.
    pub(super) fn reset_query(&mut self, id: u64, docs: Vec<Document>, pending: &Pending) {
        let Some(l) = self.by_id.get_mut(&id) else {
            return;
        };
        let Watched::Query(view) = &mut l.watched else {
            return;
        };
        view.reset(docs);
        l.synced = false;
        self.view_changes.0 = true;
        raise_query(&self.net, &mut self.outbox, l, pending, None);
    }

    /// Query listener `id`'s query and generation, to refill its view.
    pub(super) fn refill_of(&self, id: u64) -> Option<(Query, u64)> {
        match self.by_id.get(&id)? {
            Listener {
                watched: Watched::Query(v),
                generation,
                ..
            } => Some((v.query().clone(), *generation)),
            _ => None,
        }
    }

    /// Listener `id`'s generation (see `Listener::generation`).
    pub(super) fn generation(&self, id: u64) -> Option<u64> {
        self.by_id.get(&id).map(|l| l.generation)
    }

    /// Whether a round of `changed` documents may concern a listener: it has some.
    pub(super) fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// Notes a round of local changes (`view_changes`, `changes_seen`).
    pub(super) fn note_changes(&mut self, changed: &[(DocumentName, Option<Document>)]) {
        (self.view_changes.1).extend(changed.iter().map(|(n, _)| n.clone()));
        self.changes_seen += 1;
    }

    /// Every listener's view takes `changed` and raises its snapshot, except limited views
    /// that lost a document and must read the local view again to refill: their ids are
    /// returned. `pending`: the names with a pending write.
    pub(super) fn apply_changed(
        &mut self,
        changed: &[(DocumentName, Option<Document>)],
        pending: &Pending,
    ) -> Vec<u64> {
        let mut refill = Vec::new();
        let Registry {
            by_id, net, outbox, ..
        } = self;
        for (id, l) in by_id.iter_mut() {
            if let Watched::Query(view) = &mut l.watched {
                let relevant: Vec<&(DocumentName, Option<Document>)> = (changed.iter())
                    .filter(|(n, d)| view.affected_by(n, d.as_ref()))
                    .collect();
                if relevant.is_empty() && !l.include_metadata {
                    continue;
                }
                l.generation += 1;
                let was = (relevant.iter())
                    .filter_map(|(n, _)| Some((n.clone(), view.get(n)?.fields.clone())))
                    .collect();
                let update = view.apply_batch(relevant.iter().map(|(n, d)| (n, d.as_ref())));
                if update.needs_refill {
                    l.synced = false;
                    refill.push(*id);
                    continue;
                }
                let delta = Delta {
                    changes: update.changes,
                    was,
                };
                raise_query(net, outbox, l, pending, Some(delta));
            } else {
                document_changed(net, outbox, l, changed, pending);
            }
        }
        refill
    }

    /// Removes listener `id` and raises its error.
    pub(super) fn fail(&mut self, id: u64, e: ClientError) {
        if let Some(l) = self.by_id.remove(&id) {
            self.outbox.push((l.callback, ListenEvent::Error(e)));
        }
    }

    /// Relay target `target` failed: its listeners fail with `e`.
    pub(super) fn target_failed(&mut self, target: u32, e: &ClientError) {
        let ids: Vec<u64> = (self.by_id.iter())
            .filter(|(_, l)| l.target == Some(target))
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.fail(id, e.clone());
        }
    }

    /// Marks relay targets consistent (while online) without raising anything.
    pub(super) fn mark_current(&mut self, targets: &[u32]) {
        if self.net.online {
            self.net.current_targets.extend(targets.iter().copied());
        }
    }

    /// The connection went up or down.
    pub(super) fn set_online(&mut self, online: bool) {
        self.net.online = online;
        self.net.offline = !online;
        if !online {
            self.net.current_targets.clear();
        }
    }

    /// Metadata changed (`fromCache`): listeners raise what it changed for them.
    pub(super) fn refresh_metadata(&mut self, pending: &Pending) {
        let Registry {
            by_id, net, outbox, ..
        } = self;
        for l in by_id.values_mut() {
            if let Watched::Query(_) = &l.watched {
                // Nothing changed the view: its delta is empty.
                let delta = Delta {
                    changes: Vec::new(),
                    was: HashMap::new(),
                };
                raise_query(net, outbox, l, pending, Some(delta));
                continue;
            }
            let Watched::Document(name, doc) = &l.watched else {
                continue;
            };
            let from_cache = net.shows_from_cache(l.target);
            let has_pending = pending.contains(name);
            let meta = (from_cache, has_pending);
            let held = l.last_meta.is_none();
            if net.holds_first_document(l, doc.is_some(), from_cache) || l.last_meta == Some(meta) {
                continue;
            }
            l.last_meta = Some(meta);
            if held || l.include_metadata {
                let event = document_event(name, doc, from_cache, has_pending);
                outbox.push((l.callback.clone(), event));
            }
        }
    }

    /// Documents listener `id` shows that are not in `synced` (its target's result at the
    /// relay) and have no pending write (`pending`): stale copies in limbo.
    pub(super) fn unsynced(
        &self,
        id: u64,
        synced: &BTreeSet<DocumentName>,
        pending: &HashSet<DocumentName>,
    ) -> Vec<DocumentName> {
        let Some(l) = self.by_id.get(&id) else {
            return Vec::new();
        };
        let stale = |n: &DocumentName| !synced.contains(n) && !pending.contains(n);
        match &l.watched {
            Watched::Query(view) => (view.documents())
                .filter(|d| stale(&d.name))
                .map(|d| d.name.clone())
                .collect(),
            Watched::Document(name, Some(_)) if stale(name) => vec![name.clone()],
            Watched::Document(..) => Vec::new(),
        }
    }

    /// The documents of listener `id`'s result among `candidates` that are stale
    /// ([`Registry::unsynced`]'s test), each once. O(c log n) for c candidates.
    pub(super) fn unsynced_among<'a>(
        &self,
        id: u64,
        candidates: impl Iterator<Item = &'a DocumentName>,
        synced: &BTreeSet<DocumentName>,
        pending: &HashSet<DocumentName>,
    ) -> BTreeSet<DocumentName> {
        let Some(l) = self.by_id.get(&id) else {
            return BTreeSet::new();
        };
        let shown = |n: &DocumentName| match &l.watched {
            Watched::Query(view) => view.contains(n),
            Watched::Document(name, doc) => name == n && doc.is_some(),
        };
        hearth_core::sort::set_of(
            candidates
                .filter(|n| shown(n) && !synced.contains(*n) && !pending.contains(*n))
                .cloned(),
        )
    }

    /// What changed views since the last call (see `view_changes`).
    pub(super) fn take_view_changes(&mut self) -> (bool, HashSet<DocumentName>) {
        std::mem::take(&mut self.view_changes)
    }

    /// Whether some listener shows or watches document `name` now. O(listeners).
    pub(super) fn shows(&self, name: &DocumentName) -> bool {
        self.by_id.values().any(|l| match &l.watched {
            Watched::Query(view) => view.contains(name),
            Watched::Document(watched, _) => watched == name,
        })
    }

    /// Adds to `held` every document in a listener's result or watched.
    pub(super) fn hold_shown(&self, held: &mut HashSet<DocumentName>) {
        for l in self.by_id.values() {
            match &l.watched {
                Watched::Query(view) => held.extend(view.documents().map(|d| d.name.clone())),
                Watched::Document(name, _) => {
                    held.insert(name.clone());
                }
            }
        }
    }

    /// The queries of listeners with an offset, without it and with the offset added to
    /// their limit: the documents they skip are held too (their window moves onto them, and
    /// their relay target, the same query, counts them in its result).
    pub(super) fn skipping_queries(&self) -> Vec<Query> {
        (self.by_id.values())
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

    /// The snapshots raised since the last call, to deliver.
    pub(super) fn take_outbox(&mut self) -> Outbox {
        std::mem::take(&mut self.outbox)
    }
}

/// A document listener's snapshot.
fn document_event(
    name: &DocumentName,
    doc: &Option<Document>,
    from_cache: bool,
    has_pending_writes: bool,
) -> ListenEvent {
    ListenEvent::Document {
        name: name.clone(),
        doc: doc.clone(),
        from_cache,
        has_pending_writes,
    }
}

/// Document listener `l` after the local `changed` documents: raises its snapshot if its
/// document is among them and the change is one it is told (data, or metadata if asked).
fn document_changed(
    net: &Net,
    outbox: &mut Outbox,
    l: &mut Listener,
    changed: &[(DocumentName, Option<Document>)],
    pending: &Pending,
) {
    let Watched::Document(name, current) = &l.watched else {
        return;
    };
    let Some((_, doc)) = changed.iter().find(|(n, _)| n == name) else {
        return;
    };
    let has_pending = pending.contains(name);
    let from_cache = net.shows_from_cache(l.target);
    let meta = (from_cache, has_pending);
    // Only a change of data (or existence) is raised to a plain listener; a new version of
    // the same fields is metadata.
    let data_changed = current.as_ref().map(|d| &d.fields) != doc.as_ref().map(|d| &d.fields);
    let meta_changed = l.last_meta != Some(meta);
    let held = l.last_meta.is_none();
    if net.holds_first_document(l, doc.is_some(), from_cache) {
        return;
    }
    let event = document_event(name, doc, from_cache, has_pending);
    l.watched = Watched::Document(name.clone(), doc.clone());
    l.last_meta = Some(meta);
    if held || data_changed || (l.include_metadata && meta_changed) {
        outbox.push((l.callback.clone(), event));
    }
}

/// Raises query listener `l`'s snapshot of its view, with the changes since its last
/// snapshot (`shown`): `delta`'s when the view changed only by the batch that gave them
/// since (O(k log n) for k changes, whatever the size of the result), else the diff of the
/// two results (O(n), after a refill or a reset). See the module's text for which changes
/// are raised.
fn raise_query(
    net: &Net,
    outbox: &mut Outbox,
    l: &mut Listener,
    pending_names: &Pending,
    delta: Option<Delta>,
) {
    let Watched::Query(view) = &l.watched else {
        return;
    };
    let delta = delta.filter(|_| l.synced);
    let from_delta = delta.is_some();
    let mut changes = match delta {
        Some(d) => d.data_changes(),
        None => diff_data_changes(view, &l.shown),
    };
    // Which shown documents have pending writes is needed only for metadata changes; else
    // whether any has. (Every snapshot raises every listener: at a few writes a second
    // with a backlog of pending ones, collecting them all made most of the page's work.)
    let (now_pending, has_pending_writes) = if l.include_metadata {
        let now = (pending_names.iter())
            .filter(|n| view.contains(n))
            .cloned()
            .collect::<HashSet<DocumentName>>();
        let has = !now.is_empty();
        (now, has)
    } else {
        let has = pending_names.iter().any(|n| view.contains(n));
        (HashSet::new(), has)
    };
    let from_cache = net.shows_from_cache(l.target);
    let meta = (from_cache, has_pending_writes);
    let first = l.last_meta.is_none();
    if first && from_cache && view.is_empty() && net.holds_first(l.target, l.had_results) {
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
        let event = ListenEvent::Query {
            docs: l.shown.clone(),
            pending: pending_names.clone(),
            changes,
            from_cache,
            has_pending_writes,
        };
        outbox.push((l.callback.clone(), event));
    }
}
