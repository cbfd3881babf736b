//! Database policy: which databases (tenants) the relay holds, and when one is created.
//!
//! With `--databases`, the relay serves exactly the listed ones, all created at start; a
//! client naming another is refused. Without it, a client's first connection to a new
//! (valid) name creates that database, up to `--max-databases`. A database, once held, stays
//! for the relay's life.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use crate::commit::{register_database, Committer};
use crate::config::Config;
use crate::fanout::Fanout;
use crate::indexes::apply_index_file;
use crate::metrics::Metrics;
use crate::state::read_slots_per_database;
use crate::store::{Catalogs, Store, StoreError};
use hearth_core::index::def::IndexCatalog;

/// One database (tenant).
pub struct Database {
    /// The database's name: its key prefix in every table of the store, its queue in the
    /// committer and its label in the metrics.
    name: String,
    /// Its listened queries, kept current by its commits.
    fanout: Fanout,
    /// Its commit version when this relay opened it: its fan-out's first published one.
    opened_at: u64,
    /// The index definitions its queries are planned with (the store's `indexes/` record,
    /// whose entries are complete) and their catalog generation: a read that finds
    /// another generation in its snapshot reloads them from it first, so a plan never reads
    /// an index that is incomplete or being dropped, whichever relay changed them.
    catalog: RwLock<(u64, IndexCatalog)>,
    /// Held for the whole of an index creation: one at a time per database, each starting
    /// from the catalog the previous one left.
    building: tokio::sync::Mutex<()>,
    /// Its share of the relay's read slots: at most half of them, so one database's reads
    /// can never hold every slot ([`crate::state::Relay::blocking_read`]).
    read_slots: tokio::sync::Semaphore,
}

impl Database {
    /// A database at commit `version`, planning with `catalogs`' complete definitions,
    /// with `read_slots` of the relay's read slots.
    fn new(name: String, version: u64, catalogs: Catalogs, read_slots: usize) -> Database {
        Database {
            name,
            fanout: Fanout::new(version),
            opened_at: version,
            catalog: RwLock::new((catalogs.generation, catalogs.indexes)),
            building: tokio::sync::Mutex::new(()),
            read_slots: tokio::sync::Semaphore::new(read_slots),
        }
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The fan-out of its listened queries.
    pub fn fanout(&self) -> &Fanout {
        &self.fanout
    }

    /// Its commit version when this relay opened it: its fan-out starts from there.
    pub fn opened_at(&self) -> u64 {
        self.opened_at
    }

    /// The index definitions its queries are planned with, as last loaded.
    pub fn catalog(&self) -> IndexCatalog {
        self.catalog.read().expect("catalog lock").1.clone()
    }

    /// The catalog generation of the index definitions it plans with.
    pub(crate) fn catalog_generation(&self) -> u64 {
        self.catalog.read().expect("catalog lock").0
    }

    /// The index definitions to plan with at catalog generation `generation`: the ones
    /// held when it is theirs, else those `load` reads (from the caller's snapshot), which
    /// replace them unless a newer generation already did.
    pub(crate) fn catalog_at<E>(
        &self,
        generation: u64,
        load: impl FnOnce() -> Result<IndexCatalog, E>,
    ) -> Result<IndexCatalog, E> {
        {
            let held = self.catalog.read().expect("catalog lock");
            if held.0 == generation {
                return Ok(held.1.clone());
            }
        }
        let loaded = load()?;
        let mut held = self.catalog.write().expect("catalog lock");
        if held.0 < generation {
            *held = (generation, loaded.clone());
        }
        Ok(loaded)
    }

    /// The database's share of the read slots, taken before one of the relay's.
    pub(crate) fn read_slots(&self) -> &tokio::sync::Semaphore {
        &self.read_slots
    }

    /// Serializes index creations on this database: held for the whole of one.
    pub(crate) async fn index_build(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.building.lock().await
    }
}

/// Why a connection cannot use a database.
#[derive(Debug, thiserror::Error)]
pub enum DatabaseError {
    /// `--databases` lists the databases served, and this is not one of them.
    #[error("database `{name}` is not served by this relay (it serves: {served})")]
    NotServed {
        /// The database the client asked for.
        name: String,
        /// The databases served, comma-separated.
        served: String,
    },
    /// Creating this database would pass `--max-databases`.
    #[error("database `{name}` does not exist, and this relay already holds its maximum of {max} databases (--max-databases)")]
    TooMany {
        /// The database the client asked for.
        name: String,
        /// The `--max-databases` limit.
        max: usize,
    },
    /// The store could not register the new database.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The databases the relay holds.
pub(crate) struct Databases {
    /// Every database held, by name. The lock also makes the limit check and the creation
    /// of a database one step, so two connections never create the same one twice.
    held: Mutex<HashMap<String, Arc<Database>>>,
}

impl Databases {
    /// Opens every database in the store, bringing each one's index definitions in line
    /// with the index file (`crate::indexes::apply_index_file`), registers each with its shard's committer, and creates the
    /// listed databases (`--databases`) that are missing.
    pub(crate) fn open(
        store: &Store,
        committers: &[Arc<Committer>],
        config: &Config,
        metrics: &Metrics,
    ) -> Result<Databases, StoreError> {
        let databases = Databases {
            held: Mutex::new(HashMap::new()),
        };
        let base = IndexCatalog::from_file(&config.indexes);
        for (name, _) in store.databases()? {
            apply_index_file(store, metrics, &name, &base)?;
            let (version, catalogs) = register_database(
                store,
                &committers[store.shard_index(&name)],
                &name,
                base.clone(),
            )?;
            databases.lock().insert(
                name.clone(),
                Arc::new(Database::new(
                    name,
                    version,
                    catalogs,
                    read_slots_per_database(config),
                )),
            );
        }
        if let Some(names) = &config.databases {
            let mut dbs = databases.lock();
            for name in names {
                if !dbs.contains_key(name) {
                    create(store, committers, config, &mut dbs, name)?;
                }
            }
        }
        Ok(databases)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Database>>> {
        self.held.lock().expect("databases lock")
    }

    /// Every database the relay holds.
    pub(crate) fn all(&self) -> Vec<Arc<Database>> {
        self.lock().values().cloned().collect()
    }

    /// The database `name` if the relay holds it.
    pub(crate) fn get(&self, name: &str) -> Option<Arc<Database>> {
        self.lock().get(name).cloned()
    }

    /// The database `name` for a connection: one the relay holds, or a new one when the
    /// configuration lets clients create databases (no `--databases` list, fewer than
    /// `--max-databases`).
    pub(crate) fn get_or_create(
        &self,
        name: &str,
        store: &Store,
        committers: &[Arc<Committer>],
        config: &Config,
    ) -> Result<Arc<Database>, DatabaseError> {
        let mut dbs = self.lock();
        if let Some(db) = dbs.get(name) {
            return Ok(db.clone());
        }
        // Listed databases were all created at start.
        if let Some(allowed) = &config.databases {
            return Err(DatabaseError::NotServed {
                name: name.to_owned(),
                served: allowed.join(", "),
            });
        }
        if dbs.len() >= config.max_databases {
            return Err(DatabaseError::TooMany {
                name: name.to_owned(),
                max: config.max_databases,
            });
        }
        create(store, committers, config, &mut dbs, name).map_err(DatabaseError::Store)
    }
}

/// Creates database `name` (empty, at version 0, with the configured indexes; or opens it
/// where another relay created it) and adds it to `dbs`.
fn create(
    store: &Store,
    committers: &[Arc<Committer>],
    config: &Config,
    dbs: &mut HashMap<String, Arc<Database>>,
    name: &str,
) -> Result<Arc<Database>, StoreError> {
    let catalog = IndexCatalog::from_file(&config.indexes);
    // Another relay over the same PostgreSQL database may have created it already: its
    // index definitions are then the stored ones.
    let (version, catalogs) =
        register_database(store, &committers[store.shard_index(name)], name, catalog)?;
    let slots = read_slots_per_database(config);
    let db = Arc::new(Database::new(name.to_owned(), version, catalogs, slots));
    dbs.insert(name.to_owned(), db.clone());
    tracing::info!(database = %name, "database created");
    Ok(db)
}
