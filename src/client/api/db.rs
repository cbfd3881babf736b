//! One open database as the API sees it: the engine this context runs (as the origin's
//! leader, or without Web Locks) or the origin's engine through a proxy (a follower), and
//! the listeners registered on it, which move to a new engine when leadership does.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use hearth_core::document::Document;
use hearth_core::error::ErrorCode;
use hearth_core::index::config::IndexFile;
use hearth_core::mutation::Mutation;
use hearth_core::path::DocumentName;
use hearth_core::query::model::{Aggregation, Query};
use hearth_core::value::Value;
use js_sys::Function;
use wasm_bindgen::prelude::*;

use super::listen::Registration;
use super::local::{DocRead, Local, QueryRead};
use crate::client::engine::{Engine, ListenEvent, PendingTimestamp, Settle};
use crate::client::error::ClientError;
use crate::client::origin::host::{Host, Sink};
use crate::client::origin::proxy::{Proxy, Watch};
use crate::client::origin::{self, wire, wire::Msg};
use crate::client::sync::Sync;

/// What `Hearth.open` was given, kept to open the engine when this context takes the lead.
pub(crate) struct Options {
    /// `firestore.indexes.json`, parsed.
    pub indexes: Option<IndexFile>,
    /// The relay's WebSocket URL.
    pub relay: Option<String>,
    /// The token, when a string.
    pub token: Option<String>,
    /// The token callback, when a function.
    pub provider: Option<Function>,
    /// `cacheSizeBytes` (`None`: no limit).
    pub cache_budget: Option<u64>,
}

/// Where the database's engine is.
enum Role {
    /// In this context.
    Local(Local),
    /// In another context of the origin.
    Remote(Rc<Proxy>),
}

/// One open database.
pub struct Db {
    /// The database's name.
    pub(crate) name: String,
    /// This instance's id among the origin's contexts.
    ctx: String,
    /// Whether `close()` was called.
    pub(crate) closed: Cell<bool>,
    /// How it was opened.
    options: Options,
    /// Where its engine is.
    role: RefCell<Role>,
    /// The server of the other contexts, while this one leads.
    host: RefCell<Option<Rc<Host>>>,
    /// Releases the leader lock, while this context leads.
    leader: RefCell<Option<Function>>,
    /// Listeners by id.
    listens: RefCell<crate::client::origin::IdMap<Rc<Registration>>>,
    /// The next listener id.
    next_listen: Cell<u64>,
    /// The next write key (a follower's writes, see `Batch::key`).
    next_key: Cell<u64>,
    /// Tells other contexts with engines of their own (no Web Locks) what changed here.
    pub(crate) tabs: RefCell<Option<super::Tabs>>,
}

/// Opens the engine in this context. `sole_writer`: this context holds the leader lock, so
/// no other context writes the database (its documents are then also kept in memory).
async fn open_local(name: &str, o: &Options, sole_writer: bool) -> Result<Local, ClientError> {
    let engine = Engine::open(name, o.indexes.clone(), o.relay.is_some(), o.cache_budget).await?;
    if sole_writer {
        engine.store.keep_in_memory();
    }
    let sync = match &o.relay {
        None => None,
        Some(url) => {
            Some(Sync::start(&engine, url.clone(), o.token.clone(), o.provider.clone()).await?)
        }
    };
    if let Some(sync) = &sync {
        // Another tab's upgrade closed the local database: every listener and request
        // ends with why, and the relay is not dialled again.
        let sync = Rc::downgrade(sync);
        engine.store.on_closed_by_upgrade(move || {
            if let Some(sync) = sync.upgrade() {
                sync.refuse(ClientError::new(
                    ErrorCode::FailedPrecondition,
                    "the local database was closed so that another tab running a newer \
                     version of the app could upgrade it; reload the page",
                ));
            }
        });
    }
    Ok(Local { engine, sync })
}

fn closed_error() -> ClientError {
    ClientError::new(ErrorCode::FailedPrecondition, "the database was closed")
}

impl Db {
    /// Opens database `name`: leads the origin's engine if no other context does, else
    /// follows it (and waits to take the lead).
    pub(crate) async fn open(name: String, options: Options) -> Result<Rc<Db>, ClientError> {
        let ctx = origin::new_context_id();
        let lead = if origin::available() {
            origin::request_lock(&origin::leader_lock(&name), true).await
        } else {
            None
        };
        let role = if lead.is_some() || !origin::available() {
            match open_local(&name, &options, lead.is_some()).await {
                Ok(l) => Role::Local(l),
                Err(e) => {
                    if let Some(release) = lead {
                        let _ = release.call0(&JsValue::NULL);
                    }
                    return Err(e);
                }
            }
        } else {
            Role::Remote(Proxy::join(&name).await?)
        };
        let follower = matches!(role, Role::Remote(_));
        let db = Rc::new(Db {
            name,
            ctx,
            closed: Cell::new(false),
            options,
            role: RefCell::new(role),
            host: RefCell::new(None),
            leader: RefCell::new(lead),
            listens: RefCell::default(),
            next_listen: Cell::new(1),
            next_key: Cell::new(1),
            tabs: RefCell::new(None),
        });
        if follower {
            db.clone().await_lead();
            // The leader's announcement brings the client id; a leader that went before
            // announcing itself leaves the lead to this context or another.
            if let Some(p) = db.proxy() {
                p.until_led(10_000.0).await;
            }
        } else {
            db.lead_started(None);
        }
        Ok(db)
    }

    /// This context now runs the engine: serve the other contexts (with Web Locks), or tell
    /// them what changes (without).
    fn lead_started(self: &Rc<Self>, own: Option<String>) {
        let Some(local) = self.local() else { return };
        if self.leader.borrow().is_some() {
            *self.host.borrow_mut() = Host::start(&self.name, self.ctx.clone(), local, own);
            self.stop_on_pagehide();
        }
        super::link_tabs(self);
    }

    /// A leading page that is going away (`pagehide` not kept in the back/forward cache)
    /// stops serving and sending at once: its messages to the other tabs are dropped from
    /// then on while it may still run a moment, and the next leader takes its queue from
    /// IndexedDB (a batch it had sent goes again under its id, a retry the relay answers).
    fn stop_on_pagehide(self: &Rc<Self>) {
        let global = js_sys::global();
        let Ok(add) = js_sys::Reflect::get(&global, &"addEventListener".into())
            .and_then(|f| f.dyn_into::<Function>())
        else {
            return;
        };
        if js_sys::Reflect::get(&global, &"document".into()).map_or(true, |d| d.is_undefined()) {
            return;
        }
        let weak = Rc::downgrade(self);
        let on_hide = Closure::<dyn FnMut(JsValue)>::new(move |e: JsValue| {
            let kept = js_sys::Reflect::get(&e, &"persisted".into())
                .ok()
                .and_then(|p| p.as_bool())
                .unwrap_or(false);
            if let (Some(db), false) = (weak.upgrade(), kept) {
                if let Some(h) = db.host.borrow_mut().take() {
                    h.stop();
                }
                if let Some(s) = db.local().and_then(|l| l.sync) {
                    s.close();
                }
            }
        });
        let _ = add.call2(&global, &"pagehide".into(), on_hide.as_ref());
        on_hide.forget();
    }

    /// Waits for the leader lock, then takes the lead.
    fn await_lead(self: Rc<Self>) {
        let weak = Rc::downgrade(&self);
        let name = self.name.clone();
        drop(self);
        wasm_bindgen_futures::spawn_local(async move {
            let Some(release) = origin::request_lock(&origin::leader_lock(&name), false).await
            else {
                return;
            };
            match weak.upgrade().filter(|db| !db.closed.get()) {
                Some(db) => db.take_lead(release).await,
                None => {
                    let _ = release.call0(&JsValue::NULL);
                }
            }
        });
    }

    /// The leader went: open the engine here, hand it what the old one had not answered,
    /// and move every listener to it.
    async fn take_lead(self: Rc<Self>, release: Function) {
        let local = match open_local(&self.name, &self.options, true).await {
            Ok(l) => l,
            Err(e) => {
                web_sys::console::error_1(&e.to_js());
                // Let another context try.
                let _ = release.call0(&JsValue::NULL);
                self.await_lead();
                return;
            }
        };
        if self.closed.get() {
            let _ = release.call0(&JsValue::NULL);
            return;
        }
        *self.leader.borrow_mut() = Some(release);
        let old = std::mem::replace(&mut *self.role.borrow_mut(), Role::Local(local));
        let Role::Remote(proxy) = old else { return };
        self.lead_started(Some(proxy.ctx.clone()));
        proxy.retire();
        if let Some(host) = self.host.borrow().clone() {
            for (msg, done) in proxy.take_unanswered() {
                let done = RefCell::new(Some(done));
                let sink: Sink = Rc::new(move |reply: JsValue| {
                    if wire::text(&reply, "k").as_deref() == Some("rep") {
                        if let Some(done) = done.borrow_mut().take() {
                            done(reply);
                        }
                    }
                });
                host.handle(&msg, sink);
            }
        }
        let ids: Vec<u64> = self.listens.borrow().ids();
        for id in ids {
            if let Some(r) = self.listens.borrow().get(id) {
                r.moved.set(true);
            }
            self.attach(id);
        }
    }

    /// The engine, when this context runs it.
    pub(crate) fn local(&self) -> Option<Local> {
        match &*self.role.borrow() {
            Role::Local(l) => Some(l.clone()),
            Role::Remote(_) => None,
        }
    }

    fn proxy(&self) -> Option<Rc<Proxy>> {
        match &*self.role.borrow() {
            Role::Local(_) => None,
            Role::Remote(p) => Some(p.clone()),
        }
    }

    /// Whether this context runs the engine (it leads, or has no Web Locks).
    pub fn is_leader(&self) -> bool {
        self.local().is_some()
    }

    /// Whether the database was opened with a relay.
    pub(crate) fn has_relay(&self) -> bool {
        self.options.relay.is_some()
    }

    /// The write ticket a read called now waits for (see `Engine::issued`); a follower's
    /// requests keep their order at the leader instead.
    pub(crate) fn issued(&self) -> u64 {
        self.local().map_or(0, |l| l.engine.issued())
    }

    /// Reads one document.
    pub(crate) async fn read_document(
        &self,
        name: &DocumentName,
        source: Option<String>,
        upto: u64,
    ) -> Result<DocRead, ClientError> {
        if let Some(l) = self.local() {
            return l.read_document(name, source.as_deref(), upto).await;
        }
        let proxy = self.proxy().ok_or_else(closed_error)?;
        let reply = proxy
            .request("doc", |m| {
                with_source(m.set("name", name.to_string()), source)
            })
            .await?;
        Ok(DocRead {
            doc: wire::read_document(&reply, "d")?,
            pending: wire::field(&reply, "pending").as_bool().unwrap_or(false),
            cache: wire::field(&reply, "cache").as_bool().unwrap_or(true),
        })
    }

    /// Runs a query once.
    pub(crate) async fn read_query(
        &self,
        q: &Query,
        source: Option<String>,
        upto: u64,
    ) -> Result<QueryRead, ClientError> {
        if let Some(l) = self.local() {
            return l.read_query(q, source.as_deref(), upto).await;
        }
        let proxy = self.proxy().ok_or_else(closed_error)?;
        let reply = proxy
            .request("query", |m| {
                with_source(m.bytes("q", &wire::query(q)), source)
            })
            .await?;
        let docs = wire::read_documents(&reply, "docs")?;
        let flags = wire::bytes(&reply, "pending").unwrap_or_default();
        Ok(QueryRead {
            docs: docs
                .into_iter()
                .enumerate()
                .map(|(i, d)| (d, flags.get(i) == Some(&1)))
                .collect(),
            cache: wire::field(&reply, "cache").as_bool().unwrap_or(true),
        })
    }

    /// Runs aggregations.
    pub(crate) async fn aggregate(
        &self,
        q: &Query,
        aggs: Vec<Aggregation>,
        upto: u64,
    ) -> Result<Vec<Value>, ClientError> {
        if let Some(l) = self.local() {
            return l.aggregate(q, aggs, upto).await;
        }
        let proxy = self.proxy().ok_or_else(closed_error)?;
        let reply = proxy
            .request("agg", |m| {
                m.bytes("q", &wire::query(q))
                    .set("aggs", wire::aggregations(&aggs))
            })
            .await?;
        wire::read_values(&reply, "values")
    }

    /// A transaction's read.
    pub(crate) async fn transaction_get(
        &self,
        name: &DocumentName,
    ) -> Result<Option<Document>, ClientError> {
        if let Some(l) = self.local() {
            return l.transaction_get(name).await;
        }
        let proxy = self.proxy().ok_or_else(closed_error)?;
        let reply = proxy
            .request("txget", |m| m.set("name", name.to_string()))
            .await?;
        wire::read_document(&reply, "d")
    }

    /// A transaction's commit.
    pub(crate) async fn transaction_commit(
        &self,
        writes: Vec<Mutation>,
        reads: Vec<(DocumentName, Option<u64>)>,
    ) -> Result<u64, ClientError> {
        if let Some(l) = self.local() {
            return l.transaction_commit(None, writes, reads).await;
        }
        let proxy = self.proxy().ok_or_else(closed_error)?;
        let batch = proxy.next_batch_id();
        let reply = proxy
            .request("txcommit", |m| {
                let m = m
                    .bytes("w", &wire::mutations(&writes))
                    .set("reads", wire::reads(&reads));
                match batch {
                    Some(b) => m.set("batch", b as f64),
                    None => m,
                }
            })
            .await?;
        Ok(wire::number(&reply, "version").unwrap_or(0))
    }

    /// Writes a batch; `settle` runs with its outcome. Issued now (see `Engine::write`).
    pub(crate) fn write(
        &self,
        mutations: Vec<Mutation>,
        settle: Settle,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> {
        if let Some(l) = self.local() {
            return Box::pin(l.engine.write(mutations, settle));
        }
        let Some(proxy) = self.proxy() else {
            settle(Err(closed_error()));
            return Box::pin(async {});
        };
        let key = format!("{}:{}", self.ctx, self.next_key.get());
        self.next_key.set(self.next_key.get() + 1);
        let frame = wire::mutations(&mutations);
        let reply = proxy.request("write", |m| m.bytes("w", &frame).set("key", key));
        Box::pin(async move {
            settle(
                reply
                    .await
                    .map(|r| wire::number(&r, "version").unwrap_or(0)),
            );
        })
    }

    /// `waitForPendingWrites()`.
    pub(crate) fn wait_for_pending(&self, settle: Settle) {
        if let Some(l) = self.local() {
            return l.engine.wait_for_pending(settle);
        }
        let Some(proxy) = self.proxy() else {
            return settle(Err(closed_error()));
        };
        let reply = proxy.request("wait", |m| m);
        wasm_bindgen_futures::spawn_local(async move {
            settle(reply.await.map(|_| 0));
        });
    }

    /// `enableNetwork()` / `disableNetwork()` (of the origin's one connection).
    pub(crate) fn set_network(&self, on: bool) {
        if let Some(h) = self.host.borrow().as_ref() {
            h.set_network(&self.ctx, on);
        } else if let Some(l) = self.local() {
            if let Some(s) = &l.sync {
                s.set_enabled(on);
            }
        } else if let Some(p) = self.proxy() {
            drop(p.request("net", |m| m.set("on", on)));
        }
    }

    /// `setToken(token)`.
    pub(crate) fn set_token(&self, token: String) {
        if let Some(l) = self.local() {
            if let Some(s) = &l.sync {
                s.set_token(token);
            }
        } else if let Some(p) = self.proxy() {
            drop(p.request("token", |m| m.set("token", token)));
        }
    }

    /// The bytes the local cache takes.
    pub(crate) async fn cache_size(&self) -> Result<u64, ClientError> {
        if let Some(l) = self.local() {
            return l.engine.store.estimate_bytes().await;
        }
        let proxy = self.proxy().ok_or_else(closed_error)?;
        let reply = proxy.request("size", |m| m).await?;
        Ok(wire::number(&reply, "bytes").unwrap_or(0))
    }

    /// The client id towards the relay.
    pub(crate) fn client_id(&self) -> String {
        match &*self.role.borrow() {
            Role::Local(l) => l.engine.client_id.clone(),
            Role::Remote(p) => p.client_id.borrow().clone(),
        }
    }

    /// The pending server timestamps of a document with a pending write (a follower's, as
    /// the leader's last snapshot or answer told them).
    pub(crate) fn pending_timestamps(&self, name: &DocumentName) -> Vec<PendingTimestamp> {
        match &*self.role.borrow() {
            Role::Local(l) => l.engine.pending_timestamps(name),
            Role::Remote(p) => p.pending_timestamps(name),
        }
    }

    /// Registers a listener; its snapshots go to `callback`. Returns its id.
    pub(crate) fn listen(
        self: &Rc<Self>,
        watch: Watch,
        include: bool,
        callback: Rc<dyn Fn(ListenEvent)>,
    ) -> u64 {
        let id = self.next_listen.get();
        self.next_listen.set(id + 1);
        self.listens
            .borrow_mut()
            .insert(id, Rc::new(Registration::new(watch, include, callback)));
        self.attach(id);
        id
    }

    /// Stops listener `id`.
    pub(crate) fn unlisten(&self, id: u64) {
        let Some(r) = self.listens.borrow_mut().remove(id) else {
            return;
        };
        r.stop();
        match &*self.role.borrow() {
            Role::Local(l) => {
                if let Some(e) = r.engine_id.get() {
                    l.engine.unlisten(e);
                }
            }
            Role::Remote(p) => p.unlisten(id),
        }
    }

    /// Starts listener `id` on the engine, wherever it is.
    fn attach(self: &Rc<Self>, id: u64) {
        let Some(reg) = self.listens.borrow().get(id).cloned() else {
            return;
        };
        let callback = reg.continuing();
        let local = match &*self.role.borrow() {
            Role::Remote(p) => {
                p.listen(id, &reg.watch, reg.include, callback, reg.moved.clone());
                return;
            }
            Role::Local(l) => l.clone(),
        };
        let upto = local.engine.issued();
        let weak = Rc::downgrade(self);
        wasm_bindgen_futures::spawn_local(async move {
            let engine = local.engine;
            engine.until_landed(upto).await;
            let started = match &reg.watch {
                Watch::Query(q) => {
                    engine
                        .listen_query(q.clone(), reg.include, callback.clone())
                        .await
                }
                Watch::Document(n) => {
                    engine
                        .listen_document(n.clone(), reg.include, callback.clone())
                        .await
                }
            };
            match started {
                Err(e) => callback(ListenEvent::Error(e)),
                Ok(eid) => {
                    let live = weak.upgrade().is_some_and(|db| {
                        db.listens
                            .borrow()
                            .get(id)
                            .is_some_and(|r| Rc::ptr_eq(r, &reg))
                    });
                    if live {
                        reg.engine_id.set(Some(eid));
                    } else {
                        engine.unlisten(eid);
                    }
                }
            }
        });
    }

    /// Closes this instance: a leader's engine and service end (another context takes the
    /// lead), a follower leaves. Returns a promise that resolves once a local engine's
    /// "open" lock is let go (see `Engine::close`).
    pub(crate) fn close(&self) -> Option<js_sys::Promise> {
        if let Some(h) = self.host.borrow_mut().take() {
            h.stop();
        }
        let ended = match &*self.role.borrow() {
            Role::Local(l) => {
                if let Some(s) = &l.sync {
                    s.close();
                }
                l.engine.close()
            }
            Role::Remote(p) => {
                p.close();
                None
            }
        };
        if let Some(release) = self.leader.borrow_mut().take() {
            let _ = release.call0(&JsValue::NULL);
        }
        ended
    }
}

/// Adds the `source` option to a read request.
fn with_source(m: Msg, source: Option<String>) -> Msg {
    match source {
        Some(s) => m.set("source", s),
        None => m,
    }
}
