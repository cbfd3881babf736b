//! Byte encodings: the compact document encoding and the order-preserving key encoding.

pub mod document;
pub mod key;
