//! JS values to Hearth values and back, and `set()` / `update()` data with `FieldValue`
//! sentinels parsed into the write model of `core::mutation`.
//!
//! JS to Hearth ([`to_value`]), following Firestore's web SDK:
//! - `null`, booleans and strings map directly. A string with unpaired UTF-16 surrogates is
//!   refused: it has no UTF-8 form, and a lossy one would silently merge distinct keys.
//! - Numbers: an integer within the safe range (`Number.isSafeInteger`, |n| ≤ 2^53 − 1, not
//!   `-0`) is an `Integer`; every other number (fractions, `-0`, NaN, ±Infinity, 2^53 and
//!   beyond) is a `Double`. This is the SDK's `isSafeInteger` test, so `2 ** 53` is a double.
//!   A bigint is an `Integer` and must fit in 64 bits.
//! - `Timestamp` and `Date` give timestamps, `Bytes` and `Uint8Array` bytes, `GeoPoint` a
//!   geopoint, a `DocumentReference` a reference (recognition: `types`).
//! - Arrays (no array directly inside an array) and plain objects (prototype `Object.prototype`
//!   or `null`; own enumerable string keys) nest up to the document depth limit, which also
//!   stops cyclic objects. Anything else (`undefined`, functions, symbols, other classes) is
//!   refused with Firestore's message and the field where it was found:
//!   `Unsupported field value: undefined (found in field a.b)`; array elements show as
//!   `tags[2]`.
//!
//! Hearth to JS ([`from_value`]): integers and doubles become numbers (an integer beyond 2^53
//! loses precision, as in Firestore), maps plain objects, and the rest instances of the
//! classes above. References are built by the factory the API registers
//! ([`set_reference_factory`]).
//!
//! Writes ([`parse_set_data`], [`parse_update_data`], [`parse_update_pairs`]): each sentinel
//! is taken out of the data and becomes a transform (or a delete) at its field path. A map
//! that held only sentinels stays as an empty map, as Firestore's parser leaves it; the
//! mutation module treats such a map as a container, not a value, when merging.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::fmt::Write as _;

use js_sys::{Array, Date, Function, JsString, Object, Reflect, Uint8Array};
use wasm_bindgen::convert::TryFromJsValue;
use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::{JsCast, JsValue};

use super::error::ClientError;
use super::js::{is_plain_object, number_value};
use super::types::{self, describe, FieldValue, Instance, Sentinel};
use hearth_core::document::MAX_DEPTH;
use hearth_core::mutation::{FieldTransform, Mutation, SetMerge};
use hearth_core::path::{DocumentName, FieldPath};
use hearth_core::value::{Map, Value};

thread_local! {
    static REFERENCE_FACTORY: RefCell<Option<Function>> = const { RefCell::new(None) };
}

/// Data passed to `set()`: fields plus sentinel-derived parts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SetData {
    /// The data without its sentinels (maps that held only sentinels stay as `{}`).
    pub fields: Map,
    /// `serverTimestamp`, `increment`, `arrayUnion`, `arrayRemove`, in data order.
    pub transforms: Vec<(FieldPath, FieldTransform)>,
    /// `FieldValue.delete()` paths (only with `merge`).
    pub deletes: Vec<FieldPath>,
}

impl SetData {
    /// The `set` mutation of this data. With `MergeFields`, sentinels outside the listed
    /// paths are dropped, as Firestore's SDK drops them (its field mask does not cover them).
    pub fn into_mutation(self, name: DocumentName, merge: SetMerge) -> Mutation {
        let (mut transforms, mut deletes) = (self.transforms, self.deletes);
        if let SetMerge::MergeFields(listed) = &merge {
            let covered = |p: &FieldPath| listed.iter().any(|l| p.starts_with(l));
            transforms.retain(|(p, _)| covered(p));
            deletes.retain(|p| covered(p));
        }
        let mut m = Mutation::set_merge(name, self.fields, merge);
        m.transforms = transforms;
        m.field_deletes_in_merge = deletes;
        m
    }
}

/// Data passed to `update()`: field paths to set (`Some`) or delete (`None`), plus transforms.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UpdateData {
    /// The field paths to set (`Some`) or delete (`None`), in argument order.
    pub fields: Vec<(FieldPath, Option<Value>)>,
    /// `serverTimestamp`, `increment`, `arrayUnion`, `arrayRemove`, in argument order.
    pub transforms: Vec<(FieldPath, FieldTransform)>,
}

impl UpdateData {
    /// The `update` mutation of this data.
    pub fn into_mutation(self, name: DocumentName) -> Mutation {
        let mut m = Mutation::update(name, self.fields);
        m.transforms = self.transforms;
        m
    }
}

/// A data value (query operands, cursor values, ...). Sentinels are refused.
pub fn to_value(v: &JsValue) -> Result<Value, ClientError> {
    let mut p = Parser::new(Mode::Plain);
    let value = p.value(v, &mut Vec::new())?;
    Ok(value.expect("sentinels are refused in plain values"))
}

/// The list operand of an `in` or `not-in` filter. Firestore's SDK parses it as an "array
/// argument", the one place arrays may nest (`where('a', 'in', [[1], [1, 2]])` finds fields
/// equal to either array); sentinels are refused as in any plain value. Other operands,
/// `array-contains-any`'s list among them, go through [`to_value`].
pub fn to_list_operand(v: &JsValue) -> Result<Value, ClientError> {
    let mut p = Parser::new(Mode::Plain);
    p.nested_arrays = true;
    let value = p.value(v, &mut Vec::new())?;
    Ok(value.expect("sentinels are refused in plain values"))
}

// `FieldValue.isEqual()` lives here, not with the class in `types`: it compares array
// operands as the values they convert to, and `types` does not depend on this module.
#[wasm_bindgen]
impl FieldValue {
    /// Whether `other` is the same sentinel with equal operands (strict: `1` and `1.5`
    /// differ, and so do integer `0` and `-0`).
    #[wasm_bindgen(js_name = isEqual)]
    pub fn is_equal(
        &self,
        #[wasm_bindgen(unchecked_param_type = "FieldValue")] other: &JsValue,
    ) -> bool {
        let Ok(Some(Instance::FieldValue(other))) = types::instance_of(other) else {
            return false;
        };
        let elements =
            |a: &Array| -> Option<Vec<Value>> { a.iter().map(|e| to_value(&e).ok()).collect() };
        match (self.sentinel(), &other) {
            (Sentinel::Delete, Sentinel::Delete)
            | (Sentinel::ServerTimestamp, Sentinel::ServerTimestamp) => true,
            (Sentinel::Increment(a), Sentinel::Increment(b)) => a == b,
            (Sentinel::ArrayUnion(a), Sentinel::ArrayUnion(b))
            | (Sentinel::ArrayRemove(a), Sentinel::ArrayRemove(b)) => {
                matches!((elements(a), elements(b)), (Some(x), Some(y)) if x == y)
            }
            _ => false,
        }
    }
}

/// The JS form of a value: see the module doc.
pub fn from_value(v: &Value) -> JsValue {
    match v {
        Value::Null => JsValue::NULL,
        Value::Boolean(b) => JsValue::from_bool(*b),
        Value::Integer(i) => JsValue::from_f64(*i as f64),
        Value::Double(d) => JsValue::from_f64(*d),
        Value::Timestamp(t) => types::Timestamp::from_core(*t).into(),
        Value::String(s) => super::js::interned(s),
        Value::Bytes(b) => types::Bytes::from_vec(b.clone()).into(),
        Value::Reference(name) => reference(name),
        Value::GeoPoint(g) => types::GeoPoint::from_core(*g).into(),
        Value::Array(a) => a.iter().map(from_value).collect::<Array>().into(),
        Value::Map(m) => map_to_js(m),
    }
}

/// A plain object with one property per field.
pub fn map_to_js(m: &Map) -> JsValue {
    let o = Object::new();
    for (k, v) in m {
        let (key, value) = (super::js::interned(k), from_value(v));
        if k == "__proto__" {
            // Assignment would call the prototype setter; define an own data property.
            let desc = Object::new();
            for (name, v) in [
                ("value", value),
                ("writable", JsValue::TRUE),
                ("enumerable", JsValue::TRUE),
                ("configurable", JsValue::TRUE),
            ] {
                Reflect::set(&desc, &JsValue::from_str(name), &v).expect("fresh object");
            }
            Object::define_property(&o, &key, &desc);
        } else {
            super::js::set_fresh(&o, &key, &value);
        }
    }
    o.into()
}

/// Registers how a `DocumentReference` JS object is built from a document path; the API
/// module calls it once. [`from_value`] panics on a reference before that, as it would
/// otherwise hand out a wrong type.
pub fn set_reference_factory(f: Function) {
    REFERENCE_FACTORY.with(|r| *r.borrow_mut() = Some(f));
}

fn reference(name: &DocumentName) -> JsValue {
    let factory = REFERENCE_FACTORY
        .with(|r| r.borrow().clone())
        .expect("a DocumentReference factory is registered (convert::set_reference_factory)");
    factory
        .call1(&JsValue::UNDEFINED, &JsValue::from_str(&name.to_string()))
        .unwrap_or_else(|e| panic!("the DocumentReference factory failed for `{name}`: {e:?}"))
}

/// `set(data)` (or `set(data, { merge })` when `merge`): `FieldValue.delete()` only with
/// merge; other sentinels become transforms at their field path.
pub fn parse_set_data(obj: &JsValue, merge: bool) -> Result<SetData, ClientError> {
    let mut p = Parser::new(if merge { Mode::MergeSet } else { Mode::Set });
    check_data_object(obj)?;
    let fields = p.map(obj, &mut Vec::new())?;
    Ok(SetData {
        fields,
        transforms: p.transforms,
        deletes: p.deletes,
    })
}

/// `update({ 'a.b': 1, c: FieldValue.delete() })`: keys are dotted field paths.
pub fn parse_update_data(obj: &JsValue) -> Result<UpdateData, ClientError> {
    check_data_object(obj)?;
    let keys = Object::keys(obj.unchecked_ref::<Object>());
    let mut entries = Vec::with_capacity(keys.length() as usize);
    for key in keys.iter() {
        let name = js_string(&key)
            .ok_or_else(|| ClientError::invalid("a field path has unpaired UTF-16 surrogates"))?;
        let path = dotted_field_path(&name)?;
        let value = Reflect::get(obj, &key).map_err(|e| read_failed(&e))?;
        entries.push((path, value));
    }
    parse_update_entries(entries)
}

/// `update('a', 1, new FieldPath('b', 'c'), 2, ...)`: `args` is the whole argument list.
pub fn parse_update_pairs(args: &Array) -> Result<UpdateData, ClientError> {
    let n = args.length();
    if n == 0 || n % 2 != 0 {
        return Err(ClientError::invalid(
            "update() needs an even number of arguments that alternate between field paths \
             and values",
        ));
    }
    let mut entries = Vec::with_capacity(n as usize / 2);
    for i in (0..n).step_by(2) {
        let path = field_path_arg(&args.get(i)).map_err(|e| {
            ClientError::invalid(format!("update() argument {}: {}", i + 1, e.message))
        })?;
        entries.push((path, args.get(i + 1)));
    }
    parse_update_entries(entries)
}

/// A field path argument: a dotted string (backticks quote names with dots) or a `FieldPath`.
pub fn field_path_arg(v: &JsValue) -> Result<FieldPath, ClientError> {
    if v.is_string() {
        let s = js_string(v)
            .ok_or_else(|| ClientError::invalid("a field path has unpaired UTF-16 surrogates"))?;
        return dotted_field_path(&s);
    }
    match types::instance_of(v)? {
        Some(Instance::FieldPath(p)) => Ok(p),
        _ => Err(ClientError::invalid(format!(
            "Field paths must be strings or FieldPath objects, but it was: {}",
            describe(v)
        ))),
    }
}

/// A field path given as a dotted string, wherever the API takes one (`where`, `orderBy`,
/// `select`, `sum` / `average`, `update`'s paths, `mergeFields`, `DocumentSnapshot.get`).
/// Firestore's SDK refuses `~`, `*`, `/`, `[` and `]` anywhere in such a string (they are
/// reserved for path syntax), before splitting it; a `FieldPath` built from segments may
/// name any field, so the core's `FieldPath` has no such rule.
pub fn dotted_field_path(s: &str) -> Result<FieldPath, ClientError> {
    if s.contains(['~', '*', '/', '[', ']']) {
        return Err(ClientError::invalid(format!(
            "Invalid field path ({s}). Paths must not contain '~', '*', '/', '[', or ']'"
        )));
    }
    Ok(FieldPath::parse(s)?)
}

/// Firestore keeps the last value of a path given twice; then each value is parsed at its
/// path, and `FieldValue.delete()` is allowed only as a whole value.
fn parse_update_entries(entries: Vec<(FieldPath, JsValue)>) -> Result<UpdateData, ClientError> {
    let mut seen = BTreeSet::new();
    let mut kept: Vec<(FieldPath, JsValue)> = entries
        .into_iter()
        .rev()
        .filter(|(p, _)| seen.insert(p.clone()))
        .collect();
    kept.reverse();
    let mut p = Parser::new(Mode::Update);
    let mut fields = Vec::with_capacity(kept.len());
    for (path, value) in kept {
        let mut at: Vec<Seg> = path.segments().iter().cloned().map(Seg::Key).collect();
        let inst = types::instance_of(&value).map_err(|e| fail(&at, &e.message))?;
        if matches!(inst, Some(Instance::FieldValue(Sentinel::Delete))) {
            fields.push((path, None));
        } else if let Some(v) = p.value(&value, &mut at)? {
            fields.push((path, Some(v)));
        }
    }
    Ok(UpdateData {
        fields,
        transforms: p.transforms,
    })
}

fn check_data_object(obj: &JsValue) -> Result<(), ClientError> {
    if is_plain_object(obj) {
        Ok(())
    } else {
        Err(ClientError::invalid(format!(
            "Data must be an object, but it was: {}",
            describe(obj)
        )))
    }
}

/// A JS string as UTF-8, or `None` if it holds unpaired surrogates. The conversion turns those
/// into U+FFFD, so the exact check runs only when U+FFFD shows up.
fn js_string(v: &JsValue) -> Option<String> {
    let s = v.as_string()?;
    if s.contains('\u{FFFD}') && !v.unchecked_ref::<JsString>().is_valid_utf16() {
        return None;
    }
    Some(s)
}

fn read_failed(e: &JsValue) -> ClientError {
    let text = match e.dyn_ref::<js_sys::Error>() {
        Some(err) => String::from(err.message()),
        None => format!("{e:?}"),
    };
    ClientError::invalid(format!("a value could not be read: {text}"))
}

/// One step of the location of a value, for messages: a field name or an array index.
#[derive(Clone, Debug)]
enum Seg {
    Key(String),
    Index(u32),
}

/// `a.b`, `` a.`x.y` ``, `tags[2].name`: field names as canonical field path segments.
fn render(at: &[Seg]) -> String {
    let mut out = String::new();
    for seg in at {
        match seg {
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                let mut chars = k.chars();
                let simple = matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
                    && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
                if simple {
                    out.push_str(k);
                } else {
                    out.push('`');
                    for c in k.chars() {
                        if c == '`' || c == '\\' {
                            out.push('\\');
                        }
                        out.push(c);
                    }
                    out.push('`');
                }
            }
            Seg::Index(i) => {
                let _ = write!(out, "[{i}]");
            }
        }
    }
    out
}

/// An `invalid-argument` error naming where the value was found.
fn fail(at: &[Seg], what: &str) -> ClientError {
    if at.is_empty() {
        ClientError::invalid(what)
    } else {
        ClientError::invalid(format!("{what} (found in field {})", render(at)))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// A value outside writes: sentinels are refused.
    Plain,
    /// `set()` without merge: `FieldValue.delete()` is refused.
    Set,
    /// `set()` with merge: deletes allowed anywhere outside arrays.
    MergeSet,
    /// Values of `update()`: deletes only as a whole value (handled by the caller).
    Update,
}

struct Parser {
    /// What the data is for: which sentinels are allowed where.
    mode: Mode,
    /// The transforms taken out of the data so far, in data order.
    transforms: Vec<(FieldPath, FieldTransform)>,
    /// The `FieldValue.delete()` paths taken out so far (merge sets only).
    deletes: Vec<FieldPath>,
    /// Arrays may hold arrays (an `in` / `not-in` list); otherwise they are refused.
    nested_arrays: bool,
}

impl Parser {
    fn new(mode: Mode) -> Parser {
        Parser {
            mode,
            transforms: Vec::new(),
            deletes: Vec::new(),
            nested_arrays: false,
        }
    }

    /// The value at `at`, or `None` if it was a sentinel (recorded in the parser).
    fn value(&mut self, v: &JsValue, at: &mut Vec<Seg>) -> Result<Option<Value>, ClientError> {
        if at.len() > MAX_DEPTH {
            return Err(fail(
                at,
                &format!(
                    "Unsupported field value: maps and arrays nest more than {MAX_DEPTH} levels \
                     deep (is the object cyclic?)"
                ),
            ));
        }
        if v.is_null() {
            return Ok(Some(Value::Null));
        }
        if let Some(b) = v.as_bool() {
            return Ok(Some(Value::Boolean(b)));
        }
        if let Some(n) = v.as_f64() {
            return Ok(Some(number_value(n)));
        }
        if v.is_string() {
            return match js_string(v) {
                Some(s) => Ok(Some(Value::String(s))),
                None => Err(fail(
                    at,
                    "Unsupported field value: a string with unpaired UTF-16 surrogates",
                )),
            };
        }
        if v.is_bigint() {
            return match i64::try_from_js_value_ref(v) {
                Some(i) => Ok(Some(Value::Integer(i))),
                None => Err(fail(
                    at,
                    &format!(
                        "Unsupported field value: {} is outside the 64-bit integer range",
                        describe(v)
                    ),
                )),
            };
        }
        if !v.is_object() {
            // undefined, functions, symbols.
            return Err(fail(
                at,
                &format!("Unsupported field value: {}", describe(v)),
            ));
        }
        if Array::is_array(v) {
            return self.array(v.unchecked_ref(), at).map(Some);
        }
        if let Some(inst) = types::instance_of(v).map_err(|e| fail(at, &e.message))? {
            return self.instance(inst, at);
        }
        if let Some(a) = v.dyn_ref::<Uint8Array>() {
            return Ok(Some(Value::Bytes(a.to_vec())));
        }
        if let Some(d) = v.dyn_ref::<Date>() {
            return match types::timestamp_from_millis(d.get_time()) {
                Ok(t) => Ok(Some(Value::Timestamp(t))),
                Err(e) => Err(fail(at, &format!("Unsupported Date: {}", e.message))),
            };
        }
        if is_plain_object(v) {
            return self.map(v, at).map(|m| Some(Value::Map(m)));
        }
        Err(fail(
            at,
            &format!("Unsupported field value: {}", describe(v)),
        ))
    }

    fn array(&mut self, a: &Array, at: &mut Vec<Seg>) -> Result<Value, ClientError> {
        if !self.nested_arrays && matches!(at.last(), Some(Seg::Index(_))) {
            return Err(fail(at, "Nested arrays are not supported"));
        }
        let mut out = Vec::with_capacity(a.length() as usize);
        for i in 0..a.length() {
            at.push(Seg::Index(i));
            let element = self.value(&a.get(i), at)?;
            at.pop();
            out.push(element.expect("sentinels are refused inside arrays"));
        }
        Ok(Value::Array(out))
    }

    /// Own enumerable string keys of a plain object.
    fn map(&mut self, obj: &JsValue, at: &mut Vec<Seg>) -> Result<Map, ClientError> {
        let keys = Object::keys(obj.unchecked_ref::<Object>());
        let mut out = Map::new();
        for key in keys.iter() {
            let Some(name) = js_string(&key) else {
                return Err(fail(
                    at,
                    "Unsupported field name: a string with unpaired UTF-16 surrogates",
                ));
            };
            if name.is_empty() {
                return Err(fail(at, "Document fields must not be empty"));
            }
            let value = Reflect::get(obj, &key).map_err(|e| fail(at, &read_failed(&e).message))?;
            at.push(Seg::Key(name));
            if self.mode != Mode::Plain && is_reserved(at) {
                return Err(fail(at, "Document fields cannot begin and end with \"__\""));
            }
            let parsed = self.value(&value, at)?;
            let Some(Seg::Key(name)) = at.pop() else {
                unreachable!("the key pushed above")
            };
            if let Some(v) = parsed {
                out.insert(name, v);
            }
        }
        Ok(out)
    }

    fn instance(&mut self, inst: Instance, at: &mut [Seg]) -> Result<Option<Value>, ClientError> {
        Ok(Some(match inst {
            Instance::Timestamp(t) => Value::Timestamp(t),
            Instance::GeoPoint(g) => Value::GeoPoint(g),
            Instance::Bytes(b) => Value::Bytes(b),
            Instance::Reference(name) => Value::Reference(name),
            Instance::FieldPath(_) => {
                return Err(fail(
                    at,
                    "Unsupported field value: a FieldPath (field paths name fields, they are \
                     not values)",
                ))
            }
            Instance::FieldValue(s) => {
                self.sentinel(s, at)?;
                return Ok(None);
            }
        }))
    }

    fn sentinel(&mut self, s: Sentinel, at: &mut [Seg]) -> Result<(), ClientError> {
        let name = s.method_name();
        if self.mode == Mode::Plain {
            return Err(fail(
                at,
                &format!("{name} can only be used with set() and update()"),
            ));
        }
        if at.iter().any(|s| matches!(s, Seg::Index(_))) {
            return Err(fail(at, &format!("{name} is not supported inside arrays")));
        }
        let segments: Vec<String> = at
            .iter()
            .map(|s| match s {
                Seg::Key(k) => k.clone(),
                Seg::Index(_) => unreachable!("refused above"),
            })
            .collect();
        let path = FieldPath::from_segments(segments).map_err(|e| fail(at, &e.to_string()))?;
        let transform = match s {
            Sentinel::Delete => {
                return match self.mode {
                    Mode::MergeSet => {
                        self.deletes.push(path);
                        Ok(())
                    }
                    Mode::Set => Err(fail(
                        at,
                        "FieldValue.delete() cannot be used with set() unless you pass \
                         { merge: true }",
                    )),
                    Mode::Update | Mode::Plain => Err(fail(
                        at,
                        "FieldValue.delete() can only appear at the top level of your update \
                         data",
                    )),
                };
            }
            Sentinel::ServerTimestamp => FieldTransform::ServerTimestamp,
            Sentinel::Increment(n) => FieldTransform::Increment(n),
            Sentinel::ArrayUnion(elements) => {
                FieldTransform::ArrayUnion(self.elements(&elements, at)?)
            }
            Sentinel::ArrayRemove(elements) => {
                FieldTransform::ArrayRemove(self.elements(&elements, at)?)
            }
        };
        self.transforms.push((path, transform));
        Ok(())
    }

    /// The operands of `arrayUnion` / `arrayRemove`, parsed as elements of an array at `at`.
    fn elements(&mut self, elements: &Array, at: &[Seg]) -> Result<Vec<Value>, ClientError> {
        let mut at = at.to_vec();
        match self.array(elements, &mut at)? {
            Value::Array(a) => Ok(a),
            _ => unreachable!("array() returns an array"),
        }
    }
}

/// Whether the last field name is of the reserved form `__.*__`.
fn is_reserved(at: &[Seg]) -> bool {
    matches!(at.last(), Some(Seg::Key(k)) if k.len() >= 4 && k.starts_with("__") && k.ends_with("__"))
}
