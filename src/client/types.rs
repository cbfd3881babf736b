//! The value classes of the JavaScript API (`Timestamp`, `GeoPoint`, `FieldPath`, `FieldValue`,
//! `Bytes`), Firestore's namespaced ones, and how Rust recognises their instances in a `JsValue`.
//!
//! Each class wraps a core type (the core types never carry `#[wasm_bindgen]`).
//!
//! Recognising an instance. wasm-bindgen cannot borrow an exported struct out of an arbitrary
//! `JsValue`: its `TryFromJsValue` *moves* the Rust value out, leaving the caller's JS object
//! dead. So recognition is two steps, in [`instance_of`]:
//! 1. Every class has a hidden prototype getter `__hearthKind` (`"timestamp"`, `"geopoint"`,
//!    `"bytes"`, `"fieldpath"`, `"fieldvalue"`; the API's `DocumentReference` says
//!    `"reference"`). A plain object that merely has an own `__hearthKind` key is data, not an
//!    instance, so the key must come from the prototype chain.
//! 2. For our own classes, the hidden method `__hearthClone()` makes a fresh JS wrapper of a
//!    copy, and that copy (never the caller's object) is unwrapped with wasm-bindgen's
//!    `TryFromJsValue`, whose glue checks `instanceof` against this module's class. So the data
//!    read is exactly the Rust value, a look-alike from elsewhere is refused, and the caller's
//!    object stays usable. A freed object (`.free()`) throws in step 1 or 2 and gives an
//!    `invalid-argument` error instead of a wrong value.
//!
//! A `DocumentReference` (defined by the API module) is recognised by its `__hearthKind`
//! getter and read through its `path` getter (a document path string).
//!
//! [`describe`] names any JS value in error messages, these classes included. This module
//! does not depend on `convert` (which depends on it): `FieldValue.isEqual()`, which compares
//! array operands as the values they convert to, is defined there.

use std::cell::OnceCell;

use js_sys::{Array, BigInt, Date, Function, Object, Reflect, Uint8Array};
use wasm_bindgen::convert::TryFromJsValue;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use super::error::ClientError;
use super::js::{
    base64_decode, base64_encode, constructor_name, is_plain_object, js_error_text, js_number,
    json_object, number_value,
};
use hearth_core::path::{DocumentName, FieldPath as CoreFieldPath};
use hearth_core::value::{
    GeoPoint as CoreGeoPoint, Timestamp as CoreTimestamp, Value, MAX_TIMESTAMP_SECONDS,
    MIN_TIMESTAMP_SECONDS,
};

/// Name of the hidden getter that tells what a Hearth object is.
pub const KIND_KEY: &str = "__hearthKind";
/// Name of the hidden method that returns a fresh copy of one of this module's instances.
const CLONE_KEY: &str = "__hearthClone";

/// `__hearthKind` of the API's `DocumentReference`.
pub const KIND_REFERENCE: &str = "reference";
const KIND_TIMESTAMP: &str = "timestamp";
const KIND_GEOPOINT: &str = "geopoint";
const KIND_BYTES: &str = "bytes";
const KIND_FIELD_PATH: &str = "fieldpath";
const KIND_FIELD_VALUE: &str = "fieldvalue";

thread_local! {
    static KIND_JS: OnceCell<JsValue> = const { OnceCell::new() };
}

fn kind_key() -> JsValue {
    KIND_JS.with(|k| k.get_or_init(|| JsValue::from_str(KIND_KEY)).clone())
}

// ---------------------------------------------------------------------------------------------
// Timestamp

/// A point in time with microsecond precision (nanoseconds are truncated to whole
/// microseconds, as Hearth stores them). Firestore's `Timestamp`.
#[wasm_bindgen]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timestamp {
    /// The core value it wraps (the core types carry no `#[wasm_bindgen]`).
    inner: CoreTimestamp,
}

/// Builds a timestamp from JS numbers, checking that they are integers and in range.
pub fn timestamp_from_parts(seconds: f64, nanos: f64) -> Result<CoreTimestamp, ClientError> {
    if !seconds.is_finite() || seconds.fract() != 0.0 {
        return Err(ClientError::invalid(format!(
            "Timestamp seconds must be an integer, but was: {}",
            js_number(seconds)
        )));
    }
    if !nanos.is_finite() || !(0.0..1e9).contains(&nanos) {
        return Err(ClientError::invalid(format!(
            "Timestamp nanoseconds out of range: {} (allowed: 0 to 999999999)",
            js_number(nanos)
        )));
    }
    if !(MIN_TIMESTAMP_SECONDS as f64..=MAX_TIMESTAMP_SECONDS as f64).contains(&seconds) {
        return Err(ClientError::invalid(format!(
            "Timestamp seconds out of range: {} (allowed: {MIN_TIMESTAMP_SECONDS} to \
             {MAX_TIMESTAMP_SECONDS}, years 1 to 9999)",
            js_number(seconds)
        )));
    }
    CoreTimestamp::new(seconds as i64, nanos.floor() as i64)
        .map_err(|e| ClientError::invalid(e.to_string()))
}

/// Firestore's `Timestamp.fromMillis` arithmetic (floor of seconds, then of nanoseconds),
/// then Hearth's microsecond truncation.
pub fn timestamp_from_millis(ms: f64) -> Result<CoreTimestamp, ClientError> {
    if !ms.is_finite() {
        return Err(ClientError::invalid(format!(
            "Timestamp milliseconds must be a finite number, but was: {}",
            js_number(ms)
        )));
    }
    let seconds = (ms / 1000.0).floor();
    let nanos = ((ms - seconds * 1000.0) * 1e6).floor();
    timestamp_from_parts(seconds, nanos)
}

#[wasm_bindgen]
impl Timestamp {
    /// `new Timestamp(seconds, nanoseconds)`: seconds since the Unix epoch (an integer, years
    /// 1 to 9999) and nanoseconds (0 to 999,999,999, truncated to microseconds).
    #[wasm_bindgen(constructor)]
    pub fn new(seconds: f64, nanoseconds: f64) -> Result<Timestamp, JsValue> {
        Ok(Timestamp {
            inner: timestamp_from_parts(seconds, nanoseconds)?,
        })
    }

    /// The current time (millisecond precision, from `Date.now()`).
    pub fn now() -> Timestamp {
        Timestamp {
            inner: timestamp_from_millis(Date::now()).expect("Date.now() is in range"),
        }
    }

    /// The timestamp `ms` milliseconds after the epoch (fractions of a millisecond kept down
    /// to the microsecond).
    #[wasm_bindgen(js_name = fromMillis)]
    pub fn from_millis(ms: f64) -> Result<Timestamp, JsValue> {
        Ok(Timestamp {
            inner: timestamp_from_millis(ms)?,
        })
    }

    /// The timestamp of a JS `Date`.
    #[wasm_bindgen(js_name = fromDate)]
    pub fn from_date(
        #[wasm_bindgen(unchecked_param_type = "Date")] date: &JsValue,
    ) -> Result<Timestamp, JsValue> {
        let Some(d) = date.dyn_ref::<Date>() else {
            return Err(ClientError::invalid("Timestamp.fromDate() requires a Date").into());
        };
        Ok(Timestamp {
            inner: timestamp_from_millis(d.get_time())?,
        })
    }

    /// Whole seconds since the epoch (negative before 1970).
    #[wasm_bindgen(getter)]
    pub fn seconds(&self) -> f64 {
        self.inner.seconds() as f64
    }

    /// Nanoseconds within the second (a multiple of 1000).
    #[wasm_bindgen(getter)]
    pub fn nanoseconds(&self) -> f64 {
        f64::from(self.inner.nanos())
    }

    /// Milliseconds since the epoch, with a fraction for the sub-millisecond part.
    #[wasm_bindgen(js_name = toMillis)]
    pub fn to_millis(&self) -> f64 {
        self.seconds() * 1000.0 + self.nanoseconds() / 1e6
    }

    /// A JS `Date` (millisecond precision).
    #[wasm_bindgen(js_name = toDate)]
    pub fn to_date(&self) -> Date {
        Date::new(&JsValue::from_f64(self.to_millis()))
    }

    /// Whether `other` is a Timestamp of the same instant.
    #[wasm_bindgen(js_name = isEqual)]
    pub fn is_equal(
        &self,
        #[wasm_bindgen(unchecked_param_type = "Timestamp")] other: &JsValue,
    ) -> bool {
        matches!(instance_of(other), Ok(Some(Instance::Timestamp(t))) if t == self.inner)
    }

    /// A string whose lexicographic order is the timestamps' order, so `<` and `>` work on
    /// Timestamps: 12 digits of seconds offset from year 1, `.`, 9 digits of nanoseconds.
    #[wasm_bindgen(js_name = valueOf)]
    pub fn value_of(&self) -> String {
        format!(
            "{:012}.{:09}",
            self.inner.seconds() - MIN_TIMESTAMP_SECONDS,
            self.inner.nanos()
        )
    }

    /// `Timestamp(seconds=…, nanoseconds=…)`.
    #[wasm_bindgen(js_name = toString)]
    pub fn to_string_js(&self) -> String {
        format!(
            "Timestamp(seconds={}, nanoseconds={})",
            self.inner.seconds(),
            self.inner.nanos()
        )
    }

    /// `{ seconds, nanoseconds, type: 'firestore/timestamp/1.0' }`.
    #[wasm_bindgen(
        js_name = toJSON,
        unchecked_return_type = "{ seconds: number; nanoseconds: number; type: string }"
    )]
    pub fn to_json(&self) -> Object {
        json_object(&[
            ("seconds", self.seconds().into()),
            ("nanoseconds", self.nanoseconds().into()),
            ("type", "firestore/timestamp/1.0".into()),
        ])
    }

    #[wasm_bindgen(getter = __hearthKind, skip_typescript)]
    pub fn hearth_kind(&self) -> String {
        KIND_TIMESTAMP.to_owned()
    }

    #[wasm_bindgen(js_name = __hearthClone, skip_typescript)]
    pub fn hearth_clone(&self) -> Timestamp {
        *self
    }
}

impl Timestamp {
    pub fn from_core(inner: CoreTimestamp) -> Timestamp {
        Timestamp { inner }
    }

    pub fn core(&self) -> CoreTimestamp {
        self.inner
    }
}

// ---------------------------------------------------------------------------------------------
// GeoPoint

/// A latitude/longitude pair. Firestore's `GeoPoint`.
#[wasm_bindgen]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GeoPoint {
    /// The core value it wraps (the core types carry no `#[wasm_bindgen]`).
    inner: CoreGeoPoint,
}

/// Builds a geopoint, with Firestore's messages for out-of-range coordinates.
pub fn geopoint_from_parts(latitude: f64, longitude: f64) -> Result<CoreGeoPoint, ClientError> {
    if !(-90.0..=90.0).contains(&latitude) {
        return Err(ClientError::invalid(format!(
            "Latitude must be a number between -90 and 90, but was: {}",
            js_number(latitude)
        )));
    }
    if !(-180.0..=180.0).contains(&longitude) {
        return Err(ClientError::invalid(format!(
            "Longitude must be a number between -180 and 180, but was: {}",
            js_number(longitude)
        )));
    }
    CoreGeoPoint::new(latitude, longitude).map_err(|e| ClientError::invalid(e.to_string()))
}

#[wasm_bindgen]
impl GeoPoint {
    /// `new GeoPoint(latitude, longitude)`: latitude in [-90, 90], longitude in [-180, 180].
    #[wasm_bindgen(constructor)]
    pub fn new(latitude: f64, longitude: f64) -> Result<GeoPoint, JsValue> {
        Ok(GeoPoint {
            inner: geopoint_from_parts(latitude, longitude)?,
        })
    }

    #[wasm_bindgen(getter)]
    pub fn latitude(&self) -> f64 {
        self.inner.latitude()
    }

    #[wasm_bindgen(getter)]
    pub fn longitude(&self) -> f64 {
        self.inner.longitude()
    }

    /// Whether `other` is a GeoPoint at the same coordinates.
    #[wasm_bindgen(js_name = isEqual)]
    pub fn is_equal(
        &self,
        #[wasm_bindgen(unchecked_param_type = "GeoPoint")] other: &JsValue,
    ) -> bool {
        matches!(instance_of(other), Ok(Some(Instance::GeoPoint(g))) if g == self.inner)
    }

    /// `{ latitude, longitude, type: 'firestore/geoPoint/1.0' }`.
    #[wasm_bindgen(
        js_name = toJSON,
        unchecked_return_type = "{ latitude: number; longitude: number; type: string }"
    )]
    pub fn to_json(&self) -> Object {
        json_object(&[
            ("latitude", self.latitude().into()),
            ("longitude", self.longitude().into()),
            ("type", "firestore/geoPoint/1.0".into()),
        ])
    }

    #[wasm_bindgen(getter = __hearthKind, skip_typescript)]
    pub fn hearth_kind(&self) -> String {
        KIND_GEOPOINT.to_owned()
    }

    #[wasm_bindgen(js_name = __hearthClone, skip_typescript)]
    pub fn hearth_clone(&self) -> GeoPoint {
        *self
    }
}

impl GeoPoint {
    pub fn from_core(inner: CoreGeoPoint) -> GeoPoint {
        GeoPoint { inner }
    }

    pub fn core(&self) -> CoreGeoPoint {
        self.inner
    }
}

// ---------------------------------------------------------------------------------------------
// Bytes

/// An immutable array of bytes. Firestore's `Bytes`.
#[wasm_bindgen]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bytes {
    /// The bytes, owned: JS gets copies, so the value stays immutable.
    data: Vec<u8>,
}

#[wasm_bindgen]
impl Bytes {
    /// A copy of the bytes of a `Uint8Array`.
    #[wasm_bindgen(js_name = fromUint8Array)]
    pub fn from_uint8_array(
        #[wasm_bindgen(unchecked_param_type = "Uint8Array")] array: &JsValue,
    ) -> Result<Bytes, JsValue> {
        let Some(a) = array.dyn_ref::<Uint8Array>() else {
            return Err(
                ClientError::invalid("Bytes.fromUint8Array() requires a Uint8Array").into(),
            );
        };
        Ok(Bytes { data: a.to_vec() })
    }

    /// The bytes of a base64 string (standard alphabet; padding optional, whitespace ignored).
    #[wasm_bindgen(js_name = fromBase64String)]
    pub fn from_base64_string(
        #[wasm_bindgen(unchecked_param_type = "string")] base64: &JsValue,
    ) -> Result<Bytes, JsValue> {
        let Some(s) = base64.as_string() else {
            return Err(ClientError::invalid("Bytes.fromBase64String() requires a string").into());
        };
        match base64_decode(&s) {
            Some(data) => Ok(Bytes { data }),
            None => Err(ClientError::invalid(
                "Failed to construct data from Base64 string: it is not valid base64",
            )
            .into()),
        }
    }

    /// A new `Uint8Array` with a copy of the bytes.
    #[wasm_bindgen(js_name = toUint8Array)]
    pub fn to_uint8_array(&self) -> Uint8Array {
        Uint8Array::from(self.data.as_slice())
    }

    /// The bytes as base64 (standard alphabet, padded).
    #[wasm_bindgen(js_name = toBase64)]
    pub fn to_base64(&self) -> String {
        base64_encode(&self.data)
    }

    /// `Bytes(base64: …)`.
    #[wasm_bindgen(js_name = toString)]
    pub fn to_string_js(&self) -> String {
        format!("Bytes(base64: {})", self.to_base64())
    }

    /// Whether `other` is a Bytes with the same content.
    #[wasm_bindgen(js_name = isEqual)]
    pub fn is_equal(
        &self,
        #[wasm_bindgen(unchecked_param_type = "Bytes")] other: &JsValue,
    ) -> bool {
        matches!(instance_of(other), Ok(Some(Instance::Bytes(b))) if b == self.data)
    }

    #[wasm_bindgen(getter = __hearthKind, skip_typescript)]
    pub fn hearth_kind(&self) -> String {
        KIND_BYTES.to_owned()
    }

    #[wasm_bindgen(js_name = __hearthClone, skip_typescript)]
    pub fn hearth_clone(&self) -> Bytes {
        self.clone()
    }
}

impl Bytes {
    pub fn from_vec(data: Vec<u8>) -> Bytes {
        Bytes { data }
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.data
    }
}

// ---------------------------------------------------------------------------------------------
// FieldPath

/// A path to a field given as separate names, so names may contain dots.
/// Firestore's `FieldPath`.
#[wasm_bindgen]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldPath {
    /// The core path it wraps (validated at construction).
    inner: CoreFieldPath,
}

#[wasm_bindgen]
impl FieldPath {
    /// `new FieldPath('address', 'zip.code')`: one argument per field name, none empty.
    #[wasm_bindgen(constructor, variadic)]
    pub fn new(
        #[wasm_bindgen(js_name = fieldNames, unchecked_param_type = "string[]")] field_names: Array,
    ) -> Result<FieldPath, JsValue> {
        if field_names.length() == 0 {
            return Err(
                ClientError::invalid("Invalid field path (). Paths must not be empty.").into(),
            );
        }
        let mut segments = Vec::with_capacity(field_names.length() as usize);
        for (i, name) in field_names.iter().enumerate() {
            match name.as_string() {
                Some(s) if !s.is_empty() => segments.push(s),
                _ => {
                    return Err(ClientError::invalid(format!(
                        "Invalid field name at argument {}. Field names must be non-empty \
                         strings, but it was: {}",
                        i + 1,
                        describe(&name)
                    ))
                    .into())
                }
            }
        }
        Ok(FieldPath {
            inner: CoreFieldPath::from_segments(segments).map_err(ClientError::from)?,
        })
    }

    /// The special path of the document's id (`__name__`), for queries.
    #[wasm_bindgen(js_name = documentId)]
    pub fn document_id() -> FieldPath {
        FieldPath {
            inner: CoreFieldPath::document_id(),
        }
    }

    /// Whether `other` is a FieldPath with the same names.
    #[wasm_bindgen(js_name = isEqual)]
    pub fn is_equal(
        &self,
        #[wasm_bindgen(unchecked_param_type = "FieldPath")] other: &JsValue,
    ) -> bool {
        matches!(instance_of(other), Ok(Some(Instance::FieldPath(p))) if p == self.inner)
    }

    /// The canonical dotted form (names with special characters in backticks).
    #[wasm_bindgen(js_name = toString)]
    pub fn to_string_js(&self) -> String {
        self.inner.to_string()
    }

    #[wasm_bindgen(getter = __hearthKind, skip_typescript)]
    pub fn hearth_kind(&self) -> String {
        KIND_FIELD_PATH.to_owned()
    }

    #[wasm_bindgen(js_name = __hearthClone, skip_typescript)]
    pub fn hearth_clone(&self) -> FieldPath {
        self.clone()
    }
}

impl FieldPath {
    pub fn from_core(inner: CoreFieldPath) -> FieldPath {
        FieldPath { inner }
    }

    pub fn core(&self) -> &CoreFieldPath {
        &self.inner
    }
}

// ---------------------------------------------------------------------------------------------
// FieldValue

/// What a `FieldValue` sentinel asks for. Array operands stay JS values until the write is
/// parsed, so their errors can name the field they were found in (as Firestore does).
#[derive(Clone, Debug)]
pub enum Sentinel {
    Delete,
    ServerTimestamp,
    /// The operand, already classified (`Integer` or `Double`).
    Increment(Value),
    ArrayUnion(Array),
    ArrayRemove(Array),
}

impl Sentinel {
    /// The JS call that made it, for messages: `FieldValue.increment()`.
    pub fn method_name(&self) -> &'static str {
        match self {
            Sentinel::Delete => "FieldValue.delete()",
            Sentinel::ServerTimestamp => "FieldValue.serverTimestamp()",
            Sentinel::Increment(_) => "FieldValue.increment()",
            Sentinel::ArrayUnion(_) => "FieldValue.arrayUnion()",
            Sentinel::ArrayRemove(_) => "FieldValue.arrayRemove()",
        }
    }
}

/// A sentinel for `set()` and `update()` data: delete a field, or transform it at the
/// authority. Firestore's `FieldValue`.
#[wasm_bindgen]
#[derive(Clone, Debug)]
pub struct FieldValue {
    /// What the sentinel asks for, turned into a transform or a delete when a write is parsed.
    sentinel: Sentinel,
}

#[wasm_bindgen]
impl FieldValue {
    /// Deletes the field (`update()`, or `set()` with `merge`).
    #[wasm_bindgen(js_name = "delete")]
    pub fn delete_field() -> FieldValue {
        FieldValue {
            sentinel: Sentinel::Delete,
        }
    }

    /// The commit time, filled in by the relay (by the local clock until acknowledged).
    #[wasm_bindgen(js_name = serverTimestamp)]
    pub fn server_timestamp() -> FieldValue {
        FieldValue {
            sentinel: Sentinel::ServerTimestamp,
        }
    }

    /// Adds `n` to the field (a missing or non-numeric field becomes `n`). Integers stay
    /// integers; a fractional `n` makes a double.
    pub fn increment(
        #[wasm_bindgen(unchecked_param_type = "number")] n: &JsValue,
    ) -> Result<FieldValue, JsValue> {
        let operand = if let Some(f) = n.as_f64() {
            number_value(f)
        } else if let Some(i) = i64::try_from_js_value_ref(n) {
            Value::Integer(i)
        } else {
            return Err(ClientError::invalid(format!(
                "FieldValue.increment() requires a number, but it was: {}",
                describe(n)
            ))
            .into());
        };
        Ok(FieldValue {
            sentinel: Sentinel::Increment(operand),
        })
    }

    /// Appends each element that the array does not already contain.
    #[wasm_bindgen(js_name = arrayUnion, variadic)]
    pub fn array_union(
        #[wasm_bindgen(unchecked_param_type = "unknown[]")] elements: Array,
    ) -> FieldValue {
        FieldValue {
            sentinel: Sentinel::ArrayUnion(elements),
        }
    }

    /// Removes every occurrence of each element.
    #[wasm_bindgen(js_name = arrayRemove, variadic)]
    pub fn array_remove(
        #[wasm_bindgen(unchecked_param_type = "unknown[]")] elements: Array,
    ) -> FieldValue {
        FieldValue {
            sentinel: Sentinel::ArrayRemove(elements),
        }
    }

    #[wasm_bindgen(getter = __hearthKind, skip_typescript)]
    pub fn hearth_kind(&self) -> String {
        KIND_FIELD_VALUE.to_owned()
    }

    #[wasm_bindgen(js_name = __hearthClone, skip_typescript)]
    pub fn hearth_clone(&self) -> FieldValue {
        self.clone()
    }
}

impl FieldValue {
    pub fn sentinel(&self) -> &Sentinel {
        &self.sentinel
    }
}

// ---------------------------------------------------------------------------------------------
// Recognition

/// One of Hearth's own objects, read out of a `JsValue`.
#[derive(Clone, Debug)]
pub enum Instance {
    Timestamp(CoreTimestamp),
    GeoPoint(CoreGeoPoint),
    Bytes(Vec<u8>),
    FieldPath(CoreFieldPath),
    FieldValue(Sentinel),
    /// A `DocumentReference` of the API module.
    Reference(DocumentName),
}

/// What `v` is, if it is an instance of one of Hearth's classes (see the module doc).
/// `Ok(None)` for everything else, including plain objects with a `__hearthKind` key.
pub fn instance_of(v: &JsValue) -> Result<Option<Instance>, ClientError> {
    Ok(match hearth_kind(v)? {
        None => None,
        Some(kind) => Some(match kind.as_str() {
            KIND_TIMESTAMP => Instance::Timestamp(unwrap_copy::<Timestamp>(v, "Timestamp")?.inner),
            KIND_GEOPOINT => Instance::GeoPoint(unwrap_copy::<GeoPoint>(v, "GeoPoint")?.inner),
            KIND_BYTES => Instance::Bytes(unwrap_copy::<Bytes>(v, "Bytes")?.data),
            KIND_FIELD_PATH => Instance::FieldPath(unwrap_copy::<FieldPath>(v, "FieldPath")?.inner),
            KIND_FIELD_VALUE => {
                Instance::FieldValue(unwrap_copy::<FieldValue>(v, "FieldValue")?.sentinel)
            }
            KIND_REFERENCE => Instance::Reference(reference_name(v)?),
            other => {
                return Err(ClientError::invalid(format!(
                    "Unsupported field value: a Hearth object of kind `{other}`"
                )))
            }
        }),
    })
}

/// The `__hearthKind` of `v` if it comes from a class (not an own data property).
pub fn hearth_kind(v: &JsValue) -> Result<Option<String>, ClientError> {
    if !v.is_object() {
        return Ok(None);
    }
    let key = kind_key();
    let kind = Reflect::get(v, &key).map_err(|e| {
        ClientError::invalid(format!(
            "a value could not be read (was a Hearth object freed?): {}",
            js_error_text(&e)
        ))
    })?;
    let Some(kind) = kind.as_string() else {
        return Ok(None);
    };
    if Object::has_own(v.unchecked_ref::<Object>(), &key) {
        return Ok(None);
    }
    Ok(Some(kind))
}

/// A short description of a JS value for messages, in Firestore's words.
pub fn describe(v: &JsValue) -> String {
    if v.is_undefined() {
        return "undefined".into();
    }
    if v.is_null() {
        return "null".into();
    }
    if let Some(s) = v.as_string() {
        let short: String = s.chars().take(20).collect();
        let more = if short.len() < s.len() { "..." } else { "" };
        return format!("{:?}", format!("{short}{more}"));
    }
    if let Some(n) = v.as_f64() {
        return js_number(n);
    }
    if let Some(b) = v.as_bool() {
        return b.to_string();
    }
    if v.is_bigint() {
        let digits = v
            .unchecked_ref::<BigInt>()
            .to_string(10)
            .map(String::from)
            .unwrap_or_default();
        return format!("a bigint ({digits}n)");
    }
    if v.is_function() {
        return "a function".into();
    }
    if v.is_symbol() {
        return "a symbol".into();
    }
    if Array::is_array(v) {
        return "an array".into();
    }
    match instance_of(v) {
        Ok(Some(Instance::Timestamp(_))) => return "a Timestamp".into(),
        Ok(Some(Instance::GeoPoint(_))) => return "a GeoPoint".into(),
        Ok(Some(Instance::Bytes(_))) => return "a Bytes object".into(),
        Ok(Some(Instance::FieldPath(_))) => return "a FieldPath".into(),
        Ok(Some(Instance::FieldValue(s))) => return s.method_name().into(),
        Ok(Some(Instance::Reference(_))) => return "a DocumentReference".into(),
        Ok(None) | Err(_) => {}
    }
    if is_plain_object(v) {
        return "an object".into();
    }
    match constructor_name(v) {
        Some(name) => format!("a custom {name} object"),
        None => "an object".into(),
    }
}

/// A Rust copy of one of this module's instances, without touching the caller's object.
fn unwrap_copy<T: TryFromJsValue>(v: &JsValue, class: &str) -> Result<T, ClientError> {
    let freed = |e: JsValue| {
        ClientError::invalid(format!(
            "this {class} cannot be read (was it freed?): {}",
            js_error_text(&e)
        ))
    };
    let clone = Reflect::get(v, &JsValue::from_str(CLONE_KEY))
        .map_err(freed)?
        .dyn_into::<Function>()
        .map_err(|_| foreign(class))?;
    let copy = clone.call0(v).map_err(freed)?;
    T::try_from_js_value(copy).map_err(|_| foreign(class))
}

fn foreign(class: &str) -> ClientError {
    ClientError::invalid(format!(
        "this {class} does not belong to this Hearth module (was it created by another copy \
         of the package?)"
    ))
}

fn reference_name(v: &JsValue) -> Result<DocumentName, ClientError> {
    let path = Reflect::get(v, &JsValue::from_str("path"))
        .map_err(|e| {
            ClientError::invalid(format!(
                "a DocumentReference cannot be read: {}",
                js_error_text(&e)
            ))
        })?
        .as_string()
        .ok_or_else(|| ClientError::invalid("a DocumentReference has no string `path`"))?;
    Ok(DocumentName::parse(&path)?)
}
