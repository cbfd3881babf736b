//! The wire protocol through its public API: a realistic session round trips frame by frame,
//! documents and values from the shared strategies survive the codec, and bad frames map to
//! `invalid-argument`. The codec's properties over every message are in `protocol_codec`; its
//! unit tests cover each message and decoder edge case.

use hearth_core::document::Document;
use hearth_core::encoding::key::Direction;
use hearth_core::index::config::parse_index_file;
use hearth_core::mutation::{FieldTransform, Mutation, Precondition, SetMerge};
use hearth_core::path::{CollectionPath, DocumentName, FieldPath};
use hearth_core::protocol::codec::{
    decode_client, decode_mutation, decode_query, decode_server, encode_client, encode_mutation,
    encode_query, encode_server, peek_hello_version, ProtocolError,
};
use hearth_core::protocol::{
    ClientMessage, DocumentChange, ErrorCode, ServerMessage, TargetChangeKind, MAX_FRAME_BYTES,
    PROTOCOL_VERSION,
};
use hearth_core::query::model::{Aggregation, Operator, Query};
use hearth_core::value::{Map, Timestamp, Value};
use proptest::collection::vec;
use proptest::prelude::*;

use crate::strategies::{arb_document, arb_value};

fn name(s: &str) -> DocumentName {
    DocumentName::parse(s).unwrap()
}

fn field(s: &str) -> FieldPath {
    FieldPath::parse(s).unwrap()
}

fn fields(entries: &[(&str, Value)]) -> Map {
    entries
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

fn client_round_trip(m: ClientMessage) {
    let bytes = encode_client(&m);
    assert!(bytes.len() <= MAX_FRAME_BYTES);
    assert_eq!(decode_client(&bytes), Ok(m));
}

fn server_round_trip(m: ServerMessage) {
    let bytes = encode_server(&m);
    assert_eq!(decode_server(&bytes), Ok(m));
}

/// Seed 000's sharded-timestamp query: one query, no client-side merge.
fn instruments_query() -> Query {
    let shards = (0..3)
        .map(|i| Value::from(format!("x{i}")))
        .collect::<Vec<_>>();
    Query::collection(CollectionPath::parse("instruments").unwrap())
        .where_("shard", Operator::In, shards)
        .where_("exchange", Operator::Equal, "EXCHG1")
        .order_by("timestamp", Direction::Descending)
        .limit(5)
}

#[test]
fn a_session_round_trips_frame_by_frame() {
    let hello = ClientMessage::Hello {
        protocol_version: PROTOCOL_VERSION,
        database: "app".into(),
        client_id: "a1B2c3D4e5F6g7H8i9J0".into(),
        token: "eyJhbGciOiJIUzI1NiJ9.e30.sig".into(),
    };
    assert_eq!(
        peek_hello_version(&encode_client(&hello)),
        Some(PROTOCOL_VERSION)
    );
    client_round_trip(hello);

    let indexes = parse_index_file(
        r#"{ "indexes": [ { "collectionGroup": "instruments", "queryScope": "COLLECTION",
             "fields": [ { "fieldPath": "shard", "order": "ASCENDING" },
                         { "fieldPath": "exchange", "order": "ASCENDING" },
                         { "fieldPath": "timestamp", "order": "DESCENDING" } ] } ],
             // hand-edited files have comments and trailing commas
             "fieldOverrides": [], }"#,
    )
    .unwrap();
    server_round_trip(ServerMessage::Welcome {
        protocol_version: PROTOCOL_VERSION,
        version: 41,
        indexes,
        heartbeat_ms: 15_000,
    });

    client_round_trip(ClientMessage::Listen {
        target_id: 1,
        query: instruments_query(),
        resume_version: Some(40),
    });
    let t = Timestamp::from_millis(1_700_000_000_123).unwrap();
    let mut doc = Document::new(
        name("instruments/AAA"),
        fields(&[
            ("exchange", "EXCHG1".into()),
            ("shard", "x1".into()),
            ("symbol", "AAA".into()),
            ("timestamp", t.into()),
        ]),
    );
    doc.create_version = 12;
    doc.update_version = 41;
    server_round_trip(ServerMessage::TargetChange {
        target_id: 1,
        kind: TargetChangeKind::Delta,
        changes: vec![
            DocumentChange::Upsert(doc.clone()),
            DocumentChange::Remove(name("instruments/ZZZ")),
            DocumentChange::Leave(doc.clone()),
            DocumentChange::Delete {
                name: name("instruments/YYY"),
                version: 40,
            },
        ],
    });
    server_round_trip(ServerMessage::Snapshot { version: 41 });

    let counter = name("counters/c");
    client_round_trip(ClientMessage::Write {
        request_id: 7,
        batch_id: 3,
        mutations: vec![
            Mutation::set_merge(
                name("instruments/BBB"),
                fields(&[("symbol", "BBB".into())]),
                SetMerge::MergeFields(vec![field("symbol")]),
            )
            .with_transform(field("timestamp"), FieldTransform::ServerTimestamp)
            .with_field_delete(field("stale")),
            Mutation::update(
                counter.clone(),
                vec![(field("`a.b`.c"), Some(Value::Null)), (field("gone"), None)],
            )
            .with_transform(field("n"), FieldTransform::Increment(Value::Integer(1)))
            .with_precondition(Precondition::UpdateVersion(40)),
            Mutation::delete(name("instruments/ZZZ")).with_precondition(Precondition::Exists(true)),
        ],
        reads: vec![(counter, Some(40)), (name("instruments/BBB"), None)],
    });
    server_round_trip(ServerMessage::WriteResult {
        request_id: 7,
        batch_id: 3,
        version: 42,
    });

    client_round_trip(ClientMessage::RunAggregation {
        request_id: 8,
        query: instruments_query(),
        aggregations: vec![Aggregation::Count, Aggregation::Average(field("price"))],
    });
    server_round_trip(ServerMessage::AggregationResult {
        request_id: 8,
        version: 42,
        values: vec![Value::Integer(5), Value::Null],
    });
    client_round_trip(ClientMessage::Get {
        request_id: 9,
        names: vec![name("instruments/AAA"), name("instruments/none")],
    });
    server_round_trip(ServerMessage::GetResult {
        request_id: 9,
        version: 42,
        documents: vec![
            (name("instruments/AAA"), Some(doc)),
            (name("instruments/none"), None),
        ],
    });
    client_round_trip(ClientMessage::Ping { nonce: 5 });
    server_round_trip(ServerMessage::Heartbeat {
        version: 42,
        nonce: 5,
    });
    client_round_trip(ClientMessage::Unlisten { target_id: 1 });
    server_round_trip(ServerMessage::Error {
        request_id: 0,
        target_id: 0,
        code: ErrorCode::Unauthenticated,
        message: "token expired".into(),
    });
}

#[test]
fn persisted_queries_and_mutations_decode_from_their_own_bytes() {
    let q = instruments_query();
    let mut bytes = Vec::new();
    encode_query(&q, &mut bytes);
    assert_eq!(decode_query(&bytes), Ok(q));
    bytes.push(0);
    assert!(matches!(
        decode_query(&bytes),
        Err(ProtocolError::TrailingBytes { count: 1, .. })
    ));

    let m = Mutation::set(name("a/b"), fields(&[("k", Value::Bytes(vec![1, 2]))]));
    let mut bytes = Vec::new();
    encode_mutation(&m, &mut bytes);
    assert_eq!(decode_mutation(&bytes), Ok(m));
    assert!(decode_mutation(&bytes[..bytes.len() - 1]).is_err());
}

#[test]
fn bad_frames_are_invalid_arguments() {
    for bytes in [&[][..], &[0x00], &[0x7f], &[0x81], &[0x09]] {
        let err = decode_client(bytes).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{bytes:?}: {err}");
    }
    assert_eq!(
        decode_server(&[0x01]),
        Err(ProtocolError::UnknownMessageType { tag: 0x01 })
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Documents and values with every edge case of the shared strategies (NaN, -0.0, i64
    /// extremes, odd UTF-8) cross the wire strictly equal.
    #[test]
    fn shared_documents_and_values_cross_the_wire(
        docs in vec(arb_document(), 0..4),
        values in vec(arb_value(), 0..4),
    ) {
        let change = ServerMessage::TargetChange {
            target_id: 3,
            kind: TargetChangeKind::Reset,
            changes: docs.into_iter().map(DocumentChange::Upsert).collect(),
        };
        prop_assert_eq!(decode_server(&encode_server(&change)), Ok(change));
        let result = ServerMessage::AggregationResult { request_id: 1, version: 2, values };
        prop_assert_eq!(decode_server(&encode_server(&result)), Ok(result));
    }
}
