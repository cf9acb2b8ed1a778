//! The master's side: accepts slaves on the HA port and streams the CommitLog to each
//! (RocketMQ's `HAService.AcceptSocketService` and `HAConnection`), and acknowledges
//! SYNC_MASTER sends once a slave reported their offset (`GroupTransferService`).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{HaConfig, HEADER_SIZE};
use crate::flush::{FlushCallback, FlushSignal};
use crate::message_store::ReplicaLog;

/// How long an idle writer sleeps before looking for new data on its own (RocketMQ: 100 ms);
/// appends wake it sooner through `notify_appended`.
const IDLE_WAIT: Duration = Duration::from_millis(100);
/// How often SYNC_MASTER waiters past their deadline are answered.
const EXPIRY_TICK: Duration = Duration::from_millis(10);

struct Shared {
    log: ReplicaLog,
    cfg: HaConfig,
    /// The highest CommitLog offset a slave reported (RocketMQ's `push2SlaveMaxOffset`); its
    /// waiters are the SYNC_MASTER sends, released together by the report that covers them.
    acked: Arc<FlushSignal>,
    connections: AtomicUsize,
    stop: AtomicBool,
    /// Wakes idle writers when data is appended (the count is only a sequence number).
    appended: (Mutex<u64>, Condvar),
    idle_writers: AtomicUsize,
    sockets: Mutex<Vec<TcpStream>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Each connected slave (by its address as seen here): what it reported.
    slaves: Mutex<HashMap<String, SlaveProgress>>,
    /// Controller mode (`allAckInSyncStateSet`): a send is acknowledged once every one of these
    /// slaves reported it; `None`: once any slave did (RocketMQ 4.x).
    ack_peers: Mutex<Option<Vec<String>>>,
}

/// What one slave connection reported, for the in-sync replica set.
#[derive(Debug, Clone, Copy)]
struct SlaveProgress {
    offset: u64,
    /// The master's end when the slave last caught up with the end it had before.
    target: u64,
    caught_up: Option<Instant>,
}

pub struct HaMaster {
    shared: Arc<Shared>,
    addr: SocketAddr,
    accept: Mutex<Option<JoinHandle<()>>>,
}

impl HaMaster {
    /// Listens on `bind` (port 0: any free port) and serves slaves from `log`.
    pub fn start(log: ReplicaLog, bind: SocketAddr, cfg: HaConfig) -> std::io::Result<Self> {
        let listener = TcpListener::bind(bind)?;
        let addr = listener.local_addr()?;
        let acked = Arc::new(FlushSignal::new(0));
        let shared = Arc::new(Shared {
            log,
            cfg,
            acked,
            connections: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            appended: (Mutex::new(0), Condvar::new()),
            idle_writers: AtomicUsize::new(0),
            sockets: Mutex::new(Vec::new()),
            threads: Mutex::new(Vec::new()),
            slaves: Mutex::new(HashMap::new()),
            ack_peers: Mutex::new(None),
        });
        let s = shared.clone();
        let accept = spawn("ferromq-ha-accept", move || accept_loop(&s, listener));
        let s = shared.clone();
        let expiry = spawn("ferromq-ha-acks", move || {
            while !s.stop.load(Ordering::Acquire) {
                std::thread::sleep(EXPIRY_TICK);
                s.acked.complete(s.acked.flushed(), true);
            }
        });
        shared.threads.lock().unwrap().push(expiry);
        log::info!("HA service listening on {addr}");
        Ok(HaMaster {
            shared,
            addr,
            accept: Mutex::new(Some(accept)),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Slaves connected now.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::Acquire)
    }

    /// What the slaves acknowledged, live (readers of the store may be bounded by it).
    pub fn acked_signal(&self) -> Arc<FlushSignal> {
        self.shared.acked.clone()
    }

    /// The highest CommitLog offset a slave has reported.
    pub fn acked_offset(&self) -> u64 {
        self.shared.acked.flushed()
    }

    /// RocketMQ's `isSlaveOK`: a slave is connected and less than `haSlaveFallbehindMax` behind
    /// `end_offset`.
    pub fn is_slave_ok(&self, end_offset: u64) -> bool {
        self.connections() > 0
            && end_offset.saturating_sub(self.acked_offset()) < self.shared.cfg.slave_fallbehind_max
    }

    /// Each connected slave: its address as seen here, the offset it reported and how long ago
    /// it last caught up with this master's end (`None`: not yet).
    pub fn slaves(&self) -> Vec<(String, u64, Option<Duration>)> {
        let slaves = self.shared.slaves.lock().unwrap();
        let mut out: Vec<_> = slaves
            .iter()
            .map(|(peer, p)| (peer.clone(), p.offset, p.caught_up.map(|t| t.elapsed())))
            .collect();
        out.sort();
        out
    }

    /// Controller mode: acknowledge sends only once every slave in `peers` (addresses as
    /// [`slaves`](Self::slaves) names them) reported them; `None` goes back to "any slave".
    pub fn set_ack_peers(&self, peers: Option<Vec<String>>) {
        *self.shared.ack_peers.lock().unwrap() = peers;
        advance_acked(&self.shared);
    }

    /// Wakes the writers that wait for data (call after an append).
    pub fn notify_appended(&self) {
        let s = &self.shared;
        if s.idle_writers.load(Ordering::SeqCst) > 0 {
            let (lock, cv) = &s.appended;
            *lock.lock().unwrap() += 1;
            cv.notify_all();
        }
    }

    /// Calls `callback(true)` once a slave reported `offset` (right away if one has), or
    /// `callback(false)` after `timeout`. Runs on the thread of the report that releases it
    /// (or the caller's) and must not block.
    pub fn notify_replicated(&self, offset: u64, timeout: Duration, callback: FlushCallback) {
        self.shared.acked.notify_when(offset, timeout, callback);
        self.notify_appended();
    }

    /// Stops listening, closes every slave connection and fails the waiting sends.
    pub fn close(&self) {
        let s = &self.shared;
        if s.stop.swap(true, Ordering::AcqRel) {
            return;
        }
        // Unblocks `accept`.
        let _ = TcpStream::connect_timeout(&wake_addr(self.addr), Duration::from_secs(1));
        for sock in s.sockets.lock().unwrap().drain(..) {
            let _ = sock.shutdown(Shutdown::Both);
        }
        s.appended.1.notify_all();
        s.acked.stop();
        if let Some(t) = self.accept.lock().unwrap().take() {
            let _ = t.join();
        }
        let threads: Vec<_> = s.threads.lock().unwrap().drain(..).collect();
        for t in threads {
            let _ = t.join();
        }
    }
}

impl Drop for HaMaster {
    fn drop(&mut self) {
        self.close();
    }
}

fn wake_addr(addr: SocketAddr) -> SocketAddr {
    if addr.ip().is_unspecified() {
        SocketAddr::from(([127, 0, 0, 1], addr.port()))
    } else {
        addr
    }
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(f)
        .expect("spawn HA thread")
}

fn accept_loop(s: &Arc<Shared>, listener: TcpListener) {
    for stream in listener.incoming() {
        if s.stop.load(Ordering::Acquire) {
            break;
        }
        let stream = match stream {
            Ok(st) => st,
            Err(e) => {
                log::warn!("HA accept failed: {e}");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        let peer = stream
            .peer_addr()
            .map_or_else(|_| "?".to_string(), |a| a.to_string());
        log::info!("HA service: slave {peer} connected");
        if let Err(e) = start_connection(s, stream, peer.clone()) {
            log::warn!("HA service: cannot serve slave {peer}: {e}");
        }
    }
}

/// One slave connection: what it asked for, and whether either side ended it.
struct Conn {
    peer: String,
    requested: Mutex<Option<u64>>,
    cv: Condvar,
    closed: AtomicBool,
}

fn start_connection(s: &Arc<Shared>, stream: TcpStream, peer: String) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(s.cfg.housekeeping_interval))?;
    stream.set_write_timeout(Some(s.cfg.housekeeping_interval))?;
    let reader = stream.try_clone()?;
    let writer = stream.try_clone()?;
    let conn = Arc::new(Conn {
        peer,
        requested: Mutex::new(None),
        cv: Condvar::new(),
        closed: AtomicBool::new(false),
    });
    s.connections.fetch_add(1, Ordering::AcqRel);
    {
        let mut socks = s.sockets.lock().unwrap();
        socks.retain(|st| st.peer_addr().is_ok());
        socks.push(stream);
    }
    let (s1, c1) = (s.clone(), conn.clone());
    let r = spawn("ferromq-ha-read", move || {
        read_reports(&s1, &c1, reader);
        end_connection(&s1, &c1);
        s1.connections.fetch_sub(1, Ordering::AcqRel);
    });
    let (s2, c2) = (s.clone(), conn);
    let w = spawn("ferromq-ha-write", move || {
        if let Err(e) = stream_log(&s2, &c2, writer) {
            if !c2.closed.load(Ordering::Acquire) && !s2.stop.load(Ordering::Acquire) {
                log::warn!("HA service: writing to slave {} failed: {e}", c2.peer);
            }
        }
        end_connection(&s2, &c2);
    });
    let mut threads = s.threads.lock().unwrap();
    threads.retain(|t| !t.is_finished());
    threads.push(r);
    threads.push(w);
    Ok(())
}

fn end_connection(s: &Shared, c: &Conn) {
    if !c.closed.swap(true, Ordering::AcqRel) {
        log::info!("HA service: connection of slave {} closed", c.peer);
    }
    let socks = s.sockets.lock().unwrap();
    for sock in socks.iter() {
        if sock.peer_addr().is_ok_and(|a| a.to_string() == c.peer) {
            let _ = sock.shutdown(Shutdown::Both);
        }
    }
    drop(socks);
    s.slaves.lock().unwrap().remove(&c.peer);
    c.cv.notify_all();
    s.appended.1.notify_all();
}

/// Reads the slave's 8-byte offset reports until the connection ends.
fn read_reports(s: &Shared, c: &Conn, mut sock: TcpStream) {
    let mut buf = [0u8; 8];
    loop {
        if let Err(e) = sock.read_exact(&mut buf) {
            if !c.closed.load(Ordering::Acquire) && !s.stop.load(Ordering::Acquire) {
                match e.kind() {
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => log::warn!(
                        "HA service: slave {} silent for {:?}, closing its connection",
                        c.peer,
                        s.cfg.housekeeping_interval
                    ),
                    std::io::ErrorKind::UnexpectedEof => {}
                    _ => log::info!("HA service: reading from slave {}: {e}", c.peer),
                }
            }
            return;
        }
        let offset = i64::from_be_bytes(buf);
        let end = s.log.max_offset();
        if offset < 0 || offset as u64 > end {
            log::error!(
                "HA service: slave {} reports CommitLog offset {offset}, past this master's end {end}: \
                 the slave's CommitLog diverges from the master's (is it another group's slave, or \
                 did the master lose data?); refusing to replicate to it",
                c.peer
            );
            return;
        }
        let offset = offset as u64;
        {
            let mut slaves = s.slaves.lock().unwrap();
            let p = slaves.entry(c.peer.clone()).or_insert(SlaveProgress {
                offset,
                target: end,
                caught_up: None,
            });
            p.offset = offset;
            if offset >= p.target {
                p.caught_up = Some(Instant::now());
                p.target = end;
            }
        }
        {
            let mut req = c.requested.lock().unwrap();
            if req.is_none() {
                log::info!(
                    "HA service: slave {} asks for CommitLog offset {offset}",
                    c.peer
                );
                *req = Some(offset);
                c.cv.notify_all();
            }
        }
        advance_acked(s);
    }
}

/// Releases the sends every required slave has: the lowest offset the `ack_peers` reported
/// (nothing while one of them is not connected), or the highest any slave reported.
fn advance_acked(s: &Shared) {
    let slaves = s.slaves.lock().unwrap();
    let peers = s.ack_peers.lock().unwrap();
    let acked = match peers.as_ref() {
        None => slaves.values().map(|p| p.offset).max(),
        Some(peers) if peers.is_empty() => None,
        Some(peers) => peers
            .iter()
            .map(|peer| slaves.get(peer).map_or(0, |p| p.offset))
            .min(),
    };
    drop((peers, slaves));
    if let Some(acked) = acked {
        s.acked.complete(acked, true);
    }
}

/// Streams the CommitLog from where the slave asked to the slave, in chunks of at most
/// `haTransferBatchSize` within one file, with a size-0 header as heartbeat when idle.
fn stream_log(s: &Shared, c: &Conn, mut sock: TcpStream) -> std::io::Result<()> {
    let requested = {
        let mut req = c.requested.lock().unwrap();
        loop {
            if c.closed.load(Ordering::Acquire) || s.stop.load(Ordering::Acquire) {
                return Ok(());
            }
            if let Some(r) = *req {
                break r;
            }
            req = c.cv.wait_timeout(req, Duration::from_secs(1)).unwrap().0;
        }
    };
    let mut next = if requested == 0 {
        // A new slave gets the master's last file from its start, as RocketMQ's master does.
        let end = s.log.max_offset();
        end - end % s.log.file_size() as u64
    } else {
        requested
    };
    log::info!(
        "HA service: streaming CommitLog from {next} to slave {} (it asked for {requested})",
        c.peer
    );
    let mut buf = Vec::with_capacity(HEADER_SIZE + s.cfg.transfer_batch_size);
    let mut last_write = Instant::now();
    let mut warned_gone = false;
    while !c.closed.load(Ordering::Acquire) && !s.stop.load(Ordering::Acquire) {
        buf.clear();
        let sent = s.log.with_data(next, s.cfg.transfer_batch_size, |data| {
            buf.extend_from_slice(&next.to_be_bytes());
            buf.extend_from_slice(&(data.len() as i32).to_be_bytes());
            buf.extend_from_slice(data);
            data.len()
        });
        if let Some(n) = sent {
            sock.write_all(&buf)?;
            next += n as u64;
            last_write = Instant::now();
            continue;
        }
        if next < s.log.min_offset() && !warned_gone {
            warned_gone = true;
            log::warn!(
                "HA service: slave {} needs CommitLog offset {next}, which this master deleted",
                c.peer
            );
        }
        let since = last_write.elapsed();
        if since >= s.cfg.heartbeat_interval {
            buf.extend_from_slice(&next.to_be_bytes());
            buf.extend_from_slice(&0i32.to_be_bytes());
            sock.write_all(&buf)?;
            last_write = Instant::now();
            continue;
        }
        let wait = IDLE_WAIT.min(s.cfg.heartbeat_interval - since);
        let (lock, cv) = &s.appended;
        let guard = lock.lock().unwrap();
        s.idle_writers.fetch_add(1, Ordering::SeqCst);
        // Checked again after counting ourselves idle: an append before this is seen here,
        // one after it wakes us.
        let ready = s.log.max_offset() > next && next >= s.log.min_offset();
        if !ready {
            drop(cv.wait_timeout(guard, wait).unwrap());
        } else {
            drop(guard);
        }
        s.idle_writers.fetch_sub(1, Ordering::SeqCst);
    }
    Ok(())
}
