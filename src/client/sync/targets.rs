//! The listen targets: a listener's (resumed from a stored version, its query widened past
//! an offset) and a limbo document's, each given an id and its Listen sent.

use std::collections::BTreeSet;
use std::rc::Rc;

use super::{Sync, Target, LISTEN_BACKOFF_MS};
use hearth_core::path::DocumentName;
use hearth_core::protocol::codec::encode_query;
use hearth_core::protocol::ClientMessage;
use hearth_core::query::model::Query;

impl Sync {
    /// Gives listener `listener` a relay target, resuming from a stored version if any.
    ///
    /// A query with an offset depends on the documents it skips, which its result does not
    /// show: its target is the query without the offset and with the offset added to its
    /// limit, so the cache holds the skipped documents too and the local view (which runs
    /// the query with its offset) moves its window when one of them changes.
    pub(super) fn listen(&self, listener: u64, mut query: Query) {
        if query.offset > 0 {
            query.limit = query
                .limit
                .map(|n| n.saturating_add(i64::try_from(query.offset).unwrap_or(i64::MAX)));
            query.offset = 0;
        }
        let mut key = Vec::new();
        encode_query(&query, &mut key);
        let resume = self.resume.borrow().get(&key);
        let target_id = self.add_target(Target {
            listener,
            query,
            key,
            resume,
            docs: BTreeSet::new(),
            buffered: Vec::new(),
            answered: false,
            sent: false,
            complete: false,
            limbo: None,
            existence: None,
            backoff_ms: LISTEN_BACKOFF_MS,
            stored_at: 0.0,
        });
        self.by_listener.borrow_mut().insert(listener, target_id);
        if let Some(e) = self.engine() {
            e.bind_target(listener, Some(target_id), resume.is_some());
            // Refused credentials: the listen fails as the relay would fail it.
            let refused = self.refused.borrow().clone();
            if let Some(err) = refused {
                self.targets.borrow_mut().remove(&target_id);
                self.by_listener.borrow_mut().remove(&listener);
                e.target_failed(target_id, err);
            }
        }
    }

    /// Listens to document `name`, in limbo, unless a limbo target already does.
    pub(super) fn listen_limbo(&self, name: DocumentName) {
        if self.limbo.borrow().contains_key(&name) {
            return;
        }
        self.trace(|| format!("limbo {name}"));
        let query = Query::document(&name);
        let mut key = Vec::new();
        encode_query(&query, &mut key);
        let target_id = self.add_target(Target {
            listener: 0,
            query,
            key,
            resume: None,
            docs: BTreeSet::new(),
            buffered: Vec::new(),
            answered: false,
            sent: false,
            complete: false,
            limbo: Some(name.clone()),
            existence: None,
            backoff_ms: LISTEN_BACKOFF_MS,
            stored_at: 0.0,
        });
        self.limbo.borrow_mut().insert(name, target_id);
    }

    /// Gives `target` an id, keeps it, and sends its Listen if the socket is welcomed (else
    /// the next Welcome sends it). Returns the id.
    fn add_target(&self, target: Target) -> u32 {
        let target_id = self.next_target.get();
        self.next_target.set(target_id + 1);
        self.trace(|| {
            format!(
                "target t{target_id}: {:?} resume {:?}",
                target.limbo.as_ref().map_or("listener", |_| "limbo"),
                target.resume
            )
        });
        let listen = ClientMessage::Listen {
            target_id,
            query: target.query.clone(),
            resume_version: target.resume,
        };
        self.targets.borrow_mut().insert(target_id, target);
        let sent = self.send(&listen);
        if let Some(t) = self.targets.borrow_mut().get_mut(&target_id) {
            t.sent = sent;
        }
        target_id
    }

    /// Drops listener `listener`'s target, keeping its resume version for a later listen.
    pub(super) fn unlisten(self: &Rc<Self>, listener: u64) {
        let Some(target_id) = self.by_listener.borrow_mut().remove(&listener) else {
            return;
        };
        if let Some(t) = self.targets.borrow_mut().remove(&target_id) {
            if let Some(v) = t.resume {
                self.resume.borrow_mut().keep(t.key, v);
            }
        }
        self.send(&ClientMessage::Unlisten { target_id });
        // A Snapshot held back for this target's answer is not to wait for it any more.
        if let Some(version) = self.deferred.get() {
            if !self.unanswered() {
                self.clone().take_snapshot(version);
            }
        }
    }
}
