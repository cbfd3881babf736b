//! The relay's own threads (the committer and the fan-out) under supervision: if one fails
//! (panics), the process ends at once and loudly, so its supervisor (systemd, Kubernetes, a
//! shell loop) restarts it from the durable store. A relay whose committer or fan-out
//! stopped would otherwise go on accepting connections whose writes never commit or whose
//! listeners silently stop.
//!
//! Debug builds also read `HEARTH_TEST_FAULT` (`commit:<database>` or `fanout:<database>`):
//! the named thread panics when it reaches that database, so the relay's tests can show the
//! process ending. Release builds have no such hook.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `body` (a thread's whole life); a panic in it ends the process with `abort`, after
/// saying which thread failed and why.
pub(crate) fn supervised(thread: &'static str, body: impl FnOnce()) {
    if let Err(panic) = catch_unwind(AssertUnwindSafe(body)) {
        let why = panic_message(panic.as_ref());
        tracing::error!(
            thread,
            panic = %why,
            "a relay thread failed: ending the process so that its supervisor restarts it"
        );
        eprintln!("hearth-relay: the {thread} thread failed ({why}); aborting");
        std::process::abort();
    }
}

/// The message a panic carried, if it carried text.
pub(crate) fn panic_message(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_owned())
}

/// In debug builds, panics when `HEARTH_TEST_FAULT` is `<point>:<database>`.
#[cfg(debug_assertions)]
pub(crate) fn fault_point(point: &str, database: &str) {
    if let Ok(fault) = std::env::var("HEARTH_TEST_FAULT") {
        if fault.split_once(':') == Some((point, database)) {
            panic!("injected fault at {point} for database `{database}` (HEARTH_TEST_FAULT)");
        }
    }
}

/// In debug builds, true for the first `count` calls at `point` for `database` when
/// `HEARTH_TEST_TRANSIENT` holds `<point>:<database>:<count>` (several separated by `,`): a
/// transient store failure the caller then simulates (tests of the retry paths).
#[cfg(debug_assertions)]
pub(crate) fn transient_fault(point: &str, database: &str) -> bool {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static FIRED: OnceLock<Mutex<HashMap<String, u64>>> = OnceLock::new();
    let Ok(faults) = std::env::var("HEARTH_TEST_TRANSIENT") else {
        return false;
    };
    for fault in faults.split(',') {
        let mut parts = fault.splitn(3, ':');
        let (Some(p), Some(db), Some(count)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if p != point || db != database {
            continue;
        }
        let count: u64 = count.parse().unwrap_or(0);
        let Ok(mut fired) = FIRED.get_or_init(Mutex::default).lock() else {
            return false;
        };
        let n = fired.entry(fault.to_owned()).or_insert(0);
        *n += 1;
        return *n <= count;
    }
    false
}

/// Release builds have no transient faults.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub(crate) fn transient_fault(_point: &str, _database: &str) -> bool {
    false
}

/// Release builds have no fault points.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub(crate) fn fault_point(_point: &str, _database: &str) {}
