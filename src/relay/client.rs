//! The native Rust client of the relay protocol (to be written).
