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
//! - A range deletion of `documents` empties the memo, and no write begun before it puts
//!   anything back.
//!
//! The memo holds at most [`MEMO_BUDGET`] bytes (keys, values and a fixed overhead per
//! entry), first in, first out.
//!
//! [`IdbStore::keep_in_memory`]: super::IdbStore::keep_in_memory

use std::collections::{HashMap, VecDeque};

use super::ops::{Store, WriteOp};

/// Bytes the memo may hold: about 15,000 documents of 150 bytes.
pub const MEMO_BUDGET: usize = 4 << 20;

/// What an entry costs beyond its key and value (the map's slot, the queue's copy of the key).
const ENTRY_OVERHEAD: usize = 64;

/// The documents a write transaction touched: each key with its new bytes (`None`: deleted).
pub(super) type Touched = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// See the module doc.
#[derive(Default)]
pub(super) struct Memo {
    /// Whether this connection is the database's one writer (else nothing is kept).
    on: bool,
    /// Write transactions made so far.
    generation: u64,
    /// No write older than this may put anything back (a range deletion's generation).
    barrier: u64,
    entries: HashMap<Vec<u8>, Entry>,
    /// Keys in the order they were put, with the stamp of that put (stale ones are skipped).
    order: VecDeque<(Vec<u8>, u64)>,
    /// The newest write of each document whose transaction has not finished.
    writing: HashMap<Vec<u8>, u64>,
    /// Bytes held, counted as in [`MEMO_BUDGET`].
    bytes: usize,
    /// The next put's stamp.
    stamp: u64,
}

struct Entry {
    value: Vec<u8>,
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
    pub fn touch(&mut self, generation: u64, op: &WriteOp, touched: &mut Touched) {
        if !self.on || op.store() != Store::Documents {
            return;
        }
        let (key, value) = match op {
            WriteOp::PutDocument { key, value, .. } => (key, Some(value.clone())),
            WriteOp::Delete { key, .. } => match key {
                super::ops::Key::Bytes(key) => (key, None),
                _ => return,
            },
            _ => {
                self.entries.clear();
                self.order.clear();
                self.bytes = 0;
                self.barrier = generation;
                return;
            }
        };
        self.remove(key);
        self.writing.insert(key.clone(), generation);
        touched.push((key.clone(), value));
    }

    /// Write `generation` is over: `ok` if it committed. Its documents come back unless a
    /// later write of them began.
    pub fn finish_write(&mut self, generation: u64, touched: Touched, ok: bool) {
        for (key, value) in touched {
            if self.writing.get(&key) != Some(&generation) {
                continue;
            }
            self.writing.remove(&key);
            if let (true, true, Some(value)) = (ok, generation >= self.barrier, value) {
                self.put(key, value, generation);
            }
        }
    }

    /// The bytes of `key` as a read of `generation` sees them, if held.
    pub fn get(&self, key: &[u8], generation: u64) -> Option<Vec<u8>> {
        let entry = self.entries.get(key)?;
        (entry.generation <= generation).then(|| entry.value.clone())
    }

    /// A read of `generation` found `value` at `key` in IndexedDB.
    pub fn read(&mut self, key: &[u8], value: &[u8], generation: u64) {
        if self.on
            && generation == self.generation
            && generation >= self.barrier
            && !self.writing.contains_key(key)
            && !self.entries.contains_key(key)
        {
            self.put(key.to_vec(), value.to_vec(), generation);
        }
    }

    fn put(&mut self, key: Vec<u8>, value: Vec<u8>, generation: u64) {
        self.remove(&key);
        let size = key.len() + value.len() + ENTRY_OVERHEAD;
        if size > MEMO_BUDGET / 16 {
            return;
        }
        self.stamp += 1;
        self.bytes += size;
        self.order.push_back((key.clone(), self.stamp));
        self.entries.insert(
            key,
            Entry {
                value,
                generation,
                stamp: self.stamp,
            },
        );
        while self.bytes > MEMO_BUDGET {
            let Some((oldest, stamp)) = self.order.pop_front() else {
                break;
            };
            if self.entries.get(&oldest).is_some_and(|e| e.stamp == stamp) {
                self.remove(&oldest);
            }
        }
        if self.order.len() > 2 * self.entries.len() + 64 {
            let entries = &self.entries;
            self.order
                .retain(|(k, s)| entries.get(k).is_some_and(|e| e.stamp == *s));
        }
    }

    fn remove(&mut self, key: &[u8]) {
        if let Some(e) = self.entries.remove(key) {
            self.bytes -= key.len() + e.value.len() + ENTRY_OVERHEAD;
        }
    }
}
