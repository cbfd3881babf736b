//! Index maintenance: applying `index_diff` write by write (`MemStore::write_document`) leaves
//! exactly the index table a rebuild from the final documents gives, every diff deletes only
//! present keys and inserts only absent ones, and every entry decodes to its document's
//! values. A naive model of which indexes hold entries (automatic single-field indexes per
//! field path, `fieldOverrides` with the most specific path winning, composites, the
//! collection-group name index) fixes how many entries each document must have.

use std::collections::{BTreeMap, BTreeSet};

use hearth_core::document::Document;
use hearth_core::encoding::document::decode_document;
use hearth_core::index::config::{
    FieldMode, FieldOverrideSpec, IndexFile, OverrideIndexSpec, QueryScope,
};
use hearth_core::index::def::{IndexCatalog, IndexDef};
use hearth_core::index::keys::{decode_entry, document_entries, document_key, index_diff};
use hearth_core::kv::MemStore;
use hearth_core::path::{DocumentName, FieldPath};
use hearth_core::value::{Map, Value};
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use proptest::sample::{select, subsequence};

use crate::query_model::{cases, ref_cmp, strict_eq};
use crate::strategies::arb_value;

fn field(path: &str) -> FieldPath {
    FieldPath::parse(path).expect("valid field path")
}

fn names() -> Vec<DocumentName> {
    [
        "items/a",
        "items/b",
        "items/c",
        "items/a/items/a",
        "other/o/items/b",
        "users/x",
        "users/y",
    ]
    .iter()
    .map(|p| DocumentName::parse(p).expect("valid name"))
    .collect()
}

/// Values that collide in the index order (1 vs 1.0, 0 vs -0.0, NaN) next to anything at all.
fn arb_leaf_value() -> BoxedStrategy<Value> {
    let hot = select(crate::query_model::hot_pool());
    prop_oneof![
        3 => hot.clone(),
        2 => vec(hot, 0..4).prop_map(Value::Array),
        2 => arb_value(),
    ]
    .boxed()
}

/// Fields with shared names, arrays and nested maps (`m.x`, `m.y`, `m.x.x`).
fn arb_fields() -> impl Strategy<Value = Map> {
    let inner = btree_map(
        select(vec!["x".to_owned(), "y".to_owned()]),
        arb_leaf_value(),
        0..3,
    )
    .prop_map(Value::Map);
    let nested = btree_map(
        select(vec!["x".to_owned(), "y".to_owned()]),
        prop_oneof![2 => arb_leaf_value(), 1 => inner.boxed()],
        0..3,
    )
    .prop_map(Value::Map);
    let m = prop_oneof![3 => nested.boxed(), 1 => arb_leaf_value()];
    (
        prop::option::weighted(0.7, arb_leaf_value()),
        prop::option::weighted(0.7, arb_leaf_value()),
        prop::option::weighted(0.7, arb_leaf_value()),
        prop::option::weighted(0.7, m),
    )
        .prop_map(|(a, b, c, m)| {
            [("a", a), ("b", b), ("c", c), ("m", m)]
                .into_iter()
                .filter_map(|(k, v)| v.map(|v| (k.to_owned(), v)))
                .collect()
        })
}

/// One write: a document set to some fields, or deleted.
fn arb_op() -> impl Strategy<Value = (DocumentName, Option<Map>)> {
    (select(names()), prop::option::weighted(0.8, arb_fields()))
}

use crate::query_model::composite;

fn exemption(group: &str, path: &str, indexes: &[(FieldMode, QueryScope)]) -> FieldOverrideSpec {
    FieldOverrideSpec {
        collection_group: group.to_owned(),
        field_path: field(path),
        indexes: indexes
            .iter()
            .map(|(mode, query_scope)| OverrideIndexSpec {
                mode: *mode,
                query_scope: *query_scope,
            })
            .collect(),
    }
}

/// Automatic indexes plus a random choice of composites (array-contains and descending
/// fields, one equal to an automatic index) and of field overrides (full exemptions, an
/// exempted map with a more specific override below it, collection-group indexes).
fn arb_index_file() -> impl Strategy<Value = IndexFile> {
    use FieldMode::*;
    use QueryScope::*;
    let composites = vec![
        composite("items", Collection, &[("a", Ascending), ("b", Descending)]),
        composite(
            "items",
            Collection,
            &[("c", ArrayContains), ("a", Ascending)],
        ),
        composite(
            "items",
            Collection,
            &[("m.x", Descending), ("__name__", Ascending)],
        ),
        composite(
            "items",
            Collection,
            &[("a", Ascending), ("__name__", Ascending)],
        ),
        composite(
            "items",
            CollectionGroup,
            &[("b", Ascending), ("c", ArrayContains)],
        ),
        composite(
            "items",
            Collection,
            &[("a", Descending), ("m", Ascending), ("c", ArrayContains)],
        ),
        composite("users", Collection, &[("a", Descending), ("b", Ascending)]),
    ];
    let overrides = vec![
        exemption("items", "b", &[]),
        exemption("items", "m", &[]),
        exemption(
            "items",
            "m.x",
            &[(Ascending, Collection), (ArrayContains, CollectionGroup)],
        ),
        exemption(
            "items",
            "a",
            &[(Descending, Collection), (Ascending, CollectionGroup)],
        ),
        exemption("users", "c", &[(ArrayContains, Collection)]),
        exemption(
            "items",
            "c",
            &[
                (ArrayContains, Collection),
                (ArrayContains, CollectionGroup),
            ],
        ),
    ];
    let (nc, no) = (composites.len(), overrides.len());
    (
        subsequence(composites, 0..=nc),
        subsequence(overrides, 0..=no),
    )
        .prop_map(|(indexes, field_overrides)| IndexFile {
            indexes,
            field_overrides,
        })
}

/// Every field path of a map (nested maps included) with its value.
fn field_paths(map: &Map, prefix: &mut Vec<String>, out: &mut Vec<(FieldPath, Value)>) {
    for (k, v) in map {
        prefix.push(k.clone());
        out.push((
            FieldPath::from_segments(prefix.clone()).expect("valid"),
            v.clone(),
        ));
        if let Value::Map(m) = v {
            field_paths(m, prefix, out);
        }
        prefix.pop();
    }
}

fn order_distinct(items: &[Value]) -> usize {
    let mut seen: Vec<&Value> = Vec::new();
    for x in items {
        if !seen.iter().any(|y| ref_cmp(x, y).is_eq()) {
            seen.push(x);
        }
    }
    seen.len()
}

/// How many entries each index must hold for `doc`, by index definition, from the naive
/// rules of the index file (no `IndexCatalog` involved).
fn expected_entries(file: &IndexFile, doc: &Document) -> BTreeMap<String, (IndexDef, usize)> {
    let group = doc.name.collection_id();
    let mut out: BTreeMap<String, (IndexDef, usize)> = BTreeMap::new();
    let mut add = |def: IndexDef, n: usize| {
        if n > 0 {
            out.insert(def.canonical(), (def, n));
        }
    };
    add(
        IndexDef::new(group, QueryScope::CollectionGroup, Vec::new()),
        1,
    );
    let mut paths = Vec::new();
    field_paths(&doc.fields, &mut Vec::new(), &mut paths);
    for (path, v) in &paths {
        let best = file
            .field_overrides
            .iter()
            .filter(|o| {
                o.collection_group == group && path.segments().starts_with(o.field_path.segments())
            })
            .max_by_key(|o| o.field_path.segments().len());
        for scope in [QueryScope::Collection, QueryScope::CollectionGroup] {
            let has = |mode: FieldMode| match best {
                Some(o) => o
                    .indexes
                    .iter()
                    .any(|i| i.mode == mode && i.query_scope == scope),
                None => scope == QueryScope::Collection,
            };
            // One stored ordered index serves both directions: ascending if enabled.
            let ordered = if has(FieldMode::Ascending) {
                Some(FieldMode::Ascending)
            } else if has(FieldMode::Descending) {
                Some(FieldMode::Descending)
            } else {
                None
            };
            if let Some(mode) = ordered {
                add(IndexDef::new(group, scope, vec![(path.clone(), mode)]), 1);
            }
            if let (true, Value::Array(items)) = (has(FieldMode::ArrayContains), v) {
                add(
                    IndexDef::new(group, scope, vec![(path.clone(), FieldMode::ArrayContains)]),
                    order_distinct(items),
                );
            }
        }
    }
    for spec in file.indexes.iter().filter(|s| s.collection_group == group) {
        let def = IndexDef::from_spec(spec);
        let mut n = 1;
        for (path, mode) in def.fields() {
            let v = paths.iter().find(|(p, _)| p == path).map(|(_, v)| v);
            n *= match (mode, v) {
                (_, None) => 0,
                (FieldMode::ArrayContains, Some(Value::Array(items))) => order_distinct(items),
                (FieldMode::ArrayContains, Some(_)) => 0,
                _ => 1,
            };
        }
        add(def, n);
    }
    out
}

/// Every key of the index table decodes, under the index its id names, to a live document
/// and to that document's values; each document has exactly the expected number of entries.
fn check_index_table(
    file: &IndexFile,
    store: &MemStore,
    docs: &BTreeMap<DocumentName, Document>,
) -> Result<(), TestCaseError> {
    let mut defs: BTreeMap<Vec<u8>, IndexDef> = BTreeMap::new();
    let mut expected: BTreeMap<(Vec<u8>, DocumentName), usize> = BTreeMap::new();
    for d in docs.values() {
        for (def, n) in expected_entries(file, d).into_values() {
            expected.insert((def.id().to_vec(), d.name.clone()), n);
            defs.insert(def.id().to_vec(), def);
        }
    }
    let mut found: BTreeMap<(Vec<u8>, DocumentName), usize> = BTreeMap::new();
    for key in store.index.keys() {
        let def = defs.get(&key[..8]);
        prop_assert!(
            def.is_some(),
            "entry of an index no document needs: {key:?}"
        );
        let def = def.expect("checked");
        let entry = decode_entry(def, key);
        prop_assert!(entry.is_ok(), "undecodable entry {key:?}: {entry:?}");
        let entry = entry.expect("checked");
        let doc = docs.get(&entry.name);
        prop_assert!(doc.is_some(), "entry for a missing document {}", entry.name);
        let doc = doc.expect("checked");
        for ((path, mode), got) in def.fields().iter().zip(&entry.values) {
            let v = doc
                .field(path)
                .expect("indexed fields are present")
                .into_owned();
            let ok = match (mode, &v) {
                (FieldMode::ArrayContains, Value::Array(items)) => {
                    items.iter().any(|x| strict_eq(x, got))
                }
                (FieldMode::ArrayContains, _) => false,
                _ => strict_eq(&v, got),
            };
            prop_assert!(
                ok,
                "entry of {} holds {:?} for `{}` = {:?}",
                doc.name,
                got,
                path,
                v
            );
        }
        *found.entry((def.id().to_vec(), entry.name)).or_default() += 1;
    }
    prop_assert_eq!(found, expected);
    Ok(())
}

fn apply_writes(
    catalog: &IndexCatalog,
    ops: &[(DocumentName, Option<Map>)],
) -> Result<(MemStore, BTreeMap<DocumentName, Document>), TestCaseError> {
    let mut store = MemStore::new();
    let mut docs: BTreeMap<DocumentName, Document> = BTreeMap::new();
    for (name, fields) in ops {
        let before = store.index.clone();
        let new = fields.clone().map(|f| Document::new(name.clone(), f));
        let diff = store
            .write_document(catalog, name, new.as_ref())
            .expect("generated documents are valid");
        let deletes: BTreeSet<&Vec<u8>> = diff.deletes.iter().collect();
        let inserts: BTreeSet<&Vec<u8>> = diff.inserts.iter().collect();
        prop_assert_eq!(deletes.len(), diff.deletes.len(), "a key deleted twice");
        prop_assert_eq!(inserts.len(), diff.inserts.len(), "a key inserted twice");
        for k in &diff.deletes {
            prop_assert!(before.contains_key(k), "deletes an absent key");
        }
        for k in &diff.inserts {
            prop_assert!(!before.contains_key(k), "inserts a present key");
        }
        prop_assert!(deletes.is_disjoint(&inserts));
        // The diff is exactly the change to the table.
        let mut applied = before;
        for k in &diff.deletes {
            applied.remove(k);
        }
        for k in &diff.inserts {
            applied.insert(k.clone(), document_key(name));
        }
        prop_assert!(applied == store.index, "the diff is not the table's change");
        match new {
            Some(d) => docs.insert(name.clone(), d),
            None => docs.remove(name),
        };
    }
    Ok((store, docs))
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(160),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn incremental_maintenance_equals_rebuild(
        file in arb_index_file(),
        ops in vec(arb_op(), 1..20),
    ) {
        let catalog = IndexCatalog::from_file(&file);
        let (store, docs) = apply_writes(&catalog, &ops)?;
        let rebuilt: BTreeSet<Vec<u8>> = docs
            .values()
            .flat_map(|d| document_entries(&catalog, d))
            .collect();
        let incremental: BTreeSet<Vec<u8>> = store.index.keys().cloned().collect();
        prop_assert!(incremental == rebuilt, "incremental and rebuilt tables differ");
        // The documents table holds exactly the live documents, each under its own key.
        prop_assert_eq!(store.documents.len(), docs.len());
        for d in docs.values() {
            let stored = store.documents.get(&document_key(&d.name));
            prop_assert!(stored.is_some(), "missing {}", d.name);
            let back = decode_document(stored.expect("checked")).expect("decodes");
            prop_assert_eq!(&back.name, &d.name);
            prop_assert!(strict_eq(&Value::Map((*back.fields).clone()), &Value::Map((*d.fields).clone())));
            // Rewriting a document unchanged touches nothing.
            let same = index_diff(&catalog, Some(d), Some(d));
            prop_assert!(same.deletes.is_empty() && same.inserts.is_empty());
            prop_assert_eq!(same.entries, document_entries(&catalog, d).len());
        }
        check_index_table(&file, &store, &docs)?;
    }
}

/// `[1, 1.0, 0, -0.0, NaN, NaN]` under an array-contains index: one entry per element that
/// is distinct in the index order, so 3; rewriting it as `[1.0, 1]` changes only the
/// trailer of the `1` entry.
#[test]
fn order_equal_elements_share_one_entry() {
    let file = IndexFile::default();
    let catalog = IndexCatalog::from_file(&file);
    let name = DocumentName::parse("items/a").expect("valid");
    let doc = |items: Vec<Value>| {
        Document::new(
            name.clone(),
            [("c".to_owned(), Value::Array(items))]
                .into_iter()
                .collect(),
        )
    };
    let first = doc(vec![
        1i64.into(),
        1.0.into(),
        0i64.into(),
        (-0.0).into(),
        f64::NAN.into(),
        f64::NAN.into(),
    ]);
    let contains = IndexDef::new(
        "items",
        QueryScope::Collection,
        vec![(field("c"), FieldMode::ArrayContains)],
    );
    let entries: Vec<Vec<u8>> = document_entries(&catalog, &first)
        .into_iter()
        .filter(|k| k.starts_with(contains.id()))
        .collect();
    assert_eq!(entries.len(), 3);
    let mut store = MemStore::new();
    store.write_document(&catalog, &name, Some(&first)).unwrap();
    let second = doc(vec![1.0.into(), 1i64.into()]);
    let diff = store
        .write_document(&catalog, &name, Some(&second))
        .unwrap();
    let touched: Vec<&Vec<u8>> = diff
        .inserts
        .iter()
        .filter(|k| k.starts_with(contains.id()))
        .collect();
    assert_eq!(touched.len(), 1);
    let entry = decode_entry(&contains, touched[0]).unwrap();
    assert!(strict_eq(&entry.values[0], &Value::Double(1.0)));
    let (store2, docs) =
        apply_writes(&catalog, &[(name.clone(), Some((*second.fields).clone()))]).unwrap();
    assert_eq!(store.index, store2.index);
    check_index_table(&file, &store, &docs).unwrap();
}

/// `add_missing` records an index in the form the index file gives it, so the stored file
/// reads back as the same definitions (a relay reloads them from it): a composite as a
/// composite, a single-field index as an override keeping the field's other indexes.
#[test]
fn added_missing_indexes_read_back_from_their_file() {
    use hearth_core::index::config::{parse_index_file, CompositeIndexSpec, IndexFieldSpec};
    let field = |p: &str, mode| IndexFieldSpec {
        field_path: FieldPath::parse(p).unwrap(),
        mode,
    };
    let spec = |scope, fields| CompositeIndexSpec {
        collection_group: "items".into(),
        query_scope: scope,
        fields,
    };
    let mut catalog = IndexCatalog::new();
    let single = spec(
        QueryScope::CollectionGroup,
        vec![field("mixed", FieldMode::Descending)],
    );
    let pair = spec(
        QueryScope::Collection,
        vec![
            field("a", FieldMode::Ascending),
            field("b", FieldMode::Descending),
        ],
    );
    assert!(catalog.add_missing(&single));
    assert!(catalog.add_missing(&pair));
    assert!(!catalog.add_missing(&single), "added once");
    assert!(!catalog.add_missing(&pair), "added once");
    let file = parse_index_file(&catalog.file().to_json()).expect("the file parses");
    let reread = IndexCatalog::from_file(&file);
    let mixed = FieldPath::parse("mixed").unwrap();
    for c in [&catalog, &reread] {
        let group = c.single_field_modes("items", &mixed, QueryScope::CollectionGroup);
        assert!(group.descending && !group.ascending && !group.array_contains);
        let coll = c.single_field_modes("items", &mixed, QueryScope::Collection);
        assert!(coll.ascending && coll.descending && coll.array_contains);
        assert_eq!(c.composites(), &[IndexDef::from_spec(&pair)]);
    }
    let doc = Document::new(
        DocumentName::parse("items/x").unwrap(),
        Map::from([("mixed".to_owned(), Value::Integer(1))]),
    );
    assert_eq!(
        document_entries(&catalog, &doc),
        document_entries(&reread, &doc)
    );
}

/// The id a definition must have: the first bytes of the SHA-256 of its canonical text.
fn digest_id(def: &IndexDef) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    Sha256::digest(def.canonical().as_bytes())[..hearth_core::index::def::INDEX_ID_LEN].to_vec()
}

proptest! {
    /// Ids are remembered per thread (`IndexDef::new`); whether a definition was made
    /// before, or so many others were made since that the memory started again, its id is
    /// the digest of its text.
    #[test]
    fn remembered_index_ids_are_the_digest_of_the_definition(
        picks in vec((0usize..3, 0usize..2, subsequence(vec!["a", "b.c", "d", "__name__"], 0..=3), 0usize..3), 1..40),
        others in select(vec![0usize, 10, 4100]),
    ) {
        let make = |(g, s, fields, m): &(usize, usize, Vec<&str>, usize)| {
            let scope = [QueryScope::Collection, QueryScope::CollectionGroup][*s];
            let mode = [FieldMode::Ascending, FieldMode::Descending, FieldMode::ArrayContains][*m];
            let fields = fields.iter().map(|f| (field(f), mode)).collect();
            IndexDef::new(["items", "users", "c"][*g], scope, fields)
        };
        for p in &picks {
            let def = make(p);
            prop_assert_eq!(def.id().to_vec(), digest_id(&def));
        }
        for i in 0..others {
            let def = IndexDef::new(&format!("g{i}"), QueryScope::Collection, vec![(field("x"), FieldMode::Ascending)]);
            prop_assert_eq!(def.id().to_vec(), digest_id(&def));
        }
        for p in picks.iter().rev() {
            let def = make(p);
            prop_assert_eq!(def.id().to_vec(), digest_id(&def));
        }
    }
}
