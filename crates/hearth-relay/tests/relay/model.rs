//! The naive model the relay is compared with: documents kept in a map, queries answered by
//! the core's `Matcher` (the reference semantics, itself checked by the core's property
//! tests) over every document, sorted, cut and projected by hand.

use std::collections::BTreeMap;

use hearth_client::Client;
use hearth_core::document::Document;
use hearth_core::mutation::Mutation;
use hearth_core::path::DocumentName;
use hearth_core::query::execute::project;
use hearth_core::query::matcher::Matcher;
use hearth_core::query::model::{Aggregation, LimitType, Query};
use hearth_core::query::validate::validate;
use hearth_core::value::{Map, Value};

use crate::harness::*;

/// Documents by name: what the model believes is stored.
pub type Model = BTreeMap<DocumentName, Map>;

/// The query's result over `docs` (names and fields), by brute force.
pub fn reference(q: &Query, docs: &Model) -> Vec<(DocumentName, Map)> {
    let vq = validate(q).expect("the reference only runs valid queries");
    let m = Matcher::new(vq.clone());
    let mut out: Vec<Document> = docs
        .iter()
        .map(|(n, f)| Document::new(n.clone(), f.clone()))
        .filter(|d| m.matches(d))
        .collect();
    out.sort_by(|a, b| m.compare(a, b));
    let last = vq.limit_type == LimitType::Last;
    if last {
        out.reverse();
    }
    let limit = vq.limit.map_or(usize::MAX, |l| l as usize);
    let mut out: Vec<Document> = out
        .into_iter()
        .skip(vq.offset as usize)
        .take(limit)
        .collect();
    if last {
        out.reverse();
    }
    if let Some(p) = &vq.projection {
        for d in &mut out {
            d.fields = project(&d.fields, p).into();
        }
    }
    out.into_iter()
        .map(|d| (d.name, (*d.fields).clone()))
        .collect()
}

/// Aggregations over the query's result, by hand: `count` an integer, `sum` an integer
/// while every summand is one (and it fits), `average` a double or null.
pub fn reference_aggregate(q: &Query, aggs: &[Aggregation], docs: &Model) -> Vec<Value> {
    let mut unprojected = q.clone();
    unprojected.projection = None;
    let result = reference(&unprojected, docs);
    aggs.iter()
        .map(|a| match a {
            Aggregation::Count => Value::Integer(result.len() as i64),
            Aggregation::Sum(f) | Aggregation::Average(f) => {
                let mut int: Option<i64> = Some(0);
                let mut double = 0.0;
                let mut n = 0u64;
                for (name, fields) in &result {
                    let d = Document::new(name.clone(), fields.clone());
                    match d.field(f).as_deref() {
                        Some(Value::Integer(i)) => {
                            n += 1;
                            double += *i as f64;
                            int = int.and_then(|s| s.checked_add(*i));
                        }
                        Some(Value::Double(x)) => {
                            n += 1;
                            double += x;
                            int = None;
                        }
                        _ => {}
                    }
                }
                match a {
                    Aggregation::Sum(_) => int.map_or(Value::Double(double), Value::Integer),
                    _ if n == 0 => Value::Null,
                    _ => Value::Double(double / n as f64),
                }
            }
        })
        .collect()
}

/// Values equal, doubles within a rounding error (summation order may differ).
pub fn values_match(a: &[Value], b: &[Value]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| match (x, y) {
            (Value::Double(x), Value::Double(y)) => {
                x == y || (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0)
            }
            _ => x == y,
        })
}

/// Names and fields of documents the relay returned.
pub fn strip(docs: &[Document]) -> Vec<(DocumentName, Map)> {
    docs.iter()
        .map(|d| (d.name.clone(), (*d.fields).clone()))
        .collect()
}

/// Test documents: every query feature has something to bite on. Fields: `a` int 0..4
/// (sometimes missing), `b` x/y/z, `n` int or double (sometimes missing), `tags` array,
/// `flag` bool, `nested.k` int, `mixed` of several types (cross-type order).
pub fn random_fields(rng: &mut Rng) -> Map {
    let mut m = Map::new();
    if !rng.chance(10) {
        m.insert("a".into(), int(rng.below(5) as i64));
    }
    m.insert("b".into(), s(rng.pick(&["x", "y", "z"])));
    if !rng.chance(10) {
        let n = rng.below(100) as i64 - 50;
        let v = if rng.chance(30) {
            Value::Double(n as f64 + 0.5)
        } else {
            int(n)
        };
        m.insert("n".into(), v);
    }
    let tags: Vec<Value> = ["t0", "t1", "t2", "t3", "t4"]
        .iter()
        .filter(|_| rng.chance(30))
        .map(|t| s(t))
        .collect();
    m.insert("tags".into(), Value::Array(tags));
    m.insert("flag".into(), Value::Boolean(rng.chance(50)));
    m.insert(
        "nested".into(),
        Value::Map(map([("k", int(rng.below(4) as i64))])),
    );
    let mixed = match rng.below(5) {
        0 => Value::Null,
        1 => int(rng.below(10) as i64),
        2 => s(rng.pick(&["p", "q"])),
        3 => Value::Boolean(rng.chance(50)),
        _ => Value::Double(rng.below(10) as f64 / 3.0),
    };
    m.insert("mixed".into(), mixed);
    m
}

/// `items/i00..`, plus `groups/gK/items/jN` for collection-group queries.
pub fn dataset(rng: &mut Rng, top: usize, nested: usize) -> Model {
    let mut out = Model::new();
    for i in 0..top {
        out.insert(name(&format!("items/i{i:02}")), random_fields(rng));
    }
    for i in 0..nested {
        out.insert(
            name(&format!("groups/g{}/items/j{i:02}", i % 3)),
            random_fields(rng),
        );
    }
    out
}

/// Writes every document of `model` with `set`, in batches.
pub async fn load(client: &Client, model: &Model) {
    let all: Vec<Mutation> = model
        .iter()
        .map(|(n, f)| Mutation::set(n.clone(), f.clone()))
        .collect();
    for chunk in all.chunks(25) {
        within(client.write(chunk.to_vec()))
            .await
            .expect("loading the dataset");
    }
}
