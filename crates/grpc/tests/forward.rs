//! The front against a tiny HTTP/2 upstream on a Unix socket (standing in for grpcio) that streams
//! each request body back as it comes and ends with trailers naming the peer header it was given.
//! Real sockets; every wait is bounded.

use std::convert::Infallible;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ferromq_grpc::upstream::UPSTREAM_CONNECTIONS;
use ferromq_grpc::{FrontConfig, GrpcFront, PEER_HEADER};
use http::{HeaderMap, Request, Response};
use http_body_util::channel::{Channel, Sender};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::client::conn::http2 as client;
use hyper::server::conn::http2 as server;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener};
use tokio::runtime::Runtime;

const WAIT: Duration = Duration::from_secs(10);

/// Echoes the request's data frames as they arrive, then trailers: grpc-status 0 and
/// `x-seen-peer`, the peer header values the upstream got, comma-joined.
async fn echo(req: Request<Incoming>) -> Result<Response<Channel<Bytes, Infallible>>, Infallible> {
    let peers: Vec<String> = req
        .headers()
        .get_all(PEER_HEADER)
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    let (mut tx, body) = Channel::new(4);
    let mut incoming = req.into_body();
    tokio::spawn(async move {
        while let Some(Ok(frame)) = incoming.frame().await {
            if let Ok(data) = frame.into_data() {
                if tx.send_data(data).await.is_err() {
                    return;
                }
            }
        }
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", "0".parse().unwrap());
        trailers.insert("x-seen-peer", peers.join(",").parse().unwrap());
        let _ = tx.send_trailers(trailers).await;
    });
    Ok(Response::new(body))
}

async fn upstream(listener: UnixListener, accepted: Arc<AtomicUsize>) {
    while let Ok((sock, _)) = listener.accept().await {
        accepted.fetch_add(1, Ordering::AcqRel);
        tokio::spawn(
            server::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(sock), service_fn(echo)),
        );
    }
}

/// The front on a free port forwarding to a fresh upstream at `socket`, served by `rt`.
fn start(rt: &Runtime, socket: &Path) -> GrpcFront {
    start_with(rt, socket, |_| {}).0
}

/// As [`start`], with `cfg` changed by `change`; and the count of connections the upstream
/// accepted.
fn start_with(
    rt: &Runtime,
    socket: &Path,
    change: impl FnOnce(&mut FrontConfig),
) -> (GrpcFront, Arc<AtomicUsize>) {
    let listener = rt.block_on(async { UnixListener::bind(socket) }).unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    rt.spawn(upstream(listener, accepted.clone()));
    let mut cfg = FrontConfig::new("127.0.0.1:0".parse().unwrap(), socket.to_owned());
    change(&mut cfg);
    (GrpcFront::start(cfg).unwrap(), accepted)
}

/// A connection from `from` (an address of the loopback network) to `to`.
async fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind(format!("{from}:0").parse().unwrap()).unwrap();
    sock.connect(to).await.unwrap()
}

/// HTTP/2's client preface and an empty SETTINGS frame.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// Whether the front closed `sock` within `within` (what it sent before is read and dropped).
async fn closed_within(sock: &mut TcpStream, within: Duration) -> bool {
    let mut rest = Vec::new();
    matches!(
        tokio::time::timeout(within, sock.read_to_end(&mut rest)).await,
        Ok(Ok(_)) | Ok(Err(_))
    )
}

/// Whether the front answered `sock`'s preface with its SETTINGS within WAIT (a frame of type 4).
async fn served(sock: &mut TcpStream) -> bool {
    let mut header = [0u8; 9];
    match tokio::time::timeout(WAIT, sock.read_exact(&mut header)).await {
        Ok(Ok(_)) => header[3] == 4,
        _ => false,
    }
}

/// Waits (bounded) until `cond` holds.
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "not within {WAIT:?}: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

async fn next_data(body: &mut Incoming) -> Bytes {
    let frame = tokio::time::timeout(WAIT, body.frame()).await.unwrap();
    frame.unwrap().unwrap().into_data().unwrap()
}

/// One streaming call through the front: each chunk comes back before the next is sent (nothing
/// waits for the whole body), the trailers arrive, and the upstream saw only the front's peer.
async fn round_trip(front: SocketAddr) {
    let sock = TcpStream::connect(front).await.unwrap();
    let me = sock.local_addr().unwrap();
    let (mut send, conn) = client::Builder::new(TokioExecutor::new())
        .handshake::<_, Channel<Bytes, Infallible>>(TokioIo::new(sock))
        .await
        .unwrap();
    tokio::spawn(conn);
    let (mut tx, body): (Sender<Bytes, Infallible>, _) = Channel::new(4);
    let req = Request::post(format!(
        "http://{front}/apache.rocketmq.v2.MessagingService/Telemetry"
    ))
    .header("content-type", "application/grpc")
    .header(PEER_HEADER, "6.6.6.6:6")
    .body(body)
    .unwrap();
    let reply = tokio::time::timeout(WAIT, send.send_request(req));
    tx.send_data(Bytes::from_static(b"one")).await.unwrap();
    let mut reply = reply.await.unwrap().unwrap().into_body();
    assert_eq!(next_data(&mut reply).await, "one");
    tx.send_data(Bytes::from_static(b"two")).await.unwrap();
    assert_eq!(next_data(&mut reply).await, "two");
    drop(tx);
    let last = tokio::time::timeout(WAIT, reply.frame()).await.unwrap();
    let trailers = last.unwrap().unwrap().into_trailers().unwrap();
    assert_eq!(trailers["grpc-status"], "0");
    assert_eq!(trailers["x-seen-peer"], me.to_string().as_str());
}

#[test]
fn streams_both_ways_with_trailers_and_the_clients_address() {
    let dir = tempfile::tempdir().unwrap();
    let rt = Runtime::new().unwrap();
    let front = start(&rt, &dir.path().join("grpc.sock"));
    rt.block_on(round_trip(front.local_addr()));
    front.stop(WAIT);
}

#[test]
fn garbage_closes_its_own_connection_only() {
    let dir = tempfile::tempdir().unwrap();
    let rt = Runtime::new().unwrap();
    let front = start(&rt, &dir.path().join("grpc.sock"));
    let addr = front.local_addr();
    rt.block_on(async {
        let mut bad = TcpStream::connect(addr).await.unwrap();
        bad.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        // Another client is served meanwhile; then the bad one finds its connection closed.
        round_trip(addr).await;
        let mut rest = Vec::new();
        let read = tokio::time::timeout(WAIT, bad.read_to_end(&mut rest)).await;
        assert!(read.is_ok(), "the front kept a non-HTTP/2 connection open");
        round_trip(addr).await;
    });
    front.stop(WAIT);
}

#[test]
fn a_taken_port_is_an_address_in_use_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let err = GrpcFront::start(FrontConfig::new(
        taken.local_addr().unwrap(),
        "/nonexistent.sock".into(),
    ))
    .err()
    .expect("bound twice");
    assert_eq!(err.kind(), ErrorKind::AddrInUse);
}

#[test]
fn clients_share_a_few_upstream_connections_opened_by_their_first_forwarded_call() {
    let dir = tempfile::tempdir().unwrap();
    let rt = Runtime::new().unwrap();
    let (front, accepted) = start_with(&rt, &dir.path().join("grpc.sock"), |_| {});
    let addr = front.local_addr();
    // Connections that only say hello open nothing upstream.
    let mut idle = Vec::new();
    rt.block_on(async {
        for _ in 0..50 {
            let mut sock = TcpStream::connect(addr).await.unwrap();
            sock.write_all(PREFACE).await.unwrap();
            assert!(served(&mut sock).await);
            idle.push(sock);
        }
    });
    wait_for("50 connections open", || front.open_connections() == 50);
    assert_eq!(accepted.load(Ordering::Acquire), 0);
    assert_eq!(front.upstream_connections(), 0);
    // Forty clients' calls, ten at a time, share at most UPSTREAM_CONNECTIONS.
    rt.block_on(async {
        for _ in 0..4 {
            let calls: Vec<_> = (0..10).map(|_| tokio::spawn(round_trip(addr))).collect();
            for call in calls {
                call.await.unwrap();
            }
        }
    });
    assert!((1..=UPSTREAM_CONNECTIONS).contains(&accepted.load(Ordering::Acquire)));
    drop(idle);
    front.stop(WAIT);
}

#[test]
fn an_address_past_its_share_is_closed_and_others_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let rt = Runtime::new().unwrap();
    let (front, _) = start_with(&rt, &dir.path().join("grpc.sock"), |cfg| {
        cfg.max_connections_per_address = 3;
    });
    let addr = front.local_addr();
    rt.block_on(async {
        let mut held = Vec::new();
        for _ in 0..3 {
            let mut sock = connect_from("127.0.0.1", addr).await;
            sock.write_all(PREFACE).await.unwrap();
            assert!(served(&mut sock).await);
            held.push(sock);
        }
        for _ in 0..2 {
            let mut past = connect_from("127.0.0.1", addr).await;
            let _ = past.write_all(PREFACE).await;
            assert!(
                closed_within(&mut past, WAIT).await,
                "past the share, still open"
            );
        }
        // Another address is served meanwhile, and so is this one once a slot is free.
        let mut other = connect_from("127.0.0.2", addr).await;
        other.write_all(PREFACE).await.unwrap();
        assert!(served(&mut other).await);
        drop(held.pop());
        let deadline = Instant::now() + WAIT;
        loop {
            let mut again = connect_from("127.0.0.1", addr).await;
            let _ = again.write_all(PREFACE).await;
            if served(&mut again).await {
                break;
            }
            assert!(Instant::now() < deadline, "a freed slot was not given back");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    front.stop(WAIT);
}

#[test]
fn at_the_cap_the_longest_idle_connection_makes_room() {
    let dir = tempfile::tempdir().unwrap();
    let rt = Runtime::new().unwrap();
    let (front, _) = start_with(&rt, &dir.path().join("grpc.sock"), |cfg| {
        cfg.max_connections = 3;
    });
    let addr = front.local_addr();
    rt.block_on(async {
        let mut socks = Vec::new();
        for _ in 0..3 {
            let mut sock = TcpStream::connect(addr).await.unwrap();
            sock.write_all(PREFACE).await.unwrap();
            assert!(served(&mut sock).await);
            socks.push(sock);
            // Accepted one after the other: each idle since its own accept.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut newest = TcpStream::connect(addr).await.unwrap();
        newest.write_all(PREFACE).await.unwrap();
        assert!(served(&mut newest).await);
        assert!(
            closed_within(&mut socks[0], WAIT).await,
            "the oldest idle one is open"
        );
        round_trip(addr).await;
    });
    front.stop(WAIT);
}

#[test]
fn silent_and_preface_only_connections_are_closed_within_the_timeouts() {
    let dir = tempfile::tempdir().unwrap();
    let rt = Runtime::new().unwrap();
    let idle = Duration::from_millis(400);
    let (front, _) = start_with(&rt, &dir.path().join("grpc.sock"), |cfg| {
        cfg.idle_timeout = Some(idle);
    });
    let addr = front.local_addr();
    rt.block_on(async {
        let mut silent = TcpStream::connect(addr).await.unwrap();
        let mut half = TcpStream::connect(addr).await.unwrap();
        half.write_all(&PREFACE[..10]).await.unwrap();
        let mut hello = TcpStream::connect(addr).await.unwrap();
        hello.write_all(PREFACE).await.unwrap();
        let mut stalled = TcpStream::connect(addr).await.unwrap();
        stalled.write_all(&PREFACE[..10]).await.unwrap();
        let started = Instant::now();
        for (name, sock) in [
            ("silent", &mut silent),
            ("half", &mut half),
            ("hello", &mut hello),
        ] {
            assert!(
                closed_within(sock, WAIT).await,
                "{name}: open without calls"
            );
        }
        assert!(started.elapsed() < idle * 2 + Duration::from_secs(1));
        // A connection in use meanwhile is not idle.
        round_trip(addr).await;
        drop(stalled);
    });
    wait_for("every connection closed", || front.open_connections() == 0);
    front.stop(WAIT);
}

/// A unary call of `message` (one gRPC frame) to `path` on a new connection; the reply's head and
/// body. Dropping the returned future resets the call.
async fn unary(front: SocketAddr, path: &str, message: &'static [u8]) -> (HeaderMap, Bytes) {
    let sock = TcpStream::connect(front).await.unwrap();
    let (mut send, conn) = client::Builder::new(TokioExecutor::new())
        .handshake::<_, http_body_util::Full<Bytes>>(TokioIo::new(sock))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut framed = vec![0u8];
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(message);
    let req = Request::post(format!("http://{front}{path}"))
        .header("content-type", "application/grpc")
        .header("grpc-timeout", "5S")
        .header(PEER_HEADER, "6.6.6.6:6")
        .body(http_body_util::Full::new(Bytes::from(framed)))
        .unwrap();
    let reply = send.send_request(req).await.unwrap();
    let head = reply.headers().clone();
    let body = reply.into_body().collect().await.unwrap().to_bytes();
    (head, body)
}

#[test]
fn the_inbox_hands_its_methods_calls_to_whoever_takes_them_and_tells_a_reset_call() {
    const ROUTE: &str = "/apache.rocketmq.v2.MessagingService/QueryRoute";
    let dir = tempfile::tempdir().unwrap();
    let rt = Runtime::new().unwrap();
    let (front, accepted) = start_with(&rt, &dir.path().join("grpc.sock"), |cfg| {
        cfg.inbox_methods = vec![ROUTE.to_string()];
    });
    let addr = front.local_addr();
    let inbox = front.inbox().expect("methods named: an inbox");
    // Answered by the taker: its reply messages framed, then status OK.
    let call = rt.spawn(unary(addr, ROUTE, b"route me"));
    let mut taken = Vec::new();
    wait_for("the call is queued", || {
        taken.extend(inbox.take().0);
        !taken.is_empty()
    });
    let c = taken.pop().unwrap();
    assert_eq!(
        (c.method.as_str(), &c.request[..]),
        (ROUTE, &b"route me"[..])
    );
    assert_eq!(c.timeout, Some(Duration::from_secs(5)));
    let peers: Vec<_> = c
        .metadata
        .iter()
        .filter(|(k, _)| k == PEER_HEADER)
        .collect();
    assert_eq!(peers.len(), 1, "only the front names the peer");
    assert_ne!(peers[0].1, "6.6.6.6:6");
    let replies = vec![Bytes::from_static(b"one"), Bytes::from_static(b"two")];
    assert!(inbox.answer(c.id, ferromq_grpc::inbox::Answer::Replies(replies)));
    let (_, body) = rt.block_on(call).unwrap();
    assert_eq!(&body[..], b"\0\0\0\0\x03one\0\0\0\0\x03two");
    // A status answer comes as trailers only, its message percent-encoded.
    let call = rt.spawn(unary(addr, ROUTE, b"refuse me"));
    let mut taken = Vec::new();
    wait_for("the second call is queued", || {
        taken.extend(inbox.take().0);
        !taken.is_empty()
    });
    let refused = ferromq_grpc::inbox::Answer::Status(13, "bad 100%".into());
    assert!(inbox.answer(taken[0].id, refused));
    let (head, body) = rt.block_on(call).unwrap();
    assert_eq!(
        (&head["grpc-status"], &head["grpc-message"]),
        (&"13".parse().unwrap(), &"bad 100%25".parse().unwrap())
    );
    assert!(body.is_empty());
    // A call whose client resets it is told as cancelled, and answering it is a no-op.
    let call = rt.spawn(unary(addr, ROUTE, b"forget me"));
    let mut taken = Vec::new();
    wait_for("the third call is queued", || {
        taken.extend(inbox.take().0);
        !taken.is_empty()
    });
    call.abort();
    let mut cancelled = Vec::new();
    wait_for("the reset call is told", || {
        cancelled.extend(inbox.take().1);
        !cancelled.is_empty()
    });
    assert_eq!(cancelled, vec![taken[0].id]);
    assert!(!inbox.answer(taken[0].id, ferromq_grpc::inbox::Answer::Replies(vec![])));
    // Other methods still go to the upstream (grpcio).
    rt.block_on(round_trip(addr));
    assert_eq!(accepted.load(Ordering::Acquire), 1);
    assert_eq!(inbox.answered(), 2);
    front.stop(WAIT);
}
