//! Compact binary encoding of values and documents: the documents table in IndexedDB, the
//! relay's store and the wire protocol all carry documents in this form.
//!
//! This encoding is compact and fast, and it is *not* order-preserving: comparing two
//! encodings byte by byte means nothing. Index keys use the separate order-preserving key
//! encoding.
//!
//! # Byte layout
//!
//! ```text
//! document  = version:u8 name create:varint update:varint fields   version is FORMAT_VERSION
//! name      = count:varint segment*count                            segment = string
//! fields    = count:varint (key:string value)*count                 keys strictly increasing
//! string    = len:varint utf8-bytes*len
//! varint    = unsigned LEB128, 7 bits a byte, low group first, at most 10 bytes, no
//!             overlong forms (a multi-byte varint never ends in 0x00)
//! zigzag    = varint of (n << 1) ^ (n >> 63): small negative numbers stay short
//!
//! value     = tag:u8 payload
//!   tag  type        payload
//!   0x00 null        (none)
//!   0x01 false       (none)
//!   0x02 true        (none)
//!   0x03 integer     zigzag
//!   0x04 double      8 bytes: IEEE-754 bits, little-endian (NaN payload and -0.0 kept)
//!   0x05 timestamp   seconds:zigzag nanos:varint     nanos a whole number of microseconds
//!   0x06 string      string
//!   0x07 bytes       len:varint byte*len
//!   0x08 reference   name
//!   0x09 geopoint    latitude:8 bytes, longitude:8 bytes (little-endian doubles)
//!   0x0a array       count:varint value*count
//!   0x0b map         fields
//! ```
//!
//! For example the document `rooms/r1` created at version 5, updated at 7, holding
//! `{n: -1, t: "hi"}` is
//!
//! ```text
//! 01  02 05 "rooms" 02 "r1"  05  07  02  01 "n" 03 01  01 "t" 06 02 "hi"
//! ver name                  cre upd cnt key  int -1   key  string
//! ```
//!
//! # Contracts
//!
//! - Round trip: decoding an encoding gives back a strictly equal value (`1` stays an
//!   integer, `-0.0` and NaN payloads keep their bits).
//! - Canonical: each value has exactly one encoding, and the decoder accepts only that one
//!   (no overlong varints, sorted unique map keys, micro-aligned nanos, geopoints without
//!   `-0.0`), so re-encoding anything the decoder accepts reproduces the input bytes.
//! - Self-delimiting: [`decode_value`] reports how many bytes it used, so values can be
//!   concatenated; a strict prefix of an encoding never decodes.
//! - Untrusted input: decoding arbitrary bytes never panics (anything but a canonical
//!   encoding is an `Err`), never recurses more than [`MAX_DECODE_DEPTH`] containers deep, and never reserves memory for a
//!   count before checking that the remaining input could hold that many items.
//! - The decoder checks structure, names, timestamps and geopoints. Document limits (field
//!   names, depth 20, nested arrays, size) are checked by [`encode_document`]; a caller that
//!   receives documents from a peer it does not trust runs
//!   [`validate_fields`](crate::document::validate_fields) itself.
//!
//! All lengths and counts are written as 64-bit varints and read back with checked
//! conversions, since `usize` is 32 bits on wasm32.

use super::varint::{self, len as varint_len, put as put_varint, unzigzag, zigzag, VarintError};
use crate::document::{validate_fields, Document, DocumentError, MAX_DOCUMENT_BYTES};
use crate::path::{DocumentName, PathError, MAX_PATH_SEGMENTS};
use crate::value::{GeoPoint, Map, Timestamp, Value};

/// The version byte that starts every encoded document.
pub const FORMAT_VERSION: u8 = 1;

/// Deepest nesting of arrays and maps the decoder follows (a value that is itself an array
/// counts as one level; the fields map of a document does not). Valid documents nest at most
/// [`MAX_DEPTH`](crate::document::MAX_DEPTH) levels; this bound exists so that a
/// crafted input cannot overflow the decoder's stack.
pub const MAX_DECODE_DEPTH: usize = 100;

/// Most items reserved up front for an array or map, whatever its count says. A count is
/// only checked against the remaining input, and nested containers could each claim the
/// whole input, so reserving the claimed count at every level would multiply memory use.
const MAX_PREALLOC: usize = 1024;

/// Value tags. See the module doc.
mod tag {
    pub const NULL: u8 = 0x00;
    pub const FALSE: u8 = 0x01;
    pub const TRUE: u8 = 0x02;
    pub const INTEGER: u8 = 0x03;
    pub const DOUBLE: u8 = 0x04;
    pub const TIMESTAMP: u8 = 0x05;
    pub const STRING: u8 = 0x06;
    pub const BYTES: u8 = 0x07;
    pub const REFERENCE: u8 = 0x08;
    pub const GEOPOINT: u8 = 0x09;
    pub const ARRAY: u8 = 0x0a;
    pub const MAP: u8 = 0x0b;
}

/// Why bytes could not be decoded. Offsets count from the start of the slice given to the
/// decoder and point at the item that was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    #[error("truncated input: more bytes needed at offset {offset}")]
    Truncated { offset: usize },
    #[error("unknown value tag {tag:#04x} at offset {offset}")]
    UnknownTag { tag: u8, offset: usize },
    #[error("malformed varint at offset {offset}: overlong or over 64 bits")]
    BadVarint { offset: usize },
    #[error("string at offset {offset} is not valid utf-8")]
    BadUtf8 { offset: usize },
    #[error("{count} trailing bytes at offset {offset} after the end of the document")]
    TrailingBytes { offset: usize, count: usize },
    #[error("invalid document name at offset {offset}: {source}")]
    InvalidName { offset: usize, source: PathError },
    #[error("invalid timestamp at offset {offset}: seconds {seconds}, nanoseconds {nanos} (allowed: years 1 to 9999, whole microseconds)")]
    InvalidTimestamp {
        offset: usize,
        seconds: i64,
        nanos: u64,
    },
    #[error("invalid geopoint at offset {offset}: latitude {latitude}, longitude {longitude} (allowed: [-90, 90] and [-180, 180], no -0.0)")]
    InvalidGeoPoint {
        offset: usize,
        latitude: f64,
        longitude: f64,
    },
    #[error(
        "unsupported document format version {found} (this build reads version {FORMAT_VERSION})"
    )]
    UnsupportedVersion { found: u8 },
    #[error("arrays and maps nest more than {MAX_DECODE_DEPTH} levels deep at offset {offset}")]
    TooDeep { offset: usize },
    #[error("length {len} at offset {offset} is larger than the {remaining} bytes remaining")]
    LengthTooLarge {
        offset: usize,
        len: u64,
        remaining: usize,
    },
    #[error("map key at offset {offset} is not greater than the key before it (keys must be sorted and unique)")]
    UnsortedKeys { offset: usize },
}

// ---- Encoding ----

fn put_bytes(b: &[u8], out: &mut Vec<u8>) {
    put_varint(b.len() as u64, out);
    out.extend_from_slice(b);
}

fn bytes_size(len: usize) -> usize {
    varint_len(len as u64) + len
}

fn put_f64(d: f64, out: &mut Vec<u8>) {
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

// ---- Decoding ----

/// Decodes one value from the start of `bytes`, returning it and the number of bytes used.
/// Bytes after the value are left alone.
pub fn decode_value(bytes: &[u8]) -> Result<(Value, usize), DecodeError> {
    let mut r = Reader { bytes, pos: 0 };
    let v = r.value(0)?;
    Ok((v, r.pos))
}

/// Decodes a map of fields written by [`encode_fields`] from the start of `bytes`, returning
/// it and the number of bytes used.
pub fn decode_fields(bytes: &[u8]) -> Result<(Map, usize), DecodeError> {
    let mut r = Reader { bytes, pos: 0 };
    let m = r.fields(0)?;
    Ok((m, r.pos))
}

/// Decodes a document written by [`encode_document`]. The whole slice must be one document.
pub fn decode_document(bytes: &[u8]) -> Result<Document, DecodeError> {
    let mut r = Reader { bytes, pos: 0 };
    let version = r.byte()?;
    if version != FORMAT_VERSION {
        return Err(DecodeError::UnsupportedVersion { found: version });
    }
    let name = r.name()?;
    let create_version = r.varint()?;
    let update_version = r.varint()?;
    let fields = r.fields(0)?;
    if r.pos != bytes.len() {
        return Err(DecodeError::TrailingBytes {
            offset: r.pos,
            count: bytes.len() - r.pos,
        });
    }
    Ok(Document {
        name,
        fields: fields.into(),
        create_version,
        update_version,
    })
}

/// A cursor over untrusted input. Invariant: `pos <= bytes.len()`.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn byte(&mut self) -> Result<u8, DecodeError> {
        let b = *self
            .bytes
            .get(self.pos)
            .ok_or(DecodeError::Truncated { offset: self.pos })?;
        self.pos += 1;
        Ok(b)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.remaining() {
            return Err(DecodeError::Truncated { offset: self.pos });
        }
        let b = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, DecodeError> {
        let offset = self.pos;
        match varint::read(self.bytes.get(self.pos..).unwrap_or_default()) {
            Ok((v, used)) => {
                self.pos += used;
                Ok(v)
            }
            // A varint cut short runs to the end of the input: more bytes are needed there.
            Err(VarintError::Truncated) => Err(DecodeError::Truncated {
                offset: self.bytes.len(),
            }),
            Err(VarintError::Malformed) => Err(DecodeError::BadVarint { offset }),
        }
    }

    /// Reads a count of items that take at least `unit` bytes each, refusing counts that the
    /// remaining input could not hold. This is what makes reserving memory for it safe.
    fn count(&mut self, unit: usize) -> Result<usize, DecodeError> {
        let offset = self.pos;
        let len = self.varint()?;
        let remaining = self.remaining();
        match usize::try_from(len) {
            Ok(n) if n.checked_mul(unit).is_some_and(|need| need <= remaining) => Ok(n),
            _ => Err(DecodeError::LengthTooLarge {
                offset,
                len,
                remaining,
            }),
        }
    }

    fn f64(&mut self) -> Result<f64, DecodeError> {
        let mut le = [0u8; 8];
        le.copy_from_slice(self.take(8)?);
        Ok(f64::from_bits(u64::from_le_bytes(le)))
    }

    fn string(&mut self) -> Result<String, DecodeError> {
        let n = self.count(1)?;
        let offset = self.pos;
        let b = self.take(n)?;
        std::str::from_utf8(b)
            .map(str::to_owned)
            .map_err(|_| DecodeError::BadUtf8 { offset })
    }

    fn name(&mut self) -> Result<DocumentName, DecodeError> {
        let offset = self.pos;
        let n = self.count(1)?;
        if n > MAX_PATH_SEGMENTS {
            return Err(DecodeError::InvalidName {
                offset,
                source: PathError::TooDeep { segments: n },
            });
        }
        let mut segments = Vec::with_capacity(n);
        for _ in 0..n {
            segments.push(self.string()?);
        }
        DocumentName::from_segments(segments)
            .map_err(|source| DecodeError::InvalidName { offset, source })
    }

    /// `depth` is the number of arrays and maps enclosing the values of this map.
    fn fields(&mut self, depth: usize) -> Result<Map, DecodeError> {
        // Each entry takes at least a key length byte and a value tag.
        let n = self.count(2)?;
        let mut entries: Vec<(String, Value)> = Vec::with_capacity(n.min(MAX_PREALLOC));
        for _ in 0..n {
            let offset = self.pos;
            let key = self.string()?;
            if entries.last().is_some_and(|(prev, _)| *prev >= key) {
                return Err(DecodeError::UnsortedKeys { offset });
            }
            let v = self.value(depth)?;
            entries.push((key, v));
        }
        // Sorted input lets the map be built in bulk, without per-key searches.
        Ok(entries.into_iter().collect())
    }

    /// `depth` is the number of arrays and maps enclosing this value.
    fn value(&mut self, depth: usize) -> Result<Value, DecodeError> {
        let offset = self.pos;
        let t = self.byte()?;
        let v = match t {
            tag::NULL => Value::Null,
            tag::FALSE => Value::Boolean(false),
            tag::TRUE => Value::Boolean(true),
            tag::INTEGER => Value::Integer(unzigzag(self.varint()?)),
            tag::DOUBLE => Value::Double(self.f64()?),
            tag::TIMESTAMP => {
                let seconds = unzigzag(self.varint()?);
                let nanos = self.varint()?;
                // Timestamp::new would truncate sub-microsecond nanos; refuse them instead so
                // that the accepted encoding stays the canonical one.
                let t = i64::try_from(nanos)
                    .ok()
                    .filter(|n| n % 1000 == 0)
                    .and_then(|n| Timestamp::new(seconds, n).ok());
                Value::Timestamp(t.ok_or(DecodeError::InvalidTimestamp {
                    offset,
                    seconds,
                    nanos,
                })?)
            }
            tag::STRING => Value::String(self.string()?),
            tag::BYTES => {
                let n = self.count(1)?;
                Value::Bytes(self.take(n)?.to_vec())
            }
            tag::REFERENCE => Value::Reference(self.name()?),
            tag::GEOPOINT => {
                let latitude = self.f64()?;
                let longitude = self.f64()?;
                // GeoPoint::new turns -0.0 into 0.0; refuse it so decoding stays canonical.
                let g = GeoPoint::new(latitude, longitude).ok().filter(|g| {
                    g.latitude().to_bits() == latitude.to_bits()
                        && g.longitude().to_bits() == longitude.to_bits()
                });
                Value::GeoPoint(g.ok_or(DecodeError::InvalidGeoPoint {
                    offset,
                    latitude,
                    longitude,
                })?)
            }
            tag::ARRAY | tag::MAP => {
                if depth >= MAX_DECODE_DEPTH {
                    return Err(DecodeError::TooDeep { offset });
                }
                if t == tag::MAP {
                    Value::Map(self.fields(depth + 1)?)
                } else {
                    let n = self.count(1)?;
                    let mut a = Vec::with_capacity(n.min(MAX_PREALLOC));
                    for _ in 0..n {
                        a.push(self.value(depth + 1)?);
                    }
                    Value::Array(a)
                }
            }
            _ => return Err(DecodeError::UnknownTag { tag: t, offset }),
        };
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(v: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        encode_value(v, &mut out);
        out
    }

    fn map(entries: &[(&str, Value)]) -> Map {
        entries
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    #[test]
    fn document_layout_matches_the_module_doc() {
        let mut doc = Document::new(
            DocumentName::parse("rooms/r1").unwrap(),
            map(&[("n", Value::Integer(-1)), ("t", Value::from("hi"))]),
        );
        doc.create_version = 5;
        doc.update_version = 7;
        let bytes = encode_document(&doc).unwrap();
        let mut expect = vec![0x01, 0x02, 0x05];
        expect.extend_from_slice(b"rooms");
        expect.extend_from_slice(&[0x02, b'r', b'1', 0x05, 0x07, 0x02, 0x01, b'n', 0x03, 0x01]);
        expect.extend_from_slice(&[0x01, b't', 0x06, 0x02, b'h', b'i']);
        assert_eq!(bytes, expect);
        assert_eq!(decode_document(&bytes).unwrap(), doc);
    }

    #[test]
    fn scalar_layouts() {
        assert_eq!(enc(&Value::Null), [0x00]);
        assert_eq!(enc(&Value::Boolean(false)), [0x01]);
        assert_eq!(enc(&Value::Boolean(true)), [0x02]);
        assert_eq!(enc(&Value::Integer(0)), [0x03, 0x00]);
        assert_eq!(enc(&Value::Integer(1)), [0x03, 0x02]);
        assert_eq!(enc(&Value::Integer(-64)), [0x03, 0x7f]);
        assert_eq!(enc(&Value::Integer(64)), [0x03, 0x80, 0x01]);
        let min = enc(&Value::Integer(i64::MIN));
        assert_eq!(
            min,
            [0x03, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
        );
        assert_eq!(enc(&Value::Double(-0.0)), [0x04, 0, 0, 0, 0, 0, 0, 0, 0x80]);
        let t = Timestamp::new(-1, 5_000).unwrap();
        assert_eq!(enc(&Value::Timestamp(t)), [0x05, 0x01, 0x88, 0x27]);
        assert_eq!(enc(&Value::Bytes(vec![9, 8])), [0x07, 0x02, 9, 8]);
        let a = Value::Array(vec![Value::Null, Value::Map(Map::new())]);
        assert_eq!(enc(&a), [0x0a, 0x02, 0x00, 0x0b, 0x00]);
    }

    #[test]
    fn varints_round_trip_at_group_boundaries() {
        for shift in 0..64 {
            for v in [
                1u64 << shift,
                (1u64 << shift) - 1,
                (1u64 << shift) + 1,
                u64::MAX,
            ] {
                let mut out = Vec::new();
                put_varint(v, &mut out);
                assert_eq!(out.len(), varint_len(v), "{v}");
                let mut r = Reader {
                    bytes: &out,
                    pos: 0,
                };
                assert_eq!(r.varint(), Ok(v));
                assert_eq!(r.pos, out.len());
            }
        }
        for i in [0, 1, -1, i64::MIN, i64::MAX, 1 << 53, -(1 << 53) - 1] {
            assert_eq!(unzigzag(zigzag(i)), i);
        }
    }

    #[test]
    fn non_canonical_varints_are_refused() {
        // 0 written in two bytes, and an eleven-byte / overflowing tenth byte.
        for bytes in [
            &[0x03, 0x80, 0x00][..],
            &[
                0x03, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02,
            ],
            &[
                0x03, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x81, 0x00,
            ],
        ] {
            assert_eq!(
                decode_value(bytes),
                Err(DecodeError::BadVarint { offset: 1 }),
                "{bytes:?}"
            );
        }
    }

    #[test]
    fn special_doubles_keep_their_bits() {
        for d in [
            f64::NAN,
            -f64::NAN,
            -0.0,
            0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MIN_POSITIVE,
        ] {
            let bytes = enc(&Value::Double(d));
            let (v, n) = decode_value(&bytes).unwrap();
            assert_eq!(n, 9);
            match v {
                Value::Double(back) => assert_eq!(back.to_bits(), d.to_bits()),
                other => panic!("decoded {other:?}"),
            }
        }
    }

    #[test]
    fn malformed_inputs_name_what_is_wrong() {
        assert_eq!(decode_value(&[]), Err(DecodeError::Truncated { offset: 0 }));
        assert_eq!(
            decode_value(&[0x0c]),
            Err(DecodeError::UnknownTag {
                tag: 0x0c,
                offset: 0
            })
        );
        assert_eq!(
            decode_value(&[0x06, 0x02, 0xc3, 0x28]),
            Err(DecodeError::BadUtf8 { offset: 2 })
        );
        // A string claiming five bytes with two left.
        assert_eq!(
            decode_value(&[0x06, 0x05, b'a', b'b']),
            Err(DecodeError::LengthTooLarge {
                offset: 1,
                len: 5,
                remaining: 2
            })
        );
        assert_eq!(
            decode_value(&[0x04, 0, 0, 0]),
            Err(DecodeError::Truncated { offset: 1 })
        );
        // Keys out of order, and a duplicate key.
        let unsorted = [0x0b, 0x02, 0x01, b'b', 0x00, 0x01, b'a', 0x00];
        assert_eq!(
            decode_value(&unsorted),
            Err(DecodeError::UnsortedKeys { offset: 5 })
        );
        let duplicate = [0x0b, 0x02, 0x01, b'a', 0x00, 0x01, b'a', 0x00];
        assert_eq!(
            decode_value(&duplicate),
            Err(DecodeError::UnsortedKeys { offset: 5 })
        );
        let err = decode_value(&[0x06, 0x05]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "length 5 at offset 1 is larger than the 0 bytes remaining"
        );
    }

    #[test]
    fn huge_counts_are_refused_before_allocating() {
        // Counts near u64::MAX and usize::MAX must fail on the length check, not in the
        // allocator.
        for t in [
            tag::STRING,
            tag::BYTES,
            tag::ARRAY,
            tag::MAP,
            tag::REFERENCE,
        ] {
            let mut bytes = vec![t];
            put_varint(u64::MAX, &mut bytes);
            bytes.extend_from_slice(&[0; 16]);
            assert!(
                matches!(
                    decode_value(&bytes),
                    Err(DecodeError::LengthTooLarge { .. })
                ),
                "tag {t}"
            );
        }
        // A map of n entries needs at least 2n bytes.
        assert!(matches!(
            decode_value(&[0x0b, 0x02, 0x00, 0x00]),
            Err(DecodeError::LengthTooLarge { len: 2, .. })
        ));
    }

    #[test]
    fn nesting_is_bounded_without_recursing_further() {
        let nested = |levels: usize| {
            let mut bytes = Vec::new();
            for _ in 0..levels {
                bytes.extend_from_slice(&[tag::ARRAY, 0x01]);
            }
            bytes.push(tag::NULL);
            bytes
        };
        let (v, n) = decode_value(&nested(MAX_DECODE_DEPTH)).unwrap();
        assert_eq!(n, 2 * MAX_DECODE_DEPTH + 1);
        assert_eq!(enc(&v), nested(MAX_DECODE_DEPTH));
        assert_eq!(
            decode_value(&nested(MAX_DECODE_DEPTH + 1)),
            Err(DecodeError::TooDeep {
                offset: 2 * MAX_DECODE_DEPTH
            })
        );
        // Far deeper than any stack would allow if the decoder followed it.
        let deep = [tag::MAP, 0x01, 0x01, b'k'].repeat(1_000_000);
        assert!(matches!(
            decode_value(&deep),
            Err(DecodeError::TooDeep { .. })
        ));
    }

    #[test]
    fn timestamps_and_geopoints_are_checked() {
        let mut ts = vec![tag::TIMESTAMP];
        put_varint(zigzag(0), &mut ts);
        put_varint(1, &mut ts);
        assert!(matches!(
            decode_value(&ts),
            Err(DecodeError::InvalidTimestamp { nanos: 1, .. })
        ));
        let mut ts = vec![tag::TIMESTAMP];
        put_varint(zigzag(crate::value::MAX_TIMESTAMP_SECONDS + 1), &mut ts);
        put_varint(0, &mut ts);
        assert!(matches!(
            decode_value(&ts),
            Err(DecodeError::InvalidTimestamp { .. })
        ));
        for (lat, lng) in [(-0.0, 1.0), (1.0, -0.0), (90.5, 0.0), (0.0, f64::NAN)] {
            let mut g = vec![tag::GEOPOINT];
            put_f64(lat, &mut g);
            put_f64(lng, &mut g);
            assert!(
                matches!(decode_value(&g), Err(DecodeError::InvalidGeoPoint { .. })),
                "{lat} {lng}"
            );
        }
        let g = Value::GeoPoint(GeoPoint::new(-90.0, 180.0).unwrap());
        assert_eq!(decode_value(&enc(&g)).unwrap().0, g);
    }

    #[test]
    fn references_are_validated() {
        let name = DocumentName::parse("a/b/c/d").unwrap();
        let r = Value::Reference(name);
        assert_eq!(decode_value(&enc(&r)).unwrap(), (r.clone(), 10));
        // Odd segment count, a segment with a slash, a reserved id, no segments.
        for segs in [&["a"][..], &["a", "b/c"], &["a", "__x__"], &[]] {
            let mut bytes = vec![tag::REFERENCE];
            put_varint(segs.len() as u64, &mut bytes);
            for s in segs {
                put_bytes(s.as_bytes(), &mut bytes);
            }
            assert!(
                matches!(
                    decode_value(&bytes),
                    Err(DecodeError::InvalidName { offset: 1, .. })
                ),
                "{segs:?}"
            );
        }
    }

    #[test]
    fn documents_check_version_and_trailing_bytes() {
        let doc = Document::new(DocumentName::parse("c/d").unwrap(), Map::new());
        let mut bytes = encode_document(&doc).unwrap();
        assert_eq!(decode_document(&bytes).unwrap(), doc);
        bytes.push(0);
        assert_eq!(
            decode_document(&bytes),
            Err(DecodeError::TrailingBytes {
                offset: bytes.len() - 1,
                count: 1
            })
        );
        bytes[0] = 2;
        let err = decode_document(&bytes).unwrap_err();
        assert_eq!(err, DecodeError::UnsupportedVersion { found: 2 });
        assert!(err.to_string().contains("version 2"), "{err}");
    }

    #[test]
    fn encode_document_validates_fields() {
        let doc = Document::new(
            DocumentName::parse("c/d").unwrap(),
            map(&[("", Value::Null)]),
        );
        assert!(matches!(
            encode_document(&doc),
            Err(DocumentError::EmptyFieldName { .. })
        ));
    }

    #[test]
    fn encoded_size_counts_every_byte() {
        let fields = map(&[
            ("a", Value::Integer(i64::MAX)),
            ("b", Value::Bytes(vec![0; 300])),
            (
                "c",
                Value::Array(vec![
                    Value::Timestamp(Timestamp::new(-62_135_596_800, 999_999_999).unwrap()),
                    Value::Reference(DocumentName::parse("x/y").unwrap()),
                    Value::GeoPoint(GeoPoint::new(1.0, 2.0).unwrap()),
                ]),
            ),
            ("d", Value::Map(map(&[("e", Value::from("é😀"))]))),
        ]);
        let mut out = Vec::new();
        encode_fields(&fields, &mut out);
        assert_eq!(encoded_size(&fields), out.len());
        assert_eq!(decode_fields(&out).unwrap(), (fields, out.len()));
    }
}
