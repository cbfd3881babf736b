//! The server's side of the local view: documents the relay sent (listen deltas, reads)
//! replace the stored server base (`remote`) of documents with pending writes, which are
//! rebuilt over it, or become the local document directly; and index definitions from the
//! relay's Welcome re-index the local view.

use hearth_core::error::ErrorCode;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use super::{now_micros, reindex, Engine};
use crate::client::cache::stored_bytes;
use crate::client::error::ClientError;
use crate::client::idb_store::{Key, Store, WriteOp};
use hearth_core::document::Document;
use hearth_core::encoding::document::{decode_document, encode_document};
use hearth_core::index::config::IndexFile;
use hearth_core::index::def::IndexCatalog;
use hearth_core::index::keys::document_key;
use hearth_core::kv::Table;
use hearth_core::mutation::ApplyContext;
use hearth_core::path::DocumentName;
use hearth_core::value::Timestamp;

impl Engine {
    /// Replaces the index definitions (from the relay's Welcome), rebuilding local entries.
    pub async fn set_indexes(self: &Rc<Self>, file: IndexFile) -> Result<(), ClientError> {
        if *self.catalog.borrow().file() == file {
            return Ok(());
        }
        let _g = self.lock.lock().await;
        let catalog = IndexCatalog::from_file(&file);
        reindex(&self.store, &catalog).await?;
        *self.catalog.borrow_mut() = Rc::new(catalog);
        Ok(())
    }

    /// Re-applies the pending batches touching `name` over the server `base`.
    pub(super) fn rebuild(
        &self,
        name: &DocumentName,
        base: Option<Document>,
    ) -> Result<Option<Document>, ClientError> {
        let ctx = ApplyContext {
            commit_version: 0,
            commit_time: Timestamp::from_micros(now_micros())
                .unwrap_or_else(|_| Timestamp::new(0, 0).expect("epoch")),
        };
        let mut doc = base;
        for b in self.writes.borrow().batches() {
            for m in b.mutations.iter().filter(|m| m.name == *name) {
                // A pending mutation that no longer applies (e.g. its precondition) is left to
                // the relay to refuse; locally the document keeps its prior state.
                if let Ok(d) = m.apply(doc.as_ref(), &ctx) {
                    doc = d;
                }
            }
        }
        Ok(doc)
    }

    /// Server states of documents (from a listen or a read) enter the local view.
    /// `read_version` is the version they were read at (a listen's snapshot, a read's),
    /// 0 when unknown.
    ///
    /// The server state held for a document only moves forward: a state older than the one
    /// held (a document's `update_version`; for an absence, `read_version`) is ignored, as
    /// a listen and a read, or an acknowledgement and a listen, can answer out of order.
    ///
    /// A read (`listen` false) leaves documents with pending writes alone: it may already
    /// contain a batch whose acknowledgement has not arrived, which the rebuild would apply
    /// a second time (the sync layer holds a listen's snapshot back until the batches sent
    /// before it are answered, but a read's answer cannot wait); the acknowledgement and the
    /// listens bring their server state instead.
    pub async fn server_documents(
        self: &Rc<Self>,
        docs: Vec<(DocumentName, Option<Document>)>,
        read_version: u64,
        listen: bool,
    ) -> Result<(), ClientError> {
        if docs.is_empty() {
            return Ok(());
        }
        // One state per document (a snapshot can carry one from several targets, or from
        // several changes of one): the newest, else the last.
        let mut at: HashMap<DocumentName, usize> = HashMap::new();
        let mut unique: Vec<(DocumentName, Option<Document>)> = Vec::with_capacity(docs.len());
        for (name, doc) in docs {
            match at.get(&name) {
                Some(&i) => {
                    let kept = unique[i].1.as_ref().map_or(0, |d| d.update_version);
                    if doc.as_ref().map_or(u64::MAX, |d| d.update_version) >= kept {
                        unique[i].1 = doc;
                    }
                }
                None => {
                    at.insert(name.clone(), unique.len());
                    unique.push((name, doc));
                }
            }
        }
        let docs = unique;
        let guard = self.lock.lock().await;
        let mut ops = Vec::new();
        let mut changed = Vec::new();
        {
            let read = self.store.read().await?;
            let keys: Vec<Vec<u8>> = docs.iter().map(|(n, _)| document_key(n)).collect();
            let olds = hearth_core::kv::KvRead::get_many(&read, Table::Documents, &keys)
                .await
                .map_err(|e| ClientError::new(ErrorCode::Unavailable, e.to_string()))?;
            let pending = self.pending_names();
            let pending_keys: Vec<Vec<u8>> = docs
                .iter()
                .filter(|(n, _)| pending.contains(n))
                .map(|(n, _)| document_key(n))
                .collect();
            let mut remotes = read.get_many_remote(&pending_keys).await?.into_iter();
            for ((name, server), old) in docs.into_iter().zip(olds) {
                let old = old
                    .map(|b| {
                        decode_document(&b)
                            .map_err(|e| ClientError::new(ErrorCode::DataLoss, e.to_string()))
                    })
                    .transpose()?;
                let is_pending = pending.contains(&name);
                // The version of the server state held: the kept base's with a pending
                // write, else the local document's (a local estimate has 0).
                let held = if is_pending {
                    let kept = remotes.next().flatten();
                    if !listen {
                        continue;
                    }
                    match kept {
                        Some(b) if !remote_is_unknown(&b) => match decode_remote(&b)? {
                            Some(d) => d.update_version,
                            None => self.absent_version(&name),
                        },
                        _ => 0,
                    }
                } else {
                    old.as_ref()
                        .map_or_else(|| self.absent_version(&name), |d| d.update_version)
                };
                let older = match &server {
                    Some(s) => s.update_version < held,
                    None => read_version != 0 && read_version < held,
                };
                if older {
                    continue;
                }
                self.note_server_state(&name, server.as_ref(), read_version);
                let local = if is_pending {
                    (self.notes.borrow_mut().received_while_pending).insert(name.clone());
                    ops.push(WriteOp::Put {
                        store: Store::Remote,
                        key: Key::Bytes(document_key(&name)),
                        value: encode_remote(server.as_ref())?,
                    });
                    self.rebuild(&name, server)?
                } else {
                    server
                };
                if old != local {
                    ops.push(self.doc_op(&name, local.as_ref())?);
                    changed.push((name, local));
                }
            }
        }
        let written = ops.iter().map(stored_bytes).sum();
        // Listeners see the documents first: making IndexedDB's requests for a large result
        // takes a while (each record is cloned). Reads the app calls meanwhile wait for the
        // write's transaction (a write ticket), and are ordered after it by IndexedDB.
        let ticket = self.issue_write();
        let refill = self.apply_changed(&changed);
        // The relay's documents (and the kept bases of pending ones) can be fetched again.
        let in_flight = self.store.begin_write_relaxed(ops).await;
        self.landed(ticket, None);
        // The next writer may go on: IndexedDB orders its reads after this transaction.
        drop(guard);
        let in_flight = match in_flight {
            Ok(in_flight) => in_flight,
            Err(e) => {
                self.restore(changed).await;
                return Err(e);
            }
        };
        self.finish_changed(&changed, refill, true).await;
        if let Some(in_flight) = in_flight {
            if let Err(e) = in_flight.done().await {
                self.restore(changed).await;
                return Err(e);
            }
        }
        self.wrote(written);
        Ok(())
    }
}

impl Engine {
    /// Nothing of a server write was stored: listeners go back to the local view of the
    /// documents it changed.
    pub(super) async fn restore(self: &Rc<Self>, changed: Vec<(DocumentName, Option<Document>)>) {
        let mut restored = Vec::with_capacity(changed.len());
        for (name, _) in changed {
            if let Ok(doc) = self.local_doc(&name).await {
                restored.push((name, doc));
            }
        }
        self.local_changed(&restored).await;
    }

    /// The version document `name` is known absent at by the server (0: not known).
    pub(super) fn absent_version(&self, name: &DocumentName) -> u64 {
        (self.notes.borrow().absent_at.get(name).copied()).unwrap_or(0)
    }

    /// Notes a server state taken for `name`: an absence at `version` (0: unknown) is kept
    /// (see `absent_at`), a present document replaces it.
    pub(super) fn note_server_state(
        &self,
        name: &DocumentName,
        state: Option<&Document>,
        version: u64,
    ) {
        let mut notes = self.notes.borrow_mut();
        let absent = &mut notes.absent_at;
        match state {
            Some(_) => {
                absent.remove(name);
            }
            None if version > 0 => {
                let v = absent.entry(name.clone()).or_insert(version);
                *v = (*v).max(version);
            }
            None => {}
        }
    }

    /// A snapshot at `version` was applied: absences known at or before it no longer need
    /// guarding (later snapshots are newer).
    pub fn forget_absent(&self, version: u64) {
        (self.notes.borrow_mut().absent_at).retain(|_, v| *v > version);
    }
}

/// What the engine knows of the server's state beyond the local view.
#[derive(Default)]
pub(super) struct ServerNotes {
    /// Documents with pending writes whose server state arrived while they were pending:
    /// when their batch is acknowledged, the order of that state and the commit is unknown
    /// (see `Engine::acknowledge`).
    pub(super) received_while_pending: HashSet<DocumentName>,
    /// Documents the server state holds as absent, with the version they are known absent
    /// at (a deletion's acknowledgement, a listen's `Delete`, a read): an older state of one
    /// arriving later (a snapshot the fan-out publishes after the acknowledgement, a read
    /// answered before the commit) is ignored, as it would bring a deleted document back.
    /// Kept until a snapshot at or after that version is applied (`forget_absent`).
    absent_at: HashMap<DocumentName, u64>,
}

/// The `remote` value of a document this client had never seen when it wrote it blindly (see
/// `queue`): rebuilt like an absent base, but a later write over it is still left to the relay.
pub(super) const REMOTE_UNKNOWN: [u8; 1] = [2];

/// Whether a stored `remote` value is [`REMOTE_UNKNOWN`].
pub(super) fn remote_is_unknown(b: &[u8]) -> bool {
    b == REMOTE_UNKNOWN
}

/// A server base document: present (encoded) or absent (one zero byte).
pub(super) fn encode_remote(doc: Option<&Document>) -> Result<Vec<u8>, ClientError> {
    match doc {
        Some(d) => {
            let mut v = vec![1u8];
            v.extend(encode_document(d).map_err(|e| ClientError::invalid(e.to_string()))?);
            Ok(v)
        }
        None => Ok(vec![0u8]),
    }
}

/// The server base document stored by `encode_remote` (absent for [`REMOTE_UNKNOWN`]).
pub(super) fn decode_remote(b: &[u8]) -> Result<Option<Document>, ClientError> {
    match b.split_first() {
        Some((1, rest)) => decode_document(rest)
            .map(Some)
            .map_err(|e| ClientError::new(ErrorCode::DataLoss, e.to_string())),
        _ => Ok(None),
    }
}
