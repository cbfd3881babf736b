//! `hearth-core`: Hearth's platform-independent engine: values, paths, encodings, indexes,
//! queries, live views, mutations and the wire protocol. The WebAssembly client (`hearth`)
//! and the relay (`hearth-relay`) are glue around it.
//!
//! Architecture invariant: nothing in the core does I/O, awaits a runtime, or knows about
//! wasm-bindgen, js-sys, web-sys, tokio, files or sockets. Storage is reached only through
//! the ordered key-value traits in [`kv`]. The manifest enforces it (no such crate is a
//! dependency, so none can be named), and `tests/it/tidy.rs` checks the rest: the
//! dependency closure, and the standard library's I/O kept out of the code.

pub mod autoid;
pub mod document;
pub mod encoding;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
pub mod index;
pub mod kv;
pub mod mutation;
pub mod path;
pub mod protocol;
pub mod query;
pub mod sort;
pub mod value;
