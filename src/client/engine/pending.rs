//! `waitForPendingWrites()` and the writes issued before it. A write is counted as issued
//! when the app calls it (synchronously, see `Engine::write`), but its batch joins the queue
//! only after it was applied locally, a few awaits later; a wait made in between must still
//! wait for it. So each write holds a ticket from its call until it has landed (queued, or
//! failed locally), and a wait that finds tickets outstanding is a barrier: it settles on
//! the acknowledgement of the last batch issued before it, once every earlier ticket landed.
//!
//! Reads are ordered after the writes called before them the same way: a read notes the last
//! ticket issued when it is called (`issued`) and waits for those tickets to land
//! (`until_landed`) before it reads the local view, so it sees them.
//!
//! Invariant: a wait settles only after the relay answered every batch whose write was
//! called before it (acknowledgements come in queue order, so the last one stands for all).

use std::rc::Rc;

use super::{Engine, Settle};

/// A `waitForPendingWrites()` still waiting for earlier writes to land.
pub(super) struct Barrier {
    /// The last ticket issued before the wait: it waits for every ticket up to this one.
    upto: u64,
    /// The last batch it waits for so far: the queue's last at the wait, then any later
    /// batch an earlier ticket landed as.
    last: Option<u64>,
    /// Settles the wait's promise.
    pub(super) settle: Settle,
}

impl Engine {
    /// A ticket for a write being called now; `landed` returns it.
    pub(super) fn issue_write(&self) -> u64 {
        let ticket = self.tickets_issued.get() + 1;
        self.tickets_issued.set(ticket);
        self.landing.borrow_mut().insert(ticket);
        ticket
    }

    /// Write `ticket` has landed: queued as batch `batch` (before it is sent), or failed
    /// (`None`). Barriers with no earlier ticket outstanding now wait for their last batch.
    pub(super) fn landed(self: &Rc<Self>, ticket: u64, batch: Option<u64>) {
        self.landing.borrow_mut().remove(&ticket);
        let first_outstanding = self.landing.borrow().first().copied();
        let ready: Vec<Barrier> = {
            let mut barriers = self.barriers.borrow_mut();
            for b in barriers.iter_mut().filter(|b| ticket <= b.upto) {
                b.last = b.last.max(batch);
            }
            let (ready, waiting) = std::mem::take(&mut *barriers)
                .into_iter()
                .partition(|b| first_outstanding.is_none_or(|t| t > b.upto));
            *barriers = waiting;
            ready
        };
        for b in ready {
            self.wait_for_batch(b.last, b.settle);
        }
        let reads: Vec<js_sys::Function> = {
            let mut reads = self.read_barriers.borrow_mut();
            let (ready, waiting) = std::mem::take(&mut *reads)
                .into_iter()
                .partition(|(upto, _)| first_outstanding.is_none_or(|t| t > *upto));
            *reads = waiting;
            ready.into_iter().map(|(_, resolve)| resolve).collect()
        };
        for resolve in reads {
            let _ = resolve.call0(&wasm_bindgen::JsValue::UNDEFINED);
        }
    }

    /// The last write ticket issued: a read called now must see the writes up to it.
    pub fn issued(&self) -> u64 {
        self.tickets_issued.get()
    }

    /// Waits until every write up to ticket `upto` has landed in the local view (or failed).
    pub async fn until_landed(&self, upto: u64) {
        if self.landing.borrow().first().is_none_or(|t| *t > upto) {
            return;
        }
        let promise = js_sys::Promise::new(&mut |resolve, _| {
            self.read_barriers.borrow_mut().push((upto, resolve));
        });
        let _ = wasm_bindgen_futures::JsFuture::from(promise).await;
    }

    /// Resolves when every write called before this call is answered by the relay:
    /// the batches queued now, and those of writes still being applied locally.
    pub fn wait_for_pending(&self, settle: Settle) {
        let last = self.queue.borrow().last().map(|b| b.id);
        if self.landing.borrow().is_empty() {
            self.wait_for_batch(last, settle);
        } else {
            self.barriers.borrow_mut().push(Barrier {
                upto: self.tickets_issued.get(),
                last,
                settle,
            });
        }
    }

    /// Settles `settle` once batch `last` is answered, or the latest queued batch before it
    /// should `last` have left the queue already; at once when none is queued. A refused
    /// batch settles it too: as in Firestore, the wait is for the writes to be settled, and
    /// each write's own promise carries its refusal.
    fn wait_for_batch(&self, last: Option<u64>, settle: Settle) {
        let settle: Settle = Box::new(move |r| settle(Ok(r.unwrap_or(0))));
        let target = last.and_then(|last| {
            self.queue
                .borrow()
                .iter()
                .rev()
                .map(|b| b.id)
                .find(|&id| id <= last)
        });
        match target {
            None => settle(Ok(0)),
            Some(id) => self
                .waiters
                .borrow_mut()
                .entry(id)
                .or_default()
                .push(settle),
        }
    }
}
