//! The WebAssembly client: the JavaScript API of DESIGN.md over the core engine, with
//! documents and indexes persisted in IndexedDB and synced with `hearth-relay` over one
//! WebSocket. Compiled only for `wasm32`.
//!
//! ```text
//! JS ──► api (Hearth, references, queries, batches, snapshots) ──► engine
//!          ▲  values: convert ─► types ─► js                         │
//!          └──────── listener callbacks (queued, flushed after) ◄────┤
//!                                                   idb (IndexedDB) ◄┤► sync (WebSocket)
//! ```

// Callback slots and JS closure holders are nested generic types by nature.
#![allow(clippy::type_complexity)]

pub mod api;
pub mod cache;
pub mod convert;
pub mod engine;
pub mod error;
pub mod idb_store;
pub mod js;
pub mod lock;
pub mod origin;
pub mod sync;
pub mod tabs;
pub mod types;
