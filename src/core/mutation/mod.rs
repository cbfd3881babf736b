//! Mutations (to be written).
