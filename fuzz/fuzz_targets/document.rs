//! The document decoders (documents, values, field maps) and the key decoders: no panic, and what decodes re-encodes to the same bytes.
//! The body is `hearth_core::fuzzing::document`, which `tests/fuzz_corpus.rs` replays on stable.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hearth_core::fuzzing::document(data));
