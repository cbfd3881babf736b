//! A listener as the app registered it, and how it goes on when it moves to another engine
//! (the origin's leader changed): its next snapshot's changes are told against the result
//! it showed, so the app's `docChanges()` go on from what it holds; and a listener that
//! showed the relay's result holds the new engine's snapshots from its cache until the
//! relay's come (at most `MOVE_HOLD_MS`, 1 s), since that cache may be older than what the old
//! leader showed (it showed the relay's documents before writing them, and went before the
//! write), and a listener must not go back to a state it already left.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use hearth_core::query::model::Query;
use hearth_core::query::view::{DocChange, ResultSnapshot, View};

use crate::client::engine::{data_changes_between, ListenEvent};
use crate::client::origin::proxy::Watch;

/// How long a moved listener holds back its new engine's snapshots from the cache.
const MOVE_HOLD_MS: f64 = 1000.0;

/// One listener of the app.
pub(super) struct Registration {
    /// What it watches.
    pub watch: Watch,
    /// `includeMetadataChanges`.
    pub include: bool,
    /// The app's callback (wrapped by the API).
    callback: Rc<dyn Fn(ListenEvent)>,
    /// A query listener's last result raised (what the app holds).
    shown: RefCell<Option<ResultSnapshot>>,
    /// Whether the last snapshot raised was the relay's (not from the cache).
    synced: Cell<bool>,
    /// Set when it moved to another engine (see the module's comment).
    pub moved: Rc<Cell<bool>>,
    /// The latest snapshot held back since it moved, and whether the hold's time ran out.
    held: RefCell<(Option<ListenEvent>, bool)>,
    /// Its id in this context's engine, when local.
    pub engine_id: Cell<Option<u64>>,
    /// Set when the app stopped it: nothing more reaches its callback, not even a first
    /// snapshot already on its way.
    stopped: Cell<bool>,
}

impl Registration {
    pub fn new(watch: Watch, include: bool, callback: Rc<dyn Fn(ListenEvent)>) -> Registration {
        Registration {
            watch,
            include,
            callback,
            shown: RefCell::new(None),
            synced: Cell::new(false),
            moved: Rc::new(Cell::new(false)),
            held: RefCell::new((None, false)),
            engine_id: Cell::new(None),
            stopped: Cell::new(false),
        }
    }

    /// The app stopped it: its callback is called no more.
    pub fn stop(&self) {
        self.stopped.set(true);
    }

    /// The callback an engine (or the leader, through a proxy) calls with its snapshots.
    pub fn continuing(self: &Rc<Self>) -> Rc<dyn Fn(ListenEvent)> {
        let reg = self.clone();
        Rc::new(move |ev: ListenEvent| reg.take(ev))
    }

    fn take(self: &Rc<Self>, ev: ListenEvent) {
        if self.moved.get() && self.synced.get() && from_cache(&ev) {
            let mut held = self.held.borrow_mut();
            if !held.1 {
                let first = held.0.replace(ev).is_none();
                drop(held);
                if first {
                    self.hold_for_a_while();
                }
                return;
            }
        }
        self.held.replace((None, false));
        self.raise(ev);
    }

    /// Raises what is held once the hold's time runs out, if the relay's snapshot has not.
    fn hold_for_a_while(self: &Rc<Self>) {
        let weak = Rc::downgrade(self);
        wasm_bindgen_futures::spawn_local(async move {
            crate::client::js::sleep(MOVE_HOLD_MS).await;
            let Some(reg) = weak.upgrade() else { return };
            let held = {
                let mut held = reg.held.borrow_mut();
                held.1 = true;
                held.0.take()
            };
            if let Some(ev) = held {
                reg.raise(ev);
            }
        });
    }

    fn raise(&self, mut ev: ListenEvent) {
        if self.stopped.get() {
            return;
        }
        if let ListenEvent::Query { docs, changes, .. } = &mut ev {
            let before = self.shown.replace(Some(docs.clone()));
            if self.moved.replace(false) {
                if let (Some(before), Watch::Query(q)) = (before, &self.watch) {
                    *changes = moved_changes(q, &before, docs);
                }
            }
        } else {
            self.moved.set(false);
        }
        if !matches!(ev, ListenEvent::Error(_)) {
            self.synced.set(!from_cache(&ev));
        }
        (self.callback)(ev);
    }
}

/// Whether a snapshot is from the cache.
fn from_cache(ev: &ListenEvent) -> bool {
    match ev {
        ListenEvent::Query { from_cache, .. } | ListenEvent::Document { from_cache, .. } => {
            *from_cache
        }
        ListenEvent::Error(_) => false,
    }
}

/// The data changes from result `before` to `after` of query `q`.
fn moved_changes(q: &Query, before: &ResultSnapshot, after: &ResultSnapshot) -> Vec<DocChange> {
    let Ok(q) = hearth_core::query::validate::validate(q) else {
        return Vec::new();
    };
    let view = View::new(q, Vec::new());
    data_changes_between(&view, &before.to_vec(), &after.to_vec())
}
