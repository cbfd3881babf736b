//! Corrupt stored records: bytes no encoder wrote reach the decoders as errors with the
//! `data-loss` code, never as documents that break a document invariant and never as a panic
//! further on (index maintenance, query execution). Documents are fed to the decoder as random
//! bytes, as valid encodings with bytes flipped, cut, inserted and removed, and as
//! well-formed encodings that break one rule of documents each; index and document keys the
//! same way. Whatever a decoder accepts re-encodes to exactly its input.

use hearth_core::document::{validate_fields, Document, DocumentError, MAX_DOCUMENT_BYTES};
use hearth_core::encoding::document::{
    decode_document, encode_document, encode_fields, DecodeError, FORMAT_VERSION,
};
use hearth_core::encoding::key::{
    decode_value as decode_key_value, encode_value as encode_key_value, write_kinds, write_value,
    Direction,
};
use hearth_core::error::ErrorCode;
use hearth_core::index::config::{parse_index_file, FieldMode, IndexFileError, QueryScope};
use hearth_core::index::def::{IndexCatalog, IndexDef};
use hearth_core::index::keys::{
    decode_document_key, decode_entry, document_entries, document_key, field_direction,
    index_entries, index_prefix, write_entry_name, DecodedEntry,
};
use hearth_core::kv::{block_on_ready, MemStore};
use hearth_core::path::{CollectionPath, DocumentName, FieldPath};
use hearth_core::query::execute::run_query;
use hearth_core::query::model::Query;
use hearth_core::value::{Map, Value};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;

use crate::query_model::config;
use crate::strategies::{arb_document, arb_value};

fn name(s: &str) -> DocumentName {
    DocumentName::parse(s).unwrap()
}

/// The record of `users/a` with `fields`, written field by field, so that the field rules
/// `encode_document` enforces are not applied.
fn record_with_fields(fields: &Map) -> Vec<u8> {
    let mut bytes = encode_document(&Document::new(name("users/a"), Map::new())).unwrap();
    // The empty fields map is one count byte, the last of the encoding.
    assert_eq!(bytes.pop(), Some(0));
    encode_fields(fields, &mut bytes);
    bytes
}

/// A stored document with an empty field name (the path rules refuse it; only corruption or
/// a foreign writer can store it) used to decode, and index maintenance then panicked
/// turning it into field paths.
#[test]
fn a_stored_invalid_field_name_is_refused_not_a_panic() {
    let fields: Map = [(String::new(), Value::Integer(1))].into_iter().collect();
    let corrupt = record_with_fields(&fields);
    let catalog = IndexCatalog::new();
    let mut store = MemStore::new();
    store
        .documents
        .insert(document_key(&name("users/a")), corrupt.clone());

    // Overwriting it decodes the old record to find its index entries.
    let new = Document::new(
        name("users/a"),
        [("x".to_owned(), Value::Integer(2))].into_iter().collect(),
    );
    let write = store.write_document(&catalog, &name("users/a"), Some(&new));
    assert!(write.is_err(), "{write:?}");
    let err = write.unwrap_err();
    assert!(matches!(err, DocumentError::Corrupt { .. }), "{err}");
    assert_eq!(err.code(), ErrorCode::DataLoss);
    assert!(store.index.is_empty(), "a refused write changes nothing");
    assert_eq!(
        store.documents.get(&document_key(&name("users/a"))),
        Some(&corrupt)
    );

    assert!(decode_document(&corrupt).is_err());
    let err = decode_document(&corrupt).unwrap_err();
    assert!(
        matches!(
            err,
            DecodeError::Limit {
                source: DocumentError::EmptyFieldName { .. },
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.code(), ErrorCode::DataLoss);

    let q = Query::collection(CollectionPath::parse("users").unwrap());
    let read = block_on_ready(run_query(&store, &catalog, &q));
    assert!(read.is_err(), "{read:?}");
    assert_eq!(read.unwrap_err().code(), ErrorCode::DataLoss);
}

/// `levels` maps, one inside the other, around a null.
fn nested_maps(levels: usize) -> Value {
    let mut v = Value::Null;
    for _ in 0..levels {
        v = Value::Map([("m".to_owned(), v)].into_iter().collect());
    }
    v
}

/// One well-formed record per rule of documents, each breaking only that rule.
fn rule_breaking_records() -> Vec<(&'static str, Vec<u8>)> {
    let one = |k: &str, v: Value| -> Map { [(k.to_owned(), v)].into_iter().collect() };
    let mut out = vec![
        ("empty name", record_with_fields(&one("", Value::Null))),
        (
            "reserved name",
            record_with_fields(&one("__x__", Value::Null)),
        ),
        ("reserved nested name", {
            record_with_fields(&one("a", Value::Map(one("__name__", Value::Null))))
        }),
        (
            "long name",
            record_with_fields(&one(&"n".repeat(1501), Value::Null)),
        ),
        ("nested array", {
            let inner = Value::Array(vec![Value::Array(vec![])]);
            record_with_fields(&one("a", inner))
        }),
        ("too deep", record_with_fields(&one("a", nested_maps(20)))),
    ];
    // A document one byte over the size limit, otherwise valid.
    let base = record_with_fields(&one("b", Value::Bytes(Vec::new()))).len();
    let fill = MAX_DOCUMENT_BYTES + 1 - base - 2;
    out.push((
        "too large",
        record_with_fields(&one("b", Value::Bytes(vec![7; fill]))),
    ));
    out
}

#[test]
fn every_rule_of_documents_is_enforced_by_the_decoder() {
    // The same documents one step inside the rules decode.
    let ok = |k: &str, v: Value| record_with_fields(&[(k.to_owned(), v)].into_iter().collect());
    for good in [
        ok("_x_", Value::Null),
        ok("__x", Value::Null),
        ok(&"n".repeat(1500), Value::Null),
        ok("a", Value::Array(vec![Value::Map(Map::new())])),
        ok("a", nested_maps(19)),
    ] {
        let doc = decode_document(&good).unwrap();
        assert_eq!(encode_document(&doc), Ok(good));
    }
    for (what, bytes) in rule_breaking_records() {
        let err = decode_document(&bytes).unwrap_err();
        assert!(matches!(err, DecodeError::Limit { .. }), "{what}: {err}");
        assert_eq!(err.code(), ErrorCode::DataLoss, "{what}");
        assert!(err.to_string().contains("breaks a rule"), "{what}: {err}");
    }
    let (_, big) = rule_breaking_records().pop().unwrap();
    assert_eq!(big.len(), MAX_DOCUMENT_BYTES + 1);
}

/// Index files are parsed from stored and received text: nesting that would overflow the
/// JSON5 parser's stack is a syntax error, brackets inside strings and comments do not count,
/// and files nested within the bound parse as before.
#[test]
fn index_files_nested_beyond_the_bound_are_refused() {
    let deep = format!("{{\"x\": {}1{}}}", "[".repeat(100_000), "]".repeat(100_000));
    let err = parse_index_file(&deep).unwrap_err();
    assert!(
        matches!(&err, IndexFileError::Syntax { message, line: 1, .. } if message.contains("128 levels")),
        "{err}"
    );
    let within = format!("{{\"x\": {}1{}}}", "[".repeat(127), "]".repeat(127));
    assert!(parse_index_file(&within).is_ok());
    let quoted = format!(
        "{{\"x\": \"{0}\", 'y': '\\'{0}', // {0}\n /* {0} */ \"indexes\": []}}",
        "[".repeat(200)
    );
    assert!(
        parse_index_file(&quoted).is_ok(),
        "{:?}",
        parse_index_file(&quoted)
    );
}

/// How one record is damaged.
#[derive(Clone, Debug)]
enum Damage {
    Flip(Index, u8),
    Truncate(Index),
    Insert(Index, u8),
    Remove(Index),
    Overwrite(Index, u8),
}

fn arb_damage() -> impl Strategy<Value = Damage> {
    let small = prop_oneof![0u8..4, Just(0x80), Just(0xff), any::<u8>()];
    prop_oneof![
        (any::<Index>(), 0u8..8).prop_map(|(i, b)| Damage::Flip(i, b)),
        any::<Index>().prop_map(Damage::Truncate),
        (any::<Index>(), small.clone()).prop_map(|(i, b)| Damage::Insert(i, b)),
        any::<Index>().prop_map(Damage::Remove),
        (any::<Index>(), small).prop_map(|(i, b)| Damage::Overwrite(i, b)),
    ]
}

fn damage(bytes: &mut Vec<u8>, d: &Damage) {
    let len = bytes.len();
    if len == 0 {
        return;
    }
    match d {
        Damage::Flip(i, bit) => bytes[i.index(len)] ^= 1 << bit,
        Damage::Truncate(i) => bytes.truncate(i.index(len)),
        Damage::Insert(i, b) => bytes.insert(i.index(len + 1), *b),
        Damage::Remove(i) => {
            bytes.remove(i.index(len));
        }
        Damage::Overwrite(i, b) => bytes[i.index(len)] = *b,
    }
}

/// Decodes a record; neither the decoder nor index maintenance of what it returns may panic.
/// An accepted record is the canonical encoding of a valid document; a refused one is
/// `data-loss`.
fn check_record(bytes: &[u8]) -> Result<(), TestCaseError> {
    match decode_document(bytes) {
        Ok(doc) => {
            prop_assert!(bytes.len() <= MAX_DOCUMENT_BYTES);
            prop_assert_eq!(validate_fields(&doc.fields), Ok(()));
            prop_assert_eq!(encode_document(&doc), Ok(bytes.to_vec()));
            let catalog = IndexCatalog::new();
            prop_assert!(!document_entries(&catalog, &doc).is_empty());
        }
        Err(e) => prop_assert_eq!(e.code(), ErrorCode::DataLoss),
    }
    Ok(())
}

/// Records: random bytes, valid ones, valid ones that break one rule of documents, and
/// random bytes behind a valid header.
fn arb_record() -> impl Strategy<Value = Vec<u8>> {
    let rule_breaking = rule_breaking_records()
        .into_iter()
        .map(|(_, b)| b)
        .filter(|b| b.len() < 4096)
        .collect::<Vec<_>>();
    prop_oneof![
        vec(any::<u8>(), 0..64),
        arb_document().prop_map(|d| encode_document(&d).unwrap()),
        proptest::sample::select(rule_breaking),
        vec(prop_oneof![0u8..4, any::<u8>()], 0..48).prop_map(|rest| {
            let mut bytes = vec![FORMAT_VERSION, 2, 1, b'c', 1, b'd', 0, 0];
            bytes.extend(rest);
            bytes
        }),
    ]
}

/// The key of `entry` under `def`, written the way index maintenance writes it.
fn entry_key(def: &IndexDef, entry: &DecodedEntry) -> Vec<u8> {
    let mut key = index_prefix(def, &entry.name.parent());
    let mut kinds = Vec::new();
    for ((_, mode), v) in def.fields().iter().zip(&entry.values) {
        write_value(v, field_direction(*mode), &mut key, &mut kinds);
    }
    write_entry_name(def, &entry.name, &mut key);
    write_kinds(&kinds, &mut key);
    key
}

/// Index definitions over the strategies' field names, in both scopes and all modes.
fn defs() -> Vec<IndexDef> {
    let f = |p: &str| FieldPath::parse(p).unwrap();
    vec![
        IndexDef::new(
            "users",
            QueryScope::Collection,
            vec![(f("a"), FieldMode::Ascending)],
        ),
        IndexDef::new(
            "items",
            QueryScope::Collection,
            vec![(f("b"), FieldMode::ArrayContains)],
        ),
        IndexDef::new(
            "users",
            QueryScope::CollectionGroup,
            vec![
                (f("c"), FieldMode::Descending),
                (f("a"), FieldMode::Ascending),
            ],
        ),
        IndexDef::new(
            "items",
            QueryScope::CollectionGroup,
            vec![
                (f("a"), FieldMode::Descending),
                (FieldPath::document_id(), FieldMode::Ascending),
            ],
        ),
    ]
}

proptest! {
    #![proptest_config(config(512))]

    /// Corrupt document records never panic the decoder or index maintenance, and whatever
    /// decodes is the canonical encoding of a document that keeps every rule.
    #[test]
    fn corrupt_records_decode_to_valid_documents_or_data_loss(
        record in arb_record(),
        damages in vec(arb_damage(), 0..3),
    ) {
        let mut bytes = record;
        check_record(&bytes)?;
        for d in &damages {
            damage(&mut bytes, d);
            check_record(&bytes)?;
        }
    }

    /// Damaged index entries, document keys and key values never panic their decoders, and
    /// whatever decodes re-encodes to the same bytes.
    #[test]
    fn corrupt_keys_decode_canonically_or_not_at_all(
        doc in arb_document(),
        v in arb_value(),
        desc in any::<bool>(),
        damages in vec(arb_damage(), 1..3),
    ) {
        for def in defs() {
            for mut key in index_entries(&def, &doc) {
                for d in &damages {
                    damage(&mut key, d);
                    match decode_entry(&def, &key) {
                        Ok(entry) => prop_assert_eq!(entry_key(&def, &entry), key.clone()),
                        Err(e) => prop_assert_eq!(e.code(), ErrorCode::DataLoss),
                    }
                }
            }
        }
        let mut key = document_key(&doc.name);
        for d in &damages {
            damage(&mut key, d);
            if let Ok(name) = decode_document_key(&key) {
                prop_assert_eq!(document_key(&name), key.clone());
            }
        }
        let dir = if desc { Direction::Descending } else { Direction::Ascending };
        let mut bytes = encode_key_value(&v, dir);
        for d in &damages {
            damage(&mut bytes, d);
            if let Ok(back) = decode_key_value(&bytes, dir) {
                prop_assert_eq!(encode_key_value(&back, dir), bytes.clone());
            }
        }
    }
}

/// Keys the encoder never writes, each with one non-canonical part, are refused.
#[test]
fn non_canonical_key_values_are_refused() {
    let number = |bits: u64, rest: u16| {
        // The order-preserving form of a double: sign bit set on positives, all bits
        // inverted on negatives.
        let o = if bits >> 63 == 1 {
            !bits
        } else {
            bits | (1 << 63)
        };
        let mut b = vec![0x31];
        b.extend(o.to_be_bytes());
        b.extend(rest.to_be_bytes());
        b
    };
    assert!(decode_key_value(&number(1.0f64.to_bits(), 0), Direction::Ascending).is_ok());
    for bad in [
        number(f64::NAN.to_bits(), 0),
        number((-0.0f64).to_bits(), 0),
        // 6 split as 1.0 + 5: the encoder writes 6.0 + 0.
        number(1.0f64.to_bits(), 5),
    ] {
        assert!(
            decode_key_value(&bad, Direction::Ascending).is_err(),
            "{bad:?}"
        );
    }
    // A timestamp with nanoseconds below a microsecond.
    let mut ts = vec![0x40];
    ts.extend((1u64 << 63).to_be_bytes());
    ts.extend(1u32.to_be_bytes());
    assert!(decode_key_value(&ts, Direction::Ascending).is_err());
    // Map keys out of order, and twice.
    for keys in [["b", "a"], ["a", "a"]] {
        let mut m = vec![0xA0];
        for k in keys {
            m.extend([0x01, k.as_bytes()[0], 0x00, 0x01, 0x10]);
        }
        m.push(0x00);
        let err = decode_key_value(&m, Direction::Ascending).unwrap_err();
        assert_eq!(err.code(), ErrorCode::DataLoss);
    }
    let sorted = [
        0xA0, 0x01, b'a', 0x00, 0x01, 0x10, 0x01, b'b', 0x00, 0x01, 0x10, 0x00,
    ];
    assert!(decode_key_value(&sorted, Direction::Ascending).is_ok());
}
