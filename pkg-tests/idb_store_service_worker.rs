//! The IndexedDB store's browser suite in a service worker.
#![cfg(target_arch = "wasm32")]
// Tests unwrap: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_service_worker);

#[path = "idb_store_suite.rs"]
mod suite;
