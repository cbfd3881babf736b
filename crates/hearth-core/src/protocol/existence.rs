//! The existence filter a relay sends with a resumed target: a Bloom filter of the names in
//! the target's result, so that a client holding documents from before the resume can tell
//! which of them the result surely lacks (they are stale: it reads them again) and, with the
//! result's size beside it, whether it holds the whole result at all (if not, it listens
//! again from scratch). Firestore's watch stream sends the same with a resumed target.
//!
//! Names are hashed with FNV-1a over their segments (each followed by 0xff, which no UTF-8
//! text holds) and two SplitMix64 finalizers; bit `i` of the `HASHES` probes is
//! `(h1 + i·h2) mod bits` (Kirsch and Mitzenmacher's double hashing), bit `b` being bit
//! `b % 8` of byte `b / 8`. Both sides run this code, so the layout is the protocol's.

use crate::path::DocumentName;

/// Probes per name.
pub const HASHES: u8 = 7;
/// Bits per name: with 7 probes, about 1 % false positives.
const BITS_PER_NAME: usize = 10;
/// Largest filter, in bytes: a larger result gets a filter this size (more false
/// positives: stale documents are then found by the result's size alone).
pub const MAX_FILTER_BYTES: usize = 1 << 20;

/// A Bloom filter of document names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameFilter {
    /// The filter's bits, eight to a byte.
    bits: Vec<u8>,
    /// Probes per name.
    hashes: u8,
}

impl NameFilter {
    /// The filter of `names` (`count` of them, which sizes it).
    pub fn build<'a>(count: usize, names: impl IntoIterator<Item = &'a DocumentName>) -> Self {
        let bytes = count
            .saturating_mul(BITS_PER_NAME)
            .div_ceil(8)
            .min(MAX_FILTER_BYTES);
        let mut f = NameFilter {
            bits: vec![0; bytes],
            hashes: HASHES,
        };
        if bytes > 0 {
            for n in names {
                for b in f.probes(n) {
                    f.bits[b / 8] |= 1 << (b % 8);
                }
            }
        }
        f
    }

    /// A filter received as `bits` with `hashes` probes per name (any bytes are a filter;
    /// an empty one holds nothing).
    pub fn from_parts(bits: Vec<u8>, hashes: u8) -> Self {
        NameFilter { bits, hashes }
    }

    /// The filter's bytes.
    pub fn bits(&self) -> &[u8] {
        &self.bits
    }

    /// Probes per name.
    pub fn hashes(&self) -> u8 {
        self.hashes
    }

    /// Whether `name` may be in the filtered set: false means surely not.
    pub fn might_contain(&self, name: &DocumentName) -> bool {
        !self.bits.is_empty()
            && self
                .probes(name)
                .all(|b| self.bits[b / 8] & (1 << (b % 8)) != 0)
    }

    /// The bit positions of `name`.
    fn probes(&self, name: &DocumentName) -> impl Iterator<Item = usize> {
        let m = (self.bits.len() as u64) * 8;
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for s in name.segments() {
            for b in s.bytes().chain([0xff]) {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
        let h1 = mix(h);
        let h2 = mix(h1 ^ 0x9e37_79b9_7f4a_7c15) | 1;
        (0..u64::from(self.hashes))
            .map(move |i| (h1.wrapping_add(i.wrapping_mul(h2)) % m.max(1)) as usize)
    }
}

/// SplitMix64's finalizer.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(prefix: &str, n: usize) -> Vec<DocumentName> {
        (0..n)
            .map(|i| DocumentName::parse(&format!("{prefix}/d{i}")).unwrap())
            .collect()
    }

    #[test]
    fn every_name_in_the_set_is_found() {
        for n in [0, 1, 2, 10, 1000] {
            let set = names("c", n);
            let f = NameFilter::build(set.len(), &set);
            assert!(set.iter().all(|d| f.might_contain(d)), "{n} names");
            let again = NameFilter::from_parts(f.bits().to_vec(), f.hashes());
            assert!(set.iter().all(|d| again.might_contain(d)));
        }
    }

    #[test]
    fn few_names_outside_the_set_pass() {
        let set = names("c", 2000);
        let f = NameFilter::build(set.len(), &set);
        let passed = names("other", 10_000)
            .iter()
            .filter(|d| f.might_contain(d))
            .count();
        // About 1 % expected; 3 % would mean a broken hash.
        assert!(passed < 300, "{passed} of 10000 false positives");
    }

    #[test]
    fn an_empty_filter_holds_nothing_and_segments_do_not_run_together() {
        let f = NameFilter::build(0, &[]);
        assert!(!f.might_contain(&names("c", 1)[0]));
        let a = DocumentName::parse("ab/c").unwrap();
        let b = DocumentName::parse("a/bc").unwrap();
        let fa = NameFilter::build(1, [&a]);
        assert!(fa.might_contain(&a));
        assert_ne!(fa, NameFilter::build(1, [&b]));
    }
}
