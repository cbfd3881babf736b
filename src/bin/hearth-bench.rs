//! hearth-bench (to be written).
fn main() {}
