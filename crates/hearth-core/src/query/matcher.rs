//! Whether a document matches a query, and the comparator that orders a result set.
//!
//! This is the reference semantics of SEMANTICS.md written directly: the index-driven
//! executor must agree with it, and real-time listeners on both sides use it to decide what a
//! change does to a result.

use std::cmp::Ordering;

use super::model::Operator as Op;
use super::model::{Cursor, FieldFilter, Filter, OrderBy, Query, Source};
use super::normalize::normalized_order;
use crate::document::Document;
use crate::encoding::key::{write_value, Direction};
use crate::value::Value;

/// Whether `doc` is in the query's collection (or collection group).
pub fn in_source(source: &Source, doc: &Document) -> bool {
    match source {
        Source::Collection(c) => c.contains(&doc.name),
        Source::CollectionGroup(g) => doc.name.collection_id() == g,
    }
}

/// Whether one field filter holds for `doc`.
pub fn matches_field_filter(doc: &Document, ff: &FieldFilter) -> bool {
    let Some(v) = doc.field(&ff.field) else {
        return false;
    };
    let v = v.as_ref();
    let operand = &ff.value;
    let same_class = || v.type_class() == operand.type_class();
    let list = || match operand {
        Value::Array(a) => a.as_slice(),
        _ => &[],
    };
    match ff.op {
        Op::Equal => same_class() && v.eq_order(operand),
        Op::LessThan => same_class() && v.cmp_order(operand) == Ordering::Less,
        Op::LessThanOrEqual => same_class() && v.cmp_order(operand) != Ordering::Greater,
        Op::GreaterThan => same_class() && v.cmp_order(operand) == Ordering::Greater,
        Op::GreaterThanOrEqual => same_class() && v.cmp_order(operand) != Ordering::Less,
        Op::NotEqual => !matches!(v, Value::Null) && !v.eq_order(operand),
        Op::In => list().contains(v),
        Op::NotIn => {
            !matches!(v, Value::Null) && !list().contains(&Value::Null) && !list().contains(v)
        }
        Op::ArrayContains => matches!(v, Value::Array(a) if a.contains(operand)),
        Op::ArrayContainsAny => {
            matches!(v, Value::Array(a) if a.iter().any(|x| list().contains(x)))
        }
    }
}

/// Whether a filter tree holds for `doc`.
pub fn matches_filter(doc: &Document, f: &Filter) -> bool {
    match f {
        Filter::Field(ff) => matches_field_filter(doc, ff),
        Filter::And(v) => v.iter().all(|x| matches_filter(doc, x)),
        Filter::Or(v) => v.is_empty() || v.iter().any(|x| matches_filter(doc, x)),
    }
}

/// Compares two documents in `order` (a normalized order, ending with `__name__`).
/// Both documents must have every ordered field.
pub fn compare_docs(order: &[OrderBy], a: &Document, b: &Document) -> Ordering {
    for o in order {
        let (x, y) = (a.field(&o.field), b.field(&o.field));
        let c = match (x, y) {
            (Some(x), Some(y)) => x.cmp_order(&y),
            (x, y) => x.is_some().cmp(&y.is_some()),
        };
        if c != Ordering::Equal {
            return o.dir.apply(c);
        }
    }
    Ordering::Equal
}

/// Compares `doc` with a cursor's values, as a prefix of the normalized order.
pub fn compare_to_cursor(order: &[OrderBy], doc: &Document, cursor: &Cursor) -> Ordering {
    for (o, cv) in order.iter().zip(&cursor.values) {
        let c = match doc.field(&o.field) {
            Some(v) => v.cmp_order(cv),
            None => Ordering::Less,
        };
        if c != Ordering::Equal {
            return o.dir.apply(c);
        }
    }
    Ordering::Equal
}

/// Whether `doc` lies within the query's cursors.
pub fn within_cursors(q: &Query, order: &[OrderBy], doc: &Document) -> bool {
    if let Some(start) = &q.start {
        let c = compare_to_cursor(order, doc, start);
        if c == Ordering::Less || (c == Ordering::Equal && !start.inclusive) {
            return false;
        }
    }
    if let Some(end) = &q.end {
        let c = compare_to_cursor(order, doc, end);
        if c == Ordering::Greater || (c == Ordering::Equal && !end.inclusive) {
            return false;
        }
    }
    true
}

/// A query prepared for matching: the normalized order computed once.
#[derive(Clone, Debug)]
pub struct Matcher {
    /// The validated query. Private with `order`: the order is derived from the query, and a
    /// query changed after the fact would be matched and sorted by a stale order.
    query: Query,
    /// `normalized_order(&query)`: the explicit orders, the implicit inequality orders, then
    /// `__name__`.
    order: Vec<OrderBy>,
}

impl Matcher {
    /// `query` must have passed [`super::validate::validate`].
    pub fn new(query: Query) -> Matcher {
        let order = normalized_order(&query);
        Matcher { query, order }
    }

    /// The query this matcher matches.
    pub fn query(&self) -> &Query {
        &self.query
    }

    /// The query's normalized order, which [`Matcher::compare`] sorts by.
    pub fn order(&self) -> &[OrderBy] {
        &self.order
    }

    /// Source, filters and ordered fields present; cursors are not considered.
    pub fn matches_ignoring_cursors(&self, doc: &Document) -> bool {
        in_source(&self.query.source, doc)
            && self
                .query
                .filter
                .as_ref()
                .is_none_or(|f| matches_filter(doc, f))
            && self.order.iter().all(|o| doc.field(&o.field).is_some())
    }

    /// Whether `doc` belongs to the query's (unlimited) result.
    pub fn matches(&self, doc: &Document) -> bool {
        self.matches_ignoring_cursors(doc) && within_cursors(&self.query, &self.order, doc)
    }

    /// The result order.
    pub fn compare(&self, a: &Document, b: &Document) -> Ordering {
        compare_docs(&self.order, a, b)
    }

    /// Bytes whose order is the result order: the normalized order's values, each in its
    /// direction (the last one is the name). Used to merge ordered streams.
    pub fn sort_key(&self, doc: &Document) -> Vec<u8> {
        let mut out = Vec::new();
        let mut kinds = Vec::new();
        for o in &self.order {
            let v = doc
                .field(&o.field)
                .unwrap_or(std::borrow::Cow::Owned(Value::Null));
            write_value(&v, o.dir, &mut out, &mut kinds);
        }
        out
    }
}

/// Applies a `Direction` to a boolean "is descending" question; handy for plan rendering.
pub fn dir_name(d: Direction) -> &'static str {
    match d {
        Direction::Ascending => "asc",
        Direction::Descending => "desc",
    }
}
