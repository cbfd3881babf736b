//! Tests of the `firestore.indexes.json` parser and printer: the seed's snippets, round trips,
//! and one test per refusal, each checking the variant and that the message locates it.

use expect_test::expect;
use hearth_core::index::config::*;
use hearth_core::path::{FieldPath, PathError};
use proptest::prelude::*;
use FieldMode::{ArrayContains, Ascending, Descending};

const DELETE_TIMESTAMP_INDEXES: &str =
    include_str!("../fixtures/indexes/delete_timestamp_indexes.json");
const DISABLE_TIMESTAMP_FIELD: &str =
    include_str!("../fixtures/indexes/disable_timestamp_field.json");
const SHARDED_TIMESTAMPS: &str = include_str!("../fixtures/indexes/sharded_timestamps.json");

fn fp(path: &str) -> FieldPath {
    FieldPath::parse(path).unwrap()
}

fn field(path: &str, mode: FieldMode) -> IndexFieldSpec {
    IndexFieldSpec {
        field_path: fp(path),
        mode,
    }
}

fn instruments(fields: Vec<IndexFieldSpec>) -> CompositeIndexSpec {
    CompositeIndexSpec {
        collection_group: "instruments".to_owned(),
        query_scope: QueryScope::Collection,
        fields,
    }
}

#[test]
fn seed_snippet_deleting_timestamp_indexes() {
    let file = parse_index_file(DELETE_TIMESTAMP_INDEXES).unwrap();
    let expected: Vec<_> = ["exchange", "instrumentType", "price.currency"]
        .iter()
        .map(|f| instruments(vec![field(f, Ascending), field("timestamp", Descending)]))
        .collect();
    assert_eq!(file.indexes, expected);
    assert!(file.field_overrides.is_empty());
    assert_eq!(
        file.indexes[2].fields[0].field_path.segments(),
        ["price", "currency"]
    );
}

#[test]
fn seed_snippet_disabling_timestamp_field() {
    let file = parse_index_file(DISABLE_TIMESTAMP_FIELD).unwrap();
    assert!(file.indexes.is_empty());
    assert_eq!(
        file.field_overrides,
        [FieldOverrideSpec {
            collection_group: "instruments".to_owned(),
            field_path: fp("timestamp"),
            indexes: vec![],
        }]
    );
}

#[test]
fn seed_snippet_sharded_timestamp_indexes() {
    let file = parse_index_file(SHARDED_TIMESTAMPS).unwrap();
    let expected: Vec<_> = ["exchange", "instrumentType", "price.currency"]
        .iter()
        .map(|f| {
            instruments(vec![
                field("shard", Descending),
                field(f, Ascending),
                field("timestamp", Descending),
            ])
        })
        .collect();
    assert_eq!(
        file,
        IndexFile {
            indexes: expected,
            field_overrides: vec![]
        }
    );
}

#[test]
fn sharded_entry_pastes_into_an_indexes_list() {
    let file = parse_index_file(SHARDED_TIMESTAMPS).unwrap();
    let index = &file.indexes[2];
    let entry = index.to_json_entry();
    expect![[r#"
        {
          "collectionGroup": "instruments",
          "queryScope": "COLLECTION",
          "fields": [
            {
              "fieldPath": "shard",
              "order": "DESCENDING"
            },
            {
              "fieldPath": "price.currency",
              "order": "ASCENDING"
            },
            {
              "fieldPath": "timestamp",
              "order": "DESCENDING"
            }
          ]
        }"#]]
    .assert_eq(&entry);
    let pasted = parse_index_file(&format!("{{\"indexes\":[ {entry} ]}}")).unwrap();
    assert_eq!(pasted.indexes, std::slice::from_ref(index));
    // Pasted after existing entries, with the trailing comma hand edits leave behind.
    let pasted = parse_index_file(&format!("{{\"indexes\":[ {entry}, {entry}, ]}}")).unwrap();
    assert_eq!(pasted.indexes, [index.clone(), index.clone()]);
}

#[test]
fn whole_file_prints_in_firebase_cli_shape() {
    let file = IndexFile {
        indexes: vec![CompositeIndexSpec {
            collection_group: "posts".to_owned(),
            query_scope: QueryScope::CollectionGroup,
            fields: vec![field("tags", ArrayContains), field("`a.b`", Descending)],
        }],
        field_overrides: vec![FieldOverrideSpec {
            collection_group: "posts".to_owned(),
            field_path: fp("body"),
            indexes: vec![OverrideIndexSpec {
                mode: ArrayContains,
                query_scope: QueryScope::CollectionGroup,
            }],
        }],
    };
    expect![[r#"
        {
          "indexes": [
            {
              "collectionGroup": "posts",
              "queryScope": "COLLECTION_GROUP",
              "fields": [
                {
                  "fieldPath": "tags",
                  "arrayConfig": "CONTAINS"
                },
                {
                  "fieldPath": "`a.b`",
                  "order": "DESCENDING"
                }
              ]
            }
          ],
          "fieldOverrides": [
            {
              "collectionGroup": "posts",
              "fieldPath": "body",
              "indexes": [
                {
                  "arrayConfig": "CONTAINS",
                  "queryScope": "COLLECTION_GROUP"
                }
              ]
            }
          ]
        }"#]]
    .assert_eq(&file.to_json());
    assert_eq!(
        IndexFile::default().to_json(),
        "{\n  \"indexes\": [],\n  \"fieldOverrides\": []\n}"
    );
}

const HAND_EDITED: &str = r#"
/* Hand-edited: block comments, unknown keys and optional settings. */
{
  "version": 2, // unknown top-level keys are ignored
  "indexes": [
    {
      "collectionGroup": "messages",
      "queryScope": "COLLECTION_GROUP",
      "density": "SPARSE_ALL",
      "apiScope": "ANY_API",
      "fields": [
        { "fieldPath": "`to.whom`.`back\\`tick`", "arrayConfig": "CONTAINS", },
        { "fieldPath": "sent.at", "order": "DESCENDING" },
        { "fieldPath": "__name__", "order": "DESCENDING" },
      ],
    },
    {
      "collectionGroup": "users",
      "fields": [
        { "fieldPath": "`first name`", "order": "ASCENDING" },
        { "fieldPath": "age", "order": "ASCENDING" }
      ]
    }
  ],
  "fieldOverrides": [
    {
      "collectionGroup": "messages",
      "fieldPath": "body",
      "ttl": false,
      "indexes": [
        { "order": "ASCENDING", "queryScope": "COLLECTION" },
        { "order": "DESCENDING", "queryScope": "COLLECTION_GROUP", "density": "SPARSE_ANY" },
        { "arrayConfig": "CONTAINS" },
      ]
    },
    { "collectionGroup": "messages", "fieldPath": "expireAt", "ttl": true, "indexes": [] },
  ],
}
"#;

#[test]
fn hand_edited_file_parses() {
    let file = parse_index_file(HAND_EDITED).unwrap();
    assert_eq!(
        file.indexes[0],
        CompositeIndexSpec {
            collection_group: "messages".to_owned(),
            query_scope: QueryScope::CollectionGroup,
            fields: vec![
                IndexFieldSpec {
                    field_path: FieldPath::from_segments(vec![
                        "to.whom".to_owned(),
                        "back`tick".to_owned()
                    ])
                    .unwrap(),
                    mode: ArrayContains,
                },
                field("sent.at", Descending),
                IndexFieldSpec {
                    field_path: FieldPath::document_id(),
                    mode: Descending,
                },
            ],
        }
    );
    // A missing queryScope means COLLECTION.
    assert_eq!(file.indexes[1].query_scope, QueryScope::Collection);
    assert_eq!(
        file.indexes[1].fields[0].field_path.segments(),
        ["first name"]
    );
    let scoped = |mode, query_scope| OverrideIndexSpec { mode, query_scope };
    assert_eq!(
        file.field_overrides[0].indexes,
        [
            scoped(Ascending, QueryScope::Collection),
            scoped(Descending, QueryScope::CollectionGroup),
            scoped(ArrayContains, QueryScope::Collection),
        ]
    );
    assert_eq!(file.field_overrides[1].field_path, fp("expireAt"));
    assert!(file.field_overrides[1].indexes.is_empty());
}

#[test]
fn printed_files_read_back_equal() {
    for text in [
        DELETE_TIMESTAMP_INDEXES,
        DISABLE_TIMESTAMP_FIELD,
        SHARDED_TIMESTAMPS,
        HAND_EDITED,
        "{}",
    ] {
        let file = parse_index_file(text).unwrap();
        let printed = file.to_json();
        // The printer writes strict JSON, not just JSON5.
        serde_json::from_str::<serde_json::Value>(&printed).unwrap();
        assert_eq!(parse_index_file(&printed).unwrap(), file, "{printed}");
        assert_eq!(parse_index_file(&printed).unwrap().to_json(), printed);
    }
}

fn refuse(text: &str) -> IndexFileError {
    match parse_index_file(text) {
        Ok(file) => panic!("accepted {text}: {file:?}"),
        Err(e) => e,
    }
}

/// Wraps composite index entries (as JSON5 text) into a file with one valid entry first, so
/// that errors must name position 1, not 0.
fn in_second_index(entry: &str) -> String {
    format!(
        r#"{{ "indexes": [
            {{ "collectionGroup": "ok", "fields": [
                {{ "fieldPath": "a", "order": "ASCENDING" }},
                {{ "fieldPath": "b", "order": "ASCENDING" }} ] }},
            {entry}
        ] }}"#
    )
}

fn two_fields(first: &str, second: &str) -> String {
    in_second_index(&format!(
        r#"{{ "collectionGroup": "c", "fields": [ {first}, {second} ] }}"#
    ))
}

const A_ASC: &str = r#"{ "fieldPath": "a", "order": "ASCENDING" }"#;

#[track_caller]
fn assert_message(e: &IndexFileError, parts: &[&str]) {
    let message = e.to_string();
    for part in parts {
        assert!(message.contains(part), "{message:?} lacks {part:?}");
    }
    assert!(
        message.starts_with(|c: char| !c.is_uppercase()),
        "{message:?} is not lowercase"
    );
}

#[test]
fn syntax_errors_give_line_and_column() {
    let e = refuse("{\n  \"indexes\": [\n    { \"collectionGroup\" \"x\" }\n  ]\n}");
    assert!(
        matches!(
            e,
            IndexFileError::Syntax {
                line: 3,
                column: 25,
                ..
            }
        ),
        "{e:?}"
    );
    assert_message(&e, &["syntax error at line 3, column 25", "colon"]);
    // Input that ends early is reported at its end.
    let e = refuse("{\n  \"indexes\": [");
    assert!(matches!(e, IndexFileError::Syntax { line: 2, .. }), "{e:?}");
    let e = refuse("{} {}");
    assert!(
        matches!(
            e,
            IndexFileError::Syntax {
                line: 1,
                column: 4,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn missing_collection_group_names_the_index() {
    let e = refuse(&in_second_index(r#"{ "fields": [] }"#));
    assert!(
        matches!(&e, IndexFileError::MissingKey { at, key: "collectionGroup" } if at == "indexes[1]"),
        "{e:?}"
    );
    assert_message(&e, &["indexes[1]", "`collectionGroup`"]);
    let e = refuse(&in_second_index(r#"{ "collectionGroup": "c" }"#));
    assert!(
        matches!(&e, IndexFileError::MissingKey { key: "fields", .. }),
        "{e:?}"
    );
    assert_message(&e, &["indexes[1]: missing `fields`"]);
}

#[test]
fn unknown_values_name_the_field() {
    let e = refuse(&two_fields(
        A_ASC,
        r#"{ "fieldPath": "b", "order": "ASC" }"#,
    ));
    assert!(
        matches!(&e, IndexFileError::UnknownValue { at, key: "order", value, .. }
            if at == "indexes[1].fields[1]" && value == "ASC"),
        "{e:?}"
    );
    assert_message(&e, &["indexes[1].fields[1]", "order `ASC`", "DESCENDING"]);

    let e = refuse(&two_fields(
        A_ASC,
        r#"{ "fieldPath": "b", "arrayConfig": "ANY" }"#,
    ));
    assert!(
        matches!(
            &e,
            IndexFileError::UnknownValue {
                key: "arrayConfig",
                ..
            }
        ),
        "{e:?}"
    );
    assert_message(&e, &["indexes[1].fields[1]", "`ANY`", "CONTAINS"]);

    let e = refuse(&in_second_index(
        r#"{ "collectionGroup": "c", "queryScope": "GLOBAL", "fields": [] }"#,
    ));
    assert!(
        matches!(
            &e,
            IndexFileError::UnknownValue {
                key: "queryScope",
                ..
            }
        ),
        "{e:?}"
    );
    assert_message(&e, &["indexes[1]", "`GLOBAL`", "COLLECTION_GROUP"]);
}

#[test]
fn a_field_needs_exactly_one_mode() {
    let both = r#"{ "fieldPath": "b", "order": "ASCENDING", "arrayConfig": "CONTAINS" }"#;
    let e = refuse(&two_fields(both, A_ASC));
    assert!(
        matches!(&e, IndexFileError::OrderAndArrayConfig { at } if at == "indexes[1].fields[0]"),
        "{e:?}"
    );
    assert_message(
        &e,
        &["indexes[1].fields[0]", "both `order` and `arrayConfig`"],
    );

    let e = refuse(&two_fields(A_ASC, r#"{ "fieldPath": "b" }"#));
    assert!(
        matches!(&e, IndexFileError::NoMode { at } if at == "indexes[1].fields[1]"),
        "{e:?}"
    );
    assert_message(&e, &["indexes[1].fields[1]", "`order` or `arrayConfig`"]);
}

#[test]
fn composite_indexes_need_two_fields() {
    let e = refuse(&in_second_index(
        r#"{ "collectionGroup": "c", "fields": [] }"#,
    ));
    assert!(
        matches!(&e, IndexFileError::EmptyFields { at } if at == "indexes[1]"),
        "{e:?}"
    );
    assert_message(&e, &["indexes[1]", "`fields` is empty"]);

    let e = refuse(&in_second_index(&format!(
        r#"{{ "collectionGroup": "c", "fields": [ {A_ASC} ] }}"#
    )));
    assert!(
        matches!(&e, IndexFileError::SingleField { at, field } if at == "indexes[1]" && field == "a"),
        "{e:?}"
    );
    assert_message(
        &e,
        &[
            "indexes[1]",
            "at least 2 fields",
            "only `a`",
            "fieldOverrides",
        ],
    );
}

#[test]
fn invalid_field_paths_wrap_path_errors() {
    let e = refuse(&two_fields(
        A_ASC,
        r#"{ "fieldPath": "a..b", "order": "ASCENDING" }"#,
    ));
    assert!(
        matches!(&e, IndexFileError::BadFieldPath { at, source: PathError::BadFieldPath { .. } }
            if at == "indexes[1].fields[1]"),
        "{e:?}"
    );
    assert_message(
        &e,
        &["indexes[1].fields[1]", "invalid field path", "`a..b`"],
    );
    assert!(std::error::Error::source(&e).is_some());

    let e = refuse(
        r#"{ "fieldOverrides": [ { "collectionGroup": "c", "fieldPath": "`x", "indexes": [] } ] }"#,
    );
    assert!(
        matches!(&e, IndexFileError::BadFieldPath { at, .. } if at == "fieldOverrides[0]"),
        "{e:?}"
    );
}

#[test]
fn one_array_contains_field_per_index() {
    let e = refuse(&in_second_index(
        r#"{ "collectionGroup": "c", "fields": [
            { "fieldPath": "tags", "arrayConfig": "CONTAINS" },
            { "fieldPath": "a", "order": "ASCENDING" },
            { "fieldPath": "labels", "arrayConfig": "CONTAINS" } ] }"#,
    ));
    assert!(
        matches!(&e, IndexFileError::MultipleArrayContains { at, first, second }
            if at == "indexes[1]" && first == "tags" && second == "labels"),
        "{e:?}"
    );
    assert_message(
        &e,
        &[
            "indexes[1]",
            "more than one array-contains",
            "`tags`",
            "`labels`",
        ],
    );
}

#[test]
fn a_field_appears_once_per_index() {
    let e = refuse(&two_fields(
        A_ASC,
        r#"{ "fieldPath": "`a`", "order": "DESCENDING" }"#,
    ));
    assert!(
        matches!(&e, IndexFileError::DuplicateField { at, field } if at == "indexes[1].fields[1]" && field == "a"),
        "{e:?}"
    );
    assert_message(&e, &["indexes[1].fields[1]", "`a` appears twice"]);
}

#[test]
fn misspelt_and_unsupported_keys_are_refused_inside_entries() {
    let e = refuse(&in_second_index(
        r#"{ "collectionGroup": "c", "queryscope": "COLLECTION_GROUP", "fields": [] }"#,
    ));
    assert!(
        matches!(&e, IndexFileError::UnknownKey { at, key } if at == "indexes[1]" && key == "queryscope"),
        "{e:?}"
    );
    assert_message(&e, &["indexes[1]: unknown key `queryscope`"]);

    let vector = r#"{ "fieldPath": "v", "vectorConfig": { "dimension": 3, "flat": {} } }"#;
    let e = refuse(&two_fields(A_ASC, vector));
    assert!(
        matches!(&e, IndexFileError::Unsupported { at, .. } if at == "indexes[1].fields[1]"),
        "{e:?}"
    );
    assert_message(&e, &["indexes[1].fields[1]", "vector indexes"]);
}

#[test]
fn wrong_json_types_are_named() {
    let e = refuse("[]");
    assert!(
        matches!(
            &e,
            IndexFileError::WrongType {
                found: "an array",
                ..
            }
        ),
        "{e:?}"
    );
    assert_message(&e, &["the file: expected an object, found an array"]);
    let e = refuse(r#"{ "indexes": {} }"#);
    assert_message(&e, &["indexes: expected an array, found an object"]);
    let e = refuse(&in_second_index(
        r#"{ "collectionGroup": 7, "fields": [] }"#,
    ));
    assert!(
        matches!(&e, IndexFileError::WrongType { at, .. } if at == "indexes[1].collectionGroup"),
        "{e:?}"
    );
    assert_message(
        &e,
        &["indexes[1].collectionGroup: expected a string, found a number"],
    );
    let e = refuse(&two_fields(A_ASC, r#""b""#));
    assert_message(
        &e,
        &["indexes[1].fields[1]: expected an object, found a string"],
    );
}

#[test]
fn collection_groups_are_single_ids() {
    let e = refuse(&in_second_index(
        r#"{ "collectionGroup": "users/alice/posts", "fields": [] }"#,
    ));
    assert!(
        matches!(&e, IndexFileError::BadCollectionGroup { at, source: PathError::SlashInId { .. } }
            if at == "indexes[1]"),
        "{e:?}"
    );
    assert_message(
        &e,
        &[
            "indexes[1]",
            "invalid collection group",
            "`users/alice/posts`",
        ],
    );
    let e = refuse(
        r#"{ "fieldOverrides": [ { "collectionGroup": "", "fieldPath": "x", "indexes": [] } ] }"#,
    );
    assert!(
        matches!(&e, IndexFileError::BadCollectionGroup { at, .. } if at == "fieldOverrides[0]"),
        "{e:?}"
    );
}

#[test]
fn field_overrides_are_checked() {
    let override_with = |indexes: &str| {
        format!(
            r#"{{ "fieldOverrides": [
                {{ "collectionGroup": "c", "fieldPath": "x", "indexes": [] }},
                {{ "collectionGroup": "c", "fieldPath": "y", "indexes": [ {indexes} ] }} ] }}"#
        )
    };
    let e = refuse(&override_with(r#"{ "order": "UP" }"#));
    assert!(
        matches!(&e, IndexFileError::UnknownValue { at, key: "order", .. } if at == "fieldOverrides[1].indexes[0]"),
        "{e:?}"
    );
    assert_message(&e, &["fieldOverrides[1].indexes[0]", "`UP`"]);

    let e = refuse(&override_with(r#"{ "queryScope": "COLLECTION" }"#));
    assert!(matches!(&e, IndexFileError::NoMode { .. }), "{e:?}");

    let e = refuse(&override_with(
        r#"{ "order": "ASCENDING" }, { "order": "ASCENDING", "queryScope": "COLLECTION" }"#,
    ));
    assert!(
        matches!(&e, IndexFileError::DuplicateOverrideIndex { at } if at == "fieldOverrides[1].indexes[1]"),
        "{e:?}"
    );
    assert_message(&e, &["fieldOverrides[1].indexes[1]", "listed twice"]);

    let e = refuse(r#"{ "fieldOverrides": [ { "collectionGroup": "c", "fieldPath": "x" } ] }"#);
    assert!(
        matches!(&e, IndexFileError::MissingKey { key: "indexes", .. }),
        "{e:?}"
    );
    assert_message(&e, &["fieldOverrides[0]: missing `indexes`"]);

    let e = refuse(
        r#"{ "fieldOverrides": [
            { "collectionGroup": "c", "fieldPath": "a.b", "indexes": [] },
            { "collectionGroup": "d", "fieldPath": "a.b", "indexes": [] },
            { "collectionGroup": "c", "fieldPath": "a.`b`", "indexes": [] } ] }"#,
    );
    assert!(
        matches!(&e, IndexFileError::DuplicateOverride { at, first, .. }
            if at == "fieldOverrides[2]" && first == "fieldOverrides[0]"),
        "{e:?}"
    );
    assert_message(
        &e,
        &["fieldOverrides[2]", "`a.b`", "`c`", "fieldOverrides[0]"],
    );
}

// Random files for the round trip: field names from a small alphabet, so that paths collide
// and nest, plus names that only survive printing if they are backtick-quoted.

fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-c_][a-c0-9_]{0,2}",
        1 => prop::sample::select(vec![
            "a.b", "first name", "x`y", "back\\slash", "1st", "é", "-", "`", "__name__",
        ])
        .prop_map(str::to_owned),
    ]
}

fn field_path() -> impl Strategy<Value = FieldPath> {
    prop::collection::vec(segment(), 1..4)
        .prop_map(|segments| FieldPath::from_segments(segments).unwrap())
}

fn collection_group() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{1,6}",
        Just("with space".to_owned()),
        Just("dots.ok".to_owned())
    ]
}

fn query_scope() -> impl Strategy<Value = QueryScope> {
    prop_oneof![
        Just(QueryScope::Collection),
        Just(QueryScope::CollectionGroup)
    ]
}

fn mode() -> impl Strategy<Value = FieldMode> {
    prop_oneof![Just(Ascending), Just(Descending), Just(ArrayContains)]
}

fn composite() -> impl Strategy<Value = CompositeIndexSpec> {
    let fields = prop::collection::btree_set(field_path(), 2..6)
        .prop_flat_map(|paths| {
            let n = paths.len();
            (
                Just(paths.into_iter().collect::<Vec<_>>()).prop_shuffle(),
                prop::collection::vec(mode(), n),
            )
        })
        .prop_map(|(paths, modes)| {
            let mut seen_array = false;
            paths
                .into_iter()
                .zip(modes)
                .map(|(field_path, mut mode)| {
                    // At most one array-contains field is valid.
                    if mode == ArrayContains && std::mem::replace(&mut seen_array, true) {
                        mode = Ascending;
                    }
                    IndexFieldSpec { field_path, mode }
                })
                .collect()
        });
    (collection_group(), query_scope(), fields).prop_map(
        |(collection_group, query_scope, fields)| CompositeIndexSpec {
            collection_group,
            query_scope,
            fields,
        },
    )
}

fn override_indexes() -> impl Strategy<Value = Vec<OverrideIndexSpec>> {
    let all: Vec<_> = [Ascending, Descending, ArrayContains]
        .into_iter()
        .flat_map(|mode| {
            [QueryScope::Collection, QueryScope::CollectionGroup]
                .map(|query_scope| OverrideIndexSpec { mode, query_scope })
        })
        .collect();
    prop::sample::subsequence(all, 0..=6).prop_shuffle()
}

fn index_file() -> impl Strategy<Value = IndexFile> {
    let overrides =
        prop::collection::btree_map((collection_group(), field_path()), override_indexes(), 0..4)
            .prop_map(|map| {
                map.into_iter()
                    .map(
                        |((collection_group, field_path), indexes)| FieldOverrideSpec {
                            collection_group,
                            field_path,
                            indexes,
                        },
                    )
                    .collect::<Vec<_>>()
            })
            .prop_shuffle();
    (prop::collection::vec(composite(), 0..4), overrides).prop_map(|(indexes, field_overrides)| {
        IndexFile {
            indexes,
            field_overrides,
        }
    })
}

proptest! {
    #[test]
    fn random_files_round_trip(file in index_file()) {
        let printed = file.to_json();
        prop_assert_eq!(parse_index_file(&printed), Ok(file.clone()), "{}", printed);
        // Strict JSON takes the fast parser, JSON5 (here a comment) the other: the same file.
        let commented = format!("// hand edited\n{printed}");
        prop_assert_eq!(parse_index_file(&commented), Ok(file.clone()), "{}", commented);
        for index in &file.indexes {
            let wrapped = format!("{{\"indexes\":[ {} ]}}", index.to_json_entry());
            prop_assert_eq!(parse_index_file(&wrapped).map(|f| f.indexes), Ok(vec![index.clone()]));
        }
    }
}
