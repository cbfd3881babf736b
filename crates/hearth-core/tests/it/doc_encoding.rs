//! Properties of the compact document encoding: strict round trips, canonical and
//! panic-free decoding of untrusted bytes, exact size accounting and the 1 MiB limit.

use hearth_core::document::{Document, DocumentError, MAX_DOCUMENT_BYTES};
use hearth_core::encoding::document::{
    decode_document, decode_value, encode_document, encode_fields, encode_value, encoded_size,
    FORMAT_VERSION,
};
use hearth_core::path::DocumentName;
use hearth_core::value::{Map, Value};
use proptest::collection::vec;
use proptest::prelude::*;

use crate::strategies::{arb_doc_name, arb_document, arb_fields, arb_scalar, arb_value};

fn enc(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    encode_value(v, &mut out);
    out
}

/// Decodes untrusted bytes as a value; whatever the decoder accepts must be exactly what the
/// encoder would write for it (the encoding is canonical), so nothing is silently normalized.
fn check_value_bytes(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Ok((v, n)) = decode_value(bytes) {
        prop_assert!(n <= bytes.len());
        prop_assert_eq!(enc(&v), &bytes[..n]);
    }
    Ok(())
}

/// The same for documents. The decoder holds a document to every rule the encoder checks
/// (field names, depth, size), so whatever it accepts re-encodes, to the same bytes.
fn check_document_bytes(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(doc) = decode_document(bytes) {
        prop_assert_eq!(encode_document(&doc), Ok(bytes.to_vec()));
    }
    Ok(())
}

/// Input that gets past the first byte more often than uniform noise: a real tag (or the
/// format version) followed by random bytes, some of them small counts and lengths.
fn arb_noise() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        vec(any::<u8>(), 0..64),
        (0u8..=0x0c, vec(prop_oneof![0u8..4, any::<u8>()], 0..64)).prop_map(|(t, mut rest)| {
            rest.insert(0, t);
            rest
        }),
        vec(prop_oneof![0u8..4, any::<u8>()], 0..64).prop_map(|mut rest| {
            rest.insert(0, FORMAT_VERSION);
            rest
        }),
        // A valid header (version, name `c/d`, versions 0 and 0), so the fields get decoded.
        vec(prop_oneof![0u8..4, any::<u8>()], 0..64).prop_map(|rest| {
            let mut bytes = vec![FORMAT_VERSION, 2, 1, b'c', 1, b'd', 0, 0];
            bytes.extend(rest);
            bytes
        }),
    ]
}

proptest! {
    /// decode(encode(v)) is strictly equal to v (1 stays an integer, -0.0 stays -0.0, NaN
    /// stays NaN) and uses every byte of the encoding.
    #[test]
    fn values_round_trip(v in arb_value()) {
        let bytes = enc(&v);
        prop_assert_eq!(decode_value(&bytes), Ok((v, bytes.len())));
    }

    /// Encodings are self-delimiting: values written back to back decode one after another.
    #[test]
    fn concatenated_scalars_decode_in_sequence(values in vec(arb_scalar(), 0..8)) {
        let mut bytes = Vec::new();
        for v in &values {
            encode_value(v, &mut bytes);
        }
        let mut at = 0;
        for v in &values {
            let (back, n) = decode_value(&bytes[at..]).expect("valid encoding");
            prop_assert_eq!(&back, v);
            at += n;
        }
        prop_assert_eq!(at, bytes.len());
    }

    #[test]
    fn documents_round_trip(doc in arb_document()) {
        let bytes = encode_document(&doc).expect("generated documents are valid");
        prop_assert_eq!(bytes[0], FORMAT_VERSION);
        prop_assert_eq!(decode_document(&bytes), Ok(doc));
    }

    /// encoded_size is what encode_fields writes, so callers can check the limit or reserve
    /// exactly without encoding; the document encoding ends with the fields encoding.
    #[test]
    fn encoded_size_is_the_encoding_length(doc in arb_document(), fields in arb_fields()) {
        let mut out = Vec::new();
        encode_fields(&fields, &mut out);
        prop_assert_eq!(encoded_size(&fields), out.len());
        let mut doc_fields = Vec::new();
        encode_fields(&doc.fields, &mut doc_fields);
        let bytes = encode_document(&doc).expect("generated documents are valid");
        prop_assert!(bytes.ends_with(&doc_fields));
    }

    /// Arbitrary bytes never panic the decoders, and anything accepted is canonical.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in arb_noise()) {
        check_value_bytes(&bytes)?;
        check_document_bytes(&bytes)?;
    }

    /// No strict prefix of a valid encoding decodes: the decoder needs the whole value, and
    /// a document must end exactly where its bytes end.
    #[test]
    fn truncated_encodings_are_refused(doc in arb_document(), v in arb_value()) {
        let bytes = encode_document(&doc).expect("generated documents are valid");
        for cut in 0..bytes.len() {
            prop_assert!(decode_document(&bytes[..cut]).is_err(), "prefix of {} bytes", cut);
        }
        let bytes = enc(&v);
        for cut in 0..bytes.len() {
            prop_assert!(decode_value(&bytes[..cut]).is_err(), "prefix of {} bytes", cut);
        }
    }

    /// A flipped bit gives an error or another canonical encoding, never a panic.
    #[test]
    fn bit_flips_never_panic(
        doc in arb_document(),
        v in arb_value(),
        at in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        let mut bytes = encode_document(&doc).expect("generated documents are valid");
        let i = at.index(bytes.len());
        bytes[i] ^= 1 << bit;
        check_document_bytes(&bytes)?;
        let mut bytes = enc(&v);
        let i = at.index(bytes.len());
        bytes[i] ^= 1 << bit;
        check_value_bytes(&bytes)?;
    }

    /// Document names generated for one collection stay in it through the encoding.
    #[test]
    fn names_round_trip(name in arb_doc_name("users"), fields in arb_fields()) {
        let doc = Document::new(name, fields);
        let back = decode_document(&encode_document(&doc).unwrap()).unwrap();
        prop_assert_eq!(back.name.collection_id(), "users");
        prop_assert_eq!(back, doc);
    }
}

/// A document whose single field holds `len` bytes.
fn doc_with_bytes(len: usize) -> Document {
    let mut fields = Map::new();
    fields.insert("b".to_owned(), Value::Bytes(vec![7; len]));
    Document::new(DocumentName::parse("big/doc").unwrap(), fields)
}

/// The limit is on the whole encoded document (version, name, versions and fields):
/// exactly MAX_DOCUMENT_BYTES is accepted, one byte more is refused with an error that
/// states the limit.
#[test]
fn size_limit_is_exactly_one_mebibyte() {
    // With an empty field the length prefix is one byte; near 1 MiB it takes three (LEB128
    // holds 21 bits in three bytes), so the document grows by len + 2.
    let base = encode_document(&doc_with_bytes(0)).unwrap().len();
    let fits = MAX_DOCUMENT_BYTES - base - 2;

    let doc = doc_with_bytes(fits);
    let bytes = encode_document(&doc).unwrap();
    assert_eq!(bytes.len(), MAX_DOCUMENT_BYTES);
    assert_eq!(decode_document(&bytes).unwrap(), doc);

    let err = encode_document(&doc_with_bytes(fits + 1)).unwrap_err();
    assert_eq!(
        err,
        DocumentError::TooLarge {
            size: MAX_DOCUMENT_BYTES + 1
        }
    );
    let msg = err.to_string();
    assert!(msg.contains("1048576") && msg.contains("1 MiB"), "{msg}");
}

/// Strictly different values that compare equal in the query order keep distinct encodings.
#[test]
fn query_equal_values_keep_their_identity() {
    for (a, b) in [
        (Value::Integer(1), Value::Double(1.0)),
        (Value::Double(0.0), Value::Double(-0.0)),
        (Value::Integer(0), Value::Double(-0.0)),
    ] {
        assert!(a.eq_order(&b));
        assert_ne!(enc(&a), enc(&b));
        assert_eq!(decode_value(&enc(&b)).unwrap().0, b);
    }
}
