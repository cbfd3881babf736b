//! First in, first out over keys whose entries may be put again: each put is stamped, and
//! a queued key whose entry was put again since (or removed) is stale, and skipped. The memo
//! (`memo.rs`) and its kept scans (`scans.rs`) evict with it.

use std::collections::VecDeque;

/// See the module doc.
pub(super) struct Fifo<K> {
    /// Keys in the order they were put, each with the stamp of that put.
    order: VecDeque<(K, u64)>,
    /// The last put's stamp.
    stamp: u64,
}

impl<K> Default for Fifo<K> {
    fn default() -> Fifo<K> {
        Fifo {
            order: VecDeque::new(),
            stamp: 0,
        }
    }
}

impl<K> Fifo<K> {
    /// Queues `key` at the back: the stamp its entry is to carry.
    pub fn push(&mut self, key: K) -> u64 {
        self.stamp += 1;
        self.order.push_back((key, self.stamp));
        self.stamp
    }

    /// Takes the oldest key that is still current (`current(key, stamp)`: its entry carries
    /// that stamp) off the queue, skipping stale ones.
    pub fn pop(&mut self, current: impl Fn(&K, u64) -> bool) -> Option<K> {
        while let Some((key, stamp)) = self.order.pop_front() {
            if current(&key, stamp) {
                return Some(key);
            }
        }
        None
    }

    /// Drops the stale keys once the queue holds more than twice the `live` entries and
    /// `slack` more.
    pub fn compact(&mut self, live: usize, slack: usize, current: impl Fn(&K, u64) -> bool) {
        if self.order.len() > 2 * live + slack {
            self.order.retain(|(key, stamp)| current(key, *stamp));
        }
    }

    /// Forgets every key (stamps go on from the last).
    pub fn clear(&mut self) {
        self.order.clear();
    }
}
