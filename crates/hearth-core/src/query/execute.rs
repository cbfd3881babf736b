//! The executor: runs a [`Plan`] over any [`KvRead`] store, streaming.
//!
//! Every branch reads its ranges in batches that start at the size the limit needs and grow
//! geometrically, so `limit 5` touches a handful of keys however large the collection.
//! Candidates are fetched and re-checked by the [`Matcher`] (residual filters, strict
//! equality for `in`, cursors), then branches are merged by sort key with duplicates dropped.
//!
//! Architecture invariant: the executor holds at most one batch per scan plus the results it
//! returns; it never collects candidates in order to sort them.

use std::collections::VecDeque;

use super::matcher::Matcher;
use super::model::{Aggregation, LimitType, Query};
use super::plan::{plan, Access, Branch, JoinScan, Plan};
use super::validate::{validate, validate_aggregations, QueryError};
use crate::document::{get_path, Document};
use crate::encoding::document::{decode_document, encoded_size};
use crate::encoding::key::{prefix_end, split_kinds};
use crate::encoding::varint::len as varint_len;
use crate::index::def::IndexCatalog;
use crate::index::keys::{decode_document_key, decode_entry, document_key};
use crate::kv::{KeyRange, KvError, KvRead, Row, Table};
use crate::path::DocumentName;
use crate::value::{Map, Value};

/// Largest batch one scan request asks for.
const MAX_BATCH: usize = 2048;

fn corrupt(e: impl std::fmt::Display) -> QueryError {
    QueryError::Corrupt(e.to_string())
}

/// Reads a list of ranges in order, in growing batches.
struct RangeScanner {
    table: Table,
    ranges: VecDeque<KeyRange>,
    reverse: bool,
    buf: VecDeque<Row>,
    batch: usize,
}

impl RangeScanner {
    fn new(table: Table, mut ranges: Vec<KeyRange>, reverse: bool, batch: usize) -> RangeScanner {
        if reverse {
            ranges.reverse();
        }
        RangeScanner {
            table,
            ranges: ranges.into(),
            reverse,
            buf: VecDeque::new(),
            batch,
        }
    }

    async fn peek<K: KvRead>(&mut self, kv: &K) -> Result<Option<&Row>, QueryError> {
        while self.buf.is_empty() {
            let Some(range) = self.ranges.front_mut() else {
                return Ok(None);
            };
            if range.is_empty() {
                self.ranges.pop_front();
                continue;
            }
            let rows = kv.scan(self.table, range, self.reverse, self.batch).await?;
            if rows.len() < self.batch {
                self.ranges.pop_front();
            } else {
                let last = &rows[rows.len() - 1].0;
                if self.reverse {
                    range.end = Some(last.clone());
                } else {
                    let mut next = last.clone();
                    next.push(0);
                    range.start = next;
                }
            }
            self.batch = (self.batch * 2).min(MAX_BATCH);
            self.buf.extend(rows);
        }
        Ok(self.buf.front())
    }

    fn pop(&mut self) -> Option<Row> {
        self.buf.pop_front()
    }

    /// Skips to the first key at or past `target` in scan order (forward: `key >= target`;
    /// backward: keys below `prefix_end(target)`, i.e. at or before every key extending it).
    fn seek(&mut self, target: &[u8]) {
        if self.reverse {
            let end = prefix_end(target);
            while let Some((k, _)) = self.buf.front() {
                if end.as_ref().is_some_and(|e| k >= e) {
                    self.buf.pop_front();
                } else {
                    return;
                }
            }
            if let (Some(range), Some(end)) = (self.ranges.front_mut(), end) {
                if range.end.as_ref().is_none_or(|e| end < *e) {
                    range.end = Some(end);
                }
            }
        } else {
            while let Some((k, _)) = self.buf.front() {
                if k.as_slice() < target {
                    self.buf.pop_front();
                } else {
                    return;
                }
            }
            if let Some(range) = self.ranges.front_mut() {
                if range.start.as_slice() < target {
                    range.start = target.to_vec();
                }
            }
        }
    }
}

/// The shared suffix of a join input's key (values after the prefix, then the name).
fn join_key<'k>(scan: &JoinScan, key: &'k [u8]) -> Result<&'k [u8], QueryError> {
    let (ordered, _) = split_kinds(key).map_err(corrupt)?;
    ordered
        .get(scan.prefix.len()..)
        .ok_or_else(|| corrupt("index key shorter than its prefix"))
}

enum Source {
    Documents(RangeScanner),
    Index(crate::index::def::IndexDef, RangeScanner),
    ZigZag(Vec<(JoinScan, RangeScanner)>),
}

/// One branch: yields its matching documents in query (or reversed) order.
struct BranchStream {
    source: Source,
    /// Documents of index rows already read, fetched together (in order), with their entries.
    prefetched: VecDeque<(Vec<u8>, Option<Document>)>,
}

impl BranchStream {
    fn new(branch: &Branch, batch: usize) -> BranchStream {
        let source = match &branch.access {
            Access::Documents { ranges } => Source::Documents(RangeScanner::new(
                Table::Documents,
                ranges.clone(),
                branch.reverse,
                batch,
            )),
            Access::Index { def, ranges } => Source::Index(
                def.clone(),
                RangeScanner::new(Table::Index, ranges.clone(), branch.reverse, batch),
            ),
            Access::ZigZag { scans } => Source::ZigZag(
                scans
                    .iter()
                    .map(|s| {
                        (
                            s.clone(),
                            RangeScanner::new(
                                Table::Index,
                                vec![s.range.clone()],
                                branch.reverse,
                                batch,
                            ),
                        )
                    })
                    .collect(),
            ),
        };
        BranchStream {
            source,
            prefetched: VecDeque::new(),
        }
    }

    /// The next candidate document, not yet matched.
    async fn next_candidate<K: KvRead>(&mut self, kv: &K) -> Result<Option<Document>, QueryError> {
        let name = match &mut self.source {
            Source::Documents(scanner) => {
                let Some((key, bytes)) = scanner.peek(kv).await?.cloned() else {
                    return Ok(None);
                };
                scanner.pop();
                let doc = decode_document(&bytes).map_err(corrupt)?;
                if decode_document_key(&key).map_err(corrupt)? != doc.name {
                    return Err(corrupt("document stored under another name's key"));
                }
                return Ok(Some(doc));
            }
            Source::Index(def, scanner) => {
                if self.prefetched.is_empty() {
                    // Fetch the documents of every index row read so far in one request
                    // batch: a store like IndexedDB overlaps them.
                    if scanner.peek(kv).await?.is_none() {
                        return Ok(None);
                    }
                    let mut entries = Vec::with_capacity(scanner.buf.len());
                    let mut keys = Vec::with_capacity(scanner.buf.len());
                    while let Some((entry, doc_key)) = scanner.pop() {
                        keys.push(if doc_key.is_empty() {
                            document_key(&decode_entry(def, &entry).map_err(corrupt)?.name)
                        } else {
                            doc_key
                        });
                        entries.push(entry);
                    }
                    let docs = kv.get_documents(&keys).await?;
                    if docs.len() != keys.len() {
                        return Err(QueryError::Storage(KvError(format!(
                            "{} documents read, {} answered",
                            keys.len(),
                            docs.len()
                        ))));
                    }
                    for (entry, doc) in entries.into_iter().zip(docs) {
                        let doc = doc.transpose().map_err(corrupt)?;
                        self.prefetched.push_back((entry, doc));
                    }
                }
                let Some((entry, doc)) = self.prefetched.pop_front() else {
                    // Rows were read, so names were: a store that answers none is broken.
                    return Err(QueryError::Storage(KvError(
                        "the store answered no documents for index rows".into(),
                    )));
                };
                return match doc {
                    Some(doc) => Ok(Some(doc)),
                    None => Err(corrupt(match decode_entry(def, &entry) {
                        Ok(e) => format!("index entry for `{}` but no such document", e.name),
                        Err(e) => e.to_string(),
                    })),
                };
            }
            Source::ZigZag(scans) => match zigzag_next(kv, scans).await? {
                Some(name) => name,
                None => return Ok(None),
            },
        };
        fetch(kv, &name)
            .await?
            .map(Some)
            .ok_or_else(|| corrupt(format!("index entry for `{name}` but no such document")))
    }

    async fn next_match<K: KvRead>(
        &mut self,
        kv: &K,
        matcher: &Matcher,
    ) -> Result<Option<Document>, QueryError> {
        while let Some(doc) = self.next_candidate(kv).await? {
            if matcher.matches(&doc) {
                return Ok(Some(doc));
            }
        }
        Ok(None)
    }
}

/// Advances every join input to the next shared suffix; returns its document name.
async fn zigzag_next<K: KvRead>(
    kv: &K,
    scans: &mut [(JoinScan, RangeScanner)],
) -> Result<Option<DocumentName>, QueryError> {
    let n = scans.len();
    let Some((first_key, _)) = scans[0].1.peek(kv).await? else {
        return Ok(None);
    };
    let mut target = join_key(&scans[0].0, first_key)?.to_vec();
    let mut agreed = 1;
    let mut i = 1 % n;
    while agreed < n {
        let (scan, scanner) = &mut scans[i];
        let mut abs = scan.prefix.clone();
        abs.extend_from_slice(&target);
        scanner.seek(&abs);
        let Some((key, _)) = scanner.peek(kv).await? else {
            return Ok(None);
        };
        let k = join_key(scan, key)?;
        if k == target.as_slice() {
            agreed += 1;
        } else {
            target = k.to_vec();
            agreed = 1;
        }
        i = (i + 1) % n;
    }
    let (scan, scanner) = &mut scans[0];
    let key = scanner.peek(kv).await?.expect("agreed on a key").0.clone();
    let name = decode_entry(&scan.def, &key).map_err(corrupt)?.name;
    for (_, s) in scans.iter_mut() {
        s.pop();
    }
    Ok(Some(name))
}

/// Reads one document by name.
pub async fn fetch<K: KvRead>(kv: &K, name: &DocumentName) -> Result<Option<Document>, QueryError> {
    match kv.get(Table::Documents, &document_key(name)).await? {
        None => Ok(None),
        Some(bytes) => decode_document(&bytes).map(Some).map_err(corrupt),
    }
}

/// All branches merged in order, without duplicates.
struct Merged {
    branches: Vec<BranchStream>,
    heads: Vec<Option<(Vec<u8>, Document)>>,
    primed: bool,
    descending: bool,
    last: Option<Vec<u8>>,
}

impl Merged {
    fn new(plan: &Plan, batch: usize) -> Merged {
        let branches: Vec<BranchStream> = plan
            .branches
            .iter()
            .map(|b| BranchStream::new(b, batch))
            .collect();
        let heads = branches.iter().map(|_| None).collect();
        Merged {
            branches,
            heads,
            primed: false,
            descending: plan.reversed,
            last: None,
        }
    }

    async fn next<K: KvRead>(
        &mut self,
        kv: &K,
        matcher: &Matcher,
    ) -> Result<Option<Document>, QueryError> {
        if self.branches.len() == 1 {
            return self.branches[0].next_match(kv, matcher).await;
        }
        if !self.primed {
            for i in 0..self.branches.len() {
                self.refill(i, kv, matcher).await?;
            }
            self.primed = true;
        }
        loop {
            let mut best: Option<usize> = None;
            for (i, h) in self.heads.iter().enumerate() {
                let Some((k, _)) = h else { continue };
                let better = match best {
                    None => true,
                    Some(b) => {
                        let bk = &self.heads[b].as_ref().expect("best has a head").0;
                        if self.descending {
                            k > bk
                        } else {
                            k < bk
                        }
                    }
                };
                if better {
                    best = Some(i);
                }
            }
            let Some(b) = best else { return Ok(None) };
            let (key, doc) = self.heads[b].take().expect("best has a head");
            self.refill(b, kv, matcher).await?;
            if self.last.as_ref() == Some(&key) {
                continue;
            }
            self.last = Some(key);
            return Ok(Some(doc));
        }
    }

    async fn refill<K: KvRead>(
        &mut self,
        i: usize,
        kv: &K,
        matcher: &Matcher,
    ) -> Result<(), QueryError> {
        self.heads[i] = self.branches[i]
            .next_match(kv, matcher)
            .await?
            .map(|d| (matcher.sort_key(&d), d));
        Ok(())
    }
}

/// Validates, plans and runs `query`; returns the result documents in query order.
pub async fn run_query<K: KvRead>(
    kv: &K,
    catalog: &IndexCatalog,
    query: &Query,
) -> Result<Vec<Document>, QueryError> {
    let q = validate(query)?;
    let p = plan(catalog, &q)?;
    execute(kv, &q, &p).await
}

/// Runs a plan of a validated query.
pub async fn execute<K: KvRead>(kv: &K, q: &Query, p: &Plan) -> Result<Vec<Document>, QueryError> {
    execute_within(kv, q, p, usize::MAX).await
}

/// Validates, plans and runs `query` like [`run_query`], refusing with `resource-exhausted`
/// as soon as the documents gathered would take more than `max_bytes` in a reply (each
/// counted by [`wire_size`], after projection): a result too large to send is never
/// collected whole.
pub async fn run_query_within<K: KvRead>(
    kv: &K,
    catalog: &IndexCatalog,
    query: &Query,
    max_bytes: usize,
) -> Result<Vec<Document>, QueryError> {
    let q = validate(query)?;
    let p = plan(catalog, &q)?;
    execute_within(kv, &q, &p, max_bytes).await
}

/// The bytes `doc` takes as one `document` of a reply frame: its length as a varint, then
/// its document encoding (`docs/protocol.md`), computed without encoding it.
pub fn wire_size(doc: &Document) -> usize {
    let segments = doc.name.segments();
    let name = varint_len(segments.len() as u64)
        + segments
            .iter()
            .map(|s| varint_len(s.len() as u64) + s.len())
            .sum::<usize>();
    let encoded = 1
        + name
        + varint_len(doc.create_version)
        + varint_len(doc.update_version)
        + encoded_size(&doc.fields);
    varint_len(encoded as u64) + encoded
}

/// [`execute`] with a budget of `max_bytes` of [`wire_size`] for the whole result.
async fn execute_within<K: KvRead>(
    kv: &K,
    q: &Query,
    p: &Plan,
    max_bytes: usize,
) -> Result<Vec<Document>, QueryError> {
    let matcher = Matcher::new(q.clone());
    let limit = q.limit.map(|n| n as u64);
    let wanted = limit.map(|l| l + q.offset);
    let batch = wanted.map_or(64, |w| (w as usize + 1).clamp(4, 512));
    let mut merged = Merged::new(p, batch);
    let mut out = Vec::new();
    let mut skipped = 0;
    let mut bytes = 0usize;
    while limit.is_none_or(|l| (out.len() as u64) < l) {
        let Some(mut doc) = merged.next(kv, &matcher).await? else {
            break;
        };
        if skipped < q.offset {
            skipped += 1;
            continue;
        }
        if let Some(fields) = &q.projection {
            doc.fields = project(&doc.fields, fields).into();
        }
        if max_bytes != usize::MAX {
            bytes = bytes.saturating_add(wire_size(&doc));
            if bytes > max_bytes {
                return Err(QueryError::ResourceExhausted(format!(
                    "the result is over {max_bytes} bytes, more than one reply frame may carry \
                     (MAX_FRAME_BYTES less the reply's header), after {} documents: add a limit \
                     or a projection (select), or page with cursors",
                    out.len()
                )));
            }
        }
        out.push(doc);
    }
    if q.limit_type == LimitType::Last {
        out.reverse();
    }
    Ok(out)
}

/// Keeps only `fields` (nested paths keep their parent maps).
pub fn project(fields: &Map, paths: &[crate::path::FieldPath]) -> Map {
    let mut out = Map::new();
    for p in paths {
        if p.is_document_id() {
            continue;
        }
        if let Some(v) = get_path(fields, p.segments()) {
            let mut cur = &mut out;
            let (last, parents) = p
                .segments()
                .split_last()
                .expect("field paths have segments");
            for s in parents {
                let entry = cur
                    .entry(s.clone())
                    .or_insert_with(|| Value::Map(Map::new()));
                let Value::Map(m) = entry else {
                    unreachable!("parents are maps")
                };
                cur = m;
            }
            cur.insert(last.clone(), v.clone());
        }
    }
    out
}

/// Runs aggregations over the query's result (its limit included). Results in `aggs` order:
/// `count` as an integer; `sum` as an integer while every summand is an integer and it fits,
/// else a double; `average` as a double, or null when no document has a numeric value.
pub async fn run_aggregation<K: KvRead>(
    kv: &K,
    catalog: &IndexCatalog,
    query: &Query,
    aggs: &[Aggregation],
) -> Result<Vec<Value>, QueryError> {
    validate_aggregations(aggs)?;
    let q = validate(query)?;
    let p = plan(catalog, &q)?;
    let matcher = Matcher::new(q.clone());
    let limit = q.limit.map(|n| n as u64);
    let batch = limit.map_or(256, |l| (l as usize + 1).clamp(4, 512));
    let mut merged = Merged::new(&p, batch);
    let mut acc: Vec<Accumulator> = aggs.iter().map(|_| Accumulator::default()).collect();
    let mut seen = 0u64;
    let mut skipped = 0;
    // `limitToLast` reads backward; its (limited) documents are summed in query order so
    // that double sums round the same way whichever direction the plan reads.
    let mut backward = Vec::new();
    loop {
        if limit.is_some_and(|l| seen >= l) {
            break;
        }
        let Some(doc) = merged.next(kv, &matcher).await? else {
            break;
        };
        if skipped < q.offset {
            skipped += 1;
            continue;
        }
        seen += 1;
        if q.limit_type == LimitType::Last {
            // Only the summed values are kept, not the documents.
            backward.push(summands(aggs, &doc));
            continue;
        }
        add_values(&mut acc, summands(aggs, &doc));
    }
    for values in backward.into_iter().rev() {
        add_values(&mut acc, values);
    }
    Ok(acc
        .iter()
        .zip(aggs)
        .map(|(a, agg)| match agg {
            Aggregation::Count => Value::Integer(seen as i64),
            Aggregation::Sum(_) => a.sum(),
            Aggregation::Average(_) => a.average(),
        })
        .collect())
}

/// The numeric value each aggregation of `aggs` takes from `doc` (none for `count`, a
/// missing field or a non-number).
fn summands(aggs: &[Aggregation], doc: &Document) -> Vec<Option<Value>> {
    aggs.iter()
        .map(|agg| match agg {
            Aggregation::Sum(f) | Aggregation::Average(f) => doc
                .field(f)
                .map(|v| v.into_owned())
                .filter(|v| matches!(v, Value::Integer(_) | Value::Double(_))),
            Aggregation::Count => None,
        })
        .collect()
}

fn add_values(acc: &mut [Accumulator], values: Vec<Option<Value>>) {
    for (a, v) in acc.iter_mut().zip(values) {
        if let Some(v) = v {
            a.add(&v);
        }
    }
}

#[derive(Default)]
struct Accumulator {
    int_sum: Option<i64>,
    double_sum: f64,
    any_double: bool,
    count: u64,
}

impl Accumulator {
    fn add(&mut self, v: &Value) {
        match v {
            Value::Integer(i) => {
                self.count += 1;
                self.double_sum += *i as f64;
                if !self.any_double {
                    self.int_sum = self.int_sum.unwrap_or(0).checked_add(*i);
                    if self.int_sum.is_none() {
                        self.any_double = true;
                    }
                }
            }
            Value::Double(d) => {
                self.count += 1;
                self.double_sum += d;
                self.any_double = true;
            }
            _ => {}
        }
    }

    fn sum(&self) -> Value {
        if self.any_double {
            Value::Double(self.double_sum)
        } else {
            Value::Integer(self.int_sum.unwrap_or(0))
        }
    }

    fn average(&self) -> Value {
        if self.count == 0 {
            Value::Null
        } else {
            Value::Double(self.double_sum / self.count as f64)
        }
    }
}
