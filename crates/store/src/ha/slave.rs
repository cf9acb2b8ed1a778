//! The slave's side (RocketMQ's `HAService.HAClient`): connects to the master's HA port,
//! reports its CommitLog end, appends the chunks the master streams at their offsets and builds
//! consume queues and index from them. A CommitLog that cannot continue the master's stops
//! replication with an error instead of serving wrong data.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{HaConfig, HEADER_SIZE};
use crate::error::StoreError;
use crate::message_store::ReplicaLog;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Between two connection attempts (RocketMQ waits 5 s).
const RETRY_WAIT: Duration = Duration::from_secs(1);
/// How often the connection loop looks at the clock (heartbeats, stop, housekeeping).
const TICK: Duration = Duration::from_millis(200);
const READ_CHUNK: usize = 256 * 1024;

/// What the slave's replication is doing, for status pages and tests.
#[derive(Debug, Clone, Default)]
pub struct SlaveStatus {
    pub master_addr: Option<String>,
    pub connected: bool,
    /// Set when replication stopped for good (a diverging CommitLog): why.
    pub error: Option<String>,
    /// The offset last reported to the master.
    pub reported_offset: u64,
    /// This end of the connection to the master (the master names its slaves by it).
    pub local_addr: Option<String>,
}

struct Shared {
    log: ReplicaLog,
    cfg: HaConfig,
    status: Mutex<SlaveStatus>,
    stop: AtomicBool,
    wake: (Mutex<()>, Condvar),
    socket: Mutex<Option<TcpStream>>,
}

pub struct HaSlave {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

enum Ended {
    /// The connection ended; connect again.
    Closed(String),
    /// The CommitLogs diverge: replication stops.
    Fatal(String),
}

impl HaSlave {
    /// Starts replicating into `log` from the master's HA address, when one is known.
    pub fn start(log: ReplicaLog, master_addr: Option<String>, cfg: HaConfig) -> Self {
        let shared = Arc::new(Shared {
            log,
            cfg,
            status: Mutex::new(SlaveStatus {
                master_addr: master_addr.filter(|a| !a.is_empty()),
                ..Default::default()
            }),
            stop: AtomicBool::new(false),
            wake: (Mutex::new(()), Condvar::new()),
            socket: Mutex::new(None),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("ferromq-ha-client".into())
            .spawn(move || run(&s))
            .expect("spawn HA client thread");
        HaSlave {
            shared,
            thread: Mutex::new(Some(thread)),
        }
    }

    /// RocketMQ's `updateMasterAddress`: a new address takes effect at the next connection.
    pub fn update_master_address(&self, addr: &str) {
        let mut st = self.shared.status.lock().unwrap();
        if st.master_addr.as_deref() != Some(addr) {
            log::info!(
                "HA client: master address {} -> {addr}",
                st.master_addr.as_deref().unwrap_or("(none)")
            );
            st.master_addr = Some(addr.to_string());
            drop(st);
            self.shared.wake.1.notify_all();
        }
    }

    pub fn status(&self) -> SlaveStatus {
        self.shared.status.lock().unwrap().clone()
    }

    pub fn close(&self) {
        let s = &self.shared;
        s.stop.store(true, Ordering::Release);
        if let Some(sock) = s.socket.lock().unwrap().as_ref() {
            let _ = sock.shutdown(Shutdown::Both);
        }
        s.wake.1.notify_all();
        if let Some(t) = self.thread.lock().unwrap().take() {
            let _ = t.join();
        }
    }
}

impl Drop for HaSlave {
    fn drop(&mut self) {
        self.close();
    }
}

fn run(s: &Shared) {
    // Recovery dispatched every whole record when the store opened.
    let mut dispatched = s.log.max_offset();
    let mut last_failure: Option<String> = None;
    while !s.stop.load(Ordering::Acquire) {
        let addr = s.status.lock().unwrap().master_addr.clone();
        let Some(addr) = addr else {
            idle(s, RETRY_WAIT);
            continue;
        };
        let stream = match connect(&addr) {
            Ok(st) => st,
            Err(e) => {
                let why = format!("HA client: cannot connect to master {addr}: {e}");
                if last_failure.as_deref() != Some(why.as_str()) {
                    log::warn!("{why}");
                    last_failure = Some(why);
                }
                idle(s, RETRY_WAIT);
                continue;
            }
        };
        last_failure = None;
        log::info!("HA client: connected to master {addr}");
        if let Ok(sock) = stream.try_clone() {
            *s.socket.lock().unwrap() = Some(sock);
        }
        {
            let mut st = s.status.lock().unwrap();
            st.connected = true;
            st.local_addr = stream.local_addr().ok().map(|a| a.to_string());
        }
        let ended = replicate(s, stream, &mut dispatched);
        s.socket.lock().unwrap().take();
        {
            let mut st = s.status.lock().unwrap();
            st.connected = false;
            st.local_addr = None;
        }
        match ended {
            Ended::Closed(why) => {
                if !s.stop.load(Ordering::Acquire) {
                    log::info!("HA client: connection to master {addr} ended: {why}");
                    idle(s, RETRY_WAIT);
                }
            }
            Ended::Fatal(why) => {
                log::error!(
                    "HA client: replication from master {addr} stopped: {why}. This slave's \
                     CommitLog diverges from the master's; it keeps serving what it has but takes \
                     nothing more until its store is rebuilt from the master"
                );
                s.status.lock().unwrap().error = Some(why);
                while !s.stop.load(Ordering::Acquire) {
                    idle(s, Duration::from_secs(1));
                }
            }
        }
    }
}

fn idle(s: &Shared, d: Duration) {
    let (lock, cv) = &s.wake;
    let guard = lock.lock().unwrap();
    if !s.stop.load(Ordering::Acquire) {
        drop(cv.wait_timeout(guard, d).unwrap());
    }
}

fn connect(addr: &str) -> std::io::Result<TcpStream> {
    let mut last = std::io::Error::new(ErrorKind::InvalidInput, "no address");
    for a in addr.to_socket_addrs()? {
        match TcpStream::connect_timeout(&a, CONNECT_TIMEOUT) {
            // A connect to a local port nobody listens on yet can pick that same port as its
            // source and connect the socket to itself (TCP simultaneous open): it would hold
            // the port the new master is about to listen on. Dropped at once, as a refusal.
            Ok(st) if is_self_connected(&st) => {
                last = std::io::Error::new(
                    ErrorKind::ConnectionRefused,
                    "the socket connected to itself (nothing listens there yet)",
                );
            }
            Ok(st) => return Ok(st),
            Err(e) => last = e,
        }
    }
    Err(last)
}

fn is_self_connected(st: &TcpStream) -> bool {
    matches!((st.local_addr(), st.peer_addr()), (Ok(l), Ok(p)) if l == p)
}

fn report(s: &Shared, sock: &mut TcpStream, offset: u64) -> std::io::Result<()> {
    sock.write_all(&offset.to_be_bytes())?;
    s.status.lock().unwrap().reported_offset = offset;
    Ok(())
}

/// One connection: report, then store what arrives until it ends.
fn replicate(s: &Shared, mut sock: TcpStream, dispatched: &mut u64) -> Ended {
    let closed = |e: std::io::Error| Ended::Closed(e.to_string());
    if let Err(e) = sock
        .set_nodelay(true)
        .and_then(|_| sock.set_read_timeout(Some(TICK)))
    {
        return closed(e);
    }
    let mut reported = s.log.max_offset();
    if let Err(e) = report(s, &mut sock, reported) {
        return closed(e);
    }
    let mut last_write = Instant::now();
    let mut last_read = Instant::now();
    let mut buf: Vec<u8> = Vec::with_capacity(READ_CHUNK * 2);
    let mut chunk = vec![0u8; READ_CHUNK];
    loop {
        if s.stop.load(Ordering::Acquire) {
            return Ended::Closed("stopping".into());
        }
        match sock.read(&mut chunk) {
            Ok(0) => return Ended::Closed("the master closed the connection".into()),
            Ok(n) => {
                last_read = Instant::now();
                buf.extend_from_slice(&chunk[..n]);
                let used = match store_chunks(s, &buf, dispatched) {
                    Ok(used) => used,
                    Err(ended) => return ended,
                };
                buf.drain(..used);
                // Report as soon as the bytes are in the CommitLog, before building consume
                // queues and index from them (as RocketMQ's slave does): the report is what
                // SYNC_MASTER sends wait for.
                let end = s.log.max_offset();
                let mut report_failed = None;
                if end > reported {
                    reported = end;
                    match report(s, &mut sock, reported) {
                        Ok(()) => last_write = Instant::now(),
                        Err(e) => report_failed = Some(e),
                    }
                }
                // What was appended is dispatched also when the report failed: a replica
                // promoted now takes writes at the queue offsets its consume queues say, and a
                // record left undispatched would have its offset given to another message
                // (RocketMQ's changeToMaster waits for dispatchBehindBytes to reach 0).
                *dispatched = match s.log.dispatch_from(*dispatched) {
                    Ok(next) => next,
                    Err(e) => return store_failed(e),
                };
                if let Some(e) = report_failed {
                    return closed(e);
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return closed(e),
        }
        if last_write.elapsed() >= s.cfg.heartbeat_interval {
            if let Err(e) = report(s, &mut sock, reported) {
                return closed(e);
            }
            last_write = Instant::now();
        }
        if last_read.elapsed() > s.cfg.housekeeping_interval {
            return Ended::Closed(format!(
                "the master sent nothing for {:?}",
                s.cfg.housekeeping_interval
            ));
        }
    }
}

/// Appends every whole chunk in `buf` to the CommitLog; returns how many bytes they took.
/// (`dispatched` is where consume queues and index end: a chunk starting there must start a
/// record.)
/// A store that cannot write (a full disk, an I/O error) ends the connection, and replication
/// starts again from the log's end once reconnected: what was written stays, nothing diverged.
/// Any other error means the logs diverge.
fn store_failed(e: StoreError) -> Ended {
    match e {
        StoreError::Io { .. } | StoreError::DiskFull { .. } => {
            log::warn!("HA client: cannot store what the master sends: {e}; trying again");
            Ended::Closed(format!("the store cannot write: {e}"))
        }
        other => Ended::Fatal(other.to_string()),
    }
}

fn store_chunks(s: &Shared, buf: &[u8], dispatched: &mut u64) -> Result<usize, Ended> {
    let mut at = 0;
    while buf.len() - at >= HEADER_SIZE {
        let offset = i64::from_be_bytes(buf[at..at + 8].try_into().unwrap());
        let size = i32::from_be_bytes(buf[at + 8..at + 12].try_into().unwrap());
        if offset < 0 || size < 0 {
            return Err(Ended::Fatal(format!(
                "the master sent a bad chunk header (offset {offset}, size {size})"
            )));
        }
        let (offset, size) = (offset as u64, size as usize);
        let end = s.log.max_offset();
        if end != 0 && end != offset {
            return Err(Ended::Fatal(format!(
                "the master sends CommitLog offset {offset} but this slave's CommitLog ends at {end}"
            )));
        }
        if buf.len() - at < HEADER_SIZE + size {
            break;
        }
        let data = &buf[at + HEADER_SIZE..at + HEADER_SIZE + size];
        if size > 0 {
            if end == 0 {
                // A slave without data starts where the master's stream starts.
                *dispatched = offset;
            }
            if let Some(why) = s.log.check_continuation(offset, *dispatched, data) {
                return Err(Ended::Fatal(why));
            }
            s.log.append_at(offset, data).map_err(store_failed)?;
        }
        at += HEADER_SIZE + size;
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use socket2::{Domain, Socket, Type};
    use std::net::{SocketAddr, TcpListener};

    #[test]
    fn a_socket_connected_to_itself_is_recognised() {
        // Bound to a port and connected to that same port: TCP simultaneous open with itself.
        let sock = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        sock.bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
            .unwrap();
        let addr = sock.local_addr().unwrap();
        sock.connect(&addr).unwrap();
        assert!(is_self_connected(&TcpStream::from(sock)));

        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let st = connect(&listener.local_addr().unwrap().to_string()).unwrap();
        assert!(!is_self_connected(&st));
    }
}
