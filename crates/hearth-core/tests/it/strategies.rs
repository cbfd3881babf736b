//! Shared proptest strategies, one set for every test: values, fields, document names and
//! documents; field paths, filters, queries, mutations and index files; protocol messages.
//!
//! Generated values are always valid Firestore data: timestamps in range and truncated to
//! microseconds, geopoints in range, non-empty field names, no array directly inside an
//! array, nesting far below `MAX_DEPTH`. They lean on the edge cases that break encoders and
//! comparators: NaN, -0.0, infinities, i64 extremes, integers beyond 2^53 (not exact as
//! doubles), strings whose UTF-8 and UTF-16 orders differ ('\u{FFFD}' against emoji).
//! Sizes stay small so that 256 cases of a property run in well under a second.

use hearth_core::document::Document;
use hearth_core::encoding::key::Direction;
use hearth_core::error::ErrorCode;
use hearth_core::index::config::{
    CompositeIndexSpec, FieldMode, FieldOverrideSpec, IndexFieldSpec, IndexFile, OverrideIndexSpec,
    QueryScope,
};
use hearth_core::mutation::{FieldTransform, Mutation, MutationKind, Precondition, SetMerge};
use hearth_core::path::{CollectionPath, DocumentName, FieldPath};
use hearth_core::protocol::existence::NameFilter;
use hearth_core::protocol::{ClientMessage, DocumentChange, ServerMessage, TargetChangeKind};
use hearth_core::query::model::{
    Aggregation, Cursor, FieldFilter, Filter, LimitType, Operator, OrderBy, Query, Source,
};
use hearth_core::value::{
    GeoPoint, Map, Timestamp, Value, MAX_TIMESTAMP_SECONDS, MIN_TIMESTAMP_SECONDS,
};
use proptest::collection::{btree_map, btree_set, vec};
use proptest::prelude::*;

/// Integers, weighted towards the ones that are hard to get right.
fn arb_integer() -> impl Strategy<Value = i64> {
    const TWO_53: i64 = 1 << 53;
    prop_oneof![
        3 => -100i64..100,
        2 => any::<i64>(),
        1 => prop_oneof![Just(i64::MIN), Just(i64::MAX), Just(0), Just(-1)],
        // Around and beyond 2^53, where int64 and double stop agreeing.
        1 => (TWO_53 - 3..TWO_53 + 3, any::<bool>()).prop_map(|(i, neg)| if neg { -i } else { i }),
        1 => TWO_53..i64::MAX,
    ]
}

/// Doubles, including every special value.
fn arb_double() -> impl Strategy<Value = f64> {
    prop_oneof![
        3 => -1000.0f64..1000.0,
        2 => any::<f64>(),
        1 => (-1000i32..1000).prop_map(f64::from),
        2 => prop_oneof![
            Just(f64::NAN),
            Just(-0.0),
            Just(0.0),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(f64::MIN_POSITIVE),
            Just(f64::MAX),
            Just(9_007_199_254_740_992.0),
        ],
    ]
}

/// Timestamps over the whole range (years 1 to 9999) and near the epoch, at microsecond
/// precision: `Timestamp::new` truncates the generated nanoseconds.
fn arb_timestamp() -> impl Strategy<Value = Timestamp> {
    prop_oneof![
        (
            MIN_TIMESTAMP_SECONDS..=MAX_TIMESTAMP_SECONDS,
            0i64..1_000_000_000
        ),
        (-100i64..100, 0i64..1_000_000_000),
        prop_oneof![
            Just((MIN_TIMESTAMP_SECONDS, 0)),
            Just((MAX_TIMESTAMP_SECONDS, 999_999_999)),
        ],
    ]
    .prop_map(|(s, n)| Timestamp::new(s, n).expect("generated in range"))
}

/// Strings: ASCII, any Unicode (controls and NUL too), and the characters whose UTF-8 order
/// differs from their UTF-16 order.
fn arb_string() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-c]{0,3}",
        2 => "(?s).{0,8}",
        2 => "[a\u{FFFD}😀é\u{0}]{0,4}",
    ]
}

fn arb_geopoint() -> impl Strategy<Value = GeoPoint> {
    prop_oneof![
        3 => (-90.0f64..=90.0, -180.0f64..=180.0),
        1 => (
            prop_oneof![Just(-90.0), Just(0.0), Just(90.0)],
            prop_oneof![Just(-180.0), Just(-0.0), Just(180.0)],
        ),
    ]
    .prop_map(|(lat, lng)| GeoPoint::new(lat, lng).expect("generated in range"))
}

/// One path segment: never empty, never `.`/`..`, no `/`, never `__reserved__`.
fn arb_segment() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-e]{1,2}",
        1 => "[A-Za-z0-9]{20}",
        1 => "[a-z\u{FFFD}😀é]{1,3}",
    ]
}

/// A document name with one to three collection/id pairs (sub-collections included).
pub fn arb_any_doc_name() -> impl Strategy<Value = DocumentName> {
    vec((arb_segment(), arb_segment()), 1..=3).prop_map(|pairs| {
        let path = pairs
            .iter()
            .map(|(c, id)| format!("{c}/{id}"))
            .collect::<Vec<_>>()
            .join("/");
        DocumentName::parse(&path).expect("generated segments are valid")
    })
}

/// Field names: mostly a tiny alphabet, so that different maps and documents share keys.
fn arb_key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-e]",
        1 => "[a-e]{2}",
        1 => "[a\u{FFFD}😀. ]{1,3}",
    ]
}

/// Every non-container value type.
pub fn arb_scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Boolean),
        arb_integer().prop_map(Value::Integer),
        arb_double().prop_map(Value::Double),
        arb_timestamp().prop_map(Value::Timestamp),
        arb_string().prop_map(Value::String),
        vec(any::<u8>(), 0..8).prop_map(Value::Bytes),
        arb_any_doc_name().prop_map(Value::Reference),
        arb_geopoint().prop_map(Value::GeoPoint),
    ]
}

/// Any value: scalars, arrays and maps nested up to three levels, a few elements each.
///
/// Firestore refuses an array directly inside an array, so an array generated as an array
/// element is turned into a map keyed by position instead (its own elements are already
/// array-free, so the rule holds at every level).
pub fn arb_value() -> BoxedStrategy<Value> {
    arb_scalar()
        .prop_recursive(3, 24, 4, |inner| {
            let element = inner.clone().prop_map(|v| match v {
                Value::Array(a) => Value::Map(
                    a.into_iter()
                        .enumerate()
                        .map(|(i, x)| (format!("i{i}"), x))
                        .collect(),
                ),
                other => other,
            });
            prop_oneof![
                vec(element, 0..4).prop_map(Value::Array),
                btree_map(arb_key(), inner, 0..4).prop_map(Value::Map),
            ]
        })
        .boxed()
}

/// The fields of a document: a few entries with keys from a small alphabet.
pub fn arb_fields() -> impl Strategy<Value = Map> {
    btree_map(arb_key(), arb_value(), 0..5)
}

/// A document directly in `collection`, with ids that often repeat between cases.
pub fn arb_doc_name(collection: &'static str) -> impl Strategy<Value = DocumentName> {
    arb_segment().prop_map(move |id| {
        DocumentName::parse(&format!("{collection}/{id}")).expect("generated id is valid")
    })
}

/// A document in one of two collections (or a sub-collection), with fields and versions;
/// uncommitted documents (versions 0) appear too, and `create_version <= update_version`.
pub fn arb_document() -> impl Strategy<Value = Document> {
    let name = prop_oneof![
        2 => arb_doc_name("users"),
        2 => arb_doc_name("items"),
        1 => arb_any_doc_name(),
    ];
    let versions = prop_oneof![
        1 => Just((0u64, 0u64)),
        3 => (any::<u64>(), any::<u64>()).prop_map(|(a, b)| (a.min(b), a.max(b))),
        2 => (0u64..1000, 0u64..1000).prop_map(|(a, b)| (a.min(b), a.max(b))),
    ];
    (name, arb_fields(), versions).prop_map(|(name, fields, (create, update))| Document {
        name,
        fields: fields.into(),
        create_version: create,
        update_version: update,
    })
}

/// Field paths: simple names, names that need quoting (dots, backticks, backslashes,
/// spaces), and `__name__`.
pub fn arb_field_path() -> impl Strategy<Value = FieldPath> {
    prop_oneof![
        4 => vec(prop_oneof![3 => "[a-c]{1,2}", 1 => "[a.` \\\\é]{1,3}"], 1..=3)
            .prop_map(|s| FieldPath::from_segments(s).expect("non-empty segments")),
        1 => Just(FieldPath::document_id()),
    ]
}

/// Filter trees: field filters with any operator and any value (validation is not the
/// codec's business), under ANDs and ORs a few levels deep.
pub fn arb_filter() -> impl Strategy<Value = Filter> {
    let leaf =
        (arb_field_path(), 0..Operator::ALL.len(), arb_value()).prop_map(|(field, op, value)| {
            Filter::Field(FieldFilter {
                field,
                op: Operator::ALL[op],
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

/// Cursors with a few values, inclusive or not, from a document or not.
pub fn arb_cursor() -> impl Strategy<Value = Cursor> {
    (vec(arb_value(), 0..3), any::<bool>(), any::<bool>()).prop_map(
        |(values, inclusive, from_document)| Cursor {
            values,
            inclusive,
            from_document,
        },
    )
}

/// Queries with every part present or absent: a collection (maybe a sub-collection) or any
/// collection group id, filters, orders, limits of either kind, cursors, offset, projection.
pub fn arb_query() -> impl Strategy<Value = Query> {
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

/// Every field transform.
pub fn arb_transform() -> impl Strategy<Value = FieldTransform> {
    prop_oneof![
        arb_value().prop_map(FieldTransform::Increment),
        arb_value().prop_map(FieldTransform::Maximum),
        arb_value().prop_map(FieldTransform::Minimum),
        Just(FieldTransform::ServerTimestamp),
        vec(arb_value(), 0..3).prop_map(FieldTransform::ArrayUnion),
        vec(arb_value(), 0..3).prop_map(FieldTransform::ArrayRemove),
    ]
}

/// Mutations of every kind, merge mode and precondition, with transforms and field deletes.
pub fn arb_mutation() -> impl Strategy<Value = Mutation> {
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
        arb_any_doc_name(),
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

/// `count`, `sum` and `average`.
pub fn arb_aggregation() -> impl Strategy<Value = Aggregation> {
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
pub fn arb_index_file() -> impl Strategy<Value = IndexFile> {
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

/// Every client message, with the data strategies above inside.
pub fn arb_client_message() -> impl Strategy<Value = ClientMessage> {
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
        (any::<u64>(), vec(arb_any_doc_name(), 0..4))
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
            vec(
                (arb_any_doc_name(), proptest::option::of(any::<u64>())),
                0..3
            ),
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

/// Every relay message, with the data strategies above inside.
pub fn arb_server_message() -> impl Strategy<Value = ServerMessage> {
    let change = prop_oneof![
        arb_document().prop_map(DocumentChange::Upsert),
        arb_any_doc_name().prop_map(DocumentChange::Remove),
        arb_document().prop_map(DocumentChange::Leave),
        (arb_any_doc_name(), any::<u64>())
            .prop_map(|(name, version)| DocumentChange::Delete { name, version }),
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
            vec(
                (arb_any_doc_name(), proptest::option::of(arb_document())),
                0..3
            )
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
        (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(request_id, batch_id, version)| {
            ServerMessage::WriteResult {
                request_id,
                batch_id,
                version,
            }
        }),
        (any::<u32>(), any::<bool>(), vec(change, 0..4)).prop_map(|(target_id, reset, changes)| {
            ServerMessage::TargetChange {
                target_id,
                kind: if reset {
                    TargetChangeKind::Reset
                } else {
                    TargetChangeKind::Delta
                },
                changes,
            }
        }),
        (
            any::<u32>(),
            any::<u64>(),
            any::<u8>(),
            vec(any::<u8>(), 0..16)
        )
            .prop_map(
                |(target_id, count, hashes, bits)| ServerMessage::Existence {
                    target_id,
                    count,
                    filter: NameFilter::from_parts(bits, hashes),
                }
            ),
        any::<u64>().prop_map(|version| ServerMessage::Snapshot { version }),
        (any::<u64>(), any::<u64>())
            .prop_map(|(version, nonce)| ServerMessage::Heartbeat { version, nonce }),
        (
            any::<u64>(),
            any::<u32>(),
            0..ErrorCode::ALL.len(),
            "(?s).{0,12}"
        )
            .prop_map(|(request_id, target_id, code, message)| {
                ServerMessage::Error {
                    request_id,
                    target_id,
                    code: ErrorCode::ALL[code],
                    message,
                }
            }),
    ]
}
