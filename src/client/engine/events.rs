//! What the engine tells the parts around it: the sync session (a batch to send, a listener
//! to listen to the relay for, documents evicted) and the origin's other contexts (documents
//! changed, a batch answered). The engine knows neither: each subscribes to its
//! [`Events`] and hears every [`EngineEvent`], in the order they happen.
//!
//! Invariant: an event is told once no engine state is borrowed for it, so a subscriber may
//! call the engine back; the subscribers are copied before the telling, so one may subscribe
//! or unsubscribe while it runs.

use std::cell::RefCell;
use std::rc::Rc;

use crate::client::error::ClientError;
use hearth_core::path::DocumentName;
use hearth_core::query::model::Query;

/// One thing that happened in the engine.
pub enum EngineEvent<'a> {
    /// A batch became durable: the queue has batches to send (see `sendable_batches`).
    BatchDurable,
    /// Listener `0` started on query `1`: the relay is to be listened to for it.
    Listen(u64, &'a Query),
    /// Listener `0` stopped.
    Unlisten(u64),
    /// This context changed these documents in the local view (a write, an answer, a
    /// server document): other contexts sharing the IndexedDB database re-read them.
    LocalChange(&'a [DocumentName]),
    /// This context took the relay's answer to batch `0`.
    Settled(u64, &'a Result<u64, ClientError>),
    /// An eviction deleted documents: resume points may no longer be whole.
    Evicted,
}

/// A subscriber's callback.
type Subscriber = Rc<dyn Fn(&EngineEvent)>;

/// The engine's subscribers, each under the id `subscribe` gave it.
#[derive(Default)]
pub struct Events {
    /// The last id given, and the subscribers by id, in the order they subscribed.
    subscribers: RefCell<(u64, Vec<(u64, Subscriber)>)>,
}

impl Events {
    /// Adds `f`, told every later event; returns the id that `unsubscribe` takes.
    pub fn subscribe(&self, f: impl Fn(&EngineEvent) + 'static) -> u64 {
        let mut subs = self.subscribers.borrow_mut();
        subs.0 += 1;
        let id = subs.0;
        subs.1.push((id, Rc::new(f)));
        id
    }

    /// Removes subscriber `id` (nothing if it is gone).
    pub fn unsubscribe(&self, id: u64) {
        self.subscribers.borrow_mut().1.retain(|(s, _)| *s != id);
    }

    /// Tells `event` to every subscriber.
    pub(super) fn emit(&self, event: &EngineEvent) {
        let subs: Vec<Subscriber> = self
            .subscribers
            .borrow()
            .1
            .iter()
            .map(|(_, f)| f.clone())
            .collect();
        for f in subs {
            f(event);
        }
    }

    /// Drops every subscriber (the engine closed).
    pub(super) fn clear(&self) {
        self.subscribers.borrow_mut().1.clear();
    }
}
