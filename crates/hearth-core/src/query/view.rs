//! Live query views: what a change to one document does to a (possibly limited) result set.
//!
//! The relay and the web client both keep a [`View`] per listened query. A change is applied
//! with [`View::apply`]; the result is the list of `docChanges()` (Firestore's sequential
//! index semantics) and whether the view must be refilled from the indexes: a limited view
//! knows only its own documents, so when one leaves a full `limit 5` result the next one must
//! come from a new (limit-pushed-down) query, whose result [`View::reset`] diffs in.
//!
//! The result is an ordered set with positions (`ranked.rs`, a treap with subtree sizes)
//! keyed by each document's sort key, so a batch of k changes to a view of n documents costs
//! O(k log n): no scan, copy or sort of the result.
//!
//! Architecture invariant: a view never claims a document it cannot prove belongs to the
//! limited result; it asks for a refill instead.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

use super::matcher::Matcher;
use super::model::{LimitType, Query};
use super::ranked::Ranked;
use crate::document::Document;
use crate::path::DocumentName;

/// Kind of one `docChanges()` entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeType {
    Added,
    Modified,
    Removed,
}

/// One `docChanges()` entry. Order and indexes follow Firestore: removals first (in the old
/// result's order), then additions, then modifications (each in the new result's order);
/// each change's indexes count the list as the changes before it left it, so replaying them
/// in order (remove at `old_index`, insert at `new_index`) turns the old result into the new.
#[derive(Clone, Debug, PartialEq)]
pub struct DocChange {
    /// Added, modified or removed.
    pub kind: ChangeType,
    /// The document as it is now (for a removal: as it was when it left the result).
    pub doc: Document,
    /// Its position before the change (`None` when added), counted as described above.
    pub old_index: Option<usize>,
    /// Its position after the change (`None` when removed), counted as described above.
    pub new_index: Option<usize>,
}

/// What one change did to a view.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ViewUpdate {
    /// The `docChanges()` entries, removals first.
    pub changes: Vec<DocChange>,
    /// The view is a limited result missing documents it cannot know: re-run the query and
    /// pass the result to [`View::reset`].
    pub needs_refill: bool,
}

/// The current result of one query.
///
/// The result is an ordered set keyed by each document's sort key (bytes in the query's
/// order, ending with the name, so keys are unique), with positions: a batch of k changes to
/// a view of n documents costs O(k log n), plus the changes it reports.
#[derive(Clone, Debug)]
pub struct View {
    /// The query, prepared for matching and ordering.
    matcher: Matcher,
    /// The current result, in query order (`limitToLast`: in the order the user sees).
    docs: Ranked,
    /// The sort key of each document of `docs`, for membership and lookup by name.
    keys: HashMap<DocumentName, Box<[u8]>>,
    /// The query's limit, if any: a full limited view cannot know the documents past it.
    limit: Option<usize>,
    /// The view holds every matching document (no limit, or fewer than the limit exist).
    complete: bool,
}

/// A document's sort key in a view ([`Matcher::sort_key`]).
type SortKey = Box<[u8]>;

/// Where a changed document of a batch stands: its entry before, and after if it is in the
/// new result.
struct Moved<'a> {
    /// Its sort key in the view before the batch, if it was there.
    old_key: Option<Box<[u8]>>,
    /// Its new state and sort key, if it enters (or stays in) the result.
    new: Option<(Box<[u8]>, &'a Document)>,
}

impl View {
    /// A view of `query` (validated) whose current result is `docs`, in query order, as the
    /// executor returned it.
    pub fn new(query: Query, docs: Vec<Document>) -> View {
        let limit = query.limit.map(|n| n as usize);
        let mut view = View {
            matcher: Matcher::new(query),
            docs: Ranked::from_sorted(Vec::new()),
            keys: HashMap::new(),
            limit,
            complete: true,
        };
        view.replace(docs);
        view
    }

    /// Makes `docs` (in query order) the result. O(n), or O(n log n) if they are not in the
    /// order the sort keys give.
    fn replace(&mut self, docs: Vec<Document>) {
        self.complete = self.limit.is_none_or(|n| docs.len() < n);
        let mut entries: Vec<(Vec<u8>, Document)> = docs
            .into_iter()
            .map(|d| (self.matcher.sort_key(&d), d))
            .collect();
        if !entries.windows(2).all(|w| w[0].0 < w[1].0) {
            crate::sort::sort_by(&mut entries, |a, b| a.0.cmp(&b.0));
            entries.dedup_by(|a, b| a.0 == b.0);
        }
        self.keys = entries
            .iter()
            .map(|(k, d)| (d.name.clone(), k.clone().into_boxed_slice()))
            .collect();
        self.docs = Ranked::from_sorted(entries);
    }

    pub fn query(&self) -> &Query {
        self.matcher.query()
    }

    pub fn matcher(&self) -> &Matcher {
        &self.matcher
    }

    /// The current result, in query order.
    pub fn documents(&self) -> impl ExactSizeIterator<Item = &Document> + '_ {
        self.docs.iter()
    }

    /// The current result, in query order, as a list (O(n): the fields are shared).
    pub fn to_vec(&self) -> Vec<Document> {
        self.docs.iter().cloned().collect()
    }

    /// The current result as an unchanging copy: O(1), its parts shared with the view until
    /// the view changes them (then O(log n) per change).
    pub fn snapshot(&self) -> ResultSnapshot {
        ResultSnapshot(self.docs.clone())
    }

    /// Document `name` as the result holds it.
    pub fn get(&self, name: &DocumentName) -> Option<&Document> {
        self.docs.get(self.keys.get(name)?)
    }

    /// Document `name`'s position in the result. O(log n).
    pub fn index_of(&self, name: &DocumentName) -> Option<usize> {
        self.keys.get(name).map(|k| self.docs.rank(k))
    }

    /// The number of documents in the result.
    pub fn len(&self) -> usize {
        self.docs.len()
    }

    /// Whether the result is empty.
    pub fn is_empty(&self) -> bool {
        self.docs.len() == 0
    }

    /// Whether document `name` is in the result.
    pub fn contains(&self, name: &DocumentName) -> bool {
        self.keys.contains_key(name)
    }

    /// Whether a change to this document could affect the view (it is in it, or matches now;
    /// with an offset, any document of the query's collection: the skipped ones count).
    pub fn affected_by(&self, name: &DocumentName, new: Option<&Document>) -> bool {
        self.keys.contains_key(name)
            || new.is_some_and(|d| self.matcher.matches(d))
            || (self.matcher.query().offset > 0 && self.in_source(name))
    }

    /// Applies the new state of document `name` (`None`: deleted).
    pub fn apply(&mut self, name: &DocumentName, new: Option<&Document>) -> ViewUpdate {
        self.apply_batch([(name, new)])
    }

    /// Applies several document changes as one snapshot: the changes are the delta of the
    /// whole batch (each document at most once; of several states of one document the last
    /// counts), relative to the result before it. When `needs_refill` is set, the caller
    /// re-runs the query and passes the result to [`View::reset`], diffing it against the
    /// result it held before the batch, so that evictions and refills reach the listener too.
    ///
    /// Cost: O(k log n) for a view of n documents and a batch of k changes, plus the
    /// changes reported: each index is a rank query on the result as the changes before it
    /// left it, which the result itself, edited change by change, answers.
    pub fn apply_batch<'a>(
        &mut self,
        batch: impl IntoIterator<Item = (&'a DocumentName, Option<&'a Document>)>,
    ) -> ViewUpdate {
        let mut changed: HashMap<&DocumentName, Option<&Document>> = HashMap::new();
        for (name, new) in batch {
            changed.insert(name, new);
        }
        if changed.is_empty() {
            return ViewUpdate::default();
        }
        if self.matcher.query().offset > 0 {
            // An offset depends on documents before the view, which it does not hold (one
            // leaving shifts the window): any change in the query's collection needs a re-run.
            let needs_refill = changed.keys().any(|n| self.in_source(n));
            return ViewUpdate {
                changes: Vec::new(),
                needs_refill,
            };
        }
        let last_type = self.matcher.query().limit_type;
        let len = self.docs.len();
        // A full limited view knows nothing past its edge: a document beyond it may sit behind
        // documents the view has never seen, so only documents up to the edge enter.
        let edge: Option<Option<Box<[u8]>>> = match (self.complete, last_type) {
            (true, _) => None,
            (false, LimitType::First) => Some(len.checked_sub(1).and_then(|i| self.key_at(i))),
            (false, LimitType::Last) => Some(self.key_at(0)),
        };
        let mut moved: HashMap<&DocumentName, Moved> = HashMap::with_capacity(changed.len());
        for (name, new) in &changed {
            let new = new
                .filter(|d| self.matcher.matches(d))
                .map(|d| (self.matcher.sort_key(d).into_boxed_slice(), d))
                .filter(|(k, _)| match &edge {
                    None => true,
                    Some(None) => false,
                    Some(Some(e)) => match last_type {
                        LimitType::First => k <= e,
                        LimitType::Last => k >= e,
                    },
                });
            let old_key = self.keys.get(*name).cloned();
            if old_key.is_some() || new.is_some() {
                moved.insert(*name, Moved { old_key, new });
            }
        }
        if moved.is_empty() {
            return ViewUpdate::default();
        }
        // Past a limit, the new result loses its last documents (`limitToLast`: its first):
        // entering ones, or ones the view held, whose keys are found walking in from that end.
        let leaving_old = moved.values().filter(|m| m.old_key.is_some()).count();
        let entering = moved.values().filter(|m| m.new.is_some()).count();
        let size = len - leaving_old + entering;
        let mut evicted: Vec<Box<[u8]>> = Vec::new();
        if let Some(n) = self.limit.filter(|n| size > *n) {
            self.complete = false;
            let mut new_keys: Vec<(&[u8], &DocumentName)> = moved
                .iter()
                .filter_map(|(name, m)| m.new.as_ref().map(|(k, _)| (&k[..], *name)))
                .collect();
            crate::sort::sort(&mut new_keys);
            let mut cut: Vec<&DocumentName> = Vec::new();
            let (mut i, mut j) = (0, 0);
            for _ in 0..size - n {
                // The next survivor from the end, skipping the changed documents' entries.
                let survivor = loop {
                    let at = match last_type {
                        LimitType::First => len.checked_sub(i + 1),
                        LimitType::Last => Some(i).filter(|i| *i < len),
                    };
                    match at.and_then(|a| self.docs.select(a)) {
                        Some((_, d)) if moved.contains_key(&d.name) => i += 1,
                        other => break other.map(|(k, _)| k),
                    }
                };
                let fresh = match last_type {
                    LimitType::First => new_keys.len().checked_sub(j + 1),
                    LimitType::Last => Some(j).filter(|j| *j < new_keys.len()),
                }
                .map(|a| new_keys[a]);
                let survivor_goes = match (survivor, fresh) {
                    (Some(s), Some((f, _))) => match last_type {
                        LimitType::First => s > f,
                        LimitType::Last => s < f,
                    },
                    (s, _) => s.is_some(),
                };
                if survivor_goes {
                    evicted.extend(survivor.map(Box::from));
                    i += 1;
                } else if let Some((_, name)) = fresh {
                    cut.push(name);
                    j += 1;
                }
            }
            for name in cut {
                if let Some(m) = moved.get_mut(name) {
                    m.new = None;
                }
            }
        }
        let kept = self.limit.map_or(size, |n| size.min(n));
        let needs_refill = !self.complete && self.limit.is_some_and(|n| kept < n);
        // Replayed on the result itself: removals in old order, additions then
        // modifications in new order, each index a rank in the list as it stands.
        let mut removals: Vec<Box<[u8]>> = evicted;
        let mut additions: Vec<(Box<[u8]>, &Document)> = Vec::new();
        let mut modifications: Vec<(SortKey, SortKey, &Document)> = Vec::new();
        for m in moved.into_values() {
            match (m.old_key, m.new) {
                (Some(old), None) => removals.push(old),
                (None, Some((key, d))) => additions.push((key, d)),
                (Some(old), Some((key, d))) => modifications.push((old, key, d)),
                (None, None) => {}
            }
        }
        crate::sort::sort(&mut removals);
        crate::sort::sort_by(&mut additions, |a, b| a.0.cmp(&b.0));
        crate::sort::sort_by(&mut modifications, |a, b| a.1.cmp(&b.1));
        let mut changes = Vec::with_capacity(removals.len() + additions.len());
        for key in removals {
            if let Some((old_index, doc)) = self.docs.remove(&key) {
                self.keys.remove(&doc.name);
                changes.push(DocChange {
                    kind: ChangeType::Removed,
                    doc,
                    old_index: Some(old_index),
                    new_index: None,
                });
            }
        }
        for (key, d) in additions {
            self.keys.insert(d.name.clone(), key.clone());
            let new_index = self.docs.insert(key, d.clone());
            changes.push(DocChange {
                kind: ChangeType::Added,
                doc: d.clone(),
                old_index: None,
                new_index: Some(new_index),
            });
        }
        for (old, key, d) in modifications {
            if self.docs.get(&old).is_some_and(|was| !differs(was, d)) {
                continue;
            }
            let Some((old_index, _)) = self.docs.remove(&old) else {
                continue;
            };
            self.keys.insert(d.name.clone(), key.clone());
            let new_index = self.docs.insert(key, d.clone());
            changes.push(DocChange {
                kind: ChangeType::Modified,
                doc: d.clone(),
                old_index: Some(old_index),
                new_index: Some(new_index),
            });
        }
        ViewUpdate {
            changes,
            needs_refill,
        }
    }

    /// The sort key of the `i`-th document.
    fn key_at(&self, i: usize) -> Option<Box<[u8]>> {
        self.docs.select(i).map(|(k, _)| Box::from(k))
    }

    /// Replaces the view with a fresh result (a refill, or a reset after a resume failed).
    /// O(n + m) for results of n and m documents.
    pub fn reset(&mut self, docs: Vec<Document>) -> Vec<DocChange> {
        let old: Vec<Document> = std::mem::replace(&mut self.docs, Ranked::from_sorted(Vec::new()))
            .into_entries()
            .into_iter()
            .map(|(_, d)| d)
            .collect();
        let changes = self.diff(&old, &docs);
        self.replace(docs);
        changes
    }

    /// The `docChanges()` that turn result `old` into result `new` (both in this view's
    /// query order), as [`DocChange`] describes them.
    pub fn diff(&self, old: &[Document], new: &[Document]) -> Vec<DocChange> {
        let old: Vec<&Document> = old.iter().collect();
        let new: Vec<&Document> = new.iter().collect();
        diff_refs(&self.matcher, &old, &new)
    }

    /// Whether document `name` is in the query's collection (or collection group).
    fn in_source(&self, name: &DocumentName) -> bool {
        match &self.matcher.query().source {
            super::model::Source::Collection(c) => c.contains(name),
            super::model::Source::CollectionGroup(g) => name.collection_id() == g,
        }
    }
}

/// A view's result at one moment ([`View::snapshot`]): what a listener's snapshot shows,
/// however the view changes after.
#[derive(Clone, Debug)]
pub struct ResultSnapshot(Ranked);

impl ResultSnapshot {
    /// An empty result.
    pub fn empty() -> ResultSnapshot {
        ResultSnapshot(Ranked::from_sorted(Vec::new()))
    }

    /// The documents, in query order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &Document> + '_ {
        self.0.iter()
    }

    /// The documents, in query order, as a list. O(n).
    pub fn to_vec(&self) -> Vec<Document> {
        self.0.iter().cloned().collect()
    }

    /// The number of documents.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the result is empty.
    pub fn is_empty(&self) -> bool {
        self.0.len() == 0
    }
}

/// Whether two states of one document differ (fields or times): `!=`, but settled by the
/// versions or by shared fields without comparing the fields where it can be. A committed
/// change always moves `update_version`, so the relay never compares fields.
fn differs(a: &Document, b: &Document) -> bool {
    a.update_version != b.update_version
        || a.create_version != b.create_version
        || a.name != b.name
        || (!Arc::ptr_eq(&a.fields, &b.fields) && a.fields != b.fields)
}

/// The `docChanges()` of a first result: every document added, in order.
pub fn added(docs: &[Document]) -> Vec<DocChange> {
    docs.iter()
        .enumerate()
        .map(|(i, d)| DocChange {
            kind: ChangeType::Added,
            doc: d.clone(),
            old_index: None,
            new_index: Some(i),
        })
        .collect()
}

/// The `docChanges()` that turn `old` into `new`, both sorted by `matcher`'s order, with
/// Firestore's order and indexes: removals (in old order), then additions, then
/// modifications (each in new order); each index counted in the list as the changes before
/// it left it. A document is modified when any part of it differs (fields or times).
///
/// Every document of both lists gets a rank in their merged order; a Fenwick tree over the
/// ranks counts the documents present before a rank, so each index costs O(log(n + k)).
fn diff_refs(matcher: &Matcher, old: &[&Document], new: &[&Document]) -> Vec<DocChange> {
    let in_old: HashMap<&DocumentName, usize> =
        old.iter().enumerate().map(|(i, d)| (&d.name, i)).collect();
    let in_new: HashMap<&DocumentName, usize> =
        new.iter().enumerate().map(|(i, d)| (&d.name, i)).collect();
    // Ranks in the merged order (an old version before an equal new one).
    let mut old_rank = vec![0; old.len()];
    let mut new_rank = vec![0; new.len()];
    let (mut i, mut j) = (0, 0);
    while i < old.len() || j < new.len() {
        let take_old = j == new.len()
            || (i < old.len() && matcher.compare(old[i], new[j]) != Ordering::Greater);
        if take_old {
            old_rank[i] = i + j;
            i += 1;
        } else {
            new_rank[j] = i + j;
            j += 1;
        }
    }
    let mut present = Fenwick::new(old.len() + new.len());
    for r in &old_rank {
        present.add(*r, 1);
    }
    let mut changes = Vec::new();
    for (oi, d) in old.iter().enumerate() {
        if !in_new.contains_key(&d.name) {
            present.add(old_rank[oi], -1);
            changes.push(DocChange {
                kind: ChangeType::Removed,
                doc: (*d).clone(),
                old_index: Some(present.before(old_rank[oi])),
                new_index: None,
            });
        }
    }
    for (ni, d) in new.iter().enumerate() {
        if !in_old.contains_key(&d.name) {
            present.add(new_rank[ni], 1);
            changes.push(DocChange {
                kind: ChangeType::Added,
                doc: (*d).clone(),
                old_index: None,
                new_index: Some(present.before(new_rank[ni])),
            });
        }
    }
    for (ni, d) in new.iter().enumerate() {
        let Some(&oi) = in_old.get(&d.name) else {
            continue;
        };
        if !differs(old[oi], d) {
            continue;
        }
        present.add(old_rank[oi], -1);
        let old_index = present.before(old_rank[oi]);
        present.add(new_rank[ni], 1);
        changes.push(DocChange {
            kind: ChangeType::Modified,
            doc: (*d).clone(),
            old_index: Some(old_index),
            new_index: Some(present.before(new_rank[ni])),
        });
    }
    changes
}

/// A Fenwick (binary indexed) tree of counts: add at a rank, count below a rank.
struct Fenwick(Vec<i64>);

impl Fenwick {
    fn new(n: usize) -> Fenwick {
        Fenwick(vec![0; n + 1])
    }

    fn add(&mut self, rank: usize, delta: i64) {
        let mut i = rank + 1;
        while i < self.0.len() {
            self.0[i] += delta;
            i += i & i.wrapping_neg();
        }
    }

    /// The count of ranks below `rank`.
    fn before(&self, rank: usize) -> usize {
        let mut i = rank;
        let mut sum = 0;
        while i > 0 {
            sum += self.0[i];
            i -= i & i.wrapping_neg();
        }
        usize::try_from(sum).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoding::key::Direction;
    use crate::path::CollectionPath;
    use crate::query::model::Operator;
    use crate::value::{Map, Value};

    fn doc(id: &str, score: i64) -> Document {
        let mut m = Map::new();
        m.insert("score".into(), Value::Integer(score));
        Document::new(CollectionPath::parse("c").unwrap().doc(id).unwrap(), m)
    }

    fn query(limit: Option<i64>) -> Query {
        let q = Query::collection(CollectionPath::parse("c").unwrap())
            .where_("score", Operator::GreaterThan, 0)
            .order_by("score", Direction::Descending);
        match limit {
            Some(n) => q.limit(n),
            None => q,
        }
    }

    fn ids(v: &View) -> Vec<&str> {
        v.documents().map(|d| d.name.id()).collect()
    }

    #[test]
    fn a_document_leaving_a_full_limited_view_asks_for_a_refill() {
        let mut v = View::new(query(Some(2)), vec![doc("a", 9), doc("b", 8)]);
        let u = v.apply(&doc("a", 0).name, Some(&doc("a", 0)));
        assert!(u.needs_refill);
        assert_eq!(u.changes.len(), 1);
        assert_eq!(u.changes[0].kind, ChangeType::Removed);
        assert_eq!(u.changes[0].old_index, Some(0));
        // The refill brings in the next document.
        let changes = v.reset(vec![doc("b", 8), doc("c", 7)]);
        assert_eq!(ids(&v), ["b", "c"]);
        assert_eq!(changes[0].kind, ChangeType::Added);
        assert_eq!(changes[0].new_index, Some(1));
    }

    #[test]
    fn a_skipped_document_affects_an_offset_view() {
        let v = View::new(query(None).offset(1), vec![doc("b", 8)]);
        let a = doc("a", 9);
        assert!(
            v.affected_by(&a.name, None),
            "a deletion in the skipped prefix"
        );
        assert!(!View::new(query(None), vec![doc("b", 8)]).affected_by(&a.name, None));
    }

    #[test]
    fn a_better_document_evicts_the_last_one() {
        let mut v = View::new(query(Some(2)), vec![doc("a", 9), doc("b", 8)]);
        let u = v.apply(&doc("z", 10).name, Some(&doc("z", 10)));
        assert!(!u.needs_refill);
        assert_eq!(ids(&v), ["z", "a"]);
        let kinds: Vec<_> = u
            .changes
            .iter()
            .map(|c| (c.kind, c.doc.name.id().to_owned()))
            .collect();
        assert_eq!(
            kinds,
            [
                (ChangeType::Removed, "b".to_owned()),
                (ChangeType::Added, "z".to_owned())
            ]
        );
        // A worse one is not claimed: documents beyond the view are unknown.
        let u = v.apply(&doc("y", 1).name, Some(&doc("y", 1)));
        assert!(u.changes.is_empty() && !u.needs_refill);
    }

    #[test]
    fn an_unlimited_view_tracks_moves_with_indexes() {
        let mut v = View::new(query(None), vec![doc("a", 9), doc("b", 8), doc("c", 7)]);
        let u = v.apply(&doc("c", 1).name, Some(&doc("c", 10)));
        assert_eq!(ids(&v), ["c", "a", "b"]);
        assert_eq!(u.changes.len(), 1);
        let c = &u.changes[0];
        assert_eq!(
            (c.kind, c.old_index, c.new_index),
            (ChangeType::Modified, Some(2), Some(0))
        );
        let u = v.apply(&doc("a", 1).name, None);
        assert_eq!(ids(&v), ["c", "b"]);
        assert_eq!(u.changes[0].old_index, Some(1));
    }

    /// Replays `changes` on `old` with their indexes: must give `new`.
    fn replay(old: &[Document], changes: &[DocChange]) -> Vec<Document> {
        let mut cur = old.to_vec();
        for c in changes {
            if let Some(i) = c.old_index {
                assert_eq!(cur[i].name, c.doc.name, "old_index points at the document");
                cur.remove(i);
            }
            if let Some(i) = c.new_index {
                cur.insert(i, c.doc.clone());
            }
        }
        cur
    }

    proptest::proptest! {
        /// Any sequence of writes and deletes keeps a (limited) view equal to re-running the
        /// query over all documents, and its changes replay to the new result.
        #[test]
        fn views_follow_the_reference_result(
            limit in proptest::option::of(1i64..4),
            last in proptest::bool::ANY,
            ops in proptest::collection::vec((0u8..6, proptest::option::of(-2i64..6)), 1..40),
        ) {
            let mut q = query(None);
            if let Some(n) = limit {
                q = if last { q.limit_to_last(n) } else { q.limit(n) };
            }
            let matcher = Matcher::new(q.clone());
            let mut all: std::collections::BTreeMap<String, Document> = Default::default();
            let reference = |all: &std::collections::BTreeMap<String, Document>| {
                let mut r: Vec<Document> = all.values().filter(|d| matcher.matches(d)).cloned().collect();
                r.sort_by(|a, b| matcher.compare(a, b));
                if let Some(n) = limit {
                    let n = n as usize;
                    if last { r = r.split_off(r.len().saturating_sub(n)); } else { r.truncate(n); }
                }
                r
            };
            let mut v = View::new(q.clone(), Vec::new());
            for (id, score) in ops {
                let id = format!("d{id}");
                let new = score.map(|s| doc(&id, s));
                match &new { Some(d) => { all.insert(id.clone(), d.clone()); } None => { all.remove(&id); } }
                let before = v.to_vec();
                let name = CollectionPath::parse("c").unwrap().doc(&id).unwrap();
                let u = v.apply(&name, new.as_ref());
                proptest::prop_assert_eq!(replay(&before, &u.changes), v.to_vec());
                if u.needs_refill {
                    let before = v.to_vec();
                    let changes = v.reset(reference(&all));
                    proptest::prop_assert_eq!(replay(&before, &changes), v.to_vec());
                }
                proptest::prop_assert_eq!(v.to_vec(), reference(&all));
            }
        }
    }
}
