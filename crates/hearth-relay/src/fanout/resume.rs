//! A new target's first answer: its whole result, or for a resume what changed since the
//! client's version, and then what the whole result is (`Existence`).

use std::collections::HashMap;

use hearth_core::document::Document;
use hearth_core::path::DocumentName;
use hearth_core::protocol::existence::NameFilter;
use hearth_core::protocol::{DocumentChange, ServerMessage, TargetChangeKind};
use hearth_core::query::view::View;

use super::{Start, TargetGuard};

/// A new target's first changes: its whole result (a Reset), or for a resume, what changed
/// since the client's version (a Delta).
///
/// Which documents a window (`limit`, `limitToLast`, `offset`) holds depends on the
/// documents before it: one deleted or inserted there shifts the window without changing the
/// documents at its edges, which a delta of the changed names misses. A windowed target
/// therefore resumes with a Reset, followed by the changed documents outside the window, so
/// the client learns how each document it may hold changed and never has to guess.
///
/// Under security rules (`guard`) a resume speaks only of documents in the result now: a
/// document changed since the client's version that the result lacks may never have been
/// in the client's result (another user's, say), and its name is not the caller's to learn.
/// Whether it was cannot be told, so such a resume gets a Reset (the whole result), and a
/// windowed one no changes outside its window.
pub(super) fn resume_changes(
    view: &View,
    start: Start,
    guard: Option<&dyn TargetGuard>,
) -> (TargetChangeKind, Vec<DocumentChange>) {
    let whole = || {
        view.documents()
            .cloned()
            .map(DocumentChange::Upsert)
            .collect::<Vec<_>>()
    };
    let Start::Resume(Some(changed)) = start else {
        return (TargetChangeKind::Reset, whole());
    };
    let windowed = view.query().limit.is_some() || view.query().offset > 0;
    let version = changed.read_at;
    let held: HashMap<&DocumentName, &Document> = if changed.states.is_empty() {
        HashMap::new()
    } else {
        view.documents().map(|d| (&d.name, d)).collect()
    };
    if guard.is_some() && (windowed || changed.states.iter().any(|(n, _)| !held.contains_key(n))) {
        return (TargetChangeKind::Reset, whole());
    }
    let (kind, mut changes) = if windowed {
        (TargetChangeKind::Reset, whole())
    } else {
        (TargetChangeKind::Delta, Vec::new())
    };
    for (name, state) in changed.states {
        match held.get(&name) {
            Some(d) if !windowed => changes.push(DocumentChange::Upsert((*d).clone())),
            Some(_) => {}
            None => changes.push(match state {
                Some(now) => DocumentChange::Leave(now),
                None => DocumentChange::Delete { name, version },
            }),
        }
    }
    (kind, changes)
}

/// What a resumed target's whole result is (`ServerMessage::Existence`): its size and the
/// filter of its names, so that the client finds what it kept from before the resume that
/// the result lacks.
pub(super) fn existence(target_id: u32, view: &View) -> ServerMessage {
    let count = view.documents().count();
    ServerMessage::Existence {
        target_id,
        count: count as u64,
        filter: NameFilter::build(count, view.documents().map(|d| &d.name)),
    }
}
