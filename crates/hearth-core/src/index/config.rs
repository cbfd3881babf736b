//! The `firestore.indexes.json` format: its types, a tolerant parser and a canonical printer.
//!
//! The file declares composite indexes (`indexes`) and per-field exemptions from automatic
//! single-field indexing (`fieldOverrides`):
//!
//! ```text
//! {
//!   "indexes": [
//!     { "collectionGroup": "instruments", "queryScope": "COLLECTION",
//!       "fields": [ { "fieldPath": "shard", "order": "DESCENDING" },
//!                   { "fieldPath": "tags", "arrayConfig": "CONTAINS" } ] }
//!   ],
//!   "fieldOverrides": [
//!     { "collectionGroup": "instruments", "fieldPath": "timestamp",
//!       "indexes": [ { "order": "ASCENDING", "queryScope": "COLLECTION" } ] }
//!   ]
//! }
//! ```
//!
//! Parsing accepts JSON5 (`//` and `/* */` comments, trailing commas) because these files are
//! edited by hand. Unknown top-level keys are ignored; inside entries only the keys Firestore
//! defines are accepted, so a misspelt `queryScope` is an error rather than a silent default.
//! `density`, `apiScope` and `ttl` are accepted and ignored: they do not change what Hearth
//! indexes. Printing produces strict, pretty JSON in the Firebase CLI's key order, and
//! `parse_index_file(&file.to_json()) == Ok(file)` for every file the parser accepts.
//!
//! Error messages locate the problem with 0-based JSON positions such as
//! `indexes[1].fields[0]` or `fieldOverrides[2].indexes[0]`.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::path::{CollectionPath, FieldPath, PathError};

/// Whether an index serves queries on one collection or on every collection with that id.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QueryScope {
    /// `"COLLECTION"`: queries on `.../instruments`, one parent at a time.
    #[default]
    Collection,
    /// `"COLLECTION_GROUP"`: `collectionGroup('instruments')` queries across all parents.
    CollectionGroup,
}

impl QueryScope {
    /// The spelling used in `firestore.indexes.json`.
    pub fn as_str(self) -> &'static str {
        match self {
            QueryScope::Collection => "COLLECTION",
            QueryScope::CollectionGroup => "COLLECTION_GROUP",
        }
    }
}

/// How one field is indexed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FieldMode {
    /// `"order": "ASCENDING"`.
    Ascending,
    /// `"order": "DESCENDING"`.
    Descending,
    /// `"arrayConfig": "CONTAINS"`: one entry per array element, for `array-contains(-any)`.
    ArrayContains,
}

/// One field of a composite index, in index order.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IndexFieldSpec {
    /// The indexed field (`__name__` only as the last field, to set the name's direction).
    pub field_path: FieldPath,
    /// Ascending, descending, or array-contains.
    pub mode: FieldMode,
}

/// A declared composite index. Invariant after parsing: at least 2 fields, no field path twice,
/// at most one `ArrayContains` field.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CompositeIndexSpec {
    /// The collection id (last path segment) the index applies to.
    pub collection_group: String,
    /// One collection at a time, or the whole collection group.
    pub query_scope: QueryScope,
    /// The fields in index order.
    pub fields: Vec<IndexFieldSpec>,
}

/// One single-field index kept for an overridden field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OverrideIndexSpec {
    /// Ascending, descending, or array-contains.
    pub mode: FieldMode,
    /// One collection at a time, or the whole collection group.
    pub query_scope: QueryScope,
}

/// Replaces the automatic single-field indexes of one field in one collection group with
/// exactly `indexes` (empty: the field is not indexed at all). Invariant after parsing: no
/// `(mode, query_scope)` pair twice, and no two overrides for the same group and field.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FieldOverrideSpec {
    /// The collection id the override applies to.
    pub collection_group: String,
    /// The field; an override on a map field applies to its subfields too.
    pub field_path: FieldPath,
    /// The single-field indexes the field keeps; empty exempts it from indexing.
    pub indexes: Vec<OverrideIndexSpec>,
}

/// The whole `firestore.indexes.json` file.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IndexFile {
    /// `"indexes"`: the composite indexes, in file order.
    pub indexes: Vec<CompositeIndexSpec>,
    /// `"fieldOverrides"`: changes to the automatic single-field indexes, in file order.
    pub field_overrides: Vec<FieldOverrideSpec>,
}

/// Why an index file was refused. `at` is a JSON position like `indexes[1].fields[0]`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IndexFileError {
    /// The text is not JSON5. `line` and `column` count from 1.
    #[error("syntax error at line {line}, column {column}: {message}")]
    Syntax {
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{at}: expected {expected}, found {found}")]
    WrongType {
        at: String,
        expected: &'static str,
        found: &'static str,
    },
    #[error("{at}: missing `{key}`")]
    MissingKey { at: String, key: &'static str },
    #[error("{at}: unknown key `{key}`")]
    UnknownKey { at: String, key: String },
    /// A string-valued key (`queryScope`, `order`, `arrayConfig`) has a value outside its set.
    #[error("{at}: unknown {key} `{value}`, expected {expected}")]
    UnknownValue {
        at: String,
        key: &'static str,
        value: String,
        expected: &'static str,
    },
    #[error("{at}: a field has both `order` and `arrayConfig`; give exactly one")]
    OrderAndArrayConfig { at: String },
    #[error("{at}: a field needs `order` or `arrayConfig`")]
    NoMode { at: String },
    #[error("{at}: {what} are not supported")]
    Unsupported { at: String, what: &'static str },
    #[error("{at}: invalid collection group: {source}")]
    BadCollectionGroup {
        at: String,
        #[source]
        source: PathError,
    },
    #[error("{at}: invalid field path: {source}")]
    BadFieldPath {
        at: String,
        #[source]
        source: PathError,
    },
    #[error("{at}: `fields` is empty; a composite index needs at least 2 fields")]
    EmptyFields { at: String },
    #[error(
        "{at}: a composite index needs at least 2 fields, this one has only `{field}`; \
         single-field indexes are automatic (use `fieldOverrides` to change them)"
    )]
    SingleField { at: String, field: String },
    #[error("{at}: field `{field}` appears twice in one composite index")]
    DuplicateField { at: String, field: String },
    #[error(
        "{at}: more than one array-contains field (`{first}` and `{second}`); \
         a composite index allows at most one"
    )]
    MultipleArrayContains {
        at: String,
        first: String,
        second: String,
    },
    #[error("{at}: the same index is listed twice in one field override")]
    DuplicateOverrideIndex { at: String },
    #[error(
        "{at}: a second override for field `{field}` in collection group `{collection_group}` \
         (the first is {first})"
    )]
    DuplicateOverride {
        at: String,
        collection_group: String,
        field: String,
        first: String,
    },
}

type Result<T> = std::result::Result<T, IndexFileError>;

/// Deepest nesting of arrays and objects the parser reads: serde_json's own bound for strict
/// JSON. A real file nests 5 levels; the JSON5 parser recurses once per level and has no
/// bound of its own, so a stored or received file nested a hundred thousand levels deep
/// would overflow the stack (an abort, not an error) without this check.
pub const MAX_NESTING: usize = 128;

/// Parses a `firestore.indexes.json` file, tolerating comments and trailing commas.
pub fn parse_index_file(text: &str) -> Result<IndexFile> {
    check_nesting(text)?;
    // Strict JSON (what the Firebase CLI writes, what an app's object stringifies to, what
    // the client stores) goes through serde_json; only the rest through the JSON5 parser,
    // which is several times slower (a page's first open paid milliseconds for it).
    let root: Value = match serde_json::from_str(text) {
        Ok(root) => root,
        Err(_) => json5::from_str(text).map_err(|e| syntax_error(&e, text))?,
    };
    let root = as_object(&root, "the file")?;
    let mut file = IndexFile::default();
    if let Some(list) = root.get("indexes") {
        for (i, entry) in as_array(list, "indexes")?.iter().enumerate() {
            file.indexes
                .push(parse_composite(entry, &format!("indexes[{i}]"))?);
        }
    }
    if let Some(list) = root.get("fieldOverrides") {
        for (i, entry) in as_array(list, "fieldOverrides")?.iter().enumerate() {
            let at = format!("fieldOverrides[{i}]");
            let spec = parse_override(entry, &at)?;
            let earlier = file.field_overrides.iter().position(|o| {
                o.collection_group == spec.collection_group && o.field_path == spec.field_path
            });
            if let Some(first) = earlier {
                return Err(IndexFileError::DuplicateOverride {
                    at,
                    collection_group: spec.collection_group,
                    field: spec.field_path.to_string(),
                    first: format!("fieldOverrides[{first}]"),
                });
            }
            file.field_overrides.push(spec);
        }
    }
    Ok(file)
}

/// Refuses text whose brackets nest deeper than [`MAX_NESTING`], reading JSON5's strings
/// and comments so that brackets inside them do not count. Text this check lets through may
/// still be malformed; the parser reports that.
fn check_nesting(text: &str) -> Result<()> {
    enum State {
        Code,
        Str { quote: char, escaped: bool },
        LineComment,
        BlockComment { star: bool },
    }
    let mut state = State::Code;
    let mut depth = 0usize;
    let (mut line, mut column) = (1, 0);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\n' {
            (line, column) = (line + 1, 0);
        } else {
            column += 1;
        }
        state = match state {
            State::Code => match c {
                '"' | '\'' => State::Str {
                    quote: c,
                    escaped: false,
                },
                '/' if chars.peek() == Some(&'/') => State::LineComment,
                '/' if chars.peek() == Some(&'*') => {
                    // The `*` opens the comment; it cannot also close it.
                    chars.next();
                    column += 1;
                    State::BlockComment { star: false }
                }
                '[' | '{' => {
                    depth += 1;
                    if depth > MAX_NESTING {
                        return Err(IndexFileError::Syntax {
                            line,
                            column,
                            message: format!("nested more than {MAX_NESTING} levels deep"),
                        });
                    }
                    State::Code
                }
                ']' | '}' => {
                    depth = depth.saturating_sub(1);
                    State::Code
                }
                _ => State::Code,
            },
            State::Str { quote, escaped } => match c {
                _ if escaped => State::Str {
                    quote,
                    escaped: false,
                },
                '\\' => State::Str {
                    quote,
                    escaped: true,
                },
                _ if c == quote => State::Code,
                _ => State::Str { quote, escaped },
            },
            State::LineComment if c == '\n' => State::Code,
            State::LineComment => State::LineComment,
            State::BlockComment { star: true } if c == '/' => State::Code,
            State::BlockComment { .. } => State::BlockComment { star: c == '*' },
        };
    }
    Ok(())
}

fn syntax_error(e: &json5::Error, text: &str) -> IndexFileError {
    // Errors at end of input carry no position; the end is where the problem is.
    let pos = e
        .position()
        .unwrap_or_else(|| json5::Position::from_offset(text.len(), text));
    let message = match e.code() {
        Some(code) => code.to_string(),
        None => e.to_string(),
    };
    IndexFileError::Syntax {
        line: pos.line + 1,
        column: pos.column + 1,
        message,
    }
}

fn parse_composite(entry: &Value, at: &str) -> Result<CompositeIndexSpec> {
    let obj = as_object(entry, at)?;
    check_keys(
        obj,
        at,
        &[
            "collectionGroup",
            "queryScope",
            "fields",
            "density",
            "apiScope",
        ],
    )?;
    let collection_group = parse_collection_group(obj, at)?;
    let query_scope = parse_query_scope(obj, at)?;
    let list = obj
        .get("fields")
        .ok_or_else(|| IndexFileError::MissingKey {
            at: at.to_owned(),
            key: "fields",
        })?;
    let list = as_array(list, &format!("{at}.fields"))?;
    let mut fields: Vec<IndexFieldSpec> = Vec::with_capacity(list.len());
    // Position in `fields` of the array-contains field, if one was seen.
    let mut array_field: Option<usize> = None;
    for (j, field) in list.iter().enumerate() {
        let field_at = format!("{at}.fields[{j}]");
        let fobj = as_object(field, &field_at)?;
        check_keys(fobj, &field_at, &["fieldPath", "order", "arrayConfig"])?;
        let field_path = parse_field_path(fobj, &field_at)?;
        let mode = parse_mode(fobj, &field_at)?;
        if fields.iter().any(|f| f.field_path == field_path) {
            return Err(IndexFileError::DuplicateField {
                at: field_at,
                field: field_path.to_string(),
            });
        }
        if mode == FieldMode::ArrayContains {
            if let Some(first) = array_field {
                return Err(IndexFileError::MultipleArrayContains {
                    at: at.to_owned(),
                    first: fields[first].field_path.to_string(),
                    second: field_path.to_string(),
                });
            }
            array_field = Some(fields.len());
        }
        fields.push(IndexFieldSpec { field_path, mode });
    }
    match fields.as_slice() {
        [] => Err(IndexFileError::EmptyFields { at: at.to_owned() }),
        [only] => Err(IndexFileError::SingleField {
            at: at.to_owned(),
            field: only.field_path.to_string(),
        }),
        _ => Ok(CompositeIndexSpec {
            collection_group,
            query_scope,
            fields,
        }),
    }
}

fn parse_override(entry: &Value, at: &str) -> Result<FieldOverrideSpec> {
    let obj = as_object(entry, at)?;
    check_keys(
        obj,
        at,
        &["collectionGroup", "fieldPath", "indexes", "ttl", "density"],
    )?;
    let collection_group = parse_collection_group(obj, at)?;
    let field_path = parse_field_path(obj, at)?;
    let list = obj
        .get("indexes")
        .ok_or_else(|| IndexFileError::MissingKey {
            at: at.to_owned(),
            key: "indexes",
        })?;
    let list = as_array(list, &format!("{at}.indexes"))?;
    let mut indexes: Vec<OverrideIndexSpec> = Vec::with_capacity(list.len());
    for (j, index) in list.iter().enumerate() {
        let index_at = format!("{at}.indexes[{j}]");
        let iobj = as_object(index, &index_at)?;
        check_keys(
            iobj,
            &index_at,
            &["order", "arrayConfig", "queryScope", "density"],
        )?;
        let spec = OverrideIndexSpec {
            mode: parse_mode(iobj, &index_at)?,
            query_scope: parse_query_scope(iobj, &index_at)?,
        };
        if indexes.contains(&spec) {
            return Err(IndexFileError::DuplicateOverrideIndex { at: index_at });
        }
        indexes.push(spec);
    }
    Ok(FieldOverrideSpec {
        collection_group,
        field_path,
        indexes,
    })
}

/// Refuses keys outside `known`; `vectorConfig` gets its own message since it is a real
/// Firestore feature that Hearth lacks, not a typo.
fn check_keys(obj: &Map<String, Value>, at: &str, known: &[&str]) -> Result<()> {
    for key in obj.keys() {
        if key == "vectorConfig" {
            return Err(IndexFileError::Unsupported {
                at: at.to_owned(),
                what: "vector indexes (`vectorConfig`)",
            });
        }
        if !known.contains(&key.as_str()) {
            return Err(IndexFileError::UnknownKey {
                at: at.to_owned(),
                key: key.clone(),
            });
        }
    }
    Ok(())
}

fn required_str<'a>(obj: &'a Map<String, Value>, at: &str, key: &'static str) -> Result<&'a str> {
    match obj.get(key) {
        None => Err(IndexFileError::MissingKey {
            at: at.to_owned(),
            key,
        }),
        Some(v) => as_str(v, &format!("{at}.{key}")),
    }
}

fn parse_collection_group(obj: &Map<String, Value>, at: &str) -> Result<String> {
    let group = required_str(obj, at, "collectionGroup")?;
    let bad = |source| IndexFileError::BadCollectionGroup {
        at: at.to_owned(),
        source,
    };
    // A collection group is one collection id, never a path.
    if group.contains('/') {
        return Err(bad(PathError::SlashInId {
            id: group.to_owned(),
        }));
    }
    CollectionPath::parse(group).map_err(bad)?;
    Ok(group.to_owned())
}

fn parse_field_path(obj: &Map<String, Value>, at: &str) -> Result<FieldPath> {
    let text = required_str(obj, at, "fieldPath")?;
    FieldPath::parse(text).map_err(|source| IndexFileError::BadFieldPath {
        at: at.to_owned(),
        source,
    })
}

fn parse_query_scope(obj: &Map<String, Value>, at: &str) -> Result<QueryScope> {
    let Some(value) = obj.get("queryScope") else {
        return Ok(QueryScope::Collection);
    };
    match as_str(value, &format!("{at}.queryScope"))? {
        "COLLECTION" => Ok(QueryScope::Collection),
        "COLLECTION_GROUP" => Ok(QueryScope::CollectionGroup),
        other => Err(IndexFileError::UnknownValue {
            at: at.to_owned(),
            key: "queryScope",
            value: other.to_owned(),
            expected: "`COLLECTION` or `COLLECTION_GROUP`",
        }),
    }
}

fn parse_mode(obj: &Map<String, Value>, at: &str) -> Result<FieldMode> {
    match (obj.get("order"), obj.get("arrayConfig")) {
        (Some(_), Some(_)) => Err(IndexFileError::OrderAndArrayConfig { at: at.to_owned() }),
        (None, None) => Err(IndexFileError::NoMode { at: at.to_owned() }),
        (Some(order), None) => match as_str(order, &format!("{at}.order"))? {
            "ASCENDING" => Ok(FieldMode::Ascending),
            "DESCENDING" => Ok(FieldMode::Descending),
            other => Err(IndexFileError::UnknownValue {
                at: at.to_owned(),
                key: "order",
                value: other.to_owned(),
                expected: "`ASCENDING` or `DESCENDING`",
            }),
        },
        (None, Some(config)) => match as_str(config, &format!("{at}.arrayConfig"))? {
            "CONTAINS" => Ok(FieldMode::ArrayContains),
            other => Err(IndexFileError::UnknownValue {
                at: at.to_owned(),
                key: "arrayConfig",
                value: other.to_owned(),
                expected: "`CONTAINS`",
            }),
        },
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn wrong_type(v: &Value, at: &str, expected: &'static str) -> IndexFileError {
    IndexFileError::WrongType {
        at: at.to_owned(),
        expected,
        found: type_name(v),
    }
}

fn as_object<'a>(v: &'a Value, at: &str) -> Result<&'a Map<String, Value>> {
    v.as_object().ok_or_else(|| wrong_type(v, at, "an object"))
}

fn as_array<'a>(v: &'a Value, at: &str) -> Result<&'a Vec<Value>> {
    v.as_array().ok_or_else(|| wrong_type(v, at, "an array"))
}

fn as_str<'a>(v: &'a Value, at: &str) -> Result<&'a str> {
    v.as_str().ok_or_else(|| wrong_type(v, at, "a string"))
}

// The printed shape. Struct field order is the key order, which follows the Firebase CLI's
// own output so that printed files diff cleanly against downloaded ones.

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireFile<'a> {
    indexes: Vec<WireIndex<'a>>,
    field_overrides: Vec<WireOverride<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireIndex<'a> {
    collection_group: &'a str,
    query_scope: &'static str,
    fields: Vec<WireField>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireField {
    field_path: String,
    #[serde(flatten)]
    mode: WireMode,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireOverride<'a> {
    collection_group: &'a str,
    field_path: String,
    indexes: Vec<WireOverrideIndex>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireOverrideIndex {
    #[serde(flatten)]
    mode: WireMode,
    query_scope: &'static str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireMode {
    #[serde(skip_serializing_if = "Option::is_none")]
    order: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    array_config: Option<&'static str>,
}

impl FieldMode {
    fn wire(self) -> WireMode {
        let (order, array_config) = match self {
            FieldMode::Ascending => (Some("ASCENDING"), None),
            FieldMode::Descending => (Some("DESCENDING"), None),
            FieldMode::ArrayContains => (None, Some("CONTAINS")),
        };
        WireMode {
            order,
            array_config,
        }
    }
}

impl CompositeIndexSpec {
    fn wire(&self) -> WireIndex<'_> {
        WireIndex {
            collection_group: &self.collection_group,
            query_scope: self.query_scope.as_str(),
            fields: self
                .fields
                .iter()
                .map(|f| WireField {
                    field_path: f.field_path.to_string(),
                    mode: f.mode.wire(),
                })
                .collect(),
        }
    }

    /// This index as one pretty-printed JSON object, ready to paste into `"indexes": [...]`.
    pub fn to_json_entry(&self) -> String {
        to_pretty(&self.wire())
    }
}

impl FieldOverrideSpec {
    fn wire(&self) -> WireOverride<'_> {
        WireOverride {
            collection_group: &self.collection_group,
            field_path: self.field_path.to_string(),
            indexes: self
                .indexes
                .iter()
                .map(|i| WireOverrideIndex {
                    mode: i.mode.wire(),
                    query_scope: i.query_scope.as_str(),
                })
                .collect(),
        }
    }
}

impl IndexFile {
    /// The whole file as strict, pretty JSON that [`parse_index_file`] reads back equal.
    pub fn to_json(&self) -> String {
        to_pretty(&WireFile {
            indexes: self.indexes.iter().map(CompositeIndexSpec::wire).collect(),
            field_overrides: self
                .field_overrides
                .iter()
                .map(FieldOverrideSpec::wire)
                .collect(),
        })
    }
}

fn to_pretty<T: Serialize>(value: &T) -> String {
    // Only strings and structs are serialised, so serde_json cannot fail here.
    serde_json::to_string_pretty(value).expect("index specs always serialise")
}
