//! Why a mutation was refused, with Firestore's error codes.

use crate::document::DocumentError;
use crate::error::ErrorCode;
use crate::path::DocumentName;

/// Why a mutation was refused. Messages name the document (and the field, where one is at
/// fault); [`MutationError::code`] gives the stable Firestore code for the JS boundary and the
/// wire protocol.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum MutationError {
    /// The document does not exist, but the precondition or an `update` requires it.
    #[error("document `{name}` not found")]
    NotFound { name: DocumentName },
    /// The document exists, but the precondition requires that it does not.
    #[error("document `{name}` already exists")]
    AlreadyExists { name: DocumentName },
    /// The stored `update_version` is not the one the precondition names (`actual` is `None`
    /// when the document does not exist).
    #[error("document `{name}` {}, but the write requires update version {expected}", describe(*.actual))]
    FailedPrecondition {
        name: DocumentName,
        expected: u64,
        actual: Option<u64>,
    },
    /// The mutation itself is malformed; the message names the document and the field.
    #[error("{0}")]
    InvalidArgument(String),
    /// The resulting document breaks a document limit (depth, nested arrays, field names).
    #[error("document `{name}` would be invalid after the write: {source}")]
    Document {
        name: DocumentName,
        #[source]
        source: DocumentError,
    },
}

fn describe(actual: Option<u64>) -> String {
    match actual {
        Some(v) => format!("has update version {v}"),
        None => "does not exist".to_owned(),
    }
}

impl MutationError {
    /// Firestore's error code, stable across releases: `not-found`, `already-exists`,
    /// `failed-precondition` or `invalid-argument`.
    pub fn code(&self) -> ErrorCode {
        match self {
            MutationError::NotFound { .. } => ErrorCode::NotFound,
            MutationError::AlreadyExists { .. } => ErrorCode::AlreadyExists,
            MutationError::FailedPrecondition { .. } => ErrorCode::FailedPrecondition,
            MutationError::InvalidArgument(_) | MutationError::Document { .. } => {
                ErrorCode::InvalidArgument
            }
        }
    }
}
