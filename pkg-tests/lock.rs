//! Browser tests of the engine's async lock (`client::lock`): first come, first served,
//! whoever asks while a released lock's waiter has not run yet.
//!
//! Run: `wasm-pack test --headless --chrome -- --test lock` (see scripts/test).
#![cfg(target_arch = "wasm32")]
// Tests unwrap: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use hearth::client::lock::{AsyncLock, Guard};
use wasm_bindgen_test::{wasm_bindgen_test, wasm_bindgen_test_configure};

wasm_bindgen_test_configure!(run_in_browser);

struct Noop;
impl Wake for Noop {
    fn wake(self: Arc<Self>) {}
}

fn poll(f: &mut Pin<Box<impl Future<Output = Guard>>>) -> Option<Guard> {
    let waker = Waker::from(Arc::new(Noop));
    match f.as_mut().poll(&mut Context::from_waker(&waker)) {
        Poll::Ready(g) => Some(g),
        Poll::Pending => None,
    }
}

#[wasm_bindgen_test]
fn a_released_lock_goes_to_the_oldest_waiter_not_to_a_newcomer() {
    let lock = AsyncLock::default();
    let held = poll(&mut Box::pin(lock.lock())).expect("free");
    let mut waiting = Box::pin(lock.lock());
    assert!(poll(&mut waiting).is_none());
    drop(held);
    // A task asking after the release, before the waiter runs, waits behind it.
    let mut newcomer = Box::pin(lock.lock());
    assert!(poll(&mut newcomer).is_none(), "the newcomer went first");
    let first = poll(&mut waiting).expect("the waiter has it");
    assert!(poll(&mut newcomer).is_none());
    drop(first);
    assert!(poll(&mut newcomer).is_some());
}

#[wasm_bindgen_test]
fn a_wait_given_up_passes_the_lock_on() {
    let lock = AsyncLock::default();
    let held = poll(&mut Box::pin(lock.lock())).expect("free");
    let mut gone = Box::pin(lock.lock());
    let mut next = Box::pin(lock.lock());
    assert!(poll(&mut gone).is_none());
    assert!(poll(&mut next).is_none());
    drop(held);
    drop(gone);
    assert!(poll(&mut next).is_some());
    drop(next);
    assert!(poll(&mut Box::pin(lock.lock())).is_some());
}
