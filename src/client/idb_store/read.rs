//! [`IdbRead`]: the core's [`KvRead`] over IndexedDB, plus reads of `remote` and `meta`.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use js_sys::Array;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::{IdbCursorDirection, IdbCursorWithValue, IdbIndex, IdbKeyRange, IdbObjectStore};

use super::events::RequestEvents;
use super::memo::Remembered;
use super::{js, IdbStore, Store, TxCell};
use crate::client::error::ClientError;
use hearth_core::document::Document;
use hearth_core::encoding::document::decode_document;
use hearth_core::kv::{KeyRange, KvError, KvRead, Row, StoredDocument, Table};

/// A row as scanned: its key, its record (a `documents` record; undefined for an `entries`
/// row answered from the memo) and, for an `entries` row, the key of its record.
type Scanned = (Vec<u8>, JsValue, Vec<u8>);

/// How a range scan reads IndexedDB.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanMethod {
    /// `GetAllRecords` where the browser has it, otherwise `GetAll` forward and `Cursor`
    /// backward.
    Auto,
    /// A cursor in the scan's direction: one success event per row.
    Cursor,
    /// `getAllKeys` + `getAll` with a count: two requests; forward only (backward scans use
    /// a cursor).
    GetAll,
    /// `getAllRecords({query, count, direction})`: one request in either direction.
    GetAllRecords,
}

/// Reads over a readonly transaction on `documents` (with its `entries` index), `remote` and
/// `meta`.
///
/// IndexedDB commits a transaction as soon as a turn of the event loop ends with none of its
/// requests pending, so a transaction held across an unrelated `await` (a timer, the
/// network, another transaction) is over by the next call. Each call therefore makes its
/// requests on the held transaction while it is active, and otherwise on a fresh readonly
/// transaction that it then holds.
///
/// Consistency: each call (a `get`, or a whole `scan`) reads one snapshot. Calls chained
/// directly one after another (each awaiting only this `IdbRead`'s requests) share one
/// transaction and so one snapshot; a call after an unrelated `await` may see writes
/// committed in between. Callers that need several reads to agree either chain them or
/// serialize writers (the engine holds its lock across read-then-write). A cursor scan whose
/// transaction ends under it (it never should: its continuation runs in the success event's
/// microtasks) resumes after its last row on a fresh transaction.
///
/// A scan of `entries` returns each entry's document record with it; the records are kept
/// (as JavaScript values, not copied) and serve this read's later gets of those documents,
/// so a query's index scan and its document fetch make one request, not two.
pub struct IdbRead {
    /// The store it reads: fresh transactions, and its error messages.
    store: IdbStore,
    /// The read-only transaction requests go through, made by the first request of the
    /// reads that share it (`shared_read`); replaced by a fresh one when it went inactive
    /// (IndexedDB ends a transaction that has no request pending).
    tx: RefCell<TxCell>,
    /// Document key → record, from `entries` scans.
    prefetched: RefCell<HashMap<Vec<u8>, JsValue>>,
    /// The store's memo generation when `tx` was made: the memo entries `tx` may see.
    generation: Cell<u64>,
}

/// What a scan reads: a store by its keys, or the `entries` index by index key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    Store(Store),
    Entries,
}

impl Source {
    fn name(self) -> &'static str {
        match self {
            Source::Store(s) => s.name(),
            Source::Entries => "documents.entries",
        }
    }
}

/// From how many keys `get_many_raw` tries one range scan instead of a get per key.
const DENSE_FROM: usize = 256;

/// Most records per key asked that the range of such a scan may hold.
const DENSE_SPREAD: usize = 4;

/// How many records from `entries` scans one read keeps for later gets (a count over a
/// large range scans entries without fetching their documents).
const PREFETCH_CAP: usize = 4096;

/// `make` applied to `store`, or to its `entries` index.
fn on_source<R>(
    s: &IdbObjectStore,
    source: Source,
    make_store: impl Fn(&IdbObjectStore) -> Result<R, JsValue>,
    make_index: impl Fn(&IdbIndex) -> Result<R, JsValue>,
) -> Result<R, JsValue> {
    match source {
        Source::Store(_) => make_store(s),
        Source::Entries => make_index(&s.index(js::INDEX_ENTRIES)?),
    }
}

impl IdbRead {
    pub(super) fn new(store: IdbStore, tx: TxCell, generation: u64) -> IdbRead {
        IdbRead {
            store,
            tx: RefCell::new(tx),
            prefetched: RefCell::new(HashMap::new()),
            generation: Cell::new(generation),
        }
    }

    /// The value of `key` in `remote`: the server's version of a document with pending writes.
    pub async fn get_remote(&self, key: &[u8]) -> Result<Option<Vec<u8>>, ClientError> {
        self.get_raw(Store::Remote, key)
            .await
            .map_err(|e| self.store.error("reading `remote`", &e))
    }

    /// The values of `keys` in `remote`, requested together.
    pub async fn get_many_remote(
        &self,
        keys: &[Vec<u8>],
    ) -> Result<Vec<Option<Vec<u8>>>, ClientError> {
        self.get_many_raw(Store::Remote, keys)
            .await
            .map_err(|e| self.store.error("reading `remote`", &e))
    }

    /// The value of `key` in `meta`.
    pub async fn get_meta(&self, key: &str) -> Result<Option<Vec<u8>>, ClientError> {
        let events = RequestEvents::new(
            self.request(Store::Meta, |s| s.get(&JsValue::from_str(key)))
                .map_err(|e| self.store.error("reading `meta`", &e))?,
        );
        let value = events
            .next()
            .await
            .map_err(|e| self.store.error("reading `meta`", &e))?;
        Ok((!value.is_undefined()).then(|| js::to_bytes(&value)))
    }

    /// Makes a request with `make` on the held transaction, or on a fresh one (then held)
    /// when the held one is no longer active.
    fn request<R>(
        &self,
        store: Store,
        make: impl Fn(&IdbObjectStore) -> Result<R, JsValue>,
    ) -> Result<R, JsValue> {
        let cell = self.tx.borrow().clone();
        let held = cell.borrow().clone();
        let held = match held {
            Some(tx) => tx,
            None => {
                // The first request of the reads sharing `cell`. No write transaction was
                // made since they began (it would have made this one first), so this one
                // sees what a transaction made when they began would have seen.
                let tx = self.store.read_tx()?;
                *cell.borrow_mut() = Some(tx.clone());
                self.store.share_until_task_end(&cell);
                tx
            }
        };
        match held.object_store(store.name()).and_then(|s| make(&s)) {
            Err(e) if js::is_inactive(&e) => {}
            made => return made,
        }
        let tx = self.store.read_tx()?;
        let made = tx.object_store(store.name()).and_then(|s| make(&s))?;
        *self.tx.borrow_mut() = Rc::new(RefCell::new(Some(tx)));
        self.generation
            .set(self.store.inner.memo.borrow().generation());
        Ok(made)
    }

    /// The memo, while the store is open (a closed one reads nothing from it).
    fn memo(&self) -> Option<std::cell::RefMut<'_, super::memo::Memo>> {
        self.store.check_open().ok()?;
        Some(self.store.inner.memo.borrow_mut())
    }

    /// The bytes of a document the memo holds for this read's transaction.
    fn remembered(&self, store: Store, key: &[u8]) -> Option<Vec<u8>> {
        if store != Store::Documents {
            return None;
        }
        self.memo()?.get(key, self.generation.get())
    }

    /// A document the memo holds for this read's transaction, decoded.
    fn remembered_document(&self, key: &[u8]) -> Option<Document> {
        self.memo()?.document(key, self.generation.get())
    }

    /// Tells the memo what IndexedDB answered for a document.
    fn remember(&self, store: Store, key: &[u8], value: &Option<Vec<u8>>) {
        if let (Store::Documents, Some(value)) = (store, value) {
            let doc = Remembered::new(value.clone(), None);
            self.store
                .inner
                .memo
                .borrow_mut()
                .read(key, doc, self.generation.get());
        }
    }

    /// Tells the memo the records an `entries` scan read whole (documents and index keys),
    /// in a later task: the scan's caller is not kept waiting for the copies. They are put
    /// only if no write began since this read's transaction was made (`Memo::may_put`).
    fn remember_records(&self, records: Vec<(Vec<u8>, JsValue)>) {
        if records.is_empty() {
            return;
        }
        let (store, generation) = (self.store.clone(), self.generation.get());
        wasm_bindgen_futures::spawn_local(async move {
            crate::client::js::sleep(0.0).await;
            let mut memo = store.inner.memo.borrow_mut();
            for (key, record) in records {
                if !memo.may_put(generation) {
                    return;
                }
                let doc =
                    Remembered::new(js::record_document(&record), js::record_index_keys(&record));
                memo.read(&key, doc, generation);
            }
        });
    }

    /// An `entries` scan answered from the documents' keys alone, when the memo holds every
    /// document found with its index keys: the rows (index keys, no values), or `None` when
    /// one is missing (the caller then scans the usual way).
    async fn scan_remembered(
        &self,
        options: &js_sys::Object,
        range: &KeyRange,
        reverse: bool,
    ) -> Result<Option<Vec<Scanned>>, JsValue> {
        let events = RequestEvents::new(self.request(Store::Documents, |s| {
            js::index_get_all_keys(&s.index(js::INDEX_ENTRIES)?, options)
        })?);
        let found: Array = events.next().await?.unchecked_into();
        let mut memo = self.store.inner.memo.borrow_mut();
        let rows = remembered_rows(&memo, self.generation.get(), &found, range, reverse);
        if rows.is_none() {
            memo.scan_missed();
        }
        Ok(rows)
    }

    /// Several gets on one transaction: the records an `entries` scan of this read returned
    /// first, then the rest, every request made before the first is awaited, so IndexedDB
    /// serves them back to back.
    pub(super) async fn get_many_raw(
        &self,
        store: Store,
        keys: &[Vec<u8>],
    ) -> Result<Vec<Option<Vec<u8>>>, JsValue> {
        let mut out: Vec<Option<Option<Vec<u8>>>> = keys
            .iter()
            .map(|k| {
                self.take_prefetched(store, k)
                    .map(|record| stored_value(store, &record))
                    .or_else(|| self.remembered(store, k).map(Some))
            })
            .collect();
        let missing: Vec<usize> = (0..keys.len()).filter(|&i| out[i].is_none()).collect();
        let wanted: Vec<Vec<u8>> = missing.iter().map(|&i| keys[i].clone()).collect();
        for (i, value) in missing
            .into_iter()
            .zip(self.get_unread(store, &wanted).await?)
        {
            self.remember(store, &keys[i], &value);
            out[i] = Some(value);
        }
        Ok(out.into_iter().map(Option::flatten).collect())
    }

    /// The values of `keys`, none of them prefetched: one range scan when they are many and
    /// dense, otherwise a get per key.
    async fn get_unread(
        &self,
        store: Store,
        keys: &[Vec<u8>],
    ) -> Result<Vec<Option<Vec<u8>>>, JsValue> {
        if keys.len() >= DENSE_FROM {
            if let Some(found) = self.get_dense(store, keys).await? {
                return Ok(found);
            }
        }
        let mut pending = Vec::with_capacity(keys.len());
        for k in keys {
            let key = js::bytes(k);
            pending.push(RequestEvents::new(self.request(store, |s| s.get(&key))?));
        }
        let mut out = Vec::with_capacity(keys.len());
        for events in pending {
            out.push(stored_value(store, &events.next().await?));
        }
        Ok(out)
    }

    /// Many keys as one range scan from the least to the greatest (a few requests instead
    /// of one per key: a large result from the relay is mostly a whole collection), when
    /// that range holds at most `DENSE_SPREAD` records per key asked; `None` otherwise (the
    /// caller gets them one by one).
    async fn get_dense(
        &self,
        store: Store,
        keys: &[Vec<u8>],
    ) -> Result<Option<Vec<Option<Vec<u8>>>>, JsValue> {
        let (Some(least), Some(greatest)) = (keys.iter().min(), keys.iter().max()) else {
            return Ok(Some(Vec::new()));
        };
        let mut end = greatest.clone();
        end.push(0);
        let range = KeyRange {
            start: least.clone(),
            end: Some(end),
        };
        // Counted first: a range too sparse for its keys (random ids across a large
        // collection) is then not read at all.
        let cap = keys.len().saturating_mul(DENSE_SPREAD);
        let query = idb_range(&range)?;
        let counted = RequestEvents::new(self.request(store, |s| s.count_with_key(&query))?)
            .next()
            .await?
            .as_f64()
            .unwrap_or(f64::INFINITY);
        if counted >= cap as f64 {
            return Ok(None);
        }
        let rows = self
            .scan_source(Source::Store(store), &range, false, cap)
            .await?;
        let mut by_key: HashMap<Vec<u8>, JsValue> =
            rows.into_iter().map(|(k, v, _)| (k, v)).collect();
        Ok(Some(
            keys.iter()
                .map(|k| by_key.remove(k).and_then(|r| stored_value(store, &r)))
                .collect(),
        ))
    }

    async fn get_raw(&self, store: Store, key: &[u8]) -> Result<Option<Vec<u8>>, JsValue> {
        if let Some(record) = self.take_prefetched(store, key) {
            return Ok(stored_value(store, &record));
        }
        if let Some(value) = self.remembered(store, key) {
            return Ok(Some(value));
        }
        let js_key = js::bytes(key);
        let events = RequestEvents::new(self.request(store, |s| s.get(&js_key))?);
        let value = stored_value(store, &events.next().await?);
        self.remember(store, key, &value);
        Ok(value)
    }

    /// A document record an `entries` scan of this read returned.
    fn take_prefetched(&self, store: Store, key: &[u8]) -> Option<JsValue> {
        if store != Store::Documents {
            return None;
        }
        self.prefetched.borrow_mut().remove(key)
    }

    /// Up to `limit` records of `documents` in `range`, as stored (for measuring and
    /// evicting).
    pub(super) async fn records(
        &self,
        range: &KeyRange,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, JsValue)>, JsValue> {
        let rows = self
            .scan_source(Source::Store(Store::Documents), range, false, limit)
            .await?;
        Ok(rows.into_iter().map(|(k, v, _)| (k, v)).collect())
    }

    /// A scan of `store` (`documents` rows carry the encoded documents), or with
    /// `entries`, of the index entries (empty values; their records are kept for later gets).
    async fn scan_rows(
        &self,
        source: Source,
        range: &KeyRange,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<Row>, JsValue> {
        let rows = self.scan_source(source, range, reverse, limit).await?;
        Ok(match source {
            Source::Store(store) => rows
                .into_iter()
                .map(|(k, v, _)| {
                    let v = stored_value(store, &v).unwrap_or_default();
                    (k, v)
                })
                .collect(),
            // An entry's value: the key of the document it belongs to (`KvRead`).
            Source::Entries => rows.into_iter().map(|(k, _, doc)| (k, doc)).collect(),
        })
    }

    /// Keys and raw values of a scan. For `entries`, the keys are index keys, and the rows
    /// come from the memo's kept scans when it has this one (`scans.rs`), else from
    /// IndexedDB, each record then kept by its document key in `prefetched`.
    async fn scan_source(
        &self,
        source: Source,
        range: &KeyRange,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<Scanned>, JsValue> {
        if limit == 0 || range.is_empty() {
            return Ok(Vec::new());
        }
        if source != Source::Entries {
            return self.scan_indexeddb(source, range, reverse, limit).await;
        }
        let generation = self.generation.get();
        let kept = self
            .memo()
            .and_then(|m| m.scans()?.get(range, reverse, limit, generation));
        if let Some(rows) = kept {
            return Ok(rows
                .into_iter()
                .map(|(entry, doc)| (entry, JsValue::UNDEFINED, doc))
                .collect());
        }
        let rows = self.scan_indexeddb(source, range, reverse, limit).await?;
        // Kept when no write began since this read's transaction was made, and every row
        // names its document.
        let generation = self.generation.get();
        let mut memo = self.memo();
        let scans = memo.as_mut().and_then(|m| m.scans_to_keep(generation));
        if let Some(scans) = scans.filter(|_| rows.iter().all(|r| !r.2.is_empty())) {
            let kept = rows.iter().map(|(e, _, d)| (e.clone(), d.clone()));
            scans.put(range, reverse, limit, kept.collect(), generation);
        }
        Ok(rows)
    }

    /// [`IdbRead::scan_source`] from IndexedDB.
    async fn scan_indexeddb(
        &self,
        source: Source,
        range: &KeyRange,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<Scanned>, JsValue> {
        let count = u32::try_from(limit).unwrap_or(u32::MAX);
        let direction = if reverse {
            IdbCursorDirection::Prev
        } else {
            IdbCursorDirection::Next
        };
        let store = match source {
            Source::Store(s) => s,
            Source::Entries => Store::Documents,
        };
        match self.method(source, reverse) {
            ScanMethod::GetAllRecords => {
                let options = js::object(&[
                    ("query", &idb_range(range)?),
                    ("count", &JsValue::from(count)),
                    ("direction", &JsValue::from(direction)),
                ]);
                let (remembered, populate) = match source {
                    Source::Entries if self.store.check_open().is_ok() => {
                        self.store.inner.memo.borrow_mut().scan_plan()
                    }
                    _ => (false, false),
                };
                if remembered {
                    if let Some(rows) = self.scan_remembered(&options, range, reverse).await? {
                        return Ok(rows);
                    }
                }
                let events = RequestEvents::new(self.request(store, |s| {
                    on_source(
                        s,
                        source,
                        |s| js::get_all_records(s, &options),
                        |i| js::index_get_all_records(i, &options),
                    )
                })?);
                let records: Array = events.next().await?.unchecked_into();
                let mut whole = Vec::new();
                let rows = {
                    let mut prefetched = self.prefetched.borrow_mut();
                    records
                        .iter()
                        .map(|r| {
                            let r: js::IdbRecord = r.unchecked_into();
                            let value = r.value();
                            let mut doc = Vec::new();
                            if source == Source::Entries {
                                doc = js::to_bytes(&r.primary_key());
                                if populate {
                                    whole.push((doc.clone(), value.clone()));
                                }
                                if prefetched.len() < PREFETCH_CAP {
                                    prefetched.insert(doc.clone(), value.clone());
                                }
                            }
                            (js::to_bytes(&r.key()), value, doc)
                        })
                        .collect()
                };
                self.remember_records(whole);
                Ok(rows)
            }
            ScanMethod::GetAll => {
                let query = idb_range(range)?;
                let (keys, values) = self.request(store, |s| {
                    Ok((
                        s.get_all_keys_with_key_and_limit(&query, count)?,
                        s.get_all_with_key_and_limit(&query, count)?,
                    ))
                })?;
                let (keys, values) = (RequestEvents::new(keys), RequestEvents::new(values));
                let keys: Array = keys.next().await?.unchecked_into();
                let values: Array = values.next().await?.unchecked_into();
                Ok(keys
                    .iter()
                    .zip(values.iter())
                    .map(|(k, v)| (js::to_bytes(&k), v, Vec::new()))
                    .collect())
            }
            ScanMethod::Cursor | ScanMethod::Auto => {
                self.scan_cursor(source, range.clone(), direction, limit)
                    .await
            }
        }
    }

    /// The method for a scan in this direction: what was asked for, or what the browser has.
    /// `getAll` cannot return index keys, so `entries` falls back to a cursor.
    fn method(&self, source: Source, reverse: bool) -> ScanMethod {
        let inner = &self.store.inner;
        let asked = inner.scan_method.get();
        match asked {
            ScanMethod::GetAllRecords | ScanMethod::Auto if inner.has_get_all_records => {
                ScanMethod::GetAllRecords
            }
            ScanMethod::Cursor => ScanMethod::Cursor,
            _ if reverse || source == Source::Entries => ScanMethod::Cursor,
            _ => ScanMethod::GetAll,
        }
    }

    async fn scan_cursor(
        &self,
        source: Source,
        mut range: KeyRange,
        direction: IdbCursorDirection,
        limit: usize,
    ) -> Result<Vec<Scanned>, JsValue> {
        let store = match source {
            Source::Store(s) => s,
            Source::Entries => Store::Documents,
        };
        let mut rows: Vec<Scanned> = Vec::new();
        'resume: while !range.is_empty() {
            let query = idb_range(&range)?;
            let events = RequestEvents::new(self.request(store, |s| {
                on_source(
                    s,
                    source,
                    |s| s.open_cursor_with_range_and_direction(&query, direction),
                    |i| i.open_cursor_with_range_and_direction(&query, direction),
                )
            })?);
            loop {
                let cursor = events.next().await?;
                if cursor.is_null() {
                    break 'resume;
                }
                let cursor: IdbCursorWithValue = cursor.unchecked_into();
                let key = js::to_bytes(&cursor.key()?);
                let value = cursor.value()?;
                let mut doc = Vec::new();
                if source == Source::Entries {
                    doc = js::to_bytes(&cursor.primary_key()?);
                    let mut prefetched = self.prefetched.borrow_mut();
                    if prefetched.len() < PREFETCH_CAP {
                        prefetched.insert(doc.clone(), value.clone());
                    }
                }
                rows.push((key, value, doc));
                if rows.len() >= limit {
                    break 'resume;
                }
                if let Err(e) = cursor.continue_() {
                    if !js::is_inactive(&e) {
                        return Err(e);
                    }
                    let last = rows.last().expect("a row was just pushed").0.clone();
                    if direction == IdbCursorDirection::Prev {
                        range.end = Some(last);
                    } else {
                        range.start = last;
                        range.start.push(0);
                    }
                    continue 'resume;
                }
            }
        }
        Ok(rows)
    }

    fn kv_error(&self, what: &str, e: &JsValue) -> KvError {
        KvError(self.store.error(what, e).message)
    }
}

/// The rows of an `entries` scan that found the documents `found` (their keys, in scan
/// order: a document once per entry of it in `range`), each entry's key taken from the
/// document's index keys in the memo; `None` if one is not held with them, or they do not
/// account for the scan (then it is made the usual way).
fn remembered_rows(
    memo: &super::memo::Memo,
    generation: u64,
    found: &Array,
    range: &KeyRange,
    reverse: bool,
) -> Option<Vec<Scanned>> {
    let mut seen: HashMap<Vec<u8>, usize> = HashMap::new();
    let mut rows: Vec<Scanned> = Vec::with_capacity(found.length() as usize);
    for key in found.iter() {
        let key = js::to_bytes(&key);
        let keys = memo.visible(&key, generation)?.index_keys.as_ref()?;
        let mut in_range: Vec<&Vec<u8>> = keys.iter().filter(|k| range.contains(k)).collect();
        hearth_core::sort::sort(&mut in_range);
        if reverse {
            in_range.reverse();
        }
        // A document with one entry in the range is found once (found twice, its rows would
        // not be strictly ordered below); only those with more are counted.
        let entry = if in_range.len() == 1 {
            in_range[0]
        } else {
            let nth = seen.entry(key.clone()).or_insert(0);
            *nth += 1;
            in_range.get(*nth - 1).copied()?
        };
        let ordered = rows.last().is_none_or(
            |(last, _, _)| {
                if reverse {
                    entry < last
                } else {
                    entry > last
                }
            },
        );
        if !ordered {
            return None;
        }
        rows.push((entry.clone(), JsValue::UNDEFINED, key));
    }
    Some(rows)
}

/// `[start, end)` as an `IDBKeyRange` over binary keys (`range` is not empty).
fn idb_range(range: &KeyRange) -> Result<JsValue, JsValue> {
    let start = js::bytes(&range.start);
    let range = match &range.end {
        None => IdbKeyRange::lower_bound(&start)?,
        Some(end) => {
            IdbKeyRange::bound_with_lower_open_and_upper_open(&start, &js::bytes(end), false, true)?
        }
    };
    Ok(range.into())
}

/// The bytes of a value read from `store` (`documents`: the record's encoded document), or
/// `None` for a missing one.
fn stored_value(store: Store, value: &JsValue) -> Option<Vec<u8>> {
    if value.is_undefined() {
        return None;
    }
    Some(if store == Store::Documents {
        js::record_document(value)
    } else {
        js::to_bytes(value)
    })
}

impl KvRead for IdbRead {
    async fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        match table {
            Table::Documents => self
                .get_raw(Store::Documents, key)
                .await
                .map_err(|e| self.kv_error("reading `documents`", &e)),
            // The index holds no values: an entry's presence is all there is to read.
            Table::Index => {
                let range = KeyRange {
                    start: key.to_vec(),
                    end: Some([key, &[0]].concat()),
                };
                let rows = self
                    .scan_rows(Source::Entries, &range, false, 1)
                    .await
                    .map_err(|e| self.kv_error("reading `documents.entries`", &e))?;
                Ok(rows.into_iter().next().map(|(_, v)| v))
            }
        }
    }

    async fn get_many(
        &self,
        table: Table,
        keys: &[Vec<u8>],
    ) -> Result<Vec<Option<Vec<u8>>>, KvError> {
        match table {
            Table::Documents => self
                .get_many_raw(Store::Documents, keys)
                .await
                .map_err(|e| self.kv_error("reading `documents`", &e)),
            Table::Index => {
                let mut out = Vec::with_capacity(keys.len());
                for k in keys {
                    out.push(self.get(table, k).await?);
                }
                Ok(out)
            }
        }
    }

    /// Documents the memo holds come decoded from it; the records of this read's own
    /// `entries` scan, and the rest, are read and decoded.
    async fn get_documents(&self, keys: &[Vec<u8>]) -> Result<Vec<StoredDocument>, KvError> {
        let mut out: Vec<Option<StoredDocument>> = keys
            .iter()
            .map(|k| {
                if self.prefetched.borrow().contains_key(k) {
                    return None;
                }
                self.remembered_document(k).map(|d| Some(Ok(d)))
            })
            .collect();
        let missing: Vec<usize> = (0..keys.len()).filter(|&i| out[i].is_none()).collect();
        if !missing.is_empty() {
            let wanted: Vec<Vec<u8>> = missing.iter().map(|&i| keys[i].clone()).collect();
            let values = self
                .get_many_raw(Store::Documents, &wanted)
                .await
                .map_err(|e| self.kv_error("reading `documents`", &e))?;
            for (i, value) in missing.into_iter().zip(values) {
                out[i] = Some(value.map(|bytes| decode_document(&bytes)));
            }
        }
        Ok(out.into_iter().flatten().collect())
    }

    async fn scan(
        &self,
        table: Table,
        range: &KeyRange,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<Row>, KvError> {
        let source = match table {
            Table::Documents => Source::Store(Store::Documents),
            Table::Index => Source::Entries,
        };
        self.scan_rows(source, range, reverse, limit)
            .await
            .map_err(|e| self.kv_error(&format!("scanning `{}`", source.name()), &e))
    }
}
