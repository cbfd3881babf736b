//! The IndexedDB store's browser suite, a module of `idb_store.rs` (a window),
//! `idb_store_worker.rs` (a dedicated worker) and `idb_store_service_worker.rs` (a service
//! worker); each configures the context it runs in (the window adds the benchmark, which
//! uses the helpers here).

use hearth::client::idb_store::{IdbStore, Key, ScanMethod, Store, WriteOp, SCHEMA_VERSION};
use hearth_core::kv::{KeyRange, KvRead, MemStore, Table};
use js_sys::{Promise, Reflect};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use wasm_bindgen_test::{console_log, wasm_bindgen_test};

/// A fresh, empty store named `name`.
pub(crate) async fn fresh(name: &str) -> IdbStore {
    IdbStore::delete(name)
        .await
        .expect("delete before the test");
    IdbStore::open(name).await.expect("open")
}

pub(crate) fn put(store: Store, key: Key, value: &[u8]) -> WriteOp {
    WriteOp::Put {
        store,
        key,
        value: value.to_vec(),
    }
}

/// A document record: its encoded bytes and index entry keys.
pub(crate) fn doc(key: &[u8], value: &[u8], index_keys: &[&[u8]]) -> WriteOp {
    WriteOp::PutDocument {
        key: key.to_vec(),
        value: value.to_vec(),
        index_keys: index_keys.iter().map(|k| k.to_vec()).collect(),
        used: 0.0,
    }
}

pub(crate) fn bytes(k: &[u8]) -> Key {
    Key::Bytes(k.to_vec())
}

/// Resolves after `ms` milliseconds (a later task: held transactions are over by then).
pub(crate) async fn sleep(ms: i32) {
    // The global scope's `setTimeout`: a window's or a worker's.
    let promise = Promise::new(&mut |resolve, _| {
        let global = js_sys::global();
        let set_timeout: js_sys::Function = Reflect::get(&global, &"setTimeout".into())
            .unwrap()
            .unchecked_into();
        set_timeout
            .call2(&global, &resolve, &JsValue::from(ms))
            .unwrap();
    });
    JsFuture::from(promise).await.unwrap();
}

pub(crate) fn now_ms() -> f64 {
    let performance: web_sys::Performance = Reflect::get(&js_sys::global(), &"performance".into())
        .unwrap()
        .unchecked_into();
    performance.now()
}

/// xorshift64*: a fixed-seed generator (proptest does not run on wasm32).
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A short key over bytes that stress memcmp order: 0x00, 0xff, and neighbours.
    pub(crate) fn key(&mut self) -> Vec<u8> {
        const ALPHABET: [u8; 7] = [0x00, 0x01, 0x02, 0x7f, 0x80, 0xfe, 0xff];
        let len = self.below(6) as usize;
        (0..len)
            .map(|_| ALPHABET[self.below(ALPHABET.len() as u64) as usize])
            .collect()
    }
}

/// Waits for a raw transaction to complete (panics if it aborts).
pub(crate) async fn raw_done(tx: &web_sys::IdbTransaction) {
    let done = Promise::new(&mut |resolve, reject| {
        tx.set_oncomplete(Some(&resolve));
        tx.set_onabort(Some(&reject));
    });
    JsFuture::from(done).await.unwrap();
}

/// The raw `IDBOpenDBRequest` result, awaited through a JS promise (a connection this test
/// holds without any `versionchange` handler, like an old tab would).
pub(crate) async fn raw_open(name: &str, version: u32) -> web_sys::IdbDatabase {
    let factory: web_sys::IdbFactory = Reflect::get(&js_sys::global(), &"indexedDB".into())
        .unwrap()
        .unchecked_into();
    let request = factory.open_with_u32(name, version).unwrap();
    let promise = Promise::new(&mut |resolve, reject| {
        request.set_onsuccess(Some(&resolve));
        request.set_onerror(Some(&reject));
    });
    JsFuture::from(promise).await.expect("raw open");
    let db = request.result().unwrap().unchecked_into();
    request.set_onsuccess(None);
    request.set_onerror(None);
    db
}

#[wasm_bindgen_test]
async fn round_trip_through_every_store() {
    let s = fresh("t-round-trip").await;
    s.write(vec![
        doc(b"doc/a", b"A", &[b"\x01idx\x00a"]),
        doc(b"doc/b", b"B", &[b"\x01idx\x00b", b"\x02idx\x00b"]),
        put(Store::Remote, bytes(b"doc/a"), b"server-a"),
        put(Store::Remote, bytes(b"doc/gone"), b""),
        put(Store::Mutations, Key::Number(2.0), b"batch-2"),
        put(Store::Mutations, Key::Number(10.0), b"batch-10"),
        put(Store::Targets, bytes(b"query-4"), b"target-4"),
        put(Store::Meta, Key::Text("clientId".into()), b"c1"),
    ])
    .await
    .unwrap();

    let r = s.read().await.unwrap();
    assert_eq!(
        r.get(Table::Documents, b"doc/a").await.unwrap(),
        Some(b"A".to_vec())
    );
    assert_eq!(r.get(Table::Documents, b"doc/zz").await.unwrap(), None);
    assert_eq!(
        r.get(Table::Index, b"\x01idx\x00a").await.unwrap(),
        Some(b"doc/a".to_vec())
    );
    assert_eq!(r.get(Table::Index, b"\x01idx\x00").await.unwrap(), None);
    assert_eq!(
        r.scan(Table::Index, &KeyRange::default(), false, usize::MAX)
            .await
            .unwrap(),
        // Each entry comes with the key of its document.
        vec![
            (b"\x01idx\x00a".to_vec(), b"doc/a".to_vec()),
            (b"\x01idx\x00b".to_vec(), b"doc/b".to_vec()),
            (b"\x02idx\x00b".to_vec(), b"doc/b".to_vec()),
        ]
    );
    assert_eq!(
        r.get_remote(b"doc/a").await.unwrap(),
        Some(b"server-a".to_vec())
    );
    assert_eq!(r.get_remote(b"doc/gone").await.unwrap(), Some(vec![]));
    assert_eq!(r.get_remote(b"doc/b").await.unwrap(), None);
    assert_eq!(r.get_meta("clientId").await.unwrap(), Some(b"c1".to_vec()));
    assert_eq!(s.get_meta("clientId").await.unwrap(), Some(b"c1".to_vec()));
    assert_eq!(s.get_meta("nothing").await.unwrap(), None);

    assert_eq!(
        s.all(Store::Mutations).await.unwrap(),
        vec![
            (2u64.to_be_bytes().to_vec(), b"batch-2".to_vec()),
            (10u64.to_be_bytes().to_vec(), b"batch-10".to_vec()),
        ]
    );
    assert_eq!(
        s.all(Store::Targets).await.unwrap(),
        vec![(b"query-4".to_vec(), b"target-4".to_vec())]
    );
    assert_eq!(
        s.all(Store::Meta).await.unwrap(),
        vec![(b"clientId".to_vec(), b"c1".to_vec())]
    );
    assert_eq!(
        s.all(Store::Documents).await.unwrap(),
        vec![
            (b"doc/a".to_vec(), b"A".to_vec()),
            (b"doc/b".to_vec(), b"B".to_vec())
        ]
    );

    // Deletes, a range delete, and an empty range (a no-op).
    s.write(vec![
        WriteOp::Delete {
            store: Store::Mutations,
            key: Key::Number(2.0),
        },
        WriteOp::DeleteRange {
            store: Store::Documents,
            start: b"doc/".to_vec(),
            end: b"doc/b".to_vec(),
        },
        WriteOp::DeleteRange {
            store: Store::Remote,
            start: b"x".to_vec(),
            end: b"x".to_vec(),
        },
    ])
    .await
    .unwrap();
    assert_eq!(
        s.all(Store::Documents).await.unwrap(),
        vec![(b"doc/b".to_vec(), b"B".to_vec())]
    );
    assert_eq!(s.all(Store::Mutations).await.unwrap().len(), 1);
    // Deleting a document deletes its index entries; replacing it replaces them.
    let r = s.read().await.unwrap();
    assert_eq!(
        r.scan(Table::Index, &KeyRange::default(), false, usize::MAX)
            .await
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        s.estimate_bytes().await.unwrap(),
        (b"doc/b".len() + 1 + 2 * b"\x01idx\x00b".len()) as u64
    );
    s.write(vec![doc(b"doc/b", b"B2", &[b"\x03"])])
        .await
        .unwrap();
    let r = s.read().await.unwrap();
    assert_eq!(
        r.scan(Table::Index, &KeyRange::default(), false, usize::MAX)
            .await
            .unwrap(),
        vec![(b"\x03".to_vec(), b"doc/b".to_vec())]
    );
    assert_eq!(
        r.get(Table::Documents, b"doc/b").await.unwrap(),
        Some(b"B2".to_vec())
    );
    s.write(Vec::new()).await.unwrap();
    s.close();
    IdbStore::delete("t-round-trip").await.unwrap();
}

/// Scans and gets over random keys (0x00/0xff bytes, keys that are prefixes of others, the
/// empty key) agree with `MemStore`, for every scan method, in both tables.
#[wasm_bindgen_test]
async fn scans_agree_with_mem_store() {
    let s = fresh("t-scans").await;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut mem = MemStore::new();
    // Random documents, each with up to 3 index keys; an index key belongs to one document
    // (as real ones do: each ends with its document's name). A document written twice has
    // its second record's keys only.
    let mut ops = Vec::new();
    let mut owned: std::collections::HashMap<Vec<u8>, Vec<Vec<u8>>> = Default::default();
    let mut taken: std::collections::HashSet<Vec<u8>> = Default::default();
    for _ in 0..300 {
        let key = rng.key();
        let mut value = rng.key();
        value.push(rng.below(256) as u8);
        let mut index_keys = Vec::new();
        for _ in 0..rng.below(4) {
            let k = rng.key();
            if !taken.contains(&k) && !index_keys.contains(&k) {
                index_keys.push(k);
            }
        }
        for old in owned.remove(&key).unwrap_or_default() {
            mem.table_mut(Table::Index).remove(&old);
            taken.remove(&old);
        }
        for k in &index_keys {
            mem.table_mut(Table::Index).insert(k.clone(), key.clone());
            taken.insert(k.clone());
        }
        mem.table_mut(Table::Documents)
            .insert(key.clone(), value.clone());
        owned.insert(key.clone(), index_keys.clone());
        ops.push(WriteOp::PutDocument {
            key,
            value,
            index_keys,
            used: 0.0,
        });
    }
    s.write(ops).await.unwrap();
    assert_eq!(
        s.estimate_bytes().await.unwrap(),
        mem.table(Table::Documents)
            .iter()
            .map(|(k, v)| (k.len() + v.len()) as u64)
            .chain(mem.table(Table::Index).keys().map(|k| k.len() as u64))
            .sum::<u64>()
    );

    let mut methods = vec![ScanMethod::Auto, ScanMethod::Cursor, ScanMethod::GetAll];
    if s.has_get_all_records() {
        methods.push(ScanMethod::GetAllRecords);
    }
    let mut checked = 0;
    for method in methods {
        s.set_scan_method(method);
        let r = s.read().await.unwrap();
        for round in 0..150 {
            let table = if rng.below(2) == 0 {
                Table::Documents
            } else {
                Table::Index
            };
            let range = match rng.below(4) {
                0 => KeyRange::prefix(&rng.key()),
                1 => KeyRange {
                    start: rng.key(),
                    end: None,
                },
                _ => KeyRange {
                    start: rng.key(),
                    end: Some(rng.key()),
                },
            };
            let reverse = rng.below(2) == 0;
            let limit = match rng.below(5) {
                0 => usize::MAX,
                1 => 0,
                _ => rng.below(12) as usize + 1,
            };
            if round % 50 == 49 {
                // The held transaction ends during an unrelated wait; the next call re-opens.
                sleep(0).await;
            }
            let want = mem.scan(table, &range, reverse, limit).await.unwrap();
            let got = r.scan(table, &range, reverse, limit).await.unwrap();
            assert_eq!(
                got, want,
                "{method:?} {table:?} {range:?} reverse={reverse} limit={limit}"
            );
            let key = rng.key();
            assert_eq!(
                r.get(table, &key).await.unwrap(),
                mem.get(table, &key).await.unwrap(),
                "get {key:?}"
            );
            checked += 1;
        }
    }
    console_log!("scans_agree_with_mem_store: {checked} random scans agreed");
    s.close();
    IdbStore::delete("t-scans").await.unwrap();
}

/// An `IdbRead` held across unrelated awaits keeps working (on a fresh transaction), and then
/// sees writes committed in between: one snapshot per call, not per `IdbRead`.
#[wasm_bindgen_test]
async fn held_read_survives_unrelated_awaits() {
    let s = fresh("t-held").await;
    s.write(vec![doc(b"a", b"1", &[])]).await.unwrap();
    let r = s.read().await.unwrap();
    sleep(5).await;
    assert_eq!(
        r.get(Table::Documents, b"a").await.unwrap(),
        Some(b"1".to_vec())
    );
    s.write(vec![doc(b"b", b"2", &[])]).await.unwrap();
    let all = KeyRange::default();
    assert_eq!(
        r.scan(Table::Documents, &all, false, 10).await.unwrap(),
        vec![
            (b"a".to_vec(), b"1".to_vec()),
            (b"b".to_vec(), b"2".to_vec())
        ]
    );
    // Calls polled together share one transaction.
    let (x, y) = futures_join(
        r.scan(Table::Documents, &all, true, 1),
        r.get(Table::Documents, b"b"),
    )
    .await;
    assert_eq!(x.unwrap(), vec![(b"b".to_vec(), b"2".to_vec())]);
    assert_eq!(y.unwrap(), Some(b"2".to_vec()));
    s.close();
    IdbStore::delete("t-held").await.unwrap();
}

/// Reads share one read transaction, but none begun after a write's requests were made
/// shares the one made before it: such a read sees the write. A read begun before the write
/// does not, though its transaction is made by its first request, made after the write's.
#[wasm_bindgen_test]
async fn a_read_begun_after_a_write_sees_it() {
    let s = fresh("t-shared").await;
    s.write(vec![doc(b"a", b"1", &[])]).await.unwrap();
    let before = s.read().await.unwrap();
    let writes = [Ok(doc(b"a", b"2", &[])), Ok(doc(b"b", b"2", &[]))];
    let w = s.begin_write(&[Store::Documents], writes).await.unwrap();
    let after = s.read().await.unwrap();
    let (x, y) = futures_join(
        before.get(Table::Documents, b"a"),
        after.get(Table::Documents, b"b"),
    )
    .await;
    assert_eq!(x.unwrap(), Some(b"1".to_vec()), "the read begun before");
    assert_eq!(y.unwrap(), Some(b"2".to_vec()), "the read begun after");
    w.done().await.unwrap();
    s.close();
    IdbStore::delete("t-shared").await.unwrap();
}

/// Polls two futures together (no `futures` crate on this side).
async fn futures_join<A: std::future::Future, B: std::future::Future>(
    a: A,
    b: B,
) -> (A::Output, B::Output) {
    let mut a = Box::pin(a);
    let mut b = Box::pin(b);
    let (mut ra, mut rb) = (None, None);
    std::future::poll_fn(|cx| {
        if ra.is_none() {
            if let std::task::Poll::Ready(v) = a.as_mut().poll(cx) {
                ra = Some(v);
            }
        }
        if rb.is_none() {
            if let std::task::Poll::Ready(v) = b.as_mut().poll(cx) {
                rb = Some(v);
            }
        }
        if ra.is_some() && rb.is_some() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    (ra.unwrap(), rb.unwrap())
}

/// A batch with an operation IndexedDB refuses (a reversed range: `DataError`) after several
/// puts applies nothing, and earlier values survive; keys of the wrong type are refused
/// before any transaction.
#[wasm_bindgen_test]
async fn failed_batch_applies_nothing() {
    let s = fresh("t-atomic").await;
    s.write(vec![doc(b"keep", b"old", &[])]).await.unwrap();
    let before = s.all(Store::Documents).await.unwrap();

    let err = s
        .write(vec![
            doc(b"keep", b"new", &[]),
            doc(b"added", b"x", &[b"entry"]),
            put(Store::Meta, Key::Text("m".into()), b"v"),
            WriteOp::DeleteRange {
                store: Store::Remote,
                start: b"z".to_vec(),
                end: b"a".to_vec(),
            },
        ])
        .await
        .unwrap_err();
    assert_eq!(err.code().as_str(), "invalid-argument", "{err}");
    assert!(err.message.contains("operation 3"), "{err}");
    assert!(err.message.contains("DataError"), "{err}");
    assert_eq!(s.all(Store::Documents).await.unwrap(), before);
    let r = s.read().await.unwrap();
    assert_eq!(r.get(Table::Index, b"entry").await.unwrap(), None);
    assert_eq!(s.get_meta("m").await.unwrap(), None);

    for (bad, why) in [
        (
            put(Store::Mutations, Key::Number(f64::NAN), b"x"),
            "not an id",
        ),
        (put(Store::Mutations, Key::Number(1.5), b"x"), "not an id"),
        (put(Store::Mutations, Key::Number(-1.0), b"x"), "not an id"),
        (
            put(Store::Remote, Key::Text("doc".into()), b"x"),
            "bytes keys",
        ),
        (
            put(Store::Documents, bytes(b"doc"), b"x"),
            "document records",
        ),
        (put(Store::Meta, bytes(b"k"), b"x"), "text keys"),
        (
            WriteOp::DeleteRange {
                store: Store::Mutations,
                start: vec![],
                end: vec![1],
            },
            "binary keys",
        ),
        (put(Store::Targets, Key::Number(4.0), b"x"), "bytes keys"),
    ] {
        let err = s
            .write(vec![doc(b"added", b"x", &[]), bad])
            .await
            .unwrap_err();
        assert_eq!(err.code().as_str(), "invalid-argument", "{err}");
        assert!(err.message.contains(why), "{err}");
    }
    assert_eq!(s.all(Store::Documents).await.unwrap(), before);
    s.close();
    IdbStore::delete("t-atomic").await.unwrap();
}

#[wasm_bindgen_test]
async fn reopen_keeps_data_and_close_is_reported() {
    let s = fresh("t-reopen").await;
    s.write(vec![
        doc(b"d", b"doc", &[]),
        put(Store::Mutations, Key::Number(7.0), b"b7"),
    ])
    .await
    .unwrap();
    s.close();
    let err = s.get_meta("x").await.unwrap_err();
    assert_eq!(err.code().as_str(), "failed-precondition", "{err}");
    let err = s.write(vec![put(Store::Meta, Key::Text("x".into()), b"1")]);
    assert_eq!(
        err.await.unwrap_err().code().as_str(),
        "failed-precondition"
    );

    let s = IdbStore::open("t-reopen").await.unwrap();
    let r = s.read().await.unwrap();
    assert_eq!(
        r.get(Table::Documents, b"d").await.unwrap(),
        Some(b"doc".to_vec())
    );
    assert_eq!(
        s.all(Store::Mutations).await.unwrap(),
        vec![(7u64.to_be_bytes().to_vec(), b"b7".to_vec())]
    );
    s.close();
    IdbStore::delete("t-reopen").await.unwrap();
}

#[wasm_bindgen_test]
async fn delete_waits_for_open_connections_to_close() {
    let s = fresh("t-delete").await;
    s.write(vec![doc(b"d", b"doc", &[])]).await.unwrap();
    // An open connection does not close itself for a deletion (it may hold writes no relay
    // has yet): the delete is refused, and the connection and its data stay.
    let err = IdbStore::delete("t-delete")
        .await
        .expect_err("refused while open");
    assert_eq!(err.code().as_str(), "failed-precondition");
    let r = s.read().await.unwrap();
    assert_eq!(
        r.get(Table::Documents, b"d").await.unwrap(),
        Some(b"doc".to_vec())
    );
    drop(r);
    // Closed, the deletion goes through (the refused request too, once nothing holds it).
    s.close();
    IdbStore::delete("t-delete").await.unwrap();
    let s = IdbStore::open("t-delete").await.unwrap();
    assert!(s.all(Store::Documents).await.unwrap().is_empty());
    s.close();
    IdbStore::delete("t-delete").await.unwrap();
}

/// An old connection that ignores `versionchange` blocks an upgrade: the open fails fast with
/// `failed-precondition`, and once the old connection closes, the abandoned upgrade is
/// aborted (the database keeps version 1 and its data).
#[wasm_bindgen_test]
async fn blocked_upgrade_fails_fast() {
    let s = fresh("t-blocked").await;
    s.write(vec![doc(b"d", b"doc", &[])]).await.unwrap();
    s.close();
    let old_tab = raw_open("hearth:t-blocked", SCHEMA_VERSION).await;

    let started = now_ms();
    let err = IdbStore::open_with_version("t-blocked", SCHEMA_VERSION + 1)
        .await
        .unwrap_err();
    assert_eq!(err.code().as_str(), "failed-precondition", "{err}");
    assert!(err.message.contains("close the other tabs"), "{err}");
    console_log!(
        "blocked upgrade reported after {:.1} ms",
        now_ms() - started
    );

    old_tab.close();
    sleep(50).await;
    let old_tab = raw_open("hearth:t-blocked", SCHEMA_VERSION).await;
    assert_eq!(old_tab.version(), SCHEMA_VERSION as f64);
    old_tab.close();
    let s = IdbStore::open("t-blocked").await.unwrap();
    let r = s.read().await.unwrap();
    assert_eq!(
        r.get(Table::Documents, b"d").await.unwrap(),
        Some(b"doc".to_vec())
    );
    s.close();
    IdbStore::delete("t-blocked").await.unwrap();
}

/// A connection of this build yields to a newer version's upgrade, and this build then
/// refuses the newer database with a clear error.
#[wasm_bindgen_test]
async fn open_connection_yields_to_upgrade() {
    let s = fresh("t-yield").await;
    let newer = IdbStore::open_with_version("t-yield", SCHEMA_VERSION + 1)
        .await
        .unwrap();
    let err = s.get_meta("x").await.unwrap_err();
    assert_eq!(err.code().as_str(), "failed-precondition");
    assert!(err.message.contains("reload"), "{err}");
    newer.close();
    let err = IdbStore::open("t-yield").await.unwrap_err();
    assert_eq!(err.code().as_str(), "failed-precondition", "{err}");
    assert!(err.message.contains("newer version"), "{err}");
    IdbStore::delete("t-yield").await.unwrap();
}

/// Without an `indexedDB` global, open and delete fail with `unavailable` and say why.
#[wasm_bindgen_test]
async fn missing_indexeddb_is_unavailable() {
    // Window attributes are own properties of the global ([Global] interface): shadow the
    // accessor, then put the original descriptor back.
    let window: js_sys::Object = js_sys::global();
    let name = JsValue::from_str("indexedDB");
    let original = js_sys::Object::get_own_property_descriptor(&window, &name);
    let shadow = js_sys::Object::new();
    Reflect::set(&shadow, &"value".into(), &JsValue::UNDEFINED).unwrap();
    Reflect::set(&shadow, &"configurable".into(), &JsValue::TRUE).unwrap();
    js_sys::Object::define_property(&window, &name, &shadow);
    let open = IdbStore::open("t-unavailable").await;
    let delete = IdbStore::delete("t-unavailable").await;
    Reflect::delete_property(&window, &name).unwrap();
    if !original.is_undefined() {
        js_sys::Object::define_property(&window, &name, original.unchecked_ref());
    }
    let err = open.unwrap_err();
    assert_eq!(err.code().as_str(), "unavailable", "{err}");
    assert!(err.message.contains("IndexedDB is not available"), "{err}");
    assert_eq!(delete.unwrap_err().code().as_str(), "unavailable");
    // The real global is back.
    IdbStore::open("t-unavailable").await.unwrap().close();
    IdbStore::delete("t-unavailable").await.unwrap();
}

/// A schema-1 database (documents as bare bytes, index entries in a store of their own)
/// opens at schema 2 with its documents readable; the `index` store is gone and the new
/// record shape is indexed. (The engine then rewrites the old records with their keys.)
#[wasm_bindgen_test]
async fn schema_1_upgrades_keeping_documents() {
    IdbStore::delete("t-migrate").await.unwrap();
    IdbStore::open_with_version("t-migrate", 1)
        .await
        .unwrap()
        .close();
    let db = raw_open("hearth:t-migrate", 1).await;
    let stores = js_sys::Array::of2(&"documents".into(), &"index".into());
    let tx = db
        .transaction_with_str_sequence_and_mode(&stores, web_sys::IdbTransactionMode::Readwrite)
        .unwrap();
    tx.object_store("documents")
        .unwrap()
        .put_with_key(
            &js_sys::Uint8Array::from(&b"old-doc"[..]),
            &js_sys::Uint8Array::from(&b"d/1"[..]),
        )
        .unwrap();
    tx.object_store("index")
        .unwrap()
        .put_with_key(&JsValue::from(0), &js_sys::Uint8Array::from(&b"e/1"[..]))
        .unwrap();
    raw_done(&tx).await;
    db.close();

    let s = IdbStore::open("t-migrate").await.unwrap();
    assert_eq!(
        s.all(Store::Documents).await.unwrap(),
        vec![(b"d/1".to_vec(), b"old-doc".to_vec())]
    );
    let r = s.read().await.unwrap();
    assert_eq!(
        r.get(Table::Documents, b"d/1").await.unwrap(),
        Some(b"old-doc".to_vec())
    );
    assert_eq!(
        r.scan(Table::Index, &KeyRange::default(), false, usize::MAX)
            .await
            .unwrap(),
        vec![]
    );
    s.write(vec![doc(b"d/1", b"new-doc", &[b"e/1"])])
        .await
        .unwrap();
    let r = s.read().await.unwrap();
    assert_eq!(
        r.scan(Table::Index, &KeyRange::default(), false, usize::MAX)
            .await
            .unwrap(),
        vec![(b"e/1".to_vec(), b"d/1".to_vec())]
    );
    s.close();
    let db = raw_open("hearth:t-migrate", SCHEMA_VERSION).await;
    assert!(!db.object_store_names().contains("index"));
    db.close();
    IdbStore::delete("t-migrate").await.unwrap();
}

/// Counts the requests made on object stores (not indexes) from now on, by method: `get`,
/// `getAll`, `getAllKeys`, `getAllRecords`, `openCursor`. Returns a function that puts the
/// methods back and gives the counts (an object; a method never called is absent).
pub(crate) fn count_store_requests() -> js_sys::Function {
    let install = js_sys::Function::new_no_args(
        "const p = IDBObjectStore.prototype; const saved = {}; const n = {};
         for (const m of ['get', 'getAll', 'getAllKeys', 'getAllRecords', 'openCursor']) {
           if (!p[m]) continue;
           saved[m] = p[m];
           p[m] = function (...a) { n[m] = (n[m] || 0) + 1; return saved[m].apply(this, a); };
         }
         return () => { Object.assign(p, saved); return n; };",
    );
    install.call0(&JsValue::NULL).unwrap().unchecked_into()
}

/// Ends a count begun by [`count_store_requests`]: (gets, range reads).
pub(crate) fn counted(done: js_sys::Function) -> (f64, f64) {
    let n = done.call0(&JsValue::NULL).unwrap();
    let of = |m: &str| Reflect::get(&n, &m.into()).unwrap().as_f64().unwrap_or(0.0);
    (
        of("get"),
        of("getAll") + of("getAllKeys") + of("getAllRecords") + of("openCursor"),
    )
}

/// The documents of a large `entries` scan come with it: reading them afterwards makes no
/// request of `documents` (it made a range read of up to four times as many records, from the
/// least key to the greatest, when 256 or more were asked for at once). Many keys spread thin
/// over a large range are read one by one, without reading the range (it read four times as
/// many records as asked before giving up).
#[wasm_bindgen_test]
async fn documents_of_an_entries_scan_come_with_it() {
    let s = fresh("t-prefetch").await;
    let mut ops = Vec::new();
    let mut keys = Vec::new();
    for i in 0..2000u32 {
        let key = format!("doc{i:05}").into_bytes();
        // Every fourth document has an index entry in the scanned range.
        let entry = format!("{}{i:05}", if i % 4 == 0 { "a" } else { "b" }).into_bytes();
        if i % 4 == 0 {
            keys.push(key.clone());
        }
        ops.push(doc(&key, &i.to_be_bytes(), &[&entry]));
    }
    s.write(ops).await.unwrap();
    let r = s.read().await.unwrap();
    let rows = r
        .scan(Table::Index, &KeyRange::prefix(b"a"), false, usize::MAX)
        .await
        .unwrap();
    assert_eq!(rows.len(), 500);
    let done = count_store_requests();
    let got = r.get_many(Table::Documents, &keys).await;
    let requests = counted(done);
    let got = got.unwrap();
    for (n, value) in got.iter().enumerate() {
        let i = 4 * n as u32;
        assert_eq!(value.as_deref(), Some(&i.to_be_bytes()[..]), "document {i}");
    }
    assert_eq!(
        requests,
        (0.0, 0.0),
        "requests of `documents` for prefetched records"
    );
    // Asked again, they are no longer held: the range holds under four records per key
    // asked, and one range read serves them.
    let done = count_store_requests();
    let again = r.get_many(Table::Documents, &keys).await.unwrap();
    assert_eq!(again, got);
    assert_eq!(counted(done), (0.0, 1.0), "a dense range: one range read");
    // Every seventh document: the range holds seven records per key asked.
    let sparse: Vec<Vec<u8>> = (0..2000u32)
        .step_by(7)
        .map(|i| format!("doc{i:05}").into_bytes())
        .collect();
    let done = count_store_requests();
    let got = r.get_many(Table::Documents, &sparse).await.unwrap();
    assert_eq!(
        counted(done),
        (sparse.len() as f64, 0.0),
        "a sparse range: a get per key"
    );
    for (n, value) in got.iter().enumerate() {
        let i = 7 * n as u32;
        assert_eq!(value.as_deref(), Some(&i.to_be_bytes()[..]), "document {i}");
    }
    s.close();
    IdbStore::delete("t-prefetch").await.unwrap();
}
