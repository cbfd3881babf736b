//! Security rules through the real relay: every get, query, aggregation, listen and write
//! is decided by the rules file (`--rules`), batches all or nothing; lists are refused
//! unless their constraints prove every result readable (rules are not filters); a caller
//! without a token is `request.auth == null`, a bad token is refused, never anonymous; a
//! service token is past the rules; `SIGHUP` reloads the rules and a file with errors
//! keeps those in force; an open relay (no rules) serves loopback only.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hearth_client::Client;
use hearth_core::error::ErrorCode;
use hearth_core::mutation::Mutation;
use hearth_core::query::model::{Aggregation, Operator as Op, Query};

use crate::harness::*;

const SECRET: &str = "rules-test-client-secret";
const SERVICE: &str = "rules-test-service-secret";
const DB: &str = "ruled";

const RULES: &str = r#"
rules_version = '2';
service cloud.firestore {
  match /databases/{database}/documents {
    function signedIn() {
      return request.auth != null;
    }
    function owns(data) {
      return signedIn() && data.owner == request.auth.uid;
    }
    match /notes/{note} {
      allow read: if owns(resource.data);
      allow create: if owns(request.resource.data)
        && request.resource.data.keys().hasOnly(['owner', 'text']);
      allow update: if owns(resource.data)
        && request.resource.data.diff(resource.data).affectedKeys().hasOnly(['text']);
      allow delete: if owns(resource.data);
    }
    match /public/{doc} {
      allow read: if true;
      allow write: if signedIn()
        && get(/databases/$(database)/documents/admins/$(request.auth.uid)).data.role == 'admin';
    }
  }
}
"#;

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// An HS256 token signed with `secret` for `sub`, valid for an hour.
fn token(secret: &str, sub: &str) -> String {
    hearth_relay::auth::mint_hs256(secret.as_bytes(), sub, now_unix() + 3600)
}

async fn connect(relay: &Relay, token: &str) -> Client {
    within(Client::connect(&relay.url(), DB, &unique("c"), token))
        .await
        .expect("connecting")
}

fn write_rules(dir: &Path, text: &str) -> String {
    let path = dir.join("firestore.rules");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn note(id: &str, owner: &str) -> Mutation {
    Mutation::set(
        name(&format!("notes/{id}")),
        map([("owner", s(owner)), ("text", s("hello"))]),
    )
}

/// `result` is a permission-denied refusal.
#[track_caller]
fn denied<T: std::fmt::Debug>(result: Result<T, hearth_client::ClientError>, what: &str) {
    match result {
        Err(e) => {
            assert_eq!(e.code(), Some(ErrorCode::PermissionDenied), "{what}: {e}");
            assert!(
                e.to_string()
                    .contains("Missing or insufficient permissions"),
                "{what}: {e}"
            );
        }
        Ok(v) => panic!("{what}: allowed, {v:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_decide_every_read_listen_and_write() {
    let dir = TempDir::new("rules");
    let rules = write_rules(dir.path(), RULES);
    let relay = Relay::fresh(&[
        "--rules",
        &rules,
        "--auth-secret",
        SECRET,
        "--service-secret",
        SERVICE,
    ]);
    let alice = connect(&relay, &token(SECRET, "alice")).await;
    let bob = connect(&relay, &token(SECRET, "bob")).await;
    let nobody = connect(&relay, "").await;
    let service = connect(&relay, &token(SERVICE, "backend")).await;

    // Create: only as oneself, only the allowed keys.
    within(alice.write(vec![note("a1", "alice")]))
        .await
        .expect("alice creates her note");
    denied(
        within(alice.write(vec![note("b1", "bob")])).await,
        "a note owned by someone else",
    );
    denied(
        within(alice.write(vec![Mutation::set(
            name("notes/a2"),
            map([("owner", s("alice")), ("text", s("x")), ("extra", int(1))]),
        )]))
        .await,
        "a key the rule does not allow",
    );
    denied(
        within(nobody.write(vec![note("n1", "")])).await,
        "no token: request.auth is null",
    );
    // Get: the owner only.
    let got = within(alice.get_one(&name("notes/a1"))).await.unwrap();
    assert!(got.is_some());
    denied(
        within(bob.get_one(&name("notes/a1"))).await,
        "bob reads alice's note",
    );
    // Lists: only queries whose constraints prove every result readable.
    let mine = Query::collection(coll("notes")).where_("owner", Op::Equal, s("alice"));
    let all = Query::collection(coll("notes"));
    let docs = within(alice.query(&mine))
        .await
        .expect("alice lists her notes");
    assert_eq!(docs.0.len(), 1);
    denied(
        within(alice.query(&all)).await,
        "every note is alice's, but the query does not say so",
    );
    denied(within(bob.query(&mine)).await, "bob lists alice's notes");
    within(alice.aggregate(&mine, vec![Aggregation::Count]))
        .await
        .expect("alice counts her notes");
    denied(
        within(alice.aggregate(&all, vec![Aggregation::Count])).await,
        "count of every note",
    );
    let mut l = within(alice.listen(&mine, None)).await.unwrap();
    assert_eq!(within(l.next()).await.unwrap().documents.len(), 1);
    let mut refused = within(alice.listen(&all, None)).await.unwrap();
    denied(within(refused.next()).await, "a listen on every note");
    // Update: only the text.
    within(alice.write(vec![Mutation::set(
        name("notes/a1"),
        map([("owner", s("alice")), ("text", s("changed"))]),
    )]))
    .await
    .expect("alice changes her text");
    denied(
        within(alice.write(vec![Mutation::set(
            name("notes/a1"),
            map([("owner", s("bob")), ("text", s("given away"))]),
        )]))
        .await,
        "changing the owner",
    );
    // A batch is allowed only if every write is: nothing of it is applied.
    denied(
        within(alice.write(vec![note("a3", "alice"), note("b3", "bob")])).await,
        "a batch with one denied write",
    );
    for n in ["notes/a3", "notes/b3"] {
        let doc = within(service.get_one(&name(n))).await.unwrap();
        assert!(doc.is_none(), "{n} was written by a denied batch");
    }
    // Delete: the owner only.
    denied(
        within(bob.write(vec![Mutation::delete(name("notes/a1"))])).await,
        "bob deletes alice's note",
    );
    // get() in a rule: alice may write public documents once the service names her an
    // admin (admins/* has no rule: only the service writes there).
    let post = Mutation::set(name("public/p1"), map([("n", int(1))]));
    denied(
        within(alice.write(vec![post.clone()])).await,
        "not an admin yet",
    );
    denied(
        within(alice.write(vec![Mutation::set(
            name("admins/alice"),
            map([("role", s("admin"))]),
        )]))
        .await,
        "making oneself an admin",
    );
    within(service.write(vec![Mutation::set(
        name("admins/alice"),
        map([("role", s("admin"))]),
    )]))
    .await
    .expect("a service token is past the rules");
    within(alice.write(vec![post]))
        .await
        .expect("an admin writes public documents");
    let public = within(nobody.get_one(&name("public/p1"))).await.unwrap();
    assert!(public.is_some(), "anyone reads public documents");
    within(alice.write(vec![Mutation::delete(name("notes/a1"))]))
        .await
        .expect("alice deletes her note");
    // A new identity on a connection: its targets are checked again, and those it may not
    // read end with permission-denied.
    within(alice.write(vec![note("a4", "alice")]))
        .await
        .unwrap();
    let switching = connect(&relay, &token(SECRET, "alice")).await;
    let mut l = within(switching.listen(&mine, None)).await.unwrap();
    assert_eq!(within(l.next()).await.unwrap().documents.len(), 1);
    switching.refresh_token(&token(SECRET, "bob")).unwrap();
    loop {
        match within(l.next()).await {
            Ok(_) => continue,
            Err(e) => {
                assert_eq!(e.code(), Some(ErrorCode::PermissionDenied), "{e}");
                break;
            }
        }
    }
    // A token that is there must verify: never anonymous instead.
    let err = within(Client::connect(&relay.url(), DB, "bad", "not-a-token"))
        .await
        .expect_err("a malformed token");
    assert_eq!(err.code(), Some(ErrorCode::Unauthenticated), "{err}");
    let (_, metrics) = http_get(relay.addr, "/metrics").await;
    let denials = metric(
        &metrics,
        "hearth_rules_decisions_total{operation=\"create\",outcome=\"denied\"}",
    );
    assert!(denials.unwrap_or(0.0) >= 3.0, "{metrics}");
    let (_, health) = http_get(relay.addr, "/healthz").await;
    assert!(health.contains("rules: "), "{health}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_rules_and_a_broken_file_keeps_them() {
    let dir = TempDir::new("reload");
    let closed = "rules_version = '2';\nservice cloud.firestore {\n  match /databases/{database}/documents {\n    match /items/{id} {\n      allow read: if true;\n    }\n  }\n}\n";
    let open = closed.replace("allow read: if true;", "allow read, write: if true;");
    let rules = write_rules(dir.path(), closed);
    let relay = Relay::fresh(&["--rules", &rules]);
    let c = connect(&relay, "").await;
    let item = || vec![Mutation::set(name("items/a"), map([("n", int(1))]))];
    denied(within(c.write(item())).await, "no write rule");
    let hup = |relay: &Relay| {
        let ok = Command::new("kill")
            .args(["-HUP", &relay.pid().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok);
    };
    // Same length as the file before: the reload is the signal's, not the file watch's
    // (which also compares modification times).
    std::fs::write(&rules, &open).unwrap();
    hup(&relay);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match within(c.write(item())).await {
            Ok(_) => break,
            Err(e) if std::time::Instant::now() < deadline => {
                assert_eq!(e.code(), Some(ErrorCode::PermissionDenied), "{e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("the new rules were not loaded: {e}"),
        }
    }
    // A file with an error: the rules in force stay, the log names line and column.
    std::fs::write(&rules, "rules_version = '2';\nservice cloud.firestore {\n  match /x {\n    allow read: if (;\n  }\n}\n").unwrap();
    hup(&relay);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !relay.log().contains("the rules in force stay") {
        assert!(std::time::Instant::now() < deadline, "{}", relay.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let line = relay
        .log()
        .lines()
        .find(|l| l.contains("the rules in force stay"))
        .unwrap_or_default()
        .to_owned();
    assert!(line.contains("firestore.rules:4:"), "{line}");
    within(c.write(item()))
        .await
        .expect("the last good rules are still in force");
}

#[test]
fn an_open_relay_serves_loopback_only() {
    let dir = TempDir::new("open");
    let out = Command::new(relay_bin())
        .args(["serve", "--addr", "0.0.0.0:0", "--data"])
        .arg(dir.path())
        .env_remove("HEARTH_RULES")
        .env_remove("HEARTH_INSECURE_OPEN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--insecure-open"), "{stderr}");
    // A rules file that does not parse stops the start, naming line and column.
    let rules = write_rules(dir.path(), "rules_version = '2';\nservice cloud.firestore {\n  match /databases/{database}/documents {\n    allow read: if ;\n  }\n}\n");
    let out = Command::new(relay_bin())
        .args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--rules",
            &rules,
            "--data",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("firestore.rules:4:"), "{stderr}");
}

/// `hearth-relay rules test` on a case file: (exit status, stdout).
fn rules_test(rules: &Path, cases: &Path) -> (bool, String) {
    let out = Command::new(relay_bin())
        .args(["rules", "test", "--rules"])
        .arg(rules)
        .arg("--cases")
        .arg(cases)
        .output()
        .expect("run hearth-relay rules test");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn rules_test_command_runs_the_shipped_cases_and_fails_on_a_mismatch() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../rules");
    // Each shipped rules file decides its cases; every demo's cases are decided the same by
    // the demos' combined file (what scripts/start serves). Figure 3 alone is not a demo's.
    let demos = [
        "todo",
        "demo",
        "worker",
        "counter",
        "instruments",
        "restaurants",
    ];
    for name in std::iter::once("ratings").chain(demos) {
        let cases = dir.join(format!("{name}.cases.json"));
        let own = dir.join(format!("{name}.rules"));
        let files = if name == "ratings" {
            vec![own]
        } else {
            vec![own, dir.join("demos.rules")]
        };
        for rules in files {
            let (ok, out) = rules_test(&rules, &cases);
            assert!(
                ok && out.contains(" 0 failed"),
                "{}, {name}:\n{out}",
                rules.display()
            );
        }
    }
    // A case expecting the opposite of what the rules decide fails, naming the rule that
    // allowed it; a malformed case is an error, not a pass.
    let tmp = TempDir::new("rules-cases");
    let cases = tmp.file(
        "cases.json",
        r#"{ "cases": [
          { "name": "wrongly expected", "auth": { "uid": "bob" }, "method": "get",
            "path": "restaurants/one/ratings/1", "expect": "deny" },
          { "name": "wrongly expected denial", "auth": { "uid": "bob" }, "method": "create",
            "path": "restaurants/one/ratings/2", "data": { "userId": "eve" }, "expect": "allow" },
          { "name": "malformed", "method": "update", "path": "restaurants/one/ratings/9",
            "data": {}, "expect": "deny" },
          { "name": "fine", "method": "get", "path": "restaurants/one/ratings/1", "expect": "deny" }
        ] }"#,
    );
    let (ok, out) = rules_test(&dir.join("ratings.rules"), &cases);
    assert!(!ok, "{out}");
    assert!(
        out.contains("FAIL  wrongly expected: expected deny, got allow: allowed by")
            && out.contains("line 7: allow read: if request.auth != null;"),
        "{out}"
    );
    assert!(
        out.contains("FAIL  wrongly expected denial: expected allow, got deny")
            && out.contains("line 8: allow create: if request.auth != null &&"),
        "{out}"
    );
    assert!(out.contains("ERROR malformed: the case is malformed: update of restaurants/one/ratings/9, which does not exist"), "{out}");
    assert!(
        out.contains("ok    fine: deny") && out.contains("4 cases, 1 passed, 3 failed"),
        "{out}"
    );
}
