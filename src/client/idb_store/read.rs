//! [`IdbRead`]: the core's [`KvRead`] over IndexedDB, plus reads of `remote` and `meta`.

use std::cell::RefCell;

use js_sys::Array;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::{
    IdbCursorDirection, IdbCursorWithValue, IdbKeyRange, IdbObjectStore, IdbTransaction,
};

use super::events::RequestEvents;
use super::{js, IdbStore, Store};
use crate::client::error::ClientError;
use crate::core::kv::{KeyRange, KvError, KvRead, Row, Table};

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

/// Reads over a readonly transaction on `documents`, `index`, `remote` and `meta`.
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
pub struct IdbRead {
    store: IdbStore,
    tx: RefCell<IdbTransaction>,
}

impl IdbRead {
    pub(super) fn new(store: IdbStore, tx: IdbTransaction) -> IdbRead {
        IdbRead {
            store,
            tx: RefCell::new(tx),
        }
    }

    /// The value of `key` in `remote`: the server's version of a document with pending writes.
    pub async fn get_remote(&self, key: &[u8]) -> Result<Option<Vec<u8>>, ClientError> {
        self.get_raw(Store::Remote, &js::bytes(key))
            .await
            .map_err(|e| self.store.error("reading `remote`", &e))
    }

    /// The value of `key` in `meta`.
    pub async fn get_meta(&self, key: &str) -> Result<Option<Vec<u8>>, ClientError> {
        self.get_raw(Store::Meta, &JsValue::from_str(key))
            .await
            .map_err(|e| self.store.error("reading `meta`", &e))
    }

    /// Makes a request with `make` on the held transaction, or on a fresh one (then held)
    /// when the held one is no longer active.
    fn request<R>(
        &self,
        store: Store,
        make: impl Fn(&IdbObjectStore) -> Result<R, JsValue>,
    ) -> Result<R, JsValue> {
        let held = self.tx.borrow().clone();
        match held.object_store(store.name()).and_then(|s| make(&s)) {
            Err(e) if js::is_inactive(&e) => {}
            made => return made,
        }
        let tx = self.store.read_tx()?;
        let made = tx.object_store(store.name()).and_then(|s| make(&s))?;
        *self.tx.borrow_mut() = tx;
        Ok(made)
    }

    /// Several gets on one transaction: every request is made before the first is awaited,
    /// so IndexedDB serves them back to back.
    pub(super) async fn get_many_raw(
        &self,
        store: Store,
        keys: &[Vec<u8>],
    ) -> Result<Vec<Option<Vec<u8>>>, JsValue> {
        let mut pending = Vec::with_capacity(keys.len());
        for k in keys {
            let key = js::bytes(k);
            pending.push(RequestEvents::new(self.request(store, |s| s.get(&key))?));
        }
        let mut out = Vec::with_capacity(keys.len());
        for events in pending {
            let value = events.next().await?;
            out.push((!value.is_undefined()).then(|| js::to_bytes(&value)));
        }
        Ok(out)
    }

    async fn get_raw(&self, store: Store, key: &JsValue) -> Result<Option<Vec<u8>>, JsValue> {
        let events = RequestEvents::new(self.request(store, |s| s.get(key))?);
        let value = events.next().await?;
        Ok((!value.is_undefined()).then(|| js::to_bytes(&value)))
    }

    pub(super) async fn scan_raw(
        &self,
        store: Store,
        range: &KeyRange,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<Row>, JsValue> {
        if limit == 0 || range.is_empty() {
            return Ok(Vec::new());
        }
        let count = u32::try_from(limit).unwrap_or(u32::MAX);
        let direction = if reverse {
            IdbCursorDirection::Prev
        } else {
            IdbCursorDirection::Next
        };
        match self.method(reverse) {
            ScanMethod::GetAllRecords => {
                let options = js::object(&[
                    ("query", &idb_range(range)?),
                    ("count", &JsValue::from(count)),
                    ("direction", &JsValue::from(direction)),
                ]);
                let events =
                    RequestEvents::new(self.request(store, |s| js::get_all_records(s, &options))?);
                let records: Array = events.next().await?.unchecked_into();
                Ok(records
                    .iter()
                    .map(|r| {
                        let r: js::IdbRecord = r.unchecked_into();
                        (js::to_bytes(&r.key()), js::to_bytes(&r.value()))
                    })
                    .collect())
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
                    .map(|(k, v)| (js::to_bytes(&k), js::to_bytes(&v)))
                    .collect())
            }
            ScanMethod::Cursor | ScanMethod::Auto => {
                self.scan_cursor(store, range.clone(), direction, limit)
                    .await
            }
        }
    }

    /// The method for a scan in this direction: what was asked for, or what the browser has.
    fn method(&self, reverse: bool) -> ScanMethod {
        let inner = &self.store.inner;
        let asked = inner.scan_method.get();
        match asked {
            ScanMethod::GetAllRecords | ScanMethod::Auto if inner.has_get_all_records => {
                ScanMethod::GetAllRecords
            }
            ScanMethod::Cursor => ScanMethod::Cursor,
            _ if reverse => ScanMethod::Cursor,
            _ => ScanMethod::GetAll,
        }
    }

    async fn scan_cursor(
        &self,
        store: Store,
        mut range: KeyRange,
        direction: IdbCursorDirection,
        limit: usize,
    ) -> Result<Vec<Row>, JsValue> {
        let mut rows: Vec<Row> = Vec::new();
        'resume: while !range.is_empty() {
            let query = idb_range(&range)?;
            let events = RequestEvents::new(self.request(store, |s| {
                s.open_cursor_with_range_and_direction(&query, direction)
            })?);
            loop {
                let cursor = events.next().await?;
                if cursor.is_null() {
                    break 'resume;
                }
                let cursor: IdbCursorWithValue = cursor.unchecked_into();
                let key = js::to_bytes(&cursor.key()?);
                rows.push((key, js::to_bytes(&cursor.value()?)));
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

fn table_store(table: Table) -> Store {
    match table {
        Table::Documents => Store::Documents,
        Table::Index => Store::Index,
    }
}

impl KvRead for IdbRead {
    async fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        let store = table_store(table);
        self.get_raw(store, &js::bytes(key))
            .await
            .map_err(|e| self.kv_error(&format!("reading `{}`", store.name()), &e))
    }

    async fn get_many(
        &self,
        table: Table,
        keys: &[Vec<u8>],
    ) -> Result<Vec<Option<Vec<u8>>>, KvError> {
        let store = table_store(table);
        self.get_many_raw(store, keys)
            .await
            .map_err(|e| self.kv_error(&format!("reading `{}`", store.name()), &e))
    }

    async fn scan(
        &self,
        table: Table,
        range: &KeyRange,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<Row>, KvError> {
        let store = table_store(table);
        self.scan_raw(store, range, reverse, limit)
            .await
            .map_err(|e| self.kv_error(&format!("scanning `{}`", store.name()), &e))
    }
}
