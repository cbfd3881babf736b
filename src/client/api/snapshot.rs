//! `DocumentSnapshot`, `QuerySnapshot`, `SnapshotMetadata` and aggregate snapshots.

use std::collections::HashSet;
use std::rc::Rc;

use js_sys::{Array, Function, Object, Reflect};
use wasm_bindgen::prelude::*;

use super::{Db, DocumentReference, Query};
use crate::client::convert::{from_value, map_to_js};
use crate::client::engine::{show_timestamps, Pending, PendingTimestamp, ServerTimestamps};
use hearth_core::document::Document;
use hearth_core::path::{DocumentName, FieldPath};
use hearth_core::query::view::{ChangeType, DocChange, ResultSnapshot};

/// Whether a snapshot has local writes not yet acknowledged, and whether it came from the
/// cache rather than a current relay result.
#[wasm_bindgen]
#[derive(Clone, Copy)]
pub struct SnapshotMetadata {
    /// `hasPendingWrites`.
    pending: bool,
    /// `fromCache`.
    cache: bool,
}

#[wasm_bindgen]
impl SnapshotMetadata {
    #[wasm_bindgen(getter, js_name = hasPendingWrites)]
    pub fn has_pending_writes(&self) -> bool {
        self.pending
    }

    #[wasm_bindgen(getter, js_name = fromCache)]
    pub fn from_cache(&self) -> bool {
        self.cache
    }

    #[wasm_bindgen(js_name = isEqual)]
    pub fn is_equal(&self, other: &SnapshotMetadata) -> bool {
        self.pending == other.pending && self.cache == other.cache
    }
}

/// One document as read: its data (or absence) and metadata.
#[wasm_bindgen]
#[derive(Clone)]
pub struct DocumentSnapshot {
    /// The database, for `ref`.
    pub(crate) db: Rc<Db>,
    /// The document's full path (also when it does not exist).
    pub(crate) name: DocumentName,
    /// The document as read; `None`: it does not exist.
    pub(crate) doc: Option<Document>,
    /// Its metadata.
    pub(crate) meta: SnapshotMetadata,
    /// Its fields holding a pending server timestamp's estimate (with a pending write only).
    pub(crate) timestamps: Rc<[PendingTimestamp]>,
}

impl DocumentSnapshot {
    pub(crate) fn new(
        db: &Rc<Db>,
        name: DocumentName,
        doc: Option<Document>,
        pending: bool,
        cache: bool,
    ) -> DocumentSnapshot {
        let timestamps = if pending && doc.is_some() {
            db.pending_timestamps(&name).into()
        } else {
            Rc::from([])
        };
        DocumentSnapshot {
            db: db.clone(),
            name,
            doc,
            meta: SnapshotMetadata { pending, cache },
            timestamps,
        }
    }
}

#[wasm_bindgen]
impl DocumentSnapshot {
    /// Whether `other` shows the same document of the same database, with the same data
    /// and metadata (Firestore's `isEqual`).
    #[wasm_bindgen(js_name = isEqual)]
    pub fn is_equal(&self, other: &DocumentSnapshot) -> bool {
        Rc::ptr_eq(&self.db, &other.db)
            && self.name == other.name
            && self.doc == other.doc
            && self.meta.is_equal(&other.meta)
    }

    #[wasm_bindgen(getter)]
    #[wasm_bindgen(unchecked_return_type = "string")]
    pub fn id(&self) -> JsValue {
        crate::client::js::interned(self.name.id())
    }

    #[wasm_bindgen(getter, js_name = ref)]
    pub fn reference(&self) -> DocumentReference {
        DocumentReference::new(&self.db, self.name.clone())
    }

    /// Firestore's namespaced API has `exists` as a property.
    #[wasm_bindgen(getter)]
    pub fn exists(&self) -> bool {
        self.doc.is_some()
    }

    /// The fields as a plain object, or `undefined` when the document does not exist.
    /// `options.serverTimestamps` says how a server timestamp still pending shows:
    /// `'none'` (the default: `null`), `'estimate'` (the local clock's) or `'previous'` (the
    /// value before the write, or `null`).
    pub fn data(&self, options: Option<Object>) -> Result<JsValue, JsValue> {
        let mode = server_timestamps(options.as_ref())?;
        Ok(match &self.doc {
            Some(d) if self.timestamps.is_empty() => map_to_js(&d.fields),
            Some(d) => map_to_js(&show_timestamps(&d.fields, &self.timestamps, mode)),
            None => JsValue::UNDEFINED,
        })
    }

    /// One field by path (string or FieldPath), or `undefined`; `options` as for `data`.
    pub fn get(&self, field: JsValue, options: Option<Object>) -> Result<JsValue, JsValue> {
        let path = crate::client::convert::field_path_arg(&field)?;
        let mode = server_timestamps(options.as_ref())?;
        if let (Some(d), false) = (&self.doc, self.timestamps.is_empty()) {
            let shown = Document {
                fields: std::sync::Arc::new(show_timestamps(&d.fields, &self.timestamps, mode)),
                ..d.clone()
            };
            return Ok(shown
                .field(&path)
                .map_or(JsValue::UNDEFINED, |v| from_value(&v)));
        }
        Ok(self
            .field(&path)
            .map_or(JsValue::UNDEFINED, |v| from_value(&v)))
    }

    #[wasm_bindgen(getter)]
    pub fn metadata(&self) -> SnapshotMetadata {
        self.meta
    }

    #[wasm_bindgen(getter, js_name = __hearthKind)]
    pub fn kind(&self) -> String {
        "snapshot".into()
    }

    /// The document's path (for cursors built from snapshots).
    #[wasm_bindgen(getter, js_name = __hearthPath)]
    pub fn hearth_path(&self) -> String {
        self.name.to_string()
    }
}

impl DocumentSnapshot {
    pub(crate) fn field(&self, path: &FieldPath) -> Option<hearth_core::value::Value> {
        self.doc.as_ref()?.field(path).map(|v| v.into_owned())
    }
}

/// A query's documents, each with whether a pending write touches it.
pub(crate) enum ResultDocs {
    /// A one-time read's, listed.
    Listed(Vec<(Document, bool)>),
    /// A listener's: its view's result at the snapshot (shared with the view, O(1) to make)
    /// and the names with pending writes; documents are made for JS only when asked for.
    Live(ResultSnapshot, Pending),
}

impl ResultDocs {
    fn len(&self) -> usize {
        match self {
            ResultDocs::Listed(docs) => docs.len(),
            ResultDocs::Live(docs, _) => docs.len(),
        }
    }

    /// The documents in query order, each with whether a pending write touches it.
    fn each(&self) -> Box<dyn Iterator<Item = (&Document, bool)> + '_> {
        match self {
            ResultDocs::Listed(docs) => Box::new(docs.iter().map(|(d, p)| (d, *p))),
            ResultDocs::Live(docs, pending) => {
                Box::new(docs.iter().map(|d| (d, pending.contains(&d.name))))
            }
        }
    }

    /// Whether a pending write touches a document of the result, by name.
    fn pending(&self) -> Box<dyn Fn(&DocumentName) -> bool + '_> {
        match self {
            ResultDocs::Listed(docs) => {
                let names: HashSet<&DocumentName> = docs
                    .iter()
                    .filter(|(_, p)| *p)
                    .map(|(d, _)| &d.name)
                    .collect();
                Box::new(move |n| names.contains(n))
            }
            ResultDocs::Live(_, pending) => Box::new(|n| pending.contains(n)),
        }
    }
}

/// A query's result.
#[wasm_bindgen]
pub struct QuerySnapshot {
    /// The database, for the documents' snapshots and `query`.
    pub(crate) db: Rc<Db>,
    /// The query this is a result of (`snapshot.query`).
    pub(crate) query: hearth_core::query::model::Query,
    /// The result in query order.
    pub(crate) docs: ResultDocs,
    /// What `docChanges()` reports.
    pub(crate) changes: Vec<DocChange>,
    /// The whole result's metadata.
    pub(crate) meta: SnapshotMetadata,
}

impl QuerySnapshot {
    /// A snapshot of `docs`; `pending`: whether a pending write touches any of them.
    pub(crate) fn new(
        db: &Rc<Db>,
        query: hearth_core::query::model::Query,
        (docs, pending): (ResultDocs, bool),
        changes: Vec<DocChange>,
        cache: bool,
    ) -> QuerySnapshot {
        QuerySnapshot {
            db: db.clone(),
            query,
            docs,
            changes,
            meta: SnapshotMetadata { pending, cache },
        }
    }

    /// A one-time read's snapshot of `docs`.
    pub(crate) fn listed(
        db: &Rc<Db>,
        query: hearth_core::query::model::Query,
        docs: Vec<(Document, bool)>,
        changes: Vec<DocChange>,
        cache: bool,
    ) -> QuerySnapshot {
        let pending = docs.iter().any(|(_, p)| *p);
        QuerySnapshot::new(
            db,
            query,
            (ResultDocs::Listed(docs), pending),
            changes,
            cache,
        )
    }

    fn snapshot(&self, d: &Document, pending: bool) -> DocumentSnapshot {
        DocumentSnapshot::new(
            &self.db,
            d.name.clone(),
            Some(d.clone()),
            pending,
            self.meta.cache,
        )
    }
}

#[wasm_bindgen]
impl QuerySnapshot {
    /// Whether `other` is a result of the same query of the same database with the same
    /// documents, changes and metadata (Firestore's `isEqual`).
    #[wasm_bindgen(js_name = isEqual)]
    pub fn is_equal(&self, other: &QuerySnapshot) -> bool {
        Rc::ptr_eq(&self.db, &other.db)
            && self.query == other.query
            && self.docs.len() == other.docs.len()
            && self.docs.each().zip(other.docs.each()).all(|(a, b)| a == b)
            && self.changes == other.changes
            && self.meta.is_equal(&other.meta)
    }

    #[wasm_bindgen(getter)]
    pub fn docs(&self) -> Array {
        self.docs
            .each()
            .map(|(d, p)| JsValue::from(self.snapshot(d, p)))
            .collect()
    }

    #[wasm_bindgen(getter)]
    pub fn size(&self) -> usize {
        self.docs.len()
    }

    #[wasm_bindgen(getter)]
    pub fn empty(&self) -> bool {
        self.docs.len() == 0
    }

    #[wasm_bindgen(js_name = forEach)]
    pub fn for_each(&self, callback: &Function) -> Result<(), JsValue> {
        for (d, p) in self.docs.each() {
            callback.call1(&JsValue::NULL, &JsValue::from(self.snapshot(d, p)))?;
        }
        Ok(())
    }

    /// The changes since the previous snapshot of this listener (all `added` for the first),
    /// as `{ type, doc, oldIndex, newIndex }` with -1 for a missing index.
    #[wasm_bindgen(js_name = docChanges)]
    pub fn doc_changes(&self) -> Array {
        // A removed document is not in the result, whose pending writes these are.
        let in_result = self.docs.pending();
        let pending = |c: &DocChange| c.kind != ChangeType::Removed && in_result(&c.doc.name);
        self.changes
            .iter()
            .map(|c| {
                let o = Object::new();
                let t = match c.kind {
                    ChangeType::Added => "added",
                    ChangeType::Modified => "modified",
                    ChangeType::Removed => "removed",
                };
                let set = |k: &str, v: &JsValue| crate::client::js::set_fresh(&o, &k.into(), v);
                set("type", &t.into());
                set("doc", &JsValue::from(self.snapshot(&c.doc, pending(c))));
                let idx = |i: Option<usize>| i.map_or(-1.0, |i| i as f64);
                set("oldIndex", &idx(c.old_index).into());
                set("newIndex", &idx(c.new_index).into());
                JsValue::from(o)
            })
            .collect()
    }

    #[wasm_bindgen(getter)]
    pub fn metadata(&self) -> SnapshotMetadata {
        self.meta
    }

    #[wasm_bindgen(getter)]
    pub fn query(&self) -> Query {
        Query::from_core(&self.db, self.query.clone())
    }
}

/// The result of an aggregation: `data()` maps each alias to its value.
#[wasm_bindgen]
pub struct AggregateQuerySnapshot {
    /// Each alias with its value, in the order the aggregations were given.
    pub(crate) values: Vec<(String, hearth_core::value::Value)>,
}

#[wasm_bindgen]
impl AggregateQuerySnapshot {
    pub fn data(&self) -> JsValue {
        let o = Object::new();
        for (k, v) in &self.values {
            let _ = Reflect::set(&o, &k.into(), &from_value(v));
        }
        o.into()
    }
}

/// The `serverTimestamps` option of `data()` / `get()` (absent: `'none'`).
fn server_timestamps(options: Option<&Object>) -> Result<ServerTimestamps, JsValue> {
    let Some(options) = options else {
        return Ok(ServerTimestamps::None);
    };
    let v = Reflect::get(options, &"serverTimestamps".into())?;
    match v.as_string().as_deref() {
        None if v.is_undefined() => Ok(ServerTimestamps::None),
        Some("none") => Ok(ServerTimestamps::None),
        Some("estimate") => Ok(ServerTimestamps::Estimate),
        Some("previous") => Ok(ServerTimestamps::Previous),
        _ => Err(crate::client::error::ClientError::invalid(
            "serverTimestamps must be 'estimate', 'previous' or 'none'",
        )
        .to_js()),
    }
}
