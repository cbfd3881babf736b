//! A round's frames: a target's changes split into frames' worth, and a frame encoded once
//! with target id 0 given each subscriber's target id.

use bytes::Bytes;

use hearth_core::protocol::{DocumentChange, ServerMessage, TargetChangeKind};

/// A frame's bytes with another target id: type byte, target id varint, rest unchanged.
pub(super) fn retarget(template: &[u8], target_id: u32) -> Bytes {
    // The template was encoded with target id 0, one varint byte.
    let (ty, rest) = match template {
        [ty, _, rest @ ..] => (*ty, rest),
        _ => (0, &[][..]),
    };
    let mut out = Vec::with_capacity(template.len() + 4);
    out.push(ty);
    let mut v = target_id;
    loop {
        let b = (v & 0x7F) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            break;
        }
        out.push(b | 0x80);
    }
    out.extend_from_slice(rest);
    Bytes::from(out)
}

/// Most change bytes (estimated) in one TargetChange frame: half the frame limit, so names
/// and framing never push a frame over it.
const CHUNK_BYTES: usize = hearth_core::protocol::MAX_FRAME_BYTES / 2;

/// Splits changes into frames' worth; a result too big for one frame travels as several
/// TargetChange messages before the Snapshot (docs/protocol.md).
pub(super) fn chunks(changes: Vec<DocumentChange>) -> Vec<Vec<DocumentChange>> {
    let mut out = Vec::new();
    let mut part = Vec::new();
    let mut size = 0;
    for c in changes {
        let n = match &c {
            DocumentChange::Upsert(d) => {
                hearth_core::encoding::document::encoded_size(&d.fields) + 64
            }
            DocumentChange::Leave(d) => {
                hearth_core::encoding::document::encoded_size(&d.fields) + 64
            }
            DocumentChange::Remove(_) | DocumentChange::Delete { .. } => 64,
        };
        if size + n > CHUNK_BYTES && !part.is_empty() {
            out.push(std::mem::take(&mut part));
            size = 0;
        }
        size += n;
        part.push(c);
    }
    out.push(part);
    out
}

/// A target's changes as messages that each fit a frame; only the first carries `kind` (a
/// Reset), the rest are Deltas on top of it.
pub(super) fn target_change_messages(
    target_id: u32,
    kind: TargetChangeKind,
    changes: Vec<DocumentChange>,
) -> Vec<ServerMessage> {
    chunks(changes)
        .into_iter()
        .enumerate()
        .map(|(i, part)| ServerMessage::TargetChange {
            target_id,
            kind: if i == 0 {
                kind
            } else {
                TargetChangeKind::Delta
            },
            changes: part,
        })
        .collect()
}
