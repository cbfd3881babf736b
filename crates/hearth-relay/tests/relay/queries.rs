//! Every query feature through the protocol, compared with the brute-force model; missing
//! indexes refused with a paste-ready entry; `--auto-index` creating them.

use hearth_client::ClientError;
use hearth_core::encoding::key::Direction::{Ascending as Asc, Descending as Desc};
use hearth_core::index::config::parse_index_file;
use hearth_core::protocol::ErrorCode;
use hearth_core::query::model::{Aggregation, Cursor, Filter, Operator as Op, Query};
use hearth_core::query::validate::validate;
use hearth_core::value::Value;

use crate::harness::*;
use crate::model::*;

/// The composite indexes the fixed queries need (each one found by running them without
/// it: the relay's refusal names it).
const INDEXES: &str = r#"{
  // hand-edited, so comments and trailing commas are allowed
  "indexes": [
    { "collectionGroup": "items", "queryScope": "COLLECTION",
      "fields": [ { "fieldPath": "b", "order": "ASCENDING" }, { "fieldPath": "n", "order": "DESCENDING" } ] },
    { "collectionGroup": "items", "queryScope": "COLLECTION",
      "fields": [ { "fieldPath": "a", "order": "ASCENDING" }, { "fieldPath": "n", "order": "DESCENDING" } ] },
    { "collectionGroup": "items", "queryScope": "COLLECTION",
      "fields": [ { "fieldPath": "b", "order": "ASCENDING" }, { "fieldPath": "n", "order": "ASCENDING" } ] },
    { "collectionGroup": "items", "queryScope": "COLLECTION_GROUP",
      "fields": [ { "fieldPath": "a", "order": "ASCENDING" }, { "fieldPath": "n", "order": "ASCENDING" } ] },
  ],
  "fieldOverrides": [
    { "collectionGroup": "items", "fieldPath": "a",
      "indexes": [ { "order": "ASCENDING", "queryScope": "COLLECTION" },
                   { "arrayConfig": "CONTAINS", "queryScope": "COLLECTION" },
                   { "order": "ASCENDING", "queryScope": "COLLECTION_GROUP" } ] },
  ],
}"#;

fn items() -> Query {
    Query::collection(coll("items"))
}

fn f(field: &str, op: Op, v: Value) -> Filter {
    Filter::field(field, op, v)
}

fn ints(v: &[i64]) -> Value {
    Value::Array(v.iter().map(|i| int(*i)).collect())
}

/// Labelled queries covering every feature.
fn fixed_queries() -> Vec<(&'static str, Query)> {
    let doc_cursor = Cursor {
        values: vec![int(0), Value::Reference(name("items/i10"))],
        inclusive: false,
        from_document: true,
    };
    let mut from_doc = items().order_by("n", Asc);
    from_doc.start = Some(doc_cursor);
    vec![
        ("all", items()),
        ("==", items().where_("a", Op::Equal, int(2))),
        ("!=", items().where_("a", Op::NotEqual, int(2))),
        ("<", items().where_("a", Op::LessThan, int(2))),
        ("<=", items().where_("a", Op::LessThanOrEqual, int(2))),
        (">", items().where_("a", Op::GreaterThan, int(2))),
        (">=", items().where_("a", Op::GreaterThanOrEqual, int(2))),
        (
            "== double",
            items().where_("n", Op::Equal, Value::Double(4.0)),
        ),
        ("in", items().where_("a", Op::In, ints(&[1, 3]))),
        ("not-in", items().where_("a", Op::NotIn, ints(&[1, 3]))),
        (
            "array-contains",
            items().where_("tags", Op::ArrayContains, s("t1")),
        ),
        (
            "array-contains-any",
            items().where_("tags", Op::ArrayContainsAny, arr(&["t1", "t3"])),
        ),
        (
            "or",
            items().filter(Filter::Or(vec![
                f("a", Op::Equal, int(1)),
                f("b", Op::Equal, s("x")),
            ])),
        ),
        (
            "or of and",
            items().filter(Filter::Or(vec![
                f("a", Op::Equal, int(1)),
                Filter::And(vec![
                    f("b", Op::Equal, s("y")),
                    f("flag", Op::Equal, Value::Boolean(true)),
                ]),
            ])),
        ),
        (
            "and (zig-zag)",
            items()
                .where_("a", Op::Equal, int(1))
                .where_("b", Op::Equal, s("x")),
        ),
        ("nested ==", items().where_("nested.k", Op::Equal, int(2))),
        ("orderBy asc", items().order_by("n", Asc)),
        ("orderBy desc", items().order_by("n", Desc)),
        ("orderBy cross-type", items().order_by("mixed", Asc)),
        (
            "orderBy two",
            items().order_by("b", Asc).order_by("n", Desc),
        ),
        (
            "== orderBy",
            items().where_("a", Op::Equal, int(1)).order_by("n", Desc),
        ),
        (
            "in orderBy",
            items()
                .where_("b", Op::In, arr(&["x", "z"]))
                .order_by("n", Asc)
                .limit(7),
        ),
        ("limit", items().order_by("n", Asc).limit(5)),
        ("limitToLast", items().order_by("n", Asc).limit_to_last(5)),
        ("startAt", items().order_by("n", Asc).start_at(vec![int(0)])),
        (
            "startAfter",
            items().order_by("n", Asc).start_after(vec![int(0)]),
        ),
        ("endAt", items().order_by("n", Desc).end_at(vec![int(10)])),
        (
            "endBefore",
            items().order_by("n", Asc).end_before(vec![int(10)]),
        ),
        (
            "startAt endAt",
            items()
                .order_by("n", Asc)
                .start_at(vec![int(-20)])
                .end_at(vec![Value::Double(20.5)]),
        ),
        ("document cursor", from_doc),
        (
            "range orderBy desc limit",
            items()
                .where_("n", Op::GreaterThan, int(0))
                .where_("n", Op::LessThan, int(30))
                .order_by("n", Desc)
                .limit(3),
        ),
        ("offset", items().order_by("n", Asc).offset(3).limit(4)),
        (
            "select",
            items()
                .where_("a", Op::Equal, int(1))
                .select(&["b", "nested.k"]),
        ),
        ("keys only", items().order_by("n", Asc).limit(6).select(&[])),
        (
            "__name__ range",
            items()
                .where_(
                    "__name__",
                    Op::GreaterThanOrEqual,
                    Value::Reference(name("items/i10")),
                )
                .where_(
                    "__name__",
                    Op::LessThan,
                    Value::Reference(name("items/i20")),
                ),
        ),
        ("group all", Query::collection_group("items").limit(10)),
        (
            "group ==",
            Query::collection_group("items").where_("a", Op::Equal, int(1)),
        ),
        (
            "group == orderBy",
            Query::collection_group("items")
                .where_("a", Op::Equal, int(2))
                .order_by("n", Asc),
        ),
        (
            "subcollection",
            Query::collection(coll("groups/g1/items")).order_by("__name__", Desc),
        ),
    ]
}

#[tokio::test]
async fn every_query_feature_matches_the_model() {
    let dir = TempDir::new("queries");
    let indexes = dir.file("indexes.json", INDEXES);
    parse_index_file(INDEXES).expect("the test's index file parses");
    let relay = Relay::fresh(&["--indexes", indexes.to_str().unwrap()]);
    let c = relay.client("queries").await;
    let mut rng = Rng::new(42);
    let model = dataset(&mut rng, 60, 15);
    load(&c, &model).await;

    let mut failures = Vec::new();
    for (label, q) in fixed_queries() {
        validate(&q).unwrap_or_else(|e| panic!("{label}: the test query is invalid: {e}"));
        let want = reference(&q, &model);
        match within(c.query(&q)).await {
            Ok((docs, _)) if strip(&docs) == want => {}
            Ok((docs, _)) => failures.push(format!(
                "{label}: got {:?}\nwant {:?}",
                docs.iter().map(|d| d.name.to_string()).collect::<Vec<_>>(),
                want.iter().map(|(n, _)| n.to_string()).collect::<Vec<_>>()
            )),
            Err(e) => failures.push(format!("{label}: {e}")),
        }
        let aggs = vec![
            Aggregation::Count,
            Aggregation::Sum(fp("n")),
            Aggregation::Average(fp("n")),
        ];
        let want = reference_aggregate(&q, &aggs, &model);
        match within(c.aggregate(&q, aggs)).await {
            Ok((values, _)) if values_match(&values, &want) => {}
            Ok((values, _)) => {
                failures.push(format!("{label} aggregate: got {values:?}, want {want:?}"))
            }
            Err(e) => failures.push(format!("{label} aggregate: {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    within(c.close()).await;
}

/// A random query over the test fields; often invalid on purpose.
fn random_query(rng: &mut Rng) -> Query {
    let mut q = if rng.chance(20) {
        Query::collection_group("items")
    } else {
        items()
    };
    let scalar = |rng: &mut Rng| match rng.below(10) {
        0 => Value::Double(rng.below(5) as f64 + 0.5),
        1 => s("x"),
        2 => Value::Null,
        _ => int(rng.below(5) as i64),
    };
    for _ in 0..rng.below(3) {
        let filter = match rng.below(9) {
            0 => f("a", rng.pick(&[Op::Equal, Op::NotEqual]), scalar(rng)),
            1 => f(
                "a",
                rng.pick(&[
                    Op::LessThan,
                    Op::LessThanOrEqual,
                    Op::GreaterThan,
                    Op::GreaterThanOrEqual,
                ]),
                scalar(rng),
            ),
            2 => f(
                "a",
                rng.pick(&[Op::In, Op::NotIn]),
                Value::Array((0..1 + rng.below(3)).map(|_| scalar(rng)).collect()),
            ),
            3 => f(
                "b",
                rng.pick(&[Op::Equal, Op::LessThan, Op::GreaterThanOrEqual]),
                s(rng.pick(&["x", "y", "z"])),
            ),
            4 => f(
                "n",
                rng.pick(&[Op::LessThan, Op::GreaterThan, Op::Equal]),
                int(rng.below(60) as i64 - 30),
            ),
            5 => f("tags", Op::ArrayContains, s(rng.pick(&["t0", "t1", "t2"]))),
            6 => f(
                "tags",
                Op::ArrayContainsAny,
                arr(&["t3", rng.pick(&["t1", "t4"])]),
            ),
            7 => f("flag", Op::Equal, Value::Boolean(rng.chance(50))),
            _ => Filter::Or(vec![
                f("a", Op::Equal, scalar(rng)),
                f("b", Op::Equal, s(rng.pick(&["x", "y"]))),
            ]),
        };
        q = q.filter(filter);
    }
    for _ in 0..rng.below(3) {
        let field = rng.pick(&["a", "b", "n", "nested.k", "mixed", "__name__"]);
        let dir = if rng.chance(50) { Asc } else { Desc };
        q = q.order_by(field, dir);
    }
    if rng.chance(40) {
        let n = 1 + rng.below(10) as i64;
        q = if !q.order_by.is_empty() && rng.chance(40) {
            q.limit_to_last(n)
        } else {
            q.limit(n)
        };
    }
    if !q.order_by.is_empty() && rng.chance(25) {
        let v = if q.order_by[0].field.is_document_id() {
            Value::Reference(name(&format!("items/i{:02}", rng.below(60))))
        } else {
            scalar(rng)
        };
        q = match rng.below(4) {
            0 => q.start_at(vec![v]),
            1 => q.start_after(vec![v]),
            2 => q.end_at(vec![v]),
            _ => q.end_before(vec![v]),
        };
    }
    if rng.chance(10) {
        q = q.offset(1 + rng.below(4));
    }
    if rng.chance(10) {
        q = q.select(&["a", "b"]);
    }
    q
}

#[tokio::test]
async fn random_queries_match_the_model_with_auto_index() {
    let relay = Relay::fresh(&["--auto-index"]);
    let c = relay.client("random").await;
    let mut rng = Rng::from_env("random_queries");
    let model = dataset(&mut rng, 50, 12);
    load(&c, &model).await;
    let mut failures = Vec::new();
    let (mut valid, mut invalid) = (0, 0);
    for i in 0..200 {
        let q = random_query(&mut rng);
        let got = within(c.query(&q)).await;
        match validate(&q) {
            Err(e) => {
                invalid += 1;
                match got {
                    Err(err) if err.code() == Some(e.code()) => {}
                    other => failures.push(format!(
                        "#{i} {q:?}: the core refuses it ({e}), the relay answered {other:?}"
                    )),
                }
            }
            Ok(_) => {
                valid += 1;
                let want = reference(&q, &model);
                match got {
                    Ok((docs, _)) if strip(&docs) == want => {}
                    Ok((docs, _)) => failures.push(format!(
                        "#{i} {q:?}:\n got {:?}\nwant {:?}",
                        docs.iter().map(|d| d.name.to_string()).collect::<Vec<_>>(),
                        want.iter().map(|(n, _)| n.to_string()).collect::<Vec<_>>()
                    )),
                    Err(e) => failures.push(format!("#{i} {q:?}: {e}")),
                }
                let aggs = vec![Aggregation::Count, Aggregation::Sum(fp("a"))];
                let want = reference_aggregate(&q, &aggs, &model);
                match within(c.aggregate(&q, aggs)).await {
                    Ok((v, _)) if values_match(&v, &want) => {}
                    other => failures.push(format!(
                        "#{i} aggregate {q:?}: got {other:?}, want {want:?}"
                    )),
                }
            }
        }
    }
    eprintln!("random queries: {valid} valid, {invalid} refused");
    assert!(valid > 60, "too few valid random queries ({valid})");
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

fn server_message(e: &ClientError) -> &str {
    match e {
        ClientError::Server { message, .. } => message,
        other => panic!("expected a relay error, got {other:?}"),
    }
}

#[tokio::test]
async fn missing_index_is_refused_with_a_paste_ready_entry() {
    let dir = TempDir::new("missing-index");
    let data = dir.path().join("data");
    let relay = Relay::start(&data, &[]);
    let c = relay.client("idx").await;
    let model = dataset(&mut Rng::new(7), 30, 0);
    load(&c, &model).await;
    let q = items()
        .where_("flag", Op::Equal, Value::Boolean(true))
        .order_by("n", Desc);

    let err = within(c.query(&q))
        .await
        .expect_err("no index serves the query");
    assert_eq!(err.code(), Some(ErrorCode::FailedPrecondition), "{err}");
    let msg = server_message(&err).to_owned();
    // The explanation is the first line; the entry to paste is the rest.
    let (_, entry) = msg
        .split_once('\n')
        .expect("an entry follows the explanation");
    let file_text = format!("{{ \"indexes\": [ {entry} ] }}");
    let file = parse_index_file(&file_text)
        .unwrap_or_else(|e| panic!("the entry is not paste-ready ({e}):\n{entry}"));
    assert_eq!(file.indexes.len(), 1);
    let fields: Vec<String> = file.indexes[0]
        .fields
        .iter()
        .map(|f| f.field_path.to_string())
        .collect();
    assert!(
        fields.starts_with(&["flag".to_owned(), "n".to_owned()]),
        "{fields:?}"
    );

    // Aggregations and listens are refused the same way.
    let err = within(c.aggregate(&q, vec![Aggregation::Count]))
        .await
        .expect_err("no index serves the aggregation");
    assert_eq!(err.code(), Some(ErrorCode::FailedPrecondition), "{err}");
    let mut l = within(c.listen(&q, None)).await.unwrap();
    let err = within(l.next())
        .await
        .expect_err("no index serves the listen");
    assert_eq!(err.code(), Some(ErrorCode::FailedPrecondition), "{err}");
    // The connection is still fine.
    within(c.ping()).await.unwrap();
    within(c.close()).await;
    drop(relay);

    // Pasting the entry makes the query work (the relay backfills the index at start).
    let indexes = dir.file("indexes.json", &file_text);
    let relay = Relay::start(&data, &["--indexes", indexes.to_str().unwrap()]);
    let c = relay.client("idx").await;
    let (docs, _) = within(c.query(&q))
        .await
        .expect("the pasted index serves it");
    assert_eq!(strip(&docs), reference(&q, &model));
    assert!(!docs.is_empty());
    within(c.close()).await;
}

#[tokio::test]
async fn auto_index_creates_the_missing_index() {
    let relay = Relay::fresh(&["--auto-index"]);
    let c = relay.client("auto").await;
    let mut model = dataset(&mut Rng::new(8), 40, 0);
    load(&c, &model).await;
    let q = items()
        .where_("flag", Op::Equal, Value::Boolean(true))
        .order_by("n", Desc);
    let (docs, _) = within(c.query(&q)).await.expect("auto-indexed query");
    assert_eq!(strip(&docs), reference(&q, &model));
    // Again, now from the created index; and for a write made after it was created.
    let extra = name("items/zz");
    let fields = map([
        ("flag", Value::Boolean(true)),
        ("n", int(1000)),
        ("b", s("x")),
    ]);
    within(c.write(vec![hearth_core::mutation::Mutation::set(
        extra.clone(),
        fields.clone(),
    )]))
    .await
    .unwrap();
    model.insert(extra, fields);
    let (docs, _) = within(c.query(&q)).await.unwrap();
    assert_eq!(strip(&docs), reference(&q, &model));

    // A listen and an aggregation that need other indexes.
    let lq = items()
        .where_("b", Op::Equal, s("y"))
        .order_by("mixed", Desc);
    let mut l = within(c.listen(&lq, None)).await.unwrap();
    let snap = within(l.next()).await.expect("auto-indexed listen");
    assert_eq!(strip(&snap.documents), reference(&lq, &model));
    let aq = items().where_("b", Op::Equal, s("z")).order_by("a", Asc);
    let aggs = vec![Aggregation::Count, Aggregation::Sum(fp("n"))];
    let (values, _) = within(c.aggregate(&aq, aggs.clone()))
        .await
        .expect("auto-indexed aggregation");
    assert!(values_match(
        &values,
        &reference_aggregate(&aq, &aggs, &model)
    ));
    within(c.close()).await;
}

#[tokio::test]
async fn auto_index_creates_every_index_an_or_query_needs() {
    let relay = Relay::fresh(&["--auto-index"]);
    let c = relay.client("auto-or").await;
    let model = dataset(&mut Rng::new(9), 30, 0);
    load(&c, &model).await;
    // Two branches, each needing its own composite index ((a, mixed) and (b, mixed)).
    let q = items()
        .filter(Filter::Or(vec![
            f("a", Op::Equal, int(0)),
            f("b", Op::Equal, s("y")),
        ]))
        .order_by("mixed", Desc);
    let first = within(c.query(&q)).await;
    let second = within(c.query(&q)).await;
    assert!(
        matches!(&first, Ok((docs, _)) if strip(docs) == reference(&q, &model)),
        "the first run should create both indexes; got {:?} (a second run gave {})",
        first.as_ref().map(|(d, _)| d.len()),
        match &second {
            Ok((d, _)) => format!("{} documents", d.len()),
            Err(e) => e.to_string(),
        }
    );
}
