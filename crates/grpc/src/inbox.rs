//! Calls handed to Python directly, not through grpcio: the request's message and metadata are
//! queued here and Python, woken on its event loop by an eventfd ([`Wake`]: one wake-up for a
//! burst), takes them, serves each with the same service grpcio would call, and answers with the
//! encoded reply messages or a gRPC status. grpcio's HTTP/2, its threads and the Unix socket hop
//! are out of the way of the calls Python serves whole (a lite consumer's receives and acks, the
//! route, heartbeat and offset calls).
//!
//! Python names the methods that come here; a call it did not name, a bidirectional one
//! (Telemetry), one compressed or larger than [`call::MAX_READ`], or one past
//! [`MAX_PENDING`] calls waiting goes to grpcio as before. A call the client resets (or whose
//! connection goes) before Python answered is told to Python as cancelled, so a long poll stops
//! waiting as grpcio would cancel it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use ferromq_broker::wake::Wake;
use http::header::HeaderValue;
use http::Request;
use tokio::sync::oneshot;

use crate::body::{CallBody, Handled};
use crate::call::{self, Held, GRPC_UNAVAILABLE, PEER_HEADER};

/// Calls handed to Python and not answered yet, at most (grpcio's hard limit of pending calls,
/// `MAX_PENDING_REQUESTS_HARD` in ferromq.proxy.server): past it, calls go to grpcio, which
/// bounds them its own way.
pub const MAX_PENDING: usize = 20_000;

/// One call for Python.
#[derive(Debug)]
pub struct InboxCall {
    pub id: u64,
    /// The method's path (`/apache.rocketmq.v2.MessagingService/QueryRoute`).
    pub method: String,
    /// The call's text metadata (binary `-bin` headers left out), with the client's address in
    /// [`PEER_HEADER`] as the front names it.
    pub metadata: Vec<(String, String)>,
    /// The client's deadline (`grpc-timeout`), from when the front read the call.
    pub timeout: Option<Duration>,
    /// The request message as the client encoded it.
    pub request: Bytes,
}

/// Python's answer to a call.
#[derive(Debug)]
pub enum Answer {
    /// The reply messages, encoded, in order (one for a unary call), with gRPC status OK.
    Replies(Vec<Bytes>),
    /// A gRPC status other than OK, and its message.
    Status(u32, String),
}

/// A call waiting for its answer: where the answer goes, and the request bytes it holds against
/// the front's read budget until then.
struct Pending {
    answer: oneshot::Sender<Answer>,
    _held: Held,
}

#[derive(Default)]
struct Queues {
    calls: Vec<InboxCall>,
    cancelled: Vec<u64>,
}

/// The calls of one front for Python.
pub struct Inbox {
    methods: HashSet<String>,
    queues: Mutex<Queues>,
    pending: Mutex<HashMap<u64, Pending>>,
    next_id: AtomicU64,
    wake: Wake,
    answered: AtomicU64,
}

impl Inbox {
    /// An inbox of the calls to `methods` (paths).
    pub fn new(methods: impl IntoIterator<Item = String>) -> std::io::Result<Inbox> {
        Ok(Inbox {
            methods: methods.into_iter().collect(),
            queues: Mutex::default(),
            pending: Mutex::default(),
            next_id: AtomicU64::new(1),
            wake: Wake::new()?,
            answered: AtomicU64::new(0),
        })
    }

    /// The descriptor Python watches: readable while calls or cancels wait to be taken.
    pub fn fd(&self) -> std::os::fd::RawFd {
        self.wake.fd()
    }

    /// Whether calls to `path` come here.
    pub fn takes(&self, path: &str) -> bool {
        self.methods.contains(path)
    }

    /// Calls Python answered so far.
    pub fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }

    /// Calls waiting for Python's answer now.
    pub fn pending(&self) -> usize {
        self.pending.lock().unwrap().len()
    }

    /// The calls queued since the last take, and the ids of calls cancelled since (a cancelled
    /// call may be among the calls taken with it: Python starts, then cancels it).
    pub fn take(&self) -> (Vec<InboxCall>, Vec<u64>) {
        self.wake.clear();
        let mut queues = self.queues.lock().unwrap();
        (
            std::mem::take(&mut queues.calls),
            std::mem::take(&mut queues.cancelled),
        )
    }

    /// Answers call `id`; false when it is no longer waiting (cancelled, or answered before).
    pub fn answer(&self, id: u64, answer: Answer) -> bool {
        let Some(pending) = self.pending.lock().unwrap().remove(&id) else {
            return false;
        };
        self.answered.fetch_add(1, Ordering::Relaxed);
        pending.answer.send(answer).is_ok()
    }

    /// Serves `req` through Python, or declines it (grpcio's): see the module's text. `peer` is
    /// the client's address as the front names it.
    pub async fn serve(&self, req: Request<CallBody>, peer: &HeaderValue) -> Handled {
        let readable = call::grpc_identity(req.headers()) && self.pending() < MAX_PENDING;
        if !readable {
            return Handled::Declined(req);
        }
        let (parts, _read, request, held) = match call::read_message(req).await {
            Ok(read) => read,
            Err(handled) => return handled,
        };
        let mut metadata: Vec<(String, String)> = parts
            .headers
            .iter()
            .filter(|(name, _)| !name.as_str().ends_with("-bin") && *name != PEER_HEADER)
            .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_string())))
            .collect();
        if let Ok(peer) = peer.to_str() {
            metadata.push((PEER_HEADER.to_string(), peer.to_string()));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (answer, answered) = oneshot::channel();
        self.pending.lock().unwrap().insert(
            id,
            Pending {
                answer,
                _held: held,
            },
        );
        let waiting = Waiting { inbox: self, id };
        self.queues.lock().unwrap().calls.push(InboxCall {
            id,
            method: parts.uri.path().to_string(),
            metadata,
            timeout: call::timeout(&parts.headers),
            request,
        });
        self.wake.signal();
        let answer = answered.await;
        // Answered (or the front stops): nothing left to cancel, and `Waiting` owns nothing.
        std::mem::forget(waiting);
        Handled::Answered(match answer {
            Ok(Answer::Replies(messages)) => call::encoded_reply(&messages),
            Ok(Answer::Status(code, message)) => call::trailers_only(code, &message),
            // Dropped unanswered: the front stops.
            Err(_) => call::trailers_only(GRPC_UNAVAILABLE, "the broker is stopping"),
        })
    }

    /// Call `id` will not be answered to anyone (its client went): Python is told to cancel it.
    fn cancel(&self, id: u64) {
        if self.pending.lock().unwrap().remove(&id).is_some() {
            self.queues.lock().unwrap().cancelled.push(id);
            self.wake.signal();
        }
    }
}

/// A call handed to Python whose answer is awaited: dropped before the answer came (the client
/// reset the call, or its connection went), Python cancels it.
struct Waiting<'a> {
    inbox: &'a Inbox,
    id: u64,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.inbox.cancel(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inbox() -> Inbox {
        Inbox::new(["/a.B/C".to_string()]).unwrap()
    }

    #[test]
    fn an_answer_reaches_a_waiting_call_once() {
        let inbox = inbox();
        let (tx, mut rx) = oneshot::channel();
        inbox.pending.lock().unwrap().insert(
            7,
            Pending {
                answer: tx,
                _held: Held::default(),
            },
        );
        assert!(inbox.answer(7, Answer::Status(5, "x".into())));
        assert!(
            !inbox.answer(7, Answer::Replies(vec![])),
            "answered already"
        );
        assert!(matches!(rx.try_recv(), Ok(Answer::Status(5, _))));
        assert_eq!(inbox.answered(), 1);
    }

    #[test]
    fn a_call_dropped_unanswered_is_told_as_cancelled_once() {
        let inbox = inbox();
        let (tx, _rx) = oneshot::channel();
        inbox.pending.lock().unwrap().insert(
            3,
            Pending {
                answer: tx,
                _held: Held::default(),
            },
        );
        drop(Waiting {
            inbox: &inbox,
            id: 3,
        });
        inbox.cancel(3);
        let (calls, cancelled) = inbox.take();
        assert!(calls.is_empty());
        assert_eq!(cancelled, vec![3]);
        assert!(
            !inbox.answer(3, Answer::Replies(vec![])),
            "no longer waiting"
        );
        assert!(inbox.takes("/a.B/C") && !inbox.takes("/a.B/D"));
    }
}
