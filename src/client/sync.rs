//! The sync layer: one WebSocket to `hearth-relay` per open database, reconnection with
//! exponential backoff and jitter, heartbeat-based dead-link detection, listen resumption from
//! stored versions, the write queue flushed in order with idempotent batch ids, and reads
//! that resolve documents a listen dropped ("limbo" documents).
//!
//! Architecture invariant: the WebSocket's event closures are owned by the `Sync` value and
//! dropped with it; none is leaked with `forget()`.

use hearth_core::error::ErrorCode;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, HashMap};
use std::rc::{Rc, Weak};

use js_sys::{Function, Reflect, Uint8Array};
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::{BinaryType, MessageEvent, WebSocket};

use super::engine::{Batch, Engine};
use super::error::ClientError;
use super::idb_store::{Key, Store, WriteOp};
use hearth_core::document::Document;
use hearth_core::path::DocumentName;
use hearth_core::protocol::codec::{decode_server, encode_client, encode_query};
use hearth_core::protocol::{
    ClientMessage, DocumentChange, ServerMessage, TargetChangeKind, PROTOCOL_VERSION,
};
use hearth_core::query::model::Query;

type Reply = Box<dyn FnOnce(Result<ServerMessage, ClientError>)>;

struct Target {
    listener: u64,
    query: Query,
    key: Vec<u8>,
    resume: Option<u64>,
    /// Names the relay last said are in the target's result.
    docs: BTreeSet<DocumentName>,
    /// Changes received since the last Snapshot.
    buffered: Vec<(TargetChangeKind, Vec<DocumentChange>)>,
    /// The relay answered this target's Listen on the current connection.
    answered: bool,
    /// This target's Listen went out on the current connection (sent once per connection: a
    /// second Listen of one target is refused by the relay).
    sent: bool,
}

/// Calls the global `setTimeout` (works in pages and workers).
fn set_timeout(f: &Function, ms: f64) -> Option<f64> {
    let global = js_sys::global();
    let st: Function = Reflect::get(&global, &"setTimeout".into())
        .ok()?
        .dyn_into()
        .ok()?;
    st.call2(&global, f, &JsValue::from_f64(ms)).ok()?.as_f64()
}

fn clear_timeout(id: f64) {
    let global = js_sys::global();
    if let Ok(f) =
        Reflect::get(&global, &"clearTimeout".into()).and_then(|f| f.dyn_into::<Function>())
    {
        let _ = f.call1(&global, &JsValue::from_f64(id));
    }
}

/// The connection state of one database.
pub struct Sync {
    engine: Weak<Engine>,
    url: String,
    token: RefCell<String>,
    token_provider: Option<Function>,
    ws: RefCell<Option<WebSocket>>,
    /// Event handlers of the current socket, dropped with it.
    handlers: RefCell<Vec<Closure<dyn FnMut(JsValue)>>>,
    timer: RefCell<Option<(Closure<dyn FnMut()>, f64)>>,
    /// The timer that refreshes the token before it expires (with a token callback).
    auth_timer: RefCell<Option<(Closure<dyn FnMut()>, f64)>>,
    open: Cell<bool>,
    enabled: Cell<bool>,
    closed: Cell<bool>,
    backoff_ms: Cell<f64>,
    heartbeat_ms: Cell<f64>,
    last_seen: Cell<f64>,
    next_request: Cell<u64>,
    next_target: Cell<u32>,
    targets: RefCell<HashMap<u32, Target>>,
    by_listener: RefCell<HashMap<u64, u32>>,
    replies: RefCell<HashMap<u64, Reply>>,
    /// Write request id → batch id, for refusals.
    writes: RefCell<HashMap<u64, u64>>,
    /// Resume versions loaded from IndexedDB, by encoded query.
    stored_resume: RefCell<HashMap<Vec<u8>, u64>>,
    /// Resolvers of requests waiting for the connection to open.
    open_waiters: RefCell<Vec<Function>>,
    /// The global `online`/`offline` handlers, alive as long as the database is open.
    online_handlers: RefCell<Vec<Closure<dyn FnMut(JsValue)>>>,
}

impl Sync {
    pub async fn start(
        engine: &Rc<Engine>,
        url: String,
        token: Option<String>,
        token_provider: Option<Function>,
    ) -> Result<Rc<Sync>, ClientError> {
        let mut stored = HashMap::new();
        for (k, v) in engine.store.all(Store::Targets).await? {
            if v.len() >= 8 {
                stored.insert(k, u64::from_be_bytes(v[..8].try_into().expect("8 bytes")));
            }
        }
        let sync = Rc::new(Sync {
            engine: Rc::downgrade(engine),
            url,
            token: RefCell::new(token.unwrap_or_default()),
            token_provider,
            ws: RefCell::new(None),
            handlers: RefCell::new(Vec::new()),
            timer: RefCell::new(None),
            auth_timer: RefCell::new(None),
            open: Cell::new(false),
            enabled: Cell::new(true),
            closed: Cell::new(false),
            backoff_ms: Cell::new(250.0),
            heartbeat_ms: Cell::new(5000.0),
            last_seen: Cell::new(js_sys::Date::now()),
            next_request: Cell::new(1),
            next_target: Cell::new(1),
            targets: RefCell::new(HashMap::new()),
            by_listener: RefCell::new(HashMap::new()),
            replies: RefCell::new(HashMap::new()),
            writes: RefCell::new(HashMap::new()),
            stored_resume: RefCell::new(stored),
            online_handlers: RefCell::new(Vec::new()),
            open_waiters: RefCell::new(Vec::new()),
        });
        // Hooks from the engine into the sync layer.
        let w = Rc::downgrade(&sync);
        *engine.on_batch.borrow_mut() = Some(Box::new(move |b: &Batch| {
            if let Some(s) = w.upgrade() {
                s.send_batch(b);
            }
        }));
        let w = Rc::downgrade(&sync);
        *engine.on_listen.borrow_mut() = Some(Box::new(move |id, q: &Query| {
            if let Some(s) = w.upgrade() {
                s.listen(id, q.clone());
            }
        }));
        let w = Rc::downgrade(&sync);
        *engine.on_unlisten.borrow_mut() = Some(Box::new(move |id| {
            if let Some(s) = w.upgrade() {
                s.unlisten(id);
            }
        }));
        let w = Rc::downgrade(&sync);
        *engine.on_evicted.borrow_mut() = Some(Box::new(move || {
            if let Some(s) = w.upgrade() {
                s.forget_resume_points();
            }
        }));
        Self::install_online_events(&sync);
        sync.connect();
        Ok(sync)
    }

    /// After an eviction the cache may lack documents of targets not being listened to:
    /// their resume versions go (in memory and stored), so they are fetched whole next time.
    /// Listened targets keep theirs: their documents are held.
    fn forget_resume_points(&self) {
        let active: BTreeSet<Vec<u8>> = self
            .targets
            .borrow()
            .values()
            .map(|t| t.key.clone())
            .collect();
        self.stored_resume.borrow_mut().clear();
        let Some(engine) = self.engine() else { return };
        wasm_bindgen_futures::spawn_local(async move {
            let Ok(rows) = engine.store.all(Store::Targets).await else {
                return;
            };
            let ops: Vec<WriteOp> = rows
                .into_iter()
                .filter(|(k, _)| !active.contains(k))
                .map(|(k, _)| WriteOp::Delete {
                    store: Store::Targets,
                    key: Key::Bytes(k),
                })
                .collect();
            let _ = engine.store.write(ops).await;
        });
    }

    fn install_online_events(sync: &Rc<Sync>) {
        let global = js_sys::global();
        let add: Option<Function> = Reflect::get(&global, &"addEventListener".into())
            .ok()
            .and_then(|f| f.dyn_into().ok());
        let Some(add) = add else { return };
        let w = Rc::downgrade(sync);
        let on_online = Closure::<dyn FnMut(JsValue)>::new(move |_| {
            if let Some(s) = w.upgrade() {
                s.backoff_ms.set(250.0);
                if !s.open.get() {
                    s.connect();
                }
            }
        });
        let _ = add.call2(&global, &"online".into(), on_online.as_ref());
        let w = Rc::downgrade(sync);
        let on_offline = Closure::<dyn FnMut(JsValue)>::new(move |_| {
            if let Some(s) = w.upgrade() {
                s.drop_socket();
            }
        });
        let _ = add.call2(&global, &"offline".into(), on_offline.as_ref());
        // These two live as long as the database is open; they are kept apart from the
        // socket handlers, which are replaced on every reconnect.
        sync.online_handlers
            .borrow_mut()
            .extend([on_online, on_offline]);
    }

    fn engine(&self) -> Option<Rc<Engine>> {
        self.engine.upgrade()
    }

    pub fn is_open(&self) -> bool {
        self.open.get()
    }

    fn send(&self, m: &ClientMessage) -> bool {
        if !self.open.get() {
            return false;
        }
        let bytes = encode_client(m);
        match self.ws.borrow().as_ref() {
            Some(ws) => ws.send_with_u8_array(&bytes).is_ok(),
            None => false,
        }
    }

    fn connect(self: &Rc<Self>) {
        if self.closed.get() || !self.enabled.get() || self.ws.borrow().is_some() {
            return;
        }
        let ws = match WebSocket::new(&self.url) {
            Ok(ws) => ws,
            Err(_) => {
                self.schedule_reconnect();
                return;
            }
        };
        ws.set_binary_type(BinaryType::Arraybuffer);
        let mut handlers = Vec::new();
        let w = Rc::downgrade(self);
        let onopen = Closure::<dyn FnMut(JsValue)>::new(move |_| {
            if let Some(s) = w.upgrade() {
                wasm_bindgen_futures::spawn_local(async move { s.on_open().await });
            }
        });
        ws.set_onopen(Some(onopen.as_ref().unchecked_ref()));
        handlers.push(onopen);
        let w = Rc::downgrade(self);
        let onmessage = Closure::<dyn FnMut(JsValue)>::new(move |e: JsValue| {
            let Some(s) = w.upgrade() else { return };
            let Ok(e) = e.dyn_into::<MessageEvent>() else {
                return;
            };
            let bytes = Uint8Array::new(&e.data()).to_vec();
            s.last_seen.set(js_sys::Date::now());
            match decode_server(&bytes) {
                Ok(m) => s.clone().on_message(m),
                Err(_) => s.drop_socket(),
            }
        });
        ws.set_onmessage(Some(onmessage.as_ref().unchecked_ref()));
        handlers.push(onmessage);
        let w = Rc::downgrade(self);
        let onclose = Closure::<dyn FnMut(JsValue)>::new(move |_| {
            if let Some(s) = w.upgrade() {
                s.drop_socket();
            }
        });
        ws.set_onclose(Some(onclose.as_ref().unchecked_ref()));
        handlers.push(onclose);
        *self.handlers.borrow_mut() = handlers;
        *self.ws.borrow_mut() = Some(ws);
        self.last_seen.set(js_sys::Date::now());
        self.arm_timer();
    }

    /// Watches for a dead link: nothing from the relay for three heartbeats closes the
    /// socket (a browser going offline does not always close it).
    fn arm_timer(self: &Rc<Self>) {
        if let Some((_, id)) = self.timer.borrow_mut().take() {
            clear_timeout(id);
        }
        let w = Rc::downgrade(self);
        let tick = Closure::<dyn FnMut()>::new(move || {
            let Some(s) = w.upgrade() else { return };
            if s.ws.borrow().is_none() {
                return;
            }
            let silent = js_sys::Date::now() - s.last_seen.get();
            if silent > 3.0 * s.heartbeat_ms.get() {
                s.drop_socket();
            } else {
                s.send(&ClientMessage::Ping {
                    nonce: js_sys::Date::now() as u64,
                });
                s.arm_timer();
            }
        });
        if let Some(id) = set_timeout(tick.as_ref().unchecked_ref(), self.heartbeat_ms.get()) {
            *self.timer.borrow_mut() = Some((tick, id));
        }
    }

    fn drop_socket(self: &Rc<Self>) {
        let ws = self.ws.borrow_mut().take();
        if let Some(ws) = ws {
            ws.set_onopen(None);
            ws.set_onmessage(None);
            ws.set_onclose(None);
            let _ = ws.close();
        }
        self.handlers.borrow_mut().clear();
        if let Some((_, id)) = self.auth_timer.borrow_mut().take() {
            clear_timeout(id);
        }
        let was_open = self.open.replace(false);
        for (_, reply) in self.replies.borrow_mut().drain() {
            reply(Err(ClientError::new(
                ErrorCode::Unavailable,
                "the connection to the relay was lost",
            )));
        }
        self.writes.borrow_mut().clear();
        for t in self.targets.borrow_mut().values_mut() {
            t.buffered.clear();
            t.answered = false;
            t.sent = false;
        }
        if was_open {
            if let Some(e) = self.engine() {
                e.set_online(false);
            }
        }
        self.schedule_reconnect();
    }

    fn schedule_reconnect(self: &Rc<Self>) {
        if self.closed.get() || !self.enabled.get() {
            return;
        }
        let base = self.backoff_ms.get();
        self.backoff_ms.set((base * 2.0).min(30_000.0));
        let delay = base * (0.5 + js_sys::Math::random());
        let w = Rc::downgrade(self);
        let f = Closure::<dyn FnMut()>::new(move || {
            if let Some(s) = w.upgrade() {
                s.connect();
            }
        });
        if let Some((_, id)) = self.timer.borrow_mut().take() {
            clear_timeout(id);
        }
        if let Some(id) = set_timeout(f.as_ref().unchecked_ref(), delay) {
            *self.timer.borrow_mut() = Some((f, id));
        }
    }

    /// Asks the token callback (if any) for a fresh token; true when it gave one.
    async fn refresh_token(&self) -> bool {
        let Some(p) = &self.token_provider else {
            return false;
        };
        let Ok(v) = p.call0(&JsValue::NULL) else {
            return false;
        };
        let v = match v.dyn_into::<js_sys::Promise>() {
            Ok(p) => wasm_bindgen_futures::JsFuture::from(p)
                .await
                .unwrap_or(JsValue::NULL),
            Err(v) => v,
        };
        match v.as_string() {
            Some(t) => {
                *self.token.borrow_mut() = t;
                true
            }
            None => false,
        }
    }

    /// With a token callback and a token that expires (a JWT's `exp`), refreshes it shortly
    /// before then and sends it to the relay (`Auth`), again for each new token.
    fn schedule_token_refresh(self: &Rc<Self>) {
        if let Some((_, id)) = self.auth_timer.borrow_mut().take() {
            clear_timeout(id);
        }
        if self.token_provider.is_none() {
            return;
        }
        let Some(exp_ms) = jwt_expiry_ms(&self.token.borrow()) else {
            return;
        };
        let left = exp_ms - js_sys::Date::now();
        // 30 s ahead, or a quarter of what is left for short-lived tokens.
        let delay = if left > 120_000.0 {
            left - 30_000.0
        } else {
            (left * 0.75).max(500.0)
        };
        let w = Rc::downgrade(self);
        let f = Closure::<dyn FnMut()>::new(move || {
            let Some(s) = w.upgrade() else { return };
            wasm_bindgen_futures::spawn_local(async move {
                if s.refresh_token().await && s.open.get() {
                    let token = s.token.borrow().clone();
                    s.send(&ClientMessage::Auth { token });
                    s.schedule_token_refresh();
                }
            });
        });
        if let Some(id) = set_timeout(f.as_ref().unchecked_ref(), delay) {
            *self.auth_timer.borrow_mut() = Some((f, id));
        }
    }

    async fn on_open(self: Rc<Self>) {
        self.refresh_token().await;
        let Some(engine) = self.engine() else { return };
        let bytes = encode_client(&ClientMessage::Hello {
            protocol_version: PROTOCOL_VERSION,
            database: engine.name.clone(),
            client_id: engine.client_id.clone(),
            token: self.token.borrow().clone(),
        });
        if let Some(ws) = self.ws.borrow().as_ref() {
            let _ = ws.send_with_u8_array(&bytes);
        }
    }

    fn on_message(self: Rc<Self>, m: ServerMessage) {
        match m {
            ServerMessage::Welcome {
                indexes,
                heartbeat_ms,
                ..
            } => {
                self.open.set(true);
                self.backoff_ms.set(250.0);
                self.heartbeat_ms.set(f64::from(heartbeat_ms.max(100)));
                self.schedule_token_refresh();
                wasm_bindgen_futures::spawn_local(async move {
                    let Some(engine) = self.engine() else { return };
                    let _ = engine.set_indexes(indexes).await;
                    engine.set_online(true);
                    // Listens first (with their resume versions), then the queued writes in order.
                    let targets: Vec<(u32, Query, Option<u64>)> = self
                        .targets
                        .borrow_mut()
                        .iter_mut()
                        .filter(|(_, t)| !t.sent)
                        .map(|(id, t)| {
                            t.sent = true;
                            (*id, t.query.clone(), t.resume)
                        })
                        .collect();
                    for (target_id, query, resume_version) in targets {
                        self.send(&ClientMessage::Listen {
                            target_id,
                            query,
                            resume_version,
                        });
                    }
                    for b in engine.pending_batches() {
                        self.send_batch(&b);
                    }
                });
            }
            ServerMessage::WriteResult {
                request_id,
                batch_id,
                version,
            } => {
                self.writes.borrow_mut().remove(&request_id);
                if let Some(engine) = self.engine() {
                    wasm_bindgen_futures::spawn_local(async move {
                        let _ = engine.acknowledge(batch_id, version).await;
                    });
                }
            }
            ServerMessage::TargetChange {
                target_id,
                kind,
                changes,
            } => {
                if let Some(t) = self.targets.borrow_mut().get_mut(&target_id) {
                    t.answered = true;
                    t.buffered.push((kind, changes));
                }
            }
            ServerMessage::Snapshot { version } => {
                wasm_bindgen_futures::spawn_local(async move { self.on_snapshot(version).await });
            }
            ServerMessage::Heartbeat { .. } => {}
            ServerMessage::GetResult { request_id, .. }
            | ServerMessage::QueryResult { request_id, .. }
            | ServerMessage::AggregationResult { request_id, .. } => {
                let reply = self.replies.borrow_mut().remove(&request_id);
                if let Some(r) = reply {
                    r(Ok(m));
                }
            }
            ServerMessage::Error {
                request_id,
                target_id,
                code,
                message,
            } => {
                let err = ClientError::new(code, message);
                if code == ErrorCode::Unauthenticated && self.token_provider.is_some() {
                    // The token expired or was refused: reconnect with a fresh one from the
                    // callback. Queued writes are sent again and listens resumed; reads in
                    // flight fail with `unavailable`.
                    self.writes.borrow_mut().remove(&request_id);
                    self.backoff_ms.set(250.0);
                    self.drop_socket();
                    return;
                }
                if request_id != 0 {
                    if let Some(batch) = self.writes.borrow_mut().remove(&request_id) {
                        if let Some(engine) = self.engine() {
                            wasm_bindgen_futures::spawn_local(async move {
                                let _ = engine.reject(batch, err).await;
                            });
                        }
                    } else if let Some(r) = self.replies.borrow_mut().remove(&request_id) {
                        r(Err(err));
                    }
                } else if target_id != 0 {
                    let t = self.targets.borrow_mut().remove(&target_id);
                    if let Some(t) = t {
                        self.by_listener.borrow_mut().remove(&t.listener);
                        if let Some(engine) = self.engine() {
                            engine.target_failed(target_id, err);
                        }
                    }
                } else {
                    // A connection-level error: the relay closes; reconnect with backoff.
                    self.drop_socket();
                }
            }
        }
    }

    async fn on_snapshot(self: Rc<Self>, version: u64) {
        let Some(engine) = self.engine() else { return };
        let mut upserts: Vec<(DocumentName, Option<Document>)> = Vec::new();
        let mut limbo: BTreeSet<DocumentName> = BTreeSet::new();
        let mut current = Vec::new();
        let mut persist = Vec::new();
        // Targets that got a complete result: (query, its documents).
        let mut resets: Vec<(Query, BTreeSet<DocumentName>)> = Vec::new();
        {
            let mut targets = self.targets.borrow_mut();
            for (id, t) in targets.iter_mut().filter(|(_, t)| t.answered) {
                let buffered = std::mem::take(&mut t.buffered);
                for (kind, changes) in buffered {
                    if kind == TargetChangeKind::Reset {
                        let fresh: BTreeSet<DocumentName> = changes
                            .iter()
                            .filter_map(|c| match c {
                                DocumentChange::Upsert(d) => Some(d.name.clone()),
                                DocumentChange::Remove(_) => None,
                            })
                            .collect();
                        limbo.extend(t.docs.difference(&fresh).cloned());
                        resets.push((t.query.clone(), fresh.clone()));
                        t.docs = fresh;
                    }
                    for c in changes {
                        match c {
                            DocumentChange::Upsert(d) => {
                                t.docs.insert(d.name.clone());
                                limbo.remove(&d.name);
                                upserts.push((d.name.clone(), Some(d)));
                            }
                            DocumentChange::Remove(n) => {
                                t.docs.remove(&n);
                                limbo.insert(n);
                            }
                        }
                    }
                }
                t.resume = Some(version);
                current.push(*id);
                persist.push(WriteOp::Put {
                    store: Store::Targets,
                    key: Key::Bytes(t.key.clone()),
                    value: version.to_be_bytes().to_vec(),
                });
            }
        }
        // Cached documents the local view still shows for a reset target (e.g. after a reload,
        // or changes missed while offline) but the relay's result lacks are read again.
        for (query, fresh) in resets {
            if let Ok(local) = engine.query(&query).await {
                limbo.extend(
                    local
                        .into_iter()
                        .map(|d| d.name)
                        .filter(|n| !fresh.contains(n) && !engine.is_pending(n)),
                );
            }
        }
        let _ = engine.server_documents(upserts).await;
        if !limbo.is_empty() {
            // Documents that left a result: deleted, or changed so they no longer match.
            // A read tells which; until it answers the local copy stays.
            let names: Vec<DocumentName> = limbo.into_iter().collect();
            if let Ok(ServerMessage::GetResult { documents, .. }) = self.request_get(names).await {
                let _ = engine.server_documents(documents).await;
            }
        }
        let _ = engine.store.write(persist).await;
        engine.targets_current(&current);
    }

    fn send_batch(&self, b: &Batch) {
        let request_id = self.next_request.get();
        self.next_request.set(request_id + 1);
        if self.send(&ClientMessage::Write {
            request_id,
            batch_id: b.id,
            mutations: b.mutations.clone(),
            reads: Vec::new(),
        }) {
            self.writes.borrow_mut().insert(request_id, b.id);
        }
    }

    fn listen(&self, listener: u64, query: Query) {
        let target_id = self.next_target.get();
        self.next_target.set(target_id + 1);
        let mut key = Vec::new();
        encode_query(&query, &mut key);
        let resume = self.stored_resume.borrow().get(&key).copied();
        self.targets.borrow_mut().insert(
            target_id,
            Target {
                listener,
                query: query.clone(),
                key,
                resume,
                docs: BTreeSet::new(),
                buffered: Vec::new(),
                answered: false,
                sent: false,
            },
        );
        self.by_listener.borrow_mut().insert(listener, target_id);
        if let Some(e) = self.engine() {
            e.bind_target(listener, Some(target_id));
        }
        let sent = self.send(&ClientMessage::Listen {
            target_id,
            query,
            resume_version: resume,
        });
        if let Some(t) = self.targets.borrow_mut().get_mut(&target_id) {
            t.sent = sent;
        }
    }

    fn unlisten(&self, listener: u64) {
        let Some(target_id) = self.by_listener.borrow_mut().remove(&listener) else {
            return;
        };
        if let Some(t) = self.targets.borrow_mut().remove(&target_id) {
            if let Some(v) = t.resume {
                self.stored_resume.borrow_mut().insert(t.key, v);
            }
        }
        self.send(&ClientMessage::Unlisten { target_id });
    }

    /// Waits up to `ms` for the connection to open (a request made while it is still
    /// connecting should not fail); false when it did not.
    pub async fn wait_open(&self, ms: f64) -> bool {
        if self.open.get() {
            return true;
        }
        if self.closed.get() || !self.enabled.get() {
            return false;
        }
        let promise = js_sys::Promise::new(&mut |resolve, _| {
            if let Some(id) = set_timeout(&resolve, ms) {
                let _ = id;
            }
            self.open_waiters.borrow_mut().push(resolve);
        });
        let _ = wasm_bindgen_futures::JsFuture::from(promise).await;
        self.open.get()
    }

    /// Sends a request and awaits its reply.
    pub async fn request(
        &self,
        make: impl FnOnce(u64) -> ClientMessage,
    ) -> Result<ServerMessage, ClientError> {
        self.wait_open(10_000.0).await;
        let request_id = self.next_request.get();
        self.next_request.set(request_id + 1);
        let (tx, rx) = futures_channel();
        self.replies.borrow_mut().insert(request_id, Box::new(tx));
        if !self.send(&make(request_id)) {
            self.replies.borrow_mut().remove(&request_id);
            return Err(ClientError::new(ErrorCode::Unavailable, "the relay is not reachable (offline); read from the cache with { source: 'cache' }"));
        }
        rx.await
    }

    pub async fn request_get(
        &self,
        names: Vec<DocumentName>,
    ) -> Result<ServerMessage, ClientError> {
        self.request(|request_id| ClientMessage::Get { request_id, names })
            .await
    }

    /// Sends a transaction's writes with its reads to revalidate.
    pub async fn commit_transaction(
        &self,
        batch_id: u64,
        mutations: Vec<hearth_core::mutation::Mutation>,
        reads: Vec<(DocumentName, Option<u64>)>,
    ) -> Result<u64, ClientError> {
        let reply = self
            .request(|request_id| ClientMessage::Write {
                request_id,
                batch_id,
                mutations,
                reads,
            })
            .await;
        match reply {
            Ok(ServerMessage::WriteResult { version, .. }) => Ok(version),
            Ok(_) => Err(ClientError::new(
                ErrorCode::Internal,
                "unexpected reply to a transaction",
            )),
            Err(e) => Err(e),
        }
    }

    pub fn set_enabled(self: &Rc<Self>, on: bool) {
        self.enabled.set(on);
        if on {
            self.backoff_ms.set(250.0);
            self.connect();
        } else {
            let ws = self.ws.borrow_mut().take();
            if let Some(ws) = ws {
                ws.set_onclose(None);
                let _ = ws.close();
            }
            self.handlers.borrow_mut().clear();
            for t in self.targets.borrow_mut().values_mut() {
                t.buffered.clear();
                t.answered = false;
                t.sent = false;
            }
            if self.open.replace(false) {
                if let Some(e) = self.engine() {
                    e.set_online(false);
                }
            }
        }
    }

    pub fn close(self: &Rc<Self>) {
        self.closed.set(true);
        self.set_enabled(false);
        if let Some((_, id)) = self.timer.borrow_mut().take() {
            clear_timeout(id);
        }
        if let Some((_, id)) = self.auth_timer.borrow_mut().take() {
            clear_timeout(id);
        }
    }
}

/// When a JWT expires (its `exp`, in ms since the epoch); `None` for anything else.
fn jwt_expiry_ms(token: &str) -> Option<f64> {
    // The payload is base64url without padding: map it to the standard alphabet.
    let payload: String = token
        .split('.')
        .nth(1)?
        .chars()
        .map(|c| match c {
            '-' => '+',
            '_' => '/',
            c => c,
        })
        .collect();
    let json = String::from_utf8(crate::client::types::base64_decode(&payload)?).ok()?;
    let claims = js_sys::JSON::parse(&json).ok()?;
    Some(Reflect::get(&claims, &"exp".into()).ok()?.as_f64()? * 1000.0)
}

/// A one-shot channel for single-threaded futures.
fn futures_channel() -> (
    impl FnOnce(Result<ServerMessage, ClientError>),
    impl std::future::Future<Output = Result<ServerMessage, ClientError>>,
) {
    let slot: Rc<
        RefCell<(
            Option<Result<ServerMessage, ClientError>>,
            Option<std::task::Waker>,
        )>,
    > = Rc::new(RefCell::new((None, None)));
    let tx_slot = slot.clone();
    let tx = move |r| {
        let waker = {
            let mut s = tx_slot.borrow_mut();
            s.0 = Some(r);
            s.1.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    };
    let rx = std::future::poll_fn(move |cx| {
        let mut s = slot.borrow_mut();
        match s.0.take() {
            Some(r) => std::task::Poll::Ready(r),
            None => {
                s.1 = Some(cx.waker().clone());
                std::task::Poll::Pending
            }
        }
    });
    (tx, rx)
}
