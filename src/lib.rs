//! Hearth's WebAssembly client and npm package: the JavaScript API over the engine in
//! `hearth-core`, with documents and indexes in IndexedDB and sync to `hearth-relay`. The
//! whole client is WebAssembly-only; on other targets this crate holds only [`auto_id`].

#[cfg(target_arch = "wasm32")]
pub mod client;

/// A fresh auto id from the browser's (or the operating system's) random source.
pub fn auto_id() -> String {
    let mut buf = [0u8; 64];
    let mut at = buf.len();
    hearth_core::autoid::auto_id_from(|| {
        if at == buf.len() {
            getrandom::fill(&mut buf).expect("the platform random source is available");
            at = 0;
        }
        at += 1;
        buf[at - 1]
    })
}
