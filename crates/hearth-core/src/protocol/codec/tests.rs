//! The codec's examples: fixed type bytes, the worked layouts of `docs/protocol.md`, and
//! each way a frame is refused. The round-trip and robustness properties run through the
//! public API in `tests/it/protocol_codec.rs`.

use super::*;
use crate::document::{Document, DocumentError, MAX_DOCUMENT_BYTES};
use crate::encoding::document::{encode_fields, DecodeError};
use crate::encoding::varint::put as put_varint;
use crate::index::config::IndexFile;
use crate::path::{CollectionPath, DocumentName};
use crate::protocol::{ClientMessage, DocumentChange, ServerMessage, TargetChangeKind};
use crate::query::model::{Filter, Query};
use crate::value::{Map, Value};
use encode::put_str;

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

    let gone = ServerMessage::TargetChange {
        target_id: 2,
        kind: TargetChangeKind::Delta,
        changes: vec![DocumentChange::Delete {
            name: name("rooms/r3"),
            version: 300,
        }],
    };
    let mut expect = vec![0x86, 0x02, 0x00, 0x01, 0x03, 0x08];
    expect.extend(b"rooms/r3\xac\x02");
    assert_eq!(encode_server(&gone), expect);

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

#[test]
fn a_bundle_carries_whole_messages_in_order() {
    let doc = Document::new(
        name("rooms/r1"),
        [("n".to_owned(), Value::Integer(1))].into(),
    );
    let change = |target_id| ServerMessage::TargetChange {
        target_id,
        kind: TargetChangeKind::Delta,
        changes: vec![DocumentChange::Upsert(doc.clone())],
    };
    let messages = vec![change(1), change(2), ServerMessage::Snapshot { version: 7 }];
    let parts: Vec<Vec<u8>> = messages.iter().map(encode_server).collect();
    let frame = encode_bundle(&parts);
    assert_eq!(frame[..2], [0x8b, 3]);
    assert_eq!(decode_server_frame(&frame).unwrap(), messages);
    // A frame of one message is read by both decoders.
    assert_eq!(decode_server_frame(&parts[2]).unwrap(), messages[2..]);
    // Only the bundle-aware decoder takes a bundle.
    assert_eq!(decode_server(&frame), Err(ProtocolError::UnexpectedBundle));
}

#[test]
fn malformed_bundles_are_refused() {
    let snapshot = encode_server(&ServerMessage::Snapshot { version: 1 });
    assert_eq!(
        decode_server_frame(&[0x8b, 0]),
        Err(ProtocolError::EmptyBundle)
    );
    let inner = encode_bundle(&[&snapshot]);
    let nested = encode_bundle(&[&inner]);
    assert_eq!(
        decode_server_frame(&nested),
        Err(ProtocolError::NestedBundle { offset: 3 })
    );
    // A message must fill its part exactly, and the parts the frame.
    let mut short = encode_bundle(&[&snapshot]);
    short[2] += 1;
    short.push(0);
    assert!(matches!(
        decode_server_frame(&short),
        Err(ProtocolError::TrailingBytes { .. })
    ));
    let mut long = encode_bundle(&[&snapshot]);
    long.push(0);
    assert!(matches!(
        decode_server_frame(&long),
        Err(ProtocolError::TrailingBytes { .. })
    ));
    let mut truncated = encode_bundle(&[&snapshot]);
    truncated.pop();
    assert!(decode_server_frame(&truncated).is_err());
    // A part that is not a relay message.
    let hello = encode_client(&ClientMessage::Ping { nonce: 1 });
    assert!(matches!(
        decode_server_frame(&encode_bundle(&[&hello])),
        Err(ProtocolError::UnknownMessageType { .. })
    ));
}
