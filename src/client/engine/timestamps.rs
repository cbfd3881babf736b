//! Pending server timestamps: which fields of a document hold the local estimate of a
//! `serverTimestamp()` that the relay has not yet answered, with the value each field had
//! before (what `data({ serverTimestamps: 'previous' })` shows), and how a snapshot shows
//! them (Firestore's `serverTimestamps` option: `null` by default, the estimate, or the
//! previous value).
//!
//! The previous values are recorded in the batch when it is written (the document as it was
//! just before each transform), so they survive a reload and are the same in every context.

use std::collections::BTreeMap;

use super::{Batch, Engine};
use hearth_core::mutation::{FieldTransform, Mutation, MutationKind, SetMerge};
use hearth_core::path::{DocumentName, FieldPath};
use hearth_core::value::{Map, Value};

/// A field holding a pending server timestamp's estimate, and its value before.
pub type PendingTimestamp = (FieldPath, Option<Value>);

/// How a snapshot shows a pending server timestamp (`serverTimestamps`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerTimestamps {
    /// `null` (the default).
    None,
    /// The local estimate.
    Estimate,
    /// The value before the write (`null` if none).
    Previous,
}

impl Engine {
    /// The fields of `name` whose local value is a pending server timestamp's estimate.
    pub fn pending_timestamps(&self, name: &DocumentName) -> Vec<PendingTimestamp> {
        let writes = self.writes.borrow();
        if !writes.may_stamp(name) {
            return Vec::new();
        }
        pending_in(writes.batches(), name)
    }
}

/// The previous values a batch records for mutation `m` applied over `before`: one per
/// server timestamp transform, the field as it was before the mutation.
pub(super) fn previous_values(
    before: Option<&hearth_core::document::Document>,
    m: &Mutation,
) -> Vec<PendingTimestamp> {
    m.transforms
        .iter()
        .filter(|(_, t)| matches!(t, FieldTransform::ServerTimestamp))
        .map(|(p, _)| {
            (
                p.clone(),
                before.and_then(|d| d.field(p)).map(|v| v.into_owned()),
            )
        })
        .collect()
}

/// Whether one path is a prefix of the other (a write to one changes the other).
fn related(a: &FieldPath, b: &FieldPath) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// The leaf paths a merging set writes: nested maps merge, anything else (an empty map
/// included) is a leaf.
fn leaves(map: &Map, prefix: &[String], out: &mut Vec<FieldPath>) {
    for (k, v) in map {
        let mut path = prefix.to_vec();
        path.push(k.clone());
        match v {
            Value::Map(m) if !m.is_empty() => leaves(m, &path, out),
            _ => {
                if let Ok(p) = FieldPath::from_segments(path) {
                    out.push(p);
                }
            }
        }
    }
}

/// Replays the pending batches' writes to `name`: a field is pending while the last write
/// to it is a server timestamp transform. Its previous value is the one recorded by the
/// first of a run of such transforms (a second one keeps the first's).
fn pending_in(queue: &[Batch], name: &DocumentName) -> Vec<PendingTimestamp> {
    let mut pending: BTreeMap<FieldPath, Option<Value>> = BTreeMap::new();
    for b in queue {
        for (i, m) in b.mutations.iter().enumerate() {
            if m.name != *name {
                continue;
            }
            let written: Vec<FieldPath> = match &m.kind {
                MutationKind::Delete
                | MutationKind::Set {
                    merge: SetMerge::Overwrite,
                    ..
                } => {
                    pending.clear();
                    Vec::new()
                }
                MutationKind::Set {
                    fields,
                    merge: SetMerge::MergeAll,
                } => {
                    let mut out = Vec::new();
                    leaves(fields, &[], &mut out);
                    out
                }
                MutationKind::Set {
                    merge: SetMerge::MergeFields(paths),
                    ..
                } => paths.clone(),
                MutationKind::Update { fields } => fields.iter().map(|(p, _)| p.clone()).collect(),
            };
            for p in written.iter().chain(&m.field_deletes_in_merge) {
                pending.retain(|k, _| !related(k, p));
            }
            for (p, t) in &m.transforms {
                if matches!(t, FieldTransform::ServerTimestamp) {
                    pending.retain(|k, _| k == p || !related(k, p));
                    if !pending.contains_key(p) {
                        let before = b
                            .previous
                            .iter()
                            .find(|(at, q, _)| *at == i && q == p)
                            .and_then(|(_, _, v)| v.clone());
                        pending.insert(p.clone(), before);
                    }
                } else {
                    pending.retain(|k, _| !related(k, p));
                }
            }
        }
    }
    pending.into_iter().collect()
}

/// `fields` as a snapshot shows them: each pending server timestamp as `mode` says.
pub fn show_timestamps(fields: &Map, pending: &[PendingTimestamp], mode: ServerTimestamps) -> Map {
    let mut out = fields.clone();
    if mode == ServerTimestamps::Estimate {
        return out;
    }
    for (path, previous) in pending {
        let value = match mode {
            ServerTimestamps::Previous => previous.clone().unwrap_or(Value::Null),
            _ => Value::Null,
        };
        replace_at(&mut out, path.segments(), value);
    }
    out
}

/// Replaces the value at `segments` if it exists (a pending estimate always does).
fn replace_at(map: &mut Map, segments: &[String], value: Value) {
    let Some((first, rest)) = segments.split_first() else {
        return;
    };
    match (map.get_mut(first), rest.is_empty()) {
        (Some(slot), true) => *slot = value,
        (Some(Value::Map(inner)), false) => replace_at(inner, rest, value),
        _ => {}
    }
}
