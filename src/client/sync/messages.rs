//! The relay's messages: Welcome (listens sent, then the queued writes in order), write
//! results and refusals, target changes buffered until the Snapshot that makes them
//! consistent, and the listen targets they advance (resume versions, limbo reads).

use hearth_core::error::ErrorCode;
use std::collections::{BTreeSet, HashSet};
use std::rc::Rc;

use super::{ReceivedSnapshot, Sync, Target, LISTEN_BACKOFF_MAX_MS, LISTEN_BACKOFF_MS};
use crate::client::engine::{Batch, Engine};
use crate::client::error::ClientError;
use hearth_core::document::Document;
use hearth_core::path::DocumentName;
use hearth_core::protocol::{ClientMessage, DocumentChange, ServerMessage, TargetChangeKind};
use hearth_core::query::model::Source;

/// The server states a snapshot carries, one per document: the newest, an absence read at
/// a version counting as newer than a document written at or before it.
#[derive(Default)]
struct States {
    /// Each document's state and the version it is known at.
    by_name: std::collections::HashMap<DocumentName, (u64, Option<Document>)>,
}

impl States {
    fn offer(&mut self, name: DocumentName, at: u64, state: Option<Document>) {
        match self.by_name.get_mut(&name) {
            Some(held) => {
                let newer = at > held.0 || (at == held.0 && state.is_none());
                if newer {
                    *held = (at, state);
                }
            }
            None => {
                self.by_name.insert(name, (at, state));
            }
        }
    }

    /// Offers the state change `c` carries (a `Remove` carries none).
    fn offer_change(&mut self, c: DocumentChange) {
        match c {
            DocumentChange::Upsert(d) | DocumentChange::Leave(d) => {
                self.offer(d.name.clone(), d.update_version, Some(d))
            }
            DocumentChange::Delete { name, version } => self.offer(name, version, None),
            DocumentChange::Remove(_) => {}
        }
    }

    fn into_list(self) -> Vec<(DocumentName, Option<Document>)> {
        self.by_name
            .into_iter()
            .map(|(name, (_, state))| (name, state))
            .collect()
    }
}

/// Whether document `name` can belong to a query over `source`.
fn in_source(source: &Source, name: &DocumentName) -> bool {
    match source {
        Source::Collection(c) => c.contains(name),
        Source::CollectionGroup(g) => name.collection_id() == g,
    }
}

impl Sync {
    /// Keeps a limbo listen on each document a listener shows that its target's result
    /// lacks, and drops the ones no longer needed. Only targets whose whole result the
    /// relay has sent on this connection count (a resumed Delta says only what changed).
    ///
    /// A target checked before is checked again only at its stale documents of then and
    /// the documents that changed since (`touched`: in the snapshot's changes; and in the
    /// local view or the pending writes, which the engine records), since a document's
    /// staleness changes only with its membership of the view, of the target's result or
    /// of the pending writes. A view replaced whole, or a target reset or answered anew,
    /// is checked whole.
    fn resolve_limbo(&self, engine: &Engine, touched: HashSet<DocumentName>) {
        let (all, mut changed) = engine.take_view_changes();
        changed.extend(touched);
        let wanted: BTreeSet<DocumentName> = {
            let pending = engine.pending_names();
            let targets = self.targets.borrow();
            let mut checked = self.limbo_checked.borrow_mut();
            let eligible = |t: &Target| t.limbo.is_none() && t.complete && t.answered;
            checked.retain(|id, _| targets.get(id).is_some_and(eligible));
            for (id, t) in targets.iter().filter(|(_, t)| eligible(t)) {
                let stale = match checked.get(id) {
                    Some(before) if !all => {
                        let candidates = before.iter().chain(changed.iter());
                        engine.unsynced_among(t.listener, candidates, &t.docs, &pending)
                    }
                    _ => hearth_core::sort::set_of(engine.unsynced(t.listener, &t.docs, &pending)),
                };
                checked.insert(*id, stale);
            }
            hearth_core::sort::set_of(checked.values().flatten().cloned())
        };
        let unneeded: Vec<u32> = self
            .limbo
            .borrow()
            .iter()
            .filter(|(name, _)| !wanted.contains(*name))
            .map(|(_, id)| *id)
            .collect();
        for id in unneeded {
            if let Some(t) = self.targets.borrow_mut().remove(&id) {
                if let Some(name) = t.limbo {
                    self.limbo.borrow_mut().remove(&name);
                }
            }
            self.send(&ClientMessage::Unlisten { target_id: id });
        }
        for name in wanted {
            self.listen_limbo(name);
        }
    }

    /// After an eviction the cache may lack documents of targets not being listened to:
    /// the resume versions kept in memory for them go (the eviction deleted the stored ones
    /// in its own transaction), so they are fetched whole next time. Listened targets keep
    /// theirs: their documents are held.
    pub(super) fn forget_resume_points(&self) {
        self.resume.borrow_mut().clear();
        // The eviction deleted the listened targets' stored versions too: each stores its
        // own again with its next snapshot.
        for t in self.targets.borrow_mut().values_mut() {
            t.stored_at = 0.0;
        }
    }

    /// Whether a listen sent on this connection has not been answered yet (limbo listens
    /// aside: they answer in their own time).
    pub(super) fn unanswered(&self) -> bool {
        self.targets
            .borrow()
            .values()
            .any(|t| t.limbo.is_none() && t.sent && !t.answered)
    }

    /// A Snapshot at `version` covers the buffered changes: they are taken now, before a
    /// later message adds to them, and applied in order, one snapshot at a time.
    pub(super) fn take_snapshot(self: Rc<Self>, version: u64) {
        self.deferred.set(None);
        let mut existence = Vec::new();
        let targets = self
            .targets
            .borrow_mut()
            .iter_mut()
            .filter(|(_, t)| t.answered)
            .map(|(id, t)| {
                t.backoff_ms = LISTEN_BACKOFF_MS;
                if let Some((count, filter)) = t.existence.take() {
                    existence.push((*id, count, filter));
                }
                (*id, std::mem::take(&mut t.buffered))
            })
            .collect();
        self.listen_unsent();
        let awaiting = self.unsettled.borrow().iter().copied().collect();
        self.snapshots.borrow_mut().push_back(ReceivedSnapshot {
            version,
            epoch: self.epoch.get(),
            awaiting,
            targets,
            existence,
        });
        if !self.applying.replace(true) {
            wasm_bindgen_futures::spawn_local(async move {
                loop {
                    let next = self.snapshots.borrow_mut().pop_front();
                    let Some(snapshot) = next else { break };
                    if !self.wait_settled(&snapshot).await {
                        // Its connection is gone: the reconnection asks again.
                        continue;
                    }
                    if let Err(e) = self.clone().on_snapshot(snapshot).await {
                        // The targets keep their earlier resume versions: the
                        // reconnection asks the relay again from there.
                        web_sys::console::warn_1(
                            &format!("hearth: applying a relay snapshot failed ({e}); reconnecting to fetch it again").into(),
                        );
                        self.snapshots.borrow_mut().clear();
                        if self.open.get() {
                            self.drop_socket();
                        }
                    }
                }
                self.applying.set(false);
            });
        }
    }

    /// Handles one message from the relay.
    pub(super) fn on_message(self: Rc<Self>, m: ServerMessage) {
        match m {
            ServerMessage::Welcome {
                indexes,
                heartbeat_ms,
                ..
            } => {
                self.trace(|| "welcome".to_owned());
                self.open.set(true);
                self.auth_retried.set(false);
                self.backoff_ms.set(250.0);
                self.heartbeat_ms.set(f64::from(heartbeat_ms.max(100)));
                self.schedule_token_refresh();
                // Online with `open`, before anything awaits: a listen sent from here on
                // (by a listener registered while the indexes are stored) gets a snapshot
                // that must find the client online to mark its target current; otherwise
                // the listener stays `fromCache: true` until its next change.
                if let Some(engine) = self.engine() {
                    engine.set_online(true);
                }
                self.wake_open_waiters();
                let epoch = self.epoch.get();
                wasm_bindgen_futures::spawn_local(async move {
                    let Some(engine) = self.engine() else { return };
                    let _ = engine.set_indexes(indexes).await;
                    // Listens first (with their resume versions), then the queued writes in order.
                    self.listen_unsent();
                    // A socket dropped meanwhile sends nothing; its successor's Welcome will.
                    if self.open.get() && self.epoch.get() == epoch {
                        self.send_sendable();
                        self.queue_sent.set(true);
                    }
                });
            }
            ServerMessage::WriteResult {
                request_id,
                batch_id,
                version,
            } => {
                // A transaction's commit is a request: its answer goes to the caller. Queued
                // batches are not requests; their answers go to the engine.
                let reply = self.replies.borrow_mut().remove(&request_id);
                if let Some(r) = reply {
                    r(Ok(m));
                    return;
                }
                if self.writes.borrow_mut().remove(&request_id).is_some() {
                    self.write_backoff_ms.set(250.0);
                    self.answered(batch_id, Ok(version));
                }
            }
            ServerMessage::TargetChange {
                target_id,
                kind,
                changes,
            } => {
                if let Some(t) = self.targets.borrow_mut().get_mut(&target_id) {
                    t.answered = true;
                    t.buffered.push((kind, changes));
                }
            }
            ServerMessage::Existence {
                target_id,
                count,
                filter,
            } => {
                if let Some(t) = self.targets.borrow_mut().get_mut(&target_id) {
                    t.existence = Some((count, filter));
                }
            }
            ServerMessage::Snapshot { version } => {
                // While a listen sent on this connection is unanswered (after a reconnect, the
                // relay answers the targets one by one), the changes stay buffered for the
                // Snapshot that follows its answer: every target then advances together, and
                // no listener shows part of a commit that another target has not brought yet.
                if self.unanswered() {
                    self.trace(|| format!("snapshot {version} deferred"));
                    self.deferred.set(Some(version));
                    return;
                }
                self.take_snapshot(version);
            }
            ServerMessage::Heartbeat { .. } => {}
            ServerMessage::GetResult { request_id, .. }
            | ServerMessage::QueryResult { request_id, .. }
            | ServerMessage::AggregationResult { request_id, .. } => {
                let reply = self.replies.borrow_mut().remove(&request_id);
                if let Some(r) = reply {
                    r(Ok(m));
                }
            }
            ServerMessage::Error {
                request_id,
                target_id,
                code,
                message,
            } => {
                let err = ClientError::new(code, message);
                if code == ErrorCode::Unauthenticated
                    && self.token_provider.is_some()
                    && !self.auth_retried.replace(true)
                {
                    // The token expired or was refused: reconnect with a fresh one from the
                    // callback. Queued writes are sent again and listens resumed; reads in
                    // flight fail with `unavailable`.
                    self.writes.borrow_mut().remove(&request_id);
                    self.backoff_ms.set(250.0);
                    self.drop_socket();
                    return;
                }
                let connection = request_id == 0 && target_id == 0;
                if code == ErrorCode::Unauthenticated
                    || (connection && code == ErrorCode::PermissionDenied)
                {
                    // Refused credentials, after the token callback's fresh token: surfaced
                    // to listeners and requests rather than retried forever.
                    self.refuse(err);
                    return;
                }
                if request_id != 0 {
                    let batch = self.writes.borrow_mut().remove(&request_id);
                    if let (Some(_), true) = (batch, transient(code)) {
                        self.retry_writes_later(&err);
                    } else if let Some(batch) = batch {
                        self.answered(batch, Err(err));
                    } else if let Some(r) = self.replies.borrow_mut().remove(&request_id) {
                        r(Err(err));
                    }
                } else if target_id != 0 && transient(code) {
                    // The relay could not serve the listen for now (its store unreachable):
                    // the target stays, and listens again after a backoff.
                    self.listen_again_later(target_id, &err);
                    if let Some(version) = self.deferred.get() {
                        if !self.unanswered() {
                            self.take_snapshot(version);
                        }
                    }
                } else if target_id != 0 {
                    let t = self.targets.borrow_mut().remove(&target_id);
                    if let Some(name) = t.as_ref().and_then(|t| t.limbo.clone()) {
                        self.limbo.borrow_mut().remove(&name);
                    }
                    if let Some(t) = t {
                        self.by_listener.borrow_mut().remove(&t.listener);
                        if let Some(engine) = self.engine() {
                            engine.target_failed(target_id, err);
                        }
                    }
                    // The Snapshot held back for this listen's answer comes from no one else.
                    if let Some(version) = self.deferred.get() {
                        if !self.unanswered() {
                            self.take_snapshot(version);
                        }
                    }
                } else {
                    // A connection-level error: the relay closes; reconnect with backoff.
                    self.drop_socket();
                }
            }
        }
    }

    /// Sends the Listen of every target not sent on this connection (with its resume
    /// version). After a Welcome, all of them; after a Snapshot, which shows the relay serves
    /// listens again (its store answers), the targets waiting out a backoff after a
    /// transient end, now rather than when their timers say (after an outage of a few
    /// seconds, a doubled backoff could keep a listener deaf for as long again).
    fn listen_unsent(&self) {
        let waiting: Vec<ClientMessage> = self
            .targets
            .borrow_mut()
            .iter_mut()
            .filter(|(_, t)| !t.sent)
            .map(|(id, t)| {
                t.sent = true;
                ClientMessage::Listen {
                    target_id: *id,
                    query: t.query.clone(),
                    resume_version: t.resume,
                }
            })
            .collect();
        for listen in waiting {
            self.send(&listen);
        }
    }

    /// The relay ended target `target_id` for a transient cause: its buffered changes are
    /// dropped, and its Listen is sent again (with its resume version) after the target's
    /// backoff (growing by half, with jitter, up to `LISTEN_BACKOFF_MAX_MS`; back to the first with
    /// a snapshot), or by the next Welcome if the connection is gone by then. Its listeners
    /// are not failed.
    fn listen_again_later(self: &Rc<Self>, target_id: u32, err: &ClientError) {
        let delay = {
            let mut targets = self.targets.borrow_mut();
            let Some(t) = targets.get_mut(&target_id) else {
                return;
            };
            t.sent = false;
            t.answered = false;
            t.buffered.clear();
            t.existence = None;
            let delay = t.backoff_ms;
            t.backoff_ms = (delay * super::BACKOFF_GROWTH).min(LISTEN_BACKOFF_MAX_MS);
            delay
        };
        self.trace(|| format!("target t{target_id} listens again in about {delay} ms: {err:?}"));
        let sync = Rc::downgrade(self);
        let epoch = self.epoch.get();
        wasm_bindgen_futures::spawn_local(async move {
            crate::client::js::sleep(delay * (0.5 + js_sys::Math::random())).await;
            let Some(sync) = sync.upgrade() else { return };
            // A new connection's Welcome sends it (and every other target) itself.
            if !sync.open.get() || sync.epoch.get() != epoch {
                return;
            }
            let listen = {
                let mut targets = sync.targets.borrow_mut();
                let Some(t) = targets.get_mut(&target_id).filter(|t| !t.sent) else {
                    return;
                };
                t.sent = true;
                ClientMessage::Listen {
                    target_id,
                    query: t.query.clone(),
                    resume_version: t.resume,
                }
            };
            sync.send(&listen);
        });
    }

    /// The relay could not commit a queued batch for now: nothing of the queue is rolled
    /// back or rejected. The relay applies none of this connection's later batches either
    /// (so none commits out of order); the connection is closed, and after the write
    /// backoff (growing by half, with jitter, up to 30 s) a new one sends the queue again, in order
    /// and under the same batch ids, so a batch that did commit is answered, not applied
    /// twice. `waitForPendingWrites()` waits through it.
    fn retry_writes_later(self: &Rc<Self>, err: &ClientError) {
        let delay = self.write_backoff_ms.get();
        self.write_backoff_ms
            .set((delay * super::BACKOFF_GROWTH).min(30_000.0));
        self.trace(|| format!("writes retried in about {delay} ms: {err:?}"));
        self.backoff_ms.set(delay);
        self.drop_socket();
    }

    /// A Snapshot: the changes of its targets enter the local view, and only once they are
    /// stored are the targets' resume versions stored and their listeners current. An error
    /// leaves the resume versions where they were, so the changes are asked for again.
    ///
    /// The relay says how every document that left a result left it (`Remove`: unchanged,
    /// `Leave`: changed, with its content, `Delete`: gone), so the local view never guesses.
    /// A document a listener still shows that its target's result lacks (a stale copy from
    /// a read, or from a result it left long ago) is in limbo: a listen on it keeps it
    /// current while it is shown, as Firestore's limbo resolution does.
    async fn on_snapshot(self: Rc<Self>, snapshot: ReceivedSnapshot) -> Result<(), ClientError> {
        let Some(engine) = self.engine() else {
            return Ok(());
        };
        let version = snapshot.version;
        self.trace(|| {
            let targets: Vec<String> = snapshot
                .targets
                .iter()
                .map(|(id, buffered)| {
                    let changes: Vec<String> = buffered
                        .iter()
                        .flat_map(|(kind, changes)| {
                            let reset =
                                (*kind == TargetChangeKind::Reset).then(|| "RESET".to_owned());
                            reset.into_iter().chain(changes.iter().map(|c| match c {
                                DocumentChange::Upsert(d) => {
                                    format!("+{}@{}", d.name, d.update_version)
                                }
                                DocumentChange::Leave(d) => {
                                    format!("~{}@{}", d.name, d.update_version)
                                }
                                DocumentChange::Remove(n) => format!("-{n}"),
                                DocumentChange::Delete { name, version } => {
                                    format!("x{name}@{version}")
                                }
                            }))
                        })
                        .collect();
                    format!("t{id}[{}]", changes.join(" "))
                })
                .collect();
            format!("apply snapshot {version}: {}", targets.join(" "))
        });
        let mut checks = self.existence_checks(&engine, snapshot.existence).await;
        let mut states = States::default();
        let mut touched = HashSet::new();
        // Targets whose result this snapshot changed (or reset).
        let mut changed = HashSet::new();
        let mut current = Vec::new();
        let mut mismatched = Vec::new();
        {
            let mut targets = self.targets.borrow_mut();
            for (id, buffered) in snapshot.targets {
                // A target unlistened since (listened to again after a failed existence check,
                // say) has no bookkeeping left, but its documents' states are the relay's at
                // this snapshot like any target's, and a batch may reach the local view only
                // partly through the others: they are taken, so that no view shows part of a
                // batch (model seed 2: a deletion of g1a, g1b, g1c shown as g1a's alone).
                let Some(t) = targets.get_mut(&id) else {
                    let changes = buffered.into_iter().flat_map(|(_, c)| c);
                    for c in changes {
                        touched.insert(c.name().clone());
                        states.offer_change(c);
                    }
                    continue;
                };
                let mut left = BTreeSet::new();
                if !buffered
                    .iter()
                    .all(|(kind, c)| c.is_empty() && *kind != TargetChangeKind::Reset)
                {
                    changed.insert(id);
                }
                for (kind, changes) in buffered {
                    if kind == TargetChangeKind::Reset {
                        t.docs.clear();
                        t.complete = true;
                        // Documents it held may be gone from it unnamed: checked whole.
                        self.limbo_checked.borrow_mut().remove(&id);
                    }
                    touched.extend(changes.iter().map(|c| c.name().clone()));
                    for c in changes {
                        match c {
                            DocumentChange::Upsert(d) => {
                                t.docs.insert(d.name.clone());
                                states.offer(d.name.clone(), d.update_version, Some(d));
                            }
                            DocumentChange::Remove(n) => {
                                t.docs.remove(&n);
                                left.insert(n);
                            }
                            DocumentChange::Leave(d) => {
                                t.docs.remove(&d.name);
                                left.insert(d.name.clone());
                                states.offer(d.name.clone(), d.update_version, Some(d));
                            }
                            DocumentChange::Delete { name, version } => {
                                t.docs.remove(&name);
                                left.insert(name.clone());
                                states.offer(name, version, None);
                            }
                        }
                    }
                }
                if let Some(p) = checks.iter().position(|(c, _)| *c == id) {
                    self.limbo_checked.borrow_mut().remove(&id);
                    if !checks.swap_remove(p).1.settle(t, &left) {
                        // Not current: it listens again from scratch below.
                        mismatched.push(id);
                        continue;
                    }
                }
                match &t.limbo {
                    // A limbo target's document absent from its result is gone.
                    Some(name) if !t.docs.contains(name) => {
                        states.offer(name.clone(), version, None);
                    }
                    Some(_) => {}
                    None => current.push(id),
                }
            }
        }
        engine.mark_current(&current);
        // The documents first; the targets' versions follow (`resume`).
        engine
            .server_documents(states.into_list(), version, true)
            .await?;
        self.note_resume(&current, &changed, version);
        engine.forget_absent(version);
        self.resolve_limbo(&engine, touched);
        engine.targets_current(&current);
        for id in mismatched {
            self.listen_whole_again(id);
        }
        Ok(())
    }

    /// The relay answered batch `batch_id`: the engine takes the answers in sending order
    /// (see `Sync::sent_order`), one task at a time.
    fn answered(self: Rc<Self>, batch_id: u64, answer: Result<u64, ClientError>) {
        self.answers.borrow_mut().insert(batch_id, answer);
        if self.answering.replace(true) {
            return;
        }
        wasm_bindgen_futures::spawn_local(async move {
            loop {
                let (acks, refused) = self.take_answers();
                if acks.is_empty() && refused.is_none() {
                    break;
                }
                let Some(engine) = self.engine() else { break };
                if !acks.is_empty() {
                    self.trace(|| format!("acknowledged batches {acks:?}"));
                    let stale = engine.acknowledge(&acks).await;
                    for (id, _) in acks {
                        self.settled(id);
                    }
                    if !stale.is_empty() {
                        wasm_bindgen_futures::spawn_local(self.clone().refresh(stale));
                    }
                }
                if let Some((id, e)) = refused {
                    self.trace(|| format!("answer batch {id}: {e:?}"));
                    let _ = engine.reject(id, e).await;
                    self.settled(id);
                }
            }
            self.answering.set(false);
        });
    }

    /// The answers ready to be taken in sending order: the acknowledgements at the front of
    /// `sent_order` (taken together), up to the first refusal (taken after them, alone).
    fn take_answers(&self) -> (Vec<(u64, u64)>, Option<(u64, ClientError)>) {
        let mut order = self.sent_order.borrow_mut();
        let mut answers = self.answers.borrow_mut();
        let mut acks = Vec::new();
        while let Some(answer) = order.front().and_then(|id| answers.remove(id)) {
            let Some(id) = order.pop_front() else { break };
            match answer {
                Ok(version) => acks.push((id, version)),
                Err(e) => return (acks, Some((id, e))),
            }
        }
        (acks, None)
    }

    /// Batch `batch_id`'s answer has been taken by the engine: snapshots waiting on it go on.
    fn settled(&self, batch_id: u64) {
        self.unsettled.borrow_mut().remove(&batch_id);
        self.wake_settle_waiters();
    }

    /// Wakes every snapshot waiting for batches to settle (they look again).
    pub(super) fn wake_settle_waiters(&self) {
        let waiters = std::mem::take(&mut *self.settle_waiters.borrow_mut());
        for resolve in waiters {
            let _ = resolve.call0(&wasm_bindgen::JsValue::UNDEFINED);
        }
    }

    /// Waits until every batch `snapshot` may cover has been settled by the engine; false
    /// when its connection is gone meanwhile (it is then not applied).
    async fn wait_settled(&self, snapshot: &ReceivedSnapshot) -> bool {
        self.wait_unsettled(snapshot.epoch, &snapshot.awaiting)
            .await
    }

    /// Waits until none of `batches` is sent and unsettled on connection `epoch`; false
    /// when the connection is gone meanwhile.
    async fn wait_unsettled(&self, epoch: u64, batches: &[u64]) -> bool {
        loop {
            if self.epoch.get() != epoch {
                return false;
            }
            let waiting = {
                let unsettled = self.unsettled.borrow();
                batches.iter().any(|b| unsettled.contains(b))
            };
            if !waiting {
                return true;
            }
            let promise = js_sys::Promise::new(&mut |resolve, _| {
                self.settle_waiters.borrow_mut().push(resolve);
            });
            let _ = wasm_bindgen_futures::JsFuture::from(promise).await;
        }
    }

    /// Reads documents whose local view after a write is only an estimate (see
    /// `Engine::acknowledge`), or that a transaction wrote, from the relay: only those of
    /// collections no listen covers. The others are the listens' to correct: their next
    /// snapshot carries the commit (the relay sends every changed document to the targets
    /// it is or was in, and a document a listener shows that its target lacks is listened
    /// to in limbo), consistently with every other document; a read answers at a later
    /// version than the snapshots, and would show one document of a batch ahead of the
    /// others. (A document of a listened collection that no listener shows keeps its
    /// estimate in the cache until a listen or a read brings it.)
    pub(crate) async fn refresh(self: Rc<Self>, names: Vec<DocumentName>) {
        let Some(engine) = self.engine() else { return };
        let names = {
            let targets = self.targets.borrow();
            names
                .into_iter()
                .filter(|n| {
                    !engine.shows(n)
                        && !targets.values().any(|t| {
                            t.docs.contains(n)
                                || (t.limbo.is_none() && in_source(&t.query.source, n))
                        })
                })
                .collect::<Vec<_>>()
        };
        if names.is_empty() {
            return;
        }
        self.trace(|| format!("read back {names:?}"));
        if let Ok(ServerMessage::GetResult {
            documents, version, ..
        }) = self.request_get(names).await
        {
            let _ = engine.server_documents(documents, version, false).await;
        }
    }

    /// Sends a queued batch (if the socket is welcomed; else the next Welcome sends it).
    /// Sends the queued batches not sent on this connection yet, in queue order, up to the
    /// first one still being stored (`Engine::sendable_batches`).
    pub(super) fn send_sendable(&self) {
        let Some(engine) = self.engine() else { return };
        let batches = engine.sendable_batches(|id| self.unsettled.borrow().contains(&id));
        for b in batches {
            self.send_batch(&b);
        }
    }

    pub(super) fn send_batch(&self, b: &Batch) {
        if self.unsettled.borrow().contains(&b.id) {
            // Sent on this connection already (a write made while the Welcome's task was
            // sending the queue): its answer is coming.
            return;
        }
        let request_id = self.next_request.get();
        self.next_request.set(request_id + 1);
        if self.send(&ClientMessage::Write {
            request_id,
            batch_id: b.id,
            mutations: b.mutations.clone(),
            reads: Vec::new(),
        }) {
            self.trace(|| format!("send batch {} as request {request_id}", b.id));
            self.writes.borrow_mut().insert(request_id, b.id);
            self.unsettled.borrow_mut().insert(b.id);
            self.sent_order.borrow_mut().push_back(b.id);
        }
    }
}

/// Whether the relay's answer to a queued batch is transient: the batch stays queued and is
/// sent again (Firestore's retryable codes; `aborted` only ends a transaction, whose commit
/// is not a queued batch).
fn transient(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::Unavailable
            | ErrorCode::ResourceExhausted
            | ErrorCode::Internal
            | ErrorCode::Aborted
    )
}
