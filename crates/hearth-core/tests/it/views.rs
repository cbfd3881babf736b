//! Live query views against a full re-run: batches of changes to ordered, limited,
//! `limitToLast` and offset views, whose emitted `docChanges()` must replay (type, oldIndex,
//! newIndex) onto the previous result to give exactly the new one, in Firestore's order, with
//! no document reported that did not change.

use std::collections::BTreeMap;

use hearth_core::document::Document;
use hearth_core::encoding::key::Direction;
use hearth_core::path::CollectionPath;
use hearth_core::query::matcher::Matcher;
use hearth_core::query::model::{Operator, Query};
use hearth_core::query::view::{ChangeType, DocChange, View};
use hearth_core::value::{Map, Value};
use proptest::prelude::*;

fn doc(id: &str, rank: i64, tag: i64) -> Document {
    let mut m = Map::new();
    m.insert("rank".into(), Value::Integer(rank));
    m.insert("tag".into(), Value::Integer(tag));
    Document::new(CollectionPath::parse("live").unwrap().doc(id).unwrap(), m)
}

/// Replays `changes` onto `old` as an app keeping its list from `docChanges()` does.
fn replay(old: &[Document], changes: &[DocChange]) -> Result<Vec<Document>, String> {
    let mut cur = old.to_vec();
    let mut seen = std::collections::HashSet::new();
    // Firestore's order: removals, then additions, then modifications.
    let rank = |k: ChangeType| match k {
        ChangeType::Removed => 0,
        ChangeType::Added => 1,
        ChangeType::Modified => 2,
    };
    if changes
        .windows(2)
        .any(|w| rank(w[0].kind) > rank(w[1].kind))
    {
        return Err("changes out of Firestore's order".into());
    }
    for c in changes {
        if !seen.insert(c.doc.name.clone()) {
            return Err(format!("{} reported twice", c.doc.name));
        }
        match c.kind {
            ChangeType::Added if c.old_index.is_some() || c.new_index.is_none() => {
                return Err(format!("bad added indexes {c:?}"));
            }
            ChangeType::Removed if c.old_index.is_none() || c.new_index.is_some() => {
                return Err(format!("bad removed indexes {c:?}"));
            }
            ChangeType::Modified if c.old_index.is_none() || c.new_index.is_none() => {
                return Err(format!("bad modified indexes {c:?}"));
            }
            _ => {}
        }
        if let Some(i) = c.old_index {
            if cur.get(i).map(|d| &d.name) != Some(&c.doc.name) {
                return Err(format!("oldIndex {i} does not point at {}", c.doc.name));
            }
            let was = cur.remove(i);
            if c.kind == ChangeType::Modified && was == c.doc {
                return Err(format!("{} modified without a change", c.doc.name));
            }
        }
        if let Some(i) = c.new_index {
            if i > cur.len() {
                return Err(format!("newIndex {i} past the end"));
            }
            cur.insert(i, c.doc.clone());
        }
    }
    Ok(cur)
}

#[derive(Clone, Debug)]
enum Shape {
    Ordered,
    Limit(i64),
    LimitToLast(i64),
    Offset(u64, Option<i64>),
}

fn shape() -> impl Strategy<Value = Shape> {
    prop_oneof![
        Just(Shape::Ordered),
        (1i64..5).prop_map(Shape::Limit),
        (1i64..5).prop_map(Shape::LimitToLast),
        (1u64..3, proptest::option::of(1i64..4)).prop_map(|(o, l)| Shape::Offset(o, l)),
    ]
}

type Batches = Vec<Vec<(u8, Option<(i64, i64)>)>>;

proptest! {
    #[test]
    fn batched_view_changes_replay_onto_the_previous_result(
        shape in shape(),
        desc in any::<bool>(),
        batches in proptest::collection::vec(
            proptest::collection::vec((0u8..8, proptest::option::of((-1i64..6, 0i64..2))), 1..4),
            1..25,
        ),
    ) {
        check_batches(shape, desc, batches)?;
    }

    /// Larger results and batches: many documents, many ties on the ordered field, batches
    /// that move, evict and refill several documents at once.
    #[test]
    fn large_batches_replay_onto_the_previous_result(
        shape in prop_oneof![
            Just(Shape::Ordered),
            (1i64..30).prop_map(Shape::Limit),
            (1i64..30).prop_map(Shape::LimitToLast),
        ],
        desc in any::<bool>(),
        batches in proptest::collection::vec(
            proptest::collection::vec((0u8..60, proptest::option::of((-1i64..12, 0i64..3))), 1..20),
            1..15,
        ),
    ) {
        check_batches(shape, desc, batches)?;
    }
}

/// Applies `batches` to a view and checks each batch's changes against a full re-run: they
/// replay onto the previous result to give the new one, and (without a refill) they are
/// exactly the reference diff of the two results.
fn check_batches(shape: Shape, desc: bool, batches: Batches) -> Result<(), TestCaseError> {
    {
        let dir = if desc {
            Direction::Descending
        } else {
            Direction::Ascending
        };
        let mut q = Query::collection(CollectionPath::parse("live").unwrap())
            .where_("rank", Operator::GreaterThanOrEqual, 0)
            .order_by("rank", dir);
        let (offset, limit, last) = match shape {
            Shape::Ordered => (0, None, false),
            Shape::Limit(n) => (0, Some(n), false),
            Shape::LimitToLast(n) => (0, Some(n), true),
            Shape::Offset(o, l) => (o, l, false),
        };
        if offset > 0 {
            q = q.offset(offset);
        }
        if let Some(n) = limit {
            q = if last { q.limit_to_last(n) } else { q.limit(n) };
        }
        let matcher = Matcher::new(q.clone());
        let reference = |all: &BTreeMap<String, Document>| {
            let mut r: Vec<Document> = all
                .values()
                .filter(|d| matcher.matches(d))
                .cloned()
                .collect();
            r.sort_by(|a, b| matcher.compare(a, b));
            r.drain(..(offset as usize).min(r.len()));
            if let Some(n) = limit {
                let n = n as usize;
                if last {
                    r = r.split_off(r.len().saturating_sub(n));
                } else {
                    r.truncate(n);
                }
            }
            r
        };
        let mut all = BTreeMap::new();
        let mut view = View::new(q.clone(), Vec::new());
        for batch in batches {
            let mut changed = Vec::new();
            for (id, state) in batch {
                let id = format!("d{id:02}");
                let new = state.map(|(rank, tag)| doc(&id, rank, tag));
                match &new {
                    Some(d) => {
                        all.insert(id.clone(), d.clone());
                    }
                    None => {
                        all.remove(&id);
                    }
                }
                let name = CollectionPath::parse("live").unwrap().doc(&id).unwrap();
                changed.retain(|(n, _)| *n != name);
                changed.push((name, new));
            }
            let before = view.to_vec();
            let update = view.apply_batch(changed.iter().map(|(n, d)| (n, d.as_ref())));
            let changes = if update.needs_refill {
                let _ = view.reset(reference(&all));
                view.diff(&before, &view.to_vec())
            } else {
                prop_assert_eq!(&update.changes, &view.diff(&before, &view.to_vec()));
                update.changes
            };
            prop_assert_eq!(view.len(), view.documents().len());
            let replayed = replay(&before, &changes);
            prop_assert_eq!(replayed, Ok(view.to_vec()));
            prop_assert_eq!(view.to_vec(), reference(&all));
        }
    }
    Ok(())
}

/// The scenario: a better document enters a full `limit(3)` window and evicts the last.
#[test]
fn a_document_entering_a_full_window_evicts_the_last_one() {
    let q = Query::collection(CollectionPath::parse("live").unwrap())
        .order_by("rank", Direction::Ascending)
        .limit(3);
    let start = vec![doc("d02", 1, 0), doc("d03", 2, 0), doc("d01", 3, 0)];
    let mut view = View::new(q, start.clone());
    let d04 = doc("d04", 2, 1);
    let u = view.apply_batch([(&d04.name, Some(&d04))]);
    assert!(!u.needs_refill);
    let got: Vec<_> = u
        .changes
        .iter()
        .map(|c| (c.kind, c.doc.name.id().to_owned(), c.old_index, c.new_index))
        .collect();
    assert_eq!(
        got,
        [
            (ChangeType::Removed, "d01".to_owned(), Some(2), None),
            (ChangeType::Added, "d04".to_owned(), None, Some(2)),
        ]
    );
    assert_eq!(replay(&start, &u.changes).unwrap(), view.to_vec());
}
