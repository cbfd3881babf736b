//! Index definitions and the catalog that says which indexes exist for a collection group.
//!
//! Three kinds of index hold entries:
//! - automatic single-field indexes, per collection, on every field path of every document
//!   (nested map fields included) unless a `fieldOverrides` entry exempts it;
//! - composite indexes declared in `firestore.indexes.json`;
//! - one automatic `__name__` index per collection group, for collection-group queries that
//!   order only by name. Collection queries ordered by name read the documents table itself.
//!
//! An ordered index serves its own order and the exact reverse (a reverse scan), so an
//! automatic single-field field keeps one ordered index for both `ASCENDING` and
//! `DESCENDING`: half the entries Firestore writes, with the same queries served.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt::Write as _;

use sha2::{Digest, Sha256};

use super::config::{
    CompositeIndexSpec, FieldMode, FieldOverrideSpec, IndexFieldSpec, IndexFile, OverrideIndexSpec,
    QueryScope,
};
use crate::document::Document;
use crate::encoding::key::Direction;
use crate::path::FieldPath;
use crate::value::{Map, Value};

/// Length of an index id in key bytes.
pub const INDEX_ID_LEN: usize = 8;

/// Most ids [`id_of`] keeps per thread before it starts again.
const IDS_KEPT: usize = 4096;

thread_local! {
    /// Ids computed on this thread, by definition (with its id zeroed). Every document
    /// write makes the definitions of its fields again, and every query plan its
    /// candidates': the same few definitions, each id a SHA-256 of the definition's text.
    static IDS: RefCell<HashMap<IndexDef, [u8; INDEX_ID_LEN]>> = RefCell::new(HashMap::new());
}

/// The id of `def` (whose own id is still zero): the first bytes of the SHA-256 of its
/// canonical text, remembered per thread.
fn id_of(def: &IndexDef) -> [u8; INDEX_ID_LEN] {
    if let Some(id) = IDS.with(|ids| ids.borrow().get(def).copied()) {
        return id;
    }
    let digest = Sha256::digest(def.canonical().as_bytes());
    let mut id = [0; INDEX_ID_LEN];
    id.copy_from_slice(&digest[..INDEX_ID_LEN]);
    IDS.with(|ids| {
        let mut ids = ids.borrow_mut();
        if ids.len() >= IDS_KEPT {
            ids.clear();
        }
        ids.insert(def.clone(), id);
    });
    id
}

/// One index: which documents it covers and how its entries are ordered.
///
/// The fields are private and set only by [`IndexDef::new`]: `id` is a digest of the others,
/// so changing one afterwards would file entries under another index's id.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IndexDef {
    /// The collection id whose documents the index covers.
    collection_group: String,
    /// One collection's documents at a time (entries keyed by parent), or the whole group.
    scope: QueryScope,
    /// Indexed fields in key order. Never contains `__name__`: the name always follows.
    fields: Vec<(FieldPath, FieldMode)>,
    /// Direction of the trailing document name: an explicit trailing `__name__` field's,
    /// else the last ordered field's, else ascending.
    name_dir: Direction,
    /// First bytes of every entry key: a digest of the definition, so that both sides of
    /// the sync compute the same keys without sharing a registry.
    id: [u8; INDEX_ID_LEN],
}

pub fn mode_direction(mode: FieldMode) -> Option<Direction> {
    match mode {
        FieldMode::Ascending => Some(Direction::Ascending),
        FieldMode::Descending => Some(Direction::Descending),
        FieldMode::ArrayContains => None,
    }
}

impl IndexDef {
    pub fn new(
        collection_group: &str,
        scope: QueryScope,
        mut fields: Vec<(FieldPath, FieldMode)>,
    ) -> IndexDef {
        let mut name_dir = fields
            .iter()
            .rev()
            .find_map(|(_, m)| mode_direction(*m))
            .unwrap_or(Direction::Ascending);
        if let Some((f, m)) = fields.last() {
            if f.is_document_id() {
                name_dir = mode_direction(*m).unwrap_or(Direction::Ascending);
                fields.pop();
            }
        }
        let mut def = IndexDef {
            collection_group: collection_group.to_owned(),
            scope,
            fields,
            name_dir,
            id: [0; INDEX_ID_LEN],
        };
        def.id = id_of(&def);
        def
    }

    /// The collection id whose documents the index covers.
    pub fn collection_group(&self) -> &str {
        &self.collection_group
    }

    /// Whether entries are per collection (keyed by parent) or across the collection group.
    pub fn scope(&self) -> QueryScope {
        self.scope
    }

    /// The indexed fields in key order, without `__name__` (the name always follows them).
    pub fn fields(&self) -> &[(FieldPath, FieldMode)] {
        &self.fields
    }

    /// The direction of the document name that ends every entry.
    pub fn name_dir(&self) -> Direction {
        self.name_dir
    }

    /// The first bytes of every entry key: a digest of the definition.
    pub fn id(&self) -> &[u8; INDEX_ID_LEN] {
        &self.id
    }

    pub fn from_spec(spec: &CompositeIndexSpec) -> IndexDef {
        IndexDef::new(
            &spec.collection_group,
            spec.query_scope,
            spec.fields
                .iter()
                .map(|f| (f.field_path.clone(), f.mode))
                .collect(),
        )
    }

    /// The `firestore.indexes.json` entry that declares this index.
    pub fn to_spec(&self) -> CompositeIndexSpec {
        let mut fields: Vec<IndexFieldSpec> = self
            .fields
            .iter()
            .map(|(f, m)| IndexFieldSpec {
                field_path: f.clone(),
                mode: *m,
            })
            .collect();
        let last_dir = self
            .fields
            .iter()
            .rev()
            .find_map(|(_, m)| mode_direction(*m));
        if last_dir.unwrap_or(Direction::Ascending) != self.name_dir {
            fields.push(IndexFieldSpec {
                field_path: FieldPath::document_id(),
                mode: match self.name_dir {
                    Direction::Ascending => FieldMode::Ascending,
                    Direction::Descending => FieldMode::Descending,
                },
            });
        }
        CompositeIndexSpec {
            collection_group: self.collection_group.clone(),
            query_scope: self.scope,
            fields,
        }
    }

    /// A stable text form: `group|scope|field:mode,...|name-dir`, digested into the id.
    pub fn canonical(&self) -> String {
        let mut s = String::new();
        let _ = write!(s, "{}|{}|", self.collection_group, self.scope.as_str());
        for (i, (f, m)) in self.fields.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            let m = match m {
                FieldMode::Ascending => "asc",
                FieldMode::Descending => "desc",
                FieldMode::ArrayContains => "contains",
            };
            let _ = write!(s, "{f}:{m}");
        }
        let _ = write!(s, "|{:?}", self.name_dir);
        s
    }
}

/// Which single-field indexes are enabled for one field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SingleFieldModes {
    /// An ascending index is kept.
    pub ascending: bool,
    /// A descending index is kept (stored as the ascending one, which serves both).
    pub descending: bool,
    /// An array-contains index is kept.
    pub array_contains: bool,
}

impl SingleFieldModes {
    fn from_overrides(specs: &[OverrideIndexSpec], scope: QueryScope) -> SingleFieldModes {
        let mut m = SingleFieldModes::default();
        for s in specs.iter().filter(|s| s.query_scope == scope) {
            match s.mode {
                FieldMode::Ascending => m.ascending = true,
                FieldMode::Descending => m.descending = true,
                FieldMode::ArrayContains => m.array_contains = true,
            }
        }
        m
    }

    /// The automatic setting without any override.
    fn default_for(scope: QueryScope) -> SingleFieldModes {
        match scope {
            QueryScope::Collection => SingleFieldModes {
                ascending: true,
                descending: true,
                array_contains: true,
            },
            QueryScope::CollectionGroup => SingleFieldModes::default(),
        }
    }
}

/// All index definitions of one database.
#[derive(Clone, Debug, Default)]
pub struct IndexCatalog {
    /// The composite indexes, each once (private with `source`: both describe the same
    /// indexes, and `add_composite` changes them together).
    composites: Vec<IndexDef>,
    /// Overrides by collection group, then field path.
    overrides: HashMap<String, Vec<FieldOverrideSpec>>,
    /// The index file this catalog stands for, with any index added since.
    source: IndexFile,
}

impl IndexCatalog {
    /// Automatic indexes only.
    pub fn new() -> IndexCatalog {
        IndexCatalog::default()
    }

    pub fn from_file(file: &IndexFile) -> IndexCatalog {
        let mut composites: Vec<IndexDef> = file.indexes.iter().map(IndexDef::from_spec).collect();
        crate::sort::sort_by_key(&mut composites, IndexDef::canonical);
        composites.dedup();
        let mut overrides: HashMap<String, Vec<FieldOverrideSpec>> = HashMap::new();
        for o in &file.field_overrides {
            overrides
                .entry(o.collection_group.clone())
                .or_default()
                .push(o.clone());
        }
        IndexCatalog {
            composites,
            overrides,
            source: file.clone(),
        }
    }

    /// The definitions this catalog was built from.
    pub fn file(&self) -> &IndexFile {
        &self.source
    }

    /// Adds a composite index (the relay's `--auto-index`). Returns false if it existed.
    pub fn add_composite(&mut self, def: IndexDef) -> bool {
        if self.composites.contains(&def) {
            return false;
        }
        self.source.indexes.push(def.to_spec());
        self.composites.push(def);
        true
    }

    /// Adds the index a missing-index error names (the relay's `--auto-index`), in the form
    /// the index file gives it: a composite as a composite, a single-field index as an
    /// override of its field keeping every single-field index the field has now, plus this
    /// one. Returns false if it existed.
    pub fn add_missing(&mut self, spec: &CompositeIndexSpec) -> bool {
        let [only] = spec.fields.as_slice() else {
            return self.add_composite(IndexDef::from_spec(spec));
        };
        let (group, field) = (&spec.collection_group, &only.field_path);
        let mut indexes = Vec::new();
        for scope in [QueryScope::Collection, QueryScope::CollectionGroup] {
            let m = self.single_field_modes(group, field, scope);
            for (on, mode) in [
                (m.ascending, FieldMode::Ascending),
                (m.descending, FieldMode::Descending),
                (m.array_contains, FieldMode::ArrayContains),
            ] {
                if on {
                    indexes.push(OverrideIndexSpec {
                        mode,
                        query_scope: scope,
                    });
                }
            }
        }
        let wanted = OverrideIndexSpec {
            mode: only.mode,
            query_scope: spec.query_scope,
        };
        if indexes.contains(&wanted) {
            return false;
        }
        indexes.push(wanted);
        let o = FieldOverrideSpec {
            collection_group: group.clone(),
            field_path: field.clone(),
            indexes,
        };
        let same = |x: &FieldOverrideSpec| x.collection_group == *group && x.field_path == *field;
        self.source.field_overrides.retain(|x| !same(x));
        self.source.field_overrides.push(o.clone());
        let list = self.overrides.entry(group.clone()).or_default();
        list.retain(|x| !same(x));
        list.push(o);
        true
    }

    pub fn composites(&self) -> &[IndexDef] {
        &self.composites
    }

    /// The single-field settings of `field` in `group`: the most specific override whose
    /// path is the field or one of its parents (overrides on a map apply to its subfields).
    pub fn single_field_modes(
        &self,
        group: &str,
        field: &FieldPath,
        scope: QueryScope,
    ) -> SingleFieldModes {
        let best = self.overrides.get(group).and_then(|list| {
            list.iter()
                .filter(|o| field.starts_with(&o.field_path))
                .max_by_key(|o| o.field_path.segments().len())
        });
        match best {
            Some(o) => SingleFieldModes::from_overrides(&o.indexes, scope),
            None => SingleFieldModes::default_for(scope),
        }
    }

    /// The stored ordered single-field index of `field`, which serves both directions.
    pub fn ordered_single_field(
        &self,
        group: &str,
        field: &FieldPath,
        scope: QueryScope,
    ) -> Option<IndexDef> {
        let m = self.single_field_modes(group, field, scope);
        let mode = if m.ascending {
            FieldMode::Ascending
        } else if m.descending {
            FieldMode::Descending
        } else {
            return None;
        };
        Some(IndexDef::new(group, scope, vec![(field.clone(), mode)]))
    }

    /// The stored array-contains single-field index of `field`.
    pub fn contains_single_field(
        &self,
        group: &str,
        field: &FieldPath,
        scope: QueryScope,
    ) -> Option<IndexDef> {
        self.single_field_modes(group, field, scope)
            .array_contains
            .then(|| {
                IndexDef::new(
                    group,
                    scope,
                    vec![(field.clone(), FieldMode::ArrayContains)],
                )
            })
    }

    /// The automatic collection-group index of names.
    pub fn group_name_index(group: &str) -> IndexDef {
        IndexDef::new(group, QueryScope::CollectionGroup, Vec::new())
    }

    /// Every index that holds entries for `doc`.
    pub fn indexes_for(&self, doc: &Document) -> Vec<IndexDef> {
        let group = doc.name.collection_id();
        let mut out = vec![IndexCatalog::group_name_index(group)];
        let mut fields = Vec::new();
        collect_field_paths(&doc.fields, &mut Vec::new(), &mut fields);
        for (path, is_array) in fields {
            for scope in [QueryScope::Collection, QueryScope::CollectionGroup] {
                if let Some(def) = self.ordered_single_field(group, &path, scope) {
                    out.push(def);
                }
                if is_array {
                    if let Some(def) = self.contains_single_field(group, &path, scope) {
                        out.push(def);
                    }
                }
            }
        }
        out.extend(
            self.composites
                .iter()
                .filter(|d| d.collection_group == group)
                .cloned(),
        );
        out
    }
}

/// Every field path of a document (maps and their subfields), with whether it holds an array.
///
/// A name that no field path can spell (empty, or over the length limit) is in no index, nor
/// is anything below it: no query can name it, so an entry for it could never be read. Valid
/// documents have no such names (the document encoding refuses them both ways, so a stored
/// document that had one is a decode error, `data-loss`); this keeps index maintenance total
/// for any document in memory rather than trusting that.
fn collect_field_paths(map: &Map, prefix: &mut Vec<String>, out: &mut Vec<(FieldPath, bool)>) {
    for (k, v) in map {
        prefix.push(k.clone());
        if let Ok(path) = FieldPath::from_segments(prefix.clone()) {
            out.push((path, matches!(v, Value::Array(_))));
            if let Value::Map(m) = v {
                collect_field_paths(m, prefix, out);
            }
        }
        prefix.pop();
    }
}
