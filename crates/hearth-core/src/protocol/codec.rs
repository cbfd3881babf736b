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
//!
//! u64, u32   = varint: unsigned LEB128 as in the document encoding (canonical, at most 10
//!              bytes); a u32 field refuses values above u32::MAX
//! i64        = varint of the zigzag form (n << 1) ^ (n >> 63)
//! bool       = 0x00 false | 0x01 true
//! option<T>  = 0x00 | 0x01 T
//! list<T>    = count:varint T*count
//! string     = len:varint utf8-bytes*len
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

use crate::document::{validate_fields, Document, DocumentError, MAX_DOCUMENT_BYTES};
use crate::encoding::document::{
    decode_document, decode_fields, decode_value, encode_document, encode_fields, encode_value,
    DecodeError,
};
use crate::encoding::key::Direction;
use crate::encoding::varint::{self, put as put_varint, unzigzag, zigzag, VarintError};
use crate::index::config::{parse_index_file, IndexFileError};
use crate::mutation::{FieldTransform, Mutation, MutationKind, Precondition, SetMerge};
use crate::path::{CollectionPath, DocumentName, FieldPath, PathError};
use crate::query::model::{
    Aggregation, Cursor, FieldFilter, Filter, LimitType, Operator, OrderBy, Query, Source,
};
use crate::value::Value;

use super::{
    ClientMessage, DocumentChange, ErrorCode, ServerMessage, TargetChangeKind, MAX_FRAME_BYTES,
};

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

// ---- Encoding ----

/// Encodes a client message as one frame.
pub fn encode_client(m: &ClientMessage) -> Vec<u8> {
    let mut out = Vec::new();
    match m {
        ClientMessage::Hello {
            protocol_version,
            database,
            client_id,
            token,
        } => {
            out.push(ty::HELLO);
            put_varint(u64::from(*protocol_version), &mut out);
            put_str(database, &mut out);
            put_str(client_id, &mut out);
            put_str(token, &mut out);
        }
        ClientMessage::Auth { token } => {
            out.push(ty::AUTH);
            put_str(token, &mut out);
        }
        ClientMessage::Get { request_id, names } => {
            out.push(ty::GET);
            put_varint(*request_id, &mut out);
            put_list(names, &mut out, put_name);
        }
        ClientMessage::RunQuery { request_id, query } => {
            out.push(ty::RUN_QUERY);
            put_varint(*request_id, &mut out);
            encode_query(query, &mut out);
        }
        ClientMessage::RunAggregation {
            request_id,
            query,
            aggregations,
        } => {
            out.push(ty::RUN_AGGREGATION);
            put_varint(*request_id, &mut out);
            encode_query(query, &mut out);
            put_list(aggregations, &mut out, put_aggregation);
        }
        ClientMessage::Write {
            request_id,
            batch_id,
            mutations,
            reads,
        } => {
            out.push(ty::WRITE);
            put_varint(*request_id, &mut out);
            put_varint(*batch_id, &mut out);
            put_list(mutations, &mut out, encode_mutation);
            put_list(reads, &mut out, |(name, version), out| {
                put_name(name, out);
                put_option(version.as_ref(), out, |v, out| put_varint(*v, out));
            });
        }
        ClientMessage::Listen {
            target_id,
            query,
            resume_version,
        } => {
            out.push(ty::LISTEN);
            put_varint(u64::from(*target_id), &mut out);
            encode_query(query, &mut out);
            put_option(resume_version.as_ref(), &mut out, |v, out| {
                put_varint(*v, out)
            });
        }
        ClientMessage::Unlisten { target_id } => {
            out.push(ty::UNLISTEN);
            put_varint(u64::from(*target_id), &mut out);
        }
        ClientMessage::Ping { nonce } => {
            out.push(ty::PING);
            put_varint(*nonce, &mut out);
        }
    }
    out
}

/// Encodes a relay message as one frame. The caller keeps a frame within
/// [`MAX_FRAME_BYTES`] (splitting large results over several messages).
///
/// # Panics
///
/// If a carried document is one the document encoding refuses (an empty field name, a
/// document over 1 MiB, ...): the relay only holds documents that passed that check.
pub fn encode_server(m: &ServerMessage) -> Vec<u8> {
    let mut out = Vec::new();
    match m {
        ServerMessage::Welcome {
            protocol_version,
            version,
            indexes,
            heartbeat_ms,
        } => {
            out.push(ty::WELCOME);
            put_varint(u64::from(*protocol_version), &mut out);
            put_varint(*version, &mut out);
            put_str(&indexes.to_json(), &mut out);
            put_varint(u64::from(*heartbeat_ms), &mut out);
        }
        ServerMessage::GetResult {
            request_id,
            version,
            documents,
        } => {
            out.push(ty::GET_RESULT);
            put_varint(*request_id, &mut out);
            put_varint(*version, &mut out);
            put_list(documents, &mut out, |(name, doc), out| {
                put_name(name, out);
                put_option(doc.as_ref(), out, put_document);
            });
        }
        ServerMessage::QueryResult {
            request_id,
            version,
            documents,
        } => {
            out.push(ty::QUERY_RESULT);
            put_varint(*request_id, &mut out);
            put_varint(*version, &mut out);
            put_list(documents, &mut out, put_document);
        }
        ServerMessage::AggregationResult {
            request_id,
            version,
            values,
        } => {
            out.push(ty::AGGREGATION_RESULT);
            put_varint(*request_id, &mut out);
            put_varint(*version, &mut out);
            put_list(values, &mut out, encode_value);
        }
        ServerMessage::WriteResult {
            request_id,
            batch_id,
            version,
        } => {
            out.push(ty::WRITE_RESULT);
            put_varint(*request_id, &mut out);
            put_varint(*batch_id, &mut out);
            put_varint(*version, &mut out);
        }
        ServerMessage::TargetChange {
            target_id,
            kind,
            changes,
        } => {
            out.push(ty::TARGET_CHANGE);
            put_varint(u64::from(*target_id), &mut out);
            out.push(match kind {
                TargetChangeKind::Delta => 0,
                TargetChangeKind::Reset => 1,
            });
            put_list(changes, &mut out, |change, out| match change {
                DocumentChange::Upsert(doc) => {
                    out.push(0);
                    put_document(doc, out);
                }
                DocumentChange::Remove(name) => {
                    out.push(1);
                    put_name(name, out);
                }
            });
        }
        ServerMessage::Snapshot { version } => {
            out.push(ty::SNAPSHOT);
            put_varint(*version, &mut out);
        }
        ServerMessage::Heartbeat { version, nonce } => {
            out.push(ty::HEARTBEAT);
            put_varint(*version, &mut out);
            put_varint(*nonce, &mut out);
        }
        ServerMessage::Error {
            request_id,
            target_id,
            code,
            message,
        } => {
            out.push(ty::ERROR);
            put_varint(*request_id, &mut out);
            put_varint(u64::from(*target_id), &mut out);
            out.push(error_code_tag(*code));
            put_str(message, &mut out);
        }
    }
    out
}

/// Appends the encoding of a query (the `query` of the frame layout). Filters nested deeper
/// than [`MAX_FILTER_DEPTH`] are written, but no decoder reads them back.
pub fn encode_query(q: &Query, out: &mut Vec<u8>) {
    match &q.source {
        Source::Collection(path) => {
            out.push(0);
            put_str(&path.to_string(), out);
        }
        Source::CollectionGroup(id) => {
            out.push(1);
            put_str(id, out);
        }
    }
    put_option(q.filter.as_ref(), out, put_filter);
    put_list(&q.order_by, out, |o, out| {
        put_field_path(&o.field, out);
        out.push(match o.dir {
            Direction::Ascending => 0,
            Direction::Descending => 1,
        });
    });
    put_option(q.limit.as_ref(), out, |n, out| put_varint(zigzag(*n), out));
    out.push(match q.limit_type {
        LimitType::First => 0,
        LimitType::Last => 1,
    });
    put_option(q.start.as_ref(), out, put_cursor);
    put_option(q.end.as_ref(), out, put_cursor);
    put_varint(q.offset, out);
    put_option(q.projection.as_ref(), out, |fields, out| {
        put_list(fields, out, put_field_path)
    });
}

/// Appends the encoding of a mutation (the `mutation` of the frame layout).
pub fn encode_mutation(m: &Mutation, out: &mut Vec<u8>) {
    put_name(&m.name, out);
    match &m.kind {
        MutationKind::Set { fields, merge } => {
            out.push(0);
            encode_fields(fields, out);
            match merge {
                SetMerge::Overwrite => out.push(0),
                SetMerge::MergeAll => out.push(1),
                SetMerge::MergeFields(paths) => {
                    out.push(2);
                    put_list(paths, out, put_field_path);
                }
            }
        }
        MutationKind::Update { fields } => {
            out.push(1);
            put_list(fields, out, |(path, value), out| {
                put_field_path(path, out);
                put_option(value.as_ref(), out, encode_value);
            });
        }
        MutationKind::Delete => out.push(2),
    }
    match m.precondition {
        Precondition::None => out.push(0),
        Precondition::Exists(exists) => {
            out.push(1);
            out.push(u8::from(exists));
        }
        Precondition::UpdateVersion(v) => {
            out.push(2);
            put_varint(v, out);
        }
    }
    put_list(&m.transforms, out, |(path, t), out| {
        put_field_path(path, out);
        match t {
            FieldTransform::Increment(v) => put_tagged_value(0, v, out),
            FieldTransform::Maximum(v) => put_tagged_value(1, v, out),
            FieldTransform::Minimum(v) => put_tagged_value(2, v, out),
            FieldTransform::ServerTimestamp => out.push(3),
            FieldTransform::ArrayUnion(vs) => {
                out.push(4);
                put_list(vs, out, encode_value);
            }
            FieldTransform::ArrayRemove(vs) => {
                out.push(5);
                put_list(vs, out, encode_value);
            }
        }
    });
    put_list(&m.field_deletes_in_merge, out, put_field_path);
}

fn put_str(s: &str, out: &mut Vec<u8>) {
    put_varint(s.len() as u64, out);
    out.extend_from_slice(s.as_bytes());
}

fn put_name(name: &DocumentName, out: &mut Vec<u8>) {
    put_str(&name.to_string(), out);
}

fn put_field_path(path: &FieldPath, out: &mut Vec<u8>) {
    put_list(path.segments(), out, |s, out| put_str(s, out));
}

fn put_document(doc: &Document, out: &mut Vec<u8>) {
    let bytes = encode_document(doc)
        .unwrap_or_else(|e| panic!("document `{}` in a message is invalid: {e}", doc.name));
    put_varint(bytes.len() as u64, out);
    out.extend_from_slice(&bytes);
}

fn put_list<T>(items: &[T], out: &mut Vec<u8>, mut put: impl FnMut(&T, &mut Vec<u8>)) {
    put_varint(items.len() as u64, out);
    for item in items {
        put(item, out);
    }
}

fn put_option<T>(item: Option<&T>, out: &mut Vec<u8>, put: impl FnOnce(&T, &mut Vec<u8>)) {
    match item {
        None => out.push(0),
        Some(item) => {
            out.push(1);
            put(item, out);
        }
    }
}

fn put_tagged_value(tag: u8, v: &Value, out: &mut Vec<u8>) {
    out.push(tag);
    encode_value(v, out);
}

fn put_filter(f: &Filter, out: &mut Vec<u8>) {
    match f {
        Filter::Field(ff) => {
            out.push(0);
            put_field_path(&ff.field, out);
            out.push(operator_tag(ff.op));
            encode_value(&ff.value, out);
        }
        Filter::And(fs) => {
            out.push(1);
            put_list(fs, out, put_filter);
        }
        Filter::Or(fs) => {
            out.push(2);
            put_list(fs, out, put_filter);
        }
    }
}

fn put_cursor(c: &Cursor, out: &mut Vec<u8>) {
    put_list(&c.values, out, encode_value);
    out.push(u8::from(c.inclusive));
    out.push(u8::from(c.from_document));
}

fn put_aggregation(a: &Aggregation, out: &mut Vec<u8>) {
    match a {
        Aggregation::Count => out.push(0),
        Aggregation::Sum(path) => {
            out.push(1);
            put_field_path(path, out);
        }
        Aggregation::Average(path) => {
            out.push(2);
            put_field_path(path, out);
        }
    }
}

/// Operators in wire order: the tag is the position.
const OPERATORS: [Operator; 10] = [
    Operator::Equal,
    Operator::NotEqual,
    Operator::LessThan,
    Operator::LessThanOrEqual,
    Operator::GreaterThan,
    Operator::GreaterThanOrEqual,
    Operator::In,
    Operator::NotIn,
    Operator::ArrayContains,
    Operator::ArrayContainsAny,
];

fn operator_tag(op: Operator) -> u8 {
    OPERATORS
        .iter()
        .position(|&o| o == op)
        .expect("every operator is in OPERATORS") as u8
}

/// Error codes in wire order: the tag is the position in `ErrorCode::ALL`.
const ERROR_CODES: [ErrorCode; 12] = ErrorCode::ALL;

fn error_code_tag(code: ErrorCode) -> u8 {
    code.tag()
}

// ---- Decoding ----

/// Decodes one frame from a client.
pub fn decode_client(b: &[u8]) -> Result<ClientMessage> {
    let mut r = Reader::frame(b)?;
    let m = match r.byte()? {
        ty::HELLO => ClientMessage::Hello {
            protocol_version: r.u32("protocol version")?,
            database: r.string()?,
            client_id: r.string()?,
            token: r.string()?,
        },
        ty::AUTH => ClientMessage::Auth { token: r.string()? },
        ty::GET => ClientMessage::Get {
            request_id: r.varint()?,
            names: r.list(Reader::name)?,
        },
        ty::RUN_QUERY => ClientMessage::RunQuery {
            request_id: r.varint()?,
            query: r.query()?,
        },
        ty::RUN_AGGREGATION => ClientMessage::RunAggregation {
            request_id: r.varint()?,
            query: r.query()?,
            aggregations: r.list(Reader::aggregation)?,
        },
        ty::WRITE => ClientMessage::Write {
            request_id: r.varint()?,
            batch_id: r.varint()?,
            mutations: r.list(Reader::mutation)?,
            reads: r.list(|r| Ok((r.name()?, r.option(Reader::varint)?)))?,
        },
        ty::LISTEN => ClientMessage::Listen {
            target_id: r.u32("target id")?,
            query: r.query()?,
            resume_version: r.option(Reader::varint)?,
        },
        ty::UNLISTEN => ClientMessage::Unlisten {
            target_id: r.u32("target id")?,
        },
        ty::PING => ClientMessage::Ping { nonce: r.varint()? },
        tag => return Err(ProtocolError::UnknownMessageType { tag }),
    };
    r.finish()?;
    Ok(m)
}

/// Decodes one frame from the relay.
pub fn decode_server(b: &[u8]) -> Result<ServerMessage> {
    let mut r = Reader::frame(b)?;
    let m = match r.byte()? {
        ty::WELCOME => ServerMessage::Welcome {
            protocol_version: r.u32("protocol version")?,
            version: r.varint()?,
            indexes: r.index_file()?,
            heartbeat_ms: r.u32("heartbeat interval")?,
        },
        ty::GET_RESULT => ServerMessage::GetResult {
            request_id: r.varint()?,
            version: r.varint()?,
            documents: r.list(|r| Ok((r.name()?, r.option(Reader::document)?)))?,
        },
        ty::QUERY_RESULT => ServerMessage::QueryResult {
            request_id: r.varint()?,
            version: r.varint()?,
            documents: r.list(Reader::document)?,
        },
        ty::AGGREGATION_RESULT => ServerMessage::AggregationResult {
            request_id: r.varint()?,
            version: r.varint()?,
            values: r.list(Reader::value)?,
        },
        ty::WRITE_RESULT => ServerMessage::WriteResult {
            request_id: r.varint()?,
            batch_id: r.varint()?,
            version: r.varint()?,
        },
        ty::TARGET_CHANGE => ServerMessage::TargetChange {
            target_id: r.u32("target id")?,
            kind: match r.tag("target change kind", 2)? {
                0 => TargetChangeKind::Delta,
                _ => TargetChangeKind::Reset,
            },
            changes: r.list(|r| {
                Ok(match r.tag("document change", 2)? {
                    0 => DocumentChange::Upsert(r.document()?),
                    _ => DocumentChange::Remove(r.name()?),
                })
            })?,
        },
        ty::SNAPSHOT => ServerMessage::Snapshot {
            version: r.varint()?,
        },
        ty::HEARTBEAT => ServerMessage::Heartbeat {
            version: r.varint()?,
            nonce: r.varint()?,
        },
        ty::ERROR => ServerMessage::Error {
            request_id: r.varint()?,
            target_id: r.u32("target id")?,
            code: ERROR_CODES[usize::from(r.tag("error code", ERROR_CODES.len() as u8)?)],
            message: r.string()?,
        },
        tag => return Err(ProtocolError::UnknownMessageType { tag }),
    };
    r.finish()?;
    Ok(m)
}

/// The protocol version of a `Hello` frame, read from its type byte and first field only.
///
/// Those two are the same in every protocol version, so a relay can answer a client of a
/// version it does not speak with `failed-precondition` even when the rest of that client's
/// `Hello` is laid out differently. `None` if `b` does not start like a `Hello`.
pub fn peek_hello_version(b: &[u8]) -> Option<u32> {
    let mut r = Reader::frame(b).ok()?;
    if r.byte().ok()? != ty::HELLO {
        return None;
    }
    r.u32("protocol version").ok()
}

/// Decodes a query written by [`encode_query`]; the whole slice must be one query.
pub fn decode_query(b: &[u8]) -> Result<Query> {
    let mut r = Reader { bytes: b, pos: 0 };
    let q = r.query()?;
    r.finish()?;
    Ok(q)
}

/// Decodes a mutation written by [`encode_mutation`]; the whole slice must be one mutation.
pub fn decode_mutation(b: &[u8]) -> Result<Mutation> {
    let mut r = Reader { bytes: b, pos: 0 };
    let m = r.mutation()?;
    r.finish()?;
    Ok(m)
}

/// A cursor over untrusted input. Invariant: `pos <= bytes.len()`.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn frame(bytes: &'a [u8]) -> Result<Reader<'a>> {
        if bytes.len() > MAX_FRAME_BYTES {
            return Err(ProtocolError::FrameTooLarge { len: bytes.len() });
        }
        Ok(Reader { bytes, pos: 0 })
    }

    fn finish(&self) -> Result<()> {
        match self.remaining() {
            0 => Ok(()),
            count => Err(ProtocolError::TrailingBytes {
                offset: self.pos,
                count,
            }),
        }
    }

    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn rest(&self) -> &'a [u8] {
        self.bytes.get(self.pos..).unwrap_or_default()
    }

    fn byte(&mut self) -> Result<u8> {
        let b = *self
            .bytes
            .get(self.pos)
            .ok_or(ProtocolError::Truncated { offset: self.pos })?;
        self.pos += 1;
        Ok(b)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(ProtocolError::Truncated { offset: self.pos });
        }
        let b = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(b)
    }

    /// An enum tag below `count`, refused with the enum's name otherwise.
    fn tag(&mut self, what: &'static str, count: u8) -> Result<u8> {
        let offset = self.pos;
        let tag = self.byte()?;
        if tag < count {
            Ok(tag)
        } else {
            Err(ProtocolError::UnknownTag { what, tag, offset })
        }
    }

    fn bool(&mut self, what: &'static str) -> Result<bool> {
        Ok(self.tag(what, 2)? == 1)
    }

    fn varint(&mut self) -> Result<u64> {
        let offset = self.pos;
        match varint::read(self.rest()) {
            Ok((v, used)) => {
                self.pos += used;
                Ok(v)
            }
            // A varint cut short runs to the end of the frame: more bytes are needed there.
            Err(VarintError::Truncated) => Err(ProtocolError::Truncated {
                offset: self.bytes.len(),
            }),
            Err(VarintError::Malformed) => Err(ProtocolError::BadVarint { offset }),
        }
    }

    fn u32(&mut self, what: &'static str) -> Result<u32> {
        let offset = self.pos;
        let value = self.varint()?;
        u32::try_from(value).map_err(|_| ProtocolError::OutOfRange {
            what,
            value,
            offset,
        })
    }

    /// A length or count, refused unless the remaining input could hold that many bytes
    /// (every item takes at least one). This is what makes reserving memory for it safe.
    fn count(&mut self) -> Result<usize> {
        let offset = self.pos;
        let len = self.varint()?;
        let remaining = self.remaining();
        match usize::try_from(len) {
            Ok(n) if n <= remaining => Ok(n),
            _ => Err(ProtocolError::LengthTooLarge {
                offset,
                len,
                remaining,
            }),
        }
    }

    fn string(&mut self) -> Result<String> {
        let n = self.count()?;
        let offset = self.pos;
        let b = self.take(n)?;
        std::str::from_utf8(b)
            .map(str::to_owned)
            .map_err(|_| ProtocolError::BadUtf8 { offset })
    }

    fn list<T>(&mut self, mut item: impl FnMut(&mut Self) -> Result<T>) -> Result<Vec<T>> {
        let n = self.count()?;
        let mut items = Vec::with_capacity(n.min(MAX_PREALLOC));
        for _ in 0..n {
            items.push(item(self)?);
        }
        Ok(items)
    }

    fn option<T>(&mut self, item: impl FnOnce(&mut Self) -> Result<T>) -> Result<Option<T>> {
        if self.bool("option presence")? {
            item(self).map(Some)
        } else {
            Ok(None)
        }
    }

    /// A path string that must be in its canonical spelling (no leading `/`), so that each
    /// name has one encoding.
    fn path<T: ToString>(
        &mut self,
        parse: fn(&str) -> std::result::Result<T, PathError>,
    ) -> Result<T> {
        let offset = self.pos;
        let s = self.string()?;
        let parsed = parse(&s).map_err(|source| ProtocolError::InvalidName { offset, source })?;
        if parsed.to_string() != s {
            return Err(ProtocolError::InvalidName {
                offset,
                source: PathError::EmptySegment { path: s },
            });
        }
        Ok(parsed)
    }

    fn name(&mut self) -> Result<DocumentName> {
        self.path(DocumentName::parse)
    }

    fn field_path(&mut self) -> Result<FieldPath> {
        let offset = self.pos;
        let segments = self.list(Reader::string)?;
        FieldPath::from_segments(segments)
            .map_err(|source| ProtocolError::InvalidFieldPath { offset, source })
    }

    fn value(&mut self) -> Result<Value> {
        let offset = self.pos;
        let (v, used) = decode_value(self.rest())
            .map_err(|source| ProtocolError::InvalidValue { offset, source })?;
        self.pos += used;
        Ok(v)
    }

    /// A document, held to the limits the encoder enforces, so that a receiver can store
    /// (and re-encode) whatever it accepts.
    fn document(&mut self) -> Result<Document> {
        let n = self.count()?;
        let offset = self.pos;
        let b = self.take(n)?;
        let limit = |source| ProtocolError::DocumentLimit { offset, source };
        if n > MAX_DOCUMENT_BYTES {
            return Err(limit(DocumentError::TooLarge { size: n }));
        }
        let doc = decode_document(b)
            .map_err(|source| ProtocolError::InvalidDocument { offset, source })?;
        validate_fields(&doc.fields).map_err(limit)?;
        Ok(doc)
    }

    fn index_file(&mut self) -> Result<crate::index::config::IndexFile> {
        let offset = self.pos;
        let text = self.string()?;
        let bad = |source| ProtocolError::InvalidIndexFile { offset, source };
        // Strict JSON first: serde_json bounds its own recursion, and measuring the depth of
        // its tree keeps hostile nesting away from the JSON5 parser.
        let tree: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
            bad(IndexFileError::Syntax {
                line: e.line(),
                column: e.column(),
                message: e.to_string(),
            })
        })?;
        if json_depth(&tree) > MAX_INDEX_JSON_DEPTH {
            return Err(bad(IndexFileError::Syntax {
                line: 1,
                column: 1,
                message: format!("nested more than {MAX_INDEX_JSON_DEPTH} levels deep"),
            }));
        }
        parse_index_file(&text).map_err(bad)
    }

    fn query(&mut self) -> Result<Query> {
        let source = match self.tag("query source", 2)? {
            0 => Source::Collection(self.path(CollectionPath::parse)?),
            _ => Source::CollectionGroup(self.string()?),
        };
        Ok(Query {
            source,
            filter: self.option(|r| r.filter(1))?,
            order_by: self.list(|r| {
                Ok(OrderBy {
                    field: r.field_path()?,
                    dir: match r.tag("direction", 2)? {
                        0 => Direction::Ascending,
                        _ => Direction::Descending,
                    },
                })
            })?,
            limit: self.option(|r| r.varint().map(unzigzag))?,
            limit_type: match self.tag("limit type", 2)? {
                0 => LimitType::First,
                _ => LimitType::Last,
            },
            start: self.option(Reader::cursor)?,
            end: self.option(Reader::cursor)?,
            offset: self.varint()?,
            projection: self.option(|r| r.list(Reader::field_path))?,
        })
    }

    /// `depth` is this filter's level: 1 for the root.
    fn filter(&mut self, depth: usize) -> Result<Filter> {
        if depth > MAX_FILTER_DEPTH {
            return Err(ProtocolError::FilterTooDeep { offset: self.pos });
        }
        Ok(match self.tag("filter", 3)? {
            0 => Filter::Field(FieldFilter {
                field: self.field_path()?,
                op: OPERATORS[usize::from(self.tag("operator", OPERATORS.len() as u8)?)],
                value: self.value()?,
            }),
            1 => Filter::And(self.list(|r| r.filter(depth + 1))?),
            _ => Filter::Or(self.list(|r| r.filter(depth + 1))?),
        })
    }

    fn cursor(&mut self) -> Result<Cursor> {
        Ok(Cursor {
            values: self.list(Reader::value)?,
            inclusive: self.bool("cursor inclusive")?,
            from_document: self.bool("cursor from document")?,
        })
    }

    fn aggregation(&mut self) -> Result<Aggregation> {
        Ok(match self.tag("aggregation", 3)? {
            0 => Aggregation::Count,
            1 => Aggregation::Sum(self.field_path()?),
            _ => Aggregation::Average(self.field_path()?),
        })
    }

    fn mutation(&mut self) -> Result<Mutation> {
        let name = self.name()?;
        let kind = match self.tag("mutation kind", 3)? {
            0 => {
                let offset = self.pos;
                let (fields, used) = decode_fields(self.rest())
                    .map_err(|source| ProtocolError::InvalidValue { offset, source })?;
                self.pos += used;
                let merge = match self.tag("set merge", 3)? {
                    0 => SetMerge::Overwrite,
                    1 => SetMerge::MergeAll,
                    _ => SetMerge::MergeFields(self.list(Reader::field_path)?),
                };
                MutationKind::Set { fields, merge }
            }
            1 => MutationKind::Update {
                fields: self.list(|r| Ok((r.field_path()?, r.option(Reader::value)?)))?,
            },
            _ => MutationKind::Delete,
        };
        let precondition = match self.tag("precondition", 3)? {
            0 => Precondition::None,
            1 => Precondition::Exists(self.bool("precondition exists")?),
            _ => Precondition::UpdateVersion(self.varint()?),
        };
        Ok(Mutation {
            name,
            kind,
            precondition,
            transforms: self.list(|r| Ok((r.field_path()?, r.transform()?)))?,
            field_deletes_in_merge: self.list(Reader::field_path)?,
        })
    }

    fn transform(&mut self) -> Result<FieldTransform> {
        Ok(match self.tag("field transform", 6)? {
            0 => FieldTransform::Increment(self.value()?),
            1 => FieldTransform::Maximum(self.value()?),
            2 => FieldTransform::Minimum(self.value()?),
            3 => FieldTransform::ServerTimestamp,
            4 => FieldTransform::ArrayUnion(self.list(Reader::value)?),
            _ => FieldTransform::ArrayRemove(self.list(Reader::value)?),
        })
    }
}

/// Levels of arrays and objects in a JSON tree (a scalar is 0). The tree is at most
/// serde_json's recursion limit deep, so this recursion is bounded.
fn json_depth(v: &serde_json::Value) -> usize {
    match v {
        serde_json::Value::Array(a) => 1 + a.iter().map(json_depth).max().unwrap_or(0),
        serde_json::Value::Object(o) => 1 + o.values().map(json_depth).max().unwrap_or(0),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::config::{
        CompositeIndexSpec, FieldMode, FieldOverrideSpec, IndexFieldSpec, IndexFile,
        OverrideIndexSpec, QueryScope,
    };
    use crate::value::{GeoPoint, Map, Timestamp};
    use proptest::collection::{btree_map, btree_set, vec};
    use proptest::prelude::*;

    // ---- Strategies: small, always valid data ----

    fn arb_segment() -> impl Strategy<Value = String> {
        prop_oneof![4 => "[a-e]{1,3}", 1 => "[a-z\u{FFFD}😀é]{1,3}"]
    }

    fn arb_name() -> impl Strategy<Value = DocumentName> {
        vec((arb_segment(), arb_segment()), 1..=2).prop_map(|pairs| {
            let segments = pairs.into_iter().flat_map(|(c, d)| [c, d]).collect();
            DocumentName::from_segments(segments).expect("generated segments are valid")
        })
    }

    fn arb_field_path() -> impl Strategy<Value = FieldPath> {
        prop_oneof![
            4 => vec(prop_oneof![3 => "[a-c]{1,2}", 1 => "[a.` \\\\é]{1,3}"], 1..=3)
                .prop_map(|s| FieldPath::from_segments(s).expect("non-empty segments")),
            1 => Just(FieldPath::document_id()),
        ]
    }

    fn arb_scalar() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Boolean),
            any::<i64>().prop_map(Value::Integer),
            any::<f64>().prop_map(Value::Double),
            (-100_000i64..100_000, 0i64..1_000_000_000)
                .prop_map(|(s, n)| Value::Timestamp(Timestamp::new(s, n).unwrap())),
            "(?s).{0,6}".prop_map(Value::String),
            vec(any::<u8>(), 0..6).prop_map(Value::Bytes),
            arb_name().prop_map(Value::Reference),
            (-90.0f64..=90.0, -180.0f64..=180.0)
                .prop_map(|(a, b)| Value::GeoPoint(GeoPoint::new(a, b).unwrap())),
        ]
    }

    /// Scalars, arrays of scalars and maps of either: valid document data (no array directly
    /// inside an array).
    fn arb_value() -> impl Strategy<Value = Value> {
        let array = vec(arb_scalar(), 0..3).prop_map(Value::Array);
        let leaf = prop_oneof![3 => arb_scalar(), 1 => array];
        prop_oneof![
            3 => leaf.clone(),
            1 => btree_map("[a-c]{1,2}", leaf, 0..3).prop_map(Value::Map),
        ]
    }

    fn arb_fields() -> impl Strategy<Value = Map> {
        btree_map("[a-d]{1,2}", arb_value(), 0..4)
    }

    fn arb_document() -> impl Strategy<Value = Document> {
        (arb_name(), arb_fields(), any::<u64>(), any::<u64>()).prop_map(|(name, fields, c, u)| {
            Document {
                name,
                fields: fields.into(),
                create_version: c,
                update_version: u,
            }
        })
    }

    fn arb_filter() -> impl Strategy<Value = Filter> {
        let leaf =
            (arb_field_path(), 0..OPERATORS.len(), arb_value()).prop_map(|(field, op, value)| {
                Filter::Field(FieldFilter {
                    field,
                    op: OPERATORS[op],
                    value,
                })
            });
        leaf.prop_recursive(3, 12, 3, |inner| {
            prop_oneof![
                vec(inner.clone(), 0..3).prop_map(Filter::And),
                vec(inner, 0..3).prop_map(Filter::Or),
            ]
        })
    }

    fn arb_cursor() -> impl Strategy<Value = Cursor> {
        (vec(arb_value(), 0..3), any::<bool>(), any::<bool>()).prop_map(
            |(values, inclusive, from_document)| Cursor {
                values,
                inclusive,
                from_document,
            },
        )
    }

    fn arb_query() -> impl Strategy<Value = Query> {
        let source = prop_oneof![
            vec(arb_segment(), 0..=1).prop_map(|parent| {
                let mut segments = Vec::new();
                for p in parent {
                    segments.extend(["p".to_owned(), p]);
                }
                segments.push("c".to_owned());
                Source::Collection(CollectionPath::from_segments(segments).unwrap())
            }),
            "(?s).{0,4}".prop_map(Source::CollectionGroup),
        ];
        let order_by = vec(
            (arb_field_path(), any::<bool>()).prop_map(|(field, desc)| OrderBy {
                field,
                dir: if desc {
                    Direction::Descending
                } else {
                    Direction::Ascending
                },
            }),
            0..3,
        );
        (
            source,
            proptest::option::of(arb_filter()),
            order_by,
            proptest::option::of(any::<i64>()),
            any::<bool>(),
            proptest::option::of(arb_cursor()),
            proptest::option::of(arb_cursor()),
            any::<u64>(),
            proptest::option::of(vec(arb_field_path(), 0..3)),
        )
            .prop_map(
                |(source, filter, order_by, limit, last, start, end, offset, projection)| Query {
                    source,
                    filter,
                    order_by,
                    limit,
                    limit_type: if last {
                        LimitType::Last
                    } else {
                        LimitType::First
                    },
                    start,
                    end,
                    offset,
                    projection,
                },
            )
    }

    fn arb_transform() -> impl Strategy<Value = FieldTransform> {
        prop_oneof![
            arb_value().prop_map(FieldTransform::Increment),
            arb_value().prop_map(FieldTransform::Maximum),
            arb_value().prop_map(FieldTransform::Minimum),
            Just(FieldTransform::ServerTimestamp),
            vec(arb_value(), 0..3).prop_map(FieldTransform::ArrayUnion),
            vec(arb_value(), 0..3).prop_map(FieldTransform::ArrayRemove),
        ]
    }

    fn arb_mutation() -> impl Strategy<Value = Mutation> {
        let merge = prop_oneof![
            Just(SetMerge::Overwrite),
            Just(SetMerge::MergeAll),
            vec(arb_field_path(), 0..3).prop_map(SetMerge::MergeFields),
        ];
        let kind = prop_oneof![
            (arb_fields(), merge).prop_map(|(fields, merge)| MutationKind::Set { fields, merge }),
            vec((arb_field_path(), proptest::option::of(arb_value())), 0..3)
                .prop_map(|fields| MutationKind::Update { fields }),
            Just(MutationKind::Delete),
        ];
        let precondition = prop_oneof![
            Just(Precondition::None),
            any::<bool>().prop_map(Precondition::Exists),
            any::<u64>().prop_map(Precondition::UpdateVersion),
        ];
        (
            arb_name(),
            kind,
            precondition,
            vec((arb_field_path(), arb_transform()), 0..3),
            vec(arb_field_path(), 0..2),
        )
            .prop_map(
                |(name, kind, precondition, transforms, field_deletes_in_merge)| Mutation {
                    name,
                    kind,
                    precondition,
                    transforms,
                    field_deletes_in_merge,
                },
            )
    }

    fn arb_aggregation() -> impl Strategy<Value = Aggregation> {
        prop_oneof![
            Just(Aggregation::Count),
            arb_field_path().prop_map(Aggregation::Sum),
            arb_field_path().prop_map(Aggregation::Average),
        ]
    }

    const MODES: [FieldMode; 3] = [
        FieldMode::Ascending,
        FieldMode::Descending,
        FieldMode::ArrayContains,
    ];

    /// Index files that the index-file parser accepts: composite indexes of 2 to 3 distinct
    /// fields with at most one array-contains, and overrides unique per group and field.
    fn arb_index_file() -> impl Strategy<Value = IndexFile> {
        let scope = any::<bool>().prop_map(|g| {
            if g {
                QueryScope::CollectionGroup
            } else {
                QueryScope::Collection
            }
        });
        let composite = (
            "[a-c]{1,2}",
            scope.clone(),
            btree_set("[a-e]{1,2}(\\.[xy])?", 2..4),
            vec(any::<bool>(), 3),
            proptest::option::of(0usize..3),
        )
            .prop_map(|(group, query_scope, paths, desc, array)| {
                let fields = paths
                    .into_iter()
                    .enumerate()
                    .map(|(i, p)| IndexFieldSpec {
                        field_path: FieldPath::parse(&p).unwrap(),
                        mode: if array == Some(i) {
                            FieldMode::ArrayContains
                        } else {
                            MODES[usize::from(desc[i])]
                        },
                    })
                    .collect();
                CompositeIndexSpec {
                    collection_group: group,
                    query_scope,
                    fields,
                }
            });
        let overrides = btree_map(
            ("[a-c]{1,2}", "[a-e]{1,2}"),
            btree_set((0usize..3, any::<bool>()), 0..4),
            0..3,
        )
        .prop_map(|m| {
            m.into_iter()
                .map(|((group, field), specs)| FieldOverrideSpec {
                    collection_group: group,
                    field_path: FieldPath::parse(&field).unwrap(),
                    indexes: specs
                        .into_iter()
                        .map(|(mode, group_scope)| OverrideIndexSpec {
                            mode: MODES[mode],
                            query_scope: if group_scope {
                                QueryScope::CollectionGroup
                            } else {
                                QueryScope::Collection
                            },
                        })
                        .collect(),
                })
                .collect()
        });
        (vec(composite, 0..3), overrides).prop_map(|(indexes, field_overrides)| IndexFile {
            indexes,
            field_overrides,
        })
    }

    fn arb_client_message() -> impl Strategy<Value = ClientMessage> {
        prop_oneof![
            (
                any::<u32>(),
                "(?s).{0,6}",
                "[A-Za-z0-9]{0,20}",
                "(?s).{0,8}"
            )
                .prop_map(|(protocol_version, database, client_id, token)| {
                    ClientMessage::Hello {
                        protocol_version,
                        database,
                        client_id,
                        token,
                    }
                }),
            "(?s).{0,8}".prop_map(|token| ClientMessage::Auth { token }),
            (any::<u64>(), vec(arb_name(), 0..4))
                .prop_map(|(request_id, names)| ClientMessage::Get { request_id, names }),
            (any::<u64>(), arb_query())
                .prop_map(|(request_id, query)| ClientMessage::RunQuery { request_id, query }),
            (any::<u64>(), arb_query(), vec(arb_aggregation(), 0..3)).prop_map(
                |(request_id, query, aggregations)| ClientMessage::RunAggregation {
                    request_id,
                    query,
                    aggregations,
                }
            ),
            (
                any::<u64>(),
                any::<u64>(),
                vec(arb_mutation(), 0..3),
                vec((arb_name(), proptest::option::of(any::<u64>())), 0..3),
            )
                .prop_map(|(request_id, batch_id, mutations, reads)| {
                    ClientMessage::Write {
                        request_id,
                        batch_id,
                        mutations,
                        reads,
                    }
                }),
            (
                any::<u32>(),
                arb_query(),
                proptest::option::of(any::<u64>())
            )
                .prop_map(|(target_id, query, resume_version)| ClientMessage::Listen {
                    target_id,
                    query,
                    resume_version,
                }),
            any::<u32>().prop_map(|target_id| ClientMessage::Unlisten { target_id }),
            any::<u64>().prop_map(|nonce| ClientMessage::Ping { nonce }),
        ]
    }

    fn arb_server_message() -> impl Strategy<Value = ServerMessage> {
        let change = prop_oneof![
            arb_document().prop_map(DocumentChange::Upsert),
            arb_name().prop_map(DocumentChange::Remove),
        ];
        prop_oneof![
            (any::<u32>(), any::<u64>(), arb_index_file(), any::<u32>()).prop_map(
                |(protocol_version, version, indexes, heartbeat_ms)| ServerMessage::Welcome {
                    protocol_version,
                    version,
                    indexes,
                    heartbeat_ms,
                }
            ),
            (
                any::<u64>(),
                any::<u64>(),
                vec((arb_name(), proptest::option::of(arb_document())), 0..3)
            )
                .prop_map(|(request_id, version, documents)| {
                    ServerMessage::GetResult {
                        request_id,
                        version,
                        documents,
                    }
                }),
            (any::<u64>(), any::<u64>(), vec(arb_document(), 0..3)).prop_map(
                |(request_id, version, documents)| ServerMessage::QueryResult {
                    request_id,
                    version,
                    documents,
                }
            ),
            (any::<u64>(), any::<u64>(), vec(arb_value(), 0..3)).prop_map(
                |(request_id, version, values)| ServerMessage::AggregationResult {
                    request_id,
                    version,
                    values,
                }
            ),
            (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(
                |(request_id, batch_id, version)| ServerMessage::WriteResult {
                    request_id,
                    batch_id,
                    version,
                }
            ),
            (any::<u32>(), any::<bool>(), vec(change, 0..4)).prop_map(
                |(target_id, reset, changes)| ServerMessage::TargetChange {
                    target_id,
                    kind: if reset {
                        TargetChangeKind::Reset
                    } else {
                        TargetChangeKind::Delta
                    },
                    changes,
                }
            ),
            any::<u64>().prop_map(|version| ServerMessage::Snapshot { version }),
            (any::<u64>(), any::<u64>())
                .prop_map(|(version, nonce)| ServerMessage::Heartbeat { version, nonce }),
            (
                any::<u64>(),
                any::<u32>(),
                0..ERROR_CODES.len(),
                "(?s).{0,12}"
            )
                .prop_map(|(request_id, target_id, code, message)| {
                    ServerMessage::Error {
                        request_id,
                        target_id,
                        code: ERROR_CODES[code],
                        message,
                    }
                }),
        ]
    }

    /// A valid frame of either direction, for the robustness properties.
    fn arb_frame() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            arb_client_message().prop_map(|m| encode_client(&m)),
            arb_server_message().prop_map(|m| encode_server(&m)),
        ]
    }

    /// Decodes with both decoders; neither may panic. Returns whether either accepted.
    fn decode_any(b: &[u8]) -> bool {
        let client = decode_client(b);
        let server = decode_server(b);
        if let Ok(m) = &client {
            assert_eq!(encode_client(m), b, "accepted bytes re-encode identically");
        }
        if let Ok(m) = &server {
            if !matches!(m, ServerMessage::Welcome { .. }) {
                assert_eq!(encode_server(m), b, "accepted bytes re-encode identically");
            }
        }
        client.is_ok() || server.is_ok()
    }

    // ---- Properties ----

    proptest! {
        #[test]
        fn client_messages_round_trip(m in arb_client_message()) {
            let bytes = encode_client(&m);
            prop_assert_eq!(decode_client(&bytes), Ok(m));
            prop_assert!(decode_server(&bytes).is_err());
        }

        #[test]
        fn server_messages_round_trip(m in arb_server_message()) {
            let bytes = encode_server(&m);
            let back = decode_server(&bytes);
            prop_assert_eq!(back.as_ref(), Ok(&m));
            prop_assert_eq!(encode_server(&back.unwrap()), bytes.clone());
            prop_assert!(decode_client(&bytes).is_err());
        }

        #[test]
        fn queries_and_mutations_round_trip(q in arb_query(), m in arb_mutation()) {
            let mut bytes = Vec::new();
            encode_query(&q, &mut bytes);
            prop_assert_eq!(decode_query(&bytes), Ok(q));
            let mut bytes = Vec::new();
            encode_mutation(&m, &mut bytes);
            prop_assert_eq!(decode_mutation(&bytes), Ok(m));
        }

        #[test]
        fn random_bytes_never_panic(
            ty in prop_oneof![Just(None), (0x01u8..=0x09).prop_map(Some), (0x81u8..=0x89).prop_map(Some)],
            body in vec(any::<u8>(), 0..64),
        ) {
            let mut bytes: Vec<u8> = ty.into_iter().collect();
            bytes.extend(body);
            decode_any(&bytes);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn every_truncation_is_refused(frame in arb_frame()) {
            for end in 0..frame.len() {
                prop_assert!(!decode_any(&frame[..end]), "prefix of {} bytes accepted", end);
            }
        }

        #[test]
        fn bit_flips_never_panic(frame in arb_frame()) {
            let mut bytes = frame.clone();
            for i in 0..bytes.len() * 8 {
                bytes[i / 8] ^= 1 << (i % 8);
                decode_any(&bytes);
                bytes[i / 8] ^= 1 << (i % 8);
            }
        }

        #[test]
        fn trailing_bytes_are_refused(frame in arb_frame(), extra in vec(any::<u8>(), 1..4)) {
            let len = frame.len();
            let mut bytes = frame;
            bytes.extend(&extra);
            let count = extra.len();
            let expect = ProtocolError::TrailingBytes { offset: len, count };
            match bytes[0] {
                0x01..=0x7f => prop_assert_eq!(decode_client(&bytes), Err(expect)),
                _ => prop_assert_eq!(decode_server(&bytes), Err(expect)),
            }
        }
    }

    // ---- Examples ----

    fn name(s: &str) -> DocumentName {
        DocumentName::parse(s).unwrap()
    }

    #[test]
    fn type_bytes_are_fixed() {
        let q = Query::collection_group("c");
        let client = [
            (
                ClientMessage::Hello {
                    protocol_version: 1,
                    database: String::new(),
                    client_id: String::new(),
                    token: String::new(),
                },
                0x01,
            ),
            (
                ClientMessage::Auth {
                    token: String::new(),
                },
                0x02,
            ),
            (
                ClientMessage::Get {
                    request_id: 0,
                    names: vec![],
                },
                0x03,
            ),
            (
                ClientMessage::RunQuery {
                    request_id: 0,
                    query: q.clone(),
                },
                0x04,
            ),
            (
                ClientMessage::RunAggregation {
                    request_id: 0,
                    query: q.clone(),
                    aggregations: vec![],
                },
                0x05,
            ),
            (
                ClientMessage::Write {
                    request_id: 0,
                    batch_id: 0,
                    mutations: vec![],
                    reads: vec![],
                },
                0x06,
            ),
            (
                ClientMessage::Listen {
                    target_id: 0,
                    query: q,
                    resume_version: None,
                },
                0x07,
            ),
            (ClientMessage::Unlisten { target_id: 0 }, 0x08),
            (ClientMessage::Ping { nonce: 0 }, 0x09),
        ];
        for (m, ty) in client {
            assert_eq!(encode_client(&m)[0], ty, "{m:?}");
        }
        let server = [
            (
                ServerMessage::Welcome {
                    protocol_version: 1,
                    version: 0,
                    indexes: IndexFile::default(),
                    heartbeat_ms: 0,
                },
                0x81,
            ),
            (
                ServerMessage::GetResult {
                    request_id: 0,
                    version: 0,
                    documents: vec![],
                },
                0x82,
            ),
            (
                ServerMessage::QueryResult {
                    request_id: 0,
                    version: 0,
                    documents: vec![],
                },
                0x83,
            ),
            (
                ServerMessage::AggregationResult {
                    request_id: 0,
                    version: 0,
                    values: vec![],
                },
                0x84,
            ),
            (
                ServerMessage::WriteResult {
                    request_id: 0,
                    batch_id: 0,
                    version: 0,
                },
                0x85,
            ),
            (
                ServerMessage::TargetChange {
                    target_id: 0,
                    kind: TargetChangeKind::Delta,
                    changes: vec![],
                },
                0x86,
            ),
            (ServerMessage::Snapshot { version: 0 }, 0x87),
            (
                ServerMessage::Heartbeat {
                    version: 0,
                    nonce: 0,
                },
                0x88,
            ),
            (
                ServerMessage::Error {
                    request_id: 0,
                    target_id: 0,
                    code: ErrorCode::Internal,
                    message: String::new(),
                },
                0x89,
            ),
        ];
        for (m, ty) in server {
            assert_eq!(encode_server(&m)[0], ty, "{m:?}");
        }
    }

    /// The worked examples of `docs/protocol.md`, byte for byte.
    #[test]
    fn layouts_match_the_specification() {
        let hello = ClientMessage::Hello {
            protocol_version: 1,
            database: "app".into(),
            client_id: "c1".into(),
            token: String::new(),
        };
        let mut expect = vec![0x01, 0x01, 0x03];
        expect.extend(b"app\x02c1\x00");
        assert_eq!(encode_client(&hello), expect);

        let listen = ClientMessage::Listen {
            target_id: 2,
            query: Query::collection(CollectionPath::parse("rooms").unwrap())
                .where_("n", Operator::GreaterThan, 1)
                .limit(5),
            resume_version: Some(300),
        };
        let mut expect = vec![0x07, 0x02, 0x00, 0x05];
        expect.extend(b"rooms");
        expect.extend([0x01, 0x00, 0x01, 0x01, b'n', 0x04, 0x03, 0x02]); // filter n > 1
                                                                         // order_by, limit Some(5), limit_type, start, end, offset, projection
        expect.extend([0x00, 0x01, 0x0a, 0x00, 0x00, 0x00, 0x00, 0x00]);
        expect.extend([0x01, 0xac, 0x02]); // resume_version Some(300)
        assert_eq!(encode_client(&listen), expect);

        let mut doc = Document::new(
            name("rooms/r1"),
            [("n".to_owned(), Value::Integer(-1))].into_iter().collect(),
        );
        doc.create_version = 5;
        doc.update_version = 7;
        let change = ServerMessage::TargetChange {
            target_id: 2,
            kind: TargetChangeKind::Delta,
            changes: vec![
                DocumentChange::Upsert(doc),
                DocumentChange::Remove(name("rooms/r2")),
            ],
        };
        let mut expect = vec![0x86, 0x02, 0x00, 0x02, 0x00, 0x12];
        expect.extend(b"\x01\x02\x05rooms\x02r1\x05\x07\x01\x01n\x03\x01");
        expect.extend(b"\x01\x08rooms/r2");
        assert_eq!(encode_server(&change), expect);

        let error = ServerMessage::Error {
            request_id: 9,
            target_id: 0,
            code: ErrorCode::PermissionDenied,
            message: "no".into(),
        };
        assert_eq!(encode_server(&error), b"\x89\x09\x00\x03\x02no");
    }

    #[test]
    fn unknown_types_and_tags_are_refused() {
        assert_eq!(
            decode_client(&[0x81, 0x00]),
            Err(ProtocolError::UnknownMessageType { tag: 0x81 })
        );
        assert_eq!(
            decode_server(&[0x0a]),
            Err(ProtocolError::UnknownMessageType { tag: 0x0a })
        );
        assert_eq!(
            decode_client(&[]),
            Err(ProtocolError::Truncated { offset: 0 })
        );
        let err = decode_server(&[0x89, 0x00, 0x00, 0x0c, 0x00]).unwrap_err();
        assert_eq!(
            err,
            ProtocolError::UnknownTag {
                what: "error code",
                tag: 0x0c,
                offset: 3
            }
        );
        assert_eq!(err.to_string(), "unknown error code tag 0x0c at offset 3");
        assert_eq!(err.code(), ErrorCode::InvalidArgument);
        // A presence byte other than 0 or 1.
        assert!(matches!(
            decode_client(&[0x08, 0x01, 0x02]),
            Err(ProtocolError::TrailingBytes { .. })
        ));
        assert!(matches!(
            decode_server(&[0x82, 0x00, 0x00, 0x01, 0x03, b'a', b'/', b'b', 0x02]),
            Err(ProtocolError::UnknownTag {
                what: "option presence",
                tag: 2,
                offset: 8
            })
        ));
    }

    #[test]
    fn oversized_frames_are_refused_unread() {
        let mut bytes = vec![0u8; MAX_FRAME_BYTES + 1];
        bytes[0] = ty::PING;
        let err = decode_client(&bytes).unwrap_err();
        assert_eq!(
            err,
            ProtocolError::FrameTooLarge {
                len: MAX_FRAME_BYTES + 1
            }
        );
        assert_eq!(
            err.to_string(),
            format!(
                "frame is {} bytes, over the limit of {MAX_FRAME_BYTES} bytes",
                MAX_FRAME_BYTES + 1
            )
        );
        assert!(matches!(
            decode_server(&bytes),
            Err(ProtocolError::FrameTooLarge { .. })
        ));
        assert_eq!(peek_hello_version(&bytes), None);
    }

    #[test]
    fn filter_depth_is_capped() {
        let nested = |levels: usize| {
            let mut f = Filter::field("a", Operator::Equal, 1);
            for i in 1..levels {
                f = if i % 2 == 0 {
                    Filter::And(vec![f])
                } else {
                    Filter::Or(vec![f])
                };
            }
            ClientMessage::RunQuery {
                request_id: 1,
                query: Query::collection_group("c").filter(f),
            }
        };
        let ok = nested(MAX_FILTER_DEPTH);
        assert_eq!(decode_client(&encode_client(&ok)), Ok(ok));
        let err = decode_client(&encode_client(&nested(MAX_FILTER_DEPTH + 1))).unwrap_err();
        assert!(matches!(err, ProtocolError::FilterTooDeep { .. }), "{err}");
        assert!(err.to_string().contains("32 levels"), "{err}");
        // Far deeper than a stack would allow if the decoder followed it.
        let mut bytes = vec![ty::RUN_QUERY, 0x01, 0x01, 0x01, b'c', 0x01];
        bytes.extend([0x01, 0x01].repeat(1_000_000));
        assert!(matches!(
            decode_client(&bytes),
            Err(ProtocolError::FilterTooDeep { .. })
        ));
    }

    #[test]
    fn huge_counts_are_refused_before_allocating() {
        for prefix in [&[ty::GET, 0x00][..], &[ty::AUTH], &[ty::WRITE, 0x00, 0x00]] {
            let mut bytes = prefix.to_vec();
            put_varint(u64::MAX, &mut bytes);
            bytes.extend([0; 8]);
            assert!(
                matches!(
                    decode_client(&bytes),
                    Err(ProtocolError::LengthTooLarge { len: u64::MAX, .. })
                ),
                "{prefix:?}"
            );
        }
        let mut bytes = vec![ty::QUERY_RESULT, 0x00, 0x00];
        put_varint(1 << 40, &mut bytes);
        assert!(matches!(
            decode_server(&bytes),
            Err(ProtocolError::LengthTooLarge { .. })
        ));
    }

    #[test]
    fn names_paths_and_numbers_are_validated() {
        let get = |path: &str| {
            let mut bytes = vec![ty::GET, 0x00, 0x01];
            put_str(path, &mut bytes);
            decode_client(&bytes)
        };
        assert!(get("a/b").is_ok());
        for bad in ["a", "/a/b", "a//b", "a/__x__", ""] {
            let err = get(bad).unwrap_err();
            assert!(
                matches!(err, ProtocolError::InvalidName { offset: 3, .. }),
                "{bad}: {err}"
            );
            assert!(
                err.to_string().starts_with("invalid name at offset 3: "),
                "{err}"
            );
        }
        // An aggregation over a field path with an empty segment.
        let mut bytes = vec![ty::RUN_AGGREGATION, 0x00];
        encode_query(&Query::collection_group("c"), &mut bytes);
        bytes.extend([0x01, 0x01, 0x01, 0x00]);
        let err = decode_client(&bytes).unwrap_err();
        assert!(
            matches!(err, ProtocolError::InvalidFieldPath { .. }),
            "{err}"
        );
        // A target id beyond u32.
        let mut bytes = vec![ty::UNLISTEN];
        put_varint(1 << 32, &mut bytes);
        assert_eq!(
            decode_client(&bytes),
            Err(ProtocolError::OutOfRange {
                what: "target id",
                value: 1 << 32,
                offset: 1
            })
        );
        // An overlong varint, and an unknown value tag inside a filter.
        assert_eq!(
            decode_client(&[ty::PING, 0x80, 0x00]),
            Err(ProtocolError::BadVarint { offset: 1 })
        );
        let mut bytes = vec![ty::RUN_QUERY, 0x00, 0x01, 0x01, b'c', 0x01, 0x00];
        bytes.extend([0x01, 0x01, b'a', 0x00, 0x0c]);
        assert!(matches!(
            decode_client(&bytes),
            Err(ProtocolError::InvalidValue {
                offset: 11,
                source: DecodeError::UnknownTag { .. }
            })
        ));
    }

    #[test]
    fn welcome_refuses_bad_index_json() {
        let welcome = |json: &str| {
            let mut bytes = vec![ty::WELCOME, 0x01, 0x00];
            put_str(json, &mut bytes);
            bytes.push(0x00);
            decode_server(&bytes)
        };
        assert!(welcome("{}").is_ok());
        for bad in [
            "{",
            "{\"indexes\": [],}",
            "{\"indexes\": [{\"collectionGroup\": \"a\"}]}",
            &format!("{{\"x\": {}1{}}}", "[".repeat(9), "]".repeat(9)),
            &format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)),
        ] {
            assert!(
                matches!(
                    welcome(bad),
                    Err(ProtocolError::InvalidIndexFile { offset: 3, .. })
                ),
                "{bad:.40}"
            );
        }
    }

    #[test]
    fn hello_version_is_readable_from_any_version() {
        let hello = encode_client(&ClientMessage::Hello {
            protocol_version: 1,
            database: "app".into(),
            client_id: "c".into(),
            token: "t".into(),
        });
        assert_eq!(peek_hello_version(&hello), Some(1));
        // A future Hello with fields this build does not know.
        let mut future = vec![ty::HELLO, 0x02, 0xff, 0xff];
        assert_eq!(peek_hello_version(&future), Some(2));
        assert!(decode_client(&future).is_err());
        future[0] = ty::PING;
        assert_eq!(peek_hello_version(&future), None);
        assert_eq!(peek_hello_version(&[]), None);
    }

    #[test]
    fn documents_are_held_to_their_limits() {
        // The encoder refuses (panics on) a document the document encoding refuses ...
        let empty_key: Map = [(String::new(), Value::Null)].into_iter().collect();
        let m = ServerMessage::QueryResult {
            request_id: 0,
            version: 0,
            documents: vec![Document::new(name("a/b"), empty_key.clone())],
        };
        assert!(std::panic::catch_unwind(|| encode_server(&m)).is_err());
        // ... and the decoder refuses such documents written by hand.
        let frame = |fields: &Map| {
            let mut doc = vec![0x01, 0x02, 0x01, b'a', 0x01, b'b', 0x00, 0x00];
            encode_fields(fields, &mut doc);
            let mut bytes = vec![ty::QUERY_RESULT, 0x00, 0x00, 0x01];
            put_varint(doc.len() as u64, &mut bytes);
            let offset = bytes.len();
            bytes.extend(doc);
            (bytes, offset)
        };
        let (bytes, offset) = frame(&empty_key);
        let err = decode_server(&bytes).unwrap_err();
        assert!(
            matches!(err, ProtocolError::DocumentLimit { offset: o, source: DocumentError::EmptyFieldName { .. } } if o == offset),
            "{err}"
        );
        let big: Map = [("a".to_owned(), Value::Bytes(vec![0; MAX_DOCUMENT_BYTES]))]
            .into_iter()
            .collect();
        let (bytes, _) = frame(&big);
        let err = decode_server(&bytes).unwrap_err();
        assert!(
            matches!(
                err,
                ProtocolError::DocumentLimit {
                    source: DocumentError::TooLarge { .. },
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("over the limit"), "{err}");
    }
}
