//! `hearth-relay check`'s history half: a database's versions are gap-free and agree with
//! each other. The changelog's records are consecutive versions ending at the head (every
//! commit after the retained window's start has its record; none lies beyond the head);
//! every document was changed at a version no later than the head, created no later than
//! changed, and named by the changelog record of its last change when that record is
//! retained (else a resume from before it would miss the change); every write-idempotency
//! record answers with a version no later than the head.

use std::collections::BTreeMap;

use hearth_core::path::DocumentName;

use super::txn::{ReadTxn, Tab};
use super::{db_prefix, decode_change_names, read_u64, walk, StoreError};
use crate::idempotency::BatchRecord;

/// Most problems of one kind told one by one; the rest are counted.
const SHOWN: usize = 5;

/// A document's versions, as `check` found them.
pub(super) struct Versions {
    pub name: DocumentName,
    pub created: u64,
    pub updated: u64,
}

/// The history problems of database `db` in `txn`, given its documents' versions.
pub(super) fn problems(
    txn: &dyn ReadTxn,
    db: &str,
    documents: &[Versions],
) -> Result<Vec<String>, StoreError> {
    let prefix = db_prefix(db).len();
    let head = txn.head(db)?.map(|h| h.version);
    let mut out = Vec::new();
    let mut records: BTreeMap<u64, Vec<DocumentName>> = BTreeMap::new();
    let mut gaps = Vec::new();
    let mut undecodable = 0usize;
    walk(txn, Tab::Changelog, db, |k, v| {
        let version = read_u64(&k[prefix..]);
        if let Some((&last, _)) = records.last_key_value() {
            if version != last + 1 {
                gaps.push(format!("{}..={}", last + 1, version - 1));
            }
        }
        let names = decode_change_names(v).unwrap_or_else(|_| {
            undecodable += 1;
            Vec::new()
        });
        records.insert(version, names);
        Ok(())
    })?;
    tell(&mut out, "changelog versions missing", &gaps);
    if undecodable > 0 {
        out.push(format!("{undecodable} changelog records do not decode"));
    }
    let head = match head {
        Some(h) => h,
        None if records.is_empty() && documents.is_empty() => return Ok(out),
        None => {
            out.push("documents or changelog records without a head version".to_owned());
            return Ok(out);
        }
    };
    if let Some((&last, _)) = records.last_key_value() {
        if last != head {
            out.push(format!(
                "the changelog ends at version {last}, the head is {head}"
            ));
        }
    }
    out.extend(document_problems(documents, &records, head));
    out.extend(batch_problems(txn, db, head)?);
    Ok(out)
}

/// The documents whose versions disagree with the head or the changelog.
fn document_problems(
    documents: &[Versions],
    records: &BTreeMap<u64, Vec<DocumentName>>,
    head: u64,
) -> Vec<String> {
    let mut out = Vec::new();
    let (mut late, mut unrecorded) = (Vec::new(), Vec::new());
    for d in documents {
        if d.updated > head || d.created > d.updated || d.created == 0 {
            late.push(format!(
                "`{}` (created {}, changed {})",
                d.name, d.created, d.updated
            ));
        } else if records
            .get(&d.updated)
            .is_some_and(|names| !names.contains(&d.name))
        {
            unrecorded.push(format!("`{}` at {}", d.name, d.updated));
        }
    }
    tell(
        &mut out,
        &format!("documents whose versions are not within 1..={head}"),
        &late,
    );
    tell(
        &mut out,
        "documents their last change's changelog record does not name",
        &unrecorded,
    );
    out
}

/// The write-idempotency records that answer with a version beyond the head.
fn batch_problems(txn: &dyn ReadTxn, db: &str, head: u64) -> Result<Vec<String>, StoreError> {
    let mut beyond = Vec::new();
    walk(txn, Tab::Batches, db, |_, v| {
        if let Ok(r) = BatchRecord::decode(v) {
            if r.version > head {
                beyond.push(r.version.to_string());
            }
        }
        Ok(())
    })?;
    let mut out = Vec::new();
    tell(
        &mut out,
        &format!("write records answering with versions beyond the head {head}"),
        &beyond,
    );
    Ok(out)
}

/// Adds "`what`: the first few of `items` (of n)" to `out` when there are any.
fn tell(out: &mut Vec<String>, what: &str, items: &[String]) {
    if items.is_empty() {
        return;
    }
    let more = if items.len() > SHOWN { ", ..." } else { "" };
    let shown: Vec<&str> = items.iter().take(SHOWN).map(String::as_str).collect();
    out.push(format!(
        "{what}: {}{more} ({} in all)",
        shown.join(", "),
        items.len()
    ));
}
