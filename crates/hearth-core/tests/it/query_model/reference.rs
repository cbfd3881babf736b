//! The reference model: Firestore's value order, strict equality, filters, the normalized
//! order, cursors, limits, projection and aggregations, written from SEMANTICS.md alone.

use std::cmp::Ordering;

use hearth_core::document::Document;
use hearth_core::encoding::key::Direction::{self, Ascending, Descending};
use hearth_core::path::{DocumentName, FieldPath};
use hearth_core::query::model::{
    Aggregation, FieldFilter, Filter, LimitType, Operator, Query, Source,
};
use hearth_core::value::{Map, Value};

pub(crate) fn rank(v: &Value) -> u8 {
    match v {
        Value::Null => 0,
        Value::Boolean(_) => 1,
        Value::Integer(_) | Value::Double(_) => 2,
        Value::Timestamp(_) => 3,
        Value::String(_) => 4,
        Value::Bytes(_) => 5,
        Value::Reference(_) => 6,
        Value::GeoPoint(_) => 7,
        Value::Array(_) => 8,
        Value::Map(_) => 9,
    }
}

/// An int64 against a double, exactly (the double is not NaN).
pub(crate) fn cmp_int_double(i: i64, d: f64) -> Ordering {
    if d >= 9_223_372_036_854_775_808.0 {
        return Ordering::Less;
    }
    if d < -9_223_372_036_854_775_808.0 {
        return Ordering::Greater;
    }
    let whole = d.trunc();
    match i.cmp(&(whole as i64)) {
        Ordering::Equal => 0.0f64.partial_cmp(&(d - whole)).expect("no NaN"),
        o => o,
    }
}

pub(crate) fn cmp_numbers(a: &Value, b: &Value) -> Ordering {
    let nan = |v: &Value| matches!(v, Value::Double(d) if d.is_nan());
    match (nan(a), nan(b)) {
        (true, true) => return Ordering::Equal,
        (true, false) => return Ordering::Less,
        (false, true) => return Ordering::Greater,
        _ => {}
    }
    match (a, b) {
        (Value::Integer(x), Value::Integer(y)) => x.cmp(y),
        (Value::Double(x), Value::Double(y)) => x.partial_cmp(y).expect("no NaN"),
        (Value::Integer(x), Value::Double(y)) => cmp_int_double(*x, *y),
        (Value::Double(x), Value::Integer(y)) => cmp_int_double(*y, *x).reverse(),
        _ => unreachable!("numbers only"),
    }
}

/// Document names: segment by segment by UTF-8 bytes, a prefix first.
pub(crate) fn cmp_names(a: &DocumentName, b: &DocumentName) -> Ordering {
    for (x, y) in a.segments().iter().zip(b.segments()) {
        match x.as_bytes().cmp(y.as_bytes()) {
            Ordering::Equal => {}
            o => return o,
        }
    }
    a.segments().len().cmp(&b.segments().len())
}

/// Firestore's total order of values, written from SEMANTICS.md.
pub(crate) fn ref_cmp(a: &Value, b: &Value) -> Ordering {
    let (ra, rb) = (rank(a), rank(b));
    if ra != rb {
        return ra.cmp(&rb);
    }
    match (a, b) {
        (Value::Null, Value::Null) => Ordering::Equal,
        (Value::Boolean(x), Value::Boolean(y)) => x.cmp(y),
        (Value::Timestamp(x), Value::Timestamp(y)) => {
            (x.seconds(), x.nanos()).cmp(&(y.seconds(), y.nanos()))
        }
        (Value::String(x), Value::String(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Value::Bytes(x), Value::Bytes(y)) => x.as_slice().cmp(y.as_slice()),
        (Value::Reference(x), Value::Reference(y)) => cmp_names(x, y),
        (Value::GeoPoint(x), Value::GeoPoint(y)) => x
            .latitude()
            .partial_cmp(&y.latitude())
            .expect("geopoints are not NaN")
            .then(
                x.longitude()
                    .partial_cmp(&y.longitude())
                    .expect("geopoints are not NaN"),
            ),
        (Value::Array(x), Value::Array(y)) => {
            for (p, q) in x.iter().zip(y) {
                match ref_cmp(p, q) {
                    Ordering::Equal => {}
                    o => return o,
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Map(x), Value::Map(y)) => {
            let mut ex: Vec<(&String, &Value)> = x.iter().collect();
            let mut ey: Vec<(&String, &Value)> = y.iter().collect();
            ex.sort_by(|p, q| p.0.as_bytes().cmp(q.0.as_bytes()));
            ey.sort_by(|p, q| p.0.as_bytes().cmp(q.0.as_bytes()));
            for ((kx, vx), (ky, vy)) in ex.iter().zip(&ey) {
                match kx
                    .as_bytes()
                    .cmp(ky.as_bytes())
                    .then_with(|| ref_cmp(vx, vy))
                {
                    Ordering::Equal => {}
                    o => return o,
                }
            }
            ex.len().cmp(&ey.len())
        }
        _ => cmp_numbers(a, b),
    }
}

/// Strict equality: same type and value (`1 != 1.0`, `-0.0 != 0.0`, `NaN == NaN`).
pub(crate) fn strict_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::Boolean(x), Value::Boolean(y)) => x == y,
        (Value::Integer(x), Value::Integer(y)) => x == y,
        (Value::Double(x), Value::Double(y)) => {
            (x.is_nan() && y.is_nan()) || x.to_bits() == y.to_bits()
        }
        (Value::Timestamp(x), Value::Timestamp(y)) => {
            x.seconds() == y.seconds() && x.nanos() == y.nanos()
        }
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Bytes(x), Value::Bytes(y)) => x == y,
        (Value::Reference(x), Value::Reference(y)) => x.segments() == y.segments(),
        (Value::GeoPoint(x), Value::GeoPoint(y)) => {
            x.latitude().to_bits() == y.latitude().to_bits()
                && x.longitude().to_bits() == y.longitude().to_bits()
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| strict_eq(p, q))
        }
        (Value::Map(x), Value::Map(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| strict_eq(v, w)))
        }
        _ => false,
    }
}

pub(crate) fn strict_eq_fields(a: &Map, b: &Map) -> bool {
    strict_eq(&Value::Map(a.clone()), &Value::Map(b.clone()))
}

// ---------------------------------------------------------------------------------------
// The reference model: queries.

pub(crate) fn is_name(path: &FieldPath) -> bool {
    path.segments() == ["__name__"]
}

pub(crate) fn get(doc: &Document, path: &FieldPath) -> Option<Value> {
    if is_name(path) {
        return Some(Value::Reference(doc.name.clone()));
    }
    let mut map: &Map = &doc.fields;
    let (last, parents) = path.segments().split_last()?;
    for s in parents {
        match map.get(s)? {
            Value::Map(m) => map = m,
            _ => return None,
        }
    }
    map.get(last).cloned()
}

pub(crate) fn in_scope(source: &Source, name: &DocumentName) -> bool {
    let s = name.segments();
    match source {
        Source::Collection(c) => {
            s.len() == c.segments().len() + 1 && s[..s.len() - 1] == *c.segments()
        }
        Source::CollectionGroup(g) => s[s.len() - 2] == *g,
    }
}

/// A `documentId()` operand as Firestore reads it: a plain id in a collection query, a full
/// path in a collection-group query, or a reference.
pub(crate) fn resolve_name(source: &Source, v: &Value) -> Value {
    match (v, source) {
        (Value::String(id), Source::Collection(c)) => {
            Value::Reference(DocumentName::parse(&format!("{c}/{id}")).expect("valid id"))
        }
        (Value::String(path), Source::CollectionGroup(_)) => {
            Value::Reference(DocumentName::parse(path).expect("valid path"))
        }
        _ => v.clone(),
    }
}

pub(crate) fn list(v: &Value) -> &[Value] {
    match v {
        Value::Array(a) => a,
        _ => panic!("list operand expected"),
    }
}

pub(crate) fn field_matches(source: &Source, doc: &Document, ff: &FieldFilter) -> bool {
    let Some(v) = get(doc, &ff.field) else {
        return false;
    };
    let x = if is_name(&ff.field) {
        match &ff.value {
            Value::Array(items) => {
                Value::Array(items.iter().map(|i| resolve_name(source, i)).collect())
            }
            other => resolve_name(source, other),
        }
    } else {
        ff.value.clone()
    };
    let same_type = rank(&v) == rank(&x);
    let c = ref_cmp(&v, &x);
    match ff.op {
        Operator::Equal => same_type && c == Ordering::Equal,
        Operator::LessThan => same_type && c == Ordering::Less,
        Operator::LessThanOrEqual => same_type && c != Ordering::Greater,
        Operator::GreaterThan => same_type && c == Ordering::Greater,
        Operator::GreaterThanOrEqual => same_type && c != Ordering::Less,
        Operator::NotEqual => v != Value::Null && c != Ordering::Equal,
        Operator::In => list(&x).iter().any(|e| strict_eq(e, &v)),
        Operator::NotIn => {
            !matches!(v, Value::Null)
                && !list(&x).iter().any(|e| matches!(e, Value::Null))
                && !list(&x).iter().any(|e| strict_eq(e, &v))
        }
        Operator::ArrayContains => match &v {
            Value::Array(items) => items.iter().any(|e| strict_eq(e, &x)),
            _ => false,
        },
        Operator::ArrayContainsAny => match &v {
            Value::Array(items) => items
                .iter()
                .any(|e| list(&x).iter().any(|l| strict_eq(e, l))),
            _ => false,
        },
    }
}

pub(crate) fn filter_matches(source: &Source, doc: &Document, f: &Filter) -> bool {
    match f {
        Filter::Field(ff) => field_matches(source, doc, ff),
        Filter::And(parts) => parts.iter().all(|p| filter_matches(source, doc, p)),
        Filter::Or(parts) => parts.iter().any(|p| filter_matches(source, doc, p)),
    }
}

pub(crate) fn field_filters(f: &Filter, out: &mut Vec<FieldFilter>) {
    match f {
        Filter::Field(ff) => out.push(ff.clone()),
        Filter::And(parts) | Filter::Or(parts) => parts.iter().for_each(|p| field_filters(p, out)),
    }
}

pub(crate) fn is_inequality(op: Operator) -> bool {
    matches!(
        op,
        Operator::LessThan
            | Operator::LessThanOrEqual
            | Operator::GreaterThan
            | Operator::GreaterThanOrEqual
            | Operator::NotEqual
            | Operator::NotIn
    )
}

/// The normalized order as the Firestore SDK builds it: explicit orderBys; then inequality
/// fields not explicitly ordered, sorted (the document key is never one of them); then the
/// document key unless explicitly ordered. Implicit parts follow the last explicit direction.
pub(crate) fn model_order(q: &Query) -> Vec<(FieldPath, Direction)> {
    let mut order: Vec<(FieldPath, Direction)> = q
        .order_by
        .iter()
        .map(|o| (o.field.clone(), o.dir))
        .collect();
    let dir = order.last().map_or(Ascending, |o| o.1);
    let mut filters = Vec::new();
    if let Some(f) = &q.filter {
        field_filters(f, &mut filters);
    }
    let mut ineq: Vec<FieldPath> = filters
        .iter()
        .filter(|ff| is_inequality(ff.op) && !is_name(&ff.field))
        .map(|ff| ff.field.clone())
        .collect();
    ineq.sort_by(|a, b| {
        for (x, y) in a.segments().iter().zip(b.segments()) {
            match x.as_bytes().cmp(y.as_bytes()) {
                Ordering::Equal => {}
                o => return o,
            }
        }
        a.segments().len().cmp(&b.segments().len())
    });
    ineq.dedup();
    for f in ineq {
        if !order.iter().any(|o| o.0 == f) {
            order.push((f, dir));
        }
    }
    if !order.iter().any(|o| is_name(&o.0)) {
        order.push((FieldPath::document_id(), dir));
    }
    order
}

pub(crate) fn apply_dir(dir: Direction, o: Ordering) -> Ordering {
    match dir {
        Ascending => o,
        Descending => o.reverse(),
    }
}

pub(crate) fn cmp_docs(order: &[(FieldPath, Direction)], a: &Document, b: &Document) -> Ordering {
    for (f, dir) in order {
        let c = ref_cmp(&get(a, f).expect("ordered"), &get(b, f).expect("ordered"));
        if c != Ordering::Equal {
            return apply_dir(*dir, c);
        }
    }
    Ordering::Equal
}

pub(crate) fn cmp_cursor(
    source: &Source,
    order: &[(FieldPath, Direction)],
    doc: &Document,
    values: &[Value],
) -> Ordering {
    for ((f, dir), cv) in order.iter().zip(values) {
        let cv = if is_name(f) {
            resolve_name(source, cv)
        } else {
            cv.clone()
        };
        let c = ref_cmp(&get(doc, f).expect("ordered"), &cv);
        if c != Ordering::Equal {
            return apply_dir(*dir, c);
        }
    }
    Ordering::Equal
}

/// The documents of the query's source that pass its filter and have every ordered field,
/// sorted; cursors, offset and limits not applied.
pub(crate) fn model_candidates(docs: &[Document], q: &Query) -> Vec<Document> {
    let order = model_order(q);
    let mut out: Vec<Document> = docs
        .iter()
        .filter(|d| in_scope(&q.source, &d.name))
        .filter(|d| {
            q.filter
                .as_ref()
                .is_none_or(|f| filter_matches(&q.source, d, f))
        })
        .filter(|d| order.iter().all(|(f, _)| get(d, f).is_some()))
        .cloned()
        .collect();
    out.sort_by(|a, b| cmp_docs(&order, a, b));
    out
}

/// The query's result documents before projection.
pub(crate) fn model_unprojected(docs: &[Document], q: &Query) -> Vec<Document> {
    let order = model_order(q);
    let mut out: Vec<Document> = model_candidates(docs, q)
        .into_iter()
        .filter(|d| {
            q.start.as_ref().is_none_or(|c| {
                let o = cmp_cursor(&q.source, &order, d, &c.values);
                o == Ordering::Greater || (o == Ordering::Equal && c.inclusive)
            }) && q.end.as_ref().is_none_or(|c| {
                let o = cmp_cursor(&q.source, &order, d, &c.values);
                o == Ordering::Less || (o == Ordering::Equal && c.inclusive)
            })
        })
        .collect();
    let offset = q.offset as usize;
    let limit = q.limit.map_or(usize::MAX, |l| l as usize);
    if q.limit_type == LimitType::Last && q.limit.is_some() {
        out.reverse();
        out = out.into_iter().skip(offset).take(limit).collect();
        out.reverse();
    } else {
        out = out.into_iter().skip(offset).take(limit).collect();
    }
    out
}

pub(crate) fn project(fields: &Map, paths: &[FieldPath]) -> Map {
    let mut out = Map::new();
    for p in paths.iter().filter(|p| !is_name(p)) {
        let probe = Document::new(DocumentName::parse("p/p").expect("valid"), fields.clone());
        let Some(v) = get(&probe, p) else { continue };
        let mut map = &mut out;
        let (last, parents) = p.segments().split_last().expect("non-empty");
        for s in parents {
            let entry = map
                .entry(s.clone())
                .or_insert_with(|| Value::Map(Map::new()));
            map = match entry {
                Value::Map(m) => m,
                _ => unreachable!("a parent of a present field is a map"),
            };
        }
        map.insert(last.clone(), v);
    }
    out
}

/// The query's result as the model sees it.
pub(crate) fn model_run(docs: &[Document], q: &Query) -> Vec<Document> {
    let mut out = model_unprojected(docs, q);
    if let Some(paths) = &q.projection {
        for d in &mut out {
            d.fields = project(&d.fields, paths).into();
        }
    }
    out
}

pub(crate) fn model_aggregate(docs: &[Document], q: &Query, aggs: &[Aggregation]) -> Vec<Value> {
    let result = model_unprojected(docs, q);
    aggs.iter()
        .map(|a| match a {
            Aggregation::Count => Value::Integer(result.len() as i64),
            Aggregation::Sum(f) | Aggregation::Average(f) => {
                let nums: Vec<Value> = result
                    .iter()
                    .filter_map(|d| get(d, f))
                    .filter(|v| matches!(v, Value::Integer(_) | Value::Double(_)))
                    .collect();
                let as_f64 = |v: &Value| match v {
                    Value::Integer(i) => *i as f64,
                    Value::Double(d) => *d,
                    _ => unreachable!(),
                };
                let float_sum = nums.iter().fold(0.0, |s, v| s + as_f64(v));
                match a {
                    Aggregation::Sum(_) => {
                        let ints: Option<i64> = nums.iter().try_fold(0i64, |s, v| match v {
                            Value::Integer(i) => s.checked_add(*i),
                            _ => None,
                        });
                        match ints {
                            Some(i) => Value::Integer(i),
                            None => Value::Double(float_sum),
                        }
                    }
                    _ if nums.is_empty() => Value::Null,
                    _ => Value::Double(float_sum / nums.len() as f64),
                }
            }
        })
        .collect()
}

/// The disjunctive normal form of a filter.
pub(crate) fn model_dnf(f: &Filter) -> Vec<Vec<FieldFilter>> {
    match f {
        Filter::Field(ff) => vec![vec![ff.clone()]],
        Filter::Or(parts) => parts.iter().flat_map(model_dnf).collect(),
        Filter::And(parts) => parts.iter().fold(vec![Vec::new()], |acc, p| {
            let branches = model_dnf(p);
            acc.iter()
                .flat_map(|a| {
                    branches.iter().map(move |b| {
                        let mut c = a.clone();
                        c.extend(b.iter().cloned());
                        c
                    })
                })
                .collect()
        }),
    }
}

/// The number of disjunctions Firestore counts for filter `f`: its disjunctive normal form
/// with each `in` and `array-contains-any` value a disjunction of its own (so they multiply
/// across an AND).
pub(crate) fn model_dnf_size(f: &Filter) -> usize {
    match f {
        Filter::Field(ff) => match (&ff.op, &ff.value) {
            (Operator::In | Operator::ArrayContainsAny, Value::Array(a)) => a.len().max(1),
            _ => 1,
        },
        Filter::Or(parts) => parts
            .iter()
            .map(model_dnf_size)
            .fold(0usize, usize::saturating_add),
        Filter::And(parts) => parts
            .iter()
            .map(model_dnf_size)
            .fold(1usize, usize::saturating_mul),
    }
}

pub(crate) fn has_array(v: &Value) -> bool {
    match v {
        Value::Array(_) => true,
        Value::Map(m) => m.values().any(has_array),
        _ => false,
    }
}

/// Whether Firestore accepts a query of the shapes this file generates: its operator rules
/// (across the whole filter for `!=` / `not-in`, per disjunction for array membership), list
/// operands, and cursors no longer than the explicit orderBys.
pub(crate) fn firestore_accepts(q: &Query) -> bool {
    if q.limit.is_some_and(|l| l <= 0) {
        return false;
    }
    if q.limit_type == LimitType::Last && q.order_by.is_empty() {
        return false;
    }
    for c in q.start.iter().chain(&q.end) {
        if !c.from_document && c.values.len() > q.order_by.len() {
            return false;
        }
    }
    // The backend refuses an order by clause with duplicate fields.
    for (i, o) in q.order_by.iter().enumerate() {
        if q.order_by[..i].iter().any(|p| p.field == o.field) {
            return false;
        }
    }
    let Some(f) = &q.filter else { return true };
    let mut all = Vec::new();
    field_filters(f, &mut all);
    let count = |op: Operator| all.iter().filter(|ff| ff.op == op).count();
    let (ne, not_in) = (count(Operator::NotEqual), count(Operator::NotIn));
    if ne + not_in > 1 {
        return false;
    }
    if not_in > 0 && count(Operator::In) + count(Operator::ArrayContainsAny) > 0 {
        return false;
    }
    for ff in &all {
        let ok = match ff.op {
            // The SDK parses these lists as "array arguments": arrays nest freely in them.
            Operator::In | Operator::NotIn => {
                matches!(&ff.value, Value::Array(a) if !a.is_empty() && a.len() <= 30)
            }
            Operator::ArrayContainsAny => {
                matches!(&ff.value, Value::Array(a) if !a.is_empty() && a.len() <= 30
                    && !a.iter().any(has_array))
            }
            _ => match &ff.value {
                Value::Array(a) => !a.iter().any(has_array),
                other => !has_array(other),
            },
        };
        let name_ok = !is_name(&ff.field)
            || !matches!(ff.op, Operator::ArrayContains | Operator::ArrayContainsAny);
        if !ok || !name_ok {
            return false;
        }
    }
    let dnf = model_dnf(f);
    model_dnf_size(f) <= 30
        && dnf.len() <= 30
        && dnf.iter().all(|conj| {
            conj.iter()
                .filter(|ff| matches!(ff.op, Operator::ArrayContains | Operator::ArrayContainsAny))
                .count()
                <= 1
        })
}
