//! `DataPlane`: the broker's listening socket served on Rust threads (see `ferromq-broker`).
//! Python takes events from it when its wake descriptor turns readable.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::Duration;

use ferromq_broker::plane::reason;
use ferromq_broker::{
    AclRules, DataPlane as Plane, Event, PeerAcl, PlaneConfig, PullConfig, SendConfig,
    Subscription, TagFilter,
};
use ferromq_remoting::tls::{ClientAuth, TlsServer, TlsSettings};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::offsets::ConsumerOffsets;
use crate::pop::Popper;
use crate::send::{Sender, TopicRoute};
use crate::store::Store;

/// An event: (0, conn, (host, port)) opened, (1, conn, bytes) frames, (2, conn, reason) closed,
/// (4, conn, None) its queued replies drained to half their bound.
type EventTuple = (u8, u64, Py<PyAny>);
/// (topic, messages, bytes, sends) per topic; (milliseconds, store calls); per (request code,
/// response code) the bucket counts and the sum of milliseconds.
/// (ACL load, [(access key, secret key, topics it may publish to here)]).
type AclTuple = (u64, Vec<(String, String, Vec<String>)>);
/// (ACL load, [(access key, secret key, topics it may subscribe to, groups it may pull as)]).
type PullAclTuple = (u64, Vec<(String, String, Vec<String>, Vec<String>)>);
/// ... and per (group, topic, queue id) of pulls: (next offset, found, missed, messages, bytes).
type StatsTuple = (
    Vec<(String, u64, u64, u64)>,
    Vec<(u64, u64)>,
    Vec<(i32, i32, Vec<u64>, f64)>,
    Vec<(String, String, i32, i64, u64, u64, u64, u64)>,
);
/// (group, topic, subscription version, tags codes or None for any).
type SubscriptionTuple = (String, String, i64, Option<Vec<i32>>);

#[pyclass(frozen, module = "ferromq._store")]
pub struct DataPlane {
    pub(crate) inner: Plane,
}

fn known_reason(why: &str) -> &'static str {
    [
        reason::PEER_CLOSED,
        reason::READ_ERROR,
        reason::PARSE_ERROR,
        reason::SHUTDOWN,
        reason::IDLE,
        reason::READ_TIMEOUT,
        reason::CONNECTION_LIMIT,
        reason::ADDRESS_LIMIT,
        reason::EVICTED,
        reason::TLS_REQUIRED,
        reason::TLS_HANDSHAKE,
    ]
    .into_iter()
    .find(|r| *r == why)
    .unwrap_or(reason::LOCAL_CLOSE)
}

/// TLS on the plane's port: `mode` permissive or enforcing, the server's certificate chain and
/// (unencrypted) key as PEM, `client_auth` none, optional or require, and the PEM certificates
/// client certificates are checked against. The gRPC front (`grpc.rs`) is given the same.
#[derive(FromPyObject)]
pub struct PlaneTls {
    mode: String,
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
    client_auth: String,
    trust_pem: Option<Vec<u8>>,
}

impl PlaneTls {
    pub(crate) fn settings(self) -> Result<TlsSettings, String> {
        let enforcing = match self.mode.as_str() {
            "permissive" => false,
            "enforcing" => true,
            other => return Err(format!("mode {other:?} is not permissive or enforcing")),
        };
        let client_auth = match self.client_auth.to_ascii_lowercase().as_str() {
            "none" => ClientAuth::None,
            "optional" => ClientAuth::Optional,
            "require" => ClientAuth::Require,
            other => {
                return Err(format!(
                    "client auth {other:?} is not none, optional or require"
                ))
            }
        };
        Ok(TlsSettings {
            enforcing,
            cert_chain_pem: self.cert_pem,
            key_pem: self.key_pem,
            client_auth,
            trust_pem: self.trust_pem,
        })
    }
}

fn millis(ms: u64) -> Option<Duration> {
    (ms > 0).then(|| Duration::from_millis(ms))
}

#[pymethods]
impl DataPlane {
    /// Binds `host:port` (0: any free port) and serves on `threads` threads; every frame goes
    /// to Python until `serve_sends` says which sends may be answered here.
    #[new]
    #[pyo3(signature = (
        host, port, *, threads, max_frame, max_connections, max_connections_per_address, idle_timeout_ms,
        read_timeout_ms, request_buffer_bytes, reply_buffer_bytes, total_reply_buffer_bytes, rpc_buckets_ms,
        tls=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        host: &str,
        port: u16,
        threads: usize,
        max_frame: usize,
        max_connections: usize,
        max_connections_per_address: usize,
        idle_timeout_ms: u64,
        read_timeout_ms: u64,
        request_buffer_bytes: usize,
        reply_buffer_bytes: usize,
        total_reply_buffer_bytes: usize,
        rpc_buckets_ms: Vec<f64>,
        tls: Option<PlaneTls>,
    ) -> PyResult<Self> {
        let ip = host
            .parse()
            .map_err(|_| PyValueError::new_err(format!("not an IP address: {host:?}")))?;
        let tls = tls
            .map(|t| TlsServer::new(&t.settings()?))
            .transpose()
            .map_err(|e: String| PyValueError::new_err(format!("TLS: {e}")))?;
        let cfg = PlaneConfig {
            bind: SocketAddr::new(ip, port),
            threads,
            max_frame,
            max_connections,
            max_connections_per_address,
            idle_timeout: millis(idle_timeout_ms),
            read_timeout: millis(read_timeout_ms),
            request_buffer_bytes,
            reply_buffer_bytes,
            total_reply_buffer_bytes,
            rpc_buckets_ms,
            tls,
        };
        let inner = py
            .detach(|| Plane::start(cfg))
            .map_err(|e| match e.raw_os_error() {
                // OSError(errno, text): callers tell "address in use" by its errno.
                Some(errno) => PyOSError::new_err((errno, e.to_string())),
                None => PyOSError::new_err(format!("cannot listen on {host}:{port}: {e}")),
            })?;
        Ok(DataPlane { inner })
    }

    #[getter]
    fn port(&self) -> u16 {
        self.inner.local_addr().port()
    }

    /// Readable when events or arrivals wait (read it through `take_events`).
    #[getter]
    fn wake_fd(&self) -> i32 {
        self.inner.wake_fd()
    }

    #[getter]
    fn open_connections(&self) -> usize {
        self.inner.open_connections()
    }

    #[getter]
    fn waiting_for_budget(&self) -> usize {
        self.inner.waiting_for_budget()
    }

    #[getter]
    fn buffered_request_bytes(&self) -> usize {
        self.inner.buffered_request_bytes()
    }

    fn take_events(&self, py: Python<'_>) -> PyResult<Vec<EventTuple>> {
        self.inner
            .take_events()
            .into_iter()
            .map(|e| {
                Ok(match e {
                    Event::Open { conn, peer } => {
                        let addr = (peer.ip().to_string(), peer.port());
                        (0, conn, addr.into_pyobject(py)?.into_any().unbind())
                    }
                    Event::Data { conn, bytes } => {
                        (1, conn, PyBytes::new(py, &bytes).into_any().unbind())
                    }
                    Event::Closed { conn, reason } => {
                        (2, conn, reason.into_pyobject(py)?.into_any().unbind())
                    }
                    Event::Drained { conn } => (4, conn, py.None()),
                })
            })
            .collect()
    }

    fn take_arrivals(&self) -> Vec<ferromq_broker::plane::Arrival> {
        self.inner.take_arrivals()
    }

    fn set_watching(&self, on: bool) {
        self.inner.set_watching(on);
    }

    fn take_stats(&self) -> StatsTuple {
        let s = self.inner.take_stats();
        (
            s.puts
                .into_iter()
                .map(|(t, p)| (t, p.messages, p.bytes, p.sends))
                .collect(),
            s.put_took_ms.into_iter().collect(),
            s.rpc
                .into_iter()
                .map(|((req, resp), h)| (req, resp, h.counts, h.sum_ms))
                .collect(),
            s.got
                .into_iter()
                .map(|((g, t, q), n)| {
                    (
                        g,
                        t,
                        q,
                        n.next_offset,
                        n.found,
                        n.missed,
                        n.messages,
                        n.bytes,
                    )
                })
                .collect(),
        )
    }

    /// Serves plain sends to `topics` here by `sender`'s rules; with `acl` only those its
    /// accounts signed (see `set_peer_acl`).
    #[pyo3(signature = (sender, topics, acl=None))]
    fn serve_sends(
        &self,
        sender: &Sender,
        topics: HashMap<String, PyRef<'_, TopicRoute>>,
        acl: Option<AclTuple>,
    ) {
        let topics = topics
            .into_iter()
            .map(|(name, route)| (name, (&*route).into()))
            .collect();
        self.inner.set_send_config(Some(SendConfig {
            sender: sender.inner.clone(),
            topics,
            acl: acl.map(|(generation, accounts)| {
                let accounts = accounts
                    .into_iter()
                    .map(|(ak, sk, topics)| (ak, sk, topics, Vec::new()))
                    .collect();
                AclRules::new(generation, accounts)
            }),
        }));
    }

    /// What ACL load `generation` decided about `conn`'s peer address: globally white, and the
    /// access keys of the accounts white for it. False when the connection is gone.
    fn set_peer_acl(
        &self,
        conn: u64,
        generation: u64,
        globally_white: bool,
        white: Vec<String>,
    ) -> bool {
        self.inner.set_peer_acl(
            conn,
            PeerAcl {
                generation,
                globally_white,
                white: white.into_iter().collect(),
            },
        )
    }

    /// Every send goes to Python from now on.
    fn stop_serving_sends(&self) {
        self.inner.set_send_config(None);
    }

    /// Serves pulls here from readable `topics` ((name, read queues)) by `groups` (existing,
    /// allowed to consume) with their TAG `subscriptions`; held pulls wait
    /// `short_polling_ms` (None: their own suspend time) and look at their queue every
    /// `check_interval_ms`. Pulls commit into `offsets`; with `popper`, pops, acks and changes
    /// of invisible time are served here too, those of PRIORITY topics (`priority_topics`) by
    /// their groups' `priority_factors` ((group, factor); 100 for the groups not listed).
    #[pyo3(signature = (
        store, *, topics, groups, subscriptions, short_polling_ms, check_interval_ms, offsets,
        acl=None, popper=None, priority_topics=Vec::new(), priority_factors=Vec::new()
    ))]
    #[allow(clippy::too_many_arguments)]
    fn serve_pulls(
        &self,
        store: &Store,
        topics: Vec<(String, i32)>,
        groups: Vec<String>,
        subscriptions: Vec<SubscriptionTuple>,
        short_polling_ms: Option<u64>,
        check_interval_ms: u64,
        offsets: &ConsumerOffsets,
        acl: Option<PullAclTuple>,
        popper: Option<&Popper>,
        priority_topics: Vec<String>,
        priority_factors: Vec<(String, u32)>,
    ) {
        let mut subs: HashMap<String, HashMap<String, Subscription>> = HashMap::new();
        for (group, topic, version, codes) in subscriptions {
            let filter = codes.map_or(TagFilter::Any, TagFilter::Codes);
            subs.entry(group)
                .or_default()
                .insert(topic, Subscription { version, filter });
        }
        self.inner.set_pull_config(Some(PullConfig {
            store: store.store.clone(),
            topics: topics.into_iter().collect(),
            groups: groups.into_iter().collect::<HashSet<_>>(),
            subscriptions: subs,
            short_polling: short_polling_ms.map(Duration::from_millis),
            check_interval: Duration::from_millis(check_interval_ms.max(1)),
            acl: acl.map(|(generation, accounts)| AclRules::new(generation, accounts)),
            offsets: offsets.table.clone(),
            pop: popper.map(|p| p.rules.clone()),
            priority_topics: priority_topics.into_iter().collect(),
            priority_factors: priority_factors.into_iter().collect(),
        }));
    }

    /// Every pull goes to Python from now on; those held here are answered now.
    fn stop_serving_pulls(&self) {
        self.inner.set_pull_config(None);
    }

    /// A message Python stored: pulls held here that it satisfies are answered.
    #[pyo3(signature = (topic, queue_id, next_offset, tags_code=None))]
    fn notify_arrival(&self, topic: &str, queue_id: i32, next_offset: i64, tags_code: Option<i64>) {
        self.inner
            .notify_arrival(topic, queue_id, next_offset, tags_code);
    }

    #[getter]
    fn held_pulls(&self) -> usize {
        self.inner.held_pulls()
    }

    /// Pops waiting here for a message (remoting pops and the gRPC front's receives).
    #[getter]
    fn waiting_pops(&self) -> usize {
        self.inner.waiting_pops()
    }

    /// Queues frames for `conn`: the reply bytes it has queued now, -1 when it is gone.
    fn write(&self, conn: u64, data: &[u8]) -> i64 {
        self.inner
            .write(conn, data.to_vec())
            .map_or(-1, |queued| queued as i64)
    }

    /// Closes `conn` once its queued frames are written, or at once with `abort`.
    #[pyo3(signature = (conn, abort, reason))]
    fn close(&self, conn: u64, abort: bool, reason: &str) {
        self.inner.close(conn, abort, known_reason(reason));
    }

    fn set_reading(&self, conn: u64, reading: bool) {
        self.inner.set_reading(conn, reading);
    }

    fn closed_by_reason(&self) -> Vec<(&'static str, u64)> {
        self.inner.closed_by_reason()
    }

    /// Stops listening and ends every connection (waits up to `grace_ms` for the threads).
    fn stop(&self, py: Python<'_>, grace_ms: u64) {
        py.detach(|| self.inner.stop(Duration::from_millis(grace_ms)));
    }
}
