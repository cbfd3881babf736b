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

/// One `docChanges()` entry. Indexes follow Firestore: removals are applied first (each
/// `old_index` in the list as it is at that moment), then additions and modifications in
/// result order (`new_index` in the final list).
#[derive(Clone, Debug, PartialEq)]
pub struct DocChange {
    /// Added, modified or removed.
    pub kind: ChangeType,
    /// The document as it is now (for a removal: as it was when it left the result).
    pub doc: Document,
    /// Its position before the change (`None` when added), counted as described above.
    pub old_index: Option<usize>,
    /// Its position after the change (`None` when removed).
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

    /// Whether a change to this document could affect the view (it is in it, or matches now).
    pub fn affected_by(&self, name: &DocumentName, new: Option<&Document>) -> bool {
        self.position(name).is_some() || new.is_some_and(|d| self.matcher.matches(d))
    }

    fn position(&self, name: &DocumentName) -> Option<usize> {
        self.docs.iter().position(|d| d.name == *name)
    }

    /// Applies the new state of document `name` (`None`: deleted).
    pub fn apply(&mut self, name: &DocumentName, new: Option<&Document>) -> ViewUpdate {
        if self.matcher.query().offset > 0 {
            // An offset depends on documents before the view, which it does not hold (one
            // leaving shifts the window): any change in the query's collection needs a re-run.
            let in_source = match &self.matcher.query().source {
                super::model::Source::Collection(c) => c.contains(name),
                super::model::Source::CollectionGroup(g) => name.collection_id() == g,
            };
            return ViewUpdate {
                changes: Vec::new(),
                needs_refill: in_source,
            };
        }
        // The new result as a plan over the old one (no document is cloned but the new one).
        let old_pos = self.position(name);
        let mut plan: Vec<Slot> = (0..self.docs.len())
            .filter(|&i| Some(i) != old_pos)
            .map(Slot::Old)
            .collect();
        if let Some(doc) = new.filter(|d| self.matcher.matches(d)) {
            let p = plan.partition_point(|s| {
                let x = match s {
                    Slot::Old(i) => &self.docs[*i],
                    Slot::New => doc,
                };
                self.matcher.compare(x, doc) == Ordering::Less
            });
            let last_type = self.matcher.query().limit_type;
            // Past the known edge of an incomplete view, the document may sit behind others
            // the view has never seen.
            let beyond_edge = match last_type {
                LimitType::First => p == plan.len(),
                LimitType::Last => p == 0,
            };
            // A document of the view that did not move back (a new version, the same sort
            // key) is still ahead of every document the view has not seen.
            let stays = old_pos.is_some_and(|i| {
                let ord = self.matcher.compare(doc, &self.docs[i]);
                match last_type {
                    LimitType::First => ord != Ordering::Greater,
                    LimitType::Last => ord != Ordering::Less,
                }
            });
            if self.complete || !beyond_edge || stays {
                plan.insert(p, Slot::New);
            }
        }
        if let Some(n) = self.limit {
            if plan.len() > n {
                match self.matcher.query().limit_type {
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
            let old: Vec<&Document> = self.docs.iter().collect();
            let after: Vec<&Document> = plan
                .iter()
                .map(|s| match s {
                    Slot::Old(i) => &self.docs[*i],
                    Slot::New => new.expect("a new slot has a document"),
                })
                .collect();
            diff_refs(&old, &after)
        };
        let mut old: Vec<Option<Document>> = std::mem::take(&mut self.docs)
            .into_iter()
            .map(Some)
            .collect();
        self.docs = plan
            .into_iter()
            .map(|s| match s {
                Slot::Old(i) => old[i].take().expect("each old document is placed once"),
                Slot::New => new.expect("a new slot has a document").clone(),
            })
            .collect();
        ViewUpdate {
            changes,
            needs_refill,
        }
    }

    /// Applies several document changes as one snapshot: the changes are the delta of the
    /// whole batch (each document at most once), relative to the result before it. When
    /// `needs_refill` is set, the caller re-runs the query and diffs the refill against the
    /// result it held before the batch, so that evictions and refills reach the listener too.
    pub fn apply_batch<'a>(
        &mut self,
        batch: impl IntoIterator<Item = (&'a DocumentName, Option<&'a Document>)>,
    ) -> ViewUpdate {
        let before = self.docs.clone();
        let mut needs_refill = false;
        for (name, new) in batch {
            needs_refill |= self.apply(name, new).needs_refill;
        }
        ViewUpdate {
            changes: diff(&before, &self.docs),
            needs_refill,
        }
    }

    /// Replaces the view with a fresh result (a refill, or a reset after a resume failed).
    pub fn reset(&mut self, docs: Vec<Document>) -> Vec<DocChange> {
        self.complete = self.limit.is_none_or(|n| docs.len() < n);
        let changes = diff(&self.docs, &docs);
        self.docs = docs;
        changes
    }
}

/// A place in a view's next result: a document of the current one, or the changed one.
enum Slot {
    Old(usize),
    New,
}

/// The `docChanges()` that turn `old` into `new` (both in query order).
pub fn diff(old: &[Document], new: &[Document]) -> Vec<DocChange> {
    let old: Vec<&Document> = old.iter().collect();
    let new: Vec<&Document> = new.iter().collect();
    diff_refs(&old, &new)
}

fn diff_refs(old: &[&Document], new: &[&Document]) -> Vec<DocChange> {
    let mut changes = Vec::new();
    let mut current: Vec<&Document> = old.to_vec();
    let in_new = |d: &Document| new.iter().any(|n| n.name == d.name);
    for d in old.iter().copied() {
        if !in_new(d) {
            let i = current
                .iter()
                .position(|x| x.name == d.name)
                .expect("still present");
            current.remove(i);
            changes.push(DocChange {
                kind: ChangeType::Removed,
                doc: d.clone(),
                old_index: Some(i),
                new_index: None,
            });
        }
    }
    // After the removals, `current` is turned into `new` front to back: once document `ni`
    // is placed, `current[..=ni] == new[..=ni]`.
    for (ni, d) in new.iter().copied().enumerate() {
        match current.iter().position(|x| x.name == d.name) {
            None => changes.push(DocChange {
                kind: ChangeType::Added,
                doc: d.clone(),
                old_index: None,
                new_index: Some(ni),
            }),
            Some(oi) => {
                if *current[oi] != *d || oi != ni {
                    changes.push(DocChange {
                        kind: ChangeType::Modified,
                        doc: d.clone(),
                        old_index: Some(oi),
                        new_index: Some(ni),
                    });
                }
                current.remove(oi);
            }
        }
        current.insert(ni, d);
    }
    changes
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
