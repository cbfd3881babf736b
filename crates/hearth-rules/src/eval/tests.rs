//! Unit tests of the evaluator: expressions' values and errors, and the budgets.

use super::*;
use crate::parser::parse_file;

struct NoDocs;
impl Reader for NoDocs {
    fn get(&self, _: &DocumentName) -> Result<Option<Document>, String> {
        Ok(None)
    }
    fn get_after(&self, _: &DocumentName) -> Result<Option<Document>, String> {
        Ok(None)
    }
}

/// The value of expression `src`, with `m` a map {a: 1, b: 'x'} in scope.
fn value(src: &str) -> Result<Val, Error> {
    let file = format!("service cloud.firestore {{ match /x {{ allow read: if {src}; }} }}");
    let f = parse_file("t", &file).map_err(|e| e.to_string())?;
    let e = f.matches[0].allows[0]
        .condition
        .clone()
        .ok_or("no condition")?;
    let mut m = BTreeMap::new();
    m.insert("a".to_owned(), Val::Int(1));
    m.insert("b".to_owned(), Val::Str("x".into()));
    let mut env = Env::new(vec![("m".into(), Val::Map(m))], vec![], &NoDocs, "db", 10);
    env.eval(&e)
}

#[test]
fn expressions_have_firebase_values() {
    let t = Ok(Val::Bool(true));
    for src in [
            "1 + 2 * 3 == 7",
            "7 / 2 == 3 && 7 % 2 == 1 && 7.0 / 2 == 3.5",
            "1 == 1.0 && 'a' < 'b' && 2 >= 2",
            "'abc'.size() == 3 && 'AbC'.lower() == 'abc' && ' x '.trim() == 'x'",
            "'user_12'.matches('user_[0-9]+') && !'user_12x'.matches('user_[0-9]+')",
            "'a,b'.split(',') == ['a', 'b'] && 'abcd'[1:3] == 'bc' && 'abc'[0] == 'a'",
            "[1, 2, 3].hasAll([1, 3]) && [1, 2].hasAny([2, 9]) && [1, 2].hasOnly([1, 2, 3])",
            "!([1, 4].hasOnly([1, 2])) && 2 in [1, 2] && ['a', 'b'].join('-') == 'a-b'",
            "[1, 2] + [3] == [1, 2, 3] && [1, 1, 2].toSet().size() == 2",
            "m.keys().hasOnly(['a', 'b']) && m.size() == 2 && 'a' in m && !('z' in m)",
            "m.get('z', 5) == 5 && m.get('a', 5) == 1 && m.a == 1 && m['b'] == 'x'",
            "{'a': 2, 'b': 'x', 'c': 1}.diff(m).affectedKeys() == ['a', 'c'].toSet()",
            "{'a': 2, 'b': 'x'}.diff(m).unchangedKeys().hasOnly(['b'])",
            "1 is int && 1.5 is float && 1 is number && 'x' is string && m is map && null is null",
            "true ? 1 == 1 : false",
            "math.abs(-3) == 3 && math.floor(2.7) == 2 && int('42') == 42 && string(7) == '7'",
            "timestamp.value(86400000).day() == 2 && timestamp.value(0).year() == 1970",
            "timestamp.date(2026, 11, 26) + duration.value(12, 'h') == timestamp.value(1795694400000)",
            "(timestamp.value(86400000) - timestamp.value(0)).seconds() == 86400",
            "timestamp.value(90061001).time() == duration.time(1, 1, 1, 1000000)",
            "timestamp.value(90061001).date() == timestamp.value(86400000)",
            "timestamp.value(86400000 * 31).dayOfYear() == 32 && timestamp.value(-1).year() == 1969",
            "timestamp.value(1000) - duration.value(2, 's') < timestamp.value(0)",
            "duration.value(1, 'd') > duration.value(23, 'h') && duration.value(1, 'w') == duration.value(7, 'd')",
            "duration.abs(duration.value(-2, 's')) == duration.value(2000, 'ms')",
            "duration.value(1500, 'ms').seconds() == 1 && duration.value(1500, 'ms').nanos() == 500000000",
            "duration.value(-1, 'ns').seconds() == -1 && duration.value(-1, 'ns').nanos() == 999999999",
            "hashing.sha256('abc').toHexString() == 'BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD'",
            "hashing.md5('abc').toHexString() == '900150983CD24FB0D6963F7D28E17F72'",
            "hashing.crc32('123456789').toHexString() == 'CBF43926' && hashing.crc32c('123456789'.toUtf8()).toHexString() == 'E3069283'",
            "'hi'.toUtf8().toBase64() == 'aGk=' && 'hi'.toUtf8().size() == 2",
            "latlng.value(0, 0).distance(latlng.value(0, 1)) > 111100 && latlng.value(0, 0).distance(latlng.value(0, 1)) < 111300",
            // An error on one side is absorbed when the other side decides.
            "m.nothing == 1 || true",
            "!(false && m.nothing == 1)",
            "!(m.nothing == 1 && false)",
        ] {
            assert_eq!(value(src), t, "{src}");
        }
    for src in [
        "m.nothing == 1",
        "m.nothing == 1 && true",
        "1 + 'a' == 1",
        "9223372036854775807 + 1 > 0",
        "1 / 0 == 0",
        "undefinedName",
        "[1][5] == 1",
        "'('.matches('(')",
        "timestamp.date(2026, 2, 30) == null",
        "duration.value(1, 'y') == null",
        "timestamp.value(0) + timestamp.value(0) == null",
        "timestamp.value(253402300799000) + duration.value(1, 'd') > timestamp.value(0)",
    ] {
        assert!(value(src).is_err(), "{src}: {:?}", value(src));
    }
}

const LETS: &str = "let a1 = a0 + a0; let a2 = a1 + a1; let a3 = a2 + a2; let a4 = a3 + a3; let a5 = a4 + a4; let a6 = a5 + a5; let a7 = a6 + a6; let a8 = a7 + a7; let a9 = a8 + a8; let a10 = a9 + a9; let a11 = a10 + a10; let a12 = a11 + a11; let a13 = a12 + a12; let a14 = a13 + a13; let a15 = a14 + a14; let a16 = a15 + a15; let a17 = a16 + a16; let a18 = a17 + a17; let a19 = a18 + a18; let a20 = a19 + a19; ";

#[test]
fn budgets_end_runaway_evaluations() {
    // Doubling a list 20 times passes the size limit before memory runs out.
    let file = "service cloud.firestore { function f(a0) { LETS return a20.size() > 0; } match /x { allow read: if f([1, 2]); } }";
    let f = parse_file("t", &file.replace("LETS", LETS)).unwrap();
    let cond = f.matches[0].allows[0].condition.clone().unwrap();
    let mut env = Env::new(vec![], f.functions.iter().collect(), &NoDocs, "db", 10);
    let e = env.eval(&cond).unwrap_err();
    assert!(e.contains("elements"), "{e}");
    // Recursion is bounded.
    let file = "service cloud.firestore { function f(n) { return f(n + 1); } match /x { allow read: if f(0); } }";
    let f = parse_file("t", file).unwrap();
    let cond = f.matches[0].allows[0].condition.clone().unwrap();
    let mut env = Env::new(vec![], f.functions.iter().collect(), &NoDocs, "db", 10);
    let e = env.eval(&cond).unwrap_err();
    assert!(e.contains("nested more than 20"), "{e}");
}
