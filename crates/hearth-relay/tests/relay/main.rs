//! Integration tests of `hearth-relay`: the real binary, driven through the native client
//! (`hearth-client`) and raw WebSockets, in one test crate.

// Test helpers unwrap: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod changelog;
mod crash;
mod flood;
mod harness;
mod hostile_fanout;
mod hostile_queries;
mod hostile_writes;
mod index_builds;
mod limits;
mod listens;
mod listens_edges;
mod listens_resume;
mod model;
mod ops;
mod pg;
mod pg_faults;
mod queries;
mod robustness;
mod rules;
mod rules_disclosure;
mod rules_listens;
mod scale_out;
mod scale_out_indexes;
mod shards;
mod store_faults;
mod writes;
