//! The cache budget: when the documents a database caches take more than its budget, the
//! least recently written ones that nothing holds are evicted.
//!
//! - **Budget**: `Hearth.open({ cacheSizeBytes })`, default [`DEFAULT_BUDGET`] (40 MiB), at
//!   least [`MIN_BUDGET`], or `-1` for no limit. Only a database with a relay evicts: without
//!   one the local copy is the database, and nothing in it can be fetched again.
//! - **Size** of a document: its key, encoded bytes and index entry keys, as stored.
//! - **Held** (never evicted): documents in any listener's current result or watched by a
//!   document listener, documents with a pending write (from the `mutations` store, so other
//!   tabs' pending writes too), and the last [`RECENT`] documents a read of this tab returned.
//! - **Order**: oldest last write first (`t` in the record: a local write, or a server
//!   version arriving). Reads do not rewrite records; recently read documents are held
//!   instead.
//! - **When**: writes add the bytes they store to an estimate (never subtracting, so it
//!   only overestimates); once it passes the budget (or, when held documents kept the last
//!   collection above it, 15 % of the budget more than that collection left), or shortly
//!   after open, a collection walks the store for the exact size. Above [`START`] of the budget it evicts down to
//!   [`TARGET`], so a collection is followed by at least 15 % of the budget in writes before
//!   the next. The walk and the deletions hold the engine's write lock.
//! - **Resume points**: a target's stored resume version promises the cache holds its
//!   result; an eviction deletes every stored one in its own transaction (listened targets
//!   keep theirs in memory and store it again with their next snapshot), and the sync layer
//!   forgets those it kept in memory for targets not being listened to, so they are fetched
//!   whole next time. A query with an offset holds the documents it skips too (its target
//!   is the query without the offset, see `sync`).
//! - **Tabs**: another tab's listeners hold documents this tab cannot see, so a tab only
//!   collects while it is the only one with the database open (a shared Web Lock per open
//!   database, counted with `navigator.locks.query()`), checked before the walk and again
//!   before the deletions; otherwise collection waits for a later trigger. Where Web Locks
//!   are missing, nothing is evicted.

use std::cell::{Cell, RefCell};
use std::collections::{HashSet, VecDeque};
use std::future::Future;
use std::rc::Rc;

use js_sys::{Function, Promise, Reflect};
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

use super::error::ClientError;
use super::idb_store::{IdbStore, Key, Store, WriteOp};
use super::lock::AsyncLock;
use hearth_core::path::DocumentName;

/// The default budget: 40 MiB.
pub const DEFAULT_BUDGET: u64 = 40 * 1024 * 1024;
/// The smallest budget accepted: 1 MiB.
pub const MIN_BUDGET: u64 = 1024 * 1024;
/// How many recently read documents are held.
pub const RECENT: usize = 2000;
/// A collection evicts only above this share of the budget...
pub const START: f64 = 0.9;
/// ...and then down to this share.
pub const TARGET: f64 = 0.75;

/// The budget and the bookkeeping between collections.
pub struct Cache {
    /// `None`: no limit (or no relay).
    budget: Option<u64>,
    /// Bytes stored, an overestimate: the last exact size plus every write since (0 until
    /// the first collection, which runs shortly after open, measures it).
    estimate: Cell<u64>,
    /// The estimate past which the next collection is due: the budget, or 15 % of it above
    /// what the last collection left, whichever is more (held documents can keep the cache
    /// over budget, and each collection walks the whole store).
    next_at: Cell<u64>,
    /// The last [`RECENT`] documents reads returned, oldest first: held while they are here.
    recent: RefCell<VecDeque<DocumentName>>,
    /// Whether a collection is under way (one at a time: each walks the whole store).
    running: Cell<bool>,
}

impl Cache {
    pub fn new(budget: Option<u64>) -> Cache {
        Cache {
            budget,
            estimate: Cell::new(0),
            next_at: Cell::new(budget.unwrap_or(u64::MAX)),
            recent: RefCell::new(VecDeque::new()),
            running: Cell::new(false),
        }
    }

    pub fn budget(&self) -> Option<u64> {
        self.budget
    }

    /// Counts `bytes` just written; true when a collection is due.
    pub fn wrote(&self, bytes: u64) -> bool {
        if self.budget.is_none() {
            return false;
        }
        self.estimate.set(self.estimate.get().saturating_add(bytes));
        self.estimate.get() > self.next_at.get()
    }

    /// Remembers documents a read returned (they are held while recent).
    pub fn read<'a>(&self, names: impl IntoIterator<Item = &'a DocumentName>) {
        if self.budget.is_none() {
            return;
        }
        let mut recent = self.recent.borrow_mut();
        for n in names {
            recent.push_back(n.clone());
        }
        while recent.len() > RECENT {
            recent.pop_front();
        }
    }

    pub fn recent(&self) -> Vec<DocumentName> {
        self.recent.borrow().iter().cloned().collect()
    }

    /// Marks a collection as running; false if one already is.
    pub fn begin(&self) -> bool {
        !self.running.replace(true)
    }

    /// Ends a collection; `exact` is the size it left (`None`: it did not run).
    pub fn end(&self, exact: Option<u64>) {
        if let Some(bytes) = exact {
            self.estimate.set(bytes);
        }
        if let Some(budget) = self.budget {
            let gap = ((START - TARGET) * budget as f64) as u64;
            self.next_at
                .set(budget.max(self.estimate.get().saturating_add(gap)));
        }
        self.running.set(false);
    }

    /// Enforces the budget on `database`'s `store`: returns how many documents were evicted.
    /// `lock` is the engine's write lock; `held` gives the keys of the documents the engine
    /// holds, and is awaited only under the lock, once the walk found the cache above
    /// [`START`] (the engine's holders change while it waits for the lock).
    pub async fn collect(
        &self,
        database: &str,
        store: &IdbStore,
        lock: &AsyncLock,
        held: impl Future<Output = Result<HashSet<Vec<u8>>, ClientError>>,
    ) -> Result<usize, ClientError> {
        let Some(budget) = self.budget() else {
            return Ok(0);
        };
        if !self.begin() {
            return Ok(0);
        }
        if !alone(database).await {
            self.end(None);
            return Ok(0);
        }
        let result = collect_locked(database, store, lock, budget, held).await;
        self.end(result.as_ref().ok().map(|r| r.1));
        Ok(result?.0)
    }
}

/// The walk and the deletions, under the write lock: (documents evicted, bytes after).
async fn collect_locked(
    database: &str,
    store: &IdbStore,
    lock: &AsyncLock,
    budget: u64,
    held: impl Future<Output = Result<HashSet<Vec<u8>>, ClientError>>,
) -> Result<(usize, u64), ClientError> {
    let _guard = lock.lock().await;
    let usage = store.usage().await?;
    let total: u64 = usage.iter().map(|u| u.1).sum();
    if (total as f64) <= budget as f64 * START {
        return Ok((0, total));
    }
    let held = held.await?;
    let target = (budget as f64 * TARGET) as u64;
    let (victims, after) = victims(usage, &held, target);
    let count = victims.len();
    // Another context may have opened the database during the walk: its listeners hold
    // documents this one cannot see.
    if count == 0 || !alone(database).await {
        return Ok((0, total));
    }
    let mut ops: Vec<WriteOp> = victims
        .into_iter()
        .map(|key| WriteOp::Delete {
            store: Store::Documents,
            key: Key::Bytes(key),
        })
        .collect();
    // Every stored resume version goes with them, in the same transaction: each promised
    // that the cache holds its target's result. Listened targets keep theirs in memory
    // (their documents are held) and store it again with their next snapshot.
    ops.push(WriteOp::DeleteRange {
        store: Store::Targets,
        start: Vec::new(),
        end: vec![0xff],
    });
    store.write(ops).await?;
    Ok((count, after))
}

/// The bytes a write op stores towards the cache budget (document records only).
pub fn stored_bytes(op: &WriteOp) -> u64 {
    match op {
        WriteOp::PutDocument {
            key,
            value,
            index_keys,
            ..
        } => (key.len() + value.len() + index_keys.iter().map(Vec::len).sum::<usize>()) as u64,
        _ => 0,
    }
}

/// The documents to evict: the oldest-written of `usage` (key, bytes, last write) that are
/// not `held`, until the total is at most `target`. Returns them and the total after.
pub fn victims(
    mut usage: Vec<(Vec<u8>, u64, f64)>,
    held: &HashSet<Vec<u8>>,
    target: u64,
) -> (Vec<Vec<u8>>, u64) {
    let mut total: u64 = usage.iter().map(|u| u.1).sum();
    hearth_core::sort::sort_by(&mut usage, |a, b| {
        a.2.total_cmp(&b.2).then_with(|| a.0.cmp(&b.0))
    });
    let mut out = Vec::new();
    for (key, size, _) in usage {
        if total <= target {
            break;
        }
        if held.contains(&key) {
            continue;
        }
        total -= size;
        out.push(key);
    }
    (out, total)
}

/// The Web Lock each open database holds (shared) while it is open.
fn lock_name(database: &str) -> String {
    format!("hearth:open:{database}")
}

/// `navigator.locks`, where the context has it.
pub(crate) fn locks() -> Option<JsValue> {
    let navigator = Reflect::get(&js_sys::global(), &"navigator".into()).ok()?;
    let locks = Reflect::get(&navigator, &"locks".into()).ok()?;
    (!locks.is_undefined() && !locks.is_null()).then_some(locks)
}

/// Holds the shared "open" lock of `database` until the returned function is called; the
/// promise resolves once the lock is let go (the browser lets it go a task or so after the
/// release; `close()` waits for that, so a `clearPersistence()` right after finds it free).
pub fn hold_open_lock(database: &str) -> Option<(Function, Promise)> {
    let locks = locks()?;
    let request: Function = Reflect::get(&locks, &"request".into())
        .ok()?
        .dyn_into()
        .ok()?;
    // The resolve that ends the hold once granted, and whether the release came first: the
    // lock is granted in a later task, and a database closed before then must not take it
    // (it would stay held by nobody until the context ends, and `clearPersistence()` would
    // find the database open).
    let state: Rc<RefCell<(Option<Function>, bool)>> = Rc::default();
    let slot = state.clone();
    // The lock is held until the promise the callback returns settles.
    let callback = Closure::once_into_js(move |_lock: JsValue| -> JsValue {
        if slot.borrow().1 {
            return JsValue::UNDEFINED;
        }
        Promise::new(&mut |resolve, _| slot.borrow_mut().0 = Some(resolve)).into()
    });
    let options = js_sys::Object::new();
    Reflect::set(&options, &"mode".into(), &"shared".into()).ok()?;
    let granted = request
        .call3(&locks, &lock_name(database).into(), &options, &callback)
        .ok()?;
    // A request that fails (e.g. the context goes away) is nothing to report.
    let ignore = Closure::once_into_js(|_: JsValue| {});
    let catch: Function = Reflect::get(&granted, &"catch".into())
        .ok()?
        .dyn_into()
        .ok()?;
    let ended: Promise = catch.call1(&granted, &ignore).ok()?.dyn_into().ok()?;
    let release_now = Closure::once_into_js(move || {
        let resolve = {
            let mut s = state.borrow_mut();
            s.1 = true;
            s.0.take()
        };
        if let Some(resolve) = resolve {
            let _ = resolve.call0(&JsValue::UNDEFINED);
        }
    });
    Some((release_now.unchecked_into(), ended))
}

/// Whether this context is the only one holding `database` open. False where Web Locks are
/// missing (nothing to count with: another context's listeners may hold anything).
pub async fn alone(database: &str) -> bool {
    holders(database).await.is_some_and(|n| n <= 1)
}

/// How many contexts of the origin hold `database` open (its shared "open" lock); `None`
/// where Web Locks are missing.
pub async fn holders(database: &str) -> Option<usize> {
    let locks = locks()?;
    let query = Reflect::get(&locks, &"query".into())
        .ok()
        .and_then(|q| q.dyn_into::<Function>().ok())?;
    let promise = query
        .call0(&locks)
        .and_then(|p| p.dyn_into::<Promise>())
        .ok()?;
    let snapshot = JsFuture::from(promise).await.ok()?;
    let name = lock_name(database);
    let held = Reflect::get(&snapshot, &"held".into())
        .ok()
        .map(|a| js_sys::Array::from(&a))
        .map(|a| {
            a.iter()
                .filter(|l| {
                    Reflect::get(l, &"name".into())
                        .ok()
                        .and_then(|n| n.as_string())
                        .is_some_and(|n| n == name)
                })
                .count()
        })
        .unwrap_or(0);
    Some(held)
}
