//! The codec's decoders: bytes from a peer to messages, queries and mutations. Input is
//! untrusted: every failure is a [`ProtocolError`] with the offset of the refused item,
//! never a panic.

use crate::document::{Document, DocumentError, MAX_DOCUMENT_BYTES};
use crate::encoding::document::{decode_document, decode_fields, decode_value, DecodeError};
use crate::encoding::key::Direction;
use crate::encoding::varint::{self, unzigzag, VarintError};
use crate::index::config::{parse_index_file, IndexFile, IndexFileError};
use crate::mutation::{FieldTransform, Mutation, MutationKind, Precondition, SetMerge};
use crate::path::{CollectionPath, DocumentName, FieldPath, PathError};
use crate::query::model::{
    Aggregation, Cursor, FieldFilter, Filter, LimitType, OrderBy, Query, Source,
};
use crate::value::Value;

use super::super::{
    existence::NameFilter, ClientMessage, DocumentChange, ServerMessage, TargetChangeKind,
    MAX_FRAME_BYTES,
};
use super::{
    ty, ProtocolError, Result, ERROR_CODES, MAX_FILTER_DEPTH, MAX_INDEX_JSON_DEPTH, MAX_PREALLOC,
    OPERATORS,
};

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

/// Decodes one frame from the relay that carries one message (a [`Bundle`](ty::BUNDLE) is
/// refused: [`decode_server_frame`] reads any frame).
pub fn decode_server(b: &[u8]) -> Result<ServerMessage> {
    let mut r = Reader::frame(b)?;
    let m = r.server_message()?;
    r.finish()?;
    Ok(m)
}

/// Decodes one frame from the relay into its messages, in order: one, or the messages of a
/// `Bundle` (protocol 3). A document carried more than once in a bundle (one change
/// reaching several targets) is decoded once.
pub fn decode_server_frame(b: &[u8]) -> Result<Vec<ServerMessage>> {
    let mut r = Reader::frame(b)?;
    if b.first() != Some(&ty::BUNDLE) {
        let m = r.server_message()?;
        r.finish()?;
        return Ok(vec![m]);
    }
    r.pos = 1;
    let n = r.count()?;
    if n == 0 {
        return Err(ProtocolError::EmptyBundle);
    }
    let mut memo = DocumentMemo::default();
    let mut out = Vec::with_capacity(n.min(MAX_PREALLOC));
    for _ in 0..n {
        let len = r.count()?;
        let start = r.pos;
        let inner = r.take(len)?;
        let mut m = Reader {
            bytes: &b[..start + len],
            pos: start,
            memo: Some(memo),
        };
        if inner.first() == Some(&ty::BUNDLE) {
            return Err(ProtocolError::NestedBundle { offset: start });
        }
        out.push(m.server_message()?);
        m.finish()?;
        memo = m.memo.take().unwrap_or_default();
    }
    r.finish()?;
    Ok(out)
}

/// Documents already decoded in a bundle, by their bytes.
type DocumentMemo<'a> = std::collections::HashMap<&'a [u8], Document>;

impl Reader<'_> {
    /// One relay message, its type byte first.
    fn server_message(&mut self) -> Result<ServerMessage> {
        let r = self;
        Ok(match r.byte()? {
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
                    Ok(match r.tag("document change", 4)? {
                        0 => DocumentChange::Upsert(r.document()?),
                        1 => DocumentChange::Remove(r.name()?),
                        2 => DocumentChange::Leave(r.document()?),
                        _ => DocumentChange::Delete {
                            name: r.name()?,
                            version: r.varint()?,
                        },
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
            ty::EXISTENCE => ServerMessage::Existence {
                target_id: r.u32("target id")?,
                count: r.varint()?,
                filter: {
                    let hashes = r.byte()?;
                    let n = r.count()?;
                    NameFilter::from_parts(r.take(n)?.to_vec(), hashes)
                },
            },
            ty::BUNDLE => return Err(ProtocolError::UnexpectedBundle),
            tag => return Err(ProtocolError::UnknownMessageType { tag }),
        })
    }
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

/// Decodes a query written by [`encode_query`](super::encode_query); the whole slice must be one query.
pub fn decode_query(b: &[u8]) -> Result<Query> {
    let mut r = Reader {
        bytes: b,
        pos: 0,
        memo: None,
    };
    let q = r.query()?;
    r.finish()?;
    Ok(q)
}

/// Decodes a mutation written by [`encode_mutation`](super::encode_mutation); the whole slice must be one mutation.
pub fn decode_mutation(b: &[u8]) -> Result<Mutation> {
    let mut r = Reader {
        bytes: b,
        pos: 0,
        memo: None,
    };
    let m = r.mutation()?;
    r.finish()?;
    Ok(m)
}

/// A cursor over untrusted input. Invariant: `pos <= bytes.len()`.
struct Reader<'a> {
    /// The whole input: offsets in errors count from its start.
    bytes: &'a [u8],
    /// The next byte to read.
    pos: usize,
    /// In a bundle: the documents decoded so far, by their bytes.
    memo: Option<DocumentMemo<'a>>,
}

impl<'a> Reader<'a> {
    fn frame(bytes: &'a [u8]) -> Result<Reader<'a>> {
        if bytes.len() > MAX_FRAME_BYTES {
            return Err(ProtocolError::FrameTooLarge { len: bytes.len() });
        }
        Ok(Reader {
            bytes,
            pos: 0,
            memo: None,
        })
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

    /// A document, held to the limits the encoder enforces (the document decoder checks
    /// them), so that a receiver can store (and re-encode) whatever it accepts.
    fn document(&mut self) -> Result<Document> {
        let n = self.count()?;
        let offset = self.pos;
        let b = self.take(n)?;
        if n > MAX_DOCUMENT_BYTES {
            let source = DocumentError::TooLarge { size: n };
            return Err(ProtocolError::DocumentLimit { offset, source });
        }
        if let Some(d) = self.memo.as_ref().and_then(|m| m.get(b)) {
            return Ok(d.clone());
        }
        let d = decode_document(b).map_err(|e| match e {
            DecodeError::Limit { source, .. } => ProtocolError::DocumentLimit { offset, source },
            source => ProtocolError::InvalidDocument { offset, source },
        })?;
        if let Some(m) = &mut self.memo {
            m.insert(b, d.clone());
        }
        Ok(d)
    }

    fn index_file(&mut self) -> Result<IndexFile> {
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
