//! The order-preserving key encoding against the value order: byte order is `cmp_order` (and
//! `cmp_order` is the reference comparator of `query_model`), equal bytes exactly for
//! order-equal values, decoding gives back an order-equal value, concatenations keep
//! lexicographic order, index entry keys round-trip exactly, and no input makes a decoder
//! panic.

use std::cmp::Ordering;

use hearth_core::document::Document;
use hearth_core::encoding::key::{
    decode_value, encode_value, write_name, write_string, write_value, Direction, KeyReader,
};
use hearth_core::index::config::{FieldMode, QueryScope};
use hearth_core::index::def::IndexDef;
use hearth_core::index::keys::{decode_document_key, decode_entry, document_key, index_entries};
use hearth_core::path::{DocumentName, FieldPath};
use hearth_core::value::{GeoPoint, Map, Timestamp, Value};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;

use crate::query_model::{cmp_names, config, ref_cmp, strict_eq};
use crate::strategies::{arb_document, arb_scalar, arb_value};

const DIRECTIONS: [Direction; 2] = [Direction::Ascending, Direction::Descending];

fn apply(dir: Direction, o: Ordering) -> Ordering {
    match dir {
        Direction::Ascending => o,
        Direction::Descending => o.reverse(),
    }
}

/// Values that are equal or adjacent in the order but not strictly equal, plus containers of
/// them, so that pairs often tie or differ only deep inside.
fn arb_close_value() -> BoxedStrategy<Value> {
    let leaf = select(vec![
        Value::Null,
        Value::Boolean(false),
        Value::Integer(0),
        Value::Integer(1),
        Value::Integer(-1),
        Value::Integer(i64::MAX),
        Value::Integer(i64::MIN),
        Value::Integer((1 << 53) + 1),
        Value::Double(0.0),
        Value::Double(-0.0),
        Value::Double(1.0),
        Value::Double(-1.0),
        Value::Double(f64::NAN),
        Value::Double(f64::NEG_INFINITY),
        Value::Double(f64::INFINITY),
        Value::Double(9_007_199_254_740_992.0),
        Value::Double(9_223_372_036_854_775_808.0),
        Value::Double(-9_223_372_036_854_775_808.0),
        Value::Double(f64::MIN_POSITIVE),
        Value::Timestamp(Timestamp::new(0, 0).expect("valid")),
        Value::Timestamp(Timestamp::new(-1, 999_999_000).expect("valid")),
        Value::from(""),
        Value::from("\0"),
        Value::from("a"),
        Value::from("a\0"),
        Value::from("a\0b"),
        Value::from("\u{FFFD}"),
        Value::from("😀"),
        Value::Bytes(vec![]),
        Value::Bytes(vec![0]),
        Value::Bytes(vec![0, 0]),
        Value::Bytes(vec![0xFF]),
        Value::Reference(DocumentName::parse("a/b").expect("valid")),
        Value::Reference(DocumentName::parse("a/b/c/d").expect("valid")),
        Value::Reference(DocumentName::parse("a/b\0/c/d").expect("valid")),
        Value::Reference(DocumentName::parse("a\0/b").expect("valid")),
        Value::GeoPoint(GeoPoint::new(0.0, -0.0).expect("valid")),
        Value::GeoPoint(GeoPoint::new(-90.0, 180.0).expect("valid")),
    ]);
    leaf.prop_recursive(2, 12, 3, |inner| {
        let key = select(vec![
            "".to_owned(),
            "\0".to_owned(),
            "a".to_owned(),
            "a\0".to_owned(),
            "b".to_owned(),
        ]);
        let element = inner.clone().prop_map(|v| match v {
            Value::Array(a) => Value::Map(a.into_iter().map(|x| ("i".to_owned(), x)).collect()),
            other => other,
        });
        prop_oneof![
            vec(element, 0..3).prop_map(Value::Array),
            proptest::collection::btree_map(key, inner, 0..3).prop_map(Value::Map),
        ]
    })
    .boxed()
}

fn arb_pair() -> impl Strategy<Value = (Value, Value)> {
    prop_oneof![
        (arb_value(), arb_value()),
        (arb_close_value(), arb_close_value()),
        arb_value().prop_map(|v| (v.clone(), v)),
    ]
}

fn check_order(a: &Value, b: &Value) -> Result<(), TestCaseError> {
    let order = a.cmp_order(b);
    prop_assert_eq!(
        order,
        ref_cmp(a, b),
        "cmp_order disagrees with the reference"
    );
    for dir in DIRECTIONS {
        let (ea, eb) = (encode_value(a, dir), encode_value(b, dir));
        prop_assert_eq!(
            ea.cmp(&eb),
            apply(dir, order),
            "{:?} / {:?} {:?}",
            a,
            b,
            dir
        );
        prop_assert_eq!(ea == eb, order == Ordering::Equal);
    }
    Ok(())
}

fn check_round_trip(v: &Value) -> Result<(), TestCaseError> {
    for dir in DIRECTIONS {
        let bytes = encode_value(v, dir);
        let back = decode_value(&bytes, dir);
        prop_assert!(back.is_ok(), "{:?} {:?}: {:?}", v, dir, back);
        let back = back.expect("checked");
        prop_assert_eq!(
            ref_cmp(&back, v),
            Ordering::Equal,
            "{:?} came back as {:?}",
            v,
            back
        );
        prop_assert_eq!(&encode_value(&back, dir), &bytes);
        // Every proper prefix is incomplete: the encoding is prefix-free.
        for n in 0..bytes.len() {
            prop_assert!(
                decode_value(&bytes[..n], dir).is_err(),
                "prefix {} of {:?} decodes",
                n,
                v
            );
        }
    }
    Ok(())
}

fn arb_name() -> impl Strategy<Value = DocumentName> {
    let seg = select(vec!["a", "a\0", "b", "\u{FFFD}", "😀", "aa"]);
    vec((seg.clone(), seg), 1..=3).prop_map(|pairs| {
        let segments = pairs
            .into_iter()
            .flat_map(|(c, d)| [c.to_owned(), d.to_owned()])
            .collect();
        DocumentName::from_segments(segments).expect("valid segments")
    })
}

/// A key made of two values and a name, each in its own direction, as an index writes them.
fn tuple_key(t: &(Value, Value, DocumentName), dirs: (Direction, Direction, Direction)) -> Vec<u8> {
    let mut out = Vec::new();
    write_value(&t.0, dirs.0, &mut out, &mut Vec::new());
    write_value(&t.1, dirs.1, &mut out, &mut Vec::new());
    write_name(&t.2, dirs.2, &mut out);
    out
}

fn arb_tuple() -> impl Strategy<Value = (Value, Value, DocumentName)> {
    (arb_close_value(), arb_close_value(), arb_name())
}

fn arb_dirs() -> impl Strategy<Value = (Direction, Direction, Direction)> {
    let d = || select(DIRECTIONS.to_vec());
    (d(), d(), d())
}

/// An index definition over fields of `doc` (and some it lacks), with random modes.
fn arb_def_for(doc: &Document) -> BoxedStrategy<IndexDef> {
    let mut paths: Vec<FieldPath> = Vec::new();
    fn walk(map: &Map, prefix: &mut Vec<String>, out: &mut Vec<FieldPath>) {
        for (k, v) in map {
            prefix.push(k.clone());
            out.push(FieldPath::from_segments(prefix.clone()).expect("valid"));
            if let Value::Map(m) = v {
                walk(m, prefix, out);
            }
            prefix.pop();
        }
    }
    walk(&doc.fields, &mut Vec::new(), &mut paths);
    paths.push(FieldPath::parse("zz").expect("valid"));
    let group = doc.name.collection_id().to_owned();
    let mode = select(vec![
        FieldMode::Ascending,
        FieldMode::Descending,
        FieldMode::ArrayContains,
    ]);
    let name_last = select(vec![
        None,
        Some(FieldMode::Ascending),
        Some(FieldMode::Descending),
    ]);
    (
        proptest::sample::subsequence(paths.clone(), 0..=paths.len().min(3)),
        vec(mode, 3),
        name_last,
        select(vec![QueryScope::Collection, QueryScope::CollectionGroup]),
    )
        .prop_map(move |(fields, modes, name_last, scope)| {
            let mut seen_contains = false;
            let mut fields: Vec<(FieldPath, FieldMode)> = fields
                .into_iter()
                .zip(modes)
                .map(|(f, m)| {
                    // At most one array-contains field, as the index file requires.
                    let m = if m == FieldMode::ArrayContains && seen_contains {
                        FieldMode::Ascending
                    } else {
                        m
                    };
                    seen_contains |= m == FieldMode::ArrayContains;
                    (f, m)
                })
                .collect();
            if let Some(m) = name_last {
                fields.push((FieldPath::document_id(), m));
            }
            IndexDef::new(&group, scope, fields)
        })
        .boxed()
}

proptest! {
    #![proptest_config(config(1024))]

    #[test]
    fn byte_order_is_value_order((a, b) in arb_pair()) {
        check_order(&a, &b)?;
    }

}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn decoding_gives_an_order_equal_value(v in prop_oneof![arb_value(), arb_close_value()]) {
        check_round_trip(&v)?;
    }

}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn concatenations_keep_lexicographic_order(
        a in arb_tuple(),
        b in arb_tuple(),
        dirs in arb_dirs(),
    ) {
        let (ka, kb) = (tuple_key(&a, dirs), tuple_key(&b, dirs));
        let want = apply(dirs.0, ref_cmp(&a.0, &b.0))
            .then_with(|| apply(dirs.1, ref_cmp(&a.1, &b.1)))
            .then_with(|| apply(dirs.2, cmp_names(&a.2, &b.2)));
        prop_assert_eq!(ka.cmp(&kb), want);
        // And the parts read back in order.
        let mut r = KeyReader::new(&ka);
        r.set_direction(dirs.0);
        prop_assert!(ref_cmp(&r.value(&mut [].iter()).expect("first"), &a.0).is_eq());
        r.set_direction(dirs.1);
        prop_assert!(ref_cmp(&r.value(&mut [].iter()).expect("second"), &a.1).is_eq());
        r.set_direction(dirs.2);
        prop_assert_eq!(r.name().expect("name"), a.2.clone());
        prop_assert!(r.is_empty());
    }

}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn document_ids_and_keys_keep_order(a in arb_name(), b in arb_name(), s in "[a\0\u{FFFD}😀]{0,3}", t in "[a\0\u{FFFD}😀]{0,3}") {
        prop_assert_eq!(document_key(&a).cmp(&document_key(&b)).is_eq(), a == b);
        prop_assert_eq!(decode_document_key(&document_key(&a)).expect("decodes"), a.clone());
        for dir in DIRECTIONS {
            let (mut x, mut y) = (Vec::new(), Vec::new());
            write_string(&s, dir, &mut x);
            write_string(&t, dir, &mut y);
            prop_assert_eq!(x.cmp(&y), apply(dir, s.as_bytes().cmp(t.as_bytes())));
        }
        // Within one collection, document keys order by id.
        let c = a.parent();
        let (da, db) = (c.doc("x").expect("valid"), c.doc("y").expect("valid"));
        prop_assert!(document_key(&da) < document_key(&db));
    }

}

proptest! {
    #![proptest_config(config(320))]

    #[test]
    fn index_entries_round_trip_exactly(
        (doc, def) in arb_document().prop_flat_map(|d| {
            let def = arb_def_for(&d);
            (Just(d), def)
        }),
    ) {
        let keys = index_entries(&def, &doc);
        let mut contains_seen: Vec<Value> = Vec::new();
        for key in &keys {
            let entry = decode_entry(&def, key);
            prop_assert!(entry.is_ok(), "{:?}", entry);
            let entry = entry.expect("checked");
            prop_assert_eq!(&entry.name, &doc.name);
            prop_assert_eq!(entry.values.len(), def.fields().len());
            for ((path, mode), got) in def.fields().iter().zip(&entry.values) {
                let v = doc.field(path).expect("indexed fields are present").into_owned();
                match mode {
                    FieldMode::ArrayContains => {
                        let Value::Array(items) = &v else {
                            return Err(TestCaseError::fail("contains entry of a non-array"));
                        };
                        // Exactly the first of the order-equal elements.
                        let first = items.iter().find(|x| ref_cmp(x, got).is_eq());
                        prop_assert!(first.is_some_and(|x| strict_eq(x, got)), "{:?} in {:?}", got, items);
                        contains_seen.push(got.clone());
                    }
                    _ => prop_assert!(strict_eq(&v, got), "{:?} came back as {:?}", v, got),
                }
            }
        }
        // Keys are distinct, and so are their ordered parts.
        let mut sorted = keys.clone();
        sorted.sort();
        sorted.dedup();
        prop_assert_eq!(sorted.len(), keys.len());
        let present = def.fields().iter().all(|(p, _)| doc.field(p).is_some());
        if !present {
            prop_assert!(keys.is_empty());
        }
    }

}

proptest! {
    #![proptest_config(config(200))]

    #[test]
    fn decoders_refuse_noise_without_panicking(
        bytes in prop_oneof![
            vec(any::<u8>(), 0..48),
            (select(vec![0x10u8, 0x20, 0x30, 0x31, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xA0]),
             vec(prop_oneof![Just(0u8), Just(1), Just(0xFF), any::<u8>()], 0..40))
                .prop_map(|(t, mut rest)| { rest.insert(0, t); rest }),
        ],
        doc in arb_document(),
    ) {
        for dir in DIRECTIONS {
            let _ = decode_value(&bytes, dir);
            let flipped: Vec<u8> = bytes.iter().map(|b| !b).collect();
            let _ = decode_value(&flipped, dir);
        }
        let _ = decode_document_key(&bytes);
        let defs = [
            IndexDef::new("users", QueryScope::Collection, vec![(FieldPath::parse("a").expect("valid"), FieldMode::Descending)]),
            IndexDef::new("users", QueryScope::CollectionGroup, vec![(FieldPath::parse("a").expect("valid"), FieldMode::ArrayContains)]),
            IndexDef::new("users", QueryScope::CollectionGroup, Vec::new()),
        ];
        for def in &defs {
            let mut key = def.id().to_vec();
            key.extend_from_slice(&bytes);
            let _ = decode_entry(def, &key);
            let _ = decode_entry(def, &bytes);
            // Truncated real entries are refused.
            for real in index_entries(def, &doc) {
                prop_assert!(decode_entry(def, &real).is_ok());
                for n in 0..real.len() {
                    let e = decode_entry(def, &real[..n]);
                    prop_assert!(e.is_err(), "{:?} truncated to {} decodes as {:?}", real, n, e);
                }
            }
        }
        // Every proper prefix of a value encoding is refused.
        let v = doc.fields.values().next().cloned().unwrap_or(Value::Null);
        let enc = encode_value(&v, Direction::Descending);
        for n in 0..enc.len() {
            prop_assert!(decode_value(&enc[..n], Direction::Descending).is_err());
        }
    }
}

#[test]
fn scalars_of_every_type_keep_type_order() {
    // One representative per type, in Firestore's type order.
    let ordered = [
        Value::Null,
        Value::Boolean(true),
        Value::Double(f64::NAN),
        Value::Integer(i64::MIN),
        Value::Double(f64::INFINITY),
        Value::Timestamp(Timestamp::new(0, 0).unwrap()),
        Value::from(""),
        Value::Bytes(vec![]),
        Value::Reference(DocumentName::parse("a/b").unwrap()),
        Value::GeoPoint(GeoPoint::new(-90.0, -180.0).unwrap()),
        Value::Array(vec![]),
        Value::Map(Map::new()),
    ];
    for w in ordered.windows(2) {
        for dir in DIRECTIONS {
            assert_eq!(
                encode_value(&w[0], dir).cmp(&encode_value(&w[1], dir)),
                apply(dir, Ordering::Less),
                "{:?} < {:?}",
                w[0],
                w[1]
            );
        }
    }
}

proptest! {
    #![proptest_config(config(256))]

    /// Scalars from the shared strategy against every representative: type order holds.
    #[test]
    fn scalars_against_each_other(a in arb_scalar(), b in arb_scalar()) {
        check_order(&a, &b)?;
        check_round_trip(&a)?;
    }
}

/// A key whose kinds trailer lost its count byte used to decode: with no kinds left, the
/// integer `1` came back as the double `1.0` (and a big odd integer as itself).
#[test]
fn regression_truncated_entry_keys_are_refused() {
    let def = IndexDef::new(
        "users",
        QueryScope::Collection,
        vec![(FieldPath::parse("a").unwrap(), FieldMode::Descending)],
    );
    for v in [Value::Integer(1), Value::Integer(26_418_444_766_157_509)] {
        let doc = Document::new(
            DocumentName::parse("users/a").unwrap(),
            [("a".to_owned(), Value::Array(vec![v.clone()]))]
                .into_iter()
                .collect(),
        );
        let key = index_entries(&def, &doc).pop().unwrap();
        let whole = decode_entry(&def, &key).unwrap();
        assert!(strict_eq(&whole.values[0], &Value::Array(vec![v])));
        assert!(decode_entry(&def, &key[..key.len() - 1]).is_err());
    }
}

/// Noise that reads as a huge number with a remainder overflowed the integer conversion
/// (`as i128` saturates, then the remainder was added): a panic on bytes from outside.
#[test]
fn regression_huge_number_with_remainder_is_refused() {
    let bytes = [0x31, 0xFF, 0, 0, 0, 0, 0, 0, 0, 1, 0];
    assert!(decode_value(&bytes, Direction::Ascending).is_err());
    let flipped: Vec<u8> = bytes.iter().map(|b| !b).collect();
    assert!(decode_value(&flipped, Direction::Descending).is_err());
    // A `-0.0` kind on a non-zero number is refused too, rather than read as -0.0.
    let def = IndexDef::new(
        "users",
        QueryScope::Collection,
        vec![(FieldPath::parse("a").unwrap(), FieldMode::Ascending)],
    );
    let doc = Document::new(
        DocumentName::parse("users/a").unwrap(),
        [("a".to_owned(), Value::Double(5.0))].into_iter().collect(),
    );
    let mut key = index_entries(&def, &doc).pop().unwrap();
    let n = key.len();
    assert_eq!(&key[n - 2..], [1, 1]);
    key[n - 2] = 2;
    assert!(decode_entry(&def, &key).is_err());
}
