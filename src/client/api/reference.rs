//! `DocumentReference`: read, write and listen to one document; and the shared pieces of
//! listener registration (`onSnapshot` arguments, unsubscribe functions) and write promises.

use std::rc::Rc;

use js_sys::{Function, Promise, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;

use super::snapshot::DocumentSnapshot;
use super::{CollectionReference, Db};
use crate::client::engine::ListenEvent;
use crate::client::error::ClientError;
use hearth_core::mutation::Mutation;
use hearth_core::path::DocumentName;

/// A document's location; cheap to copy around.
#[wasm_bindgen]
#[derive(Clone)]
pub struct DocumentReference {
    /// The database the document belongs to.
    pub(crate) db: Rc<Db>,
    /// The document's full path.
    pub(crate) name: DocumentName,
}

impl DocumentReference {
    pub(crate) fn new(db: &Rc<Db>, name: DocumentName) -> DocumentReference {
        DocumentReference {
            db: db.clone(),
            name,
        }
    }
}

/// Parsed `onSnapshot` arguments: `(next, error?)`, `(options, next, error?)` or an observer
/// `{ next, error }`.
pub(crate) struct Observer {
    /// Called with each snapshot.
    pub next: Function,
    /// Called once if the listener fails (it is removed then).
    pub error: Option<Function>,
    /// `includeMetadataChanges`: raise snapshots whose metadata alone changed.
    pub include_metadata: bool,
}

pub(crate) fn observer(a: JsValue, b: JsValue, c: JsValue) -> Result<Observer, ClientError> {
    let get = |o: &JsValue, k: &str| {
        Reflect::get(o, &k.into())
            .ok()
            .filter(|v| !v.is_undefined())
    };
    if a.is_function() {
        return Ok(Observer {
            next: a.unchecked_into(),
            error: b.dyn_into().ok(),
            include_metadata: false,
        });
    }
    if let Some(next) = get(&a, "next").filter(|v| v.is_function()) {
        return Ok(Observer {
            next: next.unchecked_into(),
            error: get(&a, "error").and_then(|v| v.dyn_into().ok()),
            include_metadata: false,
        });
    }
    let include_metadata = get(&a, "includeMetadataChanges").is_some_and(|v| v.is_truthy());
    if b.is_function() {
        return Ok(Observer {
            next: b.unchecked_into(),
            error: c.dyn_into().ok(),
            include_metadata,
        });
    }
    Err(ClientError::invalid("onSnapshot needs a callback: onSnapshot(next, error?) or onSnapshot(options, next, error?)"))
}

/// The function `onSnapshot` returns: calling it stops listener `id`.
pub(crate) fn unsubscribe(db: &Rc<Db>, id: u64) -> Function {
    let weak = Rc::downgrade(db);
    let f = Closure::<dyn FnMut()>::new(move || {
        if let Some(db) = weak.upgrade() {
            db.unlisten(id);
        }
    });
    f.into_js_value().unchecked_into()
}

/// Reports an error to the observer, or to the console when it has no error callback.
pub(crate) fn report(obs_error: &Option<Function>, e: &ClientError) {
    match obs_error {
        Some(f) => call_observer(f, &e.to_js()),
        None => web_sys::console::error_1(&e.to_js()),
    }
}

/// Calls an observer's callback with `arg`. What it throws reaches the page as an uncaught
/// error does (`reportError`: the global `error` event, and the console), not lost inside
/// the engine that called it.
pub(crate) fn call_observer(f: &Function, arg: &JsValue) {
    let Err(thrown) = f.call1(&JsValue::NULL, arg) else {
        return;
    };
    let global = js_sys::global();
    let reported = js_sys::Reflect::get(&global, &"reportError".into())
        .and_then(|r| r.dyn_into::<Function>())
        .and_then(|r| r.call1(&global, &thrown));
    if reported.is_err() {
        web_sys::console::error_2(&"Uncaught error in a Hearth listener:".into(), &thrown);
    }
}

/// A promise settled by the engine's write acknowledgement.
pub(crate) fn write_promise(db: &Rc<Db>, mutations: Vec<Mutation>, value: JsValue) -> Promise {
    let mut resolve_fn: Option<Function> = None;
    let mut reject_fn: Option<Function> = None;
    let promise = Promise::new(&mut |resolve, reject| {
        resolve_fn = Some(resolve);
        reject_fn = Some(reject);
    });
    let (resolve, reject) = (
        resolve_fn.expect("set by the executor"),
        reject_fn.expect("set by the executor"),
    );
    // `write` is called now, not when the task first runs: the write is issued in call
    // order, before a `waitForPendingWrites()` the app calls next.
    let write = db.write(
        mutations,
        Box::new(move |r| {
            let _ = match r {
                Ok(_) => resolve.call1(&JsValue::NULL, &value),
                Err(e) => reject.call1(&JsValue::NULL, &e.to_js()),
            };
        }),
    );
    wasm_bindgen_futures::spawn_local(write);
    promise
}

/// Builds the mutation of `set(data, options)`.
pub(crate) fn set_mutation(
    name: &DocumentName,
    data: &JsValue,
    options: &JsValue,
) -> Result<Mutation, ClientError> {
    use hearth_core::mutation::SetMerge;
    let get = |k: &str| {
        if options.is_undefined() || options.is_null() {
            None
        } else {
            Reflect::get(options, &k.into())
                .ok()
                .filter(|v| !v.is_undefined())
        }
    };
    let merge_fields = get("mergeFields");
    let merge = get("merge").is_some_and(|v| v.is_truthy()) || merge_fields.is_some();
    let parsed = crate::client::convert::parse_set_data(data, merge)?;
    let mode = match merge_fields {
        Some(list) => {
            let arr: js_sys::Array = list
                .dyn_into()
                .map_err(|_| ClientError::invalid("mergeFields must be an array of field paths"))?;
            let mut paths = Vec::new();
            for v in arr.iter() {
                paths.push(crate::client::convert::field_path_arg(&v)?);
            }
            SetMerge::MergeFields(paths)
        }
        None if merge => SetMerge::MergeAll,
        None => SetMerge::Overwrite,
    };
    let mut m = Mutation::set_merge(name.clone(), parsed.fields, mode);
    for (p, t) in parsed.transforms {
        m = m.with_transform(p, t);
    }
    for p in parsed.deletes {
        m = m.with_field_delete(p);
    }
    Ok(m)
}

/// Builds the mutation of `update(data)` or `update(field, value, ...)`.
pub(crate) fn update_mutation(
    name: &DocumentName,
    args: &js_sys::Array,
) -> Result<Mutation, ClientError> {
    let first = args.get(0);
    let parsed = if args.length() == 1
        && first.is_object()
        && Reflect::get(&first, &"__hearthKind".into())
            .map(|k| k.is_undefined())
            .unwrap_or(true)
    {
        crate::client::convert::parse_update_data(&first)?
    } else {
        crate::client::convert::parse_update_pairs(args)?
    };
    let mut m = Mutation::update(name.clone(), parsed.fields);
    for (p, t) in parsed.transforms {
        m = m.with_transform(p, t);
    }
    Ok(m)
}

#[wasm_bindgen]
impl DocumentReference {
    #[wasm_bindgen(getter)]
    pub fn id(&self) -> String {
        self.name.id().to_owned()
    }

    #[wasm_bindgen(getter)]
    pub fn path(&self) -> String {
        self.name.to_string()
    }

    #[wasm_bindgen(getter)]
    pub fn parent(&self) -> CollectionReference {
        CollectionReference::new(&self.db, self.name.parent())
    }

    #[wasm_bindgen(getter, js_name = __hearthKind)]
    pub fn kind(&self) -> String {
        "reference".into()
    }

    pub fn collection(&self, path: &str) -> Result<CollectionReference, JsValue> {
        let full = format!("{}/{}", self.name, path);
        let p = hearth_core::path::CollectionPath::parse(&full).map_err(ClientError::from)?;
        Ok(CollectionReference::new(&self.db, p))
    }

    #[wasm_bindgen(js_name = isEqual)]
    pub fn is_equal(&self, other: &DocumentReference) -> bool {
        self.name == other.name
    }

    /// Reads the document: from the relay when connected (or `{ source: 'server' }`), else
    /// from the cache (`{ source: 'cache' }` forces it).
    pub fn get(&self, options: JsValue) -> Promise {
        let db = self.db.clone();
        let name = self.name.clone();
        let source = super::source_option(&options);
        let upto = self.db.issued();
        future_to_promise(async move {
            let r = db.read_document(&name, source, upto).await?;
            Ok(DocumentSnapshot::new(&db, name, r.doc, r.pending, r.cache).into())
        })
    }

    /// Writes the document (`{ merge: true }` or `{ mergeFields }` to merge).
    pub fn set(&self, data: JsValue, options: JsValue) -> Promise {
        match set_mutation(&self.name, &data, &options) {
            Ok(m) => write_promise(&self.db, vec![m], JsValue::UNDEFINED),
            Err(e) => Promise::reject(&e.to_js()),
        }
    }

    /// Updates fields: `update({ 'a.b': 1 })` or `update('a.b', 1, 'c', 2)`. The document
    /// must exist.
    #[wasm_bindgen(variadic)]
    pub fn update(&self, data_or_pairs: &js_sys::Array) -> Promise {
        match update_mutation(&self.name, data_or_pairs) {
            Ok(m) => write_promise(&self.db, vec![m], JsValue::UNDEFINED),
            Err(e) => Promise::reject(&e.to_js()),
        }
    }

    pub fn delete(&self) -> Promise {
        write_promise(
            &self.db,
            vec![Mutation::delete(self.name.clone())],
            JsValue::UNDEFINED,
        )
    }

    /// Listens to the document; returns the function that stops listening.
    #[wasm_bindgen(js_name = onSnapshot)]
    pub fn on_snapshot(&self, a: JsValue, b: JsValue, c: JsValue) -> Result<Function, JsValue> {
        let obs = observer(a, b, c)?;
        let include = obs.include_metadata;
        let db = self.db.clone();
        let weak = Rc::downgrade(&db);
        let callback: Rc<dyn Fn(ListenEvent)> = Rc::new(move |ev| {
            let Some(db) = weak.upgrade() else { return };
            match ev {
                ListenEvent::Document {
                    name,
                    doc,
                    from_cache,
                    has_pending_writes,
                } => {
                    let snap =
                        DocumentSnapshot::new(&db, name, doc, has_pending_writes, from_cache);
                    call_observer(&obs.next, &snap.into());
                }
                ListenEvent::Error(e) => report(&obs.error, &e),
                ListenEvent::Query { .. } => {}
            }
        });
        let watch = crate::client::origin::proxy::Watch::Document(self.name.clone());
        let id = db.listen(watch, include, callback);
        let unsub = unsubscribe(&db, id);
        Ok(unsub)
    }
}
