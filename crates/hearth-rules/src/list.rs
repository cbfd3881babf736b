//! The list proof (rules are not filters): a query is allowed only if the `list` rules hold
//! for every document it could return. Its filter is put in disjunctive normal form and each
//! conjunction proved on its own, over a partial document: the fields its `==` and `in`
//! filters fix are known (one evaluation per combination of their values), those its range,
//! `!=`, `not-in`, `array-contains` and `orderBy` clauses constrain are known to be present
//! and within those bounds, and everything else is unknown. Unknown never decides: an
//! evaluation that depends on it does not allow.
//!
//! The proof and the query engine must agree on which values a filter matches
//! (`SEMANTICS.md`): `==` matches numbers by value (`1` and `1.0`, `0` and `-0.0`), so each
//! number kind is tried; `in` and `not-in` compare strictly; numbers nested in a fixed list
//! or map are left unknown (their kind is not told).

use std::collections::BTreeMap;

use hearth_core::path::DocumentName;
use hearth_core::query::model::{FieldFilter, Operator, Query, Source};
use hearth_core::query::normalize::{dnf, MAX_DISJUNCTIONS};
use hearth_core::value::{Timestamp, Value};

use crate::eval::{self, from_value, Partial, Val};
use crate::proof::Bounds;
use crate::{auth_val, Auth, Decision, Method, Reader, Ruleset, Seg};

/// Most partial documents a list proof evaluates (combinations of `in` values and number
/// kinds, over every conjunction).
const MAX_COMBINATIONS: usize = 256;

/// What one conjunction of a query's filter tells of the documents it matches.
#[derive(Default)]
struct Known {
    /// Fields the conjunction fixes, each with the values it may hold.
    fixed: Vec<(Vec<String>, Vec<Val>)>,
    /// Fields it bounds without fixing (present, within the bounds).
    ranges: BTreeMap<Vec<String>, Bounds>,
    /// The documents it names (`documentId()` filters of a collection query), if any.
    names: Option<Vec<DocumentName>>,
}

impl Known {
    /// What `conjunction` of `query` tells.
    fn of(conjunction: &[FieldFilter], query: &Query) -> Known {
        let mut known = Known::default();
        for ff in conjunction {
            if ff.field.is_document_id() {
                known.name_filter(ff, &query.source);
                continue;
            }
            let field = ff.field.segments().to_vec();
            match ff.op {
                Operator::Equal => known.fixed.push((field, equal_candidates(&ff.value))),
                Operator::In => {
                    if let Value::Array(values) = &ff.value {
                        let values = values.iter().flat_map(strict_candidates).collect();
                        known.fixed.push((field, values));
                    }
                }
                op => known
                    .ranges
                    .entry(field)
                    .or_default()
                    .narrow(op, from_value(&ff.value)),
            }
        }
        // An `orderBy` drops documents lacking its field: present, of any value.
        for o in &query.order_by {
            if !o.field.is_document_id() {
                known.ranges.entry(o.field.segments().to_vec()).or_default();
            }
        }
        // A field both fixed and bounded is fixed.
        let fixed = &known.fixed;
        known
            .ranges
            .retain(|f, _| !fixed.iter().any(|(g, _)| g == f));
        known
    }

    /// Narrows the documents named by a `documentId()` filter (collection queries only: a
    /// collection group's documents stay unknown).
    fn name_filter(&mut self, ff: &FieldFilter, source: &Source) {
        let Source::Collection(collection) = source else {
            return;
        };
        let name = |v: &Value| match v {
            Value::Reference(n) if collection.contains(n) => Some(n.clone()),
            Value::String(id) => collection.doc(id).ok(),
            _ => None,
        };
        let named: Vec<DocumentName> = match (ff.op, &ff.value) {
            (Operator::Equal, v) => name(v).into_iter().collect(),
            (Operator::In, Value::Array(values)) => values.iter().filter_map(name).collect(),
            _ => return,
        };
        self.names = Some(match self.names.take() {
            None => named,
            Some(before) => before.into_iter().filter(|n| named.contains(n)).collect(),
        });
    }

    /// How many partial documents prove this conjunction.
    fn combinations(&self) -> usize {
        let names = self.names.as_ref().map_or(1, Vec::len);
        self.fixed
            .iter()
            .try_fold(names, |n, (_, v)| n.checked_mul(v.len()))
            .unwrap_or(usize::MAX)
    }

    /// The `k`th partial document: its data, and its name when the conjunction names it.
    fn document(&self, k: usize) -> (Partial, Option<&DocumentName>) {
        let mut data = Partial {
            known: BTreeMap::new(),
            path: Vec::new(),
        };
        let mut rest = k;
        for (field, values) in &self.fixed {
            if let Some(v) = values.get(rest % values.len().max(1)) {
                set_path(&mut data, field, v.clone());
            }
            rest /= values.len().max(1);
        }
        for (field, bounds) in &self.ranges {
            let mut bounds = bounds.clone();
            bounds.field = field.clone();
            set_path(&mut data, field, Val::Range(Box::new(bounds)));
        }
        let name = self
            .names
            .as_ref()
            .and_then(|n| n.get(rest % n.len().max(1)));
        (data, name)
    }
}

/// The values a document's field may hold when an `==` filter matches it: numbers by value
/// in both kinds (and both zeros); a list or map with its numbers left unknown.
fn equal_candidates(v: &Value) -> Vec<Val> {
    match v {
        Value::Integer(i) => {
            let mut out = vec![Val::Int(*i)];
            let f = *i as f64;
            if f as i128 == i128::from(*i) {
                out.push(Val::Float(f));
                if *i == 0 {
                    out.push(Val::Float(-0.0));
                }
            }
            out
        }
        Value::Double(d) => {
            let mut out = vec![Val::Float(*d)];
            if *d == 0.0 {
                out.push(Val::Float(-*d));
            }
            if d.fract() == 0.0 && d.abs() < 9.2e18 {
                out.push(Val::Int(*d as i64));
            }
            out
        }
        v => vec![loosen(from_value(v))],
    }
}

/// The values a document's field may hold when it strictly equals `v` (`in`): an int is an
/// int; a float zero either zero.
fn strict_candidates(v: &Value) -> Vec<Val> {
    match v {
        Value::Double(d) if *d == 0.0 => vec![Val::Float(*d), Val::Float(-*d)],
        v => vec![loosen(from_value(v))],
    }
}

/// `v` with the numbers inside it (not itself) unknown: a filter does not tell their kind.
fn loosen(v: Val) -> Val {
    fn inner(v: Val) -> Val {
        match v {
            Val::Int(_) | Val::Float(_) => Val::Unknown,
            v => loosen(v),
        }
    }
    match v {
        Val::List(items) => Val::List(items.into_iter().map(inner).collect()),
        Val::Map(m) => Val::Map(m.into_iter().map(|(k, v)| (k, inner(v))).collect()),
        v => v,
    }
}

/// Sets `data[path...] = v`, creating partial maps on the way (each knowing its own path).
fn set_path(data: &mut Partial, path: &[String], v: Val) {
    let mut at = data;
    for (i, segment) in path.iter().enumerate() {
        if i + 1 == path.len() {
            at.known.insert(segment.clone(), v);
            return;
        }
        let entry = at.known.entry(segment.clone()).or_insert_with(|| {
            Val::Partial(Box::new(Partial {
                known: BTreeMap::new(),
                path: path[..=i].to_vec(),
            }))
        });
        // A field fixed to a value that is not a map has no fields: no document matches.
        let Val::Partial(p) = entry else { return };
        at = p;
    }
}

/// A denial of a list that the proof does not try.
fn refused(explanation: String) -> Decision {
    Decision {
        allowed: false,
        explanation,
        rule_line: None,
        considered: Vec::new(),
        errors: Vec::new(),
    }
}

/// The caller and time of a list.
pub(crate) struct Caller<'a> {
    /// `request.auth`.
    pub auth: Option<&'a Auth>,
    /// `request.time`.
    pub time: Timestamp,
}

impl Ruleset {
    /// See [`Ruleset::check_list`].
    pub(crate) fn prove_list(
        &self,
        database: &str,
        query: &Query,
        caller: &Caller,
        reader: &dyn Reader,
    ) -> Decision {
        let Some(conjunctions) = dnf(query.filter.as_ref(), MAX_DISJUNCTIONS) else {
            return refused(format!(
                "the query's filter has more than {MAX_DISJUNCTIONS} disjunctions"
            ));
        };
        let branches: Vec<Known> = conjunctions.iter().map(|c| Known::of(c, query)).collect();
        let total = branches
            .iter()
            .try_fold(0usize, |n, b| n.checked_add(b.combinations()))
            .unwrap_or(usize::MAX);
        if total > MAX_COMBINATIONS {
            return refused(format!(
                "the query's filters give {total} combinations of values, more than the {MAX_COMBINATIONS} the rules check"
            ));
        }
        let mut last = None;
        for branch in &branches {
            for k in 0..branch.combinations() {
                let d = self.prove_document(database, query, caller, reader, branch.document(k));
                if !d.allowed {
                    return d;
                }
                last = Some(d);
            }
        }
        // No combination at all: every conjunction names no document of the query's
        // source, so it returns nothing.
        last.unwrap_or_else(|| Decision {
            allowed: true,
            explanation: "the query can return no document".into(),
            rule_line: None,
            considered: Vec::new(),
            errors: Vec::new(),
        })
    }

    /// The `list` rules for one partial document of `query`'s results.
    fn prove_document(
        &self,
        database: &str,
        query: &Query,
        caller: &Caller,
        reader: &dyn Reader,
        (data, name): (Partial, Option<&DocumentName>),
    ) -> Decision {
        let segs = match name {
            Some(n) => eval::full_path(database, n)
                .into_iter()
                .map(Seg::Known)
                .collect(),
            None => source_segments(database, &query.source),
        };
        let mut query_map = BTreeMap::new();
        query_map.insert("limit".to_owned(), query.limit.map_or(Val::Null, Val::Int));
        query_map.insert("offset".to_owned(), Val::Int(query.offset as i64));
        query_map.insert("orderBy".to_owned(), Val::Unknown);
        let mut res = BTreeMap::new();
        res.insert("data".to_owned(), Val::Partial(Box::new(data)));
        res.insert(
            "id".to_owned(),
            name.map_or(Val::Unknown, |n| Val::Str(n.id().to_owned())),
        );
        res.insert(
            "__name__".to_owned(),
            name.map_or(Val::Unknown, |n| Val::Path(eval::full_path(database, n))),
        );
        let mut request = BTreeMap::new();
        request.insert("auth".to_owned(), auth_val(caller.auth));
        request.insert("time".to_owned(), Val::Timestamp(caller.time));
        request.insert(
            "path".to_owned(),
            name.map_or(Val::Unknown, |n| Val::Path(eval::full_path(database, n))),
        );
        request.insert("method".to_owned(), Val::Str("list".to_owned()));
        request.insert("query".to_owned(), Val::Map(query_map));
        let vars = vec![
            ("request".to_owned(), Val::Map(request)),
            ("resource".to_owned(), Val::Map(res)),
        ];
        let path_text = format!("the documents of {:?}", query.source);
        self.decide(
            Method::List,
            &segs,
            &vars,
            (database, reader, crate::DOCUMENT_READS_SINGLE),
            &path_text,
        )
    }
}

/// The path of any document of `source`, its id unknown.
fn source_segments(database: &str, source: &Source) -> Vec<Seg> {
    let mut segs: Vec<Seg> = ["databases", database, "documents"]
        .iter()
        .map(|s| Seg::Known((*s).to_owned()))
        .collect();
    match source {
        Source::Collection(c) => segs.extend(c.segments().iter().cloned().map(Seg::Known)),
        Source::CollectionGroup(g) => {
            segs.push(Seg::AnyPrefix);
            segs.push(Seg::Known(g.clone()));
        }
    }
    segs.push(Seg::Unknown);
    segs
}
