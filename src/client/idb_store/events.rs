//! IndexedDB's events as futures: a request's success or error, a transaction's completion,
//! and an open or delete request's outcome.
//!
//! Each watcher owns the closures it installs as event handlers and removes them when
//! dropped, so no closure is ever called after it is freed and none is forgotten. Waking
//! goes through wasm-bindgen-futures' microtask queue, so the task awaiting a request runs
//! while the success event is still being dispatched: its transaction is still active and
//! the next request can be made on it.

use std::cell::{Cell, RefCell};
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use js_sys::{Function, Promise, Reflect};
use wasm_bindgen_futures::JsFuture;

use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::{
    Event, IdbDatabase, IdbOpenDbRequest, IdbRequest, IdbTransaction, IdbVersionChangeEvent,
};

/// The latest event outcome not yet taken, and who to wake when one arrives.
struct Slot<T> {
    /// The outcome not yet taken by a poll.
    value: Option<T>,
    /// The task to wake when an outcome arrives.
    waker: Option<Waker>,
}

type Shared<T> = Rc<RefCell<Slot<T>>>;

fn shared<T>() -> Shared<T> {
    Rc::new(RefCell::new(Slot {
        value: None,
        waker: None,
    }))
}

fn fire<T>(slot: &Shared<T>, value: T) {
    let waker = {
        let mut s = slot.borrow_mut();
        s.value = Some(value);
        s.waker.take()
    };
    if let Some(w) = waker {
        w.wake();
    }
}

fn poll_slot<T>(slot: &Shared<T>, cx: &mut Context<'_>) -> Poll<T> {
    let mut s = slot.borrow_mut();
    match s.value.take() {
        Some(v) => Poll::Ready(v),
        None => {
            s.waker = Some(cx.waker().clone());
            Poll::Pending
        }
    }
}

async fn wait<T>(slot: &Shared<T>) -> T {
    poll_fn(|cx| poll_slot(slot, cx)).await
}

/// A promise resolved after `ms` milliseconds by the global `setTimeout` (windows and
/// workers have it), or at once if there is none.
fn timeout(ms: i32) -> Promise {
    Promise::new(&mut |resolve, _reject| {
        let global = js_sys::global();
        let set_timeout = Reflect::get(&global, &JsValue::from_str("setTimeout"))
            .ok()
            .and_then(|f| f.dyn_into::<Function>().ok());
        let started = set_timeout
            .map(|f| f.call2(&global, &resolve, &JsValue::from(ms)).is_ok())
            .unwrap_or(false);
        if !started {
            let _ = resolve.call0(&JsValue::UNDEFINED);
        }
    })
}

fn handler(slot: &Shared<bool>, outcome: bool) -> Closure<dyn FnMut(Event)> {
    let slot = slot.clone();
    Closure::new(move |_: Event| fire(&slot, outcome))
}

/// The success and error events of one request; a cursor's request fires again after each
/// `continue()`.
pub(super) struct RequestEvents {
    /// The request, for its result or error and to detach the handlers on drop.
    request: IdbRequest,
    /// The next outcome: `true` for success, `false` for error.
    slot: Shared<bool>,
    /// The `success` handler, alive as long as the request is watched.
    _on_success: Closure<dyn FnMut(Event)>,
    /// The `error` handler, alive as long as the request is watched.
    _on_error: Closure<dyn FnMut(Event)>,
}

impl RequestEvents {
    pub(super) fn new(request: IdbRequest) -> RequestEvents {
        let slot = shared();
        let on_success = handler(&slot, true);
        let on_error = handler(&slot, false);
        request.set_onsuccess(Some(on_success.as_ref().unchecked_ref()));
        request.set_onerror(Some(on_error.as_ref().unchecked_ref()));
        RequestEvents {
            request,
            slot,
            _on_success: on_success,
            _on_error: on_error,
        }
    }

    /// The request's result at its next success event, or its error (a `DOMException`).
    pub(super) async fn next(&self) -> Result<JsValue, JsValue> {
        if wait(&self.slot).await {
            self.request.result()
        } else {
            Err(self
                .request
                .error()
                .ok()
                .flatten()
                .map(JsValue::from)
                .unwrap_or(JsValue::NULL))
        }
    }
}

impl Drop for RequestEvents {
    fn drop(&mut self) {
        self.request.set_onsuccess(None);
        self.request.set_onerror(None);
    }
}

/// The end of a transaction: `complete` (durable, for a strict readwrite transaction) or
/// `abort`.
pub(super) struct TxEvents {
    /// The transaction, for its error and to detach the handlers on drop.
    tx: IdbTransaction,
    /// The outcome: `true` for `complete`, `false` for `abort`.
    slot: Shared<bool>,
    /// The `complete` handler, alive as long as the transaction is watched.
    _on_complete: Closure<dyn FnMut(Event)>,
    /// The `abort` handler, alive as long as the transaction is watched.
    _on_abort: Closure<dyn FnMut(Event)>,
}

impl TxEvents {
    pub(super) fn new(tx: &IdbTransaction) -> TxEvents {
        let slot = shared();
        let on_complete = handler(&slot, true);
        let on_abort = handler(&slot, false);
        tx.set_oncomplete(Some(on_complete.as_ref().unchecked_ref()));
        tx.set_onabort(Some(on_abort.as_ref().unchecked_ref()));
        TxEvents {
            tx: tx.clone(),
            slot,
            _on_complete: on_complete,
            _on_abort: on_abort,
        }
    }

    /// `Ok` once committed; the abort reason (`null` after an explicit `abort()`) otherwise.
    pub(super) async fn done(&self) -> Result<(), JsValue> {
        if wait(&self.slot).await {
            Ok(())
        } else {
            Err(self.tx.error().map(JsValue::from).unwrap_or(JsValue::NULL))
        }
    }
}

impl Drop for TxEvents {
    fn drop(&mut self) {
        self.tx.set_oncomplete(None);
        self.tx.set_onabort(None);
    }
}

/// How an open or delete request ended.
pub(super) enum OpenOutcome {
    /// `success`, with the request's result (the connection, or `undefined` for a delete).
    Success(JsValue),
    /// `error`, with the `DOMException`; for an open, the upgrade's own failure if it failed.
    Error(JsValue),
    /// `blocked`: other connections did not close on `versionchange` (within the grace
    /// period). The request stays queued; see [`OpenEvents`]'s drop.
    Blocked,
}

/// The schema upgrade run inside `upgradeneeded`: (connection, versionchange transaction,
/// old version, new version).
pub(super) type Upgrade = fn(&IdbDatabase, &IdbTransaction, u32, u32) -> Result<(), JsValue>;

/// The events of an `indexedDB.open` or `deleteDatabase` request.
pub(super) struct OpenEvents {
    /// The open or delete request.
    request: IdbOpenDbRequest,
    /// How the request ended (or that it is blocked), not yet taken.
    slot: Rc<RefCell<Slot<OpenOutcome>>>,
    /// Set once `success` or `error` fired: the request is over.
    settled: Rc<Cell<bool>>,
    /// The `success`, `error` and `blocked` handlers, alive as long as the request is watched.
    _handlers: Vec<Closure<dyn FnMut(Event)>>,
    /// The `upgradeneeded` handler that runs the schema upgrade (opens only).
    _on_upgrade: Option<Closure<dyn FnMut(IdbVersionChangeEvent)>>,
}

impl OpenEvents {
    pub(super) fn new(request: IdbOpenDbRequest, upgrade: Option<Upgrade>) -> OpenEvents {
        let slot: Rc<RefCell<Slot<OpenOutcome>>> = shared();
        let settled = Rc::new(Cell::new(false));
        let upgrade_error: Rc<RefCell<Option<JsValue>>> = Rc::new(RefCell::new(None));

        let on_success = {
            let (slot, settled, req) = (slot.clone(), settled.clone(), request.clone());
            Closure::<dyn FnMut(Event)>::new(move |_: Event| {
                settled.set(true);
                fire(
                    &slot,
                    OpenOutcome::Success(req.result().unwrap_or(JsValue::UNDEFINED)),
                );
            })
        };
        let on_error = {
            let (slot, settled, req) = (slot.clone(), settled.clone(), request.clone());
            let upgrade_error = upgrade_error.clone();
            Closure::<dyn FnMut(Event)>::new(move |e: Event| {
                // Handled here: keep it from bubbling up as an unhandled error.
                e.prevent_default();
                settled.set(true);
                let err = upgrade_error.borrow_mut().take().unwrap_or_else(|| {
                    req.error()
                        .ok()
                        .flatten()
                        .map(JsValue::from)
                        .unwrap_or(JsValue::NULL)
                });
                fire(&slot, OpenOutcome::Error(err));
            })
        };
        let on_blocked = {
            let slot = slot.clone();
            Closure::<dyn FnMut(Event)>::new(move |_: Event| {
                // A success that raced ahead of this event wins.
                if slot.borrow().value.is_none() {
                    fire(&slot, OpenOutcome::Blocked);
                }
            })
        };
        request.set_onsuccess(Some(on_success.as_ref().unchecked_ref()));
        request.set_onerror(Some(on_error.as_ref().unchecked_ref()));
        request.set_onblocked(Some(on_blocked.as_ref().unchecked_ref()));

        let on_upgrade = upgrade.map(|upgrade| {
            let req = request.clone();
            let on_upgrade = Closure::<dyn FnMut(IdbVersionChangeEvent)>::new(
                move |e: IdbVersionChangeEvent| {
                    let (Ok(db), Some(tx)) = (req.result(), req.transaction()) else {
                        return;
                    };
                    let db: IdbDatabase = db.unchecked_into();
                    let old = e.old_version() as u32;
                    let new = e.new_version().unwrap_or(0.0) as u32;
                    if let Err(err) = upgrade(&db, &tx, old, new) {
                        *upgrade_error.borrow_mut() = Some(err);
                        let _ = tx.abort();
                    }
                },
            );
            request.set_onupgradeneeded(Some(on_upgrade.as_ref().unchecked_ref()));
            on_upgrade
        });

        OpenEvents {
            request,
            slot,
            settled,
            _handlers: vec![on_success, on_error, on_blocked],
            _on_upgrade: on_upgrade,
        }
    }

    /// How the request ended, or `Blocked` if it is still blocked `grace_ms` after the
    /// `blocked` event. `blocked` also fires when the other connections have closed but
    /// still finish a running transaction, so it is given a moment before it counts.
    pub(super) async fn outcome(&self, grace_ms: i32) -> OpenOutcome {
        match wait(&self.slot).await {
            OpenOutcome::Blocked => {}
            done => return done,
        }
        let mut timer = JsFuture::from(timeout(grace_ms));
        poll_fn(|cx| match poll_slot(&self.slot, cx) {
            Poll::Ready(done) => Poll::Ready(done),
            Poll::Pending => Pin::new(&mut timer).poll(cx).map(|_| OpenOutcome::Blocked),
        })
        .await
    }
}

impl Drop for OpenEvents {
    /// A request given up on while still queued (after `blocked`) goes on once the other
    /// connections close. Its handlers are then replaced by ones that undo it: an upgrade is
    /// aborted (the database keeps its version) and a connection that opens anyway is closed
    /// at once, so a pending open never leaves an unowned connection that would block the
    /// next upgrade. These small closures are handed to the JS garbage collector with the
    /// request.
    fn drop(&mut self) {
        let r = &self.request;
        r.set_onblocked(None);
        if self.settled.get() {
            r.set_onsuccess(None);
            r.set_onerror(None);
            r.set_onupgradeneeded(None);
            return;
        }
        let close_db = Closure::<dyn FnMut(Event)>::new(|e: Event| {
            let db = e
                .target()
                .and_then(|t| t.dyn_into::<IdbOpenDbRequest>().ok())
                .and_then(|req| req.result().ok())
                .and_then(|db| db.dyn_into::<IdbDatabase>().ok());
            if let Some(db) = db {
                db.close();
            }
        });
        let abort_upgrade = Closure::<dyn FnMut(Event)>::new(|e: Event| {
            let tx = e
                .target()
                .and_then(|t| t.dyn_into::<IdbOpenDbRequest>().ok())
                .and_then(|req| req.transaction());
            if let Some(tx) = tx {
                let _ = tx.abort();
            }
        });
        let swallow = Closure::<dyn FnMut(Event)>::new(|e: Event| e.prevent_default());
        r.set_onsuccess(Some(close_db.into_js_value().unchecked_ref()));
        r.set_onupgradeneeded(Some(abort_upgrade.into_js_value().unchecked_ref()));
        r.set_onerror(Some(swallow.into_js_value().unchecked_ref()));
    }
}
