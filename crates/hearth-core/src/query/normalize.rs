//! Derived forms of a query: the normalized order and the disjunctive normal form of its filter.

use std::collections::BTreeSet;

use super::model::{FieldFilter, Filter, Operator, OrderBy, Query};
use crate::encoding::key::Direction;
use crate::path::FieldPath;
use crate::value::Value;

/// Most conjunctions a filter may expand to (Firestore's limit on disjunctive normal form).
pub const MAX_DISJUNCTIONS: usize = 30;

/// The fields with inequality filters (`<`, `<=`, `>`, `>=`, `!=`, `not-in`), sorted.
pub fn inequality_fields(q: &Query) -> BTreeSet<FieldPath> {
    q.filter
        .as_ref()
        .map(|f| {
            crate::sort::set_of(
                f.field_filters()
                    .into_iter()
                    .filter(|ff| ff.op.is_inequality())
                    .map(|ff| ff.field.clone()),
            )
        })
        .unwrap_or_default()
}

/// The normalized order: the explicit `orderBy`s, then the inequality fields not explicitly
/// ordered (sorted by field path; `__name__` is never one of them), then `__name__` unless
/// explicitly ordered, the implicit parts in the direction of the last explicit `orderBy`
/// (ascending if none). Always contains `__name__`; fields after an explicit `__name__` never
/// break a tie, but documents lacking them still drop out, as with any `orderBy`.
pub fn normalized_order(q: &Query) -> Vec<OrderBy> {
    let mut order = q.order_by.clone();
    let implicit_dir = order.last().map_or(Direction::Ascending, |o| o.dir);
    let explicit: BTreeSet<&FieldPath> = crate::sort::set_of(q.order_by.iter().map(|o| &o.field));
    for f in inequality_fields(q) {
        if !f.is_document_id() && !explicit.contains(&f) {
            order.push(OrderBy {
                field: f,
                dir: implicit_dir,
            });
        }
    }
    if !order.iter().any(|o| o.field.is_document_id()) {
        order.push(OrderBy {
            field: FieldPath::document_id(),
            dir: implicit_dir,
        });
    }
    order
}

/// The filter as a disjunction of conjunctions of field filters. No filter is one empty
/// conjunction. `None` when the expansion exceeds `limit` conjunctions (`in` lists stay one
/// filter each here; [`dnf_size`] counts their values too).
///
/// The size is checked before anything is built, and every conjunction is built once from
/// its parts: the work is linear in the output.
pub fn dnf(filter: Option<&Filter>, limit: usize) -> Option<Vec<Vec<FieldFilter>>> {
    let refs = match filter {
        None => vec![Vec::new()],
        Some(f) => dnf_of(f, limit)?,
    };
    Some(
        refs.into_iter()
            .map(|c| c.into_iter().cloned().collect())
            .collect(),
    )
}

fn dnf_of(f: &Filter, limit: usize) -> Option<Vec<Vec<&FieldFilter>>> {
    match f {
        Filter::Field(ff) => Some(vec![vec![ff]]),
        Filter::Or(parts) if parts.is_empty() => Some(vec![Vec::new()]),
        Filter::Or(parts) => {
            let mut out = Vec::new();
            for p in parts {
                out.extend(dnf_of(p, limit)?);
                if out.len() > limit {
                    return None;
                }
            }
            Some(out)
        }
        Filter::And(parts) => {
            let children = parts
                .iter()
                .map(|p| dnf_of(p, limit))
                .collect::<Option<Vec<_>>>()?;
            let mut count = 1usize;
            for c in &children {
                count = count.checked_mul(c.len()).filter(|n| *n <= limit)?;
            }
            // Conjunction `i` takes, from child `k`, the conjunction at digit `k` of `i`
            // written in the mixed radix of the children's sizes (the last child fastest).
            let mut out = Vec::with_capacity(count);
            for i in 0..count {
                let mut conj = Vec::new();
                let mut rest = i;
                let mut picks = Vec::with_capacity(children.len());
                for c in children.iter().rev() {
                    picks.push(&c[rest % c.len()]);
                    rest /= c.len();
                }
                for pick in picks.into_iter().rev() {
                    conj.extend(pick.iter().copied());
                }
                out.push(conj);
            }
            Some(out)
        }
    }
}

/// The number of conjunctions the filter's disjunctive normal form has once `in` and
/// `array-contains-any` lists are expanded into one equality per value (Firestore's count:
/// an OR adds its children's counts, an AND multiplies them, a list counts its values).
/// Computed from the tree without expanding it, saturating at `u64::MAX`, so it is linear in
/// the filter's size however large the expansion would be. No filter, or an empty AND or
/// OR, is one (empty) conjunction.
pub fn dnf_size(filter: Option<&Filter>) -> u64 {
    let leaf = |ff: &FieldFilter| match (ff.op, &ff.value) {
        (Operator::In | Operator::ArrayContainsAny, Value::Array(items)) => {
            u64::try_from(items.len()).unwrap_or(u64::MAX)
        }
        (Operator::In | Operator::ArrayContainsAny, _) => 0,
        _ => 1,
    };
    filter.map_or(1, |f| {
        fold(f, &leaf, 1, u64::saturating_mul, u64::saturating_add)
    })
}

/// The most field filters one conjunction of the filter's disjunctive normal form holds (an
/// AND adds its children's, an OR takes the largest), computed without expanding it.
pub fn max_conjunction_len(filter: Option<&Filter>) -> u64 {
    filter.map_or(0, |f| fold(f, &|_| 1, 0, u64::saturating_add, u64::max))
}

/// Folds the filter tree bottom-up: `leaf` per field filter, `and` and `or` combine the
/// children's results, and `empty` is what an empty AND or OR gives.
fn fold(
    f: &Filter,
    leaf: &dyn Fn(&FieldFilter) -> u64,
    empty: u64,
    and: fn(u64, u64) -> u64,
    or: fn(u64, u64) -> u64,
) -> u64 {
    let (parts, combine) = match f {
        Filter::Field(ff) => return leaf(ff),
        Filter::And(parts) => (parts, and),
        Filter::Or(parts) => (parts, or),
    };
    parts
        .iter()
        .map(|p| fold(p, leaf, empty, and, or))
        .reduce(combine)
        .unwrap_or(empty)
}
