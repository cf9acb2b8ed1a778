//! One connection's state on the data plane: its reply queue and the bounds on it, whether it
//! is read, its idle clock, why it closed, and what the ACL decided about its peer.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::{mpsc, Notify};

use crate::acl::PeerAcl;

/// What the writer of a connection is given.
pub(crate) enum Out {
    Frame(Vec<u8>),
    /// Write what is queued, then close.
    Close,
}

pub(crate) struct Conn {
    pub(crate) id: u64,
    pub(crate) peer: SocketAddr,
    pub(crate) out: mpsc::UnboundedSender<Out>,
    /// Reply bytes queued and not yet written.
    pub(crate) queued: AtomicUsize,
    pub(crate) reply_bound: usize,
    /// Reply bytes queued on every connection (the process-wide budget's use).
    pub(crate) all_queued: Arc<AtomicUsize>,
    pub(crate) all_bound: usize,
    pub(crate) drained: Notify,
    /// A write queued past the bound (Python was told, by the count `write` returned): the
    /// writer says when half of the bound is left.
    pub(crate) over: AtomicBool,
    /// Reading paused by Python (its own per-connection bounds).
    pub(crate) paused: AtomicBool,
    pub(crate) resumed: Notify,
    /// Ends the reader and the writer at once (abort, idle, shutdown).
    pub(crate) kill: Notify,
    pub(crate) killed: AtomicBool,
    /// Milliseconds since the plane started of the last complete request read (or of the
    /// last time the plane let it read again): the idle clock, and the order of eviction.
    pub(crate) last_activity: AtomicU64,
    pub(crate) reason: Mutex<Option<&'static str>>,
    /// What the ACL decided about the peer's address (None until Python says).
    pub(crate) acl: RwLock<Option<Arc<PeerAcl>>>,
}

impl Conn {
    /// Queues a frame (or several) for the peer; the reply bytes queued now.
    pub(crate) fn write(&self, bytes: Vec<u8>) -> usize {
        let n = bytes.len();
        self.all_queued.fetch_add(n, Ordering::AcqRel);
        let queued = self.queued.fetch_add(n, Ordering::AcqRel) + n;
        if queued > self.reply_bound {
            self.over.store(true, Ordering::Release);
        }
        let _ = self.out.send(Out::Frame(bytes));
        queued
    }

    pub(crate) fn peer_acl(&self) -> Option<Arc<PeerAcl>> {
        self.acl.read().unwrap().clone()
    }

    pub(crate) fn set_reason(&self, why: &'static str) {
        let mut r = self.reason.lock().unwrap();
        if r.is_none() {
            *r = Some(why);
        }
    }

    pub(crate) fn kill(&self, why: &'static str) {
        self.set_reason(why);
        self.killed.store(true, Ordering::Release);
        self.kill.notify_waiters();
        self.resumed.notify_waiters();
        self.drained.notify_waiters();
    }

    pub(crate) fn over_reply_bound(&self) -> bool {
        self.queued.load(Ordering::Acquire) > self.reply_bound
    }

    /// Whether another request may be answered while `pending` more reply bytes wait to be
    /// queued: replies build up to the connection's bound and, all connections together, to
    /// the process-wide budget; past either, its requests wait unread until the peer takes
    /// replies. A connection with nothing queued is always answered once (a new client is
    /// served however full the budget is; each such connection holds one reply at most).
    pub(crate) fn may_answer(&self, pending: usize) -> bool {
        let queued = self.queued.load(Ordering::Acquire) + pending;
        queued == 0
            || (queued < self.reply_bound
                && self.all_queued.load(Ordering::Acquire) + pending < self.all_bound)
    }

    /// Written (or dropped): `n` bytes leave both counts.
    pub(crate) fn dequeued(&self, n: usize) -> usize {
        self.all_queued.fetch_sub(n, Ordering::AcqRel);
        self.queued.fetch_sub(n, Ordering::AcqRel)
    }

    pub(crate) fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Acquire)
    }

    /// Waits until the replies queued are at most half the bound; false when the connection
    /// ends first.
    pub(crate) async fn until_drained(&self) -> bool {
        loop {
            let drained = self.drained.notified();
            if self.is_killed() {
                return false;
            }
            if self.queued.load(Ordering::Acquire) <= self.reply_bound / 2 {
                return true;
            }
            tokio::select! {
                _ = drained => {}
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        // Replies never written leave the process-wide count with the connection.
        self.all_queued
            .fetch_sub(self.queued.load(Ordering::Acquire), Ordering::AcqRel);
    }
}

/// Completes once the connection is killed (at once if it already is).
pub(crate) async fn until_killed(conn: &Conn) {
    let notified = conn.kill.notified();
    if !conn.killed.load(Ordering::Acquire) {
        notified.await;
    }
}
