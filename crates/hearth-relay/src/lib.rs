//! `hearth-relay`: the authoritative server. It holds every database's documents and indexes
//! in the embedded [`store`] (in shards), commits write batches through the group-committing
//! [`commit`] threads (one per shard), and pushes real-time query deltas through the per-database [`fanout`]
//! to WebSocket connections ([`conn`]).
//!
//! ```text
//! socket ─► conn (decode, auth, dispatch) ─┬─ reads: store snapshot + core executor
//!                                          ├─ writes: commit queue ─► committer thread ─► redb
//!                                          └─ listens: fanout ◄── fan-out thread ◄───┘
//! frames ─► outbound (in place; backlog + flusher task when the socket is full) ─► socket
//! ```
//!
//! The rest of the crate: [`Config`] (`config`), the shared state [`Relay`] (`state`),
//! [`run`], the accept loop with its drain (`server`), the database policy (`databases`),
//! the fan-out thread (`fanout_thread`), index backfills and `--auto-index` (`indexes`),
//! write idempotency records (`idempotency`), changelog pruning (`retention`), the
//! supervision of the relay's threads (`supervise`), a shared store's outages ([`outage`]),
//! [`auth`], [`metrics`] and [`outbound`].

pub mod auth;
pub mod commit;
mod config;
pub mod conn;
mod databases;
pub mod fanout;
mod fanout_thread;
mod idempotency;
mod indexes;
pub mod metrics;
pub mod outage;
pub mod outbound;
mod retention;
pub mod rules;
mod server;
mod state;
pub mod store;
mod supervise;
mod tail;

pub use config::Config;
pub use databases::{Database, DatabaseError};
pub use server::run;
pub use state::{Relay, RelayError};

/// Which fan-out thread database `db` belongs to on this machine (tests pick databases
/// that share one).
#[doc(hidden)]
pub fn fanout_thread_of(db: &str) -> usize {
    fanout_thread::thread_of(db)
}
