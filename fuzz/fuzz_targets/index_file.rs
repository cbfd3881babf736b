//! The firestore.indexes.json parser: no panic, and what parses prints back to an equal file.
//! The body is `hearth_core::fuzzing::index_file`, which `tests/fuzz_corpus.rs` replays on stable.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hearth_core::fuzzing::index_file(data));
