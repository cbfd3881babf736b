//! Security rules: the parser on any text, and whatever parses evaluated for every method
//! and three queries. The body is `hearth_rules::fuzzing::rules`, which
//! `crates/hearth-rules/tests/fuzz_corpus.rs` replays on stable.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hearth_rules::fuzzing::rules(data));
