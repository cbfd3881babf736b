//! Unit tests of the connection: a panicking connection task gives back everything it held.

use super::*;
use crate::auth::Authenticator;
use crate::config::Config;
use crate::fanout::Start;
use hearth_core::path::CollectionPath;
use hearth_core::query::model::Query;
use hearth_core::query::validate::validate;

fn gauge(relay: &Relay, sample: &str) -> f64 {
    let text = relay.metrics().render();
    text.lines()
        .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

/// A panic in the middle of a connection's task (as a request handler's would be) gives
/// back everything the connection held: its `--max-connections` permit, its places under
/// the keyed limits, its fan-out targets, and the open-connections and listens gauges.
#[tokio::test]
async fn a_panicking_connection_task_leaks_nothing() {
    let dir = std::env::temp_dir().join(format!(
        "hearth-relay-held-{}-{}",
        std::process::id(),
        now_unix()
    ));
    let relay = Relay::start(Config::new(dir.clone()), Authenticator::disabled()).unwrap();
    let limits = Arc::new(Limits::new(relay.config()));
    let slots = Arc::new(tokio::sync::Semaphore::new(4));
    let db = relay.database("held").unwrap();
    let (out, _read, _client) = crate::outbound::testing::pair(1 << 20).await;

    let mut held = Held::open(
        relay.clone(),
        slots.clone().try_acquire_owned().unwrap(),
        limits.address.try_hold([127, 0, 0, 1].into()).unwrap(),
    );
    held.database = limits.database.try_hold("held".into());
    held.subject = limits.subject.try_hold("alice".into());
    held.targets = Some((db.clone(), out.conn()));
    for target_id in 1..=3 {
        let q = validate(&Query::collection(CollectionPath::parse("c").unwrap())).unwrap();
        db.fanout()
            .listen(
                &out,
                target_id,
                q,
                |q| relay.query_latest(&db, q),
                |_| Start::Fresh,
                None,
            )
            .unwrap();
        relay.metrics().listen_started(db.name());
    }
    assert_eq!(db.fanout().listens(), 3);
    assert_eq!(gauge(&relay, "hearth_connections_open"), 1.0);
    assert_eq!(slots.available_permits(), 3);

    let task = tokio::spawn(async move {
        let _held = held;
        tokio::task::yield_now().await;
        panic!("a request handler failed");
    });
    assert!(task.await.unwrap_err().is_panic());

    // The targets are dropped on the blocking pool, just after.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let stopped = |relay: &Relay| {
        db.fanout().listens() == 0
            && gauge(relay, "hearth_active_listens{database=\"held\"}") == 0.0
    };
    while !stopped(&relay) && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_eq!(db.fanout().listens(), 0, "the fan-out targets are dropped");
    assert_eq!(gauge(&relay, "hearth_connections_open"), 0.0);
    assert_eq!(
        gauge(&relay, "hearth_active_listens{database=\"held\"}"),
        0.0
    );
    assert_eq!(
        slots.available_permits(),
        4,
        "the connection permit is back"
    );
    assert_eq!(limits.address.keys(), 0);
    assert_eq!(limits.database.keys(), 0);
    assert_eq!(limits.subject.keys(), 0);
    let r = relay.clone();
    tokio::task::spawn_blocking(move || r.stop()).await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}
