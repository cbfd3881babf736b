//! The protocol decoders (client and server frames, queries, mutations): no panic, and what decodes re-encodes to the same bytes.
//! The body is `hearth_core::fuzzing::protocol`, which `tests/fuzz_corpus.rs` replays on stable.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hearth_core::fuzzing::protocol(data));
