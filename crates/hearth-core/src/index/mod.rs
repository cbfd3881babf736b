//! Index definitions, the `firestore.indexes.json` format, and index entries.

pub mod config;
pub mod def;
pub mod keys;
