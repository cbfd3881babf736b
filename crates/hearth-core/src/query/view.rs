//! Live query views: what a change to one document does to a (possibly limited) result set.
//!
//! The relay and the web client both keep a [`View`] per listened query. A change is applied
//! with [`View::apply`]; the result is the list of `docChanges()` (Firestore's sequential
//! index semantics) and whether the view must be refilled from the indexes: a limited view
//! knows only its own documents, so when one leaves a full `limit 5` result the next one must
//! come from a new (limit-pushed-down) query, whose result [`View::reset`] diffs in.
//!
//! Architecture invariant: a view never claims a document it cannot prove belongs to the
//! limited result; it asks for a refill instead.

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};

use super::matcher::Matcher;
use super::model::{LimitType, Query};
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
#[derive(Clone, Debug)]
pub struct View {
    /// The query, prepared for matching and ordering.
    matcher: Matcher,
    /// The current result, in query order (`limitToLast`: in the order the user sees).
    docs: Vec<Document>,
    /// The names of `docs`, for membership without a scan.
    names: HashSet<DocumentName>,
    /// The query's limit, if any: a full limited view cannot know the documents past it.
    limit: Option<usize>,
    /// The view holds every matching document (no limit, or fewer than the limit exist).
    complete: bool,
}

impl View {
    /// A view of `query` (validated) whose current result is `docs`, in query order, as the
    /// executor returned it.
    pub fn new(query: Query, docs: Vec<Document>) -> View {
        let limit = query.limit.map(|n| n as usize);
        let complete = limit.is_none_or(|n| docs.len() < n);
        View {
            matcher: Matcher::new(query),
            names: docs.iter().map(|d| d.name.clone()).collect(),
            docs,
            limit,
            complete,
        }
    }

    pub fn query(&self) -> &Query {
        self.matcher.query()
    }

    pub fn matcher(&self) -> &Matcher {
        &self.matcher
    }

    pub fn documents(&self) -> &[Document] {
        &self.docs
    }

    /// Whether a change to this document could affect the view (it is in it, or matches now;
    /// with an offset, any document of the query's collection: the skipped ones count).
    pub fn affected_by(&self, name: &DocumentName, new: Option<&Document>) -> bool {
        self.names.contains(name)
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
    /// Cost: O((n + k) log(n + k)) for a view of n documents and a batch of k changes.
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
        let old = std::mem::take(&mut self.docs);
        let last_type = self.matcher.query().limit_type;
        // A full limited view knows nothing past its edge: a document beyond it may sit behind
        // documents the view has never seen, so only documents up to the edge enter.
        let edge = match (self.complete, last_type) {
            (true, _) => None,
            (false, LimitType::First) => Some(old.last()),
            (false, LimitType::Last) => Some(old.first()),
        };
        let mut entering: Vec<&Document> = changed
            .values()
            .filter_map(|d| *d)
            .filter(|d| self.matcher.matches(d))
            .filter(|d| match edge {
                None => true,
                Some(None) => false,
                Some(Some(e)) => match last_type {
                    LimitType::First => self.matcher.compare(d, e) != Ordering::Greater,
                    LimitType::Last => self.matcher.compare(d, e) != Ordering::Less,
                },
            })
            .collect();
        entering.sort_by(|a, b| self.matcher.compare(a, b));
        // The new result as a plan over the old one: survivors and entering documents merged
        // in query order (no document is cloned but the entering ones).
        let mut plan: Vec<Slot> = Vec::with_capacity(old.len() + entering.len());
        let mut enter = entering.iter().copied().peekable();
        for (i, d) in old.iter().enumerate() {
            if changed.contains_key(&d.name) {
                continue;
            }
            while let Some(e) = enter.next_if(|e| self.matcher.compare(e, d) == Ordering::Less) {
                plan.push(Slot::New(e));
            }
            plan.push(Slot::Old(i));
        }
        plan.extend(enter.map(Slot::New));
        if let Some(n) = self.limit {
            if plan.len() > n {
                match last_type {
                    LimitType::First => plan.truncate(n),
                    LimitType::Last => {
                        plan.drain(..plan.len() - n);
                    }
                }
                self.complete = false;
            }
        }
        let needs_refill = !self.complete && self.limit.is_some_and(|n| plan.len() < n);
        let changes = {
            let before: Vec<&Document> = old.iter().collect();
            let after: Vec<&Document> = plan
                .iter()
                .map(|s| match s {
                    Slot::Old(i) => &old[*i],
                    Slot::New(d) => *d,
                })
                .collect();
            diff_refs(&self.matcher, &before, &after)
        };
        let mut old: Vec<Option<Document>> = old.into_iter().map(Some).collect();
        self.docs = plan
            .into_iter()
            .filter_map(|s| match s {
                Slot::Old(i) => old[i].take(),
                Slot::New(d) => Some(d.clone()),
            })
            .collect();
        self.names = self.docs.iter().map(|d| d.name.clone()).collect();
        ViewUpdate {
            changes,
            needs_refill,
        }
    }

    /// Replaces the view with a fresh result (a refill, or a reset after a resume failed).
    pub fn reset(&mut self, docs: Vec<Document>) -> Vec<DocChange> {
        self.complete = self.limit.is_none_or(|n| docs.len() < n);
        let changes = self.diff(&self.docs, &docs);
        self.names = docs.iter().map(|d| d.name.clone()).collect();
        self.docs = docs;
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

/// A place in a view's next result: a document of the current one, or an entering one.
enum Slot<'a> {
    Old(usize),
    New(&'a Document),
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
        if *old[oi] == **d {
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
        v.documents().iter().map(|d| d.name.id()).collect()
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
                let before = v.documents().to_vec();
                let name = CollectionPath::parse("c").unwrap().doc(&id).unwrap();
                let u = v.apply(&name, new.as_ref());
                proptest::prop_assert_eq!(replay(&before, &u.changes), v.documents().to_vec());
                if u.needs_refill {
                    let before = v.documents().to_vec();
                    let changes = v.reset(reference(&all));
                    proptest::prop_assert_eq!(replay(&before, &changes), v.documents().to_vec());
                }
                proptest::prop_assert_eq!(v.documents().to_vec(), reference(&all));
            }
        }
    }
}
