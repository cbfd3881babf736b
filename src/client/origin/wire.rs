//! The messages between an origin's contexts and its engine: plain objects (structured
//! clone) whose payloads are the encodings the client has already (the relay protocol's for
//! queries and mutations, the document encoding for documents and values), so that nothing
//! here is a second format to keep in step. Anything that does not decode is a
//! typed error, never a panic: another context may run an older or newer build.

use hearth_core::document::Document;
use hearth_core::encoding::document::{decode_document, encode_document};
use hearth_core::error::ErrorCode;
use hearth_core::mutation::Mutation;
use hearth_core::path::DocumentName;
use hearth_core::path::FieldPath;
use hearth_core::protocol::codec::{decode_mutation, decode_query, encode_mutation, encode_query};
use hearth_core::query::model::{Aggregation, Query};
use hearth_core::query::view::{ChangeType, DocChange};
use hearth_core::value::{Map, Value};
use js_sys::{Array, Object, Reflect, Uint8Array};
use wasm_bindgen::{JsCast, JsValue};

use crate::client::engine::PendingTimestamp;
use crate::client::error::ClientError;

/// A message under construction.
pub struct Msg(Object);

impl Msg {
    /// A message of kind `k`.
    pub fn new(k: &str) -> Msg {
        let m = Msg(Object::new());
        m.set("k", k)
    }

    /// Sets field `key`.
    pub fn set(self, key: &str, v: impl Into<JsValue>) -> Msg {
        let _ = Reflect::set(&self.0, &key.into(), &v.into());
        self
    }

    /// Sets field `key` to a byte payload.
    pub fn bytes(self, key: &str, b: &[u8]) -> Msg {
        self.set(key, Uint8Array::from(b))
    }

    /// The message, to post.
    pub fn done(self) -> JsValue {
        self.0.into()
    }
}

/// Field `key` of message `m` (`undefined` when absent).
pub fn field(m: &JsValue, key: &str) -> JsValue {
    Reflect::get(m, &key.into()).unwrap_or(JsValue::UNDEFINED)
}

/// A text field.
pub fn text(m: &JsValue, key: &str) -> Option<String> {
    field(m, key).as_string()
}

/// A number field as an unsigned integer.
pub fn number(m: &JsValue, key: &str) -> Option<u64> {
    field(m, key)
        .as_f64()
        .filter(|n| n.fract() == 0.0 && *n >= 0.0 && *n <= 9_007_199_254_740_991.0)
        .map(|n| n as u64)
}

/// A byte field.
pub fn bytes(m: &JsValue, key: &str) -> Option<Vec<u8>> {
    let v = field(m, key);
    v.dyn_ref::<Uint8Array>().map(Uint8Array::to_vec)
}

/// The error a message that does not decode is.
pub fn malformed(what: &str) -> ClientError {
    ClientError::new(
        ErrorCode::Internal,
        format!("another context of this app sent a malformed {what} (a different build?)"),
    )
}

/// Byte slices, each preceded by its length (4 bytes, big-endian).
fn framed<T>(items: &[T], mut encode: impl FnMut(&T, &mut Vec<u8>)) -> Vec<u8> {
    let mut out = Vec::new();
    let mut one = Vec::new();
    for item in items {
        one.clear();
        encode(item, &mut one);
        out.extend_from_slice(&(one.len() as u32).to_be_bytes());
        out.extend_from_slice(&one);
    }
    out
}

/// The slices of a [`framed`] payload, each decoded.
fn unframed<T>(
    b: &[u8],
    what: &str,
    decode: impl Fn(&[u8]) -> Option<T>,
) -> Result<Vec<T>, ClientError> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < b.len() {
        let len = b
            .get(at..at + 4)
            .and_then(|l| l.try_into().ok())
            .map(u32::from_be_bytes)
            .ok_or_else(|| malformed(what))? as usize;
        let item = b.get(at + 4..at + 4 + len).ok_or_else(|| malformed(what))?;
        out.push(decode(item).ok_or_else(|| malformed(what))?);
        at += 4 + len;
    }
    Ok(out)
}

/// A query's bytes (the relay protocol's encoding).
pub fn query(q: &Query) -> Vec<u8> {
    let mut out = Vec::new();
    encode_query(q, &mut out);
    out
}

/// The query in field `key`.
pub fn read_query(m: &JsValue, key: &str) -> Result<Query, ClientError> {
    let b = bytes(m, key).ok_or_else(|| malformed("query"))?;
    decode_query(&b).map_err(|_| malformed("query"))
}

/// Mutations' bytes (the relay protocol's encoding of each).
pub fn mutations(ms: &[Mutation]) -> Vec<u8> {
    framed(ms, encode_mutation)
}

/// The mutations in field `key`.
pub fn read_mutations(m: &JsValue, key: &str) -> Result<Vec<Mutation>, ClientError> {
    let b = bytes(m, key).ok_or_else(|| malformed("write"))?;
    unframed(&b, "write", |x| decode_mutation(x).ok())
}

/// Aggregations as `[{ k: 'count' | 'sum' | 'avg', f?: field path }]`.
pub fn aggregations(aggs: &[Aggregation]) -> Array {
    aggs.iter()
        .map(|a| {
            let (k, f) = match a {
                Aggregation::Count => ("count", None),
                Aggregation::Sum(f) => ("sum", Some(f)),
                Aggregation::Average(f) => ("avg", Some(f)),
            };
            let m = Msg::new(k);
            match f {
                Some(f) => m.set("f", f.to_string()).done(),
                None => m.done(),
            }
        })
        .collect()
}

/// The aggregations in field `key`.
pub fn read_aggregations(m: &JsValue, key: &str) -> Result<Vec<Aggregation>, ClientError> {
    let v = field(m, key);
    if !Array::is_array(&v) {
        return Err(malformed("aggregation"));
    }
    Array::from(&v)
        .iter()
        .map(|a| {
            let path = || {
                text(&a, "f")
                    .and_then(|f| FieldPath::parse(&f).ok())
                    .ok_or_else(|| malformed("aggregation"))
            };
            match text(&a, "k").as_deref() {
                Some("count") => Ok(Aggregation::Count),
                Some("sum") => Ok(Aggregation::Sum(path()?)),
                Some("avg") => Ok(Aggregation::Average(path()?)),
                _ => Err(malformed("aggregation")),
            }
        })
        .collect()
}

/// Values as one document's fields (`"0"`, `"1"`, ...).
pub fn values(vs: Vec<Value>) -> Vec<u8> {
    let fields: Map =
        hearth_core::sort::map_of(vs.into_iter().enumerate().map(|(i, v)| (i.to_string(), v)));
    let doc = Document {
        name: DocumentName::parse("values/v").expect("a valid name"),
        fields: std::sync::Arc::new(fields),
        create_version: 0,
        update_version: 0,
    };
    encode_document(&doc).unwrap_or_default()
}

/// The values in field `key`.
pub fn read_values(m: &JsValue, key: &str) -> Result<Vec<Value>, ClientError> {
    let doc = read_document(m, key)?.ok_or_else(|| malformed("values"))?;
    (0..doc.fields.len())
        .map(|i| {
            doc.fields
                .get(&i.to_string())
                .cloned()
                .ok_or_else(|| malformed("values"))
        })
        .collect()
}

/// A transaction's reads as `[[path, version | null]]`.
pub fn reads(reads: &[(DocumentName, Option<u64>)]) -> Array {
    reads
        .iter()
        .map(|(n, v)| {
            let pair = Array::new();
            pair.push(&JsValue::from_str(&n.to_string()));
            pair.push(&v.map_or(JsValue::NULL, |v| JsValue::from_f64(v as f64)));
            JsValue::from(pair)
        })
        .collect()
}

/// The transaction reads in field `key`.
pub fn read_reads(m: &JsValue, key: &str) -> Result<Vec<(DocumentName, Option<u64>)>, ClientError> {
    let v = field(m, key);
    if !Array::is_array(&v) {
        return Err(malformed("transaction"));
    }
    Array::from(&v)
        .iter()
        .map(|pair| {
            let pair = Array::from(&pair);
            let name = pair
                .get(0)
                .as_string()
                .and_then(|p| DocumentName::parse(&p).ok())
                .ok_or_else(|| malformed("transaction"))?;
            Ok((name, pair.get(1).as_f64().map(|v| v as u64)))
        })
        .collect()
}

/// Sets an error's fields on a message: its code's tag and its text.
pub fn with_error(m: Msg, e: &ClientError) -> Msg {
    m.set("tag", f64::from(e.code().tag()))
        .set("message", e.message.as_str())
}

/// The error a message carries, if any.
pub fn error(m: &JsValue) -> Option<ClientError> {
    let tag = number(m, "tag")?;
    let code = u8::try_from(tag)
        .ok()
        .and_then(ErrorCode::from_tag)
        .unwrap_or(ErrorCode::Internal);
    Some(ClientError::new(
        code,
        text(m, "message").unwrap_or_default(),
    ))
}

/// A list of flags as bytes (0 or 1).
pub fn flags(v: impl IntoIterator<Item = bool>) -> Vec<u8> {
    v.into_iter().map(u8::from).collect()
}

/// Documents as one payload.
pub fn documents(docs: &[Document]) -> Vec<u8> {
    framed(docs, |d, out| {
        out.extend(encode_document(d).unwrap_or_default())
    })
}

/// The documents of a [`documents`] payload in field `key`.
pub fn read_documents(m: &JsValue, key: &str) -> Result<Vec<Document>, ClientError> {
    let b = bytes(m, key).ok_or_else(|| malformed("document list"))?;
    unframed(&b, "document list", |x| decode_document(x).ok())
}

/// One document, or none. (A document of the cache always encodes: it was stored
/// encoded; should one not, its empty encoding fails to decode at the other end.)
pub fn document(doc: Option<&Document>) -> Option<Vec<u8>> {
    doc.map(|d| encode_document(d).unwrap_or_default())
}

/// The document in field `key`, `None` when the field is absent.
pub fn read_document(m: &JsValue, key: &str) -> Result<Option<Document>, ClientError> {
    match bytes(m, key) {
        None => Ok(None),
        Some(b) => decode_document(&b)
            .map(Some)
            .map_err(|_| malformed("document")),
    }
}

/// Names as an array of paths.
pub fn names<'a>(names: impl IntoIterator<Item = &'a DocumentName>) -> Array {
    names
        .into_iter()
        .map(|n| JsValue::from_str(&n.to_string()))
        .collect()
}

/// The names in field `key`.
pub fn read_names(m: &JsValue, key: &str) -> Vec<DocumentName> {
    let v = field(m, key);
    if !Array::is_array(&v) {
        return Vec::new();
    }
    Array::from(&v)
        .iter()
        .filter_map(|p| p.as_string())
        .filter_map(|p| DocumentName::parse(&p).ok())
        .collect()
}

/// A snapshot's changes: their documents, and per change its kind and two indexes (`-1`:
/// none), as fields `cd`, `ck`, `co`, `cn`.
pub fn with_changes(m: Msg, changes: &[DocChange]) -> Msg {
    let kinds: Vec<u8> = changes
        .iter()
        .map(|c| match c.kind {
            ChangeType::Added => 0,
            ChangeType::Removed => 1,
            ChangeType::Modified => 2,
        })
        .collect();
    let index = |i: Option<usize>| i.map_or(-1.0, |i| i as f64);
    let old: Array = changes
        .iter()
        .map(|c| JsValue::from_f64(index(c.old_index)))
        .collect();
    let new: Array = changes
        .iter()
        .map(|c| JsValue::from_f64(index(c.new_index)))
        .collect();
    let docs = framed(changes, |c, out| {
        out.extend(encode_document(&c.doc).unwrap_or_default())
    });
    m.bytes("cd", &docs)
        .bytes("ck", &kinds)
        .set("co", old)
        .set("cn", new)
}

/// The changes of a [`with_changes`] message.
pub fn read_changes(m: &JsValue) -> Result<Vec<DocChange>, ClientError> {
    let docs = read_documents(m, "cd")?;
    let kinds = bytes(m, "ck").ok_or_else(|| malformed("snapshot"))?;
    let list = |k: &str| -> Vec<Option<usize>> {
        let v = field(m, k);
        if !Array::is_array(&v) {
            return Vec::new();
        }
        Array::from(&v)
            .iter()
            .map(|x| x.as_f64().filter(|n| *n >= 0.0).map(|n| n as usize))
            .collect()
    };
    let (old, new) = (list("co"), list("cn"));
    if kinds.len() != docs.len() || old.len() != docs.len() || new.len() != docs.len() {
        return Err(malformed("snapshot"));
    }
    docs.into_iter()
        .enumerate()
        .map(|(i, doc)| {
            let kind = match kinds[i] {
                0 => ChangeType::Added,
                1 => ChangeType::Removed,
                2 => ChangeType::Modified,
                _ => return Err(malformed("snapshot")),
            };
            Ok(DocChange {
                kind,
                doc,
                old_index: old[i],
                new_index: new[i],
            })
        })
        .collect()
}

/// The pending server timestamps of documents with a pending write, as one document's
/// fields: each name maps to a list of `{ p: field path, b: value before }` (no `b` when
/// the field had none). `None` when there are none.
pub fn timestamps(entries: &[(DocumentName, Vec<PendingTimestamp>)]) -> Option<Vec<u8>> {
    let fields: Map =
        hearth_core::sort::map_of(entries.iter().filter(|(_, ts)| !ts.is_empty()).map(
            |(name, ts)| {
                let list = ts
                    .iter()
                    .map(|(path, before)| {
                        let mut entry = Map::new();
                        entry.insert("p".into(), Value::String(path.to_string()));
                        if let Some(b) = before {
                            entry.insert("b".into(), b.clone());
                        }
                        Value::Map(entry)
                    })
                    .collect();
                (name.to_string(), Value::Array(list))
            },
        ));
    if fields.is_empty() {
        return None;
    }
    let doc = Document {
        name: DocumentName::parse("timestamps/t").expect("a valid name"),
        fields: std::sync::Arc::new(fields),
        create_version: 0,
        update_version: 0,
    };
    encode_document(&doc).ok()
}

/// The pending server timestamps in field `key` (none when absent or malformed).
pub fn read_timestamps(m: &JsValue, key: &str) -> Vec<(DocumentName, Vec<PendingTimestamp>)> {
    let Ok(Some(doc)) = read_document(m, key) else {
        return Vec::new();
    };
    doc.fields
        .iter()
        .filter_map(|(name, list)| {
            let name = DocumentName::parse(name).ok()?;
            let Value::Array(list) = list else {
                return None;
            };
            let ts = list
                .iter()
                .filter_map(|entry| {
                    let Value::Map(entry) = entry else {
                        return None;
                    };
                    let Some(Value::String(path)) = entry.get("p") else {
                        return None;
                    };
                    Some((FieldPath::parse(path).ok()?, entry.get("b").cloned()))
                })
                .collect();
            Some((name, ts))
        })
        .collect()
}
