//! Seed 000's index files (tests/fixtures/indexes/) as catalogs, for the plan snapshots and
//! the seed's own queries.

use hearth_core::index::config::{parse_index_file, IndexFile};
use hearth_core::index::def::IndexCatalog;
use hearth_core::path::FieldPath;

pub(crate) fn fixture(name: &str) -> IndexFile {
    let text = std::fs::read_to_string(format!(
        "{}/tests/fixtures/indexes/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("fixture exists");
    parse_index_file(&text).expect("fixture parses")
}

/// Seed 000 before sharding: its composites and the `timestamp` exemption.
pub(crate) fn unsharded_catalog() -> IndexCatalog {
    let mut file = fixture("delete_timestamp_indexes.json");
    file.field_overrides = fixture("disable_timestamp_field.json").field_overrides;
    IndexCatalog::from_file(&file)
}

/// Seed 000 sharded: the shard composites, `timestamp` and `shard` exempted.
pub(crate) fn sharded_catalog() -> IndexCatalog {
    let mut file = fixture("sharded_timestamps.json");
    let mut overrides = fixture("disable_timestamp_field.json").field_overrides;
    let mut shard = overrides[0].clone();
    shard.field_path = FieldPath::parse("shard").expect("valid");
    overrides.push(shard);
    file.field_overrides = overrides;
    IndexCatalog::from_file(&file)
}
