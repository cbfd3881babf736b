//! Index definitions that change under a running store: the backfill at start when the
//! index file changed, and `--auto-index`, which creates a missing composite index on
//! first use.
//!
//! Architecture invariant: a query is planned with an index only once every entry of it is
//! written: commits maintain a new index from before its backfill's first step (the steps
//! run on the committer thread between rounds, each deriving entries from the documents as
//! they are then), and the database's catalog takes the index after the last step. A build
//! is recorded in the store before its first entry, so a crash midway is rolled back at the
//! next start.

use tokio::sync::oneshot;

use crate::commit::Committer;
use crate::databases::Database;
use crate::metrics::Metrics;
use crate::state::Relay;
use crate::store::{Store, StoreError};
use hearth_core::index::def::{IndexCatalog, IndexDef};
use hearth_core::query::validate::QueryError;

/// Documents written per backfill transaction at start.
pub(crate) const BACKFILL_CHUNK: usize = 1000;

/// Documents written per step of a backfill while the relay serves: commits wait for at
/// most one step.
const BUILD_STEP: usize = 256;

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
    ///
    /// Creations on one database run one at a time, each from the catalog the previous one
    /// left. The backfill runs in steps on the committer thread, and commits (of every
    /// database, this one included) run between the steps, maintaining the new index
    /// already: a large backfill delays no one's writes for longer than one step.
    pub async fn auto_index(&self, db: &Database, err: &QueryError) -> bool {
        let QueryError::MissingIndex { index, .. } = err else {
            return false;
        };
        if !self.config().auto_index {
            return false;
        }
        let def = IndexDef::from_spec(index);
        let _building = db.index_build().await;
        let old = db.catalog().clone();
        let mut new = old.clone();
        if !new.add_composite(def) {
            // An earlier creation made it.
            return true;
        }
        tracing::warn!(
            database = %db.name(),
            "creating a missing index (--auto-index); add it to firestore.indexes.json:\n{}",
            index.to_json_entry()
        );
        match self.build_index(db.name(), &old, &new).await {
            Ok(()) => {
                db.set_catalog(new);
                true
            }
            Err(e) => {
                tracing::error!(database = %db.name(), error = %e, "index backfill failed");
                false
            }
        }
    }

    /// Builds the entries of `new`'s indexes that `old` lacks in database `name`, in steps
    /// between commit rounds; on failure, removes what it wrote.
    async fn build_index(
        &self,
        name: &str,
        old: &IndexCatalog,
        new: &IndexCatalog,
    ) -> Result<(), StoreError> {
        let db = name.to_owned();
        let target = new.clone();
        // From here on, commits maintain the new index, and a crash leaves a record that
        // the next start rolls back.
        self.on_committer(name, move |store, committer| {
            store.begin_build(&db, &target)?;
            committer.set_catalog(&db, target);
            Ok(())
        })
        .await?;
        let built = self.backfill_in_steps(name, old, new).await;
        let db = name.to_owned();
        let (old, new) = (old.clone(), new.clone());
        self.on_committer(name, move |store, committer| match built {
            Ok(()) => store.end_build(&db, &new),
            Err(e) => {
                committer.set_catalog(&db, old.clone());
                store.backfill(&db, &new, &old, BACKFILL_CHUNK, |_, _| {})?;
                store.end_build(&db, &old)?;
                Err(e)
            }
        })
        .await
    }

    /// The backfill from `old` to `new` of database `name`, one committer job per step.
    async fn backfill_in_steps(
        &self,
        name: &str,
        old: &IndexCatalog,
        new: &IndexCatalog,
    ) -> Result<(), StoreError> {
        let total = self
            .on_committer(name, {
                let db = name.to_owned();
                move |store, _| store.document_count(&db)
            })
            .await?;
        let mut from: Option<Vec<u8>> = None;
        let mut done = 0;
        loop {
            let (db, old, new) = (name.to_owned(), old.clone(), new.clone());
            let step = self
                .on_committer(name, move |store, _| {
                    store.backfill_chunk(&db, &old, &new, from.as_deref(), BUILD_STEP)
                })
                .await?;
            done += step.documents as u64;
            self.metrics().backfill(name, done, total.max(done));
            match step.next {
                Some(next) => from = Some(next),
                None => return Ok(()),
            }
        }
    }

    /// Runs `job` on the thread of database `db`'s committer between rounds, and its
    /// result.
    async fn on_committer<T: Send + 'static>(
        &self,
        db: &str,
        job: impl FnOnce(&Store, &Committer) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (tx, rx) = oneshot::channel();
        let committer = self.committer(db).clone();
        committer.clone().run_job(Box::new(move |store: &Store| {
            let _ = tx.send(job(store, &committer));
        }));
        rx.await
            .unwrap_or_else(|_| Err(StoreError::Redb("the committer stopped".into())))
    }
}
