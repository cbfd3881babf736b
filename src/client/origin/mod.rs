//! One engine per origin: every context (tab, worker) of an origin that opens a database
//! talks to one engine for it, which owns the relay connection, the write queue and the
//! IndexedDB writes.
//!
//! The engine runs in the context holding the database's leader lock (an exclusive Web
//! Lock, `hearth:leader:<database>`); the others are followers: their `Hearth` API is the
//! same, served over a `BroadcastChannel` (`hearth:engine:<database>`) by the leader's
//! [`host::Host`] through their [`proxy::Proxy`]. Every follower also waits for the lock:
//! when the leader closes or its context ends (a tab closed, a crash), the browser grants
//! it to one of them, which opens the engine and announces itself; every follower then
//! sends it again what the old leader had not answered and listens again, each listener
//! going on from the result it showed (`api::backend`). A write asked again is not queued
//! twice: it carries a key the queued batch keeps (`Batch::key`), and once the leader said
//! which batch holds it, the follower asks for that batch's answer instead.
//!
//! Where Web Locks are missing, each context runs its own engine over the shared IndexedDB
//! (the contexts then tell each other their changes, `tabs`).
//!
//! ```text
//! follower                          leader
//!   hello ───────────────────────►  leader {ctx, client}   (to all: a new follower, or a new leader)
//!   req {id, op, ...} ───────────►  rep {id, ok | err}     landed {id, batch} (writes)
//!   listen req {id: listener} ───►  ev {listener, ...}     (every snapshot)
//!   bye ─────────────────────────►  (its listeners dropped; also when its context lock frees)
//! ```

pub mod host;
pub mod proxy;
pub mod wire;

use js_sys::{Function, Promise, Reflect};
use std::cell::RefCell;
use std::rc::Rc;
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};

/// The leader lock's name for `database`.
pub fn leader_lock(database: &str) -> String {
    format!("hearth:leader:{database}")
}

/// The lock a follower context holds while it lives (the leader waits on it to drop the
/// follower's listeners when it goes without saying so).
pub fn context_lock(ctx: &str) -> String {
    format!("hearth:context:{ctx}")
}

/// The channel of `database`'s engine.
pub fn channel_name(database: &str) -> String {
    format!("hearth:engine:{database}")
}

/// A fresh context id: random, 16 hex digits.
pub fn new_context_id() -> String {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        for b in &mut bytes {
            *b = (js_sys::Math::random() * 256.0) as u8;
        }
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Requests the exclusive Web Lock `name`. With `if_available`, answers at once: the
/// function that releases it, or `None` when another context holds it. Without, waits until
/// it is granted. `None` too where Web Locks are missing or the request fails.
pub async fn request_lock(name: &str, if_available: bool) -> Option<Function> {
    let locks = crate::client::cache::locks()?;
    let request: Function = Reflect::get(&locks, &"request".into())
        .ok()?
        .dyn_into()
        .ok()?;
    let options = js_sys::Object::new();
    if if_available {
        Reflect::set(&options, &"ifAvailable".into(), &JsValue::TRUE).ok()?;
    }
    let release: Rc<RefCell<Option<Function>>> = Rc::default();
    let slot = release.clone();
    let mut granted_resolve: Option<Function> = None;
    let granted = Promise::new(&mut |resolve, _| granted_resolve = Some(resolve));
    let granted_resolve = granted_resolve?;
    // Called with the lock, or with null when another context holds it (`ifAvailable`).
    let callback = Closure::once_into_js(move |lock: JsValue| -> JsValue {
        let _ = granted_resolve.call1(&JsValue::UNDEFINED, &JsValue::from_bool(!lock.is_null()));
        if lock.is_null() {
            return JsValue::UNDEFINED;
        }
        // Held until this promise settles.
        Promise::new(&mut |resolve, _| *slot.borrow_mut() = Some(resolve)).into()
    });
    let pending = request
        .call3(&locks, &name.into(), &options, &callback)
        .ok()?;
    if let Ok(catch) =
        Reflect::get(&pending, &"catch".into()).and_then(|c| c.dyn_into::<Function>())
    {
        let ignore = Closure::once_into_js(|_: JsValue| {});
        let _ = catch.call1(&pending, &ignore);
    }
    let ok = wasm_bindgen_futures::JsFuture::from(granted).await.ok()?;
    if ok.as_bool() != Some(true) {
        return None;
    }
    let release_now = Closure::once_into_js(move || {
        if let Some(resolve) = release.borrow_mut().take() {
            let _ = resolve.call0(&JsValue::UNDEFINED);
        }
    });
    Some(release_now.unchecked_into())
}

/// Whether this context has Web Locks (an engine per origin needs them).
pub fn available() -> bool {
    crate::client::cache::locks().is_some()
}

/// A small map from increasing ids to values, in id order: a sorted vector (a context's
/// requests and listeners number in the tens to thousands; a tree or hash map of each kind
/// would cost the package more than it saves).
pub(crate) struct IdMap<T>(Vec<(u64, T)>);

impl<T> Default for IdMap<T> {
    fn default() -> Self {
        IdMap(Vec::new())
    }
}

impl<T> IdMap<T> {
    fn at(&self, id: u64) -> Result<usize, usize> {
        self.0.binary_search_by_key(&id, |(k, _)| *k)
    }

    /// Inserts or replaces the value of `id`.
    pub fn insert(&mut self, id: u64, value: T) {
        match self.at(id) {
            Ok(i) => self.0[i].1 = value,
            Err(i) => self.0.insert(i, (id, value)),
        }
    }

    pub fn get(&self, id: u64) -> Option<&T> {
        self.at(id).ok().map(|i| &self.0[i].1)
    }

    pub fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        self.at(id).ok().map(|i| &mut self.0[i].1)
    }

    pub fn remove(&mut self, id: u64) -> Option<T> {
        self.at(id).ok().map(|i| self.0.remove(i).1)
    }

    /// The ids, in order.
    pub fn ids(&self) -> Vec<u64> {
        self.0.iter().map(|(k, _)| *k).collect()
    }

    /// The values, in id order.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.0.iter().map(|(_, v)| v)
    }

    /// The values, in id order, to change.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.0.iter_mut().map(|(_, v)| v)
    }

    /// Empties the map, giving its values in id order.
    pub fn take(&mut self) -> Vec<T> {
        std::mem::take(&mut self.0)
            .into_iter()
            .map(|(_, v)| v)
            .collect()
    }
}
