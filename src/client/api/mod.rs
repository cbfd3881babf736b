//! The JavaScript API (DESIGN.md): `Hearth`, references, queries, batches, transactions and
//! snapshots, in Firestore's namespaced style so Firestore code runs with only its
//! initialisation changed.

pub(crate) mod db;
mod listen;
pub(crate) mod local;
mod query;
mod reference;
mod snapshot;
mod write;

use hearth_core::error::ErrorCode;
use std::collections::HashMap;
use std::rc::Rc;

use js_sys::{Function, Promise, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;

pub use query::{AggregateField, CollectionReference, Filter, Query};
pub use reference::DocumentReference;
pub use snapshot::{AggregateQuerySnapshot, DocumentSnapshot, QuerySnapshot, SnapshotMetadata};
pub use write::{Transaction, WriteBatch};

use super::engine::EngineEvent;
use super::error::ClientError;
pub use db::Db;
use hearth_core::index::config::{parse_index_file, IndexFile};
use hearth_core::path::{CollectionPath, DocumentName};

/// What links an engine with the origin's other engines (contexts without Web Locks): the
/// channel and its handler.
pub(crate) type Tabs = (
    web_sys::BroadcastChannel,
    Closure<dyn FnMut(web_sys::MessageEvent)>,
    u64,
);

thread_local! {
    /// The databases open in this context, by name, with how many instances hold each.
    static OPEN: std::cell::RefCell<HashMap<String, u32>> = std::cell::RefCell::new(HashMap::new());
    /// Every instance open in this context, held until its `close()`: as a Firestore
    /// instance lives until `terminate()`, an instance the app no longer references keeps
    /// its listeners, its queued writes and its relay connection (the JS object's garbage
    /// collection must not end them silently, nor leave the socket calling freed handlers).
    static LIVE: std::cell::RefCell<Vec<Rc<Db>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Counts an instance of database `name` opened (`1`) or closed (`-1`) in this context.
fn opened(name: &str, delta: i32) {
    OPEN.with(|o| {
        let mut o = o.borrow_mut();
        let n = o.entry(name.to_owned()).or_insert(0);
        *n = n.saturating_add_signed(delta);
        if *n == 0 {
            o.remove(name);
        }
    });
}

/// Links an engine with the other engines of its origin: a local change here is re-read
/// there from IndexedDB and raised to their listeners, and the relay's answer to a batch
/// reaches whichever context waits on it. With one engine per origin there are none, but
/// contexts without Web Locks (or of older builds) may run their own.
fn link_tabs(db: &Rc<Db>) {
    let Some(local) = db.local() else { return };
    let engine = local.engine;
    let Ok(channel) = web_sys::BroadcastChannel::new(&format!("hearth:{}", engine.name)) else {
        return;
    };
    let weak = Rc::downgrade(&engine);
    let on_message =
        Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |e: web_sys::MessageEvent| {
            let Some(engine) = weak.upgrade() else { return };
            // Another engine writes this database (a context without Web Locks, or a
            // build from before one engine per origin): what this one remembers of
            // its documents may be out of date from now on.
            engine.store.forget_memory();
            let data = e.data();
            // Another context took the relay's answer to a batch this one may be
            // waiting on (`tabs::decode_settled`).
            if let Some((id, result)) = super::tabs::decode_settled(&data) {
                engine.settle_waiters(id, result);
                return;
            }
            let Ok(list) = data.dyn_into::<js_sys::Array>() else {
                return;
            };
            let names: Vec<DocumentName> = list
                .iter()
                .filter_map(|v| v.as_string())
                .filter_map(|p| DocumentName::parse(&p).ok())
                .collect();
            wasm_bindgen_futures::spawn_local(async move { engine.external_change(names).await });
        });
    channel.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    let post = channel.clone();
    let subscription = engine.events.subscribe(move |event| match event {
        EngineEvent::LocalChange(names) => {
            let list: js_sys::Array = names
                .iter()
                .map(|n| JsValue::from_str(&n.to_string()))
                .collect();
            let _ = post.post_message(&list);
        }
        EngineEvent::Settled(id, result) => {
            let _ = post.post_message(&super::tabs::encode_settled(*id, result));
        }
        _ => {}
    });
    *db.tabs.borrow_mut() = Some((channel, on_message, subscription));
}

fn unlink_tabs(db: &Db) {
    let tabs = db.tabs.borrow_mut().take();
    if let (Some(local), Some((_, _, subscription))) = (db.local(), &tabs) {
        local.engine.events.unsubscribe(*subscription);
    }
    if let Some((c, _, _)) = tabs {
        c.set_onmessage(None);
        c.close();
    }
}

/// The `source` of a `get(options)` call, if any.
pub(crate) fn source_option(options: &JsValue) -> Option<String> {
    if options.is_object() {
        Reflect::get(options, &"source".into())
            .ok()
            .and_then(|v| v.as_string())
    } else {
        None
    }
}

fn opt(options: &JsValue, key: &str) -> Option<JsValue> {
    if options.is_undefined() || options.is_null() {
        return None;
    }
    Reflect::get(options, &key.into())
        .ok()
        .filter(|v| !v.is_undefined() && !v.is_null())
}

/// How long after open the first cache collection runs.
const FIRST_COLLECTION_MS: f64 = 1000.0;

/// The `cacheSizeBytes` option: bytes (at least 1 MiB), `-1` for no limit; 40 MiB if absent.
fn cache_budget(v: Option<JsValue>) -> Result<Option<u64>, ClientError> {
    let Some(v) = v else {
        return Ok(Some(crate::client::cache::DEFAULT_BUDGET));
    };
    match v.as_f64() {
        Some(-1.0) => Ok(None),
        Some(n) if n.fract() == 0.0 && n >= crate::client::cache::MIN_BUDGET as f64 => {
            Ok(Some(n.min(u64::MAX as f64) as u64))
        }
        _ => Err(ClientError::invalid(format!(
            "cacheSizeBytes must be a whole number of bytes of at least {} (1 MiB), or -1 \
             (Hearth.CACHE_SIZE_UNLIMITED) for no limit",
            crate::client::cache::MIN_BUDGET
        ))),
    }
}

/// The relay's WebSocket URL: `ws://host:port` gets the protocol path appended.
fn ws_url(relay: &str) -> String {
    let trimmed = relay.trim_end_matches('/');
    let after_scheme = trimmed.split_once("://").map_or(trimmed, |(_, r)| r);
    if after_scheme.contains('/') {
        trimmed.to_owned()
    } else {
        format!("{trimmed}/v1/ws")
    }
}

/// A Hearth database handle.
#[wasm_bindgen]
pub struct Hearth {
    /// The open database every reference and snapshot made from this handle shares.
    db: Rc<Db>,
}

#[wasm_bindgen]
impl Hearth {
    /// `cacheSizeBytes`: `-1`, for no limit on the local cache.
    #[wasm_bindgen(getter = CACHE_SIZE_UNLIMITED)]
    pub fn cache_size_unlimited() -> f64 {
        -1.0
    }

    /// Opens a database: `{ name, relay?, token?, indexes?, cacheSizeBytes? }`. `relay` is the relay's
    /// address (`ws://127.0.0.1:8787`); without it the database is local only. `token` is a
    /// string or a function returning one (or a promise of one), called on every connect.
    /// `indexes` is a `firestore.indexes.json` object or text. `cacheSizeBytes` bounds the
    /// local cache of a database with a relay (default 40 MiB, at least 1 MiB, `-1` for no
    /// limit): the least recently written documents no listener, pending write or recent
    /// read holds are evicted (they stay on the relay).
    pub fn open(options: JsValue) -> Promise {
        future_to_promise(async move {
            console_error_panic_hook::set_once();
            let name = opt(&options, "name")
                .and_then(|v| v.as_string())
                .unwrap_or_else(|| "default".into());
            if name.is_empty()
                || name.len() > 64
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            {
                return Err(ClientError::invalid(format!(
                    "invalid database name `{name}`: use 1 to 64 of [A-Za-z0-9_-]"
                ))
                .into());
            }
            let indexes: Option<IndexFile> = match opt(&options, "indexes") {
                None => None,
                Some(v) => {
                    let text = match v.as_string() {
                        Some(s) => s,
                        None => js_sys::JSON::stringify(&v).map(String::from).map_err(|_| {
                            ClientError::invalid(
                                "indexes must be a firestore.indexes.json object or text",
                            )
                        })?,
                    };
                    Some(parse_index_file(&text).map_err(|e| ClientError::invalid(e.to_string()))?)
                }
            };
            let cache_budget = cache_budget(opt(&options, "cacheSizeBytes"))?;
            let relay = opt(&options, "relay").and_then(|v| v.as_string());
            let (token, provider) = match opt(&options, "token") {
                Some(t) if t.is_function() => (None, Some(t.unchecked_into::<Function>())),
                Some(t) => (t.as_string(), None),
                None => (None, None),
            };
            let options = db::Options {
                indexes,
                relay: relay.map(|r| ws_url(&r)),
                token,
                provider,
                cache_budget,
            };
            let db = Db::open(name.clone(), options).await?;
            opened(&name, 1);
            LIVE.with(|l| l.borrow_mut().push(db.clone()));
            if let Some(local) = db.local().filter(|l| l.engine.cache.budget().is_some()) {
                // The first collection measures what earlier sessions left.
                let engine = local.engine;
                wasm_bindgen_futures::spawn_local(async move {
                    write::sleep(FIRST_COLLECTION_MS).await;
                    let _ = engine.collect_garbage().await;
                });
            }
            // References read back from documents become DocumentReferences of this database.
            let weak = Rc::downgrade(&db);
            let factory = Closure::<dyn Fn(String) -> JsValue>::new(move |path: String| {
                match (weak.upgrade(), DocumentName::parse(&path)) {
                    (Some(db), Ok(name)) => DocumentReference::new(&db, name).into(),
                    _ => JsValue::from_str(&path),
                }
            });
            super::convert::set_reference_factory(factory.into_js_value().unchecked_into());
            Ok(Hearth { db }.into())
        })
    }

    pub fn collection(&self, path: &str) -> Result<CollectionReference, JsValue> {
        let p = CollectionPath::parse(path).map_err(ClientError::from)?;
        Ok(CollectionReference::new(&self.db, p))
    }

    pub fn doc(&self, path: &str) -> Result<DocumentReference, JsValue> {
        let n = DocumentName::parse(path).map_err(ClientError::from)?;
        Ok(DocumentReference::new(&self.db, n))
    }

    #[wasm_bindgen(js_name = collectionGroup)]
    pub fn collection_group(&self, id: &str) -> Result<Query, JsValue> {
        if id.is_empty() || id.contains('/') {
            return Err(ClientError::invalid(format!(
                "invalid collection group id `{id}`: it must be non-empty and contain no `/`"
            ))
            .into());
        }
        Ok(Query::from_core(
            &self.db,
            hearth_core::query::model::Query::collection_group(id),
        ))
    }

    pub fn batch(&self) -> WriteBatch {
        WriteBatch::new(&self.db)
    }

    /// Runs `update(transaction)` with optimistic concurrency: its reads are revalidated at
    /// commit and the whole function is retried (up to 5 attempts) when one changed.
    #[wasm_bindgen(js_name = runTransaction)]
    pub fn run_transaction(&self, update: Function) -> Promise {
        write::run_transaction(self.db.clone(), update)
    }

    #[wasm_bindgen(js_name = enableNetwork)]
    pub fn enable_network(&self) -> Promise {
        self.db.set_network(true);
        Promise::resolve(&JsValue::UNDEFINED)
    }

    /// Replaces the token sent to the relay (sign-in, sign-out, a token the app refreshed
    /// itself): sent at once on an open connection; after the relay refused the previous
    /// one (`unauthenticated`), connects again with it. An empty string is no token.
    #[wasm_bindgen(js_name = setToken)]
    pub fn set_token(&self, token: String) -> Promise {
        self.db.set_token(token);
        Promise::resolve(&JsValue::UNDEFINED)
    }

    #[wasm_bindgen(js_name = disableNetwork)]
    pub fn disable_network(&self) -> Promise {
        self.db.set_network(false);
        Promise::resolve(&JsValue::UNDEFINED)
    }

    /// Resolves when every write made before the call is acknowledged by the relay.
    #[wasm_bindgen(js_name = waitForPendingWrites)]
    pub fn wait_for_pending_writes(&self) -> Promise {
        let db = self.db.clone();
        Promise::new(&mut |resolve, reject| {
            db.wait_for_pending(Box::new(move |r| {
                let _ = match r {
                    Ok(_) => resolve.call0(&JsValue::NULL),
                    Err(e) => reject.call1(&JsValue::NULL, &e.to_js()),
                };
            }));
        })
    }

    /// Closes the connection and IndexedDB. Pending writes stay queued for the next open.
    /// Where this context ran the origin's engine, another open context takes it over.
    pub fn close(&self) -> Promise {
        if !self.db.closed.replace(true) {
            opened(&self.db.name, -1);
            LIVE.with(|l| l.borrow_mut().retain(|d| !Rc::ptr_eq(d, &self.db)));
        }
        unlink_tabs(&self.db);
        let ended = self.db.close();
        // Resolves once the database's Web Locks are let go (at most a second: a lock the
        // browser never granted is nothing to wait for), so that `clearPersistence()` right
        // after finds it closed.
        future_to_promise(async move {
            if let Some(ended) = ended {
                let timeout = super::js::timer(1000.0);
                let first = Promise::race(&js_sys::Array::of2(&ended, &timeout));
                let _ = wasm_bindgen_futures::JsFuture::from(first).await;
            }
            Ok(JsValue::UNDEFINED)
        })
    }

    /// Whether this context runs the origin's engine for this database (it leads; or it
    /// has no Web Locks, so every context runs its own).
    #[wasm_bindgen(getter, js_name = isLeader)]
    pub fn is_leader(&self) -> bool {
        self.db.is_leader()
    }

    /// Deletes the local data of database `name` (it must be closed in every tab). Fails
    /// with `failed-precondition` while this context has it open, as Firestore's
    /// `clearIndexedDbPersistence()` does before `terminate()`.
    #[wasm_bindgen(js_name = clearPersistence)]
    pub fn clear_persistence(name: String) -> Promise {
        future_to_promise(async move {
            if OPEN.with(|o| o.borrow().contains_key(&name)) {
                return Err(ClientError::new(
                    ErrorCode::FailedPrecondition,
                    format!(
                        "the database {name:?} is open here: close() it before clearPersistence()"
                    ),
                )
                .into());
            }
            // Another tab's open database may hold writes no relay has yet: refused, as
            // Firestore's clearIndexedDbPersistence() is while an instance runs.
            if super::cache::holders(&name).await.is_some_and(|n| n > 0) {
                return Err(ClientError::new(
                    ErrorCode::FailedPrecondition,
                    format!(
                        "the database {name:?} is open in another tab or worker of this app: \
                         close() it there before clearPersistence()"
                    ),
                )
                .into());
            }
            super::idb_store::IdbStore::delete(&name).await?;
            Ok(JsValue::UNDEFINED)
        })
    }

    /// The bytes the local cache of documents takes now (their keys, encoded documents and
    /// index entries), measured by reading it. The budget (`cacheSizeBytes`) bounds this.
    #[wasm_bindgen(js_name = cacheSizeBytes)]
    pub fn cache_size_bytes(&self) -> Promise {
        let db = self.db.clone();
        future_to_promise(async move {
            let bytes = db.cache_size().await?;
            Ok(JsValue::from_f64(bytes as f64))
        })
    }

    /// The id this client uses towards the relay (stable across reloads).
    #[wasm_bindgen(getter, js_name = clientId)]
    pub fn client_id(&self) -> String {
        self.db.client_id()
    }
}
