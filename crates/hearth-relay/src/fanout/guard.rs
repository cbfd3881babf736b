//! What the security rules let each target see as the fan-out writes a round.
//!
//! A listen is proved allowed when it starts (rules are not filters), so every document in
//! its result is one the caller may read, as long as the rules decide from the documents
//! alone. Two things still need the caller's identity as changes go out:
//!
//! - A document that left a result because it changed travels with its new content
//!   (`Leave`), which the caller may not be allowed to read (a post made private). A
//!   target whose caller may not read it gets a deletion instead: the document is gone
//!   from what it may see, and its content never reaches it.
//! - Rules that read other documents or the time can stop allowing a listen while its
//!   results stay put (a membership revoked). Such a listen is proved again in every round
//!   that changes its result, before the change goes out; one no longer allowed ends with
//!   `permission-denied` and sees nothing of the round.
//!
//! Subscribers without a guard (an open relay, a service token) take the shared frames;
//! decisions are memoized per viewer within a round, so ten thousand listeners of one user
//! class cost one evaluation.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

use super::frames::target_change_messages;
use super::groups::Subscriber;
use super::Outbound;
use hearth_core::document::Document;
use hearth_core::path::DocumentName;
use hearth_core::protocol::codec::try_encode_server;
use hearth_core::protocol::{DocumentChange, TargetChangeKind};
use hearth_rules::Ruleset;

/// The rules' view of one target's caller, asked by the fan-out as changes go out.
pub trait TargetGuard: Send + Sync {
    /// Identifies the caller: guards with the same viewer decide alike.
    fn viewer(&self) -> &str;
    /// Whether the caller may read `doc`.
    fn may_read(&self, doc: &Document) -> bool;
    /// For rules that read other documents or the time: whether the caller may still run
    /// the listen's query (`Err`: the denial). `None` when the rules decide from the
    /// documents alone, so the proof at the listen's start holds.
    fn recheck(&self) -> Option<Result<(), String>>;
    /// Proves the listen again under `rules` (the rules in force after a reload): the
    /// guard to decide with from now on, or the denial that ends the listen.
    fn reproved(&self, rules: &Arc<Ruleset>) -> Result<Arc<dyn TargetGuard>, String>;
}

/// How a group's round goes out to its guarded subscribers.
#[derive(Default)]
pub(super) struct Screened {
    /// Subscribers (by index) that get changes of their own: the group's, with the
    /// documents they may not read turned into deletions.
    pub(super) own: Vec<(usize, Vec<DocumentChange>)>,
    /// Subscribers whose listen the rules no longer allow, with the denial.
    pub(super) denied: Vec<(usize, String)>,
}

impl Screened {
    /// Whether subscriber `i` takes the group's shared frames.
    pub(super) fn shared(&self, i: usize) -> bool {
        !self.own.iter().any(|(j, _)| *j == i) && !self.denied.iter().any(|(j, _)| *j == i)
    }

    /// Whether every subscriber takes the shared frames.
    pub(super) fn is_empty(&self) -> bool {
        self.own.is_empty() && self.denied.is_empty()
    }
}

/// Screens a round's changes `wire` for each guarded subscriber of a group; `version` gives
/// the version of a document's last change in the round.
pub(super) fn screen(
    subs: &[Subscriber],
    wire: &[DocumentChange],
    version: &dyn Fn(&DocumentName) -> u64,
) -> Screened {
    let mut out = Screened::default();
    if subs.iter().all(|s| s.guard.is_none()) {
        return out;
    }
    let leaves: Vec<&Document> = wire
        .iter()
        .filter_map(|c| match c {
            DocumentChange::Leave(d) => Some(d),
            _ => None,
        })
        .collect();
    let mut rechecked: HashMap<String, Option<Result<(), String>>> = HashMap::new();
    let mut readable: HashMap<(String, &DocumentName), bool> = HashMap::new();
    for (i, s) in subs.iter().enumerate() {
        let Some(guard) = &s.guard else { continue };
        let viewer = guard.viewer().to_owned();
        let verdict = rechecked
            .entry(viewer.clone())
            .or_insert_with(|| guard.recheck());
        if let Some(Err(denial)) = verdict {
            out.denied.push((i, denial.clone()));
            continue;
        }
        let hidden: Vec<&DocumentName> = leaves
            .iter()
            .filter(|d| {
                !*readable
                    .entry((viewer.clone(), &d.name))
                    .or_insert_with(|| guard.may_read(d))
            })
            .map(|d| &d.name)
            .collect();
        if !hidden.is_empty() {
            out.own.push((i, redact(wire, &hidden, version)));
        }
    }
    out
}

/// `changes` with the documents named in `hidden` leaving as deletions, without content.
pub(super) fn redact(
    changes: &[DocumentChange],
    hidden: &[&DocumentName],
    version: &dyn Fn(&DocumentName) -> u64,
) -> Vec<DocumentChange> {
    changes
        .iter()
        .map(|c| match c {
            DocumentChange::Leave(d) if hidden.contains(&&d.name) => DocumentChange::Delete {
                name: d.name.clone(),
                version: version(&d.name),
            },
            c => c.clone(),
        })
        .collect()
}

/// Writes a subscriber's own changes of a round (`target_id`'s frames at `version`); its
/// connection joins `affected` if owed the round's `Snapshot`. Returns the frames
/// written; a change the encoding refuses sends nothing (the shared frames were refused
/// the same way, which ends the group).
pub(super) fn deliver_own(
    target_id: u32,
    out: &Outbound,
    changes: Vec<DocumentChange>,
    version: u64,
    affected: &mut Vec<Outbound>,
) -> usize {
    let frames: Result<Vec<Bytes>, _> =
        target_change_messages(target_id, TargetChangeKind::Delta, changes)
            .iter()
            .map(|m| try_encode_server(m).map(Bytes::from))
            .collect();
    let Ok(frames) = frames else { return 0 };
    let mut written = 0;
    for f in frames {
        if out.send_in_round(f) {
            written += 1;
        }
    }
    if out.owe_snapshot(version) {
        affected.push(out.clone());
    }
    written
}
