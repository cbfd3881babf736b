//! The outbound side over real sockets: frame order through the backlog, overflow and
//! abandon, close, and a round's bundle.

use super::testing::*;
use super::*;

/// Frames of every length class, written in place and through a backlog (the client
/// reads nothing until all are sent), arrive whole and in order.
#[tokio::test]
async fn frames_arrive_whole_and_in_order_through_the_backlog() {
    let (out, _r, mut client) = pair(256 << 20).await;
    let size = |i: usize| match i % 5 {
        0 => i % 126,
        1 => 126 + i * 7,
        2 => 0xFFFF,
        3 => 0x10000 + i * 31,
        _ => 3,
    };
    // At least 300 frames, and on until the socket's buffers are full and the rest
    // waits in the backlog (however large this machine's buffers are).
    let mut sizes = Vec::new();
    while sizes.len() < 300 || out.backlog_bytes() == 0 {
        assert!(sizes.len() < 4000, "the socket never filled");
        let (i, j) = (sizes.len(), sizes.len() + 1);
        let frame = |k: usize| Bytes::from(vec![k as u8; size(k)]);
        if i % 3 == 0 {
            assert!(out.send(frame(i)));
            sizes.push(size(i));
        } else {
            assert!(out.send_pair(frame(i), frame(j)));
            sizes.extend([size(i), size(j)]);
        }
    }
    let flusher = {
        let out = out.clone();
        tokio::spawn(async move {
            loop {
                out.backlogged().await;
                out.flush().await.unwrap();
            }
        })
    };
    let got = read_frames(&mut client, sizes.len()).await;
    for (i, (op, payload)) in got.iter().enumerate() {
        assert_eq!(*op, OP_BINARY);
        assert_eq!(payload.len(), sizes[i], "frame {i}");
        assert!(payload.iter().all(|b| *b == i as u8), "frame {i}");
    }
    assert_eq!(out.backlog_bytes(), 0);
    flusher.abort();
}

/// Past the bound the connection overflows and takes no more; abandoning keeps the
/// frame already begun whole and ends with the error and a Close.
#[tokio::test]
async fn overflow_stops_taking_frames_and_abandon_ends_cleanly() {
    let (out, _r, mut client) = pair(1 << 20).await;
    let big = Bytes::from(vec![7u8; 100_000]);
    let mut sent = 0;
    while out.send(big.clone()) {
        sent += 1;
        assert!(sent < 1000, "never overflowed");
    }
    assert!(out.is_overflowed());
    assert!(!out.send(Bytes::from_static(b"late")));
    out.abandon(Bytes::from_static(b"why"));
    let flusher = {
        let out = out.clone();
        tokio::spawn(async move { out.flush().await })
    };
    // Whole 100,000-byte frames, then the error, then Close.
    let mut frames = Vec::new();
    let mut reader = FrameReader::default();
    loop {
        let f = reader.next(&mut client).await;
        let end = f.0 == OP_CLOSE;
        frames.push(f);
        if end {
            break;
        }
    }
    let n = frames.len();
    assert!(n >= 3);
    assert!(frames[..n - 2]
        .iter()
        .all(|(op, p)| *op == OP_BINARY && p.len() == 100_000));
    assert_eq!(frames[n - 2], (OP_BINARY, b"why".to_vec()));
    assert_eq!(frames[n - 1].1, vec![0x03, 0xE8]);
    flusher.await.unwrap().unwrap();
    assert_eq!(out.backlog_bytes(), 0);
}

/// After close, frames are refused; the Close frame is the last thing written.
#[tokio::test]
async fn close_sends_a_close_frame_last() {
    let (out, _r, mut client) = pair(1 << 20).await;
    assert!(out.send(Bytes::from_static(b"a")));
    out.close(false);
    assert!(!out.send(Bytes::from_static(b"b")));
    let got = read_frames(&mut client, 2).await;
    assert_eq!(got[0], (OP_BINARY, b"a".to_vec()));
    assert_eq!(got[1].0, OP_CLOSE);
}

/// A round's messages reach a client of protocol 3 as one bundle with the Snapshot; a
/// message written meanwhile by someone else goes after them, not before; a client of
/// protocol 2 gets every message in its own frame.
#[tokio::test]
async fn a_round_goes_out_as_one_bundle_in_order() {
    let msg = |version| Bytes::from(encode_server(&ServerMessage::Snapshot { version }));
    let (out, _r, mut client) = pair(1 << 20).await;
    assert!(out.send_in_round(msg(1)) && out.send_in_round(msg(2)));
    assert!(out.send(msg(3)), "a reply between the round's messages");
    assert!(out.send_in_round(msg(4)));
    assert!(out.end_round(msg(5)));
    let mut reader = FrameReader::default();
    let mut versions = Vec::new();
    let mut sizes = Vec::new();
    while versions.len() < 5 {
        let (op, payload) = reader.next(&mut client).await;
        assert_eq!(op, OP_BINARY);
        let messages = hearth_core::protocol::codec::decode_server_frame(&payload).unwrap();
        sizes.push(messages.len());
        for m in messages {
            let ServerMessage::Snapshot { version } = m else {
                panic!("{m:?}")
            };
            versions.push(version);
        }
    }
    assert_eq!(versions, [1, 2, 3, 4, 5], "sent order");
    assert_eq!(
        sizes,
        [2, 1, 2],
        "the held two, the reply, then two with the Snapshot"
    );

    let (old, _r, mut client) = pair(1 << 20).await;
    old.set_protocol(2);
    assert!(old.send_in_round(msg(1)) && old.end_round(msg(2)));
    let mut reader = FrameReader::default();
    for v in [1, 2] {
        let (_, payload) = reader.next(&mut client).await;
        assert_eq!(
            hearth_core::protocol::codec::decode_server(&payload),
            Ok(ServerMessage::Snapshot { version: v })
        );
    }
}
