//! The front against a tiny HTTP/2 upstream on a Unix socket (standing in for grpcio) that streams
//! each request body back as it comes and ends with trailers naming the peer header it was given.
//! Real sockets; every wait is bounded.

use std::convert::Infallible;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
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

async fn upstream(listener: UnixListener) {
    while let Ok((sock, _)) = listener.accept().await {
        tokio::spawn(
            server::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(sock), service_fn(echo)),
        );
    }
}

/// The front on a free port forwarding to a fresh upstream at `socket`, served by `rt`.
fn start(rt: &Runtime, socket: &Path) -> GrpcFront {
    let listener = rt.block_on(async { UnixListener::bind(socket) }).unwrap();
    rt.spawn(upstream(listener));
    GrpcFront::start(FrontConfig {
        bind: "127.0.0.1:0".parse().unwrap(),
        upstream: socket.to_owned(),
        tls: None,
        threads: 1,
        sends: None,
        pops: None,
    })
    .unwrap()
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
    let err = GrpcFront::start(FrontConfig {
        bind: taken.local_addr().unwrap(),
        upstream: "/nonexistent.sock".into(),
        tls: None,
        threads: 1,
        sends: None,
        pops: None,
    })
    .err()
    .expect("bound twice");
    assert_eq!(err.kind(), ErrorKind::AddrInUse);
}
