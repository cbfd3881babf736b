//! Browser tests of the JS value classes (`client::types`) and the conversion of JS data to
//! Hearth values, writes and back (`client::convert`), driven through real JS snippets so the
//! exported classes are exercised the way an app calls them.
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

// ---------------------------------------------------------------------------------------------
// Numbers

#[wasm_bindgen_test]
fn numbers_are_classified_like_firestores_sdk() {
    // Number.isSafeInteger(n) -> integerValue; everything else -> doubleValue.
    let cases: &[(&str, Value)] = &[
        ("1", Value::Integer(1)),
        ("0", Value::Integer(0)),
        ("-7", Value::Integer(-7)),
        ("1.0", Value::Integer(1)),
        ("1.5", Value::Double(1.5)),
        ("2 ** 53 - 1", Value::Integer((1 << 53) - 1)),
        ("-(2 ** 53 - 1)", Value::Integer(-((1 << 53) - 1))),
        ("2 ** 53", Value::Double(9_007_199_254_740_992.0)),
        ("-(2 ** 53)", Value::Double(-9_007_199_254_740_992.0)),
        ("1e21", Value::Double(1e21)),
        ("NaN", Value::Double(f64::NAN)),
        ("Infinity", Value::Double(f64::INFINITY)),
        ("-Infinity", Value::Double(f64::NEG_INFINITY)),
        ("2n ** 63n - 1n", Value::Integer(i64::MAX)),
        ("-(2n ** 63n)", Value::Integer(i64::MIN)),
        ("5n", Value::Integer(5)),
    ];
    for (src, want) in cases {
        assert_eq!(&val(&format!("return {src};")), want, "{src}");
    }
    // -0 stays a double and keeps its sign.
    match val("return -0;") {
        Value::Double(d) => assert!(d == 0.0 && d.is_sign_negative()),
        other => panic!("-0 became {other:?}"),
    }
    let e = val_err("return { n: 2n ** 63n };");
    assert_eq!(e.code().as_str(), "invalid-argument");
    assert!(
        e.message.contains("9223372036854775808n")
            && e.message.contains("64-bit")
            && e.message.ends_with("(found in field n)"),
        "{e}"
    );
}

#[wasm_bindgen_test]
fn numbers_read_back_as_js_numbers() {
    let x = from_value(&Value::Double(-0.0));
    assert!(Object::is(&x, &JsValue::from_f64(-0.0)));
    assert!(from_value(&Value::Double(f64::NAN))
        .as_f64()
        .unwrap()
        .is_nan());
    assert_eq!(from_value(&Value::Integer(42)).as_f64(), Some(42.0));
    // Beyond 2^53 an integer still reads as a number (rounded), as in Firestore.
    let big = from_value(&Value::Integer(i64::MAX));
    assert_eq!(big.as_f64(), Some(9_223_372_036_854_775_807i64 as f64));
    assert_eq!(
        with_x(
            &from_value(&Value::Integer((1 << 53) + 1)),
            "return typeof x;"
        ),
        "number"
    );
}

// ---------------------------------------------------------------------------------------------
// Round trips

fn round_trip(v: &Value) {
    let js = from_value(v);
    let back = to_value(&js).unwrap_or_else(|e| panic!("{e} for {v:?}"));
    assert_eq!(&back, v);
}

#[wasm_bindgen_test]
fn every_type_round_trips() {
    let reference = Value::Reference(DocumentName::parse("rooms/r1/messages/m1").unwrap());
    let geo = Value::GeoPoint(CoreGeoPoint::new(-33.8, 151.2).unwrap());
    let nested = map(&[
        ("null", Value::Null),
        ("t", Value::Boolean(true)),
        ("f", Value::Boolean(false)),
        ("int", Value::Integer(-12)),
        ("double", Value::Double(0.25)),
        ("negzero", Value::Double(-0.0)),
        ("nan", Value::Double(f64::NAN)),
        ("inf", Value::Double(f64::INFINITY)),
        ("ts", ts(1_546_350_323, 10_000_000)),
        ("old", ts(-62_135_596_800, 0)),
        ("s", Value::from("héllo wörld 😀")),
        ("empty", Value::from("")),
        ("bytes", Value::Bytes(vec![0, 1, 254, 255])),
        ("nobytes", Value::Bytes(vec![])),
        ("ref", reference.clone()),
        ("geo", geo.clone()),
        (
            "arr",
            Value::Array(vec![
                Value::Integer(1),
                Value::from("x"),
                Value::Map(map(&[("in", Value::Array(vec![Value::Null]))])),
            ]),
        ),
        ("emptyarr", Value::Array(vec![])),
        ("emptymap", Value::Map(Map::new())),
        ("ключ", Value::from("значение")),
        ("😀", Value::Integer(1)),
        ("a.b", Value::Integer(2)),
        ("__proto__", Value::Integer(3)),
        (
            "deep",
            Value::Map(map(&[("x", Value::Map(map(&[("y", Value::Integer(1))])))])),
        ),
    ]);
    for v in nested.values() {
        round_trip(v);
    }
    round_trip(&Value::Map(nested.clone()));
    // Big integers within i64 go out as (lossy) numbers; the safe ones come back exact.
    round_trip(&Value::Integer((1 << 53) - 1));

    // The JS shapes are the ones Firestore's data() gives.
    let obj = map_to_js(&nested);
    let checks = with_x(
        &obj,
        "return [
            Object.getPrototypeOf(x) === Object.prototype,
            x.ts instanceof Timestamp && x.ts.seconds === 1546350323 && x.ts.nanoseconds === 10000000,
            x.bytes instanceof Bytes && x.bytes.toUint8Array()[3] === 255,
            x.geo instanceof GeoPoint && x.geo.latitude === -33.8,
            x.ref instanceof DocRef && x.ref.path === 'rooms/r1/messages/m1',
            Array.isArray(x.arr) && x.arr.length === 3,
            Object.is(x.negzero, -0),
            Object.hasOwn(x, '__proto__') && x.__proto__ === 3,
            Object.getPrototypeOf(x) === Object.prototype,
            x['ключ'] === 'значение' && x['😀'] === 1 && x['a.b'] === 2,
            x.deep.x.y === 1,
        ].map(String).join(',');",
    );
    assert_eq!(
        checks.as_string().unwrap(),
        ["true"; 11].join(","),
        "JS shape checks"
    );
}

#[wasm_bindgen_test]
fn js_inputs_map_to_the_right_types() {
    let v = val("return {
            when: Timestamp.fromMillis(Date.parse('2019-01-01T13:45:23.010Z')),
            date: new Date(1546350323010),
            raw: new Uint8Array([1, 2, 3]),
            bytes: Bytes.fromBase64String('AQID'),
            geo: new GeoPoint(10, 20),
            ref: new DocRef('users/alice'),
            nullproto: Object.assign(Object.create(null), { a: 1 }),
            lookalike: { __hearthKind: 'timestamp', seconds: 1, nanoseconds: 0 },
        };");
    let want = Value::Map(map(&[
        ("when", ts(1_546_350_323, 10_000_000)),
        ("date", ts(1_546_350_323, 10_000_000)),
        ("raw", Value::Bytes(vec![1, 2, 3])),
        ("bytes", Value::Bytes(vec![1, 2, 3])),
        (
            "geo",
            Value::GeoPoint(CoreGeoPoint::new(10.0, 20.0).unwrap()),
        ),
        (
            "ref",
            Value::Reference(DocumentName::parse("users/alice").unwrap()),
        ),
        ("nullproto", Value::Map(map(&[("a", Value::Integer(1))]))),
        // A plain object with the hidden key is data, not a Timestamp.
        (
            "lookalike",
            Value::Map(map(&[
                ("__hearthKind", Value::from("timestamp")),
                ("seconds", Value::Integer(1)),
                ("nanoseconds", Value::Integer(0)),
            ])),
        ),
    ]));
    assert_eq!(v, want);
}

#[wasm_bindgen_test]
fn converted_instances_stay_usable_and_freed_ones_are_refused() {
    let t = js("return Timestamp.fromMillis(5000);");
    assert_eq!(to_value(&t).unwrap(), ts(5, 0));
    assert_eq!(to_value(&t).unwrap(), ts(5, 0));
    assert_eq!(with_x(&t, "return x.seconds;").as_f64(), Some(5.0));
    with_x(&t, "x.free();");
    let e = to_value(&t).unwrap_err();
    assert_eq!(e.code().as_str(), "invalid-argument");
    // A look-alike class from elsewhere is refused, not trusted.
    let e = val_err(
        "class Timestamp2 { get __hearthKind() { return 'timestamp'; } __hearthClone() { return this; } }
         return { t: new Timestamp2() };",
    );
    assert!(
        e.message.contains("does not belong to this Hearth module")
            && e.message.ends_with("(found in field t)"),
        "{e}"
    );
}

// ---------------------------------------------------------------------------------------------
// Refused values

#[wasm_bindgen_test]
fn unsupported_values_name_the_field() {
    let cases = [
        (
            "return { a: { b: undefined } };",
            "Unsupported field value: undefined (found in field a.b)",
        ),
        (
            "return { a: [1, [2]] };",
            "Nested arrays are not supported (found in field a[1])",
        ),
        (
            "return { f: () => 1 };",
            "Unsupported field value: a function (found in field f)",
        ),
        (
            "class Foo {}; return { x: { y: new Foo() } };",
            "Unsupported field value: a custom Foo object (found in field x.y)",
        ),
        (
            "return { m: new Map() };",
            "Unsupported field value: a custom Map object (found in field m)",
        ),
        (
            "return { s: Symbol('q') };",
            "Unsupported field value: a symbol (found in field s)",
        ),
        (
            "return { list: [{ ok: 1 }, { bad: undefined }] };",
            "Unsupported field value: undefined (found in field list[1].bad)",
        ),
        (
            "return { 'odd.name': { 'x y': undefined } };",
            "Unsupported field value: undefined (found in field `odd.name`.`x y`)",
        ),
        (
            "return { a: { '': 1 } };",
            "Document fields must not be empty (found in field a)",
        ),
        (
            "return { s: 'a\\uD800b' };",
            "Unsupported field value: a string with unpaired UTF-16 surrogates (found in field s)",
        ),
        (
            "return { p: new FieldPath('a') };",
            "Unsupported field value: a FieldPath (field paths name fields, they are not values) (found in field p)",
        ),
        (
            "return { d: new Date(NaN) };",
            "Unsupported Date: Timestamp milliseconds must be a finite number, but was: NaN (found in field d)",
        ),
        (
            "return { c: FieldValue.increment(1) };",
            "FieldValue.increment() can only be used with set() and update() (found in field c)",
        ),
        ("return undefined;", "Unsupported field value: undefined"),
        ("return [[1]];", "Nested arrays are not supported (found in field [0])"),
    ];
    for (src, msg) in cases {
        let e = val_err(src);
        assert_eq!(e.code().as_str(), "invalid-argument", "{src}");
        assert_eq!(e.message, msg, "{src}");
    }
    // A cyclic object stops at the depth limit instead of overflowing the stack.
    let e = val_err("const a = { n: 1 }; a.self = a; return a;");
    assert!(e.message.contains("more than 20 levels"), "{e}");
    // Unicode that is valid (including U+FFFD itself) passes.
    assert_eq!(val("return '\\uFFFD😀';"), Value::from("\u{FFFD}😀"));
    // The error reaches JS as an Error with a stable code.
    let js_err = e.to_js();
    let (message, code) = thrown(&js_err);
    assert_eq!(code, "invalid-argument");
    assert_eq!(message, e.message);
    assert!(js_err.is_instance_of::<js_sys::Error>());
}

// ---------------------------------------------------------------------------------------------
// set() data

fn set_data(body: &str, merge: bool) -> Result<SetData, ClientError> {
    parse_set_data(&js(body), merge)
}

#[wasm_bindgen_test]
fn set_sentinels_become_transforms() {
    let d = set_data(
        "return {
            a: 1,
            b: FieldValue.serverTimestamp(),
            c: { d: FieldValue.increment(2), e: FieldValue.increment(1.5), keep: 'x' },
            f: FieldValue.arrayUnion(1, 'x', { y: 2 }),
            g: FieldValue.arrayRemove(),
            h: { i: FieldValue.increment(7n) },
        };",
        false,
    )
    .unwrap();
    assert_eq!(
        d.fields,
        map(&[
            ("a", Value::Integer(1)),
            ("c", Value::Map(map(&[("keep", Value::from("x"))]))),
            // A map that only held sentinels stays as an empty map, as in Firestore.
            ("h", Value::Map(Map::new())),
        ])
    );
    assert_eq!(
        d.transforms,
        vec![
            (fp("b"), FieldTransform::ServerTimestamp),
            (fp("c.d"), FieldTransform::Increment(Value::Integer(2))),
            (fp("c.e"), FieldTransform::Increment(Value::Double(1.5))),
            (
                fp("f"),
                FieldTransform::ArrayUnion(vec![
                    Value::Integer(1),
                    Value::from("x"),
                    Value::Map(map(&[("y", Value::Integer(2))])),
                ])
            ),
            (fp("g"), FieldTransform::ArrayRemove(vec![])),
            (fp("h.i"), FieldTransform::Increment(Value::Integer(7))),
        ]
    );
    assert!(d.deletes.is_empty());
    let name = DocumentName::parse("c/d").unwrap();
    let m = d.into_mutation(name.clone(), SetMerge::Overwrite);
    assert_eq!(m.validate(), Ok(()));
    let ctx = ApplyContext {
        commit_version: 1,
        commit_time: CoreTimestamp::new(100, 0).unwrap(),
    };
    let doc = m.apply(None, &ctx).unwrap().unwrap();
    assert_eq!(doc.fields["b"], ts(100, 0));
    assert_eq!(
        doc.fields["h"],
        Value::Map(map(&[("i", Value::Integer(7))]))
    );
}

#[wasm_bindgen_test]
fn set_deletes_need_merge() {
    let e = set_data("return { a: { b: FieldValue.delete() } };", false).unwrap_err();
    assert_eq!(e.code().as_str(), "invalid-argument");
    assert_eq!(
        e.message,
        "FieldValue.delete() cannot be used with set() unless you pass { merge: true } (found in field a.b)"
    );
    // The shape the mutation module documents: `a: {}` plus a delete and a transform.
    let d = set_data(
        "return { a: { b: FieldValue.delete(), c: FieldValue.serverTimestamp() }, z: FieldValue.delete() };",
        true,
    )
    .unwrap();
    assert_eq!(d.fields, map(&[("a", Value::Map(Map::new()))]));
    assert_eq!(d.deletes, vec![fp("a.b"), fp("z")]);
    assert_eq!(
        d.transforms,
        vec![(fp("a.c"), FieldTransform::ServerTimestamp)]
    );
    let name = DocumentName::parse("c/d").unwrap();
    let base = Document::new(
        name.clone(),
        map(&[
            (
                "a",
                Value::Map(map(&[("b", Value::Integer(1)), ("k", Value::Integer(2))])),
            ),
            ("z", Value::Integer(3)),
            ("other", Value::Integer(4)),
        ]),
    );
    let m = d.clone().into_mutation(name.clone(), SetMerge::MergeAll);
    let ctx = ApplyContext {
        commit_version: 2,
        commit_time: CoreTimestamp::new(7, 0).unwrap(),
    };
    let doc = m.apply(Some(&base), &ctx).unwrap().unwrap();
    assert_eq!(
        *doc.fields,
        map(&[
            (
                "a",
                Value::Map(map(&[("k", Value::Integer(2)), ("c", ts(7, 0))]))
            ),
            ("other", Value::Integer(4)),
        ])
    );
    // mergeFields: sentinels outside the listed fields are dropped, as Firestore's SDK does.
    let m = d.into_mutation(name, SetMerge::MergeFields(vec![fp("a.c")]));
    assert_eq!(
        m.transforms,
        vec![(fp("a.c"), FieldTransform::ServerTimestamp)]
    );
    assert!(m.field_deletes_in_merge.is_empty());
    assert_eq!(m.validate(), Ok(()));
}

#[wasm_bindgen_test]
fn set_refuses_bad_shapes() {
    let cases: &[(&str, bool, &str)] = &[
        (
            "return [1];",
            false,
            "Data must be an object, but it was: an array",
        ),
        (
            "return 'x';",
            true,
            "Data must be an object, but it was: \"x\"",
        ),
        (
            "return null;",
            false,
            "Data must be an object, but it was: null",
        ),
        (
            "return Timestamp.now();",
            false,
            "Data must be an object, but it was: a Timestamp",
        ),
        (
            "return FieldValue.delete();",
            true,
            "Data must be an object, but it was: FieldValue.delete()",
        ),
        (
            "return { a: [FieldValue.serverTimestamp()] };",
            false,
            "FieldValue.serverTimestamp() is not supported inside arrays (found in field a[0])",
        ),
        (
            "return { a: [{ b: FieldValue.delete() }] };",
            true,
            "FieldValue.delete() is not supported inside arrays (found in field a[0].b)",
        ),
        (
            "return { a: FieldValue.arrayUnion([1]) };",
            false,
            "Nested arrays are not supported (found in field a[0])",
        ),
        (
            "return { a: FieldValue.arrayUnion(FieldValue.increment(1)) };",
            false,
            "FieldValue.increment() is not supported inside arrays (found in field a[0])",
        ),
        (
            "return { a: FieldValue.arrayRemove(undefined) };",
            false,
            "Unsupported field value: undefined (found in field a[0])",
        ),
        (
            "return { a: { __x__: 1 } };",
            false,
            "Document fields cannot begin and end with \"__\" (found in field a.__x__)",
        ),
    ];
    for (src, merge, msg) in cases {
        let e = set_data(src, *merge).unwrap_err();
        assert_eq!(e.code().as_str(), "invalid-argument", "{src}");
        assert_eq!(&e.message, msg, "{src}");
    }
}

// ---------------------------------------------------------------------------------------------
// update() data

#[wasm_bindgen_test]
fn update_data_uses_dotted_paths() {
    let u = parse_update_data(&js("return {
            'a.b': 1,
            c: FieldValue.delete(),
            'd.e': FieldValue.increment(1),
            f: { g: FieldValue.serverTimestamp(), h: 1 },
            '`x.y`.z': [1, 2],
            count: FieldValue.increment(1),
        };"))
    .unwrap();
    assert_eq!(
        u,
        UpdateData {
            fields: vec![
                (fp("a.b"), Some(Value::Integer(1))),
                (fp("c"), None),
                (fp("f"), Some(Value::Map(map(&[("h", Value::Integer(1))])))),
                (
                    FieldPath::from_segments(vec!["x.y".into(), "z".into()]).unwrap(),
                    Some(Value::Array(vec![Value::Integer(1), Value::Integer(2)]))
                ),
            ],
            transforms: vec![
                (fp("d.e"), FieldTransform::Increment(Value::Integer(1))),
                (fp("f.g"), FieldTransform::ServerTimestamp),
                (fp("count"), FieldTransform::Increment(Value::Integer(1))),
            ],
        }
    );
    let name = DocumentName::parse("counters/c/shards/0").unwrap();
    let base = Document::new(
        name.clone(),
        map(&[("count", Value::Integer(41)), ("c", Value::Integer(1))]),
    );
    let ctx = ApplyContext {
        commit_version: 3,
        commit_time: CoreTimestamp::new(9, 0).unwrap(),
    };
    let doc = u
        .into_mutation(name)
        .apply(Some(&base), &ctx)
        .unwrap()
        .unwrap();
    assert_eq!(doc.fields["count"], Value::Integer(42));
    assert!(!doc.fields.contains_key("c"));
    assert_eq!(
        doc.fields["a"],
        Value::Map(map(&[("b", Value::Integer(1))]))
    );

    for (src, msg) in [
        (
            "return { a: { b: FieldValue.delete() } };",
            "FieldValue.delete() can only appear at the top level of your update data (found in field a.b)",
        ),
        (
            "return { 'a..b': 1 };",
            "field path `a..b` is invalid: a field name is empty",
        ),
        (
            "return { 'a.b': undefined };",
            "Unsupported field value: undefined (found in field a.b)",
        ),
        ("return 3;", "Data must be an object, but it was: 3"),
    ] {
        let e = parse_update_data(&js(src)).unwrap_err();
        assert_eq!(e.code().as_str(), "invalid-argument", "{src}");
        assert_eq!(e.message, msg, "{src}");
    }
}

#[wasm_bindgen_test]
fn update_pairs_take_strings_and_field_paths() {
    // The seed's counter: update("count", FieldValue.increment(1)).
    let args: Array = js("return ['count', FieldValue.increment(1)];").into();
    let u = parse_update_pairs(&args).unwrap();
    assert_eq!(u.fields, vec![]);
    assert_eq!(
        u.transforms,
        vec![(fp("count"), FieldTransform::Increment(Value::Integer(1)))]
    );

    let args: Array =
        js("return ['a', 1, new FieldPath('b.c', 'd'), 2, 'gone', FieldValue.delete(), 'a', 3];")
            .into();
    let u = parse_update_pairs(&args).unwrap();
    // A path given twice keeps its last value (Firestore's rule).
    assert_eq!(
        u.fields,
        vec![
            (
                FieldPath::from_segments(vec!["b.c".into(), "d".into()]).unwrap(),
                Some(Value::Integer(2))
            ),
            (fp("gone"), None),
            (fp("a"), Some(Value::Integer(3))),
        ]
    );
    for (src, msg) in [
        (
            "return ['a', 1, 'b'];",
            "update() needs an even number of arguments that alternate between field paths and values",
        ),
        ("return [];", "update() needs an even number of arguments that alternate between field paths and values"),
        (
            "return ['a', 1, 5, 2];",
            "update() argument 3: Field paths must be strings or FieldPath objects, but it was: 5",
        ),
        (
            "return [new FieldPath('x', 'y'), [[1]]];",
            "Nested arrays are not supported (found in field x.y[0])",
        ),
    ] {
        let args: Array = js(src).into();
        let e = parse_update_pairs(&args).unwrap_err();
        assert_eq!(e.code().as_str(), "invalid-argument", "{src}");
        assert_eq!(e.message, msg, "{src}");
    }
}

#[wasm_bindgen_test]
fn field_path_arguments() {
    assert_eq!(
        field_path_arg(&"price.currency".into()).unwrap(),
        fp("price.currency")
    );
    assert_eq!(
        field_path_arg(&js("return new FieldPath('price.currency');"))
            .unwrap()
            .segments(),
        ["price.currency"]
    );
    assert!(field_path_arg(&js("return FieldPath.documentId();"))
        .unwrap()
        .is_document_id());
    assert_eq!(
        field_path_arg(&JsValue::from_f64(1.0)).unwrap_err().message,
        "Field paths must be strings or FieldPath objects, but it was: 1"
    );
    assert!(field_path_arg(&".a".into()).is_err());
    for (src, msg) in [
        ("new FieldPath()", "Invalid field path (). Paths must not be empty."),
        (
            "new FieldPath('a', '')",
            "Invalid field name at argument 2. Field names must be non-empty strings, but it was: \"\"",
        ),
        (
            "new FieldPath('a', 3)",
            "Invalid field name at argument 2. Field names must be non-empty strings, but it was: 3",
        ),
    ] {
        let (m, code) = thrown(&js_throws(&format!("return {src};")));
        assert_eq!((m.as_str(), code.as_str()), (msg, "invalid-argument"), "{src}");
    }
    let eq = js("const p = new FieldPath('a', 'b');
        return [p.isEqual(new FieldPath('a', 'b')), p.isEqual(new FieldPath('a.b')), p.isEqual('a.b'),
                FieldPath.documentId().isEqual(FieldPath.documentId()), String(new FieldPath('a', 'b.c'))].join();");
    assert_eq!(eq.as_string().unwrap(), "true,false,false,true,a.`b.c`");
}

// ---------------------------------------------------------------------------------------------
// The classes' JS API

#[wasm_bindgen_test]
fn timestamp_api() {
    let r = js("const t = Timestamp.fromMillis(1546350323010);
        const u = Timestamp.fromMillis(t.toMillis());
        return [t.seconds === 1546350323, t.nanoseconds === 10000000, t.toMillis() === 1546350323010,
                u.isEqual(t), !t.isEqual(Timestamp.fromMillis(1546350323011)), !t.isEqual({ seconds: 1546350323, nanoseconds: 10000000 }),
                t.toDate().getTime() === 1546350323010,
                Timestamp.fromDate(new Date(1546350323010)).isEqual(t),
                String(t) === 'Timestamp(seconds=1546350323, nanoseconds=10000000)',
                JSON.stringify(t) === '{\"seconds\":1546350323,\"nanoseconds\":10000000,\"type\":\"firestore/timestamp/1.0\"}',
                Math.abs(Timestamp.now().toMillis() - Date.now()) < 5000,
                new Timestamp(1, 123456789).nanoseconds === 123456000,
                Timestamp.fromMillis(1.5).nanoseconds === 1500000,
                Timestamp.fromMillis(-1).seconds === -1 && Timestamp.fromMillis(-1).nanoseconds === 999000000,
                Timestamp.fromMillis(-1).toMillis() === -1,
                new Timestamp(-62135596800, 0).seconds === -62135596800,
                new Timestamp(253402300799, 999999999).nanoseconds === 999999000,
        ].join();");
    assert_eq!(r.as_string().unwrap(), ["true"; 17].join(","));

    // valueOf makes <, > and sorting follow time, as with Firestore's Timestamp.
    let r = js(
        "const ms = [5, -1000001, 0, 1546350323010, -62135596800000, 253402300799999, -1, 1];
        const ts = ms.map(m => Timestamp.fromMillis(m));
        const byValue = [...ts].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)).map(t => t.toMillis());
        const byNumber = [...ms].sort((a, b) => a - b);
        return [JSON.stringify(byValue) === JSON.stringify(byNumber),
                Timestamp.fromMillis(1) > Timestamp.fromMillis(0),
                new Timestamp(0, 1000) > new Timestamp(0, 0),
                new Timestamp(1, 0) > new Timestamp(0, 999999000),
                Timestamp.fromMillis(0).valueOf()].join();",
    );
    assert_eq!(
        r.as_string().unwrap(),
        "true,true,true,true,062135596800.000000000"
    );

    // The seed's merge sort reads aT.seconds and aT.nanoseconds from data().
    let docs = Array::new();
    for ms in [
        1_546_350_323_010.0,
        1_546_350_323_101.0,
        1_546_350_323_001.0,
    ] {
        let mut m = Map::new();
        m.insert(
            "timestamp".into(),
            Value::Timestamp(hearth::client::types::timestamp_from_millis(ms).unwrap()),
        );
        docs.push(&map_to_js(&m));
    }
    let order = with_x(
        &docs,
        "x.sort((a, b) => {
            const aT = a.timestamp; const bT = b.timestamp;
            const secondsDiff = aT.seconds - bT.seconds;
            if (secondsDiff === 0) { return -(aT.nanoseconds - bT.nanoseconds); } else { return -secondsDiff; }
         });
         return x.map(d => d.timestamp.toMillis() % 1000).join();",
    );
    assert_eq!(order.as_string().unwrap(), "101,10,1");

    for (src, msg) in [
        (
            "new Timestamp(253402300800, 0)",
            "Timestamp seconds out of range: 253402300800",
        ),
        (
            "new Timestamp(-62135596801, 0)",
            "Timestamp seconds out of range: -62135596801",
        ),
        (
            "new Timestamp(0, 1e9)",
            "Timestamp nanoseconds out of range: 1000000000",
        ),
        (
            "new Timestamp(0, -1)",
            "Timestamp nanoseconds out of range: -1",
        ),
        (
            "new Timestamp(1.5, 0)",
            "Timestamp seconds must be an integer, but was: 1.5",
        ),
        (
            "Timestamp.fromMillis(NaN)",
            "Timestamp milliseconds must be a finite number",
        ),
        (
            "Timestamp.fromMillis(1e20)",
            "Timestamp seconds out of range: 100000000000000000",
        ),
        (
            "Timestamp.fromDate('2019')",
            "Timestamp.fromDate() requires a Date",
        ),
    ] {
        let (m, code) = thrown(&js_throws(&format!("return {src};")));
        assert_eq!(code, "invalid-argument", "{src}");
        assert!(m.starts_with(msg), "{src}: {m}");
    }
}

#[wasm_bindgen_test]
fn geopoint_api_and_range_errors() {
    let r = js("const g = new GeoPoint(51.5, -0.12);
        return [g.latitude, g.longitude, g.isEqual(new GeoPoint(51.5, -0.12)), g.isEqual(new GeoPoint(51.5, 0)),
                JSON.stringify(g), new GeoPoint(-90, 180).latitude, new GeoPoint(90, -180).longitude].join(';');");
    assert_eq!(
        r.as_string().unwrap(),
        "51.5;-0.12;true;false;{\"latitude\":51.5,\"longitude\":-0.12,\"type\":\"firestore/geoPoint/1.0\"};-90;-180"
    );
    for (src, msg) in [
        (
            "new GeoPoint(91, 0)",
            "Latitude must be a number between -90 and 90, but was: 91",
        ),
        (
            "new GeoPoint(-90.5, 0)",
            "Latitude must be a number between -90 and 90, but was: -90.5",
        ),
        (
            "new GeoPoint(0, 180.01)",
            "Longitude must be a number between -180 and 180, but was: 180.01",
        ),
        (
            "new GeoPoint(NaN, 0)",
            "Latitude must be a number between -90 and 90, but was: NaN",
        ),
        (
            "new GeoPoint(0, -Infinity)",
            "Longitude must be a number between -180 and 180, but was: -Infinity",
        ),
    ] {
        let (m, code) = thrown(&js_throws(&format!("return {src};")));
        assert_eq!(
            (m.as_str(), code.as_str()),
            (msg, "invalid-argument"),
            "{src}"
        );
    }
}

#[wasm_bindgen_test]
fn bytes_api() {
    let r = js("const b = Bytes.fromUint8Array(new Uint8Array([104, 101, 108, 108, 111]));
        const lens = [];
        for (let n = 0; n < 12; n++) {
            const raw = new Uint8Array(n).map((_, i) => (i * 97 + 13) & 255);
            const back = Bytes.fromBase64String(Bytes.fromUint8Array(raw).toBase64()).toUint8Array();
            lens.push(back.length === n && back.every((v, i) => v === raw[i]) && Bytes.fromUint8Array(raw).toBase64() === btoa(String.fromCharCode(...raw)));
        }
        const u = b.toUint8Array(); u[0] = 0;
        return [b.toBase64(), String(b), b.isEqual(Bytes.fromBase64String('aGVsbG8')), b.isEqual(Bytes.fromBase64String('aGVsbA==')),
                lens.every(x => x), b.toUint8Array()[0], Bytes.fromBase64String(' aGVs\\nbG8= ').toBase64()].join(';');");
    assert_eq!(
        r.as_string().unwrap(),
        "aGVsbG8=;Bytes(base64: aGVsbG8=);true;false;true;104;aGVsbG8="
    );
    for (src, msg) in [
        (
            "Bytes.fromBase64String('a')",
            "Failed to construct data from Base64 string",
        ),
        (
            "Bytes.fromBase64String('ab!c')",
            "Failed to construct data from Base64 string",
        ),
        (
            "Bytes.fromUint8Array([1, 2])",
            "Bytes.fromUint8Array() requires a Uint8Array",
        ),
        (
            "Bytes.fromBase64String(5)",
            "Bytes.fromBase64String() requires a string",
        ),
    ] {
        let (m, code) = thrown(&js_throws(&format!("return {src};")));
        assert_eq!(code, "invalid-argument", "{src}");
        assert!(m.starts_with(msg), "{src}: {m}");
    }
}

#[wasm_bindgen_test]
fn field_value_api() {
    let r = js("return [
            FieldValue.delete().isEqual(FieldValue.delete()),
            FieldValue.delete().isEqual(FieldValue.serverTimestamp()),
            FieldValue.serverTimestamp().isEqual(FieldValue.serverTimestamp()),
            FieldValue.increment(1).isEqual(FieldValue.increment(1)),
            FieldValue.increment(1).isEqual(FieldValue.increment(2)),
            FieldValue.increment(1).isEqual(FieldValue.increment(1.5)),
            FieldValue.arrayUnion(1, 'a', { b: 2 }).isEqual(FieldValue.arrayUnion(1, 'a', { b: 2 })),
            FieldValue.arrayUnion(1).isEqual(FieldValue.arrayRemove(1)),
            FieldValue.arrayRemove(1, 2).isEqual(FieldValue.arrayRemove(2, 1)),
            FieldValue.increment(1).isEqual(1),
        ].join();");
    assert_eq!(
        r.as_string().unwrap(),
        "true,false,true,true,false,false,true,false,false,false"
    );
    let (m, code) = thrown(&js_throws("return FieldValue.increment('1');"));
    assert_eq!(
        (m.as_str(), code.as_str()),
        (
            "FieldValue.increment() requires a number, but it was: \"1\"",
            "invalid-argument"
        )
    );
}
