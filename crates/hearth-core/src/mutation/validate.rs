//! The shape checks of [`Mutation::validate`]: everything that can be refused without
//! looking at the stored document.
//!
//! The invariant they establish, which [`super::fields`] relies on: the paths one mutation
//! writes (update paths, merge deletes, transforms) never overlap, so the order in which they
//! are performed cannot change the result. A transform may sit inside a map that the same
//! mutation writes (`update({ a: { b: 1, c: increment(1) } })` writes `a = { b: 1 }` and
//! transforms `a.c`), but never on or above a written value, and never below a written
//! non-map, since the transform would then silently discard part of the write.

use std::collections::{HashMap, HashSet};

use crate::path::{FieldPath, DOCUMENT_ID_FIELD};
use crate::value::{Map, Value};

use super::{FieldTransform, Mutation, MutationError, MutationKind, Precondition, SetMerge};

type Check = Result<(), MutationError>;

pub(super) fn validate(m: &Mutation) -> Check {
    let bad = |msg: String| {
        Err(MutationError::InvalidArgument(format!(
            "invalid write to document `{}`: {msg}",
            m.name
        )))
    };
    for path in written_paths(m) {
        if path.segments()[0] == DOCUMENT_ID_FIELD {
            return bad(format!(
                "field `{path}` cannot be written: `__name__` is the document id"
            ));
        }
    }
    for (path, t) in &m.transforms {
        check_operand(path, t).or_else(bad)?;
    }
    let sentinels = m
        .field_deletes_in_merge
        .iter()
        .chain(m.transforms.iter().map(|(p, _)| p));
    if let Some(msg) = overlap(sentinels) {
        return bad(msg);
    }
    match &m.kind {
        MutationKind::Delete => {
            if let Some((path, _)) = m.transforms.first() {
                return bad(format!("field `{path}` cannot be transformed by a delete"));
            }
            if let Some(path) = m.field_deletes_in_merge.first() {
                return bad(misplaced_delete(path));
            }
        }
        MutationKind::Set { fields, merge } => check_set(m, fields, merge).or_else(bad)?,
        MutationKind::Update { fields } => check_update(m, fields).or_else(bad)?,
    }
    Ok(())
}

/// Every path the mutation names as a target.
fn written_paths(m: &Mutation) -> impl Iterator<Item = &FieldPath> {
    let (updates, merged): (&[_], &[_]) = match &m.kind {
        MutationKind::Update { fields } => (fields, &[]),
        MutationKind::Set {
            merge: SetMerge::MergeFields(paths),
            ..
        } => (&[], paths),
        _ => (&[], &[]),
    };
    updates
        .iter()
        .map(|(p, _)| p)
        .chain(merged)
        .chain(&m.field_deletes_in_merge)
        .chain(m.transforms.iter().map(|(p, _)| p))
}

fn check_operand(path: &FieldPath, t: &FieldTransform) -> Result<(), String> {
    let (op, bad) = match t {
        FieldTransform::Increment(v) => ("increment", !is_number(v)),
        FieldTransform::Maximum(v) => ("maximum", !is_number(v)),
        FieldTransform::Minimum(v) => ("minimum", !is_number(v)),
        FieldTransform::ServerTimestamp => return Ok(()),
        FieldTransform::ArrayUnion(elements) | FieldTransform::ArrayRemove(elements) => {
            if elements.iter().any(|e| matches!(e, Value::Array(_))) {
                return Err(format!(
                    "field `{path}`: arrayUnion and arrayRemove elements cannot be arrays (arrays do not nest)"
                ));
            }
            return Ok(());
        }
    };
    if bad {
        return Err(format!(
            "field `{path}`: {op} needs an integer or double operand"
        ));
    }
    Ok(())
}

fn is_number(v: &Value) -> bool {
    matches!(v, Value::Integer(_) | Value::Double(_))
}

fn misplaced_delete(path: &FieldPath) -> String {
    format!(
        "field `{path}`: FieldValue.delete() can only be used with update() or set() with merge"
    )
}

fn check_set(m: &Mutation, data: &Map, merge: &SetMerge) -> Result<(), String> {
    if data.contains_key(DOCUMENT_ID_FIELD) {
        return Err("field `__name__` cannot be written: `__name__` is the document id".into());
    }
    if let (SetMerge::Overwrite, Some(path)) = (merge, m.field_deletes_in_merge.first()) {
        return Err(misplaced_delete(path));
    }
    for path in &m.field_deletes_in_merge {
        if conflicts_in_map(data, path.segments()) {
            return Err(format!(
                "field `{path}` is both deleted and set in the data"
            ));
        }
    }
    for (path, _) in &m.transforms {
        if conflicts_in_map(data, path.segments()) {
            return Err(format!(
                "field `{path}` is both set in the data and transformed"
            ));
        }
    }
    let SetMerge::MergeFields(listed) = merge else {
        return Ok(());
    };
    let sentinels = m.merge_sentinels();
    for path in listed {
        let present = crate::document::get_path(data, path.segments()).is_some()
            || has_extension(&sentinels, path);
        if !present {
            return Err(format!(
                "field `{path}` is listed in merge fields but missing from the data"
            ));
        }
    }
    let listed: HashSet<&[String]> = listed.iter().map(|l| l.segments()).collect();
    for path in sentinels {
        if !prefixes(path).any(|p| listed.contains(p)) {
            return Err(format!(
                "field `{path}` has a FieldValue sentinel but is not in the merge fields"
            ));
        }
    }
    Ok(())
}

fn check_update(m: &Mutation, fields: &[(FieldPath, Option<Value>)]) -> Result<(), String> {
    if m.precondition == Precondition::Exists(false) {
        return Err(
            "an update requires the document to exist, so precondition exists=false cannot hold"
                .into(),
        );
    }
    if let Some(path) = m.field_deletes_in_merge.first() {
        return Err(format!(
            "field `{path}`: an update deletes fields with a `None` value, not a merge delete"
        ));
    }
    if let Some(msg) = overlap(fields.iter().map(|(p, _)| p)) {
        return Err(msg);
    }
    // The written paths do not overlap (checked above), so a transform conflicts with a
    // write on or above it (found by looking its prefixes up) or with one below it (the
    // first written path after it in sorted order, if any extends it).
    let by_path: HashMap<&[String], (&FieldPath, &Option<Value>)> =
        fields.iter().map(|(p, v)| (p.segments(), (p, v))).collect();
    let mut sorted: Vec<&FieldPath> = fields.iter().map(|(p, _)| p).collect();
    crate::sort::sort(&mut sorted);
    for (t, _) in &m.transforms {
        for prefix in prefixes(t) {
            let Some((path, value)) = by_path.get(prefix) else {
                continue;
            };
            let rest = &t.segments()[prefix.len()..];
            if value.as_ref().is_none_or(|v| conflicts_in_value(v, rest)) {
                return Err(format!(
                    "field `{t}` is transformed but the same update also writes `{path}`"
                ));
            }
        }
        let below = sorted.partition_point(|p| *p <= t);
        if let Some(path) = sorted.get(below).filter(|p| p.starts_with(t)) {
            return Err(format!(
                "field `{t}` is transformed but the same update also writes `{path}`"
            ));
        }
    }
    Ok(())
}

/// Every prefix of `path`'s segments, itself included, shortest first.
fn prefixes(path: &FieldPath) -> impl Iterator<Item = &[String]> {
    let s = path.segments();
    (1..=s.len()).map(move |n| &s[..n])
}

/// Whether some path of `sorted` equals or extends `path`: in segment order the extensions of
/// a path directly follow it, so the first one not below it is the only candidate.
fn has_extension(sorted: &[&FieldPath], path: &FieldPath) -> bool {
    let at = sorted.partition_point(|p| *p < path);
    sorted.get(at).is_some_and(|p| p.starts_with(path))
}

/// Whether writing at `segments` would replace part of `map` as written: a value already
/// sits there, or a non-map sits on the way. Absent keys on the way are no conflict.
fn conflicts_in_map(map: &Map, segments: &[String]) -> bool {
    let (first, rest) = segments.split_first().expect("field paths have segments");
    map.get(first).is_some_and(|v| conflicts_in_value(v, rest))
}

/// [`conflicts_in_map`] below a written `value`; an empty `rest` is the value itself.
fn conflicts_in_value(value: &Value, rest: &[String]) -> bool {
    match value {
        _ if rest.is_empty() => true,
        Value::Map(inner) => conflicts_in_map(inner, rest),
        _ => true,
    }
}

/// A message if two of `paths` are equal or one contains the other.
///
/// Sorted lexicographically by segments, the extensions of a path directly follow it, so an
/// overlapping pair exists exactly when an adjacent pair overlaps.
fn overlap<'a>(paths: impl Iterator<Item = &'a FieldPath>) -> Option<String> {
    let mut sorted: Vec<&FieldPath> = paths.collect();
    crate::sort::sort(&mut sorted);
    sorted.windows(2).find_map(|w| {
        if w[0] == w[1] {
            Some(format!("field `{}` is written twice", w[0]))
        } else if w[1].starts_with(w[0]) {
            Some(format!(
                "field paths `{}` and `{}` overlap: one contains the other",
                w[0], w[1]
            ))
        } else {
            None
        }
    })
}
