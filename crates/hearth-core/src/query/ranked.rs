//! An ordered set with positions: documents keyed by their sort key (bytes whose order is a
//! query's result order, [`Matcher::sort_key`](super::matcher::Matcher::sort_key)), where
//! insert, remove, lookup, rank (how many keys are smaller) and select (the i-th) each cost
//! O(log n) expected. A [`View`](super::view::View) keeps its result in one, so a change
//! costs O(log n) however large the result.
//!
//! It is a treap: a binary search tree on the keys that is a max-heap on random priorities,
//! with each node's subtree size. Priorities come from a SplitMix64 sequence seeded per
//! set, so the shape (and so the cost) does not depend on the order keys arrive in.
//!
//! Nodes are shared (`Arc`), so a copy of the set costs O(1) and is a snapshot: a change
//! to one copy copies the nodes on its path that the other still holds (O(log n)), and
//! changes nodes in place that only it holds, so a set never copied pays nothing for it.

use std::cmp::Ordering;
use std::sync::Arc;

use crate::document::Document;

type Link = Option<Arc<Node>>;

#[derive(Clone)]
struct Node {
    key: Box<[u8]>,
    /// The key's first 8 bytes (big-endian, zero-padded): most comparisons end on it
    /// without reading the key.
    prefix: u64,
    doc: Document,
    priority: u64,
    /// Nodes in this subtree, this one included.
    size: usize,
    left: Link,
    right: Link,
}

fn size(link: &Link) -> usize {
    link.as_ref().map_or(0, |n| n.size)
}

impl Node {
    fn update(&mut self) {
        self.size = 1 + size(&self.left) + size(&self.right);
    }

    /// How `key` (with `prefix`) compares with this node's key.
    fn cmp_key(&self, prefix: u64, key: &[u8]) -> Ordering {
        // A prefix pads with zeros, the smallest byte, so unequal prefixes order as the keys
        // do; equal ones (a key of 8 bytes or fewer may equal a longer one's) say nothing.
        prefix.cmp(&self.prefix).then_with(|| key.cmp(&self.key))
    }
}

/// A key's first 8 bytes as a big-endian number, zero-padded.
fn prefix_of(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = key.len().min(8);
    b[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(b)
}

/// Joins two trees whose keys are all smaller in `a` than in `b`.
fn merge(a: Link, b: Link) -> Link {
    match (a, b) {
        (None, b) => b,
        (a, None) => a,
        (Some(mut a), Some(mut b)) => {
            if a.priority > b.priority {
                let n = Arc::make_mut(&mut a);
                n.right = merge(n.right.take(), Some(b));
                n.update();
                Some(a)
            } else {
                let n = Arc::make_mut(&mut b);
                n.left = merge(Some(a), n.left.take());
                n.update();
                Some(b)
            }
        }
    }
}

/// Splits a tree into the keys below `key` and the rest.
fn split(link: Link, prefix: u64, key: &[u8]) -> (Link, Link) {
    match link {
        None => (None, None),
        Some(mut arc) => {
            let n = Arc::make_mut(&mut arc);
            if n.cmp_key(prefix, key) == Ordering::Greater {
                let (l, r) = split(n.right.take(), prefix, key);
                n.right = l;
                n.update();
                (Some(arc), r)
            } else {
                let (l, r) = split(n.left.take(), prefix, key);
                n.left = r;
                n.update();
                (l, Some(arc))
            }
        }
    }
}

/// Removes `key`'s node from the tree at `link`: its rank within that tree and its
/// document.
fn remove(link: &mut Link, prefix: u64, key: &[u8]) -> Option<(usize, Document)> {
    let n = Arc::make_mut(link.as_mut()?);
    let removed = match n.cmp_key(prefix, key) {
        Ordering::Less => remove(&mut n.left, prefix, key),
        Ordering::Greater => {
            let below = size(&n.left) + 1;
            remove(&mut n.right, prefix, key).map(|(r, d)| (r + below, d))
        }
        Ordering::Equal => {
            // Held once now (make_mut above): taken apart without a copy.
            let Node {
                left, right, doc, ..
            } = Arc::unwrap_or_clone(link.take()?);
            let rank = size(&left);
            *link = merge(left, right);
            return Some((rank, doc));
        }
    };
    if removed.is_some() {
        n.update();
    }
    removed
}

/// Inserts `node` (whose key is not in the tree) into the tree at `link`; its rank within
/// that tree. It goes down to where its priority puts it, and splits what is there.
fn insert(link: &mut Link, mut node: Node) -> usize {
    match link {
        Some(n) if n.priority >= node.priority => {
            let n = Arc::make_mut(n);
            n.size += 1;
            if n.cmp_key(node.prefix, &node.key) == Ordering::Less {
                insert(&mut n.left, node)
            } else {
                let below = size(&n.left) + 1;
                below + insert(&mut n.right, node)
            }
        }
        _ => {
            let (l, r) = split(link.take(), node.prefix, &node.key);
            node.left = l;
            node.right = r;
            node.update();
            let rank = size(&node.left);
            *link = Some(Arc::new(node));
            rank
        }
    }
}

/// Documents in key order, with positions.
pub(crate) struct Ranked {
    root: Link,
    /// The SplitMix64 state the next priority comes from.
    seed: u64,
}

impl std::fmt::Debug for Ranked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.iter().map(|d| &d.name))
            .finish()
    }
}

/// O(1): the copies share their nodes until one of them changes.
impl Clone for Ranked {
    fn clone(&self) -> Ranked {
        Ranked {
            root: self.root.clone(),
            seed: self.seed,
        }
    }
}

impl Ranked {
    /// A set of `entries`, which must be in strictly ascending key order. O(n).
    pub(crate) fn from_sorted(entries: Vec<(Vec<u8>, Document)>) -> Ranked {
        debug_assert!(entries.windows(2).all(|w| w[0].0 < w[1].0));
        let mut set = Ranked {
            root: None,
            seed: 0x9E37_79B9_7F4A_7C15 ^ entries.len() as u64,
        };
        // A balanced tree, then random priorities handed out largest first in breadth-first
        // order, so each parent's beats its children's.
        fn build(entries: &mut std::vec::IntoIter<(Vec<u8>, Document)>, n: usize) -> Link {
            if n == 0 {
                return None;
            }
            let left = build(entries, n / 2);
            let (key, doc) = entries.next()?;
            let right = build(entries, n - n / 2 - 1);
            let mut node = Arc::new(Node {
                prefix: prefix_of(&key),
                key: key.into_boxed_slice(),
                doc,
                priority: 0,
                size: 0,
                left,
                right,
            });
            Arc::make_mut(&mut node).update();
            Some(node)
        }
        let n = entries.len();
        set.root = build(&mut entries.into_iter(), n);
        let mut priorities: Vec<u64> = (0..n).map(|_| set.next_priority()).collect();
        crate::sort::sort_by(&mut priorities, |a, b| b.cmp(a));
        let mut queue = std::collections::VecDeque::new();
        // Every node is new and held once: make_mut copies nothing.
        if let Some(r) = set.root.as_mut() {
            queue.push_back(Arc::make_mut(r));
        }
        let mut next = priorities.into_iter();
        while let Some(Node {
            priority,
            left,
            right,
            ..
        }) = queue.pop_front()
        {
            *priority = next.next().unwrap_or(0);
            if let Some(l) = left.as_mut() {
                queue.push_back(Arc::make_mut(l));
            }
            if let Some(r) = right.as_mut() {
                queue.push_back(Arc::make_mut(r));
            }
        }
        set
    }

    fn next_priority(&mut self) -> u64 {
        // SplitMix64.
        self.seed = self.seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(crate) fn len(&self) -> usize {
        size(&self.root)
    }

    /// Inserts a document under a key not in the set; its rank.
    pub(crate) fn insert(&mut self, key: Box<[u8]>, doc: Document) -> usize {
        let node = Node {
            prefix: prefix_of(&key),
            key,
            doc,
            priority: self.next_priority(),
            size: 1,
            left: None,
            right: None,
        };
        insert(&mut self.root, node)
    }

    /// Removes `key`: its rank and its document, if it was there.
    pub(crate) fn remove(&mut self, key: &[u8]) -> Option<(usize, Document)> {
        remove(&mut self.root, prefix_of(key), key)
    }

    /// The document under `key`.
    pub(crate) fn get(&self, key: &[u8]) -> Option<&Document> {
        let prefix = prefix_of(key);
        let mut link = &self.root;
        while let Some(n) = link {
            match n.cmp_key(prefix, key) {
                Ordering::Less => link = &n.left,
                Ordering::Greater => link = &n.right,
                Ordering::Equal => return Some(&n.doc),
            }
        }
        None
    }

    /// How many keys are smaller than `key`.
    pub(crate) fn rank(&self, key: &[u8]) -> usize {
        let prefix = prefix_of(key);
        let mut link = &self.root;
        let mut below = 0;
        while let Some(n) = link {
            if n.cmp_key(prefix, key) == Ordering::Greater {
                below += size(&n.left) + 1;
                link = &n.right;
            } else {
                link = &n.left;
            }
        }
        below
    }

    /// The `i`-th entry (0-based) in key order.
    pub(crate) fn select(&self, mut i: usize) -> Option<(&[u8], &Document)> {
        let mut link = &self.root;
        while let Some(n) = link {
            let l = size(&n.left);
            match i.cmp(&l) {
                Ordering::Less => link = &n.left,
                Ordering::Equal => return Some((&n.key, &n.doc)),
                Ordering::Greater => {
                    i -= l + 1;
                    link = &n.right;
                }
            }
        }
        None
    }

    /// The documents in key order.
    pub(crate) fn iter(&self) -> Iter<'_> {
        let mut it = Iter {
            stack: Vec::new(),
            left: self.len(),
        };
        it.descend(&self.root);
        it
    }

    /// The entries, in key order, taken out.
    pub(crate) fn into_entries(self) -> Vec<(Box<[u8]>, Document)> {
        fn walk(link: Link, out: &mut Vec<(Box<[u8]>, Document)>) {
            if let Some(n) = link {
                // Taken whole where no copy holds it, copied where one does.
                let Node {
                    key,
                    doc,
                    left,
                    right,
                    ..
                } = Arc::unwrap_or_clone(n);
                walk(left, out);
                out.push((key, doc));
                walk(right, out);
            }
        }
        let mut out = Vec::with_capacity(self.len());
        walk(self.root, &mut out);
        out
    }
}

/// An in-order walk of a [`Ranked`].
pub(crate) struct Iter<'a> {
    /// The nodes whose own document and right subtree are still to come, innermost last.
    stack: Vec<&'a Node>,
    /// Documents still to come.
    left: usize,
}

impl<'a> Iter<'a> {
    fn descend(&mut self, mut link: &'a Link) {
        while let Some(n) = link {
            self.stack.push(n.as_ref());
            link = &n.left;
        }
    }
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a Document;

    fn next(&mut self) -> Option<&'a Document> {
        let n = self.stack.pop()?;
        self.descend(&n.right);
        self.left -= 1;
        Some(&n.doc)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Iter<'_> {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::CollectionPath;
    use crate::value::Map;

    /// Keys of varied lengths (some within the 8-byte prefix, some sharing it).
    fn key(i: u32) -> Vec<u8> {
        let mut k = vec![(i % 3) as u8; (i % 11) as usize];
        k.extend_from_slice(&i.to_be_bytes());
        k
    }

    fn doc(i: u32) -> Document {
        let name = CollectionPath::parse("c")
            .unwrap()
            .doc(&format!("d{i:05}"))
            .unwrap();
        Document::new(name, Map::new())
    }

    proptest::proptest! {
        /// Inserts and removes against a sorted `Vec`: ranks, selects, lookups and the
        /// in-order walk agree.
        #[test]
        fn a_ranked_set_agrees_with_a_sorted_vec(
            start in proptest::collection::btree_set(0u32..400, 0..300),
            ops in proptest::collection::vec((proptest::bool::ANY, 0u32..400), 0..300),
        ) {
            let mut reference: Vec<(Vec<u8>, u32)> = start.iter().map(|&i| (key(i), i)).collect();
            reference.sort();
            let mut set = Ranked::from_sorted(
                reference.iter().map(|(k, i)| (k.clone(), doc(*i))).collect(),
            );
            for (insert, i) in ops {
                let k = key(i);
                let at = reference.binary_search(&(k.clone(), i));
                if insert {
                    if let Err(p) = at {
                        reference.insert(p, (k.clone(), i));
                        let rank = set.insert(k.clone().into_boxed_slice(), doc(i));
                        proptest::prop_assert_eq!(rank, p);
                    }
                } else {
                    let removed = set.remove(&k).map(|(rank, d)| (rank, d.name));
                    proptest::prop_assert_eq!(removed, at.ok().map(|p| (p, doc(i).name)));
                    if let Ok(p) = at {
                        reference.remove(p);
                    }
                }
                proptest::prop_assert_eq!(set.len(), reference.len());
                let p = reference.partition_point(|(x, _)| *x < k);
                proptest::prop_assert_eq!(set.rank(&k), p);
                let here = reference.get(p).filter(|(x, _)| *x == k).map(|(_, i)| doc(*i).name);
                proptest::prop_assert_eq!(set.get(&k).map(|d| d.name.clone()), here);
                if let Some((x, _)) = reference.get(p) {
                    let got = set.select(p).map(|(k, _)| k.to_vec());
                    proptest::prop_assert_eq!(got, Some(x.clone()));
                }
            }
            let walked: Vec<_> = set.iter().map(|d| d.name.clone()).collect();
            let want: Vec<_> = reference.iter().map(|(_, i)| doc(*i).name).collect();
            proptest::prop_assert_eq!(walked, want);
            proptest::prop_assert_eq!(set.iter().len(), reference.len());
            let entries: Vec<_> = set.clone().into_entries().into_iter().map(|(k, _)| k.to_vec()).collect();
            let want: Vec<_> = reference.iter().map(|(k, _)| k.clone()).collect();
            proptest::prop_assert_eq!(entries, want);
        }
    }

    proptest::proptest! {
        /// Copies taken between changes are snapshots: each still walks as the set was when
        /// it was taken, while the set (and the other copies) change, in either direction
        /// (changes to a copy leave the set alone too).
        #[test]
        fn copies_are_snapshots(
            start in proptest::collection::btree_set(0u32..200, 0..100),
            ops in proptest::collection::vec((proptest::bool::ANY, 0u32..200, proptest::bool::ANY), 0..150),
        ) {
            let names = |set: &Ranked| set.iter().map(|d| d.name.clone()).collect::<Vec<_>>();
            let mut entries: Vec<(Vec<u8>, u32)> = start.iter().map(|&i| (key(i), i)).collect();
            entries.sort();
            let mut set = Ranked::from_sorted(entries.iter().map(|(k, i)| (k.clone(), doc(*i))).collect());
            let mut copies: Vec<(Ranked, Vec<_>)> = Vec::new();
            for (insert, i, copy) in ops {
                let k = key(i);
                if insert {
                    if set.get(&k).is_none() {
                        set.insert(k.into_boxed_slice(), doc(i));
                    }
                } else {
                    set.remove(&k);
                }
                if copy {
                    copies.push((set.clone(), names(&set)));
                }
                for (c, want) in &copies {
                    proptest::prop_assert_eq!(&names(c), want);
                }
            }
            // A copy changed leaves the set as it was.
            let before = names(&set);
            if let Some((mut c, _)) = copies.pop() {
                for i in 0..200 {
                    c.remove(&key(i));
                }
                proptest::prop_assert_eq!(c.len(), 0);
            }
            proptest::prop_assert_eq!(names(&set), before);
        }
    }

    /// Keys arriving in order (the common case: new documents sorted last) and removals
    /// keep the tree logarithmically deep.
    #[test]
    fn ascending_inserts_stay_shallow() {
        fn depth(link: &Link) -> usize {
            link.as_ref()
                .map_or(0, |n| 1 + depth(&n.left).max(depth(&n.right)))
        }
        let be = |i: u32| i.to_be_bytes().to_vec();
        let mut set = Ranked::from_sorted((0..1000).map(|i| (be(i), doc(i))).collect());
        for i in 1000..20_000 {
            set.insert(be(i).into_boxed_slice(), doc(i));
        }
        for i in (0..10_000u32).step_by(2) {
            set.remove(&be(i));
        }
        let d = depth(&set.root);
        assert!(d < 60, "depth {d} for {} keys", set.len());
    }
}
