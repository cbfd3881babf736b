//! The leader's side: serves its followers' requests with the engine this context runs,
//! and sends each of their listeners its snapshots. Requests are taken in arrival order and
//! each takes its place among the engine's writes at once (a read waits for the writes
//! asked before it), so a follower's operations run in its call order, as a local one's.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use hearth_core::path::DocumentName;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use super::wire::{self, Msg};
use crate::client::api::local::Local;
use crate::client::engine::{Engine, ListenEvent};
use crate::client::error::ClientError;

/// Where a request's answers go: posted to its follower, or, for requests a context that
/// just became leader had sent to the old one, handed back in process.
pub(crate) type Sink = Rc<dyn Fn(JsValue)>;

/// The engine's server for the origin's other contexts.
pub(crate) struct Host {
    /// The id this context's proxy had (see `start`).
    own: Option<String>,
    /// This context's id (the leader's).
    ctx: String,
    /// The engine and relay connection.
    local: Local,
    /// The database's channel.
    channel: web_sys::BroadcastChannel,
    /// Its message handler.
    on_message: RefCell<Option<Closure<dyn FnMut(web_sys::MessageEvent)>>>,
    /// Each follower's listeners: (follower, its listener id) → the engine's listener id.
    listens: RefCell<HashMap<(String, u64), u64>>,
    /// Followers whose going is watched (their context lock).
    watched: RefCell<std::collections::HashSet<String>>,
    /// The contexts (this one included, by its id) that disabled the network: the origin's
    /// one connection is off only while every open context asks for it to be.
    offline: RefCell<std::collections::HashSet<String>>,
    /// Whether this host turned the connection off.
    off: std::cell::Cell<bool>,
}

impl Host {
    /// Serves `database`'s followers with `local`, and tells them this context leads.
    /// `own`: the id this context's proxy had while it followed: its requests still on the
    /// way are not served (the context hands them over itself, once).
    pub fn start(
        database: &str,
        ctx: String,
        local: Local,
        own: Option<String>,
    ) -> Option<Rc<Host>> {
        let channel = web_sys::BroadcastChannel::new(&super::channel_name(database)).ok()?;
        let host = Rc::new(Host {
            own,
            ctx,
            local,
            channel,
            on_message: RefCell::new(None),
            listens: RefCell::new(HashMap::new()),
            watched: RefCell::new(Default::default()),
            offline: RefCell::new(Default::default()),
            off: std::cell::Cell::new(false),
        });
        let weak = Rc::downgrade(&host);
        let on_message =
            Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |e: web_sys::MessageEvent| {
                if let Some(h) = weak.upgrade() {
                    h.receive(e.data());
                }
            });
        host.channel
            .set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        *host.on_message.borrow_mut() = Some(on_message);
        host.announce();
        Some(host)
    }

    fn announce(&self) {
        let _ = self.channel.post_message(
            &Msg::new("leader")
                .set("ctx", self.ctx.as_str())
                .set("client", self.local.engine.client_id.as_str())
                .done(),
        );
    }

    fn receive(self: &Rc<Self>, m: JsValue) {
        let Some(from) = wire::text(&m, "from") else {
            return;
        };
        if self.own.as_deref() == Some(from.as_str()) {
            return;
        }
        match wire::text(&m, "k").as_deref() {
            Some("hello") => {
                self.watch(&from);
                self.announce();
            }
            Some("bye") => self.forget(&from),
            Some("req") => {
                self.watch(&from);
                let channel = self.channel.clone();
                let sink: Sink = Rc::new(move |reply: JsValue| {
                    let _ = js_sys::Reflect::set(&reply, &"to".into(), &from.as_str().into());
                    let _ = channel.post_message(&reply);
                });
                self.handle(&m, sink);
            }
            _ => {}
        }
    }

    /// Drops the listeners of follower `ctx` once its context is gone (its lock freed).
    fn watch(self: &Rc<Self>, ctx: &str) {
        if !self.watched.borrow_mut().insert(ctx.to_owned()) {
            return;
        }
        let weak = Rc::downgrade(self);
        let ctx = ctx.to_owned();
        wasm_bindgen_futures::spawn_local(async move {
            let release = super::request_lock(&super::context_lock(&ctx), false).await;
            if let Some(release) = release {
                let _ = release.call0(&JsValue::NULL);
            }
            if let Some(h) = weak.upgrade() {
                h.forget(&ctx);
            }
        });
    }

    /// Context `ctx` wants the network `on` (`enableNetwork()`) or not.
    pub fn set_network(&self, ctx: &str, on: bool) {
        if on {
            self.offline.borrow_mut().remove(ctx);
        } else {
            self.offline.borrow_mut().insert(ctx.to_owned());
        }
        self.apply_network();
    }

    /// Turns the connection off only while this context and every follower asked so.
    fn apply_network(&self) {
        let off = {
            let offline = self.offline.borrow();
            offline.contains(&self.ctx) && self.watched.borrow().iter().all(|c| offline.contains(c))
        };
        if self.off.replace(off) != off {
            if let Some(s) = &self.local.sync {
                s.set_enabled(!off);
            }
        }
    }

    /// Ends every listener of follower `ctx`.
    fn forget(&self, ctx: &str) {
        self.watched.borrow_mut().remove(ctx);
        if self.offline.borrow_mut().remove(ctx) {
            self.apply_network();
        }
        let gone: Vec<u64> = {
            let mut ls = self.listens.borrow_mut();
            let keys: Vec<(String, u64)> = ls.keys().filter(|(c, _)| c == ctx).cloned().collect();
            keys.iter().filter_map(|k| ls.remove(k)).collect()
        };
        for id in gone {
            self.local.engine.unlisten(id);
        }
    }

    /// Serves one request; its answers go to `sink`.
    pub fn handle(self: &Rc<Self>, m: &JsValue, sink: Sink) {
        let id = wire::number(m, "id").unwrap_or(0);
        let op = wire::text(m, "op").unwrap_or_default();
        let reply = Msg::new("rep").set("id", id as f64);
        match op.as_str() {
            "listen" => self.listen(m, sink),
            "unlisten" => {
                let from = wire::text(m, "from").unwrap_or_default();
                let lid = wire::number(m, "lid").unwrap_or(0);
                if let Some(e) = self.listens.borrow_mut().remove(&(from, lid)) {
                    self.local.engine.unlisten(e);
                }
            }
            "write" | "await" => self.write(m, &op, reply, sink),
            "wait" => self.local.engine.wait_for_pending(Box::new(move |r| {
                sink(settled(reply, r));
            })),
            "net" => {
                let from = wire::text(m, "from").unwrap_or_default();
                self.set_network(&from, wire::field(m, "on").as_bool().unwrap_or(true));
                sink(reply.done());
            }
            "token" => {
                if let (Some(s), Some(t)) = (&self.local.sync, wire::text(m, "token")) {
                    s.set_token(t);
                }
                sink(reply.done());
            }
            _ => self.read(m, op, reply, sink),
        }
    }

    /// A write (`write`), or the answer of a batch queued already (`await`).
    fn write(&self, m: &JsValue, op: &str, reply: Msg, sink: Sink) {
        let engine = &self.local.engine;
        let id = wire::number(m, "id").unwrap_or(0);
        drop(reply);
        let done: Box<dyn FnOnce(Result<u64, ClientError>)> = {
            let sink = sink.clone();
            Box::new(move |r| sink(settled(Msg::new("rep").set("id", id as f64), r)))
        };
        if op == "await" {
            engine.await_batch(wire::number(m, "batch").unwrap_or(0), done);
            return;
        }
        let (key, mutations) = match wire::read_mutations(m, "w") {
            Ok(mutations) => (wire::text(m, "key"), mutations),
            Err(e) => return done(Err(e)),
        };
        let landed: Box<dyn FnOnce(u64)> = Box::new(move |batch| {
            sink(
                Msg::new("landed")
                    .set("id", id as f64)
                    .set("batch", batch as f64)
                    .done(),
            );
        });
        let again = wire::field(m, "again").as_bool().unwrap_or(false);
        let key = key.map(|key| crate::client::engine::Keyed { key, again, landed });
        wasm_bindgen_futures::spawn_local(engine.write_keyed(mutations, key, done));
    }

    /// The reads: documents, queries, aggregations, a transaction's read and commit, the
    /// cache's size.
    fn read(&self, m: &JsValue, op: String, reply: Msg, sink: Sink) {
        let local = self.local.clone();
        let upto = local.engine.issued();
        let source = wire::text(m, "source");
        let m = m.clone();
        wasm_bindgen_futures::spawn_local(async move {
            let answer = serve_read(&local, &op, &m, source.as_deref(), upto).await;
            sink(match answer {
                Ok(msg) => msg(reply).done(),
                Err(e) => wire::with_error(reply, &e).done(),
            });
        });
    }

    /// Starts a follower's listener; its snapshots go to `sink`.
    fn listen(self: &Rc<Self>, m: &JsValue, sink: Sink) {
        let from = wire::text(m, "from").unwrap_or_default();
        let lid = wire::number(m, "lid").unwrap_or(0);
        let include = wire::field(m, "meta").as_bool().unwrap_or(false);
        let name = wire::text(m, "name").and_then(|n| DocumentName::parse(&n).ok());
        let query = wire::read_query(m, "q");
        let engine = self.local.engine.clone();
        let upto = engine.issued();
        let send = sink.clone();
        let weak_engine = Rc::downgrade(&engine);
        let callback: Rc<dyn Fn(ListenEvent)> = Rc::new(move |ev| {
            if let Some(engine) = weak_engine.upgrade() {
                send(event(lid, &ev, &engine));
            }
        });
        let weak = Rc::downgrade(self);
        wasm_bindgen_futures::spawn_local(async move {
            engine.until_landed(upto).await;
            let started = match (name, query) {
                (Some(name), _) => engine.listen_document(name, include, callback).await,
                (None, Ok(query)) => engine.listen_query(query, include, callback).await,
                _ => Err(wire::malformed("listen")),
            };
            match (started, weak.upgrade()) {
                (Ok(id), Some(host)) => {
                    if let Some(old) = host.listens.borrow_mut().insert((from, lid), id) {
                        engine.unlisten(old);
                    }
                }
                (Ok(id), None) => engine.unlisten(id),
                (Err(e), _) => sink(event(lid, &ListenEvent::Error(e), &engine)),
            }
        });
    }

    /// Stops serving (this context closes its engine).
    pub fn stop(&self) {
        self.channel.set_onmessage(None);
        self.channel.close();
        self.on_message.borrow_mut().take();
        let ids: Vec<u64> = self
            .listens
            .borrow_mut()
            .drain()
            .map(|(_, id)| id)
            .collect();
        for id in ids {
            self.local.engine.unlisten(id);
        }
    }
}

/// An answer carrying a write's outcome.
fn settled(reply: Msg, r: Result<u64, ClientError>) -> JsValue {
    match r {
        Ok(version) => reply.set("version", version as f64).done(),
        Err(e) => wire::with_error(reply, &e).done(),
    }
}

/// What a read's answer adds to the reply message.
type Answer = Box<dyn FnOnce(Msg) -> Msg>;

/// Serves a read-like request.
async fn serve_read(
    local: &Local,
    op: &str,
    m: &JsValue,
    source: Option<&str>,
    upto: u64,
) -> Result<Answer, ClientError> {
    let name = || {
        wire::text(m, "name")
            .and_then(|n| DocumentName::parse(&n).ok())
            .ok_or_else(|| wire::malformed("read"))
    };
    match op {
        "doc" => {
            let name = name()?;
            let r = local.read_document(&name, source, upto).await?;
            let doc = wire::document(r.doc.as_ref());
            let ts = r
                .pending
                .then(|| {
                    wire::timestamps(&[(name.clone(), local.engine.pending_timestamps(&name))])
                })
                .flatten();
            Ok(Box::new(move |m: Msg| {
                let m = m.set("pending", r.pending).set("cache", r.cache);
                let m = match ts {
                    Some(t) => m.bytes("ts", &t),
                    None => m,
                };
                match doc {
                    Some(d) => m.bytes("d", &d),
                    None => m,
                }
            }))
        }
        "query" => {
            let r = local
                .read_query(&wire::read_query(m, "q")?, source, upto)
                .await?;
            let flags = wire::flags(r.docs.iter().map(|(_, p)| *p));
            let pending = r.docs.iter().filter(|(_, p)| *p).map(|(d, _)| &d.name);
            let ts = with_timestamps(Msg::new("ts"), &local.engine, pending).done();
            let ts = wire::bytes(&ts, "ts");
            let docs: Vec<_> = r.docs.into_iter().map(|(d, _)| d).collect();
            let docs = wire::documents(&docs);
            Ok(Box::new(move |m: Msg| {
                let m = m
                    .bytes("docs", &docs)
                    .bytes("pending", &flags)
                    .set("cache", r.cache);
                match ts {
                    Some(t) => m.bytes("ts", &t),
                    None => m,
                }
            }))
        }
        "agg" => {
            let (q, aggs) = (
                wire::read_query(m, "q")?,
                wire::read_aggregations(m, "aggs")?,
            );
            let values = wire::values(local.aggregate(&q, aggs, upto).await?);
            Ok(Box::new(move |m: Msg| m.bytes("values", &values)))
        }
        "txget" => {
            let doc = wire::document(local.transaction_get(&name()?).await?.as_ref());
            Ok(Box::new(move |m: Msg| match doc {
                Some(d) => m.bytes("d", &d),
                None => m,
            }))
        }
        "txcommit" => {
            let (writes, reads) = (wire::read_mutations(m, "w")?, wire::read_reads(m, "reads")?);
            let batch = wire::number(m, "batch");
            let version = local.transaction_commit(batch, writes, reads).await?;
            Ok(Box::new(move |m: Msg| m.set("version", version as f64)))
        }
        "size" => {
            let bytes = local.engine.store.estimate_bytes().await?;
            Ok(Box::new(move |m: Msg| m.set("bytes", bytes as f64)))
        }
        _ => Err(wire::malformed("request")),
    }
}

/// Adds the pending server timestamps of `names` (those with a pending write) to a message.
fn with_timestamps<'a>(
    m: Msg,
    engine: &Engine,
    names: impl IntoIterator<Item = &'a DocumentName>,
) -> Msg {
    let entries: Vec<_> = names
        .into_iter()
        .map(|n| (n.clone(), engine.pending_timestamps(n)))
        .collect();
    match wire::timestamps(&entries) {
        Some(b) => m.bytes("ts", &b),
        None => m,
    }
}

/// A listener's snapshot as a message to its follower, with the pending server timestamps
/// of the documents with a pending write.
fn event(lid: u64, ev: &ListenEvent, engine: &Engine) -> JsValue {
    let m = Msg::new("ev").set("lid", lid as f64);
    match ev {
        ListenEvent::Query {
            pending,
            changes,
            from_cache,
            has_pending_writes,
            ..
        } => with_timestamps(wire::with_changes(m, changes), engine, pending.iter())
            .set("pn", wire::names(pending.iter()))
            .set("cache", *from_cache)
            .set("hpw", *has_pending_writes)
            .done(),
        ListenEvent::Document {
            name,
            doc,
            from_cache,
            has_pending_writes,
        } => {
            let m = m
                .set("name", name.to_string())
                .set("cache", *from_cache)
                .set("hpw", *has_pending_writes);
            let m = if *has_pending_writes {
                with_timestamps(m, engine, [name])
            } else {
                m
            };
            match wire::document(doc.as_ref()) {
                Some(d) => m.bytes("d", &d).done(),
                None => m.done(),
            }
        }
        ListenEvent::Error(e) => wire::with_error(m, e).done(),
    }
}
