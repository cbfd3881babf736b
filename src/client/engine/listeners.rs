//! The engine's side of local listeners: starting and stopping them (with their relay
//! targets, through `EngineEvent`s), feeding the registry every local change, refilling the
//! views that need the local view read again, the sync layer's metadata (`fromCache`), and
//! running the outbox (`flush`) once no engine state is borrowed.

use std::collections::{BTreeSet, HashSet};
use std::rc::Rc;

use super::registry::{Callback, ListenEvent, Pending};
use super::{Engine, EngineEvent};
use crate::client::error::ClientError;
use hearth_core::document::Document;
use hearth_core::path::DocumentName;
use hearth_core::query::model::Query;
use hearth_core::query::validate::validate;
use hearth_core::query::view::View;

/// Most reads a refill makes while changes keep reaching its view; the last one is taken.
const REFILL_ATTEMPTS: u32 = 8;

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
            let seen = self.listeners.borrow().changes_seen();
            let docs = self.query(&q).await?;
            attempt += 1;
            if self.listeners.borrow().changes_seen() == seen || attempt >= REFILL_ATTEMPTS {
                break docs;
            }
        };
        let view = View::new(q.clone(), Vec::new());
        let id = (self.listeners.borrow_mut()).add_query(view, callback, include_metadata);
        // The relay target first, so the first snapshot knows whether to wait for it.
        self.events.emit(&EngineEvent::Listen(id, &q));
        let pending = self.pending();
        self.listeners.borrow_mut().reset_query(id, docs, &pending);
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
            let seen = self.listeners.borrow().changes_seen();
            let doc = self.local_doc(&name).await?;
            attempt += 1;
            if self.listeners.borrow().changes_seen() == seen || attempt >= REFILL_ATTEMPTS {
                break doc;
            }
        };
        let id = (self.listeners.borrow_mut()).add_document(
            name.clone(),
            doc,
            callback,
            include_metadata,
        );
        self.events
            .emit(&EngineEvent::Listen(id, &Query::document(&name)));
        let pending = self.has_pending(&name);
        self.listeners.borrow_mut().first_document(id, pending);
        self.flush();
        Ok(id)
    }

    /// Stops listener `id` (and its relay target).
    pub fn unlisten(&self, id: u64) {
        let removed = self.listeners.borrow_mut().remove(id);
        if removed {
            self.events.emit(&EngineEvent::Unlisten(id));
        }
    }

    /// The sync layer bound listener `id` to relay target `target` (or unbound it).
    pub fn bind_target(&self, id: u64, target: Option<u32>, had_results: bool) {
        (self.listeners.borrow_mut()).bind_target(id, target, had_results);
    }

    /// The names with a pending write, shared by the snapshots of one round.
    fn pending(&self) -> Pending {
        self.pending_names()
    }

    /// Re-evaluates every listener after documents changed locally; queues callbacks; tells
    /// the origin's other contexts (`EngineEvent::LocalChange`).
    pub(super) async fn local_changed(
        self: &Rc<Self>,
        changed: &[(DocumentName, Option<Document>)],
    ) {
        let refill = self.apply_changed(changed);
        self.finish_changed(changed, refill, true).await;
    }

    /// [`Engine::local_changed`] for a change another context made: it is not told back.
    pub(super) async fn other_context_changed(
        self: &Rc<Self>,
        changed: &[(DocumentName, Option<Document>)],
    ) {
        let refill = self.apply_changed(changed);
        self.finish_changed(changed, refill, false).await;
    }

    /// The synchronous part of [`Engine::local_changed`]: every listener's view takes the
    /// changes and raises its snapshot (callbacks run), except limited views that lost a
    /// document and must read the local view again to refill: their ids are returned for
    /// [`Engine::finish_changed`].
    pub(super) fn apply_changed(&self, changed: &[(DocumentName, Option<Document>)]) -> Vec<u64> {
        if changed.is_empty() {
            return Vec::new();
        }
        self.listeners.borrow_mut().note_changes(changed);
        if self.debug {
            let list: Vec<String> = (changed.iter())
                .map(|(n, d)| match d {
                    Some(d) => format!("{n}@{}", d.update_version),
                    None => format!("x{n}"),
                })
                .collect();
            web_sys::console::debug_1(
                &format!("hearth-engine local view: {}", list.join(" ")).into(),
            );
        }
        // Without listeners (a bulk load) there is no metadata to compute.
        let refill = if self.listeners.borrow().is_empty() {
            Vec::new()
        } else {
            let pending = self.pending();
            self.listeners.borrow_mut().apply_changed(changed, &pending)
        };
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
        tell_others: bool,
    ) {
        if changed.is_empty() {
            return;
        }
        for id in refill {
            self.refill(id).await;
        }
        if tell_others {
            let names: Vec<DocumentName> = changed.iter().map(|(n, _)| n.clone()).collect();
            self.events.emit(&EngineEvent::LocalChange(&names));
        }
        self.flush();
    }

    /// Query listener `id`'s view reads the local view again. A change that reaches the view
    /// while the refill reads was written after the read began, so the read may lack it: it
    /// reads again until none came in between.
    async fn refill(&self, id: u64) {
        for attempt in 1.. {
            let Some((q, generation)) = self.listeners.borrow().refill_of(id) else {
                return;
            };
            let read = self.query(&q).await;
            let now = self.listeners.borrow().generation(id);
            if now.is_some_and(|g| g != generation) && attempt < REFILL_ATTEMPTS {
                continue;
            }
            match read {
                Ok(docs) => {
                    let pending = self.pending();
                    self.listeners.borrow_mut().reset_query(id, docs, &pending);
                }
                Err(e) => self.listeners.borrow_mut().fail(id, e),
            }
            return;
        }
    }

    /// A relay target failed (e.g. a missing index on the relay, or permission).
    pub fn target_failed(&self, target: u32, e: ClientError) {
        self.listeners.borrow_mut().target_failed(target, &e);
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
        self.listeners.borrow().unsynced(id, synced, pending)
    }

    /// The documents of listener `id`'s result among `candidates` that are stale
    /// ([`Engine::unsynced`]'s test), each once. O(c log n) for c candidates.
    pub fn unsynced_among<'a>(
        &self,
        id: u64,
        candidates: impl Iterator<Item = &'a DocumentName>,
        synced: &BTreeSet<DocumentName>,
        pending: &HashSet<DocumentName>,
    ) -> BTreeSet<DocumentName> {
        (self.listeners.borrow()).unsynced_among(id, candidates, synced, pending)
    }

    /// What changed listeners' views since the last call: whether a view was replaced
    /// whole, and the names of the documents that changed locally (the local view, or the
    /// pending writes over it).
    pub fn take_view_changes(&self) -> (bool, HashSet<DocumentName>) {
        self.listeners.borrow_mut().take_view_changes()
    }

    /// Marks relay targets consistent without raising anything yet: the snapshot that brings
    /// their documents then says `fromCache: false` itself, as Firestore's does (a change of
    /// `fromCache` alone is raised only with `includeMetadataChanges`).
    pub fn mark_current(&self, targets: &[u32]) {
        self.listeners.borrow_mut().mark_current(targets);
    }

    /// The connection went up or down: `fromCache` changes for every listener.
    pub fn set_online(&self, online: bool) {
        self.listeners.borrow_mut().set_online(online);
        self.refresh_metadata();
    }

    /// Metadata changed (`fromCache`): listeners that asked for metadata changes raise it.
    fn refresh_metadata(&self) {
        let pending = self.pending();
        self.listeners.borrow_mut().refresh_metadata(&pending);
        self.flush();
    }

    /// Whether some listener shows or watches document `name` now. O(listeners).
    pub fn shows(&self, name: &DocumentName) -> bool {
        self.listeners.borrow().shows(name)
    }

    /// Documents that may not be evicted now: in a listener's result or watched, with a
    /// pending write in this tab's queue, or recently read.
    pub(super) fn held_names(&self) -> HashSet<DocumentName> {
        let mut held = HashSet::clone(&self.pending_names());
        self.listeners.borrow().hold_shown(&mut held);
        held.extend(self.cache.recent());
        held
    }

    /// The queries of listeners with an offset, widened to the documents they skip (see
    /// `Registry::skipping_queries`).
    pub(super) fn skipping_queries(&self) -> Vec<Query> {
        self.listeners.borrow().skipping_queries()
    }

    /// Runs queued callbacks. Called only when no engine borrow is held.
    pub fn flush(&self) {
        loop {
            let batch: Vec<(Callback, ListenEvent)> = self.listeners.borrow_mut().take_outbox();
            if batch.is_empty() {
                return;
            }
            for (cb, ev) in batch {
                cb(ev);
            }
        }
    }
}
