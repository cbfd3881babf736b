//! A follower's side: requests to the origin's engine and the snapshots of its listeners,
//! over the database's channel. Requests not answered are kept and sent again to each new
//! leader, in call order; a write the leader said it queued is asked again by its batch.
//! A listener's result is kept here (a view of its query without limit, fed by the
//! leader's changes), so a snapshot costs its changes, not its result.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use hearth_core::path::DocumentName;
use hearth_core::query::model::Query;
use hearth_core::query::view::{ChangeType, View};
use js_sys::Function;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use super::wire::{self, Msg};
use crate::client::engine::{ListenEvent, PendingTimestamp};
use crate::client::error::ClientError;

/// What a listener watches.
#[derive(Clone)]
pub(crate) enum Watch {
    /// A query's result.
    Query(Query),
    /// One document.
    Document(DocumentName),
}

/// A request waiting for its answer.
struct Inflight {
    /// The request as sent (a write's becomes an `await` of its batch once queued).
    msg: JsValue,
    /// Takes the answer.
    done: Box<dyn FnOnce(JsValue)>,
}

/// A listener served by the leader.
struct Listen {
    /// The request that starts it, sent again to a new leader.
    msg: JsValue,
    /// A query listener's result as the leader's changes left it.
    mirror: Option<View>,
    /// Takes each snapshot.
    callback: Rc<dyn Fn(ListenEvent)>,
    /// Set when the listener is sent to a new leader (its next snapshot starts over).
    moved: Rc<Cell<bool>>,
}

/// A follower's link to the origin's engine.
pub(crate) struct Proxy {
    /// This instance's id among the origin's contexts.
    pub ctx: String,
    /// The database's channel.
    channel: web_sys::BroadcastChannel,
    /// Its message handler.
    on_message: RefCell<Option<Closure<dyn FnMut(web_sys::MessageEvent)>>>,
    /// The leader's context id, once one announced itself.
    leader: RefCell<Option<String>>,
    /// The client id the leader speaks to the relay with.
    pub client_id: RefCell<String>,
    /// The next request id.
    next_id: Cell<u64>,
    /// Requests not answered yet, by id (in call order).
    inflight: RefCell<super::IdMap<Inflight>>,
    /// Listeners, by the database's listener id.
    listens: RefCell<super::IdMap<Listen>>,
    /// Releases the lock that tells the leader this context lives.
    alive: RefCell<Option<Function>>,
    /// This context's batch-id tag (see `Engine::next_batch_id`) and the lock that keeps it
    /// its own: its transactions' ids.
    tag: Option<(u8, Function)>,
    /// The last batch id it took.
    batch_seq: Cell<u64>,
    /// Calls waiting for a leader to announce itself.
    waiting: RefCell<Vec<Function>>,
    /// The pending server timestamps of documents with a pending write, as the leader's
    /// last snapshots and answers told them.
    timestamps: Rc<RefCell<HashMap<DocumentName, Vec<PendingTimestamp>>>>,
}

impl Proxy {
    /// Joins `database`'s engine as a follower.
    pub async fn join(database: &str) -> Result<Rc<Proxy>, ClientError> {
        let channel =
            web_sys::BroadcastChannel::new(&super::channel_name(database)).map_err(|_| {
                ClientError::new(
                    hearth_core::error::ErrorCode::Unavailable,
                    "BroadcastChannel is missing",
                )
            })?;
        let ctx = super::new_context_id();
        let alive = super::request_lock(&super::context_lock(&ctx), true).await;
        let start = (js_sys::Math::random() * 128.0) as u8;
        let tag = crate::client::tabs::claim_tag(database, start).await;
        let proxy = Rc::new(Proxy {
            ctx,
            channel,
            on_message: RefCell::new(None),
            leader: RefCell::new(None),
            client_id: RefCell::new(String::new()),
            next_id: Cell::new(1),
            inflight: RefCell::default(),
            listens: RefCell::default(),
            alive: RefCell::new(alive),
            tag,
            batch_seq: Cell::new(0),
            waiting: RefCell::new(Vec::new()),
            timestamps: Rc::default(),
        });
        let weak = Rc::downgrade(&proxy);
        let on_message =
            Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |e: web_sys::MessageEvent| {
                if let Some(p) = weak.upgrade() {
                    p.receive(&e.data());
                }
            });
        proxy
            .channel
            .set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        *proxy.on_message.borrow_mut() = Some(on_message);
        proxy.post(Msg::new("hello").set("from", proxy.ctx.as_str()).done());
        Ok(proxy)
    }

    fn post(&self, msg: JsValue) {
        let _ = self.channel.post_message(&msg);
    }

    /// Whether a leader has announced itself (answers can come).
    pub fn has_leader(&self) -> bool {
        self.leader.borrow().is_some()
    }

    /// Resolves once a leader has announced itself (or this proxy retired), or after `ms`.
    pub async fn until_led(&self, ms: f64) {
        if self.has_leader() {
            return;
        }
        let promise = js_sys::Promise::new(&mut |resolve, _| {
            self.waiting.borrow_mut().push(resolve);
        });
        let timeout = crate::client::js::sleep(ms);
        futures_select(wasm_bindgen_futures::JsFuture::from(promise), timeout).await;
    }

    fn wake(&self) {
        for resolve in self.waiting.borrow_mut().drain(..) {
            let _ = resolve.call0(&JsValue::NULL);
        }
    }

    /// A batch id of this context's own, for a transaction (`None` without a tag: the
    /// leader then takes one).
    pub fn next_batch_id(&self) -> Option<u64> {
        let (tag, _) = self.tag.as_ref()?;
        let id = crate::client::engine::batch_id_after(*tag, self.batch_seq.get());
        self.batch_seq.set(id);
        Some(id)
    }

    /// Sends request `op` (built by `build`) now, in call order, and gives the future of
    /// its answer.
    pub fn request(
        &self,
        op: &str,
        build: impl FnOnce(Msg) -> Msg,
    ) -> impl std::future::Future<Output = Result<JsValue, ClientError>> + 'static {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        let msg = build(
            Msg::new("req")
                .set("from", self.ctx.as_str())
                .set("id", id as f64)
                .set("op", op),
        )
        .done();
        let (tx, rx) = futures_channel();
        self.inflight.borrow_mut().insert(
            id,
            Inflight {
                msg: msg.clone(),
                done: Box::new(tx),
            },
        );
        if self.has_leader() {
            self.post(msg);
        }
        let timestamps = self.timestamps.clone();
        async move {
            let reply = rx.await;
            learn_timestamps(&timestamps, &reply, None);
            match wire::error(&reply) {
                Some(e) => Err(e),
                None => Ok(reply),
            }
        }
    }

    /// Starts listener `lid` at the leader; its snapshots go to `callback`. `moved` is set
    /// whenever it is sent to a new leader.
    pub fn listen(
        &self,
        lid: u64,
        watch: &Watch,
        include: bool,
        callback: Rc<dyn Fn(ListenEvent)>,
        moved: Rc<Cell<bool>>,
    ) {
        let msg = Msg::new("req")
            .set("from", self.ctx.as_str())
            .set("op", "listen")
            .set("lid", lid as f64)
            .set("meta", include);
        let (msg, mirror) = match watch {
            Watch::Query(q) => {
                let frame = wire::query(q);
                let mut whole = match hearth_core::query::validate::validate(q) {
                    Ok(v) => v,
                    Err(_) => q.clone(),
                };
                whole.limit = None;
                whole.offset = 0;
                (msg.bytes("q", &frame), Some(View::new(whole, Vec::new())))
            }
            Watch::Document(name) => (msg.set("name", name.to_string()), None),
        };
        let msg = msg.done();
        self.listens.borrow_mut().insert(
            lid,
            Listen {
                msg: msg.clone(),
                mirror,
                callback,
                moved,
            },
        );
        if self.has_leader() {
            self.post(msg);
        }
    }

    /// Stops listener `lid`.
    pub fn unlisten(&self, lid: u64) {
        if self.listens.borrow_mut().remove(lid).is_some() {
            self.post(
                Msg::new("req")
                    .set("from", self.ctx.as_str())
                    .set("op", "unlisten")
                    .set("lid", lid as f64)
                    .done(),
            );
        }
    }

    fn receive(self: &Rc<Self>, m: &JsValue) {
        let kind = wire::text(m, "k").unwrap_or_default();
        if kind == "leader" {
            return self.leader_is(m);
        }
        if wire::text(m, "to").as_deref() != Some(self.ctx.as_str()) {
            return;
        }
        match kind.as_str() {
            "rep" => self.answered(m),
            "landed" => self.landed(m),
            "ev" => self.event(m),
            _ => {}
        }
    }

    /// A leader announced itself: a new one gets every unanswered request and listener.
    fn leader_is(&self, m: &JsValue) {
        let Some(ctx) = wire::text(m, "ctx") else {
            return;
        };
        if self.leader.borrow().as_deref() == Some(ctx.as_str()) {
            return;
        }
        if js_sys::Reflect::get(&js_sys::global(), &"__HEARTH_DEBUG__".into())
            .is_ok_and(|v| v.is_truthy())
        {
            web_sys::console::debug_1(
                &format!(
                    "hearth-proxy {}: leader {:?} -> {ctx}",
                    self.ctx,
                    self.leader.borrow()
                )
                .into(),
            );
        }
        *self.leader.borrow_mut() = Some(ctx);
        *self.client_id.borrow_mut() = wire::text(m, "client").unwrap_or_default();
        self.wake();
        let requests: Vec<JsValue> = self
            .inflight
            .borrow()
            .values()
            .map(|r| asked_again(&r.msg))
            .collect();
        let listens: Vec<JsValue> = {
            let mut ls = self.listens.borrow_mut();
            ls.values_mut()
                .map(|l| {
                    l.moved.set(true);
                    if let Some(v) = &mut l.mirror {
                        *v = View::new(v.query().clone(), Vec::new());
                    }
                    l.msg.clone()
                })
                .collect()
        };
        // Listeners first: a write sent again must reach them as any other write.
        for msg in listens.into_iter().chain(requests) {
            self.post(msg);
        }
    }

    /// Hands the requests not answered over (to this context's own engine, once it leads).
    pub fn take_unanswered(&self) -> Vec<(JsValue, Box<dyn FnOnce(JsValue)>)> {
        let taken = self.inflight.borrow_mut().take();
        taken
            .into_iter()
            .map(|r| (asked_again(&r.msg), r.done))
            .collect()
    }

    /// Delivers an answer given in this context (see [`Proxy::take_unanswered`]).
    fn answered(&self, m: &JsValue) {
        let Some(id) = wire::number(m, "id") else {
            return;
        };
        let done = self.inflight.borrow_mut().remove(id);
        if let Some(r) = done {
            (r.done)(m.clone());
        }
    }

    /// The leader queued write `id` as batch `batch`: asked again, it is awaited by that.
    fn landed(&self, m: &JsValue) {
        let (Some(id), Some(batch)) = (wire::number(m, "id"), wire::number(m, "batch")) else {
            return;
        };
        if let Some(r) = self.inflight.borrow_mut().get_mut(id) {
            r.msg = Msg::new("req")
                .set("from", self.ctx.as_str())
                .set("id", id as f64)
                .set("op", "await")
                .set("batch", batch as f64)
                .done();
        }
    }

    /// The pending server timestamps of document `name`, as last told.
    pub fn pending_timestamps(&self, name: &DocumentName) -> Vec<PendingTimestamp> {
        self.timestamps
            .borrow()
            .get(name)
            .cloned()
            .unwrap_or_default()
    }

    /// A listener's snapshot, or its end.
    fn event(&self, m: &JsValue) {
        let Some(lid) = wire::number(m, "lid") else {
            return;
        };
        let (event, callback) = match wire::error(m) {
            Some(e) => {
                let gone = self.listens.borrow_mut().remove(lid);
                (Some(ListenEvent::Error(e)), gone.map(|l| l.callback))
            }
            None => (
                self.snapshot(lid, m),
                self.listens.borrow().get(lid).map(|l| l.callback.clone()),
            ),
        };
        if let (Some(ev), Some(cb)) = (event, callback) {
            cb(ev);
        }
    }

    /// Decodes a snapshot of listener `lid`, bringing its mirror up to date.
    fn snapshot(&self, lid: u64, m: &JsValue) -> Option<ListenEvent> {
        let from_cache = wire::field(m, "cache").as_bool().unwrap_or(true);
        let has_pending_writes = wire::field(m, "hpw").as_bool().unwrap_or(false);
        let mut ls = self.listens.borrow_mut();
        let l = ls.get_mut(lid)?;
        let Some(view) = &mut l.mirror else {
            let name = DocumentName::parse(&wire::text(m, "name")?).ok()?;
            let doc = wire::read_document(m, "d").ok()?;
            learn_timestamps(&self.timestamps, m, None);
            return Some(ListenEvent::Document {
                name,
                doc,
                from_cache,
                has_pending_writes,
            });
        };
        let changes = match wire::read_changes(m) {
            Ok(c) => c,
            Err(e) => return Some(ListenEvent::Error(e)),
        };
        let batch: Vec<(DocumentName, Option<hearth_core::document::Document>)> = changes
            .iter()
            .map(|c| {
                let doc = (c.kind != ChangeType::Removed).then(|| c.doc.clone());
                (c.doc.name.clone(), doc)
            })
            .collect();
        view.apply_batch(batch.iter().map(|(n, d)| (n, d.as_ref())));
        let pending: HashSet<DocumentName> = wire::read_names(m, "pn").into_iter().collect();
        learn_timestamps(&self.timestamps, m, Some(&pending));
        Some(ListenEvent::Query {
            docs: view.snapshot(),
            pending: Rc::new(pending),
            changes,
            from_cache,
            has_pending_writes,
        })
    }

    /// Leaves the engine: its listeners at the leader end, requests not answered fail.
    pub fn close(&self) {
        self.post(Msg::new("bye").set("from", self.ctx.as_str()).done());
        self.channel.set_onmessage(None);
        self.channel.close();
        self.on_message.borrow_mut().take();
        drop(self.listens.borrow_mut().take());
        let closed = crate::client::error::ClientError::new(
            hearth_core::error::ErrorCode::FailedPrecondition,
            "the database was closed",
        );
        for (_, done) in self.take_unanswered() {
            done(wire::with_error(Msg::new("rep"), &closed).done());
        }
        if let Some(release) = self.alive.borrow_mut().take() {
            let _ = release.call0(&JsValue::NULL);
        }
        if let Some((_, release)) = &self.tag {
            let _ = release.call0(&JsValue::NULL);
        }
        self.wake();
    }

    /// Stops taking messages (this context leads now); listeners move to its engine.
    pub fn retire(&self) {
        self.wake();
        if let Some((_, release)) = &self.tag {
            let _ = release.call0(&JsValue::NULL);
        }
        self.channel.set_onmessage(None);
        self.channel.close();
        self.on_message.borrow_mut().take();
        drop(self.listens.borrow_mut().take());
    }
}

/// A request as sent again to a new leader: marked so (a write may have been answered).
fn asked_again(msg: &JsValue) -> JsValue {
    let _ = js_sys::Reflect::set(msg, &"again".into(), &JsValue::TRUE);
    msg.clone()
}

/// Keeps the pending server timestamps a message carries: those of its documents; with
/// `pending` (every name the leader says has a pending write), none for the others.
fn learn_timestamps(
    map: &RefCell<HashMap<DocumentName, Vec<PendingTimestamp>>>,
    m: &JsValue,
    pending: Option<&HashSet<DocumentName>>,
) {
    let told = wire::read_timestamps(m, "ts");
    let mut map = map.borrow_mut();
    if let Some(pending) = pending {
        map.retain(|n, _| pending.contains(n));
    }
    for (name, ts) in told {
        map.insert(name, ts);
    }
}

/// Awaits whichever of two futures finishes first.
async fn futures_select(
    a: impl std::future::Future<Output = Result<JsValue, JsValue>>,
    b: impl std::future::Future<Output = ()>,
) {
    let mut a = std::pin::pin!(a);
    let mut b = std::pin::pin!(b);
    std::future::poll_fn(move |cx| {
        if a.as_mut().poll(cx).is_ready() || b.as_mut().poll(cx).is_ready() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await
}

/// A one-shot channel whose receiving end is a future.
fn futures_channel() -> (
    impl FnOnce(JsValue),
    impl std::future::Future<Output = JsValue>,
) {
    let mut resolve_fn: Option<Function> = None;
    let promise = js_sys::Promise::new(&mut |resolve, _| resolve_fn = Some(resolve));
    let resolve = resolve_fn.expect("set by the executor");
    let tx = move |v: JsValue| {
        let _ = resolve.call1(&JsValue::NULL, &v);
    };
    let rx = async move {
        wasm_bindgen_futures::JsFuture::from(promise)
            .await
            .unwrap_or(JsValue::UNDEFINED)
    };
    (tx, rx)
}
