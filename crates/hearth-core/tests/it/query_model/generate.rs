//! Generators: a collision-heavy value pool, documents in look-alike collections, and
//! queries whose `documentId()` operands suit their source.

use hearth_core::document::Document;
use hearth_core::encoding::key::Direction::{self, Ascending, Descending};
use hearth_core::index::config::CompositeIndexSpec;
use hearth_core::path::{CollectionPath, DocumentName, FieldPath};
use hearth_core::query::model::{
    Cursor, FieldFilter, Filter, LimitType, Operator, OrderBy, Query, Source,
};
use hearth_core::value::{GeoPoint, Map, Timestamp, Value};
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use proptest::sample::select;

use super::engine::composite_pool;
use super::reference::*;

pub(crate) fn ts(s: i64, n: i64) -> Value {
    Value::Timestamp(Timestamp::new(s, n).expect("in range"))
}

pub(crate) fn name(path: &str) -> DocumentName {
    DocumentName::parse(path).expect("valid document name")
}

pub(crate) fn field(path: &str) -> FieldPath {
    FieldPath::parse(path).expect("valid field path")
}

pub(crate) fn pool() -> Vec<Value> {
    vec![
        Value::Null,
        Value::Boolean(false),
        Value::Boolean(true),
        Value::Integer(0),
        Value::Integer(1),
        Value::Integer(-1),
        Value::Integer(2),
        Value::Double(0.0),
        Value::Double(-0.0),
        Value::Double(1.0),
        Value::Double(1.5),
        Value::Double(f64::NAN),
        Value::Double(f64::NEG_INFINITY),
        Value::Double(f64::INFINITY),
        Value::Integer(i64::MAX),
        Value::Integer((1 << 53) + 1),
        Value::Double(9_007_199_254_740_992.0),
        Value::Double(9_223_372_036_854_775_808.0),
        Value::from(""),
        Value::from("a"),
        Value::from("b"),
        Value::from("\u{FFFD}"),
        Value::from("😀"),
        ts(0, 0),
        ts(0, 1000),
        ts(-1, 999_999_000),
        Value::Bytes(vec![]),
        Value::Bytes(vec![0]),
        Value::Reference(name("items/a")),
        Value::GeoPoint(GeoPoint::new(0.0, 0.0).expect("in range")),
        Value::GeoPoint(GeoPoint::new(1.0, -1.0).expect("in range")),
    ]
}

/// Numbers, nulls and a few other values: the part of the pool that collides most.
pub(crate) fn hot_pool() -> Vec<Value> {
    vec![
        Value::Null,
        Value::Integer(0),
        Value::Integer(1),
        Value::Double(0.0),
        Value::Double(-0.0),
        Value::Double(1.0),
        Value::Double(f64::NAN),
        Value::from("a"),
    ]
}

pub(crate) fn arb_scalar() -> impl Strategy<Value = Value> {
    prop_oneof![3 => select(hot_pool()), 1 => select(pool())]
}

pub(crate) fn arb_array() -> impl Strategy<Value = Value> {
    vec(
        prop_oneof![4 => select(hot_pool()), 1 => select(pool())],
        0..=3,
    )
    .prop_map(Value::Array)
}

pub(crate) fn arb_small_map() -> impl Strategy<Value = Value> {
    btree_map(
        select(vec!["x".to_owned(), "y".to_owned()]),
        arb_scalar(),
        0..=2,
    )
    .prop_map(Value::Map)
}

pub(crate) fn arb_field_value() -> impl Strategy<Value = Value> {
    prop_oneof![6 => arb_scalar(), 2 => arb_array(), 1 => arb_small_map()]
}

/// Every document name the generators use: the `items` collection, a sub-collection also
/// named `items`, an `items` collection under a parent that does not exist, and look-alikes.
pub(crate) fn universe() -> Vec<DocumentName> {
    [
        "items/a",
        "items/b",
        "items/c",
        "items/d",
        "items/e",
        "items/f",
        "items/g",
        "items/h",
        "items/i",
        "items/j",
        "items/k",
        "items/l",
        "items/a/items/a",
        "items/a/items/b",
        "items/b/items/c",
        "other/o/items/a",
        "other/o/items/f",
        "itemsx/a",
        "other/a",
    ]
    .iter()
    .map(|p| name(p))
    .collect()
}

pub(crate) fn arb_fields() -> impl Strategy<Value = Map> {
    let opt = |s: BoxedStrategy<Value>| prop::option::weighted(0.8, s);
    let m = prop_oneof![
        4 => (
            prop::option::weighted(0.8, arb_field_value()),
            prop::option::weighted(0.5, arb_field_value()),
        )
            .prop_map(|(x, y)| {
                let mut m = Map::new();
                m.extend(x.map(|x| ("x".to_owned(), x)));
                m.extend(y.map(|y| ("y".to_owned(), y)));
                Value::Map(m)
            }),
        1 => arb_scalar(),
    ];
    let c = prop_oneof![3 => arb_array(), 1 => arb_scalar()];
    (
        opt(arb_field_value().boxed()),
        opt(arb_field_value().boxed()),
        opt(c.boxed()),
        opt(m.boxed()),
    )
        .prop_map(|(a, b, c, m)| {
            let mut fields = Map::new();
            for (k, v) in [("a", a), ("b", b), ("c", c), ("m", m)] {
                if let Some(v) = v {
                    fields.insert(k.to_owned(), v);
                }
            }
            fields
        })
}

/// Every field present, from the hot pool: documents that match many filters at once.
pub(crate) fn arb_dense_fields() -> impl Strategy<Value = Map> {
    let hot = || select(hot_pool());
    (hot(), hot(), vec(hot(), 0..=3), hot()).prop_map(|(a, b, c, x)| {
        let mut fields = Map::new();
        fields.insert("a".into(), a);
        fields.insert("b".into(), b);
        fields.insert("c".into(), Value::Array(c));
        fields.insert(
            "m".into(),
            Value::Map([("x".to_owned(), x)].into_iter().collect()),
        );
        fields
    })
}

/// A small set of documents: mostly in `items`, some in the look-alike collections.
pub(crate) fn arb_docs() -> impl Strategy<Value = Vec<Document>> {
    let names = universe();
    let weights: Vec<u32> = names
        .iter()
        .map(|n| match (n.segments().len(), n.collection_id()) {
            (2, "items") => 4,
            (_, "items") => 2,
            _ => 1,
        })
        .collect();
    let pick = proptest::sample::select(
        names
            .iter()
            .zip(&weights)
            .flat_map(|(n, w)| std::iter::repeat_n(n.clone(), *w as usize))
            .collect::<Vec<_>>(),
    );
    let sparse = vec((pick.clone(), arb_fields().boxed()), 0..32);
    let dense = vec((pick, arb_dense_fields().boxed()), 0..32);
    prop_oneof![sparse, dense].prop_map(|entries| {
        let mut by_name: Vec<Document> = Vec::new();
        for (n, fields) in entries {
            by_name.retain(|d| d.name != n);
            by_name.push(Document::new(n, fields));
        }
        by_name
    })
}

/// Placeholder for a `documentId()` operand: a reference, or a string naming a document of
/// the universe. [`materialize`] turns it into an id or a path to suit the query's source.
pub(crate) fn arb_name_operand() -> impl Strategy<Value = Value> {
    let mut names = universe();
    names.push(name("items/bb"));
    names.push(name("items/a/items/zz"));
    (select(names), any::<bool>()).prop_map(|(n, as_ref)| {
        if as_ref {
            Value::Reference(n)
        } else {
            Value::String(n.to_string())
        }
    })
}

pub(crate) fn arb_leaf() -> BoxedStrategy<Filter> {
    use Operator::*;
    // Value filters mostly on scalar fields, membership filters mostly on the array field.
    let fld = || select(vec!["a", "a", "a", "b", "b", "b", "m.x", "m.x", "c", "m"]).prop_map(field);
    let arr = || select(vec!["c", "c", "c", "c", "a"]).prop_map(field);
    let leaf = |f: FieldPath, op: Operator, value: Value| {
        Filter::Field(FieldFilter {
            field: f,
            op,
            value,
        })
    };
    prop_oneof![
        6 => (
            fld(),
            select(vec![Equal, NotEqual, LessThan, LessThanOrEqual, GreaterThan, GreaterThanOrEqual]),
            prop_oneof![8 => select(hot_pool()), 4 => select(pool()), 1 => arb_array(), 1 => arb_small_map()],
        )
            .prop_map(move |(f, op, v)| leaf(f, op, v)),
        3 => (
            fld(),
            select(vec![In, NotIn]),
            vec(
                prop_oneof![
                    12 => arb_scalar(),
                    2 => arb_array(),
                    1 => arb_array().prop_map(|a| Value::Array(vec![a])),
                ],
                1..=3,
            ),
        )
            .prop_map(move |(f, op, v)| leaf(f, op, Value::Array(v))),
        2 => (arr(), prop_oneof![9 => arb_scalar(), 1 => arb_array()])
            .prop_map(move |(f, v)| leaf(f, ArrayContains, v)),
        1 => (arr(), vec(arb_scalar(), 1..=3))
            .prop_map(move |(f, v)| leaf(f, ArrayContainsAny, Value::Array(v))),
        2 => (
            select(vec![Equal, NotEqual, LessThan, LessThanOrEqual, GreaterThan, GreaterThanOrEqual]),
            arb_name_operand(),
        )
            .prop_map(move |(op, v)| leaf(FieldPath::document_id(), op, v)),
        1 => (select(vec![In, NotIn]), vec(arb_name_operand(), 1..=3))
            .prop_map(move |(op, v)| leaf(FieldPath::document_id(), op, Value::Array(v))),
    ]
    .boxed()
}

/// `==`, `in` or `array-contains` on a field: the stuff of zig-zag joins.
pub(crate) fn arb_equality_leaf() -> BoxedStrategy<Filter> {
    use Operator::*;
    let hot = || select(hot_pool());
    prop_oneof![
        4 => (select(vec!["a", "b", "m.x"]), hot()).prop_map(|(f, v)| Filter::field(f, Equal, v)),
        1 => (select(vec!["a", "b"]), vec(hot(), 1..=2))
            .prop_map(|(f, v)| Filter::field(f, In, Value::Array(v))),
        2 => hot().prop_map(|v| Filter::field("c", ArrayContains, v)),
    ]
    .boxed()
}

pub(crate) fn arb_filter() -> BoxedStrategy<Filter> {
    let leaf = arb_leaf();
    let equalities = vec(arb_equality_leaf(), 2..=3).prop_map(Filter::And);
    let and = vec(leaf.clone(), 2..=3).prop_map(Filter::And);
    let or_part =
        prop_oneof![2 => leaf.clone(), 1 => vec(leaf.clone(), 2..=2).prop_map(Filter::And)];
    let or = vec(or_part, 2..=3).prop_map(Filter::Or);
    prop_oneof![
        5 => leaf.clone(),
        2 => and,
        2 => equalities,
        2 => or.clone(),
        1 => (leaf, or).prop_map(|(l, o)| Filter::And(vec![l, o])),
        1 => (vec(arb_equality_leaf(), 2..=3), arb_leaf()).prop_map(|(mut v, l)| {
            v.push(l);
            Filter::And(v)
        }),
    ]
    .boxed()
}

/// A cursor: none, explicit values (as many as `n`, clipped to the explicit orderBys; the
/// `__name__` position takes a name operand), or the values of a result document.
#[derive(Clone, Debug)]
pub(crate) enum CursorSpec {
    None,
    Values {
        n: usize,
        values: Vec<Value>,
        names: Vec<Value>,
        inclusive: bool,
    },
    FromDocument {
        pick: usize,
        inclusive: bool,
    },
}

pub(crate) fn arb_cursor() -> impl Strategy<Value = CursorSpec> {
    prop_oneof![
        6 => Just(CursorSpec::None),
        2 => (0usize..=2, vec(arb_field_value(), 2), vec(arb_name_operand(), 2), any::<bool>())
            .prop_map(|(n, values, names, inclusive)| CursorSpec::Values { n, values, names, inclusive }),
        2 => (any::<usize>(), any::<bool>())
            .prop_map(|(pick, inclusive)| CursorSpec::FromDocument { pick, inclusive }),
    ]
}

/// Everything about a query except its source-dependent operands.
#[derive(Clone, Debug)]
pub(crate) struct QuerySpec {
    pub(crate) source: usize,
    pub(crate) filter: Option<Filter>,
    pub(crate) order: Vec<(&'static str, Direction)>,
    pub(crate) limit: Option<(i64, bool)>,
    pub(crate) offset: u64,
    pub(crate) start: CursorSpec,
    pub(crate) end: CursorSpec,
    pub(crate) select: Option<Vec<&'static str>>,
}

pub(crate) fn sources() -> Vec<Source> {
    vec![
        Source::Collection(CollectionPath::parse("items").expect("valid")),
        Source::CollectionGroup("items".to_owned()),
        Source::Collection(CollectionPath::parse("items/a/items").expect("valid")),
        Source::Collection(CollectionPath::parse("other/o/items").expect("valid")),
    ]
}

pub(crate) fn arb_query_spec() -> impl Strategy<Value = QuerySpec> {
    let dir = select(vec![Ascending, Descending]);
    let order = prop_oneof![
        2 => Just(Vec::new()),
        3 => (select(vec!["a", "b", "m.x", "__name__", "c", "m"]), dir.clone()).prop_map(|o| vec![o]),
        2 => (
            select(vec!["a", "b", "m.x", "__name__", "m"]),
            dir.clone(),
            select(vec!["a", "b", "c", "__name__", "m.x"]),
            dir.clone(),
        )
            .prop_map(|(f1, d1, f2, d2)| if f1 == f2 { vec![(f1, d1)] } else { vec![(f1, d1), (f2, d2)] }),
        // A field ordered twice: refused (checked against `firestore_accepts`).
        1 => (select(vec!["a", "__name__"]), dir.clone(), dir)
            .prop_map(|(f, d1, d2)| vec![(f, d1), (f, d2)]),
    ];
    (
        (
            select(vec![0usize, 0, 0, 0, 1, 1, 1, 2, 3]),
            prop::option::weighted(0.85, arb_filter()),
            order,
        ),
        (
            prop::option::weighted(0.5, (1i64..=4, prop::bool::weighted(0.35))),
            prop_oneof![4 => Just(0u64), 1 => 1u64..=2],
            arb_cursor(),
            arb_cursor(),
            prop::option::weighted(
                0.15,
                select(vec![vec!["a"], vec!["m.x", "b"], vec!["__name__"], vec![]]),
            ),
        ),
    )
        .prop_map(
            |((source, filter, order), (limit, offset, start, end, select))| QuerySpec {
                source,
                filter,
                order,
                limit,
                offset,
                start,
                end,
                select,
            },
        )
}

/// Turns `documentId()` placeholders into what the source needs: a plain id for a
/// collection query (or a reference in that collection), a path for a collection group.
pub(crate) fn materialize_name(source: &Source, v: &Value) -> Value {
    match (source, v) {
        (Source::Collection(c), Value::Reference(n)) => {
            Value::Reference(c.doc(n.id()).expect("valid id"))
        }
        (Source::Collection(_), Value::String(path)) => Value::String(name(path).id().to_owned()),
        _ => v.clone(),
    }
}

pub(crate) fn materialize_filter(source: &Source, f: &Filter) -> Filter {
    match f {
        Filter::Field(ff) if is_name(&ff.field) => {
            let value = match &ff.value {
                Value::Array(items) => {
                    Value::Array(items.iter().map(|i| materialize_name(source, i)).collect())
                }
                other => materialize_name(source, other),
            };
            Filter::Field(FieldFilter {
                value,
                ..ff.clone()
            })
        }
        Filter::Field(_) => f.clone(),
        Filter::And(parts) => Filter::And(
            parts
                .iter()
                .map(|p| materialize_filter(source, p))
                .collect(),
        ),
        Filter::Or(parts) => Filter::Or(
            parts
                .iter()
                .map(|p| materialize_filter(source, p))
                .collect(),
        ),
    }
}

pub(crate) fn build_cursor(spec: &CursorSpec, docs: &[Document], q: &Query) -> Option<Cursor> {
    match spec {
        CursorSpec::None => None,
        CursorSpec::Values {
            n,
            values,
            names,
            inclusive,
        } => {
            let n = (*n).min(q.order_by.len());
            let values = (0..n)
                .map(|i| {
                    if is_name(&q.order_by[i].field) {
                        materialize_name(&q.source, &names[i])
                    } else {
                        values[i].clone()
                    }
                })
                .collect();
            Some(Cursor {
                values,
                inclusive: *inclusive,
                from_document: false,
            })
        }
        CursorSpec::FromDocument { pick, inclusive } => {
            let mut bare = q.clone();
            bare.start = None;
            bare.end = None;
            let candidates = model_candidates(docs, &bare);
            if candidates.is_empty() {
                return None;
            }
            let doc = &candidates[pick % candidates.len()];
            Some(Cursor {
                values: model_order(q)
                    .iter()
                    .map(|(f, _)| get(doc, f).expect("ordered fields are present"))
                    .collect(),
                inclusive: *inclusive,
                from_document: true,
            })
        }
    }
}

pub(crate) fn build_query(spec: &QuerySpec, docs: &[Document]) -> Query {
    let source = sources()[spec.source].clone();
    let mut q = Query {
        source: source.clone(),
        filter: spec.filter.as_ref().map(|f| materialize_filter(&source, f)),
        order_by: spec
            .order
            .iter()
            .map(|(f, dir)| OrderBy {
                field: field(f),
                dir: *dir,
            })
            .collect(),
        limit: None,
        limit_type: LimitType::First,
        start: None,
        end: None,
        offset: spec.offset,
        projection: spec
            .select
            .as_ref()
            .map(|s| s.iter().map(|f| field(f)).collect()),
    };
    if let Some((n, last)) = spec.limit {
        q.limit = Some(n);
        if last && !q.order_by.is_empty() {
            q.limit_type = LimitType::Last;
        }
    }
    q.start = build_cursor(&spec.start, docs, &q);
    q.end = build_cursor(&spec.end, docs, &q);
    q
}

pub(crate) fn arb_exempt() -> impl Strategy<Value = Vec<&'static str>> {
    prop::sample::subsequence(vec!["a", "b", "c", "m"], 0..=2)
}

pub(crate) fn arb_composites() -> impl Strategy<Value = Vec<CompositeIndexSpec>> {
    let pool = composite_pool();
    let n = pool.len();
    prop::sample::subsequence(pool, 0..=n)
}

/// Larger collections of dense documents: scans refill in batches, joins seek across them.
pub(crate) fn arb_large_docs() -> impl Strategy<Value = Vec<Document>> {
    (vec(arb_dense_fields(), 30..100), vec(arb_fields(), 0..12)).prop_map(|(dense, sub)| {
        let mut docs: Vec<Document> = dense
            .into_iter()
            .enumerate()
            .map(|(i, f)| Document::new(name(&format!("items/d{i:03}")), f))
            .collect();
        docs.extend(
            sub.into_iter()
                .enumerate()
                .map(|(i, f)| Document::new(name(&format!("items/d{i:03}/items/s{i}")), f)),
        );
        docs
    })
}
