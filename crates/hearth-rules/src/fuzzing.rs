//! The body of the `rules` libFuzzer target (`fuzz/fuzz_targets/rules.rs`), a plain
//! function so that `tests/fuzz_corpus.rs` replays the committed corpus on stable. Not an
//! API.
//!
//! The input's first byte picks how the rest is read: a whole rules file (odd), or the
//! condition of one `allow` inside a fixed file with functions, so the fuzzer explores
//! expressions without first finding the file's syntax (even). Whatever parses is
//! evaluated for every method against documents that exist and do not, with `get()` and
//! friends reading a fixed store. Checks: no panic; a parse error's line and column lie in
//! the text; every decision ends (the step budget) and a denial explains itself.

use hearth_core::document::Document;
use hearth_core::path::{CollectionPath, DocumentName, FieldPath};
use hearth_core::query::model::{FieldFilter, Filter, Operator, Query};
use hearth_core::value::{Map, Timestamp, Value};

use crate::{Auth, Documents, Method, Request, Ruleset};

/// The fixed file an expression input is the condition of.
const TEMPLATE: &str = "rules_version = '2';
service cloud.firestore {
  match /databases/{database}/documents {
    function owner(d) { let o = d.owner; return request.auth != null && o == request.auth.uid; }
    function n(x) { return x > 0 ? n(x - 1) : 0; }
    match /items/{item} {
      allow read, write: if COND;
    }
    match /{path=**}/items/{item} {
      allow list: if COND;
    }
  }
}";

fn doc(path: &str, fields: &[(&str, Value)]) -> Option<Document> {
    let name = DocumentName::parse(path).ok()?;
    let fields: Map = fields
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect();
    Some(Document::new(name, fields))
}

/// The `rules` target.
pub fn rules(data: &[u8]) {
    let Some((mode, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let source = if mode % 2 == 1 {
        text.to_owned()
    } else {
        if text.contains('\n') || text.len() > 4096 {
            return;
        }
        TEMPLATE.replace("COND", text)
    };
    let rules = match Ruleset::parse("fuzz.rules", &source) {
        Ok(r) => r,
        Err(e) => {
            let lines = source.lines().count().max(1) as u32;
            assert!(
                e.line >= 1 && e.line <= lines + 1 && e.column >= 1,
                "{e} outside the text"
            );
            return;
        }
    };
    let _ = rules.list_reads_beyond_documents();
    let item = doc(
        "items/a",
        &[
            ("owner", Value::String("u1".into())),
            ("n", Value::Integer(3)),
            ("tags", Value::Array(vec![Value::String("x".into())])),
        ],
    );
    let store = Documents::of(
        [
            item.clone(),
            doc("admins/u1", &[("role", Value::String("admin".into()))]),
        ]
        .into_iter()
        .flatten(),
    );
    let auth = Auth {
        uid: "u1".into(),
        token: [("admin".to_owned(), Value::Boolean(true))]
            .into_iter()
            .collect(),
    };
    let (Ok(time), Ok(name)) = (
        Timestamp::new(1_700_000_000, 0),
        DocumentName::parse("items/a"),
    ) else {
        return;
    };
    let updated = doc(
        "items/a",
        &[
            ("owner", Value::String("u1".into())),
            ("n", Value::Integer(4)),
        ],
    );
    for caller in [None, Some(&auth)] {
        for (method, resource, new) in [
            (Method::Get, item.as_ref(), None),
            (Method::Get, None, None),
            (Method::Create, None, item.as_ref()),
            (Method::Update, item.as_ref(), updated.as_ref()),
            (Method::Delete, item.as_ref(), None),
        ] {
            let req = Request {
                database: "db",
                method,
                path: &name,
                auth: caller,
                time,
                resource,
                new_resource: new,
            };
            let d = rules.evaluate(&req, &store, crate::DOCUMENT_READS_SINGLE);
            assert!(d.allowed || !d.explanation.is_empty());
        }
        let (Ok(items), Ok(owner), Ok(n)) = (
            CollectionPath::parse("items"),
            FieldPath::parse("owner"),
            FieldPath::parse("n"),
        ) else {
            return;
        };
        for query in [
            Query::collection(items.clone()),
            Query::collection_group("items"),
            {
                let mut q = Query::collection(items.clone());
                q.filter = Some(Filter::And(vec![
                    Filter::Field(FieldFilter {
                        field: owner,
                        op: Operator::Equal,
                        value: Value::String("u1".into()),
                    }),
                    Filter::Field(FieldFilter {
                        field: n,
                        op: Operator::GreaterThan,
                        value: Value::Integer(1),
                    }),
                ]));
                q.limit = Some(10);
                q
            },
        ] {
            let d = rules.check_list("db", &query, caller, time, &store);
            assert!(d.allowed || !d.explanation.is_empty());
        }
    }
}

/// Seeds of the `rules` corpus: the shipped rules files and some conditions.
pub fn seeds() -> Vec<Vec<u8>> {
    let mut file = vec![1u8];
    file.extend_from_slice(TEMPLATE.replace("COND", "true").as_bytes());
    let mut out = vec![file];
    for cond in [
        "owner(resource.data)",
        "request.auth.token.admin == true && resource.data.n in [1, 2, 3]",
        "resource.data.tags.hasAny(['x']) || n(5) == 0",
        "get(/databases/$(database)/documents/admins/$(request.auth.uid)).data.role == 'admin'",
        "exists(/databases/$(database)/documents/items/$(item)) && request.time > timestamp.date(2020, 1, 1)",
        "request.resource.data.diff(resource.data).affectedKeys().hasOnly(['n'])",
        "resource.data.n >= 2 && resource.data.n < 10 && request.query.limit <= 10",
        "'a,b'.split(',').size() == 2 && duration.value(1, 'h') < duration.value(2, 'h')",
        "hashing.sha256('x').toBase64() != '' && math.abs(-1) == 1 && string(1) == '1'",
        "let x = 1; x == 1",
    ] {
        let mut v = vec![0u8];
        v.extend_from_slice(cond.as_bytes());
        out.push(v);
    }
    out
}
