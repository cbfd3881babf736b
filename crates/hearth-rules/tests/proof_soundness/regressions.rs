//! One deterministic case for each kind of unsoundness the property test found in the list
//! proof (each failed before the proof was made three-valued).

use super::*;

/// Fails if `check_list` allows `filters` under `cond` while `evaluate` denies `fields` as
/// document `c/d1`, which the query matches.
fn assert_sound(cond: &str, filters: Vec<Filter>, fields: Map) {
    let case = Case {
        seed: 0,
        cond: Cond::Atom(cond.to_owned()),
        filters,
        order_by: None,
        limit: None,
        auth: None,
        docs: vec![Document::new(doc_name("d1"), fields)],
    };
    let query = validate(&query_of(&case)).unwrap();
    assert!(
        Matcher::new(query).matches(&case.docs[0]),
        "the query must match the document"
    );
    if let Outcome::Proved {
        denied: Some((doc, why)),
        ..
    } = run_case(&case)
    {
        panic!("unsound: {}\n  denied: {why}", describe(&case, &doc));
    }
}

fn fields(entries: &[(&str, Value)]) -> Map {
    entries
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

fn int(i: i64) -> Value {
    Value::Integer(i)
}

fn double(d: f64) -> Value {
    Value::Double(d)
}

fn map(entries: &[(&str, Value)]) -> Value {
    Value::Map(fields(entries))
}

fn filter(field: &str, op: &str, value: Value) -> Filter {
    Filter::field(field, Operator::parse(op).unwrap(), value)
}

/// A field no filter fixes may be absent or present: `'k' in resource.data` is unknown,
/// not false, in the documents' map and in a map the query fixes only one key of.
#[test]
fn presence_of_an_unfixed_field_is_unknown() {
    assert_sound("!('b' in resource.data)", vec![], fields(&[("b", int(1))]));
    assert_sound(
        "!('y' in resource.data.m)",
        vec![filter("m.x", "==", int(1))],
        fields(&[("m", map(&[("x", int(1)), ("y", int(1))]))]),
    );
}

/// A `documentId()` filter fixes the document's name, not a field called `__name__`.
#[test]
fn a_document_id_filter_adds_no_field() {
    assert_sound(
        "'__name__' in resource.data",
        vec![filter("__name__", "==", Value::Reference(doc_name("d1")))],
        Map::new(),
    );
}

/// A list or map literal holding an unknown value is unknown, not unequal to a known one.
#[test]
fn literals_holding_unknown_values_are_unknown() {
    assert_sound("[resource.data.a] != [1]", vec![], fields(&[("a", int(1))]));
    assert_sound(
        "{'k': resource.data.a} != {'k': 1}",
        vec![],
        fields(&[("a", int(1))]),
    );
}

/// The proof's partial maps (the document's data, a map the query fixes a key of) may
/// equal a map literal: their comparison is unknown.
#[test]
fn a_partially_known_map_is_not_unequal_to_a_literal() {
    assert_sound(
        "resource.data.m != {'x': 1}",
        vec![filter("m.x", "==", int(1))],
        fields(&[("m", map(&[("x", int(1))]))]),
    );
    assert_sound("resource.data != {}", vec![], Map::new());
}

/// `where('a', '==', 1.0)` matches `1` too (and `== 0` matches `-0.0`): the filter fixes
/// the number, not its kind.
#[test]
fn an_equality_filter_fixes_the_number_not_its_kind() {
    assert_sound(
        "resource.data.a is float",
        vec![filter("a", "==", double(1.0))],
        fields(&[("a", int(1))]),
    );
    assert_sound(
        "resource.data.a is int",
        vec![filter("a", "==", int(0))],
        fields(&[("a", double(-0.0))]),
    );
}

/// A field fixed by both `in` (strict) and `==` (numeric) holds the `in` list's value, of
/// its kind, whichever filter comes first (the proof must not keep the `==` literal's).
#[test]
fn in_and_equality_on_one_field_fix_the_strict_value() {
    for filters in [
        vec![
            filter("a", "==", double(1.0)),
            filter("a", "in", Value::Array(vec![int(1)])),
        ],
        vec![
            filter("a", "in", Value::Array(vec![int(1)])),
            filter("a", "==", double(1.0)),
        ],
    ] {
        assert_sound(
            "resource.data.a is float",
            filters,
            fields(&[("a", int(1))]),
        );
    }
}

/// `not-in` compares strictly: `not-in [0]` keeps `0.0` and `-0.0`, `not-in [-1.0]` keeps
/// `-1`, all of which the rules' `!=` finds equal to the excluded number.
#[test]
fn not_in_excludes_only_the_strictly_equal_values() {
    assert_sound(
        "resource.data.a != 0",
        vec![filter("a", "not-in", Value::Array(vec![int(0)]))],
        fields(&[("a", double(0.0))]),
    );
    assert_sound(
        "resource.data.a != -1",
        vec![filter("a", "not-in", Value::Array(vec![double(-1.0)]))],
        fields(&[("a", int(-1))]),
    );
}

/// NaN sorts before every number: `a < 1` matches it, and the rules' `NaN < 2` is an
/// error, so a range does not prove an order comparison for every number it holds.
#[test]
fn an_upper_bound_does_not_exclude_nan() {
    assert_sound(
        "resource.data.a < 2",
        vec![filter("a", "<", int(1))],
        fields(&[("a", double(f64::NAN))]),
    );
}

/// A NaN bound is a number bound: `a >= NaN` matches every number, so it says nothing of
/// which (it is not a bound of another type).
#[test]
fn a_nan_bound_is_a_number_bound() {
    assert_sound(
        "resource.data.a != 1",
        vec![filter("a", ">=", double(f64::NAN))],
        fields(&[("a", int(1))]),
    );
    assert_sound(
        "!(resource.data.a == 1)",
        vec![filter("a", ">", double(f64::NAN))],
        fields(&[("a", int(1))]),
    );
}
