//! Unit tests of the document encoding: the layouts of the module doc byte for byte, and
//! each way the decoder refuses bytes it would not have written. The properties over random
//! documents run from `tests/it/doc_encoding.rs` and `tests/it/corrupt.rs`.

use super::decode::Reader;
use super::encode::{put_bytes, put_f64};
use super::*;
use crate::document::{Document, DocumentError};
use crate::encoding::varint::{len as varint_len, put as put_varint, unzigzag, zigzag};
use crate::path::DocumentName;
use crate::value::{GeoPoint, Map, Timestamp, Value};

fn enc(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    encode_value(v, &mut out);
    out
}

fn map(entries: &[(&str, Value)]) -> Map {
    entries
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

#[test]
fn document_layout_matches_the_module_doc() {
    let mut doc = Document::new(
        DocumentName::parse("rooms/r1").unwrap(),
        map(&[("n", Value::Integer(-1)), ("t", Value::from("hi"))]),
    );
    doc.create_version = 5;
    doc.update_version = 7;
    let bytes = encode_document(&doc).unwrap();
    let mut expect = vec![0x01, 0x02, 0x05];
    expect.extend_from_slice(b"rooms");
    expect.extend_from_slice(&[0x02, b'r', b'1', 0x05, 0x07, 0x02, 0x01, b'n', 0x03, 0x01]);
    expect.extend_from_slice(&[0x01, b't', 0x06, 0x02, b'h', b'i']);
    assert_eq!(bytes, expect);
    assert_eq!(decode_document(&bytes).unwrap(), doc);
}

#[test]
fn scalar_layouts() {
    assert_eq!(enc(&Value::Null), [0x00]);
    assert_eq!(enc(&Value::Boolean(false)), [0x01]);
    assert_eq!(enc(&Value::Boolean(true)), [0x02]);
    assert_eq!(enc(&Value::Integer(0)), [0x03, 0x00]);
    assert_eq!(enc(&Value::Integer(1)), [0x03, 0x02]);
    assert_eq!(enc(&Value::Integer(-64)), [0x03, 0x7f]);
    assert_eq!(enc(&Value::Integer(64)), [0x03, 0x80, 0x01]);
    let min = enc(&Value::Integer(i64::MIN));
    assert_eq!(
        min,
        [0x03, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
    );
    assert_eq!(enc(&Value::Double(-0.0)), [0x04, 0, 0, 0, 0, 0, 0, 0, 0x80]);
    let t = Timestamp::new(-1, 5_000).unwrap();
    assert_eq!(enc(&Value::Timestamp(t)), [0x05, 0x01, 0x88, 0x27]);
    assert_eq!(enc(&Value::Bytes(vec![9, 8])), [0x07, 0x02, 9, 8]);
    let a = Value::Array(vec![Value::Null, Value::Map(Map::new())]);
    assert_eq!(enc(&a), [0x0a, 0x02, 0x00, 0x0b, 0x00]);
}

#[test]
fn varints_round_trip_at_group_boundaries() {
    for shift in 0..64 {
        for v in [
            1u64 << shift,
            (1u64 << shift) - 1,
            (1u64 << shift) + 1,
            u64::MAX,
        ] {
            let mut out = Vec::new();
            put_varint(v, &mut out);
            assert_eq!(out.len(), varint_len(v), "{v}");
            let mut r = Reader {
                bytes: &out,
                pos: 0,
            };
            assert_eq!(r.varint(), Ok(v));
            assert_eq!(r.pos, out.len());
        }
    }
    for i in [0, 1, -1, i64::MIN, i64::MAX, 1 << 53, -(1 << 53) - 1] {
        assert_eq!(unzigzag(zigzag(i)), i);
    }
}

#[test]
fn non_canonical_varints_are_refused() {
    // 0 written in two bytes, and an eleven-byte / overflowing tenth byte.
    for bytes in [
        &[0x03, 0x80, 0x00][..],
        &[
            0x03, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02,
        ],
        &[
            0x03, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x81, 0x00,
        ],
    ] {
        assert_eq!(
            decode_value(bytes),
            Err(DecodeError::BadVarint { offset: 1 }),
            "{bytes:?}"
        );
    }
}

#[test]
fn special_doubles_keep_their_bits() {
    for d in [
        f64::NAN,
        -f64::NAN,
        -0.0,
        0.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MIN_POSITIVE,
    ] {
        let bytes = enc(&Value::Double(d));
        let (v, n) = decode_value(&bytes).unwrap();
        assert_eq!(n, 9);
        match v {
            Value::Double(back) => assert_eq!(back.to_bits(), d.to_bits()),
            other => panic!("decoded {other:?}"),
        }
    }
}

#[test]
fn malformed_inputs_name_what_is_wrong() {
    assert_eq!(decode_value(&[]), Err(DecodeError::Truncated { offset: 0 }));
    assert_eq!(
        decode_value(&[0x0c]),
        Err(DecodeError::UnknownTag {
            tag: 0x0c,
            offset: 0
        })
    );
    assert_eq!(
        decode_value(&[0x06, 0x02, 0xc3, 0x28]),
        Err(DecodeError::BadUtf8 { offset: 2 })
    );
    // A string claiming five bytes with two left.
    assert_eq!(
        decode_value(&[0x06, 0x05, b'a', b'b']),
        Err(DecodeError::LengthTooLarge {
            offset: 1,
            len: 5,
            remaining: 2
        })
    );
    assert_eq!(
        decode_value(&[0x04, 0, 0, 0]),
        Err(DecodeError::Truncated { offset: 1 })
    );
    // Keys out of order, and a duplicate key.
    let unsorted = [0x0b, 0x02, 0x01, b'b', 0x00, 0x01, b'a', 0x00];
    assert_eq!(
        decode_value(&unsorted),
        Err(DecodeError::UnsortedKeys { offset: 5 })
    );
    let duplicate = [0x0b, 0x02, 0x01, b'a', 0x00, 0x01, b'a', 0x00];
    assert_eq!(
        decode_value(&duplicate),
        Err(DecodeError::UnsortedKeys { offset: 5 })
    );
    let err = decode_value(&[0x06, 0x05]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "length 5 at offset 1 is larger than the 0 bytes remaining"
    );
}

#[test]
fn huge_counts_are_refused_before_allocating() {
    // Counts near u64::MAX and usize::MAX must fail on the length check, not in the
    // allocator.
    for t in [
        tag::STRING,
        tag::BYTES,
        tag::ARRAY,
        tag::MAP,
        tag::REFERENCE,
    ] {
        let mut bytes = vec![t];
        put_varint(u64::MAX, &mut bytes);
        bytes.extend_from_slice(&[0; 16]);
        assert!(
            matches!(
                decode_value(&bytes),
                Err(DecodeError::LengthTooLarge { .. })
            ),
            "tag {t}"
        );
    }
    // A map of n entries needs at least 2n bytes.
    assert!(matches!(
        decode_value(&[0x0b, 0x02, 0x00, 0x00]),
        Err(DecodeError::LengthTooLarge { len: 2, .. })
    ));
}

#[test]
fn nesting_is_bounded_without_recursing_further() {
    let nested = |levels: usize| {
        let mut bytes = Vec::new();
        for _ in 0..levels {
            bytes.extend_from_slice(&[tag::ARRAY, 0x01]);
        }
        bytes.push(tag::NULL);
        bytes
    };
    let (v, n) = decode_value(&nested(MAX_DECODE_DEPTH)).unwrap();
    assert_eq!(n, 2 * MAX_DECODE_DEPTH + 1);
    assert_eq!(enc(&v), nested(MAX_DECODE_DEPTH));
    assert_eq!(
        decode_value(&nested(MAX_DECODE_DEPTH + 1)),
        Err(DecodeError::TooDeep {
            offset: 2 * MAX_DECODE_DEPTH
        })
    );
    // Far deeper than any stack would allow if the decoder followed it.
    let deep = [tag::MAP, 0x01, 0x01, b'k'].repeat(1_000_000);
    assert!(matches!(
        decode_value(&deep),
        Err(DecodeError::TooDeep { .. })
    ));
}

#[test]
fn timestamps_and_geopoints_are_checked() {
    let mut ts = vec![tag::TIMESTAMP];
    put_varint(zigzag(0), &mut ts);
    put_varint(1, &mut ts);
    assert!(matches!(
        decode_value(&ts),
        Err(DecodeError::InvalidTimestamp { nanos: 1, .. })
    ));
    let mut ts = vec![tag::TIMESTAMP];
    put_varint(zigzag(crate::value::MAX_TIMESTAMP_SECONDS + 1), &mut ts);
    put_varint(0, &mut ts);
    assert!(matches!(
        decode_value(&ts),
        Err(DecodeError::InvalidTimestamp { .. })
    ));
    for (lat, lng) in [(-0.0, 1.0), (1.0, -0.0), (90.5, 0.0), (0.0, f64::NAN)] {
        let mut g = vec![tag::GEOPOINT];
        put_f64(lat, &mut g);
        put_f64(lng, &mut g);
        assert!(
            matches!(decode_value(&g), Err(DecodeError::InvalidGeoPoint { .. })),
            "{lat} {lng}"
        );
    }
    let g = Value::GeoPoint(GeoPoint::new(-90.0, 180.0).unwrap());
    assert_eq!(decode_value(&enc(&g)).unwrap().0, g);
}

#[test]
fn references_are_validated() {
    let name = DocumentName::parse("a/b/c/d").unwrap();
    let r = Value::Reference(name);
    assert_eq!(decode_value(&enc(&r)).unwrap(), (r.clone(), 10));
    // Odd segment count, a segment with a slash, a reserved id, no segments.
    for segs in [&["a"][..], &["a", "b/c"], &["a", "__x__"], &[]] {
        let mut bytes = vec![tag::REFERENCE];
        put_varint(segs.len() as u64, &mut bytes);
        for s in segs {
            put_bytes(s.as_bytes(), &mut bytes);
        }
        assert!(
            matches!(
                decode_value(&bytes),
                Err(DecodeError::InvalidName { offset: 1, .. })
            ),
            "{segs:?}"
        );
    }
}

#[test]
fn documents_check_version_and_trailing_bytes() {
    let doc = Document::new(DocumentName::parse("c/d").unwrap(), Map::new());
    let mut bytes = encode_document(&doc).unwrap();
    assert_eq!(decode_document(&bytes).unwrap(), doc);
    bytes.push(0);
    assert_eq!(
        decode_document(&bytes),
        Err(DecodeError::TrailingBytes {
            offset: bytes.len() - 1,
            count: 1
        })
    );
    bytes[0] = 2;
    let err = decode_document(&bytes).unwrap_err();
    assert_eq!(err, DecodeError::UnsupportedVersion { found: 2 });
    assert!(err.to_string().contains("version 2"), "{err}");
}

#[test]
fn encode_document_validates_fields() {
    let doc = Document::new(
        DocumentName::parse("c/d").unwrap(),
        map(&[("", Value::Null)]),
    );
    assert!(matches!(
        encode_document(&doc),
        Err(DocumentError::EmptyFieldName { .. })
    ));
}

#[test]
fn encoded_size_counts_every_byte() {
    let fields = map(&[
        ("a", Value::Integer(i64::MAX)),
        ("b", Value::Bytes(vec![0; 300])),
        (
            "c",
            Value::Array(vec![
                Value::Timestamp(Timestamp::new(-62_135_596_800, 999_999_999).unwrap()),
                Value::Reference(DocumentName::parse("x/y").unwrap()),
                Value::GeoPoint(GeoPoint::new(1.0, 2.0).unwrap()),
            ]),
        ),
        ("d", Value::Map(map(&[("e", Value::from("é😀"))]))),
    ]);
    let mut out = Vec::new();
    encode_fields(&fields, &mut out);
    assert_eq!(encoded_size(&fields), out.len());
    assert_eq!(decode_fields(&out).unwrap(), (fields, out.len()));
}
