//! The settle message contexts of one origin exchange (`client::tabs`): every code and an
//! acknowledgement round-trip, and what an earlier build or a damaged message sends is never
//! read as an acknowledgement.

use super::*;
use hearth::client::tabs::{decode_settled, encode_settled};
use hearth_core::error::ErrorCode;

#[wasm_bindgen_test]
fn acknowledgements_and_every_refusal_round_trip() {
    assert_eq!(
        decode_settled(&encode_settled(7, &Ok(42))),
        Some((7, Ok(42)))
    );
    for code in ErrorCode::ALL {
        let sent = ClientError::new(code, format!("refused with {code}"));
        let got = decode_settled(&encode_settled(9, &Err(sent.clone())));
        assert_eq!(got, Some((9, Err(sent))), "{code}");
    }
}

#[wasm_bindgen_test]
fn a_refusal_from_an_earlier_build_stays_a_refusal() {
    // Earlier builds sent the code's text only.
    let old =
        js("return { settled: 5, code: 'not-found', message: 'document c/x does not exist' };");
    let (id, result) = decode_settled(&old).unwrap();
    assert_eq!(id, 5);
    let err = result.unwrap_err();
    assert_eq!(err.code(), ErrorCode::Internal);
    assert!(err.message.contains("not-found"), "{err}");
    assert!(err.message.contains("document c/x does not exist"), "{err}");
}

#[wasm_bindgen_test]
fn unknown_tags_are_internal_errors_never_acknowledgements() {
    for tag in ["99", "-1", "1.5", "256"] {
        let data = js(&format!(
            "return {{ settled: 3, tag: {tag}, code: 'x', message: 'm' }};"
        ));
        let (_, result) = decode_settled(&data).unwrap();
        let err = result.unwrap_err();
        assert_eq!(err.code(), ErrorCode::Internal, "tag {tag}");
        assert!(
            err.message.contains("unknown error code"),
            "tag {tag}: {err}"
        );
    }
}

#[wasm_bindgen_test]
fn other_messages_are_not_settle_messages() {
    // The change notices the contexts also exchange: a list of document names.
    assert_eq!(decode_settled(&js("return ['c/x', 'c/y'];")), None);
    assert_eq!(decode_settled(&js("return { version: 3 };")), None);
}
