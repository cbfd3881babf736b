//! Soundness of the list proof (rules are not filters): whenever `Ruleset::check_list`
//! allows a query, the `list` rule must allow every document the query matches, each
//! evaluated on its own (`Ruleset::evaluate` with `Method::List`, the document as
//! `resource`, the same auth and time). Random rules over a few fields (`a`, `b`, `tags`,
//! `m.x`), random documents `c/d0`..`c/d5` and random queries on `c` (filters, `or`,
//! `orderBy`, `limit`; only those `validate` accepts) are tried; the query engine's reference semantics
//! (`hearth_core::query::matcher::Matcher`) decide which documents match.
//!
//! A finding (a proved query with a matching document its rule denies) is shrunk to a
//! smaller rule, query and document that still fail, printed with its seed, and fails the
//! test. `HEARTH_SOUNDNESS_SEED=<seed>` replays one case; `HEARTH_SOUNDNESS_CASES=<n>` sets
//! how many cases a run tries. Run with `-- --nocapture` to see the counts.
//!
//! The regression tests at the end are the smallest case of each kind of unsoundness the
//! property found in the proof as it was first run (each failed then).

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::LazyLock;

use hearth_core::document::Document;
use hearth_core::encoding::key::Direction;
use hearth_core::path::{CollectionPath, DocumentName};
use hearth_core::query::matcher::{dir_name, Matcher};
use hearth_core::query::model::{FieldFilter, Filter, Operator, Query};
use hearth_core::query::validate::validate;
use hearth_core::value::{Map, Timestamp, Value};
use hearth_rules::{Auth, Documents, Method, Request, Ruleset};

const DATABASE: &str = "(default)";
/// Cases a run tries unless `HEARTH_SOUNDNESS_CASES` says otherwise (a few seconds in a
/// debug build).
const DEFAULT_CASES: u64 = 40_000;
/// The seed of case `i` is `BASE_SEED + i`.
const BASE_SEED: u64 = 0x4845_4152_5448_0000;
/// Findings shrunk and sorted by kind in one run (the rest are only counted).
const MAX_SHRUNK: u64 = 2000;

/// SplitMix64: a small seeded generator, so a seed replays the same case on any build.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True `percent` times in a hundred.
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// A rule condition: atoms (rules source text) under `!`, `&&` and `||`, kept as a tree so
/// that a finding can be shrunk.
#[derive(Clone, Debug, PartialEq)]
enum Cond {
    Atom(String),
    Not(Box<Cond>),
    And(Box<Cond>, Box<Cond>),
    Or(Box<Cond>, Box<Cond>),
}

impl Cond {
    fn text(&self) -> String {
        match self {
            Cond::Atom(a) => a.clone(),
            Cond::Not(a) => format!("!({})", a.text()),
            Cond::And(a, b) => format!("({}) && ({})", a.text(), b.text()),
            Cond::Or(a, b) => format!("({}) || ({})", a.text(), b.text()),
        }
    }

    /// Conditions one step smaller (a child in place of its parent, or a smaller child).
    fn smaller(&self) -> Vec<Cond> {
        let mut out = Vec::new();
        match self {
            Cond::Atom(_) => {}
            Cond::Not(a) => {
                if let Cond::Not(inner) = &**a {
                    out.push((**inner).clone());
                }
                out.push((**a).clone());
                out.extend(a.smaller().into_iter().map(|x| Cond::Not(Box::new(x))));
            }
            Cond::And(a, b) | Cond::Or(a, b) => {
                let and = matches!(self, Cond::And(..));
                let join = |x: Cond, y: Cond| {
                    if and {
                        Cond::And(Box::new(x), Box::new(y))
                    } else {
                        Cond::Or(Box::new(x), Box::new(y))
                    }
                };
                out.push((**a).clone());
                out.push((**b).clone());
                out.extend(a.smaller().into_iter().map(|x| join(x, (**b).clone())));
                out.extend(b.smaller().into_iter().map(|y| join((**a).clone(), y)));
            }
        }
        out
    }
}

/// The rules file allowing `list` on `c` when `cond` holds.
fn rules_source(cond: &Cond) -> String {
    format!(
        "rules_version = '2';\nservice cloud.firestore {{ match /databases/{{database}}/documents {{ match /c/{{id}} {{ allow list: if {}; }} }} }}",
        cond.text()
    )
}

/// Fields the rules read (rules text, query field path).
const FIELDS: [(&str, &str); 4] = [
    ("resource.data.a", "a"),
    ("resource.data.b", "b"),
    ("resource.data.m.x", "m.x"),
    ("resource.data.tags", "tags"),
];

/// Literals the rules compare fields with (rules text, value).
fn literals() -> Vec<(&'static str, Value)> {
    let s = |x: &str| Value::String(x.to_owned());
    vec![
        ("1", Value::Integer(1)),
        ("0", Value::Integer(0)),
        ("2", Value::Integer(2)),
        ("-1", Value::Integer(-1)),
        ("1.0", Value::Double(1.0)),
        ("0.0", Value::Double(0.0)),
        ("-0.0", Value::Double(-0.0)),
        ("0.5", Value::Double(0.5)),
        ("'x'", s("x")),
        ("'alice'", s("alice")),
        ("''", s("")),
        ("null", Value::Null),
        ("true", Value::Boolean(true)),
    ]
}

/// What a rule compares: (query field, value), for queries and documents to aim at.
type Hints = Vec<(&'static str, Value)>;

/// Atoms that compare nothing with a literal.
const FIXED_ATOMS: [&str; 20] = [
    "resource.data.a == resource.data.b",
    "resource.data.a == resource.data.a",
    "resource.data.a in resource.data.tags",
    "resource.data.keys().hasAll(['a'])",
    "resource.data.keys().hasAny(['a', 'b'])",
    "resource.data.keys().hasOnly(['a', 'b', 'm', 'tags'])",
    "resource.data.m.keys().hasOnly(['x'])",
    "resource.data.size() > 1",
    "resource.data.tags.size() > 0",
    "resource.data.tags.hasAny(['alice'])",
    "resource.data.get('a', null) == null",
    "resource.data.get('a', 1) == 1",
    "resource.data.m.get('y', 1) == 1",
    "(resource.data.a == 1 ? resource.data.b == 1 : true)",
    "resource.id == 'd1'",
    "resource.id != 'd1'",
    "resource.data != {}",
    "resource.data == {}",
    "request.auth.uid != resource.data.b",
    "request.auth != null",
];

/// One comparison, presence, type or literal test over the document.
fn random_atom(rng: &mut Rng, hints: &mut Hints) -> String {
    let (f, field) = *rng.pick(&FIELDS);
    let literals = literals();
    let (l1, v1) = rng.pick(&literals).clone();
    let (l2, v2) = rng.pick(&literals).clone();
    let eq = *rng.pick(&["==", "!="]);
    let mut hint = |v: Value| hints.push((field, v));
    match rng.below(14) {
        0..=2 => {
            hint(v1);
            format!("{f} {} {l1}", rng.pick(&["==", "!=", "<", "<=", ">", ">="]))
        }
        3 => {
            hint(v1);
            format!("{l1} {} {f}", rng.pick(&["==", "!=", "<", ">="]))
        }
        4 => {
            let key = rng.pick(&["a", "b", "tags", "m", "__name__"]);
            format!("'{key}' in resource.data")
        }
        5 => format!("'{}' in resource.data.m", rng.pick(&["x", "y"])),
        6 => {
            hint(v1);
            let ty = rng.pick(&[
                "int", "float", "number", "string", "list", "map", "null", "bool",
            ]);
            format!("{f} is {ty}")
        }
        7 => {
            hint(v1);
            format!("[{f}] {eq} [{l1}]")
        }
        8 => {
            hint(v1);
            format!("{{'k': {f}}} {eq} {{'k': {l1}}}")
        }
        9 => {
            hint(v1);
            hint(v2);
            format!("{f} in [{l1}, {l2}]")
        }
        10 => {
            hints.push(("m.x", v1));
            format!("resource.data.m {eq} {{'x': {l1}}}")
        }
        11 => {
            let alice = Value::String("alice".into());
            hints.push(("tags", alice.clone()));
            hints.push(("b", alice));
            (*rng.pick(&[
                "request.auth.uid in resource.data.tags",
                "request.auth.uid == resource.data.b",
            ]))
            .to_owned()
        }
        _ => (*rng.pick(&FIXED_ATOMS)).to_owned(),
    }
}

fn random_cond(rng: &mut Rng, depth: usize, hints: &mut Hints) -> Cond {
    if depth == 0 || rng.chance(35) {
        return Cond::Atom(random_atom(rng, hints));
    }
    let mut two = |rng: &mut Rng| {
        (
            Box::new(random_cond(rng, depth - 1, hints)),
            Box::new(random_cond(rng, depth - 1, hints)),
        )
    };
    match rng.below(3) {
        0 => Cond::Not(Box::new(random_cond(rng, depth - 1, hints))),
        1 => {
            let (a, b) = two(rng);
            Cond::And(a, b)
        }
        _ => {
            let (a, b) = two(rng);
            Cond::Or(a, b)
        }
    }
}

/// Values of fields and filter operands: both number kinds (zeros of both signs, NaN),
/// strings, null, a bool, a one-element array.
fn scalars() -> Vec<Value> {
    let mut out: Vec<Value> = literals().into_iter().map(|(_, v)| v).collect();
    out.push(Value::Double(f64::NAN));
    out.push(Value::String("bob".into()));
    out.push(Value::Array(vec![Value::Integer(1)]));
    out
}

/// The same number as the other kind (`1` and `1.0`, `0` and `-0.0`), else `v`.
fn twin(v: &Value) -> Value {
    match v {
        Value::Integer(i) => Value::Double(*i as f64),
        Value::Double(d) if *d == 0.0 => Value::Integer(0),
        Value::Double(d) if d.fract() == 0.0 => Value::Integer(*d as i64),
        v => v.clone(),
    }
}

/// A value for `field`: often one a rule or query names for it (or its twin), sometimes
/// NaN, else any.
fn aimed(rng: &mut Rng, field: &str, aims: &Hints) -> Value {
    let named: Vec<&Value> = aims
        .iter()
        .filter(|(f, _)| *f == field)
        .map(|(_, v)| v)
        .collect();
    if rng.chance(6) {
        return Value::Double(f64::NAN);
    }
    if named.is_empty() || rng.chance(40) {
        return rng.pick(&scalars()).clone();
    }
    let v = *rng.pick(&named);
    if rng.chance(40) {
        twin(v)
    } else {
        v.clone()
    }
}

fn random_fields(rng: &mut Rng, aims: &Hints) -> Map {
    let mut fields = Map::new();
    for key in ["a", "b"] {
        if rng.chance(80) {
            fields.insert(key.to_owned(), aimed(rng, key, aims));
        }
    }
    if rng.chance(60) {
        let tags = (0..rng.below(4)).map(|_| aimed(rng, "tags", aims));
        fields.insert("tags".to_owned(), Value::Array(tags.collect()));
    }
    let m = match rng.below(6) {
        0 => None,
        1 => Some(Value::Map(Map::new())),
        2 => Some(Value::String("x".into())),
        _ => {
            let mut m = Map::new();
            m.insert("x".to_owned(), aimed(rng, "m.x", aims));
            if rng.chance(30) {
                m.insert("y".to_owned(), Value::Integer(1));
            }
            Some(Value::Map(m))
        }
    };
    if let Some(m) = m {
        fields.insert("m".to_owned(), m);
    }
    fields
}

fn doc_name(id: &str) -> DocumentName {
    DocumentName::parse(&format!("c/{id}")).unwrap()
}

/// A filter, often on a field the rule compares with a value it names.
fn random_filter(rng: &mut Rng, hints: &Hints) -> Filter {
    if rng.chance(8) {
        let id = rng.pick(&["d1", "d2"]);
        let name = Value::Reference(doc_name(id));
        return Filter::field("__name__", Operator::Equal, name);
    }
    let field = if !hints.is_empty() && rng.chance(75) {
        rng.pick(hints).0
    } else {
        rng.pick(&FIELDS).1
    };
    let op = *rng.pick(&Operator::ALL);
    let value = if op.takes_list() {
        Value::Array(
            (0..=rng.below(3))
                .map(|_| aimed(rng, field, hints))
                .collect(),
        )
    } else {
        aimed(rng, field, hints)
    };
    Filter::field(field, op, value)
}

/// One case: a rule, a query (its top-level filters, ANDed, an orderBy, a limit), the
/// caller and documents.
#[derive(Clone, Debug)]
struct Case {
    seed: u64,
    cond: Cond,
    filters: Vec<Filter>,
    order_by: Option<(&'static str, Direction)>,
    limit: Option<i64>,
    auth: Option<&'static str>,
    docs: Vec<Document>,
}

/// A value that often satisfies `ff` (the operand, its twin, an element), else any.
fn satisfying(rng: &mut Rng, ff: &FieldFilter) -> Value {
    let items = match &ff.value {
        Value::Array(items) if ff.op.takes_list() => items.clone(),
        v => vec![v.clone()],
    };
    let one = rng.pick(&items).clone();
    let near = if rng.chance(40) { twin(&one) } else { one };
    match ff.op {
        Operator::ArrayContains | Operator::ArrayContainsAny => {
            let mut a = vec![near];
            if rng.chance(50) {
                a.push(Value::String("bob".into()));
            }
            Value::Array(a)
        }
        Operator::NotEqual | Operator::NotIn => rng.pick(&scalars()).clone(),
        _ => near,
    }
}

/// Sets field `path` (`a` or `m.x`) of `fields`, making `m` a map if needed.
fn set_field(fields: &mut Map, path: &[String], v: Value) {
    match path {
        [name] => {
            fields.insert(name.clone(), v);
        }
        [name, rest @ ..] => {
            let m = fields.entry(name.clone()).or_insert(Value::Map(Map::new()));
            if !matches!(m, Value::Map(_)) {
                *m = Value::Map(Map::new());
            }
            if let Value::Map(m) = m {
                set_field(m, rest, v);
            }
        }
        [] => {}
    }
}

/// Random fields for document `id`, often aimed to match the query: each filter (one
/// branch of an `or`) satisfied with some chance.
fn random_doc(rng: &mut Rng, id: usize, aims: &Hints, filters: &[Filter]) -> Document {
    let mut fields = random_fields(rng, aims);
    let aim = rng.chance(70);
    for f in filters {
        let ff = match f {
            Filter::Field(ff) => ff,
            Filter::Or(branches) | Filter::And(branches) => match rng.pick(branches) {
                Filter::Field(ff) => ff,
                _ => continue,
            },
        };
        if aim && !ff.field.is_document_id() && rng.chance(85) {
            let v = satisfying(rng, ff);
            set_field(&mut fields, ff.field.segments(), v);
        }
    }
    Document::new(doc_name(&format!("d{id}")), fields)
}

fn random_case(seed: u64) -> Case {
    let mut rng = Rng(seed);
    let mut hints = Hints::new();
    let depth = rng.below(4);
    let cond = random_cond(&mut rng, depth, &mut hints);
    let n = if rng.chance(10) { 0 } else { 1 + rng.below(3) };
    let filters: Vec<Filter> = (0..n)
        .map(|_| {
            if rng.chance(15) {
                Filter::Or(vec![
                    random_filter(&mut rng, &hints),
                    random_filter(&mut rng, &hints),
                ])
            } else {
                random_filter(&mut rng, &hints)
            }
        })
        .collect();
    let order_by = rng.chance(15).then(|| {
        let dir = *rng.pick(&[Direction::Ascending, Direction::Descending]);
        (rng.pick(&FIELDS).1, dir)
    });
    let limit = rng.chance(20).then(|| 1 + rng.below(3) as i64);
    let auth = *rng.pick(&[None, Some("alice"), Some("bob")]);
    let docs = (0..6)
        .map(|i| random_doc(&mut rng, i, &hints, &filters))
        .collect();
    Case {
        seed,
        cond,
        filters,
        order_by,
        limit,
        auth,
        docs,
    }
}

fn query_of(case: &Case) -> Query {
    let mut q = Query::collection(CollectionPath::parse("c").unwrap());
    for f in &case.filters {
        q = q.filter(f.clone());
    }
    if let Some((field, dir)) = case.order_by {
        q = q.order_by(field, dir);
    }
    if let Some(n) = case.limit {
        q = q.limit(n);
    }
    q
}

/// What one case did.
enum Outcome {
    /// `validate` refused the query.
    Invalid,
    /// The proof did not allow the query.
    Refused,
    /// The proof allowed the query: how many documents matched and were checked, and the
    /// first the rule denied, with the denial's explanation.
    Proved {
        checked: usize,
        denied: Option<(Document, String)>,
    },
}

fn now() -> Timestamp {
    Timestamp::new(1_800_000_000, 0).unwrap()
}

fn run_case(case: &Case) -> Outcome {
    let source = rules_source(&case.cond);
    let rules = Ruleset::parse("soundness.rules", &source)
        .unwrap_or_else(|e| panic!("generated rules do not parse: {e}\n{source}"));
    let Ok(query) = validate(&query_of(case)) else {
        return Outcome::Invalid;
    };
    let auth = case.auth.map(|uid| Auth {
        uid: uid.to_owned(),
        token: Map::new(),
    });
    let reader = Documents::of(case.docs.iter().cloned());
    if !rules
        .check_list(DATABASE, &query, auth.as_ref(), now(), &reader)
        .allowed
    {
        return Outcome::Refused;
    }
    let matcher = Matcher::new(query);
    let mut checked = 0;
    for doc in case.docs.iter().filter(|d| matcher.matches(d)) {
        checked += 1;
        let req = Request {
            database: DATABASE,
            method: Method::List,
            path: &doc.name,
            auth: auth.as_ref(),
            time: now(),
            resource: Some(doc),
            new_resource: None,
        };
        let d = rules.evaluate(&req, &reader, 10);
        if !d.allowed {
            return Outcome::Proved {
                checked,
                denied: Some((doc.clone(), d.explanation)),
            };
        }
    }
    Outcome::Proved {
        checked,
        denied: None,
    }
}

fn fails(case: &Case) -> bool {
    matches!(
        run_case(case),
        Outcome::Proved {
            denied: Some(_),
            ..
        }
    )
}

/// Cases one step smaller than `case` (which holds only the failing document).
fn smaller_cases(case: &Case) -> Vec<Case> {
    let mut out: Vec<Case> = case
        .cond
        .smaller()
        .into_iter()
        .map(|cond| Case {
            cond,
            ..case.clone()
        })
        .collect();
    for i in 0..case.filters.len() {
        let mut c = case.clone();
        let removed = c.filters.remove(i);
        out.push(c.clone());
        if let Filter::Or(branches) = removed {
            for b in branches {
                let mut c = c.clone();
                c.filters.insert(i, b);
                out.push(c);
            }
        }
    }
    if case.order_by.is_some() {
        out.push(Case {
            order_by: None,
            ..case.clone()
        });
    }
    if case.limit.is_some() {
        out.push(Case {
            limit: None,
            ..case.clone()
        });
    }
    if case.auth.is_some() {
        out.push(Case {
            auth: None,
            ..case.clone()
        });
    }
    for key in case.docs[0].fields.keys() {
        let mut fields = (*case.docs[0].fields).clone();
        fields.remove(key);
        out.push(Case {
            docs: vec![Document::new(case.docs[0].name.clone(), fields)],
            ..case.clone()
        });
    }
    out
}

/// The smallest case, step by step, that still fails with the document `denied`.
fn shrink(case: &Case, denied: Document) -> Case {
    let mut best = Case {
        docs: vec![denied],
        ..case.clone()
    };
    while let Some(next) = smaller_cases(&best).into_iter().find(fails) {
        best = next;
    }
    best
}

/// A value as the JS literal an app would write.
fn lit(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Boolean(b) => b.to_string(),
        Value::Integer(i) => i.to_string(),
        Value::Double(d) => format!("{d:?}"),
        Value::String(s) => format!("'{s}'"),
        Value::Reference(n) => format!("doc('{n}')"),
        Value::Array(a) => format!("[{}]", a.iter().map(lit).collect::<Vec<_>>().join(", ")),
        Value::Map(m) => {
            let entries: Vec<String> = m.iter().map(|(k, v)| format!("{k}: {}", lit(v))).collect();
            format!("{{{}}}", entries.join(", "))
        }
        other => format!("{other:?}"),
    }
}

fn filter_text(f: &Filter) -> String {
    match f {
        Filter::Field(ff) => format!("where('{}', '{}', {})", ff.field, ff.op, lit(&ff.value)),
        Filter::And(v) => format!(
            "and({})",
            v.iter().map(filter_text).collect::<Vec<_>>().join(", ")
        ),
        Filter::Or(v) => format!(
            "or({})",
            v.iter().map(filter_text).collect::<Vec<_>>().join(", ")
        ),
    }
}

fn query_text(case: &Case) -> String {
    let mut q = "collection('c')".to_owned();
    for f in &case.filters {
        write!(q, ".{}", filter_text(f)).unwrap();
    }
    if let Some((field, dir)) = case.order_by {
        write!(q, ".orderBy('{field}', '{}')", dir_name(dir)).unwrap();
    }
    if let Some(n) = case.limit {
        write!(q, ".limit({n})").unwrap();
    }
    q
}

fn doc_text(d: &Document) -> String {
    format!("{} {}", d.name, lit(&Value::Map((*d.fields).clone())))
}

/// A finding: the seed, rule, query, caller and the denied document.
fn describe(case: &Case, doc: &Document) -> String {
    format!(
        "seed {seed} (replay: HEARTH_SOUNDNESS_SEED={seed})\n  rule:     allow list: if {};\n  query:    {}\n  auth:     {:?}\n  document: {}",
        case.cond.text(),
        query_text(case),
        case.auth,
        doc_text(doc),
        seed = case.seed,
    )
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        v.parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, not {v:?}")),
    )
}

/// Counts of one run.
#[derive(Default)]
struct Stats {
    cases: u64,
    invalid: u64,
    refused: u64,
    proved: u64,
    checked: usize,
    findings: u64,
}

/// Shrunk findings by kind ([`kind`]): an example and how often the kind was reached.
type Found = BTreeMap<String, (String, u64)>;

/// The shape of a shrunk finding: its rule with fields and literals left out (`F` and
/// `L`), and its query's operators.
fn kind(case: &Case) -> String {
    static LITERAL: LazyLock<regex::Regex> = LazyLock::new(|| {
        regex::Regex::new(r"-?[0-9]+(\.[0-9]+)?|'[^']*'|\bnull\b|\btrue\b").unwrap()
    });
    let mut rule = case.cond.text();
    for (f, _) in FIELDS {
        rule = rule.replace(f, "F");
    }
    let rule = LITERAL.replace_all(&rule, "L");
    let mut ops: Vec<&str> = case
        .filters
        .iter()
        .flat_map(Filter::field_filters)
        .map(|ff| ff.op.as_str())
        .collect();
    ops.sort_unstable();
    ops.dedup();
    format!("{rule} / {}", ops.join(" "))
}

fn record(stats: &mut Stats, found: &mut Found, first: &mut Option<String>, case: &Case) {
    stats.cases += 1;
    match run_case(case) {
        Outcome::Invalid => stats.invalid += 1,
        Outcome::Refused => stats.refused += 1,
        Outcome::Proved { checked, denied } => {
            stats.proved += 1;
            stats.checked += checked;
            let Some((doc, why)) = denied else { return };
            stats.findings += 1;
            if first.is_none() {
                *first = Some(format!(
                    "{}\n  rules:    {}\n  denied:   {why}",
                    describe(case, &doc),
                    rules_source(&case.cond)
                ));
            }
            if stats.findings <= MAX_SHRUNK {
                let small = shrink(case, doc);
                let example = describe(&small, &small.docs[0]);
                found.entry(kind(&small)).or_insert((example, 0)).1 += 1;
            }
        }
    }
}

#[test]
fn a_proved_list_allows_every_document_it_matches() {
    let seeds: Vec<u64> = match env_u64("HEARTH_SOUNDNESS_SEED") {
        Some(seed) => vec![seed],
        None => {
            let n = env_u64("HEARTH_SOUNDNESS_CASES").unwrap_or(DEFAULT_CASES);
            (0..n).map(|i| BASE_SEED + i).collect()
        }
    };
    let (mut stats, mut found, mut first) = (Stats::default(), Found::new(), None);
    for &seed in &seeds {
        record(&mut stats, &mut found, &mut first, &random_case(seed));
    }
    println!(
        "proof soundness: {} cases: {} queries invalid, {} refused, {} proved allowed; {} matching documents checked; {} findings",
        stats.cases, stats.invalid, stats.refused, stats.proved, stats.checked, stats.findings
    );
    for (kind, (example, n)) in &found {
        println!("finding of kind `{kind}` (shrunk; {n} of the first {MAX_SHRUNK}):\n{example}");
    }
    if let Some(first) = first {
        panic!(
            "{} of {} proved queries match a document their rule denies; the first:\n{first}",
            stats.findings, stats.proved
        );
    }
}

#[path = "proof_soundness/regressions.rs"]
mod regressions;
