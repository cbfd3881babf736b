//! The IndexedDB store's browser suite in a dedicated worker, where there is no `window`.
#![cfg(target_arch = "wasm32")]

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_dedicated_worker);

include!("idb_store_suite.rs");
