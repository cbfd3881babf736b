//! Hearth: a local-first document database. The platform-independent engine lives in
//! [`core`]; the WebAssembly client and the native relay are glue around it.

pub mod core;

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
