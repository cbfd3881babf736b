//! The socket's life: connecting (with the event handlers the `Sync` value owns), Hello,
//! the heartbeat watch for a dead link, dropping the socket (failing what waited on it) and
//! reconnecting with exponential backoff and jitter, and the browser's `online`/`offline`
//! events.

use hearth_core::error::ErrorCode;
use std::rc::Rc;

use js_sys::{Function, Reflect, Uint8Array};
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::{BinaryType, WebSocket};

use super::Sync;
use crate::client::error::ClientError;
use hearth_core::protocol::codec::{decode_server_frame, encode_client};
use hearth_core::protocol::{ClientMessage, PROTOCOL_VERSION};

/// Calls the global `setTimeout` (works in pages and workers, and in Node, whose timer
/// object converts to its numeric id, which `clearTimeout` takes too). `None` only when
/// there is no timer: a caller keeps the closure alive while it is armed.
pub(super) fn set_timeout(f: &Function, ms: f64) -> Option<f64> {
    let global = js_sys::global();
    let st: Function = Reflect::get(&global, &"setTimeout".into())
        .ok()?
        .dyn_into()
        .ok()?;
    let timer = st.call2(&global, f, &JsValue::from_f64(ms)).ok()?;
    timer.as_f64().or_else(|| {
        let number: Function = Reflect::get(&global, &"Number".into())
            .ok()?
            .dyn_into()
            .ok()?;
        let id = number.call1(&JsValue::NULL, &timer).ok()?.as_f64()?;
        (!id.is_nan()).then_some(id)
    })
}

/// Cancels a `setTimeout` timer.
pub(super) fn clear_timeout(id: f64) {
    let global = js_sys::global();
    if let Ok(f) =
        Reflect::get(&global, &"clearTimeout".into()).and_then(|f| f.dyn_into::<Function>())
    {
        let _ = f.call1(&global, &JsValue::from_f64(id));
    }
}

impl Sync {
    /// Listens to the browser's `online` (reconnect at once) and `offline` (drop the
    /// socket) events.
    pub(super) fn install_online_events(sync: &Rc<Sync>) {
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

    /// Opens a socket unless one exists (or the network is off, or the database closed).
    pub(super) fn connect(self: &Rc<Self>) {
        if self.closed.get()
            || !self.enabled.get()
            || self.refused.borrow().is_some()
            || self.ws.borrow().is_some()
        {
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
            // The event's `data`, read by name: Node's `ws` sockets deliver events of their
            // own class, not the global `MessageEvent`.
            let Ok(data) = Reflect::get(&e, &"data".into()) else {
                return;
            };
            let bytes = Uint8Array::new(&data).to_vec();
            s.last_seen.set(js_sys::Date::now());
            match decode_server_frame(&bytes) {
                Ok(messages) => {
                    // A bundle's messages in order, while they are still this socket's.
                    let epoch = s.epoch.get();
                    for m in messages {
                        if s.epoch.get() != epoch {
                            break;
                        }
                        s.clone().on_message(m);
                    }
                }
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

    /// Closes the socket: replies waiting on it fail with `unavailable`, targets wait for
    /// their Listen on the next connection, listeners go `fromCache`; then a reconnect is
    /// scheduled.
    pub(super) fn drop_socket(self: &Rc<Self>) {
        self.detach_socket();
        if let Some((_, id)) = self.auth_timer.borrow_mut().take() {
            clear_timeout(id);
        }
        self.forget_connection("the connection to the relay was lost");
        // Requests waiting for this connection fail now rather than at their timers.
        self.wake_open_waiters();
        self.schedule_reconnect();
    }

    /// The socket is gone: replies waiting on it fail with `unavailable` (`why` says how),
    /// writes in flight and targets' buffered changes are forgotten (queued writes are sent
    /// again and targets listen again on the next Welcome), and listeners go `fromCache`.
    pub(super) fn forget_connection(&self, why: &str) {
        self.trace(|| format!("connection gone: {why}"));
        let was_open = self.open.replace(false);
        self.queue_sent.set(false);
        self.deferred.set(None);
        // Collected first: a reply may call back into this state.
        let replies: Vec<super::Reply> =
            self.replies.borrow_mut().drain().map(|(_, r)| r).collect();
        for reply in replies {
            reply(Err(ClientError::new(ErrorCode::Unavailable, why)));
        }
        self.writes.borrow_mut().clear();
        self.epoch.set(self.epoch.get() + 1);
        self.unsettled.borrow_mut().clear();
        // Answers not yet taken are asked again: the batches are sent again, and the relay
        // answers a batch it committed with its first commit's version.
        self.sent_order.borrow_mut().clear();
        self.answers.borrow_mut().clear();
        self.wake_settle_waiters();
        for t in self.targets.borrow_mut().values_mut() {
            t.buffered.clear();
            t.existence = None;
            t.answered = false;
            t.sent = false;
        }
        // Offline now, also when this socket never opened: listeners holding back an empty
        // first snapshot for the relay's answer raise it from the cache.
        let _ = was_open;
        if let Some(e) = self.engine() {
            e.set_online(false);
        }
    }

    /// Closes the current socket, if any, after taking its event handlers off it: they are
    /// dropped with it, and a socket that is closing still delivers events.
    pub(super) fn detach_socket(&self) {
        let ws = self.ws.borrow_mut().take();
        if let Some(ws) = ws {
            ws.set_onopen(None);
            ws.set_onmessage(None);
            ws.set_onclose(None);
            let _ = ws.close();
        }
        self.handlers.borrow_mut().clear();
    }

    /// Connects again after the backoff delay with jitter (0.5 to 1.5 times it).
    fn schedule_reconnect(self: &Rc<Self>) {
        if self.closed.get() || !self.enabled.get() || self.refused.borrow().is_some() {
            return;
        }
        let base = self.backoff_ms.get();
        self.backoff_ms
            .set((base * super::BACKOFF_GROWTH).min(30_000.0));
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

    /// The socket opened: Hello, with a fresh token from the callback if there is one.
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
}
