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
//!   encoding is an `Err`), never recurses more than [`MAX_DECODE_DEPTH`] containers deep,
//!   and never reserves memory for a count before checking that the remaining input could
//!   hold that many items.
//! - Every decoder checks structure, names, timestamps and geopoints. [`decode_document`]
//!   also holds a document to every rule [`encode_document`] enforces (at most
//!   [`MAX_DOCUMENT_BYTES`](crate::document::MAX_DOCUMENT_BYTES) bytes, and the field rules of
//!   [`validate_fields`](crate::document::validate_fields): field names non-empty, at most
//!   1500 bytes and not `__reserved__`, nesting at most 20 levels, no array directly inside an
//!   array), so it accepts exactly the bytes the encoder can write: a stored document that
//!   breaks a rule is corruption ([`DecodeError::code`] is `data-loss`), never a document
//!   that later code cannot index. [`decode_value`] and [`decode_fields`] read values and
//!   field maps that are not stored documents (query operands, mutation data); their rules
//!   are checked where those are used.
//!
//! All lengths and counts are written as 64-bit varints and read back with checked
//! conversions, since `usize` is 32 bits on wasm32.

mod decode;
mod encode;
#[cfg(test)]
mod tests;

pub use decode::{decode_document, decode_fields, decode_value};
pub use encode::{encode_document, encode_fields, encode_value, encoded_size};

use crate::document::DocumentError;
use crate::error::ErrorCode;
use crate::path::PathError;

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
    /// A well-formed encoding of a document that breaks a rule of documents, which
    /// [`encode_document`] would have refused to write.
    #[error("document breaks a rule of documents at offset {offset}: {source}")]
    Limit {
        /// The start of the document (for its size) or of its fields (for a field rule).
        offset: usize,
        /// The rule, as `encode_document` reports it.
        source: DocumentError,
    },
}

impl DecodeError {
    /// `data-loss`: bytes that do not decode were not written by this encoder, so what they
    /// held is lost (a caller that decodes a peer's bytes reports its own code instead, as
    /// the wire protocol does).
    pub fn code(&self) -> ErrorCode {
        ErrorCode::DataLoss
    }
}
