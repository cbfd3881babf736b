//! Browser tests of the JS value classes (`client::types`) and the conversion of JS data to
//! Hearth values, writes and back (`client::convert`), driven through real JS snippets so the
//! exported classes are exercised the way an app calls them.
//!
//! This file holds the helpers that run JS snippets; the tests are in four modules under
//! `convert/`: `values` (numbers, round trips, refused values), `writes` (`set()` and
//! `update()` data), `api` (the classes' own methods) and `tabs` (the settle message the
//! contexts of one origin exchange).
//!
//! Run: `CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner
//! CHROMEDRIVER=/usr/bin/chromedriver cargo test --target wasm32-unknown-unknown --test convert`
#![cfg(target_arch = "wasm32")]
// Tests unwrap: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use hearth::client::convert::{
    field_path_arg, from_value, map_to_js, parse_set_data, parse_update_data, parse_update_pairs,
    set_reference_factory, to_value, SetData, UpdateData,
};
use hearth::client::error::ClientError;
use hearth::client::types::{Bytes, FieldPath as JsFieldPath, FieldValue, GeoPoint, Timestamp};
use hearth_core::document::Document;
use hearth_core::mutation::{ApplyContext, FieldTransform, SetMerge};
use hearth_core::path::{DocumentName, FieldPath};
use hearth_core::value::{GeoPoint as CoreGeoPoint, Map, Timestamp as CoreTimestamp, Value};
use js_sys::{Array, Function, Object, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

const CLASSES: &str = "Timestamp, GeoPoint, FieldPath, FieldValue, Bytes, DocRef";

/// The exported classes (plus a stand-in `DocumentReference`) as JS constructors.
fn classes() -> Array {
    let ctor = |v: JsValue| {
        Reflect::get(&Object::get_prototype_of(&v), &"constructor".into()).expect("constructor")
    };
    let args = Array::of5(
        &ctor(Timestamp::now().into()),
        &ctor(GeoPoint::new(0.0, 0.0).unwrap().into()),
        &ctor(JsFieldPath::document_id().into()),
        &ctor(FieldValue::server_timestamp().into()),
        &ctor(Bytes::from_vec(Vec::new()).into()),
    );
    args.push(&doc_ref_class());
    args
}

/// What the API module's `DocumentReference` promises: getters `__hearthKind` and `path`.
fn doc_ref_class() -> JsValue {
    let make = Function::new_no_args(
        "if (!globalThis.__TestDocRef) {
           globalThis.__TestDocRef = class DocumentReference {
             constructor(path) { this._path = path; }
             get __hearthKind() { return 'reference'; }
             get path() { return this._path; }
           };
         }
         return globalThis.__TestDocRef;",
    );
    let class = make.call0(&JsValue::NULL).unwrap();
    set_reference_factory(Function::new_with_args(
        "path",
        "return new globalThis.__TestDocRef(path);",
    ));
    class
}

/// Runs a JS function body with the classes in scope and returns its result.
fn js(body: &str) -> JsValue {
    Function::new_with_args(CLASSES, body)
        .apply(&JsValue::NULL, &classes())
        .unwrap_or_else(|e| panic!("JS threw {e:?} in: {body}"))
}

/// Runs a JS function body that must throw; returns the thrown value.
fn js_throws(body: &str) -> JsValue {
    match Function::new_with_args(CLASSES, body).apply(&JsValue::NULL, &classes()) {
        Ok(v) => panic!("expected a throw, got {v:?} from: {body}"),
        Err(e) => e,
    }
}

/// The `message` and `code` of a thrown Hearth error.
fn thrown(e: &JsValue) -> (String, String) {
    let get = |k: &str| {
        Reflect::get(e, &k.into())
            .unwrap()
            .as_string()
            .unwrap_or_default()
    };
    (get("message"), get("code"))
}

fn val(body: &str) -> Value {
    to_value(&js(body)).unwrap_or_else(|e| panic!("{e} for: {body}"))
}

fn val_err(body: &str) -> ClientError {
    match to_value(&js(body)) {
        Ok(v) => panic!("expected an error, got {v:?} for: {body}"),
        Err(e) => e,
    }
}

fn map(entries: &[(&str, Value)]) -> Map {
    entries
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

fn fp(s: &str) -> FieldPath {
    FieldPath::parse(s).unwrap()
}

fn ts(seconds: i64, nanos: i64) -> Value {
    Value::Timestamp(CoreTimestamp::new(seconds, nanos).unwrap())
}

/// Runs JS `body` with the JS form of `v` as `x`.
fn with_x(v: &JsValue, body: &str) -> JsValue {
    let args = classes();
    args.push(v);
    Function::new_with_args(&format!("{CLASSES}, x"), body)
        .apply(&JsValue::NULL, &args)
        .unwrap_or_else(|e| panic!("JS threw {e:?} in: {body}"))
}

#[path = "convert/api.rs"]
mod api;
#[path = "convert/tabs.rs"]
mod tabs;
#[path = "convert/values.rs"]
mod values;
#[path = "convert/writes.rs"]
mod writes;
