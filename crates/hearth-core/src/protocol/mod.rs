//! Hearth's wire protocol, version 2: the messages a client and `hearth-relay` exchange over
//! one WebSocket, as plain data. The byte encoding is in [`codec`]; `docs/protocol.md` is the
//! normative description a third party implements from.
//!
//! The core only turns messages into bytes and back; sockets, timers and retries belong to
//! the glue on each side.

pub mod codec;
pub mod existence;

pub use crate::error::ErrorCode;

use crate::document::Document;
use crate::index::config::IndexFile;
use crate::mutation::Mutation;
use crate::path::DocumentName;
use crate::query::model::{Aggregation, Query};
use crate::value::Value;
use existence::NameFilter;

/// The protocol version this build speaks: 2 adds `Existence`, 3 `Bundle` (a relay sends
/// each to clients of that version or later only).
pub const PROTOCOL_VERSION: u32 = 3;

/// The oldest protocol version a relay of this build still serves.
pub const MIN_PROTOCOL_VERSION: u32 = 1;

/// Largest frame either side accepts, in bytes (a 1 MiB document plus headroom for a batch
/// of them is carried by several frames; one frame never needs more).
pub const MAX_FRAME_BYTES: usize = 16 << 20;

/// Client to relay.
#[derive(Clone, Debug, PartialEq)]
pub enum ClientMessage {
    /// First message on a connection.
    Hello {
        /// The version the client speaks; the relay refuses another with
        /// `failed-precondition`.
        protocol_version: u32,
        /// The database the connection works on (one per connection).
        database: String,
        /// Stable per client installation; with `batch_id` it makes write retries idempotent.
        client_id: String,
        /// A JWT, or empty when the relay runs without authentication.
        token: String,
    },
    /// Replaces the connection's auth token (refreshed before it expires).
    Auth {
        /// The new JWT.
        token: String,
    },
    /// Reads documents by name.
    Get {
        /// Chosen by the client; the answer carries it back.
        request_id: u64,
        /// The documents to read.
        names: Vec<DocumentName>,
    },
    /// Runs a query once.
    RunQuery {
        /// Chosen by the client; the answer carries it back.
        request_id: u64,
        /// The query, validated by the relay.
        query: Query,
    },
    /// Runs aggregations over a query.
    RunAggregation {
        /// Chosen by the client; the answer carries it back.
        request_id: u64,
        /// The documents aggregated (its limit and offset apply).
        query: Query,
        /// The aggregations, answered in this order.
        aggregations: Vec<Aggregation>,
    },
    /// Commits mutations atomically.
    Write {
        /// Chosen by the client; the answer carries it back.
        request_id: u64,
        /// Client-chosen id, unique per `client_id`: a batch re-sent after a lost ack is
        /// applied once and acknowledged with its original commit version.
        batch_id: u64,
        /// The writes, applied in order, all or none.
        mutations: Vec<Mutation>,
        /// A transaction's reads: each document's `update_version` as read (`None`: it was
        /// absent). The relay commits only if all are unchanged, else answers `Aborted`.
        reads: Vec<(DocumentName, Option<u64>)>,
    },
    /// Starts a real-time query. `resume_version`: the last snapshot version the client
    /// applied for this query, to receive only the changes since.
    Listen {
        /// Chosen by the client, unique among its live targets; changes carry it back.
        target_id: u32,
        /// The query listened to.
        query: Query,
        /// See above.
        resume_version: Option<u64>,
    },
    /// Stops a real-time query.
    Unlisten {
        /// The target to stop.
        target_id: u32,
    },
    /// Keeps the connection alive; answered by a `Heartbeat`.
    Ping {
        /// Echoed in the `Heartbeat` that answers it.
        nonce: u64,
    },
}

/// Relay to client.
#[derive(Clone, Debug, PartialEq)]
pub enum ServerMessage {
    /// Answer to `Hello`.
    Welcome {
        /// The version the relay speaks (the client's, or the connection would be refused).
        protocol_version: u32,
        /// The database's current commit version.
        version: u64,
        /// The database's index definitions, for the client's local engine.
        indexes: IndexFile,
        /// How often the relay sends heartbeats on an idle connection, in milliseconds.
        heartbeat_ms: u32,
    },
    /// Answer to `Get`: one entry per requested name, `None` when absent.
    GetResult {
        /// The `Get`'s request id.
        request_id: u64,
        /// The commit version the documents were read at.
        version: u64,
        /// Each requested name with its document, in request order.
        documents: Vec<(DocumentName, Option<Document>)>,
    },
    /// Answer to `RunQuery`.
    QueryResult {
        /// The `RunQuery`'s request id.
        request_id: u64,
        /// The commit version the query ran at.
        version: u64,
        /// The result, in query order.
        documents: Vec<Document>,
    },
    /// Answer to `RunAggregation`, values in request order.
    AggregationResult {
        /// The `RunAggregation`'s request id.
        request_id: u64,
        /// The commit version the aggregation ran at.
        version: u64,
        /// One value per requested aggregation.
        values: Vec<Value>,
    },
    /// Answer to `Write`: the batch committed at `version`.
    WriteResult {
        /// The `Write`'s request id.
        request_id: u64,
        /// The `Write`'s batch id.
        batch_id: u64,
        /// The commit version of the batch (the original one for a re-sent batch).
        version: u64,
    },
    /// Changes to one listened query. Not yet consistent: apply on `Snapshot`.
    TargetChange {
        /// The `Listen`'s target id.
        target_id: u32,
        /// `Reset`: forget the target's documents and take these as its whole result.
        kind: TargetChangeKind,
        /// Documents that entered, changed in, or left the result.
        changes: Vec<DocumentChange>,
    },
    /// After a resumed target's Delta (protocol 2): what its whole result is, so that the
    /// client can tell the documents it kept from before the resume that the result lacks,
    /// and whether it holds the whole result at all (see [`existence`]). Applies at the
    /// next `Snapshot`, with the target's changes.
    Existence {
        /// The `Listen`'s target id.
        target_id: u32,
        /// How many documents the result holds.
        count: u64,
        /// The names in the result.
        filter: NameFilter,
    },
    /// Every target of the connection is consistent at `version`: raise snapshots.
    Snapshot {
        /// The commit version every target's changes so far bring the client to.
        version: u64,
    },
    /// Liveness, and the database's version on an otherwise idle connection.
    Heartbeat {
        /// The database's current commit version.
        version: u64,
        /// The `Ping`'s nonce, or 0 for a heartbeat the relay sent unasked.
        nonce: u64,
    },
    /// A failure of one request (`request_id`), one target (`target_id`), or the connection
    /// (both zero; the relay closes the socket after it).
    Error {
        /// The failed request, or 0.
        request_id: u64,
        /// The failed target, or 0.
        target_id: u32,
        /// The stable code.
        code: ErrorCode,
        /// For people: what went wrong.
        message: String,
    },
}

/// How a `TargetChange` relates to what the client holds for the target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetChangeKind {
    /// Changes since the last snapshot (or since the resume version).
    Delta,
    /// The complete current result: replace the target's documents.
    Reset,
}

/// One document's change in a target.
///
/// A document that leaves a result says why, so that a client never has to guess (and
/// never shows a document that is gone, or drops one that merely moved out of a window):
/// `Remove` when the document itself did not change (another one pushed it out of a
/// `limit` or `offset` window), `Leave` with its new content when it changed and no longer
/// matches, `Delete` when it no longer exists.
#[derive(Clone, Debug, PartialEq)]
pub enum DocumentChange {
    /// The document is in the result with this content (added or modified).
    Upsert(Document),
    /// The document left the result without changing: the client's copy is still current.
    Remove(DocumentName),
    /// The document left the result because it changed: this is its new content, which
    /// does not match (or falls outside the window).
    Leave(Document),
    /// The document left the result because it does not exist at `version` (the commit
    /// that deleted it, or the version the relay read its absence at).
    Delete {
        /// The deleted document.
        name: DocumentName,
        /// A version at which it is absent.
        version: u64,
    },
}

impl DocumentChange {
    /// The name of the document changed.
    pub fn name(&self) -> &DocumentName {
        match self {
            DocumentChange::Upsert(d) | DocumentChange::Leave(d) => &d.name,
            DocumentChange::Remove(name) | DocumentChange::Delete { name, .. } => name,
        }
    }
}
