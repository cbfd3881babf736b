//! Why a request, a listener or the whole connection failed: [`ClientError`].

use hearth_core::protocol::{ErrorCode, ServerMessage};

/// Why a request failed.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
pub enum ClientError {
    /// The relay refused the request (or the whole connection) with a typed error.
    #[error("{}: {message}", code.as_str())]
    Server {
        /// The relay's error code (`aborted`, `not-found`, ...): what the caller can act on.
        code: ErrorCode,
        /// The relay's explanation, for people.
        message: String,
    },
    /// The connection is closed (by `close`, or by the relay without an error).
    #[error("the connection is closed")]
    Closed,
    /// The relay sent something this client does not understand.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The socket failed.
    #[error("i/o error: {0}")]
    Io(String),
}

impl ClientError {
    /// The relay's error code, for `Server` errors.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Server { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// A `Server` error the client raises itself, as the relay would have.
    pub(crate) fn server(code: ErrorCode, message: impl Into<String>) -> ClientError {
        ClientError::Server {
            code,
            message: message.into(),
        }
    }
}

/// An answer that is not the one the request asked for.
pub(crate) fn unexpected(m: &ServerMessage) -> ClientError {
    ClientError::Protocol(format!("unexpected answer {m:?}"))
}

/// A socket or WebSocket failure.
pub(crate) fn io(e: impl std::fmt::Display) -> ClientError {
    ClientError::Io(e.to_string())
}
