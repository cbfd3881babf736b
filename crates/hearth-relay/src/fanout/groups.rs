//! The fan-out's state under its lock: listen groups (one `View` per distinct query) and
//! their subscribers, where each target is subscribed, and the relevance index that finds
//! the groups a changed document can belong to.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;

use super::guard::TargetGuard;
use super::Outbound;
use hearth_core::error::ErrorCode;
use hearth_core::path::DocumentName;
use hearth_core::protocol::ServerMessage;
use hearth_core::query::model::Source;
use hearth_core::query::view::View;

/// One listening target of a group.
#[derive(Clone)]
pub(super) struct Subscriber {
    /// The client's id for the target: the frames it gets carry it.
    pub(super) target_id: u32,
    /// The target's connection, where its frames are written.
    pub(super) out: Outbound,
    /// What the security rules let the target's caller see (`None`: everything).
    pub(super) guard: Option<Arc<dyn TargetGuard>>,
}

/// The listeners of one query (identical queries of a database share it).
pub(super) struct Group {
    /// The query's current result, changed one committed document at a time.
    pub(super) view: View,
    /// The version the view reflects (at least: a group no change reached since is current
    /// at [`Inner::applied`] too).
    pub(super) version: u64,
    /// In no particular order: removal swaps the last one into the gap.
    pub(super) subscribers: Vec<Subscriber>,
}

/// Where a target's subscription is: its group and its index in the group's subscribers.
pub(super) struct Slot {
    /// The group's key: the encoded query.
    pub(super) key: Arc<[u8]>,
    /// The target's index in the group's `subscribers`.
    pub(super) index: usize,
}

/// Everything the fan-out lock guards.
pub(super) struct Inner {
    /// Every live query of the database, by encoded query.
    pub(super) groups: HashMap<Arc<[u8]>, Group>,
    /// The groups of collection queries, by the collection's path segments.
    pub(super) by_collection: HashMap<Vec<String>, HashSet<Arc<[u8]>>>,
    /// The groups of collection-group queries, by collection id.
    pub(super) by_group: HashMap<String, HashSet<Arc<[u8]>>>,
    /// Every commit up to this version has been applied to every group it can affect: a
    /// group is current at the later of this and its own `version`.
    pub(super) applied: u64,
    /// The furthest version any group's read (initial result or refill) has seen; a round
    /// that ends before it takes the commits up to it in (see `Fanout::publish`).
    pub(super) read: u64,
    /// Where each (connection, target id) is subscribed, so unlisten is O(1).
    pub(super) by_target: HashMap<(u64, u32), Slot>,
    /// The targets of each connection, so closing one is O(its targets).
    pub(super) by_conn: HashMap<u64, Vec<u32>>,
    /// Initial results held back until the published version reaches theirs (the initial
    /// read saw commits not yet published): sending them earlier would let a `Snapshot` of
    /// an older version cover contents of a newer one.
    pub(super) pending: Vec<(Outbound, u64, Vec<Bytes>)>,
    /// Targets the fan-out ended itself (with an error) since the relay last took the
    /// count, for its listen gauge.
    pub(super) ended: usize,
}

impl Inner {
    pub(super) fn new(version: u64) -> Inner {
        Inner {
            groups: HashMap::new(),
            by_collection: HashMap::new(),
            by_group: HashMap::new(),
            applied: version,
            read: version,
            by_target: HashMap::new(),
            by_conn: HashMap::new(),
            pending: Vec::new(),
            ended: 0,
        }
    }

    /// The set of groups of `source` in the relevance index.
    fn source_set(&mut self, source: &Source) -> &mut HashSet<Arc<[u8]>> {
        match source {
            Source::Collection(c) => self.by_collection.entry(c.segments().to_vec()).or_default(),
            Source::CollectionGroup(g) => self.by_group.entry(g.clone()).or_default(),
        }
    }

    /// Adds a group under `key`, indexed by its source.
    pub(super) fn add_group(&mut self, key: Arc<[u8]>, group: Group) {
        self.read = self.read.max(group.version);
        let source = group.view.query().source.clone();
        self.source_set(&source).insert(key.clone());
        self.groups.insert(key, group);
    }

    /// Removes the group under `key` and its index entry.
    pub(super) fn remove_group(&mut self, key: &[u8]) {
        let Some(group) = self.groups.remove(key) else {
            return;
        };
        match &group.view.query().source {
            Source::Collection(c) => {
                if let Some(set) = self.by_collection.get_mut(c.segments()) {
                    set.remove(key);
                    if set.is_empty() {
                        self.by_collection.remove(c.segments());
                    }
                }
            }
            Source::CollectionGroup(g) => {
                if let Some(set) = self.by_group.get_mut(g.as_str()) {
                    set.remove(key);
                    if set.is_empty() {
                        self.by_group.remove(g.as_str());
                    }
                }
            }
        }
    }

    /// The groups whose query can hold document `name`: those of its collection and those
    /// of its collection group.
    pub(super) fn relevant<'a>(
        &'a self,
        name: &DocumentName,
    ) -> impl Iterator<Item = &'a Arc<[u8]>> {
        let segments = name.segments();
        let parent = &segments[..segments.len().saturating_sub(1)];
        self.by_collection
            .get(parent)
            .into_iter()
            .chain(self.by_group.get(name.collection_id()))
            .flatten()
    }

    /// Ends every target of the group under `key` with an error frame (`code`, `message`)
    /// and removes the group.
    pub(super) fn end_group(&mut self, key: &[u8], code: ErrorCode, message: &str) {
        let targets: Vec<(u64, u32, Outbound)> = match self.groups.get(key) {
            Some(g) => g
                .subscribers
                .iter()
                .map(|s| (s.out.conn(), s.target_id, s.out.clone()))
                .collect(),
            None => return,
        };
        for (conn, target_id, out) in targets {
            if self.unlisten(conn, target_id) {
                self.ended += 1;
            }
            out.send_message(&ServerMessage::Error {
                request_id: 0,
                target_id,
                code,
                message: message.to_owned(),
            });
        }
        self.remove_group(key);
    }

    /// Ends every target with `internal` and forgets every group: the state after a panic
    /// under the lock, which may have left a view half updated.
    pub(super) fn reset_after_panic(&mut self) {
        let keys: Vec<Arc<[u8]>> = self.groups.keys().cloned().collect();
        for key in keys {
            self.end_group(
                &key,
                ErrorCode::Internal,
                "the relay's fan-out failed: listen again",
            );
        }
        self.pending.clear();
    }

    /// Ends every connection with a target here: each gets a connection-level error `code`
    /// saying `message` and then closes (its client reconnects and resumes); its targets
    /// go.
    /// Returns how many targets there were.
    pub(super) fn end_connections(&mut self, code: ErrorCode, message: &str) -> usize {
        let conns: Vec<u64> = self.by_conn.keys().copied().collect();
        let mut ended = 0;
        for conn in conns {
            let targets = self.by_conn.remove(&conn).unwrap_or_default();
            let out = targets.iter().find_map(|t| {
                let slot = self.by_target.get(&(conn, *t))?;
                let group = self.groups.get(&slot.key[..])?;
                group.subscribers.get(slot.index).map(|s| s.out.clone())
            });
            for t in &targets {
                self.unlisten(conn, *t);
            }
            self.pending.retain(|(o, _, _)| o.conn() != conn);
            if let Some(out) = out {
                out.end(&ServerMessage::Error {
                    request_id: 0,
                    target_id: 0,
                    code,
                    message: message.to_owned(),
                });
            }
            ended += targets.len();
        }
        self.ended += ended;
        ended
    }

    /// Removes a target in O(1); false if it did not exist.
    pub(super) fn unlisten(&mut self, conn: u64, target_id: u32) -> bool {
        let Some(slot) = self.by_target.remove(&(conn, target_id)) else {
            return false;
        };
        if let Some(g) = self.groups.get_mut(&slot.key[..]) {
            let removed = g.subscribers.swap_remove(slot.index);
            debug_assert!(removed.out.conn() == conn && removed.target_id == target_id);
            removed.out.targets().fetch_sub(1, Ordering::Relaxed);
            if let Some(moved) = g.subscribers.get(slot.index) {
                if let Some(m) = self.by_target.get_mut(&(moved.out.conn(), moved.target_id)) {
                    m.index = slot.index;
                }
            }
            if g.subscribers.is_empty() {
                self.remove_group(&slot.key[..]);
            }
        }
        if let Some(targets) = self.by_conn.get_mut(&conn) {
            if let Some(p) = targets.iter().position(|t| *t == target_id) {
                targets.swap_remove(p);
            }
            if targets.is_empty() {
                self.by_conn.remove(&conn);
            }
        }
        true
    }
}
