//! Browser tests of the IndexedDB store (`client::idb_store`) in a window: round trips,
//! scans checked against `MemStore`, atomic batches, reopen, delete, blocked upgrades, the
//! schema-1 upgrade, the memory of documents (`idb_memo.rs`), and a write/scan benchmark whose
//! figures are printed.
#![cfg(target_arch = "wasm32")]
// Tests unwrap: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

#[path = "idb_store_suite.rs"]
mod suite;

#[path = "idb_memo.rs"]
mod memo;

use hearth::client::idb_store::{IdbStore, ScanMethod, WriteOp, SCHEMA_VERSION};
use hearth_core::kv::{KeyRange, KvRead, Table};
use js_sys::Reflect;
use suite::{fresh, now_ms, raw_done, raw_open, Rng};
use wasm_bindgen::JsValue;
use wasm_bindgen_test::{console_log, wasm_bindgen_test};

// The write/scan benchmark runs in the window only (it takes seconds).

use std::collections::BTreeMap;

/// One realistic document (~300 bytes encoded) and its ~10 automatic index entries.
fn bench_document(i: usize, rng: &mut Rng) -> (Vec<u8>, Vec<u8>, Vec<Vec<u8>>) {
    use hearth_core::document::Document;
    use hearth_core::encoding::document::encode_document;
    use hearth_core::index::def::IndexCatalog;
    use hearth_core::index::keys::{document_entries, document_key};
    use hearth_core::path::DocumentName;
    use hearth_core::value::{Map, Value};

    let name = DocumentName::parse(&format!("instruments/{:020}", rng.next())).unwrap();
    let mut fields = Map::new();
    let mut number = |f: &str, n: f64| {
        fields.insert(f.into(), Value::Double(n));
    };
    number("price", rng.below(1_000_000) as f64 / 100.0);
    number("open", rng.below(1_000_000) as f64 / 100.0);
    number("close", rng.below(1_000_000) as f64 / 100.0);
    number("volume", rng.below(1 << 30) as f64);
    fields.insert("symbol".into(), Value::String(format!("S{:04}", i % 5000)));
    fields.insert("exchange".into(), Value::String(format!("EXCHG{}", i % 7)));
    fields.insert("shard".into(), Value::Integer((i % 10) as i64));
    fields.insert(
        "timestamp".into(),
        Value::Integer(1_700_000_000_000 + i as i64),
    );
    fields.insert(
        "note".into(),
        Value::String("x".repeat(100 + rng.below(40) as usize)),
    );
    let doc = Document::new(name, fields);
    let entries = document_entries(&IndexCatalog::new(), &doc)
        .into_iter()
        .collect();
    (
        document_key(&doc.name),
        encode_document(&doc).unwrap(),
        entries,
    )
}

/// Writes 10,000 documents with their index entries in batches of 500, then times 5-row
/// scans with each method. Prints the figures.
#[wasm_bindgen_test]
async fn bench_writes_and_short_scans() {
    let mut rng = Rng(42);
    let docs: Vec<_> = (0..10_000).map(|i| bench_document(i, &mut rng)).collect();
    let doc_bytes: usize = docs.iter().map(|d| d.1.len()).sum();
    let entries: usize = docs.iter().map(|d| d.2.len()).sum();
    console_log!(
        "bench: {} documents, {:.0} bytes encoded on average, {} index entries ({:.1} per document)",
        docs.len(),
        doc_bytes as f64 / docs.len() as f64,
        entries,
        entries as f64 / docs.len() as f64
    );

    let s = fresh("t-bench").await;
    let started = now_ms();
    let mut first_2000 = 0.0;
    for (i, chunk) in docs.chunks(500).enumerate() {
        let mut ops = Vec::new();
        for (key, value, index) in chunk {
            ops.push(WriteOp::PutDocument {
                key: key.clone(),
                value: value.clone(),
                index_keys: index.clone(),
                used: 0.0,
            });
        }
        s.write(ops).await.unwrap();
        if i == 3 {
            first_2000 = now_ms() - started;
        }
    }
    let took = now_ms() - started;
    console_log!(
        "bench: write 10,000 documents + {} index entries in batches of 500: {:.0} ms ({:.0} documents/s, {:.0} puts/s)",
        entries,
        took,
        10_000.0 / took * 1000.0,
        (10_000 + entries) as f64 / took * 1000.0
    );
    s.close();

    // The first 2,000 documents again through raw IndexedDB calls (same batches, default
    // durability): the floor for this store; the ratio is from this run.
    IdbStore::delete("t-bench-raw").await.unwrap();
    IdbStore::open("t-bench-raw").await.unwrap().close();
    let db = raw_open("hearth:t-bench-raw", SCHEMA_VERSION).await;
    let started = now_ms();
    for chunk in docs[..2000].chunks(500) {
        let tx = db
            .transaction_with_str_and_mode("documents", web_sys::IdbTransactionMode::Readwrite)
            .unwrap();
        let documents = tx.object_store("documents").unwrap();
        for (key, value, entries) in chunk {
            // The same record shape, one buffer per byte string.
            let record = js_sys::Object::new();
            let keys: js_sys::Array = entries
                .iter()
                .map(|e| JsValue::from(js_sys::Uint8Array::from(&e[..])))
                .collect();
            Reflect::set(&record, &"d".into(), &js_sys::Uint8Array::from(&value[..])).unwrap();
            Reflect::set(&record, &"k".into(), &keys).unwrap();
            Reflect::set(&record, &"t".into(), &JsValue::from(0)).unwrap();
            documents
                .put_with_key(&record, &js_sys::Uint8Array::from(&key[..]))
                .unwrap();
        }
        raw_done(&tx).await;
    }
    let raw = now_ms() - started;
    console_log!(
        "bench: first 2,000 documents: IdbStore::write {:.0} ms, raw IndexedDB calls {:.0} ms (ratio {:.2})",
        first_2000,
        raw,
        first_2000 / raw
    );
    db.close();
    IdbStore::delete("t-bench-raw").await.unwrap();

    let s = IdbStore::open("t-bench").await.unwrap();
    let started = now_ms();
    let total = s.estimate_bytes().await.unwrap();
    console_log!(
        "bench: estimate_bytes = {} bytes in {:.0} ms",
        total,
        now_ms() - started
    );

    let mut keys: Vec<&Vec<u8>> = docs.iter().flat_map(|d| d.2.iter()).collect();
    keys.sort();
    let mut doc_keys: Vec<&Vec<u8>> = docs.iter().map(|d| &d.0).collect();
    doc_keys.sort();
    let mut methods = vec![ScanMethod::Cursor, ScanMethod::GetAll];
    if s.has_get_all_records() {
        methods.push(ScanMethod::GetAllRecords);
    }
    const N: usize = 100;
    let mut results: BTreeMap<String, f64> = BTreeMap::new();
    for method in methods {
        s.set_scan_method(method);
        for reverse in [false, true] {
            for table in [Table::Documents, Table::Index] {
                for fresh_read in [true, false] {
                    let held = s.read().await.unwrap();
                    let started = now_ms();
                    for i in 0..N {
                        // Keys away from both ends, so every scan finds 5 rows.
                        let start = match table {
                            Table::Documents => {
                                doc_keys[10 + (i * 7919) % (doc_keys.len() - 20)].clone()
                            }
                            Table::Index => keys[10 + (i * 7919) % (keys.len() - 20)].clone(),
                        };
                        let range = if reverse {
                            KeyRange {
                                start: Vec::new(),
                                end: Some(start),
                            }
                        } else {
                            KeyRange { start, end: None }
                        };
                        let rows = if fresh_read {
                            let r = s.read().await.unwrap();
                            r.scan(table, &range, reverse, 5).await.unwrap()
                        } else {
                            held.scan(table, &range, reverse, 5).await.unwrap()
                        };
                        assert_eq!(rows.len(), 5);
                    }
                    let per = (now_ms() - started) / N as f64;
                    results.insert(
                        format!(
                            "{:?} {} {:?} {}",
                            method,
                            if reverse { "reverse" } else { "forward" },
                            table,
                            if fresh_read {
                                "new read()"
                            } else {
                                "held read"
                            }
                        ),
                        per,
                    );
                }
            }
        }
    }
    for (k, v) in &results {
        console_log!("bench: 5-row scan, {k}: {:.3} ms", v);
    }
    s.close();
    IdbStore::delete("t-bench").await.unwrap();
}
