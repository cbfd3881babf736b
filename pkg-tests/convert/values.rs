//! JS values to Hearth values and back: numbers classified as Firestore's SDK does, every
//! type round-tripped, instances left usable, and refused values named by their field.

use super::*;

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
