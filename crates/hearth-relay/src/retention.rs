//! Changelog retention: each database's changelog is pruned from its oldest record on, in
//! version order, so what remains always covers every commit after some version; the write
//! idempotency records of the pruned commits go with them.
//!
//! Commit times only decide where a prune stops: the first record still within the
//! retention ends it, even if later ones are older (a clock stepped back between them). So
//! a changelog never has a hole, and a resume from before its first record gets a Reset
//! (`DatabaseView::changes_between` refuses any range with a missing version).

use std::time::Duration;

use redb::ReadableTable;

use hearth_core::encoding::key::prefix_end;

use crate::commit::now_micros;
use crate::idempotency::BatchRecord;
use crate::store::{change_time, db_prefix, read_u64, Store, StoreError, BATCHES, CHANGELOG};

/// [`prune_shard`] of every shard.
#[cfg(test)]
pub fn prune(store: &Store, retention: Duration) -> Result<(), StoreError> {
    for shard in 0..store.shard_count() {
        prune_shard(store, shard, retention)?;
    }
    Ok(())
}

/// Deletes, for every database of store shard `shard`, the changelog records older than
/// `retention` that precede every younger one, and the batch records of the versions
/// deleted, in one transaction.
pub fn prune_shard(store: &Store, shard: usize, retention: Duration) -> Result<(), StoreError> {
    let retention = i64::try_from(retention.as_micros()).unwrap_or(i64::MAX);
    let cutoff = now_micros().saturating_sub(retention);
    let databases = store.shard_databases(shard)?;
    let txn = store.shard(shard).begin_write()?;
    {
        let mut changelog = txn.open_table(CHANGELOG)?;
        let mut batches = txn.open_table(BATCHES)?;
        for (db, _) in databases {
            let prefix = db_prefix(&db);
            let end = prefix_end(&prefix).expect("a database prefix has an end");
            // The last record of the prunable run at the changelog's start.
            let mut last: Option<Vec<u8>> = None;
            for row in changelog.range(prefix.as_slice()..end.as_slice())? {
                let (k, v) = row?;
                if change_time(v.value()) >= cutoff {
                    break;
                }
                last = Some(k.value().to_vec());
            }
            let Some(last) = last else { continue };
            let through = read_u64(&last[prefix.len()..]);
            changelog.retain_in(prefix.as_slice()..=last.as_slice(), |_, _| false)?;
            batches.retain_in(prefix.as_slice()..end.as_slice(), |_, v| {
                BatchRecord::version_of(v) > through
            })?;
        }
    }
    txn.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::idempotency::{batch_key, BatchRecord};
    use crate::store::{encode_change_names, META};
    use hearth_core::path::DocumentName;
    use redb::ReadableDatabase;

    /// A store in a fresh temporary directory, removed on drop.
    struct Temp(std::path::PathBuf, Store);

    impl Drop for Temp {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Database `db` at version 4 with changelog records of versions 1, 2, 3, 4 committed
    /// at the given times, and one batch record per version.
    fn store(tag: &str, times: [i64; 4]) -> Temp {
        let dir =
            std::env::temp_dir().join(format!("hearth-retention-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Store::open(&dir).unwrap();
        let txn = store.file("db").begin_write().unwrap();
        {
            let mut meta = txn.open_table(META).unwrap();
            meta.insert("version/db", 4u64.to_be_bytes().as_slice())
                .unwrap();
            let mut changelog = txn.open_table(CHANGELOG).unwrap();
            let mut batches = txn.open_table(BATCHES).unwrap();
            for (i, micros) in times.into_iter().enumerate() {
                let version = i as u64 + 1;
                let name = DocumentName::parse(&format!("c/d{version}")).unwrap();
                let key = [db_prefix("db"), version.to_be_bytes().to_vec()].concat();
                let record = encode_change_names(micros, &[name]);
                changelog.insert(key.as_slice(), record.as_slice()).unwrap();
                let batch = BatchRecord {
                    version,
                    micros,
                    digest: None,
                    refused: None,
                };
                let key = batch_key("db", "client", 100 + version);
                batches
                    .insert(key.as_slice(), batch.encode().as_slice())
                    .unwrap();
            }
        }
        txn.commit().unwrap();
        Temp(dir, store)
    }

    /// The versions of the changelog and of the batch records left.
    fn left(store: &Store) -> (Vec<u64>, Vec<u64>) {
        let txn = store.file("db").begin_read().unwrap();
        let changelog = txn.open_table(CHANGELOG).unwrap();
        let batches = txn.open_table(BATCHES).unwrap();
        let rows = |t: &redb::ReadOnlyTable<&[u8], &[u8]>| -> Vec<(Vec<u8>, Vec<u8>)> {
            t.iter()
                .unwrap()
                .map(|r| r.unwrap())
                .map(|(k, v)| (k.value().to_vec(), v.value().to_vec()))
                .collect()
        };
        (
            rows(&changelog)
                .into_iter()
                .map(|(k, _)| read_u64(&k[k.len() - 8..]))
                .collect(),
            rows(&batches)
                .into_iter()
                .map(|(_, v)| BatchRecord::version_of(&v))
                .collect(),
        )
    }

    #[test]
    fn pruning_stops_at_the_first_young_record() {
        let now = now_micros();
        let hour = 3_600_000_000;
        // Version 3 committed after a clock step back: older than version 2.
        let t = store(
            "step",
            [now - 3 * hour, now - hour / 2, now - 2 * hour, now],
        );
        prune(&t.1, Duration::from_secs(3600)).unwrap();
        assert_eq!(left(&t.1), (vec![2, 3, 4], vec![2, 3, 4]));
        let snap = t.1.snapshot("db").unwrap();
        let view = snap.database("db");
        assert_eq!(
            view.changes_between(0, 4).unwrap(),
            None,
            "version 1 is gone"
        );
        let names = view.changes_between(1, 4).unwrap().unwrap();
        assert_eq!(names.len(), 3);
        assert_eq!(view.changes_between(4, 4).unwrap(), Some(vec![]));
        drop(snap);
        // Everything is old: all of it goes.
        prune(&t.1, Duration::ZERO).unwrap();
        assert_eq!(left(&t.1), (vec![], vec![]));
    }

    #[test]
    fn a_hole_in_the_changelog_refuses_a_delta_across_it() {
        let now = now_micros();
        let t = store("hole", [now; 4]);
        let txn = t.1.file("db").begin_write().unwrap();
        {
            let mut changelog = txn.open_table(CHANGELOG).unwrap();
            let key = [db_prefix("db"), 3u64.to_be_bytes().to_vec()].concat();
            changelog.remove(key.as_slice()).unwrap();
        }
        txn.commit().unwrap();
        let snap = t.1.snapshot("db").unwrap();
        let view = snap.database("db");
        assert_eq!(
            view.changes_between(0, 2).unwrap().map(|n| n.len()),
            Some(2)
        );
        assert_eq!(view.changes_between(1, 4).unwrap(), None);
        assert_eq!(view.changes_between(2, 4).unwrap(), None);
        assert_eq!(
            view.changes_between(3, 4).unwrap().map(|n| n.len()),
            Some(1)
        );
        assert_eq!(
            view.changes_between(0, 5).unwrap(),
            None,
            "past the last commit"
        );
    }
}
