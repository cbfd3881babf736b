//! Index definitions that change under a running store: the index file applied at start
//! when it differs from the stored definitions, and `--auto-index`, which creates a
//! missing composite index on first use.
//!
//! Architecture invariant: a query is planned with an index only once every entry of it is
//! written, and never once its entries start going. A change of a database's definitions
//! runs under the store's build lock (one at a time, whichever relay runs it) through the
//! steps of `crate::store::Catalogs`: commits on every relay maintain a new index from
//! before the first entry is written, plans take it only after the last, and a crash
//! midway is finished by the next holder of the lock.

use tokio::sync::oneshot;

use crate::commit::Committer;
use crate::databases::Database;
use crate::metrics::Metrics;
use crate::state::Relay;
use crate::store::{Pass, Store, StoreError};
use hearth_core::index::def::IndexCatalog;
use hearth_core::query::validate::QueryError;

/// Documents written per transaction of a change applied at start.
pub(crate) const BACKFILL_CHUNK: usize = 1000;

/// Documents written per step of a build while the relay serves: commits wait for at
/// most one step.
const BUILD_STEP: usize = 256;

/// Brings database `name`'s index definitions in line with `base` (the index file), under
/// its build lock: first finishing a change another relay (or a crash) left midway, then
/// building and dropping what differs, reporting progress in the metrics and the log.
/// Relays started with the same file find it applied by the first and wait for it.
pub(crate) fn apply_index_file(
    store: &Store,
    metrics: &Metrics,
    name: &str,
    base: &IndexCatalog,
) -> Result<(), StoreError> {
    let _lock = store.lock_builds(name)?;
    store.recover_indexes(name, BACKFILL_CHUNK)?;
    if store.catalogs(name)?.indexes.file() != base.file() {
        tracing::info!(database = %name, "index definitions changed: building");
        store.change_indexes(name, base, BACKFILL_CHUNK, |done, total| {
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
    /// Creations on one database run one at a time (the database's lock here, the store's
    /// build lock across relays), each from the definitions stored when it starts. The
    /// passes run in steps on the committer thread, and commits (of every database, this
    /// one included) run between the steps, maintaining the new index already: a large
    /// backfill delays no one's writes for longer than one step.
    pub async fn auto_index(&self, db: &Database, err: &QueryError) -> bool {
        let QueryError::MissingIndex { index, .. } = err else {
            return false;
        };
        if !self.config().auto_index {
            return false;
        }
        let _building = db.index_build().await;
        let (store, name) = (self.store().clone(), db.name().to_owned());
        let locked = tokio::task::spawn_blocking(move || {
            let lock = store.lock_builds(&name)?;
            Ok::<_, StoreError>((lock, store.catalogs(&name)?))
        })
        .await;
        let (_lock, stored) = match locked {
            Ok(Ok(l)) => l,
            Ok(Err(e)) => {
                tracing::error!(database = %db.name(), error = %e, "taking the index build lock failed");
                return false;
            }
            Err(_) => return false,
        };
        let mut new = stored.indexes.clone();
        if !new.add_missing(index) && stored.building.is_none() && stored.dropping.is_none() {
            // An earlier creation (here or on another relay) made it.
            return true;
        }
        tracing::warn!(
            database = %db.name(),
            "creating a missing index (--auto-index); add it to firestore.indexes.json:\n{}",
            index.to_json_entry()
        );
        match self.build_index(db.name(), new).await {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(database = %db.name(), error = %e, "index backfill failed");
                let name = db.name().to_owned();
                let undone = self
                    .on_committer(db.name(), move |store, _| {
                        store.recover_indexes(&name, BACKFILL_CHUNK)
                    })
                    .await;
                if let Err(e) = undone {
                    tracing::error!(database = %db.name(), error = %e, "undoing an index build failed; the next one finishes it");
                }
                false
            }
        }
    }

    /// Makes `new` database `name`'s index definitions (its build lock held): finishes a
    /// change left midway, then builds and drops in steps between commit rounds.
    async fn build_index(&self, name: &str, new: IndexCatalog) -> Result<(), StoreError> {
        let (db, target) = (name.to_owned(), new.clone());
        let old = self
            .on_committer(name, move |store, _| {
                store.recover_indexes(&db, BACKFILL_CHUNK)?;
                let old = store.catalogs(&db)?.indexes;
                if old.file() != target.file() {
                    store.begin_build(&db, &target)?;
                }
                Ok(old)
            })
            .await?;
        if old.file() == new.file() {
            return Ok(());
        }
        self.pass_in_steps(name, &old, &new, Pass::Add).await?;
        let (db, built) = (name.to_owned(), new.clone());
        self.on_committer(name, move |store, _| store.finish_build(&db, &built))
            .await?;
        self.pass_in_steps(name, &old, &new, Pass::Drop).await?;
        let db = name.to_owned();
        self.on_committer(name, move |store, _| store.end_drop(&db))
            .await
    }

    /// A pass from `old` to `new` over database `name`'s documents, one committer job per
    /// step; the add pass reports its progress in the metrics.
    async fn pass_in_steps(
        &self,
        name: &str,
        old: &IndexCatalog,
        new: &IndexCatalog,
        pass: Pass,
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
                    store.pass_chunk(&db, &old, &new, pass, from.as_deref(), BUILD_STEP)
                })
                .await?;
            done += step.documents as u64;
            if pass == Pass::Add {
                self.metrics().backfill(name, done, total.max(done));
            }
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
