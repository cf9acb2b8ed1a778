//! The gRPC port: a listener on its own small tokio runtime. Each client connection is told TLS
//! from plain by its first byte, as the remoting port does (`ferromq_remoting::tls`), then
//! served as HTTP/2; [`Forwarder`] gives each call to whatever serves it: the front itself, Python
//! through the [`Inbox`], or grpcio over the few HTTP/2 connections on its Unix socket that every
//! client shares ([`Upstream`]), so a client connection costs one descriptor. A client that sends garbage, stalls its
//! handshake or goes silent ends its own connection only: every connection is a task of its own.
//!
//! Bounds, those of the remoting port (`serverMaxConnections`, `serverMaxConnectionsPerAddress`,
//! `serverChannelMaxIdleTimeSeconds`): a connection past its address's share is accepted and
//! closed; at the cap the connection idle the longest (no call open) is closed to make room for
//! the new one, and when every one has a call open the new one is closed. A connection that has
//! not sent its HTTP/2 preface and SETTINGS within the handshake timeout is closed, and so is one
//! without a call open for the idle timeout. Refusals are logged once per kind and 10 s.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use ferromq_broker::{PopPort, SendPort};
use ferromq_remoting::tls::{TlsServer, HANDSHAKE_FIRST_BYTE};
use hyper::server::conn::http2 as server;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::runtime::Runtime;
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use crate::forward::{Calls, Forwarder, Servers};
use crate::inbox::Inbox;
use crate::receives::{DeadLetters, Receives};
use crate::sends::Sends;
use crate::upstream::Upstream;

/// A client's first byte, its TLS handshake, and its HTTP/2 preface and SETTINGS must each come
/// within this, or the idle timeout if shorter (a stalled one holds only its own connection,
/// and that only this long).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection without a call open for this long is sent GOAWAY and closed: Apache RocketMQ's
/// proxy does so (grpc-java's maxConnectionIdle, its grpcClientIdleTimeMills of 120 s). The
/// default of [`FrontConfig::idle_timeout`], the remoting port's too.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// How often the idle clock is read at most (a connection goes at most a quarter of the idle
/// timeout, and at most this, past it).
const IDLE_CHECK: Duration = Duration::from_secs(15);
/// The default connection caps, the remoting port's (`serverMaxConnections`,
/// `serverMaxConnectionsPerAddress`).
pub const MAX_CONNECTIONS: usize = 10_000;
pub const MAX_CONNECTIONS_PER_ADDRESS: usize = 1_000;
/// The client's first bytes that must come within the handshake timeout: HTTP/2's preface (24
/// bytes) and the header of the SETTINGS frame that must follow it.
const PREFACE_AND_SETTINGS: u64 = 24 + 9;
/// Refusals of one kind are logged at most once in this, with their count.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);
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
    /// The methods (paths) whose calls Python takes from the front's [`Inbox`] instead of
    /// grpcio; empty: none.
    pub inbox_methods: Vec<String>,
    /// Connections open at once (at the cap, the longest idle makes room for a new one).
    pub max_connections: usize,
    /// Connections one peer address may hold (past it a new one is closed).
    pub max_connections_per_address: usize,
    /// A connection without a call open for this long is closed (None: never).
    pub idle_timeout: Option<Duration>,
}

impl FrontConfig {
    /// A front on `bind` handing calls on to grpcio at `upstream`, plain clients only, with the
    /// default bounds and nothing served on the data plane.
    pub fn new(bind: SocketAddr, upstream: PathBuf) -> FrontConfig {
        FrontConfig {
            bind,
            upstream,
            tls: None,
            threads: 1,
            sends: None,
            pops: None,
            inbox_methods: Vec::new(),
            max_connections: MAX_CONNECTIONS,
            max_connections_per_address: MAX_CONNECTIONS_PER_ADDRESS,
            idle_timeout: Some(IDLE_TIMEOUT),
        }
    }
}

/// What every connection task shares.
struct Shared {
    upstream: Arc<Upstream>,
    tls: Option<TlsServer>,
    server: server::Builder<TokioExecutor>,
    servers: Servers,
    max_connections: usize,
    max_connections_per_address: usize,
    idle_timeout: Option<Duration>,
    /// The first byte, a TLS handshake, and HTTP/2's preface each take at most this.
    handshake_timeout: Duration,
    conns: Mutex<Conns>,
    next_id: AtomicU64,
    /// When refusals were last logged, and how many since, per kind.
    refusals: Mutex<HashMap<&'static str, (Instant, u64)>>,
    port: u16,
}

/// The connections open (accepted and not ended), and how many each address holds.
#[derive(Default)]
struct Conns {
    open: HashMap<u64, Arc<Slot>>,
    per_address: HashMap<IpAddr, usize>,
}

/// One open connection, as the cap sees it.
struct Slot {
    id: u64,
    calls: Arc<Calls>,
    /// Told when the connection is closed to make room at the cap.
    evict: Notify,
    evicted: AtomicBool,
}

/// A connection's place among those open, given back when its task ends.
struct Admission {
    shared: Arc<Shared>,
    id: u64,
    ip: IpAddr,
    slot: Arc<Slot>,
}

impl Drop for Admission {
    fn drop(&mut self) {
        let mut conns = self.shared.conns.lock().unwrap();
        conns.open.remove(&self.id);
        if let Some(held) = conns.per_address.get_mut(&self.ip) {
            *held -= 1;
            if *held == 0 {
                conns.per_address.remove(&self.ip);
            }
        }
    }
}

/// The running front; [`GrpcFront::stop`] (or dropping it) ends it.
pub struct GrpcFront {
    shared: Arc<Shared>,
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
        let handshake_timeout = cfg
            .idle_timeout
            .map_or(HANDSHAKE_TIMEOUT, |idle| idle.min(HANDSHAKE_TIMEOUT));
        let inbox = (!cfg.inbox_methods.is_empty())
            .then(|| Inbox::new(cfg.inbox_methods))
            .transpose()?
            .map(Arc::new);
        let receives = match (cfg.pops, &cfg.sends) {
            (Some((pops, dead_letters)), Some(sends)) => {
                Some(Arc::new(Receives::new(pops, sends.clone(), dead_letters)))
            }
            _ => None,
        };
        let servers = Servers {
            sends: cfg.sends.map(|port| Arc::new(Sends::new(port))),
            receives,
            inbox,
        };
        let shared = Arc::new(Shared {
            upstream: Arc::new(Upstream::new(cfg.upstream)),
            tls: cfg.tls.map(offering_h2),
            server: http2_server(),
            max_connections: cfg.max_connections.max(1),
            max_connections_per_address: cfg.max_connections_per_address.max(1),
            idle_timeout: cfg.idle_timeout,
            handshake_timeout,
            conns: Mutex::new(Conns::default()),
            next_id: AtomicU64::new(0),
            refusals: Mutex::new(HashMap::new()),
            port: addr.port(),
            servers,
        });
        let (stop, stopped) = watch::channel(false);
        let served = runtime.spawn(accept_loop(listener, shared.clone(), stopped));
        Ok(GrpcFront {
            shared,
            runtime: Mutex::new(Some(runtime)),
            stop,
            served: Mutex::new(Some(served)),
            addr,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Client connections open now (accepted and not ended).
    pub fn open_connections(&self) -> usize {
        self.shared.conns.lock().unwrap().open.len()
    }

    /// Connections to grpcio open now (blocks: not from the front's runtime).
    pub fn upstream_connections(&self) -> usize {
        let runtime = self.runtime.lock().unwrap();
        runtime
            .as_ref()
            .map_or(0, |rt| rt.block_on(self.shared.upstream.open_connections()))
    }

    /// SendMessage calls the front answered itself so far (0 without a data plane).
    pub fn sends_answered(&self) -> u64 {
        let sends = self.shared.servers.sends.as_ref();
        sends.map_or(0, |s| s.answered())
    }

    /// ReceiveMessage and AckMessage calls the front answered itself so far.
    pub fn receives_answered(&self) -> u64 {
        self.receives().map_or(0, |r| r.answered())
    }

    /// The receives of the front, when it serves them (Python names their clients).
    pub fn receives(&self) -> Option<&Receives> {
        self.shared.servers.receives.as_deref()
    }

    /// The calls Python takes from the front, when it named methods for them.
    pub fn inbox(&self) -> Option<&Inbox> {
        self.shared.servers.inbox.as_deref()
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
                // Past a cap: accepted, and closed here.
                let Some(admission) = admit(&shared, peer) else {
                    continue;
                };
                let _ = sock.set_nodelay(true);
                let (shared, stopped, open) = (shared.clone(), stopped.clone(), open.clone());
                tokio::spawn(async move {
                    let slot = admission.slot.clone();
                    tokio::select! {
                        _ = connection(&shared, sock, peer, stopped, &slot) => {}
                        // Dropped: its socket closes (it had no call open).
                        _ = slot.evict.notified() => {
                            log::debug!("gRPC: connection from {peer} closed for a new one at the cap");
                        }
                    }
                    drop(admission);
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

/// A new connection from `peer` counted among those open, or None when it is closed at once:
/// past its address's share, or at the cap with every connection busy (a call open). At the
/// cap the connection idle the longest makes room for it, as on the remoting port (a host that
/// opens idle connections by the thousand cannot lock everyone else out).
fn admit(shared: &Arc<Shared>, peer: SocketAddr) -> Option<Admission> {
    let mut conns = shared.conns.lock().unwrap();
    let held = conns.per_address.get(&peer.ip()).copied().unwrap_or(0);
    if held >= shared.max_connections_per_address {
        drop(conns);
        let detail = format!(
            "serverMaxConnectionsPerAddress={}, last from {}",
            shared.max_connections_per_address,
            peer.ip()
        );
        log_refusal(
            shared,
            "connection(s) refused: an address holds its share",
            &detail,
        );
        return None;
    }
    let open = conns.open.len();
    if open >= shared.max_connections {
        let victim = conns
            .open
            .values()
            .filter(|s| s.calls.open() == 0 && !s.evicted.load(Ordering::Acquire))
            .min_by_key(|s| s.calls.last_active())
            .cloned();
        let detail = format!(
            "serverMaxConnections={}, {open} open",
            shared.max_connections
        );
        let Some(victim) = victim else {
            drop(conns);
            log_refusal(
                shared,
                "connection(s) refused: the limit is reached",
                &detail,
            );
            return None;
        };
        victim.evicted.store(true, Ordering::Release);
        victim.evict.notify_one();
        let kind = "longest-idle connection(s) closed for new ones at the limit";
        log_refusal(shared, kind, &detail);
    }
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let slot = Arc::new(Slot {
        id,
        calls: Arc::default(),
        evict: Notify::new(),
        evicted: AtomicBool::new(false),
    });
    conns.open.insert(id, slot.clone());
    *conns.per_address.entry(peer.ip()).or_insert(0) += 1;
    Some(Admission {
        shared: shared.clone(),
        id,
        ip: peer.ip(),
        slot,
    })
}

/// One warning per kind and REFUSAL_LOG_INTERVAL at most, with the count since the last (a flood
/// of connections writes a line, not a line each).
fn log_refusal(shared: &Shared, kind: &'static str, detail: &str) {
    let mut lines = shared.refusals.lock().unwrap();
    let now = Instant::now();
    let line = lines
        .entry(kind)
        .or_insert((now.checked_sub(REFUSAL_LOG_INTERVAL).unwrap_or(now), 0));
    line.1 += 1;
    if now.duration_since(line.0) >= REFUSAL_LOG_INTERVAL || line.1 == 1 {
        log::warn!(
            "gRPC port {}: {kind} ({} since the last such line): {detail}",
            shared.port,
            line.1
        );
        *line = (now, 0);
    }
}

/// One client: TLS or plain by its first byte (0x16 starts a TLS handshake record, as Java's
/// sniffer has it), then HTTP/2 until either side ends it.
async fn connection(
    shared: &Shared,
    sock: TcpStream,
    peer: SocketAddr,
    stopped: watch::Receiver<bool>,
    slot: &Slot,
) {
    let mut first = [0u8; 1];
    match tokio::time::timeout(shared.handshake_timeout, sock.peek(&mut first)).await {
        Ok(Ok(1)) => {}
        // Closed, failed, or silent for too long.
        _ => return,
    }
    let Some(tls) = shared.tls.as_ref() else {
        return serve(shared, sock, peer, stopped, slot).await;
    };
    if first[0] != HANDSHAKE_FIRST_BYTE {
        if tls.enforcing {
            log::info!("gRPC: plain connection from {peer} closed: tls.server.mode is enforcing");
            return;
        }
        return serve(shared, sock, peer, stopped, slot).await;
    }
    let timeout = shared.handshake_timeout;
    match tokio::time::timeout(timeout, tls.acceptor.accept(sock)).await {
        Ok(Ok(stream)) => serve(shared, stream, peer, stopped, slot).await,
        Ok(Err(e)) => log::info!("gRPC: TLS handshake with {peer} failed: {e}"),
        Err(_) => log::info!("gRPC: TLS handshake with {peer} unfinished after {timeout:?}"),
    }
}

/// The client's stream, counting what it read until HTTP/2's preface and SETTINGS header came.
struct Preface<I> {
    io: I,
    read: u64,
    seen: Arc<AtomicBool>,
}

impl<I: AsyncRead + Unpin> AsyncRead for Preface<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if self.read < PREFACE_AND_SETTINGS {
            self.read += (buf.filled().len() - before) as u64;
            if self.read >= PREFACE_AND_SETTINGS {
                self.seen.store(true, Ordering::Release);
            }
        }
        polled
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Preface<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// HTTP/2 with the client on `io`, the calls the front does not serve handed on to grpcio, until
/// the client goes, the front stops, the client has not sent its preface within the handshake
/// timeout, or the connection has had no call open for the idle timeout.
async fn serve<I>(
    shared: &Shared,
    io: I,
    peer: SocketAddr,
    mut stopped: watch::Receiver<bool>,
    slot: &Slot,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let forwarder = Arc::new(Forwarder::new(
        shared.upstream.clone(),
        // A connection's calls go on one upstream connection; connections spread over them.
        slot.id as usize,
        peer,
        shared.servers.clone(),
        slot.calls.clone(),
    ));
    let calls = &slot.calls;
    let service = service_fn(move |req| {
        let forwarder = forwarder.clone();
        async move { forwarder.call(req).await }
    });
    let preface = Arc::new(AtomicBool::new(false));
    let io = Preface {
        io,
        read: 0,
        seen: preface.clone(),
    };
    let conn = shared.server.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let handshake = tokio::time::sleep(shared.handshake_timeout);
    tokio::pin!(handshake);
    let period = shared.idle_timeout.map_or(IDLE_CHECK, |idle| {
        (idle / 4).clamp(Duration::from_millis(50), IDLE_CHECK)
    });
    let mut ticks = tokio::time::interval(period);
    let mut closing = false;
    // An idle connection told to go (GOAWAY, then a PING the client must answer) is dropped if
    // it is still there after this: a client that never answers holds nothing.
    let gone = tokio::time::sleep(Duration::MAX);
    tokio::pin!(gone);
    let mut told_idle = false;
    loop {
        tokio::select! {
            done = &mut conn => {
                if let Err(e) = done {
                    log::debug!("gRPC: connection from {peer} ended: {e}");
                }
                return;
            }
            _ = &mut gone, if told_idle => {
                log::debug!("gRPC: idle connection from {peer} did not go when told, closed");
                return;
            }
            _ = &mut handshake, if !preface.load(Ordering::Acquire) => {
                log::debug!(
                    "gRPC: connection from {peer} closed: no HTTP/2 preface within {:?}",
                    shared.handshake_timeout
                );
                return;
            }
            _ = stopped.wait_for(|stop| *stop), if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = ticks.tick(), if !closing && shared.idle_timeout.is_some() => {
                let idle = shared.idle_timeout.unwrap_or(IDLE_TIMEOUT);
                if calls.idle_for(idle) {
                    log::debug!("gRPC: connection from {peer} idle for {idle:?}, closed");
                    closing = true;
                    conn.as_mut().graceful_shutdown();
                    told_idle = true;
                    gone.as_mut().reset(tokio::time::Instant::now() + shared.handshake_timeout);
                }
            }
        }
    }
}
