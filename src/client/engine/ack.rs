//! The relay's acknowledgements of queued batches: each batch leaves the queue, and the
//! documents it wrote take the server's state at its commit (or an estimate of it).
//!
//! Acknowledgements that arrive together are taken together: batches writing distinct
//! documents share one read of the stored states and one write transaction. (Taken one by
//! one, each made a read and a write behind the page's own writes, and at a hundred writes a
//! second the acknowledgements fell behind: the queue grew, and with it the work of every
//! snapshot that asks which documents have pending writes.)

use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use super::queue::writes_whole_document;
use super::server::{decode_remote, encode_remote, remote_is_unknown};
use super::{now_micros, Engine, EngineEvent};
use crate::client::error::ClientError;
use crate::client::idb_store::{Key, Store, WriteOp};
use hearth_core::document::Document;
use hearth_core::index::keys::document_key;
use hearth_core::mutation::{ApplyContext, Mutation, UnknownBase};
use hearth_core::path::DocumentName;
use hearth_core::value::Timestamp;

/// One acknowledgement: the batch id and its commit version.
pub type Ack = (u64, u64);

/// What acknowledging a group of batches makes: the writes, the documents whose local
/// view changed, and those whose view is only an estimate (see [`Engine::acknowledge`]).
#[derive(Default)]
struct AckEffects {
    /// The write transaction's operations.
    ops: Vec<WriteOp>,
    /// The documents' new local views, for listeners.
    changed: Vec<(DocumentName, Option<Document>)>,
    /// Documents to read back from the relay.
    stale: Vec<DocumentName>,
}

impl Engine {
    /// The relay acknowledged these batches, in sending order, each at its commit version.
    /// Returns the documents whose local view is now only an estimate of the server's, for
    /// the sync layer to read again.
    ///
    /// For each document a batch wrote: when the server's state at or after the commit has
    /// arrived already (a listen can deliver the committed document before the
    /// acknowledgement), the local view is rebuilt over it without the batch, which it
    /// contains (re-applying it would count an increment twice). Otherwise the local view
    /// stays; it is exact when the batch wrote the document whole (a `set` without
    /// transforms, a delete) and no server state arrived while it was pending, and an
    /// estimate in every other case (a merge or update over a possibly older base, a
    /// transform, a deletion received meanwhile whose order against the commit is unknown).
    ///
    /// The batches' callers hear of the commit even should storing its effects fail: the
    /// batches then stay stored, are sent again on a later connection, and are answered
    /// with the same commit (the relay's idempotency record).
    pub async fn acknowledge(self: &Rc<Self>, acks: &[Ack]) -> Vec<DocumentName> {
        let mut stale = Vec::new();
        for group in self.ack_groups(acks) {
            stale.extend(self.acknowledge_group(&group).await);
        }
        stale
    }

    /// `acks` cut, in order, into runs whose batches write distinct documents: within a
    /// run, acknowledging them together is acknowledging them one after another.
    fn ack_groups(&self, acks: &[Ack]) -> Vec<Vec<Ack>> {
        let mut groups: Vec<Vec<Ack>> = Vec::new();
        let mut written: HashSet<DocumentName> = HashSet::new();
        let mut run: Vec<Ack> = Vec::new();
        for &ack in acks {
            let names = self.queued_names(ack.0).unwrap_or_default();
            if names.iter().any(|n| written.contains(n)) {
                groups.push(std::mem::take(&mut run));
                written.clear();
            }
            written.extend(names);
            run.push(ack);
        }
        if !run.is_empty() {
            groups.push(run);
        }
        groups
    }

    /// Acknowledges batches that write distinct documents: one read, one write transaction.
    async fn acknowledge_group(self: &Rc<Self>, acks: &[Ack]) -> Vec<DocumentName> {
        let guard = self.lock.lock().await;
        let mut fx = AckEffects::default();
        let mut acked: Vec<(super::Batch, u64)> = Vec::new();
        for &(id, version) in acks {
            // A batch not in this context's queue was taken by another context sharing it:
            // its stored copy goes too, should this context's queue have missed it.
            fx.ops.push(WriteOp::Delete {
                store: Store::Mutations,
                key: Key::Number(id as f64),
            });
            let found = self.writes.borrow().get(id).cloned();
            if let Some(batch) = found {
                fx.ops.extend(self.dequeue(id, &Ok(version)));
                acked.push((batch, version));
            }
        }
        let effects = self.ack_documents(&acked, &mut fx).await;
        let stored = match effects {
            Ok(()) => match self.store.begin_write_relaxed(fx.ops).await {
                Ok(in_flight) => {
                    // The next writer may go on: IndexedDB orders its reads after this
                    // transaction.
                    drop(guard);
                    self.local_changed(&fx.changed).await;
                    match in_flight {
                        Some(in_flight) => in_flight.done().await,
                        None => Ok(()),
                    }
                }
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        if stored.is_err() {
            // Nothing was stored: listeners go back to what is (the batches are still
            // stored, and sent again on a later connection).
            let names = acked.iter().flat_map(|(b, _)| b.names());
            self.restore(names.map(|n| (n, None)).collect()).await;
        }
        for &(id, version) in acks {
            self.settle_waiters(id, Ok(version));
            self.events.emit(&EngineEvent::Settled(id, &Ok(version)));
        }
        fx.stale
    }

    /// Every document the `acked` batches wrote takes its server state (see
    /// [`Engine::acknowledge`]); their writes and changes go into `fx`.
    async fn ack_documents(
        self: &Rc<Self>,
        acked: &[(super::Batch, u64)],
        fx: &mut AckEffects,
    ) -> Result<(), ClientError> {
        // Each document's mutations, in batch order, with its batch's commit version.
        let mut by_name: HashMap<DocumentName, (Vec<&Mutation>, u64)> = HashMap::new();
        let mut names: Vec<DocumentName> = Vec::new();
        for (batch, version) in acked {
            for m in &batch.mutations {
                let entry = by_name.entry(m.name.clone()).or_insert_with(|| {
                    names.push(m.name.clone());
                    (Vec::new(), *version)
                });
                entry.0.push(m);
            }
        }
        let states = self.stored_states(&names).await?;
        for (n, (remote, local)) in names.into_iter().zip(states) {
            let (mutations, version) = by_name.remove(&n).unwrap_or_default();
            self.ack_document(n, (remote, local), &mutations, version, fx)?;
        }
        Ok(())
    }

    /// Document `n`, written by `mutations` of a batch committed at `version`, takes its
    /// server state; `stored` is its kept server base and its local view.
    fn ack_document(
        &self,
        n: DocumentName,
        (remote, local): (Option<Vec<u8>>, Option<Document>),
        mutations: &[&Mutation],
        version: u64,
        fx: &mut AckEffects,
    ) -> Result<(), ClientError> {
        let key = document_key(&n);
        let base = match &remote {
            Some(b) if !remote_is_unknown(b) => Some(decode_remote(b)?),
            _ => None,
        };
        let received = (self.notes.borrow_mut().received_while_pending).remove(&n);
        let whole = mutations.iter().all(|m| writes_whole_document(m));
        let pending = self.has_pending(&n);
        match base {
            // The relay's state after the commit has arrived already (a listen, a read): it
            // includes the batch.
            Some(known)
                if known
                    .as_ref()
                    .map_or_else(|| self.absent_version(&n), |d| d.update_version)
                    >= version =>
            {
                let rebuilt = self.rebuild(&n, known)?;
                if rebuilt != local {
                    fx.ops.push(self.doc_op(&n, rebuilt.as_ref())?);
                }
                fx.changed.push((n.clone(), rebuilt));
            }
            _ => {
                // The server's state at the commit, estimated: the batch over the state
                // held, at `version` (so that older states arriving later are ignored).
                // Exact for a whole write; else read back (`stale`). `None`: unknown (never
                // seen, and not written whole).
                let estimate = estimate(&remote, base, mutations, version);
                if received || !whole || estimate.is_none() {
                    fx.stale.push(n.clone());
                }
                if let Some(server) = &estimate {
                    self.note_server_state(&n, server.as_ref(), version);
                }
                match estimate {
                    Some(server) if pending => {
                        fx.ops.push(WriteOp::Put {
                            store: Store::Remote,
                            key: Key::Bytes(key.clone()),
                            value: encode_remote(server.as_ref())?,
                        });
                        let rebuilt = self.rebuild(&n, server)?;
                        if rebuilt != local {
                            fx.ops.push(self.doc_op(&n, rebuilt.as_ref())?);
                        }
                        fx.changed.push((n.clone(), rebuilt));
                    }
                    Some(server) => {
                        if server != local {
                            fx.ops.push(self.doc_op(&n, server.as_ref())?);
                        }
                        fx.changed.push((n.clone(), server));
                    }
                    None => fx.changed.push((n.clone(), local)),
                }
            }
        }
        if !pending {
            fx.ops.push(WriteOp::Delete {
                store: Store::Remote,
                key: Key::Bytes(key),
            });
        } else if received {
            (self.notes.borrow_mut().received_while_pending).insert(n);
        }
        Ok(())
    }
}

/// The server's state of a document after `mutations` committed at `version` over the
/// kept base (`remote`, decoded as `base`): `None` when unknown.
fn estimate(
    remote: &Option<Vec<u8>>,
    base: Option<Option<Document>>,
    mutations: &[&Mutation],
    version: u64,
) -> Option<Option<Document>> {
    let ctx = ApplyContext {
        commit_version: version,
        commit_time: Timestamp::from_micros(now_micros())
            .unwrap_or_else(|_| Timestamp::new(0, 0).expect("epoch")),
    };
    let mut estimate = match remote {
        Some(b) if !remote_is_unknown(b) => Some(base.flatten()),
        _ => None,
    };
    for m in mutations {
        estimate = match estimate {
            // A mutation the relay applied cannot fail over the right base; over an older
            // one it may: the state stays, to be read back.
            Some(doc) => m.apply(doc.as_ref(), &ctx).ok().or(Some(doc)),
            None => match m.apply_to_unknown(&ctx) {
                Ok(UnknownBase::Becomes(doc)) => Some(doc),
                _ => None,
            },
        };
    }
    estimate
}
