//! The engine under test, with missing indexes added as a user would paste them, and one
//! property case: every query on both engines, against the model.

use hearth_core::document::Document;
use hearth_core::error::ErrorCode;
use hearth_core::index::config::{
    parse_index_file, CompositeIndexSpec, FieldMode, FieldOverrideSpec, IndexFieldSpec, IndexFile,
    OverrideIndexSpec, QueryScope,
};
use hearth_core::index::def::{IndexCatalog, IndexDef};
use hearth_core::index::keys::index_entries;
use hearth_core::kv::{block_on_ready, MemStore};
use hearth_core::path::FieldPath;
use hearth_core::query::execute::{run_aggregation, run_query};
use hearth_core::query::model::{Aggregation, Query};
use hearth_core::query::validate::{validate, QueryError};
use hearth_core::value::Value;
use proptest::prelude::*;

use super::generate::*;
use super::reference::*;

/// A catalog and a store holding `docs` under it; learns the indexes queries ask for.
pub(crate) struct Engine {
    pub(crate) file: IndexFile,
    pub(crate) catalog: IndexCatalog,
    pub(crate) store: MemStore,
    docs: Vec<Document>,
}

/// The single-field indexes `path` has now, as a `fieldOverrides` entry lists them.
pub(crate) fn effective_single_field(
    catalog: &IndexCatalog,
    group: &str,
    path: &FieldPath,
) -> Vec<OverrideIndexSpec> {
    let mut out = Vec::new();
    for scope in [QueryScope::Collection, QueryScope::CollectionGroup] {
        let m = catalog.single_field_modes(group, path, scope);
        for (on, mode) in [
            (m.ascending, FieldMode::Ascending),
            (m.descending, FieldMode::Descending),
            (m.array_contains, FieldMode::ArrayContains),
        ] {
            if on {
                out.push(OverrideIndexSpec {
                    mode,
                    query_scope: scope,
                });
            }
        }
    }
    out
}

impl Engine {
    pub(crate) fn new(file: IndexFile, docs: &[Document]) -> Engine {
        let mut e = Engine {
            catalog: IndexCatalog::from_file(&file),
            file,
            store: MemStore::new(),
            docs: docs.to_vec(),
        };
        e.rebuild();
        e
    }

    /// Adds a composite index and its entries (a new composite only adds entries).
    fn add_composite(&mut self, spec: &CompositeIndexSpec) {
        self.file.indexes.push(spec.clone());
        let def = IndexDef::from_spec(spec);
        if !self.catalog.add_composite(def.clone()) {
            return;
        }
        for d in &self.docs {
            if d.name.collection_id() == def.collection_group() {
                for key in index_entries(&def, d) {
                    self.store.index.insert(key, Vec::new());
                }
            }
        }
    }

    fn rebuild(&mut self) {
        self.catalog = IndexCatalog::from_file(&self.file);
        self.store = MemStore::new();
        for d in &self.docs {
            self.store
                .write_document(&self.catalog, &d.name, Some(d))
                .expect("generated documents are valid");
        }
    }

    /// Adds the index a `MissingIndex` error names, checking that the suggestion is a
    /// well-formed entry that was not there yet.
    pub(crate) fn learn(&mut self, message: &str, spec: &CompositeIndexSpec) -> Result<(), String> {
        if spec.fields.len() >= 2 {
            let entry = spec.to_json_entry();
            if !message.contains(&entry) {
                return Err(format!("message does not show the entry:\n{message}"));
            }
            let parsed = parse_index_file(&format!("{{\"indexes\": [{entry}]}}"))
                .map_err(|e| format!("suggested entry does not parse ({e}):\n{entry}"))?;
            if parsed.indexes != [spec.clone()] {
                return Err(format!("suggested entry reads back differently:\n{entry}"));
            }
            if self
                .catalog
                .composites()
                .contains(&IndexDef::from_spec(spec))
            {
                return Err(format!("suggested an index that exists:\n{entry}"));
            }
            self.add_composite(spec);
            return Ok(());
        } else {
            // Paste the entry as the message says: in place of any entry for the field.
            let f = &spec.fields[0];
            let at = message
                .find("\n{")
                .ok_or_else(|| format!("no entry in the message:\n{message}"))?;
            let pasted = parse_index_file(&format!("{{\"fieldOverrides\": [{}]}}", &message[at..]))
                .map_err(|e| format!("suggested override does not parse ({e}):\n{message}"))?;
            let o = pasted.field_overrides[0].clone();
            if o.collection_group != spec.collection_group || o.field_path != f.field_path {
                return Err(format!("override for another field:\n{message}"));
            }
            let wanted = OverrideIndexSpec {
                mode: f.mode,
                query_scope: spec.query_scope,
            };
            let before = effective_single_field(&self.catalog, &o.collection_group, &o.field_path);
            if before.contains(&wanted) || !o.indexes.contains(&wanted) {
                return Err(format!(
                    "suggested a single-field index that exists:\n{message}"
                ));
            }
            if let Some(lost) = before.iter().find(|i| !o.indexes.contains(i)) {
                return Err(format!("pasting the override drops {lost:?}:\n{message}"));
            }
            self.file.field_overrides.retain(|x| {
                x.collection_group != o.collection_group || x.field_path != o.field_path
            });
            self.file.field_overrides.push(o);
        }
        self.rebuild();
        Ok(())
    }

    /// Runs `q`, adding suggested indexes until it runs (at most a few rounds).
    pub(crate) fn run(&mut self, q: &Query) -> Result<Vec<Document>, String> {
        for _ in 0..8 {
            match block_on_ready(run_query(&self.store, &self.catalog, q)) {
                Ok(docs) => return Ok(docs),
                Err(QueryError::MissingIndex { message, index }) => self.learn(&message, &index)?,
                Err(e) => return Err(format!("engine error: {e}")),
            }
        }
        Err("still missing an index after 8 suggestions".into())
    }

    pub(crate) fn aggregate(
        &mut self,
        q: &Query,
        aggs: &[Aggregation],
    ) -> Result<Vec<Value>, String> {
        block_on_ready(run_aggregation(&self.store, &self.catalog, q, aggs))
            .map_err(|e| format!("aggregation error: {e}"))
    }
}

pub(crate) fn summary(docs: &[Document]) -> Vec<String> {
    docs.iter()
        .map(|d| format!("{} {:?}", d.name, d.fields))
        .collect()
}

pub(crate) fn same_results(got: &[Document], want: &[Document]) -> bool {
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(g, w)| g.name == w.name && strict_eq_fields(&g.fields, &w.fields))
}

pub(crate) fn same_values(got: &[Value], want: &[Value]) -> bool {
    got.len() == want.len() && got.iter().zip(want).all(|(g, w)| strict_eq(g, w))
}

pub(crate) fn base_file(exempt: &[&str]) -> IndexFile {
    IndexFile {
        indexes: Vec::new(),
        field_overrides: exempt
            .iter()
            .map(|f| FieldOverrideSpec {
                collection_group: "items".to_owned(),
                field_path: field(f),
                indexes: Vec::new(),
            })
            .collect(),
    }
}

pub(crate) fn spec(scope: QueryScope, fields: &[(&str, FieldMode)]) -> CompositeIndexSpec {
    composite("items", scope, fields)
}

/// A composite index entry of collection group `group`.
pub(crate) fn composite(
    group: &str,
    scope: QueryScope,
    fields: &[(&str, FieldMode)],
) -> CompositeIndexSpec {
    CompositeIndexSpec {
        collection_group: group.to_owned(),
        query_scope: scope,
        fields: fields
            .iter()
            .map(|(f, mode)| IndexFieldSpec {
                field_path: field(f),
                mode: *mode,
            })
            .collect(),
    }
}

/// Composites that let equality conjunctions run from one index or a zig-zag of composites.
pub(crate) fn composite_pool() -> Vec<CompositeIndexSpec> {
    use FieldMode::*;
    use QueryScope::*;
    vec![
        spec(Collection, &[("a", Ascending), ("b", Ascending)]),
        spec(Collection, &[("b", Ascending), ("a", Ascending)]),
        spec(Collection, &[("a", Ascending), ("b", Descending)]),
        spec(Collection, &[("c", ArrayContains), ("a", Ascending)]),
        spec(Collection, &[("a", Descending), ("m.x", Ascending)]),
        spec(Collection, &[("b", Ascending), ("__name__", Descending)]),
        spec(Collection, &[("a", Ascending), ("__name__", Ascending)]),
        spec(Collection, &[("m.x", Ascending), ("a", Ascending)]),
        spec(
            Collection,
            &[("b", Ascending), ("c", ArrayContains), ("a", Ascending)],
        ),
        spec(CollectionGroup, &[("a", Ascending), ("b", Ascending)]),
        spec(CollectionGroup, &[("b", Ascending), ("a", Descending)]),
    ]
}

pub(crate) fn aggregations() -> Vec<Aggregation> {
    vec![
        Aggregation::Count,
        Aggregation::Sum(field("a")),
        Aggregation::Average(field("a")),
        Aggregation::Sum(field("m.x")),
        Aggregation::Average(field("b")),
    ]
}

/// Runs every query of a case on both engines and against the model.
pub(crate) fn check_case(
    docs: &[Document],
    specs: &[QuerySpec],
    exempt: &[&str],
    composites: &[CompositeIndexSpec],
) -> Result<(), TestCaseError> {
    let mut plain = Engine::new(base_file(exempt), docs);
    let mut rich = Engine {
        file: plain.file.clone(),
        catalog: plain.catalog.clone(),
        store: plain.store.clone(),
        docs: docs.to_vec(),
    };
    for c in composites {
        rich.add_composite(c);
    }
    for s in specs {
        let q = build_query(s, docs);
        if !firestore_accepts(&q) {
            let refused = validate(&q).map(|_| ()).map_err(|e| e.code());
            prop_assert_eq!(refused, Err(ErrorCode::InvalidArgument), "query: {:#?}", q);
            continue;
        }
        let want = model_run(docs, &q);
        for (label, engine) in [("auto indexes", &mut plain), ("with composites", &mut rich)] {
            let got = engine
                .run(&q)
                .map_err(|e| TestCaseError::fail(format!("{label}: {e}\nquery: {q:#?}")))?;
            prop_assert!(
                same_results(&got, &want),
                "{}: engine and model differ\nquery: {:#?}\nengine: {:#?}\nmodel: {:#?}",
                label,
                q,
                summary(&got),
                summary(&want)
            );
            let aggs = aggregations();
            let got = engine
                .aggregate(&q, &aggs)
                .map_err(|e| TestCaseError::fail(format!("{label}: {e}\nquery: {q:#?}")))?;
            let want = model_aggregate(docs, &q, &aggs);
            prop_assert!(
                same_values(&got, &want),
                "{}: aggregations differ\nquery: {:#?}\nengine: {:?}\nmodel: {:?}",
                label,
                q,
                got,
                want
            );
        }
    }
    Ok(())
}
