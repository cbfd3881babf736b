//! The evaluator against a small reference interpreter: random expressions over a random
//! document's fields (ints, strings, bools, absent), with the operators, ternaries, `in`,
//! string `size()` and Firebase's error absorption by `&&` and `||`. For each expression
//! the reference's value `v` must make `allow get: if (e) == v` allowed and `(e) != v`
//! denied; an expression the reference finds an error must deny even when compared with
//! anything. Seeds are printed by proptest on failure (`PROPTEST_CASES` for more cases).

#![allow(clippy::unwrap_used)]

use hearth_core::document::Document;
use hearth_core::path::DocumentName;
use hearth_core::value::{Map, Timestamp, Value};
use hearth_rules::{Method, Reader, Request, Ruleset};
use proptest::prelude::*;

/// A value of the subset.
#[derive(Clone, Debug, PartialEq)]
enum V {
    Int(i64),
    Str(String),
    Bool(bool),
}

/// An expression of the subset.
#[derive(Clone, Debug)]
enum E {
    Lit(V),
    Field(&'static str),
    Not(Box<E>),
    Bin(&'static str, Box<E>, Box<E>),
    In(Box<E>, Vec<V>),
    Size(Box<E>),
    Cond(Box<E>, Box<E>, Box<E>),
}

fn lit(v: &V) -> String {
    match v {
        V::Int(i) if *i < 0 => format!("(0 - {})", -i),
        V::Int(i) => i.to_string(),
        V::Str(s) => format!("'{s}'"),
        V::Bool(b) => b.to_string(),
    }
}

fn text(e: &E) -> String {
    match e {
        E::Lit(v) => lit(v),
        E::Field(f) => format!("resource.data.{f}"),
        E::Not(a) => format!("!({})", text(a)),
        E::Bin(op, a, b) => format!("({}) {op} ({})", text(a), text(b)),
        E::In(a, l) => format!(
            "({}) in [{}]",
            text(a),
            l.iter().map(lit).collect::<Vec<_>>().join(", ")
        ),
        E::Size(a) => format!("({}).size()", text(a)),
        E::Cond(c, a, b) => format!("({}) ? ({}) : ({})", text(c), text(a), text(b)),
    }
}

type R = Result<V, ()>;

/// The reference: Firebase's semantics for the subset, written plainly.
fn reference(e: &E, doc: &[(&str, V)]) -> R {
    match e {
        E::Lit(v) => Ok(v.clone()),
        E::Field(f) => doc
            .iter()
            .find(|(k, _)| k == f)
            .map(|(_, v)| v.clone())
            .ok_or(()),
        E::Not(a) => match reference(a, doc)? {
            V::Bool(b) => Ok(V::Bool(!b)),
            _ => Err(()),
        },
        E::Bin(op @ ("&&" | "||"), a, b) => {
            let stop = *op == "||";
            let a = reference(a, doc);
            if a == Ok(V::Bool(stop)) {
                return Ok(V::Bool(stop));
            }
            let b = reference(b, doc);
            if b == Ok(V::Bool(stop)) {
                return Ok(V::Bool(stop));
            }
            match (a, b) {
                (Ok(V::Bool(_)), Ok(V::Bool(y))) => Ok(V::Bool(y)),
                _ => Err(()),
            }
        }
        E::Bin(op, a, b) => {
            let (a, b) = (reference(a, doc)?, reference(b, doc)?);
            match (*op, a, b) {
                ("==", a, b) => Ok(V::Bool(a == b)),
                ("!=", a, b) => Ok(V::Bool(a != b)),
                (op @ ("<" | "<=" | ">" | ">="), a, b) => {
                    let o = match (a, b) {
                        (V::Int(x), V::Int(y)) => x.cmp(&y),
                        (V::Str(x), V::Str(y)) => x.cmp(&y),
                        _ => return Err(()),
                    };
                    Ok(V::Bool(match op {
                        "<" => o.is_lt(),
                        "<=" => o.is_le(),
                        ">" => o.is_gt(),
                        _ => o.is_ge(),
                    }))
                }
                ("+", V::Str(x), V::Str(y)) => Ok(V::Str(x + &y)),
                (op, V::Int(x), V::Int(y)) => match op {
                    "+" => x.checked_add(y),
                    "-" => x.checked_sub(y),
                    "*" => x.checked_mul(y),
                    "/" => x.checked_div(y),
                    "%" => x.checked_rem(y),
                    _ => None,
                }
                .map(V::Int)
                .ok_or(()),
                _ => Err(()),
            }
        }
        E::In(a, l) => {
            let a = reference(a, doc)?;
            Ok(V::Bool(l.contains(&a)))
        }
        E::Size(a) => match reference(a, doc)? {
            V::Str(s) => Ok(V::Int(s.chars().count() as i64)),
            _ => Err(()),
        },
        E::Cond(c, a, b) => match reference(c, doc)? {
            V::Bool(true) => reference(a, doc),
            V::Bool(false) => reference(b, doc),
            _ => Err(()),
        },
    }
}

fn value() -> impl Strategy<Value = V> {
    prop_oneof![
        (-5i64..20).prop_map(V::Int),
        prop::sample::select(vec!["", "a", "ab", "b", "zz"]).prop_map(|s| V::Str(s.to_owned())),
        any::<bool>().prop_map(V::Bool),
    ]
}

fn bin(
    ops: &[&'static str],
    a: impl Strategy<Value = E>,
    b: impl Strategy<Value = E>,
) -> impl Strategy<Value = E> {
    (prop::sample::select(ops.to_vec()), a, b)
        .prop_map(|(op, a, b)| E::Bin(op, Box::new(a), Box::new(b)))
}

/// Expressions mostly of the types their operators take (so that most have a value), with
/// field `d` of any type (or absent) and the odd ill-typed operand to exercise errors.
fn expr() -> impl Strategy<Value = E> {
    let int_leaf = prop_oneof![
        4 => (-5i64..20).prop_map(|i| E::Lit(V::Int(i))),
        2 => Just(E::Field("a")),
        1 => Just(E::Field("d")),
    ];
    let str_leaf = prop_oneof![
        4 => prop::sample::select(vec!["", "a", "ab", "b", "zz"])
            .prop_map(|s| E::Lit(V::Str(s.to_owned()))),
        2 => Just(E::Field("b")),
        1 => Just(E::Field("d")),
    ];
    let ints = int_leaf.prop_recursive(3, 16, 2, |i| {
        prop_oneof![
            4 => bin(&["+", "-", "*"], i.clone(), i.clone()),
            1 => bin(&["/", "%"], i.clone(), i),
        ]
    });
    let strs = str_leaf.prop_recursive(2, 8, 2, |s| bin(&["+"], s.clone(), s));
    let sizes = strs.clone().prop_map(|s| E::Size(Box::new(s)));
    let numbers = prop_oneof![3 => ints.clone(), 1 => sizes];
    let cmp = ["==", "!=", "<", "<=", ">", ">="];
    let bool_leaf = prop_oneof![
        2 => any::<bool>().prop_map(|b| E::Lit(V::Bool(b))),
        1 => Just(E::Field("c")),
        1 => Just(E::Field("d")),
        4 => bin(&cmp, numbers.clone(), numbers),
        3 => bin(&cmp, strs.clone(), strs.clone()),
        1 => bin(&["==", "!=", "<"], ints.clone(), strs),
        2 => (ints.clone(), prop::collection::vec((-5i64..20).prop_map(V::Int), 0..4))
            .prop_map(|(a, l)| E::In(Box::new(a), l)),
    ];
    bool_leaf.prop_recursive(4, 32, 3, move |b| {
        let ternary_int = (
            prop_oneof![Just(E::Lit(V::Bool(true))), Just(E::Field("c"))],
            ints.clone(),
            ints.clone(),
        )
            .prop_map(|(c, x, y)| E::Cond(Box::new(c), Box::new(x), Box::new(y)));
        prop_oneof![
            1 => b.clone().prop_map(|a| E::Not(Box::new(a))),
            3 => bin(&["&&", "||"], b.clone(), b.clone()),
            1 => bin(&["==", "!="], b.clone(), b.clone()),
            1 => (b.clone(), b.clone(), b)
                .prop_map(|(c, x, y)| E::Cond(Box::new(c), Box::new(x), Box::new(y))),
            1 => bin(&["==", "<"], ternary_int, Just(E::Lit(V::Int(3)))),
        ]
    })
}

/// A document: `a` usually an int, `b` a string, `c` a bool, `d` anything; each sometimes
/// absent.
fn document() -> impl Strategy<Value = Vec<(&'static str, V)>> {
    let strs = prop::sample::select(vec!["", "a", "ab", "b"]).prop_map(|s| V::Str(s.to_owned()));
    (
        prop::option::weighted(0.9, (-5i64..20).prop_map(V::Int)),
        prop::option::weighted(0.9, strs),
        prop::option::weighted(0.9, any::<bool>().prop_map(V::Bool)),
        prop::option::weighted(0.7, value()),
    )
        .prop_map(|(a, b, c, d)| {
            [("a", a), ("b", b), ("c", c), ("d", d)]
                .into_iter()
                .filter_map(|(k, v)| v.map(|v| (k, v)))
                .collect()
        })
}

struct NoReads;
impl Reader for NoReads {
    fn get(&self, _: &DocumentName) -> Result<Option<Document>, String> {
        Ok(None)
    }
    fn get_after(&self, _: &DocumentName) -> Result<Option<Document>, String> {
        Ok(None)
    }
}

/// Whether `allow get: if <condition>` allows reading `doc`.
fn allows(condition: &str, doc: &Document) -> bool {
    let source = format!(
        "rules_version = '2';\nservice cloud.firestore {{ match /databases/{{db}}/documents {{ match /t/{{id}} {{ allow get: if {condition}; }} }} }}"
    );
    let rules = Ruleset::parse("reference.rules", &source).unwrap();
    let req = Request {
        database: "db",
        method: Method::Get,
        path: &doc.name,
        auth: None,
        time: Timestamp::new(0, 0).unwrap(),
        resource: Some(doc),
        new_resource: None,
    };
    rules.evaluate(&req, &NoReads, 10).allowed
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]
    #[test]
    fn the_evaluator_agrees_with_the_reference(e in expr(), fields in document()) {
        let mut map = Map::new();
        for (k, v) in &fields {
            map.insert((*k).to_owned(), match v {
                V::Int(i) => Value::Integer(*i),
                V::Str(s) => Value::String(s.clone()),
                V::Bool(b) => Value::Boolean(*b),
            });
        }
        let doc = Document::new(DocumentName::parse("t/x").unwrap(), map);
        let e_text = text(&e);
        match reference(&e, &fields) {
            Ok(v) => {
                let (eq, ne) = (format!("({e_text}) == {}", lit(&v)), format!("({e_text}) != {}", lit(&v)));
                prop_assert!(allows(&eq, &doc), "{eq} should be allowed on {fields:?}");
                prop_assert!(!allows(&ne, &doc), "{ne} should be denied on {fields:?}");
            }
            Err(()) => {
                let any = format!("({e_text}) == 0 || ({e_text}) != 0");
                prop_assert!(!allows(&any, &doc), "{any} should be an error, denied, on {fields:?}");
                // An error is absorbed by a side that decides.
                let absorbed = format!("({e_text}) == 0 || true");
                prop_assert!(allows(&absorbed, &doc), "{absorbed} on {fields:?}");
            }
        }
    }
}
