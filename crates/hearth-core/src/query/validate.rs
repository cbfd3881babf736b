//! Query validation: Firestore's restrictions, refused before any I/O with its messages.
//!
//! [`validate`] also resolves `documentId()` operands and cursor values given as strings into
//! references, so that every later stage sees only references for `__name__`.

use std::collections::BTreeSet;

use super::model::{Aggregation, Cursor, FieldFilter, Filter, LimitType, Operator, Query, Source};
use super::normalize::{dnf, dnf_size, max_conjunction_len, normalized_order, MAX_DISJUNCTIONS};
use crate::error::ErrorCode;
use crate::index::config::CompositeIndexSpec;
use crate::path::{CollectionPath, DocumentName};
use crate::value::Value;

/// Most values in an `in` or `array-contains-any` list (Firestore's limit).
pub const MAX_LIST_VALUES: usize = 30;

/// Most values in a `not-in` list (Firestore's limit).
pub const MAX_NOT_IN_VALUES: usize = 10;

/// Most filters, orderBys and parent path (1 for a subcollection, 0 for a top-level
/// collection or a collection group) one query may have, counted in the largest conjunction
/// of its disjunctive normal form (Firestore's limit).
pub const MAX_QUERY_TERMS: u64 = 100;

/// Most aggregations one aggregation request may ask for (Firestore's limit).
pub const MAX_AGGREGATIONS: usize = 5;

/// Why a query cannot run. `code()` gives the stable code the JS API exposes.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum QueryError {
    #[error("invalid query: {0}")]
    InvalidArgument(String),
    #[error("unimplemented: {0}")]
    Unimplemented(String),
    /// A valid request over one of Hearth's own limits (a result too large for one reply).
    #[error("resource exhausted: {0}")]
    ResourceExhausted(String),
    /// No index serves the query. `index` is the composite index to add.
    #[error("{message}")]
    MissingIndex {
        message: String,
        index: CompositeIndexSpec,
    },
    #[error(transparent)]
    Storage(#[from] crate::kv::KvError),
    #[error("corrupt stored data: {0}")]
    Corrupt(String),
    /// The security rules do not allow the request (the message says why, as far as the
    /// relay is told to explain).
    #[error("{0}")]
    PermissionDenied(String),
}

impl QueryError {
    pub fn code(&self) -> ErrorCode {
        match self {
            QueryError::InvalidArgument(_) => ErrorCode::InvalidArgument,
            QueryError::Unimplemented(_) => ErrorCode::Unimplemented,
            QueryError::ResourceExhausted(_) => ErrorCode::ResourceExhausted,
            QueryError::MissingIndex { .. } => ErrorCode::FailedPrecondition,
            QueryError::Storage(_) => ErrorCode::Unavailable,
            QueryError::Corrupt(_) => ErrorCode::DataLoss,
            QueryError::PermissionDenied(_) => ErrorCode::PermissionDenied,
        }
    }
}

fn invalid(msg: impl Into<String>) -> QueryError {
    QueryError::InvalidArgument(msg.into())
}

fn has_nested_array(v: &Value, inside_array: bool) -> bool {
    match v {
        Value::Array(a) => inside_array || a.iter().any(|x| has_nested_array(x, true)),
        Value::Map(m) => m.values().any(|x| has_nested_array(x, false)),
        _ => false,
    }
}

/// Resolves a `documentId()` operand: a string id (collection query) or path (group query),
/// or a reference.
fn resolve_name(source: &Source, v: &Value, what: &str) -> Result<Value, QueryError> {
    match (v, source) {
        (Value::Reference(r), Source::Collection(c)) if !c.contains(r) => Err(invalid(format!(
            "{what}: document reference `{r}` is not in collection `{c}`"
        ))),
        (Value::Reference(_), _) => Ok(v.clone()),
        (Value::String(s), _) if s.is_empty() => Err(invalid(format!(
            "{what}: when querying with documentId(), you must provide a valid document ID, but it was an empty string"
        ))),
        (Value::String(s), Source::Collection(c)) => {
            if s.contains('/') {
                return Err(invalid(format!(
                    "{what}: when querying a collection by documentId(), you must provide a plain document ID, but `{s}` contains a `/` character"
                )));
            }
            c.doc(s)
                .map(Value::Reference)
                .map_err(|e| invalid(format!("{what}: {e}")))
        }
        (Value::String(s), Source::CollectionGroup(_)) => {
            let name = DocumentName::parse(s).map_err(|_| {
                invalid(format!(
                    "{what}: when querying a collection group by documentId(), the value provided must result in a valid document path, but `{s}` is not because it has an odd number of segments"
                ))
            })?;
            Ok(Value::Reference(name))
        }
        _ => Err(invalid(format!(
            "{what}: when querying with documentId(), you must provide a valid string or a document reference, but it was of type {:?}",
            v.type_class()
        ))),
    }
}

fn validate_field_filter(source: &Source, ff: &FieldFilter) -> Result<FieldFilter, QueryError> {
    let mut ff = ff.clone();
    let op = ff.op;
    if op.takes_list() {
        let Value::Array(items) = &ff.value else {
            return Err(invalid(format!(
                "a non-empty array is required for '{op}' filters"
            )));
        };
        if items.is_empty() {
            return Err(invalid(format!(
                "a non-empty array is required for '{op}' filters"
            )));
        }
        let max = if op == Operator::NotIn {
            MAX_NOT_IN_VALUES
        } else {
            MAX_LIST_VALUES
        };
        if items.len() > max {
            return Err(invalid(format!(
                "'{op}' filters support a maximum of {max} elements in the value array"
            )));
        }
        // Firestore's SDK parses an `in` / `not-in` list as an "array argument", with no
        // nested-array check at any depth: `in [['west'], ['east']]` finds fields equal to
        // either array (a deeper array can match no stored field, so it matches nothing).
        // An `array-contains-any` list is a plain argument: its elements are compared with
        // array elements, which are never arrays, and arrays in them are refused.
        if op == Operator::ArrayContainsAny && items.iter().any(|x| has_nested_array(x, true)) {
            return Err(invalid(format!(
                "'{op}' filters cannot contain nested arrays"
            )));
        }
    } else if has_nested_array(&ff.value, false) {
        return Err(invalid(format!(
            "'{op}' filter operand cannot contain nested arrays"
        )));
    }
    if ff.field.is_document_id() {
        match op {
            Operator::ArrayContains | Operator::ArrayContainsAny => {
                return Err(invalid(format!(
                    "invalid query: you can't perform '{op}' queries on documentId()"
                )))
            }
            Operator::In | Operator::NotIn => {
                let Value::Array(items) = &ff.value else {
                    unreachable!("checked above")
                };
                let resolved = items
                    .iter()
                    .map(|x| resolve_name(source, x, "documentId() filter"))
                    .collect::<Result<Vec<_>, _>>()?;
                ff.value = Value::Array(resolved);
            }
            _ => ff.value = resolve_name(source, &ff.value, "documentId() filter")?,
        }
    }
    Ok(ff)
}

fn validate_filter(source: &Source, f: &Filter) -> Result<Filter, QueryError> {
    Ok(match f {
        Filter::Field(ff) => Filter::Field(validate_field_filter(source, ff)?),
        Filter::And(v) => Filter::And(
            v.iter()
                .map(|x| validate_filter(source, x))
                .collect::<Result<_, _>>()?,
        ),
        Filter::Or(v) => Filter::Or(
            v.iter()
                .map(|x| validate_filter(source, x))
                .collect::<Result<_, _>>()?,
        ),
    })
}

fn check_operator_mix(filter: &Filter) -> Result<(), QueryError> {
    let ops: Vec<Operator> = filter.field_filters().iter().map(|f| f.op).collect();
    let count = |o: Operator| ops.iter().filter(|x| **x == o).count();
    let (ne, not_in, in_, any) = (
        count(Operator::NotEqual),
        count(Operator::NotIn),
        count(Operator::In),
        count(Operator::ArrayContainsAny),
    );
    if ne > 0 && not_in > 0 {
        return Err(invalid("you cannot use 'not-in' filters with '!=' filters"));
    }
    if ne > 1 {
        return Err(invalid("you cannot use more than one '!=' filter"));
    }
    if not_in > 1 {
        return Err(invalid("you cannot use more than one 'not-in' filter"));
    }
    if not_in > 0 && in_ > 0 {
        return Err(invalid("you cannot use 'not-in' filters with 'in' filters"));
    }
    if not_in > 0 && any > 0 {
        return Err(invalid(
            "you cannot use 'not-in' filters with 'array-contains-any' filters",
        ));
    }
    // Array membership is limited per disjunction: `or(a array-contains 1, b array-contains
    // 2)` is a valid query, `a array-contains 1 and b array-contains 2` is not.
    for conj in dnf(Some(filter), MAX_DISJUNCTIONS).unwrap_or_default() {
        let count = |o: Operator| conj.iter().filter(|f| f.op == o).count();
        let (any, contains) = (
            count(Operator::ArrayContainsAny),
            count(Operator::ArrayContains),
        );
        if any > 1 {
            return Err(invalid(
                "you cannot use more than one 'array-contains-any' filter in one disjunction",
            ));
        }
        if contains > 1 {
            return Err(invalid(
                "you cannot use more than one 'array-contains' filter in one disjunction",
            ));
        }
        if any > 0 && contains > 0 {
            return Err(invalid(
                "you cannot use 'array-contains-any' filters with 'array-contains' filters in one disjunction",
            ));
        }
    }
    Ok(())
}

fn validate_cursor(
    q: &Query,
    c: &Cursor,
    what: &str,
    order_len: usize,
) -> Result<Cursor, QueryError> {
    let explicit = q.order_by.len();
    let allowed = if c.from_document {
        order_len
    } else {
        explicit.max(1).min(order_len)
    };
    // Without any orderBy, one value is a `__name__` cursor (the normalized order's only part).
    if c.values.len() > allowed || (!c.from_document && explicit > 0 && c.values.len() > explicit) {
        return Err(invalid(format!(
            "too many arguments provided to {what}(): the number of arguments must be less than or equal to the number of orderBy() clauses"
        )));
    }
    let order = normalized_order(q);
    let mut c = c.clone();
    for (i, v) in c.values.iter_mut().enumerate() {
        if order[i].field.is_document_id() {
            *v = resolve_name(&q.source, v, what)?;
        } else if has_nested_array(v, false) {
            return Err(invalid(format!(
                "{what}() values cannot contain nested arrays"
            )));
        }
    }
    Ok(c)
}

/// Checks that a (validated) query can be listened to: a projected result cannot be kept in
/// order as documents change, so real-time listens refuse `select()`, on the relay and in
/// the client alike.
pub fn check_listenable(q: &Query) -> Result<(), QueryError> {
    if q.projection.is_some() {
        return Err(QueryError::InvalidArgument(
            "listens cannot use select(): a projected result cannot be kept in order as \
             documents change; listen without select() or use a one-time query"
                .into(),
        ));
    }
    Ok(())
}

/// Firestore's limits on a query's size, counted from the filter tree without expanding it
/// (linear in the query however large its expansion would be), so that no later stage ever
/// builds more than [`MAX_DISJUNCTIONS`] conjunctions of at most [`MAX_QUERY_TERMS`] filters.
fn check_size(q: &Query) -> Result<(), QueryError> {
    let disjunctions = dnf_size(q.filter.as_ref());
    if disjunctions > MAX_DISJUNCTIONS as u64 {
        let shown = if disjunctions == u64::MAX {
            format!("at least {}", u64::MAX)
        } else {
            disjunctions.to_string()
        };
        return Err(invalid(format!(
            "the filter has {shown} disjunctions in disjunctive normal form ('in' and \
             'array-contains-any' values count, and multiply across AND), over the limit of \
             {MAX_DISJUNCTIONS}"
        )));
    }
    let parent = match &q.source {
        Source::Collection(c) if c.segments().len() > 1 => 1,
        _ => 0,
    };
    let terms = max_conjunction_len(q.filter.as_ref())
        .saturating_add(u64::try_from(q.order_by.len()).unwrap_or(u64::MAX))
        .saturating_add(parent);
    if terms > MAX_QUERY_TERMS {
        return Err(invalid(format!(
            "the query has {terms} filters, orderBys and parent path in one disjunction, \
             over the limit of {MAX_QUERY_TERMS}"
        )));
    }
    Ok(())
}

/// Checks an aggregation request's list: at most [`MAX_AGGREGATIONS`] (Firestore's limit).
pub fn validate_aggregations(aggs: &[Aggregation]) -> Result<(), QueryError> {
    if aggs.len() > MAX_AGGREGATIONS {
        return Err(invalid(format!(
            "the request has {} aggregations, over the limit of {MAX_AGGREGATIONS}",
            aggs.len()
        )));
    }
    Ok(())
}

/// Checks `q` and returns it with `documentId()` operands resolved to references.
pub fn validate(q: &Query) -> Result<Query, QueryError> {
    let mut out = q.clone();
    if let Some(n) = q.limit {
        if n <= 0 {
            return Err(invalid(format!(
                "query limit ({n}) is invalid: limit must be positive"
            )));
        }
    }
    if q.limit_type == LimitType::Last && q.order_by.is_empty() {
        return Err(QueryError::Unimplemented(
            "limitToLast() queries require specifying at least one orderBy() clause".into(),
        ));
    }
    if let Source::Collection(c) = &q.source {
        debug_assert!(CollectionPath::parse(&c.to_string()).is_ok());
    }
    if let Some(f) = &q.filter {
        out.filter = Some(validate_filter(&q.source, f)?);
    }
    check_size(&out)?;
    if let Some(f) = &out.filter {
        check_operator_mix(f)?;
    }
    // Firestore's backend refuses a field ordered twice (`orderBy('n').orderBy('n', 'desc')`);
    // its SDK lets the query through, so the refusal is the query's, wherever it runs.
    let mut ordered = BTreeSet::new();
    for o in &q.order_by {
        if !ordered.insert(&o.field) {
            return Err(invalid(format!(
                "order by clause cannot contain duplicate fields (`{}` is ordered more than once)",
                o.field
            )));
        }
    }
    let order_len = normalized_order(&out).len();
    if let Some(c) = &q.start {
        let what = if c.inclusive { "startAt" } else { "startAfter" };
        out.start = Some(validate_cursor(&out, c, what, order_len)?);
    }
    if let Some(c) = &q.end {
        let what = if c.inclusive { "endAt" } else { "endBefore" };
        out.end = Some(validate_cursor(&out, c, what, order_len)?);
    }
    Ok(out)
}
