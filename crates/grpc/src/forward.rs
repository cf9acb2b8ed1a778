//! One call: served by the front ([`Sends`], [`Receives`]), by Python through the [`Inbox`], or
//! handed on to grpcio. Handed on, the client's request, with its URI made the upstream's and its
//! address set in [`PEER_HEADER`], goes out on one of the HTTP/2 connections to grpcio that all
//! client connections share ([`Upstream`]); grpcio's reply comes back as it is. Bodies are streamed frame by frame in both directions
//! (flow control on each side bounds what waits in between), trailers included, so server
//! streaming (ReceiveMessage) and long bidirectional calls (Telemetry) pass like unary ones.
//! Dropping either side resets the other's stream, so a client's cancel reaches grpcio.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::HeaderValue;
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Request, Response, Uri};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use crate::body::{CallBody, Handled, ReplyBody};
use crate::call::{trailers_only, GRPC_UNAVAILABLE, PEER_HEADER};
use crate::inbox::Inbox;
use crate::receives::{Receives, ACK_MESSAGE, RECEIVE_MESSAGE};
use crate::sends::{Sends, SEND_MESSAGE};
use crate::upstream::Upstream;

/// The calls of one connection, started and ended so far, and when one last started or ended:
/// what its idle clock reads.
#[derive(Debug)]
pub struct Calls {
    started: AtomicU64,
    ended: AtomicU64,
    since: Instant,
    /// When a call last started or ended (from the start, `since`: its accept), ms after `since`.
    last_ms: AtomicU64,
}

impl Default for Calls {
    fn default() -> Calls {
        Calls {
            started: AtomicU64::new(0),
            ended: AtomicU64::new(0),
            since: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }
}

impl Calls {
    /// Calls started on the connection so far (a change means it was used).
    pub fn started(&self) -> u64 {
        self.started.load(Ordering::Acquire)
    }

    /// Calls not ended yet (their reply's body is still being sent).
    pub fn open(&self) -> u64 {
        // `ended` first: a call that ends between the loads cannot make it exceed `started`.
        let ended = self.ended.load(Ordering::Acquire);
        self.started() - ended
    }

    /// When a call last started or ended, or the connection was accepted if none has.
    pub fn last_active(&self) -> Instant {
        self.since + Duration::from_millis(self.last_ms.load(Ordering::Acquire))
    }

    /// No call open, and none started or ended for `idle`.
    pub fn idle_for(&self, idle: Duration) -> bool {
        self.open() == 0 && self.last_active().elapsed() >= idle
    }

    fn touch(&self) {
        let ms = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.fetch_max(ms, Ordering::AcqRel);
    }

    fn begin(self: &Arc<Self>) -> OpenCall {
        self.started.fetch_add(1, Ordering::AcqRel);
        self.touch();
        OpenCall(self.clone())
    }
}

/// A call, counted open until its reply's body is dropped (sent or reset).
struct OpenCall(Arc<Calls>);

impl Drop for OpenCall {
    fn drop(&mut self) {
        self.0.touch();
        self.0.ended.fetch_add(1, Ordering::AcqRel);
    }
}

/// What one client connection hands its calls on with.
pub struct Forwarder {
    upstream: Arc<Upstream>,
    /// Which of the upstream connections its calls go on.
    key: usize,
    peer: HeaderValue,
    peer_addr: SocketAddr,
    servers: Servers,
    pub calls: Arc<Calls>,
}

/// What a connection's calls may be served by, beside grpcio.
#[derive(Clone, Default)]
pub struct Servers {
    /// SendMessage served by the front itself, when the broker's data plane serves sends.
    pub sends: Option<Arc<Sends>>,
    /// ReceiveMessage and AckMessage served by the front itself, when the plane serves pops.
    pub receives: Option<Arc<Receives>>,
    /// The calls Python serves without grpcio.
    pub inbox: Option<Arc<Inbox>>,
}

impl Forwarder {
    /// Calls from the client at `peer`, served by `servers` when one takes them, else handed on
    /// over `upstream`'s connection `key`, counted in `calls`.
    pub fn new(
        upstream: Arc<Upstream>,
        key: usize,
        peer: SocketAddr,
        servers: Servers,
        calls: Arc<Calls>,
    ) -> Forwarder {
        let peer_addr = peer;
        let peer = HeaderValue::from_str(&peer.to_string())
            .expect("a socket address is a valid header value");
        Forwarder {
            upstream,
            key,
            peer,
            peer_addr,
            servers,
            calls,
        }
    }

    /// The reply to `req`: the front's own, Python's through the inbox, grpcio's, or UNAVAILABLE
    /// when grpcio could not be asked.
    pub async fn call(&self, req: Request<Incoming>) -> Result<Response<Reply>, Infallible> {
        let call = self.calls.begin();
        let Servers {
            sends,
            receives,
            inbox,
        } = &self.servers;
        let handled = match (req.uri().path(), sends, receives) {
            (SEND_MESSAGE, Some(sends), _) => sends.serve(req, self.peer_addr).await,
            (RECEIVE_MESSAGE, _, Some(receives)) => receives.receive(req).await,
            (ACK_MESSAGE, _, Some(receives)) => receives.ack(req).await,
            _ => Handled::Declined(req.map(CallBody::streamed)),
        };
        let handled = match (handled, inbox) {
            // Read by the front and declined: Python's all the same.
            (Handled::Declined(req), Some(inbox)) if inbox.takes(req.uri().path()) => {
                inbox.serve(req, &self.peer).await
            }
            (handled, _) => handled,
        };
        let req = match handled {
            Handled::Answered(reply) => return Ok(reply.map(|body| Reply { body, _call: call })),
            Handled::Declined(req) => req,
        };
        let (mut parts, body) = req.into_parts();
        parts.uri = upstream_uri(parts.uri);
        // `insert` replaces every value the client sent: only the front names the peer.
        parts.headers.insert(PEER_HEADER, self.peer.clone());
        let reply = match self
            .upstream
            .send(self.key, Request::from_parts(parts, body))
            .await
        {
            Ok(reply) => reply.map(ReplyBody::Upstream),
            Err(e) => {
                log::debug!("gRPC call from {:?} not handed on: {e}", self.peer);
                trailers_only(
                    GRPC_UNAVAILABLE,
                    "the broker's gRPC service is not reachable",
                )
            }
        };
        Ok(reply.map(|body| Reply { body, _call: call }))
    }
}

/// The client's URI with the upstream's scheme (grpcio listens in plain text); gRPC clients
/// always send an authority and a path, the defaults only keep the URI whole.
fn upstream_uri(uri: Uri) -> Uri {
    let mut parts = uri.into_parts();
    parts.scheme = Some(Scheme::HTTP);
    parts
        .authority
        .get_or_insert(Authority::from_static("localhost"));
    parts
        .path_and_query
        .get_or_insert(PathAndQuery::from_static("/"));
    Uri::from_parts(parts).expect("a scheme, an authority and a path make a URI")
}

/// A reply's body, its call counted open until it is dropped (sent or reset).
pub struct Reply {
    body: ReplyBody,
    _call: OpenCall,
}

impl Body for Reply {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
