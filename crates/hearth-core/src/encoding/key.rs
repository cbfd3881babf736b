//! Order-preserving key encoding: byte order of encoded values equals Firestore's value order.
//!
//! Index entries and document keys are byte strings compared with `memcmp` (IndexedDB binary
//! keys, redb `&[u8]` keys, `BTreeMap<Vec<u8>, _>`), so every value is written such that
//! `a <ord b  ⇔  enc(a) < enc(b)` and `a ==ord b ⇔ enc(a) == enc(b)`.
//!
//! ```text
//! value      = tag payload
//! null       = 10
//! boolean    = 20 (00 | 01)
//! NaN        = 30                          NaN sorts before every other number
//! number     = 31 f64-ordered(8) rest(2)   see NumberKey: int64 and double share one line
//! timestamp  = 40 seconds-ordered(8) nanos(4, big-endian)
//! string     = 50 escaped 00 01            escaped: each 00 byte becomes 00 FF
//! bytes      = 60 escaped 00 01
//! reference  = 70 (escaped 00 01)* 00 00   one escaped segment per path segment
//! geopoint   = 80 f64-ordered(8) f64-ordered(8)
//! array      = 90 value* 00
//! map        = A0 (01 escaped 00 01 value)* 00
//! ```
//! Every encoding is prefix-free (no encoding is a proper prefix of another), so values can
//! be concatenated and a descending value is the bitwise complement of its ascending bytes.
//!
//! Order-equal values (`1` and `1.0`, `0` and `-0.0`) encode to the same bytes, as ties must
//! then break on the document name. What tells them apart is kept in a [`NumberKinds`]
//! trailer that an index key appends after the name, where it cannot affect order.

use std::cmp::Ordering;

use crate::path::DocumentName;
use crate::value::{GeoPoint, Map, Timestamp, Value};

pub(crate) const END: u8 = 0x00;
const MAP_KEY: u8 = 0x01;
pub(crate) const TAG_NULL: u8 = 0x10;
pub(crate) const TAG_BOOL: u8 = 0x20;
pub(crate) const TAG_NAN: u8 = 0x30;
pub(crate) const TAG_NUMBER: u8 = 0x31;
pub(crate) const TAG_TIMESTAMP: u8 = 0x40;
pub(crate) const TAG_STRING: u8 = 0x50;
pub(crate) const TAG_BYTES: u8 = 0x60;
pub(crate) const TAG_REFERENCE: u8 = 0x70;
pub(crate) const TAG_GEOPOINT: u8 = 0x80;
pub(crate) const TAG_ARRAY: u8 = 0x90;
pub(crate) const TAG_MAP: u8 = 0xA0;

/// Sort direction of one encoded component.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Direction {
    Ascending,
    Descending,
}

impl Direction {
    pub fn flip(self) -> Direction {
        match self {
            Direction::Ascending => Direction::Descending,
            Direction::Descending => Direction::Ascending,
        }
    }

    /// Applies the direction to an ascending comparison.
    pub fn apply(self, o: Ordering) -> Ordering {
        match self {
            Direction::Ascending => o,
            Direction::Descending => o.reverse(),
        }
    }
}

/// How a number that order-encodes identically was written: the exact type and sign of zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum NumberKind {
    Integer = 0,
    Double = 1,
    NegativeZero = 2,
}

/// The kinds of the numbers of a key, in the order they were written (NaN excluded).
pub type NumberKinds = Vec<NumberKind>;

/// A key that could not be decoded: bytes from disk or from another implementation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyDecodeError {
    #[error("key ends in the middle of a value")]
    Truncated,
    #[error("unknown value tag {0:#04x} in key")]
    UnknownTag(u8),
    #[error("invalid utf-8 in a key string")]
    BadUtf8,
    #[error("invalid value in key: {0}")]
    Invalid(String),
    #[error("key nests values too deeply")]
    TooDeep,
    #[error("trailing bytes after the key")]
    Trailing,
}

impl KeyDecodeError {
    /// `data-loss`: keys are only ever read back from a store this encoder wrote, so a key
    /// that does not decode is corruption.
    pub fn code(&self) -> crate::error::ErrorCode {
        crate::error::ErrorCode::DataLoss
    }
}

/// Order-preserving bits of a double: negative numbers inverted, positive with the sign set.
fn f64_ordered(d: f64) -> [u8; 8] {
    let bits = d.to_bits();
    let o = if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    };
    o.to_be_bytes()
}

fn f64_from_ordered(b: [u8; 8]) -> f64 {
    let o = u64::from_be_bytes(b);
    let bits = if o >> 63 == 1 { o & !(1 << 63) } else { !o };
    f64::from_bits(bits)
}

fn write_escaped(bytes: &[u8], out: &mut Vec<u8>) {
    for &b in bytes {
        out.push(b);
        if b == 0 {
            out.push(0xFF);
        }
    }
    out.extend_from_slice(&[0x00, 0x01]);
}

/// Writes `v` ascending, appending the kinds of its numbers to `kinds`.
fn write_asc(v: &Value, out: &mut Vec<u8>, kinds: &mut NumberKinds) {
    match v {
        Value::Null => out.push(TAG_NULL),
        Value::Boolean(b) => out.extend_from_slice(&[TAG_BOOL, u8::from(*b)]),
        Value::Integer(_) | Value::Double(_) => match v.number_key() {
            None => out.push(TAG_NAN),
            Some(k) => {
                out.push(TAG_NUMBER);
                out.extend_from_slice(&f64_ordered(k.base()));
                out.extend_from_slice(&k.rest().to_be_bytes());
                kinds.push(match v {
                    Value::Integer(_) => NumberKind::Integer,
                    Value::Double(d) if *d == 0.0 && d.is_sign_negative() => {
                        NumberKind::NegativeZero
                    }
                    _ => NumberKind::Double,
                });
            }
        },
        Value::Timestamp(t) => {
            out.push(TAG_TIMESTAMP);
            out.extend_from_slice(&((t.seconds() as u64) ^ (1 << 63)).to_be_bytes());
            out.extend_from_slice(&(t.nanos() as u32).to_be_bytes());
        }
        Value::String(s) => {
            out.push(TAG_STRING);
            write_escaped(s.as_bytes(), out);
        }
        Value::Bytes(b) => {
            out.push(TAG_BYTES);
            write_escaped(b, out);
        }
        Value::Reference(name) => {
            out.push(TAG_REFERENCE);
            write_segments(name.segments(), out);
        }
        Value::GeoPoint(g) => {
            out.push(TAG_GEOPOINT);
            out.extend_from_slice(&f64_ordered(g.latitude()));
            out.extend_from_slice(&f64_ordered(g.longitude()));
        }
        Value::Array(a) => {
            out.push(TAG_ARRAY);
            for x in a {
                write_asc(x, out, kinds);
            }
            out.push(END);
        }
        Value::Map(m) => {
            out.push(TAG_MAP);
            for (k, x) in m {
                out.push(MAP_KEY);
                write_escaped(k.as_bytes(), out);
                write_asc(x, out, kinds);
            }
            out.push(END);
        }
    }
}

/// Writes path segments so that paths order segment by segment, a prefix first.
pub fn write_segments(segments: &[String], out: &mut Vec<u8>) {
    for s in segments {
        write_escaped(s.as_bytes(), out);
    }
    out.extend_from_slice(&[0x00, 0x00]);
}

fn complement_from(out: &mut [u8], start: usize) {
    for b in &mut out[start..] {
        *b = !*b;
    }
}

/// Appends the order-preserving encoding of `v` in direction `dir`.
pub fn write_value(v: &Value, dir: Direction, out: &mut Vec<u8>, kinds: &mut NumberKinds) {
    let start = out.len();
    write_asc(v, out, kinds);
    if dir == Direction::Descending {
        complement_from(out, start);
    }
}

/// The order-preserving encoding of one value (number kinds dropped).
pub fn encode_value(v: &Value, dir: Direction) -> Vec<u8> {
    let mut out = Vec::new();
    write_value(v, dir, &mut out, &mut Vec::new());
    out
}

/// Appends an escaped, terminated string (a document id or collection id) in direction `dir`.
pub fn write_string(s: &str, dir: Direction, out: &mut Vec<u8>) {
    let start = out.len();
    write_escaped(s.as_bytes(), out);
    if dir == Direction::Descending {
        complement_from(out, start);
    }
}

/// Appends a whole document name (segment-wise order) in direction `dir`.
pub fn write_name(name: &DocumentName, dir: Direction, out: &mut Vec<u8>) {
    let start = out.len();
    write_segments(name.segments(), out);
    if dir == Direction::Descending {
        complement_from(out, start);
    }
}

/// Appends the trailer of number kinds: one byte per kind, then the count (at most 255
/// numbers carry kinds; an index key never has more fields than that).
pub fn write_kinds(kinds: &[NumberKind], out: &mut Vec<u8>) {
    let n = kinds.len().min(255);
    out.extend(kinds[..n].iter().map(|k| *k as u8));
    out.push(n as u8);
}

/// Splits a key into its ordered part and its number kinds trailer.
pub fn split_kinds(key: &[u8]) -> Result<(&[u8], NumberKinds), KeyDecodeError> {
    let (&n, rest) = key.split_last().ok_or(KeyDecodeError::Truncated)?;
    let n = usize::from(n);
    if rest.len() < n {
        return Err(KeyDecodeError::Truncated);
    }
    let (ordered, trailer) = rest.split_at(rest.len() - n);
    let kinds = trailer
        .iter()
        .map(|b| match b {
            0 => Ok(NumberKind::Integer),
            1 => Ok(NumberKind::Double),
            2 => Ok(NumberKind::NegativeZero),
            _ => Err(KeyDecodeError::Invalid(format!("number kind {b}"))),
        })
        .collect::<Result<_, _>>()?;
    Ok((ordered, kinds))
}

/// The smallest byte string greater than every string that starts with `prefix`, or `None`
/// when no such string exists (the prefix is all `FF`).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last != 0xFF {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// A reader over key bytes in one direction.
pub struct KeyReader<'a> {
    /// The key being read (untrusted: every read checks its bounds).
    bytes: &'a [u8],
    /// The next byte to read; past the end means the key is used up.
    pos: usize,
    /// XORed into every byte read: 0xFF for a descending component, whose bytes were
    /// written complemented.
    flip: u8,
}

const MAX_KEY_DEPTH: usize = 64;

impl<'a> KeyReader<'a> {
    pub fn new(bytes: &'a [u8]) -> KeyReader<'a> {
        KeyReader {
            bytes,
            pos: 0,
            flip: 0,
        }
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn is_empty(&self) -> bool {
        self.pos >= self.bytes.len()
    }

    pub fn set_direction(&mut self, dir: Direction) {
        self.flip = if dir == Direction::Descending {
            0xFF
        } else {
            0
        };
    }

    fn byte(&mut self) -> Result<u8, KeyDecodeError> {
        let b = *self.bytes.get(self.pos).ok_or(KeyDecodeError::Truncated)?;
        self.pos += 1;
        Ok(b ^ self.flip)
    }

    fn peek(&self) -> Result<u8, KeyDecodeError> {
        self.bytes
            .get(self.pos)
            .map(|b| b ^ self.flip)
            .ok_or(KeyDecodeError::Truncated)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], KeyDecodeError> {
        let mut a = [0u8; N];
        for x in &mut a {
            *x = self.byte()?;
        }
        Ok(a)
    }

    fn escaped(&mut self) -> Result<Vec<u8>, KeyDecodeError> {
        let mut v = Vec::new();
        loop {
            let b = self.byte()?;
            if b != 0 {
                v.push(b);
                continue;
            }
            match self.byte()? {
                0xFF => v.push(0),
                0x01 => return Ok(v),
                other => return Err(KeyDecodeError::Invalid(format!("escape byte {other:#04x}"))),
            }
        }
    }

    /// Reads an escaped string in the reader's direction.
    pub fn string(&mut self) -> Result<String, KeyDecodeError> {
        String::from_utf8(self.escaped()?).map_err(|_| KeyDecodeError::BadUtf8)
    }

    /// Reads path segments written by [`write_segments`].
    pub fn segments(&mut self) -> Result<Vec<String>, KeyDecodeError> {
        let mut segs = Vec::new();
        loop {
            if self.peek()? == 0 {
                let save = self.pos;
                self.pos += 1;
                if self.byte()? == 0 {
                    return Ok(segs);
                }
                self.pos = save;
            }
            segs.push(self.string()?);
        }
    }

    /// Reads a document name written by [`write_name`].
    pub fn name(&mut self) -> Result<DocumentName, KeyDecodeError> {
        let segs = self.segments()?;
        DocumentName::from_segments(segs).map_err(|e| KeyDecodeError::Invalid(e.to_string()))
    }

    /// Reads one value; numbers take their exact type from `kinds` (consumed from the front),
    /// or are read as doubles when `kinds` runs out (exact integers beyond 2^53 as integers).
    pub fn value(
        &mut self,
        kinds: &mut std::slice::Iter<'_, NumberKind>,
    ) -> Result<Value, KeyDecodeError> {
        self.value_at(kinds, 0)
    }

    fn value_at(
        &mut self,
        kinds: &mut std::slice::Iter<'_, NumberKind>,
        depth: usize,
    ) -> Result<Value, KeyDecodeError> {
        if depth > MAX_KEY_DEPTH {
            return Err(KeyDecodeError::TooDeep);
        }
        let tag = self.byte()?;
        Ok(match tag {
            TAG_NULL => Value::Null,
            TAG_BOOL => match self.byte()? {
                0 => Value::Boolean(false),
                1 => Value::Boolean(true),
                b => return Err(KeyDecodeError::Invalid(format!("boolean byte {b}"))),
            },
            TAG_NAN => Value::Double(f64::NAN),
            TAG_NUMBER => {
                let base = f64_from_ordered(self.array::<8>()?);
                let rest = u16::from_be_bytes(self.array::<2>()?);
                let v = number_from_key(base, rest, kinds.next().copied())?;
                // Only the split the encoder makes decodes (no NaN under this tag, no -0.0
                // base, no integer split another way), so a key re-encodes to its own bytes.
                let canonical = v
                    .number_key()
                    .is_some_and(|k| k.base().to_bits() == base.to_bits() && k.rest() == rest);
                if !canonical {
                    return Err(KeyDecodeError::Invalid(format!(
                        "number {base:?} + {rest} is not in its canonical form"
                    )));
                }
                v
            }
            TAG_TIMESTAMP => {
                let s = (u64::from_be_bytes(self.array::<8>()?) ^ (1 << 63)) as i64;
                let n = u32::from_be_bytes(self.array::<4>()?);
                let t = Timestamp::new(s, i64::from(n))
                    .map_err(|e| KeyDecodeError::Invalid(e.to_string()))?;
                // Timestamp::new truncates to microseconds; the encoder never writes more.
                if i64::from(t.nanos()) != i64::from(n) {
                    return Err(KeyDecodeError::Invalid(format!(
                        "timestamp nanoseconds {n} are not whole microseconds"
                    )));
                }
                Value::Timestamp(t)
            }
            TAG_STRING => Value::String(self.string()?),
            TAG_BYTES => Value::Bytes(self.escaped()?),
            TAG_REFERENCE => Value::Reference(self.name()?),
            TAG_GEOPOINT => {
                let lat = f64_from_ordered(self.array::<8>()?);
                let lng = f64_from_ordered(self.array::<8>()?);
                let g =
                    GeoPoint::new(lat, lng).map_err(|e| KeyDecodeError::Invalid(e.to_string()))?;
                // GeoPoint::new turns -0.0 into 0.0; the encoder never writes -0.0.
                if g.latitude().to_bits() != lat.to_bits()
                    || g.longitude().to_bits() != lng.to_bits()
                {
                    return Err(KeyDecodeError::Invalid("geopoint with -0.0".into()));
                }
                Value::GeoPoint(g)
            }
            TAG_ARRAY => {
                let mut a = Vec::new();
                while self.peek()? != END {
                    a.push(self.value_at(kinds, depth + 1)?);
                }
                self.pos += 1;
                Value::Array(a)
            }
            TAG_MAP => {
                let mut m = Map::new();
                loop {
                    match self.byte()? {
                        END => break,
                        MAP_KEY => {
                            let k = self.string()?;
                            // Maps are written in key order, each key once.
                            if m.last_key_value().is_some_and(|(prev, _)| *prev >= k) {
                                return Err(KeyDecodeError::Invalid(format!(
                                    "map key `{k}` out of order"
                                )));
                            }
                            let v = self.value_at(kinds, depth + 1)?;
                            m.insert(k, v);
                        }
                        b => return Err(KeyDecodeError::Invalid(format!("map byte {b:#04x}"))),
                    }
                }
                Value::Map(m)
            }
            other => return Err(KeyDecodeError::UnknownTag(other)),
        })
    }

    /// Skips one value without building it.
    pub fn skip_value(&mut self) -> Result<(), KeyDecodeError> {
        // Values in keys are small; decoding and dropping keeps one code path.
        self.value(&mut [].iter()).map(drop)
    }
}

/// The number a key's `(base, rest)` pair and kind stand for. The pair comes from bytes, so
/// it may be any pair, not only the split [`NumberKey`](crate::value::NumberKey) makes; the
/// caller checks that.
fn number_from_key(
    base: f64,
    rest: u16,
    kind: Option<NumberKind>,
) -> Result<Value, KeyDecodeError> {
    let as_int = || -> Result<Value, KeyDecodeError> {
        if base.fract() != 0.0 || !base.is_finite() {
            return Err(KeyDecodeError::Invalid("integer with a fraction".into()));
        }
        // `as` saturates far outside i64, so the sum can overflow on bytes from outside.
        (base as i128)
            .checked_add(i128::from(rest))
            .and_then(|exact| i64::try_from(exact).ok())
            .map(Value::Integer)
            .ok_or_else(|| KeyDecodeError::Invalid("integer out of range".into()))
    };
    match kind {
        Some(NumberKind::Integer) => as_int(),
        Some(NumberKind::NegativeZero) if base == 0.0 && rest == 0 => Ok(Value::Double(-0.0)),
        Some(NumberKind::NegativeZero) => Err(KeyDecodeError::Invalid(
            "-0.0 kind on a non-zero number".into(),
        )),
        Some(NumberKind::Double) | None if rest == 0 => Ok(Value::Double(base)),
        Some(NumberKind::Double) => Err(KeyDecodeError::Invalid("double with a remainder".into())),
        None => as_int(),
    }
}

/// Decodes one value written by [`encode_value`] (numbers come back as doubles unless they
/// only fit an integer): the order-equal value, for tests and diagnostics.
pub fn decode_value(bytes: &[u8], dir: Direction) -> Result<Value, KeyDecodeError> {
    let mut r = KeyReader::new(bytes);
    r.set_direction(dir);
    let v = r.value(&mut [].iter())?;
    if !r.is_empty() {
        return Err(KeyDecodeError::Trailing);
    }
    Ok(v)
}

/// Position bounds of a type class in ascending encoding: every value of the class encodes
/// to bytes in `[start, end)`.
pub fn class_bounds(class: crate::value::TypeClass) -> (u8, u8) {
    use crate::value::TypeClass as C;
    match class {
        C::Null => (TAG_NULL, TAG_NULL + 1),
        C::Boolean => (TAG_BOOL, TAG_BOOL + 1),
        C::Number => (TAG_NAN, TAG_NUMBER + 1),
        C::Timestamp => (TAG_TIMESTAMP, TAG_TIMESTAMP + 1),
        C::String => (TAG_STRING, TAG_STRING + 1),
        C::Bytes => (TAG_BYTES, TAG_BYTES + 1),
        C::Reference => (TAG_REFERENCE, TAG_REFERENCE + 1),
        C::GeoPoint => (TAG_GEOPOINT, TAG_GEOPOINT + 1),
        C::Array => (TAG_ARRAY, TAG_ARRAY + 1),
        C::Map => (TAG_MAP, TAG_MAP + 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(v: &Value) -> Vec<u8> {
        encode_value(v, Direction::Ascending)
    }

    #[test]
    fn numbers_share_one_line() {
        assert_eq!(enc(&Value::Integer(1)), enc(&Value::Double(1.0)));
        assert_eq!(enc(&Value::Integer(0)), enc(&Value::Double(-0.0)));
        assert!(enc(&Value::Double(f64::NAN)) < enc(&Value::Double(f64::NEG_INFINITY)));
        assert!(enc(&Value::Integer(i64::MAX)) < enc(&Value::Double(9.3e18)));
        assert!(enc(&Value::Integer((1 << 53) + 1)) > enc(&Value::Double(9007199254740992.0)));
    }

    #[test]
    fn map_keys_with_nul_stay_ordered() {
        let mut a = Map::new();
        a.insert("\0".into(), Value::Null);
        let b = Map::new();
        let ea = enc(&Value::Map(a.clone()));
        let eb = enc(&Value::Map(b.clone()));
        assert_eq!(ea.cmp(&eb), Value::Map(a).cmp_order(&Value::Map(b)));
    }

    #[test]
    fn prefix_end_skips_ff() {
        assert_eq!(prefix_end(&[1, 0xFF]), Some(vec![2]));
        assert_eq!(prefix_end(&[0xFF]), None);
    }
}
