//! Byte encoding of protocol messages: one WebSocket binary frame carries exactly one message.
//! `docs/protocol.md` is the normative description; this drawing is its summary.
//!
//! # Frame layout
//!
//! ```text
//! frame      = type:u8 field*             the fields in declaration order, nothing after them;
//!                                         at most MAX_FRAME_BYTES in all
//!
//! type  message            fields
//! 0x01  Hello              protocol_version:u32 database:string client_id:string token:string
//! 0x02  Auth               token:string
//! 0x03  Get                request_id:u64 names:list<name>
//! 0x04  RunQuery           request_id:u64 query
//! 0x05  RunAggregation     request_id:u64 query aggregations:list<aggregation>
//! 0x06  Write              request_id:u64 batch_id:u64 mutations:list<mutation>
//!                          reads:list<name option<u64>>
//! 0x07  Listen             target_id:u32 query resume_version:option<u64>
//! 0x08  Unlisten           target_id:u32
//! 0x09  Ping               nonce:u64
//! 0x81  Welcome            protocol_version:u32 version:u64 indexes:string heartbeat_ms:u32
//! 0x82  GetResult          request_id:u64 version:u64 documents:list<name option<document>>
//! 0x83  QueryResult        request_id:u64 version:u64 documents:list<document>
//! 0x84  AggregationResult  request_id:u64 version:u64 values:list<value>
//! 0x85  WriteResult        request_id:u64 batch_id:u64 version:u64
//! 0x86  TargetChange       target_id:u32 kind:u8 changes:list<change>
//! 0x87  Snapshot           version:u64
//! 0x88  Heartbeat          version:u64 nonce:u64
//! 0x89  Error              request_id:u64 target_id:u32 code:u8 message:string
//! 0x8a  Existence          target_id:u32 count:u64 hashes:u8 bits:bytes   (protocol 2)
//! 0x8b  Bundle             messages:list<bytes>                          (protocol 3)
//!                          each a whole relay message other than a Bundle; at least one
//!
//! u64, u32   = varint: unsigned LEB128 as in the document encoding (canonical, at most 10
//!              bytes); a u32 field refuses values above u32::MAX
//! i64        = varint of the zigzag form (n << 1) ^ (n >> 63)
//! bool       = 0x00 false | 0x01 true
//! option<T>  = 0x00 | 0x01 T
//! list<T>    = count:varint T*count
//! string     = len:varint utf8-bytes*len
//! bytes      = len:varint byte*len
//! name       = string: the document path `c/d(/c/d)*`, no leading `/`
//! fieldpath  = list<string>: the segments, unquoted
//! value      = a value of the document encoding (tag byte, payload)
//! document   = len:varint, then a whole document of the document encoding (version byte first)
//! indexes    = string: the index file as strict JSON, in the firestore.indexes.json format
//! change     = 0x00 document (upsert) | 0x01 name (remove)
//! kind       = 0x00 delta | 0x01 reset
//! code       = ErrorCode in declaration order: 0x00 invalid-argument .. 0x0b data-loss
//!
//! query      = source option<filter> order_by:list<fieldpath dir:u8> limit:option<i64>
//!              limit_type:u8 start:option<cursor> end:option<cursor> offset:u64
//!              projection:option<list<fieldpath>>
//! source     = 0x00 collection-path:string | 0x01 collection-id:string
//! filter     = 0x00 fieldpath op:u8 value | 0x01 list<filter> (and) | 0x02 list<filter> (or)
//!              nested at most MAX_FILTER_DEPTH levels (a lone field filter is one level)
//! op         = 0x00 == | 0x01 != | 0x02 < | 0x03 <= | 0x04 > | 0x05 >= | 0x06 in
//!              0x07 not-in | 0x08 array-contains | 0x09 array-contains-any
//! dir        = 0x00 ascending | 0x01 descending        limit_type = 0x00 first | 0x01 last
//! cursor     = values:list<value> inclusive:bool from_document:bool
//! aggregation= 0x00 count | 0x01 fieldpath (sum) | 0x02 fieldpath (average)
//!
//! mutation   = name kind precondition transforms:list<fieldpath transform>
//!              field_deletes_in_merge:list<fieldpath>
//! kind       = 0x00 fields merge (set) | 0x01 list<fieldpath option<value>> (update) | 0x02 (delete)
//! fields     = the fields map of the document encoding (count, sorted key/value pairs)
//! merge      = 0x00 overwrite | 0x01 merge-all | 0x02 list<fieldpath> (merge fields)
//! precondition = 0x00 none | 0x01 bool (exists) | 0x02 u64 (update version)
//! transform  = 0x00 value (increment) | 0x01 value (maximum) | 0x02 value (minimum)
//!              0x03 (server timestamp) | 0x04 list<value> (array union)
//!              0x05 list<value> (array remove)
//! ```
//!
//! # Contracts
//!
//! - Round trip: decoding an encoding gives back an equal message, and re-encoding what the
//!   decoder accepted gives back the same bytes (the index JSON is the one text that is not
//!   canonical: any strict JSON spelling of the file decodes).
//! - Untrusted input: decoding never panics, refuses a frame over [`MAX_FRAME_BYTES`] before
//!   reading it, checks every count against the bytes remaining before reserving memory, and
//!   recurses at most [`MAX_FILTER_DEPTH`] filters (plus the value decoder's own bound) deep.
//! - The decoder checks the shape of what it reads (names, field paths, values, documents,
//!   index files) and holds documents to the limits of the document encoding, so whatever
//!   it accepts can be stored and re-encoded. It does not check meaning: query validation
//!   and mutation validation (which applies the document limits to mutation data) run
//!   where the message is used.
//!
//! The relay speaks only validated documents, so [`encode_server`] panics on a document the
//! document encoding refuses: that is a broken invariant, not bad input.

mod decode;
mod encode;
#[cfg(test)]
mod tests;

pub use decode::{
    decode_client, decode_mutation, decode_query, decode_server, decode_server_frame,
    peek_hello_version,
};
pub use encode::{
    encode_bundle, encode_client, encode_mutation, encode_query, encode_server, try_encode_server,
    MessageEncodeError,
};

use crate::document::DocumentError;
use crate::encoding::document::DecodeError;
use crate::index::config::IndexFileError;
use crate::path::PathError;
use crate::query::model::Operator;

use super::{ErrorCode, MAX_FRAME_BYTES};

/// Deepest filter tree a decoder accepts: a field filter alone is one level, each AND or OR
/// around it adds one. Real queries nest a few levels; the bound keeps recursion shallow.
pub const MAX_FILTER_DEPTH: usize = 32;

/// Deepest nesting of the index JSON a decoder accepts. A real index file nests 5 levels;
/// the bound keeps the JSON5 parser's recursion shallow on hostile input.
const MAX_INDEX_JSON_DEPTH: usize = 8;

/// Most items reserved up front for a list, whatever its count says (nested lists could each
/// claim the whole remaining input).
const MAX_PREALLOC: usize = 1024;

/// Message type bytes (docs/protocol.md §4). Client messages use 0x01.., relay messages
/// 0x81...
pub mod ty {
    pub const HELLO: u8 = 0x01;
    pub const AUTH: u8 = 0x02;
    pub const GET: u8 = 0x03;
    pub const RUN_QUERY: u8 = 0x04;
    pub const RUN_AGGREGATION: u8 = 0x05;
    pub const WRITE: u8 = 0x06;
    pub const LISTEN: u8 = 0x07;
    pub const UNLISTEN: u8 = 0x08;
    pub const PING: u8 = 0x09;

    pub const WELCOME: u8 = 0x81;
    pub const GET_RESULT: u8 = 0x82;
    pub const QUERY_RESULT: u8 = 0x83;
    pub const AGGREGATION_RESULT: u8 = 0x84;
    pub const WRITE_RESULT: u8 = 0x85;
    pub const TARGET_CHANGE: u8 = 0x86;
    pub const SNAPSHOT: u8 = 0x87;
    pub const HEARTBEAT: u8 = 0x88;
    pub const ERROR: u8 = 0x89;
    pub const EXISTENCE: u8 = 0x8a;
    pub const BUNDLE: u8 = 0x8b;
}

/// Why a frame could not be decoded. Offsets count from the start of the frame (or of the
/// slice given to [`decode_query`] / [`decode_mutation`]) and point at the refused item.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    #[error("truncated frame: more bytes needed at offset {offset}")]
    Truncated { offset: usize },
    #[error("unknown message type {tag:#04x}")]
    UnknownMessageType { tag: u8 },
    #[error("unknown {what} tag {tag:#04x} at offset {offset}")]
    UnknownTag {
        what: &'static str,
        tag: u8,
        offset: usize,
    },
    #[error("malformed varint at offset {offset}: overlong or over 64 bits")]
    BadVarint { offset: usize },
    #[error("{what} {value} at offset {offset} does not fit in 32 bits")]
    OutOfRange {
        what: &'static str,
        value: u64,
        offset: usize,
    },
    #[error("length {len} at offset {offset} is larger than the {remaining} bytes remaining")]
    LengthTooLarge {
        offset: usize,
        len: u64,
        remaining: usize,
    },
    #[error("string at offset {offset} is not valid utf-8")]
    BadUtf8 { offset: usize },
    #[error("invalid name at offset {offset}: {source}")]
    InvalidName { offset: usize, source: PathError },
    #[error("invalid field path at offset {offset}: {source}")]
    InvalidFieldPath { offset: usize, source: PathError },
    #[error("invalid value at offset {offset}: {source}")]
    InvalidValue { offset: usize, source: DecodeError },
    #[error("invalid document at offset {offset}: {source}")]
    InvalidDocument { offset: usize, source: DecodeError },
    #[error("document at offset {offset} breaks a limit: {source}")]
    DocumentLimit {
        offset: usize,
        source: DocumentError,
    },
    #[error("invalid index file at offset {offset}: {source}")]
    InvalidIndexFile {
        offset: usize,
        source: IndexFileError,
    },
    #[error("{count} trailing bytes at offset {offset} after the end of the message")]
    TrailingBytes { offset: usize, count: usize },
    #[error("a bundle of no messages")]
    EmptyBundle,
    #[error("a bundle inside a bundle at offset {offset}")]
    NestedBundle { offset: usize },
    #[error("a bundle of messages where one message was expected")]
    UnexpectedBundle,
    #[error("frame is {len} bytes, over the limit of {MAX_FRAME_BYTES} bytes")]
    FrameTooLarge { len: usize },
    #[error("filters nest more than {MAX_FILTER_DEPTH} levels deep at offset {offset}")]
    FilterTooDeep { offset: usize },
}

impl ProtocolError {
    /// The code a relay answers an undecodable frame with.
    pub fn code(&self) -> ErrorCode {
        ErrorCode::InvalidArgument
    }
}

type Result<T> = std::result::Result<T, ProtocolError>;

/// Operators in wire order: the tag is the position.
const OPERATORS: [Operator; 10] = Operator::ALL;

/// Error codes in wire order: the tag is the position in `ErrorCode::ALL`.
const ERROR_CODES: [ErrorCode; 12] = ErrorCode::ALL;
