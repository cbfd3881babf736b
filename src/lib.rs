//! Hearth: a local-first document database. The platform-independent engine lives in
//! [`core`]; the WebAssembly client and the native relay are glue around it.

#[cfg(target_arch = "wasm32")]
pub mod client;
pub mod core;
#[cfg(feature = "relay")]
pub mod relay;

/// A fresh auto id from the operating system's (or the browser's) random source.
pub fn auto_id() -> String {
    let mut buf = [0u8; 64];
    let mut at = buf.len();
    core::autoid::auto_id_from(|| {
        if at == buf.len() {
            getrandom::fill(&mut buf).expect("the platform random source is available");
            at = 0;
        }
        at += 1;
        buf[at - 1]
    })
}

#[cfg(test)]
mod tidy {
    //! Keeps the architecture invariants honest by reading the source tree.

    use std::path::{Path, PathBuf};

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

    /// The core does no I/O and knows no platform: no wasm-bindgen, js-sys, web-sys, tokio,
    /// files, sockets, threads or clocks.
    #[test]
    fn core_has_no_io_or_platform_imports() {
        let forbidden = [
            "wasm_bindgen",
            "js_sys",
            "web_sys",
            "tokio::",
            "std::fs",
            "std::net",
            "std::thread",
            "SystemTime",
            "Instant::",
            "std::io::",
            "getrandom::",
            "redb::",
            "println!",
            "eprintln!",
        ];
        let mut files = Vec::new();
        rust_files(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("src/core"),
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

    /// Every source file says what it is for in its first line.
    #[test]
    fn every_file_starts_with_a_module_doc() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        for dir in ["src", "tests", "benches"] {
            if root.join(dir).exists() {
                rust_files(&root.join(dir), &mut files);
            }
        }
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            assert!(
                text.starts_with("//!"),
                "{} does not start with a `//!` line",
                f.display()
            );
        }
    }
}
