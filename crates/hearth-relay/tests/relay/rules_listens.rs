//! Listens under security rules, at the wire: a document that leaves a listener's result
//! because it changed reaches it with its new content only if the caller may read that
//! content (else as a deletion), and a listen whose rules read other documents ends with
//! `permission-denied`, having seen nothing more, once those documents stop allowing it.

use std::time::Duration;

use futures_util::StreamExt;
use hearth_client::Client;
use hearth_core::error::ErrorCode;
use hearth_core::mutation::Mutation;
use hearth_core::protocol::codec::{decode_server_frame, encode_client};
use hearth_core::protocol::{
    ClientMessage, DocumentChange, ServerMessage, TargetChangeKind, PROTOCOL_VERSION,
};
use hearth_core::query::model::{Operator as Op, Query};
use tokio_tungstenite::tungstenite::Message;

use crate::harness::*;

const SECRET: &str = "rules-listens-client-secret";
const SERVICE: &str = "rules-listens-service-secret";
const DB: &str = "guarded";

const RULES: &str = r#"
rules_version = '2';
service cloud.firestore {
  match /databases/{database}/documents {
    match /posts/{p} {
      allow read: if resource.data.visibility == 'public'
                  || (request.auth != null && resource.data.author == request.auth.uid);
    }
    match /rooms/{room}/messages/{m} {
      allow read: if request.auth != null
        && exists(/databases/$(database)/documents/rooms/$(room)/members/$(request.auth.uid));
    }
  }
}
"#;

pub(crate) fn token(secret: &str, sub: &str) -> String {
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    hearth_relay::auth::mint_hs256(secret.as_bytes(), sub, exp)
}

/// A raw socket and the messages of a bundle read from it and not yet taken (a relay
/// sends a round's messages for several targets of a connection in one frame).
pub(crate) struct Raw {
    ws: RawSocket,
    queued: std::collections::VecDeque<ServerMessage>,
}

impl From<RawSocket> for Raw {
    fn from(ws: RawSocket) -> Raw {
        Raw {
            ws,
            queued: Default::default(),
        }
    }
}

impl std::ops::Deref for Raw {
    type Target = RawSocket;
    fn deref(&self) -> &RawSocket {
        &self.ws
    }
}

impl std::ops::DerefMut for Raw {
    fn deref_mut(&mut self) -> &mut RawSocket {
        &mut self.ws
    }
}

/// A raw socket welcomed into `DB` with `token`.
pub(crate) async fn raw(relay: &Relay, token: &str) -> Raw {
    raw_in(relay, DB, token).await
}

/// A raw socket welcomed into database `db` with `token`.
pub(crate) async fn raw_in(relay: &Relay, db: &str, token: &str) -> Raw {
    let mut ws = Raw::from(raw_socket(relay).await);
    let hello = encode_client(&ClientMessage::Hello {
        protocol_version: PROTOCOL_VERSION,
        database: db.to_owned(),
        client_id: unique("raw"),
        token: token.to_owned(),
    });
    raw_send(&mut ws, Message::Binary(hello.into())).await;
    match next(&mut ws).await {
        Some(ServerMessage::Welcome { .. }) => ws,
        other => panic!("no Welcome: {other:?}"),
    }
}

/// The next message from the relay, alone or from a bundle (None: nothing for 10 s, or
/// the socket ended).
pub(crate) async fn next(ws: &mut Raw) -> Option<ServerMessage> {
    loop {
        if let Some(m) = ws.queued.pop_front() {
            return Some(m);
        }
        match tokio::time::timeout(Duration::from_secs(10), ws.ws.next()).await {
            Ok(Some(Ok(Message::Binary(b)))) => {
                ws.queued.extend(decode_server_frame(&b).unwrap());
            }
            Ok(Some(Ok(_))) => continue,
            _ => return None,
        }
    }
}

/// The messages up to the connection's next Snapshot (heartbeats skipped).
pub(crate) async fn until_snapshot(ws: &mut Raw) -> Vec<ServerMessage> {
    let mut out = Vec::new();
    loop {
        match next(ws).await {
            Some(ServerMessage::Snapshot { .. }) => return out,
            Some(ServerMessage::Heartbeat { .. }) => {}
            Some(m @ ServerMessage::Error { .. }) => panic!("{m:?} after {out:?}"),
            Some(m) => out.push(m),
            None => panic!("the relay went quiet: {out:?}"),
        }
    }
}

pub(crate) async fn listen(ws: &mut Raw, target_id: u32, query: Query) {
    let m = encode_client(&ClientMessage::Listen {
        target_id,
        query,
        resume_version: None,
    });
    raw_send(ws, Message::Binary(m.into())).await;
}

pub(crate) fn changes(messages: &[ServerMessage]) -> Vec<DocumentChange> {
    messages
        .iter()
        .flat_map(|m| match m {
            ServerMessage::TargetChange { changes, .. } => changes.clone(),
            _ => Vec::new(),
        })
        .collect()
}

/// A relay with `RULES` (kept in the returned directory) and a service client of `DB`.
async fn start(tag: &str) -> (TempDir, Relay, Client) {
    start_with(tag, RULES, (SECRET, SERVICE), DB).await
}

/// A relay with the rules `text` (kept in the returned directory), client tokens signed
/// with `secret` and service tokens with `service`, and a service client of database `db`.
pub(crate) async fn start_with(
    tag: &str,
    text: &str,
    (secret, service): (&str, &str),
    db: &str,
) -> (TempDir, Relay, Client) {
    let dir = TempDir::new(tag);
    let rules = dir.file("firestore.rules", text);
    let relay = Relay::fresh(&[
        "--rules",
        rules.to_str().unwrap(),
        "--auth-secret",
        secret,
        "--service-secret",
        service,
    ]);
    let (url, id, token) = (relay.url(), unique("s"), token(service, "job"));
    let service = within(Client::connect(&url, db, &id, &token))
        .await
        .unwrap();
    (dir, relay, service)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_made_unreadable_leaves_without_its_content() {
    let (_dir, relay, service) = start("rules-leave").await;
    let post = |vis: &str, text: &str| {
        Mutation::set(
            name("posts/p1"),
            map([
                ("author", s("ann")),
                ("visibility", s(vis)),
                ("text", s(text)),
            ]),
        )
    };
    within(service.write(vec![post("public", "hello")]))
        .await
        .unwrap();
    // Without a token, and as the author: the public posts.
    let public = Query::collection(coll("posts")).where_("visibility", Op::Equal, s("public"));
    let mut anon = raw(&relay, "").await;
    let mut ann = raw(&relay, &token(SECRET, "ann")).await;
    for ws in [&mut anon, &mut ann] {
        listen(ws, 1, public.clone()).await;
        let first = until_snapshot(ws).await;
        assert!(
            matches!(&first[..], [ServerMessage::TargetChange { kind: TargetChangeKind::Reset, changes, .. }] if changes.len() == 1),
            "{first:?}"
        );
    }
    // The post goes private: it leaves both results; only its author learns its content.
    within(service.write(vec![post("private", "the secret")]))
        .await
        .unwrap();
    let seen = changes(&until_snapshot(&mut anon).await);
    assert!(
        matches!(&seen[..], [DocumentChange::Delete { name, .. }] if name.to_string() == "posts/p1"),
        "the reader without a token learns only that p1 left: {seen:?}"
    );
    let seen = changes(&until_snapshot(&mut ann).await);
    assert!(
        matches!(&seen[..], [DocumentChange::Leave(d)] if d.fields.get("text") == Some(&s("the secret"))),
        "the author may read it, so gets its new content: {seen:?}"
    );
    // A resume from before the change: the same.
    let mut anon2 = raw(&relay, "").await;
    let m = encode_client(&ClientMessage::Listen {
        target_id: 1,
        query: public.clone(),
        resume_version: Some(1),
    });
    raw_send(&mut anon2, Message::Binary(m.into())).await;
    // A resumed listen speaks only of its result now: p1 may never have been in the
    // client's result, so it is not named at all; a Reset with the result (none) says it.
    let frames = until_snapshot(&mut anon2).await;
    assert!(
        matches!(&frames[..], [ServerMessage::TargetChange { kind: TargetChangeKind::Reset, changes, .. }, ..] if changes.is_empty()),
        "a resumed listen names nothing outside its result: {frames:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_the_rules_stop_allowing_ends_before_its_next_change() {
    let (_dir, relay, service) = start("rules-recheck").await;
    let member = name("rooms/r1/members/bob");
    let message = |id: &str| {
        Mutation::set(
            name(&format!("rooms/r1/messages/{id}")),
            map([("text", s(id))]),
        )
    };
    within(service.write(vec![
        Mutation::set(member.clone(), map([("since", int(1))])),
        message("m1"),
    ]))
    .await
    .unwrap();
    let mut bob = raw(&relay, &token(SECRET, "bob")).await;
    let messages = Query::collection(coll("rooms/r1/messages"));
    listen(&mut bob, 7, messages).await;
    let first = changes(&until_snapshot(&mut bob).await);
    assert_eq!(first.len(), 1, "{first:?}");
    within(service.write(vec![message("m2")])).await.unwrap();
    let second = changes(&until_snapshot(&mut bob).await);
    assert!(
        matches!(&second[..], [DocumentChange::Upsert(_)]),
        "{second:?}"
    );
    // Bob is no longer a member: the next message does not reach him; his listen ends.
    within(service.write(vec![Mutation::delete(member)]))
        .await
        .unwrap();
    within(service.write(vec![message("m3")])).await.unwrap();
    let mut ended = None;
    while let Some(m) = next(&mut bob).await {
        match m {
            ServerMessage::TargetChange { changes, .. } => {
                panic!("bob, no longer a member, was sent {changes:?}")
            }
            ServerMessage::Error {
                target_id,
                code,
                message,
                ..
            } => {
                ended = Some((target_id, code, message));
                break;
            }
            _ => {}
        }
    }
    let (target_id, code, message) = ended.expect("the listen ended");
    assert_eq!(
        (target_id, code),
        (7, ErrorCode::PermissionDenied),
        "{message}"
    );
    assert!(
        message.starts_with("Missing or insufficient permissions."),
        "{message}"
    );
}
