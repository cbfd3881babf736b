//! The seed-000 instruments walk-through on the core engine: loads instrument documents with
//! the seed's index files, then prints each query's plan and result.
//!
//! `cargo run --example instruments [N]` (N documents, default 10000).

use hearth_core::autoid::auto_id_from;
use hearth_core::document::Document;
use hearth_core::encoding::key::Direction::Descending;
use hearth_core::index::config::parse_index_file;
use hearth_core::index::def::IndexCatalog;
use hearth_core::kv::{block_on_ready, MemStore};
use hearth_core::path::CollectionPath;
use hearth_core::query::execute::run_query;
use hearth_core::query::model::{Operator, Query};
use hearth_core::query::plan::plan;
use hearth_core::query::validate::validate;
use hearth_core::value::{Map, Timestamp, Value};

const INDEXES: &str = r#"{
  // The seed's sharded composite indexes.
  "indexes": [
    { "collectionGroup": "instruments", "queryScope": "COLLECTION",
      "fields": [ { "fieldPath": "shard", "order": "DESCENDING" },
                  { "fieldPath": "exchange", "order": "ASCENDING" },
                  { "fieldPath": "timestamp", "order": "DESCENDING" } ] },
    { "collectionGroup": "instruments", "queryScope": "COLLECTION",
      "fields": [ { "fieldPath": "shard", "order": "DESCENDING" },
                  { "fieldPath": "instrumentType", "order": "ASCENDING" },
                  { "fieldPath": "timestamp", "order": "DESCENDING" } ] },
  ],
  "fieldOverrides": [
    { "collectionGroup": "instruments", "fieldPath": "timestamp", "indexes": [] },
  ],
}"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args().nth(1).map_or(Ok(10_000), |s| s.parse())?;
    let catalog = IndexCatalog::from_file(&parse_index_file(INDEXES)?);
    let col = CollectionPath::parse("instruments")?;
    let mut store = MemStore::new();
    let (exchanges, kinds, shards) = (
        ["EXCHG1", "EXCHG2", "EXCHG3"],
        ["commonstock", "etf", "bond"],
        ["x", "y", "z"],
    );
    let start = std::time::Instant::now();
    // Ids from a fixed-seed generator (an LCG's high bytes): scattered like real auto ids,
    // the same on every run.
    let mut rng: u64 = 0x5eed;
    for i in 0..n {
        let mut m = Map::new();
        m.insert("symbol".into(), format!("SYM{i}").into());
        m.insert("exchange".into(), exchanges[i % 3].into());
        m.insert("instrumentType".into(), kinds[(i / 3) % 3].into());
        m.insert("shard".into(), shards[(i * 7) % 3].into());
        m.insert(
            "timestamp".into(),
            Value::Timestamp(Timestamp::from_millis(1_546_350_323_000 + i as i64)?),
        );
        let name = col.doc(&auto_id_from(|| {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (rng >> 56) as u8
        }))?;
        store.write_document(&catalog, &name, Some(&Document::new(name.clone(), m)))?;
    }
    println!(
        "loaded {n} documents ({} index entries) in {:?}",
        store.index.len(),
        start.elapsed()
    );
    let queries = [
        (
            "sharded exchange",
            Query::collection(col.clone())
                .where_(
                    "shard",
                    Operator::In,
                    Value::Array(vec!["x".into(), "y".into(), "z".into()]),
                )
                .where_("exchange", Operator::Equal, "EXCHG1")
                .order_by("timestamp", Descending)
                .limit(5),
        ),
        (
            "two equalities (zig-zag)",
            Query::collection(col.clone())
                .where_("exchange", Operator::Equal, "EXCHG2")
                .where_("instrumentType", Operator::Equal, "etf")
                .limit(5),
        ),
        (
            "needs an index",
            Query::collection(col.clone())
                .where_("exchange", Operator::Equal, "EXCHG1")
                .order_by("symbol", Descending)
                .limit(5),
        ),
    ];
    for (title, q) in queries {
        println!("\n== {title}");
        let valid = validate(&q)?;
        match plan(&catalog, &valid) {
            Ok(p) => print!("{p}"),
            Err(e) => {
                println!("{e}");
                continue;
            }
        }
        let t = std::time::Instant::now();
        let docs = block_on_ready(run_query(&store, &catalog, &q))?;
        println!("{} results in {:?}", docs.len(), t.elapsed());
        for d in docs {
            println!("  {} {:?}", d.name, d.fields.get("symbol"));
        }
    }
    Ok(())
}
