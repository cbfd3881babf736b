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

impl Engine {
    /// A ticket for a write being called now; `landed` returns it.
    pub(super) fn issue_write(&self) -> u64 {
        self.writes.borrow_mut().issue()
    }

    /// Write `ticket` has landed: queued as batch `batch` (before it is sent), or failed
    /// (`None`). Barriers with no earlier ticket outstanding now wait for their last batch.
    pub(super) fn landed(self: &Rc<Self>, ticket: u64, batch: Option<u64>) {
        let ready = self.writes.borrow_mut().land(ticket, batch);
        for b in ready.barriers {
            self.wait_for_batch(b.last, b.settle);
        }
        for resolve in ready.reads {
            let _ = resolve.call0(&wasm_bindgen::JsValue::UNDEFINED);
        }
    }

    /// The last write ticket issued: a read called now must see the writes up to it.
    pub fn issued(&self) -> u64 {
        self.writes.borrow().issued()
    }

    /// Waits until every write up to ticket `upto` has landed in the local view (or failed).
    pub async fn until_landed(&self, upto: u64) {
        if self.writes.borrow().landed_upto(upto) {
            return;
        }
        let promise = js_sys::Promise::new(&mut |resolve, _| {
            self.writes.borrow_mut().wait_landed(upto, resolve);
        });
        let _ = wasm_bindgen_futures::JsFuture::from(promise).await;
    }

    /// Resolves when every write called before this call is answered by the relay:
    /// the batches queued now, and those of writes still being applied locally.
    pub fn wait_for_pending(&self, settle: Settle) {
        let now = self.writes.borrow_mut().barrier(settle);
        if let Some((last, settle)) = now {
            self.wait_for_batch(last, settle);
        }
    }

    /// Settles `settle` once batch `last` is answered, or the latest queued batch before it
    /// should `last` have left the queue already; at once when none is queued. A refused
    /// batch settles it too: as in Firestore, the wait is for the writes to be settled, and
    /// each write's own promise carries its refusal.
    fn wait_for_batch(&self, last: Option<u64>, settle: Settle) {
        let settle: Settle = Box::new(move |r| settle(Ok(r.unwrap_or(0))));
        let mut writes = self.writes.borrow_mut();
        match writes.latest_upto(last) {
            None => {
                drop(writes);
                settle(Ok(0));
            }
            Some(id) => writes.add_waiter(id, settle),
        }
    }
}
