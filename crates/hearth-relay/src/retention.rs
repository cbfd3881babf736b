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

/// Deletes, for every database, the changelog records older than `retention` that precede
/// every younger one, and the batch records of the versions deleted, in one transaction.
pub fn prune(store: &Store, retention: Duration) -> Result<(), StoreError> {
    let retention = i64::try_from(retention.as_micros()).unwrap_or(i64::MAX);
    let cutoff = now_micros().saturating_sub(retention);
    let databases = store.databases()?;
    let txn = store.db.begin_write()?;
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
