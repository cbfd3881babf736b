//! The codec's encoders: messages, queries and mutations to bytes, in the layout drawn in
//! the codec's module doc. Encoding cannot fail; what it writes, the decoders read back.

use crate::document::{Document, DocumentError};
use crate::encoding::document::{encode_document, encode_fields, encode_value};
use crate::encoding::key::Direction;
use crate::encoding::varint::{put as put_varint, zigzag};
use crate::mutation::{FieldTransform, Mutation, MutationKind, Precondition, SetMerge};
use crate::path::{DocumentName, FieldPath};
use crate::query::model::{Aggregation, Cursor, Filter, LimitType, Operator, Query, Source};
use crate::value::Value;

use super::super::{ClientMessage, DocumentChange, ErrorCode, ServerMessage, TargetChangeKind};
use super::{ty, OPERATORS};

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

/// A relay message carries a document the document encoding refuses.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("document `{name}` in a message is invalid: {source}")]
pub struct MessageEncodeError {
    /// The refused document.
    pub name: DocumentName,
    /// Why the document encoding refused it.
    pub source: DocumentError,
}

/// Encodes a relay message as one frame. The caller keeps a frame within
/// [`MAX_FRAME_BYTES`](crate::protocol::MAX_FRAME_BYTES) (splitting large results over several messages).
///
/// # Panics
///
/// If a carried document is one the document encoding refuses (an empty field name, a
/// document over 1 MiB, ...): the relay only holds documents that passed that check. Where
/// a panic would cost more than one reply (under a lock), use [`try_encode_server`].
pub fn encode_server(m: &ServerMessage) -> Vec<u8> {
    try_encode_server(m).unwrap_or_else(|e| panic!("{e}"))
}

/// Encodes several encoded relay messages (none a bundle) as one `Bundle` frame (protocol
/// 3), in order. The caller keeps the bundle within
/// [`MAX_FRAME_BYTES`](crate::protocol::MAX_FRAME_BYTES).
pub fn encode_bundle<B: AsRef<[u8]>>(messages: &[B]) -> Vec<u8> {
    let len: usize = messages.iter().map(|m| m.as_ref().len() + 5).sum();
    let mut out = Vec::with_capacity(len + 6);
    out.push(ty::BUNDLE);
    put_varint(messages.len() as u64, &mut out);
    for m in messages {
        let m = m.as_ref();
        put_varint(m.len() as u64, &mut out);
        out.extend_from_slice(m);
    }
    out
}

/// Encodes a relay message as one frame, or says which carried document the document
/// encoding refuses (the first one).
pub fn try_encode_server(m: &ServerMessage) -> Result<Vec<u8>, MessageEncodeError> {
    let mut out = Vec::new();
    let mut refused: Option<MessageEncodeError> = None;
    let mut put_document = |doc: &Document, out: &mut Vec<u8>| put_document(doc, out, &mut refused);
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
                put_option(doc.as_ref(), out, &mut put_document);
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
            put_list(documents, &mut out, &mut put_document);
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
                DocumentChange::Leave(doc) => {
                    out.push(2);
                    put_document(doc, out);
                }
                DocumentChange::Delete { name, version } => {
                    out.push(3);
                    put_name(name, out);
                    put_varint(*version, out);
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
        ServerMessage::Existence {
            target_id,
            count,
            filter,
        } => {
            out.push(ty::EXISTENCE);
            put_varint(u64::from(*target_id), &mut out);
            put_varint(*count, &mut out);
            out.push(filter.hashes());
            put_varint(filter.bits().len() as u64, &mut out);
            out.extend_from_slice(filter.bits());
        }
    }
    match refused {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Appends the encoding of a query (the `query` of the frame layout). Filters nested deeper
/// than [`MAX_FILTER_DEPTH`](super::MAX_FILTER_DEPTH) are written, but no decoder reads them back.
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

pub(super) fn put_str(s: &str, out: &mut Vec<u8>) {
    put_varint(s.len() as u64, out);
    out.extend_from_slice(s.as_bytes());
}

fn put_name(name: &DocumentName, out: &mut Vec<u8>) {
    put_str(&name.to_string(), out);
}

fn put_field_path(path: &FieldPath, out: &mut Vec<u8>) {
    put_list(path.segments(), out, |s, out| put_str(s, out));
}

/// Writes a document; one the document encoding refuses is recorded in `refused` (the
/// first one) and written as nothing, the message being void.
fn put_document(doc: &Document, out: &mut Vec<u8>, refused: &mut Option<MessageEncodeError>) {
    match encode_document(doc) {
        Ok(bytes) => {
            put_varint(bytes.len() as u64, out);
            out.extend_from_slice(&bytes);
        }
        Err(source) => {
            refused.get_or_insert(MessageEncodeError {
                name: doc.name.clone(),
                source,
            });
        }
    }
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

fn operator_tag(op: Operator) -> u8 {
    OPERATORS
        .iter()
        .position(|&o| o == op)
        .expect("every operator is in OPERATORS") as u8
}

fn error_code_tag(code: ErrorCode) -> u8 {
    code.tag()
}
