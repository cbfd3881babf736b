//! Criterion benchmarks of the core engine over the in-memory ordered store (`MemStore`).
//!
//! Data: instrument documents shaped as in seed 000 (sharded timestamps): `symbol`,
//! `price{currency, micros}`, `exchange`, `instrumentType`, `timestamp`, `shard`.
//!
//! Groups (run with `cargo bench --bench core`; results in `docs/benchmarks-core.md`):
//! - `index`: documents indexed per second: `encode_document` + `document_entries` alone, a
//!   bulk load of 10,000 documents into an empty store through `MemStore::write_document`,
//!   and an in-place update of one instrument in the 100,000-document store.
//! - `query`: latency of the seed's queries (and a zig-zag join) over 100,000 documents.
//! - `view`: one change (a document moving) applied to an unlimited live view of 1,000,
//!   10,000 and 100,000 documents: the cost per change is logarithmic in the result.
//! - `baseline`: what the same answers cost without the engine: a brute-force filter + sort
//!   over a `Vec<Document>`, a raw `BTreeMap` range scan of as many keys, a raw `get`.
//!
//! Every query is checked once in setup against a brute-force answer over the generated
//! documents (count and order), and its plan is checked to be the access path it claims, so a
//! broken engine cannot produce a fast number.

// Benchmark set-up unwraps: a failure there is a broken benchmark, not user input.
#![allow(clippy::unwrap_used)]

use std::cmp::Ordering;
use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, SamplingMode, Throughput};
use hearth_core::autoid::auto_id_from;
use hearth_core::document::Document;
use hearth_core::encoding::document::encode_document;
use hearth_core::encoding::key::Direction::Descending;
use hearth_core::index::config::parse_index_file;
use hearth_core::index::def::{IndexCatalog, IndexDef};
use hearth_core::index::keys::{decode_entry, document_entries, document_key};
use hearth_core::kv::{block_on_ready, KeyRange, MemStore, Metered};
use hearth_core::path::{CollectionPath, DocumentName};
use hearth_core::query::execute::{fetch, run_query};
use hearth_core::query::model::{Operator, Query};
use hearth_core::query::plan::{plan, Access};
use hearth_core::query::validate::validate;
use hearth_core::query::view::View;
use hearth_core::value::{Map, Timestamp, Value};

/// Documents in the query store.
const N_DOCS: usize = 100_000;
/// Documents per iteration of the bulk-load bench.
const BULK: usize = 10_000;
/// Documents per iteration of the encode + entries bench.
const ENCODE_BATCH: usize = 1_000;

const EXCHANGES: [&str; 10] = [
    "EXCHG0", "EXCHG1", "EXCHG2", "EXCHG3", "EXCHG4", "EXCHG5", "EXCHG6", "EXCHG7", "EXCHG8",
    "EXCHG9",
];
const TYPES: [&str; 5] = ["commonstock", "etf", "currency", "bond", "option"];
const CURRENCIES: [&str; 5] = ["USD", "JPY", "EUR", "GBP", "CHF"];
const SHARDS: [&str; 3] = ["x", "y", "z"];
/// 2019-01-01T13:45:23Z in milliseconds (the seed's first timestamp).
const T0: i64 = 1_546_350_323_000;
/// Timestamps are spread uniformly over 30 days, at millisecond precision.
const SPAN_MS: i64 = 30 * 24 * 3600 * 1000;

/// The values the queries filter on.
const EXCHANGE: &str = "EXCHG1";
const KIND: &str = "commonstock";

/// The seed's final index file: the three sharded composites, with the single-field indexes
/// of `timestamp` and `shard` disabled.
const SEED_SHARDED_INDEXES: &str = r#"{
  "indexes": [
    { "collectionGroup": "instruments", "queryScope": "COLLECTION", "fields": [
      { "fieldPath": "shard", "order": "DESCENDING" },
      { "fieldPath": "exchange", "order": "ASCENDING" },
      { "fieldPath": "timestamp", "order": "DESCENDING" } ] },
    { "collectionGroup": "instruments", "queryScope": "COLLECTION", "fields": [
      { "fieldPath": "shard", "order": "DESCENDING" },
      { "fieldPath": "instrumentType", "order": "ASCENDING" },
      { "fieldPath": "timestamp", "order": "DESCENDING" } ] },
    { "collectionGroup": "instruments", "queryScope": "COLLECTION", "fields": [
      { "fieldPath": "shard", "order": "DESCENDING" },
      { "fieldPath": "price.currency", "order": "ASCENDING" },
      { "fieldPath": "timestamp", "order": "DESCENDING" } ] }
  ],
  "fieldOverrides": [
    { "collectionGroup": "instruments", "fieldPath": "timestamp", "indexes": [] },
    { "collectionGroup": "instruments", "fieldPath": "shard", "indexes": [] }
  ]
}"#;

/// The catalog of the query store: the seed's unsharded composites (which the unsharded
/// queries (a) and (b) need) and its sharded ones (query (c)), with the same exemptions.
/// `exchange` and `instrumentType` keep their automatic single-field indexes (query (d)).
const BENCH_INDEXES: &str = r#"{
  "indexes": [
    { "collectionGroup": "instruments", "queryScope": "COLLECTION", "fields": [
      { "fieldPath": "exchange", "order": "ASCENDING" },
      { "fieldPath": "timestamp", "order": "DESCENDING" } ] },
    { "collectionGroup": "instruments", "queryScope": "COLLECTION", "fields": [
      { "fieldPath": "instrumentType", "order": "ASCENDING" },
      { "fieldPath": "timestamp", "order": "DESCENDING" } ] },
    { "collectionGroup": "instruments", "queryScope": "COLLECTION", "fields": [
      { "fieldPath": "price.currency", "order": "ASCENDING" },
      { "fieldPath": "timestamp", "order": "DESCENDING" } ] },
    { "collectionGroup": "instruments", "queryScope": "COLLECTION", "fields": [
      { "fieldPath": "shard", "order": "DESCENDING" },
      { "fieldPath": "exchange", "order": "ASCENDING" },
      { "fieldPath": "timestamp", "order": "DESCENDING" } ] },
    { "collectionGroup": "instruments", "queryScope": "COLLECTION", "fields": [
      { "fieldPath": "shard", "order": "DESCENDING" },
      { "fieldPath": "instrumentType", "order": "ASCENDING" },
      { "fieldPath": "timestamp", "order": "DESCENDING" } ] },
    { "collectionGroup": "instruments", "queryScope": "COLLECTION", "fields": [
      { "fieldPath": "shard", "order": "DESCENDING" },
      { "fieldPath": "price.currency", "order": "ASCENDING" },
      { "fieldPath": "timestamp", "order": "DESCENDING" } ] }
  ],
  "fieldOverrides": [
    { "collectionGroup": "instruments", "fieldPath": "timestamp", "indexes": [] },
    { "collectionGroup": "instruments", "fieldPath": "shard", "indexes": [] }
  ]
}"#;

fn catalog(text: &str) -> IndexCatalog {
    IndexCatalog::from_file(&parse_index_file(text).expect("the bench index file parses"))
}

/// SplitMix64: a small deterministic generator, so every run loads the same data.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
}

fn collection() -> CollectionPath {
    CollectionPath::parse("instruments").unwrap()
}

/// The fields of one instrument, as in seed 000 (with the shard field).
fn instrument_fields(rng: &mut Rng, timestamp_ms: i64) -> Map {
    let symbol: String = (0..3 + rng.below(2))
        .map(|_| (b'A' + rng.below(26) as u8) as char)
        .collect();
    let mut price = Map::new();
    price.insert("currency".into(), rng.pick(&CURRENCIES).into());
    price.insert(
        "micros".into(),
        Value::Integer(1_000_000 + rng.below(100_000_000_000) as i64),
    );
    let mut m = Map::new();
    m.insert("symbol".into(), symbol.into());
    m.insert("price".into(), Value::Map(price));
    m.insert("exchange".into(), rng.pick(&EXCHANGES).into());
    m.insert("instrumentType".into(), rng.pick(&TYPES).into());
    m.insert(
        "timestamp".into(),
        Timestamp::from_millis(timestamp_ms).unwrap().into(),
    );
    m.insert("shard".into(), rng.pick(&SHARDS).into());
    m
}

/// `n` instruments with random auto ids and random timestamps over [`SPAN_MS`].
fn generate(n: usize, seed: u64) -> Vec<Document> {
    let mut rng = Rng(seed);
    let col = collection();
    (0..n)
        .map(|_| {
            let id = auto_id_from(|| rng.next_u64() as u8);
            let ts = T0 + rng.below(SPAN_MS as u64) as i64;
            let fields = instrument_fields(&mut rng, ts);
            Document::new(col.doc(&id).unwrap(), fields)
        })
        .collect()
}

fn load(catalog: &IndexCatalog, docs: &[Document]) -> MemStore {
    let mut store = MemStore::new();
    for d in docs {
        store.write_document(catalog, &d.name, Some(d)).unwrap();
    }
    store
}

// ---- Brute-force reference (independent of the engine's matcher and key encodings) ----

fn str_field<'a>(d: &'a Document, f: &str) -> &'a str {
    match d.fields.get(f) {
        Some(Value::String(s)) => s,
        other => panic!("{f}: {other:?}"),
    }
}

fn ts_field(d: &Document) -> Timestamp {
    match d.fields.get("timestamp") {
        Some(Value::Timestamp(t)) => *t,
        other => panic!("timestamp: {other:?}"),
    }
}

/// `orderBy timestamp desc` (then, as normalized, `__name__ desc`).
fn by_timestamp_desc(a: &&Document, b: &&Document) -> Ordering {
    (ts_field(b), b.name.id()).cmp(&(ts_field(a), a.name.id()))
}

/// No `orderBy`: `__name__ asc` (one collection, so id order).
fn by_name_asc(a: &&Document, b: &&Document) -> Ordering {
    a.name.id().cmp(b.name.id())
}

/// Filter every document, sort the matches, keep the first `limit`.
fn brute_force(
    docs: &[Document],
    pred: impl Fn(&Document) -> bool,
    order: fn(&&Document, &&Document) -> Ordering,
    limit: usize,
) -> Vec<Document> {
    let mut hits: Vec<&Document> = docs.iter().filter(|d| pred(d)).collect();
    hits.sort_unstable_by(order);
    hits.into_iter().take(limit).cloned().collect()
}

fn names(docs: &[Document]) -> Vec<DocumentName> {
    docs.iter().map(|d| d.name.clone()).collect()
}

/// One benchmarked query with its expected answer and the plan text it must have.
struct Case {
    id: &'static str,
    query: Query,
    expected: Vec<Document>,
    plan_must_contain: &'static [&'static str],
}

fn kind_by_time(limit: i64) -> Query {
    Query::collection(collection())
        .where_("instrumentType", Operator::Equal, KIND)
        .order_by("timestamp", Descending)
        .limit(limit)
}

fn sharded_exchange_by_time(limit: i64) -> Query {
    let shards = Value::Array(SHARDS.iter().map(|s| Value::from(*s)).collect());
    Query::collection(collection())
        .where_("shard", Operator::In, shards)
        .where_("exchange", Operator::Equal, EXCHANGE)
        .order_by("timestamp", Descending)
        .limit(limit)
}

fn exchange_and_kind(limit: i64) -> Query {
    Query::collection(collection())
        .where_("exchange", Operator::Equal, EXCHANGE)
        .where_("instrumentType", Operator::Equal, KIND)
        .limit(limit)
}

fn cases(docs: &[Document]) -> Vec<Case> {
    let is_kind = |d: &Document| str_field(d, "instrumentType") == KIND;
    let is_sharded_exchange = |d: &Document| {
        SHARDS.contains(&str_field(d, "shard")) && str_field(d, "exchange") == EXCHANGE
    };
    let is_exchange_and_kind = |d: &Document| {
        str_field(d, "exchange") == EXCHANGE && str_field(d, "instrumentType") == KIND
    };
    const KIND_INDEX: &str = "index instruments|COLLECTION|instrumentType:asc,timestamp:desc|";
    vec![
        Case {
            id: "a_type_eq_orderby_ts_desc_limit5",
            query: kind_by_time(5),
            expected: brute_force(docs, is_kind, by_timestamp_desc, 5),
            plan_must_contain: &[KIND_INDEX],
        },
        Case {
            id: "b_type_eq_orderby_ts_desc_limit500",
            query: kind_by_time(500),
            expected: brute_force(docs, is_kind, by_timestamp_desc, 500),
            plan_must_contain: &[KIND_INDEX],
        },
        Case {
            id: "c_shard_in_3_exchange_eq_orderby_ts_desc_limit5",
            query: sharded_exchange_by_time(5),
            expected: brute_force(docs, is_sharded_exchange, by_timestamp_desc, 5),
            plan_must_contain: &[
                "merge 3 branches",
                "index instruments|COLLECTION|shard:desc,exchange:asc,timestamp:desc|",
            ],
        },
        Case {
            id: "d_zigzag_exchange_eq_type_eq_limit5",
            query: exchange_and_kind(5),
            expected: brute_force(docs, is_exchange_and_kind, by_name_asc, 5),
            plan_must_contain: &["zig-zag join"],
        },
        Case {
            id: "e_zigzag_exchange_eq_type_eq_limit500",
            query: exchange_and_kind(500),
            expected: brute_force(docs, is_exchange_and_kind, by_name_asc, 500),
            plan_must_contain: &["zig-zag join"],
        },
    ]
}

/// Runs every case once and checks plan, count and order; panics on any difference.
fn check_cases(store: &MemStore, catalog: &IndexCatalog, cases: &[Case]) {
    for c in cases {
        let limit = c.query.limit.unwrap() as usize;
        assert_eq!(
            c.expected.len(),
            limit,
            "{}: the data has too few matches",
            c.id
        );
        let p = plan(catalog, &validate(&c.query).unwrap())
            .unwrap()
            .to_string();
        for needle in c.plan_must_contain {
            assert!(p.contains(needle), "{}: plan lacks `{needle}`:\n{p}", c.id);
        }
        let counting = Metered::new(store);
        let got = block_on_ready(run_query(&counting, catalog, &c.query)).unwrap();
        assert_eq!(got.len(), limit, "{}: result count", c.id);
        assert_eq!(names(&got), names(&c.expected), "{}: result order", c.id);
        assert_eq!(got, c.expected, "{}: result documents", c.id);
        eprintln!(
            "{}: {} results; store calls: {} scans returning {} rows, {} gets; plan:\n{p}",
            c.id,
            got.len(),
            counting.scans(),
            counting.rows(),
            counting.gets()
        );
    }
}

/// The single index range the plan of `query` scans (for the raw-scan baseline).
fn index_range(catalog: &IndexCatalog, query: &Query) -> (IndexDef, KeyRange, bool) {
    let p = plan(catalog, &validate(query).unwrap()).unwrap();
    assert_eq!(p.branches.len(), 1);
    match &p.branches[0].access {
        Access::Index { def, ranges } => {
            assert_eq!(ranges.len(), 1);
            (def.clone(), ranges[0].clone(), p.branches[0].reverse)
        }
        other => panic!("expected one index scan, got {other:?}"),
    }
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .without_plots()
}

fn bench_core(c: &mut Criterion) {
    let seed_catalog = catalog(SEED_SHARDED_INDEXES);
    let bench_catalog = catalog(BENCH_INDEXES);
    let docs = generate(N_DOCS, 0x5EED_0000_0000_0000);
    let entries_per_doc = |cat: &IndexCatalog| document_entries(cat, &docs[0]).len();
    eprintln!(
        "index entries per document: seed-sharded catalog {}, bench catalog {}",
        entries_per_doc(&seed_catalog),
        entries_per_doc(&bench_catalog)
    );

    // ---- Indexing throughput ----
    {
        let mut g = c.benchmark_group("index");
        g.throughput(Throughput::Elements(ENCODE_BATCH as u64));
        for (label, cat) in [
            ("seed_sharded_catalog", &seed_catalog),
            ("bench_catalog", &bench_catalog),
        ] {
            let mut start = 0;
            g.bench_function(format!("encode_and_entries/{label}"), |b| {
                b.iter(|| {
                    let chunk = &docs[start..start + ENCODE_BATCH];
                    start = (start + ENCODE_BATCH) % (N_DOCS - ENCODE_BATCH);
                    for d in chunk {
                        black_box(encode_document(d).unwrap());
                        black_box(document_entries(cat, d));
                    }
                })
            });
        }
        // A bulk load of 10,000 new documents into an empty store; the store is dropped
        // outside the timed section.
        g.throughput(Throughput::Elements(BULK as u64));
        g.sampling_mode(SamplingMode::Flat);
        for (label, cat) in [
            ("seed_sharded_catalog", &seed_catalog),
            ("bench_catalog", &bench_catalog),
        ] {
            g.bench_function(format!("write_document_bulk_10k_into_empty/{label}"), |b| {
                b.iter_batched(
                    MemStore::new,
                    |mut store| {
                        for d in &docs[..BULK] {
                            store.write_document(cat, &d.name, Some(d)).unwrap();
                        }
                        store
                    },
                    BatchSize::PerIteration,
                )
            });
        }
        g.finish();
    }

    // ---- Query latency over 100,000 documents ----
    let store = load(&bench_catalog, &docs);
    eprintln!(
        "query store: {} documents, {} index entries",
        store.documents.len(),
        store.index.len()
    );
    let cases = cases(&docs);
    check_cases(&store, &bench_catalog, &cases);

    // Point reads: 1,024 names spread over the collection, cycled.
    let mut rng = Rng(7);
    let point_names: Vec<DocumentName> = (0..1024)
        .map(|_| docs[rng.below(N_DOCS as u64) as usize].name.clone())
        .collect();
    for n in &point_names {
        let got = block_on_ready(fetch(&store, n))
            .unwrap()
            .expect("the document exists");
        assert_eq!(&got.name, n);
    }
    let point_keys: Vec<Vec<u8>> = point_names.iter().map(document_key).collect();

    {
        let mut g = c.benchmark_group("query");
        for case in &cases {
            g.throughput(Throughput::Elements(case.expected.len() as u64));
            g.bench_function(case.id, |b| {
                b.iter(|| {
                    block_on_ready(run_query(&store, &bench_catalog, black_box(&case.query)))
                        .unwrap()
                })
            });
        }
        g.throughput(Throughput::Elements(1));
        let mut i = 0;
        g.bench_function("f_point_read_fetch", |b| {
            b.iter(|| {
                i = (i + 1) % point_names.len();
                block_on_ready(fetch(&store, black_box(&point_names[i]))).unwrap()
            })
        });
        g.finish();
    }

    // ---- Baselines ----
    {
        let mut g = c.benchmark_group("baseline");
        let q = kind_by_time(5);
        let expected = &cases[0].expected;
        let brute = || {
            brute_force(
                &docs,
                |d| str_field(d, "instrumentType") == KIND,
                by_timestamp_desc,
                5,
            )
        };
        assert_eq!(&brute(), expected);
        g.throughput(Throughput::Elements(5));
        g.bench_function("brute_force_filter_sort_take5_vec_100k", |b| {
            b.iter(|| black_box(brute()))
        });

        // The keys query (a)/(b) reads, straight from the BTreeMap, in the plan's direction
        // (forward: the composite stores `timestamp` descending): the floor of any scan.
        let (def, range, reverse) = index_range(&bench_catalog, &q);
        assert!(
            !reverse,
            "the timestamp-descending composite is read forward"
        );
        let raw_scan = |n: usize| -> usize {
            let end = match &range.end {
                Some(e) => std::ops::Bound::Excluded(e.as_slice()),
                None => std::ops::Bound::Unbounded,
            };
            store
                .index
                .range::<[u8], _>((std::ops::Bound::Included(range.start.as_slice()), end))
                .take(n)
                .map(|(k, _)| black_box(k).len())
                .sum()
        };
        // The first keys of the range are exactly query (b)'s answer, in order.
        let raw_names: Vec<DocumentName> = store
            .index
            .range(range.start.clone()..)
            .take(500)
            .map(|(k, _)| decode_entry(&def, k).unwrap().name)
            .collect();
        assert_eq!(raw_names, names(&cases[1].expected));
        assert!(raw_scan(500) > 0);
        for n in [5usize, 500] {
            g.throughput(Throughput::Elements(n as u64));
            g.bench_function(format!("btreemap_range_scan_{n}_keys"), |b| {
                b.iter(|| raw_scan(black_box(n)))
            });
        }
        g.throughput(Throughput::Elements(1));
        let mut i = 0;
        g.bench_function("btreemap_get_document_bytes", |b| {
            b.iter(|| {
                i = (i + 1) % point_keys.len();
                store
                    .documents
                    .get(black_box(&point_keys[i]))
                    .map(|v| v.len())
            })
        });
        g.finish();
    }

    // ---- Updates in place: the seed's workload (instrument price ticks) ----
    // Runs last because it mutates the query store. Each update replaces one existing
    // instrument with a new price and a newer timestamp: decode of the old version, entries
    // of both versions, diff, apply.
    {
        let mut store = store;
        let mut g = c.benchmark_group("index");
        g.throughput(Throughput::Elements(1));
        let mut rng = Rng(11);
        let mut now = T0 + SPAN_MS;
        g.bench_function("write_document_update_in_100k/bench_catalog", |b| {
            b.iter_batched(
                || {
                    let old = &docs[rng.below(N_DOCS as u64) as usize];
                    now += 1;
                    let mut fields = (*old.fields).clone();
                    if let Some(Value::Map(p)) = fields.get_mut("price") {
                        p.insert("micros".into(), Value::Integer(rng.below(1 << 40) as i64));
                    }
                    fields.insert(
                        "timestamp".into(),
                        Timestamp::from_millis(now).unwrap().into(),
                    );
                    Document::new(old.name.clone(), fields)
                },
                |d| {
                    store
                        .write_document(&bench_catalog, &d.name, Some(&d))
                        .unwrap()
                },
                BatchSize::SmallInput,
            )
        });
        g.finish();
    }
}

/// A document of the `view` group: a score to order by.
fn scored(id: usize, score: i64) -> Document {
    let mut m = Map::new();
    m.insert("score".into(), Value::Integer(score));
    m.insert("label".into(), Value::String(format!("item {id}")));
    let mut d = Document::new(collection().doc(&format!("v{id:07}")).unwrap(), m);
    d.create_version = 1;
    d.update_version = 1;
    d
}

/// One change to an unlimited view ordered by a field, at several result sizes: a random
/// document of the result gets a new score (it moves; a `Modified` with both indexes).
fn bench_view(c: &mut Criterion) {
    let mut g = c.benchmark_group("view");
    g.throughput(Throughput::Elements(1));
    for n in [1_000usize, 10_000, 100_000] {
        let query =
            validate(&Query::collection(collection()).order_by("score", Descending)).unwrap();
        let mut rng = Rng(0x71E3 + n as u64);
        let mut docs: Vec<Document> = (0..n)
            .map(|i| scored(i, rng.below(1 << 20) as i64))
            .collect();
        docs.sort_by(|a, b| {
            let s = |d: &Document| match d.fields.get("score") {
                Some(Value::Integer(i)) => *i,
                _ => 0,
            };
            s(b).cmp(&s(a)).then_with(|| a.name.cmp(&b.name))
        });
        let mut view = View::new(query, docs);
        assert_eq!(view.len(), n);
        let mut version = 1;
        g.bench_function(format!("one_change/{n}"), |b| {
            b.iter(|| {
                version += 1;
                let id = rng.below(n as u64) as usize;
                let mut d = scored(id, rng.below(1 << 20) as i64);
                d.update_version = version;
                let u = view.apply(&d.name, Some(&d));
                assert_eq!(u.changes.len(), 1);
                black_box(u)
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_view, bench_core
}
criterion_main!(benches);
