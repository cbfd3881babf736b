//! `ErrorCode`: the one set of stable error codes Hearth speaks end to end. Every error
//! type's `code()` returns one; the relay and the clients store it; the wire carries it as
//! a one-byte tag; JavaScript sees its text (`err.code === 'not-found'`).
//!
//! Codes never travel as text inside Hearth: text is for people and for the JS `code`
//! property, so nothing parses it back.

use std::fmt;

/// Stable error codes, the same as Firestore's (`docs/protocol.md` §7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// The request is malformed or names something invalid; retrying will not help.
    InvalidArgument,
    /// A document or database the request needs does not exist.
    NotFound,
    /// A create found the document already there.
    AlreadyExists,
    /// The caller may not do this.
    PermissionDenied,
    /// The caller's credentials are missing, invalid or expired.
    Unauthenticated,
    /// The system is not in the state the request needs (a missing index, a precondition).
    FailedPrecondition,
    /// A conflict, such as a transaction's read changing before its commit: retry.
    Aborted,
    /// A limit or quota was reached.
    ResourceExhausted,
    /// Transiently unavailable (a store or the connection): retry with backoff.
    Unavailable,
    /// Valid, but not supported by this implementation.
    Unimplemented,
    /// An invariant of Hearth itself broke.
    Internal,
    /// Stored data is unreadable or corrupt.
    DataLoss,
}

impl ErrorCode {
    /// Every code, in declaration order, which is also their wire order (the codec's tag is
    /// the position here, `docs/protocol.md` §7): append, never reorder.
    pub const ALL: [ErrorCode; 12] = [
        ErrorCode::InvalidArgument,
        ErrorCode::NotFound,
        ErrorCode::AlreadyExists,
        ErrorCode::PermissionDenied,
        ErrorCode::Unauthenticated,
        ErrorCode::FailedPrecondition,
        ErrorCode::Aborted,
        ErrorCode::ResourceExhausted,
        ErrorCode::Unavailable,
        ErrorCode::Unimplemented,
        ErrorCode::Internal,
        ErrorCode::DataLoss,
    ];

    /// The code's text, as JavaScript sees it in `err.code`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidArgument => "invalid-argument",
            ErrorCode::NotFound => "not-found",
            ErrorCode::AlreadyExists => "already-exists",
            ErrorCode::PermissionDenied => "permission-denied",
            ErrorCode::Unauthenticated => "unauthenticated",
            ErrorCode::FailedPrecondition => "failed-precondition",
            ErrorCode::Aborted => "aborted",
            ErrorCode::ResourceExhausted => "resource-exhausted",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Unimplemented => "unimplemented",
            ErrorCode::Internal => "internal",
            ErrorCode::DataLoss => "data-loss",
        }
    }

    /// The code's one-byte tag: its position in [`ErrorCode::ALL`].
    pub fn tag(self) -> u8 {
        // `ALL` lists the variants in declaration order, so the discriminant is the position.
        self as u8
    }

    /// The code with this tag, if any.
    pub fn from_tag(tag: u8) -> Option<ErrorCode> {
        ErrorCode::ALL.get(usize::from(tag)).copied()
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::ErrorCode;

    #[test]
    fn tags_are_positions_in_all() {
        for (i, code) in ErrorCode::ALL.into_iter().enumerate() {
            assert_eq!(usize::from(code.tag()), i);
            assert_eq!(ErrorCode::from_tag(code.tag()), Some(code));
        }
        assert_eq!(ErrorCode::from_tag(ErrorCode::ALL.len() as u8), None);
    }
}
