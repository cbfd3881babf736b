//! The `firestore.indexes.json` format (to be written).
