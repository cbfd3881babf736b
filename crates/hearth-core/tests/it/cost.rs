//! The cost of a request is bounded before the work is done: the query cost model (counted
//! from the filter tree, never by expanding it) against a naive expansion, Firestore's query
//! limits, linear array transforms and index de-duplication against naive references, and a
//! one-time query that stops reading once its result cannot fit in a reply.

use hearth_core::document::Document;
use hearth_core::error::ErrorCode;
use hearth_core::index::config::IndexFile;
use hearth_core::index::def::IndexCatalog;
use hearth_core::index::keys::distinct_in_order;
use hearth_core::kv::{block_on_ready, MemStore};
use hearth_core::mutation::{ApplyContext, FieldTransform, Mutation, SetMerge};
use hearth_core::path::{CollectionPath, DocumentName, FieldPath};
use hearth_core::protocol::codec::encode_server;
use hearth_core::protocol::ServerMessage;
use hearth_core::query::execute::{run_aggregation, run_query_within, wire_size};
use hearth_core::query::model::{Aggregation, FieldFilter, Filter, Operator, Query};
use hearth_core::query::normalize::{dnf, dnf_size, max_conjunction_len, MAX_DISJUNCTIONS};
use hearth_core::query::validate::{validate, QueryError};
use hearth_core::value::{Map, Timestamp, Value};
use proptest::prelude::*;

fn items() -> Query {
    Query::collection(CollectionPath::parse("items").unwrap())
}

fn ints(range: std::ops::Range<i64>) -> Value {
    Value::Array(range.map(Value::Integer).collect())
}

fn refusal(q: &Query) -> QueryError {
    validate(q).expect_err("the query is refused")
}

/// The query that used to make the planner build 30^6 branches and abort the process.
#[test]
fn six_in_filters_are_refused_by_counting() {
    let mut q = items();
    for f in ["a", "b", "c", "d", "e", "f"] {
        q = q.where_(f, Operator::In, ints(0..30));
    }
    let e = refusal(&q);
    assert_eq!(e.code(), ErrorCode::InvalidArgument);
    let msg = e.to_string();
    assert!(msg.contains("729000000 disjunctions"), "{msg}");
    assert!(msg.contains("limit of 30"), "{msg}");
    // And the planner, on its own, refuses it the same way without expanding it.
    let catalog = IndexCatalog::from_file(&IndexFile::default());
    let e = hearth_core::query::plan::plan(&catalog, &q).expect_err("too many branches");
    assert_eq!(e.code(), ErrorCode::InvalidArgument);
}

/// Firestore counts `in` and `array-contains-any` values toward the 30 disjunctions,
/// products included.
#[test]
fn disjunction_limit_counts_list_values() {
    let ok = items()
        .where_("a", Operator::In, ints(0..6))
        .where_("b", Operator::In, ints(0..5));
    validate(&ok).unwrap();
    validate(&items().where_("a", Operator::In, ints(0..30))).unwrap();
    let over = items().where_("a", Operator::In, ints(0..6)).where_(
        "b",
        Operator::ArrayContainsAny,
        ints(0..6),
    );
    assert!(refusal(&over).to_string().contains("36 disjunctions"));
    let or31 = items().filter(Filter::Or(
        (0..31)
            .map(|i| Filter::field("a", Operator::Equal, i))
            .collect(),
    ));
    assert_eq!(refusal(&or31).code(), ErrorCode::InvalidArgument);
    let or_in = items().filter(Filter::Or(vec![
        Filter::field("a", Operator::In, ints(0..20)),
        Filter::field("b", Operator::In, ints(0..11)),
    ]));
    assert!(refusal(&or_in).to_string().contains("31 disjunctions"));
    // Saturating: a product past u64 is refused, not wrapped around into a small count.
    let mut huge = items();
    for i in 0..20 {
        huge = huge.where_(&format!("f{i}"), Operator::In, ints(0..30));
    }
    assert_eq!(dnf_size(huge.filter.as_ref()), u64::MAX);
    assert_eq!(refusal(&huge).code(), ErrorCode::InvalidArgument);
}

#[test]
fn firestore_query_limits() {
    // not-in: at most 10 values.
    validate(&items().where_("a", Operator::NotIn, ints(0..10))).unwrap();
    let e = refusal(&items().where_("a", Operator::NotIn, ints(0..11)));
    assert!(e.to_string().contains("maximum of 10"), "{e}");
    // in: at most 30 values.
    let e = refusal(&items().where_("a", Operator::In, ints(0..31)));
    assert!(e.to_string().contains("maximum of 30"), "{e}");
    // At most 100 filters, orderBys and parent path in one disjunction.
    let mut q = items();
    for i in 0..100 {
        q = q.where_(&format!("f{i}"), Operator::Equal, i);
    }
    validate(&q).unwrap();
    let e = refusal(&q.clone().where_("g", Operator::Equal, 1i64));
    assert!(e.to_string().contains("limit of 100"), "{e}");
    let e = refusal(&q.order_by("f0", hearth_core::encoding::key::Direction::Ascending));
    assert!(e.to_string().contains("limit of 100"), "{e}");
    // A subcollection's parent path counts one.
    let mut sub = Query::collection(CollectionPath::parse("a/b/items").unwrap());
    for i in 0..100 {
        sub = sub.where_(&format!("f{i}"), Operator::Equal, i);
    }
    assert!(refusal(&sub).to_string().contains("101 filters"));
    // 30 disjunctions of 50 filters each: 1,500 filters, but at most 50 per disjunction.
    let wide = items().filter(Filter::Or(
        (0..30)
            .map(|d| {
                Filter::And(
                    (0..50)
                        .map(|i| Filter::field(&format!("f{i}"), Operator::Equal, d))
                        .collect(),
                )
            })
            .collect(),
    ));
    validate(&wide).unwrap();
    assert_eq!(max_conjunction_len(wide.filter.as_ref()), 50);
}

#[test]
fn at_most_five_aggregations() {
    let store = MemStore::new();
    let catalog = IndexCatalog::from_file(&IndexFile::default());
    let five = vec![Aggregation::Count; 5];
    let got = block_on_ready(run_aggregation(&store, &catalog, &items(), &five)).unwrap();
    assert_eq!(got.len(), 5);
    let six = vec![Aggregation::Count; 6];
    let e = block_on_ready(run_aggregation(&store, &catalog, &items(), &six)).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument);
    assert!(e.to_string().contains("limit of 5"), "{e}");
}

// ---- The cost model against a naive expansion ----

/// The naive DNF: every conjunction built, `in` / `array-contains-any` values expanded when
/// `lists` is set (one filter per value).
fn naive(f: &Filter, lists: bool) -> Vec<Vec<FieldFilter>> {
    match f {
        Filter::Field(ff) => match (&ff.value, ff.op) {
            (Value::Array(items), Operator::In | Operator::ArrayContainsAny) if lists => items
                .iter()
                .map(|v| {
                    vec![FieldFilter {
                        value: v.clone(),
                        ..ff.clone()
                    }]
                })
                .collect(),
            _ => vec![vec![ff.clone()]],
        },
        Filter::Or(parts) if parts.is_empty() => vec![Vec::new()],
        Filter::Or(parts) => parts.iter().flat_map(|p| naive(p, lists)).collect(),
        Filter::And(parts) => {
            let mut acc = vec![Vec::new()];
            for p in parts {
                let branches = naive(p, lists);
                let mut next = Vec::new();
                for a in &acc {
                    for b in &branches {
                        let mut c: Vec<FieldFilter> = a.clone();
                        c.extend(b.iter().cloned());
                        next.push(c);
                    }
                }
                acc = next;
            }
            acc
        }
    }
}

fn arb_small_filter() -> impl Strategy<Value = Filter> {
    let leaf = (
        prop::sample::select(vec!["a", "b", "c"]),
        prop::sample::select(vec![
            Operator::Equal,
            Operator::LessThan,
            Operator::In,
            Operator::ArrayContainsAny,
            Operator::ArrayContains,
        ]),
        1i64..4,
    )
        .prop_map(|(f, op, n)| {
            let value = if op.takes_list() {
                ints(0..n)
            } else {
                Value::Integer(n)
            };
            Filter::field(f, op, value)
        });
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Filter::And),
            prop::collection::vec(inner, 0..4).prop_map(Filter::Or),
        ]
    })
}

proptest! {
    /// The arithmetic count is the size of the actual expansion, and `dnf` builds exactly the
    /// naive (unexpanded) disjunction in the same order.
    #[test]
    fn dnf_size_counts_the_expansion(f in arb_small_filter()) {
        let expanded = naive(&f, true);
        prop_assert_eq!(dnf_size(Some(&f)), expanded.len() as u64);
        let max_len = naive(&f, false).iter().map(Vec::len).max().unwrap_or(0);
        prop_assert_eq!(max_conjunction_len(Some(&f)), max_len as u64);
        let plain = naive(&f, false);
        if plain.len() <= MAX_DISJUNCTIONS {
            prop_assert_eq!(dnf(Some(&f), MAX_DISJUNCTIONS), Some(plain));
        } else {
            prop_assert_eq!(dnf(Some(&f), MAX_DISJUNCTIONS), None);
        }
    }
}

// ---- Array transforms and index de-duplication against naive references ----

/// Values where strict and order equality disagree: 1 vs 1.0, 0 vs -0.0, NaNs, nulls, and
/// maps holding them.
fn arb_tricky() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        (0i64..3).prop_map(Value::Integer),
        prop::sample::select(vec![
            0.0,
            -0.0,
            1.0,
            2.0,
            f64::NAN,
            -f64::NAN,
            f64::INFINITY
        ])
        .prop_map(Value::Double),
        prop::sample::select(vec!["", "a", "b"]).prop_map(Value::from),
        (0i64..2, prop::sample::select(vec![0.0, -0.0, f64::NAN])).prop_map(|(i, d)| {
            Value::Map(
                [
                    ("i".to_owned(), Value::Integer(i)),
                    ("d".to_owned(), Value::Double(d)),
                ]
                .into_iter()
                .collect(),
            )
        }),
    ]
}

fn ctx() -> ApplyContext {
    ApplyContext {
        commit_version: 1,
        commit_time: Timestamp::new(0, 0).unwrap(),
    }
}

fn naive_union(base: &[Value], elements: &[Value]) -> Vec<Value> {
    let mut out = base.to_vec();
    for e in elements {
        if !out.contains(e) {
            out.push(e.clone());
        }
    }
    out
}

fn naive_remove(base: &[Value], elements: &[Value]) -> Vec<Value> {
    base.iter()
        .filter(|e| !elements.contains(e))
        .cloned()
        .collect()
}

/// Compares element by element with strict equality (`Value`'s `PartialEq`: NaN == NaN).
fn same(a: &Value, b: &[Value]) -> bool {
    matches!(a, Value::Array(x) if x.as_slice() == b)
}

proptest! {
    #[test]
    fn array_transforms_equal_the_naive_reference(
        base in prop::collection::vec(arb_tricky(), 0..12),
        elements in prop::collection::vec(arb_tricky(), 0..12),
    ) {
        let current = Value::Array(base.clone());
        let union = FieldTransform::ArrayUnion(elements.clone()).apply(Some(&current), &ctx());
        prop_assert!(same(&union, &naive_union(&base, &elements)), "{:?}", union);
        let removed = FieldTransform::ArrayRemove(elements.clone()).apply(Some(&current), &ctx());
        prop_assert!(same(&removed, &naive_remove(&base, &elements)), "{:?}", removed);
        // On a missing field, the union is the operand without repeats.
        let fresh = FieldTransform::ArrayUnion(elements.clone()).apply(None, &ctx());
        prop_assert!(same(&fresh, &naive_union(&[], &elements)));
    }

    #[test]
    fn index_distinct_equals_naive_order_dedup(items in prop::collection::vec(arb_tricky(), 0..16)) {
        let mut want: Vec<Value> = Vec::new();
        for item in &items {
            if !want.iter().any(|d| d.eq_order(item)) {
                want.push(item.clone());
            }
        }
        let got = distinct_in_order(items);
        prop_assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            prop_assert!(g == w, "{:?} vs {:?}", g, w);
        }
    }
}

#[test]
fn array_union_keeps_order_and_strict_equality() {
    let base = Value::Array(vec![
        Value::Integer(1),
        Value::Double(-0.0),
        Value::Integer(1),
    ]);
    let got = FieldTransform::ArrayUnion(vec![
        Value::Double(1.0),
        Value::Integer(1),
        Value::Double(0.0),
        Value::Double(f64::NAN),
        Value::Double(f64::NAN),
        Value::Double(1.0),
    ])
    .apply(Some(&base), &ctx());
    let want = [
        Value::Integer(1),
        Value::Double(-0.0),
        Value::Integer(1),
        Value::Double(1.0),
        Value::Double(0.0),
        Value::Double(f64::NAN),
    ];
    assert!(same(&got, &want), "{got:?}");
}

/// A 20,000-element union onto a 20,000-element array, and its removal: the naive version
/// made 4 * 10^8 comparisons; the result is checked, not timed.
#[test]
fn large_array_transforms() {
    let base: Vec<Value> = (0..20_000).map(Value::Integer).collect();
    let elements: Vec<Value> = (10_000..30_000)
        .map(|i| Value::Double(i as f64))
        .chain((10_000..30_000).map(Value::Integer))
        .collect();
    let current = Value::Array(base);
    let Value::Array(union) =
        FieldTransform::ArrayUnion(elements.clone()).apply(Some(&current), &ctx())
    else {
        panic!("a union is an array")
    };
    // Every double is new (strict equality), and the integers 20,000..30,000.
    assert_eq!(union.len(), 20_000 + 20_000 + 10_000);
    let Value::Array(removed) =
        FieldTransform::ArrayRemove(elements).apply(Some(&Value::Array(union)), &ctx())
    else {
        panic!("a removal is an array")
    };
    assert_eq!(removed.len(), 10_000);
}

// ---- A query's result bounded before it is collected ----

fn name(s: &str) -> DocumentName {
    DocumentName::parse(s).unwrap()
}

#[test]
fn wire_size_is_the_reply_encoding() {
    let docs: Vec<Document> = (0..5)
        .map(|i| {
            let mut d = Document::new(
                name(&format!("items/d{i}")),
                [("v".to_owned(), Value::from("x".repeat(i * 100)))]
                    .into_iter()
                    .collect(),
            );
            d.create_version = 3;
            d.update_version = 300 * i as u64;
            d
        })
        .collect();
    let frame = |documents: Vec<Document>| {
        encode_server(&ServerMessage::QueryResult {
            request_id: 7,
            version: 9,
            documents,
        })
        .len()
    };
    let empty = frame(Vec::new());
    let sum: usize = docs.iter().map(wire_size).sum();
    assert_eq!(frame(docs), empty + sum);
}

#[test]
fn a_result_over_the_budget_is_refused_while_reading() {
    let catalog = IndexCatalog::from_file(&IndexFile::default());
    let mut store = MemStore::new();
    let docs: Vec<Document> = (0..50)
        .map(|i| {
            Document::new(
                name(&format!("items/d{i:02}")),
                [("v".to_owned(), Value::from("y".repeat(1000)))]
                    .into_iter()
                    .collect(),
            )
        })
        .collect();
    for d in &docs {
        store.write_document(&catalog, &d.name, Some(d)).unwrap();
    }
    let each = wire_size(&docs[0]);
    let all = block_on_ready(run_query_within(&store, &catalog, &items(), 50 * each)).unwrap();
    assert_eq!(all.len(), 50);
    let e =
        block_on_ready(run_query_within(&store, &catalog, &items(), 50 * each - 1)).unwrap_err();
    assert_eq!(e.code(), ErrorCode::ResourceExhausted);
    assert!(
        e.to_string()
            .contains(&format!("over {} bytes", 50 * each - 1)),
        "{e}"
    );
    // A limit or a projection brings it under the budget.
    let limited = items().limit(10);
    let got = block_on_ready(run_query_within(&store, &catalog, &limited, 10 * each)).unwrap();
    assert_eq!(got.len(), 10);
    let keys_only = items().select(&[]);
    block_on_ready(run_query_within(
        &store,
        &catalog,
        &keys_only,
        50 * each / 10,
    ))
    .unwrap();
}

// ---- Update and merge-field path checks against a pairwise reference ----

fn arb_path() -> impl Strategy<Value = FieldPath> {
    prop::collection::vec(prop::sample::select(vec!["a", "b"]), 1..4)
        .prop_map(|s| FieldPath::parse(&s.join(".")).unwrap())
}

/// A leaf, or a small map over the same names (so a transform may land inside it).
fn arb_update_value() -> impl Strategy<Value = Option<Value>> {
    let leaf = prop_oneof![
        Just(Value::Integer(1)),
        Just(Value::Map(Default::default()))
    ];
    let value = leaf.prop_recursive(2, 6, 2, |inner| {
        prop::collection::btree_map(prop::sample::select(vec!["a", "b"]), inner, 0..3)
            .prop_map(|m| Value::Map(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()))
    });
    prop_oneof![Just(None), value.prop_map(Some)]
}

fn naive_conflicts_in_value(value: &Value, rest: &[String]) -> bool {
    match (value, rest.split_first()) {
        (_, None) => true,
        (Value::Map(inner), Some((first, rest))) => inner
            .get(first)
            .is_some_and(|v| naive_conflicts_in_value(v, rest)),
        _ => true,
    }
}

/// Whether an update is valid, by comparing every pair (the rules of
/// `mutation::validate` for updates, written out naively).
fn naive_update_ok(fields: &[(FieldPath, Option<Value>)], transforms: &[FieldPath]) -> bool {
    let overlaps = |paths: &[&FieldPath]| {
        paths.iter().enumerate().any(|(i, p)| {
            paths[i + 1..]
                .iter()
                .any(|q| p.starts_with(q) || q.starts_with(p))
        })
    };
    let written: Vec<&FieldPath> = fields.iter().map(|(p, _)| p).collect();
    let transformed: Vec<&FieldPath> = transforms.iter().collect();
    if overlaps(&written) || overlaps(&transformed) {
        return false;
    }
    !transforms.iter().any(|t| {
        fields.iter().any(|(path, value)| {
            if t.starts_with(path) {
                let rest = &t.segments()[path.segments().len()..];
                value
                    .as_ref()
                    .is_none_or(|v| naive_conflicts_in_value(v, rest))
            } else {
                path.starts_with(t)
            }
        })
    })
}

/// Whether a set with merge fields is valid as far as the listed paths go: each listed path
/// is in the data or has a sentinel under it, and each sentinel is under a listed path.
fn naive_merge_fields_ok(data: &Map, listed: &[FieldPath], sentinels: &[FieldPath]) -> bool {
    listed.iter().all(|l| {
        hearth_core::document::get_path(data, l.segments()).is_some()
            || sentinels.iter().any(|s| s.starts_with(l))
    }) && sentinels
        .iter()
        .all(|s| listed.iter().any(|l| s.starts_with(l)))
}

/// Sets `segments` in `map` to `value`, creating (or replacing non-map values with) maps on
/// the way.
fn put(map: &mut Map, segments: &[String], value: Value) {
    let (first, rest) = segments.split_first().unwrap();
    if rest.is_empty() {
        map.insert(first.clone(), value);
        return;
    }
    let entry = map
        .entry(first.clone())
        .or_insert_with(|| Value::Map(Map::new()));
    if !matches!(entry, Value::Map(_)) {
        *entry = Value::Map(Map::new());
    }
    let Value::Map(inner) = entry else {
        unreachable!("made a map above")
    };
    put(inner, rest, value);
}

proptest! {
    #[test]
    fn update_path_checks_equal_the_pairwise_reference(
        fields in prop::collection::vec((arb_path(), arb_update_value()), 0..5),
        transforms in prop::collection::vec(arb_path(), 0..4),
    ) {
        let mut m = Mutation::update(name("items/u"), fields.clone());
        for t in &transforms {
            m = m.with_transform(t.clone(), FieldTransform::Increment(Value::Integer(1)));
        }
        prop_assert_eq!(m.validate().is_ok(), naive_update_ok(&fields, &transforms), "{:?}", m);
    }

    #[test]
    fn merge_field_checks_equal_the_pairwise_reference(
        listed in prop::collection::vec(arb_path(), 1..4),
        transforms in prop::collection::vec(arb_path(), 0..3),
        present in prop::collection::vec(arb_path(), 0..3),
    ) {
        // Data holds leaves at `present` paths that neither a transform nor each other
        // overlaps, so only the listed-path rules can refuse the write.
        let mut data = Map::new();
        let mut kept: Vec<FieldPath> = Vec::new();
        for p in present {
            let clash = kept.iter().chain(&transforms).any(|q| p.starts_with(q) || q.starts_with(&p));
            if !clash {
                put(&mut data, p.segments(), Value::Integer(1));
                kept.push(p);
            }
        }
        let transforms_ok = transforms.iter().enumerate().all(|(i, t)| {
            transforms[i + 1..].iter().all(|u| !t.starts_with(u) && !u.starts_with(t))
        });
        prop_assume!(transforms_ok);
        let mut m = Mutation::set_merge(
            name("items/m"),
            data.clone(),
            SetMerge::MergeFields(listed.clone()),
        );
        for t in &transforms {
            m = m.with_transform(t.clone(), FieldTransform::Increment(Value::Integer(1)));
        }
        prop_assert_eq!(
            m.validate().is_ok(),
            naive_merge_fields_ok(&data, &listed, &transforms),
            "{:?}",
            m
        );
    }
}
