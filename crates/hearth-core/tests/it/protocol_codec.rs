//! The wire codec's properties through its public API, over the shared strategies: every
//! message, query and mutation round trips (and re-encodes to the same bytes), and no
//! truncation, bit flip, trailing byte or random frame panics a decoder or gets a frame
//! accepted that is not the canonical encoding of what was decoded. The codec's unit tests
//! (`src/protocol/codec/tests.rs`) hold the worked examples and each refusal.

use hearth_core::protocol::codec::{
    decode_client, decode_mutation, decode_query, decode_server, decode_server_frame,
    encode_bundle, encode_client, encode_mutation, encode_query, encode_server, ProtocolError,
};
use hearth_core::protocol::ServerMessage;
use proptest::collection::vec;
use proptest::prelude::*;

use crate::strategies::{arb_client_message, arb_mutation, arb_query, arb_server_message};

/// Several relay messages in one `Bundle` frame.
fn bundle(messages: &[ServerMessage]) -> Vec<u8> {
    let parts: Vec<Vec<u8>> = messages.iter().map(encode_server).collect();
    encode_bundle(&parts)
}

/// A valid frame of either direction (a relay's may be a bundle), for the robustness
/// properties.
fn arb_frame() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        arb_client_message().prop_map(|m| encode_client(&m)),
        arb_server_message().prop_map(|m| encode_server(&m)),
        vec(arb_server_message(), 1..4).prop_map(|ms| bundle(&ms)),
    ]
}

/// Decodes with both decoders; neither may panic. Returns whether either accepted.
fn decode_any(b: &[u8]) -> bool {
    let client = decode_client(b);
    let server = decode_server(b);
    if let Ok(m) = &client {
        assert_eq!(encode_client(m), b, "accepted bytes re-encode identically");
    }
    if let Ok(m) = &server {
        if !matches!(m, ServerMessage::Welcome { .. }) {
            assert_eq!(encode_server(m), b, "accepted bytes re-encode identically");
        }
    }
    let frame = decode_server_frame(b);
    if let Ok(ms) = &frame {
        if !ms
            .iter()
            .any(|m| matches!(m, ServerMessage::Welcome { .. }))
        {
            let again = match b[0] {
                0x8b => bundle(ms),
                _ => encode_server(&ms[0]),
            };
            assert_eq!(again, b, "an accepted relay frame re-encodes identically");
        }
    }
    client.is_ok() || server.is_ok() || frame.is_ok()
}

proptest! {
    #[test]
    fn client_messages_round_trip(m in arb_client_message()) {
        let bytes = encode_client(&m);
        prop_assert_eq!(decode_client(&bytes), Ok(m));
        prop_assert!(decode_server(&bytes).is_err());
    }

    #[test]
    fn server_messages_round_trip(m in arb_server_message()) {
        let bytes = encode_server(&m);
        let back = decode_server(&bytes);
        prop_assert_eq!(back.as_ref(), Ok(&m));
        prop_assert_eq!(encode_server(&back.unwrap()), bytes.clone());
        prop_assert!(decode_client(&bytes).is_err());
    }

    #[test]
    fn bundles_round_trip(ms in vec(arb_server_message(), 1..5)) {
        let bytes = bundle(&ms);
        prop_assert_eq!(decode_server_frame(&bytes), Ok(ms));
        prop_assert_eq!(decode_server(&bytes), Err(ProtocolError::UnexpectedBundle));
    }

    #[test]
    fn queries_and_mutations_round_trip(q in arb_query(), m in arb_mutation()) {
        let mut bytes = Vec::new();
        encode_query(&q, &mut bytes);
        prop_assert_eq!(decode_query(&bytes), Ok(q));
        let mut bytes = Vec::new();
        encode_mutation(&m, &mut bytes);
        prop_assert_eq!(decode_mutation(&bytes), Ok(m));
    }

    #[test]
    fn random_bytes_never_panic(
        ty in prop_oneof![Just(None), (0x01u8..=0x09).prop_map(Some), (0x81u8..=0x8b).prop_map(Some)],
        body in vec(any::<u8>(), 0..64),
    ) {
        let mut bytes: Vec<u8> = ty.into_iter().collect();
        bytes.extend(body);
        decode_any(&bytes);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_truncation_is_refused(frame in arb_frame()) {
        for end in 0..frame.len() {
            prop_assert!(!decode_any(&frame[..end]), "prefix of {} bytes accepted", end);
        }
    }

    #[test]
    fn bit_flips_never_panic(frame in arb_frame()) {
        let mut bytes = frame.clone();
        for i in 0..bytes.len() * 8 {
            bytes[i / 8] ^= 1 << (i % 8);
            decode_any(&bytes);
            bytes[i / 8] ^= 1 << (i % 8);
        }
    }

    #[test]
    fn trailing_bytes_are_refused(frame in arb_frame(), extra in vec(any::<u8>(), 1..4)) {
        let len = frame.len();
        let mut bytes = frame;
        bytes.extend(&extra);
        let count = extra.len();
        let expect = ProtocolError::TrailingBytes { offset: len, count };
        match bytes[0] {
            0x01..=0x7f => prop_assert_eq!(decode_client(&bytes), Err(expect)),
            0x8b => prop_assert_eq!(decode_server_frame(&bytes), Err(expect)),
            _ => prop_assert_eq!(decode_server(&bytes), Err(expect)),
        }
    }
}
