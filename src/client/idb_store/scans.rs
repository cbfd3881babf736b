//! Index scans the memo answers whole: the rows (entry key, document key) an `entries` scan
//! returned, by its range and direction, so the same scan made again (a query asked again,
//! a listener started on a query already answered) makes no IndexedDB request.
//!
//! It follows the memo's order of transactions (`memo.rs`):
//!
//! - A scan's rows are kept only when no write began since its read transaction was made,
//!   so they are the newest committed state; they carry that generation, and a read of an
//!   older generation (made before a write they show) does not use them.
//! - When a write of a document is made, every kept scan whose range holds one of the
//!   document's index keys, old or new, is dropped. Its old keys come from the memo; when the
//!   memo does not know them (a document it does not hold, or one another write in flight
//!   is changing), every scan is dropped. A range deletion drops them all too.
//! - A scan asked with a limit is answered when the kept rows hold that many, or when they
//!   are the whole range (a scan that returned fewer rows than its own limit).
//!
//! At most [`MAX_SCANS`] scans and [`SCAN_BUDGET`] bytes are kept, first in, first out.

use std::collections::HashMap;

use hearth_core::kv::KeyRange;

use super::fifo::Fifo;

/// Most scans kept.
const MAX_SCANS: usize = 128;

/// Bytes of rows kept (keys, and a fixed overhead per row).
const SCAN_BUDGET: usize = 2 << 20;

/// What a row costs beyond its two keys.
const ROW_OVERHEAD: usize = 24;

/// One row of an `entries` scan: the entry's key and its document's key.
pub(super) type ScanRow = (Vec<u8>, Vec<u8>);

/// A scan's identity: its range and whether it runs backwards.
type ScanKey = (Vec<u8>, Option<Vec<u8>>, bool);

struct Kept {
    rows: Vec<ScanRow>,
    /// The rows are every entry in the range (the scan that found them was not cut by its
    /// limit).
    whole: bool,
    /// The generation whose reads may use them.
    generation: u64,
    /// The put that kept them (an older copy of the key in `order` is stale).
    stamp: u64,
    bytes: usize,
}

/// See the module doc.
#[derive(Default)]
pub(super) struct Scans {
    kept: HashMap<ScanKey, Kept>,
    order: Fifo<ScanKey>,
    bytes: usize,
}

fn scan_key(range: &KeyRange, reverse: bool) -> ScanKey {
    (range.start.clone(), range.end.clone(), reverse)
}

impl Scans {
    /// The first `limit` rows of the scan of `range`, as a read of `generation` sees them,
    /// if kept.
    pub fn get(
        &self,
        range: &KeyRange,
        reverse: bool,
        limit: usize,
        generation: u64,
    ) -> Option<Vec<ScanRow>> {
        let kept = self.kept.get(&scan_key(range, reverse))?;
        let enough = kept.whole || kept.rows.len() >= limit;
        (enough && kept.generation <= generation)
            .then(|| kept.rows[..limit.min(kept.rows.len())].to_vec())
    }

    /// A read of `generation`, made when no write had begun since, scanned `range` with
    /// `limit` and found `rows`.
    pub fn put(
        &mut self,
        range: &KeyRange,
        reverse: bool,
        limit: usize,
        rows: Vec<ScanRow>,
        generation: u64,
    ) {
        let key = scan_key(range, reverse);
        self.remove(&key);
        let bytes = rows
            .iter()
            .map(|(e, d)| e.len() + d.len() + ROW_OVERHEAD)
            .sum::<usize>()
            + key.0.len()
            + key.1.as_ref().map_or(0, Vec::len);
        if bytes > SCAN_BUDGET / 4 {
            return;
        }
        self.bytes += bytes;
        let stamp = self.order.push(key.clone());
        let whole = rows.len() < limit;
        self.kept.insert(
            key,
            Kept {
                rows,
                whole,
                generation,
                stamp,
                bytes,
            },
        );
        let current = |kept: &HashMap<ScanKey, Kept>, k: &ScanKey, stamp: u64| {
            kept.get(k).is_some_and(|x| x.stamp == stamp)
        };
        while self.bytes > SCAN_BUDGET || self.kept.len() > MAX_SCANS {
            let kept = &self.kept;
            let Some(oldest) = self.order.pop(|k, s| current(kept, k, s)) else {
                break;
            };
            self.remove(&oldest);
        }
        let kept = &self.kept;
        self.order
            .compact(kept.len(), 16, |k, s| current(kept, k, s));
    }

    /// A write changes a document whose index keys were and become `keys`: the scans whose
    /// ranges hold one of them go.
    pub fn changed<'a>(&mut self, keys: impl IntoIterator<Item = &'a [u8]> + Clone) {
        let gone: Vec<ScanKey> = self
            .kept
            .keys()
            .filter(|(start, end, _)| {
                let within =
                    |k: &[u8]| k >= start.as_slice() && end.as_deref().is_none_or(|e| k < e);
                keys.clone().into_iter().any(within)
            })
            .cloned()
            .collect();
        for key in gone {
            self.remove(&key);
        }
    }

    /// Drops every scan.
    pub fn clear(&mut self) {
        self.kept.clear();
        self.order.clear();
        self.bytes = 0;
    }

    fn remove(&mut self, key: &ScanKey) {
        if let Some(k) = self.kept.remove(key) {
            self.bytes -= k.bytes;
        }
    }
}
