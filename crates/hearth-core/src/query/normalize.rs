//! Derived forms of a query: the normalized order and the disjunctive normal form of its filter.

use std::collections::BTreeSet;

use super::model::{FieldFilter, Filter, OrderBy, Query};
use crate::encoding::key::Direction;
use crate::path::FieldPath;

/// Most conjunctions a filter may expand to (Firestore's limit on disjunctive normal form).
pub const MAX_DISJUNCTIONS: usize = 30;

/// The fields with inequality filters (`<`, `<=`, `>`, `>=`, `!=`, `not-in`), sorted.
pub fn inequality_fields(q: &Query) -> BTreeSet<FieldPath> {
    q.filter
        .as_ref()
        .map(|f| {
            f.field_filters()
                .into_iter()
                .filter(|ff| ff.op.is_inequality())
                .map(|ff| ff.field.clone())
                .collect()
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
    for f in inequality_fields(q) {
        if !f.is_document_id() && !order.iter().any(|o| o.field == f) {
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
/// conjunction. `None` when the expansion exceeds `limit` conjunctions.
pub fn dnf(filter: Option<&Filter>, limit: usize) -> Option<Vec<Vec<FieldFilter>>> {
    match filter {
        None => Some(vec![Vec::new()]),
        Some(f) => dnf_of(f, limit),
    }
}

fn dnf_of(f: &Filter, limit: usize) -> Option<Vec<Vec<FieldFilter>>> {
    match f {
        Filter::Field(ff) => Some(vec![vec![ff.clone()]]),
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
            let mut acc: Vec<Vec<FieldFilter>> = vec![Vec::new()];
            for p in parts {
                let branches = dnf_of(p, limit)?;
                if acc.len() * branches.len() > limit {
                    return None;
                }
                let mut next = Vec::with_capacity(acc.len() * branches.len());
                for a in &acc {
                    for b in &branches {
                        let mut c = a.clone();
                        c.extend(b.iter().cloned());
                        next.push(c);
                    }
                }
                acc = next;
            }
            Some(acc)
        }
    }
}
