//! Unit tests of the mutation internals: path writes, the transform rules and validation.
//! End-to-end cases with whole documents live in `tests/it/mutations.rs`.

use super::fields::{delete_path, set_path};
use super::*;

fn fp(s: &str) -> FieldPath {
    FieldPath::parse(s).unwrap()
}

fn segs(s: &str) -> Vec<String> {
    fp(s).segments().to_vec()
}

fn map(pairs: &[(&str, Value)]) -> Map {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

fn mv(pairs: &[(&str, Value)]) -> Value {
    Value::Map(map(pairs))
}

fn ctx() -> ApplyContext {
    ApplyContext {
        commit_version: 7,
        commit_time: Timestamp::from_millis(1_700_000_000_123).unwrap(),
    }
}

fn doc_name() -> DocumentName {
    DocumentName::parse("rooms/r1").unwrap()
}

#[test]
fn set_path_creates_and_replaces_intermediates() {
    let mut m = map(&[("a", Value::Integer(1))]);
    set_path(&mut m, &segs("a.b.c"), Value::from(true));
    set_path(&mut m, &segs("x.y"), Value::Null);
    assert_eq!(
        m,
        map(&[
            ("a", mv(&[("b", mv(&[("c", Value::from(true))]))])),
            ("x", mv(&[("y", Value::Null)])),
        ])
    );
}

#[test]
fn delete_path_ignores_missing_and_non_map_intermediates() {
    let original = map(&[("a", Value::Integer(1)), ("m", mv(&[("k", Value::Null)]))]);
    let mut m = original.clone();
    delete_path(&mut m, &segs("a.b"));
    delete_path(&mut m, &segs("zz.y"));
    delete_path(&mut m, &segs("nope"));
    assert_eq!(m, original);
    delete_path(&mut m, &segs("m.k"));
    // The emptied parent stays, as in Firestore.
    assert_eq!(m, map(&[("a", Value::Integer(1)), ("m", mv(&[]))]));
}

fn run(t: FieldTransform, current: Option<Value>) -> Value {
    t.apply(current.as_ref(), &ctx())
}

#[test]
fn increment_rules() {
    use FieldTransform::Increment as Inc;
    use Value::{Double as D, Integer as I};
    let cases = [
        (Some(I(2)), I(3), I(5)),
        (Some(I(i64::MAX)), I(1), I(i64::MAX)),
        (Some(I(i64::MIN)), I(-5), I(i64::MIN)),
        (Some(I(1)), D(0.5), D(1.5)),
        (Some(D(0.25)), I(2), D(2.25)),
        (Some(D(1.5)), D(1.5), D(3.0)),
        (None, I(4), I(4)),
        (None, D(4.0), D(4.0)),
        (Some(Value::from("x")), I(4), I(4)),
        (Some(Value::Null), D(-1.0), D(-1.0)),
    ];
    for (current, operand, want) in cases {
        assert_eq!(
            run(Inc(operand.clone()), current.clone()),
            want,
            "{current:?} + {operand:?}"
        );
    }
}

#[test]
fn maximum_and_minimum_rules() {
    use FieldTransform::{Maximum as Max, Minimum as Min};
    use Value::{Double as D, Integer as I};
    assert_eq!(run(Max(I(5)), Some(I(3))), I(5));
    assert_eq!(run(Max(I(2)), Some(I(3))), I(3));
    assert_eq!(run(Max(D(3.5)), Some(I(3))), D(3.5));
    // Ties keep the stored value and its type.
    assert_eq!(run(Max(D(3.0)), Some(I(3))), I(3));
    assert_eq!(run(Min(I(0)), Some(D(-0.0))), D(-0.0));
    assert_eq!(run(Min(I(1)), Some(D(1.5))), I(1));
    assert_eq!(run(Min(D(9.0)), Some(I(1))), I(1));
    // Exact comparison beyond 2^53: the integer is larger than the double 2^63 - 1024.
    let big = I(i64::MAX);
    assert_eq!(
        run(Max(D(9.223_372_036_854_775e18)), Some(big.clone())),
        big
    );
    // NaN wins both ways; absent or non-numeric fields take the operand.
    assert!(run(Max(D(f64::NAN)), Some(I(3))).is_nan());
    assert!(run(Min(I(3)), Some(D(f64::NAN))).is_nan());
    assert_eq!(run(Max(I(-4)), None), I(-4));
    assert_eq!(run(Min(I(-4)), Some(Value::from("s"))), I(-4));
}

#[test]
fn array_rules_use_strict_equality() {
    use Value::{Double as D, Integer as I};
    let base = Some(Value::Array(vec![I(1), I(1), D(2.0)]));
    assert_eq!(
        run(
            FieldTransform::ArrayUnion(vec![D(1.0), I(2), I(2), I(1)]),
            base.clone()
        ),
        Value::Array(vec![I(1), I(1), D(2.0), D(1.0), I(2)])
    );
    assert_eq!(
        run(FieldTransform::ArrayRemove(vec![I(1), I(2)]), base),
        Value::Array(vec![D(2.0)])
    );
    assert_eq!(
        run(FieldTransform::ArrayUnion(vec![I(3), I(3)]), Some(I(9))),
        Value::Array(vec![I(3)])
    );
    assert_eq!(
        run(FieldTransform::ArrayRemove(vec![I(3)]), None),
        Value::Array(vec![])
    );
    assert_eq!(
        run(FieldTransform::ServerTimestamp, Some(I(1))),
        Value::Timestamp(ctx().commit_time)
    );
}

fn invalid(m: Mutation) -> String {
    match m.validate() {
        Err(MutationError::InvalidArgument(msg)) => {
            assert!(msg.contains("`rooms/r1`"), "{msg}");
            msg
        }
        other => panic!("expected invalid argument, got {other:?}"),
    }
}

#[test]
fn validation_refuses_malformed_mutations() {
    use FieldTransform::*;
    let name = doc_name;
    let upd = |paths: &[&str]| {
        Mutation::update(
            name(),
            paths.iter().map(|p| (fp(p), Some(Value::Null))).collect(),
        )
    };
    let msg = invalid(upd(&["a.c", "b", "a"]));
    assert!(msg.contains("`a` and `a.c` overlap"), "{msg}");
    assert!(invalid(upd(&["x", "x"])).contains("`x` is written twice"));
    let msg = invalid(upd(&[]).with_transform(fp("n"), Increment(Value::from("1"))));
    assert!(
        msg.contains("field `n`: increment needs an integer or double"),
        "{msg}"
    );
    let msg = invalid(upd(&[]).with_transform(FieldPath::document_id(), ServerTimestamp));
    assert!(msg.contains("`__name__`"), "{msg}");
    let msg = invalid(upd(&["a"]).with_transform(fp("a.b"), ServerTimestamp));
    assert!(msg.contains("field `a.b` is transformed"), "{msg}");
    let msg = invalid(upd(&["a.b"]).with_transform(fp("a"), ServerTimestamp));
    assert!(msg.contains("writes `a.b`"), "{msg}");
    let msg = invalid(
        upd(&[])
            .with_transform(fp("t"), ServerTimestamp)
            .with_transform(fp("t.u"), ServerTimestamp),
    );
    assert!(msg.contains("overlap"), "{msg}");
    let msg = invalid(upd(&[]).with_transform(fp("t"), ArrayUnion(vec![Value::Array(vec![])])));
    assert!(msg.contains("cannot be arrays"), "{msg}");
    let msg = invalid(upd(&["a"]).with_precondition(Precondition::Exists(false)));
    assert!(msg.contains("exists=false"), "{msg}");
    let msg = invalid(Mutation::delete(name()).with_transform(fp("a"), ServerTimestamp));
    assert!(msg.contains("cannot be transformed by a delete"), "{msg}");
    let msg = invalid(Mutation::set(name(), Map::new()).with_field_delete(fp("a")));
    assert!(
        msg.contains("FieldValue.delete() can only be used"),
        "{msg}"
    );
    let data = map(&[("a", mv(&[("b", Value::Integer(1))]))]);
    let msg = invalid(
        Mutation::set_merge(name(), data.clone(), SetMerge::MergeAll).with_field_delete(fp("a.b")),
    );
    assert!(msg.contains("`a.b` is both deleted and set"), "{msg}");
    let msg =
        invalid(Mutation::set(name(), data.clone()).with_transform(fp("a.b.c"), ServerTimestamp));
    assert!(
        msg.contains("`a.b.c` is both set in the data and transformed"),
        "{msg}"
    );
    let msg = invalid(Mutation::set(name(), map(&[("__name__", Value::Null)])));
    assert!(msg.contains("`__name__`"), "{msg}");
    let merge = |paths: &[&str]| SetMerge::MergeFields(paths.iter().map(|p| fp(p)).collect());
    let msg = invalid(Mutation::set_merge(name(), data.clone(), merge(&["a.c"])));
    assert!(
        msg.contains("`a.c` is listed in merge fields but missing"),
        "{msg}"
    );
    let msg = invalid(
        Mutation::set_merge(name(), data.clone(), merge(&["a"]))
            .with_transform(fp("z"), ServerTimestamp),
    );
    assert!(
        msg.contains("`z` has a FieldValue sentinel but is not in the merge fields"),
        "{msg}"
    );
}

#[test]
fn validation_accepts_firestore_shapes() {
    use FieldTransform::*;
    // update({ a: { b: 1, c: increment(1) } }) parses to a written map plus a transform in it.
    let m = Mutation::update(
        doc_name(),
        vec![(fp("a"), Some(mv(&[("b", Value::Integer(1))])))],
    )
    .with_transform(fp("a.c"), Increment(Value::Integer(1)));
    assert_eq!(m.validate(), Ok(()));
    // set({ a: { b: delete(), c: serverTimestamp() } }, { merge: true }) leaves `a: {}` in data.
    let m = Mutation::set_merge(doc_name(), map(&[("a", mv(&[]))]), SetMerge::MergeAll)
        .with_field_delete(fp("a.b"))
        .with_transform(fp("a.c"), ServerTimestamp);
    assert_eq!(m.validate(), Ok(()));
    // Merge fields may be present only through a sentinel under them.
    let m = Mutation::set_merge(
        doc_name(),
        Map::new(),
        SetMerge::MergeFields(vec![fp("n"), fp("d")]),
    )
    .with_transform(fp("n.x"), Increment(Value::Double(1.0)))
    .with_field_delete(fp("d"));
    assert_eq!(m.validate(), Ok(()));
}

#[test]
fn errors_name_the_document_and_carry_codes() {
    let name = doc_name();
    let cases = [
        (
            MutationError::NotFound { name: name.clone() },
            "not-found",
            "document `rooms/r1` not found",
        ),
        (
            MutationError::AlreadyExists { name: name.clone() },
            "already-exists",
            "document `rooms/r1` already exists",
        ),
        (
            MutationError::FailedPrecondition {
                name: name.clone(),
                expected: 3,
                actual: Some(4),
            },
            "failed-precondition",
            "document `rooms/r1` has update version 4, but the write requires update version 3",
        ),
        (
            MutationError::FailedPrecondition {
                name,
                expected: 3,
                actual: None,
            },
            "failed-precondition",
            "document `rooms/r1` does not exist, but the write requires update version 3",
        ),
    ];
    for (err, code, msg) in cases {
        assert_eq!(err.code().as_str(), code);
        assert_eq!(err.to_string(), msg);
    }
}
