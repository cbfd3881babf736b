//! Planner snapshots: representative queries rendered with `Plan`'s `Display`, and the
//! missing-index messages users read. Update with `UPDATE_EXPECT=1 cargo test --test it plans`.

use expect_test::{expect, Expect};
use hearth_core::encoding::key::Direction::{Ascending, Descending};
use hearth_core::index::config::{
    FieldMode, FieldOverrideSpec, IndexFile, OverrideIndexSpec, QueryScope,
};
use hearth_core::index::def::IndexCatalog;
use hearth_core::path::{CollectionPath, FieldPath};
use hearth_core::query::model::{Filter, Operator, Query};
use hearth_core::query::plan::plan;
use hearth_core::query::validate::validate;
use hearth_core::value::Value;

use crate::seed_catalogs::{sharded_catalog, unsharded_catalog as seed_catalog};

/// Automatic indexes, plus collection-group indexes on `a`.
fn auto_catalog() -> IndexCatalog {
    let all = |scope| {
        [FieldMode::Ascending, FieldMode::ArrayContains]
            .into_iter()
            .map(move |mode| OverrideIndexSpec {
                mode,
                query_scope: scope,
            })
    };
    IndexCatalog::from_file(&IndexFile {
        indexes: Vec::new(),
        field_overrides: vec![FieldOverrideSpec {
            collection_group: "items".to_owned(),
            field_path: FieldPath::parse("a").expect("valid"),
            indexes: all(QueryScope::Collection)
                .chain(all(QueryScope::CollectionGroup))
                .collect(),
        }],
    })
}

fn instruments() -> Query {
    Query::collection(CollectionPath::parse("instruments").expect("valid"))
}

fn items() -> Query {
    Query::collection(CollectionPath::parse("items").expect("valid"))
}

fn check(catalog: &IndexCatalog, q: Query, expect: Expect) {
    let actual = match validate(&q).and_then(|q| plan(catalog, &q)) {
        Ok(p) => p.to_string(),
        Err(e) => format!("{}: {e}\n", e.code()),
    };
    expect.assert_eq(&actual);
}

#[test]
fn equality_and_order_on_a_composite() {
    check(
        &seed_catalog(),
        instruments()
            .where_("exchange", Operator::Equal, "EXCHG1")
            .order_by("timestamp", Descending)
            .limit(5),
        expect![[r#"
            order by timestamp desc, __name__ desc
              index instruments|COLLECTION|exchange:asc,timestamp:desc|Descending forward, 1 range(s) where exchange == "EXCHG1"
        "#]],
    );
}

#[test]
fn sharded_in_is_three_merged_branches() {
    let shards = Value::Array(vec!["x".into(), "y".into(), "z".into()]);
    check(
        &sharded_catalog(),
        instruments()
            .where_("shard", Operator::In, shards)
            .where_("exchange", Operator::Equal, "EXCHG1")
            .order_by("timestamp", Descending)
            .limit(5),
        expect![[r#"
            order by timestamp desc, __name__ desc
            merge 3 branches
              index instruments|COLLECTION|shard:desc,exchange:asc,timestamp:desc|Descending forward, 1 range(s) where shard == "x" and exchange == "EXCHG1"
              index instruments|COLLECTION|shard:desc,exchange:asc,timestamp:desc|Descending forward, 1 range(s) where shard == "y" and exchange == "EXCHG1"
              index instruments|COLLECTION|shard:desc,exchange:asc,timestamp:desc|Descending forward, 1 range(s) where shard == "z" and exchange == "EXCHG1"
        "#]],
    );
}

#[test]
fn two_equalities_zig_zag_on_single_field_indexes() {
    check(
        &auto_catalog(),
        items()
            .where_("a", Operator::Equal, 1i64)
            .where_("b", Operator::Equal, "x")
            .limit(10),
        expect![[r#"
            order by __name__ asc
              zig-zag join forward where a == 1 and b == "x"
                index items|COLLECTION|a:asc|Ascending
                index items|COLLECTION|b:asc|Ascending
        "#]],
    );
    // The same join read backward, for a descending name order.
    check(
        &auto_catalog(),
        items()
            .where_("a", Operator::Equal, 1i64)
            .where_("tags", Operator::ArrayContains, "red")
            .order_by("__name__", Descending),
        expect![[r#"
            order by __name__ desc
              zig-zag join backward where a == 1 and tags contains "red"
                index items|COLLECTION|a:asc|Ascending
                index items|COLLECTION|tags:contains|Ascending
        "#]],
    );
}

#[test]
fn array_contains_any_is_one_branch_per_value() {
    check(
        &auto_catalog(),
        items().where_(
            "tags",
            Operator::ArrayContainsAny,
            Value::Array(vec!["red".into(), "blue".into()]),
        ),
        expect![[r#"
            order by __name__ asc
            merge 2 branches
              index items|COLLECTION|tags:contains|Ascending forward, 1 range(s) where tags contains "red"
              index items|COLLECTION|tags:contains|Ascending forward, 1 range(s) where tags contains "blue"
        "#]],
    );
}

#[test]
fn or_merges_its_branches() {
    check(
        &auto_catalog(),
        items().filter(Filter::Or(vec![
            Filter::field("a", Operator::Equal, 1i64),
            Filter::field("b", Operator::Equal, 2i64),
        ])),
        expect![[r#"
            order by __name__ asc
            merge 2 branches
              index items|COLLECTION|a:asc|Ascending forward, 1 range(s) where a == 1
              index items|COLLECTION|b:asc|Ascending forward, 1 range(s) where b == 2
        "#]],
    );
}

#[test]
fn not_equal_scans_two_ranges() {
    check(
        &auto_catalog(),
        items().where_("a", Operator::NotEqual, 3i64),
        expect![[r#"
            order by a asc, __name__ asc
              index items|COLLECTION|a:asc|Ascending forward, 2 range(s)
        "#]],
    );
    check(
        &auto_catalog(),
        items()
            .where_("a", Operator::NotEqual, 3i64)
            .order_by("a", Descending),
        expect![[r#"
            order by a desc, __name__ desc
              index items|COLLECTION|a:asc|Ascending backward, 2 range(s)
        "#]],
    );
}

#[test]
fn limit_to_last_reads_backward() {
    check(
        &auto_catalog(),
        items().order_by("a", Descending).limit_to_last(2),
        expect![[r#"
            order by a desc, __name__ desc (read from the end)
              index items|COLLECTION|a:asc|Ascending forward, 1 range(s)
        "#]],
    );
    check(
        &auto_catalog(),
        items().order_by("__name__", Ascending).limit_to_last(2),
        expect![[r#"
            order by __name__ asc (read from the end)
              documents backward, 1 range(s)
        "#]],
    );
}

#[test]
fn collection_group_queries() {
    check(
        &auto_catalog(),
        Query::collection_group("items").where_("a", Operator::Equal, 1i64),
        expect![[r#"
            order by __name__ asc
              index items|COLLECTION_GROUP|a:asc|Ascending forward, 1 range(s) where a == 1
        "#]],
    );
    check(
        &auto_catalog(),
        Query::collection_group("items")
            .order_by("__name__", Descending)
            .start_after(vec!["items/b".into()]),
        expect![[r#"
            order by __name__ desc
              index items|COLLECTION_GROUP||Ascending backward, 1 range(s)
        "#]],
    );
}

#[test]
fn name_equality_is_a_point_read() {
    check(
        &auto_catalog(),
        items().where_("__name__", Operator::Equal, "a"),
        expect![[r#"
            order by __name__ asc
              documents forward, 1 range(s) where __name__ == ref(items/a)
        "#]],
    );
    check(
        &auto_catalog(),
        items().where_(
            "__name__",
            Operator::In,
            Value::Array(vec!["a".into(), "b".into()]),
        ),
        expect![[r#"
            order by __name__ asc
            merge 2 branches
              documents forward, 1 range(s) where __name__ == ref(items/a)
              documents forward, 1 range(s) where __name__ == ref(items/b)
        "#]],
    );
}

#[test]
fn missing_index_messages() {
    // A composite to paste into "indexes".
    check(
        &IndexCatalog::new(),
        instruments()
            .where_("exchange", Operator::Equal, "EXCHG1")
            .order_by("timestamp", Descending)
            .limit(5),
        expect![[r#"
            failed-precondition: the query requires an index: add this to "indexes" in firestore.indexes.json:
            {
              "collectionGroup": "instruments",
              "queryScope": "COLLECTION",
              "fields": [
                {
                  "fieldPath": "exchange",
                  "order": "ASCENDING"
                },
                {
                  "fieldPath": "timestamp",
                  "order": "DESCENDING"
                }
              ]
            }
        "#]],
    );
    // An exempted field: a single-field index to enable in "fieldOverrides".
    check(
        &seed_catalog(),
        instruments().order_by("timestamp", Ascending),
        expect![[r#"
            failed-precondition: the query requires a single-field index that is not enabled: add this to "fieldOverrides" in firestore.indexes.json, in place of any entry for the same field:
            {
              "collectionGroup": "instruments",
              "fieldPath": "timestamp",
              "indexes": [
                { "order": "ASCENDING", "queryScope": "COLLECTION" }
              ]
            }
        "#]],
    );
    // Collection-group scope has no automatic single-field indexes.
    check(
        &IndexCatalog::new(),
        Query::collection_group("items").where_("b", Operator::Equal, 1i64),
        expect![[r#"
            failed-precondition: the query requires a single-field index that is not enabled: add this to "fieldOverrides" in firestore.indexes.json, in place of any entry for the same field:
            {
              "collectionGroup": "items",
              "fieldPath": "b",
              "indexes": [
                { "order": "ASCENDING", "queryScope": "COLLECTION" },
                { "order": "DESCENDING", "queryScope": "COLLECTION" },
                { "arrayConfig": "CONTAINS", "queryScope": "COLLECTION" },
                { "order": "ASCENDING", "queryScope": "COLLECTION_GROUP" }
              ]
            }
        "#]],
    );
    // Two inequality fields: both ordered, then the name in the last direction.
    check(
        &IndexCatalog::new(),
        items()
            .where_("a", Operator::GreaterThan, 1i64)
            .where_("b", Operator::LessThan, 2i64)
            .order_by("b", Descending),
        expect![[r#"
            failed-precondition: the query requires an index: add this to "indexes" in firestore.indexes.json:
            {
              "collectionGroup": "items",
              "queryScope": "COLLECTION",
              "fields": [
                {
                  "fieldPath": "b",
                  "order": "DESCENDING"
                },
                {
                  "fieldPath": "a",
                  "order": "DESCENDING"
                }
              ]
            }
        "#]],
    );
    // A name order against the field order needs `__name__` spelled out.
    check(
        &IndexCatalog::new(),
        items()
            .order_by("a", Descending)
            .order_by("__name__", Ascending),
        expect![[r#"
            failed-precondition: the query requires an index: add this to "indexes" in firestore.indexes.json:
            {
              "collectionGroup": "items",
              "queryScope": "COLLECTION",
              "fields": [
                {
                  "fieldPath": "a",
                  "order": "DESCENDING"
                },
                {
                  "fieldPath": "__name__",
                  "order": "ASCENDING"
                }
              ]
            }
        "#]],
    );
}
