//! The IndexedDB store's browser suite in a dedicated worker, where there is no `window`.
#![cfg(target_arch = "wasm32")]

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_dedicated_worker);

/// Whether the write/scan benchmark runs (in the window only: it takes seconds).
const FULL_BENCH: bool = false;

include!("idb_store_suite.rs");
