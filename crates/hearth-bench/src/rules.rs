//! `rules`: the cost of security rules decisions, in this process (no relay): each decision
//! the relay makes per write (`create` of one document) and per listen start or re-proof
//! (a list proof), timed one by one, for a rule that allows everything (the baseline: the
//! matching and the call alone), the paper's Figure 3 rules, and a rule with two `get()`
//! calls read from an in-memory store. p50/p99 in microseconds, and each as a ratio to the
//! baseline. The end-to-end cost shows in `ycsb`, `commit` and `fanout` run with
//! `--relay-arg=--rules --relay-arg=FILE` beside the same runs without.

use std::time::Instant;

use anyhow::{anyhow, Result};
use hearth_core::document::Document;
use hearth_core::path::{CollectionPath, DocumentName};
use hearth_core::query::model::{Operator, Query};
use hearth_core::value::{Map, Timestamp, Value};
use hearth_rules::{Auth, Documents, Method, Request, Ruleset};
use serde_json::json;

use crate::cli::RulesArgs;
use crate::measure::{emit, note, round3};

const BASELINE: &str = "rules_version = '2';
service cloud.firestore { match /databases/{database}/documents {
  match /restaurants/{r}/ratings/{s} { allow read, write: if true; }
} }";

const FIGURE_3: &str = "rules_version = '2';
service cloud.firestore { match /databases/{database}/documents {
  match /restaurants/{r}/ratings/{s} {
    allow read: if request.auth != null;
    allow create: if request.auth != null &&
      request.auth.uid ==
      request.resource.data.userId;
  }
} }";

const TWO_GETS: &str = "rules_version = '2';
service cloud.firestore { match /databases/{database}/documents {
  match /restaurants/{r}/ratings/{s} {
    allow read: if get(/databases/$(database)/documents/users/$(request.auth.uid)).data.active == true;
    allow create: if get(/databases/$(database)/documents/users/$(request.auth.uid)).data.active == true
      && get(/databases/$(database)/documents/restaurants/$(r)).data.open == true
      && request.resource.data.userId == request.auth.uid;
  }
} }";

fn document(path: &str, fields: &[(&str, Value)]) -> Result<Document> {
    let name = DocumentName::parse(path).map_err(|e| anyhow!("{e}"))?;
    let fields: Map = fields
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect();
    Ok(Document::new(name, fields))
}

/// Nanosecond timings as microsecond percentiles.
fn micros(mut ns: Vec<u64>) -> serde_json::Value {
    ns.sort_unstable();
    let n = ns.len().max(1);
    let p = |q: f64| {
        let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
        round3(ns.get(rank - 1).copied().unwrap_or(0) as f64 / 1000.0)
    };
    json!({ "n": ns.len(), "p50_us": p(0.5), "p99_us": p(0.99) })
}

pub(crate) fn rules(a: RulesArgs) -> Result<()> {
    // The documents the `get()` calls read.
    let store = Documents::of([
        document("users/u1", &[("active", Value::Boolean(true))])?,
        document("restaurants/one", &[("open", Value::Boolean(true))])?,
    ]);
    let rating = document(
        "restaurants/one/ratings/r1",
        &[
            ("userId", Value::String("u1".into())),
            ("rating", Value::Integer(5)),
            ("text", Value::String("Lovely".into())),
        ],
    )?;
    let auth = Auth {
        uid: "u1".into(),
        token: [("sub".to_owned(), Value::String("u1".into()))]
            .into_iter()
            .collect(),
    };
    let time = Timestamp::new(1_800_000_000, 0).map_err(|e| anyhow!("{e}"))?;
    let query = Query::collection(
        CollectionPath::parse("restaurants/one/ratings").map_err(|e| anyhow!("{e}"))?,
    )
    .where_("rating", Operator::GreaterThanOrEqual, Value::Integer(4));
    let mut baseline: Option<(f64, f64)> = None;
    for (name, text) in [
        ("allow-all", BASELINE),
        ("figure-3", FIGURE_3),
        ("two-gets", TWO_GETS),
    ] {
        let rules = Ruleset::parse(name, text).map_err(|e| anyhow!("{e}"))?;
        let create = Request {
            database: "bench",
            method: Method::Create,
            path: &rating.name,
            auth: Some(&auth),
            time,
            resource: None,
            new_resource: Some(&rating),
        };
        let mut writes = Vec::with_capacity(a.iterations);
        let mut lists = Vec::with_capacity(a.iterations);
        for _ in 0..a.iterations {
            let t = Instant::now();
            let d = rules.evaluate(&create, &store, hearth_rules::DOCUMENT_READS_SINGLE);
            writes.push(t.elapsed().as_nanos() as u64);
            if !d.allowed {
                return Err(anyhow!("{name}: the create was denied: {}", d.explanation));
            }
            let t = Instant::now();
            let d = rules.check_list("bench", &query, Some(&auth), time, &store);
            lists.push(t.elapsed().as_nanos() as u64);
            if !d.allowed {
                return Err(anyhow!("{name}: the list was denied: {}", d.explanation));
            }
        }
        let (w, l) = (micros(writes), micros(lists));
        let p50 = |v: &serde_json::Value| v["p50_us"].as_f64().unwrap_or(0.0);
        let base = *baseline.get_or_insert((p50(&w), p50(&l)));
        let ratio = |x: f64, b: f64| if b > 0.0 { round3(x / b) } else { 0.0 };
        note(format!("rules {name}: create {w}, list {l}"));
        emit(json!({
            "bench": "rules",
            "rules": name,
            "create": w,
            "list": l,
            "create_p50_vs_allow_all": ratio(p50(&w), base.0),
            "list_p50_vs_allow_all": ratio(p50(&l), base.1),
        }));
    }
    Ok(())
}
