//! The portable core: values, paths, encodings, indexes, queries and mutations.
//!
//! Architecture invariant: nothing under `core` does I/O, awaits a runtime, or knows about
//! wasm-bindgen, js-sys, web-sys, tokio, files or sockets. Storage is reached only through
//! the ordered key-value traits in [`kv`]. `tests/tidy.rs` enforces this.

pub mod autoid;
pub mod document;
pub mod encoding;
pub mod index;
pub mod kv;
pub mod mutation;
pub mod path;
pub mod protocol;
pub mod query;
pub mod value;
