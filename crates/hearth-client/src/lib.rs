//! The native Rust client of protocol v1: one WebSocket to `hearth-relay`, any number of
//! requests in flight on it, real-time listeners that see consistent snapshots, and
//! optimistic transactions with retry. The integration tests and `hearth-bench` use it.
//!
//! ```text
//! Client ──encoded frame──► writer task ──► socket
//!   ▲ oneshot per request_id                  │
//!   └──────────────────────── reader task ◄───┘
//! Listener ◄── mpsc ──────────┘  TargetChange buffered per target, applied on Snapshot
//! ```
//!
//! The modules: `client` ([`Client`]: connect, requests), `connection` (the reader and
//! writer tasks and the state they share), `listener` ([`Listener`], [`ListenSnapshot`]),
//! `transaction` ([`Transaction`], [`Client::run_transaction`]) and `error`
//! ([`ClientError`]).
//!
//! Architecture invariant: a listener only ever sees a state at a `Snapshot` version: the
//! changes of a target are buffered until the relay says every target of the connection is
//! consistent, and only then applied to the listener's copy of the result.

mod client;
mod connection;
mod error;
mod listener;
mod transaction;

pub use client::Client;
pub use error::ClientError;
pub use listener::{ListenSnapshot, Listener};
pub use transaction::Transaction;

/// A fresh auto id (20 characters) from the operating system's random source.
pub fn auto_id() -> String {
    let mut buf = [0u8; 64];
    let mut at = buf.len();
    hearth_core::autoid::auto_id_from(|| {
        if at == buf.len() {
            getrandom::fill(&mut buf).expect("the operating system's random source is available");
            at = 0;
        }
        at += 1;
        buf[at - 1]
    })
}
