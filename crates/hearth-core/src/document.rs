//! Documents: a name, a map of fields and the versions at which it was created and last
//! updated, with the limits of DESIGN.md (size, depth, field names).

use std::borrow::Cow;
use std::sync::Arc;

use super::path::{DocumentName, FieldPath, MAX_FIELD_NAME_BYTES};
use super::value::{Map, Value};
use crate::encoding::document::DecodeError;
use crate::error::ErrorCode;

/// Largest encoded document, in bytes.
pub const MAX_DOCUMENT_BYTES: usize = 1 << 20;
/// Deepest nesting of maps and arrays inside a document.
pub const MAX_DEPTH: usize = 20;

/// A stored document.
#[derive(Clone, Debug, PartialEq)]
pub struct Document {
    /// The document's full path (`collection/id(/collection/id)*`), which also gives its
    /// collection and its key in the documents table.
    pub name: DocumentName,
    /// Shared: cloning a document (views, snapshots, fan-out) does not copy its fields.
    pub fields: Arc<Map>,
    /// Commit version that created the document (0 for documents not yet committed).
    pub create_version: u64,
    /// Commit version of the last change (0 for documents not yet committed).
    pub update_version: u64,
}

/// Why a document was refused. Each message names the limit.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum DocumentError {
    #[error(
        "document is {size} bytes encoded, over the limit of {MAX_DOCUMENT_BYTES} bytes (1 MiB)"
    )]
    TooLarge { size: usize },
    #[error(
        "field `{field}` nests maps and arrays {depth} levels deep, over the limit of {MAX_DEPTH}"
    )]
    TooDeep { field: String, depth: usize },
    #[error("a field name is empty (in `{parent}`)")]
    EmptyFieldName { parent: String },
    #[error("field name is {len} bytes, over the limit of {MAX_FIELD_NAME_BYTES} bytes")]
    FieldNameTooLong { len: usize },
    #[error("field name `{name}` is reserved: names of the form __.*__ are not allowed")]
    ReservedFieldName { name: String },
    #[error("field `{field}` holds an array directly inside an array, which is not allowed")]
    NestedArray { field: String },
    /// The stored bytes a write had to read (the document it replaces) do not decode: only
    /// corruption, or a writer other than this encoder, leaves such bytes.
    #[error("the stored document is corrupt: {source}")]
    Corrupt {
        /// Why the stored bytes do not decode (boxed: a [`DecodeError`] can itself carry a
        /// `DocumentError`).
        source: Box<DecodeError>,
    },
}

impl DocumentError {
    /// The stable code: `data-loss` for a corrupt stored document; `invalid-argument` for a
    /// document that breaks a limit, since the writer can fix it.
    pub fn code(&self) -> ErrorCode {
        match self {
            DocumentError::Corrupt { .. } => ErrorCode::DataLoss,
            _ => ErrorCode::InvalidArgument,
        }
    }
}

impl Document {
    pub fn new(name: DocumentName, fields: Map) -> Document {
        Document {
            name,
            fields: Arc::new(fields),
            create_version: 0,
            update_version: 0,
        }
    }

    /// The value at `path`; `__name__` gives the document's name as a reference.
    pub fn field(&self, path: &FieldPath) -> Option<Cow<'_, Value>> {
        if path.is_document_id() {
            return Some(Cow::Owned(Value::Reference(self.name.clone())));
        }
        get_path(&self.fields, path.segments()).map(Cow::Borrowed)
    }
}

/// The value at `segments` inside `map`, descending through nested maps.
pub fn get_path<'a>(map: &'a Map, segments: &[String]) -> Option<&'a Value> {
    let (first, rest) = segments.split_first()?;
    let v = map.get(first)?;
    if rest.is_empty() {
        Some(v)
    } else {
        get_path(v.as_map()?, rest)
    }
}

/// Checks field names, nesting depth and nested arrays. Size is checked where the document is
/// encoded (see `encoding::document`), since that is where the size is known.
pub fn validate_fields(fields: &Map) -> Result<(), DocumentError> {
    fn walk(
        v: &Value,
        field: &mut Vec<String>,
        depth: usize,
        in_array: bool,
    ) -> Result<(), DocumentError> {
        if depth > MAX_DEPTH {
            return Err(DocumentError::TooDeep {
                field: field.join("."),
                depth,
            });
        }
        match v {
            Value::Map(m) => walk_map(m, field, depth + 1),
            Value::Array(a) => {
                if in_array {
                    return Err(DocumentError::NestedArray {
                        field: field.join("."),
                    });
                }
                for x in a {
                    walk(x, field, depth + 1, true)?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
    fn walk_map(m: &Map, field: &mut Vec<String>, depth: usize) -> Result<(), DocumentError> {
        for (k, v) in m {
            if k.is_empty() {
                return Err(DocumentError::EmptyFieldName {
                    parent: field.join("."),
                });
            }
            if k.len() > MAX_FIELD_NAME_BYTES {
                return Err(DocumentError::FieldNameTooLong { len: k.len() });
            }
            if k.len() >= 4 && k.starts_with("__") && k.ends_with("__") {
                return Err(DocumentError::ReservedFieldName { name: k.clone() });
            }
            field.push(k.clone());
            walk(v, field, depth, false)?;
            field.pop();
        }
        Ok(())
    }
    walk_map(fields, &mut Vec::new(), 1)
}
