//! Key layouts of the documents table and the index table, and index maintenance: the exact
//! entries to delete and insert when a document changes.
//!
//! ```text
//! document key      = segments(parent collection) string(id)
//! index entry key   = index-id(8) scope value(dir)* name(name_dir) kinds
//!   scope           = segments(parent collection)   for COLLECTION scope
//!                   = (nothing)                     for COLLECTION_GROUP scope
//!   name            = string(id)                    for COLLECTION scope (parent is in scope)
//!                   = segments(full name)           for COLLECTION_GROUP scope
//!   kinds           = number kinds trailer (key.rs), which never affects order
//! ```
//! (`segments`, `string`, `value` and `kinds` are the encodings of `encoding::key`.)
//!
//! Documents of one collection are contiguous in the documents table and ordered by id, so
//! the table doubles as each collection's `__name__` index. In an index, entries with equal
//! values order by document name, in the direction of the index's name component.

use std::collections::{BTreeSet, HashSet};

use super::config::{FieldMode, QueryScope};
use super::def::{mode_direction, IndexCatalog, IndexDef};
use crate::document::Document;
use crate::encoding::key::{
    encode_value, split_kinds, write_kinds, write_name, write_segments, write_string, write_value,
    Direction, KeyDecodeError, KeyReader,
};
use crate::path::{CollectionPath, DocumentName};
use crate::value::Value;

/// The documents-table prefix shared by every document of `collection`.
pub fn collection_prefix(collection: &CollectionPath) -> Vec<u8> {
    let mut out = Vec::new();
    write_segments(collection.segments(), &mut out);
    out
}

/// The documents-table key of `name`.
pub fn document_key(name: &DocumentName) -> Vec<u8> {
    let mut out = collection_prefix(&name.parent());
    write_string(name.id(), Direction::Ascending, &mut out);
    out
}

/// Decodes a documents-table key.
pub fn decode_document_key(key: &[u8]) -> Result<DocumentName, KeyDecodeError> {
    let mut r = KeyReader::new(key);
    let mut segs = r.segments()?;
    segs.push(r.string()?);
    if !r.is_empty() {
        return Err(KeyDecodeError::Trailing);
    }
    DocumentName::from_segments(segs).map_err(|e| KeyDecodeError::Invalid(e.to_string()))
}

/// The prefix of every entry of `def` for documents in `parent` (ignored for group scope).
pub fn index_prefix(def: &IndexDef, parent: &CollectionPath) -> Vec<u8> {
    let mut out = def.id().to_vec();
    if def.scope() == QueryScope::Collection {
        write_segments(parent.segments(), &mut out);
    }
    out
}

/// The prefix of every entry of a collection-group index.
pub fn group_prefix(def: &IndexDef) -> Vec<u8> {
    debug_assert_eq!(def.scope(), QueryScope::CollectionGroup);
    def.id().to_vec()
}

/// Appends the name component of an entry.
pub fn write_entry_name(def: &IndexDef, name: &DocumentName, out: &mut Vec<u8>) {
    match def.scope() {
        QueryScope::Collection => write_string(name.id(), def.name_dir(), out),
        QueryScope::CollectionGroup => write_name(name, def.name_dir(), out),
    }
}

/// The direction a field's values are written in (array-contains elements ascending).
pub fn field_direction(mode: FieldMode) -> Direction {
    mode_direction(mode).unwrap_or(Direction::Ascending)
}

/// The entries of `def` for `doc`: none when a field is missing (or an array-contains field is
/// not an array), one per order-distinct element (its first occurrence) for an
/// array-contains field.
pub fn index_entries(def: &IndexDef, doc: &Document) -> Vec<Vec<u8>> {
    let mut per_field: Vec<Vec<Value>> = Vec::with_capacity(def.fields().len());
    for (path, mode) in def.fields() {
        let Some(v) = doc.field(path) else {
            return Vec::new();
        };
        let v = v.into_owned();
        match mode {
            FieldMode::ArrayContains => match v {
                Value::Array(items) => {
                    // Distinct in the index's order, not strictly: `1` and `1.0` (or `0` and
                    // `-0.0`) encode to the same bytes, and two entries that differ only in
                    // their kinds trailer would make one scan return the document twice.
                    let distinct = distinct_in_order(items);
                    if distinct.is_empty() {
                        return Vec::new();
                    }
                    per_field.push(distinct);
                }
                _ => return Vec::new(),
            },
            _ => per_field.push(vec![v]),
        }
    }
    let prefix = index_prefix(def, &doc.name.parent());
    let mut out = Vec::new();
    let mut choice = vec![0usize; per_field.len()];
    loop {
        let mut key = prefix.clone();
        let mut kinds = Vec::new();
        for (i, (_, mode)) in def.fields().iter().enumerate() {
            write_value(
                &per_field[i][choice[i]],
                field_direction(*mode),
                &mut key,
                &mut kinds,
            );
        }
        write_entry_name(def, &doc.name, &mut key);
        write_kinds(&kinds, &mut key);
        out.push(key);
        // Odometer over the (at most one) multi-valued field.
        let mut i = per_field.len();
        loop {
            if i == 0 {
                return out;
            }
            i -= 1;
            choice[i] += 1;
            if choice[i] < per_field[i].len() {
                break;
            }
            choice[i] = 0;
        }
    }
}

/// The first occurrence of each order-distinct value of `items`, in their order. Values equal
/// in the query order have the same order-preserving encoding (number kinds dropped) and
/// distinct ones differ, so the encodings key a hash set: linear in the array, not quadratic.
pub fn distinct_in_order(items: Vec<Value>) -> Vec<Value> {
    let mut seen: HashSet<Vec<u8>> = HashSet::with_capacity(items.len());
    items
        .into_iter()
        .filter(|item| seen.insert(encode_value(item, Direction::Ascending)))
        .collect()
}

/// Every index entry of `doc` under `catalog`.
pub fn document_entries(catalog: &IndexCatalog, doc: &Document) -> BTreeSet<Vec<u8>> {
    crate::sort::set_of(
        catalog
            .indexes_for(doc)
            .iter()
            .flat_map(|def| index_entries(def, doc)),
    )
}

/// The index entries a document change removes and adds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IndexDiff {
    /// Entries of the old document that the new one lacks, in key order.
    pub deletes: Vec<Vec<u8>>,
    /// Entries of the new document that the old one lacked, in key order (never one that
    /// is also deleted).
    pub inserts: Vec<Vec<u8>>,
    /// How many entries the new document has in all (0 when it is absent).
    pub entries: usize,
}

/// Exactly the entries to delete and insert when `old` becomes `new` (either may be absent).
/// Entries both versions share are left alone.
pub fn index_diff(
    catalog: &IndexCatalog,
    old: Option<&Document>,
    new: Option<&Document>,
) -> IndexDiff {
    let old_set = old
        .map(|d| document_entries(catalog, d))
        .unwrap_or_default();
    let new_set = new
        .map(|d| document_entries(catalog, d))
        .unwrap_or_default();
    IndexDiff {
        deletes: old_set.difference(&new_set).cloned().collect(),
        inserts: new_set.difference(&old_set).cloned().collect(),
        entries: new_set.len(),
    }
}

/// A decoded index entry.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodedEntry {
    /// One value per field of the index, in its order (an array-contains field's element).
    pub values: Vec<Value>,
    /// The document the entry belongs to.
    pub name: DocumentName,
}

/// Decodes an entry of `def`. For collection scope the parent comes from the key's scope.
pub fn decode_entry(def: &IndexDef, key: &[u8]) -> Result<DecodedEntry, KeyDecodeError> {
    let (ordered, kinds) = split_kinds(key)?;
    let Some(rest) = ordered.strip_prefix(def.id().as_slice()) else {
        return Err(KeyDecodeError::Invalid("entry of another index".into()));
    };
    let mut r = KeyReader::new(rest);
    let parent = match def.scope() {
        QueryScope::Collection => Some(r.segments()?),
        QueryScope::CollectionGroup => None,
    };
    let mut kinds_iter = kinds.iter();
    let mut values = Vec::with_capacity(def.fields().len());
    for (_, mode) in def.fields() {
        r.set_direction(field_direction(*mode));
        values.push(r.value(&mut kinds_iter)?);
    }
    r.set_direction(def.name_dir());
    let name = match parent {
        Some(mut segs) => {
            segs.push(r.string()?);
            DocumentName::from_segments(segs).map_err(|e| KeyDecodeError::Invalid(e.to_string()))?
        }
        None => r.name()?,
    };
    if !r.is_empty() {
        return Err(KeyDecodeError::Trailing);
    }
    // Every number has its kind (the trailer holds at most 255): a short trailer would read
    // integers back as doubles, a truncated key as a different entry.
    let numbers: usize = values.iter().map(count_numbers).sum();
    if numbers != kinds.len() && !(kinds.len() == 255 && numbers > 255) {
        return Err(KeyDecodeError::Invalid(format!(
            "{numbers} numbers but {} number kinds",
            kinds.len()
        )));
    }
    Ok(DecodedEntry { values, name })
}

/// The numbers in `v` that carry a kind in a key (every number but NaN).
fn count_numbers(v: &Value) -> usize {
    match v {
        Value::Integer(_) => 1,
        Value::Double(d) => usize::from(!d.is_nan()),
        Value::Array(a) => a.iter().map(count_numbers).sum(),
        Value::Map(m) => m.values().map(count_numbers).sum(),
        _ => 0,
    }
}
