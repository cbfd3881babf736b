//! The documents the store read or wrote last, in memory: a point read of one of them makes
//! no IndexedDB request.
//!
//! Only an engine that is the database's one writer turns it on ([`IdbStore::keep_in_memory`]:
//! the holder of the origin's leader lock). Every write of `documents` then goes through this
//! connection, and the memo follows IndexedDB's order of transactions exactly:
//!
//! - Each write transaction takes the next generation when it is made. The documents it
//!   writes leave the memo at once, and come back with the written bytes only once the
//!   transaction completes, and only if no later write of them began meanwhile. A write
//!   that fails or aborts puts nothing back, so nothing it wrote is ever read from here.
//! - A read transaction takes the generation current when it is made, and IndexedDB shows
//!   it every write made before it and none made after. So a read uses an entry only if the
//!   write (or read) that put it there is of its generation or older; else it asks
//!   IndexedDB, on its own transaction, as without the memo.
//! - A read puts what IndexedDB answered only if no write began since its transaction was
//!   made (the answer is then the newest committed state).
//! - A range deletion of `documents` empties the memo, and no write begun before it (or
//!   the deleting write itself) puts anything back.
//!
//! An entry written by this connection, or read whole with its record, also holds the
//! document's index entry keys: a scan of the `entries` index then asks IndexedDB only for
//! the documents' keys, and takes the index keys and documents from here.
//!
//! The memo holds at most [`MEMO_BUDGET`] bytes (keys, values, decoded documents and a
//! fixed overhead per entry), first in, first out; a document decoded for a query counts as
//! put again then.
//!
//! [`IdbStore::keep_in_memory`]: super::IdbStore::keep_in_memory

use std::collections::HashMap;

use hearth_core::document::Document;
use hearth_core::encoding::document::decode_document;

use super::fifo::Fifo;
use super::ops::{Store, WriteOp};
use super::scans::Scans;

/// Bytes the memo may hold: about 11,000 documents of 150 bytes with 8 index keys.
pub const MEMO_BUDGET: usize = 8 << 20;

/// What an entry costs beyond its key and value (the map's slot, the queue's copy of the key).
const ENTRY_OVERHEAD: usize = 64;

/// Scans made the usual way after one that tried the memo and missed.
const SCAN_REST: u32 = 8;

/// What an index key costs beyond its bytes.
const INDEX_KEY_OVERHEAD: usize = 16;

/// What a decoded document is counted as, per byte of its encoding: its map's nodes, names
/// and values take several times the encoded bytes. A seed-000 document of 160 bytes took
/// 1,517 bytes of heap decoded on a 64-bit target (a native count of its allocations);
/// wasm32's pointers and lengths are half as wide, so about 6 bytes per encoded byte here
/// (an estimate, not measured in wasm).
const DECODED_PER_BYTE: usize = 6;

/// A document as the memo holds it: its encoded bytes, its index entry keys if known, and
/// the document decoded once a query asked for it.
pub(super) struct Remembered {
    pub value: Vec<u8>,
    pub index_keys: Option<Vec<Vec<u8>>>,
    pub decoded: Option<Document>,
}

impl Remembered {
    /// Bytes and index keys, not decoded yet.
    pub fn new(value: Vec<u8>, index_keys: Option<Vec<Vec<u8>>>) -> Remembered {
        Remembered {
            value,
            index_keys,
            decoded: None,
        }
    }

    fn size(&self, key: &[u8]) -> usize {
        let index = self.index_keys.as_ref().map_or(0, |ks| {
            ks.iter().map(|k| k.len() + INDEX_KEY_OVERHEAD).sum()
        });
        let decoded = self
            .decoded
            .as_ref()
            .map_or(0, |_| self.value.len() * DECODED_PER_BYTE);
        key.len() + self.value.len() + index + decoded + ENTRY_OVERHEAD
    }
}

/// The documents a write transaction touched: each key with what it wrote (`None`: deleted).
pub(super) type Touched = Vec<(Vec<u8>, Option<Remembered>)>;

/// See the module doc.
#[derive(Default)]
pub(super) struct Memo {
    /// Whether this connection is the database's one writer (else nothing is kept).
    on: bool,
    /// Write transactions made so far.
    generation: u64,
    /// The last range deletion's generation: no write of it or before it puts anything
    /// back, no read begun before it either.
    barrier: u64,
    entries: HashMap<Vec<u8>, Entry>,
    /// Keys in the order they were put (stale ones are skipped).
    order: Fifo<Vec<u8>>,
    /// The newest write of each document whose transaction has not finished, with every
    /// index key the document may have in IndexedDB meanwhile (whichever of the writes
    /// commit), if known.
    writing: HashMap<Vec<u8>, (u64, Option<Vec<Vec<u8>>>)>,
    /// Bytes held, counted as in [`MEMO_BUDGET`].
    bytes: usize,
    /// Scans to make the usual way before trying the memo again, after one missed.
    scan_rest: u32,
    /// `entries` scans answered whole (`scans.rs`).
    scans: Scans,
}

struct Entry {
    doc: Remembered,
    /// The generation whose reads may see it.
    generation: u64,
    stamp: u64,
}

impl Memo {
    pub fn turn_on(&mut self) {
        self.on = true;
    }

    /// Forgets everything (a closed connection reads nothing from here).
    pub fn turn_off(&mut self) {
        *self = Memo {
            generation: self.generation,
            barrier: self.generation,
            ..Memo::default()
        };
    }

    /// The generation a read transaction made now has.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// A write transaction is made: its generation.
    pub fn begin_write(&mut self) -> u64 {
        self.generation += 1;
        self.generation
    }

    /// `op`, of write `generation`, is requested: what it writes leaves the memo until the
    /// write is done, and is noted in `touched` for [`Memo::finish_write`].
    pub fn touch(&mut self, generation: u64, op: WriteOp, touched: &mut Touched) {
        if !self.on || op.store() != Store::Documents {
            return;
        }
        let (key, value) = match op {
            WriteOp::PutDocument {
                key,
                value,
                index_keys,
                ..
            } => (key, Some(Remembered::new(value, Some(index_keys)))),
            WriteOp::Delete {
                key: super::ops::Key::Bytes(key),
                ..
            } => (key, None),
            WriteOp::Delete { .. } | WriteOp::Put { .. } => {
                self.scans.clear();
                return;
            }
            WriteOp::DeleteRange { .. } => {
                self.entries.clear();
                self.order.clear();
                self.bytes = 0;
                self.barrier = generation;
                self.scans.clear();
                return;
            }
        };
        let may_have = self.drop_scans_of(&key, value.as_ref());
        self.remove(&key);
        self.writing.insert(key.clone(), (generation, may_have));
        touched.push((key, value));
    }

    /// A write of the document at `key` (becoming `new`) is made: the kept scans that could
    /// show it go, all of them when the index keys it may have now are not known here. The
    /// keys it may have once the write is made: those and the new ones.
    fn drop_scans_of(&mut self, key: &[u8], new: Option<&Remembered>) -> Option<Vec<Vec<u8>>> {
        let known = match self.writing.get(key) {
            Some((_, may_have)) => may_have.as_ref(),
            None => self
                .entries
                .get(key)
                .and_then(|e| e.doc.index_keys.as_ref()),
        };
        let Some(old) = known else {
            self.scans.clear();
            return None;
        };
        let new = new
            .and_then(|d| d.index_keys.as_deref())
            .unwrap_or_default();
        self.scans.changed(old.iter().chain(new).map(Vec::as_slice));
        let mut may_have = old.clone();
        may_have.extend(new.iter().cloned());
        hearth_core::sort::sort(&mut may_have);
        may_have.dedup();
        Some(may_have)
    }

    /// The kept `entries` scans, while the memo is on.
    pub fn scans(&self) -> Option<&Scans> {
        self.on.then_some(&self.scans)
    }

    /// The kept scans, to keep what a read of `generation` scanned: only if no write began
    /// since the read was made.
    pub fn scans_to_keep(&mut self, generation: u64) -> Option<&mut Scans> {
        self.may_put(generation).then_some(&mut self.scans)
    }

    /// Write `generation` is over: `ok` if it committed. Its documents come back unless a
    /// later write of them began; of two writes of one document in it, the last counts
    /// (taken first, it clears the document's mark, so the earlier one is skipped).
    pub fn finish_write(&mut self, generation: u64, touched: Touched, ok: bool) {
        for (key, value) in touched.into_iter().rev() {
            if self.writing.get(&key).map(|w| w.0) != Some(generation) {
                continue;
            }
            self.writing.remove(&key);
            if let (true, true, Some(doc)) = (ok, generation > self.barrier, value) {
                self.put(key, doc, generation);
            }
        }
    }

    /// The bytes of `key` as a read of `generation` sees them, if held.
    pub fn get(&self, key: &[u8], generation: u64) -> Option<Vec<u8>> {
        self.visible(key, generation).map(|d| d.value.clone())
    }

    /// The document at `key` as a read of `generation` sees it, if held.
    pub fn visible(&self, key: &[u8], generation: u64) -> Option<&Remembered> {
        let entry = self.entries.get(key)?;
        (entry.generation <= generation).then_some(&entry.doc)
    }

    /// The document at `key` as a read of `generation` sees it, if held, decoded: once, on
    /// its first read, and shared after (a document's fields are an `Arc`, so a query's
    /// snapshot and the memo hold one copy). `None` also for bytes that do not decode: the
    /// caller then reads them the usual way and reports them.
    pub fn document(&mut self, key: &[u8], generation: u64) -> Option<Document> {
        let entry = self
            .entries
            .get_mut(key)
            .filter(|e| e.generation <= generation)?;
        if let Some(doc) = &entry.doc.decoded {
            return Some(doc.clone());
        }
        let doc = decode_document(&entry.doc.value).ok()?;
        entry.doc.decoded = Some(doc.clone());
        self.bytes += entry.doc.value.len() * DECODED_PER_BYTE;
        // A document a query reads goes to the back of the line: what grows the memo here
        // must not push out what the same queries read next (they would miss, and read
        // IndexedDB the usual way for the next few scans).
        entry.stamp = self.order.push(key.to_vec());
        self.evict();
        Some(doc)
    }

    /// Whether a read of `generation` may put what it reads (see the module doc).
    pub fn may_put(&self, generation: u64) -> bool {
        self.on && generation == self.generation && generation >= self.barrier
    }

    /// A read of `generation` found `doc` at `key` in IndexedDB. An entry already held
    /// stays, unless `doc` knows index keys that it lacks.
    pub fn read(&mut self, key: &[u8], doc: Remembered, generation: u64) {
        let known = self
            .entries
            .get(key)
            .is_some_and(|e| e.doc.index_keys.is_some() || doc.index_keys.is_none());
        if self.may_put(generation) && !self.writing.contains_key(key) && !known {
            self.put(key.to_vec(), doc, generation);
        }
    }

    /// How an `entries` scan uses the memo: whether it first tries the documents' keys
    /// alone, and whether it puts the records it reads whole. An empty memo (a database
    /// just opened) is only filled; after a scan that missed, the next few do neither.
    pub fn scan_plan(&mut self) -> (bool, bool) {
        if !self.on {
            return (false, false);
        }
        if self.entries.is_empty() {
            return (false, true);
        }
        if self.scan_rest > 0 {
            self.scan_rest -= 1;
            return (false, false);
        }
        (true, true)
    }

    /// A scan found a document the memo lacks.
    pub fn scan_missed(&mut self) {
        self.scan_rest = SCAN_REST;
    }

    fn put(&mut self, key: Vec<u8>, doc: Remembered, generation: u64) {
        self.remove(&key);
        let size = doc.size(&key);
        if size > MEMO_BUDGET / 16 {
            return;
        }
        self.bytes += size;
        let stamp = self.order.push(key.clone());
        self.entries.insert(
            key,
            Entry {
                doc,
                generation,
                stamp,
            },
        );
        self.evict();
    }

    /// Drops the oldest entries until the memo is within its budget.
    fn evict(&mut self) {
        while self.bytes > MEMO_BUDGET {
            let entries = &self.entries;
            let Some(oldest) = self
                .order
                .pop(|k, stamp| entries.get(k).is_some_and(|e| e.stamp == stamp))
            else {
                break;
            };
            self.remove(&oldest);
        }
        let entries = &self.entries;
        self.order.compact(entries.len(), 64, |k, stamp| {
            entries.get(k).is_some_and(|e| e.stamp == stamp)
        });
    }

    fn remove(&mut self, key: &[u8]) {
        if let Some(e) = self.entries.remove(key) {
            self.bytes -= e.doc.size(key);
        }
    }
}
