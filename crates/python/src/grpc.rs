//! `GrpcFront`: the gRPC port served by `ferromq-grpc` on Rust threads (TLS and plain clients,
//! HTTP/2), SendMessage served there on the broker's data plane, every other call handed on to
//! grpcio on a Unix socket; and the front's rules of a 5.x send (`ferromq_grpc::convert`) for
//! the sends Python serves.

use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use ferromq_grpc::convert::{self, Refusal};
use ferromq_grpc::inbox::{Answer, Inbox};
use ferromq_grpc::proto::Message;
use ferromq_grpc::receives::{DeadLetter, DeadLetters};
use ferromq_grpc::{FrontConfig, GrpcFront as Front};
use ferromq_remoting::tls::TlsServer;
use ferromq_store::message::iter_records;
use prost::Message as _;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::plane::{DataPlane, PlaneTls};

#[pyclass(frozen, module = "ferromq._store")]
pub struct GrpcFront {
    inner: Front,
}

#[pymethods]
impl GrpcFront {
    /// Binds `host:port` (0: any free port) and serves it on `threads` threads, handing every
    /// call on to grpcio at the Unix socket `upstream` but the sends `plane` serves; at most
    /// `max_connections` clients, `max_connections_per_address` from one address, each closed
    /// after `idle_timeout_ms` without a call (0: never).
    #[new]
    #[pyo3(signature = (
        host, port, upstream, *, threads=2, tls=None, plane=None, on_dead_letter=None,
        inbox_methods=Vec::new(), max_connections=10_000, max_connections_per_address=1_000,
        idle_timeout_ms=120_000,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        host: &str,
        port: u16,
        upstream: PathBuf,
        threads: usize,
        tls: Option<PlaneTls>,
        plane: Option<PyRef<'_, DataPlane>>,
        on_dead_letter: Option<Py<PyAny>>,
        inbox_methods: Vec<String>,
        max_connections: usize,
        max_connections_per_address: usize,
        idle_timeout_ms: u64,
    ) -> PyResult<Self> {
        let sends = plane.as_ref().map(|p| p.inner.send_port());
        let pops = match (&plane, on_dead_letter) {
            (Some(p), Some(callback)) => Some((p.inner.pop_port(), dead_letters(callback))),
            _ => None,
        };
        let tls = tls
            .map(|t| TlsServer::new(&t.settings()?))
            .transpose()
            .map_err(|e| PyValueError::new_err(format!("TLS: {e}")))?;
        let inner = py
            .detach(|| {
                let bind: SocketAddr = (host, port).to_socket_addrs()?.next().ok_or_else(|| {
                    std::io::Error::new(std::io::ErrorKind::NotFound, "no address")
                })?;
                Front::start(FrontConfig {
                    bind,
                    upstream,
                    tls,
                    threads,
                    sends,
                    pops,
                    inbox_methods,
                    max_connections,
                    max_connections_per_address,
                    idle_timeout: (idle_timeout_ms > 0)
                        .then(|| Duration::from_millis(idle_timeout_ms)),
                })
            })
            .map_err(|e| match e.raw_os_error() {
                // OSError(errno, text): callers tell "address in use" by its errno.
                Some(errno) => PyOSError::new_err((errno, e.to_string())),
                None => PyOSError::new_err(format!("cannot listen on {host}:{port}: {e}")),
            })?;
        Ok(GrpcFront { inner })
    }

    #[getter]
    fn port(&self) -> u16 {
        self.inner.local_addr().port()
    }

    /// Client connections open now.
    #[getter]
    fn open_connections(&self) -> usize {
        self.inner.open_connections()
    }

    /// SendMessage calls the front answered itself (on the data plane) so far.
    #[getter]
    fn sends_answered(&self) -> u64 {
        self.inner.sends_answered()
    }

    /// ReceiveMessage and AckMessage calls the front answered itself so far.
    #[getter]
    fn receives_answered(&self) -> u64 {
        self.inner.receives_answered()
    }

    /// The receives and acks of `client_id` are served by the front from now on (a simple
    /// consumer whose retry policy allows `max_attempts` deliveries, 0: unknown). No-op when
    /// the front serves no receives.
    fn serve_client(&self, client_id: &str, max_attempts: i32) {
        if let Some(receives) = self.inner.receives() {
            receives.serve_client(client_id, max_attempts);
        }
    }

    /// The receives and acks of `client_id` reach Python from now on.
    fn forget_client(&self, client_id: &str) {
        if let Some(receives) = self.inner.receives() {
            receives.forget_client(client_id);
        }
    }

    /// The descriptor that is readable while calls for Python wait (`take_calls`); None
    /// without `inbox_methods`.
    #[getter]
    fn inbox_fd(&self) -> Option<i32> {
        self.inner.inbox().map(Inbox::fd)
    }

    /// Calls Python answered through the inbox so far.
    #[getter]
    fn inbox_answered(&self) -> u64 {
        self.inner.inbox().map_or(0, Inbox::answered)
    }

    /// The calls handed to Python since the last take, each (id, method path, metadata as
    /// (key, value) pairs, timeout in ms or None, request message), and the ids of calls
    /// cancelled since (their clients went; some may be among the calls of this take).
    #[allow(clippy::type_complexity)]
    fn take_calls<'py>(
        &self,
        py: Python<'py>,
    ) -> (
        Vec<(
            u64,
            String,
            Vec<(String, String)>,
            Option<u64>,
            Bound<'py, PyBytes>,
        )>,
        Vec<u64>,
    ) {
        let Some(inbox) = self.inner.inbox() else {
            return (Vec::new(), Vec::new());
        };
        let (calls, cancelled) = inbox.take();
        let calls = calls
            .into_iter()
            .map(|c| {
                let timeout = c.timeout.map(|t| t.as_millis() as u64);
                let request = PyBytes::new(py, &c.request);
                (c.id, c.method, c.metadata, timeout, request)
            })
            .collect();
        (calls, cancelled)
    }

    /// Answers call `id` with `replies` (encoded messages, one for a unary call) and gRPC
    /// status OK; False when the call is no longer waiting (its client went).
    fn answer(&self, id: u64, replies: Vec<Vec<u8>>) -> bool {
        let replies = replies.into_iter().map(Into::into).collect();
        self.inner
            .inbox()
            .is_some_and(|inbox| inbox.answer(id, Answer::Replies(replies)))
    }

    /// Answers call `id` with gRPC status `code` (not OK) and `message`; False when the call is
    /// no longer waiting.
    fn refuse(&self, id: u64, code: u32, message: String) -> bool {
        self.inner
            .inbox()
            .is_some_and(|inbox| inbox.answer(id, Answer::Status(code, message)))
    }

    /// Stops accepting and tells every client to go; connections still busy after `grace_ms`
    /// are closed. Idempotent.
    #[pyo3(signature = (grace_ms=1000))]
    fn stop(&self, py: Python<'_>, grace_ms: u64) {
        py.detach(|| self.inner.stop(Duration::from_millis(grace_ms)));
    }
}

/// Dead letters handed to `callback(group, topic, receipt, commit_log_offset, message_id)`,
/// called on the front's thread (it hands them on to the broker's event loop).
fn dead_letters(callback: Py<PyAny>) -> DeadLetters {
    Box::new(move |d: DeadLetter| {
        Python::attach(|py| {
            let args = (
                d.group,
                d.topic,
                d.receipt,
                d.commit_log_offset,
                d.message_id,
            );
            if let Err(e) = callback.call1(py, args) {
                log::warn!("gRPC: a dead letter was not handed to Python: {e}");
            }
        })
    })
}

fn refusal(r: Refusal) -> PyErr {
    PyValueError::new_err((r.code, r.message))
}

/// ValueError(code, message) for a lite topic a 5.x client may not send to or subscribe
/// (GrpcValidator.validateLiteTopic).
#[pyfunction]
pub(crate) fn grpc_check_lite_topic(lite: &str) -> PyResult<()> {
    convert::check_lite_topic(lite).map_err(refusal)
}

/// ValueError(code, message) when a 5.x client may not name topic `name` (nor any of
/// `reserved`, the broker's own system topics).
#[pyfunction]
#[pyo3(signature = (name, reserved=Vec::new()))]
pub(crate) fn grpc_check_topic(name: &str, reserved: Vec<String>) -> PyResult<()> {
    convert::check_topic_among(name, &reserved).map_err(refusal)
}

/// ValueError(code, message) when a 5.x client may not name group `name`.
#[pyfunction]
pub(crate) fn grpc_check_group(name: &str) -> PyResult<()> {
    convert::check_group(name).map_err(refusal)
}

/// ValueError(ILLEGAL_INVISIBLE_TIME, text) for an invisible duration outside `[min_ms, max]`;
/// `min_ms` None: a receive's minimum.
#[pyfunction]
#[pyo3(signature = (ms, min_ms=None))]
pub(crate) fn grpc_check_invisible(ms: i64, min_ms: Option<i64>) -> PyResult<()> {
    convert::check_invisible(ms, min_ms.unwrap_or(convert::MIN_RECEIVE_INVISIBLE_MS))
        .map_err(refusal)
}

/// How long a receive that finds nothing waits (ms), as the proxy reckons it (see
/// `convert::polling_time`). ValueError(code, message) when the time left is too short.
#[pyfunction]
#[pyo3(signature = (long_polling_ms, request_timeout_ms, remaining_ms))]
pub(crate) fn grpc_polling_time(
    long_polling_ms: Option<i64>,
    request_timeout_ms: Option<i64>,
    remaining_ms: Option<i64>,
) -> PyResult<i64> {
    convert::polling_time(long_polling_ms, request_timeout_ms, remaining_ms).map_err(refusal)
}

/// The entry's (code, text) of a send the broker answered with `code` (named `name`), not SUCCESS.
#[pyfunction]
pub(crate) fn grpc_send_failure(code: i32, name: &str) -> (i32, String) {
    let failed = convert::send_failure(code, name);
    (failed.code, failed.message)
}

/// A 5.x client's message (`apache.rocketmq.v2.Message`, serialized) checked and made the
/// RocketMQ message the proxy makes of it, from `peer` at `now_ms`: its properties, system
/// flag, born timestamp (0: none given), type and FIFO message group. ValueError(code, message)
/// when it is refused.
#[pyfunction]
pub(crate) fn grpc_outgoing(
    message: &[u8],
    peer: &str,
    now_ms: i64,
) -> PyResult<(String, i32, i64, &'static str, Option<String>)> {
    let m = Message::decode(message).map_err(|e| PyValueError::new_err(e.to_string()))?;
    convert::validate(&m, now_ms).map_err(refusal)?;
    let out = convert::to_store(&m, peer).map_err(refusal)?;
    Ok((
        out.properties,
        out.sys_flag,
        out.born_timestamp,
        out.message_type.name(),
        out.message_group,
    ))
}

/// The write queue of FIFO message group `group` among `queues` (the proxy's consistent hash).
#[pyfunction]
pub(crate) fn fifo_queue(group: &str, queues: usize) -> usize {
    convert::fifo_queue(group, queues)
}

/// The first record of `records` as the v2 message a 5.x client is shown (serialized), of
/// `topic` (None: the record's own).
#[pyfunction]
#[pyo3(signature = (records, topic=None))]
pub(crate) fn grpc_message<'py>(
    py: Python<'py>,
    records: &[u8],
    topic: Option<&str>,
) -> PyResult<Bound<'py, PyBytes>> {
    let view = iter_records(records, false)
        .next()
        .ok_or_else(|| PyValueError::new_err("no record"))?
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let message = convert::to_v2(&view, topic.unwrap_or(view.topic), None);
    Ok(PyBytes::new(py, &message.encode_to_vec()))
}

/// The records a pop found (`body`) as the v2 messages a 5.x client receives (serialized), of
/// `topic`, each with its receipt handle: the pop's fields, and `starts` (where the pop started
/// reading each queue of the topic itself, by queue id). `lite_counts`: the records come from a lite
/// pop (POP_LITE_MESSAGE), with each one's order count.
#[pyfunction]
#[pyo3(signature = (body, topic, broker_name, pop_time, invisible_time, revive_qid, starts, lite_counts=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn grpc_popped<'py>(
    py: Python<'py>,
    body: &[u8],
    topic: &str,
    broker_name: &str,
    pop_time: i64,
    invisible_time: i64,
    revive_qid: i32,
    starts: HashMap<i32, i64>,
    lite_counts: Option<Vec<i32>>,
) -> PyResult<Bound<'py, PyList>> {
    let fields = convert::PopFields {
        pop_time,
        invisible_time,
        revive_qid,
        broker_name,
    };
    let out = PyList::empty(py);
    for (i, record) in iter_records(body, false).enumerate() {
        let view = record.map_err(|e| PyValueError::new_err(e.to_string()))?;
        let message = match &lite_counts {
            // A lite pop's: its receipt names the light message queue, and its delivery attempt
            // is the reply's order count (orderCountInfo) plus one.
            Some(counts) => {
                let handle = convert::lite_receipt_handle(&view, &fields).ok_or_else(|| {
                    PyValueError::new_err(
                        "a popped lite message names no single light message queue",
                    )
                })?;
                let mut message = convert::to_v2(&view, topic, Some(handle));
                let count = counts.get(i).copied().unwrap_or(0);
                if let Some(sp) = message.system_properties.as_mut() {
                    sp.delivery_attempt = Some(count.saturating_add(1));
                }
                message
            }
            None => {
                let (handle, _) =
                    convert::receipt_handle(&view, &fields, |q| starts.get(&q).copied());
                convert::to_v2(&view, topic, Some(handle))
            }
        };
        out.append(PyBytes::new(py, &message.encode_to_vec()))?;
    }
    Ok(out)
}
