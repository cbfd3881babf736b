//! The document decoder: bytes from disk or from a peer to values, field maps and
//! documents. Input is untrusted: anything but a canonical encoding is a [`DecodeError`] with
//! the offset of the refused item, never a panic.

use super::{tag, DecodeError, FORMAT_VERSION, MAX_DECODE_DEPTH, MAX_PREALLOC};
use crate::document::{validate_fields, Document, DocumentError, MAX_DOCUMENT_BYTES};
use crate::encoding::varint::{self, unzigzag, VarintError};
use crate::path::{DocumentName, PathError, MAX_PATH_SEGMENTS};
use crate::value::{GeoPoint, Map, Timestamp, Value};

/// Decodes one value from the start of `bytes`, returning it and the number of bytes used.
/// Bytes after the value are left alone.
pub fn decode_value(bytes: &[u8]) -> Result<(Value, usize), DecodeError> {
    let mut r = Reader { bytes, pos: 0 };
    let v = r.value(0)?;
    Ok((v, r.pos))
}

/// Decodes a map of fields written by [`encode_fields`](super::encode_fields) from the start of `bytes`, returning
/// it and the number of bytes used.
pub fn decode_fields(bytes: &[u8]) -> Result<(Map, usize), DecodeError> {
    let mut r = Reader { bytes, pos: 0 };
    let m = r.fields(0)?;
    Ok((m, r.pos))
}

/// Decodes a document written by [`encode_document`](super::encode_document). The whole
/// slice must be one document.
///
/// Accepts exactly what `encode_document` can write: besides the
/// canonical form, the document must keep to the size limit and the field rules, so that
/// whatever decodes can be indexed, served and written back unchanged.
pub fn decode_document(bytes: &[u8]) -> Result<Document, DecodeError> {
    if bytes.len() > MAX_DOCUMENT_BYTES {
        return Err(DecodeError::Limit {
            offset: 0,
            source: DocumentError::TooLarge { size: bytes.len() },
        });
    }
    let mut r = Reader { bytes, pos: 0 };
    let version = r.byte()?;
    if version != FORMAT_VERSION {
        return Err(DecodeError::UnsupportedVersion { found: version });
    }
    let name = r.name()?;
    let create_version = r.varint()?;
    let update_version = r.varint()?;
    let fields_at = r.pos;
    let fields = r.fields(0)?;
    if r.pos != bytes.len() {
        return Err(DecodeError::TrailingBytes {
            offset: r.pos,
            count: bytes.len() - r.pos,
        });
    }
    // The reader bounds nesting at MAX_DECODE_DEPTH, so this walk is bounded too.
    validate_fields(&fields).map_err(|source| DecodeError::Limit {
        offset: fields_at,
        source,
    })?;
    Ok(Document {
        name,
        fields: fields.into(),
        create_version,
        update_version,
    })
}

/// A cursor over untrusted input. Invariant: `pos <= bytes.len()`.
pub(super) struct Reader<'a> {
    /// The whole input: offsets in errors count from its start.
    pub(super) bytes: &'a [u8],
    /// The next byte to read.
    pub(super) pos: usize,
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

    pub(super) fn varint(&mut self) -> Result<u64, DecodeError> {
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
        Ok(crate::sort::map_of(entries))
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
