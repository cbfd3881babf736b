//! The write step of a mutation: overwrite, merge and field-path update of a field map.
//!
//! Every write here is a list of "set this path" and "delete this path" operations, Firestore's
//! field mask. Validation guarantees the paths of one mutation never overlap (none is a prefix
//! of another), so the order in which they are performed does not change the result.

use crate::document::get_path;
use crate::path::FieldPath;
use crate::value::{Map, Value};

use super::{Mutation, SetMerge};

/// Writes `value` at `segments`, creating missing intermediate maps and replacing an
/// intermediate that is not a map (Firestore's `ObjectValue.set`).
pub(super) fn set_path(map: &mut Map, segments: &[String], value: Value) {
    let (first, rest) = segments
        .split_first()
        .expect("a validated field path has segments");
    if rest.is_empty() {
        map.insert(first.clone(), value);
        return;
    }
    let slot = map
        .entry(first.clone())
        .or_insert_with(|| Value::Map(Map::new()));
    if !matches!(slot, Value::Map(_)) {
        *slot = Value::Map(Map::new());
    }
    let Value::Map(inner) = slot else {
        unreachable!("the slot was just made a map")
    };
    set_path(inner, rest, value);
}

/// Removes the field at `segments`. A missing field, or an intermediate that is not a map,
/// leaves the map unchanged; parents emptied by the removal stay as empty maps.
pub(super) fn delete_path(map: &mut Map, segments: &[String]) {
    let (first, rest) = segments
        .split_first()
        .expect("a validated field path has segments");
    if rest.is_empty() {
        map.remove(first);
    } else if let Some(Value::Map(inner)) = map.get_mut(first) {
        delete_path(inner, rest);
    }
}

/// The fields after a `set` of `data` over `base` (`None` when the document is absent).
pub(super) fn apply_set(base: Option<&Map>, data: &Map, merge: &SetMerge, m: &Mutation) -> Map {
    let mut out = match merge {
        SetMerge::Overwrite => return data.clone(),
        SetMerge::MergeAll | SetMerge::MergeFields(_) => base.cloned().unwrap_or_default(),
    };
    if let SetMerge::MergeFields(paths) = merge {
        // A listed path absent from the data is written by the deletes and transforms
        // under it (validation requires one), so only present values are copied here.
        for path in paths {
            if let Some(v) = get_path(data, path.segments()) {
                set_path(&mut out, path.segments(), v.clone());
            }
        }
    } else {
        let sentinels = m.merge_sentinels();
        merge_leaves(&mut out, data, &mut Vec::new(), &sentinels);
    }
    for path in &m.field_deletes_in_merge {
        delete_path(&mut out, path.segments());
    }
    out
}

/// Writes every leaf of `data` into `out`. A leaf is a non-map value or an empty map, except
/// an empty map with a delete or transform under it: that map only held the sentinels
/// (`{ a: { b: FieldValue.delete() } }` parses to data `{ a: {} }`), so it writes nothing.
/// `sentinels` is sorted: the paths strictly under a prefix directly follow it.
fn merge_leaves(out: &mut Map, data: &Map, prefix: &mut Vec<String>, sentinels: &[&FieldPath]) {
    for (key, value) in data {
        prefix.push(key.clone());
        match value {
            Value::Map(inner) if !inner.is_empty() => merge_leaves(out, inner, prefix, sentinels),
            Value::Map(_)
                if sentinels
                    .get(sentinels.partition_point(|s| s.segments() <= prefix.as_slice()))
                    .is_some_and(|s| s.segments().starts_with(prefix)) => {}
            leaf => set_path(out, prefix, leaf.clone()),
        }
        prefix.pop();
    }
}

/// The fields after an `update` of `base`: each path set or deleted.
pub(super) fn apply_update(base: &Map, fields: &[(FieldPath, Option<Value>)]) -> Map {
    let mut out = base.clone();
    for (path, value) in fields {
        match value {
            Some(v) => set_path(&mut out, path.segments(), v.clone()),
            None => delete_path(&mut out, path.segments()),
        }
    }
    out
}
