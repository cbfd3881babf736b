//! Optimistic transactions: a [`Transaction`] records the version of every document it
//! reads and buffers its writes; the commit sends both, and the relay applies the writes
//! only if every read is unchanged. [`Client::run_transaction`] retries an aborted attempt
//! after a randomized exponential backoff.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::client::{clock_micros, Client};
use crate::error::ClientError;
use hearth_core::document::Document;
use hearth_core::mutation::{Mutation, SetMerge};
use hearth_core::path::{DocumentName, FieldPath};
use hearth_core::protocol::ErrorCode;
use hearth_core::value::{Map, Value};

/// First and largest pause between transaction attempts.
const BACKOFF_BASE: Duration = Duration::from_millis(5);
const BACKOFF_MAX: Duration = Duration::from_millis(500);

impl Client {
    /// Runs `f` in an optimistic transaction: its reads are recorded and revalidated when
    /// its buffered writes commit. On `aborted` (a read changed, or `f` itself returned
    /// it), `f` runs again with a fresh [`Transaction`] after a randomized exponential
    /// backoff, at most `max_attempts` times in all. Any other error ends the transaction
    /// with that error.
    ///
    /// `f` gets the transaction handle by value (it is a cheap clone of shared state), so
    /// the future it returns can own it and be `Send`:
    /// `client.run_transaction(5, |tx| async move { let d = tx.get(&n).await?; tx.set(n, f); Ok(()) })`.
    pub async fn run_transaction<T, F, Fut>(
        &self,
        max_attempts: u32,
        mut f: F,
    ) -> Result<T, ClientError>
    where
        F: FnMut(Transaction) -> Fut,
        Fut: std::future::Future<Output = Result<T, ClientError>>,
    {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let tx = Transaction {
                client: self.clone(),
                state: Arc::new(Mutex::new(TxState::default())),
            };
            let result = match f(tx.clone()).await {
                Ok(v) => tx.commit().await.map(|_| v),
                Err(e) => Err(e),
            };
            match result {
                Err(e) if e.code() == Some(ErrorCode::Aborted) && attempt < max_attempts => {
                    tokio::time::sleep(backoff(attempt)).await;
                }
                other => return other,
            }
        }
    }
}

/// The pause before attempt `attempt + 1`: exponential, capped, with jitter.
fn backoff(attempt: u32) -> Duration {
    let exp = BACKOFF_BASE.saturating_mul(1 << attempt.min(16));
    let cap = exp.min(BACKOFF_MAX);
    let mut r = [0u8; 8];
    let jitter = match getrandom::fill(&mut r) {
        Ok(()) => u64::from_le_bytes(r),
        Err(_) => clock_micros(),
    };
    // Uniform in [cap/2, cap): spreads colliding transactions apart.
    let half = cap.as_micros() as u64 / 2;
    Duration::from_micros(half + jitter % half.max(1))
}

/// One attempt's reads and writes.
#[derive(Default)]
struct TxState {
    /// Each document read and its `update_version` as read (`None`: absent), revalidated
    /// by the relay at commit.
    reads: Vec<(DocumentName, Option<u64>)>,
    /// The buffered writes, committed together.
    mutations: Vec<Mutation>,
    /// Set once the attempt committed (or failed to): later writes would be lost.
    done: bool,
}

/// One attempt of a transaction: the reads it made and the writes it buffers. Clones share
/// the attempt.
#[derive(Clone)]
pub struct Transaction {
    /// The connection the reads and the commit go through.
    client: Client,
    /// The attempt's reads and writes, shared by the clones.
    state: Arc<Mutex<TxState>>,
}

impl Transaction {
    fn lock(&self) -> std::sync::MutexGuard<'_, TxState> {
        self.state.lock().expect("transaction lock")
    }

    /// Reads a document and records the version read. Reads come before writes, as in
    /// Firestore; reading a document again that changed in between aborts the attempt.
    pub async fn get(&self, name: &DocumentName) -> Result<Option<Document>, ClientError> {
        if !self.lock().mutations.is_empty() {
            return Err(ClientError::server(
                ErrorCode::InvalidArgument,
                "a transaction must do all its reads before its writes",
            ));
        }
        let doc = self.client.get_one(name).await?;
        let version = doc.as_ref().map(|d| d.update_version);
        let mut st = self.lock();
        match st.reads.iter().find(|(n, _)| n == name) {
            Some((_, seen)) if *seen != version => {
                return Err(ClientError::server(
                    ErrorCode::Aborted,
                    format!("`{name}` changed between two reads of the transaction"),
                ))
            }
            Some(_) => {}
            None => st.reads.push((name.clone(), version)),
        }
        Ok(doc)
    }

    /// Buffers a `set` (overwrite).
    pub fn set(&self, name: DocumentName, fields: Map) {
        self.mutate(Mutation::set(name, fields));
    }

    /// Buffers a `set` with a merge mode.
    pub fn set_merge(&self, name: DocumentName, fields: Map, merge: SetMerge) {
        self.mutate(Mutation::set_merge(name, fields, merge));
    }

    /// Buffers an `update` of field paths (`None` deletes the field).
    pub fn update(&self, name: DocumentName, fields: Vec<(FieldPath, Option<Value>)>) {
        self.mutate(Mutation::update(name, fields));
    }

    /// Buffers a `delete`.
    pub fn delete(&self, name: DocumentName) {
        self.mutate(Mutation::delete(name));
    }

    /// Buffers any mutation (with transforms or preconditions).
    pub fn mutate(&self, m: Mutation) {
        let mut st = self.lock();
        assert!(!st.done, "a write to a transaction after it committed");
        st.mutations.push(m);
    }

    async fn commit(&self) -> Result<u64, ClientError> {
        let (mutations, reads) = {
            let mut st = self.lock();
            st.done = true;
            (
                std::mem::take(&mut st.mutations),
                std::mem::take(&mut st.reads),
            )
        };
        let batch = self.client.next_batch_id();
        self.client.write_with_id(batch, mutations, reads).await
    }
}
