//! Errors at the JavaScript boundary: a real `Error` with a stable `code` property.

use hearth_core::error::ErrorCode;
use wasm_bindgen::JsValue;

/// A client-side failure with one of the stable codes (`invalid-argument`, `unavailable`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientError {
    /// Which of the stable codes; JavaScript sees its text as `err.code`.
    code: ErrorCode,
    /// What went wrong, for people: names the document, limit or rule.
    pub message: String,
}

impl ClientError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ClientError {
        ClientError {
            code,
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> ClientError {
        ClientError::new(ErrorCode::InvalidArgument, message)
    }

    /// The stable code.
    pub fn code(&self) -> ErrorCode {
        self.code
    }

    /// The JS `Error` (name `HearthError`, with `code`).
    pub fn to_js(&self) -> JsValue {
        let e = js_sys::Error::new(&self.message);
        e.set_name("HearthError");
        let _ = js_sys::Reflect::set(&e, &"code".into(), &self.code.as_str().into());
        e.into()
    }
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl From<ClientError> for JsValue {
    fn from(e: ClientError) -> JsValue {
        e.to_js()
    }
}

impl From<hearth_core::query::validate::QueryError> for ClientError {
    fn from(e: hearth_core::query::validate::QueryError) -> ClientError {
        ClientError::new(e.code(), e.to_string())
    }
}

impl From<hearth_core::mutation::MutationError> for ClientError {
    fn from(e: hearth_core::mutation::MutationError) -> ClientError {
        ClientError::new(e.code(), e.to_string())
    }
}

impl From<hearth_core::path::PathError> for ClientError {
    fn from(e: hearth_core::path::PathError) -> ClientError {
        ClientError::invalid(e.to_string())
    }
}
