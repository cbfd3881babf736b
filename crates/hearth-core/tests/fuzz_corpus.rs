//! Replays the fuzzers' committed inputs on stable: every file of `fuzz/corpus/<target>/`
//! and `fuzz/artifacts/<target>/` (fixed crashes, kept as regressions), and the generated
//! seeds, through the same functions the libFuzzer targets call
//! (`hearth_core::fuzzing`). A failure names the file; `docs/fuzzing.md` says how to
//! reproduce it under the fuzzer. Inputs under `fuzz/regressions/` are findings not yet
//! fixed, and are not replayed here.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use hearth_core::fuzzing;

/// The fuzz crate at the root of the repository.
fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// Runs `body` over every committed input of `target` and the generated seeds; fails
/// listing each input that panicked. Returns how many inputs ran.
fn replay(target: &str, body: fn(&[u8])) -> usize {
    let mut inputs: Vec<(String, Vec<u8>)> = Vec::new();
    for kind in ["corpus", "artifacts"] {
        let dir = fuzz_dir().join(kind).join(target);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("a readable directory entry").path();
            let bytes = std::fs::read(&path).expect("a readable corpus file");
            inputs.push((path.display().to_string(), bytes));
        }
    }
    for (i, (t, bytes)) in fuzzing::seeds().into_iter().enumerate() {
        if t == target {
            inputs.push((format!("seed {i}"), bytes));
        }
    }
    let failed: Vec<&str> = inputs
        .iter()
        .filter(|(_, bytes)| catch_unwind(AssertUnwindSafe(|| body(bytes))).is_err())
        .map(|(name, _)| name.as_str())
        .collect();
    assert!(failed.is_empty(), "{target}: inputs that fail: {failed:#?}");
    inputs.len()
}

#[test]
fn protocol_corpus() {
    assert!(replay("protocol", fuzzing::protocol) > 0);
}

#[test]
fn document_corpus() {
    assert!(replay("document", fuzzing::document) > 0);
}

#[test]
fn index_file_corpus() {
    assert!(replay("index_file", fuzzing::index_file) > 0);
}

#[test]
fn query_corpus() {
    assert!(replay("query", fuzzing::query) > 0);
}

/// Every target name a seed uses has a test above (a renamed target would otherwise leave
/// its corpus unreplayed).
#[test]
fn seeds_name_known_targets() {
    for (target, _) in fuzzing::seeds() {
        assert!(
            ["protocol", "document", "index_file", "query"].contains(&target),
            "unknown target {target}"
        );
    }
}
