//! The data plane: the broker's listening socket, its connections and their frames on tokio
//! threads. Sends it may serve (see [`crate::send`]) are answered here; every other frame goes
//! to the Python event loop through [`Event`]s, and Python's replies come back through
//! [`DataPlane::write`].
//!
//! Bounds (as ferromq's Python server keeps them): a connection cap (at which the longest-idle
//! connection makes room for a new one) and a smaller cap per peer address, an idle timeout (no
//! complete request), a read timeout for unfinished frames, a budget of request bytes shared by
//! all connections (a connection whose frame does not fit waits unread), and a bound of unsent
//! reply bytes per connection (past it the connection is not read).

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};

use crate::acl::PeerAcl;
use crate::commands::{Command, Configs};
use crate::conn::{until_killed, Conn, Out};
pub use crate::hub::{Arrival, Event};
use crate::hub::{Hub, Outcome};
use crate::pop::PopPort;
use crate::pull::{self, PullConfig};
use crate::send::{SendConfig, SendPort};
use crate::stats::PlaneStats;
use crate::wake::Wake;
use ferromq_remoting::frame::{frame_length, Frame, FrameLength};
use ferromq_remoting::tls::{TlsServer, HANDSHAKE_FIRST_BYTE};

/// Why a connection closed: the same words as the Python server's `CloseReason`.
pub mod reason {
    pub const PEER_CLOSED: &str = "peer closed";
    pub const READ_ERROR: &str = "read error";
    pub const PARSE_ERROR: &str = "malformed frame";
    pub const LOCAL_CLOSE: &str = "closed locally";
    pub const SHUTDOWN: &str = "shutdown";
    pub const IDLE: &str = "idle timeout";
    pub const READ_TIMEOUT: &str = "unfinished frame timed out";
    pub const CONNECTION_LIMIT: &str = "connection limit reached";
    pub const ADDRESS_LIMIT: &str = "connection limit of the address reached";
    pub const EVICTED: &str = "longest idle at the connection limit";
    pub const TLS_REQUIRED: &str = "plain connection in TLS enforcing mode";
    pub const TLS_HANDSHAKE: &str = "TLS handshake failed";
}

#[derive(Debug, Clone)]
pub struct PlaneConfig {
    pub bind: SocketAddr,
    /// tokio worker threads.
    pub threads: usize,
    pub max_frame: usize,
    pub max_connections: usize,
    /// Connections one peer address may hold (one host cannot take every slot).
    pub max_connections_per_address: usize,
    /// No complete request for this long closes a connection.
    pub idle_timeout: Option<Duration>,
    pub read_timeout: Option<Duration>,
    pub request_buffer_bytes: usize,
    /// Unsent reply bytes per connection past which its requests are not read.
    pub reply_buffer_bytes: usize,
    /// Unsent reply bytes of all connections together past which only connections with none
    /// queued are read.
    pub total_reply_buffer_bytes: usize,
    /// Upper bounds (ms) of the request latency buckets the broker's statistics keep.
    pub rpc_buckets_ms: Vec<f64>,
    /// TLS clients served beside plain ones (`permissive`) or instead of them (`enforcing`).
    pub tls: Option<TlsServer>,
}

const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

pub(crate) struct Shared {
    cfg: PlaneConfig,
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
    next_id: AtomicU64,
    /// Permits are bytes.
    budget: Arc<Semaphore>,
    budget_bytes: u32,
    /// Accepted connections not served yet (their task not started, or their first byte
    /// awaited to tell TLS from plain), by id: counted against the limit from their accept.
    opening: Mutex<HashMap<u64, Arc<Opening>>>,
    /// Connections not read until their unfinished frame fits in the budget.
    budget_waiters: AtomicUsize,
    /// Bytes granted from the budget (tokio hands a waiter permits as they free up, so the
    /// semaphore's count alone would show those too).
    reserved: Arc<AtomicUsize>,
    /// Reply bytes queued on every connection and not yet written.
    replies_queued: Arc<AtomicUsize>,
    /// When refusals were last logged, and how many since, per kind.
    refusals: Mutex<HashMap<&'static str, (Instant, u64)>>,
    /// Open connections (and ones still being looked at) per peer address.
    per_address: Mutex<HashMap<IpAddr, usize>>,
    /// Shared with the gRPC front's sends ([`SendPort`]).
    pub(crate) send: Arc<RwLock<Option<Arc<SendConfig>>>>,
    /// Shared with the hold loop, which looks at the queues of held pulls.
    pub(crate) pull: Arc<RwLock<Option<Arc<PullConfig>>>>,
    pub(crate) hub: Arc<Hub>,
    closed_by_reason: Mutex<HashMap<&'static str, u64>>,
}

impl Shared {
    fn now(&self) -> u64 {
        self.hub.now()
    }

    fn push(&self, event: Event) {
        self.hub.push(event);
    }

    fn closed(&self, why: &'static str) {
        *self
            .closed_by_reason
            .lock()
            .unwrap()
            .entry(why)
            .or_default() += 1;
    }
}

pub struct DataPlane {
    runtime: Mutex<Option<Runtime>>,
    shared: Arc<Shared>,
    addr: SocketAddr,
}

impl DataPlane {
    /// Binds the listening socket and starts serving on `cfg.threads` threads.
    pub fn start(cfg: PlaneConfig) -> io::Result<DataPlane> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(cfg.threads.max(1))
            .thread_name("ferromq-io")
            .enable_all()
            .build()?;
        let budget_bytes = u32::try_from(cfg.request_buffer_bytes.max(1)).unwrap_or(u32::MAX);
        let listener = runtime.block_on(async {
            let sock = if cfg.bind.is_ipv6() {
                tokio::net::TcpSocket::new_v6()?
            } else {
                tokio::net::TcpSocket::new_v4()?
            };
            sock.set_reuseaddr(true)?;
            sock.bind(cfg.bind)?;
            sock.listen(1024)
        })?;
        let addr = listener.local_addr()?;
        let hub = Arc::new(Hub::new(
            Wake::new()?,
            runtime.handle().clone(),
            cfg.rpc_buckets_ms.clone(),
        ));
        let shared = Arc::new(Shared {
            conns: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            budget: Arc::new(Semaphore::new(budget_bytes as usize)),
            budget_bytes,
            opening: Mutex::new(HashMap::new()),
            budget_waiters: AtomicUsize::new(0),
            reserved: Arc::new(AtomicUsize::new(0)),
            replies_queued: Arc::new(AtomicUsize::new(0)),
            refusals: Mutex::new(HashMap::new()),
            per_address: Mutex::new(HashMap::new()),
            send: Arc::new(RwLock::new(None)),
            pull: Arc::new(RwLock::new(None)),
            hub: hub.clone(),
            closed_by_reason: Mutex::new(HashMap::new()),
            cfg,
        });
        runtime.spawn(accept_loop(shared.clone(), listener));
        runtime.spawn(pull::hold_loop(hub, shared.pull.clone()));
        if shared.cfg.idle_timeout.is_some() || shared.cfg.read_timeout.is_some() {
            runtime.spawn(sweep_loop(shared.clone()));
        }
        Ok(DataPlane {
            runtime: Mutex::new(Some(runtime)),
            shared,
            addr,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The descriptor that turns readable when events or arrivals wait for Python.
    pub fn wake_fd(&self) -> i32 {
        self.shared.hub.wake_fd()
    }

    /// The events queued since the last call (call after the wake descriptor was readable).
    pub fn take_events(&self) -> Vec<Event> {
        self.shared.hub.take_events()
    }

    /// (topic, queue id, next offset, tags codes stored or None for any) of the queues sends
    /// stored into since the last call.
    pub fn take_arrivals(&self) -> Vec<Arrival> {
        self.shared.hub.take_arrivals()
    }

    /// Whether arrivals should wake Python (it holds pulls that wait for messages).
    pub fn set_watching(&self, on: bool) {
        self.shared.hub.set_watching(on);
    }

    pub fn take_stats(&self) -> PlaneStats {
        self.shared.hub.take_stats()
    }

    /// What sends may be served here; None sends every frame to Python.
    /// The pops and acks this plane serves, for the gRPC front of the same broker.
    pub fn pop_port(&self) -> PopPort {
        PopPort {
            hub: self.shared.hub.clone(),
            config: self.shared.pull.clone(),
        }
    }

    /// The sends this plane serves, for the gRPC front of the same broker.
    pub fn send_port(&self) -> SendPort {
        SendPort {
            hub: self.shared.hub.clone(),
            config: self.shared.send.clone(),
        }
    }

    pub fn set_send_config(&self, cfg: Option<SendConfig>) {
        *self.shared.send.write().unwrap() = cfg.map(Arc::new);
    }

    /// What pulls may be served here; None sends every pull to Python (those held here are
    /// answered now, with what their queues have).
    pub fn set_pull_config(&self, cfg: Option<PullConfig>) {
        let off = cfg.is_none();
        *self.shared.pull.write().unwrap() = cfg.map(Arc::new);
        if off {
            pull::answer(&self.shared.hub, self.shared.hub.holds.take_all());
        }
        // Waiting pops go on by the new rules (or to Python).
        self.shared.hub.pop_waits.wake_all();
    }

    /// A message Python stored: pulls held here that it satisfies are answered.
    pub fn notify_arrival(
        &self,
        topic: &str,
        queue_id: i32,
        next_offset: i64,
        tags_code: Option<i64>,
    ) {
        pull::wake_held(&self.shared.hub, topic, queue_id, next_offset, tags_code);
    }

    /// Pulls held here.
    pub fn held_pulls(&self) -> usize {
        self.shared.hub.holds.len()
    }

    /// Pops waiting here for a message (remoting pops and the gRPC front's receives).
    pub fn waiting_pops(&self) -> usize {
        self.shared.hub.pop_waits.len()
    }

    /// Queues `bytes` (whole frames) for connection `conn`: the reply bytes it has queued now
    /// (past `reply_buffer_bytes`, stop answering it until [`Event::Drained`]), None when it is
    /// gone.
    pub fn write(&self, conn: u64, bytes: Vec<u8>) -> Option<usize> {
        let c = self.shared.conns.lock().unwrap().get(&conn).cloned();
        c.map(|c| c.write(bytes))
    }

    /// Closes `conn` after its queued replies are written (`abort`: at once, dropping them).
    pub fn close(&self, conn: u64, abort: bool, why: &'static str) {
        let c = self.shared.conns.lock().unwrap().get(&conn).cloned();
        if let Some(c) = c {
            if abort {
                c.kill(why);
            } else {
                c.set_reason(why);
                let _ = c.out.send(Out::Close);
            }
        }
    }

    /// What the ACL decided about `conn`'s peer address (see [`crate::acl`]); false when the
    /// connection is gone.
    pub fn set_peer_acl(&self, conn: u64, acl: PeerAcl) -> bool {
        let c = self.shared.conns.lock().unwrap().get(&conn).cloned();
        c.map(|c| *c.acl.write().unwrap() = Some(Arc::new(acl)))
            .is_some()
    }

    /// Stops or resumes reading `conn` (Python's own bounds on requests it handles).
    pub fn set_reading(&self, conn: u64, reading: bool) {
        let c = self.shared.conns.lock().unwrap().get(&conn).cloned();
        if let Some(c) = c {
            c.paused.store(!reading, Ordering::Release);
            if reading {
                c.resumed.notify_waiters();
            }
        }
    }

    /// Connections served, and accepted ones whose first byte is awaited.
    pub fn open_connections(&self) -> usize {
        self.shared.conns.lock().unwrap().len() + self.shared.opening.lock().unwrap().len()
    }

    /// Connections waiting for room in the request budget (not read meanwhile).
    pub fn waiting_for_budget(&self) -> usize {
        self.shared.budget_waiters.load(Ordering::Acquire)
    }

    /// Bytes of unfinished request frames reserved in the shared budget.
    pub fn buffered_request_bytes(&self) -> usize {
        self.shared.reserved.load(Ordering::Acquire)
    }

    /// Closes of connections Python never saw (refused, or silent before their first byte).
    pub fn closed_by_reason(&self) -> Vec<(&'static str, u64)> {
        let m = self.shared.closed_by_reason.lock().unwrap();
        m.iter().map(|(k, v)| (*k, *v)).collect()
    }

    /// Stops accepting, ends every connection and the threads (waits up to `grace`).
    pub fn stop(&self, grace: Duration) {
        let Some(runtime) = self.runtime.lock().unwrap().take() else {
            return;
        };
        self.shared.hub.stop();
        let conns: Vec<_> = self
            .shared
            .conns
            .lock()
            .unwrap()
            .values()
            .cloned()
            .collect();
        for c in conns {
            c.kill(reason::SHUTDOWN);
        }
        *self.shared.send.write().unwrap() = None;
        *self.shared.pull.write().unwrap() = None;
        drop(self.shared.hub.holds.take_all());
        runtime.shutdown_timeout(grace);
    }
}

impl Drop for DataPlane {
    fn drop(&mut self) {
        self.stop(Duration::from_millis(100));
    }
}

async fn accept_loop(shared: Arc<Shared>, listener: TcpListener) {
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = shared.hub.until_stopped() => return,
        };
        match accepted {
            Ok((sock, peer)) => {
                if shared.hub.is_stopping() {
                    return;
                }
                let port = listener.local_addr().map_or(0, |a| a.port());
                let Some(admission) = admit(&shared, port, peer) else {
                    continue;
                };
                let _ = sock.set_nodelay(true);
                tokio::spawn(serve(shared.clone(), sock, peer, admission));
            }
            Err(e) => {
                // Out of descriptors and the like: wait instead of spinning on the error.
                log::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// A new connection from `peer` is refused past its address's share of the connections; at the
/// global limit the longest-idle connection is closed to make room for it (a host that opens
/// idle connections by the thousand cannot lock everyone else out). It counts against both
/// from here, before its task starts.
fn admit(shared: &Arc<Shared>, port: u16, peer: SocketAddr) -> Option<Admission> {
    let cfg = &shared.cfg;
    {
        let mut per = shared.per_address.lock().unwrap();
        let held = per.entry(peer.ip()).or_insert(0);
        if *held >= cfg.max_connections_per_address {
            drop(per);
            shared.closed(reason::ADDRESS_LIMIT);
            let detail = format!(
                "serverMaxConnectionsPerAddress={}, last from {}",
                cfg.max_connections_per_address,
                peer.ip()
            );
            let kind = "connection(s) refused: an address holds its share";
            log_refusal(shared, port, kind, &detail);
            return None;
        }
        *held += 1;
    }
    let slot = AddressSlot {
        shared: shared.clone(),
        ip: peer.ip(),
    };
    let conns = shared.conns.lock().unwrap();
    let mut opening = shared.opening.lock().unwrap();
    let open = conns.len() + opening.len();
    let victim = if open < cfg.max_connections {
        None
    } else {
        // The longest idle: a connection by its last request, one not served yet by its accept.
        let served = conns
            .values()
            .filter(|c| !c.killed.load(Ordering::Acquire))
            .map(|c| {
                (
                    c.last_activity.load(Ordering::Acquire),
                    Victim::Served(c.clone()),
                )
            });
        let silent = opening
            .values()
            .filter(|s| !s.evicted.load(Ordering::Acquire))
            .map(|s| (s.since, Victim::Silent(s.clone())));
        let Some((_, victim)) = served.chain(silent).min_by_key(|(at, _)| *at) else {
            drop(opening);
            drop(conns);
            shared.closed(reason::CONNECTION_LIMIT);
            let detail = format!("serverMaxConnections={}, {open} open", cfg.max_connections);
            log_refusal(
                shared,
                port,
                "connection(s) refused: the limit is reached",
                &detail,
            );
            return None;
        };
        Some(victim)
    };
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let entry = Arc::new(Opening {
        since: shared.now(),
        evict: Notify::new(),
        evicted: AtomicBool::new(false),
    });
    opening.insert(id, entry.clone());
    drop(opening);
    drop(conns);
    if let Some(victim) = victim {
        let detail = format!("serverMaxConnections={}, {open} open", cfg.max_connections);
        let kind = "longest-idle connection(s) closed for new ones at the limit";
        log_refusal(shared, port, kind, &detail);
        match victim {
            Victim::Served(c) => c.kill(reason::EVICTED),
            Victim::Silent(s) => {
                s.evicted.store(true, Ordering::Release);
                s.evict.notify_one();
            }
        }
    }
    Some(Admission {
        id,
        entry,
        _slot: slot,
    })
}

enum Victim {
    Served(Arc<Conn>),
    Silent(Arc<Opening>),
}

/// An accepted connection not served yet.
struct Opening {
    /// When it was accepted (the plane's milliseconds).
    since: u64,
    evict: Notify,
    evicted: AtomicBool,
}

/// An accepted connection's place among those opening and in its address's count: its id
/// leaves `opening` when it is served or gone, its address slot when it ends.
struct Admission {
    id: u64,
    entry: Arc<Opening>,
    _slot: AddressSlot,
}

impl Admission {
    fn evicted(&self) -> bool {
        self.entry.evicted.load(Ordering::Acquire)
    }

    fn opened(&self, shared: &Shared) {
        shared.opening.lock().unwrap().remove(&self.id);
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        // Whatever way its task ended (opened already did it on the usual ones).
        self._slot.shared.opening.lock().unwrap().remove(&self.id);
    }
}

/// A connection's place in its address's count, given back when the connection ends (or is
/// handed to Python, which counts it there).
struct AddressSlot {
    shared: Arc<Shared>,
    ip: IpAddr,
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut per = self.shared.per_address.lock().unwrap();
        if let Some(held) = per.get_mut(&self.ip) {
            *held -= 1;
            if *held == 0 {
                per.remove(&self.ip);
            }
        }
    }
}

/// One warning per kind and REFUSAL_LOG_INTERVAL at most, with the count since the last (a flood
/// of connections writes a line, not a line each).
fn log_refusal(shared: &Shared, port: u16, kind: &'static str, detail: &str) {
    let mut lines = shared.refusals.lock().unwrap();
    let now = Instant::now();
    let line = lines.entry(kind).or_insert((now - REFUSAL_LOG_INTERVAL, 0));
    line.1 += 1;
    if now.duration_since(line.0) >= REFUSAL_LOG_INTERVAL {
        log::warn!(
            target: "ferromq.remoting.plane",
            "port {port}: {kind} ({} since the last such line): {detail}",
            line.1
        );
        *line = (now, 0);
    }
}

/// Closes connections idle past the idle timeout (no complete request), as the Python server's
/// sweeper does. (Unfinished frames are timed by their reader.)
async fn sweep_loop(shared: Arc<Shared>) {
    let Some(idle) = shared.cfg.idle_timeout else {
        return;
    };
    let period = (idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(5));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = shared.hub.until_stopped() => return,
        }
        let now = shared.now();
        let idle_ms = idle.as_millis() as u64;
        let conns: Vec<_> = shared.conns.lock().unwrap().values().cloned().collect();
        for c in conns {
            if now.saturating_sub(c.last_activity.load(Ordering::Acquire)) > idle_ms {
                log::info!("closing {}: no request for {:?}", c.peer, idle);
                c.kill(reason::IDLE);
            }
        }
    }
}

/// The first byte, left in the socket (None: the peer closed or was silent past the idle
/// timeout, it was evicted for a newer connection, or the plane stops).
async fn peek_first(shared: &Shared, sock: &TcpStream, admission: &Admission) -> Option<u8> {
    let mut first = [0u8; 1];
    let idle = shared.cfg.idle_timeout;
    let peeked = tokio::select! {
        r = sock.peek(&mut first) => r.ok(),
        _ = sleep_until(idle.map(|t| Instant::now() + t)) => {
            shared.closed(reason::IDLE);
            None
        }
        _ = admission.entry.evict.notified() => None,
        _ = shared.hub.until_stopped() => None,
    };
    (peeked == Some(1)).then_some(first[0])
}

async fn serve(shared: Arc<Shared>, sock: TcpStream, peer: SocketAddr, admission: Admission) {
    let Some(tls) = shared.cfg.tls.clone() else {
        let (rd, wr) = sock.into_split();
        return run(shared, peer, admission, rd, wr).await;
    };
    // Java's handshake sniffer: a first byte of 0x16 starts TLS, anything else is plain TCP.
    let first = peek_first(&shared, &sock, &admission).await;
    let refused = if admission.evicted() {
        Some(reason::EVICTED)
    } else {
        match first {
            None => Some(reason::PEER_CLOSED),
            Some(HANDSHAKE_FIRST_BYTE) => None,
            Some(_) if tls.enforcing => Some(reason::TLS_REQUIRED),
            Some(_) => {
                let (rd, wr) = sock.into_split();
                return run(shared, peer, admission, rd, wr).await;
            }
        }
    };
    if let Some(why) = refused {
        admission.opened(&shared);
        match why {
            reason::PEER_CLOSED => {}
            reason::TLS_REQUIRED => {
                shared.closed(why);
                log_refusal(
                    &shared,
                    shared.cfg.bind.port(),
                    "plain connection(s) closed",
                    "tls.server.mode is enforcing",
                );
            }
            _ => shared.closed(why),
        }
        return;
    }
    // The handshake must finish within the read timeout (a stalled one holds only its slot).
    let handshake = tls.acceptor.accept(sock);
    let stream = match shared.cfg.read_timeout {
        Some(t) => tokio::time::timeout(t, handshake)
            .await
            .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into())),
        None => handshake.await,
    };
    match stream {
        Ok(stream) => {
            let (rd, wr) = tokio::io::split(stream);
            run(shared, peer, admission, rd, wr).await;
        }
        Err(e) => {
            log::info!("TLS handshake with {peer} failed: {e}");
            admission.opened(&shared);
            shared.closed(reason::TLS_HANDSHAKE);
        }
    }
}

/// Serves one connection (plain, or TLS after its handshake) until it closes.
async fn run<R, W>(shared: Arc<Shared>, peer: SocketAddr, admission: Admission, rd: R, wr: W)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin,
{
    let id = admission.id;
    let (tx, rx) = mpsc::unbounded_channel();
    let conn = Arc::new(Conn {
        id,
        peer,
        out: tx,
        queued: AtomicUsize::new(0),
        reply_bound: shared.cfg.reply_buffer_bytes,
        all_queued: shared.replies_queued.clone(),
        all_bound: shared.cfg.total_reply_buffer_bytes,
        drained: Notify::new(),
        over: AtomicBool::new(false),
        paused: AtomicBool::new(false),
        resumed: Notify::new(),
        kill: Notify::new(),
        killed: AtomicBool::new(false),
        last_activity: AtomicU64::new(shared.now()),
        reason: Mutex::new(None),
        acl: RwLock::new(None),
    });
    shared.conns.lock().unwrap().insert(id, conn.clone());
    admission.opened(&shared);
    if admission.evicted() {
        // Evicted while its task started: it never opened.
        shared.conns.lock().unwrap().remove(&id);
        shared.closed(reason::EVICTED);
        return;
    }
    shared.push(Event::Open { conn: id, peer });
    let reader = tokio::spawn(read_loop(shared.clone(), conn.clone(), id, rd));
    write_loop(&shared, &conn, wr, rx).await;
    conn.kill(reason::LOCAL_CLOSE);
    let _ = reader.await;
    shared.conns.lock().unwrap().remove(&id);
    shared.hub.holds.drop_conn(id);
    // Python counts this close (it knows the reasons of its own closes).
    let why = conn.reason.lock().unwrap().unwrap_or(reason::LOCAL_CLOSE);
    shared.push(Event::Closed {
        conn: id,
        reason: why,
    });
}

async fn write_loop<W: AsyncWrite + Unpin>(
    shared: &Shared,
    conn: &Conn,
    mut wr: W,
    mut rx: mpsc::UnboundedReceiver<Out>,
) {
    let mut joined: Vec<u8> = Vec::new();
    loop {
        let first = tokio::select! {
            m = rx.recv() => m,
            _ = until_killed(conn) => return,
        };
        let Some(first) = first else { return };
        if conn.killed.load(Ordering::Acquire) {
            return;
        }
        let mut close = false;
        let mut single = match first {
            Out::Frame(b) => b,
            Out::Close => Vec::new(),
        };
        if single.is_empty() {
            close = true;
        }
        // Replies queued meanwhile leave in the same write.
        while !close && single.len() + joined.len() < 256 * 1024 {
            match rx.try_recv() {
                Ok(Out::Frame(b)) => {
                    if joined.is_empty() {
                        joined.append(&mut single);
                    }
                    joined.extend_from_slice(&b);
                }
                Ok(Out::Close) => close = true,
                Err(_) => break,
            }
        }
        let data = if joined.is_empty() { &single } else { &joined };
        if !data.is_empty() {
            let n = data.len();
            let written = tokio::select! {
                r = wr.write_all(data) => r.is_ok(),
                _ = until_killed(conn) => return,
            };
            if !written {
                conn.set_reason(reason::READ_ERROR);
                return;
            }
            let before = conn.dequeued(n);
            if before - n <= conn.reply_bound / 2 {
                // Also when nothing is left: a reader held by the process-wide budget may answer
                // this connection again (its peer may have read the reply already).
                if before > conn.reply_bound / 2 || before == n {
                    conn.drained.notify_waiters();
                }
                if conn.over.swap(false, Ordering::AcqRel) {
                    shared.push(Event::Drained { conn: conn.id });
                }
            }
            joined.clear();
        }
        if close {
            let _ = wr.shutdown().await;
            return;
        }
    }
}

/// Whether `buf` starts with a whole frame (of a valid length: the frame loop refuses others).
fn whole_frame_at_head(buf: &[u8], max_frame: usize) -> bool {
    matches!(frame_length(buf, max_frame), FrameLength::Whole(_))
}

/// The reader: frames out of the socket, each served here or handed to Python.
async fn read_loop<R: AsyncRead + Unpin>(shared: Arc<Shared>, conn: Arc<Conn>, id: u64, mut rd: R) {
    let why = read_frames(&shared, &conn, id, &mut rd).await;
    conn.set_reason(why);
    // The writer sends what is queued, then closes.
    let _ = conn.out.send(Out::Close);
}

async fn read_frames<R: AsyncRead + Unpin>(
    shared: &Arc<Shared>,
    conn: &Arc<Conn>,
    id: u64,
    rd: &mut R,
) -> &'static str {
    let cfg = &shared.cfg;
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    // The budget reserved for the unfinished frame at the head of `buf`.
    let mut permit: Option<Reservation> = None;
    let mut partial_since: Option<Instant> = None;
    loop {
        // Whole frames first: one Python chunk for those it does not serve, one write for the
        // replies given at once.
        let mut forward: Vec<u8> = Vec::new();
        let mut replies: Vec<u8> = Vec::new();
        // The send snapshot as it is now serves this read's frames.
        let configs = Configs {
            send: shared.send.read().unwrap().clone(),
            pull: shared.pull.read().unwrap().clone(),
            live_pull: &shared.pull,
        };
        let mut at = 0;
        loop {
            let end = match frame_length(&buf[at..], cfg.max_frame) {
                FrameLength::Whole(n) => at + n,
                FrameLength::Incomplete => break,
                FrameLength::Bad(len) => {
                    log::warn!(
                        "closing connection from {}: frame length {len} outside 4..{}",
                        conn.peer,
                        cfg.max_frame
                    );
                    if !forward.is_empty() {
                        shared.push(Event::Data {
                            conn: id,
                            bytes: forward,
                        });
                    }
                    return reason::PARSE_ERROR;
                }
            };
            // Replies wait within their budgets: the rest of the frames wait in the buffer.
            if !conn.may_answer(replies.len()) {
                break;
            }
            let arrived = Instant::now();
            handle_frame(
                &shared.hub,
                &configs,
                conn,
                &buf[at..end],
                &mut forward,
                &mut replies,
                arrived,
            );
            at = end;
        }
        // The finished frames leave the budget before their replies go out (a peer that read
        // its reply finds the budget free).
        if at > 0 {
            buf.drain(..at);
            permit = None;
            conn.last_activity.store(shared.now(), Ordering::Release);
        }
        if !replies.is_empty() {
            conn.write(replies);
        }
        if !forward.is_empty() {
            shared.push(Event::Data {
                conn: id,
                bytes: forward,
            });
        }
        // Whole frames left for when the peer took its replies, or an unfinished frame, whose
        // length is reserved in the shared budget first.
        let waiting = whole_frame_at_head(&buf, cfg.max_frame);
        if waiting {
            partial_since = None;
        } else if buf.len() >= 4 {
            let need = 4 + i32::from_be_bytes(buf[..4].try_into().unwrap()) as usize;
            if permit.is_none() {
                // A frame over the whole budget takes all of it (it still completes).
                let bytes = u32::try_from(need)
                    .unwrap_or(u32::MAX)
                    .min(shared.budget_bytes);
                shared.budget_waiters.fetch_add(1, Ordering::AcqRel);
                let acquired = tokio::select! {
                    p = shared.budget.clone().acquire_many_owned(bytes) => p.ok(),
                    _ = until_killed(conn) => None,
                };
                shared.budget_waiters.fetch_sub(1, Ordering::AcqRel);
                let Some(acquired) = acquired else {
                    return reason::LOCAL_CLOSE;
                };
                permit = Some(Reservation::new(acquired, &shared.reserved));
                partial_since = Some(Instant::now());
            }
            buf.reserve(need.saturating_sub(buf.len()));
        } else if buf.is_empty() {
            partial_since = None;
        } else if partial_since.is_none() {
            partial_since = Some(Instant::now());
        }
        // Held while Python asks, or while the peer leaves too many replies unread (its own, or
        // all connections' past the process-wide budget).
        while conn.paused.load(Ordering::Acquire) || !conn.may_answer(0) {
            let resumed = conn.resumed.notified();
            let drained = conn.drained.notified();
            if conn.killed.load(Ordering::Acquire) {
                return reason::LOCAL_CLOSE;
            }
            if !conn.paused.load(Ordering::Acquire) && conn.may_answer(0) {
                break;
            }
            tokio::select! {
                _ = resumed => {}
                _ = drained => {}
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
            // The read timeout measures the peer, not the time the server held it back.
            if partial_since.is_some() {
                partial_since = Some(Instant::now());
            }
            conn.last_activity.store(shared.now(), Ordering::Release);
        }
        if waiting {
            continue; // answer what is read before reading more
        }
        if buf.capacity() - buf.len() < 16 * 1024 {
            buf.reserve(64 * 1024);
        }
        let deadline = partial_since
            .zip(cfg.read_timeout)
            .map(|(since, t)| since + t);
        let read = tokio::select! {
            r = rd.read_buf(&mut buf) => r,
            _ = until_killed(conn) => return reason::LOCAL_CLOSE,
            _ = sleep_until(deadline) => {
                log::info!("closing {}: its frame did not arrive within {:?}", conn.peer, cfg.read_timeout);
                return reason::READ_TIMEOUT;
            }
        };
        match read {
            Ok(0) => return reason::PEER_CLOSED,
            Ok(_) => {}
            Err(e) => {
                log::debug!("read error on {}: {e}", conn.peer);
                return reason::READ_ERROR;
            }
        }
    }
}

/// A frame's share of the request budget, counted in `Shared::reserved` while held.
struct Reservation {
    _permit: OwnedSemaphorePermit,
    counter: Arc<AtomicUsize>,
    bytes: usize,
}

impl Reservation {
    fn new(permit: OwnedSemaphorePermit, counter: &Arc<AtomicUsize>) -> Reservation {
        let bytes = permit.num_permits();
        counter.fetch_add(bytes, Ordering::AcqRel);
        Reservation {
            _permit: permit,
            counter: counter.clone(),
            bytes,
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.counter.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}

/// Answers a frame here when it is a command the plane serves and may answer; else adds it
/// to what goes to Python.
fn handle_frame(
    hub: &Arc<Hub>,
    configs: &Configs,
    conn: &Arc<Conn>,
    bytes: &[u8],
    forward: &mut Vec<u8>,
    replies: &mut Vec<u8>,
    arrived: Instant,
) {
    let served = configs.any()
        && Frame::new(bytes).is_some_and(|frame| {
            frame.json_header().is_some_and(|h| {
                h.is_request()
                    && Command::of(h.code).is_some_and(|command| {
                        let outcome =
                            command.apply(hub, configs, conn, &frame, &h, arrived, replies);
                        matches!(outcome, Outcome::Served)
                    })
            })
        });
    if !served {
        forward.extend_from_slice(bytes);
    }
}
