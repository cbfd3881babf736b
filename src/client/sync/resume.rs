//! Resume versions: the version each listened query can resume from, in memory and in
//! IndexedDB's `targets` store.
//!
//! A target's version is stored with some delay, apart from the snapshot that gave it
//! (`RESUME_FLUSH_MS`): a snapshot that changes the results of two thousand listeners would
//! otherwise make two thousand `put` requests before any of them sees it. Stored later is
//! still right: a version is a right place to resume from once the documents of its
//! snapshot are stored (they are, before it is noted), and an older stored one is still a
//! right place (the relay sends what changed since it). A crash meanwhile costs a resume
//! from the older version.

use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use super::{Sync, RESUME_STORE_MS};
use crate::client::idb_store::{Key, Store, WriteOp};

/// How long after a snapshot its targets' versions are stored (ms): the snapshots of that
/// time share one transaction.
const RESUME_FLUSH_MS: f64 = 1000.0;

/// The resume versions the sync layer knows, by encoded query.
#[derive(Default)]
pub(super) struct ResumePoints {
    /// Loaded from IndexedDB at start, and kept for targets since dropped.
    stored: HashMap<Vec<u8>, u64>,
    /// Versions of listened targets not yet stored.
    unsaved: HashMap<Vec<u8>, u64>,
    /// A flush of `unsaved` is scheduled.
    scheduled: bool,
}

impl ResumePoints {
    pub(super) fn new(stored: HashMap<Vec<u8>, u64>) -> ResumePoints {
        ResumePoints {
            stored,
            ..ResumePoints::default()
        }
    }

    /// Where a new listen of the query encoded as `key` resumes from.
    pub(super) fn get(&self, key: &[u8]) -> Option<u64> {
        self.stored.get(key).copied()
    }

    /// A dropped target's version, for a later listen of its query.
    pub(super) fn keep(&mut self, key: Vec<u8>, version: u64) {
        self.stored.insert(key, version);
    }

    /// The query's versions are wrong (its target failed an existence check): forgotten,
    /// stored or not.
    pub(super) fn forget(&mut self, key: &[u8]) {
        self.stored.remove(key);
        self.unsaved.remove(key);
    }

    /// After an eviction: every version goes (see `Sync::forget_resume_points`).
    pub(super) fn clear(&mut self) {
        self.stored.clear();
        self.unsaved.clear();
    }

    /// A listened target's version, to store; true when a flush is to be scheduled.
    fn note(&mut self, key: Vec<u8>, version: u64) -> bool {
        self.unsaved.insert(key, version);
        !std::mem::replace(&mut self.scheduled, true)
    }
}

impl Sync {
    /// Notes the versions of the current targets `ids` at `version` (whose documents are
    /// stored): each with a snapshot that changed its result (`changed`), else at most every
    /// `RESUME_STORE_MS`, as Firestore persists resume tokens.
    pub(super) fn note_resume(self: &Rc<Self>, ids: &[u32], changed: &HashSet<u32>, version: u64) {
        let now = js_sys::Date::now();
        let mut schedule = false;
        {
            let mut targets = self.targets.borrow_mut();
            let mut points = self.resume.borrow_mut();
            for id in ids {
                let Some(t) = targets.get_mut(id) else {
                    continue;
                };
                t.resume = Some(version);
                if changed.contains(id) || now - t.stored_at >= RESUME_STORE_MS {
                    t.stored_at = now;
                    schedule |= points.note(t.key.clone(), version);
                }
            }
        }
        if schedule {
            let w = Rc::downgrade(self);
            wasm_bindgen_futures::spawn_local(async move {
                crate::client::js::sleep(RESUME_FLUSH_MS).await;
                if let Some(s) = w.upgrade() {
                    s.flush_resume().await;
                }
            });
        }
    }

    /// Stores the noted versions of the queries still listened to (a dropped one keeps its
    /// stored version: its documents may go from the cache from now on).
    async fn flush_resume(&self) {
        let unsaved = {
            let mut points = self.resume.borrow_mut();
            points.scheduled = false;
            std::mem::take(&mut points.unsaved)
        };
        let ops: Vec<WriteOp> = {
            let targets = self.targets.borrow();
            let listened: HashSet<&[u8]> = targets.values().map(|t| &t.key[..]).collect();
            unsaved
                .into_iter()
                .filter(|(key, _)| listened.contains(&key[..]))
                .map(|(key, version)| WriteOp::Put {
                    store: Store::Targets,
                    key: Key::Bytes(key),
                    value: version.to_be_bytes().to_vec(),
                })
                .collect()
        };
        if let (Some(engine), false) = (self.engine(), ops.is_empty()) {
            // A failed write leaves the earlier versions, still right ones.
            let _ = engine.store.write_relaxed(ops).await;
        }
    }
}
