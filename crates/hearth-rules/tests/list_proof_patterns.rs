//! Rule patterns common in Firebase apps that the three-valued list proof must still prove
//! (and the near misses it must refuse): a sound proof that refused everything would pass
//! the soundness property test and break every app.

#![allow(clippy::unwrap_used)]

use hearth_core::path::{CollectionPath, DocumentName};
use hearth_core::query::model::{Filter, Operator, Query};
use hearth_core::value::{Map, Timestamp, Value};
use hearth_rules::{Auth, Documents, Ruleset};

fn rules(body: &str) -> Ruleset {
    let source = format!(
        "rules_version = '2';\nservice cloud.firestore {{ match /databases/{{database}}/documents {{\n{body}\n}} }}"
    );
    Ruleset::parse("patterns.rules", &source).unwrap()
}

fn allowed(rules: &Ruleset, query: &Query, uid: Option<&str>) -> bool {
    let auth = uid.map(|u| Auth {
        uid: u.to_owned(),
        token: Map::new(),
    });
    rules
        .check_list(
            "(default)",
            query,
            auth.as_ref(),
            Timestamp::new(0, 0).unwrap(),
            &Documents::default(),
        )
        .allowed
}

fn collection(path: &str) -> Query {
    Query::collection(CollectionPath::parse(path).unwrap())
}

fn s(v: &str) -> Value {
    Value::String(v.to_owned())
}

#[test]
fn resource_is_never_null_in_a_list() {
    let r = rules(
        "match /notes/{n} { allow list: if resource != null && resource.data.owner == request.auth.uid; }",
    );
    let mine = collection("notes").where_("owner", Operator::Equal, s("alice"));
    assert!(allowed(&r, &mine, Some("alice")));
    assert!(!allowed(&r, &mine, Some("bob")));
    assert!(!allowed(&r, &collection("notes"), Some("alice")));
}

#[test]
fn array_contains_proves_membership() {
    let r = rules("match /rooms/{r} { allow list: if request.auth.uid in resource.data.members; }");
    let mine = collection("rooms").where_("members", Operator::ArrayContains, s("alice"));
    assert!(allowed(&r, &mine, Some("alice")));
    assert!(!allowed(&r, &mine, Some("bob")));
    let any = collection("rooms").where_(
        "members",
        Operator::ArrayContainsAny,
        Value::Array(vec![s("alice"), s("bob")]),
    );
    assert!(!allowed(&r, &any, Some("alice")));
}

#[test]
fn each_branch_of_an_or_is_proved() {
    let r = rules(
        "match /posts/{p} { allow list: if resource.data.visibility == 'public' || resource.data.author == request.auth.uid; }",
    );
    let either = |author: &str| {
        collection("posts").filter(Filter::Or(vec![
            Filter::field("visibility", Operator::Equal, s("public")),
            Filter::field("author", Operator::Equal, s(author)),
        ]))
    };
    assert!(allowed(&r, &either("alice"), Some("alice")));
    assert!(!allowed(&r, &either("bob"), Some("alice")));
}

#[test]
fn a_document_id_filter_fixes_the_path_variable() {
    let r = rules("match /users/{uid} { allow list: if uid == request.auth.uid; }");
    let named = |id: &str| {
        let name = DocumentName::parse(&format!("users/{id}")).unwrap();
        collection("users").where_("__name__", Operator::Equal, Value::Reference(name))
    };
    assert!(allowed(&r, &named("alice"), Some("alice")));
    assert!(!allowed(&r, &named("bob"), Some("alice")));
    assert!(!allowed(&r, &collection("users"), Some("alice")));
}

#[test]
fn an_equality_filter_proves_the_value_not_its_number_kind() {
    let r = rules("match /n/{d} { allow list: if resource.data.v == 1; }");
    let one = collection("n").where_("v", Operator::Equal, Value::Integer(1));
    assert!(allowed(&r, &one, None));
    let kind = rules("match /n/{d} { allow list: if resource.data.v is int; }");
    assert!(!allowed(&kind, &one, None));
    let strict = collection("n").where_("v", Operator::In, Value::Array(vec![Value::Integer(1)]));
    assert!(allowed(&kind, &strict, None));
}

#[test]
fn an_order_by_field_is_present() {
    let r = rules("match /n/{d} { allow list: if 'rank' in resource.data; }");
    let ordered =
        collection("n").order_by("rank", hearth_core::encoding::key::Direction::Ascending);
    assert!(allowed(&r, &ordered, None));
    assert!(!allowed(&r, &collection("n"), None));
}

#[test]
fn version_1_recursive_wildcards_do_not_serve_collection_groups() {
    let v1 = Ruleset::parse(
        "v1.rules",
        "service cloud.firestore { match /databases/{database}/documents { match /{path=**} { allow read: if true; } } }",
    )
    .unwrap();
    assert!(allowed(&v1, &collection("items"), None));
    assert!(!allowed(&v1, &Query::collection_group("items"), None));
    let v2 = Ruleset::parse(
        "v2.rules",
        "rules_version = '2'; service cloud.firestore { match /databases/{database}/documents { match /{path=**} { allow read: if true; } } }",
    )
    .unwrap();
    assert!(allowed(&v2, &Query::collection_group("items"), None));
}
