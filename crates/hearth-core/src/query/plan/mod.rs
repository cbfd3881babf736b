//! The planner: every query served from index range scans.
//!
//! A query's filter becomes a disjunction of conjunctions; `in` and `array-contains-any`
//! expand each conjunction into equality branches. Each branch is served by one of:
//! - the documents table (a collection read in name order, or a `__name__ ==` point read);
//! - one index whose fields are the branch's equality fields (any order) followed by the
//!   query's remaining order fields, scanned forward or backward, with the first order
//!   field's range filters and the cursors as key bounds;
//! - a zig-zag join of several such indexes that each cover some of the equality fields and
//!   share the same ordered suffix.
//!
//! Branches are merged in query order (k-way, lazily, so a limit stops every scan early).
//! The executor re-checks every candidate with the matcher, so plans may over-approximate
//! (residual filters) but never miss a document or emit one out of order.
//!
//! Architecture invariant: no plan scans a whole collection to filter it, and no plan sorts.

mod bounds;
mod branch;
mod missing;
mod render;
mod zigzag;

use super::model::{FieldFilter, LimitType, Operator, OrderBy, Query, Source};
use super::normalize::{dnf, dnf_size, normalized_order, MAX_DISJUNCTIONS};
use super::validate::QueryError;
use crate::encoding::key::Direction;
use crate::index::config::QueryScope;
use crate::index::def::{IndexCatalog, IndexDef};
use crate::kv::{KeyRange, Table};
use crate::path::{CollectionPath, FieldPath};
use crate::value::Value;

/// Most branches a query may expand to after `in` / `array-contains-any` expansion. A
/// validated query has at most [`MAX_DISJUNCTIONS`]; this bound keeps the planner safe on
/// its own, checked arithmetically before any branch is built.
pub const MAX_BRANCHES: usize = 900;

/// How one branch reads candidates.
#[derive(Clone, Debug, PartialEq)]
pub enum Access {
    /// Documents-table ranges; keys are document keys, values the documents.
    Documents { ranges: Vec<KeyRange> },
    /// Index ranges of one index.
    Index {
        def: IndexDef,
        ranges: Vec<KeyRange>,
    },
    /// A zig-zag join: every scan covers the same suffix; matching suffixes are results.
    ZigZag { scans: Vec<JoinScan> },
}

/// One input of a zig-zag join.
#[derive(Clone, Debug, PartialEq)]
pub struct JoinScan {
    /// The index scanned.
    pub def: IndexDef,
    /// Index id, scope and equality values: everything before the shared suffix.
    pub prefix: Vec<u8>,
    /// The scan range (within `prefix`).
    pub range: KeyRange,
}

/// One branch of a plan.
#[derive(Clone, Debug, PartialEq)]
pub struct Branch {
    /// How the branch reads its candidates.
    pub access: Access,
    /// Scan keys in descending order.
    pub reverse: bool,
    /// Human-readable equality constraints, for plan rendering.
    pub equalities: Vec<String>,
}

/// A query plan.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// One branch per conjunction of the filter (after `in` expansion), merged in order.
    pub branches: Vec<Branch>,
    /// The normalized order results come out in (reversed for `limitToLast`, which the
    /// executor undoes at the end).
    pub order: Vec<OrderBy>,
    /// Branches are read in reverse query order (`limitToLast`).
    pub reversed: bool,
}

/// One expanded branch of a conjunction.
#[derive(Clone, Debug, Default)]
struct Conj {
    /// `field == value` (from `==` and `in`), one per field.
    eqs: Vec<(FieldPath, Value)>,
    /// `field array-contains value` (from `array-contains` and `array-contains-any`).
    contains: Vec<(FieldPath, Value)>,
    /// Inequality filters.
    ineqs: Vec<FieldFilter>,
    /// Statically empty (two different equalities on one field).
    empty: bool,
}

fn expand(conjunction: &[FieldFilter]) -> Vec<Conj> {
    let mut out = vec![Conj::default()];
    for ff in conjunction {
        let choices: Vec<(bool, Value)> = match ff.op {
            Operator::Equal => vec![(false, ff.value.clone())],
            Operator::In => list(&ff.value).iter().map(|v| (false, v.clone())).collect(),
            Operator::ArrayContains => vec![(true, ff.value.clone())],
            Operator::ArrayContainsAny => {
                list(&ff.value).iter().map(|v| (true, v.clone())).collect()
            }
            _ => {
                for c in &mut out {
                    c.ineqs.push(ff.clone());
                }
                continue;
            }
        };
        let mut next = Vec::with_capacity(out.len() * choices.len());
        for c in &out {
            for (is_contains, v) in &choices {
                let mut c = c.clone();
                if *is_contains {
                    c.contains.push((ff.field.clone(), v.clone()));
                } else if let Some((_, existing)) = c.eqs.iter().find(|(f, _)| *f == ff.field) {
                    // `in` uses strict equality, `==` order equality: keep the branch only if
                    // both can hold, and let the matcher decide exactly.
                    if !existing.eq_order(v) {
                        c.empty = true;
                    }
                } else {
                    c.eqs.push((ff.field.clone(), v.clone()));
                }
                next.push(c);
            }
        }
        out = next;
    }
    out
}

fn list(v: &Value) -> &[Value] {
    match v {
        Value::Array(a) => a,
        _ => &[],
    }
}

/// What a branch reads, before bounds: a prefix and the layout of the suffix after it.
struct Layout<'a> {
    /// The suffix order: (field, key direction) per component, `None` field for the name.
    components: Vec<(Option<&'a FieldPath>, Direction)>,
    /// Scope of the name component.
    name_scope: NameScope,
    /// Key order is the reverse of query order.
    flipped: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum NameScope {
    /// The name component is the document id (documents table, collection-scope index).
    Id,
    /// The name component is the full name (collection-group index).
    Full,
}

struct Planner<'a> {
    catalog: &'a IndexCatalog,
    query: &'a Query,
    /// The normalized order up to and including `__name__`.
    order: Vec<OrderBy>,
    scope: QueryScope,
}

impl<'a> Planner<'a> {
    fn parent(&self) -> Option<&CollectionPath> {
        match &self.query.source {
            Source::Collection(c) => Some(c),
            Source::CollectionGroup(_) => None,
        }
    }
}

/// Plans a validated query.
pub fn plan(catalog: &IndexCatalog, query: &Query) -> Result<Plan, QueryError> {
    let order = normalized_order(query);
    // Scans order by the normalized order up to `__name__`: nothing after it breaks a tie.
    let name_at = order
        .iter()
        .position(|o| o.field.is_document_id())
        .expect("the normalized order has __name__");
    let planner = Planner {
        catalog,
        query,
        order: order[..=name_at].to_vec(),
        scope: match query.source {
            Source::Collection(_) => QueryScope::Collection,
            Source::CollectionGroup(_) => QueryScope::CollectionGroup,
        },
    };
    if dnf_size(query.filter.as_ref()) > MAX_BRANCHES as u64 {
        return Err(QueryError::InvalidArgument(format!(
            "the query expands to more than {MAX_BRANCHES} index scans ('in' and 'array-contains-any' values multiply)"
        )));
    }
    let conjunctions = dnf(query.filter.as_ref(), MAX_DISJUNCTIONS).ok_or_else(|| {
        QueryError::InvalidArgument(format!(
            "the filter expands to more than {MAX_DISJUNCTIONS} disjunctions"
        ))
    })?;
    let mut branches = Vec::new();
    for c in &conjunctions {
        let parts = expand(c);
        for conj in parts.iter().filter(|c| !c.empty) {
            if let Some(b) = planner.plan_branch(conj)? {
                branches.push(b);
            }
        }
    }
    Ok(Plan {
        branches,
        order,
        reversed: query.limit_type == LimitType::Last,
    })
}

impl Access {
    /// The table this access reads first.
    pub fn table(&self) -> Table {
        match self {
            Access::Documents { .. } => Table::Documents,
            _ => Table::Index,
        }
    }
}
