//! The document encoder: values, field maps and documents to bytes, and their exact sizes
//! (computed without encoding, so the size limit costs no allocation).

use super::tag;
use super::FORMAT_VERSION;
use crate::document::{validate_fields, Document, DocumentError, MAX_DOCUMENT_BYTES};
use crate::encoding::varint::{len as varint_len, put as put_varint, zigzag};
use crate::path::DocumentName;
use crate::value::{Map, Value};

pub(super) fn put_bytes(b: &[u8], out: &mut Vec<u8>) {
    put_varint(b.len() as u64, out);
    out.extend_from_slice(b);
}

fn bytes_size(len: usize) -> usize {
    varint_len(len as u64) + len
}

pub(super) fn put_f64(d: f64, out: &mut Vec<u8>) {
    out.extend_from_slice(&d.to_bits().to_le_bytes());
}

fn put_name(name: &DocumentName, out: &mut Vec<u8>) {
    let segments = name.segments();
    put_varint(segments.len() as u64, out);
    for s in segments {
        put_bytes(s.as_bytes(), out);
    }
}

fn name_size(name: &DocumentName) -> usize {
    let segments = name.segments();
    varint_len(segments.len() as u64) + segments.iter().map(|s| bytes_size(s.len())).sum::<usize>()
}

/// Appends the encoding of `v` (tag and payload) to `out`.
pub fn encode_value(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Null => out.push(tag::NULL),
        Value::Boolean(false) => out.push(tag::FALSE),
        Value::Boolean(true) => out.push(tag::TRUE),
        Value::Integer(i) => {
            out.push(tag::INTEGER);
            put_varint(zigzag(*i), out);
        }
        Value::Double(d) => {
            out.push(tag::DOUBLE);
            put_f64(*d, out);
        }
        Value::Timestamp(t) => {
            out.push(tag::TIMESTAMP);
            put_varint(zigzag(t.seconds()), out);
            put_varint(u64::from(t.nanos().unsigned_abs()), out);
        }
        Value::String(s) => {
            out.push(tag::STRING);
            put_bytes(s.as_bytes(), out);
        }
        Value::Bytes(b) => {
            out.push(tag::BYTES);
            put_bytes(b, out);
        }
        Value::Reference(name) => {
            out.push(tag::REFERENCE);
            put_name(name, out);
        }
        Value::GeoPoint(g) => {
            out.push(tag::GEOPOINT);
            put_f64(g.latitude(), out);
            put_f64(g.longitude(), out);
        }
        Value::Array(a) => {
            out.push(tag::ARRAY);
            put_varint(a.len() as u64, out);
            for x in a {
                encode_value(x, out);
            }
        }
        Value::Map(m) => {
            out.push(tag::MAP);
            encode_fields(m, out);
        }
    }
}

/// The length of [`encode_value`]'s output for `v`.
fn value_size(v: &Value) -> usize {
    1 + match v {
        Value::Null | Value::Boolean(_) => 0,
        Value::Integer(i) => varint_len(zigzag(*i)),
        Value::Double(_) => 8,
        Value::Timestamp(t) => {
            varint_len(zigzag(t.seconds())) + varint_len(u64::from(t.nanos().unsigned_abs()))
        }
        Value::String(s) => bytes_size(s.len()),
        Value::Bytes(b) => bytes_size(b.len()),
        Value::Reference(name) => name_size(name),
        Value::GeoPoint(_) => 16,
        Value::Array(a) => varint_len(a.len() as u64) + a.iter().map(value_size).sum::<usize>(),
        Value::Map(m) => encoded_size(m),
    }
}

/// Appends the encoding of a map of fields (count, then key/value pairs in key order).
pub fn encode_fields(fields: &Map, out: &mut Vec<u8>) {
    put_varint(fields.len() as u64, out);
    for (k, v) in fields {
        put_bytes(k.as_bytes(), out);
        encode_value(v, out);
    }
}

/// The length of [`encode_fields`]'s output for `fields`, computed without encoding.
pub fn encoded_size(fields: &Map) -> usize {
    varint_len(fields.len() as u64)
        + fields
            .iter()
            .map(|(k, v)| bytes_size(k.len()) + value_size(v))
            .sum::<usize>()
}

/// Encodes a whole document: version byte, name, create and update versions, fields.
///
/// Checks the field rules of [`validate_fields`] and refuses a document whose encoding would
/// exceed [`MAX_DOCUMENT_BYTES`]; the size is computed before any byte is written, so an
/// oversized document costs no allocation.
pub fn encode_document(doc: &Document) -> Result<Vec<u8>, DocumentError> {
    validate_fields(&doc.fields)?;
    let size = 1
        + name_size(&doc.name)
        + varint_len(doc.create_version)
        + varint_len(doc.update_version)
        + encoded_size(&doc.fields);
    if size > MAX_DOCUMENT_BYTES {
        return Err(DocumentError::TooLarge { size });
    }
    let mut out = Vec::with_capacity(size);
    out.push(FORMAT_VERSION);
    put_name(&doc.name, &mut out);
    put_varint(doc.create_version, &mut out);
    put_varint(doc.update_version, &mut out);
    encode_fields(&doc.fields, &mut out);
    debug_assert_eq!(out.len(), size, "size computation matches the encoder");
    Ok(out)
}
