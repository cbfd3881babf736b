//! The missing-index error: the index a branch needs, as a paste-ready
//! `firestore.indexes.json` entry (a composite, or a single-field override that keeps the
//! field's current indexes).

use super::{Conj, Planner};
use crate::encoding::key::Direction;
use crate::index::config::{FieldMode, QueryScope};
use crate::index::def::IndexDef;
use crate::path::FieldPath;
use crate::query::model::OrderBy;
use crate::query::validate::QueryError;

impl Planner<'_> {
    pub(super) fn missing_index(&self, conj: &Conj, suffix: &[OrderBy]) -> QueryError {
        let group = self.query.source.group();
        let mut fields: Vec<(FieldPath, FieldMode)> = Vec::new();
        for (f, _) in &conj.eqs {
            fields.push((f.clone(), FieldMode::Ascending));
        }
        for (f, _) in &conj.contains {
            fields.push((f.clone(), FieldMode::ArrayContains));
        }
        for o in suffix {
            fields.push((
                o.field.clone(),
                match o.dir {
                    Direction::Ascending => FieldMode::Ascending,
                    Direction::Descending => FieldMode::Descending,
                },
            ));
        }
        if !suffix.is_empty() && suffix.last().map(|o| o.dir) != Some(self.name_dir()) {
            fields.push((
                FieldPath::document_id(),
                match self.name_dir() {
                    Direction::Ascending => FieldMode::Ascending,
                    Direction::Descending => FieldMode::Descending,
                },
            ));
        }
        let def = IndexDef::new(group, self.scope, fields);
        let spec = def.to_spec();
        let message = if spec.fields.len() == 1 {
            let f = &spec.fields[0];
            // An override replaces the field's automatic indexes, so the entry lists the ones
            // the field has now as well: pasting it adds an index and removes none.
            let mut entries = Vec::new();
            for scope in [QueryScope::Collection, QueryScope::CollectionGroup] {
                let m = self.catalog.single_field_modes(group, &f.field_path, scope);
                for (on, mode) in [
                    (m.ascending, FieldMode::Ascending),
                    (m.descending, FieldMode::Descending),
                    (m.array_contains, FieldMode::ArrayContains),
                ] {
                    if on || (mode == f.mode && scope == self.scope) {
                        let (key, value) = match mode {
                            FieldMode::Ascending => ("order", "ASCENDING"),
                            FieldMode::Descending => ("order", "DESCENDING"),
                            FieldMode::ArrayContains => ("arrayConfig", "CONTAINS"),
                        };
                        entries.push(format!(
                            "{{ \"{key}\": \"{value}\", \"queryScope\": \"{}\" }}",
                            scope.as_str()
                        ));
                    }
                }
            }
            format!(
                "the query requires a single-field index that is not enabled: add this to \"fieldOverrides\" in firestore.indexes.json, in place of any entry for the same field:\n{{\n  \"collectionGroup\": {},\n  \"fieldPath\": {},\n  \"indexes\": [\n    {}\n  ]\n}}",
                json_string(group),
                json_string(&f.field_path.to_string()),
                entries.join(",\n    ")
            )
        } else {
            format!(
                "the query requires an index: add this to \"indexes\" in firestore.indexes.json:\n{}",
                spec.to_json_entry()
            )
        };
        QueryError::MissingIndex {
            message,
            index: spec,
        }
    }
}

/// `s` as a JSON string literal (field paths may hold quotes and backslashes).
fn json_string(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}
