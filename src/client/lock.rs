//! A single-threaded async mutex: serializes the engine's read-modify-write sequences on
//! IndexedDB (two writes in one tab must not both read the same old document).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

#[derive(Default)]
struct State {
    /// Whether a guard is alive.
    locked: Cell<bool>,
    /// Tasks waiting for the lock, first come first served.
    waiters: RefCell<VecDeque<Waker>>,
}

/// The lock. Clone shares it.
#[derive(Clone, Default)]
pub struct AsyncLock {
    /// Shared by clones and guards: one lock however many handles.
    state: Rc<State>,
}

/// Held while alive; releasing wakes the next waiter.
pub struct Guard {
    /// The lock this guard holds, released on drop.
    state: Rc<State>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.state.locked.set(false);
        if let Some(w) = self.state.waiters.borrow_mut().pop_front() {
            w.wake();
        }
    }
}

struct Acquire {
    /// The lock being waited for.
    state: Rc<State>,
}

impl Future for Acquire {
    type Output = Guard;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Guard> {
        if self.state.locked.get() {
            self.state
                .waiters
                .borrow_mut()
                .push_back(cx.waker().clone());
            Poll::Pending
        } else {
            self.state.locked.set(true);
            Poll::Ready(Guard {
                state: self.state.clone(),
            })
        }
    }
}

impl AsyncLock {
    pub fn lock(&self) -> impl Future<Output = Guard> {
        Acquire {
            state: self.state.clone(),
        }
    }
}
