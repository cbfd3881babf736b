//! A query read from the protocol's query encoding, validated, planned and run over a small store: no panic, bounded reads, results that match in order.
//! The body is `hearth_core::fuzzing::query`, which `tests/fuzz_corpus.rs` replays on stable.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hearth_core::fuzzing::query(data));
