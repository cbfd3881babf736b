//! A database's index definitions as the store holds them, and how a change of them
//! reaches every relay that commits to the database or plans its queries.
//!
//! Three `meta` records describe them: `indexes/<db>`, the definitions whose entries are
//! complete (queries are planned with these alone); `building/<db>`, the target of a build
//! under way; `dropping/<db>`, definitions whose entries a build left behind and that are
//! being removed. Every change of these records bumps the database's catalog generation
//! ([`Head::catalog`]) in the same transaction, under the head's lock. A commit that finds
//! another generation than it knows reloads them from its own transaction before it writes
//! anything, and a read from its own snapshot before it plans: so with several relays on
//! one PostgreSQL database, each one's commits maintain a new index from the moment its
//! build begins, and none plans with an index before its entries are complete or after
//! they start going.
//!
//! A change from definitions `old` to `new`, one build at a time per database (the store's
//! build lock, [`Store::lock_builds`]):
//! 1. `building := new`: commits maintain the entries of both.
//! 2. The add pass: every document's entries under `new` are written (none removed).
//! 3. `indexes := new`, `dropping := old`, no `building`, in one transaction: queries plan
//!    with `new` from here on; commits maintain `new` and only remove entries of `old`.
//! 4. The drop pass: every document's entries under `old` that `new` lacks are removed.
//! 5. No `dropping`.
//!
//! A build interrupted in 1-2 (a crash) becomes a drop of its target (`dropping :=
//! building`), and one interrupted in 4 is finished, by whoever next takes the lock.

use hearth_core::document::Document;
use hearth_core::encoding::document::decode_document;
use hearth_core::encoding::key::prefix_end;
use hearth_core::index::config::parse_index_file;
use hearth_core::index::def::IndexCatalog;
use hearth_core::index::keys::{document_entries, index_diff, IndexDiff};

use super::txn::{ReadTxn, Tab, WriteTxn};
use super::{db_prefix, BackfillStep, Store, StoreError};

/// A database's index definitions at one catalog generation.
#[derive(Clone, Debug, Default)]
pub struct Catalogs {
    /// The generation they were read at.
    pub generation: u64,
    /// The definitions whose entries are complete: queries are planned with these.
    pub indexes: IndexCatalog,
    /// The target of a build under way: commits maintain its entries too.
    pub building: Option<IndexCatalog>,
    /// Definitions whose entries are being removed: commits remove theirs, never add.
    pub dropping: Option<IndexCatalog>,
}

/// Which entries a pass over the documents writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pass {
    /// Inserts the entries the new definitions have and the old lack; removes none.
    Add,
    /// Removes the entries the old definitions have and the new lack; inserts none.
    Drop,
}

/// The `meta` key of `db`'s record `kind` (`indexes`, `building`, `dropping`).
fn record_key(kind: &str, db: &str) -> String {
    format!("{kind}/{db}")
}

/// The definitions in `db`'s record `kind`, if any.
fn load_record<T: ReadTxn + ?Sized>(
    txn: &T,
    db: &str,
    kind: &str,
) -> Result<Option<IndexCatalog>, StoreError> {
    let Some(v) = txn.meta(&record_key(kind, db))? else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(&v);
    parse_index_file(&text)
        .map(|f| Some(IndexCatalog::from_file(&f)))
        .map_err(|e| StoreError::Corrupt {
            db: db.to_owned(),
            what: format!("index definitions `{kind}/{db}`: {e}"),
        })
}

impl Catalogs {
    /// Database `db`'s definitions as `txn` sees them, `generation` being its head's.
    pub fn load<T: ReadTxn + ?Sized>(
        txn: &T,
        db: &str,
        generation: u64,
    ) -> Result<Catalogs, StoreError> {
        Ok(Catalogs {
            generation,
            indexes: load_record(txn, db, "indexes")?.unwrap_or_default(),
            building: load_record(txn, db, "building")?,
            dropping: load_record(txn, db, "dropping")?,
        })
    }

    /// Database `db`'s definitions as write transaction `w` sees them, its head locked.
    fn locked(w: &mut dyn WriteTxn, db: &str) -> Result<Catalogs, StoreError> {
        let generation = w.lock_head(db)?.map_or(0, |h| h.catalog);
        Catalogs::load(w, db, generation)
    }

    /// The index entries a change of one document from `old` to `new` removes and
    /// inserts: those of the complete definitions and of a build's target, and the removal
    /// of a dropped definition's entries of `old`.
    pub fn diff(&self, old: Option<&Document>, new: Option<&Document>) -> IndexDiff {
        if self.building.is_none() && self.dropping.is_none() {
            return index_diff(&self.indexes, old, new);
        }
        let kept = |d: &Document| {
            let mut set = document_entries(&self.indexes, d);
            if let Some(b) = &self.building {
                set.extend(document_entries(b, d));
            }
            set
        };
        let mut before = old.map(kept).unwrap_or_default();
        if let (Some(dropping), Some(d)) = (&self.dropping, old) {
            before.extend(document_entries(dropping, d));
        }
        let after = new.map(kept).unwrap_or_default();
        IndexDiff {
            deletes: before.difference(&after).cloned().collect(),
            inserts: after.difference(&before).cloned().collect(),
            entries: after.len(),
        }
    }
}

/// Writes `catalogs`' records for `db` and bumps its generation, its head locked.
fn store_records(w: &mut dyn WriteTxn, db: &str, catalogs: &Catalogs) -> Result<(), StoreError> {
    let generation = w.lock_head(db)?.map_or(0, |h| h.catalog) + 1;
    w.put_meta(
        &record_key("indexes", db),
        catalogs.indexes.file().to_json().as_bytes(),
    )?;
    for (kind, c) in [
        ("building", &catalogs.building),
        ("dropping", &catalogs.dropping),
    ] {
        match c {
            Some(c) => w.put_meta(&record_key(kind, db), c.file().to_json().as_bytes())?,
            None => w.delete_meta(&record_key(kind, db))?,
        }
    }
    w.set_catalog_generation(db, generation)
}

/// A build lock held ([`Store::lock_builds`]): released when dropped.
pub type BuildLock = Box<dyn Send>;

impl Store {
    /// Database `db`'s index definitions now.
    pub fn catalogs(&self, db: &str) -> Result<Catalogs, StoreError> {
        let txn = self.read(db)?;
        let generation = txn.head(db)?.map_or(0, |h| h.catalog);
        Catalogs::load(txn.as_ref(), db, generation)
    }

    /// Waits for, and takes, the lock under which database `db`'s index definitions
    /// change: one build at a time, whichever relay runs it. A relay that dies holding it
    /// (PostgreSQL: its session ends) lets it go.
    pub fn lock_builds(&self, db: &str) -> Result<BuildLock, StoreError> {
        self.backend.lock_builds(db)
    }

    /// Finishes what an interrupted change of `db`'s definitions left (its build lock
    /// held): a build's target is dropped, a drop finished. Returns whether there was one.
    pub fn recover_indexes(&self, db: &str, chunk: usize) -> Result<bool, StoreError> {
        let c = self.catalogs(db)?;
        if c.building.is_none() && c.dropping.is_none() {
            return Ok(false);
        }
        tracing::warn!(database = %db, "an index change was interrupted: finishing it");
        if let (Some(target), Some(_)) = (&c.building, &c.dropping) {
            // Not a state a change leaves (a build begins once the drop before it ended),
            // but stored bytes may say anything: the build's target goes first.
            self.pass(db, target, &c.indexes, Pass::Drop, chunk, |_, _| {})?;
            self.write_db(db, &mut |w| {
                let mut c = Catalogs::locked(w, db)?;
                c.building = None;
                store_records(w, db, &c)
            })?;
        }
        // A build's target is dropped: `dropping := building`.
        self.write_db(db, &mut |w| {
            let mut c = Catalogs::locked(w, db)?;
            if let Some(target) = c.building.take() {
                c.dropping = Some(target);
                store_records(w, db, &c)?;
            }
            Ok(())
        })?;
        let c = self.catalogs(db)?;
        if let Some(dropping) = &c.dropping {
            self.pass(db, dropping, &c.indexes, Pass::Drop, chunk, |_, _| {})?;
        }
        self.end_drop(db)?;
        Ok(true)
    }

    /// Makes `new` database `db`'s index definitions (its build lock held, nothing left to
    /// recover): steps 1-5 above, each pass in transactions of `chunk` documents.
    /// `progress(done, total)` follows the add pass. Nothing to do when they are the same.
    pub fn change_indexes(
        &self,
        db: &str,
        new: &IndexCatalog,
        chunk: usize,
        progress: impl FnMut(u64, u64),
    ) -> Result<(), StoreError> {
        let old = self.catalogs(db)?.indexes;
        if old.file() == new.file() {
            return Ok(());
        }
        self.begin_build(db, new)?;
        self.pass(db, &old, new, Pass::Add, chunk, progress)?;
        self.finish_build(db, new)?;
        self.pass(db, &old, new, Pass::Drop, chunk, |_, _| {})?;
        self.end_drop(db)
    }

    /// Step 1: `building := target`.
    pub fn begin_build(&self, db: &str, target: &IndexCatalog) -> Result<(), StoreError> {
        self.write_db(db, &mut |w| {
            let mut c = Catalogs::locked(w, db)?;
            c.building = Some(target.clone());
            store_records(w, db, &c)
        })
    }

    /// Step 3: the build's target becomes the definitions queries are planned with; the
    /// ones it replaces are dropped.
    pub fn finish_build(&self, db: &str, built: &IndexCatalog) -> Result<(), StoreError> {
        self.write_db(db, &mut |w| {
            let mut c = Catalogs::locked(w, db)?;
            let old = std::mem::replace(&mut c.indexes, built.clone());
            c.building = None;
            c.dropping = Some(old);
            store_records(w, db, &c)
        })
    }

    /// Step 5: the drop is done.
    pub fn end_drop(&self, db: &str) -> Result<(), StoreError> {
        self.write_db(db, &mut |w| {
            let mut c = Catalogs::locked(w, db)?;
            c.dropping = None;
            store_records(w, db, &c)
        })
    }

    /// One pass over `db`'s documents from `old` to `new` definitions, in transactions of
    /// `chunk` documents; `progress(done, total)` after each.
    fn pass(
        &self,
        db: &str,
        old: &IndexCatalog,
        new: &IndexCatalog,
        pass: Pass,
        chunk: usize,
        mut progress: impl FnMut(u64, u64),
    ) -> Result<(), StoreError> {
        let total = self.document_count(db)?;
        let mut done = 0u64;
        let mut from = None;
        loop {
            let step = self.pass_chunk(db, old, new, pass, from.as_deref(), chunk)?;
            done += step.documents as u64;
            progress(done, total);
            match step.next {
                Some(next) => from = Some(next),
                None => return Ok(()),
            }
        }
    }

    /// One step of a pass from `old` to `new` definitions: the entries of at most `chunk`
    /// of `db`'s documents, from document key `from` (`None`: the first), in one write
    /// transaction, under the database's head lock (commits on any relay wait for it). Commits
    /// run between steps: they maintain both definitions' entries while a build is under
    /// way, and remove a dropped one's, so each step derives the entries from the documents
    /// as they are then.
    pub fn pass_chunk(
        &self,
        db: &str,
        old: &IndexCatalog,
        new: &IndexCatalog,
        pass: Pass,
        from: Option<&[u8]>,
        chunk: usize,
    ) -> Result<BackfillStep, StoreError> {
        let prefix = db_prefix(db);
        let end = prefix_end(&prefix).expect("a database prefix has an end");
        let from = from.unwrap_or(&prefix).to_vec();
        let mut step = BackfillStep {
            documents: 0,
            next: None,
        };
        // No fsync of its own: the next durable commit (the next round, or the build's end)
        // makes it durable with everything before it, and a crash before that leaves a
        // change that is finished from the documents anyway.
        self.write(self.shard_index(db), false, &mut |w| {
            // The head's lock first, as a commit takes it: no other relay's commit changes
            // these documents between their reading here and their entries' writing (it
            // would leave the entries of a state that is gone). Under PostgreSQL's read
            // committed, the reads after the lock see every commit before it.
            w.lock_head(db)?;
            let rows = w.range(Tab::Documents, &from, &end, false, chunk)?;
            for (_, v) in &rows {
                let doc = decode_document(v).map_err(|e| StoreError::Corrupt {
                    db: db.to_owned(),
                    what: e.to_string(),
                })?;
                let before = document_entries(old, &doc);
                let after = document_entries(new, &doc);
                match pass {
                    Pass::Add => {
                        for key in after.difference(&before) {
                            w.put(Tab::Index, &[prefix.as_slice(), key].concat(), &[])?;
                        }
                    }
                    Pass::Drop => {
                        for key in before.difference(&after) {
                            w.delete(Tab::Index, &[prefix.as_slice(), key].concat())?;
                        }
                    }
                }
            }
            step = BackfillStep {
                documents: rows.len(),
                // The smallest key after the last one done.
                next: rows.last().filter(|_| rows.len() == chunk).map(|(k, _)| {
                    let mut k = k.clone();
                    k.push(0);
                    k
                }),
            };
            Ok(())
        })?;
        Ok(step)
    }
}
