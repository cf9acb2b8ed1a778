//! Flush coordination between appenders and the CommitLog flush thread.
//!
//! Appenders ask for "flushed past offset N" and either block (`wait`) or leave a callback
//! (`notify_when`). The flush thread flushes everything written so far in one go, so every
//! waiter whose offset it covers is released by the same flush: group commit.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

pub type FlushCallback = Box<dyn FnOnce(bool) + Send>;

struct Waiter {
    offset: u64,
    deadline: Instant,
    callback: FlushCallback,
}

#[derive(Default)]
struct State {
    requested: u64,
    waiters: Vec<Waiter>,
    stop: bool,
    failed: bool,
    /// The flush thread sleeps in `wait_for_work`: only then is waking it worth a syscall.
    flusher_idle: bool,
    /// Appenders blocked in `wait`.
    blocked: usize,
}

impl State {
    /// Raises the requested offset; true when the flush thread must be woken for it.
    fn ask(&mut self, offset: u64) -> bool {
        let more = offset > self.requested;
        self.requested = self.requested.max(offset);
        more && self.flusher_idle
    }
}

pub struct FlushSignal {
    state: Mutex<State>,
    /// Wakes the flush thread.
    work: Condvar,
    /// Wakes blocked appenders.
    done: Condvar,
    flushed: AtomicU64,
}

impl FlushSignal {
    pub fn new(flushed: u64) -> Self {
        FlushSignal {
            state: Mutex::new(State::default()),
            work: Condvar::new(),
            done: Condvar::new(),
            flushed: AtomicU64::new(flushed),
        }
    }

    pub fn flushed(&self) -> u64 {
        self.flushed.load(Ordering::Acquire)
    }

    /// Blocks until the CommitLog is flushed past `offset`; false on timeout or flush failure.
    pub fn wait(&self, offset: u64, timeout: Duration) -> bool {
        if self.flushed() >= offset {
            return true;
        }
        let deadline = Instant::now() + timeout;
        let mut st = self.state.lock().unwrap();
        if st.ask(offset) {
            self.work.notify_one();
        }
        st.blocked += 1;
        let mut ok = true;
        while self.flushed() < offset {
            let now = Instant::now();
            if st.failed || st.stop || now >= deadline {
                ok = false;
                break;
            }
            st = self.done.wait_timeout(st, deadline - now).unwrap().0;
        }
        st.blocked -= 1;
        ok
    }

    /// Calls `callback(true)` once the CommitLog is flushed past `offset` (right away if it
    /// already is), or `callback(false)` after `timeout` or a failed flush. The callback runs
    /// on the flush thread (or the caller's, if already flushed) and must not block.
    pub fn notify_when(&self, offset: u64, timeout: Duration, callback: FlushCallback) {
        if self.flushed() >= offset {
            callback(true);
            return;
        }
        let mut st = self.state.lock().unwrap();
        if st.stop {
            drop(st);
            callback(self.flushed() >= offset);
            return;
        }
        let wake = st.ask(offset);
        st.waiters.push(Waiter {
            offset,
            deadline: Instant::now() + timeout,
            callback,
        });
        if wake {
            self.work.notify_one();
        }
    }

    /// The log was cut back to `end` (a former master rejoining as a slave): nothing past it
    /// counts as done any more, so later data past `end` waits for its own flush.
    pub fn rewind(&self, end: u64) {
        let mut st = self.state.lock().unwrap();
        self.flushed.fetch_min(end, Ordering::AcqRel);
        st.requested = st.requested.min(end);
    }

    /// Asks for a flush of everything written so far without waiting.
    pub fn request(&self, offset: u64) {
        let mut st = self.state.lock().unwrap();
        if st.ask(offset) {
            self.work.notify_one();
        }
    }

    /// Flush thread: waits until a flush is requested (or `idle` passes). Returns false on stop.
    pub fn wait_for_work(&self, idle: Duration) -> bool {
        let mut st = self.state.lock().unwrap();
        if st.stop {
            return false;
        }
        if st.requested <= self.flushed() {
            st.flusher_idle = true;
            st = self.work.wait_timeout(st, idle).unwrap().0;
            st.flusher_idle = false;
            return !st.stop;
        }
        true
    }

    pub fn has_request(&self) -> bool {
        self.state.lock().unwrap().requested > self.flushed()
    }

    /// Flush thread: records a finished flush and releases the waiters it covers.
    pub fn complete(&self, flushed: u64, ok: bool) {
        let ready = {
            let mut st = self.state.lock().unwrap();
            self.flushed.fetch_max(flushed, Ordering::AcqRel);
            st.failed = !ok;
            let now = Instant::now();
            let flushed = self.flushed();
            let (ready, pending): (Vec<_>, Vec<_>) = st
                .waiters
                .drain(..)
                .partition(|w| w.offset <= flushed || !ok || w.deadline <= now);
            st.waiters = pending;
            if st.blocked > 0 {
                self.done.notify_all();
            }
            ready
        };
        let flushed = self.flushed();
        for w in ready {
            (w.callback)(w.offset <= flushed);
        }
    }

    /// Stops the flush thread's loop and fails whatever still waits.
    pub fn stop(&self) {
        let waiters = {
            let mut st = self.state.lock().unwrap();
            st.stop = true;
            self.work.notify_all();
            self.done.notify_all();
            std::mem::take(&mut st.waiters)
        };
        let flushed = self.flushed();
        for w in waiters {
            (w.callback)(w.offset <= flushed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn waiters_are_released_by_one_flush() {
        let sig = Arc::new(FlushSignal::new(0));
        let hits = Arc::new(AtomicU64::new(0));
        let mut handles = vec![];
        for i in 1..=8u64 {
            let s = sig.clone();
            handles.push(std::thread::spawn(move || {
                s.wait(i * 10, Duration::from_secs(5))
            }));
        }
        for i in 1..=3u64 {
            let h = hits.clone();
            sig.notify_when(
                i,
                Duration::from_secs(5),
                Box::new(move |ok| {
                    assert!(ok);
                    h.fetch_add(1, Ordering::SeqCst);
                }),
            );
        }
        while !sig.has_request() {
            std::thread::yield_now();
        }
        std::thread::sleep(Duration::from_millis(50));
        sig.complete(80, true);
        for h in handles {
            assert!(h.join().unwrap());
        }
        assert_eq!(hits.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn wait_times_out() {
        let sig = FlushSignal::new(0);
        assert!(!sig.wait(10, Duration::from_millis(20)));
        assert!(sig.wait(0, Duration::from_millis(20)));
    }
}
