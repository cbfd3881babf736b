//! Writes the seed inputs of every target (`hearth_core::fuzzing::seeds`) into
//! `fuzz/corpus/<target>/`, each named by a hash of its bytes as libFuzzer names its own.
//! Run from `fuzz/`: `cargo +nightly run --example write_seeds`.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::Path;

fn main() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let mut written = 0;
    for (target, bytes) in hearth_core::fuzzing::seeds() {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir)?;
        let mut h = DefaultHasher::new();
        bytes.hash(&mut h);
        std::fs::write(dir.join(format!("seed-{:016x}", h.finish())), &bytes)?;
        written += 1;
    }
    println!("wrote {written} seeds under {}", root.display());
    Ok(())
}
