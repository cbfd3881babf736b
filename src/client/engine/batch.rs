//! A write batch of the queue: its mutations, the values its server timestamps replaced,
//! the key of the context that asked for it, its stored form, and batch ids.

use hearth_core::error::ErrorCode;
use std::collections::BTreeSet;

use crate::client::error::ClientError;
use hearth_core::mutation::{Mutation, MutationKind};
use hearth_core::path::{DocumentName, FieldPath};
use hearth_core::protocol::codec::{decode_mutation, encode_mutation};
use hearth_core::value::Value;

/// The next batch id of a context with tag `tag` whose last id was `last` (see
/// `Engine::next_batch_id`; a follower of the origin's engine takes its transactions' ids
/// this way too, so that one asked again after a leadership change is the same batch).
pub fn batch_id_after(tag: u8, last: u64) -> u64 {
    let tag = u64::from(tag) << 4;
    let time_based = ((js_sys::Date::now() as u64) << 11) | tag;
    let mut id = time_based.max(last + 1);
    if id & (0x7f << 4) != tag {
        id = (((id >> 11) + 1) << 11) | tag;
    }
    id
}

/// One pending write batch.
#[derive(Clone, Debug)]
pub struct Batch {
    /// The batch id: the queue's order, and the relay's key for recognising a retry.
    pub id: u64,
    /// The writes, applied in order and committed together.
    pub mutations: Vec<Mutation>,
    /// For each server timestamp transform (the index of its mutation, its field): the
    /// field's value before the mutation, for `serverTimestamps: 'previous'`.
    pub previous: Vec<(usize, FieldPath, Option<Value>)>,
    /// The key a context that asked the origin's engine to write it gave it (see
    /// `origin`): the same write asked again after a leadership change is found by it, not
    /// queued twice.
    pub key: Option<String>,
}

impl Batch {
    /// The documents the batch writes.
    pub(super) fn names(&self) -> BTreeSet<DocumentName> {
        hearth_core::sort::set_of(self.mutations.iter().map(|m| m.name.clone()))
    }

    /// The stored form (a value of the `mutations` store): the number of mutations, then
    /// each one's length and encoding, lengths as big-endian `u32`s.
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut out = (self.mutations.len() as u32).to_be_bytes().to_vec();
        for m in &self.mutations {
            let mut b = Vec::new();
            encode_mutation(m, &mut b);
            out.extend_from_slice(&(b.len() as u32).to_be_bytes());
            out.extend_from_slice(&b);
        }
        if !self.previous.is_empty() || self.key.is_some() {
            // Then the previous values, as update mutations of one field each (the
            // mutation codec carries a path and an optional value): their number, then each
            // one's mutation index, length and encoding. Batches without are as before.
            out.extend_from_slice(&(self.previous.len() as u32).to_be_bytes());
            for (i, path, value) in &self.previous {
                let carrier = Mutation::update(
                    self.mutations[*i].name.clone(),
                    vec![(path.clone(), value.clone())],
                );
                let mut b = Vec::new();
                encode_mutation(&carrier, &mut b);
                out.extend_from_slice(&(*i as u32).to_be_bytes());
                out.extend_from_slice(&(b.len() as u32).to_be_bytes());
                out.extend_from_slice(&b);
            }
        }
        if let Some(key) = &self.key {
            // Then the key: its length and its bytes.
            out.extend_from_slice(&(key.len() as u32).to_be_bytes());
            out.extend_from_slice(key.as_bytes());
        }
        out
    }

    /// Reads the stored form back; anything `encode` could not have written is `data-loss`.
    pub(super) fn decode(id: u64, bytes: &[u8]) -> Result<Batch, ClientError> {
        let corrupt = || {
            ClientError::new(
                ErrorCode::DataLoss,
                format!("stored write batch {id} is corrupt"),
            )
        };
        let take = |b: &[u8], at: usize| -> Option<u32> {
            Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
        };
        let n = take(bytes, 0).ok_or_else(corrupt)? as usize;
        let mut at = 4;
        let mut mutations = Vec::with_capacity(n.min(1024));
        for _ in 0..n {
            let len = take(bytes, at).ok_or_else(corrupt)? as usize;
            at += 4;
            let b = bytes.get(at..at + len).ok_or_else(corrupt)?;
            mutations.push(decode_mutation(b).map_err(|_| corrupt())?);
            at += len;
        }
        let mut previous = Vec::new();
        if at < bytes.len() {
            let k = take(bytes, at).ok_or_else(corrupt)? as usize;
            at += 4;
            for _ in 0..k {
                let i = take(bytes, at).ok_or_else(corrupt)? as usize;
                let len = take(bytes, at + 4).ok_or_else(corrupt)? as usize;
                at += 8;
                let b = bytes.get(at..at + len).ok_or_else(corrupt)?;
                at += len;
                let carrier = decode_mutation(b).map_err(|_| corrupt())?;
                let MutationKind::Update { mut fields } = carrier.kind else {
                    return Err(corrupt());
                };
                if i >= mutations.len() || fields.len() != 1 {
                    return Err(corrupt());
                }
                let (path, value) = fields.remove(0);
                previous.push((i, path, value));
            }
        }
        let mut key = None;
        if at < bytes.len() {
            let len = take(bytes, at).ok_or_else(corrupt)? as usize;
            let b = bytes.get(at + 4..at + 4 + len).ok_or_else(corrupt)?;
            key = Some(String::from_utf8(b.to_vec()).map_err(|_| corrupt())?);
            at += 4 + len;
        }
        if at != bytes.len() {
            return Err(corrupt());
        }
        Ok(Batch {
            id,
            mutations,
            previous,
            key,
        })
    }
}
