//! Sorting and ordered collecting with one body of sorting code for every element type.
//!
//! The standard library's sorts are fast and large: each element type and comparison gets
//! its own copy of a few kilobytes of code, and the WebAssembly build had twenty of them
//! (about 90 KB of function bodies, 7 % of its code). In that build the functions here sort
//! a list of positions once, with the comparison behind a `dyn` call, and then move the
//! elements into that order: only the small move and the comparison's adapter are per type.
//! Native builds (the relay) keep the standard library's sorts; the compact one is compiled
//! everywhere so that its tests run natively.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

/// Sorts `v` by `cmp`, stably: equal elements keep their order.
pub fn sort_by<T>(v: &mut [T], cmp: impl FnMut(&T, &T) -> Ordering) {
    #[cfg(target_arch = "wasm32")]
    compact_sort_by(v, cmp);
    #[cfg(not(target_arch = "wasm32"))]
    v.sort_by(cmp);
}

/// Sorts `v` by the key `f` gives, stably.
pub fn sort_by_key<T, K: Ord>(v: &mut [T], mut f: impl FnMut(&T) -> K) {
    sort_by(v, |a, b| f(a).cmp(&f(b)));
}

/// Sorts `v` in its own order, stably.
pub fn sort<T: Ord>(v: &mut [T]) {
    sort_by(v, T::cmp);
}

/// A set of the items (what `collect::<BTreeSet<_>>()` gives, without a sort of its own per
/// element type in the WebAssembly build).
pub fn set_of<T: Ord>(items: impl IntoIterator<Item = T>) -> BTreeSet<T> {
    if cfg!(target_arch = "wasm32") {
        let mut set = BTreeSet::new();
        for item in items {
            set.insert(item);
        }
        set
    } else {
        items.into_iter().collect()
    }
}

/// A map of the pairs, the last value of a key winning (as `collect::<BTreeMap<_, _>>()`).
pub fn map_of<K: Ord, V>(pairs: impl IntoIterator<Item = (K, V)>) -> BTreeMap<K, V> {
    if cfg!(target_arch = "wasm32") {
        let mut map = BTreeMap::new();
        for (k, v) in pairs {
            map.insert(k, v);
        }
        map
    } else {
        pairs.into_iter().collect()
    }
}

/// The compact stable sort: positions ordered by [`order`], then the elements moved there.
pub fn compact_sort_by<T>(v: &mut [T], mut cmp: impl FnMut(&T, &T) -> Ordering) {
    if v.len() < 2 {
        return;
    }
    let positions = {
        let items: &[T] = v;
        order(items.len(), &mut |a, b| cmp(&items[a], &items[b]))
    };
    permute(v, positions);
}

/// The positions `0..n` in ascending order of `cmp`, equal ones in position order: a
/// bottom-up merge sort over runs first sorted by insertion. Not generic, so one copy serves
/// every element type.
fn order(n: usize, cmp: &mut dyn FnMut(usize, usize) -> Ordering) -> Vec<usize> {
    const RUN: usize = 8;
    let mut p: Vec<usize> = (0..n).collect();
    for start in (0..n).step_by(RUN) {
        let end = (start + RUN).min(n);
        for i in start + 1..end {
            let mut j = i;
            while j > start && cmp(p[j - 1], p[j]) == Ordering::Greater {
                p.swap(j - 1, j);
                j -= 1;
            }
        }
    }
    let mut buf = vec![0; n];
    let mut width = RUN;
    while width < n {
        for start in (0..n).step_by(2 * width) {
            let mid = (start + width).min(n);
            let end = (start + 2 * width).min(n);
            merge(&p[start..mid], &p[mid..end], &mut buf[start..end], cmp);
        }
        std::mem::swap(&mut p, &mut buf);
        width *= 2;
    }
    p
}

/// Merges two ordered runs into `out`, taking from `left` on ties (so the sort is stable).
fn merge(
    left: &[usize],
    right: &[usize],
    out: &mut [usize],
    cmp: &mut dyn FnMut(usize, usize) -> Ordering,
) {
    let (mut i, mut j) = (0, 0);
    for slot in out.iter_mut() {
        let take_left =
            j == right.len() || (i < left.len() && cmp(left[i], right[j]) != Ordering::Greater);
        if take_left {
            *slot = left[i];
            i += 1;
        } else {
            *slot = right[j];
            j += 1;
        }
    }
}

/// Moves `v`'s elements so that position `i` holds what was at `positions[i]`, following
/// each cycle of the permutation with swaps.
fn permute<T>(v: &mut [T], mut positions: Vec<usize>) {
    for start in 0..v.len() {
        let mut at = start;
        loop {
            let from = positions[at];
            positions[at] = at;
            if from == start || from == at {
                break;
            }
            v.swap(at, from);
            at = from;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn the_compact_sort_is_the_standard_stable_sort(keys in prop::collection::vec(0u8..6, 0..200)) {
            // Each element carries its first position, so stability shows.
            let mut ours: Vec<(u8, usize)> = keys.iter().copied().zip(0..).collect();
            let mut std_sorted = ours.clone();
            compact_sort_by(&mut ours, |a, b| a.0.cmp(&b.0));
            std_sorted.sort_by_key(|a| a.0);
            prop_assert_eq!(ours, std_sorted);
        }

        #[test]
        fn a_reversed_comparison_sorts_descending(keys in prop::collection::vec(any::<i32>(), 0..100)) {
            let mut ours = keys.clone();
            compact_sort_by(&mut ours, |a, b| b.cmp(a));
            let mut expected = keys;
            expected.sort_by(|a, b| b.cmp(a));
            prop_assert_eq!(ours, expected);
        }

        #[test]
        fn sets_and_maps_are_what_collect_gives(pairs in prop::collection::vec((0u8..20, any::<u16>()), 0..60)) {
            prop_assert_eq!(set_of(pairs.iter().map(|p| p.0)), pairs.iter().map(|p| p.0).collect());
            prop_assert_eq!(map_of(pairs.iter().copied()), pairs.iter().copied().collect::<BTreeMap<_, _>>());
        }
    }

    #[test]
    fn elements_that_own_memory_are_moved_not_copied() {
        let mut v: Vec<String> = ["d", "a", "c", "b", "a"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        compact_sort_by(&mut v, |a, b| a.cmp(b));
        assert_eq!(v, ["a", "a", "b", "c", "d"]);
    }
}
