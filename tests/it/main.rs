//! Integration tests of the core, in one test crate.

mod doc_encoding;
mod index_config;
mod mutations;
mod seed_instruments;
mod strategies;
