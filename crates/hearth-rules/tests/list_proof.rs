//! The list proof (rules are not filters) with range, `!=` and `not-in` filters: a rule on
//! a field the query bounds is proved when every value in the bounds satisfies it, and
//! refused when some value might not.

#![allow(clippy::unwrap_used)]

use hearth_core::value::Timestamp;
use hearth_rules::cases::{parse, run};
use hearth_rules::Ruleset;

const RULES: &str = r#"
rules_version = '2';
service cloud.firestore {
  match /databases/{database}/documents {
    match /people/{p} {
      allow list: if resource.data.age >= 18 && resource.data.age < 130;
    }
    match /posts/{p} {
      allow list: if resource.data.status != 'draft';
    }
    match /events/{e} {
      allow list: if resource.data.at > request.time - duration.value(1, 'd')
                  && resource.data.at is timestamp;
    }
    match /names/{n} {
      allow list: if resource.data.name > 'm';
    }
  }
}
"#;

/// Runs `cases` (the `cases` array of a case file) and returns the failures.
fn failures(cases: &str) -> Vec<String> {
    let rules = Ruleset::parse("proof.rules", RULES).unwrap();
    let file = parse(&format!(
        r#"{{ "time": "2026-11-26T12:00:00Z", "cases": {cases} }}"#
    ))
    .unwrap();
    let now = Timestamp::new(0, 0).unwrap();
    run(&rules, &file, now)
        .into_iter()
        .filter(|o| !o.passed())
        .map(|o| match o.result {
            Ok(d) => format!("{}: {}", o.name, d.explanation),
            Err(e) => format!("{}: {e}", o.name),
        })
        .collect()
}

fn list(name: &str, collection: &str, filters: &str, expect: &str) -> String {
    format!(
        r#"{{ "name": "{name}", "method": "list", "query": {{ "collection": "{collection}", "where": {filters} }}, "expect": "{expect}" }}"#
    )
}

#[test]
fn ranges_prove_what_they_imply_and_nothing_more() {
    let cases = [
        list(
            "both bounds inside",
            "people",
            r#"[["age", ">=", 18], ["age", "<", 100]]"#,
            "allow",
        ),
        list(
            "above 17.5 may be 17.7 (numbers are not only ints)",
            "people",
            r#"[["age", ">", 17.5], ["age", "<=", 129]]"#,
            "deny",
        ),
        list(
            "an exclusive bound past the rule's",
            "people",
            r#"[["age", ">", 18], ["age", "<=", 129]]"#,
            "allow",
        ),
        list(
            "equal bounds inclusive",
            "people",
            r#"[["age", ">=", 18], ["age", "<", 130]]"#,
            "allow",
        ),
        list(
            "tightest of two lower bounds",
            "people",
            r#"[["age", ">", 5], ["age", ">=", 20], ["age", "<", 30]]"#,
            "allow",
        ),
        list(
            "lower bound only",
            "people",
            r#"[["age", ">=", 18]]"#,
            "deny",
        ),
        list(
            "lower bound too low",
            "people",
            r#"[["age", ">=", 17], ["age", "<", 100]]"#,
            "deny",
        ),
        list(
            "upper bound too high",
            "people",
            r#"[["age", ">=", 18], ["age", "<=", 130]]"#,
            "deny",
        ),
        list(
            "a string range never satisfies a number rule",
            "people",
            r#"[["age", ">=", "a"], ["age", "<", "b"]]"#,
            "deny",
        ),
        list(
            "fixed by equality",
            "people",
            r#"[["age", "==", 40]]"#,
            "allow",
        ),
        list(
            "fixed by in",
            "people",
            r#"[["age", "in", [20, 30, 129]]]"#,
            "allow",
        ),
        list(
            "one in value outside",
            "people",
            r#"[["age", "in", [20, 130]]]"#,
            "deny",
        ),
        list("no filter", "people", "[]", "deny"),
        list(
            "!= the denied value",
            "posts",
            r#"[["status", "!=", "draft"]]"#,
            "allow",
        ),
        list(
            "not-in with the denied value",
            "posts",
            r#"[["status", "not-in", ["draft", "deleted"]]]"#,
            "allow",
        ),
        list(
            "not-in without it",
            "posts",
            r#"[["status", "not-in", ["deleted"]]]"#,
            "deny",
        ),
        list(
            "a range past the denied value",
            "posts",
            r#"[["status", ">", "e"]]"#,
            "allow",
        ),
        list(
            "a range holding the denied value",
            "posts",
            r#"[["status", ">", "a"]]"#,
            "deny",
        ),
        list(
            "recent events, timestamps and durations",
            "events",
            r#"[["at", ">=", {"$timestamp": "2026-11-26T00:00:00Z"}]]"#,
            "allow",
        ),
        list(
            "events too old",
            "events",
            r#"[["at", ">=", {"$timestamp": "2026-11-25T00:00:00Z"}]]"#,
            "deny",
        ),
        list(
            "a string range",
            "names",
            r#"[["name", ">=", "n"]]"#,
            "allow",
        ),
        list(
            "a string range from m",
            "names",
            r#"[["name", ">=", "m"]]"#,
            "deny",
        ),
        list(
            "a string range after m",
            "names",
            r#"[["name", ">", "m"]]"#,
            "allow",
        ),
    ];
    let failed = failures(&format!("[{}]", cases.join(",")));
    assert!(failed.is_empty(), "{failed:#?}");
}
