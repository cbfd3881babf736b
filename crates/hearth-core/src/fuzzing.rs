//! The bodies of the fuzz targets in `fuzz/`, in plain functions compiled on stable, so that
//! `tests/fuzz_corpus.rs` replays the committed corpora through exactly the code libFuzzer
//! ran. Not an API: each function panics when the code under test breaks a contract, which
//! is how a fuzzer learns of it.
//!
//! Every function takes arbitrary bytes. A decoder refusing them is fine; a panic, an abort,
//! or an accepted input that does not round trip is a finding. `docs/fuzzing.md` says how to
//! run the targets.

use std::sync::OnceLock;

use crate::document::Document;
use crate::encoding::document::{
    decode_document, decode_fields, decode_value, encode_document, encode_fields, encode_value,
    encoded_size,
};
use crate::encoding::key::{self, Direction};
use crate::index::config::{parse_index_file, IndexFile};
use crate::index::def::IndexCatalog;
use crate::index::keys::{decode_document_key, document_key};
use crate::kv::{block_on_ready, MemStore, Metered};
use crate::path::{CollectionPath, DocumentName, FieldPath};
use crate::protocol::codec::{
    decode_client, decode_mutation, decode_query, decode_server, decode_server_frame,
    encode_bundle, encode_client, encode_mutation, encode_query, encode_server, peek_hello_version,
};
use crate::protocol::{ClientMessage, ServerMessage};
use crate::query::execute::{run_aggregation, run_query};
use crate::query::matcher::Matcher;
use crate::query::model::{Aggregation, Query};
use crate::query::plan::MAX_BRANCHES;
use crate::query::validate::{check_listenable, validate};
use crate::value::{GeoPoint, Map, Timestamp, Value};

/// Most rows (index entries and documents, scanned or fetched by key) and most store
/// requests one query may spend on the fuzz store: every row twice (scanned, then its
/// document fetched) for each of the at most [`MAX_BRANCHES`] branches a query expands to,
/// plus one. A correct executor stays far below it (the corpus's worst query reads about
/// as many rows as the store holds); past it, the executor is looping, not working.
pub fn work_budget() -> u64 {
    2 * (MAX_BRANCHES as u64 + 1) * store_rows() as u64
}

/// The protocol decoders: both message directions, and the query and mutation encodings
/// the messages embed. Whatever decodes must re-encode to the same bytes (the index JSON of
/// a `Welcome` is the one text that is not canonical: it must re-decode equal instead).
pub fn protocol(data: &[u8]) {
    let _ = peek_hello_version(data);
    if let Ok(m) = decode_client(data) {
        let bytes = encode_client(&m);
        assert_eq!(
            bytes, data,
            "an accepted client frame re-encodes identically"
        );
        assert_eq!(decode_client(&bytes).as_ref(), Ok(&m), "client round trip");
    }
    if let Ok(m) = decode_server(data) {
        let bytes = encode_server(&m);
        if !matches!(m, ServerMessage::Welcome { .. }) {
            assert_eq!(
                bytes, data,
                "an accepted server frame re-encodes identically"
            );
        }
        assert_eq!(decode_server(&bytes).as_ref(), Ok(&m), "server round trip");
    }
    if let Ok(ms) = decode_server_frame(data) {
        // A bundle re-encodes as its messages, bundled again (a Welcome inside one only
        // re-decodes equal, as above).
        let parts: Vec<Vec<u8>> = ms.iter().map(encode_server).collect();
        let bytes = match data.first() {
            Some(&0x8b) => encode_bundle(&parts),
            _ => parts[0].clone(),
        };
        if !ms
            .iter()
            .any(|m| matches!(m, ServerMessage::Welcome { .. }))
        {
            assert_eq!(
                bytes, data,
                "an accepted relay frame re-encodes identically"
            );
        }
        assert_eq!(
            decode_server_frame(&bytes),
            Ok(ms),
            "relay frame round trip"
        );
    }
    if let Ok(q) = decode_query(data) {
        let mut bytes = Vec::new();
        encode_query(&q, &mut bytes);
        assert_eq!(bytes, data, "an accepted query re-encodes identically");
    }
    if let Ok(m) = decode_mutation(data) {
        let mut bytes = Vec::new();
        encode_mutation(&m, &mut bytes);
        assert_eq!(bytes, data, "an accepted mutation re-encodes identically");
    }
}

/// The document decoders (whole documents, lone values, field maps) and the key decoders
/// of the order-preserving encoding. The document encoding is canonical: whatever decodes
/// re-encodes to the bytes it was read from.
pub fn document(data: &[u8]) {
    if let Ok(doc) = decode_document(data) {
        let bytes = encode_document(&doc).expect("a decoded document encodes");
        assert_eq!(bytes, data, "an accepted document re-encodes identically");
        assert_eq!(
            decode_document(&bytes).as_ref(),
            Ok(&doc),
            "document round trip"
        );
    }
    if let Ok((v, used)) = decode_value(data) {
        let mut bytes = Vec::new();
        encode_value(&v, &mut bytes);
        assert_eq!(
            bytes,
            &data[..used],
            "an accepted value re-encodes identically"
        );
        assert_eq!(decode_value(&bytes), Ok((v, used)), "value round trip");
    }
    if let Ok((fields, used)) = decode_fields(data) {
        let mut bytes = Vec::new();
        encode_fields(&fields, &mut bytes);
        assert_eq!(
            bytes,
            &data[..used],
            "accepted fields re-encode identically"
        );
        assert_eq!(
            encoded_size(&fields),
            used,
            "encoded_size agrees with the encoder"
        );
    }
    for dir in [Direction::Ascending, Direction::Descending] {
        let _ = key::decode_value(data, dir);
    }
    let _ = key::split_kinds(data);
    if let Ok(name) = decode_document_key(data) {
        let bytes = document_key(&name);
        assert_eq!(
            decode_document_key(&bytes),
            Ok(name),
            "document key round trip"
        );
    }
}

/// The index-definition parser: any text, and whatever parses prints back (as strict JSON)
/// to a file that parses equal.
pub fn index_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(file) = parse_index_file(text) {
        let json = file.to_json();
        assert_eq!(
            parse_index_file(&json).as_ref(),
            Ok(&file),
            "a parsed index file prints back to an equal one"
        );
        let _ = IndexCatalog::from_file(&file);
    }
}

/// The query engine: a query read from the protocol's query encoding is validated, planned
/// and run (and aggregated) over a small store, which must not panic, must stay within
/// [`work_budget`] rows and requests, and must return documents that
/// match the query, in its order, within its limit.
pub fn query(data: &[u8]) {
    let Ok(q) = decode_query(data) else {
        return;
    };
    let (store, catalog) = fuzz_store();
    let Ok(valid) = validate(&q) else {
        return;
    };
    let _ = check_listenable(&valid);
    let counted = Metered::new(store).with_budget(work_budget());
    let result = block_on_ready(run_query(&counted, catalog, &q));
    check_budget(&counted, "run_query");
    if let Ok(docs) = result {
        check_result(&valid, &docs);
    }
    let counted = Metered::new(store).with_budget(work_budget());
    let aggs = aggregations(&q);
    let _ = block_on_ready(run_aggregation(&counted, catalog, &q, &aggs));
    check_budget(&counted, "run_aggregation");
}

/// Results match, come in query order, and keep to the limit. Projection drops fields the
/// matcher needs, so only names are compared then.
fn check_result(q: &Query, docs: &[Document]) {
    if let Some(limit) = q.limit {
        assert!(docs.len() as u64 <= limit as u64, "at most `limit` results");
    }
    let names: Vec<&DocumentName> = docs.iter().map(|d| &d.name).collect();
    for (i, n) in names.iter().enumerate() {
        assert!(!names[..i].contains(n), "no document is returned twice");
    }
    if q.projection.is_some() {
        return;
    }
    let matcher = Matcher::new(q.clone());
    for d in docs {
        assert!(matcher.matches(d), "every result matches the query");
    }
    for w in docs.windows(2) {
        assert!(
            matcher.compare(&w[0], &w[1]).is_lt(),
            "results come in query order"
        );
    }
}

/// A count, and a sum and average over the first ordered (else first filtered) field.
fn aggregations(q: &Query) -> Vec<Aggregation> {
    let field = q.order_by.first().map(|o| o.field.clone()).or_else(|| {
        q.filter
            .as_ref()
            .and_then(|f| f.field_filters().first().map(|ff| ff.field.clone()))
    });
    let mut aggs = vec![Aggregation::Count];
    if let Some(f) = field {
        aggs.push(Aggregation::Sum(f.clone()));
        aggs.push(Aggregation::Average(f));
    }
    aggs
}

/// The index file of the fuzz store: composites over the fields the documents hold, both
/// scopes, and an override that exempts a field (so some queries need a missing index).
const FUZZ_INDEXES: &str = r#"{
  "indexes": [
    {"collectionGroup": "rooms", "queryScope": "COLLECTION",
     "fields": [{"fieldPath": "s", "order": "ASCENDING"}, {"fieldPath": "n", "order": "DESCENDING"}]},
    {"collectionGroup": "rooms", "queryScope": "COLLECTION",
     "fields": [{"fieldPath": "tags", "arrayConfig": "CONTAINS"}, {"fieldPath": "n", "order": "ASCENDING"}]},
    {"collectionGroup": "rooms", "queryScope": "COLLECTION",
     "fields": [{"fieldPath": "b", "order": "ASCENDING"}, {"fieldPath": "n", "order": "ASCENDING"}]},
    {"collectionGroup": "rooms", "queryScope": "COLLECTION",
     "fields": [{"fieldPath": "s", "order": "ASCENDING"}, {"fieldPath": "b", "order": "ASCENDING"}, {"fieldPath": "n", "order": "ASCENDING"}]},
    {"collectionGroup": "msgs", "queryScope": "COLLECTION_GROUP",
     "fields": [{"fieldPath": "n", "order": "ASCENDING"}, {"fieldPath": "s", "order": "DESCENDING"}]}
  ],
  "fieldOverrides": [
    {"collectionGroup": "rooms", "fieldPath": "blob", "indexes": []},
    {"collectionGroup": "msgs", "fieldPath": "n", "indexes": [
      {"order": "ASCENDING", "queryScope": "COLLECTION_GROUP"},
      {"order": "DESCENDING", "queryScope": "COLLECTION"}]}
  ]
}"#;

/// The store every query runs over, built once: a dozen documents in `rooms`, a
/// sub-collection `rooms/r1/msgs` and a top-level `msgs`, with colliding values (1 and 1.0,
/// 0 and -0.0, NaN, null, missing fields) and every type.
pub fn fuzz_store() -> &'static (MemStore, IndexCatalog) {
    static STORE: OnceLock<(MemStore, IndexCatalog)> = OnceLock::new();
    STORE.get_or_init(|| {
        let file = parse_index_file(FUZZ_INDEXES).expect("the fuzz index file parses");
        let catalog = IndexCatalog::from_file(&file);
        let mut store = MemStore::new();
        for (i, doc) in fuzz_documents().iter().enumerate() {
            store
                .write_document(&catalog, &doc.name, Some(doc))
                .expect("fuzz documents are valid");
            // Leave one deleted document behind, as real stores have.
            if i == 3 {
                store
                    .write_document(&catalog, &doc.name, None)
                    .expect("deleting a fuzz document");
            }
        }
        (store, catalog)
    })
}

/// How many rows the fuzz store holds (documents and index entries).
pub fn store_rows() -> usize {
    let (store, _) = fuzz_store();
    store.documents.len() + store.index.len()
}

fn fuzz_documents() -> Vec<Document> {
    let ts = |s| Value::Timestamp(Timestamp::new(s, 0).expect("a valid timestamp"));
    let geo = |a, b| Value::GeoPoint(GeoPoint::new(a, b).expect("a valid geopoint"));
    let mut nested = Map::new();
    nested.insert("x".into(), Value::Integer(1));
    nested.insert("y".into(), "a".into());
    let rows: Vec<(&str, Vec<(&str, Value)>)> = vec![
        (
            "rooms/r1",
            vec![
                ("n", Value::Integer(1)),
                ("s", "a".into()),
                ("b", true.into()),
                ("tags", vec!["x".into(), "y".into()].into()),
                ("m", nested.clone().into()),
                ("t", ts(10)),
            ],
        ),
        (
            "rooms/r2",
            vec![
                ("n", Value::Double(1.0)),
                ("s", "b".into()),
                ("b", false.into()),
                ("tags", vec!["y".into(), Value::Integer(2)].into()),
                ("g", geo(10.0, 20.0)),
            ],
        ),
        (
            "rooms/r3",
            vec![
                ("n", Value::Double(-0.0)),
                ("s", "a".into()),
                ("b", Value::Null),
                ("tags", Vec::<Value>::new().into()),
                ("blob", Value::Bytes(vec![0, 1, 255])),
            ],
        ),
        (
            "rooms/r4",
            vec![("n", Value::Integer(7)), ("s", "z".into())],
        ),
        (
            "rooms/r5",
            vec![
                ("n", Value::Double(f64::NAN)),
                ("s", Value::Integer(3)),
                ("b", true.into()),
                ("tags", vec![Value::Null, "x".into()].into()),
                (
                    "ref",
                    Value::Reference(DocumentName::parse("rooms/r1").expect("a valid name")),
                ),
            ],
        ),
        (
            "rooms/r6",
            vec![("s", "a".into()), ("b", true.into()), ("m", nested.into())],
        ),
        (
            "rooms/r7",
            vec![
                ("n", Value::Integer(0)),
                ("s", "b".into()),
                ("b", false.into()),
                ("t", ts(-5)),
            ],
        ),
        (
            "rooms/r1/msgs/m1",
            vec![("n", Value::Integer(2)), ("s", "hi".into())],
        ),
        (
            "rooms/r1/msgs/m2",
            vec![("n", Value::Double(2.5)), ("s", "yo".into())],
        ),
        (
            "rooms/r2/msgs/m1",
            vec![("n", Value::Integer(-3)), ("s", "hi".into())],
        ),
        ("msgs/m1", vec![("n", Value::Integer(2)), ("s", "a".into())]),
        ("msgs/m9", vec![("s", "q".into())]),
        ("other/o1", vec![("n", Value::Integer(1))]),
    ];
    rows.into_iter()
        .enumerate()
        .map(|(i, (name, fields))| Document {
            name: DocumentName::parse(name).expect("a valid name"),
            fields: fields
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect::<Map>()
                .into(),
            create_version: 1 + i as u64,
            update_version: 1 + 2 * i as u64,
        })
        .collect()
}

/// Panics when `store`'s reads passed their budget: a runaway plan is a finding.
fn check_budget(store: &Metered<'_, MemStore>, what: &str) {
    assert!(
        !store.over_budget(),
        "{what} read {} rows in {} requests, over the budget",
        store.rows() + store.gets(),
        store.gets() + store.scans()
    );
}

/// Valid inputs for each target, to seed the corpora (`fuzz/examples/write_seeds.rs` writes
/// them to files): the documents of the fuzz store with a few values and keys, the index
/// file, and a spread of queries over the store, alone and inside messages of both
/// directions.
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let mut out = Vec::new();
    let docs = fuzz_documents();
    for d in &docs {
        let bytes = encode_document(d).expect("fuzz documents encode");
        out.push(("document", bytes));
        let mut fields = Vec::new();
        encode_fields(&d.fields, &mut fields);
        out.push(("document", fields));
        out.push(("document", document_key(&d.name)));
    }
    for v in docs[0].fields.values().chain(docs[4].fields.values()) {
        let mut bytes = Vec::new();
        encode_value(v, &mut bytes);
        out.push(("document", bytes));
        out.push(("document", key::encode_value(v, Direction::Ascending)));
    }
    out.push(("index_file", FUZZ_INDEXES.as_bytes().to_vec()));
    let file = parse_index_file(FUZZ_INDEXES).expect("the fuzz index file parses");
    out.push(("index_file", file.to_json().into_bytes()));
    out.push((
        "index_file",
        b"// comment\n{indexes: [], fieldOverrides: [],}".to_vec(),
    ));
    let queries = seed_queries();
    for q in &queries {
        let mut bytes = Vec::new();
        encode_query(q, &mut bytes);
        out.push(("query", bytes));
    }
    let messages = seed_messages(&docs, &queries, file);
    for m in messages.0 {
        out.push(("protocol", encode_client(&m)));
    }
    let server: Vec<Vec<u8>> = messages.1.iter().map(encode_server).collect();
    // A bundle as the fan-out sends one: one change reaching two targets, then the Snapshot.
    let bundled = [&server[5], &server[5], &server[7]];
    out.push(("protocol", encode_bundle(&bundled)));
    out.extend(server.into_iter().map(|m| ("protocol", m)));
    out
}

fn seed_queries() -> Vec<Query> {
    use crate::encoding::key::Direction::{Ascending, Descending};
    use crate::query::model::{Filter, Operator as Op};
    let rooms = || Query::collection(CollectionPath::parse("rooms").expect("a valid path"));
    let list = |v: Vec<Value>| Value::Array(v);
    vec![
        rooms(),
        rooms()
            .where_("s", Op::Equal, "a")
            .order_by("n", Descending)
            .limit(2),
        rooms()
            .where_("n", Op::GreaterThan, 0i64)
            .order_by("n", Ascending),
        rooms()
            .where_("tags", Op::ArrayContains, "x")
            .order_by("n", Ascending),
        rooms()
            .where_(
                "tags",
                Op::ArrayContainsAny,
                list(vec!["x".into(), Value::Integer(2)]),
            )
            .limit(3),
        rooms()
            .where_("s", Op::In, list(vec!["a".into(), "b".into()]))
            .where_("b", Op::Equal, true)
            .order_by("n", Ascending),
        rooms().where_("n", Op::NotIn, list(vec![Value::Integer(1), Value::Null])),
        rooms().where_("s", Op::NotEqual, "a").select(&["s", "m.x"]),
        rooms()
            .filter(Filter::Or(vec![
                Filter::field("s", Op::Equal, "a"),
                Filter::field("b", Op::Equal, false),
            ]))
            .limit(4),
        rooms()
            .order_by("n", Descending)
            .start_at(vec![Value::Integer(7)])
            .end_before(vec![Value::Double(0.0)])
            .offset(1),
        rooms().order_by("s", Ascending).limit_to_last(2),
        rooms().where_("__name__", Op::Equal, Value::String("r2".into())),
        rooms().where_("m.x", Op::LessThanOrEqual, 1i64),
        rooms().where_("blob", Op::Equal, Value::Bytes(vec![0, 1, 255])),
        Query::collection_group("msgs")
            .order_by("n", Ascending)
            .start_after(vec![Value::Integer(2)]),
        Query::collection_group("msgs").where_("n", Op::GreaterThanOrEqual, 2i64),
        Query::collection(CollectionPath::parse("rooms/r1/msgs").expect("a valid path"))
            .where_("s", Op::LessThan, "z")
            .order_by("s", Descending),
    ]
}

type SeedMessages = (Vec<ClientMessage>, Vec<ServerMessage>);

fn seed_messages(docs: &[Document], queries: &[Query], indexes: IndexFile) -> SeedMessages {
    use crate::mutation::{FieldTransform, Mutation, Precondition};
    use crate::protocol::{DocumentChange, ErrorCode, TargetChangeKind, PROTOCOL_VERSION};
    let name = |s: &str| DocumentName::parse(s).expect("a valid name");
    let mut update = Mutation::set(name("rooms/r9"), (*docs[0].fields).clone());
    update.precondition = Precondition::Exists(false);
    update.transforms = vec![(
        FieldPath::parse("n").expect("a valid field path"),
        FieldTransform::Increment(Value::Integer(2)),
    )];
    let client = vec![
        ClientMessage::Hello {
            protocol_version: PROTOCOL_VERSION,
            database: "db".into(),
            client_id: "c1".into(),
            token: String::new(),
        },
        ClientMessage::Auth { token: "t".into() },
        ClientMessage::Get {
            request_id: 1,
            names: vec![name("rooms/r1"), name("rooms/r1/msgs/m1")],
        },
        ClientMessage::RunQuery {
            request_id: 2,
            query: queries[1].clone(),
        },
        ClientMessage::RunAggregation {
            request_id: 3,
            query: queries[2].clone(),
            aggregations: vec![
                Aggregation::Count,
                Aggregation::Sum(FieldPath::parse("n").expect("a valid field path")),
                Aggregation::Average(FieldPath::parse("n").expect("a valid field path")),
            ],
        },
        ClientMessage::Write {
            request_id: 4,
            batch_id: 9,
            mutations: vec![update, Mutation::delete(name("rooms/r2"))],
            reads: vec![(name("rooms/r1"), Some(3)), (name("rooms/r8"), None)],
        },
        ClientMessage::Listen {
            target_id: 5,
            query: queries[8].clone(),
            resume_version: Some(12),
        },
        ClientMessage::Unlisten { target_id: 5 },
        ClientMessage::Ping { nonce: 77 },
    ];
    let server = vec![
        ServerMessage::Welcome {
            protocol_version: PROTOCOL_VERSION,
            version: 40,
            indexes,
            heartbeat_ms: 15_000,
        },
        ServerMessage::GetResult {
            request_id: 1,
            version: 40,
            documents: vec![
                (docs[0].name.clone(), Some(docs[0].clone())),
                (name("a/b"), None),
            ],
        },
        ServerMessage::QueryResult {
            request_id: 2,
            version: 40,
            documents: docs[..3].to_vec(),
        },
        ServerMessage::AggregationResult {
            request_id: 3,
            version: 40,
            values: vec![Value::Integer(3), Value::Double(2.5), Value::Null],
        },
        ServerMessage::WriteResult {
            request_id: 4,
            batch_id: 9,
            version: 41,
        },
        ServerMessage::TargetChange {
            target_id: 5,
            kind: TargetChangeKind::Delta,
            changes: vec![
                DocumentChange::Upsert(docs[1].clone()),
                DocumentChange::Remove(docs[2].name.clone()),
                DocumentChange::Leave(docs[4].clone()),
                DocumentChange::Delete {
                    name: docs[5].name.clone(),
                    version: 41,
                },
            ],
        },
        ServerMessage::Existence {
            target_id: 5,
            count: 2,
            filter: crate::protocol::existence::NameFilter::build(
                2,
                [&docs[1].name, &docs[3].name],
            ),
        },
        ServerMessage::Snapshot { version: 41 },
        ServerMessage::Heartbeat {
            version: 41,
            nonce: 77,
        },
        ServerMessage::Error {
            request_id: 0,
            target_id: 5,
            code: ErrorCode::FailedPrecondition,
            message: "the query requires an index".into(),
        },
    ];
    (client, server)
}
