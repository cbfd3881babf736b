//! The IndexedDB store's browser suite in a service worker.
#![cfg(target_arch = "wasm32")]

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_service_worker);

include!("idb_store_suite.rs");
