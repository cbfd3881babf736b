//! `Query`, `CollectionReference`, `Filter` and `AggregateField`: building queries, running
//! them (`get`), aggregating them, and listening to them (`onSnapshot`).

use std::rc::Rc;

use js_sys::{Function, Promise, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;

use super::reference::{observer, report, set_mutation, unsubscribe, write_promise};
use super::snapshot::{AggregateQuerySnapshot, QuerySnapshot, ResultDocs};
use super::{Db, DocumentReference};
use crate::client::convert::{field_path_arg, to_list_operand, to_value};
use crate::client::engine::ListenEvent;
use crate::client::error::ClientError;
use crate::client::origin::proxy::Watch;
use hearth_core::encoding::key::Direction;
use hearth_core::path::{CollectionPath, FieldPath};
use hearth_core::query::model::{
    Aggregation, Cursor, FieldFilter, Filter as CoreFilter, Operator, OrderBy, Query as CoreQuery,
};
use hearth_core::query::normalize::normalized_order;
use hearth_core::value::Value;

/// A filter for `where`: `Filter.where(field, op, value)`, `Filter.or(...)`, `Filter.and(...)`.
#[wasm_bindgen]
#[derive(Clone)]
pub struct Filter {
    /// The core filter it stands for.
    inner: CoreFilter,
}

fn field_filter(field: JsValue, op: &str, value: JsValue) -> Result<CoreFilter, ClientError> {
    let field = field_path_arg(&field)?;
    let op = Operator::parse(op).ok_or_else(|| ClientError::invalid(format!("invalid query operator `{op}`: use ==, !=, <, <=, >, >=, in, not-in, array-contains or array-contains-any")))?;
    let value = if field.is_document_id() {
        // documentId() operands: a path string or a reference, resolved by validation.
        match value.as_string() {
            Some(s) => Value::String(s),
            None => to_value(&value)?,
        }
    } else if matches!(op, Operator::In | Operator::NotIn) {
        to_list_operand(&value)?
    } else {
        to_value(&value)?
    };
    Ok(CoreFilter::Field(FieldFilter { field, op, value }))
}

fn filter_list(list: &js_sys::Array) -> Result<Vec<CoreFilter>, ClientError> {
    list.iter().map(|v| take_filter(&v)).collect()
}

/// A filter travels through JS as the hex of a one-filter query's encoding, so composite
/// filters rebuild their parts without any registry on the Rust side.
fn filter_token(f: &CoreFilter) -> String {
    let q = CoreQuery::collection_group("f").filter(f.clone());
    let mut bytes = Vec::new();
    hearth_core::protocol::codec::encode_query(&q, &mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn take_filter(v: &JsValue) -> Result<CoreFilter, ClientError> {
    let bad =
        || ClientError::invalid("expected a Filter (from Filter.where, Filter.or or Filter.and)");
    let hex = Reflect::get(v, &"__hearthFilter".into())
        .ok()
        .and_then(|j| j.as_string())
        .ok_or_else(bad)?;
    let bytes: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect();
    let q =
        hearth_core::protocol::codec::decode_query(&bytes.ok_or_else(bad)?).map_err(|_| bad())?;
    q.filter.ok_or_else(bad)
}

#[wasm_bindgen]
impl Filter {
    #[wasm_bindgen(js_name = where)]
    pub fn where_(field: JsValue, op: &str, value: JsValue) -> Result<Filter, JsValue> {
        Ok(Filter {
            inner: field_filter(field, op, value)?,
        })
    }

    #[wasm_bindgen(variadic)]
    pub fn or(filters: &js_sys::Array) -> Result<Filter, JsValue> {
        Ok(Filter {
            inner: CoreFilter::Or(filter_list(filters)?),
        })
    }

    #[wasm_bindgen(variadic)]
    pub fn and(filters: &js_sys::Array) -> Result<Filter, JsValue> {
        Ok(Filter {
            inner: CoreFilter::And(filter_list(filters)?),
        })
    }

    /// The filter's token, by which `or`/`and`/`where` read it back.
    #[wasm_bindgen(getter, js_name = __hearthFilter)]
    pub fn token(&self) -> String {
        filter_token(&self.inner)
    }
}

/// An aggregation for `aggregate({ alias: AggregateField.sum('f') })`.
#[wasm_bindgen]
#[derive(Clone)]
pub struct AggregateField {
    /// The core aggregation it stands for.
    inner: Aggregation,
}

#[wasm_bindgen]
impl AggregateField {
    pub fn count() -> AggregateField {
        AggregateField {
            inner: Aggregation::Count,
        }
    }

    pub fn sum(field: JsValue) -> Result<AggregateField, JsValue> {
        Ok(AggregateField {
            inner: Aggregation::Sum(field_path_arg(&field)?),
        })
    }

    pub fn average(field: JsValue) -> Result<AggregateField, JsValue> {
        Ok(AggregateField {
            inner: Aggregation::Average(field_path_arg(&field)?),
        })
    }

    #[wasm_bindgen(getter, js_name = __hearthAggregate)]
    pub fn marker(&self) -> String {
        match &self.inner {
            Aggregation::Count => "count".into(),
            Aggregation::Sum(f) => format!("sum:{f}"),
            Aggregation::Average(f) => format!("avg:{f}"),
        }
    }
}

fn parse_aggregate(v: &JsValue) -> Result<Aggregation, ClientError> {
    let m = Reflect::get(v, &"__hearthAggregate".into())
        .ok()
        .and_then(|j| j.as_string())
        .ok_or_else(|| {
            ClientError::invalid(
                "aggregate() takes { alias: AggregateField.count() | sum(field) | average(field) }",
            )
        })?;
    Ok(match m.split_once(':') {
        None => Aggregation::Count,
        Some(("sum", f)) => Aggregation::Sum(FieldPath::parse(f).map_err(ClientError::from)?),
        Some((_, f)) => Aggregation::Average(FieldPath::parse(f).map_err(ClientError::from)?),
    })
}

/// A query over a collection or collection group.
#[wasm_bindgen]
#[derive(Clone)]
pub struct Query {
    /// The database it runs against.
    pub(crate) db: Rc<Db>,
    /// The core query, built up by the chained methods (each returns a new `Query`).
    pub(crate) query: CoreQuery,
}

/// A collection: a query over its documents, plus `doc()` and `add()`.
#[wasm_bindgen]
#[derive(Clone)]
pub struct CollectionReference {
    /// The database the collection belongs to.
    pub(crate) db: Rc<Db>,
    /// The collection's path.
    pub(crate) path: CollectionPath,
}

impl Query {
    pub(crate) fn from_core(db: &Rc<Db>, query: CoreQuery) -> Query {
        Query {
            db: db.clone(),
            query,
        }
    }

    fn with(
        &self,
        f: impl FnOnce(&mut CoreQuery) -> Result<(), ClientError>,
    ) -> Result<Query, JsValue> {
        let mut q = self.query.clone();
        f(&mut q)?;
        Ok(Query {
            db: self.db.clone(),
            query: q,
        })
    }

    fn cursor(&self, list: &js_sys::Array, inclusive: bool) -> Result<Cursor, ClientError> {
        let first = &list.get(0);
        let is_snapshot = Reflect::get(first, &"__hearthKind".into())
            .ok()
            .and_then(|k| k.as_string())
            .as_deref()
            == Some("snapshot");
        if is_snapshot {
            // A snapshot cursor: the document's values for the whole normalized order.
            let path = Reflect::get(first, &"__hearthPath".into())
                .ok()
                .and_then(|p| p.as_string())
                .unwrap_or_default();
            let name = hearth_core::path::DocumentName::parse(&path).map_err(ClientError::from)?;
            let data = Reflect::get(first, &"data".into())
                .ok()
                .and_then(|f| f.dyn_into::<Function>().ok())
                .and_then(|f| f.call0(first).ok())
                .unwrap_or(JsValue::UNDEFINED);
            if data.is_undefined() {
                return Err(ClientError::invalid(
                    "cannot use a snapshot of a missing document as a cursor",
                ));
            }
            let fields = match to_value(&data)? {
                Value::Map(m) => m,
                _ => return Err(ClientError::invalid("snapshot data is not an object")),
            };
            let doc = hearth_core::document::Document::new(name.clone(), fields);
            let mut values = Vec::new();
            for o in normalized_order(&self.query) {
                match doc.field(&o.field) {
                    Some(v) => values.push(v.into_owned()),
                    None => {
                        return Err(ClientError::invalid(format!(
                            "the cursor document lacks the ordered field `{}`",
                            o.field
                        )))
                    }
                }
            }
            return Ok(Cursor {
                values,
                inclusive,
                from_document: true,
            });
        }
        let mut values = Vec::new();
        for (i, v) in list.iter().enumerate() {
            let is_name = self
                .query
                .order_by
                .get(i)
                .is_some_and(|o| o.field.is_document_id());
            values.push(match (is_name, v.as_string()) {
                (true, Some(s)) => Value::String(s),
                _ => to_value(&v)?,
            });
        }
        Ok(Cursor {
            values,
            inclusive,
            from_document: false,
        })
    }

    /// The query with a start (`start`) or end cursor from positional values or a snapshot.
    fn with_cursor(
        &self,
        list: &js_sys::Array,
        inclusive: bool,
        start: bool,
    ) -> Result<Query, JsValue> {
        let cursor = self.cursor(list, inclusive)?;
        self.with(|q| {
            if start {
                q.start = Some(cursor);
            } else {
                q.end = Some(cursor);
            }
            Ok(())
        })
    }

    fn do_get(&self, options: JsValue) -> Promise {
        let db = self.db.clone();
        let q = self.query.clone();
        let source = super::source_option(&options);
        let upto = self.db.issued();
        future_to_promise(async move {
            let read = db.read_query(&q, source, upto).await?;
            let q = hearth_core::query::validate::validate(&q).map_err(ClientError::from)?;
            let changes = hearth_core::query::view::added(
                &read.docs.iter().map(|(d, _)| d.clone()).collect::<Vec<_>>(),
            );
            Ok(QuerySnapshot::listed(&db, q, read.docs, changes, read.cache).into())
        })
    }

    fn do_aggregate(&self, spec: JsValue) -> Promise {
        let db = self.db.clone();
        let q = self.query.clone();
        let upto = self.db.issued();
        future_to_promise(async move {
            let mut names = Vec::new();
            let mut aggs = Vec::new();
            if spec.is_undefined() {
                names.push("count".to_owned());
                aggs.push(Aggregation::Count);
            } else {
                let keys = js_sys::Object::keys(spec.unchecked_ref::<js_sys::Object>());
                for k in keys.iter() {
                    let v = Reflect::get(&spec, &k)?;
                    names.push(k.as_string().unwrap_or_default());
                    aggs.push(parse_aggregate(&v)?);
                }
            }
            let values = db.aggregate(&q, aggs, upto).await?;
            Ok(AggregateQuerySnapshot {
                values: names.into_iter().zip(values).collect(),
            }
            .into())
        })
    }

    fn do_on_snapshot(&self, a: JsValue, b: JsValue, c: JsValue) -> Result<Function, JsValue> {
        hearth_core::query::validate::check_listenable(&self.query).map_err(ClientError::from)?;
        let obs = observer(a, b, c)?;
        let include = obs.include_metadata;
        let db = self.db.clone();
        let q = self.query.clone();
        let weak = Rc::downgrade(&db);
        let query_for_snap = q.clone();
        let callback: Rc<dyn Fn(ListenEvent)> = Rc::new(move |ev| {
            let Some(db) = weak.upgrade() else { return };
            match ev {
                ListenEvent::Query {
                    docs,
                    pending,
                    changes,
                    from_cache,
                    has_pending_writes,
                } => {
                    let docs = (ResultDocs::Live(docs, pending), has_pending_writes);
                    let snap =
                        QuerySnapshot::new(&db, query_for_snap.clone(), docs, changes, from_cache);
                    super::reference::call_observer(&obs.next, &snap.into());
                }
                ListenEvent::Error(e) => report(&obs.error, &e),
                ListenEvent::Document { .. } => {}
            }
        });
        let id = db.listen(Watch::Query(q), include, callback);
        Ok(unsubscribe(&db, id))
    }
}

/// The query-building and query-running methods, shared by `Query` and
/// `CollectionReference` (JS classes cannot inherit across wasm-bindgen).
macro_rules! query_methods {
    ($ty:ident) => {
        #[wasm_bindgen]
        impl $ty {
            /// Whether `other` is the same query of the same database (Firestore's
            /// `isEqual`).
            #[wasm_bindgen(js_name = isEqual)]
            pub fn is_equal(&self, other: &$ty) -> bool {
                let (a, b) = (self.as_query(), other.as_query());
                Rc::ptr_eq(&a.db, &b.db) && a.query == b.query
            }

            /// `where(field, op, value)` or `where(Filter)`.
            #[wasm_bindgen(js_name = where)]
            pub fn where_(
                &self,
                field: JsValue,
                op: JsValue,
                value: JsValue,
            ) -> Result<Query, JsValue> {
                let f = if op.is_undefined() {
                    take_filter(&field)?
                } else {
                    let op = op
                        .as_string()
                        .ok_or_else(|| ClientError::invalid("the operator must be a string"))?;
                    field_filter(field, &op, value)?
                };
                self.as_query().with(|q| {
                    *q = q.clone().filter(f);
                    Ok(())
                })
            }

            #[wasm_bindgen(js_name = orderBy)]
            pub fn order_by(
                &self,
                field: JsValue,
                direction: Option<String>,
            ) -> Result<Query, JsValue> {
                let field = field_path_arg(&field)?;
                let dir = match direction.as_deref() {
                    None | Some("asc") => Direction::Ascending,
                    Some("desc") => Direction::Descending,
                    Some(other) => {
                        return Err(ClientError::invalid(format!(
                            "invalid orderBy direction `{other}`: use 'asc' or 'desc'"
                        ))
                        .into())
                    }
                };
                self.as_query().with(|q| {
                    q.order_by.push(OrderBy { field, dir });
                    Ok(())
                })
            }

            pub fn limit(&self, n: f64) -> Result<Query, JsValue> {
                self.as_query().with(|q| {
                    *q = q.clone().limit(n as i64);
                    Ok(())
                })
            }

            #[wasm_bindgen(js_name = limitToLast)]
            pub fn limit_to_last(&self, n: f64) -> Result<Query, JsValue> {
                self.as_query().with(|q| {
                    *q = q.clone().limit_to_last(n as i64);
                    Ok(())
                })
            }

            pub fn offset(&self, n: f64) -> Result<Query, JsValue> {
                if n.is_nan() || n < 0.0 {
                    return Err(ClientError::invalid("offset must be a non-negative number").into());
                }
                self.as_query().with(|q| {
                    q.offset = n as u64;
                    Ok(())
                })
            }

            #[wasm_bindgen(js_name = startAt, variadic)]
            pub fn start_at(&self, values: &js_sys::Array) -> Result<Query, JsValue> {
                self.as_query().with_cursor(values, true, true)
            }

            #[wasm_bindgen(js_name = startAfter, variadic)]
            pub fn start_after(&self, values: &js_sys::Array) -> Result<Query, JsValue> {
                self.as_query().with_cursor(values, false, true)
            }

            #[wasm_bindgen(js_name = endAt, variadic)]
            pub fn end_at(&self, values: &js_sys::Array) -> Result<Query, JsValue> {
                self.as_query().with_cursor(values, true, false)
            }

            #[wasm_bindgen(js_name = endBefore, variadic)]
            pub fn end_before(&self, values: &js_sys::Array) -> Result<Query, JsValue> {
                self.as_query().with_cursor(values, false, false)
            }

            /// Returns only these fields (none: names only).
            #[wasm_bindgen(variadic)]
            pub fn select(&self, fields: &js_sys::Array) -> Result<Query, JsValue> {
                let list = fields;
                let mut fields = Vec::new();
                for v in list.iter() {
                    fields.push(field_path_arg(&v)?);
                }
                self.as_query().with(|q| {
                    q.projection = Some(fields);
                    Ok(())
                })
            }

            pub fn get(&self, options: JsValue) -> Promise {
                self.as_query().do_get(options)
            }

            /// `count()`: an aggregate query whose `get()` gives `data().count`.
            pub fn count(&self) -> AggregateQuery {
                AggregateQuery {
                    query: self.as_query(),
                    spec: JsValue::UNDEFINED,
                }
            }

            /// `aggregate({ alias: AggregateField... })`.
            pub fn aggregate(&self, spec: JsValue) -> AggregateQuery {
                AggregateQuery {
                    query: self.as_query(),
                    spec,
                }
            }

            #[wasm_bindgen(js_name = onSnapshot)]
            pub fn on_snapshot(
                &self,
                a: JsValue,
                b: JsValue,
                c: JsValue,
            ) -> Result<Function, JsValue> {
                self.as_query().do_on_snapshot(a, b, c)
            }
        }
    };
}

/// An aggregation over a query; `get()` runs it.
#[wasm_bindgen]
pub struct AggregateQuery {
    /// The query whose result is aggregated.
    query: Query,
    /// The `{ alias: AggregateField }` object as given, read when `get()` runs (`undefined`: a
    /// count).
    spec: JsValue,
}

#[wasm_bindgen]
impl AggregateQuery {
    pub fn get(&self) -> Promise {
        self.query.do_aggregate(self.spec.clone())
    }
}

impl Query {
    fn as_query(&self) -> Query {
        self.clone()
    }
}

impl CollectionReference {
    pub(crate) fn new(db: &Rc<Db>, path: CollectionPath) -> CollectionReference {
        CollectionReference {
            db: db.clone(),
            path,
        }
    }

    fn as_query(&self) -> Query {
        Query::from_core(&self.db, CoreQuery::collection(self.path.clone()))
    }
}

query_methods!(Query);
query_methods!(CollectionReference);

#[wasm_bindgen]
impl CollectionReference {
    #[wasm_bindgen(getter)]
    pub fn id(&self) -> String {
        self.path.id().to_owned()
    }

    #[wasm_bindgen(getter)]
    pub fn path(&self) -> String {
        self.path.to_string()
    }

    /// The document holding this sub-collection, or `null` for a top-level collection.
    #[wasm_bindgen(getter, unchecked_return_type = "DocumentReference | null")]
    pub fn parent(&self) -> JsValue {
        let segs = self.path.segments();
        if segs.len() < 3 {
            return JsValue::NULL;
        }
        hearth_core::path::DocumentName::from_segments(segs[..segs.len() - 1].to_vec())
            .map_or(JsValue::NULL, |name| {
                DocumentReference::new(&self.db, name).into()
            })
    }

    /// A reference to document `id`, or to a new document with a scattered auto id.
    pub fn doc(&self, id: Option<String>) -> Result<DocumentReference, JsValue> {
        let id = id.unwrap_or_else(crate::auto_id);
        let name = self.path.doc(&id).map_err(ClientError::from)?;
        Ok(DocumentReference::new(&self.db, name))
    }

    /// Creates a document with an auto id; resolves to its reference.
    pub fn add(&self, data: JsValue) -> Promise {
        let name = match self.path.doc(&crate::auto_id()) {
            Ok(n) => n,
            Err(e) => return Promise::reject(&ClientError::from(e).to_js()),
        };
        let r = DocumentReference::new(&self.db, name.clone());
        match set_mutation(&name, &data, &JsValue::UNDEFINED) {
            Ok(m) => write_promise(&self.db, vec![m], r.into()),
            Err(e) => Promise::reject(&e.to_js()),
        }
    }
}
