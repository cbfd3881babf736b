//! A resumed target checked against the relay's `Existence` (its whole result's size and a
//! filter of its names): a resume brings only what changed since the stored version, so
//! without it the client could keep showing a document the result lacks (an acknowledged
//! estimate over a stale base, a deletion read at an older version) for good.
//!
//! At the resumed target's first Snapshot, the documents the local view holds for the
//! target's query (read before the snapshot's changes apply) join the target's known result
//! where the filter may hold them; those it surely lacks stay out, so the limbo resolution
//! reads them again if a listener shows them. When the known result then has the relay's
//! size, the target counts as whole from here on (limbo resolution covers it, as a target
//! with a Reset); when not, the client holds less or more than the result (a false positive
//! of the filter, a document it never had), and listens again from scratch: the relay
//! sends the whole result, as Firestore's client does on an existence-filter mismatch.

use std::collections::BTreeSet;
use std::rc::Rc;

use super::{Sync, Target};
use crate::client::engine::Engine;
use crate::client::idb_store::{Key, Store, WriteOp};
use hearth_core::path::DocumentName;
use hearth_core::protocol::existence::NameFilter;
use hearth_core::protocol::ClientMessage;

/// One resumed target's check, prepared before its snapshot applies.
pub(super) struct Check {
    /// The relay's size of the whole result.
    count: u64,
    /// The relay's filter of its names.
    filter: NameFilter,
    /// The names the local view held for the target's query.
    local: Vec<DocumentName>,
}

impl Check {
    /// Completes `t`'s known result with the local names the filter may hold, other than
    /// those the snapshot took out of it (`left`). Whether the result is then whole (it has
    /// the relay's size): the target is complete from now on.
    pub(super) fn settle(self, t: &mut Target, left: &BTreeSet<DocumentName>) -> bool {
        for n in self.local {
            if !left.contains(&n) && self.filter.might_contain(&n) {
                t.docs.insert(n);
            }
        }
        let whole = t.docs.len() as u64 == self.count;
        t.complete |= whole;
        whole
    }
}

impl Sync {
    /// The checks of the targets a snapshot brings an `Existence` for (`existence`: target,
    /// count, filter), with the local view's names for each one's query, read now.
    pub(super) async fn existence_checks(
        &self,
        engine: &Engine,
        existence: Vec<(u32, u64, NameFilter)>,
    ) -> Vec<(u32, Check)> {
        let mut out = Vec::new();
        for (id, count, filter) in existence {
            let query = match self.targets.borrow().get(&id) {
                Some(t) => t.query.clone(),
                None => continue,
            };
            // A local read that fails knows nothing: the check then fails, and the target
            // listens again from scratch.
            let local = engine
                .query(&query)
                .await
                .map(|docs| docs.into_iter().map(|d| d.name).collect())
                .unwrap_or_default();
            out.push((
                id,
                Check {
                    count,
                    filter,
                    local,
                },
            ));
        }
        out
    }

    /// Target `target_id` failed its existence check: it is dropped with its resume
    /// version (in memory and stored) and its listener listens again, from scratch.
    pub(super) fn listen_whole_again(self: &Rc<Self>, target_id: u32) {
        let Some(t) = self.targets.borrow_mut().remove(&target_id) else {
            return;
        };
        self.trace(|| format!("target t{target_id} failed its existence check: listening again"));
        self.by_listener.borrow_mut().remove(&t.listener);
        self.send(&ClientMessage::Unlisten { target_id });
        self.resume.borrow_mut().forget(&t.key);
        if let Some(engine) = self.engine() {
            let forget = vec![WriteOp::Delete {
                store: Store::Targets,
                key: Key::Bytes(t.key.clone()),
            }];
            wasm_bindgen_futures::spawn_local(async move {
                let _ = engine.store.write_relaxed(forget).await;
            });
        }
        self.listen(t.listener, t.query);
    }
}
