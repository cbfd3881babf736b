//! Shared proptest strategies for values, fields, document names and documents.
//!
//! Generated values are always valid Firestore data: timestamps in range and truncated to
//! microseconds, geopoints in range, non-empty field names, no array directly inside an
//! array, nesting far below `MAX_DEPTH`. They lean on the edge cases that break encoders and
//! comparators: NaN, -0.0, infinities, i64 extremes, integers beyond 2^53 (not exact as
//! doubles), strings whose UTF-8 and UTF-16 orders differ ('\u{FFFD}' against emoji).
//! Sizes stay small so that 256 cases of a property run in well under a second.

use hearth_core::document::Document;
use hearth_core::path::DocumentName;
use hearth_core::value::{
    GeoPoint, Map, Timestamp, Value, MAX_TIMESTAMP_SECONDS, MIN_TIMESTAMP_SECONDS,
};
use proptest::collection::{btree_map, vec};
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
fn arb_any_doc_name() -> impl Strategy<Value = DocumentName> {
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
