//! Writes another context of the origin asked the engine for (see `origin`): each carries
//! a key, kept with its batch; the answers of keyed batches that left the queue are kept in
//! memory and stored (`meta` records `answered:<key>`, pruned after ten minutes), so that a
//! write asked again after a leadership change gets its answer instead of being queued a
//! second time; and a keyed batch the previous leader queued after this engine read the
//! queue is taken in.

use hearth_core::error::ErrorCode;
use std::rc::Rc;

use super::{Batch, Engine};
use crate::client::error::ClientError;
use crate::client::idb_store::{Key, Store, WriteOp};

/// A write another context of the origin asked this engine for (see `Engine::write_keyed`).
pub struct Keyed {
    /// Names the write: the same write asked again has the same key.
    pub key: String,
    /// Whether it is asked again (after a leadership change): it may have been answered.
    pub again: bool,
    /// Runs with the batch id once the write is queued, before the relay can answer it.
    pub landed: Box<dyn FnOnce(u64)>,
}

/// The `meta` records of answered keyed writes: `answered:<key>`.
pub(super) const ANSWERED_PREFIX: &str = "answered:";

/// A keyed write's answer as stored: the time (ms, f64), then `0` and the commit version, or
/// `1`, the error code's tag and its message.
pub(super) fn encode_answer(answer: &Result<u64, ClientError>) -> Vec<u8> {
    let mut out = js_sys::Date::now().to_be_bytes().to_vec();
    match answer {
        Ok(v) => {
            out.push(0);
            out.extend_from_slice(&v.to_be_bytes());
        }
        Err(e) => {
            out.push(1);
            out.push(e.code().tag());
            out.extend_from_slice(e.message.as_bytes());
        }
    }
    out
}

/// The answer of [`encode_answer`]'s record (`None`: not one).
fn decode_answer(b: &[u8]) -> Option<Result<u64, ClientError>> {
    match b.get(8)? {
        0 => Some(Ok(u64::from_be_bytes(b.get(9..17)?.try_into().ok()?))),
        1 => {
            let code = ErrorCode::from_tag(*b.get(9)?).unwrap_or(ErrorCode::Internal);
            let message = String::from_utf8_lossy(b.get(10..)?).into_owned();
            Some(Err(ClientError::new(code, message)))
        }
        _ => None,
    }
}

/// How long a stored answer is kept (10 minutes).
const ANSWER_KEPT_MS: f64 = 600_000.0;

/// When a stored answer was recorded (ms), for pruning.
fn answer_time(b: &[u8]) -> Option<f64> {
    Some(f64::from_be_bytes(b.get(..8)?.try_into().ok()?))
}

impl Engine {
    /// Deletes the stored answers of keyed writes older than `ANSWER_KEPT_MS`: a write is
    /// asked again within moments of a leadership change.
    pub(super) async fn prune_answers(&self) {
        let Ok(rows) = self.store.all(Store::Meta).await else {
            return;
        };
        let now = js_sys::Date::now();
        let old: Vec<WriteOp> = rows
            .into_iter()
            .filter_map(|(k, v)| {
                let key = String::from_utf8(k).ok()?;
                let old = key.starts_with(ANSWERED_PREFIX)
                    && answer_time(&v).is_none_or(|t| now - t > ANSWER_KEPT_MS);
                old.then_some(WriteOp::Delete {
                    store: Store::Meta,
                    key: Key::Text(key),
                })
            })
            .collect();
        if !old.is_empty() {
            let _ = self.store.write(old).await;
        }
    }

    /// The batch of keyed write `key` if the stored queue holds it though this engine's does
    /// not (the previous leader queued it after this engine read the queue): it is taken in,
    /// with its documents, as another context's change is. Its id, if so.
    pub(super) async fn adopt_stored(self: &Rc<Self>, key: &str) -> Option<u64> {
        let rows = self.store.all(Store::Mutations).await.ok()?;
        let batch = rows.into_iter().find_map(|(k, v)| {
            let id = u64::from_be_bytes(k.get(..8)?.try_into().ok()?);
            let b = Batch::decode(id, &v).ok()?;
            (b.key.as_deref() == Some(key)).then_some(b)
        })?;
        self.external_change(batch.names().into_iter().collect())
            .await;
        self.writes.borrow().keyed(key)
    }

    /// The answer a leader of this origin stored for keyed write `key`, if any.
    pub(super) async fn stored_answer(&self, key: &str) -> Option<Result<u64, ClientError>> {
        let kept = self.writes.borrow().answered(key);
        if kept.is_some() {
            return kept;
        }
        let bytes = self
            .store
            .get_meta(&format!("{ANSWERED_PREFIX}{key}"))
            .await
            .ok()??;
        decode_answer(&bytes)
    }
}
