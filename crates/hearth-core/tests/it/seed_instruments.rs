//! Seed 000 (sharded timestamps): its instruments data, its three queries and the sharded
//! variant, run through the index-driven engine with the seed's own index files.

use hearth_core::autoid::auto_id_from;
use hearth_core::document::Document;
use hearth_core::encoding::key::Direction::Descending;
use hearth_core::error::ErrorCode;
use hearth_core::index::config::parse_index_file;
use hearth_core::index::def::IndexCatalog;
use hearth_core::kv::{block_on_ready, MemStore};
use hearth_core::path::CollectionPath;
use hearth_core::query::execute::run_query;
use hearth_core::query::model::{Operator, Query};
use hearth_core::query::plan::plan;
use hearth_core::query::validate::{validate, QueryError};
use hearth_core::value::{Map, Timestamp, Value};

use crate::seed_catalogs::{sharded_catalog, unsharded_catalog};

fn instrument(
    symbol: &str,
    currency: &str,
    micros: i64,
    exchange: &str,
    kind: &str,
    iso_ms: i64,
    shard: Option<&str>,
) -> Map {
    let mut price = Map::new();
    price.insert("currency".into(), currency.into());
    price.insert("micros".into(), micros.into());
    let mut m = Map::new();
    m.insert("symbol".into(), symbol.into());
    m.insert("price".into(), Value::Map(price));
    m.insert("exchange".into(), exchange.into());
    m.insert("instrumentType".into(), kind.into());
    m.insert(
        "timestamp".into(),
        Timestamp::from_millis(iso_ms).unwrap().into(),
    );
    if let Some(s) = shard {
        m.insert("shard".into(), s.into());
    }
    m
}

// 2019-01-01T13:45:23Z in milliseconds.
const T0: i64 = 1_546_350_323_000;

fn load(catalog: &IndexCatalog, shards: [Option<&str>; 3]) -> MemStore {
    let data = [
        instrument(
            "AAA",
            "USD",
            34_790_000,
            "EXCHG1",
            "commonstock",
            T0 + 10,
            shards[0],
        ),
        instrument(
            "BBB",
            "JPY",
            64_272_000_000,
            "EXCHG2",
            "commonstock",
            T0 + 101,
            shards[1],
        ),
        instrument(
            "Index1 ETF",
            "USD",
            473_000_000,
            "EXCHG1",
            "etf",
            T0 + 1,
            shards[2],
        ),
    ];
    let col = CollectionPath::parse("instruments").unwrap();
    let mut store = MemStore::new();
    // Ids from a fixed-seed generator (an LCG's high bytes): scattered like real auto ids,
    // the same on every run.
    let mut rng: u64 = 0x5eed;
    for fields in data {
        let name = col
            .doc(&auto_id_from(|| {
                rng = rng
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (rng >> 56) as u8
            }))
            .unwrap();
        let doc = Document::new(name.clone(), fields);
        store.write_document(catalog, &name, Some(&doc)).unwrap();
    }
    store
}

fn symbols(docs: &[Document]) -> Vec<String> {
    docs.iter()
        .map(|d| match d.fields.get("symbol") {
            Some(Value::String(s)) => s.clone(),
            other => panic!("no symbol: {other:?}"),
        })
        .collect()
}

fn create_query(field: &str, op: Operator, value: &str) -> Query {
    Query::collection(CollectionPath::parse("instruments").unwrap())
        .where_(field, op, value)
        .order_by("timestamp", Descending)
        .limit(5)
}

#[test]
fn the_three_queries_return_the_seed_results() {
    let catalog = unsharded_catalog();
    let store = load(&catalog, [None; 3]);
    let run = |q: Query| symbols(&block_on_ready(run_query(&store, &catalog, &q)).unwrap());
    assert_eq!(
        run(create_query(
            "instrumentType",
            Operator::Equal,
            "commonstock"
        )),
        ["BBB", "AAA"]
    );
    assert_eq!(
        run(create_query("exchange", Operator::Equal, "EXCHG1")),
        ["AAA", "Index1 ETF"]
    );
    assert_eq!(
        run(create_query("price.currency", Operator::Equal, "USD")),
        ["AAA", "Index1 ETF"]
    );
}

#[test]
fn without_the_composite_index_the_error_names_it() {
    let catalog = IndexCatalog::new();
    let q = validate(&create_query("exchange", Operator::Equal, "EXCHG1")).unwrap();
    let err = plan(&catalog, &q).unwrap_err();
    let QueryError::MissingIndex { message, index } = &err else {
        panic!("expected a missing index, got {err:?}");
    };
    assert_eq!(err.code(), ErrorCode::FailedPrecondition);
    let entry = index.to_json_entry();
    assert!(message.contains(&entry), "{message}");
    // The suggested entry is ready to paste: it parses, and with it the query runs.
    let file = parse_index_file(&format!("{{\"indexes\": [{entry}]}}")).unwrap();
    let catalog = IndexCatalog::from_file(&file);
    let store = load(&catalog, [None; 3]);
    let docs = block_on_ready(run_query(&store, &catalog, &q)).unwrap();
    assert_eq!(symbols(&docs), ["AAA", "Index1 ETF"]);
}

#[test]
fn the_sharded_query_is_one_query() {
    let catalog = sharded_catalog();
    let store = load(&catalog, [Some("x"), Some("z"), Some("y")]);
    let shards = Value::Array(vec!["x".into(), "y".into(), "z".into()]);
    let q = Query::collection(CollectionPath::parse("instruments").unwrap())
        .where_("shard", Operator::In, shards.clone())
        .where_("exchange", Operator::Equal, "EXCHG1")
        .order_by("timestamp", Descending)
        .limit(5);
    let docs = block_on_ready(run_query(&store, &catalog, &q)).unwrap();
    assert_eq!(symbols(&docs), ["AAA", "Index1 ETF"]);
    let p = plan(&catalog, &validate(&q).unwrap()).unwrap().to_string();
    assert!(p.contains("merge 3 branches"), "{p}");
    for kind in [
        ("instrumentType", "commonstock", vec!["BBB", "AAA"]),
        ("price.currency", "USD", vec!["AAA", "Index1 ETF"]),
    ] {
        let q = Query::collection(CollectionPath::parse("instruments").unwrap())
            .where_("shard", Operator::In, shards.clone())
            .where_(kind.0, Operator::Equal, kind.1)
            .order_by("timestamp", Descending)
            .limit(5);
        let docs = block_on_ready(run_query(&store, &catalog, &q)).unwrap();
        assert_eq!(symbols(&docs), kind.2);
    }
    // The exempted timestamp has no single-field index: ordering by it alone is refused.
    let q = Query::collection(CollectionPath::parse("instruments").unwrap())
        .order_by("timestamp", Descending);
    let err = block_on_ready(run_query(&store, &catalog, &q)).unwrap_err();
    assert!(matches!(err, QueryError::MissingIndex { .. }), "{err:?}");
    assert!(err.to_string().contains("fieldOverrides"), "{err}");
}
