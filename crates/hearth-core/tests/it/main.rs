//! Integration tests of the core, in one test crate.

// Test helpers unwrap: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod corrupt;
mod cost;
mod doc_encoding;
mod index_config;
mod index_maintenance;
mod key_encoding;
mod mutations;
mod plans;
mod protocol;
mod protocol_codec;
mod query_model;
mod seed_catalogs;
mod seed_instruments;
mod strategies;
mod tidy;
mod views;
