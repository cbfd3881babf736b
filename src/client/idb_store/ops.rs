//! The vocabulary of the store: its object stores, keys, and the operations of a write
//! batch, with the checks made before a batch touches IndexedDB.

use hearth_core::error::ErrorCode;
use wasm_bindgen::JsValue;
use web_sys::{IdbKeyRange, IdbObjectStore, IdbTransaction};

use super::js;
use crate::client::error::ClientError;

/// An object store of the schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Store {
    Documents,
    Remote,
    Mutations,
    Targets,
    Meta,
}

impl Store {
    pub const ALL: [Store; 5] = [
        Store::Documents,
        Store::Remote,
        Store::Mutations,
        Store::Targets,
        Store::Meta,
    ];

    /// The object store's name in IndexedDB.
    pub fn name(self) -> &'static str {
        match self {
            Store::Documents => "documents",
            Store::Remote => "remote",
            Store::Mutations => "mutations",
            Store::Targets => "targets",
            Store::Meta => "meta",
        }
    }

    /// The one kind of key the store holds.
    fn key_kind(self) -> &'static str {
        match self {
            Store::Documents | Store::Remote | Store::Targets => "bytes",
            Store::Mutations => "number",
            Store::Meta => "text",
        }
    }
}

/// A key of a store: bytes for documents, remote documents and targets (encoded queries); a
/// number (an id: an integer in `[0, 2^53]`) for mutations; text for meta.
#[derive(Clone, Debug, PartialEq)]
pub enum Key {
    Bytes(Vec<u8>),
    Number(f64),
    Text(String),
}

impl Key {
    fn kind(&self) -> &'static str {
        match self {
            Key::Bytes(_) => "bytes",
            Key::Number(_) => "number",
            Key::Text(_) => "text",
        }
    }
}

/// One change of a [`IdbStore::write`] batch.
#[derive(Clone, Debug, PartialEq)]
pub enum WriteOp {
    /// Puts a document of the local view: its encoded bytes, its index entry keys (which
    /// replace the previous record's) and when it was last used (milliseconds since the
    /// epoch, for the cache's least-recently-used eviction).
    PutDocument {
        key: Vec<u8>,
        value: Vec<u8>,
        index_keys: Vec<Vec<u8>>,
        used: f64,
    },
    /// Puts a value into any store but `documents` (whose records need [`WriteOp::PutDocument`]).
    Put {
        store: Store,
        key: Key,
        value: Vec<u8>,
    },
    Delete {
        store: Store,
        key: Key,
    },
    /// Deletes the binary keys in `[start, end)`; nothing when `start == end`. IndexedDB
    /// refuses `start > end` (`invalid-argument`, and the batch is not applied).
    DeleteRange {
        store: Store,
        start: Vec<u8>,
        end: Vec<u8>,
    },
}

impl WriteOp {
    pub(super) fn store(&self) -> Store {
        match self {
            WriteOp::PutDocument { .. } => Store::Documents,
            WriteOp::Put { store, .. }
            | WriteOp::Delete { store, .. }
            | WriteOp::DeleteRange { store, .. } => *store,
        }
    }

    /// Checks the key against the store's key type before any transaction starts.
    pub(super) fn check(&self) -> Result<(), String> {
        let store = self.store();
        let key = match self {
            WriteOp::PutDocument { .. } => return Ok(()),
            WriteOp::Put {
                store: Store::Documents,
                ..
            } => return Err("`documents` takes document records (PutDocument), not values".into()),
            WriteOp::Put { key, .. } | WriteOp::Delete { key, .. } => key,
            WriteOp::DeleteRange { .. } => {
                return match store.key_kind() {
                    "bytes" => Ok(()),
                    kind => Err(format!(
                        "a range delete needs binary keys, but `{}` has {kind} keys",
                        store.name()
                    )),
                };
            }
        };
        if key.kind() != store.key_kind() {
            return Err(format!(
                "`{}` has {} keys, not {}",
                store.name(),
                store.key_kind(),
                key.kind()
            ));
        }
        match key {
            Key::Number(n) if !js::is_id(*n) => Err(format!(
                "numeric key {n} of `{}` is not an id (an integer in [0, 2^53])",
                store.name()
            )),
            _ => Ok(()),
        }
    }
}

/// Why [`apply`] stopped before making every request.
pub(super) enum Stopped {
    /// Operation `i` could not be made (its request threw).
    Request(usize, JsValue),
    /// Operation `i` was refused by [`WriteOp::check`], or could not be produced.
    Refused(usize, ClientError),
}

/// Makes the requests of `ops` on `tx` (whose scope is `scope`, sorted), taking each op from
/// the iterator just before its request: IndexedDB starts on the first requests while later
/// ops are still being computed. Each op goes to `made` once its request is made. The
/// requests are not awaited: a failing one aborts the transaction, which the caller awaits.
pub(super) fn apply(
    tx: &IdbTransaction,
    scope: &[Store],
    ops: impl IntoIterator<Item = Result<WriteOp, ClientError>>,
    made: &mut dyn FnMut(WriteOp),
) -> Result<(), Stopped> {
    let stores: Vec<IdbObjectStore> = scope
        .iter()
        .map(|s| tx.object_store(s.name()))
        .collect::<Result<_, _>>()
        .map_err(|e| Stopped::Request(0, e))?;
    for (i, op) in ops.into_iter().enumerate() {
        let op = op.map_err(|e| Stopped::Refused(i, e))?;
        op.check()
            .map_err(|m| Stopped::Refused(i, ClientError::invalid(m)))?;
        let Ok(at) = scope.binary_search(&op.store()) else {
            let m = format!("`{}` is not in the transaction's scope", op.store().name());
            return Err(Stopped::Refused(
                i,
                ClientError::new(ErrorCode::Internal, m),
            ));
        };
        let store = &stores[at];
        let request = match &op {
            WriteOp::PutDocument {
                key,
                value,
                index_keys,
                used,
            } => store.put_with_key(
                &js::document_record(value, index_keys, *used),
                &js::bytes(key),
            ),
            WriteOp::Put { key, value, .. } => store.put_with_key(&js::value(value), &js::key(key)),
            WriteOp::Delete { key, .. } => store.delete(&js::key(key)),
            WriteOp::DeleteRange { start, end, .. } if start == end => continue,
            WriteOp::DeleteRange { start, end, .. } => {
                IdbKeyRange::bound_with_lower_open_and_upper_open(
                    &js::bytes(start),
                    &js::bytes(end),
                    false,
                    true,
                )
                .and_then(|range| store.delete(&range))
            }
        };
        request.map_err(|e| Stopped::Request(i, e))?;
        made(op);
    }
    Ok(())
}
