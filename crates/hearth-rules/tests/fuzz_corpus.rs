//! Replays the `rules` fuzzer's committed inputs on stable: every file of
//! `fuzz/corpus/rules/` and `fuzz/artifacts/rules/`, the shipped rules files of `rules/`, and
//! the generated seeds, through the function the libFuzzer target calls
//! (`hearth_rules::fuzzing::rules`). A failure names the input (`docs/fuzzing.md`); with
//! `TRACE=1` (and `--nocapture`) each input is named before it runs, to find one that aborts.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use hearth_rules::fuzzing;

#[test]
fn rules_corpus() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut inputs: Vec<(String, Vec<u8>)> = Vec::new();
    for dir in ["fuzz/corpus/rules", "fuzz/artifacts/rules", "rules"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("a readable directory entry").path();
            let mut bytes = std::fs::read(&path).expect("a readable input");
            if dir == "rules" {
                // A shipped file, read as a whole rules file (mode byte 1).
                bytes.insert(0, 1);
            }
            inputs.push((path.display().to_string(), bytes));
        }
    }
    for (i, bytes) in fuzzing::seeds().into_iter().enumerate() {
        inputs.push((format!("seed {i}"), bytes));
    }
    let failed: Vec<&str> = inputs
        .iter()
        .filter(|(n, bytes)| {
            if std::env::var("TRACE").is_ok() {
                eprintln!("{n}");
            }
            catch_unwind(AssertUnwindSafe(|| fuzzing::rules(bytes))).is_err()
        })
        .map(|(name, _)| name.as_str())
        .collect();
    assert!(failed.is_empty(), "inputs that fail: {failed:#?}");
    assert!(inputs.len() > 10);
}
