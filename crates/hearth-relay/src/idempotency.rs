//! Write idempotency: the record the committer keeps for each committed batch, so that a
//! batch re-sent after a lost acknowledgement is answered, not applied again, and a
//! different batch that reuses an id is refused instead of being taken for a retry.
//!
//! ```text
//! batches key    db · string(client_id) · batch_id(u64 BE)
//! batches value  version(u64 BE) · commit time µs(i64 BE) · digest(32 bytes)
//! ```
//! The digest is SHA-256 over the batch's writes and reads in their canonical wire
//! encoding ([`batch_digest`]), so a retry (the same writes, however the client framed
//! them) matches and anything else does not. Records written before digests were kept are
//! 16 bytes long: a batch repeating such an id is taken for a retry, as it was then.
//!
//! Architecture invariant: a repeated `(client_id, batch_id)` is acknowledged with the first
//! commit's version only when its digest matches; otherwise nothing of it is applied and
//! the client gets `failed-precondition`.

use sha2::{Digest, Sha256};

use crate::commit::WriteError;
use crate::store::db_prefix;
use hearth_core::encoding::key::{write_string, Direction};
use hearth_core::mutation::Mutation;
use hearth_core::path::DocumentName;
use hearth_core::protocol::codec::encode_mutation;
use hearth_core::protocol::ErrorCode;

/// SHA-256 of a batch's canonical content.
pub type BatchDigest = [u8; 32];

/// Names what the digest covers, so it can never equal a digest of something else.
const DIGEST_DOMAIN: &[u8] = b"hearth batch 1";

/// The digest of a batch: its mutations in the wire encoding (each length-prefixed, in
/// order), its transaction reads (name, and the `update_version` read or none), and under
/// security rules the identity that wrote it (`writer`: the uid, or `None` for an anonymous
/// caller), so a record answers only the identity that wrote it: another caller reusing a
/// client id and batch id learns nothing of the first batch's outcome.
pub fn batch_digest(
    mutations: &[Mutation],
    reads: &[(DocumentName, Option<u64>)],
    writer: Option<Option<&str>>,
) -> BatchDigest {
    let mut h = Sha256::new();
    h.update(DIGEST_DOMAIN);
    h.update((mutations.len() as u64).to_be_bytes());
    let mut buf = Vec::new();
    for m in mutations {
        buf.clear();
        encode_mutation(m, &mut buf);
        h.update((buf.len() as u64).to_be_bytes());
        h.update(&buf);
    }
    h.update((reads.len() as u64).to_be_bytes());
    for (name, version) in reads {
        let path = name.to_string();
        h.update((path.len() as u64).to_be_bytes());
        h.update(path.as_bytes());
        match version {
            None => h.update([0]),
            Some(v) => {
                h.update([1]);
                h.update(v.to_be_bytes());
            }
        }
    }
    // Nothing for a relay without rules or a service token: their digests are as before.
    match writer {
        None => {}
        Some(None) => h.update(b"\x00anonymous"),
        Some(Some(uid)) => {
            h.update(b"\x01");
            h.update((uid.len() as u64).to_be_bytes());
            h.update(uid.as_bytes());
        }
    }
    h.finalize().into()
}

/// The `batches` key of a client's batch in database `db`.
pub fn batch_key(db: &str, client_id: &str, batch_id: u64) -> Vec<u8> {
    let mut k = db_prefix(db);
    write_string(client_id, Direction::Ascending, &mut k);
    k.extend_from_slice(&batch_id.to_be_bytes());
    k
}

/// A committed batch, as its `batches` record keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchRecord {
    /// The version the batch committed at: the answer to a retry.
    pub version: u64,
    /// The commit time, in microseconds since the epoch.
    pub micros: i64,
    /// The batch's digest; `None` in records written before digests were kept.
    pub digest: Option<BatchDigest>,
    /// The batch was refused for good (a precondition, a transaction conflict, a document
    /// too large): its retry gets the same refusal rather than being applied later, after
    /// batches the client sent behind it. `version` is then the database's version at the
    /// refusal.
    pub refused: Option<(ErrorCode, String)>,
}

impl BatchRecord {
    /// The record's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(48);
        out.extend_from_slice(&self.version.to_be_bytes());
        out.extend_from_slice(&self.micros.to_be_bytes());
        if let Some(d) = &self.digest {
            out.extend_from_slice(d);
            if let Some((code, message)) = &self.refused {
                out.push(code.tag());
                out.extend_from_slice(message.as_bytes());
            }
        }
        out
    }

    /// Reads a record: 16 bytes (no digest) or 48; anything else is corrupt.
    pub fn decode(b: &[u8]) -> Result<BatchRecord, String> {
        let word = |i: usize| -> [u8; 8] {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            a
        };
        let digest = match b.len() {
            16 => None,
            n if n >= 48 => {
                let mut d = [0u8; 32];
                d.copy_from_slice(&b[16..48]);
                Some(d)
            }
            n => {
                return Err(format!(
                    "a batch record of {n} bytes (16, or 48 and more, expected)"
                ))
            }
        };
        let refused = match b.get(48..) {
            None | Some([]) => None,
            Some([tag, message @ ..]) => {
                let code = ErrorCode::from_tag(*tag)
                    .ok_or_else(|| format!("a batch record with the unknown error code {tag}"))?;
                let message = String::from_utf8(message.to_vec())
                    .map_err(|_| "a batch record whose refusal is not UTF-8".to_owned())?;
                Some((code, message))
            }
        };
        Ok(BatchRecord {
            version: u64::from_be_bytes(word(0)),
            micros: i64::from_be_bytes(word(8)),
            digest,
            refused,
        })
    }

    /// The version of any record's bytes, as far as they go (for pruning, which must not
    /// stop at a corrupt record).
    pub fn version_of(b: &[u8]) -> u64 {
        crate::store::read_u64(b)
    }

    /// The time (µs since the epoch) of an encoded record: its commit's, or its refusal's
    /// (`i64::MIN` for a record too short to hold one).
    pub fn micros_of(b: &[u8]) -> i64 {
        b.get(8..16)
            .and_then(|m| <[u8; 8]>::try_from(m).ok())
            .map_or(i64::MIN, i64::from_be_bytes)
    }

    /// The answer to a batch that repeats this record's id: the first commit's version for
    /// a retry (same digest, or a record without one), else a refusal naming the id.
    pub fn answer(
        &self,
        digest: &BatchDigest,
        client_id: &str,
        batch_id: u64,
    ) -> Result<u64, WriteError> {
        match &self.digest {
            Some(d) if d != digest => Err(WriteError::new(
                ErrorCode::FailedPrecondition,
                format!(
                    "batch id {batch_id} of client `{client_id}` was already used by a different batch (or another caller): nothing of this batch was applied; give every batch its own id"
                ),
            )),
            _ => match &self.refused {
                Some((code, message)) => Err(WriteError::new(*code, message.clone())),
                None => Ok(self.version),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_core::value::{Map, Value};

    fn set(path: &str, n: i64) -> Mutation {
        let fields: Map = [("n".to_owned(), Value::Integer(n))].into_iter().collect();
        Mutation::set(DocumentName::parse(path).unwrap(), fields)
    }

    #[test]
    fn records_round_trip_and_old_records_still_load() {
        let d = batch_digest(&[set("a/b", 1)], &[], None);
        for digest in [None, Some(d)] {
            let r = BatchRecord {
                version: 7,
                micros: -3,
                digest,
                refused: None,
            };
            assert_eq!(BatchRecord::decode(&r.encode()), Ok(r));
        }
        let refused = BatchRecord {
            version: 9,
            micros: 4,
            digest: Some(d),
            refused: Some((ErrorCode::NotFound, "no document to update: a/b".into())),
        };
        assert_eq!(BatchRecord::decode(&refused.encode()), Ok(refused.clone()));
        assert_eq!(
            refused.answer(&d, "c", 1).map_err(|e| e.code),
            Err(ErrorCode::NotFound)
        );
        assert!(BatchRecord::decode(&[vec![1; 48], vec![250]].concat()).is_err());
        assert!(BatchRecord::decode(&[vec![1; 48], vec![5, 0xff]].concat()).is_err());
        for n in [0, 8, 15, 17, 47] {
            assert!(BatchRecord::decode(&vec![1; n]).is_err(), "{n} bytes");
        }
    }

    #[test]
    fn only_the_same_batch_is_a_retry() {
        let name = DocumentName::parse("a/b").unwrap();
        let base = batch_digest(&[set("a/b", 1)], &[], None);
        assert_eq!(base, batch_digest(&[set("a/b", 1)], &[], None));
        let others = [
            batch_digest(&[set("a/b", 2)], &[], None),
            batch_digest(&[set("a/c", 1)], &[], None),
            batch_digest(&[set("a/b", 1), set("a/b", 1)], &[], None),
            batch_digest(&[set("a/b", 1)], &[(name.clone(), None)], None),
            batch_digest(&[set("a/b", 1)], &[(name, Some(0))], None),
            batch_digest(&[], &[], None),
            batch_digest(&[set("a/b", 1)], &[], Some(None)),
            batch_digest(&[set("a/b", 1)], &[], Some(Some("alice"))),
            batch_digest(&[set("a/b", 1)], &[], Some(Some("bob"))),
        ];
        for (i, o) in others.iter().enumerate() {
            assert_ne!(&base, o, "{i}");
            for (j, p) in others.iter().enumerate().skip(i + 1) {
                assert_ne!(o, p, "{i} {j}");
            }
        }
        let r = BatchRecord {
            version: 5,
            micros: 0,
            digest: Some(base),
            refused: None,
        };
        assert_eq!(r.answer(&base, "c", 9), Ok(5));
        let e = r.answer(&others[0], "c", 9).unwrap_err();
        assert_eq!(e.code, ErrorCode::FailedPrecondition);
        assert!(e.message.contains("batch id 9"), "{}", e.message);
        let old = BatchRecord { digest: None, ..r };
        assert_eq!(old.answer(&others[0], "c", 9), Ok(5));
    }
}
