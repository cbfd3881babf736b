//! The write queue's state, owned in one place: the pending batches (this context's copy of
//! the stored `mutations` store) and which of them are durable, the batch id sequence, the
//! promises waiting on batches, keyed writes being written and the answers of those that
//! left, and the write tickets behind `waitForPendingWrites()` and reads (see `pending`).
//!
//! Every method is synchronous and settles nothing itself: what is to be settled is
//! returned, for the engine to run once the queue is no longer borrowed (a settle may call
//! the engine back).

use std::cell::OnceCell;
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::rc::Rc;

use super::batch::{batch_id_after, Batch};
use super::Settle;
use crate::client::error::ClientError;
use hearth_core::path::DocumentName;

/// How many answered keyed batches the queue remembers (see `WriteQueue::dequeue`): a write
/// asked again is asked within moments of a leadership change.
const ANSWERED_KEYS: usize = 4096;

/// A `waitForPendingWrites()` still waiting for earlier writes to land.
pub(super) struct Barrier {
    /// The last ticket issued before the wait: it waits for every ticket up to this one.
    upto: u64,
    /// The last batch it waits for so far: the queue's last at the wait, then any later
    /// batch an earlier ticket landed as.
    pub(super) last: Option<u64>,
    /// Settles the wait's promise.
    pub(super) settle: Settle,
}

/// What became ready when a write landed (see [`WriteQueue::land`]).
pub(super) struct Landed {
    /// Barriers with no earlier ticket outstanding: they now wait for their last batch.
    pub(super) barriers: Vec<Barrier>,
    /// Reads whose earlier writes all landed: resolved to go on.
    pub(super) reads: Vec<js_sys::Function>,
}

/// The write queue of one engine (see the module's text).
pub(super) struct WriteQueue {
    /// Pending batches, oldest first.
    batches: Vec<Batch>,
    /// How many mutations of `batches` write each document: kept as batches come and go,
    /// since listeners ask which documents have pending writes at every snapshot.
    writing: HashMap<DocumentName, usize>,
    /// How many mutations of `batches` hold a server timestamp transform.
    timestamps: usize,
    /// `writing`'s names, made when first asked after a change (shared by the snapshots
    /// raised meanwhile).
    names: OnceCell<Rc<HashSet<DocumentName>>>,
    /// The ids of queued batches that are stored (durable): only those go to the relay.
    durable: HashSet<u64>,
    /// The last batch id handed out, so ids keep increasing (see `next_batch_id`).
    seq: u64,
    /// This context's tag in its batch ids (see `next_batch_id`).
    tag: u8,
    /// Promises waiting on a batch's answer, by batch id.
    waiters: HashMap<u64, Vec<Settle>>,
    /// Keyed writes being written, with the requests of the same write that came meanwhile
    /// (they take its outcome).
    writing_keys: HashMap<String, Vec<Settle>>,
    /// The answers of the last keyed batches that left the queue.
    answered_keys: VecDeque<(String, Result<u64, ClientError>)>,
    /// The last write ticket handed out.
    tickets_issued: u64,
    /// Tickets of writes called but not yet queued (or failed).
    landing: BTreeSet<u64>,
    /// `waitForPendingWrites()` calls waiting for such writes to land.
    barriers: Vec<Barrier>,
    /// Reads waiting for the writes called before them to land: (last such ticket, the
    /// resolve of the promise they await).
    read_barriers: Vec<(u64, js_sys::Function)>,
}

impl WriteQueue {
    /// The queue of the stored `batches` (every one durable), ids going on after the last
    /// under `tag`.
    pub(super) fn new(mut batches: Vec<Batch>, tag: u8) -> WriteQueue {
        hearth_core::sort::sort_by_key(&mut batches, |b| b.id);
        let mut queue = WriteQueue {
            seq: batches.last().map_or(0, |b| b.id),
            durable: batches.iter().map(|b| b.id).collect(),
            batches: Vec::new(),
            writing: HashMap::new(),
            timestamps: 0,
            names: OnceCell::new(),
            tag,
            waiters: HashMap::new(),
            writing_keys: HashMap::new(),
            answered_keys: VecDeque::new(),
            tickets_issued: 0,
            landing: BTreeSet::new(),
            barriers: Vec::new(),
            read_barriers: Vec::new(),
        };
        queue.set_batches(batches);
        queue
    }

    /// Counts `batch`'s mutations in (`add`) or out of the names and timestamps kept.
    fn count(&mut self, batch: &Batch, add: bool) {
        self.names = OnceCell::new();
        for m in &batch.mutations {
            let stamps = m.transforms.iter().filter(|(_, t)| is_server_timestamp(t));
            if add {
                *self.writing.entry(m.name.clone()).or_default() += 1;
                self.timestamps += stamps.count();
                continue;
            }
            self.timestamps = self.timestamps.saturating_sub(stamps.count());
            if let Some(n) = self.writing.get_mut(&m.name) {
                *n -= 1;
                if *n == 0 {
                    self.writing.remove(&m.name);
                }
            }
        }
    }

    /// Makes `batches` (sorted) the queue, recounting what is kept of it.
    fn set_batches(&mut self, batches: Vec<Batch>) {
        self.writing.clear();
        self.timestamps = 0;
        for b in &batches {
            self.count(b, true);
        }
        self.batches = batches;
    }

    /// Pending batches, oldest first.
    pub(super) fn batches(&self) -> &[Batch] {
        &self.batches
    }

    /// Queued batch `id`.
    pub(super) fn get(&self, id: u64) -> Option<&Batch> {
        self.batches.iter().find(|b| b.id == id)
    }

    /// The id of the queued batch of keyed write `key`.
    pub(super) fn keyed(&self, key: &str) -> Option<u64> {
        self.batches
            .iter()
            .find(|b| b.key.as_deref() == Some(key))
            .map(|b| b.id)
    }

    /// Whether a pending batch writes `name`. O(1).
    pub(super) fn has_pending(&self, name: &DocumentName) -> bool {
        self.writing.contains_key(name)
    }

    /// Whether a pending batch writes a server timestamp to `name`: O(1) when none does.
    pub(super) fn may_stamp(&self, name: &DocumentName) -> bool {
        self.timestamps > 0 && self.has_pending(name)
    }

    /// Names of every document with a pending write: made once per change of the queue.
    pub(super) fn pending_names(&self) -> Rc<HashSet<DocumentName>> {
        (self
            .names
            .get_or_init(|| Rc::new(self.writing.keys().cloned().collect())))
        .clone()
    }

    /// The batches before the first one not yet durable, less those `skip` names.
    pub(super) fn sendable(&self, skip: impl Fn(u64) -> bool) -> Vec<Batch> {
        self.batches
            .iter()
            .take_while(|b| self.durable.contains(&b.id))
            .filter(|b| !skip(b.id))
            .cloned()
            .collect()
    }

    /// A new batch id, increasing (see `Engine::next_batch_id`).
    pub(super) fn next_batch_id(&mut self) -> u64 {
        self.seq = batch_id_after(self.tag, self.seq);
        self.seq
    }

    /// Appends a batch being stored (not durable until `stored`).
    pub(super) fn push(&mut self, batch: Batch) {
        self.count(&batch, true);
        self.batches.push(batch);
    }

    /// Batch `id` is stored: it may be sent; `settle` waits on its answer.
    pub(super) fn stored(&mut self, id: u64, settle: Settle) {
        self.waiters.entry(id).or_default().push(settle);
        self.durable.insert(id);
    }

    /// Takes batch `id` out (answered, or never stored); returns its key if it was keyed,
    /// and remembers that key's `answer` (a write asked again gets it).
    pub(super) fn dequeue(
        &mut self,
        id: u64,
        answer: Option<&Result<u64, ClientError>>,
    ) -> Option<String> {
        let key = self.get(id).and_then(|b| b.key.clone());
        if let Some(at) = self.batches.iter().position(|b| b.id == id) {
            let batch = self.batches.remove(at);
            self.count(&batch, false);
        }
        self.durable.remove(&id);
        let (key, answer) = (key?, answer?);
        if self.answered_keys.len() >= ANSWERED_KEYS {
            self.answered_keys.pop_front();
        }
        self.answered_keys.push_back((key.clone(), answer.clone()));
        Some(key)
    }

    /// The queue another context stored (`stored`, every batch durable): replaces this one's;
    /// returns whether it holds batches this one did not.
    pub(super) fn replace(&mut self, mut stored: Vec<Batch>) -> bool {
        hearth_core::sort::sort_by_key(&mut stored, |b| b.id);
        let new: Vec<u64> = (stored.iter())
            .filter(|b| self.get(b.id).is_none())
            .map(|b| b.id)
            .collect();
        self.set_batches(stored);
        self.durable.extend(&new);
        !new.is_empty()
    }

    /// Adds `settle` to batch `id`'s waiters if it is queued; else gives it back.
    pub(super) fn wait_on(&mut self, id: u64, settle: Settle) -> Option<Settle> {
        if self.get(id).is_none() {
            return Some(settle);
        }
        self.waiters.entry(id).or_default().push(settle);
        None
    }

    /// The latest queued batch at or before `last`: the one a wait for `last` waits on.
    pub(super) fn latest_upto(&self, last: Option<u64>) -> Option<u64> {
        let last = last?;
        self.batches
            .iter()
            .rev()
            .map(|b| b.id)
            .find(|&id| id <= last)
    }

    /// Adds `settle` to batch `id`'s waiters, queued or not.
    pub(super) fn add_waiter(&mut self, id: u64, settle: Settle) {
        self.waiters.entry(id).or_default().push(settle);
    }

    /// The promises waiting on batch `id`.
    pub(super) fn take_waiters(&mut self, id: u64) -> Vec<Settle> {
        self.waiters.remove(&id).unwrap_or_default()
    }

    /// Every waiting promise (the database closed).
    pub(super) fn take_all_waiting(&mut self) -> Vec<Settle> {
        let waiters = self.waiters.drain().flat_map(|(_, ws)| ws);
        let barriers = self.barriers.drain(..).map(|b| b.settle);
        waiters.chain(barriers).collect()
    }

    /// Keyed write `key` starts being written, unless it is already: then `settle` joins it
    /// (`None`); else `settle` is given back.
    pub(super) fn start_keyed(&mut self, key: &str, settle: Settle) -> Option<Settle> {
        if let Some(waiting) = self.writing_keys.get_mut(key) {
            waiting.push(settle);
            return None;
        }
        self.writing_keys.insert(key.to_owned(), Vec::new());
        Some(settle)
    }

    /// Keyed write `key` is settled: the requests that joined it.
    pub(super) fn finish_keyed(&mut self, key: &str) -> Vec<Settle> {
        self.writing_keys.remove(key).unwrap_or_default()
    }

    /// The answer kept for keyed write `key`, if it left the queue lately.
    pub(super) fn answered(&self, key: &str) -> Option<Result<u64, ClientError>> {
        (self.answered_keys.iter())
            .find(|(a, _)| a == key)
            .map(|(_, r)| r.clone())
    }

    /// A ticket for a write being called now; `land` returns it.
    pub(super) fn issue(&mut self) -> u64 {
        self.tickets_issued += 1;
        self.landing.insert(self.tickets_issued);
        self.tickets_issued
    }

    /// The last ticket issued.
    pub(super) fn issued(&self) -> u64 {
        self.tickets_issued
    }

    /// Whether every ticket up to `upto` has landed.
    pub(super) fn landed_upto(&self, upto: u64) -> bool {
        self.landing.first().is_none_or(|t| *t > upto)
    }

    /// Ticket `ticket` landed, as batch `batch` or failed: what became ready.
    pub(super) fn land(&mut self, ticket: u64, batch: Option<u64>) -> Landed {
        self.landing.remove(&ticket);
        let first = self.landing.first().copied();
        let ready = |upto: u64| first.is_none_or(|t| t > upto);
        for b in self.barriers.iter_mut().filter(|b| ticket <= b.upto) {
            b.last = b.last.max(batch);
        }
        let (barriers, waiting) = std::mem::take(&mut self.barriers)
            .into_iter()
            .partition(|b| ready(b.upto));
        self.barriers = waiting;
        let (reads, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.read_barriers)
            .into_iter()
            .partition(|(upto, _)| ready(*upto));
        self.read_barriers = waiting;
        Landed {
            barriers,
            reads: reads.into_iter().map(|(_, resolve)| resolve).collect(),
        }
    }

    /// A read waits for the tickets up to `upto` to land (`resolve` runs then).
    pub(super) fn wait_landed(&mut self, upto: u64, resolve: js_sys::Function) {
        self.read_barriers.push((upto, resolve));
    }

    /// A `waitForPendingWrites()` called now: settles once batch `last` (the queue's last
    /// now) and every batch of a ticket issued now is answered. `None`: no ticket is
    /// outstanding, and `settle` is given back to wait for `last` at once.
    pub(super) fn barrier(&mut self, settle: Settle) -> Option<(Option<u64>, Settle)> {
        let last = self.batches.last().map(|b| b.id);
        if self.landing.is_empty() {
            return Some((last, settle));
        }
        self.barriers.push(Barrier {
            upto: self.tickets_issued,
            last,
            settle,
        });
        None
    }
}

/// Whether `t` is a server timestamp (a pending one shows as `serverTimestamps` says).
fn is_server_timestamp(t: &hearth_core::mutation::FieldTransform) -> bool {
    matches!(t, hearth_core::mutation::FieldTransform::ServerTimestamp)
}
