//! Browser tests of the IndexedDB store (`client::idb_store`) in a window: round trips,
//! scans checked against `MemStore`, atomic batches, reopen, delete, blocked upgrades, the
//! schema-1 upgrade, and a write/scan benchmark whose figures are printed.
#![cfg(target_arch = "wasm32")]

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

/// Whether the write/scan benchmark runs (in the window only: it takes seconds).
const FULL_BENCH: bool = true;

include!("idb_store_suite.rs");
