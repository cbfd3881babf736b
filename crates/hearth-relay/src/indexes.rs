//! Index definitions that change under a running store: the backfill at start when the
//! index file changed, and `--auto-index`, which creates a missing composite index on
//! first use.
//!
//! Architecture invariant: a query is planned with an index only once every entry of it is
//! written: the backfill runs on the committer thread between rounds (no commit interleaves
//! with it), and the database's catalog takes the index after it completes.

use tokio::sync::oneshot;

use crate::databases::Database;
use crate::metrics::Metrics;
use crate::state::Relay;
use crate::store::{Store, StoreError};
use hearth_core::index::def::{IndexCatalog, IndexDef};
use hearth_core::query::validate::QueryError;

/// Documents written per backfill transaction.
const BACKFILL_CHUNK: usize = 1000;

/// Brings database `name`'s index entries in line with `base` when the definitions it was
/// built with differ (the index file changed since), reporting progress in the metrics and
/// the log.
pub(crate) fn backfill_changed(
    store: &Store,
    metrics: &Metrics,
    name: &str,
    base: &IndexCatalog,
) -> Result<(), StoreError> {
    let stored = store.stored_indexes(name)?;
    let old = stored.as_ref().map(IndexCatalog::from_file);
    if stored.as_ref() != Some(base.file()) {
        let old = old.unwrap_or_default();
        tracing::info!(database = %name, "index definitions changed: backfilling");
        store.backfill(name, &old, base, BACKFILL_CHUNK, |done, total| {
            metrics.backfill(name, done, total);
            tracing::info!(database = %name, done, total, "backfill progress");
        })?;
    }
    Ok(())
}

impl Relay {
    /// With `--auto-index`, creates the index a `MissingIndex` error names (backfilled from
    /// the collection group's documents) and returns true; the caller retries the query.
    pub async fn auto_index(&self, db: &Database, err: &QueryError) -> bool {
        let QueryError::MissingIndex { index, .. } = err else {
            return false;
        };
        if !self.config().auto_index {
            return false;
        }
        let def = IndexDef::from_spec(index);
        let old = db.catalog().clone();
        let mut new = old.clone();
        if !new.add_composite(def) {
            // Another request created it meanwhile.
            return true;
        }
        tracing::warn!(
            database = %db.name(),
            "creating a missing index (--auto-index); add it to firestore.indexes.json:\n{}",
            index.to_json_entry()
        );
        // The backfill runs on the committer thread between rounds, so no commit interleaves
        // with it; queries see the index only once its entries are complete.
        let (tx, rx) = oneshot::channel();
        let name = db.name().to_owned();
        let metrics = self.metrics().clone();
        let committer = self.committer().clone();
        let job_new = new.clone();
        self.committer().run_job(Box::new(move |store: &Store| {
            let res = store.backfill(&name, &old, &job_new, BACKFILL_CHUNK, |done, total| {
                metrics.backfill(&name, done, total);
            });
            if res.is_ok() {
                committer.set_catalog(&name, job_new);
            }
            let _ = tx.send(res);
        }));
        match rx.await {
            Ok(Ok(())) => {
                db.extend_catalog(new);
                true
            }
            Ok(Err(e)) => {
                tracing::error!(database = %db.name(), error = %e, "index backfill failed");
                false
            }
            Err(_) => false,
        }
    }
}
