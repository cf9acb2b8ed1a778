//! The gRPC port: a listener on its own small tokio runtime. Each client connection is told TLS
//! from plain by its first byte, as the remoting port does (`ferromq_remoting::tls`), then
//! served as HTTP/2 with its own HTTP/2 connection to grpcio on the Unix socket, over which
//! [`Forwarder`] hands its calls on. A client that sends garbage, stalls its handshake or goes
//! silent ends its own connection only: every connection is a task of its own.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferromq_remoting::tls::{TlsServer, HANDSHAKE_FIRST_BYTE};
use ferromq_remoting::{PopPort, SendPort};
use hyper::client::conn::http2 as client;
use hyper::server::conn::http2 as server;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpSocket, TcpStream, UnixStream};
use tokio::runtime::Runtime;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use crate::body::CallBody;
use crate::forward::Forwarder;
use crate::receives::{DeadLetters, Receives};
use crate::sends::Sends;

/// A client's first byte and its TLS handshake must come within this (a stalled one holds only
/// its own connection, and that only this long).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection without a call open for this long is sent GOAWAY and closed: Apache RocketMQ's
/// proxy does so (grpc-java's maxConnectionIdle, its grpcClientIdleTimeMills of 120 s).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// How often the idle clock is read (a connection goes at most this much past IDLE_TIMEOUT).
const IDLE_CHECK: Duration = Duration::from_secs(15);
/// A connection silent this long is pinged; one that does not answer within KEEPALIVE_TIMEOUT
/// is closed, so a vanished client's long calls (Telemetry, held receives) end upstream too.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);
/// Calls one connection may have open at once; a client past it waits for one to end (grpc
/// clients queue calls locally). Bounds what one connection holds with the flow control
/// windows (hyper's defaults: 1 MiB per connection and per call).
pub const MAX_CONCURRENT_STREAMS: u32 = 1_000;
/// HTTP/2's smallest maximum frame, its default: every client must accept it.
pub const MAX_FRAME_SIZE: u32 = 16 * 1024;
/// The headers (metadata) of one call: gRPC's own hard limit (grpc-core's, 16 KiB; Java's
/// default is 8 KiB); more would be refused by grpcio anyway.
pub const MAX_HEADER_LIST_SIZE: u32 = 16 * 1024;
/// A failed accept (out of descriptors, most often) is retried after this, not in a spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// After a stop, what the runtime's threads are given to end.
const RUNTIME_SHUTDOWN: Duration = Duration::from_secs(1);

/// What the front serves.
pub struct FrontConfig {
    /// The public address (port 0: any free port).
    pub bind: SocketAddr,
    /// The Unix socket grpcio listens on.
    pub upstream: PathBuf,
    /// TLS clients beside plain ones (permissive) or instead of them (enforcing); None: plain
    /// clients only (`tls.server.mode` disabled).
    pub tls: Option<TlsServer>,
    /// The threads of the front's runtime.
    pub threads: usize,
    /// The broker's data plane's sends: SendMessage is served by the front when given.
    pub sends: Option<SendPort>,
    /// The plane's pops, and where dead letters go: ReceiveMessage and AckMessage are served by
    /// the front when given (with `sends`), for the clients Python names.
    pub pops: Option<(PopPort, DeadLetters)>,
}

/// What every connection task shares.
struct Shared {
    upstream: PathBuf,
    tls: Option<TlsServer>,
    server: server::Builder<TokioExecutor>,
    client: client::Builder<TokioExecutor>,
    sends: Option<Arc<Sends>>,
    receives: Option<Arc<Receives>>,
}

/// The running front; [`GrpcFront::stop`] (or dropping it) ends it.
pub struct GrpcFront {
    sends: Option<Arc<Sends>>,
    receives: Option<Arc<Receives>>,
    runtime: Mutex<Option<Runtime>>,
    stop: watch::Sender<bool>,
    served: Mutex<Option<JoinHandle<()>>>,
    addr: SocketAddr,
}

impl GrpcFront {
    /// Binds `cfg.bind` (an error such as "address in use" is the bind's own) and serves on a
    /// runtime of `cfg.threads` threads.
    pub fn start(cfg: FrontConfig) -> io::Result<GrpcFront> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(cfg.threads.max(1))
            .thread_name("ferromq-grpc")
            .enable_all()
            .build()?;
        let listener = runtime.block_on(async {
            let sock = if cfg.bind.is_ipv6() {
                TcpSocket::new_v6()?
            } else {
                TcpSocket::new_v4()?
            };
            sock.set_reuseaddr(true)?;
            sock.bind(cfg.bind)?;
            sock.listen(1024)
        })?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream: cfg.upstream,
            tls: cfg.tls.map(offering_h2),
            server: http2_server(),
            client: client::Builder::new(TokioExecutor::new()),
            receives: match (cfg.pops, &cfg.sends) {
                (Some((pops, dead_letters)), Some(sends)) => {
                    Some(Arc::new(Receives::new(pops, sends.clone(), dead_letters)))
                }
                _ => None,
            },
            sends: cfg.sends.map(|port| Arc::new(Sends::new(port))),
        });
        let (stop, stopped) = watch::channel(false);
        let (sends, receives) = (shared.sends.clone(), shared.receives.clone());
        let served = runtime.spawn(accept_loop(listener, shared, stopped));
        Ok(GrpcFront {
            sends,
            receives,
            runtime: Mutex::new(Some(runtime)),
            stop,
            served: Mutex::new(Some(served)),
            addr,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// SendMessage calls the front answered itself so far (0 without a data plane).
    pub fn sends_answered(&self) -> u64 {
        self.sends.as_ref().map_or(0, |s| s.answered())
    }

    /// ReceiveMessage and AckMessage calls the front answered itself so far.
    pub fn receives_answered(&self) -> u64 {
        self.receives.as_ref().map_or(0, |r| r.answered())
    }

    /// The receives of the front, when it serves them (Python names their clients).
    pub fn receives(&self) -> Option<&Receives> {
        self.receives.as_deref()
    }

    /// Stops accepting and tells every connection to go (GOAWAY once its calls end); those
    /// still open after `grace` are closed as the runtime ends. Blocks (not from a runtime).
    pub fn stop(&self, grace: Duration) {
        let Some(runtime) = self.runtime.lock().unwrap().take() else {
            return;
        };
        self.stop.send_replace(true);
        if let Some(served) = self.served.lock().unwrap().take() {
            let _ = runtime.block_on(async { tokio::time::timeout(grace, served).await });
        }
        runtime.shutdown_timeout(RUNTIME_SHUTDOWN);
    }
}

impl Drop for GrpcFront {
    fn drop(&mut self) {
        self.stop(Duration::ZERO);
    }
}

/// `tls` with HTTP/2 selected by ALPN: gRPC clients (grpc-java, grpc-core) refuse a TLS server
/// that does not choose "h2". The remoting port's configuration is otherwise kept as it is.
fn offering_h2(tls: TlsServer) -> TlsServer {
    let mut config = (**tls.acceptor.config()).clone();
    config.alpn_protocols = vec![b"h2".to_vec()];
    TlsServer {
        enforcing: tls.enforcing,
        acceptor: TlsAcceptor::from(Arc::new(config)),
    }
}

fn http2_server() -> server::Builder<TokioExecutor> {
    let mut builder = server::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .max_frame_size(MAX_FRAME_SIZE)
        .max_header_list_size(MAX_HEADER_LIST_SIZE)
        .keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        // grpcio's headers go out as grpcio wrote them.
        .auto_date_header(false);
    builder
}

/// Accepts until told to stop, then waits for every connection task to end.
async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stopped: watch::Receiver<bool>,
) {
    // Each connection task holds a sender; `ended` yields None once all are dropped.
    let (open, mut ended) = mpsc::channel::<()>(1);
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = stopped.wait_for(|stop| *stop) => break,
        };
        match accepted {
            Ok((sock, peer)) => {
                let _ = sock.set_nodelay(true);
                let (shared, stopped, open) = (shared.clone(), stopped.clone(), open.clone());
                tokio::spawn(async move {
                    connection(&shared, sock, peer, stopped).await;
                    drop(open);
                });
            }
            Err(e) => {
                log::warn!("gRPC port: accept failed: {e}");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
    drop(listener);
    drop(open);
    let _ = ended.recv().await;
}

/// One client: TLS or plain by its first byte (0x16 starts a TLS handshake record, as Java's
/// sniffer has it), then HTTP/2 until either side ends it.
async fn connection(
    shared: &Shared,
    sock: TcpStream,
    peer: SocketAddr,
    stopped: watch::Receiver<bool>,
) {
    let mut first = [0u8; 1];
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, sock.peek(&mut first)).await {
        Ok(Ok(1)) => {}
        // Closed, failed, or silent for too long.
        _ => return,
    }
    let Some(tls) = shared.tls.as_ref() else {
        return serve(shared, sock, peer, stopped).await;
    };
    if first[0] != HANDSHAKE_FIRST_BYTE {
        if tls.enforcing {
            log::info!("gRPC: plain connection from {peer} closed: tls.server.mode is enforcing");
            return;
        }
        return serve(shared, sock, peer, stopped).await;
    }
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.acceptor.accept(sock)).await {
        Ok(Ok(stream)) => serve(shared, stream, peer, stopped).await,
        Ok(Err(e)) => log::info!("gRPC: TLS handshake with {peer} failed: {e}"),
        Err(_) => {
            log::info!("gRPC: TLS handshake with {peer} unfinished after {HANDSHAKE_TIMEOUT:?}")
        }
    }
}

/// grpcio's end of a new HTTP/2 connection on its Unix socket, and the task that drives it.
async fn open_upstream(
    shared: &Shared,
) -> io::Result<(
    client::SendRequest<CallBody>,
    client::Connection<TokioIo<UnixStream>, CallBody, TokioExecutor>,
)> {
    let sock = UnixStream::connect(&shared.upstream).await?;
    shared
        .client
        .handshake(TokioIo::new(sock))
        .await
        .map_err(io::Error::other)
}

/// HTTP/2 with the client on `io`, its calls handed on to grpcio until the client goes, grpcio
/// goes, the front stops or the connection has been idle for IDLE_TIMEOUT.
async fn serve<I>(shared: &Shared, io: I, peer: SocketAddr, mut stopped: watch::Receiver<bool>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (upstream, upstream_conn) = match open_upstream(shared).await {
        Ok(opened) => opened,
        Err(e) => {
            log::warn!(
                "gRPC: client {peer} closed, grpcio is not reachable at {}: {e}",
                shared.upstream.display()
            );
            return;
        }
    };
    let forwarder = Arc::new(Forwarder::new(
        upstream,
        peer,
        shared.sends.clone(),
        shared.receives.clone(),
    ));
    let calls = forwarder.calls.clone();
    let service = service_fn(move |req| {
        let forwarder = forwarder.clone();
        async move { forwarder.call(req).await }
    });
    let conn = shared.server.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    tokio::pin!(upstream_conn);
    let mut ticks = tokio::time::interval(IDLE_CHECK);
    let (mut seen, mut idle_since) = (calls.started(), Instant::now());
    let mut upstream_open = true;
    let mut closing = false;
    loop {
        tokio::select! {
            done = &mut conn => {
                if let Err(e) = done {
                    log::debug!("gRPC: connection from {peer} ended: {e}");
                }
                return;
            }
            done = &mut upstream_conn, if upstream_open => {
                // grpcio closed it (it is stopping): the client's calls on it have failed, and
                // the client is told to go.
                upstream_open = false;
                if let Err(e) = done {
                    log::debug!("gRPC: grpcio's connection for {peer} ended: {e}");
                }
                if !closing {
                    closing = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
            _ = stopped.wait_for(|stop| *stop), if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = ticks.tick(), if !closing => {
                let started = calls.started();
                if calls.open() > 0 || started != seen {
                    (seen, idle_since) = (started, Instant::now());
                } else if idle_since.elapsed() >= IDLE_TIMEOUT {
                    log::debug!("gRPC: connection from {peer} idle for {IDLE_TIMEOUT:?}, closed");
                    closing = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}
