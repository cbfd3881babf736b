//! The operations of the API over the engine this context runs (the origin's leader, or a
//! context without Web Locks): reads from the cache or the relay, aggregations, a
//! transaction's reads and commit. The leader serves its followers' requests with the same
//! functions (`origin::host`), so both answer alike.

use std::rc::Rc;

use hearth_core::document::Document;
use hearth_core::error::ErrorCode;
use hearth_core::mutation::Mutation;
use hearth_core::path::DocumentName;
use hearth_core::protocol::{ClientMessage, ServerMessage};
use hearth_core::query::model::{Aggregation, Query};
use hearth_core::value::Value;

use crate::client::engine::Engine;
use crate::client::error::ClientError;
use crate::client::sync::Sync;

/// The engine and, with a relay, its connection.
#[derive(Clone)]
pub(crate) struct Local {
    /// The local database: IndexedDB, the write queue, listeners.
    pub engine: Rc<Engine>,
    /// The relay connection; `None` for a local-only database.
    pub sync: Option<Rc<Sync>>,
}

/// A document as read.
pub(crate) struct DocRead {
    /// The document (`None`: it does not exist).
    pub doc: Option<Document>,
    /// Whether a pending write touches it.
    pub pending: bool,
    /// Whether it came from the cache.
    pub cache: bool,
}

/// A query's result as read.
pub(crate) struct QueryRead {
    /// The documents in query order, each with whether a pending write touches it.
    pub docs: Vec<(Document, bool)>,
    /// Whether they came from the cache.
    pub cache: bool,
}

fn unexpected(what: &str) -> ClientError {
    ClientError::new(ErrorCode::Internal, format!("unexpected reply to {what}"))
}

impl Local {
    /// Whether reads should go to the relay (connected and enabled).
    pub fn online(&self) -> bool {
        self.sync.as_ref().is_some_and(|s| s.is_open())
    }

    /// Where a read with `{ source }` goes: `Some(relay)` for the server, `None` for the
    /// cache. Without a source, the relay when connected, else the cache.
    fn read_source(&self, source: Option<&str>) -> Result<Option<Rc<Sync>>, ClientError> {
        let server = match source {
            Some("cache") => false,
            Some("server") => true,
            _ => self.online(),
        };
        if !server {
            return Ok(None);
        }
        self.sync.clone().map(Some).ok_or_else(|| {
            ClientError::new(
                ErrorCode::Unavailable,
                "this database has no relay: read with { source: 'cache' }",
            )
        })
    }

    /// The relay connection a transaction needs.
    fn relay(&self) -> Result<Rc<Sync>, ClientError> {
        self.sync.clone().ok_or_else(|| {
            ClientError::new(
                ErrorCode::FailedPrecondition,
                "transactions need a relay: open the database with { relay }",
            )
        })
    }

    /// Reads one document (after the writes up to ticket `upto` landed).
    pub async fn read_document(
        &self,
        name: &DocumentName,
        source: Option<&str>,
        upto: u64,
    ) -> Result<DocRead, ClientError> {
        let engine = &self.engine;
        engine.until_landed(upto).await;
        let Some(sync) = self.read_source(source)? else {
            // Whether a batch writes it is taken as of the call (the writes issued before
            // it have landed, none can be acknowledged yet): an acknowledgement arriving
            // while the cache is read does not make this read newer than its call, as
            // Firestore runs a client's operations in call order.
            let pending = engine.is_pending(name);
            let doc = engine.get_document(name).await?;
            return Ok(DocRead {
                doc,
                pending,
                cache: true,
            });
        };
        let ServerMessage::GetResult {
            documents, version, ..
        } = sync.request_get(vec![name.clone()]).await?
        else {
            return Err(unexpected("a read"));
        };
        engine
            .server_documents(documents.clone(), version, false)
            .await?;
        let doc = documents.into_iter().next().and_then(|(_, d)| d);
        if engine.is_pending(name) {
            // Show the local view (the server's copy with our pending writes).
            let local = engine.get_document(name).await?;
            return Ok(DocRead {
                doc: local,
                pending: true,
                cache: false,
            });
        }
        Ok(DocRead {
            doc,
            pending: false,
            cache: false,
        })
    }

    /// Runs a query once (after the writes up to ticket `upto` landed).
    pub async fn read_query(
        &self,
        q: &Query,
        source: Option<&str>,
        upto: u64,
    ) -> Result<QueryRead, ClientError> {
        let engine = &self.engine;
        engine.until_landed(upto).await;
        let q = hearth_core::query::validate::validate(q)?;
        let Some(sync) = self.read_source(source)? else {
            // Pending writes as of the call, as for a document's cache read.
            let pending = engine.pending_names();
            let docs = engine.query(&q).await?;
            let docs = docs
                .into_iter()
                .map(|d| {
                    let p = pending.contains(&d.name);
                    (d, p)
                })
                .collect();
            return Ok(QueryRead { docs, cache: true });
        };
        let reply = sync
            .request(|request_id| ClientMessage::RunQuery {
                request_id,
                query: q.clone(),
            })
            .await?;
        let ServerMessage::QueryResult {
            documents, version, ..
        } = reply
        else {
            return Err(unexpected("a query"));
        };
        if q.projection.is_none() {
            let docs: Vec<_> = documents
                .iter()
                .map(|d| (d.name.clone(), Some(d.clone())))
                .collect();
            engine.server_documents(docs, version, false).await?;
        }
        let docs = documents
            .into_iter()
            .map(|d| {
                let p = engine.is_pending(&d.name);
                (d, p)
            })
            .collect();
        Ok(QueryRead { docs, cache: false })
    }

    /// Runs aggregations: on the relay when connected, else over the cache.
    pub async fn aggregate(
        &self,
        q: &Query,
        aggs: Vec<Aggregation>,
        upto: u64,
    ) -> Result<Vec<Value>, ClientError> {
        self.engine.until_landed(upto).await;
        let sync = match &self.sync {
            Some(s) if s.is_open() => s.clone(),
            _ => return self.engine.aggregate(q, &aggs).await,
        };
        let reply = sync
            .request(|request_id| ClientMessage::RunAggregation {
                request_id,
                query: q.clone(),
                aggregations: aggs,
            })
            .await?;
        match reply {
            ServerMessage::AggregationResult { values, .. } => Ok(values),
            _ => Err(unexpected("an aggregation")),
        }
    }

    /// A transaction's read of one document, from the relay.
    pub async fn transaction_get(
        &self,
        name: &DocumentName,
    ) -> Result<Option<Document>, ClientError> {
        // A read made while the connection is still opening waits for it (offline, the
        // request fails with `unavailable`).
        let sync = self.relay()?;
        let ServerMessage::GetResult { documents, .. } =
            sync.request_get(vec![name.clone()]).await?
        else {
            return Err(unexpected("a read"));
        };
        Ok(documents.into_iter().next().and_then(|(_, d)| d))
    }

    /// Commits a transaction's writes with its reads to revalidate; `aborted` when a read
    /// changed.
    pub async fn transaction_commit(
        &self,
        batch_id: Option<u64>,
        writes: Vec<Mutation>,
        reads: Vec<(DocumentName, Option<u64>)>,
    ) -> Result<u64, ClientError> {
        let sync = self.relay()?;
        let touched: Vec<DocumentName> = writes.iter().map(|m| m.name.clone()).collect();
        // The relay takes a batch id it has seen from this client as a retry and answers
        // with the first commit's result: every attempt needs an id of its own, from the
        // sequence the write queue uses (unique across this client's contexts); a follower
        // gives its own, so that asking again after a leadership change is a retry.
        let batch_id = batch_id.unwrap_or_else(|| self.engine.next_batch_id());
        let version = sync.commit_transaction(batch_id, writes, reads).await?;
        // Bring the committed documents no listen will deliver into the local view now
        // (see `Sync::refresh`).
        sync.refresh(touched).await;
        Ok(version)
    }
}
