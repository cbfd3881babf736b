//! `set()` and `update()` data: sentinels taken out as transforms or deletes, dotted paths,
//! field path arguments, and the shapes refused.

use super::*;

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
