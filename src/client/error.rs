//! Errors at the JavaScript boundary: a real `Error` with a stable `code` property.

use wasm_bindgen::JsValue;

/// A client-side failure with one of the stable codes (`invalid-argument`, `unavailable`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientError {
    pub code: &'static str,
    pub message: String,
}

impl ClientError {
    pub fn new(code: &'static str, message: impl Into<String>) -> ClientError {
        ClientError {
            code,
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> ClientError {
        ClientError::new("invalid-argument", message)
    }

    /// The JS `Error` (name `HearthError`, with `code`).
    pub fn to_js(&self) -> JsValue {
        let e = js_sys::Error::new(&self.message);
        e.set_name("HearthError");
        let _ = js_sys::Reflect::set(&e, &"code".into(), &self.code.into());
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

/// The static code for a code's text (as passed between tabs): one of the protocol's codes,
/// which the client's own errors use too, or `unknown`.
pub fn code_of(text: &str) -> &'static str {
    hearth_core::protocol::ErrorCode::parse(text).map_or("unknown", |c| c.as_str())
}
