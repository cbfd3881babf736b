//! Tidy tests: the workspace's structural rules, checked by reading the source tree.
//!
//! Cargo holds the crate boundary (hearth-core's manifest names no runtime, so its code
//! cannot import one); these tests hold what a manifest cannot: the core's dependency
//! closure stays free of platform crates, the core's code stays free of the standard
//! library's I/O, every file says what it is for, and no file outgrows a reader.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Longest source file, tests included, in lines.
const MAX_LINES: usize = 800;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every Rust source of the workspace: the root package and every member crate.
fn workspace_sources() -> Vec<PathBuf> {
    let root = workspace_root();
    let mut files = Vec::new();
    for dir in ["src", "pkg-tests"] {
        rust_files(&root.join(dir), &mut files);
    }
    for member in std::fs::read_dir(root.join("crates")).unwrap() {
        let member = member.unwrap().path();
        for dir in ["src", "tests", "benches", "examples"] {
            if member.join(dir).exists() {
                rust_files(&member.join(dir), &mut files);
            }
        }
    }
    assert!(files.len() > 50, "the workspace's sources were found");
    files
}

/// The core does no I/O and knows no platform. Its manifest already keeps tokio,
/// wasm-bindgen and the rest out; what the standard library itself offers is checked here:
/// no files, sockets, threads, clocks or printing.
#[test]
fn core_has_no_io_or_platform_code() {
    let forbidden = [
        "std::fs",
        "std::net",
        "std::thread",
        "std::process",
        "std::env",
        "SystemTime",
        "Instant::",
        "std::io::",
        "println!",
        "eprintln!",
        "dbg!",
    ];
    let mut files = Vec::new();
    rust_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    assert!(files.len() > 10, "the core was found");
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for word in forbidden {
            assert!(
                !text.contains(word),
                "{} mentions `{word}`: the core must stay free of I/O and platform code",
                f.display()
            );
        }
    }
}

/// Reads Cargo.lock into package name → names of its dependencies.
fn lockfile_graph() -> BTreeMap<String, Vec<String>> {
    let text = std::fs::read_to_string(workspace_root().join("Cargo.lock")).unwrap();
    let mut graph: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut name = String::new();
    let mut in_deps = false;
    for line in text.lines() {
        let line = line.trim();
        if line == "[[package]]" {
            in_deps = false;
        } else if let Some(rest) = line.strip_prefix("name = ") {
            name = rest.trim_matches('"').to_owned();
            graph.entry(name.clone()).or_default();
        } else if line.starts_with("dependencies = [") {
            in_deps = !line.ends_with(']');
        } else if in_deps && line == "]" {
            in_deps = false;
        } else if in_deps {
            // `"name"` or `"name version"` or `"name version (source)"`.
            let dep = line.trim_matches(|c| c == '"' || c == ',');
            let dep = dep.split(' ').next().unwrap().to_owned();
            graph.get_mut(&name).unwrap().push(dep);
        }
    }
    graph
}

/// The core's normal dependencies ([`dependencies`] of its manifest) and everything they
/// pull in contain no runtime, browser binding, random source or socket crate, so the core
/// builds for any target and can never name one. Test-only dependencies (proptest,
/// criterion) are exempt: they never reach a build of the core. (`libc` may appear: sha2's
/// CPU-feature detection uses it on some targets only, and Cargo.lock does not say which.)
#[test]
fn core_dependency_closure_has_no_platform_crates() {
    let manifest =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    let section = manifest
        .split("\n[dependencies]\n")
        .nth(1)
        .expect("hearth-core's manifest has a [dependencies] table");
    let section = section.split("\n[").next().unwrap();
    let direct: Vec<String> = section
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.split(['.', ' ', '=']).next().unwrap().to_owned())
        .collect();
    assert!(
        direct.iter().any(|d| d == "serde"),
        "dependencies were read"
    );

    let graph = lockfile_graph();
    let mut seen = BTreeSet::new();
    let mut todo = direct;
    while let Some(name) = todo.pop() {
        if seen.insert(name.clone()) {
            todo.extend(graph.get(&name).cloned().unwrap_or_default());
        }
    }
    let forbidden = [
        "tokio",
        "mio",
        "socket2",
        "wasm-bindgen",
        "wasm-bindgen-futures",
        "js-sys",
        "web-sys",
        "getrandom",
        "redb",
        "tungstenite",
        "tokio-tungstenite",
        "hyper",
        "axum",
    ];
    for name in forbidden {
        assert!(
            !seen.contains(name),
            "hearth-core depends on `{name}` (closure: {seen:?})"
        );
    }
}

/// Every source file says what it is for in its first line.
#[test]
fn every_file_starts_with_a_module_doc() {
    for f in workspace_sources() {
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(
            text.starts_with("//!"),
            "{} does not start with a `//!` line",
            f.display()
        );
    }
}

/// No source file, tests included, is longer than a reader can hold: past it, split along
/// the seams.
#[test]
fn no_source_file_is_over_the_line_limit() {
    let mut long = Vec::new();
    for f in workspace_sources() {
        let lines = std::fs::read_to_string(&f).unwrap().lines().count();
        if lines > MAX_LINES {
            long.push(format!("{} ({lines} lines)", f.display()));
        }
    }
    assert!(
        long.is_empty(),
        "files over {MAX_LINES} lines: {}",
        long.join(", ")
    );
}

/// The fields of `pub struct`s in a source text that have no `///` doc comment, as
/// `Struct.field` (attributes between the comment and the field are allowed).
fn undocumented_fields(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut missing = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim_start();
        let Some(rest) = line.strip_prefix("pub struct ") else {
            i += 1;
            continue;
        };
        if !line.trim_end().ends_with('{') {
            i += 1;
            continue;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let mut depth = 1i32;
        i += 1;
        while i < lines.len() && depth > 0 {
            let field = lines[i].trim_start();
            if depth == 1 {
                let bare = field
                    .strip_prefix("pub(crate) ")
                    .or_else(|| field.strip_prefix("pub(super) "))
                    .or_else(|| field.strip_prefix("pub "))
                    .unwrap_or(field);
                let ident: String = bare
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                let is_field = !ident.is_empty()
                    && ident.starts_with(|c: char| c.is_lowercase() || c == '_')
                    && bare[ident.len()..].trim_start().starts_with(':')
                    && !bare[ident.len()..].trim_start().starts_with("::");
                if is_field {
                    let mut j = i - 1;
                    while lines[j].trim_start().starts_with("#[") {
                        j -= 1;
                    }
                    if !lines[j].trim_start().starts_with("///") {
                        missing.push(format!("{name}.{ident}"));
                    }
                }
            }
            depth += field.matches('{').count() as i32 - field.matches('}').count() as i32;
            i += 1;
        }
    }
    missing
}

/// Every field of the public structs of the core, the relay, the native client and the
/// WebAssembly client says why it exists (mini-redis documents every one).
#[test]
fn public_struct_fields_are_documented() {
    let root = workspace_root();
    let mut missing = Vec::new();
    let mut dirs: Vec<PathBuf> = ["hearth-core", "hearth-relay", "hearth-client"]
        .iter()
        .map(|krate| root.join("crates").join(krate).join("src"))
        .collect();
    dirs.push(root.join("src"));
    for dir in dirs {
        let mut files = Vec::new();
        rust_files(&dir, &mut files);
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            for field in undocumented_fields(&text) {
                missing.push(format!("{}: {field}", f.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "fields without a doc comment:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_field_doc_check_sees_fields() {
    let text = "pub struct A {\n    /// Why.\n    pub x: u32,\n    #[allow(dead_code)]\n    y: Vec<u8>,\n    z: std::collections::HashMap<u8, u8>,\n}\n";
    assert_eq!(undocumented_fields(text), ["A.y", "A.z"]);
}
