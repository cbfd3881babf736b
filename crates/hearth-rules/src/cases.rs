//! Rules test cases (`hearth-relay rules test --rules FILE --cases CASES.json`): each case is
//! one operation (its caller, method, path or query, data, and the documents that exist) with
//! the decision expected, run through [`Ruleset`] without a server. The format is documented
//! in `docs/rules.md`.

use std::collections::BTreeMap;

use hearth_core::document::Document;
use hearth_core::encoding::key::Direction;
use hearth_core::path::{CollectionPath, DocumentName, FieldPath};
use hearth_core::query::model::{FieldFilter, Filter, LimitType, Operator, OrderBy, Query};
use hearth_core::value::{GeoPoint, Map, Timestamp, Value};
use serde::Deserialize;
use serde_json::Value as Json;

use crate::{Auth, Decision, Documents, Method, Reader, Request, Ruleset};

/// A case file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseFile {
    /// The database the cases run in (default `(default)`).
    #[serde(default = "default_database")]
    pub database: String,
    /// `request.time` of cases that do not give their own (default: now).
    #[serde(default)]
    pub time: Option<Json>,
    /// Documents that exist for every case: path to fields.
    #[serde(default)]
    pub documents: BTreeMap<String, Json>,
    /// The cases.
    pub cases: Vec<Case>,
}

fn default_database() -> String {
    "(default)".to_owned()
}

/// One operation and the decision expected.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// What the case shows (printed with its outcome).
    pub name: String,
    /// The caller: `null` (or absent) for no token, else `{"uid": ..., "token": {claims}}`.
    #[serde(default)]
    pub auth: Option<CaseAuth>,
    /// `get`, `list`, `create`, `update` or `delete`.
    pub method: String,
    /// The document (`get`, `create`, `update`, `delete`).
    #[serde(default)]
    pub path: Option<String>,
    /// The document's fields after the write (`request.resource.data`) for `create` and
    /// `update`.
    #[serde(default)]
    pub data: Option<Json>,
    /// The query of a `list`.
    #[serde(default)]
    pub query: Option<CaseQuery>,
    /// Documents for this case only, over the file's (`null` removes one).
    #[serde(default)]
    pub documents: BTreeMap<String, Json>,
    /// `request.time` (RFC 3339, or `{"$timestamp": ...}`).
    #[serde(default)]
    pub time: Option<Json>,
    /// `allow` or `deny`.
    pub expect: String,
}

/// `request.auth` of a case.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseAuth {
    /// `request.auth.uid`.
    pub uid: String,
    /// `request.auth.token`: the claims (`sub` is added as `uid` when absent).
    #[serde(default)]
    pub token: BTreeMap<String, Json>,
}

/// The query of a `list` case.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CaseQuery {
    /// A collection path (`rooms/r1/messages`).
    #[serde(default)]
    pub collection: Option<String>,
    /// Or a collection group's id.
    #[serde(default)]
    pub collection_group: Option<String>,
    /// Filters, each `[field, operator, value]` (JS spellings: `==`, `array-contains`, ...).
    #[serde(default, rename = "where")]
    pub filters: Vec<(String, String, Json)>,
    /// Orders, each `[field, "asc" | "desc"]`.
    #[serde(default)]
    pub order_by: Vec<(String, String)>,
    /// `limit`.
    #[serde(default)]
    pub limit: Option<i64>,
    /// `offset`.
    #[serde(default)]
    pub offset: u64,
}

/// The outcome of one case.
pub struct Outcome {
    /// The case's name.
    pub name: String,
    /// `Ok(decision)` when it ran, `Err` when the case itself is malformed.
    pub result: Result<Decision, String>,
    /// Whether the case expects the operation allowed.
    pub expect_allow: bool,
}

impl Outcome {
    /// Whether the case passed.
    pub fn passed(&self) -> bool {
        matches!(&self.result, Ok(d) if d.allowed == self.expect_allow)
    }
}

/// Parses a case file.
pub fn parse(text: &str) -> Result<CaseFile, String> {
    serde_json::from_str(text).map_err(|e| format!("line {}: {e}", e.line()))
}

/// Runs every case of `file` against `rules`; `now` is `request.time` where neither the
/// case nor the file gives one.
pub fn run(rules: &Ruleset, file: &CaseFile, now: Timestamp) -> Vec<Outcome> {
    let base = file.time.as_ref().map(timestamp).transpose();
    file.cases
        .iter()
        .map(|case| {
            let expect_allow = case.expect == "allow";
            let result = base.clone().and_then(|base| {
                run_case(rules, file, case, base.unwrap_or(now))
                    .map_err(|e| format!("the case is malformed: {e}"))
            });
            Outcome {
                name: case.name.clone(),
                result,
                expect_allow,
            }
        })
        .collect()
}

fn run_case(
    rules: &Ruleset,
    file: &CaseFile,
    case: &Case,
    now: Timestamp,
) -> Result<Decision, String> {
    if case.expect != "allow" && case.expect != "deny" {
        return Err(format!(
            "`expect` is `allow` or `deny`, not `{}`",
            case.expect
        ));
    }
    let mut docs = Docs::default();
    for (path, fields) in file.documents.iter().chain(&case.documents) {
        let name = DocumentName::parse(path).map_err(|e| format!("document {path}: {e}"))?;
        if fields.is_null() {
            docs.stored.0.remove(&name);
        } else {
            let fields = map(fields).map_err(|e| format!("document {path}: {e}"))?;
            docs.stored
                .0
                .insert(name.clone(), Document::new(name, fields));
        }
    }
    let time = case
        .time
        .as_ref()
        .map(timestamp)
        .transpose()?
        .unwrap_or(now);
    let auth = case
        .auth
        .as_ref()
        .map(|a| -> Result<Auth, String> {
            let mut token = Map::new();
            for (k, v) in &a.token {
                token.insert(k.clone(), value(v)?);
            }
            token
                .entry("sub".to_owned())
                .or_insert_with(|| Value::String(a.uid.clone()));
            Ok(Auth {
                uid: a.uid.clone(),
                token,
            })
        })
        .transpose()?;
    let method = match case.method.as_str() {
        "get" => Method::Get,
        "list" => Method::List,
        "create" => Method::Create,
        "update" => Method::Update,
        "delete" => Method::Delete,
        m => {
            return Err(format!(
                "unknown method `{m}` (get, list, create, update, delete)"
            ))
        }
    };
    if method == Method::List {
        let q = case.query.as_ref().ok_or("a list case needs a `query`")?;
        let query = query(q)?;
        return Ok(rules.check_list(&file.database, &query, auth.as_ref(), time, &docs));
    }
    let path = case.path.as_deref().ok_or("the case needs a `path`")?;
    let name = DocumentName::parse(path).map_err(|e| format!("path {path}: {e}"))?;
    let before = docs.stored.0.get(&name).cloned();
    let after = match method {
        Method::Create | Method::Update => {
            let data = case
                .data
                .as_ref()
                .ok_or("a create or update case needs `data`")?;
            Some(Document::new(name.clone(), map(data)?))
        }
        _ => None,
    };
    match (method, &before) {
        (Method::Create, Some(_)) => return Err(format!("create of {path}, which exists")),
        (Method::Update, None) => return Err(format!("update of {path}, which does not exist")),
        _ => {}
    }
    docs.written = Some((name.clone(), after.clone()));
    let request = Request {
        database: &file.database,
        method,
        path: &name,
        auth: auth.as_ref(),
        time,
        resource: before.as_ref(),
        new_resource: after.as_ref(),
    };
    Ok(rules.evaluate(&request, &docs, crate::DOCUMENT_READS_SINGLE))
}

/// The documents of a case; `getAfter()` sees the case's write applied.
#[derive(Default)]
struct Docs {
    stored: Documents,
    written: Option<(DocumentName, Option<Document>)>,
}

impl Reader for Docs {
    fn get(&self, name: &DocumentName) -> Result<Option<Document>, String> {
        self.stored.get(name)
    }

    fn get_after(&self, name: &DocumentName) -> Result<Option<Document>, String> {
        match &self.written {
            Some((n, after)) if n == name => Ok(after.clone()),
            _ => self.get(name),
        }
    }
}

fn query(q: &CaseQuery) -> Result<Query, String> {
    let mut query = match (&q.collection, &q.collection_group) {
        (Some(c), None) => {
            Query::collection(CollectionPath::parse(c).map_err(|e| format!("collection {c}: {e}"))?)
        }
        (None, Some(g)) => Query::collection_group(g),
        _ => return Err("a query names one `collection` or one `collectionGroup`".into()),
    };
    let mut filters = Vec::new();
    for (field, op, v) in &q.filters {
        filters.push(Filter::Field(FieldFilter {
            field: FieldPath::parse(field).map_err(|e| format!("field {field}: {e}"))?,
            op: Operator::parse(op).ok_or_else(|| format!("unknown operator `{op}`"))?,
            value: value(v)?,
        }));
    }
    query.filter = match filters.len() {
        0 => None,
        1 => filters.pop(),
        _ => Some(Filter::And(filters)),
    };
    for (field, dir) in &q.order_by {
        query.order_by.push(OrderBy {
            field: FieldPath::parse(field).map_err(|e| format!("field {field}: {e}"))?,
            dir: match dir.as_str() {
                "asc" => Direction::Ascending,
                "desc" => Direction::Descending,
                d => return Err(format!("a direction is `asc` or `desc`, not `{d}`")),
            },
        });
    }
    query.limit = q.limit;
    query.limit_type = LimitType::First;
    query.offset = q.offset;
    Ok(query)
}

fn map(v: &Json) -> Result<Map, String> {
    match value(v)? {
        Value::Map(m) => Ok(m),
        _ => Err("a document's fields are a JSON object".into()),
    }
}

/// A JSON value as a document value; objects with one `$timestamp`, `$reference` or
/// `$geopoint` key are those types.
pub fn value(v: &Json) -> Result<Value, String> {
    Ok(match v {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Boolean(*b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::Integer(i),
            None => Value::Double(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => Value::String(s.clone()),
        Json::Array(a) => Value::Array(a.iter().map(value).collect::<Result<_, _>>()?),
        Json::Object(o) if o.len() == 1 && o.contains_key("$timestamp") => {
            Value::Timestamp(timestamp(v)?)
        }
        Json::Object(o) if o.len() == 1 && o.contains_key("$reference") => match &o["$reference"] {
            Json::String(p) => Value::Reference(DocumentName::parse(p).map_err(|e| e.to_string())?),
            _ => return Err("`$reference` is a document path".into()),
        },
        Json::Object(o) if o.len() == 1 && o.contains_key("$geopoint") => {
            match o["$geopoint"].as_array().map(|a| a.as_slice()) {
                Some([lat, lng]) => Value::GeoPoint(
                    GeoPoint::new(
                        lat.as_f64().ok_or("a latitude is a number")?,
                        lng.as_f64().ok_or("a longitude is a number")?,
                    )
                    .map_err(|e| e.to_string())?,
                ),
                _ => return Err("`$geopoint` is [latitude, longitude]".into()),
            }
        }
        Json::Object(o) => Value::Map(
            o.iter()
                .map(|(k, v)| Ok((k.clone(), value(v)?)))
                .collect::<Result<Map, String>>()?,
        ),
    })
}

/// A timestamp: an RFC 3339 string (`2026-11-26T12:00:00Z`, `...T12:00:00.5+01:00`), or
/// `{"$timestamp": string}`.
pub fn timestamp(v: &Json) -> Result<Timestamp, String> {
    let text = match v {
        Json::String(s) => s.as_str(),
        Json::Object(o) => match o.get("$timestamp") {
            Some(Json::String(s)) => s.as_str(),
            _ => return Err("a timestamp is {\"$timestamp\": \"RFC 3339\"}".into()),
        },
        _ => return Err("a timestamp is an RFC 3339 string".into()),
    };
    crate::time::parse_rfc3339(text).ok_or_else(|| format!("`{text}` is not an RFC 3339 time"))
}
