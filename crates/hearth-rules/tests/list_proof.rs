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

/// The deepest evaluation the limits allow (calls 20 deep, each body nested deep) fits in
/// half the 2 MiB stack of the relay's threads, in a debug build: the nesting budget ends
/// it with an error first. (Before the budget, a 2 MiB stack overflowed.)
#[test]
fn the_deepest_evaluation_fits_a_small_stack() {
    use hearth_core::document::Document;
    use hearth_core::path::DocumentName;
    use hearth_rules::{Documents, Method, Request};
    let bangs = "!".repeat(120);
    let mut functions = String::new();
    for i in 0..24 {
        functions += &format!("function f{i}(x) {{ return {bangs}f{}(x); }}\n", i + 1);
    }
    functions += &format!("function f24(x) {{ return {bangs}x; }}\n");
    let source = format!(
        "rules_version = '2';\nservice cloud.firestore {{ match /databases/{{db}}/documents {{\n{functions}match /t/{{id}} {{ allow get: if f0(true) || f0(true); }} }} }}"
    );
    let rules = Ruleset::parse("deep.rules", &source).unwrap();
    let done = std::thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(move || {
            let doc = Document::new(DocumentName::parse("t/x").unwrap(), Default::default());
            let req = Request {
                database: "db",
                method: Method::Get,
                path: &doc.name,
                auth: None,
                time: Timestamp::new(0, 0).unwrap(),
                resource: Some(&doc),
                new_resource: None,
            };
            rules.evaluate(&req, &Documents::default(), 10).errors
        })
        .unwrap()
        .join();
    let errors = done.expect("no stack overflow");
    assert!(
        errors.iter().any(|e| e.contains("nested more than")),
        "{errors:?}"
    );
}

/// A list refused because the rules are not filters names the filter that would prove it.
#[test]
fn a_refused_list_names_the_filter_that_would_prove_it() {
    let source = r#"rules_version = '2';
service cloud.firestore {
  match /databases/{database}/documents {
    function owns(data) { return request.auth != null && data.owner == request.auth.uid; }
    match /notes/{n} { allow list: if owns(resource.data); }
    match /people/{p} { allow list: if resource.data.profile.age >= 18; }
    match /posts/{p} { allow list: if resource.data.status in ['live', 'pinned']; }
    match /docs/{d} { allow list: if request.auth.uid in resource.data.readers; }
  }
}"#;
    let failures = |collection: &str| {
        let rules = Ruleset::parse("hints.rules", source).unwrap();
        let file = parse(&format!(
            r#"{{ "cases": [ {{ "name": "n", "auth": {{ "uid": "alice" }}, "method": "list",
                "query": {{ "collection": "{collection}" }}, "expect": "allow" }} ] }}"#
        ))
        .unwrap();
        let out = run(&rules, &file, Timestamp::new(0, 0).unwrap());
        out.into_iter().next().unwrap().result.unwrap().explanation
    };
    for (collection, filter) in [
        ("notes", "where('owner', '==', 'alice')"),
        ("people", "where('profile.age', '>=', 18)"),
        ("posts", "where('status', 'in', ['live', 'pinned'])"),
        ("docs", "where('readers', 'array-contains', 'alice')"),
    ] {
        let explanation = failures(collection);
        assert!(
            explanation.contains(&format!("such as {filter}"))
                && explanation.contains("hints.rules:"),
            "{collection}: {explanation}"
        );
    }
}
