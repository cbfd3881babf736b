//! Byte encodings: the compact document encoding and the order-preserving key encoding, and
//! the varints the document encoding shares with the wire protocol.

pub mod document;
pub mod key;
pub(crate) mod varint;
