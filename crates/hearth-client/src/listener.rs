//! Real-time queries: the [`Listener`] a caller reads [`ListenSnapshot`]s from, and the
//! `Target` the reader task keeps for it, which buffers a target's changes until the
//! relay's `Snapshot` says every target of the connection is consistent.

use tokio::sync::mpsc;

use crate::client::Client;
use crate::error::ClientError;
use hearth_core::document::Document;
use hearth_core::protocol::existence::NameFilter;
use hearth_core::protocol::{ClientMessage, DocumentChange, TargetChangeKind};
use hearth_core::query::matcher::Matcher;

/// One consistent state of a listened query.
#[derive(Clone, Debug, PartialEq)]
pub struct ListenSnapshot {
    /// Every target of the connection is consistent at this version.
    pub version: u64,
    /// The whole current result, in query order.
    pub documents: Vec<Document>,
    /// The changes the relay sent since the previous snapshot, as sent.
    pub changed: Vec<DocumentChange>,
    /// Whether the relay replaced the result (a `Reset`) instead of sending a delta.
    pub reset: bool,
    /// With a resumed delta: the relay's count of the whole result and the filter of its
    /// names (`ServerMessage::Existence`), for checking what the resume started from.
    pub existence: Option<(u64, NameFilter)>,
}

/// Where the reader task delivers a target's snapshots (or the error that ended it).
pub(crate) type SnapshotTx = mpsc::UnboundedSender<Result<ListenSnapshot, ClientError>>;

/// One listened query, as the reader task keeps it.
pub(crate) struct Target {
    /// The listener's end of the channel; closed when the listener is dropped.
    tx: SnapshotTx,
    /// Orders the documents of deltas into the result.
    matcher: Matcher,
    /// The result as of the last snapshot delivered.
    docs: Vec<Document>,
    /// Changes received since that snapshot; after a `Reset`, only the reset and what
    /// followed it.
    buffered: Vec<DocumentChange>,
    /// `Some(n)`: a `Reset` arrived; its documents are the first `n` of `buffered`.
    reset: Option<usize>,
    /// A `TargetChange` arrived since the last snapshot (possibly an empty one).
    dirty: bool,
    /// The `Existence` that came with the buffered changes.
    existence: Option<(u64, NameFilter)>,
}

impl Target {
    /// A target whose result is `docs` so far (empty, or what a resume starts from).
    pub(crate) fn new(tx: SnapshotTx, matcher: Matcher, docs: Vec<Document>) -> Target {
        Target {
            tx,
            matcher,
            docs,
            buffered: Vec::new(),
            reset: None,
            dirty: false,
            existence: None,
        }
    }

    /// Keeps an `Existence` for the next snapshot.
    pub(crate) fn existence(&mut self, count: u64, filter: NameFilter) {
        self.existence = Some((count, filter));
        self.dirty = true;
    }

    /// Buffers a `TargetChange` until the next `Snapshot`: a `Reset` replaces what was
    /// buffered, a delta adds to it.
    pub(crate) fn buffer(&mut self, kind: TargetChangeKind, changes: Vec<DocumentChange>) {
        if kind == TargetChangeKind::Reset {
            self.buffered = changes;
            self.reset = Some(self.buffered.len());
        } else {
            self.buffered.extend(changes);
        }
        self.dirty = true;
    }

    /// Whether a `TargetChange` arrived since the last snapshot.
    pub(crate) fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// Applies the buffered changes and delivers the snapshot at `version`; false when the
    /// listener is gone.
    pub(crate) fn deliver(&mut self, version: u64) -> bool {
        let snap = self.take_snapshot(version);
        self.tx.send(Ok(snap)).is_ok()
    }

    /// Ends the target: its listener's next call returns `err`.
    pub(crate) fn fail(self, err: ClientError) {
        let _ = self.tx.send(Err(err));
    }

    /// Applies the buffered changes; the snapshot to deliver at `version`.
    fn take_snapshot(&mut self, version: u64) -> ListenSnapshot {
        let changed = std::mem::take(&mut self.buffered);
        let reset = self.reset.take();
        let mut rest = changed.as_slice();
        if let Some(n) = reset {
            // A reset comes in query order: keep the relay's order as it is.
            self.docs = changed[..n]
                .iter()
                .filter_map(|c| match c {
                    DocumentChange::Upsert(d) => Some(d.clone()),
                    _ => None,
                })
                .collect();
            rest = &changed[n..];
        }
        for c in rest {
            let name = c.name();
            if let Some(p) = self.docs.iter().position(|d| d.name == *name) {
                self.docs.remove(p);
            }
            if let DocumentChange::Upsert(d) = c {
                let p = self
                    .docs
                    .partition_point(|x| self.matcher.compare(x, d) == std::cmp::Ordering::Less);
                self.docs.insert(p, d.clone());
            }
        }
        self.dirty = false;
        ListenSnapshot {
            version,
            documents: self.docs.clone(),
            changed,
            reset: reset.is_some(),
            existence: self.existence.take(),
        }
    }
}

/// A listened query. Dropping it stops the listen too.
#[derive(Debug)]
pub struct Listener {
    /// The connection the target lives on: for `Unlisten`, and for why it closed.
    client: Client,
    /// The target's id on the connection.
    target_id: u32,
    /// Snapshots from the reader task, in version order.
    rx: mpsc::UnboundedReceiver<Result<ListenSnapshot, ClientError>>,
    /// The error that ended the target, returned again by later calls.
    failed: Option<ClientError>,
    /// Whether `Unlisten` was sent (or the target was already gone), so it goes once.
    stopped: bool,
}

impl Listener {
    /// The listener of target `target_id` of `client`, reading what the target's
    /// `Target` delivers to `rx`.
    pub(crate) fn new(
        client: Client,
        target_id: u32,
        rx: mpsc::UnboundedReceiver<Result<ListenSnapshot, ClientError>>,
    ) -> Listener {
        Listener {
            client,
            target_id,
            rx,
            failed: None,
            stopped: false,
        }
    }

    /// The next snapshot of this query: the first one, then one per snapshot version
    /// that changed it. Fails when the relay refused or dropped the target, or the
    /// connection ended.
    pub async fn next(&mut self) -> Result<ListenSnapshot, ClientError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let r = match self.rx.recv().await {
            Some(r) => r,
            None => Err(self.client.shared().closed_error()),
        };
        if let Err(e) = &r {
            self.failed = Some(e.clone());
        }
        r
    }

    /// The target's id on the connection.
    pub fn target_id(&self) -> u32 {
        self.target_id
    }

    /// Stops the listen (`Unlisten`).
    pub async fn stop(mut self) {
        self.unlisten();
    }

    fn unlisten(&mut self) {
        if std::mem::replace(&mut self.stopped, true) {
            return;
        }
        let known = self.client.shared().remove_target(self.target_id);
        if known {
            let _ = self.client.send(&ClientMessage::Unlisten {
                target_id: self.target_id,
            });
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.unlisten();
    }
}
