//! A single-threaded async mutex: serializes the engine's read-modify-write sequences on
//! IndexedDB (two writes in one tab must not both read the same old document).
//!
//! First come, first served: a released lock passes straight to the oldest waiter, so a task
//! that asks while others wait never goes before them. (Had the release only woken the
//! waiter, a task asking before it ran would take the lock, and the waiter would queue again
//! at the back: under a steady stream of local writes, the relay's acknowledgements waited
//! behind every one of them.)

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// One waiting task: granted the lock by a release, woken by its waker.
#[derive(Default)]
struct Waiter {
    /// Set by the release that hands the lock over.
    granted: Cell<bool>,
    /// The task's latest waker.
    waker: RefCell<Option<Waker>>,
}

#[derive(Default)]
struct State {
    /// Whether a guard is alive, or the lock has been handed to a waiter not yet polled.
    locked: Cell<bool>,
    /// Tasks waiting for the lock, first come first served.
    waiters: RefCell<VecDeque<Rc<Waiter>>>,
}

/// The lock. Clone shares it.
#[derive(Clone, Default)]
pub struct AsyncLock {
    /// Shared by clones and guards: one lock however many handles.
    state: Rc<State>,
}

/// Held while alive; releasing hands the lock to the oldest waiter.
pub struct Guard {
    /// The lock this guard holds, released on drop.
    state: Rc<State>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let next = self.state.waiters.borrow_mut().pop_front();
        match next {
            // Still locked: it is the waiter's now.
            Some(w) => {
                w.granted.set(true);
                if let Some(waker) = w.waker.borrow_mut().take() {
                    waker.wake();
                }
            }
            None => self.state.locked.set(false),
        }
    }
}

struct Acquire {
    /// The lock being waited for.
    state: Rc<State>,
    /// This task's place in the queue, once it had to wait.
    waiter: Option<Rc<Waiter>>,
}

impl Future for Acquire {
    type Output = Guard;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Guard> {
        let state = self.state.clone();
        if let Some(w) = &self.waiter {
            if !w.granted.get() {
                *w.waker.borrow_mut() = Some(cx.waker().clone());
                return Poll::Pending;
            }
            // Handed over by a release: the guard is this task's (not given up on drop).
            self.waiter = None;
            return Poll::Ready(Guard { state });
        }
        if !state.locked.get() {
            state.locked.set(true);
            return Poll::Ready(Guard { state });
        }
        let w = Rc::new(Waiter::default());
        *w.waker.borrow_mut() = Some(cx.waker().clone());
        state.waiters.borrow_mut().push_back(w.clone());
        self.waiter = Some(w);
        Poll::Pending
    }
}

impl Drop for Acquire {
    /// A wait given up: its place goes, or the lock it was handed passes on.
    fn drop(&mut self) {
        let Some(w) = self.waiter.take() else { return };
        if w.granted.get() {
            drop(Guard {
                state: self.state.clone(),
            });
        } else {
            self.state
                .waiters
                .borrow_mut()
                .retain(|o| !Rc::ptr_eq(o, &w));
        }
    }
}

impl AsyncLock {
    pub fn lock(&self) -> impl Future<Output = Guard> {
        Acquire {
            state: self.state.clone(),
            waiter: None,
        }
    }
}
