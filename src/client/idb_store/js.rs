//! The JavaScript side of the IndexedDB store: bindings web-sys lacks, key and value
//! conversions, and the mapping of `DOMException`s to [`ClientError`] codes.

use hearth_core::error::ErrorCode;
use js_sys::{Array, Object, Reflect, Uint8Array};
use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::{IdbDatabase, IdbFactory, IdbIndex, IdbObjectStore, IdbRequest, IdbTransaction};

use super::Key;
use crate::client::error::ClientError;

#[wasm_bindgen]
extern "C" {
    /// An `IDBDatabase`, for the `transaction` overload web-sys lacks.
    type Database;
    /// `IDBDatabase.transaction(stores, mode, options)` (for `durability`).
    #[wasm_bindgen(method, catch, js_name = transaction)]
    fn transaction_with_options(
        this: &Database,
        stores: &Array,
        mode: &str,
        options: &Object,
    ) -> Result<IdbTransaction, JsValue>;

    /// An `IDBObjectStore`, for the IndexedDB 3.0 method web-sys lacks.
    type ObjectStore;
    /// `IDBObjectStore.getAllRecords({query, count, direction})` (Chromium 141+): keys and
    /// values of a range, in either direction, in one request.
    #[wasm_bindgen(method, catch, js_name = getAllRecords)]
    fn get_all_records(this: &ObjectStore, options: &Object) -> Result<IdbRequest, JsValue>;

    /// An `IDBIndex`, for the same method.
    type Index;
    #[wasm_bindgen(method, catch, js_name = getAllRecords)]
    fn get_all_records(this: &Index, options: &Object) -> Result<IdbRequest, JsValue>;
    /// `IDBIndex.getAllKeys({query, count, direction})` (IndexedDB 3.0, with getAllRecords):
    /// the primary keys of a range, in either direction.
    #[wasm_bindgen(method, catch, js_name = getAllKeys)]
    fn get_all_keys(this: &Index, options: &Object) -> Result<IdbRequest, JsValue>;

    /// One element of `getAllRecords`' result.
    pub(super) type IdbRecord;
    #[wasm_bindgen(method, getter)]
    pub(super) fn key(this: &IdbRecord) -> JsValue;
    #[wasm_bindgen(method, getter, js_name = primaryKey)]
    pub(super) fn primary_key(this: &IdbRecord) -> JsValue;
    #[wasm_bindgen(method, getter)]
    pub(super) fn value(this: &IdbRecord) -> JsValue;
}

/// `db.transaction(stores, mode, options)`.
pub(super) fn transaction_with_options(
    db: &IdbDatabase,
    stores: &Array,
    mode: &str,
    options: &Object,
) -> Result<IdbTransaction, JsValue> {
    db.unchecked_ref::<Database>()
        .transaction_with_options(stores, mode, options)
}

/// `store.getAllRecords(options)`; only where [`has_get_all_records`].
pub(super) fn get_all_records(
    store: &IdbObjectStore,
    options: &Object,
) -> Result<IdbRequest, JsValue> {
    store
        .unchecked_ref::<ObjectStore>()
        .get_all_records(options)
}

/// `index.getAllRecords(options)`; only where [`has_get_all_records`].
pub(super) fn index_get_all_records(
    index: &IdbIndex,
    options: &Object,
) -> Result<IdbRequest, JsValue> {
    index.unchecked_ref::<Index>().get_all_records(options)
}

/// `index.getAllKeys(options)`; only where [`has_get_all_records`].
pub(super) fn index_get_all_keys(
    index: &IdbIndex,
    options: &Object,
) -> Result<IdbRequest, JsValue> {
    index.unchecked_ref::<Index>().get_all_keys(options)
}

/// The index entry keys of a `documents` record (`None` for a schema-1 record).
pub(super) fn record_index_keys(record: &JsValue) -> Option<Vec<Vec<u8>>> {
    let keys = Reflect::get(record, &crate::client::js::interned(RECORD_KEYS)).ok()?;
    let keys = keys.dyn_ref::<Array>()?;
    keys.iter()
        .map(|k| k.dyn_ref::<Uint8Array>().map(Uint8Array::to_vec))
        .collect()
}

/// A record of `documents`: `{d, k, t}`, where `d` is the encoded document, `k` the array of
/// its index entry keys (the key path of the multi-entry `entries` index) and `t` when it was last
/// written (for eviction). All the bytes are views into one buffer, copied out of
/// wasm memory at once, which the structured clone also stores once.
pub(super) fn document_record(doc: &[u8], index_keys: &[Vec<u8>], used: f64) -> JsValue {
    let total = doc.len() + index_keys.iter().map(Vec::len).sum::<usize>();
    let mut joined = Vec::with_capacity(total);
    joined.extend_from_slice(doc);
    for k in index_keys {
        joined.extend_from_slice(k);
    }
    let buffer = Uint8Array::from(&joined[..]);
    let keys = Array::new_with_length(index_keys.len() as u32);
    let mut at = doc.len() as u32;
    for (i, k) in index_keys.iter().enumerate() {
        let end = at + k.len() as u32;
        keys.set(i as u32, buffer.subarray(at, end).into());
        at = end;
    }
    object(&[
        (
            RECORD_DOCUMENT,
            &buffer.subarray(0, doc.len() as u32).into(),
        ),
        (RECORD_KEYS, &keys.into()),
        (RECORD_USED, &JsValue::from_f64(used)),
    ])
    .into()
}

/// Property of a `documents` record holding the encoded document.
pub(super) const RECORD_DOCUMENT: &str = "d";
/// Property holding the index entry keys (the key path of [`INDEX_ENTRIES`]).
pub(super) const RECORD_KEYS: &str = "k";
/// Property holding the last write, in milliseconds since the epoch.
pub(super) const RECORD_USED: &str = "t";
/// The multi-entry index of `documents` over every record's index entry keys.
pub(super) const INDEX_ENTRIES: &str = "entries";

/// The encoded document of a `documents` record (a schema-1 record is the bare bytes).
pub(super) fn record_document(record: &JsValue) -> Vec<u8> {
    record_document_array(record).map_or_else(Vec::new, |d| d.to_vec())
}

/// The encoded document of a `documents` record, left in JavaScript.
fn record_document_array(record: &JsValue) -> Option<Uint8Array> {
    let d = Reflect::get(record, &crate::client::js::interned(RECORD_DOCUMENT)).ok()?;
    if let Some(d) = d.dyn_ref::<Uint8Array>() {
        return Some(d.clone());
    }
    record.dyn_ref::<Uint8Array>().cloned()
}

/// When a `documents` record was last written (0 for a schema-1 record).
pub(super) fn record_used(record: &JsValue) -> f64 {
    Reflect::get(record, &crate::client::js::interned(RECORD_USED))
        .ok()
        .and_then(|t| t.as_f64())
        .unwrap_or(0.0)
}

/// The bytes a `documents` record takes: its document and index keys (for the cache budget).
pub(super) fn record_size(record: &JsValue) -> u64 {
    // Measured in JavaScript: a collection walks every record, and copying each document
    // into wasm only to take its length was the walk's main cost.
    let doc = record_document_array(record).map_or(0, |d| d.length() as u64);
    let keys = Reflect::get(record, &crate::client::js::interned(RECORD_KEYS))
        .ok()
        .filter(Array::is_array)
        .map(|k| {
            Array::from(&k)
                .iter()
                .map(|k| Uint8Array::new(&k).length() as u64)
                .sum::<u64>()
        })
        .unwrap_or(0);
    doc + keys
}

/// The global `indexedDB`, or `unavailable` when this context has none (a non-browser
/// runtime, an opaque origin or a sandboxed frame, some private-browsing modes).
pub(super) fn factory() -> Result<IdbFactory, ClientError> {
    let unavailable = |detail: String| {
        ClientError::new(
            ErrorCode::Unavailable,
            format!(
                "IndexedDB is not available in this context ({detail}); Hearth needs it to \
                 persist data: use a regular browsing window served over http(s)"
            ),
        )
    };
    let value = Reflect::get(&js_sys::global(), &JsValue::from_str("indexedDB"))
        .map_err(|e| unavailable(describe(&e)))?;
    if value.is_undefined() || value.is_null() {
        return Err(unavailable("no `indexedDB` global".into()));
    }
    value
        .dyn_into::<IdbFactory>()
        .map_err(|_| unavailable("`indexedDB` is not an IDBFactory".into()))
}

/// Whether `IDBObjectStore.prototype.getAllRecords` exists.
pub(super) fn has_get_all_records() -> bool {
    Reflect::get(&js_sys::global(), &JsValue::from_str("IDBObjectStore"))
        .and_then(|c| Reflect::get(&c, &JsValue::from_str("prototype")))
        .and_then(|p| Reflect::has(&p, &JsValue::from_str("getAllRecords")))
        .unwrap_or(false)
}

/// A plain object `{k: v, ...}`.
pub(super) fn object(fields: &[(&str, &JsValue)]) -> Object {
    let o = Object::new();
    for (k, v) in fields {
        // The few property names of records and options, each made once as a JS string.
        crate::client::js::set_fresh(&o, &crate::client::js::interned(k), v);
    }
    o
}

/// Bytes as a fresh `Uint8Array` (its own buffer: a view of wasm memory would be cloned
/// whole into the database, and could move when memory grows).
pub(super) fn bytes(b: &[u8]) -> JsValue {
    Uint8Array::from(b).into()
}

/// A key as IndexedDB sees it: bytes become a binary key.
pub(super) fn key(k: &Key) -> JsValue {
    match k {
        Key::Bytes(b) => bytes(b),
        Key::Number(n) => JsValue::from_f64(*n),
        Key::Text(s) => JsValue::from_str(s),
    }
}

/// A stored value: empty values are stored as the number `0` (cheaper to clone than an empty
/// array, and what every index entry holds).
pub(super) fn value(v: &[u8]) -> JsValue {
    if v.is_empty() {
        JsValue::from_f64(0.0)
    } else {
        bytes(v)
    }
}

/// The bytes of a stored value or binary key: an `ArrayBuffer` (keys), a `Uint8Array`
/// (values) or `0` (empty values). `new Uint8Array(x)` views the first, copies the second and
/// makes an empty array of the third.
pub(super) fn to_bytes(v: &JsValue) -> Vec<u8> {
    Uint8Array::new(v).to_vec()
}

/// A key read back from a store, as bytes: binary keys as they are, numbers (batch and
/// target ids, non-negative integers) as 8 big-endian bytes of the integer, strings as UTF-8.
pub(super) fn key_bytes(k: &JsValue) -> Result<Vec<u8>, String> {
    if let Some(n) = k.as_f64() {
        if !is_id(n) {
            return Err(format!("numeric key {n} is not a batch or target id"));
        }
        return Ok((n as u64).to_be_bytes().to_vec());
    }
    if let Some(s) = k.as_string() {
        return Ok(s.into_bytes());
    }
    if k.is_instance_of::<js_sys::ArrayBuffer>() {
        return Ok(to_bytes(k));
    }
    Err(format!("key of unexpected type: {}", describe(k)))
}

/// Numeric keys are ids: integers in `[0, 2^53]`, exact as doubles.
pub(super) fn is_id(n: f64) -> bool {
    n.fract() == 0.0 && (0.0..=9_007_199_254_740_992.0).contains(&n)
}

/// The `name` of a `DOMException` (or of any error object), or "".
pub(super) fn error_name(e: &JsValue) -> String {
    Reflect::get(e, &JsValue::from_str("name"))
        .ok()
        .and_then(|n| n.as_string())
        .unwrap_or_default()
}

/// "Name: message" of an error object, or its string form.
pub(super) fn describe(e: &JsValue) -> String {
    if e.is_null() || e.is_undefined() {
        return "no error reported".into();
    }
    let name = error_name(e);
    let message = Reflect::get(e, &JsValue::from_str("message"))
        .ok()
        .and_then(|m| m.as_string())
        .unwrap_or_default();
    match (name.is_empty(), message.is_empty()) {
        (false, false) => format!("{name}: {message}"),
        (false, true) => name,
        _ => e
            .dyn_ref::<Object>()
            .map(|o| String::from(o.to_string()))
            .or_else(|| e.as_string())
            .unwrap_or_else(|| format!("{e:?}")),
    }
}

/// Whether a request could not be made because the transaction is no longer active (it
/// auto-committed after a turn of the event loop without pending requests, or finished).
pub(super) fn is_inactive(e: &JsValue) -> bool {
    matches!(
        error_name(e).as_str(),
        "TransactionInactiveError" | "InvalidStateError"
    )
}

/// Maps an IndexedDB failure of `what` to a client error with a stable code.
pub(super) fn idb_error(what: &str, e: &JsValue) -> ClientError {
    let detail = describe(e);
    match error_name(e).as_str() {
        "QuotaExceededError" => ClientError::new(
            ErrorCode::ResourceExhausted,
            format!(
                "{what}: the browser's storage quota for this site is exhausted ({detail}); \
                 nothing was written: free disk space, lower the cache size, or clear site data"
            ),
        ),
        "DataError" => ClientError::new(ErrorCode::InvalidArgument, format!("{what}: {detail}")),
        "VersionError" => ClientError::new(
            ErrorCode::FailedPrecondition,
            format!(
                "{what}: the local database was written by a newer version of Hearth \
                 ({detail}); reload the page to run the newer version"
            ),
        ),
        "SecurityError" => ClientError::new(
            ErrorCode::Unavailable,
            format!("{what}: IndexedDB is not allowed in this context ({detail})"),
        ),
        _ => ClientError::new(ErrorCode::Internal, format!("{what}: {detail}")),
    }
}
