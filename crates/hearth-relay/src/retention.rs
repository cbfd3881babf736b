//! Changelog retention: each database's changelog is pruned from its oldest record on, in
//! version order, so what remains always covers every commit after some version; the write
//! idempotency records of the pruned commits go with them.
//!
//! Commit times only decide where a prune stops: the first record still within the
//! retention ends it, even if later ones are older (a clock stepped back between them). So
//! a changelog never has a hole, and a resume from before its first record gets a Reset
//! (`DatabaseView::changes_between` refuses any range with a missing version).

use std::time::Duration;

use hearth_core::encoding::key::prefix_end;

use crate::commit::now_micros;
use crate::idempotency::BatchRecord;
use crate::store::{change_time, db_prefix, read_u64, Store, StoreError, Tab};

/// [`prune_shard`] of every shard.
#[cfg(test)]
pub fn prune(store: &Store, retention: Duration) -> Result<(), StoreError> {
    for shard in 0..store.shard_count() {
        prune_shard(store, shard, retention)?;
    }
    Ok(())
}

/// Most changelog records one prune removes per database: the rest waits for the next.
const PRUNE_BATCH: usize = 10_000;

/// Deletes, for every database of store shard `shard`, the changelog records older than
/// `retention` that precede every younger one, and the batch records of the versions
/// deleted, in one transaction.
pub fn prune_shard(store: &Store, shard: usize, retention: Duration) -> Result<(), StoreError> {
    let retention = i64::try_from(retention.as_micros()).unwrap_or(i64::MAX);
    let cutoff = now_micros().saturating_sub(retention);
    let databases = store.shard_databases(shard)?;
    store.write(shard, false, &mut |w| {
        for (db, _) in &databases {
            let prefix = db_prefix(db);
            let end = prefix_end(&prefix).expect("a database prefix has an end");
            // The prunable run at the changelog's start.
            let rows = w.range(Tab::Changelog, &prefix, &end, false, PRUNE_BATCH)?;
            let run = rows
                .iter()
                .take_while(|(_, v)| change_time(v) < cutoff)
                .count();
            let Some((last, _)) = run.checked_sub(1).map(|i| &rows[i]) else {
                continue;
            };
            let through = read_u64(&last[prefix.len()..]);
            let after_last = [last.as_slice(), &[0]].concat();
            w.retain(Tab::Changelog, &prefix, &after_last, &mut |_, _| false)?;
            // A record goes with its version's changelog record, unless it is younger than
            // the retention itself: a refusal is recorded at the version before it (the
            // last commit, maybe long ago), and must answer a retry for as long as a commit
            // would.
            w.retain(Tab::Batches, &prefix, &end, &mut |_, v| {
                BatchRecord::version_of(v) > through || BatchRecord::micros_of(v) >= cutoff
            })?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::idempotency::{batch_key, BatchRecord};
    use crate::store::encode_change_names;
    use hearth_core::path::DocumentName;

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
        let write = |w: &mut dyn crate::store::txn::WriteTxn| {
            w.set_head("db", 4, 0)?;
            for (i, micros) in times.into_iter().enumerate() {
                let version = i as u64 + 1;
                let name = DocumentName::parse(&format!("c/d{version}")).unwrap();
                let key = [db_prefix("db"), version.to_be_bytes().to_vec()].concat();
                let record = encode_change_names(micros, &[name]);
                w.put(Tab::Changelog, &key, &record)?;
                let batch = BatchRecord {
                    version,
                    micros,
                    digest: None,
                    refused: None,
                };
                let key = batch_key("db", "client", 100 + version);
                w.put(Tab::Batches, &key, &batch.encode())?;
            }
            Ok(())
        };
        store.write_db("db", &mut { write }).unwrap();
        Temp(dir, store)
    }

    /// The versions of the changelog and of the batch records left.
    fn left(store: &Store) -> (Vec<u64>, Vec<u64>) {
        let txn = store.read("db").unwrap();
        let rows = |t: Tab| {
            let mut out = Vec::new();
            crate::store::walk(txn.as_ref(), t, "db", |k, v| {
                out.push((k.to_vec(), v.to_vec()));
                Ok(())
            })
            .unwrap();
            out
        };
        (
            rows(Tab::Changelog)
                .into_iter()
                .map(|(k, _)| read_u64(&k[k.len() - 8..]))
                .collect(),
            rows(Tab::Batches)
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

    /// A batch refused now on a database whose last commit is old is recorded at that
    /// commit's version: pruning that commit's changelog record keeps the refusal, so a
    /// retry is still refused rather than applied after later batches.
    #[test]
    fn a_fresh_refusal_outlives_its_old_version() {
        let now = now_micros();
        let hour = 3_600_000_000;
        let t = store(
            "refusal",
            [now - 4 * hour, now - 3 * hour, now - 2 * hour, now - hour],
        );
        let refusal = BatchRecord {
            version: 4,
            micros: now,
            digest: None,
            refused: Some((hearth_core::error::ErrorCode::PermissionDenied, "no".into())),
        };
        let key = batch_key("db", "client", 999);
        t.1.write_db("db", &mut |w| w.put(Tab::Batches, &key, &refusal.encode()))
            .unwrap();
        prune(&t.1, Duration::from_secs(1800)).unwrap();
        assert_eq!(left(&t.1), (vec![], vec![4]), "the refusal is kept");
    }

    #[test]
    fn a_hole_in_the_changelog_refuses_a_delta_across_it() {
        let now = now_micros();
        let t = store("hole", [now; 4]);
        let key = [db_prefix("db"), 3u64.to_be_bytes().to_vec()].concat();
        t.1.write_db("db", &mut |w| w.delete(Tab::Changelog, &key))
            .unwrap();
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
